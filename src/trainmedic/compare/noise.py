"""The noise of a difference series ``d = B - A`` of two logged curves, modelled as AR(1).

Logged training curves are autocorrelated: an EMA-smoothed loss (what most trainers print and
many log) is exactly AR(1) with ``phi`` = the EMA's beta, and step times come in slow
stretches. Treating such points as independent makes every interval and noise band too narrow
by ``sqrt((1 + phi) / (1 - phi))`` (4.4x at ``phi = 0.9``).

Both ``phi`` and the noise's marginal sd are read from the *first differences* of ``d``, so a
smooth trend in ``d`` (two curves drifting apart) is not taken for noise: for AR(1) noise ``e``
with marginal variance ``s^2``, ``var(diff(e)) = 2 s^2 (1 - phi)`` and the lag-1
autocorrelation of ``diff(e)`` is ``-(1 - phi) / 2``, so ``phi = 1 + 2 rho`` and
``s = sd(diff) / sqrt(2 (1 - phi))`` (Box, Jenkins & Reinsel, "Time Series Analysis", 3.2).
The sd of differences is robust (MAD), and the differences are winsorized before ``rho`` so
that one jump (a spike, the step where runs part) does not decide either.

The variance of the mean of ``w`` consecutive AR(1) points is
``s^2 / w * (1 + 2 sum_{k<w} (1 - k/w) phi^k)``; ``w`` divided by that factor is the effective
number of independent points ``n_eff`` (Bayley & Hammersley 1946; for large ``w`` it tends to
``w (1 - phi) / (1 + phi)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["ARNoise", "PHI_MAX", "ar_noise", "ar_noise_level", "variance_factor",
           "t_quantile"]

PHI_MAX = 0.98
"""Largest lag-1 autocorrelation used: a difference series smoother than this (a drift with
no visible noise) is treated as this correlated, i.e. as barely informative per point."""
_MAD_TO_SD = 1.4826
_WINSOR = 4.0


@dataclass(frozen=True)
class ARNoise:
    """The noise of a series as AR(1): marginal sd ``sd`` and lag-1 autocorrelation ``phi``
    (both estimated)."""

    sd: float
    phi: float


def ar_noise(values: np.ndarray) -> ARNoise:
    """AR(1) noise of ``values`` from their first differences (module docstring)."""
    v = np.asarray(values, np.float64)
    if len(v) < 3:
        return ARNoise(0.0, 0.0)
    d = np.diff(v)
    med = float(np.median(d))
    mad = float(np.median(np.abs(d - med)))
    sd_diff = _MAD_TO_SD * mad
    if sd_diff == 0.0:
        # A series that mostly holds still (a constant lr, memory in pages): the MAD is 0
        # though it moves; the plain sd of its moves is the noise then.
        sd_diff = float(np.std(d))
    if sd_diff == 0.0:
        return ARNoise(0.0, 0.0)
    c = np.clip(d, med - _WINSOR * sd_diff, med + _WINSOR * sd_diff) - med
    phi = 0.0
    if len(c) >= 3:
        den = float(np.dot(c, c))
        rho = float(np.dot(c[1:], c[:-1])) / den if den > 0 else -0.5
        phi = min(PHI_MAX, max(0.0, 1.0 + 2.0 * rho))
    return ARNoise(sd_diff / math.sqrt(2.0 * (1.0 - phi)), phi)


def ar_noise_level(values: np.ndarray, longer: np.ndarray | None = None) -> ARNoise:
    """AR(1) noise of a series judged by its mean (a difference over the verdict's end
    window, flat under the null): ``phi`` is the lag-1 autocorrelation of the mean-removed
    values plus the small-sample bias correction ``(1 + 4 phi) / n`` (Marriott & Pope 1954),
    and ``s`` the sample sd corrected for the variance a correlated sample hides
    (``E[sum (v - mean)^2] = s^2 (n - F(n, phi))``). Read from the values themselves: on a short
    window the differences-based estimate of ``ar_noise`` is too noisy near ``phi = 1`` (its
    sd is ~2/sqrt(n)); a trend inside the window makes this one larger, i.e. wider.
    A short window underestimates ``phi`` (10 points of an EMA(0.9) show ``r`` ~0.5), so
    ``longer`` (a longer stretch of the same series ending with ``values``, in which the runs
    did not part: the caller starts it after the parting step) gives ``phi`` instead, by this
    same level-based rule on more points. (Not the larger of two estimates, nor the
    differences-based one of ``ar_noise``: near ``phi = 1`` their sampling error is large and
    a maximum sits at ``PHI_MAX``, a Cauchy-wide interval, for an EMA-logged loss.)"""
    v = np.asarray(values, np.float64)
    n = len(v)
    if n < 4:
        return ar_noise(v)
    c = v - v.mean()
    den = float(np.dot(c, c))
    if den == 0.0:
        return ARNoise(0.0, 0.0)
    phi = _level_phi(c, den)
    if longer is not None and len(longer) > n:
        lc = np.asarray(longer, np.float64) - float(np.mean(longer))
        lden = float(np.dot(lc, lc))
        if lden > 0.0:
            phi = _level_phi(lc, lden)
    return ARNoise(math.sqrt(den / max(n - variance_factor(n, phi), 1.0)), phi)


def _level_phi(c: np.ndarray, den: float) -> float:
    """Lag-1 autocorrelation of mean-removed values ``c`` (``den = c.c``), with Marriott &
    Pope's small-sample correction, in [0, PHI_MAX]."""
    r = float(np.dot(c[1:], c[:-1])) / den
    return min(PHI_MAX, max(0.0, r + (1.0 + 4.0 * r) / len(c)))


def variance_factor(w: int, phi: float) -> float:
    """``var(mean of w AR(1) points) * w / s^2``: 1 for independent points, up to ``w``."""
    if w <= 1 or phi <= 0.0:
        return 1.0
    k = np.arange(1, w)
    return float(1.0 + 2.0 * np.sum((1.0 - k / w) * phi ** k))


def _t_cdf_upper_half(t: float, df: float) -> float:
    """``P(0 <= T <= t)`` for Student's t with ``df`` degrees of freedom (Simpson's rule on
    the density over ``atan``-mapped coordinates, which keeps the heavy tail cheap)."""
    th = np.linspace(0.0, math.atan(t), 2001)
    x = np.tan(th)
    logc = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    f = np.exp(logc - (df + 1) / 2 * np.log1p(x * x / df)) * (1.0 + x * x)
    h = th[1] - th[0]
    return float(h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum()))


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile (p > 0.5) of Student's t with ``df >= 1`` (possibly fractional)
    degrees of freedom, by bisection on its distribution function (no scipy in the core)."""
    target = p - 0.5
    lo, hi = 0.0, 1.0
    while _t_cdf_upper_half(hi, df) < target:
        hi *= 2.0
        if hi > 1e7:
            return math.inf
    for _ in range(60):
        mid = (lo + hi) / 2
        if _t_cdf_upper_half(mid, df) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
