"""Rules for logs too short for the level rules (5-11 points: an issue excerpt, a few epochs):
a series judged by its shape alone, a tail that jumped far above everything before it, or
that climbed to a new high at each of its last points, or a loss identical at every point.

The evidence rules are written out in docs/symptoms.md; keep the two in step.
"""

from __future__ import annotations

import math

import numpy as np

from trainmedic.diagnose.detectors.stuck import STUCK_MAX_RESOLUTION, stuck_resolution
from trainmedic.diagnose.finding import Evidence, Finding
from trainmedic.diagnose.stats import median
from trainmedic.diagnose.trace import Trace, fmt

__all__ = ["jumped_tail", "short_divergence", "climbing_tail", "frozen_short", "towering_points",
           "SHORT_MIN_POINTS", "SHORT_RISE_RATIO", "TOWER_RATIO"]

#: Fewer points than this are not judged at all; the level rules start at 8-10.
SHORT_MIN_POINTS = 5
#: A short loss log diverged when its last >= 2 points are each >= 10x every point before it
#: (the level rules' "past 10x, elevated whatever the noise").
SHORT_RISE_RATIO = 10.0


def jumped_tail(values: np.ndarray, ratio: float, min_before: int = 3) -> int:
    """The length k >= 2 of the longest tail whose every point is >= ``ratio`` x every point
    before it (>= ``min_before`` of them, all finite and > 0); +inf counts as high, NaN ends
    the search. 0 when there is none."""
    v = np.asarray(values, dtype=np.float64)
    if bool(np.any(np.isnan(v))) or bool(np.any(v <= 0)):
        return 0
    for k in range(v.size - min_before, 1, -1):
        before = v[:-k]
        if not bool(np.all(np.isfinite(before))):
            continue
        if float(v[-k:].min()) >= ratio * float(before.max()):
            return k
    return 0


def short_divergence(tr: Trace) -> Finding | None:
    """A loss log of 5-7 points whose last >= 2 points are each >= 10x every earlier point:
    the run blew up and did not come back (error; onset at the first of them)."""
    keep = ~np.isnan(tr.all_values)  # +inf stays: a loss that overflowed is high
    v, st = tr.all_values[keep], tr.all_steps[keep]
    if not SHORT_MIN_POINTS <= len(v) < 8:
        return None
    k = jumped_tail(v, SHORT_RISE_RATIO)
    if k < 2:
        return None
    before = float(v[:-k].max())
    peak = float(v[-k:].max())
    onset = int(st[len(v) - k])
    times = f"{peak / before:.3g}x" if math.isfinite(peak) else "to inf"
    return Finding(
        symptom="divergence", severity="error", confidence=0.7, onset_step=onset,
        end_step=int(st[-1]), rank=tr.rank, metric=tr.metric,
        summary=(f"{tr.metric} jumped {times} at step {onset} ({fmt(before)} -> {fmt(peak)}) "
                 f"and stayed >= {SHORT_RISE_RATIO:.0f}x above every earlier point for the "
                 f"last {k} of {len(v)} logged points"),
        evidence=(Evidence(tr.metric, int(st[-1]), float(v[-1]), before,
                           note=f"last point vs the highest of the {len(v) - k} before the "
                                f"jump (a log of {len(v)} points: judged by its shape)"),))


#: A short loss log (< 12 finite points, too few blocks for the level rules to see a rise at
#: its end) whose last >= 3 points each rose to a new high ...
CLIMB_POINTS = 3
CLIMB_MAX_POINTS = 12
#: ... ending >= 1.5x the median of the points before the climb (the level rules' ratio);
#: an error from 3x (theirs too).
CLIMB_RATIO = 1.5
#: ... and, in a short log, >= this many times the lowest point before the climb.
CLIMB_OVER_BEST = 2.0
CLIMB_ERROR_RATIO = 3.0


def climbing_tail(tr: Trace | None, *, any_length: bool = False) -> Finding | None:
    """A loss log of 5-11 finite points whose last >= 3 points each rose above the one before,
    ending >= 1.5x the median before them and >= 2x the lowest point before the climb; or,
    with ``any_length``, a log of any length from 5 whose last >= 3 points each rose above the
    one before and above every earlier point, ending >= 1.5x the median before them: the run
    is diverging at the end of the log (warning; error from 3x).
    Onset: the first point of the climb. A longer log's level rule can miss such a climb when
    its curve is smooth (an EMA-smoothed loss): the block noise it measures is then the
    curve's own bend, and 5 of those sigmas exceed the rise; three new all-time highs in a row
    at the end of a training log do not happen by noise."""
    top = None if any_length else CLIMB_MAX_POINTS
    if tr is None or len(tr) < SHORT_MIN_POINTS or (top is not None and len(tr) >= top) or \
            not bool(np.all(tr.values > 0)):
        return None
    v, st = tr.values, tr.steps
    # A long log's climb must set a new high at every point (its noise could make three rises
    # at the end); in a short log the first points are the run's start, high by nature, so
    # the climb must instead end >= 2x the lowest point before it (back well above its best).
    new_highs = any_length
    k = 0
    while k + 1 < len(v) - 2 and v[-k - 1] > v[-k - 2] and (
            not new_highs or v[-k - 1] > v[:-k - 1].max()):
        k += 1
    before = median(v[:-k]) if k else 0.0
    if k < CLIMB_POINTS or v[-1] < CLIMB_RATIO * before or \
            (not new_highs and v[-1] < CLIMB_OVER_BEST * float(v[-k - 1])):
        return None
    onset, ratio = int(st[len(v) - k]), float(v[-1]) / before
    what = "every one a new high" if new_highs else \
        f"{float(v[-1]) / float(v[-k - 1]):.3g}x the lowest point before them"
    return Finding(
        symptom="divergence", severity="error" if ratio >= CLIMB_ERROR_RATIO else "warning",
        confidence=0.6,
        onset_step=onset, end_step=int(st[-1]), rank=tr.rank, metric=tr.metric,
        summary=(f"{tr.metric} rose at each of the last {k} of {len(v)} logged points, "
                 f"{what}, to {ratio:.3g}x the median before the climb "
                 f"({fmt(before)} -> {fmt(float(v[-1]))}, from step {onset})"),
        evidence=(Evidence(tr.metric, int(st[-1]), float(v[-1]), before,
                           note=f"last point vs the median of the {len(v) - k} points before "
                                f"the climb (a log of {len(v)} points: judged by its shape)"),))


def frozen_short(tr: Trace) -> Finding | None:
    """A loss log of 5-7 points, every one the same to the last logged digit, written with
    digits that could show a 0.1% change (``stuck``'s resolution rule: "0.35977894" five
    epochs running; not "0.0012", a converged loss rounded): the weights do not change, or
    the logger repeats one number. Warning (the longer logs are ``loss_progress``'s)."""
    v = tr.values
    if not SHORT_MIN_POINTS <= len(v) < 8 or float(np.ptp(v)) != 0.0 or float(v[0]) == 0.0:
        return None
    res = stuck_resolution(v)
    if not 0.0 < res <= STUCK_MAX_RESOLUTION * abs(float(v[0])):
        return None
    return Finding(
        symptom="flat_loss", severity="warning", confidence=0.6, onset_step=int(tr.steps[0]),
        end_step=int(tr.steps[-1]), rank=tr.rank, metric=tr.metric,
        summary=(f"{tr.metric} is exactly {fmt(float(v[0]))} at every one of its {len(v)} "
                 f"logged points: a training loss moves between epochs or batches; the "
                 f"weights are not changing (or the logger repeats one number)"),
        evidence=(Evidence(tr.metric, int(tr.steps[-1]), float(v[-1]), float(v[0]),
                           note=f"{len(v)} identical values, written to {res:g}"),))


#: A point this many times above every other point of the log (but at most two such) is a
#: spike whatever the noise: the robust z of a short, noisy batch loss (0.12-0.83 per step)
#: cannot reach 8 for a 14x jump, yet no batch of a healthy run lands 10x above the highest
#: of all the others.
TOWER_RATIO = 10.0
#: At most this many such points: more are the log's own heavy tail, not isolated events.
TOWER_MAX = 2


def towering_points(values: np.ndarray, *, mid_run: bool = False) -> list[int]:
    """Indices of the (at most 2) points >= 10x every other point, each after >= 2 others
    (a log's first points are its start, high by nature), or anywhere in a log that starts
    ``mid_run`` (an excerpt: its first point is no start). Positive finite values only; []
    for fewer than 5 points or when more than 2 points stand that high."""
    v = np.asarray(values, dtype=np.float64)
    if v.size < SHORT_MIN_POINTS or not bool(np.all(np.isfinite(v) & (v > 0))):
        return []
    high = v >= TOWER_RATIO * median(v)
    if not 0 < int(high.sum()) <= TOWER_MAX:
        return []
    rest_max = float(v[~high].max())
    before = np.cumsum(~high)
    return [int(i) for i in np.flatnonzero(high)
            if v[i] >= TOWER_RATIO * rest_max and (mid_run or before[i] >= 2)]
