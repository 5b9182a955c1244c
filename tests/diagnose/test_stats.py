"""The robust statistics the detectors share."""

from __future__ import annotations

import time

import numpy as np

from trainmedic.diagnose.stats import (
    blocks,
    diff_sigma,
    hinge_fit,
    level_split,
    log_if_positive,
    median,
    ramp_fit,
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


def test_ramp_fit_finds_where_a_jump_a_ramp_and_a_saturating_rise_leave_the_flat() -> None:
    rng = np.random.default_rng(3)
    noise = rng.normal(0, 0.05, 30)
    jump = np.r_[np.full(12, 1.0), np.full(18, 3.0)] + noise
    ramp = np.r_[np.full(12, 1.0), 1.0 + 0.2 * np.arange(1, 19)] + noise
    saturating = np.r_[np.full(12, 1.0), np.minimum(1.0 + 0.4 * np.arange(1, 19), 3.0)] + noise
    for y in (jump, ramp, saturating):
        a, r = ramp_fit(y, 29)
        assert 10 <= a <= 12 and r < 0.05
        # the brute force over (a, b) agrees
        best = min(
            (float(np.sum((y - np.polyval(np.polyfit(h, y, 1), h)) ** 2)), aa)
            for aa in range(29) for b in range(aa + 1, 31)
            for h in [np.clip((np.arange(30) - aa) / (b - aa), 0.0, 1.0)]
            if np.polyfit(h, y, 1)[0] > 0)
        assert best[1] == a
    # a straight line fitted to the jump leans back: the two-phase hinge dates it early
    assert hinge_fit(jump, 29)[0] < 10
