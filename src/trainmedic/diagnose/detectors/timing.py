"""Detectors on where step time goes: waiting for data, slow outlier steps, and throughput that
dropped and stayed down (the slow rank is in ``stragglers.py``).

The first few logged steps are skipped everywhere: DataLoader workers spin up, CUDA/cuDNN
autotune and ``torch.compile`` run there, and every healthy run is slow at its start.

Numbers and words are apart: ``input_events``, ``outlier_events`` and ``throughput_events``
return small dataclasses (onset, levels, thresholds crossed); the detectors build the
findings' prose from them. One incident is one finding: a throughput drop that an input stall
or a straggler explains (same onset) is reported at info naming that root, and the root
carries the drop's severity and evidence (``folded_throughput``); the engine folds the drop
into the root's ``related``.

Long series are strided to <= 20,000 points for medians, MADs and block levels (the standard
error of a median of 20,000 points is ~0.9% of a sigma, against thresholds of 6-10 sigmas or
10% shares): the cost falls ~50-fold on 1M points; shorter series are read in full, so their
results do not change. Point questions (which steps are outliers) still see every point.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import (
    blocks,
    diff_sigma,
    level_split,
    median,
    robust_sigma,
    thin,
)
from trainmedic.diagnose.trace import Trace, fmt, traces
from trainmedic.run.series import Run

__all__ = ["INPUT_WARN_SHARE", "INPUT_INFO_SHARE", "warmup_skip", "InputEvent",
           "OutlierEvent", "ThroughputEvent", "input_events", "outlier_events",
           "throughput_events", "folded_throughput", "outlier_thresholds"]

#: Median share of the step spent waiting for data: warning at >= 25%, info at >= 10%.
INPUT_WARN_SHARE = 0.25
INPUT_INFO_SHARE = 0.10
#: Throughput drop that stays to the end: warning at >= 20%, info at >= 10% (for a rate);
#: for a duration (step or epoch time) a rise of >= 20% / >= 10%.
THROUGHPUT_WARN = 0.20
THROUGHPUT_INFO = 0.10
_THIN = 20_000


def warmup_skip(n: int) -> int:
    """How many leading points to ignore: max(3, 2% of them), never more than a quarter."""
    return min(max(3, math.ceil(0.02 * n)), n // 4)


def _aligned(a: Trace, b: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if a.steps.shape == b.steps.shape and bool(np.array_equal(a.steps, b.steps)):
        return a.steps, a.values, b.values
    steps, ia, ib = np.intersect1d(a.steps, b.steps, assume_unique=True, return_indices=True)
    return steps, a.values[ia], b.values[ib]


def _stride(n: int) -> int:
    return max(1, math.ceil(n / _THIN))


# --------------------------------------------------------------------------- input_bound
@dataclass(frozen=True)
class InputEvent:
    """A share of the step spent waiting for data, on one rank (numbers only)."""

    rank: int | None
    onset: int
    share: float
    """Median share over the steps after warm-up, or from the onset for a rise."""
    share_before: float | None
    """Median block share before the onset (None when the onset is the first block)."""
    data_median: float
    other_median: float
    other_metric: str
    ratio: str
    """How the share was computed (``data_time_s / step_time_s`` or with the sum)."""
    skip: int
    n_bad: int
    n_all: int
    rise: bool
    """True when the share was low over the run and rose at the onset (a mid-run stall)."""

    @property
    def severity(self) -> Severity:
        return "warning" if self.share >= INPUT_WARN_SHARE else "info"


def input_events(run: Run) -> tuple[list[InputEvent], bool]:
    """The input_bound events, and whether any rank had enough points to judge."""
    out: list[InputEvent] = []
    ran = False
    for dt in traces(run, "data_time_s"):
        st = Trace.of(run, "step_time_s", dt.rank)
        ct = Trace.of(run, "compute_time_s", dt.rank)
        other = st if st is not None else ct
        if other is None:
            continue
        steps, d, o = _aligned(dt, other)
        # A negative duration, or a step that took no time, is a logging bug (a clock read
        # in the wrong order, a placeholder); such points are dropped, not averaged in.
        # A data wait of exactly 0 is real (a prefetching loader) and stays.
        valid = (d >= 0) & (o > 0)
        n_all = int(steps.size)
        n_valid = int(np.count_nonzero(valid))
        n_bad = n_all - n_valid
        if n_bad:
            steps, d, o = steps[valid], d[valid], o[valid]
        if steps.size < 5:
            continue
        ran = True
        skip = warmup_skip(steps.size)
        k = _stride(steps.size - skip)
        steps, d, o = steps[skip::k], d[skip::k], o[skip::k]
        with np.errstate(invalid="ignore", divide="ignore"):
            share = d / o
            ratio = "data_time_s / step_time_s"
            if other is ct or median(share) > 1.0:
                share = d / (d + o)
                ratio = f"data_time_s / (data_time_s + {other.metric})"
        share = np.where(np.isfinite(share), share, 0.0)
        med = median(share)
        bl = blocks(steps, share, max_blocks=50)
        lv = bl.median
        nb = len(lv)
        if med >= INPUT_INFO_SHARE:
            thr = INPUT_WARN_SHARE if med >= INPUT_WARN_SHARE else INPUT_INFO_SHARE
            hi = lv >= thr
            # Onset: the first block from which most later blocks stay above the threshold.
            frac_after = np.cumsum(hi[::-1])[::-1] / np.arange(nb, 0, -1)
            cand = np.flatnonzero(hi & (frac_after >= 0.7))
            i = int(cand[0]) if cand.size else 0
            out.append(InputEvent(
                dt.rank, int(bl.first_step[i]), med, median(lv[:i]) if i else None,
                median(d), median(o), other.metric, ratio, skip, n_bad, n_all, rise=False))
            continue
        # A rise: the share was low, then stayed >= 10% from some block to the end.
        if nb < 10:
            continue
        i, gain = level_split(lv, min_seg=max(3, math.ceil(0.1 * nb)))
        if i >= nb or gain < 0.3:
            continue
        before, after, tail = median(lv[:i]), median(lv[i:]), median(lv[-3:])
        if after < INPUT_INFO_SHARE or tail < INPUT_INFO_SHARE or after < 2.0 * before:
            continue
        j = int(bl.start[i])
        out.append(InputEvent(
            dt.rank, int(bl.first_step[i]), after, before, median(d[j:]), median(o[j:]),
            other.metric, ratio, skip, n_bad, n_all, rise=True))
    return out, ran


@register_detector("input_bound", requires=("data_time_s",),
                   requires_any=("step_time_s", "compute_time_s"))
def detect_input_bound(run: Run) -> list[Finding] | NotRun:
    """Median of data_time_s / step_time_s over the steps after warm-up (or
    data / (data + compute) when only compute_time_s is logged, or when step_time_s evidently
    excludes the data wait): warning at >= 25%, info at >= 10%. A share that was low and rose
    (one L1 change point in <= 50 block medians, >= 10% and >= 2x the level before, to the
    end) is reported from that onset, with its severity from the share after it."""
    events, ran = input_events(run)
    if not ran:
        return NotRun("needs at least 5 steps with both data_time_s and step/compute time")
    return [folded_throughput(run, _input_finding(e)) for e in events]


def _input_finding(e: InputEvent) -> Finding:
    dropped = (f"; {e.n_bad} of {e.n_all} steps with a negative or zero time were dropped"
               if e.n_bad else "")
    if e.rise:
        summary = (f"waiting for data rose at step {e.onset} to {100 * e.share:.0f}% of each "
                   f"step (from {100 * (e.share_before or 0.0):.0f}% before; median data "
                   f"wait {fmt(e.data_median)} s vs {e.other_metric} {fmt(e.other_median)} s)")
        note = f"medians from the onset; share = median of {e.ratio}{dropped}"
    else:
        summary = (f"{100 * e.share:.0f}% of each step was spent waiting for data (median "
                   f"data wait {fmt(e.data_median)} s vs {e.other_metric} "
                   f"{fmt(e.other_median)} s)")
        note = (f"medians after the first {e.skip} logged steps; share = median of "
                f"{e.ratio}{dropped}")
    ev = [Evidence("data_time_s", e.onset, e.data_median, e.other_median, note=note)]
    if e.share_before is not None:
        ev.append(Evidence("data_time_s", e.onset, e.share, e.share_before,
                           note="share of the step spent waiting for data from the onset "
                                "vs before it (median of block medians)"))
    return Finding(symptom="input_bound", severity=e.severity, confidence=0.85,
                   onset_step=e.onset, rank=e.rank, metric="data_time_s", summary=summary,
                   evidence=tuple(ev))


# --------------------------------------------------------------------------- outliers
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
        c = np.bincount(orel % per, minlength=per)
        ph = int(np.argmax(c))
        hits = int(c[ph])
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
        return NotRun("needs at least 12 step_time_s points")
    return [_outlier_finding(e) for e in events if e.reported]


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


# --------------------------------------------------------------------------- throughput
@dataclass(frozen=True)
class ThroughputEvent:
    """A sustained drop of throughput in one series (numbers only)."""

    rank: int | None
    metric: str
    onset: int
    before: float
    """Median level before the change point, in the metric's units."""
    after: float
    drop: float
    """Share of throughput lost: 1 - after/before for a rate, 1 - before/after for a time."""
    block: int
    """Points per block."""
    block_steps: float
    """Steps per block (for matching onsets)."""
    span: int

    @property
    def is_rate(self) -> bool:
        return self.metric != "step_time_s"

    @property
    def change(self) -> float:
        """What the severity is read from: the rate's drop, or the time's rise."""
        return self.drop if self.is_rate else 1.0 / (1.0 - self.drop) - 1.0

    @property
    def severity(self) -> Severity:
        return "warning" if self.change >= THROUGHPUT_WARN else "info"


def _throughput_blocks(n: int) -> int:
    """Block count: every point its own block up to 60 points (per-epoch series), else
    n/5 within [60, 200]."""
    return n if n <= 60 else min(200, max(60, n // 5))


def throughput_events(run: Run) -> tuple[list[ThroughputEvent], bool]:
    """The throughput_regression events, and whether a series had enough points (>= 12)."""
    out: list[ThroughputEvent] = []
    ran = False
    for metric, higher_better in (("samples_per_s", True), ("tokens_per_s", True),
                                  ("step_time_s", False)):
        for tr in traces(run, metric):
            pos = tr.values > 0
            v, s = tr.values[pos], tr.steps[pos]
            if v.size < 12:
                continue
            ran = True
            skip = warmup_skip(v.size)
            k = _stride(v.size - skip)
            v, s = v[skip::k], s[skip::k]
            lt = np.log(v) if higher_better else -np.log(v)
            bl = blocks(s, lt, max_blocks=_throughput_blocks(int(v.size)))
            lv = bl.median
            nb = len(lv)
            if nb < 9:
                continue
            i, gain = level_split(lv, min_seg=max(3, math.ceil(0.1 * nb)))
            if i >= nb or gain < 0.3:
                continue
            before, after, tail = median(lv[:i]), median(lv[i:]), median(lv[-3:])
            drop = 1.0 - math.exp(after - before)
            ev = ThroughputEvent(
                tr.rank, metric, int(bl.first_step[i]),
                math.exp(before if higher_better else -before),
                math.exp(after if higher_better else -after), drop, bl.size,
                float(s[-1] - s[0]) / nb, int(s[-1] - s[0]))
            if ev.change < THROUGHPUT_INFO or (before - tail) < 0.5 * (before - after):
                continue
            if (before - after) < 4.0 * diff_sigma(lv):
                continue
            out.append(ev)
        if ran:
            break
    return out, ran


def _level(t: Trace, lo: int | None, hi: int | None) -> float | None:
    """Median of the values with lo <= step < hi (strided to <= 20,000 points)."""
    a = 0 if lo is None else int(np.searchsorted(t.steps, lo, side="left"))
    b = len(t) if hi is None else int(np.searchsorted(t.steps, hi, side="left"))
    return median(thin(t.values[a:b], _THIN)) if b > a else None


def _same_onset(a: int, b: int, ev: ThroughputEvent) -> bool:
    return abs(a - b) <= max(3.0 * ev.block_steps, 0.05 * ev.span, 1.0)


def _root_of(run: Run, ev: ThroughputEvent, inputs: list[InputEvent],
             strag: tuple[object, ...]) -> tuple[str, int | None, int] | None:
    """The finding that explains a throughput drop as one incident: ``(symptom, rank,
    onset)`` of a straggler that became slow, or a data wait that rose, at the same onset
    (the data wait must explain >= half of the step-time rise when step_time_s is logged)."""
    from trainmedic.diagnose.detectors.stragglers import StragglerEvent

    for s in strag:
        if isinstance(s, StragglerEvent) and s.onset is not None \
                and _same_onset(s.onset, ev.onset, ev):
            return "straggler", s.rank, s.onset
    for e in inputs:
        if not _same_onset(e.onset, ev.onset, ev) or e.share_before is None:
            continue
        if e.share < e.share_before + 0.05:
            continue
        dt = Trace.of(run, "data_time_s", e.rank)
        st = Trace.of(run, "step_time_s", e.rank if ev.rank is None else ev.rank)
        if dt is None:
            continue
        d0, d1 = _level(dt, None, ev.onset), _level(dt, ev.onset, None)
        if d0 is None or d1 is None or d1 <= d0:
            continue
        if st is not None and len(st):
            s0, s1 = _level(st, None, ev.onset), _level(st, ev.onset, None)
            if s0 is not None and s1 is not None and s1 > s0 and (d1 - d0) < 0.5 * (s1 - s0):
                continue
        return "input_bound", e.rank, e.onset
    return None


def _roots(run: Run) -> tuple[list[tuple[ThroughputEvent, tuple[str, int | None, int] | None]],
                               bool]:
    """Each throughput event with the root that explains it (or None), and whether a series
    had enough points."""
    from trainmedic.diagnose.detectors.stragglers import straggler_events

    tps, ran = throughput_events(run)
    if not tps:
        return [], ran
    inputs, _ = input_events(run)
    se = straggler_events(run)
    strag = se.events if se is not None else ()
    return [(ev, _root_of(run, ev, inputs, strag)) for ev in tps], ran


_SEV_ORDER = {"info": 0, "warning": 1, "error": 2}


def folded_throughput(run: Run, f: Finding) -> Finding:
    """``f`` (an input_bound or straggler finding) with the throughput drop it explains noted:
    its severity raised to the drop's (the incident costs what the drop costs) and the drop
    as an evidence line. The throughput detector reports that drop at info naming this root,
    and the engine folds it into this finding's ``related`` (engine.CONSEQUENCES)."""
    evs = [ev for ev, root in _roots(run)[0]
           if root is not None and root == (f.symptom, f.rank, f.onset_step)]
    if not evs:
        return f
    ev = max(evs, key=lambda e: e.change)
    sev = f.severity if _SEV_ORDER[f.severity] >= _SEV_ORDER[ev.severity] else ev.severity
    return dataclasses.replace(f, severity=sev,
                               evidence=(*f.evidence, _throughput_evidence(ev, folded=True)))


def _throughput_phrase(ev: ThroughputEvent) -> str:
    what = (f"throughput fell {100 * ev.drop:.0f}%" if ev.is_rate
            else f"step time rose {100 * ev.change:.0f}% (throughput -{100 * ev.drop:.0f}%)")
    return (f"{what} from step {ev.onset} and stayed down ({ev.metric} {fmt(ev.before)} -> "
            f"{fmt(ev.after)})")


def _throughput_evidence(ev: ThroughputEvent, *, folded: bool = False) -> Evidence:
    note = f"median level after the change point vs before it (blocks of {ev.block} points)"
    if folded:
        note = (f"throughput_regression from step {ev.onset}, same incident "
                f"({_throughput_phrase(ev)}): " + note)
    return Evidence(ev.metric, ev.onset, ev.after, ev.before, note=note)


@register_detector("throughput_regression",
                   requires_any=("samples_per_s", "tokens_per_s", "step_time_s"))
def detect_throughput_regression(run: Run) -> list[Finding] | NotRun:
    """One change point in log throughput (block medians, L1 split) with a drop of >= 20%
    (warning) or >= 10% (info) for a rate, or a rise of >= 20% / >= 10% of the step or epoch
    time, that lasts to the end: the post-split level and the last 3 blocks both stay down,
    the later segment is >= 10% of the blocks (>= 3) and the drop is >= 4 block sigmas. Uses
    samples_per_s or tokens_per_s, else step_time_s; >= 12 points (per-epoch logs: each
    point is a block). A drop that a straggler or a data-wait rise explains (same onset) is
    is folded into that finding and reported here at info only, naming the root."""
    roots, ran = _roots(run)
    if not ran:
        return NotRun("needs at least 12 throughput or step-time points")
    out = []
    for ev, root in roots:
        summary = _throughput_phrase(ev)
        evidence: tuple[Evidence, ...] = (_throughput_evidence(ev),)
        sev = ev.severity
        if root is not None:
            # One incident, one finding: the root carries the drop (and its severity); this
            # stays at info so a caller asking for throughput alone still sees it.
            sym, rank, onset = root
            what = {"input_bound": "the data wait that rose", "straggler": "the rank that "
                    "slowed"}.get(sym, sym)
            on = f" on rank {rank}" if rank is not None else ""
            summary = (f"{summary}: a consequence of {what}{on} at step {onset}, reported as "
                       f"{sym} (this drop is folded into that finding)")
            evidence = (*evidence, Evidence(ev.metric, onset, None, None, basis="measured",
                                            note=f"root: {sym}{on} from step {onset}"))
            sev = "info"
        out.append(Finding(
            symptom="throughput_regression", severity=sev, confidence=0.75,
            onset_step=ev.onset, rank=ev.rank, metric=ev.metric,
            summary=summary, evidence=evidence))
    return out
