"""Decimation: a million-point series drawn with ~2k points, spikes and NaNs kept.

A plot is a few hundred pixels wide, so drawing every point of a 1M-step series only makes the
file big and the browser slow. Plain striding (every k-th point) would drop exactly what a
diagnosis is about: a one-step loss spike. Min/max-per-bucket decimation (the "M4"/min-max
family, Jugel et al., VLDB 2014, "M4: A Visualization-Oriented Time Series Data Aggregation")
keeps, for each bucket of consecutive points, the point with the smallest and the one with the
largest value, in step order, so every extreme survives and the drawn envelope is the true one.

Non-finite values are kept apart: a bucket with no finite value becomes one NaN point (a gap
in the drawn line), and ``nonfinite_points`` lists where NaN/inf occurred so the plot can mark
them instead of silently dropping them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["decimate_minmax", "nonfinite_points", "NAN_KIND", "POS_INF_KIND", "NEG_INF_KIND"]

NAN_KIND = 0
POS_INF_KIND = 1
NEG_INF_KIND = -1


def decimate_minmax(steps: np.ndarray, values: np.ndarray,
                    max_points: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Reduce ``(steps, values)`` (steps increasing) to at most ``max_points`` points.

    Each of ``max_points // 2`` buckets of consecutive points contributes its minimum and its
    maximum finite point (one point when they coincide), in step order. A bucket with no finite
    value contributes its first step with a NaN value, which a line renderer draws as a gap.
    Series of ``max_points`` or fewer points are returned unchanged.
    """
    steps = np.asarray(steps)
    values = np.asarray(values, dtype=np.float64)
    n = int(values.shape[0])
    if max_points < 2:
        raise ValueError(f"max_points must be at least 2, got {max_points}")
    if n <= max_points:
        return steps, values
    size = -(-n // (max_points // 2))  # ceil: points per bucket
    n_full = n // size
    # Full buckets are a reshaped view (no copy); the short last bucket is done on its own.
    lo, hi, has_finite = _bucket_extremes(values[:n_full * size].reshape(n_full, size))
    base = np.arange(n_full, dtype=np.int64) * size
    if n_full * size < n:
        t_lo, t_hi, t_has = _bucket_extremes(values[n_full * size:].reshape(1, -1))
        lo, hi = np.concatenate([lo, t_lo]), np.concatenate([hi, t_hi])
        has_finite = np.concatenate([has_finite, t_has])
        base = np.concatenate([base, [n_full * size]])
    first = np.minimum(lo, hi)
    second = np.maximum(lo, hi)
    idx = np.stack([base + first, base + second], axis=1).ravel()
    keep = np.ones(idx.shape[0], dtype=bool)
    keep[1::2] = second != first  # one point when min and max are the same point
    idx = idx[keep]
    out_values = values[idx].copy()
    empty = np.repeat(~has_finite, 2)[keep]
    out_values[empty] = np.nan
    return steps[idx], out_values


def _bucket_extremes(grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: index of the smallest and of the largest finite value, and whether the row
    has any finite value (indices are 0 for a row without one)."""
    rows = np.arange(grid.shape[0])
    lo = grid.argmin(axis=1)
    hi = grid.argmax(axis=1)
    # Fast path: argmin/argmax land on a NaN or inf only when the row holds one.
    if np.isfinite(grid[rows, lo]).all() and np.isfinite(grid[rows, hi]).all():
        return lo, hi, np.ones(grid.shape[0], dtype=bool)
    finite = np.isfinite(grid)
    lo = np.where(finite, grid, np.inf).argmin(axis=1)
    hi = np.where(finite, grid, -np.inf).argmax(axis=1)
    return lo, hi, finite.any(axis=1)


def nonfinite_points(steps: np.ndarray, values: np.ndarray,
                     max_markers: int = 400) -> tuple[np.ndarray, np.ndarray, int]:
    """Where the series is NaN or ±inf: ``(steps, kinds, total)``.

    ``kinds`` holds ``NAN_KIND``, ``POS_INF_KIND`` or ``NEG_INF_KIND``; ``total`` is the number of
    non-finite points before thinning. With more than ``max_markers`` of them, one marker per
    kind is kept per bucket of the step range (a marker per pixel column is all a plot can show).
    """
    steps = np.asarray(steps)
    values = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(values)
    total = int(bad.sum())
    if total == 0:
        return steps[:0], np.zeros(0, dtype=np.int8), 0
    s = steps[bad]
    v = values[bad]
    kinds = np.where(np.isnan(v), NAN_KIND,
                     np.where(v > 0, POS_INF_KIND, NEG_INF_KIND)).astype(np.int8)
    if total <= max_markers:
        return s, kinds, total
    lo, hi = float(steps.min()), float(steps.max())
    bucket = ((s - lo) / max(hi - lo, 1.0) * (max_markers // 3)).astype(np.int64)
    _, first = np.unique(bucket * 3 + (kinds + 1), return_index=True)
    first.sort()
    return s[first], kinds[first], total
