"""Injected hangs under torchrun (2 gloo ranks on CPU), each reported with the right rank,
op, sequence number and file:line of the worker script (tests/dist/hang_worker.py).

The four cases run as four concurrent torchrun launches (each case breaks its process group,
so they cannot share one); a fifth runs a script without trainmedic's watchdog under
``trainmedic dist watch``. All start together: the start-up is paid once in wall time.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from trainmedic.dist.hang_diagnosis import HangDiagnosis, diagnose_hang_dir

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("this torch build has no gloo backend", allow_module_level=True)

pytestmark = pytest.mark.slow  # five concurrent launches: ~25-40 s on 2 shared cores

HERE = pathlib.Path(__file__).resolve().parent
WORKER = HERE / "hang_worker.py"
PLAIN = HERE / "hang_plain_worker.py"
CASES = ("sleep", "desync", "loader", "kill")
_LIMIT_S = 150


def _tag_lines(path: pathlib.Path) -> dict[str, int]:
    return {m.group(1): i for i, line in enumerate(path.read_text().splitlines(), 1)
            if (m := re.search(r"# TAG:(\w+)", line))}


TAGS = _tag_lines(WORKER)


def _env(fr: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (
        "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
        "TRAINMEDIC_HANG_DIR", "TORCH_FR_BUFFER_SIZE")}
    env["OMP_NUM_THREADS"] = "1"
    if fr:
        env["TORCH_FR_BUFFER_SIZE"] = "200"  # set before init, as docs/dist.md says
    return env


def _torchrun(script: pathlib.Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            "2", str(script), *args]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    base = tmp_path_factory.mktemp("hangs")
    procs: dict[str, subprocess.Popen[str]] = {}
    watch_code = ("import sys; from trainmedic.cli.dist_hang import watch; "
                  "watch.main(sys.argv[1:], standalone_mode=True)")
    for case in CASES:
        procs[case] = subprocess.Popen(
            _torchrun(WORKER, case, str(base / case)), env=_env(), text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    procs["watch"] = subprocess.Popen(
        [sys.executable, "-c", watch_code, "--timeout", "4", "--dir", str(base / "watch"),
         "--", *_torchrun(PLAIN)], env=_env(fr=False), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + _LIMIT_S
    for name, proc in procs.items():
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            out = "(timed out)"
        finally:
            try:  # torchrun, its ranks and any data-loader worker they left behind
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
        proc.wait()
        (base / f"{name}.log").write_text(f"exit {proc.returncode}\n{out}")
    return {name: base / name for name in procs}


def _diag(path: pathlib.Path) -> HangDiagnosis:
    log = path.with_suffix(".log")
    d = diagnose_hang_dir(path)
    assert d.hung, log.read_text()[-3000:]
    return d


def _where(d: HangDiagnosis, rank: int) -> tuple[str | None, str, int | None]:
    s = d.ranks[rank]
    frame = s.location.user_frame if s.location is not None else None
    return (s.op, frame.file.rsplit("/", 1)[-1] if frame else "",
            frame.line if frame else None)


def test_rank_sleeping_before_a_barrier(runs: dict[str, pathlib.Path]) -> None:
    d = _diag(runs["sleep"])
    r0, r1 = d.ranks
    assert (r0.status, r0.op) == ("stuck", "barrier"), d.summary
    assert _where(d, 0)[1:] == ("hang_worker.py", TAGS["barrier"])
    # 4 all_reduces, then the barrier: #5 in the default group, from the flight recorder
    assert r0.collective is not None and r0.collective.seq == 5 and r0.collective.in_flight
    assert (r1.status, r1.op, r1.location.kind if r1.location else None) == (
        "stuck", None, "sleep")
    assert _where(d, 1)[1:] == ("hang_worker.py", TAGS["sleep"])
    assert d.summary[0] == (f"rank 1 is at hang_worker.py:{TAGS['sleep']} in time.sleep, "
                            f"while rank 0 waits in barrier #5"), d.summary


def test_desync_names_both_ops_and_the_sequence_number(
        runs: dict[str, pathlib.Path]) -> None:
    d = _diag(runs["desync"])
    assert [(m.seq, m.kind, {r: op for r, (op, _) in m.calls.items()})
            for m in d.mismatches] == [(5, "op", {0: "all_reduce", 1: "broadcast"})]
    assert _where(d, 0) == ("all_reduce", "hang_worker.py", TAGS["desync_allreduce"])
    assert _where(d, 1) == ("broadcast", "hang_worker.py", TAGS["broadcast"])
    assert "rank 0 is in all_reduce #5, rank 1 is in broadcast #5: op mismatch" in \
        d.summary[0], d.summary
    if d.torch_notes is not None:  # torch's own analyzer, on the same dumps, agrees
        assert any("#5" in n and "broadcast" in n for n in d.torch_notes), d.torch_notes


def test_stuck_data_loader_worker(runs: dict[str, pathlib.Path]) -> None:
    d = _diag(runs["loader"])
    r0, r1 = d.ranks
    assert _where(d, 0) == ("all_reduce", "hang_worker.py", TAGS["loader_allreduce"])
    assert r0.collective is not None and r0.collective.seq == 5
    assert r1.location is not None and r1.location.kind == "data_loader"
    assert _where(d, 1)[1:] == ("hang_worker.py", TAGS["loader_next"])
    assert r1.op is None and r1.collective is None
    # the worker process's own stack, through the stack hook
    kids = [(c.kind, c.user_frame.line if c.user_frame else None) for _, c in r1.children]
    assert ("sleep", TAGS["worker_sleep"]) in kids, kids
    assert d.summary[0].startswith(
        f"rank 1 is at hang_worker.py:{TAGS['loader_next']} in the data loader"), d.summary
    assert d.summary[0].endswith("while rank 0 waits in all_reduce #5"), d.summary


def test_rank_killed_mid_collective(runs: dict[str, pathlib.Path]) -> None:
    d = _diag(runs["kill"])
    r0, r1 = d.ranks
    assert r0.op == "all_reduce" and r0.collective is not None and r0.collective.seq == 5
    assert _where(d, 0)[1:] == ("hang_worker.py", TAGS["kill_allreduce"])
    assert r1.status == "no_dump" and r1.step == 3, r1
    line = next(s for s in d.summary if s.startswith("rank 1 "))
    assert "never arrived at all_reduce #5" in line and "step 3" in line, d.summary


def test_dist_watch_dumps_a_script_without_the_watchdog(
        runs: dict[str, pathlib.Path]) -> None:
    log = runs["watch"].with_suffix(".log").read_text()
    assert log.startswith("exit 1"), log[-3000:]  # CMD's exit code, passed through
    assert "no progress for 4 s" in log, log[-3000:]
    d = diagnose_hang_dir(runs["watch"])
    lines = _tag_lines(PLAIN)
    r0, r1 = d.ranks
    assert (r0.source, r0.op) == ("signal", "all_reduce"), d.summary
    assert r0.location is not None and r0.location.user_frame is not None
    assert r0.location.user_frame.line == lines["plain_allreduce"]
    assert r1.location is not None and r1.location.kind == "sleep"
    assert r1.location.user_frame is not None
    assert r1.location.user_frame.line == lines["plain_sleep"]
    # the flight recorder came through the hook's request file: the sequence number too
    assert r0.collective is not None and r0.collective.seq == 3, r0


def test_json_schema_of_a_hang(runs: dict[str, pathlib.Path]) -> None:
    from click.testing import CliRunner

    from trainmedic.cli.dist_hang import diagnose

    res = CliRunner().invoke(diagnose, [str(runs["sleep"]), "--json"])
    assert res.exit_code == 1, res.output
    doc = json.loads(res.output)
    assert doc["schema"] == "trainmedic.dist.hang/1" and doc["hung"] is True
    assert doc["ranks"][0]["collective"]["op"] == "barrier"
    assert doc["ranks"][0]["collective"]["seq"] == 5
    assert doc["ranks"][1]["where"]["line"] == TAGS["sleep"]
