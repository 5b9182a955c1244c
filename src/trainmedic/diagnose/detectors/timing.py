"""Detectors on where step time goes: waiting for data, slow outlier steps, a slow rank, and
throughput that dropped and stayed down.

The first few logged steps are skipped everywhere: DataLoader workers spin up, CUDA/cuDNN
autotune and ``torch.compile`` run there, and every healthy run is slow at its start.
"""

from __future__ import annotations

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
#: A straggler's excess, as a share of the step (data wait) or of the other ranks' value
#: (compute): info at >= 10%, warning at >= 20%; it must be the slowest in >= 60% of blocks.
STRAGGLER_INFO = 0.10
STRAGGLER_WARN = 0.20
STRAGGLER_CONSISTENT = 0.6
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
STRAGGLER_MIN_EXCESS_S = 0.001
"""A straggler's median excess must be at least this: below a millisecond per step, OS
scheduling and Python overhead on a shared host make ranks differ by that much with nothing
wrong (measured: 0.07 ms between two idle gloo ranks on one 2-core host)."""
STEP_STRAGGLER_MIN_EXCESS_S = 0.005
"""The floor when only step_time_s is logged: synchronized ranks' step times are equal step
by step, but their medians can differ by a millisecond or more (measured: 18.5 vs 17.1 ms with
equal means) when the step time is bimodal."""
STRAGGLER_MAX_CHANCE = 0.01
"""The rank must be the slowest in more blocks than chance allows: with R equal ranks, the
chance that any of them is the slowest in that many blocks (R times the binomial tail with
p = 1/R, a Bonferroni bound: the rank tested is the one with the highest median) must be
<= this."""

_STRAGGLER_MAX_BLOCKS = 20


@dataclass(frozen=True)
class _Slowest:
    """The slowest rank in one metric, and by how much."""

    metric: str
    rank: int
    value: float
    """Its median, after warm-up."""
    others: float
    """The median of the other ranks' medians."""
    share: float
    """Severity measure: the excess over ``others`` relative to the step (data wait), to the
    others' value (compute, step time)."""
    consistent: float
    """Fraction of blocks of common steps in which it was the slowest."""

    @property
    def excess(self) -> float:
        return self.value - self.others


def _binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return float(sum(math.comb(n, i) * p**i * (1.0 - p) ** (n - i) for i in range(k, n + 1)))


def _rank_medians(run: Run, metric: str, ranks: list[int]) -> dict[int, Trace]:
    per: dict[int, Trace] = {}
    for r in ranks:
        t = Trace.of(run, metric, r)
        if t is not None and len(t) >= 5:
            per[r] = t
    return per


def _median_after_warmup(metric: str, t: Trace) -> float:
    return median(_valid_durations(metric, t.values[warmup_skip(len(t)):]))


def _consistency(per: dict[int, Trace], slow: int) -> float | None:
    """Fraction of blocks (<= 20, after warm-up) of the steps all ranks logged in which
    ``slow`` has the highest block median; None when it is not beyond chance (or there are
    fewer than 10 common steps, where 1.0 is returned: too few to test)."""
    common = per[slow].steps
    for t in per.values():
        common = np.intersect1d(common, t.steps, assume_unique=True)
    common = common[warmup_skip(common.size):]
    if common.size < 10:
        return 1.0
    mat = np.vstack([t.values[np.searchsorted(t.steps, common)] for t in per.values()])
    order = list(per)
    nb = min(_STRAGGLER_MAX_BLOCKS, common.size)
    chunks = np.array_split(np.arange(common.size), nb)
    k = sum(1 for c in chunks if order[int(np.argmax(row_median(mat[:, c])))] == slow)
    if len(per) * _binomial_tail(k, nb, 1.0 / len(per)) > STRAGGLER_MAX_CHANCE:
        return None
    return k / nb


def _slowest(run: Run, metric: str, ranks: list[int], step_ref: float | None,
             floor_s: float) -> _Slowest | None:
    per = _rank_medians(run, metric, ranks)
    if len(per) < 2:
        return None
    meds = {r: _median_after_warmup(metric, t) for r, t in per.items()}
    if any(not math.isfinite(m) for m in meds.values()):
        return None
    slow = max(meds, key=lambda r: meds[r])
    others = median(np.array([m for r, m in meds.items() if r != slow]))
    excess = meds[slow] - others
    if excess < floor_s:
        return None
    if metric == "data_time_s":
        # The other ranks wait at the gradient sync for this rank's extra data wait: its
        # cost is that excess as a share of the (equalized) step. The others' own data wait
        # is no reference: a prefetching loader waits ~0 s, which makes any ratio huge.
        ref = step_ref if step_ref is not None else others
    else:
        # How much slower the rank computes: the node's slowdown factor.
        ref = others
    share = excess / ref if ref > 0 else math.inf
    if share < STRAGGLER_INFO:
        return None
    consistent = _consistency(per, slow)
    if consistent is None or consistent < STRAGGLER_CONSISTENT:
        return None
    return _Slowest(metric, slow, meds[slow], others, share, consistent)


def _step_reference(run: Run, ranks: list[int]) -> float | None:
    """The step time all ranks share under synchronous data parallelism: the median of the
    ranks' median step_time_s, else of their data + compute time."""
    meds = [_median_after_warmup("step_time_s", t)
            for t in _rank_medians(run, "step_time_s", ranks).values()]
    meds = [m for m in meds if math.isfinite(m) and m > 0]
    if meds:
        return median(np.array(meds))
    d = _rank_medians(run, "data_time_s", ranks)
    c = _rank_medians(run, "compute_time_s", ranks)
    sums = [_median_after_warmup("data_time_s", d[r]) + _median_after_warmup("compute_time_s", c[r])
            for r in d if r in c]
    sums = [s for s in sums if math.isfinite(s) and s > 0]
    return median(np.array(sums)) if sums else None


@register_detector("straggler", requires_any=_STRAGGLER_METRICS)
def detect_straggler(run: Run) -> list[Finding] | NotRun:
    """With >= 2 ranks, the rank that holds the others up at the gradient sync.

    Under DDP the all-reduce in backward makes every rank wait for the slowest, so step times
    are equal across ranks; what differs is the work before the sync: the data wait
    (``data_time_s``) and the forward (``compute_time_s``). A rank is a straggler in one of
    them when its median (after warm-up) is >= 1 ms above the median of the other ranks'
    medians, and that excess is >= 10% of the step for the data wait (the share of the run
    every rank spends waiting for it), or >= 10% of the others' value for compute (how much
    slower that rank computes); and it is the slowest in >= 60% of <= 20 blocks of common
    steps, more often than chance (binomial tail <= 1% with each rank slowest at 1/R).
    Warning at >= 20%. step_time_s is used only when neither is logged, with a 5 ms floor and
    lower confidence. A rank whose forward is slower only by about another rank's extra data
    wait is waiting for it in a collective inside the forward (DDP ``broadcast_buffers``,
    FSDP all-gathers): that rank is not reported, the data straggler is."""
    ranks = [r for r in run.ranks() if r is not None]
    if len(ranks) < 2:
        return NotRun("needs per-rank timings from at least 2 ranks")
    step_ref = _step_reference(run, ranks)
    data = _slowest(run, "data_time_s", ranks, step_ref, STRAGGLER_MIN_EXCESS_S)
    comp = _slowest(run, "compute_time_s", ranks, step_ref, STRAGGLER_MIN_EXCESS_S)
    notes: dict[int, list[Evidence]] = {}
    if data is not None and comp is not None and comp.rank != data.rank \
            and comp.excess <= 1.1 * data.excess + STRAGGLER_MIN_EXCESS_S:
        notes.setdefault(data.rank, []).append(Evidence(
            "compute_time_s", None, comp.value, comp.others,
            note=f"rank {comp.rank}'s forward is slower by about rank {data.rank}'s extra "
                 f"data wait: it waits for rank {data.rank} in a collective inside the timed "
                 "forward (e.g. DDP broadcast_buffers), so it is not a straggler itself"))
        comp = None
    found = [s for s in (comp, data) if s is not None]
    if data is not None and comp is not None and comp.rank == data.rank:
        # One finding per rank: the larger excess names it, the other is evidence.
        main, extra = (comp, data) if comp.excess >= data.excess else (data, comp)
        notes.setdefault(main.rank, []).append(_evidence(extra))
        found = [main]
    has_split = any(len(_rank_medians(run, m, ranks)) >= 2
                    for m in ("data_time_s", "compute_time_s"))
    if not found and not has_split:
        st = _slowest(run, "step_time_s", ranks, step_ref, STEP_STRAGGLER_MIN_EXCESS_S)
        found = [st] if st is not None else []
    return [_straggler_finding(run, s, step_ref, notes.get(s.rank, [])) for s in found]


def _evidence(s: _Slowest) -> Evidence:
    return Evidence(s.metric, None, s.value, s.others,
                    note=f"median {s.metric} on rank {s.rank} vs the median of the other "
                         f"ranks' medians; slowest in {100 * s.consistent:.0f}% of blocks")


def _straggler_finding(run: Run, s: _Slowest, step_ref: float | None,
                       notes: list[Evidence]) -> Finding:
    sev: Severity = "warning" if s.share >= STRAGGLER_WARN else "info"
    ms = f"{1e3 * s.excess:.3g} ms"
    if s.metric == "data_time_s":
        of_step = (f", about {100 * s.share:.0f}% of each {fmt(step_ref)} s step"
                   if step_ref is not None else "")
        summary = (f"rank {s.rank}'s input pipeline holds the other ranks up: it waits "
                   f"{fmt(s.value)} s per step for data vs {fmt(s.others)} s on the others, "
                   f"and every rank waits for it at the gradient sync ({ms} per step"
                   f"{of_step})")
    elif s.metric == "compute_time_s":
        slower = (f"{1 + s.share:.3g}x as long" if s.share >= 1
                  else f"{100 * s.share:.0f}% longer")
        summary = (f"rank {s.rank} computes slower than the other ranks: its forward takes "
                   f"{slower} ({fmt(s.value)} s vs {fmt(s.others)} s), and every rank waits "
                   f"for it at the gradient sync")
    else:
        summary = (f"rank {s.rank} is {100 * s.share:.0f}% slower in step_time_s than the "
                   f"other ranks ({fmt(s.value)} s vs {fmt(s.others)} s); log data_time_s and "
                   f"compute_time_s per rank to tell a slow input pipeline from slow compute")
    ev = [_evidence(s), *notes]
    comm = {r: Trace.of(run, "comm_time_s", r) for r in run.ranks() if r is not None}
    if s.rank in comm and all(c is not None and len(c) for c in comm.values()):
        cm = {r: median(c.values) for r, c in comm.items() if c is not None}
        ev.append(Evidence("comm_time_s", None, cm[s.rank],
                           median(np.array([v for r, v in cm.items() if r != s.rank])),
                           note="the straggler waits least in the collective: the others "
                                "wait for it"))
    t = Trace.of(run, s.metric, s.rank)
    onset = int(t.steps[0]) if t is not None else None
    return Finding(
        symptom="straggler", severity=sev, confidence=0.55 if s.metric == "step_time_s" else 0.85,
        onset_step=onset, rank=s.rank, metric=s.metric, summary=summary, evidence=tuple(ev))


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
