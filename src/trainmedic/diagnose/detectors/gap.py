"""Overfitting read from the size of the generalization gap at every evaluation, when the log
is too short to show the validation loss turning up (an excerpt of a few late epochs).

A model that fits its training set (top-1 accuracy >= 90%) while its validation accuracy trails
by >= 25 points and its validation loss is >= 5x its training loss, at every evaluation of the
log, has memorised the training set: a healthy classifier's two accuracies are a few points
apart (ResNet on CIFAR: 100% vs 95%), however small its training loss gets. The evidence rule
is written out in docs/symptoms.md (overfitting).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainmedic.diagnose.detectors.loss_nonfinite import is_eval_metric
from trainmedic.diagnose.finding import Evidence, Finding
from trainmedic.diagnose.stats import median
from trainmedic.diagnose.trace import Trace, fmt
from trainmedic.run.series import Run
from trainmedic.run.vocabulary import is_top1_accuracy

__all__ = ["GapEvent", "gap_event", "gap_finding", "GAP_MIN_EVALS", "GAP_ACC_POINTS",
           "GAP_LOSS_RATIO"]

#: At least this many evaluations with both sides logged ...
GAP_MIN_EVALS = 5
#: ... where the training accuracy is >= this (the training set is fitted) ...
GAP_TRAIN_ACC = 0.9
#: ... the validation accuracy trails it by >= this ...
GAP_ACC_POINTS = 0.25
#: ... and the validation loss is >= this many times the training loss.
GAP_LOSS_RATIO = 5.0



@dataclass(frozen=True)
class GapEvent:
    onset_step: int
    evals: int
    train_acc: float
    val_acc: float
    train_loss: float
    val_loss: float
    """Medians over the evaluations."""
    acc_metrics: tuple[str, str]



def _fraction(v: np.ndarray) -> np.ndarray:
    return v / 100.0 if float(np.nanmax(v)) > 1.0 else v


def gap_event(run: Run, rank: int | None) -> GapEvent | None:
    """The gap at every one of >= 5 evaluations where loss, val_loss and a training and a
    validation top-1 accuracy are all logged (at the same steps): training accuracy >= 0.9,
    validation accuracy >= 0.25 below it, validation loss >= 5x the training loss."""
    accs = [m for m in run.metrics() if is_top1_accuracy(m)]
    val_accs = [m for m in accs if is_eval_metric(m)]
    train_accs = [m for m in accs if not is_eval_metric(m)]
    if not val_accs or not train_accs:
        return None
    series: list[Trace] = []
    for m in ("loss", "val_loss", train_accs[0], val_accs[0]):
        t = Trace.of(run, m, rank) or Trace.of(run, m, None)
        if t is None or len(t) < GAP_MIN_EVALS:
            return None
        series.append(t)
    tl, vl, ta, va = series
    steps = vl.steps
    for t in (tl, ta, va):
        steps = np.intersect1d(steps, t.steps)
    if steps.size < GAP_MIN_EVALS:
        return None

    def at(t: Trace) -> np.ndarray:
        return t.values[np.searchsorted(t.steps, steps)]

    tl_v, vl_v = at(tl), at(vl)
    ta_v, va_v = _fraction(at(ta)), _fraction(at(va))
    if not (bool(np.all(tl_v > 0)) and bool(np.all(ta_v >= GAP_TRAIN_ACC))
            and bool(np.all(ta_v - va_v >= GAP_ACC_POINTS))
            and bool(np.all(vl_v >= GAP_LOSS_RATIO * tl_v))):
        return None
    return GapEvent(onset_step=int(steps[0]), evals=int(steps.size),
                    train_acc=median(ta_v), val_acc=median(va_v), train_loss=median(tl_v),
                    val_loss=median(vl_v), acc_metrics=(train_accs[0], val_accs[0]))


def gap_finding(ev: GapEvent, rank: int | None) -> Finding:
    """The overfitting warning of a gap event."""
    return Finding(
        symptom="overfitting", severity="warning", confidence=0.7, onset_step=ev.onset_step,
        rank=rank, metric="val_loss",
        summary=(f"at every one of {ev.evals} evaluations the model fits its training set "
                 f"({ev.acc_metrics[0]} {ev.train_acc:.3g}) while {ev.acc_metrics[1]} trails it "
                 f"by {100 * (ev.train_acc - ev.val_acc):.0f} points ({ev.val_acc:.3g}) and "
                 f"val_loss is {ev.val_loss / ev.train_loss:.3g}x the training loss "
                 f"({fmt(ev.val_loss)} vs {fmt(ev.train_loss)}): it has memorised the training "
                 f"set (a healthy classifier's accuracies are a few points apart)"),
        evidence=(Evidence("val_loss", ev.onset_step, ev.val_loss, ev.train_loss,
                           note="median validation loss vs median training loss over the "
                                "same evaluations"),
                  Evidence(ev.acc_metrics[1], ev.onset_step, ev.val_acc, ev.train_acc,
                           note=f"median validation vs training accuracy ({ev.acc_metrics[0]})"
                                f"; every evaluation trails by >= {GAP_ACC_POINTS:g}")))
