"""A ``Trace``: one metric on one rank, in the shape detectors want.

Detectors ask the same questions of every series: the clean (strictly increasing) steps, the
finite points only, the level near a step, and how the logging was spaced. ``Trace`` answers
them once so each detector stays a short statement of its rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainmedic.diagnose.stats import median
from trainmedic.numbers import fmt_num
from trainmedic.run.series import Run

__all__ = ["Trace", "traces", "fmt"]


def fmt(x: float | None) -> str:
    """A number for a summary line: :func:`trainmedic.numbers.fmt_num`, the one formatter."""
    return fmt_num(x)


@dataclass(frozen=True)
class Trace:
    """The clean series of ``metric`` on ``rank``: ``all_*`` keep non-finite points, the plain
    ``steps``/``values`` hold only the finite ones."""

    metric: str
    rank: int | None
    all_steps: np.ndarray
    all_values: np.ndarray
    steps: np.ndarray
    values: np.ndarray

    @classmethod
    def of(cls, run: Run, metric: str, rank: int | None = None) -> Trace | None:
        s = run.clean(metric, rank)
        if s is None or len(s) == 0:
            return None
        f = s.finite()
        return cls(metric, rank, s.steps, s.values, f.steps, f.values)

    def __len__(self) -> int:
        return int(self.steps.shape[0])

    @property
    def span(self) -> int:
        """Steps from the first to the last logged point (0 for one point)."""
        if self.all_steps.size == 0:
            return 0
        return int(self.all_steps[-1] - self.all_steps[0])

    @property
    def interval(self) -> float:
        """The median spacing between logged steps (1.0 when it cannot be told)."""
        if self.all_steps.size < 2:
            return 1.0
        return float(max(1.0, median(np.diff(self.all_steps))))

    def index_at(self, step: int) -> int:
        """Index of the first finite point at or after ``step`` (clamped to the last one)."""
        i = int(np.searchsorted(self.steps, step, side="left"))
        return min(i, len(self) - 1)

    def value_at(self, step: int) -> float | None:
        """The finite value logged at ``step``, or at the nearest logged step before it."""
        if len(self) == 0:
            return None
        i = int(np.searchsorted(self.steps, step, side="right")) - 1
        return float(self.values[max(i, 0)])

    def level(self, lo: int, hi: int) -> float | None:
        """Median of the finite values with ``lo <= step <= hi`` (None when there are none)."""
        a = int(np.searchsorted(self.steps, lo, side="left"))
        b = int(np.searchsorted(self.steps, hi, side="right"))
        if b <= a:
            return None
        return median(self.values[a:b])


def traces(run: Run, metric: str, *, min_points: int = 0) -> list[Trace]:
    """One ``Trace`` per rank on which ``metric`` is logged with at least ``min_points``
    finite points (0: every rank that logs it, even all-NaN, for the non-finite detectors).

    A detector that gets an empty list returns ``NotRun`` saying how many points it needs.
    """
    out = []
    for rank in run.ranks():
        t = Trace.of(run, metric, rank)
        if t is not None and len(t) >= min_points:
            out.append(t)
    return out
