"""``trainmedic demo --checkpoint-every N`` / ``--resume``: recovery end to end on the demo.

The oracle for the resume is the uninterrupted demo itself: its recorded losses."""

from __future__ import annotations

import logging
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import trainmedic
from trainmedic.cli.main import main
from trainmedic.demo import DemoConfig, run_demo
from trainmedic.run.store import read_store

SRC = pathlib.Path(trainmedic.__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def losses(run_dir: pathlib.Path) -> tuple[list[int], list[float]]:
    s = read_store(run_dir / "metrics.sqlite").get("loss")
    assert s is not None
    return s.steps.tolist(), s.values.tolist()


def committed(root: pathlib.Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir() and p.name.startswith("step-"))


def test_checkpoint_every_writes_checkpoints(tmp_path: pathlib.Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["demo", "--steps", "12", "--checkpoint-every", "3", "--out", str(out),
                 "--json"]) == 0
    # One line says where they go.
    err = capsys.readouterr().err
    said = [ln for ln in err.splitlines() if "saving a checkpoint" in ln]
    assert said == [f"trainmedic: saving a checkpoint every 3 steps under {out / 'checkpoints'}"]
    # Saved at 3, 6, 9 and 12; the demo keeps the newest three.
    assert committed(out / "checkpoints") == ["step-00000006", "step-00000009",
                                              "step-00000012"]
    from trainmedic.checkpoint.manager import CheckpointManager

    latest = CheckpointManager(out / "checkpoints").latest()
    assert latest is not None and latest.name == "step-00000012"


class Crash(Exception):
    pass


def test_resume_continues_with_the_uninterrupted_losses(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    straight = run_demo(DemoConfig(steps=12, out_dir=tmp_path / "straight"))
    s_steps, s_loss = losses(straight)
    assert s_steps == list(range(12))

    def crash_after_six(done: int, total: int) -> None:
        if done == 6:
            raise Crash  # the process dies after step 5; the last checkpoint is at step 4

    out = tmp_path / "crashed"
    with pytest.raises(Crash):
        run_demo(DemoConfig(steps=12, checkpoint_every=4, out_dir=out),
                 progress=crash_after_six)
    assert committed(out / "checkpoints") == ["step-00000004"]
    assert main(["demo", "--steps", "12", "--checkpoint-every", "4", "--out", str(out),
                 "--resume", "--json"]) == 0
    err = capsys.readouterr().err
    assert f"resuming from {out / 'checkpoints' / 'step-00000004'} (step 4)\n" in err
    steps, values = losses(out)
    # The record keeps both: steps 0-5 of the crashed run, then 4-11 again after the resume.
    assert steps == list(range(6)) + list(range(4, 12))
    np.testing.assert_array_equal(values[6:], s_loss[4:])  # bitwise
    np.testing.assert_array_equal(values[:6], s_loss[:6])
    assert committed(out / "checkpoints") == ["step-00000004", "step-00000008",
                                              "step-00000012"]


def test_resume_without_a_checkpoint_starts_fresh(tmp_path: pathlib.Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["demo", "--steps", "10", "--out", str(out), "--resume", "--json"]) == 0
    assert "no checkpoint under" in capsys.readouterr().err
    assert losses(out)[0] == list(range(10))


def test_a_checkpoint_of_another_config_is_refused_unless_forced(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "run"
    assert main(["demo", "--steps", "10", "--checkpoint-every", "5", "--out", str(out),
                 "--json"]) == 0
    capsys.readouterr()
    assert main(["demo", "--steps", "10", "--seed", "3", "--out", str(out), "--resume",
                 "--json"]) == 2
    out_text, err = capsys.readouterr()
    # Decided before anything is said or trained: one error line, no "resuming from".
    ck = out / "checkpoints" / "step-00000010"
    assert out_text == "" and err.count("\n") == 1 and "resuming from" not in err
    assert err.startswith(f"trainmedic: error: {ck}: saved with another config (seed: 0 in "
                          f"the checkpoint, 3 now)")
    assert "--force" in err and "Traceback" not in err
    assert losses(out)[0] == list(range(10))  # the record is untouched
    # Forced: a longer run continues from step 10, the difference said and logged.
    with caplog.at_level(logging.WARNING, logger="trainmedic.checkpoint"):
        assert main(["demo", "--steps", "14", "--out", str(out), "--resume", "--force",
                     "--json"]) == 0
    said = caplog.text
    assert "steps: 10 in the checkpoint, 14 now" in said and "loaded anyway" in said
    assert f"resuming from {ck} (step 10), saved with another config (steps: 10 in the " \
           f"checkpoint, 14 now): continuing (--force)" in capsys.readouterr().err
    steps, _ = losses(out)
    assert steps == list(range(14))


def test_bad_checkpoint_every_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--checkpoint-every", "0"]) == 2
    assert main(["demo", "--help"]) == 0
    assert "exit 75" in capsys.readouterr().out


@pytest.mark.slow
def test_sigterm_saves_and_exits_75(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(SRC))
    env.pop("RANK", None)
    # The stall fault sleeps 20 ms a batch: 400 steps take ~10 s, far more than the wait.
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainmedic.cli.main", "demo", "--fault", "stall", "--steps",
         "400", "--checkpoint-every", "1000", "--out", str(out), "--json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (out / "metrics.sqlite").exists():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 75, err
    assert "stopped by SIGTERM at step" in err and "--resume" in err
    names = committed(out / "checkpoints")
    assert len(names) == 1
    step = int(names[0].split("-")[1])
    assert 0 < step < 400
    assert losses(out)[0] == list(range(step))


def test_after_a_divergence_resume_starts_before_it(tmp_path: pathlib.Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from trainmedic.diagnose.onset import divergence_onset

    out = tmp_path / "run"
    # seed 3: its climb starts after the first checkpoint (step 5), as the test needs
    main(["demo", "--fault", "diverge", "--steps", "40", "--checkpoint-every", "5",
          "--seed", "3", "--out", str(out), "--json"])
    onset = divergence_onset(out)
    assert onset is not None and 5 < onset < 35
    kept = committed(out / "checkpoints")
    before = [n for n in kept if int(n.split("-")[1]) < onset]
    # the newest three (all after the onset) and the newest one before it
    assert len(kept) == 4 and len(before) == 1
    capsys.readouterr()
    main(["demo", "--fault", "diverge", "--steps", "40", "--checkpoint-every", "5",
          "--seed", "3", "--out", str(out), "--resume", "--json"])
    assert f"resuming from {out / 'checkpoints' / before[0]}" in capsys.readouterr().err
    steps, _ = losses(out)
    # the store holds the first run, then the resumed one from that step on
    assert steps[:40] == list(range(40)) and steps[40] == int(before[0].split("-")[1])
