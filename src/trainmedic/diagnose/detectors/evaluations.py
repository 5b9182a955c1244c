"""What a validation-only curve says when the model got worse after its first evaluation and
never recovered.

A fine-tune at far too high an lr (or a warm-up that climbs to it) is best at its first
evaluation: every later one is worse, and the training loss does not come down either (it
rises with the lr). That is not memorization (overfitting needs a training loss that keeps
falling); the training itself made the model worse. The evidence rule is written out in
docs/symptoms.md (divergence).
"""

from __future__ import annotations

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding
from trainmedic.diagnose.stats import median
from trainmedic.diagnose.trace import Trace, fmt
from trainmedic.run.series import Run

__all__ = ["worse_than_first_eval", "FIRST_EVAL_WORSE", "FIRST_EVAL_MIN_EVALS"]

#: Every evaluation after the first is at least this many times the first (the best) ...
FIRST_EVAL_WORSE = 1.2
#: ... over at least this many evaluations.
FIRST_EVAL_MIN_EVALS = 8


def worse_than_first_eval(run: Run, tr: Trace) -> Finding | None:
    """A validation loss (``tr``, judged because the training loss is too short for the level
    rules) whose every evaluation after the first is >= 1.2x it, over >= 8, while the training
    loss logged over the same steps (>= 3 points) never went below its first logged value:
    the training made the model worse from its first evaluation on. Warning; onset at the
    second evaluation."""
    if tr.metric == "loss" or len(tr) < FIRST_EVAL_MIN_EVALS + 1:
        return None
    v = tr.values
    first = float(v[0])
    if not first > 0 or float(v[1:].min()) < FIRST_EVAL_WORSE * first:
        return None
    train = Trace.of(run, "loss", tr.rank) or Trace.of(run, "loss", None)
    if train is None or len(train) < 3 or float(train.values[1:].min()) < float(train.values[0]):
        return None  # the training loss fell: a memorising model is overfitting's to judge
    onset = int(tr.steps[1])
    late = median(v[len(v) // 2:])
    return Finding(
        symptom="divergence", severity="warning", confidence=0.65, onset_step=onset,
        rank=tr.rank, metric=tr.metric,
        summary=(f"{tr.metric} was best at its first evaluation ({fmt(first)}) and every one of "
                 f"the {len(v) - 1} after it is >= {FIRST_EVAL_WORSE:g}x that (median of the "
                 f"later half {fmt(late)}), while the training loss never went below its first "
                 f"logged value ({fmt(float(train.values[0]))}): the training made the model "
                 f"worse from step {onset} on (an lr too high for this fine-tune, or a warm-up "
                 f"climbing to one)"),
        evidence=(Evidence(tr.metric, onset, float(v[1]), first,
                           note=f"every later evaluation >= {FIRST_EVAL_WORSE:g}x the first"),
                  Evidence("loss", int(train.steps[-1]), float(np.min(train.values[1:])),
                           float(train.values[0]),
                           note="lowest later training loss vs the first logged one")))
