"""Aligning two runs on one progress axis: equal steps, equal tokens seen, or equal wall time.

By step (the default) the runs are compared where both logged the metric at the very same step:
nothing is interpolated. By tokens or by time each run's progress coordinate is built from its
own measured series (cumulative ``tokens_per_s x step_time_s`` or a cumulative token counter;
cumulative ``step_time_s``; each logged row weighted by the steps since the previous one), and
run B's metric is interpolated linearly onto run A's points inside the range both runs cover,
so two runs with another batch size or speed meet at equal work or equal time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainmedic.run.series import Run, Series

__all__ = ["AXES", "Aligned", "align", "progress", "rank_for"]

AXES: tuple[str, ...] = ("step", "tokens", "time")
"""The axes ``--by`` accepts."""

#: Raw names of a cumulative token counter that some loggers write (nanoGPT-style, Megatron's
#: "consumed tokens", HF's ``num_input_tokens_seen``); preferred to integrating tokens/s.
TOKEN_COUNTERS: tuple[str, ...] = ("tokens", "num_tokens", "tokens_seen", "consumed_tokens",
                                   "num_input_tokens_seen", "total_tokens")


@dataclass(frozen=True)
class Aligned:
    """One metric of two runs at matched points of the progress axis.

    ``x`` is the axis coordinate (a step, a token count, seconds since the run's first step);
    ``steps_a`` / ``steps_b`` the steps of each run at those points (B's interpolated, rounded,
    when the axis is not the step); ``a`` / ``b`` the metric's values there.
    """

    metric: str
    axis: str
    x: np.ndarray
    steps_a: np.ndarray
    steps_b: np.ndarray
    a: np.ndarray
    b: np.ndarray

    def __len__(self) -> int:
        return int(self.x.shape[0])


def rank_for(run: Run, metric: str) -> int | None:
    """The rank a comparison reads: the rank-less series when there is one, else the lowest
    rank (rank 0 of a DDP run: the rank that logs loss and eval in most trainers)."""
    ranks = [r for (m, r), s in run.series.items() if m == metric and len(s)]
    if not ranks:
        return None
    return None if None in ranks else min(r for r in ranks if r is not None)


def _clean(run: Run, metric: str) -> Series | None:
    s = run.clean(metric, rank_for(run, metric))
    if s is None:
        return None
    s = s.finite()
    return s if len(s) else None


def _gaps(steps: np.ndarray) -> np.ndarray:
    """Steps each logged row stands for: the gap to the previous logged step. ``step_time_s``
    (and tokens/s) are per step, so a run logging every 10 steps must weigh each row by 10, or
    it seems to move 10x slower than one logging every step. The first row stands for itself
    and every step before it since step 0 (training counted from 0): a run whose first log is
    at step 10 has already spent 11 steps (a negative first step counts 1)."""
    s = np.asarray(steps, np.int64)
    return np.diff(s, prepend=min(int(s[0]), 0) - 1).astype(np.float64)


def progress(run: Run, axis: str) -> Series | None:
    """The run's progress coordinate at each step it can be computed at, or None.

    ``step``: the step itself (every step any series logged). ``tokens``: a cumulative token
    counter when the run logs one (already cumulative: used as logged), else the running sum of
    ``tokens_per_s x step_time_s x gap`` (tokens processed in the steps each logged row stands
    for, ``_gaps``). ``time``: the running sum of ``step_time_s x gap`` (seconds spent in
    steps: a pause between steps is not counted; unlogged steps are taken to last as long as
    the next logged one).
    """
    if axis == "step":
        steps = np.unique(np.concatenate([s.steps for s in run.series.values()])) \
            if run.series else np.empty(0, np.int64)
        return Series(steps, steps.astype(np.float64)) if len(steps) else None
    if axis == "tokens":
        for name in TOKEN_COUNTERS:
            s = _clean(run, name)
            if s is not None and len(s) >= 2 and bool(np.all(np.diff(s.values) >= 0)):
                return s
        rate, dt = _clean(run, "tokens_per_s"), _clean(run, "step_time_s")
        if rate is None or dt is None:
            return None
        common, ia, ib = np.intersect1d(rate.steps, dt.steps, return_indices=True)
        if len(common) < 2:
            return None
        return Series(common, np.cumsum(rate.values[ia] * dt.values[ib] * _gaps(common)))
    if axis == "time":
        dt = _clean(run, "step_time_s")
        if dt is None or len(dt) < 2:
            return None
        return Series(dt.steps, np.cumsum(dt.values * _gaps(dt.steps)))
    raise ValueError(f"axis must be one of {AXES}, got {axis!r}")


def align(run_a: Run, run_b: Run, metric: str, axis: str = "step") -> Aligned | None:
    """``metric`` of both runs at matched points of ``axis``; None when they share none."""
    sa, sb = _clean(run_a, metric), _clean(run_b, metric)
    if sa is None or sb is None:
        return None
    if axis == "step":
        common, ia, ib = np.intersect1d(sa.steps, sb.steps, return_indices=True)
        if not len(common):
            return None
        return Aligned(metric, axis, common.astype(np.float64), common, common,
                       sa.values[ia], sb.values[ib])
    pa, pb = progress(run_a, axis), progress(run_b, axis)
    if pa is None or pb is None:
        return None
    # Each point's coordinate: the progress at its step (linear between logged steps).
    xa = np.interp(sa.steps, pa.steps, pa.values, left=np.nan, right=np.nan)
    xb = np.interp(sb.steps, pb.steps, pb.values, left=np.nan, right=np.nan)
    oka, okb = np.isfinite(xa), np.isfinite(xb)
    sa_steps, va, xa = sa.steps[oka], sa.values[oka], xa[oka]
    sb_steps, vb, xb = sb.steps[okb], sb.values[okb], xb[okb]
    if len(xa) < 1 or len(xb) < 2 or not bool(np.all(np.diff(xb) > 0)):
        return None
    lo, hi = max(xa.min(), xb.min()), min(xa.max(), xb.max())
    keep = (xa >= lo) & (xa <= hi)
    if not keep.any():
        return None
    x = xa[keep]
    return Aligned(metric, axis, x, sa_steps[keep],
                   np.rint(np.interp(x, xb, sb_steps.astype(np.float64))).astype(np.int64),
                   va[keep], np.interp(x, xb, vb))
