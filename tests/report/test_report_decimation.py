"""Min/max decimation keeps every spike; non-finite points are found, not dropped."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmedic.report.decimation import (
    NAN_KIND,
    NEG_INF_KIND,
    POS_INF_KIND,
    decimate_minmax,
    nonfinite_points,
)


def test_single_point_spike_survives() -> None:
    n = 1_000_000
    steps = np.arange(n)
    values = np.full(n, 2.0)
    values[654_321] = 50.0
    values[123_456] = -7.0
    s, v = decimate_minmax(steps, values, 2000)
    assert len(s) <= 2000
    assert v.max() == 50.0 and s[v.argmax()] == 654_321
    assert v.min() == -7.0 and s[v.argmin()] == 123_456
    assert np.all(np.diff(s) > 0)


def test_short_series_unchanged() -> None:
    steps, values = np.arange(10), np.linspace(0, 1, 10)
    s, v = decimate_minmax(steps, values, 2000)
    assert s is steps and v is values


def test_all_nonfinite_bucket_becomes_a_gap() -> None:
    n = 10_000
    values = np.ones(n)
    values[5000:6000] = np.nan
    s, v = decimate_minmax(np.arange(n), values, 100)
    gaps = s[np.isnan(v)]
    assert len(gaps) > 0 and gaps.min() >= 5000 and gaps.max() < 6000
    assert np.isfinite(v[s < 4900]).all()


def test_bad_max_points() -> None:
    with pytest.raises(ValueError):
        decimate_minmax(np.arange(5), np.ones(5), 1)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 5000), max_points=st.integers(2, 400), seed=st.integers(0, 10**6))
def test_envelope_preserved(n: int, max_points: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(n)
    values[rng.random(n) < 0.05] = np.nan
    values[rng.random(n) < 0.01] = np.inf
    values[rng.random(n) < 0.01] = -np.inf
    steps = np.cumsum(rng.integers(1, 4, n))
    s, v = decimate_minmax(steps, values, max_points)
    assert len(s) == n if n <= max_points else len(s) <= max_points
    assert np.all(np.diff(s) > 0)
    fin = values[np.isfinite(values)]
    out = v[np.isfinite(v)]
    if fin.size:
        assert out.max() == fin.max() and out.min() == fin.min()
    assert set(s.tolist()) <= set(steps.tolist())
    if n > max_points:  # inf is not kept as a value: it gets a marker instead
        assert not np.isinf(v).any()


def test_nonfinite_points_kinds_and_thinning() -> None:
    steps = np.arange(10)
    values = np.array([1, np.nan, 2, np.inf, -np.inf, 3, 4, 5, np.nan, 6], dtype=float)
    s, k, total = nonfinite_points(steps, values)
    assert total == 4
    assert s.tolist() == [1, 3, 4, 8]
    assert k.tolist() == [NAN_KIND, POS_INF_KIND, NEG_INF_KIND, NAN_KIND]

    n = 1_000_000
    values = np.ones(n)
    values[::3] = np.nan
    values[7] = np.inf
    s, k, total = nonfinite_points(np.arange(n), values, max_markers=300)
    assert total == len(range(0, n, 3)) + 1
    assert len(s) <= 300
    assert POS_INF_KIND in k.tolist()  # the lone inf is not thinned away by the NaNs
    assert np.all(np.diff(s) >= 0)


def test_nonfinite_points_none() -> None:
    s, k, total = nonfinite_points(np.arange(3), np.ones(3))
    assert total == 0 and len(s) == 0 and len(k) == 0
