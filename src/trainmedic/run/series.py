"""The ``Run``: every metric of a training run as columnar float series over steps, per rank.

A ``Run`` is what every importer produces and what every detector consumes. It is the same
type whether it comes from the live watcher's store or from a log file, so a detector written
once works on both.

Series keep the order in which the points were logged (``raw``), because the order itself is
evidence: a step that goes back is a resume. Detectors normally want the ``clean`` view: steps
strictly increasing, and where a step was logged more than once the *last* value wins (after a
resume the re-run steps replace the abandoned ones).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Series", "Run", "ImportNote"]


@dataclass(frozen=True)
class Series:
    """One metric on one rank: ``values[i]`` was logged at ``steps[i]``, in log order.

    ``steps`` is int64 and ``values`` float64; NaN and inf are kept as they were logged.
    """

    steps: np.ndarray
    values: np.ndarray
    _monotonic: bool | None = field(default=None, init=False, repr=False, compare=False)
    """Cached ``is_monotonic`` (the arrays are not modified after construction)."""

    def __post_init__(self) -> None:
        steps = np.asarray(self.steps, dtype=np.int64)
        values = np.asarray(self.values, dtype=np.float64)
        if steps.ndim != 1 or values.ndim != 1 or steps.shape != values.shape:
            raise ValueError(
                f"Series needs two 1-D arrays of one length, got steps {steps.shape} "
                f"and values {values.shape}"
            )
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "values", values)

    def __len__(self) -> int:
        return int(self.steps.shape[0])

    @property
    def is_monotonic(self) -> bool:
        """True when steps strictly increase in log order (no repeats, no going back)."""
        if self._monotonic is None:
            # Every detector asks (through clean()); computed once per series.
            object.__setattr__(self, "_monotonic",
                               bool(len(self) < 2 or np.all(np.diff(self.steps) > 0)))
        return bool(self._monotonic)

    def clean(self) -> Series:
        """Steps strictly increasing; for a step logged more than once the last value wins."""
        if self.is_monotonic:
            return self
        # Reverse so that np.unique's "first occurrence" is the last one logged.
        rev_steps = self.steps[::-1]
        uniq, idx = np.unique(rev_steps, return_index=True)
        return Series(uniq, self.values[::-1][idx])

    def finite(self) -> Series:
        """Only the points whose value is finite."""
        mask = np.isfinite(self.values)
        if bool(mask.all()):
            return self
        return Series(self.steps[mask], self.values[mask])


@dataclass(frozen=True)
class ImportNote:
    """Something an importer noticed and tolerated, kept so reports can say it.

    ``kind`` is a short code (``skipped_line``, ``nan_filter``, ``truncated_last_line``,
    ``duplicate_step``, ...); ``detail`` is a sentence for humans.
    """

    kind: str
    detail: str
    path: str = ""
    line: int | None = None


@dataclass(frozen=True)
class RunEvent:
    """Something that happened at one step and is not a number: a non-finite step localized
    by the NaN guard (``kind="nonfinite"``), a finding raised live, a stop requested.

    ``data`` is the JSON object the writer recorded (e.g. ``{"module": "blocks.0.attn",
    "where": "forward", ...}`` for ``nonfinite``).
    """

    step: int
    kind: str
    data: Mapping[str, Any]
    rank: int | None = None


@dataclass
class Run:
    """All series of one training run, keyed by ``(metric, rank)``.

    ``rank`` is ``None`` for a single-process run (or a source that does not say its rank).
    ``meta`` holds facts about the run that are not series, e.g. ``max_steps`` from a
    trainer_state.json, ``logging_nan_inf_filter`` when known, or the framework the log came
    from. ``notes`` holds what the importers tolerated.
    """

    source: str
    series: dict[tuple[str, int | None], Series] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    notes: list[ImportNote] = field(default_factory=list)
    events: list[RunEvent] = field(default_factory=list)

    # -- construction -----------------------------------------------------------------
    def add(self, metric: str, steps: Iterable[int] | np.ndarray,
            values: Iterable[float] | np.ndarray, rank: int | None = None) -> None:
        """Add (or append to) the series of ``metric`` on ``rank``."""
        new = Series(np.asarray(steps), np.asarray(values))
        key = (metric, rank)
        old = self.series.get(key)
        if old is not None:
            new = Series(np.concatenate([old.steps, new.steps]),
                         np.concatenate([old.values, new.values]))
        self.series[key] = new

    def merge(self, other: Run) -> None:
        """Fold another run's series, meta and notes into this one."""
        for (metric, rank), s in other.series.items():
            self.add(metric, s.steps, s.values, rank)
        for k, v in other.meta.items():
            self.meta.setdefault(k, v)
        self.notes.extend(other.notes)
        self.events.extend(other.events)

    def events_of(self, kind: str, rank: int | None = None, *,
                  any_rank: bool = True) -> list[RunEvent]:
        """The events of ``kind`` (on ``rank``, or on every rank when ``any_rank``), by step."""
        out = [e for e in self.events if e.kind == kind and (any_rank or e.rank == rank)]
        return sorted(out, key=lambda e: e.step)

    # -- queries ----------------------------------------------------------------------
    def metrics(self) -> list[str]:
        """Every metric name present on any rank, sorted."""
        return sorted({m for m, _ in self.series})

    def ranks(self) -> list[int | None]:
        """Every rank present; ``None`` (single process) first."""
        ranks = {r for _, r in self.series}
        return sorted(ranks, key=lambda r: -1 if r is None else r)

    def has(self, metric: str) -> bool:
        """True when ``metric`` has at least one point on some rank."""
        return any(m == metric and len(s) > 0 for (m, _), s in self.series.items())

    def get(self, metric: str, rank: int | None = None) -> Series | None:
        """The raw series of ``metric`` on ``rank`` (log order), or None."""
        return self.series.get((metric, rank))

    def clean(self, metric: str, rank: int | None = None) -> Series | None:
        """The clean series (steps strictly increasing, last value wins), or None."""
        s = self.series.get((metric, rank))
        return None if s is None else s.clean()

    def per_rank(self, metric: str) -> Mapping[int | None, Series]:
        """``{rank: raw series}`` for ``metric``."""
        return {r: s for (m, r), s in self.series.items() if m == metric}

    @property
    def num_points(self) -> int:
        return sum(len(s) for s in self.series.values())

    def last_step(self) -> int | None:
        """The largest step logged in any series."""
        tops = [int(s.steps.max()) for s in self.series.values() if len(s)]
        return max(tops) if tops else None
