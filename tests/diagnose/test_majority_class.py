"""plateau for a classifier whose predictions stopped changing (detectors/majority.py): the
validation accuracy repeats one value while the validation loss moves; converged models that
discriminate and models that fit their training set are the controls."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainmedic.diagnose import diagnose
from trainmedic.diagnose.detectors.majority import frozen_accuracy, prior_entropy_floor
from trainmedic.run.series import Run

# Keras, 2086/2084 samples: val_acc stuck at the majority share while val_loss falls.
VAL_ACC = [0.7202, 0.7202, 0.7198, 0.7198] + [0.7188] * 11
VAL_LOSS = [0.9636, 0.9852, 0.8854, 0.7974, 0.7618, 0.6863, 0.6592, 0.6519, 0.6284, 0.6124,
            0.6317, 0.6087, 0.6095, 0.6060, 0.6119]
TRAIN_ACC = [0.5834, 0.6318, 0.6222, 0.6242, 0.6453, 0.6568, 0.6735, 0.6870, 0.6889, 0.6946,
             0.7105, 0.7124, 0.7167, 0.7162, 0.7167]


def _run(val_acc, val_loss, train_acc=None) -> Run:
    run = Run(source="t")
    epochs = np.arange(1, len(val_acc) + 1)
    run.add("loss", epochs, np.linspace(1.0, 0.6, len(val_acc)))
    run.add("val_loss", epochs, np.asarray(val_loss, dtype=float))
    run.add("val_acc", epochs, np.asarray(val_acc, dtype=float))
    if train_acc is not None:
        run.add("acc", epochs, np.asarray(train_acc, dtype=float))
    return run


def test_prior_entropy_floor() -> None:
    a = 0.7188
    assert prior_entropy_floor(a) == pytest.approx(-a * math.log(a) - (1 - a) * math.log(1 - a))
    assert prior_entropy_floor(0.5) == pytest.approx(math.log(2))
    assert prior_entropy_floor(0.1) == pytest.approx(math.log(10))


def test_an_accuracy_frozen_at_the_majority_share_is_a_plateau_warning() -> None:
    run = _run(VAL_ACC, VAL_LOSS, TRAIN_ACC)
    fa = frozen_accuracy(run, None)
    assert fa is not None and fa.onset_step == 5 and fa.evals == 11 and fa.value == 0.7188
    f = [f for f in diagnose(run).findings if f.symptom == "plateau"]
    assert len(f) == 1 and f[0].severity == "warning" and f[0].metric == "val_acc"
    # routed to the frozen-prediction causes, not "the schedule has annealed"
    assert "majority class" in f[0].causes[0].cause
    assert "class frequency" in f[0].interventions[0].action


@pytest.mark.parametrize("case", ["discriminates", "fits_train", "perfect", "loss_still",
                                  "short", "small_val_set"])
def test_no_frozen_accuracy(case: str) -> None:
    acc, loss, train = list(VAL_ACC), list(VAL_LOSS), list(TRAIN_ACC)
    if case == "discriminates":  # 99% with a loss far under the 0.056-nat prior entropy
        acc = [0.98] * 4 + [0.99] * 11
        loss = list(np.linspace(0.03, 0.02, 15))
        train = [0.995] * 15
    elif case == "fits_train":  # the training accuracy climbs well past it
        train = list(np.linspace(0.6, 0.95, 15))
    elif case == "perfect":
        acc = [0.98] * 4 + [1.0] * 11
        train = [1.0] * 15
    elif case == "loss_still":  # nothing moves: no sign the model changed at all
        loss = [0.6] * 15
    elif case == "short":
        acc, loss, train = acc[-6:], loss[-6:], train[-6:]
    elif case == "small_val_set":  # 100 samples: accuracies move in steps of 0.01
        acc = [0.93, 0.94, 0.96, 0.94] + [0.95] * 11
        train = [0.95] * 15
    assert frozen_accuracy(_run(acc, loss, train), None) is None
