"""grad_accum_misnormalization: a training loss that is a steady multiple of the validation
loss from the start (detectors/accumulation.py), with regularised and summed-loss runs as
controls."""

from __future__ import annotations

import numpy as np
import pytest

from trainmedic.diagnose import diagnose
from trainmedic.run.series import Run


def _run(ratio_of_step, first_step: int = 5, n: int = 200) -> Run:
    """A healthy-looking validation curve and a training loss ``ratio_of_step(step)`` times it."""
    rng = np.random.default_rng(0)
    steps = np.arange(first_step, first_step + n * 5, 5)
    level = 0.9 + 2.4 * np.exp(-steps / 300.0)
    run = Run(source="t")
    ratio = np.array([ratio_of_step(s) for s in steps])
    run.add("loss", steps, level * ratio * np.exp(rng.normal(0, 0.03, n)))
    ev = steps[::25]
    run.add("val_loss", ev, level[::25])
    return run


def _accum(run: Run):
    return [f for f in diagnose(run).findings if f.symptom == "grad_accum_misnormalization"]


def test_a_loss_summed_over_four_micro_batches_is_reported() -> None:
    f = _accum(_run(lambda s: 4.0))
    assert len(f) == 1 and f[0].severity == "warning" and "~4 micro-batches" in f[0].summary
    assert "accumulation count" in f[0].interventions[0].action


@pytest.mark.parametrize("ratio,first", [
    (lambda s: 1.0 + 2.5 * s / 1000.0, 5),  # regularised: the gap grows as it learns
    (lambda s: 1.2, 5),                      # dropout's usual few tens of percent
    (lambda s: 32.0, 5),                     # summed over a batch of 32: divergence's
    (lambda s: 3.5, 2000),                   # a late excerpt: the gap may have grown before
])
def test_no_accumulation_reading(ratio, first) -> None:
    assert _accum(_run(ratio, first_step=first)) == []


def _scale_step_run() -> Run:
    """Accumulation switched on at step 210 without dividing: the logged loss steps up ~4x,
    the validation loss keeps its level."""
    rng = np.random.default_rng(1)
    steps = np.arange(10, 410, 10)
    loss = 0.16 * np.exp(rng.normal(0, 0.05, steps.size))
    loss[:5] = [1.29, 0.8, 0.5, 0.3, 0.2]
    loss[steps >= 210] *= 4.0
    run = Run(source="t")
    run.add("loss", steps, loss)
    run.add("val_loss", np.arange(50, 450, 50), np.array([0.23, 0.19, 0.16, 0.19, 0.17, 0.15,
                                                           0.17, 0.18]))
    return run


def test_a_mid_run_scale_step_the_validation_loss_does_not_follow() -> None:
    run = _scale_step_run()
    d = diagnose(run)
    f = [x for x in d.findings if x.level >= 1]
    assert [(x.symptom, x.onset_step) for x in f] == [("grad_accum_misnormalization", 210)]
    # a real divergence takes the validation loss with it
    run.series.pop(("val_loss", None))
    run.add("val_loss", np.arange(50, 450, 50), np.array([0.23, 0.19, 0.16, 0.19, 0.5, 0.7,
                                                           0.8, 0.9]))
    assert "grad_accum_misnormalization" not in {x.symptom for x in diagnose(run).findings}


def test_a_scale_step_where_the_gradients_turn_nan_is_the_nan_incident() -> None:
    # The same step up at 210, but the grad norm is NaN from there (a guarded loop skips
    # those updates): one incident, reported as the NaN gradients
    run = _scale_step_run()
    steps = run.get("loss").steps
    run.add("grad_norm", steps, np.where(steps >= 210, np.nan, 0.5))
    f = [(x.symptom, x.onset_step) for x in diagnose(run).findings if x.level >= 1]
    assert f == [("nonfinite_grad", 210)]
