"""The statistics of a lever trial, as pure functions of measured numbers (no torch).

- **Step time.** Each round times the baseline A and the lever B back to back; the round's
  effect is the paired ratio ``mean(B step times) / mean(A step times)``. Pairing within a
  round cancels what drifts over minutes (other processes, thermal state). The effect is the
  geometric mean of the rounds' ratios with a two-sided 95% Student t-interval over rounds,
  taken on their logarithms and mapped back (``exp(mean +- t(0.975, n-1) * sd / sqrt(n))`` of
  ``log(ratio)``): a ratio is multiplicative (0.5 and 2 are opposite effects of one size),
  and rounds are the independent units, not steps, whose times within a round are
  correlated.
- **Loss.** The two loss trajectories over the same steps are compared by the relative
  difference of their means. The tolerance is the larger of ``REL_FLOOR`` (rounding) and
  three standard errors of that difference under the baseline's own step-to-step noise:
  ``sigma = sd(first differences of A's losses) / sqrt(2)`` (first differences remove a slow
  trend), ``se = sigma * sqrt(2 / n)`` for two trajectories of ``n`` steps with independent
  batch noise. The variants see the same samples in the same order, so their noise is in fact
  correlated and this tolerance errs wide: a difference beyond it is a change, not noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from trainmedic.errors import ConfigError

__all__ = ["t_quantile_975", "RatioEstimate", "paired_ratio", "LossComparison",
           "compare_losses", "REL_FLOOR", "CI_METHOD"]

#: Relative loss difference below which two trajectories are the same whatever the noise:
#: reductions in another order, fused kernels and compiled graphs round differently
#: (~1e-6 relative per step), which compounds over a few dozen steps to well under this.
REL_FLOOR = 1e-3

CI_METHOD = ("95% Student t-interval over rounds of log(B/A), the paired ratio (geometric "
             "mean)")

# t(0.975, df) for df = 1..30 (any statistics table, e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2)
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
         2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
         2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (table to 30, then
    the Cornish-Fisher expansion around the normal quantile, Abramowitz & Stegun 26.7.5,
    within 1e-4 there)."""
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ConfigError(f"df: got {df!r}, expected an integer >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959963984540054
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


@dataclass(kw_only=True, frozen=True)
class RatioEstimate:
    """The lever's effect on step time, from paired rounds (all measured)."""

    ratios: tuple[float, ...]
    """Per counted round: mean B step time / mean A step time."""
    mean_ratio: float
    """Geometric mean of ``ratios``: B's step time as a share of A's (< 1: faster)."""
    ci_low: float
    """Lower end of the 95% interval of the mean ratio."""
    ci_high: float
    """Upper end."""
    method: str = CI_METHOD
    """How the interval was taken."""

    @property
    def rounds(self) -> int:
        """Counted rounds."""
        return len(self.ratios)

    @property
    def speedup(self) -> float:
        """A's step time over B's (> 1: the lever is faster): ``1 / mean_ratio``."""
        return 1.0 / self.mean_ratio

    @property
    def speedup_ci(self) -> tuple[float, float]:
        """The interval of ``speedup`` (the ratio's, inverted)."""
        return 1.0 / self.ci_high, 1.0 / self.ci_low

    @property
    def verdict(self) -> str:
        """``faster`` (the interval lies below 1), ``slower`` (above), else
        ``inconclusive``."""
        if self.ci_high < 1.0:
            return "faster"
        if self.ci_low > 1.0:
            return "slower"
        return "inconclusive"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(rounds=self.rounds, speedup=self.speedup, speedup_ci=list(self.speedup_ci),
                 verdict=self.verdict, ratios=list(self.ratios))
        return d


def paired_ratio(a_s: Sequence[float], b_s: Sequence[float]) -> RatioEstimate:
    """The paired-ratio estimate from per-round step times of A and B (seconds, same
    rounds, in order). Needs two rounds or more, every time > 0."""
    if len(a_s) != len(b_s):
        raise ConfigError(f"rounds: got {len(a_s)} baseline and {len(b_s)} lever times, "
                          "expected one of each per round")
    if len(a_s) < 2:
        raise ConfigError(f"rounds: got {len(a_s)} counted round(s), expected 2 or more for "
                          "an interval")
    if any(not (math.isfinite(t) and t > 0) for t in (*a_s, *b_s)):
        raise ConfigError("step times must be finite and > 0 seconds")
    ratios = tuple(b / a for a, b in zip(a_s, b_s, strict=True))
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return RatioEstimate(ratios=ratios, mean_ratio=math.exp(mean),
                         ci_low=math.exp(mean - half), ci_high=math.exp(mean + half))


@dataclass(kw_only=True, frozen=True)
class LossComparison:
    """The lever's loss trajectory against the baseline's over the same steps (measured)."""

    steps: int
    """Steps compared."""
    mean_a: float
    """Mean baseline loss over them."""
    mean_b: float
    """Mean lever loss over them."""
    rel_diff: float
    """``|mean_b - mean_a| / |mean_a|``."""
    max_step_rel_diff: float
    """Largest ``|b - a| / |a|`` at one step."""
    tolerance: float
    """The relative difference allowed (see the module docstring)."""
    finite: bool
    """Every loss of both was finite."""

    @property
    def within(self) -> bool:
        """The trajectories agree within the tolerance (and are finite)."""
        return self.finite and self.rel_diff <= self.tolerance

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["within"] = self.within
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in d.items()}


def compare_losses(a: Sequence[float], b: Sequence[float]) -> LossComparison:
    """Compare two loss trajectories over the same steps (see the module docstring)."""
    if len(a) != len(b) or len(a) < 3:
        raise ConfigError(f"losses: got {len(a)} and {len(b)} steps, expected the same "
                          "number, 3 or more")
    finite = all(math.isfinite(x) for x in (*a, *b))
    n = len(a)
    if not finite:
        return LossComparison(steps=n, mean_a=math.nan, mean_b=math.nan, rel_diff=math.inf,
                              max_step_rel_diff=math.inf, tolerance=REL_FLOOR, finite=False)
    mean_a, mean_b = sum(a) / n, sum(b) / n
    scale = abs(mean_a) or 1.0
    diffs = [y - x for x, y in zip(a[:-1], a[1:], strict=True)]
    md = sum(diffs) / len(diffs)
    sd = math.sqrt(sum((d - md) ** 2 for d in diffs) / max(1, len(diffs) - 1))
    se = sd / math.sqrt(2) * math.sqrt(2 / n)
    tolerance = max(REL_FLOOR, 3 * se / scale)
    max_step = max(abs(y - x) / (abs(x) or 1.0) for x, y in zip(a, b, strict=True))
    return LossComparison(steps=n, mean_a=mean_a, mean_b=mean_b,
                          rel_diff=abs(mean_b - mean_a) / scale, max_step_rel_diff=max_step,
                          tolerance=tolerance, finite=True)
