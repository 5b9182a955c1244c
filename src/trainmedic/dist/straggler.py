"""Cross-rank straggler scores from each rank's recent step times (its heartbeats).

The score is NVIDIA Resiliency Extension's *relative performance score*
(nvidia_resiliency_ext/straggler/reporting.py, ``ReportGenerator._compute_sections_perf_scores``:
"reference median time / median time on this rank", the reference being the minimum median
over ranks): 1.0 for the fastest rank, 0.5 for a rank twice as slow; a rank under 0.75 (its
``identify_stragglers`` default threshold) is a straggler. The ratio of each rank's median to
the median over ranks is given beside it.

Under DDP the gradient all-reduce makes every rank's step time the slowest rank's, so equal
scores do not clear a rank: the live watcher's ``data_time_s`` and ``compute_time_s``
(``trainmedic diagnose``'s straggler detector) name a slow rank in a healthy run. Here the
scores matter for ranks that step on their own (no sync every step) and for a hang: the
rank whose last steps slowed down before everything stopped.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence

__all__ = ["RELATIVE_THRESHOLD", "StragglerScore", "straggler_scores"]

#: nvidia-resiliency-ext's default threshold on the relative score.
RELATIVE_THRESHOLD = 0.75
_MIN_STEPS = 3


@dataclasses.dataclass(frozen=True)
class StragglerScore:
    rank: int
    median_step_time_s: float
    """Measured: the median of the rank's recent step times (from its heartbeat)."""
    steps: int
    relative_score: float
    """min over ranks of the median / this rank's median (1.0 best)."""
    ratio_to_median: float
    """This rank's median / the median of the ranks' medians."""

    @property
    def straggler(self) -> bool:
        return self.relative_score < RELATIVE_THRESHOLD


def straggler_scores(step_times_s: Mapping[int, Sequence[float]]) -> list[StragglerScore]:
    """Scores for the ranks with at least 3 positive step times; empty with fewer than two
    such ranks (nothing to compare)."""
    medians = {r: (statistics.median(t), len(t)) for r, times in step_times_s.items()
               if len(t := [float(x) for x in times if x is not None and x > 0]) >= _MIN_STEPS}
    if len(medians) < 2:
        return []
    best = min(m for m, _ in medians.values())
    mid = statistics.median(m for m, _ in medians.values())
    return [StragglerScore(rank=r, median_step_time_s=m, steps=n, relative_score=best / m,
                           ratio_to_median=m / mid)
            for r, (m, n) in sorted(medians.items())]
