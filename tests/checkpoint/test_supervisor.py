"""``trainmedic.checkpoint.supervisor``: restarts, the resume hand-over, incidents in the run
store, no child left behind, and the bar: the demo under random ``kill -9``s ends bitwise equal
to an uninterrupted run, each incident's lost progress within one checkpoint interval of the
truth (the steps the killed process had finished, written by its own progress callback)."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from trainmedic.checkpoint import supervisor as supervisor_module
from trainmedic.checkpoint.recovery import Incident
from trainmedic.checkpoint.supervisor import (
    HEARTBEAT_ENV,
    INCIDENT_EVENT,
    RESUME_ENV,
    SUMMARY_EVENT,
    SuperviseConfig,
    Supervisor,
    classify,
    decide,
    substitute_checkpoint,
    supervise,
)
from trainmedic.cli.supervise import explain_tail
from trainmedic.errors import ConfigError, InputError

pytestmark = pytest.mark.usefixtures("single_process")


def events(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(str(run_dir / "metrics.sqlite"))
    try:
        rows = conn.execute("SELECT data FROM events WHERE kind = ? ORDER BY rowid",
                            (kind,)).fetchall()
    finally:
        conn.close()
    return [json.loads(r[0]) for r in rows]


# -------------------------------------------------------------------------------- pure parts
def test_substitute_checkpoint() -> None:
    cmd = ["train", "--resume-from", "{checkpoint}", "--x={checkpoint}", "--steps", "9"]
    assert substitute_checkpoint(cmd, "/c/step-4") == [
        "train", "--resume-from", "/c/step-4", "--x=/c/step-4", "--steps", "9"]
    assert substitute_checkpoint(cmd, None) == ["train", "--steps", "9"]


def test_decide_and_classify() -> None:
    kw: dict[str, Any] = {"restarts_done": 0, "max_restarts": 2, "stop_requested": False,
                          "requeue": False, "environ": {}}
    assert decide("done", **kw) == "done"
    assert decide("failed", **kw) == "restart"
    assert decide("failed", **{**kw, "restarts_done": 2}) == "give_up"
    assert decide("killed", **{**kw, "stop_requested": True}) == "stop"
    # Requeue only under SLURM, and only when asked.
    assert decide("preempted", **{**kw, "requeue": True}) == "restart"
    assert decide("preempted", **{**kw, "requeue": True,
                                  "environ": {"SLURM_JOB_ID": "77"}}) == "requeue"
    assert classify(0) == ("done", 0, None)
    assert classify(75) == ("preempted", 75, None)
    assert classify(1) == ("failed", 1, None)
    assert classify(-9) == ("killed", None, "SIGKILL")


@pytest.mark.parametrize(("field", "value"), [
    ("command", ()), ("command", "python train.py"), ("max_restarts", -1),
    ("backoff_s", -1.0), ("tail_lines", 0), ("requeue", "yes"), ("kill_grace_s", 0),
])
def test_bad_config_names_the_field(field: str, value: object, tmp_path: Path) -> None:
    kwargs: dict[str, Any] = {"command": ("true",), "run_dir": tmp_path}
    kwargs[field] = value
    with pytest.raises(ConfigError, match=field):
        SuperviseConfig(**kwargs)


# --------------------------------------------------------------------- restarts on a fake job
_FLAKY = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    state = Path(sys.argv[1])
    n = int(state.read_text()) if state.exists() else 0
    state.write_text(str(n + 1))
    with open(state.with_suffix(".log"), "a") as fh:
        fh.write(f"{n} {os.environ.get('TRAINMEDIC_RESUME_FROM')} {sys.argv[2:]}\\n")
    Path(os.environ["TRAINMEDIC_HEARTBEAT"]).write_text(str(7 + n))
    if n == 0:
        sys.exit(75)
    if n == 1:
        print("Traceback (most recent call last):")
        print('  File "train.py", line 3, in <module>')
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
              "has a total capacity of 79.10 GiB of which 1.00 GiB is free.", flush=True)
        sys.exit(1)
    """)


def _checkpoint(root: Path, step: int) -> Path:
    from trainmedic.checkpoint.manager import CheckpointManager

    return CheckpointManager(root).save(step, {"train": {"step": step}})


def test_restarts_hand_over_the_checkpoint_and_record_incidents(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    ckpt = _checkpoint(run_dir / "checkpoints", 5)
    script = tmp_path / "flaky.py"
    script.write_text(_FLAKY)
    state = tmp_path / "state"
    cfg = SuperviseConfig(command=(sys.executable, str(script), str(state), "--from",
                                   "{checkpoint}"),
                          run_dir=run_dir, max_restarts=3, backoff_s=0.0)
    lines: list[str] = []
    result = supervise(cfg, echo=lines.append, explain_tail=explain_tail)
    assert result.final == "done" and result.exit_code == 0 and result.attempts == 3
    # Every start got the checkpoint, in the environment and in place of {checkpoint}.
    log = (tmp_path / "state.log").read_text().splitlines()
    assert log == [f"{n} {ckpt} ['--from', '{ckpt}']" for n in range(3)]
    first, second = result.incidents
    assert (first.outcome, first.exit_code, first.failure_class) == ("preempted", 75, None)
    assert (second.outcome, second.exit_code) == ("failed", 1)
    assert second.failure_class == "cuda_oom"
    # Lost progress: the heartbeat (7, 8 steps done) minus the checkpoint's step 5.
    assert [i.lost_steps for i in result.incidents] == [2, 3]
    assert {i.lost_source for i in result.incidents} == {"heartbeat"}
    assert {i.to_dict()["lost_basis"] for i in result.incidents} == {"measured"}
    assert result.to_dict()["total_lost_basis"] == "measured"
    assert all(i.checkpoint == str(ckpt) and i.checkpoint_step == 5 for i in result.incidents)
    assert result.total_lost_steps == 5
    assert any("CUDA out of memory" in ln for ln in lines)
    stored = events(run_dir, INCIDENT_EVENT)
    assert [(e["attempt"], e["outcome"], e["lost_steps"]) for e in stored] == [
        (0, "preempted", 2), (1, "failed", 3)]
    summary = events(run_dir, SUMMARY_EVENT)
    assert summary[-1]["incidents"] == 2 and summary[-1]["total_lost_steps"] == 5
    assert (summary[-1]["wall_basis"], summary[-1]["total_lost_basis"]) == ("measured",
                                                                           "measured")
    # Each attempt resumed from step 5: what it trained itself is the heartbeat minus 5.
    assert [(i.start_step, i.steps_run) for i in result.incidents] == [(5, 2), (5, 3)]


def _incident(**kw: Any) -> Incident:
    base: dict[str, Any] = {
        "attempt": 0, "outcome": "killed", "exit_code": None, "signal": "SIGKILL",
        "failure_class": None, "failure_summary": None, "resumed_from": None,
        "checkpoint": None, "checkpoint_step": 10, "steps_done": 14, "lost_steps": 4,
        "lost_source": "heartbeat", "uptime_s": 1.0}
    return Incident(**{**base, **kw})


def test_progress_basis_says_where_the_steps_came_from() -> None:
    from trainmedic.checkpoint.recovery import SuperviseResult

    beat = _incident()
    store = _incident(lost_source="run store")
    none = _incident(steps_done=None, lost_steps=None, lost_source="none")
    assert [i.to_dict()["lost_basis"] for i in (beat, store, none)] == [
        "measured", "estimated", "not_checked"]
    assert beat.to_dict()["uptime_basis"] == "measured"
    bases = [SuperviseResult(exit_code=1, incidents=inc).to_dict()["total_lost_basis"]
             for inc in ([beat], [beat, store], [beat, none], [])]
    assert bases == ["measured", "estimated", "not_checked", "measured"]


def test_gives_up_after_max_restarts_with_the_last_status(tmp_path: Path) -> None:
    cfg = SuperviseConfig(command=(sys.executable, "-c", "import sys; sys.exit(3)"),
                          run_dir=tmp_path / "run", max_restarts=1, backoff_s=0.0)
    result = supervise(cfg)
    assert result.final == "gave_up" and result.exit_code == 3 and result.attempts == 2
    assert [i.action for i in result.incidents] == ["restart", "give_up"]
    # No checkpoint, no heartbeat, no store rows: the loss is not known and says so.
    assert result.incidents[0].lost_steps is None
    assert result.incidents[0].to_dict()["lost_basis"] == "not_checked"


def test_requeue_under_slurm_calls_scontrol_instead_of_restarting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    asked: list[str] = []

    def fake_requeue(job: str) -> int:
        asked.append(job)
        return 0

    cfg = SuperviseConfig(command=(sys.executable, "-c", "import sys; sys.exit(75)"),
                          run_dir=tmp_path / "run", requeue=True, backoff_s=0.0)
    result = Supervisor(cfg, requeue_fn=fake_requeue).run()
    assert asked == ["4242"] and result.attempts == 1
    assert result.final == "requeued" and result.exit_code == 75


_PARENT_OF_SLEEPER = textwrap.dedent("""
    import subprocess, sys, time
    from pathlib import Path
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    Path(sys.argv[1]).write_text(str(child.pid))
    if len(sys.argv) > 2:
        time.sleep(120)
    sys.exit(1)
    """)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (not reaped by its dead parent yet) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_no_grandchild_is_left_behind(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(_PARENT_OF_SLEEPER)
    pidfile = tmp_path / "pid"
    cfg = SuperviseConfig(command=(sys.executable, str(script), str(pidfile)),
                          run_dir=tmp_path / "run", max_restarts=0, kill_grace_s=2.0)
    result = supervise(cfg)
    assert result.final == "gave_up"
    assert _wait_gone(int(pidfile.read_text()))


def _signal_us_when(pidfile: Path, signum: int) -> threading.Thread:
    def go() -> None:
        end = time.monotonic() + 30
        while not pidfile.exists() and time.monotonic() < end:
            time.sleep(0.02)
        os.kill(os.getpid(), signum)

    t = threading.Thread(target=go)
    t.start()
    return t


def _stopped_once_started(tmp_path: Path, source: str, *args: str, max_restarts: int,
                          kill_grace_s: float) -> tuple[Any, Path]:
    """Supervise ``source`` (a script given a pid file and ``args``) and SIGTERM this
    process once the script wrote its pid file: (the result, the pid file)."""
    script = tmp_path / "script.py"
    script.write_text(source)
    pidfile = tmp_path / "pid"
    cfg = SuperviseConfig(command=(sys.executable, str(script), str(pidfile), *args),
                          run_dir=tmp_path / "run", max_restarts=max_restarts,
                          kill_grace_s=kill_grace_s)
    killer = _signal_us_when(pidfile, signal.SIGTERM)
    result = supervise(cfg)
    killer.join()
    return result, pidfile


def test_sigterm_is_forwarded_and_stops_the_restarts(tmp_path: Path) -> None:
    result, pidfile = _stopped_once_started(tmp_path, _PARENT_OF_SLEEPER, "wait",
                                            max_restarts=5, kill_grace_s=2.0)
    assert result.final == "stopped" and result.attempts == 1
    assert result.incidents[0].signal == "SIGTERM" and result.incidents[0].action == "stop"
    assert _wait_gone(int(pidfile.read_text()))


_IGNORES_TERM = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(sys.argv[1]).write_text(str(os.getpid()))
    time.sleep(30)
    """)


def test_a_child_that_ignores_sigterm_gets_sigkill_after_the_grace(tmp_path: Path) -> None:
    result, pidfile = _stopped_once_started(tmp_path, _IGNORES_TERM, max_restarts=3,
                                            kill_grace_s=0.5)
    # Without the escalation it would sleep its 30 s out and exit 0 ("done").
    assert result.final == "stopped" and result.attempts == 1
    (inc,) = result.incidents
    assert (inc.outcome, inc.signal, inc.action) == ("killed", "SIGKILL", "stop")
    assert _wait_gone(int(pidfile.read_text()))


def test_a_stop_during_the_checkpoint_search_starts_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)  # so resume_point asks for the onset
    marker = tmp_path / "started"
    cfg = SuperviseConfig(command=(sys.executable, "-c",
                                   "import sys; open(sys.argv[1], 'w').close()", str(marker)),
                          run_dir=run_dir, backoff_s=0.0)
    sup = Supervisor(cfg)

    def onset() -> int | None:
        sup._handle(signal.SIGTERM, None)  # as if SIGTERM came while verifying checkpoints
        return None

    sup.divergence_onset = onset
    result = sup.run()
    assert not marker.exists()
    assert (result.final, result.attempts, result.incidents) == ("stopped", 0, [])
    assert result.exit_code == 128 + signal.SIGTERM
    assert events(run_dir, SUMMARY_EVENT)[-1]["final"] == "stopped"


def test_a_stop_between_popen_and_the_child_is_passed_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = SuperviseConfig(command=(sys.executable, "-c", "import time; time.sleep(30)"),
                          run_dir=tmp_path / "run", max_restarts=2, backoff_s=0.0,
                          kill_grace_s=5.0)
    sup = Supervisor(cfg)

    class LateStop(supervisor_module._Child):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            assert sup.child is None
            sup._handle(signal.SIGINT, None)  # the child exists, `sup.child` not yet

    monkeypatch.setattr(supervisor_module, "_Child", LateStop)
    result = sup.run()
    # Unfixed, the child slept its 30 s out and the session ended "done".
    assert result.final == "stopped" and result.attempts == 1
    (inc,) = result.incidents
    assert inc.action == "stop" and inc.uptime_s < 10.0
    # The SIGINT lands at once, wherever the new interpreter is: in its sleep it dies of it;
    # caught while it is still starting up (seen once in CI, under load; not in 240 tries on
    # a quiet machine) it exits with a failure status instead. Either way it was passed on.
    assert inc.signal == "SIGINT" or (inc.signal is None and inc.exit_code not in (None, 0))


def test_a_command_that_cannot_start_raises_input_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-train"
    cfg = SuperviseConfig(command=(str(missing), "--steps", "3"), run_dir=tmp_path / "run")
    with pytest.raises(InputError, match="not found") as info:
        supervise(cfg)
    assert info.value.path == str(missing)
    assert events(tmp_path / "run", SUMMARY_EVENT)[-1]["final"] == "start_failed"


def test_a_restart_that_cannot_fork_is_tried_again(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The first start fails (exit 1); the restart's fork fails once with EAGAIN (a crash's
    aftermath); the next try runs and finishes. The failed fork is no incident."""
    import errno
    import subprocess

    flag = tmp_path / "ran-once"
    code = ("import pathlib, sys; p = pathlib.Path(sys.argv[1]); "
            "sys.exit(0 if p.exists() else (p.touch() or 1))")
    real = subprocess.Popen
    calls = {"n": 0}

    def flaky_popen(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
        return real(*args, **kwargs)

    monkeypatch.setattr(supervisor_module.subprocess, "Popen", flaky_popen)
    said: list[str] = []
    cfg = SuperviseConfig(command=(sys.executable, "-c", code, str(flag)),
                          run_dir=tmp_path / "run", max_restarts=2, backoff_s=0.0)
    result = supervise(cfg, on_event=lambda what, data: said.append(what))
    assert result.final == "done" and result.exit_code == 0
    assert calls["n"] == 3 and result.attempts == 2 and len(result.incidents) == 1
    assert "start_retry" in said


def test_a_restart_that_never_forks_gives_up_with_the_last_status(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import subprocess

    real = subprocess.Popen
    calls = {"n": 0}

    def fork_once(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError(errno.ENOMEM, "Cannot allocate memory")
        return real(*args, **kwargs)

    monkeypatch.setattr(supervisor_module.subprocess, "Popen", fork_once)
    waits: list[float] = []
    cfg = SuperviseConfig(command=(sys.executable, "-c", "import sys; sys.exit(3)"),
                          run_dir=tmp_path / "run", max_restarts=2, backoff_s=0.5)
    result = Supervisor(cfg, sleep=waits.append).run()  # no InputError: the command ran
    assert (result.final, result.exit_code, result.attempts) == ("gave_up", 3, 1)
    assert calls["n"] == 4  # the start, then the restart tried 1 + 2 times
    assert waits == [0.5, 0.5, 1.0]  # the incident's backoff, then the retries' 0.5, 1.0


def test_a_first_start_that_cannot_fork_is_not_retried(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    calls = []

    def no_fork(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(supervisor_module.subprocess, "Popen", no_fork)
    cfg = SuperviseConfig(command=(sys.executable, "-c", "pass"), run_dir=tmp_path / "run",
                          max_restarts=3, backoff_s=0.0)
    with pytest.raises(InputError):
        supervise(cfg)
    assert len(calls) == 1  # not tried again: the command's own start failed


_SUPERVISE_A_SLEEPER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from trainmedic.checkpoint.supervisor import SuperviseConfig, supervise
    code = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)"
    supervise(SuperviseConfig(command=(sys.executable, "-c", code, sys.argv[2]),
                              run_dir=Path(sys.argv[1]), max_restarts=0))
    """)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_supervisor_takes_its_child_along(tmp_path: Path) -> None:
    import subprocess

    script = tmp_path / "sup.py"
    script.write_text(_SUPERVISE_A_SLEEPER)
    pidfile = tmp_path / "pid"
    outer = subprocess.Popen([sys.executable, str(script), str(tmp_path / "run"), str(pidfile)],
                             start_new_session=True)
    child = None
    try:
        end = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < end:
            time.sleep(0.05)
        child = int(pidfile.read_text())
        os.kill(outer.pid, signal.SIGKILL)  # supervise itself gets no chance to clean up
        outer.wait(timeout=30)
        assert _wait_gone(child)
    finally:
        if outer.poll() is None:
            os.killpg(outer.pid, signal.SIGKILL)
            outer.wait(timeout=30)
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)


# ------------------------------------------------------------------- the bar: kill -9 the demo
STEPS, EVERY = 160, 20
_DEMO_CHILD = textwrap.dedent(f"""
    import os, sys
    from pathlib import Path
    from trainmedic.checkpoint.preemption import Preempted
    from trainmedic.demo import DemoConfig, run_demo
    out, truth = Path(sys.argv[1]), sys.argv[2]
    fd = os.open(truth, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def progress(done, total):
        os.write(fd, f"{{done}}\\n".encode())

    try:
        run_demo(DemoConfig(steps={STEPS}, checkpoint_every={EVERY}, out_dir=out, resume=True,
                            batch_size=8, context_len=32), progress=progress)
    except Preempted:
        sys.exit(75)
    """)


def _last_done(truth: Path) -> int:
    lines = truth.read_text().split() if truth.exists() else []
    return int(lines[-1]) if lines else 0


@pytest.mark.slow
def test_demo_under_random_kill9s_ends_bitwise_equal(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from trainmedic.demo import DemoConfig, run_demo

    reference = run_demo(DemoConfig(steps=STEPS, checkpoint_every=EVERY,
                                    out_dir=tmp_path / "straight", batch_size=8,
                                    context_len=32))
    script = tmp_path / "child.py"
    script.write_text(_DEMO_CHILD)
    truth = tmp_path / "truth.txt"
    run_dir = tmp_path / "supervised"
    rng = random.Random(20261203)
    kill_at = sorted(rng.sample(range(EVERY + 5, STEPS - 10), 3))
    while min(b - a for a, b in zip(kill_at, kill_at[1:], strict=False)) < EVERY:
        kill_at = sorted(rng.sample(range(EVERY + 5, STEPS - 10), 3))
    cfg = SuperviseConfig(command=(sys.executable, str(script), str(run_dir), str(truth)),
                          run_dir=run_dir, max_restarts=5, backoff_s=0.1)
    sup = Supervisor(cfg)
    truths: list[int] = []

    def killer() -> None:
        for target in kill_at:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                child = sup.child
                if child is not None and _last_done(truth) >= target:
                    os.killpg(child.pgid, signal.SIGKILL)
                    child.proc.wait()
                    truths.append(_last_done(truth))
                    break
                time.sleep(0.005)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    result = sup.run()
    t.join(timeout=10)
    assert result.final == "done", result.to_dict()
    assert len(result.incidents) == len(kill_at) == len(truths)
    for inc, done in zip(result.incidents, truths, strict=True):
        assert inc.signal == "SIGKILL" and inc.outcome == "killed"
        true_lost = done - inc.checkpoint_step
        assert 0 <= true_lost <= EVERY + 1, (inc, done)
        assert inc.lost_steps is not None and abs(inc.lost_steps - true_lost) <= EVERY, (
            inc, done)
    # Bitwise: the final checkpoints' model and optimizer tensors.
    name = f"step-{STEPS:08d}"
    for part in ("model.pt", "optimizer.pt"):
        a = torch.load(reference / "checkpoints" / name / part, weights_only=True)
        b = torch.load(run_dir / "checkpoints" / name / part, weights_only=True)
        flat_a, flat_b = _tensors(a), _tensors(b)
        assert flat_a.keys() == flat_b.keys() and flat_a
        for k in flat_a:
            assert torch.equal(flat_a[k], flat_b[k]), f"{part}:{k} differs"
    stored = events(run_dir, INCIDENT_EVENT)
    assert [e["attempt"] for e in stored] == [0, 1, 2]
    assert all(e["lost_basis"] == "measured" for e in stored)


def _tensors(obj: Any, where: str = "") -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {}
    if isinstance(obj, torch.Tensor):
        out[where] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out.update(_tensors(v, f"{where}/{k}"))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(_tensors(v, f"{where}/{i}"))
    return out


def test_heartbeat_env_is_what_the_runner_writes(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from trainmedic.demo.char_recipe import recipe
    from trainmedic.recipe.runner import RecipeRunner

    beat = tmp_path / "beat"
    monkeypatch.setenv(HEARTBEAT_ENV, str(beat))
    runner = RecipeRunner(recipe(steps=3, batch_size=2, context_len=16))
    runner.run(3)
    assert int(beat.read_text().split()[0]) == 3
    assert RESUME_ENV == "TRAINMEDIC_RESUME_FROM"


# ------------------------------------------------------------- --skip-batches in the runner
def _runner(root: Path | None = None, *, skip: tuple[int, int] | None = None) -> Any:
    from trainmedic.checkpoint.manager import CheckpointManager
    from trainmedic.demo.char_recipe import recipe
    from trainmedic.recipe.runner import RecipeRunner

    manager = CheckpointManager(root, keep_last=10) if root is not None else None
    # No jitter: a window's offset would come from the global RNG, which training moves.
    r = RecipeRunner(recipe(steps=10, batch_size=2, context_len=16, jitter=0), manager=manager,
                     save_every=2 if root is not None else None)
    r.seen = []  # type: ignore[attr-defined]
    r.on_batch = r.seen.append  # type: ignore[attr-defined]
    if skip is not None:
        r.skip_steps(*skip)
    return r


def test_skip_steps_drops_exactly_those_batches_and_resumes_exactly(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    plain = _runner()
    plain.run(10)
    skipping = _runner(tmp_path / "a", skip=(3, 4))
    said: list[tuple[int, int, int]] = []
    skipping.on_skip = lambda *a: said.append(a)
    losses = skipping.run(8).losses
    assert said == [(3, 4, 2)] and skipping.loop.step == 8
    # Steps 0-2 drew the plain run's batches 0-2; steps 3-7 its batches 5-9.
    want = plain.seen[:3] + plain.seen[5:10]
    assert len(skipping.seen) == len(want)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(skipping.seen, want, strict=True))
    # Resumed from the checkpoint before the skip (step 2; the skip is at 3): skips again.
    again = _runner(tmp_path / "a", skip=(3, 4))
    again.resume(tmp_path / "a" / "step-00000002")
    assert again.run(8).losses == losses[2:]
    # Resumed from a checkpoint saved after the skip: its data position is past them already.
    after = _runner(tmp_path / "a", skip=(3, 4))
    after.resume(tmp_path / "a" / "step-00000006")
    assert after.run(8).losses == losses[6:]
    with pytest.raises(ConfigError, match="last"):
        _runner(skip=(5, 4))


@pytest.mark.parametrize(("field", "value"), [
    ("skip_steps", (5, 3)), ("skip_steps", (-1, 2)), ("skip_steps", "3-5"), ("skip_next", 0),
])
def test_demo_skip_config_names_the_field(field: str, value: object) -> None:
    from trainmedic.demo import DemoConfig

    with pytest.raises(ConfigError, match=field):
        DemoConfig(**{field: value})  # type: ignore[arg-type]


_SPAWNS_OWN_SESSION = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    from pathlib import Path
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # a worker in a session of its own, as torchrun starts its ranks, ignoring SIGTERM too
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    worker = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    Path(sys.argv[1]).write_text(str(worker.pid))
    time.sleep(60)
    """)


def test_a_worker_in_its_own_session_is_killed_with_the_command(tmp_path: Path) -> None:
    _, pidfile = _stopped_once_started(tmp_path, _SPAWNS_OWN_SESSION, max_restarts=3,
                                       kill_grace_s=0.5)
    assert _wait_gone(int(pidfile.read_text()))  # not reached by the leader's group alone
