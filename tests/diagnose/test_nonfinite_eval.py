"""Non-finite losses in evaluation series and from the first step: which steps, whether it
recovered, and a severity from what was lost. Tests assert the numbers of
``NonfiniteSeries`` and the finding's fields, not phrases."""

from __future__ import annotations

import numpy as np
import pytest

from trainmedic.diagnose.detectors.loss_nonfinite import (
    detect_nonfinite_loss,
    is_eval_metric,
    nonfinite_series,
)
from trainmedic.diagnose.finding import Finding
from trainmedic.run.series import Run


def _run(val: np.ndarray | None = None, *, val_name: str = "val_loss",
         train: np.ndarray | None = None) -> Run:
    run = Run("nf")
    s = np.arange(1, 301)
    run.add("loss", s, train if train is not None else 2.0 * np.exp(-s / 100) + 0.1)
    if val is not None:
        run.add(val_name, np.arange(10, 301, 10), val)
    return run


def _val(bad: slice | None = None) -> np.ndarray:
    v = 1.5 * np.exp(-np.arange(30) / 10) + 0.3
    if bad is not None:
        v[bad] = np.nan
    return v


def _one(run: Run) -> Finding:
    fs = detect_nonfinite_loss(run)
    assert isinstance(fs, list) and len(fs) == 1
    return fs[0]


def test_transient_nonfinite_eval_that_recovers_is_a_warning_with_its_steps() -> None:
    run = _run(_val(slice(4, 7)))  # evaluations at steps 50, 60, 70
    (e,) = nonfinite_series(run, None)
    assert e.is_eval and e.stretches == ((50, 70, 3),) and e.recovered_at == 80
    assert not e.through_end and not e.from_first and e.severity == "warning"
    assert e.ref_step == 40
    f = _one(run)
    assert f.severity == "warning" and f.metric == "val_loss"
    assert f.onset_step == 50 and f.end_step == 70


def test_eval_nonfinite_at_every_evaluation_is_an_error_from_the_first() -> None:
    run = _run(_val(slice(0, 30)), val_name="val/box_loss")
    (e,) = nonfinite_series(run, None)
    assert e.all_bad and e.from_first and e.through_end and e.recovered_at is None
    f = _one(run)
    assert f.severity == "error" and f.onset_step == 10 and f.end_step is None


def test_eval_that_goes_nonfinite_and_stays_is_an_error() -> None:
    f = _one(_run(_val(slice(20, 30))))
    assert f.severity == "error" and f.onset_step == 210


def test_several_recoveries_are_all_listed() -> None:
    v = _val()
    v[[3, 10, 11]] = np.inf
    (e,) = nonfinite_series(_run(v), None)
    assert e.stretches == ((40, 40, 1), (110, 120, 2)) and e.recovered_at == 130
    assert e.n_bad == 3 and e.severity == "warning"


@pytest.mark.parametrize("to_end", [True, False])
def test_training_loss_nonfinite_from_the_first_step_is_an_error_there(to_end: bool) -> None:
    t = 2.0 * np.exp(-np.arange(1, 301) / 100) + 0.1
    if to_end:
        t[:] = np.nan
    else:
        t[0] = np.nan
    run = _run(_val(), train=t)
    (e,) = nonfinite_series(run, None)
    assert e.metric == "loss" and e.from_first and not e.is_eval
    f = _one(run)
    assert f.severity == "error" and f.onset_step == 1 and f.metric == "loss"


def test_training_loss_leads_when_both_are_hit() -> None:
    t = 2.0 * np.exp(-np.arange(1, 301) / 100) + 0.1
    t[99] = np.nan  # step 100, isolated
    run = _run(_val(slice(12, 14)), train=t)
    evs = nonfinite_series(run, None)
    assert [e.metric for e in evs] == ["loss", "val_loss"]
    f = _one(run)
    assert f.metric == "loss" and f.severity == "warning" and f.onset_step == 100
    assert [ev.metric for ev in f.evidence] == ["loss", "val_loss"]


def test_tiny_scale_loss_nonfinite_is_seen() -> None:
    t = 1e-6 * np.exp(-np.arange(1, 301) / 100)
    t[150:] = np.inf
    f = _one(_run(train=t))
    assert f.severity == "error" and f.onset_step == 151


@pytest.mark.parametrize(("name", "is_eval"), [
    ("val_loss", True), ("val_loss/g1", True), ("val/box_loss", True),
    ("eval_loss", True), ("test_loss", True), ("valid-loss", True),
    ("loss", False), ("train/box_loss", False), ("dynamics_loss_step", False),
    ("interval_loss", False)])
def test_eval_series_are_told_by_name(name: str, is_eval: bool) -> None:
    assert is_eval_metric(name) is is_eval


def test_a_repeated_training_loss_under_a_nan_evaluation_is_a_masking_logger() -> None:
    # W&B history: the logger writes its last finite loss over NaN steps from step 340; the
    # evaluation at 360 is NaN (the weights are)
    from trainmedic.diagnose import diagnose

    rng = np.random.default_rng(0)
    s = np.arange(10, 610, 10)
    loss = 0.2 + 0.5 * np.exp(-s / 100) + rng.normal(0, 0.01, s.size)
    loss[s >= 340] = loss[s == 340][0]
    run = Run(source="t")
    run.add("loss", s, loss)
    run.add("val_loss", np.array([120, 240, 360, 480, 600]),
            np.array([0.4, 0.3, np.nan, np.nan, np.nan]))
    f = [f for f in diagnose(run).findings if f.symptom == "nan_masked_in_logs"]
    assert len(f) == 1 and f[0].onset_step == 340 and f[0].level >= 1
    # the same flat tail under finite evaluations is a loss that stopped changing, not masking
    run2 = Run(source="t")
    run2.add("loss", s, loss)
    run2.add("val_loss", np.array([120, 240, 360, 480, 600]), np.array([0.4, 0.3, .3, .3, .3]))
    assert not [f for f in diagnose(run2).findings if f.symptom == "nan_masked_in_logs"]


def test_a_frozen_training_loss_beside_a_nonfinite_eval_is_its_own_finding() -> None:
    # val NaN at every evaluation, the training loss identical at every point: the weights
    # stopped moving, which a NaN evaluation cannot cause; two incidents, two findings
    from trainmedic.diagnose import diagnose

    run = _run(_val(slice(0, 30)), train=np.full(300, 0.35977894))
    loud = {f.symptom: f for f in diagnose(run).findings if f.level >= 1}
    assert loud["nonfinite_loss"].metric == "val_loss"
    assert loud["flat_loss"].metric == "loss"
    # a non-finite *training* loss still folds the flat stretch after it
    bad = np.r_[2.0 * np.exp(-np.arange(100) / 30) + 0.1, np.full(200, np.nan)]
    loud = [f for f in diagnose(_run(train=bad)).findings if f.level >= 1]
    assert [f.symptom for f in loud] == ["nonfinite_loss"]


def test_a_loss_missing_where_the_loops_other_metrics_were_logged_was_masked() -> None:
    # Comet drops a NaN point: the loss is absent at steps 150 and 200, while lr and the grad
    # norm (0: the guard skipped the step) were logged on those rows as on every other
    from trainmedic.diagnose import diagnose
    from trainmedic.run.series import Run

    s = np.arange(10, 310, 10)
    keep = (s != 150) & (s != 200)
    run = Run(source="t")
    run.add("loss", s[keep], 1.4 * np.exp(-s[keep] / 100) + 0.15)
    run.add("lr", s, np.full(s.size, 0.01))
    run.add("grad_norm", s, np.where(keep, 0.3, 0.0))
    f = [f for f in diagnose(run).findings if f.symptom == "nan_masked_in_logs"]
    assert f and f[0].onset_step == 150 and f[0].severity == "warning"
    # a loss logged every 20 steps beside an lr logged every 10 is another cadence, not gaps
    run2 = Run(source="t")
    run2.add("loss", s[::2], 1.4 * np.exp(-s[::2] / 100) + 0.15)
    run2.add("lr", s, np.full(s.size, 0.01))
    assert not [f for f in diagnose(run2).findings if f.symptom == "nan_masked_in_logs"]
