"""The robust statistics the detectors share."""

from __future__ import annotations

import time

import numpy as np

from trainmedic.diagnose.stats import (
    blocks,
    diff_sigma,
    level_split,
    log_if_positive,
    median,
    robust_sigma,
    row_median,
    theil_sen,
    trailing_reference,
    true_runs,
)


def test_median_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 10, 1001):
        x = rng.standard_normal(n)
        assert median(x) == np.median(x)
    g = rng.standard_normal((7, 6))
    assert np.allclose(row_median(g), np.median(g, axis=1))
    assert np.isnan(median(np.array([])))


def test_robust_sigma_ignores_outliers() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(10_000)
    x[:500] = 1e6
    assert 0.9 < robust_sigma(x) < 1.2
    trend = np.linspace(0, 1000, 10_000) + rng.standard_normal(10_000)
    assert 0.9 < diff_sigma(trend) < 1.1


def test_trailing_reference_exact_and_blocked() -> None:
    x = np.arange(100, dtype=float)
    ref, sig = trailing_reference(x, 10)
    assert np.isnan(ref[:5]).all()
    assert ref[50] == np.median(x[40:50])
    rng = np.random.default_rng(2)
    big = 5.0 + rng.standard_normal(1_000_000)
    t = time.perf_counter()
    ref, sig = trailing_reference(big, 50)
    assert time.perf_counter() - t < 1.0
    assert abs(np.nanmedian(ref) - 5.0) < 0.05 and abs(np.nanmedian(sig) - 1.0) < 0.1


def test_blocks_and_split_and_slope() -> None:
    x = np.r_[np.zeros(60), np.ones(40)]
    b = blocks(np.arange(100), x, max_blocks=20)
    assert len(b) == 20 and b.size == 5
    k, gain = level_split(b.median)
    assert k == 12 and gain > 0.9
    assert abs(theil_sen(np.arange(50.0), 3 * np.arange(50.0) + 1) - 3) < 1e-9


def test_log_and_runs() -> None:
    t, is_log = log_if_positive(np.array([1.0, 10.0]))
    assert is_log and np.allclose(t, [0, np.log(10)])
    _, is_log = log_if_positive(np.array([-1.0, 1.0]))
    assert not is_log
    assert true_runs(np.array([0, 1, 1, 0, 1], dtype=bool)) == [(1, 3), (4, 5)]
