"""overfitting from the size of the generalization gap (detectors/gap.py): a late excerpt in
which the model fits its training set and its validation accuracy trails far behind."""

from __future__ import annotations

import numpy as np
import pytest

from trainmedic.diagnose import diagnose
from trainmedic.diagnose.detectors.gap import gap_event
from trainmedic.run.series import Run

# Keras RMDL, epochs 69-77: train loss ~0.035 at 99% accuracy, val_loss ~3.6 at ~67%.
LOSS = [0.0310, 0.0418, 0.0414, 0.0418, 0.0329, 0.0407, 0.0301, 0.0363, 0.0348]
ACC = [0.9909, 0.9865, 0.9877, 0.9897, 0.9896, 0.9893, 0.9901, 0.9885, 0.9890]
VAL_LOSS = [3.5259, 3.9242, 3.9219, 3.6954, 3.5067, 3.5700, 3.9602, 3.5299, 3.4072]
VAL_ACC = [0.6913, 0.6374, 0.6537, 0.6504, 0.6800, 0.6729, 0.6366, 0.7001, 0.7013]


def _run(loss, acc, val_loss, val_acc) -> Run:
    run = Run(source="t")
    epochs = np.arange(69, 69 + len(loss))
    for name, v in (("loss", loss), ("acc", acc), ("val_loss", val_loss), ("val_acc", val_acc)):
        run.add(name, epochs, np.asarray(v, dtype=float))
    return run


def test_a_memorised_training_set_far_ahead_of_validation_is_overfitting() -> None:
    f = [f for f in diagnose(_run(LOSS, ACC, VAL_LOSS, VAL_ACC)).findings
         if f.symptom == "overfitting"]
    assert len(f) == 1 and f[0].severity == "warning" and f[0].onset_step == 69
    assert "memorised" in f[0].summary


@pytest.mark.parametrize("case", ["cifar_like", "not_fitted", "short", "loss_close"])
def test_gaps_that_are_not_overfitting(case: str) -> None:
    loss, acc, vl, va = list(LOSS), list(ACC), list(VAL_LOSS), list(VAL_ACC)
    if case == "cifar_like":  # 100% vs 95%: the usual few points apart
        acc, va = [1.0] * 9, [0.95] * 9
    elif case == "not_fitted":  # training accuracy 80%: not memorised
        acc = [0.8] * 9
    elif case == "short":
        loss, acc, vl, va = loss[:4], acc[:4], vl[:4], va[:4]
    elif case == "loss_close":  # validation loss under 5x the training loss
        vl = [0.15] * 9
    assert gap_event(_run(loss, acc, vl, va), None) is None
