"""Several runs appended into one log, told apart from a per-epoch step counter."""

from __future__ import annotations

import numpy as np

from trainmedic.diagnose import diagnose
from trainmedic.run.series import Run


def _resume(run: Run):
    return [f for f in diagnose(run).findings if f.symptom == "resume_discontinuity"]


def test_appended_runs_are_named_as_such() -> None:
    rng = np.random.default_rng(0)
    steps, loss = [], []
    for _ in range(4):  # four trainings of 15 epochs, one after another in one file
        s = np.arange(1, 16)
        steps.append(s)
        loss.append(2.5 * np.exp(-s / 5) + 0.2 + rng.normal(0, 0.01, 15))
    run = Run(source="t")
    run.add("loss", np.concatenate(steps), np.concatenate(loss))
    f = _resume(run)
    assert len(f) == 1 and f[0].severity == "warning" and f[0].onset_step == 1
    assert "4 runs appended" in f[0].summary


def test_per_epoch_counter_is_info() -> None:
    rng = np.random.default_rng(1)
    # One training; the step column counts batches within each epoch (restarts at 0).
    g = np.arange(400)
    loss = 2.5 * np.exp(-g / 150) + 0.2 + rng.normal(0, 0.01, 400)
    run = Run(source="t")
    run.add("loss", g % 100, loss)
    f = _resume(run)
    assert len(f) == 1 and f[0].severity == "info"


def test_epoch_summary_lines_at_the_last_step_are_duplicates_not_a_resume() -> None:
    # fairseq writes its 'end of epoch' line at the num_updates of the epoch's last progress
    # line: the same step twice per epoch, never going back.
    steps, loss = [], []
    for epoch in range(3):
        for u in range(10, 101, 10):
            steps.append(epoch * 100 + u)
            loss.append(3.0 - 0.002 * (epoch * 100 + u))
        steps.append(epoch * 100 + 100)
        loss.append(loss[-1] + 0.05)  # the epoch average
    run = Run(source="t")
    run.add("loss", np.array(steps), np.array(loss))
    f = _resume(run)
    assert len(f) == 1 and f[0].severity == "info"


def test_appended_runs_are_routed_to_splitting_the_log() -> None:
    rng = np.random.default_rng(2)
    s = np.tile(np.arange(1, 16), 3)
    loss = np.concatenate([2.5 * np.exp(-np.arange(1, 16) / 5) + 0.2
                           + rng.normal(0, 0.01, 15) for _ in range(3)])
    run = Run(source="t")
    run.add("loss", s, loss)
    f = _resume(run)[0]
    assert "appended" in f.causes[0].cause or "one log" in f.causes[0].cause
    assert f.causes[0].checked_against_data
    assert all("resumed" not in c.cause for c in f.causes)
    assert "split" in f.interventions[0].action
