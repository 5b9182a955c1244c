"""Deltas between two aligned runs with their uncertainty, and the step where the runs part.

The interval: a moving-block bootstrap of the mean difference ``B - A`` (and of the ratio of
means) over the aligned points. Successive steps of a training curve are autocorrelated (a
loss curve drifts, step times come in slow stretches), so resampling single points would
treat them as independent and give intervals far too narrow; resampling overlapping blocks of
consecutive points keeps the dependence inside each block (Kunsch 1989, "The jackknife and the
bootstrap for general stationary observations", Ann. Statist. 17(3); Politis & Romano 1994,
"The stationary bootstrap", JASA 89). The block length is ``round(sqrt(n))``, a common rule for
moving blocks when the dependence is unknown (Politis & White 2004 give data-driven
choices; ``n ** (1/3)`` is optimal for the variance but too short for slow drifts).
The percentile interval is reported, with a fixed seed so the same runs give the same figures.

The parting step (documented in docs/compare.md): each run's own step-to-step noise is
``sd = 1.4826 * MAD(diff(values)) / sqrt(2)`` (first differences remove a smooth trend; the
MAD keeps single spikes from inflating it). The difference ``d = B - A`` is smoothed with a
centred running median of ``w`` points; the A/A noise band for it is ``z * 1.2533 *
sqrt(sd_A^2 + sd_B^2) / sqrt(w)`` (1.2533: the median's standard error relative to the mean's
for Gaussian noise) with ``z = 3``. The runs part at the first point after which the smoothed
difference stays outside the band, on one side, to the end of the aligned window, and for at
least ``w`` points. Two runs of the same seed differ only by noise, so their smoothed
difference stays inside the band (or is exactly zero) and no parting is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Interval", "BOOTSTRAP_RESAMPLES", "block_length", "bootstrap", "noise_sd",
           "smoothing_window", "parting_index", "PARTING_Z", "MIN_POINTS"]

BOOTSTRAP_RESAMPLES = 2000
"""Bootstrap resamples per interval (Monte-Carlo error of a 95% percentile bound ~1%)."""
PARTING_Z = 3.0
"""Half-width of the A/A noise band in standard errors of the smoothed difference."""
MIN_POINTS = 3
"""Fewer paired points than this get no interval."""
_MAD_TO_SD = 1.4826
_MEDIAN_SE = 1.2533


@dataclass(frozen=True)
class Interval:
    """A bootstrap percentile interval of one statistic (estimated)."""

    lo: float
    hi: float
    level: float
    block: int
    """The moving-block length used."""
    resamples: int

    def excludes(self, value: float) -> bool:
        """True when ``value`` lies outside the closed interval."""
        return bool(value < self.lo or value > self.hi)

    def covers(self, value: float) -> bool:
        return not self.excludes(value)


def block_length(n: int) -> int:
    """Moving-block length for ``n`` points: ``round(sqrt(n))``, at least 1."""
    return max(1, int(round(math.sqrt(max(n, 1)))))


def _indices(n: int, resamples: int, seed: int) -> tuple[np.ndarray, int]:
    """``resamples x n`` indices: ``ceil(n / l)`` blocks of ``l`` consecutive points each,
    starts drawn uniformly from the ``n - l + 1`` possible ones, cut to ``n`` (Kunsch 1989)."""
    block = block_length(n)
    k = -(-n // block)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, n - block + 1, size=(resamples, k))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(resamples, k * block)
    return idx[:, :n], block


def bootstrap(a: np.ndarray, b: np.ndarray, *, level: float = 0.95,
              resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
              ratio: bool = False) -> Interval | None:
    """Interval of ``mean(b - a)`` (or of ``mean(b) / mean(a)`` with ``ratio``) over paired
    points, resampled in moving blocks; None with fewer than ``MIN_POINTS`` points (or a
    mean of A at 0 for a ratio)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    n = len(a)
    if n < MIN_POINTS:
        return None
    idx, block = _indices(n, resamples, seed)
    ra, rb = a[idx].mean(axis=1), b[idx].mean(axis=1)
    if ratio:
        if np.any(ra <= 0):
            return None
        stat = rb / ra
    else:
        stat = rb - ra
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(stat, [tail, 100 - tail])
    return Interval(float(lo), float(hi), level, block, resamples)


def noise_sd(values: np.ndarray) -> float:
    """A run's own point-to-point noise (robust; a smooth trend does not count)."""
    v = np.asarray(values, np.float64)
    if len(v) < 3:
        return 0.0
    d = np.diff(v)
    mad = float(np.median(np.abs(d - np.median(d))))
    if mad == 0.0:
        # A series that mostly holds still (resident memory in pages, a constant lr): the MAD
        # is 0 though it moves; the plain standard deviation of its moves is the noise then.
        return float(np.std(d) / math.sqrt(2.0))
    return float(_MAD_TO_SD * mad / math.sqrt(2.0))


def smoothing_window(n: int) -> int:
    """Points in the running median: ~n/10, odd, between 3 and 25 (at most n)."""
    w = min(25, max(3, n // 10))
    w = min(w, n)
    return w if w % 2 == 1 else max(1, w - 1)


def _running_median(d: np.ndarray, w: int) -> np.ndarray:
    half = w // 2
    out = np.empty_like(d)
    for i in range(len(d)):  # n is a run's logged points: thousands at most after alignment
        out[i] = np.median(d[max(0, i - half):i + half + 1])
    return out


def parting_index(a: np.ndarray, b: np.ndarray) -> tuple[int | None, float]:
    """Index of the first aligned point after which ``B - A`` stays beyond the A/A noise band
    (module docstring), and the band's half-width; index None when the runs never part."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    n = len(a)
    if n < 3:
        return None, math.nan
    w = smoothing_window(n)
    band = PARTING_Z * _MEDIAN_SE * math.hypot(noise_sd(a), noise_sd(b)) / math.sqrt(w)
    smooth = _running_median(b - a, w)
    sign = np.sign(smooth[-1])
    if sign == 0:
        return None, band
    outside = (np.abs(smooth) > band) & (np.sign(smooth) == sign)
    if not outside[-1]:
        return None, band
    inside = np.flatnonzero(~outside)
    first = int(inside[-1]) + 1 if len(inside) else 0
    # The centred median sees w // 2 points ahead: the parting point itself must already be
    # on that side (two runs from one init are equal at their first step).
    raw = b - a
    while first < n and not (np.sign(raw[first]) == sign and abs(raw[first]) > band):
        first += 1
    if n - first < w:
        return None, band
    return first, band
