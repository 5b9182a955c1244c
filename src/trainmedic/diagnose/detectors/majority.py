"""A classifier whose predictions stopped changing: its validation accuracy repeats one value,
evaluation after evaluation, while its validation loss still moves.

An accuracy over a validation set changes whenever one prediction's argmax changes. When it
holds the same value to the printed digits for many evaluations while the validation loss moves
by several percent, the probabilities change but no decision does: the model predicts the same
class for every input (on imbalanced data, the majority class, whose share the accuracy then
is). A training accuracy that never rises above that value says the model learned nothing
beyond the class prior. The evidence rule is written out in docs/symptoms.md (plateau).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainmedic.diagnose.detectors.loss_nonfinite import is_eval_metric
from trainmedic.diagnose.stats import median
from trainmedic.diagnose.trace import Trace
from trainmedic.run.series import Run
from trainmedic.run.vocabulary import is_top1_accuracy

__all__ = ["FrozenAccuracy", "frozen_accuracy", "prior_entropy_floor", "FROZEN_ACC_MIN_EVALS",
           "FROZEN_ACC_LOSS_MOVE"]

#: The repeated accuracy holds at least this many evaluations, to the last ...
FROZEN_ACC_MIN_EVALS = 6
#: ... and at least half of them ...
FROZEN_ACC_MIN_SHARE = 0.5
#: ... while the validation loss moved by at least this share of its level over them ...
FROZEN_ACC_LOSS_MOVE = 0.05
#: ... and a logged training accuracy never exceeded the repeated value by more than this.
FROZEN_ACC_TRAIN_MARGIN = 0.01

#: A model that predicts one distribution for every input has a cross-entropy >= the entropy
#: of the class prior; the validation loss must reach this share of the lowest entropy a prior
#: with that majority share can have (a converged model at 99% accuracy and a 0.02 loss
#: discriminates; a 0.056-nat prior entropy is above its loss).
FROZEN_ACC_ENTROPY_SLACK = 0.9

#: The smallest change between the logged accuracies must be at most this (a validation set
#: of ~500 samples or more, where a model that still learns flips some prediction at every
#: evaluation; 0.95, 0.96, 0.94 on 100 samples repeat by granularity alone).
FROZEN_ACC_MAX_GRANULARITY = 0.002



@dataclass(frozen=True)
class FrozenAccuracy:
    """``metric`` repeated ``value`` at ``evals`` evaluations from ``onset_step`` to the end."""

    metric: str
    onset_step: int
    value: float
    evals: int
    loss_first: float
    loss_last: float
    loss_move: float
    """(max - min) / median of val_loss over the same evaluations."""
    train_metric: str | None
    train_max: float | None


def prior_entropy_floor(share: float) -> float:
    """The lowest entropy (nats) of a class distribution whose largest class has ``share``:
    as many classes at ``share`` as fit, the remainder in one more."""
    k = int(1.0 / share + 1e-12)
    rest = max(0.0, 1.0 - k * share)
    h = -k * share * math.log(share)
    return h - rest * math.log(rest) if rest > 1e-12 else h


def frozen_accuracy(run: Run, rank: int | None) -> FrozenAccuracy | None:
    """The validation top-1 accuracy that repeats one value (to 1e-9) at every evaluation from
    some step to the end, over >= 6 evaluations and >= half of them, after another value, in
    a log whose accuracies differ somewhere by <= 0.002 (a validation set of hundreds or more),
    while ``val_loss`` moved >= 5% of its level over the same evaluations, stayed at >= 0.9x
    the entropy of a class prior with that majority share (a cross-entropy under it means the
    model discriminates), the value is under 0.999, and no logged training accuracy rose more
    than 0.01 above it; None otherwise."""
    val = Trace.of(run, "val_loss", rank) or Trace.of(run, "val_loss", None)
    if val is None:
        return None
    names = [m for m in run.metrics() if is_top1_accuracy(m)]
    for m in (m for m in names if is_eval_metric(m)):
        acc = Trace.of(run, m, rank) or Trace.of(run, m, None)
        if acc is None or len(acc) < FROZEN_ACC_MIN_EVALS + 1:
            continue
        v = acc.values
        same = np.abs(v - v[-1]) <= 1e-9 * max(1.0, abs(float(v[-1])))
        differ = np.flatnonzero(~same)
        if differ.size == 0:
            continue
        k = int(differ[-1]) + 1
        evals = len(v) - k
        steps_seen = np.diff(np.unique(v))
        if float(steps_seen.min()) / (100.0 if float(v.max()) > 1.0 else 1.0) > \
                FROZEN_ACC_MAX_GRANULARITY:
            continue  # a small validation set: its accuracy moves in coarse steps, and a
            # converged model can repeat one of them for many evaluations
        if evals < max(FROZEN_ACC_MIN_EVALS, FROZEN_ACC_MIN_SHARE * len(v)):
            continue
        onset = int(acc.steps[k])
        lv = val.values[(val.steps >= onset) & (val.steps <= int(acc.steps[-1]))]
        lvl = median(lv) if lv.size else 0.0
        if lv.size < FROZEN_ACC_MIN_EVALS or not lvl > 0:
            continue
        move = float(lv.max() - lv.min()) / lvl
        share = float(v[-1]) / (100.0 if float(v[-1]) > 1.0 else 1.0)
        if move < FROZEN_ACC_LOSS_MOVE or not 0.0 < share < 0.999 or \
                lvl < FROZEN_ACC_ENTROPY_SLACK * prior_entropy_floor(share):
            continue  # (a loss under the prior's entropy: the model discriminates)
        train_name, train_max = None, None
        for t in (t for t in names if not is_eval_metric(t)):
            tr = Trace.of(run, t, rank) or Trace.of(run, t, None)
            if tr is not None and len(tr):
                train_name, train_max = t, float(tr.values.max())
                break
        if train_max is not None and train_max > float(v[-1]) + FROZEN_ACC_TRAIN_MARGIN * (
                100.0 if float(v[-1]) > 1.0 else 1.0):
            continue  # the model fits its training set beyond that value: it learns
        return FrozenAccuracy(metric=m, onset_step=onset, value=float(v[-1]), evals=evals,
                              loss_first=float(lv[0]), loss_last=float(lv[-1]),
                              loss_move=move, train_metric=train_name, train_max=train_max)
    return None
