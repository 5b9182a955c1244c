"""The verdict: does B end lower than A on the primary metric, by how much, and how sure.

The primary metric is ``val_loss`` when both runs have it at ``MIN_END_POINTS`` common points or
more, else ``loss`` when that has them, else whichever of the two has at least 3; lower is
better. It is judged at the end of the aligned window (the last fifth of the aligned points,
at least ``MIN_END_POINTS``): where the runs finished, not averaged over a warm-up in which
they always differ. The interval of the end difference is a Student-t interval with the
effective number of points of AR(1) noise (deltas.t_interval), its noise read from the last
half of the aligned difference series, so a smoothed (EMA) logged loss does not pass for many
independent points. "Sure" means that interval excludes zero *and* the end window holds at
least ``MIN_END_POINTS`` points: with fewer, the noise itself cannot be estimated well enough
(with 3 points a nominal 5% test called noise "sure" ~60% of the time).

What "sure" means: the difference exceeds *these runs'* own step-to-step noise. With one run
per side it cannot separate the run-to-run (seed-to-seed) spread: two seeds of one config
often end further apart than their step noise. ``seed_spread_measured`` is therefore False,
and the reports say "beyond this run's own noise", not a final "better"; repeat each side
with another seed to measure that spread.
The verdict says it cannot tell when the runs share fewer than 3 points of the metric, and
warns when the aligned window covers less than half of either run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainmedic.compare.align import Aligned
from trainmedic.compare.deltas import BOOTSTRAP_RESAMPLES, Interval, parting_index, t_interval

__all__ = ["Verdict", "judge", "low_overlap", "PRIMARY_METRICS", "MIN_POINTS",
           "MIN_END_POINTS"]

PRIMARY_METRICS: tuple[str, ...] = ("val_loss", "loss")
"""Tried in order; lower is better for both."""
MIN_POINTS = 3
"""Fewer aligned points than this: no verdict."""
MIN_END_POINTS = 10
"""Fewer end-window points than this: a difference and interval, but never "sure"."""
#: The end window is this share of the aligned points.
_END_SHARE = 0.2
#: Below this share of a run's own span covered by the aligned window, the verdict warns.
_LOW_OVERLAP = 0.5


@dataclass(frozen=True)
class Verdict:
    """How B compares with A on ``metric`` at the end of the aligned window.

    ``a_end`` / ``b_end`` / ``delta`` / ``relative`` are measured (means of the logged values
    over the end window); ``interval`` is estimated (moving-block bootstrap of ``delta``).
    """

    a: str
    b: str
    metric: str | None
    better: str | None
    """The label of the run lower on ``metric`` when ``sure``, else None. Lower beyond this
    run's own noise, not yet beyond seed-to-seed spread (``seed_spread_measured``)."""
    sure: bool
    points: int
    """Aligned points in the end window."""
    steps: tuple[int, int] | None
    """First and last step of A in the end window."""
    a_end: float = math.nan
    b_end: float = math.nan
    delta: float = math.nan
    relative: float = math.nan
    interval: Interval | None = None
    overlap: float = math.nan
    """The smaller of the two runs' shares of their own span covered by the aligned window."""
    reason: str = "compared"
    """``compared``, ``few_end_points`` (compared, but under ``MIN_END_POINTS`` in the end
    window: never sure), ``no_common_metric`` or ``too_few_points``."""
    runs_per_side: int = 1
    """Runs behind each side (one: this comparison takes one run per label)."""
    seed_spread_measured: bool = False
    """Whether the run-to-run spread entered the interval (it cannot with one run a side)."""


def _span_share(aligned: Aligned, span_a: tuple[float, float], span_b: tuple[float, float]
                ) -> float:
    lo, hi = float(aligned.x.min()), float(aligned.x.max())
    shares = []
    for s0, s1 in (span_a, span_b):
        shares.append(1.0 if s1 <= s0 else min(1.0, max(0.0, (hi - lo) / (s1 - s0))))
    return min(shares)


def judge(a: str, b: str, candidates: dict[str, tuple[Aligned, tuple[float, float],
                                                        tuple[float, float]]], *,
          level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> Verdict:
    """The verdict from ``{metric: (aligned, A's own x span, B's own x span)}``.

    ``resamples`` and ``seed`` are accepted for symmetry with the metric intervals; the
    verdict's t interval needs neither."""
    del resamples, seed
    metric = next((m for least in (MIN_END_POINTS, MIN_POINTS) for m in PRIMARY_METRICS
                   if m in candidates and len(candidates[m][0]) >= least), None)
    if metric is None:
        have = next((m for m in PRIMARY_METRICS if m in candidates), None)
        if have is None:
            return Verdict(a, b, None, None, False, 0, None, reason="no_common_metric")
        n = len(candidates[have][0])
        return Verdict(a, b, have, None, False, n, None, reason="too_few_points")
    aligned, span_a, span_b = candidates[metric]
    n = len(aligned)
    k = min(n, max(MIN_END_POINTS, int(math.ceil(n * _END_SHARE))))
    va, vb = aligned.a[-k:], aligned.b[-k:]
    a_end, b_end = float(np.mean(va)), float(np.mean(vb))
    delta = b_end - a_end
    d = aligned.b - aligned.a
    # The noise level is read from the end window itself (a longer stretch would take a
    # change between the runs before the window for noise); its autocorrelation may be lifted
    # by the last half of the points (at least twice the window), which a short window
    # underestimates.
    # The longer stretch starts after the runs part (a change between them is no noise).
    first, _ = parting_index(aligned.a, aligned.b)
    start = max(n - max(2 * k, n // 2), first if first is not None else 0)
    interval = t_interval(d[-k:], noise_from=d[start:] if n - start > k else None,
                          level=level, scale=float(max(np.abs(va).max(), np.abs(vb).max())))
    enough = k >= MIN_END_POINTS
    sure = enough and interval is not None and interval.excludes(0.0)
    better = (b if delta < 0 else a) if sure else None
    return Verdict(a, b, metric, better, sure, k,
                   (int(aligned.steps_a[-k]), int(aligned.steps_a[-1])), a_end, b_end, delta,
                   delta / a_end if a_end else math.nan, interval,
                   _span_share(aligned, span_a, span_b),
                   "compared" if enough else "few_end_points")


def low_overlap(verdict: Verdict) -> bool:
    """True when the aligned window covers less than half of one run's span."""
    return bool(math.isfinite(verdict.overlap) and verdict.overlap < _LOW_OVERLAP)
