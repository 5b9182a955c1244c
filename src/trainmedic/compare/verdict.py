"""The verdict: which run is better on the primary metric, by how much, and how sure.

The primary metric is ``val_loss`` when both runs have it at common points, else ``loss``;
lower is better. It is judged at the end of the aligned window (the last fifth of the aligned
points, at least 3): where the runs finished, not averaged over a warm-up in which they
always differ. "Sure" means the bootstrap interval of the difference there excludes zero.
The verdict says it cannot tell when the runs share fewer than 3 points of the metric, and
warns when the aligned window covers less than half of either run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainmedic.compare.align import Aligned
from trainmedic.compare.deltas import BOOTSTRAP_RESAMPLES, Interval, bootstrap

__all__ = ["Verdict", "judge", "low_overlap", "PRIMARY_METRICS", "MIN_POINTS"]

PRIMARY_METRICS: tuple[str, ...] = ("val_loss", "loss")
"""Tried in order; lower is better for both."""
MIN_POINTS = 3
"""Fewer aligned points than this: no verdict."""
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
    """The label of the better run when the interval excludes zero, else None."""
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
    """``compared``, ``no_common_metric`` or ``too_few_points``."""


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
    """The verdict from ``{metric: (aligned, A's own x span, B's own x span)}``."""
    metric = next((m for m in PRIMARY_METRICS if m in candidates
                   and len(candidates[m][0]) >= MIN_POINTS), None)
    if metric is None:
        have = next((m for m in PRIMARY_METRICS if m in candidates), None)
        if have is None:
            return Verdict(a, b, None, None, False, 0, None, reason="no_common_metric")
        n = len(candidates[have][0])
        return Verdict(a, b, have, None, False, n, None, reason="too_few_points")
    aligned, span_a, span_b = candidates[metric]
    n = len(aligned)
    k = min(n, max(MIN_POINTS, int(math.ceil(n * _END_SHARE))))
    va, vb = aligned.a[-k:], aligned.b[-k:]
    a_end, b_end = float(np.mean(va)), float(np.mean(vb))
    delta = b_end - a_end
    interval = bootstrap(va, vb, level=level, resamples=resamples, seed=seed)
    sure = interval is not None and interval.excludes(0.0)
    better = (b if delta < 0 else a) if sure else None
    return Verdict(a, b, metric, better, sure, k,
                   (int(aligned.steps_a[-k]), int(aligned.steps_a[-1])), a_end, b_end, delta,
                   delta / a_end if a_end else math.nan, interval,
                   _span_share(aligned, span_a, span_b))


def low_overlap(verdict: Verdict) -> bool:
    """True when the aligned window covers less than half of one run's span."""
    return bool(math.isfinite(verdict.overlap) and verdict.overlap < _LOW_OVERLAP)
