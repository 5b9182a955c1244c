"""The ``loss_scale_collapse`` detector: an fp16 dynamic loss scale that kept falling
(overflows on most steps) until it reached a level at which the gradients underflow.

The evidence rule is written out in docs/symptoms.md; keep the two in step.
"""

from __future__ import annotations

import math

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import leading_run_length, median
from trainmedic.diagnose.trace import Trace, fmt, traces
from trainmedic.run.series import Run

__all__ = ["SCALE_FLOOR"]


#: A loss scale at or under this is collapsed whatever came before: fp16 scalers start at
#: 2^16 and work at 2^7-2^16, and fairseq aborts at 1e-4 (``--min-loss-scale``).
SCALE_FLOOR = 2.0 ** -10


def _few_scale_points(ls: Trace) -> Finding | None:
    """Fewer than 3 positive points (a text log whose scaler messages are all there is):
    collapsed when the last positive scale is <= 2^-10. A logged 0 beside a positive scale
    under 1 is a scale under the logger's rounding (fairseq prints 3 decimals), not a 0; the
    onset is the first point under 1."""
    v, st = ls.values, ls.steps
    pos = v[v > 0]
    if pos.size == 0 or float(pos[-1]) > SCALE_FLOOR:
        return None
    onset = int(st[int(np.flatnonzero(v < 1.0)[0])])
    zeros = int(np.sum(v == 0))
    note = f"; {zeros} logged as 0 (under the logger's rounding)" if zeros else ""
    return Finding(
        symptom="loss_scale_collapse", severity="error", confidence=0.8, onset_step=onset,
        rank=ls.rank, metric="loss_scale",
        summary=(f"fp16 loss scale down to {fmt(float(pos[-1]))} by step {int(st[-1])} "
                 f"(under 1 from step {onset}{note}): overflows every step, even with the "
                 f"loss scaled down, so the unscaled gradients overflow fp16"),
        evidence=(Evidence("loss_scale", int(st[-1]), float(pos[-1]), SCALE_FLOOR,
                           note="last positive scale vs 2^-10 (scalers work at 2^7-2^16)"),))


#: Overflows on this many consecutive optimizer steps (the scale halved at each) are no
#: start-up search when they begin after step 100 or from a scale <= 2^10, and they collapse
#: the scale when it ends <= 2^10 and never climbs back: the gradients overflow whatever the
#: scale (DeepSpeed stops the run at its minimum scale, 1).
EVERY_STEP_DROPS = 4
STARTUP_STEPS = 100
STARTUP_SCALE = 2.0 ** 10


def _every_step_overflow(ls: Trace) -> Finding | None:
    """The longest run of loss_scale points on consecutive steps, each half the one before
    (or less): warning when it holds >= 4 halvings, is no start-up search, ends <= 2^10 and
    the scale never climbs back above where it ended; error when it ends under 1."""
    v, st = ls.values, ls.steps
    halved = (np.diff(st) == 1) & (v[1:] > 0) & (v[1:] <= 0.5 * v[:-1] * (1 + 1e-9))
    best_a, best_n, a = 0, 0, 0
    for i, h in enumerate(halved):
        if not h:
            a = i + 1
        elif i + 1 - a > best_n:
            best_a, best_n = a, i + 1 - a
    if best_n < EVERY_STEP_DROPS:
        return None
    first, last = float(v[best_a]), float(v[best_a + best_n])
    if int(st[best_a]) < STARTUP_STEPS and first > STARTUP_SCALE:
        return None
    # A burst a working scaler climbs back from (doubling every growth interval), or one that
    # ends inside the working range, is an overflow episode, not a collapse.
    if last > STARTUP_SCALE or float(v[best_a + best_n:].max()) > last:
        return None
    onset = int(st[best_a + 1])
    return Finding(
        symptom="loss_scale_collapse", severity="error" if last < 1.0 else "warning",
        confidence=0.75, onset_step=onset, end_step=int(st[best_a + best_n]), rank=ls.rank,
        metric="loss_scale",
        summary=(f"fp16 loss scale halved on {best_n} consecutive steps from step {onset} "
                 f"({fmt(first)} -> {fmt(last)}): the gradients overflow at every step "
                 f"whatever the scale, which a working scaler's occasional skip does not do"),
        evidence=(Evidence("loss_scale", int(st[best_a + best_n]), last, first,
                           note=f"{best_n} halvings, one per optimizer step (after the "
                                f"start-up search: step >= {STARTUP_STEPS} or a scale "
                                f"<= 2^10)"),))


@register_detector("loss_scale_collapse", requires=("loss_scale",))
def detect_loss_scale_collapse(run: Run) -> list[Finding] | NotRun:
    """The fp16 loss scale ends <= 2^-10 of its peak (after the start-up run of halvings), or
    below 1: error below 1, else warning.
    A healthy GradScaler halves on overflow and doubles every ``growth_interval`` (2000) clean
    steps, so it hovers within a few powers of two of its working value."""
    out: list[Finding] = []
    ran = False
    for ls in traces(run, "loss_scale"):
        v = ls.values[ls.values > 0]
        if v.size < 3:
            few = _few_scale_points(ls)
            if few is not None:
                ran = True
                out.append(few)
            continue
        ran = True
        steps = ls.steps[ls.values > 0]
        # Reference: the working level, not the initial guess. DeepSpeed starts the scale at
        # 2^initial_scale_power (16-32) and halves it on every overflowing step until it
        # settles (typically 2^13-2^15); PyTorch's GradScaler starts at 2^16 and does the
        # same. So the peak is taken after the leading run of consecutive drops.
        settle = leading_run_length(np.diff(v) < 0)
        base_i = settle if settle < v.size - 1 else 0
        peak_i = base_i + int(np.argmax(v[base_i:]))
        peak = float(v[peak_i])
        end = median(v[-max(1, v.size // 10):])
        collapsed = end <= peak / 2 ** 10 or end < 1.0
        if not collapsed:
            out.extend(f for f in [_every_step_overflow(ls)] if f)
            continue
        after = np.flatnonzero(v[peak_i:] <= peak / 2 ** 5)
        onset = int(steps[peak_i + int(after[0])]) if after.size else int(steps[peak_i])
        sev: Severity = "error" if end < 1.0 else "warning"
        out.append(Finding(
            symptom="loss_scale_collapse", severity=sev, confidence=0.9, onset_step=onset,
            rank=ls.rank, metric="loss_scale",
            summary=(f"fp16 loss scale fell from {fmt(peak)} to {fmt(end)} "
                     f"(2^{math.log2(peak / end):.0f} times lower) from step {onset}"),
            evidence=(Evidence("loss_scale", int(steps[-1]), end, peak,
                               note="median of the last 10% of points vs the peak after the "
                                    "start-up search (the leading run of halvings)"),)))
    if not ran:
        return NotRun("needs at least 3 positive loss_scale points")
    return out
