"""Deltas between two aligned runs with their uncertainty, and the step where the runs part.

The interval of a metric's delta: a moving-block bootstrap of the mean difference ``B - A``
(and of the ratio of means) over the aligned points. Successive steps of a training curve are
autocorrelated (a loss curve drifts, an EMA-smoothed loss is AR(1), step times come in slow
stretches), so resampling single points would treat them as independent and give intervals
far too narrow; resampling overlapping blocks of consecutive points keeps the dependence
inside each block (Kunsch 1989, "The jackknife and the bootstrap for general stationary
observations", Ann. Statist. 17(3); Politis & Romano 1994, "The stationary bootstrap", JASA
89). The block length is ``round(sqrt(n))``, a common rule when the dependence is unknown,
raised to twice the integrated autocorrelation time ``(1 + phi) / (1 - phi)`` of the
difference series' AR(1) noise when that is longer (compare/noise.py), at most a third of the
points. The percentile interval is reported, with a fixed seed so the same runs give the same
figures.

The verdict's interval (``t_interval``) is a Student-t interval of the mean difference whose
standard error and degrees of freedom come from the AR(1) noise model (effective number of
points ``n_eff``); it needs no resampling and stays honest on few, correlated points.

The parting step (documented in docs/compare.md): the noise of the difference ``d = B - A``
is read from ``d`` itself as AR(1) (marginal sd ``s`` and ``phi`` from its first differences,
compare/noise.py), so two runs whose logged curves are smoothed get a band as wide as their
slow wander. ``d`` is smoothed with a centred running median of ``w`` points; the A/A noise
band for it is ``z * 1.2533 * s * sqrt(F(w, phi) / w)`` with ``F`` the variance factor of a
mean of ``w`` AR(1) points (1.2533: the median's standard error relative to the mean's for
Gaussian noise) and ``z = 3``. The runs part at the first point after which the smoothed
difference stays outside the band, on one side, to the end of the aligned window, and for at
least ``w`` points (and 10). Two runs of the same seed differ only by noise, so their smoothed
difference stays inside the band (or is exactly zero) and no parting is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainmedic.compare.noise import ar_noise, ar_noise_level, t_quantile, variance_factor

__all__ = ["Interval", "BOOTSTRAP_RESAMPLES", "block_length", "bootstrap", "t_interval",
           "smoothing_window", "parting_index", "PARTING_Z", "MIN_POINTS", "MIN_PARTED_POINTS"]

BOOTSTRAP_RESAMPLES = 2000
"""Bootstrap resamples per interval (Monte-Carlo error of a 95% percentile bound ~1%)."""
PARTING_Z = 3.0
"""Half-width of the A/A noise band in standard errors of the smoothed difference."""
MIN_POINTS = 3
"""Fewer paired points than this get no interval."""
MIN_PARTED_POINTS = 10
"""A parting must hold for at least this many points (and ``w``): on fewer, a slow wander
of smoothed noise cannot be told from a change (12% false partings on 15-point EMA pairs)."""
_MEDIAN_SE = 1.2533
_ROUNDING = 1e-9
BOOTSTRAP_METHOD = "moving-block bootstrap (Kunsch 1989)"
T_METHOD = "Student t with AR(1) effective n (Bayley & Hammersley 1946)"


@dataclass(frozen=True)
class Interval:
    """An interval of one statistic (estimated)."""

    lo: float
    hi: float
    level: float
    block: int
    """The moving-block length used (1 for a t interval)."""
    resamples: int
    """Bootstrap resamples (0 for a t interval)."""
    method: str = BOOTSTRAP_METHOD
    """How the interval was obtained."""
    phi: float | None = None
    """Lag-1 autocorrelation of the difference's noise (estimated), where it was used."""
    n_eff: float | None = None
    """Effective number of independent points (t interval only)."""

    def excludes(self, value: float) -> bool:
        """True when ``value`` lies outside the closed interval."""
        return bool(value < self.lo or value > self.hi)

    def covers(self, value: float) -> bool:
        return not self.excludes(value)


def block_length(n: int, phi: float = 0.0) -> int:
    """Moving-block length for ``n`` points: ``round(sqrt(n))``, or twice the integrated
    autocorrelation time ``(1 + phi) / (1 - phi)`` of AR(1) noise when longer, at most
    ``n // 3``; at least 1."""
    base = int(round(math.sqrt(max(n, 1))))
    tau = (1.0 + phi) / (1.0 - phi) if phi < 1.0 else float(n)
    return max(1, min(max(base, int(math.ceil(2.0 * tau))), max(base, n // 3)))


def _indices(n: int, block: int, resamples: int, seed: int) -> np.ndarray:
    """``resamples x n`` indices: ``ceil(n / l)`` blocks of ``l`` consecutive points each,
    starts drawn uniformly from the ``n - l + 1`` possible ones, cut to ``n`` (Kunsch 1989)."""
    k = -(-n // block)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, n - block + 1, size=(resamples, k))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(resamples, k * block)
    return idx[:, :n]


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
    phi = ar_noise(b - a).phi
    block = block_length(n, phi)
    idx = _indices(n, block, resamples, seed)
    ra, rb = a[idx].mean(axis=1), b[idx].mean(axis=1)
    if ratio:
        if np.any(ra <= 0):
            return None
        stat = rb / ra
    else:
        stat = rb - ra
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(stat, [tail, 100 - tail])
    return Interval(float(lo), float(hi), level, block, resamples, phi=phi)


def t_interval(d: np.ndarray, *, noise_from: np.ndarray | None = None,
               level: float = 0.95, scale: float = 0.0) -> Interval | None:
    """Interval of ``mean(d)``: ``mean +- t(level, df) * s * sqrt(F(n, phi) / n)``, with the
    AR(1) noise (``s``, ``phi``) read from ``d`` (noise.ar_noise_level; ``phi`` may be lifted
    by ``noise_from``, a longer stretch of the series ending with ``d``) and
    ``n_eff = n / F(n, phi)``. The t's degrees of freedom are those of ``s``, estimated from
    all ``n`` correlated points: ``n (1 - phi^2) / (1 + phi^2) - 1`` (Bartlett 1946's
    effective size for a variance), not ``n_eff - 1`` (the mean's), which for an EMA(0.9)
    logged loss would leave a Cauchy-wide interval that misses a shift of 10 noise sds. None
    with fewer than ``MIN_POINTS`` points. Degrees of freedom below 1 are held at 1."""
    d = np.asarray(d, np.float64)
    n = len(d)
    if n < MIN_POINTS:
        return None
    noise = ar_noise_level(d, noise_from)
    f = variance_factor(n, noise.phi)
    n_eff = n / f
    half = 0.0
    if noise.sd > 0.0:
        phi2 = noise.phi * noise.phi
        df = max(1.0, n * (1.0 - phi2) / (1.0 + phi2) - 1.0)
        half = t_quantile(0.5 + level / 2, df) * noise.sd * math.sqrt(f / n)
    # Floating-point rounding of values of size ``scale`` is no difference.
    half = max(half, _ROUNDING * scale)
    m = float(np.mean(d))
    return Interval(m - half, m + half, level, 1, 0, T_METHOD, noise.phi, n_eff)


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
    raw = b - a
    noise = ar_noise(raw)
    band = PARTING_Z * _MEDIAN_SE * noise.sd * math.sqrt(variance_factor(w, noise.phi) / w)
    # Floating-point rounding (a curve interpolated between its own points) is no parting.
    band = max(band, _ROUNDING * float(np.max(np.abs(np.concatenate([a, b])))))
    smooth = _running_median(raw, w)
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
    if n - first < max(w, MIN_PARTED_POINTS):
        return None, band
    return first, band
