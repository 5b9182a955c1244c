"""Detectors on where step time goes: waiting for data, slow outlier steps, a slow rank, and
throughput that dropped and stayed down.

The first few logged steps are skipped everywhere: DataLoader workers spin up, CUDA/cuDNN
autotune and ``torch.compile`` run there, and every healthy run is slow at its start.
"""

from __future__ import annotations

import math

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import (
    blocks,
    diff_sigma,
    level_split,
    median,
    robust_sigma,
    row_median,
    thin,
)
from trainmedic.diagnose.trace import Trace, fmt, traces
from trainmedic.run.series import Run

__all__ = ["INPUT_WARN_SHARE", "INPUT_INFO_SHARE", "warmup_skip"]

#: Median share of the step spent waiting for data: warning at >= 25%, info at >= 10%.
INPUT_WARN_SHARE = 0.25
INPUT_INFO_SHARE = 0.10
#: A step this many times the median (and >= median + 10 sigmas) is an outlier.
OUTLIER_RATIO = 3.0
#: A rank this much slower than the median of the others is a straggler (warning at 20%).
STRAGGLER_INFO = 0.10
STRAGGLER_WARN = 0.20
#: Throughput drop that stays to the end: warning at >= 20%, info at >= 10%.
THROUGHPUT_WARN = 0.20
THROUGHPUT_INFO = 0.10


def warmup_skip(n: int) -> int:
    """How many leading points to ignore: max(3, 2% of them), never more than a quarter."""
    return min(max(3, math.ceil(0.02 * n)), n // 4)


def _aligned(a: Trace, b: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if a.steps.shape == b.steps.shape and bool(np.array_equal(a.steps, b.steps)):
        return a.steps, a.values, b.values
    steps, ia, ib = np.intersect1d(a.steps, b.steps, assume_unique=True, return_indices=True)
    return steps, a.values[ia], b.values[ib]


def _valid_durations(metric: str, v: np.ndarray) -> np.ndarray:
    """The durations that can be real: > 0, or >= 0 for a data wait (a prefetching loader
    waits for nothing). Negative ones (and zero step times) are logging bugs."""
    return v[v >= 0] if metric == "data_time_s" else v[v > 0]


# --------------------------------------------------------------------------- input_bound
@register_detector("input_bound", requires=("data_time_s",),
                   requires_any=("step_time_s", "compute_time_s"))
def detect_input_bound(run: Run) -> list[Finding] | NotRun:
    """Median of data_time_s / step_time_s over the steps after warm-up (or
    data / (data + compute) when only compute_time_s is logged, or when step_time_s evidently
    excludes the data wait): warning at >= 25%, info at >= 10%."""
    out: list[Finding] = []
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
        n_bad = int(steps.size - np.count_nonzero(valid))
        n_all = int(steps.size)
        steps, d, o = steps[valid], d[valid], o[valid]
        if steps.size < 5:
            continue
        ran = True
        skip = warmup_skip(steps.size)
        steps, d, o = steps[skip:], d[skip:], o[skip:]
        with np.errstate(invalid="ignore", divide="ignore"):
            share = d / o
            ref_txt = "data_time_s / step_time_s"
            ok = share[np.isfinite(share)]
            if other is ct or (ok.size and median(ok) > 1.0):
                share = d / (d + o)
                ref_txt = f"data_time_s / (data_time_s + {other.metric})"
        share = np.where(np.isfinite(share), share, np.nan)
        ok = share[np.isfinite(share)]
        if ok.size == 0:
            continue
        med = median(ok)
        if med < INPUT_INFO_SHARE:
            continue
        sev: Severity = "warning" if med >= INPUT_WARN_SHARE else "info"
        thr = INPUT_WARN_SHARE if sev == "warning" else INPUT_INFO_SHARE
        bl = blocks(steps, np.nan_to_num(share), max_blocks=50)
        hi = bl.median >= thr
        # Onset: the first block from which most later blocks stay above the threshold.
        frac_after = np.cumsum(hi[::-1])[::-1] / np.arange(len(hi), 0, -1)
        cand = np.flatnonzero(hi & (frac_after >= 0.7))
        onset = int(bl.first_step[cand[0]]) if cand.size else int(steps[0])
        out.append(Finding(
            symptom="input_bound", severity=sev, confidence=0.85, onset_step=onset,
            rank=dt.rank, metric="data_time_s",
            summary=(f"{100 * med:.0f}% of each step was spent waiting for data (median "
                     f"data wait {fmt(median(d))} s vs {other.metric} "
                     f"{fmt(median(o))} s)"),
            evidence=(Evidence("data_time_s", onset, median(d),
                               median(o),
                               note=f"medians after the first {skip} logged steps; share = "
                                    f"median of {ref_txt}" + (
                                        f"; {n_bad} of {n_all} steps with a negative or zero "
                                        f"time were dropped" if n_bad else "")),)))
    if not ran:
        return NotRun("needs at least 5 steps with both data_time_s and step/compute time")
    return out


# --------------------------------------------------------------------------- outliers
MIN_OUTLIER_EXCESS_S = 0.010
"""An outlier step must take at least this much longer than the median step."""
MIN_WARN_LOST_S = 1.0
"""Outliers must cost at least this much time in total for a warning."""


@register_detector("step_time_outliers", requires=("step_time_s",))
def detect_step_time_outliers(run: Run) -> list[Finding] | NotRun:
    """Steps >= 3x the median step time, >= median + 10 robust sigmas and >= median + 10 ms
    (after warm-up). Reported when they cost >= 2% of the total time: warning at >= 10% and
    >= 1 s lost in total, else info. The absolute floors keep OS scheduling jitter (a few ms
    on a shared CPU) on sub-millisecond steps from counting as a problem: nothing that costs
    less than a second over the whole run is worth a user's attention."""
    out: list[Finding] = []
    trs = traces(run, "step_time_s", min_points=20)
    for st in trs:
        skip = warmup_skip(len(st))
        v, s = st.values[skip:], st.steps[skip:]
        # Non-positive step times are logging bugs (see detect_input_bound): dropped.
        pos = v > 0
        v, s = v[pos], s[pos]
        if v.size < 10:
            continue
        med = median(thin(v))
        if med <= 0:
            continue
        sig = robust_sigma(thin(v))
        out_mask = ((v >= OUTLIER_RATIO * med) & (v >= med + 10.0 * sig)
                    & (v >= med + MIN_OUTLIER_EXCESS_S))
        k = int(out_mask.sum())
        if k == 0:
            continue
        excess = float(np.sum(v[out_mask] - med))
        share = excess / float(np.sum(v))
        if share < 0.02:
            continue
        sev: Severity = ("warning" if share >= 0.10 and excess >= MIN_WARN_LOST_S
                         else "info")
        osteps = s[out_mask]
        cadence = ""
        if osteps.size >= 3:
            gaps = np.diff(osteps)
            g = median(gaps)
            if g > 0 and robust_sigma(gaps) <= 0.1 * g:
                cadence = f", recurring every ~{g:.0f} steps (checkpoint/eval/GC cadence?)"
        worst = int(np.argmax(np.where(out_mask, v, -np.inf)))
        out.append(Finding(
            symptom="step_time_outliers", severity=sev, confidence=0.8,
            onset_step=int(osteps[0]), end_step=int(osteps[-1]), rank=st.rank,
            metric="step_time_s",
            summary=(f"{k} step(s) took >= {OUTLIER_RATIO:.0f}x the median "
                     f"{fmt(med)} s, costing {100 * share:.1f}% of the run's time{cadence}"),
            evidence=(Evidence("step_time_s", int(s[worst]), float(v[worst]), med,
                               note=f"slowest step vs the median of all steps after the "
                                    f"first {skip}"),)))
    if not trs:
        return NotRun("needs at least 20 step_time_s points")
    return out


# --------------------------------------------------------------------------- straggler
_STRAGGLER_METRICS = ("compute_time_s", "data_time_s", "step_time_s")


@register_detector("straggler", requires_any=_STRAGGLER_METRICS)
def detect_straggler(run: Run) -> list[Finding] | NotRun:
    """With >= 2 ranks: a rank whose median compute_time_s (pre-sync), data_time_s or, failing
    those, step_time_s is >= 10% above the median of the other ranks' medians and >= 5 ms,
    and slowest in >= 60% of blocks. Warning at >= 20%. step_time_s is weak evidence under DDP
    (the all-reduce makes every rank wait for the slowest), so it lowers the confidence."""
    ranks = [r for r in run.ranks() if r is not None]
    if len(ranks) < 2:
        return NotRun("needs per-rank timings from at least 2 ranks")
    out: list[Finding] = []
    for metric in _STRAGGLER_METRICS:
        per: dict[int, Trace] = {}
        for r in ranks:
            t = Trace.of(run, metric, r)
            if t is not None and len(t) >= 5:
                per[r] = t
        if len(per) < 2:
            continue
        meds = {r: median(_valid_durations(metric, t.values[warmup_skip(len(t)):]))
                for r, t in per.items()}
        if any(not math.isfinite(m) for m in meds.values()):
            continue
        slow = max(meds, key=lambda r: meds[r])
        others = median(np.array([m for r, m in meds.items() if r != slow]))
        excess = meds[slow] - others
        if others <= 0 or excess / others < STRAGGLER_INFO or excess < 0.005:
            continue
        # Consistency: the rank is the slowest in most blocks of common steps.
        common = per[slow].steps
        for t in per.values():
            common = np.intersect1d(common, t.steps, assume_unique=True)
        consistent = 1.0
        if common.size >= 10:
            mat = np.vstack([t.values[np.searchsorted(t.steps, common)] for t in per.values()])
            order = list(per)
            nb = min(20, common.size // 3)
            chunks = np.array_split(np.arange(common.size), nb)
            slowest = [order[int(np.argmax(row_median(mat[:, c])))] for c in chunks]
            consistent = sum(1 for r in slowest if r == slow) / len(slowest)
        if consistent < 0.6:
            continue
        rel = excess / others
        sev: Severity = "warning" if rel >= STRAGGLER_WARN else "info"
        conf = 0.85 if metric != "step_time_s" else 0.55
        ev = [Evidence(metric, None, meds[slow], others,
                       note=f"median {metric} on rank {slow} vs the median of the other "
                            f"ranks' medians; slowest in {100 * consistent:.0f}% of blocks")]
        comm = {r: Trace.of(run, "comm_time_s", r) for r in per}
        if all(c is not None and len(c) for c in comm.values()):
            cm = {r: median(c.values) for r, c in comm.items() if c is not None}
            ev.append(Evidence("comm_time_s", None, cm[slow],
                               median(np.array([v for r, v in cm.items() if r != slow])),
                               note="the straggler waits least in the collective: the others "
                                    "wait for it"))
        out.append(Finding(
            symptom="straggler", severity=sev, confidence=conf,
            onset_step=int(per[slow].steps[0]), rank=slow, metric=metric,
            summary=(f"rank {slow} is {100 * rel:.0f}% slower in {metric} than the other "
                     f"ranks ({fmt(meds[slow])} s vs {fmt(others)} s)"),
            evidence=tuple(ev)))
        break
    return out


# --------------------------------------------------------------------------- throughput
@register_detector("throughput_regression",
                   requires_any=("samples_per_s", "tokens_per_s", "step_time_s"))
def detect_throughput_regression(run: Run) -> list[Finding] | NotRun:
    """One change point in log throughput (block medians, L1 split) with a drop of >= 20%
    (warning) or >= 10% (info) that lasts to the end: the post-split level and the last 3
    blocks both stay down, the later segment is >= 10% of the blocks and the drop is >= 4
    block sigmas. Uses samples_per_s or tokens_per_s, else 1/step_time_s."""
    out: list[Finding] = []
    ran = False
    for metric, higher_better in (("samples_per_s", True), ("tokens_per_s", True),
                                  ("step_time_s", False)):
        for tr in traces(run, metric):
            pos = tr.values > 0
            v, s = tr.values[pos], tr.steps[pos]
            if v.size < 20:
                continue
            ran = True
            skip = warmup_skip(v.size)
            v, s = v[skip:], s[skip:]
            lt = np.log(v) if higher_better else -np.log(v)
            bl = blocks(s, lt, max_blocks=min(200, max(10, v.size // 5)))
            lv = bl.median
            nb = len(lv)
            if nb < 10:
                continue
            k, gain = level_split(lv, min_seg=max(3, math.ceil(0.1 * nb)))
            if k >= nb or gain < 0.3:
                continue
            before = median(lv[:k])
            after = median(lv[k:])
            tail = median(lv[-3:])
            drop = 1.0 - math.exp(after - before)
            sig = diff_sigma(lv)
            if drop < THROUGHPUT_INFO or (before - tail) < 0.5 * (before - after):
                continue
            if (before - after) < 4.0 * sig:
                continue
            sev: Severity = "warning" if drop >= THROUGHPUT_WARN else "info"
            onset = int(bl.first_step[k])
            b_val = math.exp(before if higher_better else -before)
            a_val = math.exp(after if higher_better else -after)
            out.append(Finding(
                symptom="throughput_regression", severity=sev, confidence=0.75,
                onset_step=onset, rank=tr.rank, metric=metric,
                summary=(f"throughput fell {100 * drop:.0f}% from step {onset} and stayed "
                         f"down ({metric} {fmt(b_val)} -> {fmt(a_val)})"),
                evidence=(Evidence(metric, onset, a_val, b_val,
                                   note="median level after the change point vs before it "
                                        f"(blocks of {bl.size} points)"),)))
        if ran:
            break
    if not ran:
        return NotRun("needs at least 20 throughput or step-time points")
    return out
