"""Detectors on where step time goes: waiting for data, and throughput that dropped and stayed
down (slow outlier steps are in ``outliers.py``, the slow rank in ``stragglers.py``).

The first few logged steps are skipped everywhere: DataLoader workers spin up, CUDA/cuDNN
autotune and ``torch.compile`` run there, and every healthy run is slow at its start.

Numbers and words are apart: ``input_events`` and ``throughput_events``
return small dataclasses (onset, levels, thresholds crossed); the detectors build the
findings' prose from them. One incident is one finding: a throughput drop that an input stall
or a straggler explains (same onset) is reported at info naming that root, and the root
carries the drop's severity and evidence (``folded_throughputs``); the engine folds the drop
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

from trainmedic.diagnose.detectors.averages import (
    THROUGHPUT_SERIES,
    short_slowdown,
    slower_than_average,
)
from trainmedic.diagnose.finding import SEVERITY_ORDER, Evidence, Finding, Severity
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import (
    blocks,
    diff_sigma,
    level_split,
    median,
    thin,
)
from trainmedic.diagnose.trace import Trace, fmt, traces
from trainmedic.run.series import Run

__all__ = ["INPUT_WARN_SHARE", "INPUT_INFO_SHARE", "warmup_skip", "InputEvent",
           "ThroughputEvent", "input_events", "throughput_events", "folded_throughputs"]

#: Median share of the step spent waiting for data: warning at >= 25%, info at >= 10%.
INPUT_WARN_SHARE = 0.25
INPUT_INFO_SHARE = 0.10
#: With only 3-4 logged points, each must wait at least this share of its step.
SHORT_INPUT_SHARE = 0.5
#: Throughput drop that stays to the end: warning when a third of the throughput is lost (a
#: rate down >= 33%, a step or epoch time up >= 50%), info from a 10% change. On a shared
#: host, co-located load moves a healthy run's step time by 20-60% for minutes (measured on
#: the trained corpus's healthy runs: +24% to +63%); an injected slowdown halves throughput.
THROUGHPUT_WARN = 1.0 / 3.0
#: Steps under this many seconds are dominated by the host (Python overhead, the scheduler):
#: a co-located process moves a 1 ms step by 50-60% (measured on the independent corpus's
#: healthy CPU runs: 0.90 -> 1.38 ms, 0.82 -> 1.29 ms), so there a warning needs the step time
#: doubled (half the throughput lost), as an injected slowdown does.
TINY_STEP_S = 0.005
TINY_STEP_WARN = 0.5
THROUGHPUT_INFO = 0.10
#: Points the change-point test needs (fewer: ``averages.short_slowdown``).
THROUGHPUT_MIN_POINTS = 12
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
    time_share: float | None = None
    """Total data wait over total step time, when stalls at a few steps make it >= 25% while
    the median share is lower (the median hides them; the wall time does not)."""
    stalls: tuple[int, ...] = ()
    """The steps of those stalls."""
    stall_max: float = 0.0
    stall_max_step: int = 0

    @property
    def severity(self) -> Severity:
        return "warning" if max(self.share, self.time_share or 0.0) >= INPUT_WARN_SHARE \
            else "info"


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
            # 3-4 points (an issue excerpt): only when every one waits >= half its step
            few, ratio = _shares(d, o, other)
            if steps.size >= 3 and bool(np.all(few >= SHORT_INPUT_SHARE)):
                ran = True
                out.append(InputEvent(dt.rank, int(steps[0]), median(few), None, median(d),
                                      median(o), other.metric, f"{ratio} (every logged point)",
                                      0, n_bad, n_all, rise=False))
            continue
        ran = True
        skip = warmup_skip(steps.size)
        k = _stride(steps.size - skip)
        warm = (steps[:skip], d[:skip], o[:skip])
        steps, d, o = steps[skip::k], d[skip::k], o[skip::k]
        share, ratio = _shares(d, o, other)
        med = median(share)
        stall = _stall_event(dt.rank, steps, d, o, med, ratio, skip, n_bad, n_all, other.metric)
        if stall is not None:
            out.append(stall)
            continue
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
            onset = int(bl.first_step[i])
            if i == 0 and skip:
                # high from the first judged point: when the warm-up points (left out of
                # the level) were high too, the loader was slow from the first step
                with np.errstate(invalid="ignore", divide="ignore"):
                    wd, wo = warm[1], warm[2]
                    ws = wd / (wd + wo) if "+" in ratio else wd / wo
                if float(np.mean(np.nan_to_num(ws) >= thr)) >= 0.5:
                    onset = int(warm[0][0])
            out.append(InputEvent(
                dt.rank, onset, med, median(lv[:i]) if i else None,
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


def _shares(d: np.ndarray, o: np.ndarray, other: Trace) -> tuple[np.ndarray, str]:
    """Each point's share of the step spent waiting for data, and how it was computed:
    data / step time, or data / (data + compute) when only compute_time_s is logged or when
    the step time evidently excludes the wait (median ratio > 1)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        share = d / o
        ratio = "data_time_s / step_time_s"
        if other.metric == "compute_time_s" or median(share) > 1.0:
            share = d / (d + o)
            ratio = f"data_time_s / (data_time_s + {other.metric})"
    return np.where(np.isfinite(share), share, 0.0), ratio


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
    return folded_throughputs(run, [_input_finding(e) for e in events])


def _stall_event(rank: int | None, steps: np.ndarray, d: np.ndarray, o: np.ndarray, med: float,
                 ratio: str, skip: int, n_bad: int, n_all: int, metric: str
                 ) -> InputEvent | None:
    """Data-loading stalls: the total data wait over the total step time is >= 25% while
    the median share is under it, and that wait sits in stalls (points waiting >= 10x the
    lower quartile of the waits and >= 10% of the median step). A loader that cannot keep up
    every few batches (too few workers for a slow reader) costs wall time that a median does
    not see."""
    if med >= INPUT_WARN_SHARE:
        return None
    # The usual wait: the lower quartile (stalls at every other logged step make the median
    # a stall itself).
    md, mo = float(np.percentile(d, 25)), median(o)
    hit = (d >= 10.0 * md) & (d >= 0.1 * mo)
    if not bool(hit.any()) or float(np.sum(d[hit])) < 0.5 * float(np.sum(d)):
        return None
    # The wall-time share, estimated two ways, the lower kept: each logged point as the
    # average of its logging window (PaddleOCR's avg_reader_cost), or as one step's own
    # reading that stands for its window only at the other points (a log every 50 batches
    # always holds batch 0, where a worker start-up stall sits).
    whole = d + o if "+" in ratio else o
    gap = np.diff(steps, append=steps[-1] + (np.median(np.diff(steps)) if steps.size > 1
                                             else 1)).astype(np.float64)
    w = np.where(hit, 1.0, np.maximum(gap, 1.0))
    # (>= a quarter of the points wait no more than the lower quartile: never all stalls)
    filled = float(np.sum((gap[hit] - 1).clip(0)))  # steps a stall's window holds besides it
    wd = float(np.sum(d * w)) + filled * median(d[~hit])
    wo = float(np.sum(whole * w)) + filled * median(whole[~hit])
    total = float(np.sum(whole))
    tot = min(float(np.sum(d)) / total if total > 0 else 0.0, wd / wo if wo > 0 else 0.0)
    if tot < INPUT_WARN_SHARE:
        return None
    at = tuple(int(x) for x in steps[hit])
    return InputEvent(rank, at[0], med, None, md, mo, metric, ratio, skip, n_bad, n_all,
                      rise=False, time_share=tot, stalls=at, stall_max=float(d[hit].max()),
                      stall_max_step=int(steps[hit][int(np.argmax(d[hit]))]))


def _input_finding(e: InputEvent) -> Finding:
    dropped = (f"; {e.n_bad} of {e.n_all} steps with a negative or zero time were dropped"
               if e.n_bad else "")
    if e.stalls:
        where = ", ".join(str(x) for x in e.stalls[:5]) + (", ..." if len(e.stalls) > 5 else "")
        summary = (f"waiting for data took about {100 * (e.time_share or 0.0):.0f}% of the "
                   f"step time, in stalls of up to {fmt(e.stall_max)} s at {len(e.stalls)} "
                   f"step(s) ({where}), while the usual wait is {fmt(e.data_median)} s")
        share = Evidence("data_time_s", e.onset, e.time_share, None, basis="estimated",
                         note=f"share of the step time spent waiting for data after the "
                              f"first {e.skip} logged steps: the lower of two readings (each "
                              f"point its logging window's average, or one step's own)")
        stall = Evidence("data_time_s", e.stall_max_step, e.stall_max, e.data_median,
                         note=f"the largest stall vs the lower quartile of the waits; stalls "
                              f"wait >= 10x that and >= 10% of the median step{dropped}")
        return Finding(symptom="input_bound", severity=e.severity, confidence=0.75,
                       onset_step=e.onset, rank=e.rank, metric="data_time_s", summary=summary,
                       evidence=(share, stall))
    if e.rise:
        summary = (f"waiting for data rose at step {e.onset} to {100 * e.share:.0f}% of each "
                   f"step (from {100 * (e.share_before or 0.0):.0f}% before; median data "
                   f"wait {fmt(e.data_median)} s vs {e.other_metric} {fmt(e.other_median)} s)")
        note = f"medians from the onset; share = median of {e.ratio}{dropped}"
    else:
        summary = (f"{100 * e.share:.0f}% of each step was spent waiting for data (median "
                   f"data wait {fmt(e.data_median)} s vs {e.other_metric} "
                   f"{fmt(e.other_median)} s)")
        note = (f"medians{f' after the first {e.skip} logged steps' if e.skip else ''}; "
                f"share = median of "
                f"{e.ratio}{dropped}")
    ev = [Evidence("data_time_s", e.onset, e.data_median, e.other_median, note=note)]
    if e.share_before is not None:
        ev.append(Evidence("data_time_s", e.onset, e.share, e.share_before,
                           note="share of the step spent waiting for data from the onset "
                                "vs before it (median of block medians)"))
    return Finding(symptom="input_bound", severity=e.severity, confidence=0.85,
                   onset_step=e.onset, rank=e.rank, metric="data_time_s", summary=summary,
                   evidence=tuple(ev))


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
    creep: float = 0.0
    """For a steady creep (block medians ranked against time, Spearman <= -0.8): the share of
    throughput lost from the first tenth of the blocks to the last, which a split into two
    levels understates (each side's median sits mid-slope); 0 otherwise. Told in the summary."""

    @property
    def is_rate(self) -> bool:
        return self.metric != "step_time_s"

    @property
    def change(self) -> float:
        """What the severity is read from: the rate's drop, or the time's rise."""
        return self.drop if self.is_rate else 1.0 / (1.0 - self.drop) - 1.0

    @property
    def severity(self) -> Severity:
        # (Severity reads the two-level drop only: a steady 1.5x creep on a shared host was
        # measured on a healthy CPU run, so the creep is told, not judged.)
        tiny = not self.is_rate and self.before < TINY_STEP_S
        return "warning" if self.drop >= (TINY_STEP_WARN if tiny else THROUGHPUT_WARN) \
            else "info"


def _throughput_blocks(n: int) -> int:
    """Block count: every point its own block up to 60 points (per-epoch series), else
    n/5 within [60, 200]."""
    return n if n <= 60 else min(200, max(60, n // 5))


def throughput_events(run: Run) -> tuple[list[ThroughputEvent], bool]:
    """The throughput_regression events, and whether a series had enough points (>= 12)."""
    out: list[ThroughputEvent] = []
    ran = False
    for metric, higher_better in THROUGHPUT_SERIES:
        for tr in traces(run, metric):
            pos = tr.values > 0
            v, s = tr.values[pos], tr.steps[pos]
            if v.size < THROUGHPUT_MIN_POINTS:
                continue
            ran = True
            # A log that starts in a later epoch (an excerpt from epoch 10) has no warm-up.
            ep = Trace.of(run, "epoch", tr.rank) or Trace.of(run, "epoch", None)
            skip = 0 if ep is not None and len(ep) and float(ep.values[0]) >= 2 \
                else warmup_skip(v.size)
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
            tenth = max(2, nb // 10)
            rho = float(np.corrcoef(np.argsort(np.argsort(lv)), np.arange(nb))[0, 1])
            ev = ThroughputEvent(
                tr.rank, metric, int(bl.first_step[i]),
                math.exp(before if higher_better else -before),
                math.exp(after if higher_better else -after), drop, bl.size,
                float(s[-1] - s[0]) / nb, int(s[-1] - s[0]),
                creep=1.0 - math.exp(median(lv[-tenth:]) - median(lv[:tenth]))
                if rho <= -0.8 else 0.0)
            if ev.change < THROUGHPUT_INFO or (before - tail) < 0.5 * (before - after) or \
                    (before - float(lv[-1])) < 0.25 * (before - after):
                continue  # (back at the old level at the last block: it did not last)
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




def folded_throughputs(run: Run, fs: list[Finding]) -> list[Finding]:
    """Each of ``fs`` (input_bound or straggler findings) with the throughput drop it explains
    noted: its severity raised to the drop's (the incident costs what the drop costs) and the
    drop as an evidence line. The throughput detector reports that drop at info naming this
    root, and the engine folds it into this finding's ``related`` (engine.CONSEQUENCES). The
    throughput events and their roots are read once for all of ``fs``."""
    if not fs:
        return fs
    roots = _roots(run)[0]
    return [_folded(roots, f) for f in fs]


def _folded(roots: list[tuple[ThroughputEvent, tuple[str, int | None, int] | None]],
            f: Finding) -> Finding:
    evs = [ev for ev, root in roots
           if root is not None and root == (f.symptom, f.rank, f.onset_step)]
    if not evs:
        return f
    ev = max(evs, key=lambda e: e.change)
    sev = f.severity if f.level >= SEVERITY_ORDER[ev.severity] else ev.severity
    return dataclasses.replace(f, severity=sev,
                               evidence=(*f.evidence, _throughput_evidence(ev, folded=True)))


def _throughput_phrase(ev: ThroughputEvent) -> str:
    what = (f"throughput fell {100 * ev.drop:.0f}%" if ev.is_rate
            else f"step time rose {100 * ev.change:.0f}% (throughput -{100 * ev.drop:.0f}%)")
    creep = (f"; a steady creep: {1.0 / (1.0 - ev.creep):.2g}x slower from the first tenth "
             f"of the run to the last" if ev.creep > ev.drop else "")
    return (f"{what} from step {ev.onset} and stayed down ({ev.metric} {fmt(ev.before)} -> "
            f"{fmt(ev.after)}){creep}")


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
    time, that lasts to the end: the post-split level and the last 3 blocks both stay down
    (by half the drop; the last block by a quarter of it),
    the later segment is >= 10% of the blocks (>= 3) and the drop is >= 4 block sigmas. Uses
    samples_per_s or tokens_per_s, else step_time_s; >= 12 points (per-epoch logs: each
    point is a block). A drop that a straggler or a data-wait rise explains (same onset) is
    is folded into that finding and reported here at info only, naming the root. A step time
    printed beside its running average is judged against it too (``averages.py``), at any
    length."""
    roots, ran = _roots(run)
    lagging = slower_than_average(run)
    if not ran:
        return lagging or short_slowdown(run, THROUGHPUT_MIN_POINTS) or \
            NotRun(f"needs at least {THROUGHPUT_MIN_POINTS} throughput or step-time points")
    out = [f for f in lagging if not any(ev.rank == f.rank for ev, _ in roots)]
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
