"""The watchdog and its stack hook at the edges: nested phases, a heartbeat that cannot be
written, a resumed run's dump numbering, what close() takes back, which processes may be
signalled, a resolved hang, and dist watch's exit code and stale heartbeats."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

from trainmedic.dist import stack_hook
from trainmedic.dist.hang_diagnosis import diagnose_hang_dir
from trainmedic.dist.supervisor import WatchRunConfig, _heartbeat_steps, run_watched
from trainmedic.dist.watchdog import HangWatchdog, HangWatchdogConfig
from trainmedic.errors import ConfigError

FAST = dict(floor_s=0.4, min_steps=3, first_step_limit_s=0.4, heartbeat_interval_s=0.1,
            poll_interval_s=0.02, flight_recorder_entries=0, dump_children=False)


def _dumps(folder: pathlib.Path) -> list[str]:
    return sorted(p.name for p in folder.glob("rank0.hang*.json")
                  if p.name.count(".") == 2)  # rank0.hangK.json, not .fr.json


def test_a_checkpoint_inside_an_eval_gives_the_eval_its_limit_back(
        tmp_path: pathlib.Path) -> None:
    cfg = HangWatchdogConfig(**{**FAST, "eval_limit_s": 5.0, "checkpoint_limit_s": 5.0})
    with HangWatchdog(cfg, run_dir=tmp_path) as wd:
        for s in range(4):
            wd.step_done(s, 0.01)
        with wd.phase("eval"):
            with wd.phase("checkpoint"):
                assert wd.limit()[1] == "checkpoint phase limit"
            assert wd.limit()[1] == "eval phase limit"
            time.sleep(0.8)  # 2x the floor, inside the eval's limit
        assert wd.limit()[0] == pytest.approx(0.4)
    assert _dumps(tmp_path / "hang") == []


def test_a_heartbeat_that_cannot_be_written_does_not_stop_hang_detection(
        tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    with HangWatchdog(HangWatchdogConfig(**FAST), run_dir=tmp_path) as wd:
        for s in range(4):
            wd.step_done(s, 0.01)
        hang = tmp_path / "hang"
        shutil.rmtree(hang)  # heartbeats fail from here on (the dump recreates nothing)
        hang.mkdir()
        (hang / "heartbeat.rank0.json").mkdir()  # os.replace onto a folder fails
        time.sleep(1.0)
    assert _dumps(hang) == ["rank0.hang0.json"]
    failures = [r for r in caplog.records if "heartbeat failed" in r.getMessage()]
    assert len(failures) == 1  # said once, not every poll


def test_a_resumed_run_numbers_its_dumps_after_the_earlier_ones(tmp_path: pathlib.Path) -> None:
    for _ in range(2):  # two runs in one folder, each with one stall
        with HangWatchdog(HangWatchdogConfig(**FAST), run_dir=tmp_path) as wd:
            for s in range(4):
                wd.step_done(s, 0.01)
            time.sleep(0.7)
    assert _dumps(tmp_path / "hang") == ["rank0.hang0.json", "rank0.hang1.json"]


def test_close_takes_back_the_flight_recorder_size_and_the_stack_hook(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCH_FR_BUFFER_SIZE", raising=False)
    monkeypatch.delenv("TORCH_NCCL_TRACE_BUFFER_SIZE", raising=False)
    cfg = HangWatchdogConfig(**{**FAST, "flight_recorder_entries": 100, "dump_children": True})
    wd = HangWatchdog(cfg, run_dir=tmp_path).start()
    assert os.environ.get("TORCH_FR_BUFFER_SIZE") == "100"
    assert stack_hook.catches_dump_signal(os.getpid())
    wd.close()
    assert "TORCH_FR_BUFFER_SIZE" not in os.environ
    assert not stack_hook.catches_dump_signal(os.getpid())
    # a second watchdog in the same process arms the hook again, in its own folder
    other = tmp_path / "second"
    wd2 = HangWatchdog(cfg, run_dir=other).start()
    assert stack_hook.catches_dump_signal(os.getpid())
    assert list((other / "hang").glob("signal.*.txt"))
    wd2.close()


def test_a_process_without_the_handler_is_never_signalled() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert not stack_hook.catches_dump_signal(proc.pid)  # the signal would kill it
    finally:
        proc.kill()
        proc.wait()
    assert not stack_hook.catches_dump_signal(2**22 + 12345)  # no such process


def test_a_hang_that_resolved_is_not_reported_as_hung(tmp_path: pathlib.Path) -> None:
    with HangWatchdog(HangWatchdogConfig(**FAST), run_dir=tmp_path) as wd:
        for s in range(4):
            wd.step_done(s, 0.01)
        time.sleep(0.7)  # a stall: dumped
        for s in range(4, 8):
            wd.step_done(s, 0.01)  # then progress again
        time.sleep(0.3)  # a heartbeat after it
    assert _dumps(tmp_path / "hang") == ["rank0.hang0.json"]
    diagnosis = diagnose_hang_dir(tmp_path)
    assert not diagnosis.hung and diagnosis.ranks[0].status == "no_dump"


def test_stale_heartbeats_are_not_this_jobs(tmp_path: pathlib.Path) -> None:
    beat = tmp_path / "heartbeat.rank0.json"
    beat.write_text(json.dumps({"step": 7, "phase": None}))
    old = time.time() - 3600
    os.utime(beat, (old, old))
    assert _heartbeat_steps(tmp_path, time.time() - 60) == ({}, False)
    os.utime(beat, None)
    assert _heartbeat_steps(tmp_path, time.time() - 60) == ({beat.name: 7}, False)
    beat.write_text(json.dumps({"step": 7, "phase": "eval"}))
    assert _heartbeat_steps(tmp_path, time.time() - 60)[1] is True  # its own limit applies


def test_a_job_killed_by_a_signal_exits_128_plus_the_signal(tmp_path: pathlib.Path) -> None:
    cmd = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    result = run_watched(cmd, WatchRunConfig(timeout_s=30, hang_dir=str(tmp_path), poll_s=0.05),
                         on_line=lambda line: None)
    assert result.returncode == 128 + signal.SIGKILL


def test_kill_after_ends_a_job_that_stays_hung_with_124(tmp_path: pathlib.Path) -> None:
    """A job that prints once and then hangs (ignoring SIGTERM, as a rank in a collective
    does): dumped after the timeout, ended kill_after_s later with SIGKILL, exit 124."""
    code = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('step 1', flush=True); time.sleep(120)")
    t0 = time.monotonic()
    cfg = WatchRunConfig(timeout_s=0.5, hang_dir=str(tmp_path), poll_s=0.05, kill_after_s=0.2)
    lines: list[str] = []
    result = run_watched([sys.executable, "-c", code], cfg, on_line=lines.append)
    assert (result.returncode, result.hangs, result.killed) == (124, 1, True)
    assert time.monotonic() - t0 < 30  # SIGTERM ignored: SIGKILL after its 5 s
    # The hook chained quietly (it printed "Error in sitecustomize" in every process once),
    # and the one process of a job without torchrun is its rank 0, stuck in its own line
    # (time.sleep is C: faulthandler shows the line that called it).
    assert lines == ["step 1"]
    diag = diagnose_hang_dir(tmp_path)
    assert diag.hung and diag.world_size == 1 and diag.ranks[0].status == "stuck"
    loc = diag.ranks[0].location
    assert loc is not None and loc.user_frame is not None
    assert (loc.user_frame.file, loc.user_frame.line) == ("<string>", 1)


def test_kill_after_leaves_alone_a_job_that_ends_or_moves_on_by_itself(
        tmp_path: pathlib.Path) -> None:
    cfg = WatchRunConfig(timeout_s=0.5, hang_dir=str(tmp_path / "a"), poll_s=0.05,
                         kill_after_s=0.0)
    # ends with its own status while its stacks are being taken: that status stands
    ends = "import sys, time; print('step 1', flush=True); time.sleep(1.2); sys.exit(3)"
    result = run_watched([sys.executable, "-c", ends], cfg, on_line=lambda line: None)
    assert (result.returncode, result.killed) == (3, False)
    # prints again after the dump: progress, not a hang to end
    resumes = ("import time; print('step 1', flush=True); time.sleep(0.9)\n"
               "for i in range(20):\n    print('step', i, flush=True); time.sleep(0.1)")
    cfg = dataclasses.replace(cfg, hang_dir=str(tmp_path / "b"))
    result = run_watched([sys.executable, "-c", resumes], cfg, on_line=lambda line: None)
    assert (result.returncode, result.killed) == (0, False)


def test_kill_after_ends_what_the_job_started_too(tmp_path: pathlib.Path) -> None:
    """sh -c 'python (ignoring SIGTERM)': the shell goes on SIGTERM, its child only with
    SIGKILL after the grace; nothing is left running."""
    pid_file = tmp_path / "pid"
    child = (f"import os, signal, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
             "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)")
    cmd = ["sh", "-c", f"echo step 1; {sys.executable} -c \"{child}\"; echo after"]
    cfg = WatchRunConfig(timeout_s=0.5, hang_dir=str(tmp_path / "h"), poll_s=0.05,
                         kill_after_s=0.0)
    result = run_watched(cmd, cfg, on_line=lambda line: None)
    assert (result.returncode, result.killed) == (124, True)
    pid = int(pid_file.read_text())
    time.sleep(0.2)
    alive = pathlib.Path(f"/proc/{pid}").exists() and \
        pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    assert not alive


def test_without_kill_after_a_slow_job_is_left_to_finish(tmp_path: pathlib.Path) -> None:
    code = "import time; print('step 1', flush=True); time.sleep(1.5); print('done')"
    cfg = WatchRunConfig(timeout_s=0.3, hang_dir=str(tmp_path), poll_s=0.05)
    lines: list[str] = []
    result = run_watched([sys.executable, "-c", code], cfg, on_line=lines.append)
    assert (result.returncode, result.killed) == (0, False) and lines[-1] == "done"
    with pytest.raises(ConfigError, match="kill_after_s"):
        WatchRunConfig(hang_dir=str(tmp_path), kill_after_s=-1)


def test_files_of_exited_forked_children_do_not_pile_up(tmp_path: pathlib.Path) -> None:
    import multiprocessing

    cfg = HangWatchdogConfig(**{**FAST, "dump_children": True, "floor_s": 30.0,
                                "first_step_limit_s": 30.0})
    with HangWatchdog(cfg, run_dir=tmp_path):
        hang = tmp_path / "hang"
        fork = multiprocessing.get_context("fork")
        children = [fork.Process(target=time.sleep, args=(1.0,)) for _ in range(3)]
        for child in children:  # three forked children (an epoch's loader workers)
            child.start()
        time.sleep(0.4)  # several heartbeats: the children are alive, their files stay
        files = [p for p in hang.glob("signal.*.txt") if f".pid{os.getpid()}." not in p.name]
        assert len(files) == 3  # each registered itself...
        for child in children:
            child.join()
        time.sleep(0.4)  # ...and heartbeats prune those of children that exited
        files = [p for p in hang.glob("signal.*.txt") if f".pid{os.getpid()}." not in p.name]
        assert files == []
        assert list(hang.glob(f"signal.*.pid{os.getpid()}.txt"))  # our own stays
