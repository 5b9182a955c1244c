"""Preemption: signals and the save-now file become step-boundary requests; a process that
gets SIGTERM saves at the next boundary and exits with EXIT_PREEMPTED."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

import trainmedic
from trainmedic.checkpoint.preemption import EXIT_PREEMPTED, Preempted, PreemptionWatch
from trainmedic.errors import ConfigError

SRC = pathlib.Path(trainmedic.__file__).resolve().parents[1]


def test_signal_sets_the_flag_and_handlers_are_restored() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    with PreemptionWatch() as w:
        assert signal.getsignal(signal.SIGTERM) != before[signal.SIGTERM]
        assert w.poll() is None and not w.stop_requested
        signal.raise_signal(signal.SIGUSR1)
        assert w.stop_requested and w.signal_received == signal.SIGUSR1
        assert w.poll() == "stop"
    assert {s: signal.getsignal(s) for s in before} == before


def test_flag_file_asks_for_a_save_and_is_cleared(tmp_path: pathlib.Path) -> None:
    flag = tmp_path / "SAVE_NOW"
    with PreemptionWatch(flag_file=flag) as w:
        assert w.poll() is None
        flag.touch()
        assert w.save_requested and w.poll() == "save"
        w.clear_save_request()
        assert not flag.exists() and w.poll() is None


def test_poll_every_skips_boundaries() -> None:
    with PreemptionWatch(poll_every=3) as w:
        signal.raise_signal(signal.SIGTERM)
        assert [w.poll() for _ in range(6)] == [None, None, "stop", None, None, "stop"]


def test_a_second_signal_goes_to_the_previous_handler() -> None:
    calls: list[int] = []

    def previous(signum: int, frame: Any) -> None:
        calls.append(signum)

    old = signal.signal(signal.SIGUSR1, previous)
    try:
        with PreemptionWatch() as w:
            signal.raise_signal(signal.SIGUSR1)
            assert calls == [] and w.stop_requested
            signal.raise_signal(signal.SIGUSR1)  # impatient: the previous handler runs now
            assert calls == [signal.SIGUSR1]
            assert signal.getsignal(signal.SIGUSR1) is previous
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ConfigError, match="signals: 'SIGNOPE'"):
        PreemptionWatch(signals=("SIGNOPE",))
    with pytest.raises(ConfigError, match="poll_every"):
        PreemptionWatch(poll_every=0)
    assert "SIGTERM at step 7" in str(Preempted(7, pathlib.Path("x"), signal.SIGTERM))


CHILD = textwrap.dedent('''
    import json, signal, sys, time
    from pathlib import Path
    import torch
    from trainmedic import Recipe
    from trainmedic.checkpoint.preemption import EXIT_PREEMPTED, PreemptionWatch
    from trainmedic.recipe import RecipeRunner

    work = Path(sys.argv[1])

    class Manager:  # the CheckpointManager API, one file per save
        def save(self, step, state):
            path = work / f"step-{step}.pt"
            torch.save({k: v if k == "train" else v.state_dict() for k, v in state.items()},
                       path)
            return path
        def latest(self):
            return None
        def load(self, state, *, path=None, force=False):
            raise AssertionError

    model = torch.nn.Linear(2, 1)
    def loss_fn(m, b):
        time.sleep(0.02)
        return m(b).pow(2).mean()
    recipe = Recipe(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                    loss_fn=loss_fn, data=[torch.ones(4, 2)])
    with PreemptionWatch(flag_file=work / "SAVE_NOW") as watch:
        runner = RecipeRunner(recipe, manager=Manager(), preemption=watch)
        runner.on_step = lambda step, loss: step == 3 and (work / "ready").touch()
        result = runner.run(100_000)
    restored = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    print(json.dumps({"step": result.step, "preempted": result.preempted,
                      "signal": result.signal, "saved": [str(p) for p in result.saved],
                      "restored": restored}))
    sys.exit(EXIT_PREEMPTED if result.preempted else 0)
''')


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_a_process_saves_at_the_next_boundary_and_exits_75(tmp_path: pathlib.Path,
                                                             sig: signal.Signals) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=str(SRC))
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the child never reached step 3"
            time.sleep(0.02)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_PREEMPTED == 75, err
    doc = json.loads(out)
    assert doc["preempted"] and doc["signal"] == sig and doc["restored"]
    assert doc["step"] >= 3 and doc["saved"] == [str(tmp_path / f"step-{doc['step']}.pt")]
    import torch

    saved = torch.load(doc["saved"][0], weights_only=True)
    assert saved["train"]["counters"]["step"] == doc["step"]
