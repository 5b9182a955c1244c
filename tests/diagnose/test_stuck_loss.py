"""flat_loss for a loss that stops moving partway: identical to 6 digits from a step to the
end (detectors/stuck.py), with the printed precision and short tails as controls."""

from __future__ import annotations

import numpy as np
import pytest

from trainmedic.diagnose import diagnose
from trainmedic.diagnose.detectors.stuck import stuck_tail
from trainmedic.diagnose.trace import Trace
from trainmedic.run.series import Run


def _run(values: list[float] | np.ndarray) -> Run:
    run = Run(source="t")
    v = np.asarray(values, dtype=np.float64)
    run.add("loss", np.arange(v.size), v)
    return run


def _flat(run: Run):
    return [f for f in diagnose(run).findings if f.symptom == "flat_loss"]


def test_a_loss_pinned_at_ln2_after_a_noisy_start_is_a_flat_loss_from_there() -> None:
    # A sigmoid output scaled too far: noisy losses, then exactly 0.6931 on every line.
    run = _run([0.6773, 2.4587, 5.3353, 1.0234, 10.6901, 1.9899, 3.5713, 0.6869] + [0.6931] * 20)
    f = _flat(run)
    assert len(f) == 1 and f[0].severity == "error" and f[0].onset_step == 8
    assert "ln(2)" in f[0].summary
    tail = stuck_tail(Trace.of(run, "loss"))
    assert tail is not None and tail.points == 20 and tail.before == 0.6869


def test_a_shorter_stuck_tail_is_a_warning() -> None:
    rng = np.random.default_rng(0)
    v = list(np.round(2.0 * np.exp(-np.arange(30) / 15) + rng.normal(0, 0.02, 30), 5))
    f = _flat(_run(v + [1.23456] * 14))
    assert len(f) == 1 and f[0].severity == "warning" and f[0].onset_step == 30


@pytest.mark.parametrize("case", ["short_tail", "coarse_print", "zeros", "healthy"])
def test_no_stuck_tail(case: str) -> None:
    rng = np.random.default_rng(1)
    healthy = np.round(2.0 * np.exp(-np.arange(40) / 15) + 0.3 + rng.normal(0, 0.02, 40), 4)
    v = {"short_tail": list(healthy[:30]) + [0.5432] * 4,  # 4 points: not enough
         # 2 decimals at 0.05: the print cannot show a change of a converged loss
         "coarse_print": list(np.round(np.linspace(1.0, 0.05, 20), 2)) + [0.05] * 20,
         "zeros": list(healthy[:20]) + [0.0] * 20,  # exact zeros: loss_nonfinite's reading
         "healthy": list(healthy)}[case]
    assert stuck_tail(Trace.of(_run(v), "loss")) is None


def test_a_repeated_loss_over_nan_gradients_is_a_masked_nan_not_a_stuck_model() -> None:
    # Any logger: the last finite loss written again at every step whose grad norm is NaN.
    rng = np.random.default_rng(2)
    v = list(np.round(2.0 * np.exp(-np.arange(20) / 6) + 0.03 + rng.normal(0, 0.005, 20), 8))
    loss = np.asarray(v + [v[-1]] * 30)
    g = np.concatenate([np.full(20, 0.07), np.full(30, np.nan)])
    run = Run(source="t")
    steps = np.arange(5, 255, 5)
    run.add("loss", steps, loss)
    run.add("grad_norm", steps, g)
    syms = {f.symptom: f for f in diagnose(run).findings if f.level >= 1}
    assert "nan_masked_in_logs" in syms and syms["nan_masked_in_logs"].onset_step == 100
    assert "flat_loss" not in syms


def _noisy_with_val(train_fall: float, val: np.ndarray, seed: int = 0) -> Run:
    # a density model's NLL: +-4% batch noise hides a 3% fall; the evaluation does not
    rng = np.random.default_rng(seed)
    s = np.arange(10, 610, 10)
    loss = 180.0 * (1 - train_fall * s / 600) * np.exp(rng.normal(0, 0.04, s.size))
    run = Run(source="t")
    run.add("loss", s, loss)
    run.add("val_loss", np.arange(100, 700, 100), val)
    return run


def test_a_noisy_loss_whose_evaluation_did_not_move_is_flat() -> None:
    run = _noisy_with_val(0.0, np.array([182.5, 182.4, 182.3, 182.3, 182.2, 182.2]))
    f = [f for f in _flat(run) if f.level >= 1]
    assert len(f) == 1 and f[0].severity == "warning"
    assert any(e.metric == "val_loss" for e in f[0].evidence)


def test_a_noisy_loss_that_learns_or_an_evaluation_that_moves_is_not_flat() -> None:
    # the evaluation moved 5%: the noise hid real learning
    run = _noisy_with_val(0.0, np.array([182.5, 180.0, 178.0, 176.0, 174.5, 173.5]))
    assert not [f for f in _flat(run) if f.level >= 1]
    # the training loss fell 20% over the run: a converged evaluation is not "nothing learned"
    run = _noisy_with_val(0.2, np.array([150.5, 150.4, 150.3, 150.3, 150.2, 150.2]))
    assert not [f for f in _flat(run) if f.level >= 1]


def test_a_short_log_whose_loss_is_identical_at_every_point_is_flat() -> None:
    # five epochs of "Train Epoch: N Loss: 0.35977894"
    f = [f for f in _flat(_run([0.35977894] * 5)) if f.level >= 1]
    assert len(f) == 1 and f[0].severity == "warning" and f[0].onset_step == 0
    # a converged loss rounded to 4 decimals repeats without being frozen; so does an exact 0
    assert not [f for f in _flat(_run([0.0012] * 5)) if f.level >= 1]
    assert not [f for f in _flat(_run([0.0] * 6)) if f.level >= 1]
    # four points are too few; moving values are not frozen
    assert not [f for f in _flat(_run([0.35977894] * 4)) if f.level >= 1]
    assert not [f for f in _flat(_run([0.3598, 0.3597, 0.3598, 0.3596, 0.3597])) if f.level >= 1]
