"""Faults, as they happen to real processes.

* kill -9 during saves: a child process trains and saves in a loop and is SIGKILLed, at
  random moments and at each point of the commit protocol (inside a file write, before and
  after the manifest, right after the rename, inside retention). After every kill: every
  ``step-*`` folder verifies, every step the child reported committed is still there, and
  ``latest`` returns the newest one, which loads; the next child resumes from it.
* Disk full: the file-size limit (RLIMIT_FSIZE, with SIGXFSZ ignored so a write fails with
  EFBIG, as on a full disk) stops a save: a clear error naming the root, no temporary folder
  left, the previous checkpoint intact, and training goes on and saves again once there is room
  (sync and async).

This file is also the child's script (``__main__`` at the bottom).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve()
#: Saves per child before it idles (bounds the disk used: ~0.5 MB per checkpoint).
SAVES_PER_CHILD = 6
#: Deterministic kill points (each fires on the child's 3rd save) and random kills.
POINTS = ("write:1", "write:4", "manifest", "manifest-written", "rename", "retention")
RANDOM_KILLS = 10


# ------------------------------------------------------------------------------- child side
def _state() -> dict[str, Any]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(96, 96) for _ in range(4)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return {"model": model, "optimizer": opt}


def _train_step(state: dict[str, Any], step: int) -> float:
    import torch

    g = torch.Generator().manual_seed(step)
    x = torch.randn(16, 96, generator=g)
    state["optimizer"].zero_grad()
    loss = state["model"](x).pow(2).mean()
    loss.backward()
    state["optimizer"].step()
    return float(loss)


def _arm(point: str, armed: dict[str, bool]) -> None:
    """Make the child SIGKILL itself at ``point`` once ``armed['on']`` is set."""
    from trainmedic.checkpoint import commit, manifest

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    if point.startswith("write:"):
        nth = int(point.split(":")[1])
        real_write = manifest.HashingWriter.write
        calls = {"n": 0}

        def write(self: Any, data: Any) -> int:
            if armed["on"]:
                calls["n"] += 1
                if calls["n"] == nth:
                    n = real_write(self, bytes(memoryview(data).cast("B"))[:7])  # a torn write
                    die()
                    return n
            return real_write(self, data)

        manifest.HashingWriter.write = write  # type: ignore[method-assign]
    elif point in ("manifest", "manifest-written"):
        real_manifest = commit.write_manifest

        def write_manifest(folder: Any, m: Any, **kwargs: Any) -> Any:
            if armed["on"] and point == "manifest":
                die()
            out = real_manifest(folder, m, **kwargs)
            if armed["on"]:
                die()
            return out

        commit.write_manifest = write_manifest  # type: ignore[assignment]
    elif point == "rename":
        real_rename = os.rename

        def rename(src: Any, dst: Any) -> None:
            real_rename(src, dst)
            if armed["on"] and Path(dst).name.startswith("step-"):
                die()

        commit.os.rename = rename  # type: ignore[assignment]  # the os module's, in the child
    elif point == "retention":
        real_remove = commit._remove_tree

        def remove(path: Path) -> None:
            if armed["on"] and path.name.startswith(".del-step-"):
                die()
            real_remove(path)

        commit._remove_tree = remove


def _saver(root: str, point: str) -> None:
    import torch

    from trainmedic.checkpoint import CheckpointManager

    torch.set_num_threads(1)
    keep = 2 if point == "retention" else None
    mgr = CheckpointManager(root, keep_last=keep)
    state = _state()
    start = 0
    if mgr.latest() is not None:  # training continues from what survived
        start = mgr.load(state).step
    armed = {"on": False}
    if point != "random":
        _arm(point, armed)
    _say(f"ready {start}")
    for step in range(start + 1, start + 1 + SAVES_PER_CHILD):
        _train_step(state, step)
        armed["on"] = step == start + 3
        mgr.save(step, {**state, "train": {"step": step}})
        _say(f"committed {step}")
        time.sleep(random.uniform(0, 0.005))
    time.sleep(120)  # wait to be killed


def _disk_full(root: str, async_save: bool) -> None:
    import resource

    import torch

    from trainmedic.checkpoint import CheckpointManager
    from trainmedic.errors import InputError

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write returns EFBIG instead
    torch.set_num_threads(1)
    out: dict[str, Any] = {}
    mgr = CheckpointManager(root, keep_last=2, async_save=async_save)
    state = _state()
    _train_step(state, 1)
    mgr.save(1, state)
    mgr.wait()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, hard))  # the disk is now "full"
    _train_step(state, 2)
    try:
        mgr.save(2, state)
        mgr.wait()
    except InputError as exc:
        out["error"] = str(exc)
        out["error_path"] = exc.path
    out["left"] = sorted(os.listdir(root))
    out["losses"] = [_train_step(state, s) for s in (3, 4, 5)]  # training goes on
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # room again
    out["saved"] = str(mgr.save(5, state))
    mgr.wait()
    print(json.dumps(out), flush=True)


# ------------------------------------------------------------------------------- test side
torch = pytest.importorskip("torch") if __name__ != "__main__" else None


def _say(line: str) -> None:
    """One whole line in one write: print() writes its pieces (and the newline) separately
    when stdout is unbuffered, and a SIGKILL between them left "committed" without its step."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _check_root(root: Path, reported: set[int]) -> int:
    """Every committed folder verifies, nothing reported committed is gone, and latest is the
    newest one and loads. Returns its step."""
    from trainmedic.checkpoint import CheckpointManager, latest, verify
    from trainmedic.checkpoint.commit import scan

    committed = [d for d in scan(root) if d.kind == "committed"]
    for d in committed:
        report = verify(d.path)
        assert report.ok, (d.path, report.problems)
    have = {d.step for d in committed}
    assert reported <= have, f"lost {sorted(reported - have)}"
    newest = latest(root)
    assert newest is not None and newest == committed[0].path
    loaded = CheckpointManager(root).load(_state())
    assert loaded.path == newest and loaded.train["step"] == loaded.step
    return loaded.step


@pytest.mark.slow
def test_kill_9_during_saves(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    rng = random.Random(5)
    plan = list(POINTS) + ["random"] * RANDOM_KILLS
    reported: set[int] = set()
    outcomes = []
    for point in plan:
        proc = subprocess.Popen([sys.executable, str(HERE), "saver", str(root), point],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=_env())
        assert proc.stdout is not None
        ready = proc.stdout.readline().split()
        assert ready[:1] == ["ready"], (ready, proc.stderr.read() if proc.stderr else "")
        first: list[str] = []
        if point == "random":
            # After the first commit the child saves back to back: a kill a few ms later
            # lands inside a save most of the time (~half here), else between two.
            first.append(proc.stdout.readline())
            time.sleep(rng.uniform(0.0, 0.03))
            proc.send_signal(signal.SIGKILL)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"{point}: the child did not die:\n{err[-2000:]}") from None
        assert proc.returncode == -signal.SIGKILL, (point, err[-2000:])
        steps = [int(line.split()[1]) for line in first + out.splitlines()
                 if line.startswith("committed")]
        if point != "random":  # it died inside its 3rd save: two got through
            assert len(steps) == 2, (point, steps)
        reported |= set(steps)
        if point == "retention":
            # The killed save committed (max + 1); keep_last=2 then keeps max and max + 1.
            reported = {s for s in reported if s >= max(steps)}
        newest = _check_root(root, reported)
        outcomes.append((point, int(ready[1]), steps, newest))
    # The protocol points all left a clean "latest": either the save before the kill, or the
    # killed save itself when the kill came after the rename.
    by_point = {p: (start, steps, newest) for p, start, steps, newest in outcomes}
    for p in ("write:1", "write:4", "manifest", "manifest-written"):
        start, steps, newest = by_point[p]
        assert newest == start + 2, (p, by_point[p])
    for p in ("rename", "retention"):
        start, steps, newest = by_point[p]
        assert newest == start + 3, (p, by_point[p])
    from trainmedic.checkpoint.commit import clean_stale, scan

    # Every writer is dead: their temporary folders go, including one killed between its
    # mkdir and its lock (which a live run would give GRACE_S seconds).
    clean_stale(root, grace_s=0)
    assert all(d.kind == "committed" for d in scan(root))


@pytest.mark.slow
@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_disk_full(tmp_path: Path, async_save: bool) -> None:
    pytest.importorskip("resource")
    root = tmp_path / "ckpt"
    proc = subprocess.run([sys.executable, str(HERE), "diskfull", str(root), str(async_save)],
                          capture_output=True, text=True, timeout=180, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["error_path"] == str(root)
    assert out["error"].startswith(f"{root}: cannot write checkpoint step 2 (")
    assert "File too large" in out["error"] and "previous checkpoints are intact" in out["error"]
    assert out["left"] == ["step-00000001"]  # no temporary folder left behind
    assert all(v == v and abs(v) < 1e6 for v in out["losses"])
    from trainmedic.checkpoint import verify

    assert verify(root / "step-00000001").ok
    assert out["saved"] == str(root / "step-00000005") and verify(root / "step-00000005").ok


def test_an_unwritable_root_is_a_clear_error(tmp_path: Path) -> None:
    from trainmedic.checkpoint import CheckpointManager
    from trainmedic.errors import InputError

    (tmp_path / "file").write_text("not a folder")
    mgr = CheckpointManager(tmp_path / "file" / "ckpt")
    with pytest.raises(InputError, match="cannot create the checkpoint folder") as info:
        mgr.save(1, _state())
    assert info.value.path == str(tmp_path / "file" / "ckpt")


if __name__ == "__main__":
    if sys.argv[1] == "saver":
        _saver(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "diskfull":
        _disk_full(sys.argv[2], sys.argv[3] == "True")
