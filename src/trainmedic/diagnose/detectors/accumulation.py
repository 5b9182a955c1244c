"""grad_accum_misnormalization from a log: a training loss that is a steady multiple of the
validation loss, from the start of the run.

With gradient accumulation over k micro-batches, each micro-batch loss must be divided by k
before ``backward()``; a loop that adds them (and logs the sum) takes k times too large a step
and logs a training loss k times the per-sample loss, while the evaluation, computed once per
batch, logs the real level. The ratio then holds at every evaluation from the first: 2.9x,
4.1x. Regularised training (dropout, label smoothing, mixup) also logs a training loss above the
validation loss, but the gap grows as the model learns (DeiT: 1.2x early, 3.5x late), so a run
whose log starts late is not judged. A loss summed over the batch (not the micro-batches) gives
the batch size (16-64x): past 16x it is left to divergence. The evidence rule is written out in
docs/symptoms.md.
"""

from __future__ import annotations

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import blocks, level_split, median
from trainmedic.diagnose.trace import Trace
from trainmedic.run.series import Run

__all__ = ["accumulation_ratio", "scale_step", "val_did_not_follow", "ACCUM_MIN_RATIO",
           "ACCUM_MAX_RATIO", "ACCUM_MAX_SPREAD"]

#: The training loss is at least this many times the validation loss at every evaluation ...
ACCUM_MIN_RATIO = 1.5
#: ... its median ratio at least this ...
ACCUM_MIN_MEDIAN = 1.8
#: ... and at most this (typical accumulation counts; a batch-summed loss is 16-64x) ...
ACCUM_MAX_RATIO = 16.0
#: ... and the ratios span at most this share of their median (a steady multiple) ...
ACCUM_MAX_SPREAD = 0.5
#: ... over at least this many evaluations, in a log that starts within 5% of the run.
ACCUM_MIN_EVALS = 4


def accumulation_ratio(run: Run, rank: int | None) -> tuple[np.ndarray, np.ndarray] | None:
    """(evaluation steps, training/validation loss ratios) when the rule holds, else None. The
    training level at an evaluation is the median of the 5 logged training points around it."""
    tl = Trace.of(run, "loss", rank) or Trace.of(run, "loss", None)
    vl = Trace.of(run, "val_loss", rank) or Trace.of(run, "val_loss", None)
    if tl is None or vl is None or len(vl) < ACCUM_MIN_EVALS or len(tl) < 8:
        return None
    if not (bool(np.all(tl.values > 0)) and bool(np.all(vl.values > 0))):
        return None
    last = max(int(tl.steps[-1]), int(vl.steps[-1]))
    if int(tl.steps[0]) > max(10 * tl.interval, 0.05 * last):
        return None  # an excerpt: a regularised run's gap may have grown before it
    idx = np.searchsorted(tl.steps, vl.steps)
    levels = np.array([median(tl.values[max(0, i - 2): i + 3]) for i in idx])
    r = levels / vl.values
    med = median(r)
    if not (float(r.min()) >= ACCUM_MIN_RATIO and ACCUM_MIN_MEDIAN <= med <= ACCUM_MAX_RATIO
            and float(r.max() - r.min()) <= ACCUM_MAX_SPREAD * med):
        return None
    return vl.steps, r


#: A step change of the logged training loss by this factor or more (and <= ACCUM_MAX_RATIO)
#: that the validation loss does not follow is a change of the loss's scale.
SCALE_STEP_MIN = 2.0
#: The validation loss after the step stays under this many times its level before it.
SCALE_STEP_VAL_MAX = 1.1
#: Block medians the change point is searched over.
SCALE_STEP_BLOCKS = 200


def scale_step(run: Run, rank: int | None) -> tuple[int, float] | None:
    """(onset step, factor) of a step up of the logged training loss by 2-16x (one L1 change
    point in log space, each side >= 20% of the log and >= 5 points; <= 10% of the points after
    it, and of the later half before it, past the half-way level: one clean step) while >= 3
    evaluations after it all stay under 1.1x the evaluation before it: the model did not get
    worse, the logged number changed scale (accumulation turned on without dividing, a sum
    instead of a mean)."""
    tl = Trace.of(run, "loss", rank) or Trace.of(run, "loss", None)
    vl = Trace.of(run, "val_loss", rank) or Trace.of(run, "val_loss", None)
    if tl is None or vl is None or len(tl) < 12 or not bool(np.all(tl.values > 0)):
        return None
    # Block medians (at most 200) keep the O(n^2) change-point search short on long runs.
    bl = blocks(tl.steps, np.log(tl.values), max_blocks=SCALE_STEP_BLOCKS)
    t = bl.median
    k, _ = level_split(t, min_seg=max(5, len(t) // 5))
    if k >= len(t):
        return None
    before = t[k // 2: k]  # the level just before (not the first descent)
    jump = median(t[k:]) - median(before)
    mid = median(before) + jump / 2
    if not np.log(SCALE_STEP_MIN) <= jump <= np.log(ACCUM_MAX_RATIO) or \
            float(np.mean(before > mid)) > 0.1 or float(np.mean(t[k:] < mid)) > 0.1:
        return None  # (not one clean step: class-sorted data swings between levels)
    onset = int(bl.first_step[k])
    i = int(np.searchsorted(vl.steps, onset))
    after = vl.values[i:]
    if i < 1 or after.size < 3 or float(after.max()) > SCALE_STEP_VAL_MAX * float(vl.values[i - 1]):
        return None
    return onset, float(np.exp(jump))


@register_detector("grad_accum_misnormalization", requires=("loss", "val_loss"))
def detect_grad_accum_misnormalization(run: Run) -> list[Finding] | NotRun:
    """The training loss is a steady multiple (1.8-16x, every evaluation >= 1.5x, spread <= half
    the median) of the validation loss at >= 4 evaluations, in a log that starts with the run,
    or it stepped up 2-16x mid-run while the validation loss did not follow (``scale_step``):
    the logged loss is a sum over micro-batches (warning)."""
    out: list[Finding] = []
    for rank in run.ranks():
        got = accumulation_ratio(run, rank)
        if got is None:
            step = scale_step(run, rank)
            if step is not None:
                out.append(_scale_step_finding(step[0], step[1], rank))
            continue
        steps, r = got
        k = float(median(r))
        out.append(Finding(
            symptom="grad_accum_misnormalization", severity="warning", confidence=0.6,
            onset_step=int(steps[0]), end_step=int(steps[-1]), rank=rank, metric="loss",
            summary=(f"the training loss is {k:.2g}x the validation loss at every one of "
                     f"{r.size} evaluations ({float(r.min()):.2g}x-{float(r.max()):.2g}x), "
                     f"from the start of the run: the logged training loss looks like a sum "
                     f"over ~{round(k)} micro-batches (gradient accumulation without dividing "
                     f"each loss by the count), which makes every update that many times too "
                     f"large - or the two losses are computed differently"),
            evidence=(Evidence("loss", int(steps[0]), k, 1.0,
                               note=f"median ratio of the training level (5 points around "
                                    f"each evaluation) to val_loss over {r.size} evaluations"),
                      )))
    return out


def _scale_step_finding(onset: int, factor: float, rank: int | None) -> Finding:
    return Finding(
        symptom="grad_accum_misnormalization", severity="warning", confidence=0.5,
        onset_step=onset, rank=rank, metric="loss",
        summary=(f"the logged training loss stepped up {factor:.2g}x at step {onset} and stayed "
                 f"there while the validation loss did not follow: the model did not get worse, "
                 f"the logged number changed scale - gradient accumulation switched on without "
                 f"dividing each micro-batch loss (every update that much too large), or a sum "
                 f"logged instead of a mean"),
        evidence=(Evidence("loss", onset, factor, 1.0,
                           note="median level after the change point over the level before it "
                                "(log space)"),
                  Evidence("val_loss", onset, None, None,
                           note=f">= 3 evaluations after the step, all under "
                                f"{SCALE_STEP_VAL_MAX:g}x the evaluation before it")))


def val_did_not_follow(run: Run, tr: Trace, onset: int) -> str:
    """For divergence's rise of >= 3x: why it is not the model ("" when it may be) - the
    rise is a scale step (``scale_step``) the validation loss did not follow."""
    if tr.metric != "loss" or scale_step(run, tr.rank) is None:
        return ""
    return "the validation loss did not follow: the logged training loss changed scale"
