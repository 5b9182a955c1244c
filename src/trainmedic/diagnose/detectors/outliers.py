"""Slow outlier steps: a few steps far longer than the typical one (a GC pause, an eval, a
checkpoint, a slow batch), with their cost in wall time and, when they recur, their period.

Split from timing.py (input_bound, throughput_regression). Numbers and words are apart:
``outlier_events`` returns ``OutlierEvent``s; ``_outlier_finding`` writes the prose.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainmedic.diagnose.detectors.short_log import SHORT_MIN_POINTS
from trainmedic.diagnose.detectors.timing import _THIN, warmup_skip
from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import median, robust_sigma, thin
from trainmedic.diagnose.trace import Trace, fmt, traces
from trainmedic.run.series import Run

__all__ = ["OutlierEvent", "outlier_events", "outlier_thresholds", "MIN_OUTLIER_EXCESS_S",
           "OUTLIER_WARN_SHARE", "OUTLIER_REPORT_SHARE", "OUTLIER_BIG_RATIO",
           "OUTLIER_STALL_RATIO", "OUTLIER_MAX_SHARE_OF_STEPS"]


MIN_OUTLIER_EXCESS_S = 0.010
"""An outlier step must take at least this much longer than the median step."""
MIN_WARN_LOST_S = 1.0
"""Outliers must cost at least this much time in total for a warning."""
#: Severity from cost: warning when the outliers cost >= 5% of the time, or when single ones
#: are >= 10x the median and cost >= 1%; reported (info) from 2%, or for a >= 10x stall.
OUTLIER_WARN_SHARE = 0.05
OUTLIER_REPORT_SHARE = 0.02
OUTLIER_BIG_RATIO = 10.0
OUTLIER_BIG_SHARE = 0.01
#: Periodic outliers that cost >= 5% are a warning without the 1 s floor when >= this many
#: recur on the cadence (fewer can line up by chance among scattered jitter).
OUTLIER_MIN_PERIODIC = 5
#: Outliers are rare events: at most this share of the judged steps (else a bimodal step).
OUTLIER_MAX_SHARE_OF_STEPS = 0.15
#: A stall this many times the median step warns without the 1 s floor (when rare).
OUTLIER_STALL_RATIO = 20.0
#: Frequent slow steps still count as stalls when they cost at least this much wall time (a
#: contended host costs a small run seconds; stalls of 36-100 s among 6 s steps cost minutes).
OUTLIER_FREQUENT_LOST_S = 60.0
#: ... and when the cadence is >= this many steps: below it, whole-step gaps within the 10%
#: (+ half a step) tolerance cover a large part of the possible gaps, so regularity is weak
#: evidence against random blips.
OUTLIER_MIN_PERIOD = 10.0


def outlier_thresholds(n: int) -> tuple[float, float]:
    """``(ratio, z)`` for a series of ``n`` points: an outlier is >= ``ratio`` x the median
    and >= median + ``z`` robust sigmas.

    ``z`` grows with the number of comparisons (the largest of n Gaussian points is about
    sqrt(2 ln n) sigmas): 2 sqrt(2 ln n), kept within [6, 10]. The ratio is 2 for <= 100
    points (per-epoch times: each point averages a whole epoch, so an epoch at 2x is an
    event) and 3 from 1,000 points (per-step times, where a GC pause or a slow batch at 2x is
    ordinary), log-linear in between."""
    z = min(10.0, max(6.0, 2.0 * math.sqrt(2.0 * math.log(max(n, 2)))))
    ratio = 2.0 + min(1.0, max(0.0, math.log10(max(n, 1) / 100.0)))
    return ratio, z


@dataclass(frozen=True)
class OutlierEvent:
    """Outlier steps in one step-time series (numbers only)."""

    rank: int | None
    n: int
    """Points judged (after warm-up)."""
    skip: int
    median: float
    sigma: float
    threshold: float
    """The time a step had to reach to count."""
    steps: tuple[int, ...]
    excess_s: float
    """Sum over the outliers of their time above the median."""
    total_s: float
    """Sum of all judged step times (the wall time they cover)."""
    worst_step: int
    worst_value: float
    period: float | None
    """Steps between outliers when they recur regularly (else None)."""
    periodic_steps: tuple[int, ...] = ()
    """The outliers that recur with ``period`` (all of them, or the largest ones when
    scattered smaller ones, e.g. scheduling jitter, sit between them)."""
    periodic_excess_s: float = 0.0

    @property
    def count(self) -> int:
        return len(self.steps)

    @property
    def share(self) -> float:
        """Share of the wall time lost to the outliers."""
        return self.excess_s / self.total_s if self.total_s > 0 else 0.0

    @property
    def worst_ratio(self) -> float:
        return self.worst_value / self.median if self.median > 0 else math.inf

    @property
    def reported(self) -> bool:
        return self.share >= OUTLIER_REPORT_SHARE or (
            self.worst_ratio >= OUTLIER_BIG_RATIO and self.excess_s >= MIN_WARN_LOST_S)

    @property
    def periodic_share(self) -> float:
        """Share of the wall time lost to the periodic outliers alone."""
        return self.periodic_excess_s / self.total_s if self.total_s > 0 else 0.0

    @property
    def strictly_periodic(self) -> bool:
        """A cadence strong enough to tell work in the loop from scattered jitter: >= 5
        outliers on it, a period >= 10 steps, and >= 80% of their gaps within 10% of the
        period itself (not only of a multiple)."""
        if self.period is None or self.period < OUTLIER_MIN_PERIOD \
                or len(self.periodic_steps) < OUTLIER_MIN_PERIODIC:
            return False
        gaps = np.diff(np.asarray(self.periodic_steps, dtype=np.float64))
        return float(np.mean(np.abs(gaps - self.period) <= 0.1 * self.period + 0.5)) >= 0.8

    @property
    def rare(self) -> bool:
        """Outliers are events: at most 15% of the judged steps. When a quarter of the steps
        are 5-13x slower, the step time is bimodal (a contended host, a second code path), a
        throughput matter, not stalls; stalls of >= 20x, or costing >= 60 s, count however
        many there are."""
        return self.count <= OUTLIER_MAX_SHARE_OF_STEPS * self.n

    @property
    def severity(self) -> Severity:
        stalls = self.rare or self.worst_ratio >= OUTLIER_STALL_RATIO or \
            self.excess_s >= OUTLIER_FREQUENT_LOST_S
        if stalls and self.excess_s >= MIN_WARN_LOST_S and (
                self.share >= OUTLIER_WARN_SHARE
                or (self.worst_ratio >= OUTLIER_BIG_RATIO and self.share >= OUTLIER_BIG_SHARE)):
            return "warning"
        # A few stalls of >= 20x the median step are no scheduling jitter (a contended host
        # slows steps 2-13x), whatever the run's length: the 1 s floor does not apply.
        if self.rare and self.worst_ratio >= OUTLIER_STALL_RATIO and \
                self.share >= OUTLIER_WARN_SHARE:
            return "warning"
        # Scheduling jitter is scattered, not periodic: stalls that recur on a cadence are
        # work in the loop (checkpoint, eval, GC) whatever the run's length, so the 1 s floor
        # does not apply to them.
        if self.strictly_periodic and self.periodic_share >= OUTLIER_WARN_SHARE:
            return "warning"
        return "info"


def _period(osteps: np.ndarray) -> float | None:
    """The spacing of outliers that recur regularly: >= 3 outliers >= 3 steps apart (median
    gap), >= 80% of the gaps within 10% of a whole multiple of the median gap (a stall that
    stayed under the threshold once leaves a double gap) and >= half of them within 10% of
    the gap itself (every integer is a multiple of a tiny gap)."""
    if osteps.size < 3:
        return None
    gaps = np.diff(osteps).astype(np.float64)
    g = median(gaps)
    if g < 3:
        return None
    tol = 0.1 * g + 0.5
    m = np.maximum(1.0, np.round(gaps / g))
    multiple = np.abs(gaps / m - g) <= tol
    single = np.abs(gaps - g) <= tol
    return g if float(np.mean(multiple)) >= 0.8 and float(np.mean(single)) >= 0.5 else None


def _periodic(osteps: np.ndarray, ovals: np.ndarray,
              span: float) -> tuple[float, np.ndarray] | None:
    """The cadence of the outliers: ``(period, indices)`` of the largest set of the biggest
    outliers that recur regularly (``_period``), or None. Periodic stalls are the same work
    repeated, so they have about the same size and stand above scattered smaller outliers:
    the sets tried are all of them and the top-k at each natural break in their sizes (the
    k-th largest >= 1.5x the next), k >= 4; the set must also cover the run (>= 60% of the
    span / period occurrences it would have)."""
    if osteps.size < 3:
        return None
    order = np.argsort(-ovals, kind="stable")
    vs = ovals[order]
    ks = [int(osteps.size)] + [k for k in range(min(int(osteps.size) - 1, 400), 3, -1)
                               if vs[k - 1] >= 1.5 * vs[k]]
    for k in ks:
        idx = np.sort(order[:k])
        p = _period(osteps[idx])
        if p is not None and k >= 0.6 * span / p:
            return p, idx
    return None


FOLD_MAX_POINTS = 20_000
FOLD_MAX_PERIODS = 1_000
FOLD_MAX_CHANCE = 0.01


def _binom_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed in log space (n may be in the thousands)."""
    if k <= 0:
        return 1.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    i = np.arange(k, n + 1, dtype=np.float64)
    from math import lgamma

    lc = np.array([lgamma(n + 1) - lgamma(x + 1) - lgamma(n - x + 1) for x in i])
    return float(min(1.0, np.exp(lc + i * lp + (n - i) * lq).sum()))


def _folded_period(steps: np.ndarray, mask: np.ndarray) -> tuple[float, np.ndarray] | None:
    """A cadence hidden among scattered outliers of the same size (scheduling jitter on a
    shared host): fold the judged steps at each candidate period P (>= 10 logged intervals,
    <= a fifth of the span) and take the phase with the most outliers. It is a cadence when
    that phase holds >= 5 outliers that are >= 80% of its points, and the chance of so many
    at one phase, were outliers scattered at their overall rate (binomial tail), is <= 1%
    after a Bonferroni correction over every (period, phase) tried. Returns
    ``(period, indices into the outliers)`` or None. Series over 20,000 points are not
    folded."""
    n = int(steps.size)
    k_all = int(np.count_nonzero(mask))
    if n > FOLD_MAX_POINTS or k_all < 5 or n < 50:
        return None
    step0 = int(steps[0])
    rel = (steps - step0).astype(np.int64)
    gap = max(1, int(round(median(np.diff(rel).astype(np.float64)))))
    periods = range(10 * gap, min(int(rel[-1]) // 5, 10 * gap + FOLD_MAX_PERIODS * gap) + 1,
                    gap)
    tests = sum(p // gap for p in periods)
    if tests == 0:
        return None
    rate = k_all / n
    orel = rel[mask]
    best: tuple[float, int, int] | None = None
    for per in periods:
        # Counted over the phases that hold outliers only: a bincount over every phase
        # allocates one slot per step of the period, which for a step column of Unix
        # timestamps in ms (a period of ~1e13 "steps") is terabytes.
        phases, c = np.unique(orel % per, return_counts=True)
        ph = int(phases[int(np.argmax(c))])
        hits = int(c.max())
        if hits < 5:
            continue
        npts = int(np.count_nonzero(rel % per == ph))
        if hits < 0.8 * npts:
            continue
        pv = tests * _binom_tail(hits, npts, rate)
        if pv <= FOLD_MAX_CHANCE and (best is None or pv < best[0]):
            best = (pv, per, ph)
    if best is None:
        return None
    _, per, ph = best
    return float(per), np.flatnonzero(orel % per == ph)


def _durations_in_log_order(run: Run, st: Trace) -> tuple[np.ndarray, np.ndarray, bool]:
    """The step times to judge: the clean series, or every finite point in log order when
    the step column restarts (several runs appended into one file, a per-epoch counter) and
    the clean series would keep under two thirds of the points. Outliers are a property of
    the durations; a restarting counter does not make them less real. The third value is
    True in the second case (no cadence is read from such steps)."""
    raw = run.get(st.metric, st.rank)
    if raw is None or len(raw) < 1.5 * len(st) or raw.is_monotonic:
        return st.values, st.steps, False
    ok = np.isfinite(raw.values)
    return raw.values[ok], raw.steps[ok], True


def _segments(steps: np.ndarray, log_order: bool) -> list[slice]:
    """One segment, or one per restart of the step column (each appended run, or each epoch
    of a per-epoch counter, has its own level and its own warm-up)."""
    if not log_order:
        return [slice(0, int(steps.size))]
    cuts = np.flatnonzero(np.diff(steps) <= 0) + 1
    edges = [0, *cuts.tolist(), int(steps.size)]
    return [slice(a, z) for a, z in zip(edges[:-1], edges[1:], strict=True)]


def outlier_events(run: Run) -> tuple[list[OutlierEvent], bool]:
    """The step_time_outliers events (reported or not), and whether any series had enough
    points (>= 12)."""
    out: list[OutlierEvent] = []
    trs = traces(run, "step_time_s", min_points=12)
    for st in trs:
        vall, sall, log_order = _durations_in_log_order(run, st)
        n_judged, total, skip0 = 0, 0.0, 0
        parts: list[tuple[np.ndarray, np.ndarray, float, float, float]] = []
        for seg in _segments(sall, log_order):
            v, s = vall[seg], sall[seg]
            skip = warmup_skip(int(v.size))
            skip0 = skip0 or skip
            v, s = v[skip:], s[skip:]
            # Non-positive step times are logging bugs (see input_events): dropped.
            pos = v > 0
            if not bool(pos.all()):
                v, s = v[pos], s[pos]
            if v.size < 9:
                continue
            tv = thin(v, _THIN)
            med = median(tv)
            ratio, z = outlier_thresholds(int(v.size))
            # The noise floor: 1% of the median (logs round times; a constant series has
            # MAD 0).
            sig = max(robust_sigma(tv), 0.01 * med)
            thr = med + max(z * sig, (ratio - 1.0) * med, MIN_OUTLIER_EXCESS_S)
            n_judged += int(v.size)
            total += float(np.sum(v))
            m = v >= thr
            judged = (s, m)
            if bool(m.any()):
                parts.append((v[m], s[m], med, sig, thr))
        if not parts:
            continue
        osteps = np.concatenate([p[1] for p in parts])
        excess = float(sum(np.sum(p[0] - p[2]) for p in parts))
        # The level the worst outlier was judged against names the event's median.
        wp = max(parts, key=lambda p: float(np.max(p[0]) / p[2]))
        w = int(np.argmax(wp[0]))
        per = None
        if not log_order:
            ovals = np.concatenate([p[0] for p in parts])
            per = _periodic(osteps, ovals, float(sall[-1] - sall[skip0]) if sall.size else 0.0)
            if per is None:
                per = _folded_period(*judged)
        pidx = per[1] if per is not None else np.empty(0, dtype=np.int64)
        out.append(OutlierEvent(
            st.rank, n_judged, skip0, wp[2], wp[3], wp[4], tuple(int(x) for x in osteps),
            excess, total, int(wp[1][w]), float(wp[0][w]),
            per[0] if per is not None else None,
            tuple(int(x) for x in osteps[pidx]),
            float(np.sum(ovals[pidx] - wp[2])) if per is not None else 0.0))
    return out, bool(trs)


@register_detector("step_time_outliers", requires=("step_time_s",))
def detect_step_time_outliers(run: Run) -> list[Finding] | NotRun:
    """Steps (or epochs) far above the median time, after warm-up: >= r x the median and
    >= median + z robust sigmas (r and z from ``outlier_thresholds``: 2x and 6 sigmas on a
    short per-epoch series, 3x and 10 sigmas on a long per-step one) and >= median + 10 ms.
    Severity follows what they cost: warning when their excess over the median is >= 5% of
    the total time, or a single one is >= 10x the median and they cost >= 1%, and >= 1 s in
    total; info from 2%, or for a >= 10x stall costing >= 1 s. The absolute floors keep OS
    scheduling jitter (a few ms on a shared CPU) on sub-millisecond steps from counting."""
    events, ran = outlier_events(run)
    if not ran:
        short = [f for tr in traces(run, "step_time_s", min_points=SHORT_MIN_POINTS)
                 if (f := _short_outliers(tr)) is not None]
        return short or NotRun("needs at least 12 step_time_s points")
    return [_outlier_finding(e) for e in events if e.reported]


#: A log too short for the rule above (SHORT_MIN_POINTS-11 timed points, an issue excerpt)
#: shows a stall when a point is >= this many times the median of all (the rule above uses
#: 2x on short per-epoch series too) ...
SHORT_RATIO = 2.0
#: ... while the rest agree with each other (their max within this factor of their min).
SHORT_TIGHT = 1.5


def _short_outliers(tr: Trace) -> Finding | None:
    """5-11 timed points: the points >= 2x the median of all, when the others agree
    (max <= 1.5x min), >= 10 ms above it, and their excess is >= 5% of the total time and
    >= 1 s (warning). The first point is left out when it is the run's first step (warm-up:
    compilation, cudnn autotuning), kept when the excerpt starts mid-run."""
    v, st = tr.values, tr.steps
    if len(tr) >= 12:
        return None
    lo = 1 if int(st[0]) <= max(1, int(tr.interval)) else 0
    v, st = v[lo:], st[lo:]
    if v.size < SHORT_MIN_POINTS or not bool(np.all(v > 0)):
        return None
    ref = median(v)
    out = (v >= SHORT_RATIO * ref) & (v - ref >= MIN_OUTLIER_EXCESS_S)
    rest = v[~out]
    if not out.any() or rest.size < 3 or float(rest.max()) > SHORT_TIGHT * float(rest.min()):
        return None
    base = median(rest)
    excess = float(np.sum(v[out] - base))
    if excess < OUTLIER_WARN_SHARE * float(np.sum(v)) or excess < MIN_WARN_LOST_S:
        return None
    i = int(np.argmax(v))
    at = [int(x) for x in st[out]]
    return Finding(
        symptom="step_time_outliers", severity="warning", confidence=0.6, onset_step=at[0],
        end_step=at[-1], rank=tr.rank, metric="step_time_s",
        summary=(f"{len(at)} of {v.size} timed points took >= {SHORT_RATIO:g}x the median (the "
                 f"others' median: {fmt(base)} s; the slowest {float(v[i]) / base:.3g}x, at step "
                 f"{int(st[i])}), costing {100 * excess / float(np.sum(v)):.0f}% of the logged "
                 f"time (a short log: judged against the points it has)"),
        evidence=(Evidence("step_time_s", int(st[i]), float(v[i]), base,
                           note=f"slowest point vs the median of the {rest.size} others, "
                                f"which agree within {SHORT_TIGHT:g}x"),))


def _outlier_finding(e: OutlierEvent) -> Finding:
    cadence = (f", recurring every ~{e.period:.0f} steps (checkpoint/eval/GC cadence?)"
               if e.period is not None else "")
    summary = (f"{e.count} step(s) took >= {fmt(e.threshold)} s ({e.threshold / e.median:.2g}x "
               f"the median {fmt(e.median)} s; the slowest {e.worst_ratio:.3g}x), costing "
               f"{100 * e.share:.1f}% of the run's time{cadence}")
    ev = [Evidence("step_time_s", e.worst_step, e.worst_value, e.median,
                   note=f"slowest step vs the median of all steps after the first {e.skip}"),
          Evidence("step_time_s", e.steps[0], e.share, None,
                   note=f"share of wall time lost: sum of the {e.count} outliers' excess over "
                        f"the median ({fmt(e.excess_s)} s) / total time ({fmt(e.total_s)} s)")]
    if e.period is not None:
        which = ("outliers" if len(e.periodic_steps) == e.count else
                 f"the {len(e.periodic_steps)} largest outliers (costing "
                 f"{100 * e.periodic_share:.1f}% of the time)")
        ev.append(Evidence("step_time_s", e.periodic_steps[0], e.period, None,
                           note=f"{which} recur every ~{e.period:.0f} steps (gaps between "
                                "them are whole multiples of this, within 10%)"))
    return Finding(
        symptom="step_time_outliers", severity=e.severity, confidence=0.8,
        onset_step=e.steps[0], end_step=e.steps[-1], rank=e.rank, metric="step_time_s",
        summary=summary, evidence=tuple(ev))
