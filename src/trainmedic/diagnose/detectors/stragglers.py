"""The ``straggler`` detector: a rank that holds the others up at the gradient sync, for the
whole run or from some step on.

Numbers and words are apart: ``straggler_events`` returns ``StragglerEvent``s (which rank, in
which metric, from which step, by how much); ``detect_straggler`` turns them into findings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import median, row_median, thin, true_runs
from trainmedic.diagnose.trace import Trace, fmt
from trainmedic.run.series import Run

__all__ = ["StragglerEvent", "straggler_events", "STRAGGLER_INFO", "STRAGGLER_WARN"]

#: A straggler's excess, as a share of the step (data wait) or of the other ranks' value
#: (compute, step time): info at >= 10%, warning at >= 20%. A whole-run straggler must be the
#: slowest in >= 60% of blocks.
STRAGGLER_INFO = 0.10
STRAGGLER_WARN = 0.20
STRAGGLER_CONSISTENT = 0.6
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
#: Change-point search: at most this many blocks of common steps (>= 5 steps each where the
#: run allows), and the slow stretch must cover >= this share of them (and >= 5 blocks).
_ONSET_MAX_BLOCKS = 50
ONSET_MIN_STRETCH = 0.2
#: Blocks before the onset in which the rank may already look slow (noise), at most.
ONSET_MAX_SLOW_BEFORE = 0.2
#: Inside the stretch, the share of blocks in which the rank must be over the threshold.
ONSET_MIN_DENSITY = 0.8


def _warmup_skip(n: int) -> int:
    from trainmedic.diagnose.detectors.timing import warmup_skip

    return warmup_skip(n)


def _valid_durations(metric: str, v: np.ndarray) -> np.ndarray:
    return v[v >= 0] if metric == "data_time_s" else v[v > 0]


@dataclass(frozen=True)
class StragglerEvent:
    """A rank slower than the others in one metric, and by how much (numbers only)."""

    metric: str
    rank: int
    value: float
    """Its median (after warm-up; over the slow stretch for an onset event)."""
    others: float
    """The median of the other ranks' medians (over the same steps)."""
    share: float
    """Severity measure: the excess over ``others`` relative to the step (data wait), to the
    others' value (compute, step time)."""
    consistent: float
    """Fraction of blocks (of the stretch, for an onset event) in which it was the slowest."""
    onset: int | None = None
    """The step from which it became slow; None for a rank slow over the whole run."""
    end: int | None = None
    """The last step of a slow stretch that ended before the run did (None: to the end)."""
    share_before: float | None = None
    """Its share before the onset (onset events only)."""

    @property
    def excess(self) -> float:
        return self.value - self.others

    @property
    def severity(self) -> Severity:
        return "warning" if self.share >= STRAGGLER_WARN else "info"


def _binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return float(sum(math.comb(n, i) * p**i * (1.0 - p) ** (n - i) for i in range(k, n + 1)))


def _beyond_chance(k: int, n: int, ranks: int) -> bool:
    return ranks * _binomial_tail(k, n, 1.0 / ranks) <= STRAGGLER_MAX_CHANCE


_TRACES: dict[tuple[int, str, tuple[int, ...]], dict[int, Trace]] | None = None
"""Rank traces read once per ``straggler_events`` call (None outside one)."""


def _rank_traces(run: Run, metric: str, ranks: list[int]) -> dict[int, Trace]:
    key = (id(run), metric, tuple(ranks))
    if _TRACES is not None and key in _TRACES:
        return _TRACES[key]
    per = _read_rank_traces(run, metric, ranks)
    if _TRACES is not None:
        _TRACES[key] = per
    return per


def _read_rank_traces(run: Run, metric: str, ranks: list[int]) -> dict[int, Trace]:
    per: dict[int, Trace] = {}
    for r in ranks:
        t = Trace.of(run, metric, r)
        if t is not None and len(t) >= 5:
            per[r] = t
    return per


def _median_after_warmup(metric: str, t: Trace) -> float:
    return median(_valid_durations(metric, thin(t.values[_warmup_skip(len(t)):])))


#: Per-rank series are strided to at most this many common steps for block medians: a
#: block level needs no more, and it keeps 1M-step, many-rank runs fast.
_MAX_COMMON = 20_000


def _common(per: dict[int, Trace]) -> tuple[np.ndarray, np.ndarray]:
    """The steps every rank logged (after warm-up; strided to <= 20,000) and the R x T matrix
    of values there."""
    ts = list(per.values())
    common = ts[0].steps
    same = all(t.steps.shape == common.shape and bool(np.array_equal(t.steps, common))
               for t in ts[1:])
    if not same:
        for t in ts[1:]:
            common = np.intersect1d(common, t.steps, assume_unique=True)
    skip = _warmup_skip(common.size)
    stride = max(1, math.ceil((common.size - skip) / _MAX_COMMON))
    if same:
        return common[skip::stride], np.vstack([t.values[skip::stride] for t in ts])
    common = common[skip::stride]
    mat = np.vstack([t.values[np.searchsorted(t.steps, common)] for t in ts])
    return common, mat


def _consistency(per: dict[int, Trace], slow: int) -> float | None:
    """Fraction of blocks (<= 20, after warm-up) of the steps all ranks logged in which
    ``slow`` has the highest block median; None when it is not beyond chance (or there are
    fewer than 10 common steps, where 1.0 is returned: too few to test)."""
    common, mat = _common(per)
    if common.size < 10:
        return 1.0
    order = list(per)
    nb = min(_STRAGGLER_MAX_BLOCKS, common.size)
    chunks = np.array_split(np.arange(common.size), nb)
    k = sum(1 for c in chunks if order[int(np.argmax(row_median(mat[:, c])))] == slow)
    if not _beyond_chance(k, nb, len(per)):
        return None
    return k / nb


def _share_ref(metric: str, step_ref: float | None, others: float) -> float:
    if metric == "data_time_s":
        # The other ranks wait at the gradient sync for this rank's extra data wait: its
        # cost is that excess as a share of the (equalized) step. The others' own data wait
        # is no reference: a prefetching loader waits ~0 s, which makes any ratio huge.
        return step_ref if step_ref is not None else others
    # How much slower the rank computes: the node's slowdown factor.
    return others


def _slowest(run: Run, metric: str, ranks: list[int], step_ref: float | None,
             floor_s: float) -> StragglerEvent | None:
    """The whole-run rule: the rank with the highest median, if it is slow enough and the
    slowest in most blocks."""
    per = _rank_traces(run, metric, ranks)
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
    ref = _share_ref(metric, step_ref, others)
    share = excess / ref if ref > 0 else math.inf
    if share < STRAGGLER_INFO:
        return None
    consistent = _consistency(per, slow)
    if consistent is None or consistent < STRAGGLER_CONSISTENT:
        return None
    return StragglerEvent(metric, slow, meds[slow], others, share, consistent)


def _onsets(run: Run, metric: str, ranks: list[int], step_ref: float | None,
            floor_s: float) -> list[StragglerEvent]:
    """The change-point rule: a rank that was not slow, then is slower than the others
    (>= 10% share and >= ``floor_s``) in >= 80% of the blocks of a stretch that covers >= 20%
    of the run (and >= 5 blocks), is the slowest there more often than chance, and was slow
    in <= 20% of the blocks before it. Onset: the first block of the stretch."""
    per = _rank_traces(run, metric, ranks)
    if len(per) < 2:
        return []
    common, mat = _common(per)
    if common.size < 12:
        return []
    # Blocks of >= 10 common steps, then (when that finds nothing) of >= 5: a stretch of the
    # minimum length (20% of the blocks) must hold enough blocks to beat chance - 8 all-slow
    # blocks for two ranks (2 x 2^-8 < 1%) - which 10-step blocks cannot give a 200-step run.
    # A short log (a per-epoch or every-10-steps CSV of 12-99 rows) is judged point by point
    # last: 10 slow points in a row are as unlikely by chance as 8 slow blocks (the chance
    # test below still applies).
    for per_block in (10, 5) if common.size >= 100 else (10, 5, 1):
        out = _onset_events(metric, per, common, mat, step_ref, floor_s, per_block)
        if out:
            return out
    return []


def _onset_events(metric: str, per: dict[int, Trace], common: np.ndarray, mat: np.ndarray,
                  step_ref: float | None, floor_s: float,
                  per_block: int) -> list[StragglerEvent]:
    nb = min(_ONSET_MAX_BLOCKS, max(5, common.size // per_block))
    b = common.size // nb
    nb = common.size // b
    grid = mat[:, : nb * b].reshape(len(per), nb, b)
    if metric == "data_time_s":
        grid = np.where(grid >= 0, grid, 0.0)
    bm = np.sort(grid, axis=2)
    bmed = 0.5 * (bm[:, :, (b - 1) // 2] + bm[:, :, b // 2])  # R x nb block medians
    first = common[: nb * b: b]
    last = common[b - 1: nb * b: b]
    order = list(per)
    slowest = np.argmax(bmed, axis=0)
    min_len = max(5, math.ceil(ONSET_MIN_STRETCH * nb))
    out: list[StragglerEvent] = []
    for i, r in enumerate(order):
        oth = np.delete(bmed, i, axis=0)
        omed = np.median(oth, axis=0)
        ref = _share_ref(metric, step_ref, median(omed))
        if not ref > 0:
            continue
        exc = bmed[i] - omed
        hi = (exc / ref >= STRAGGLER_INFO) & (exc >= floor_s)
        # Close gaps of one block (noise) before looking for the stretch.
        closed = hi.copy()
        closed[1:-1] |= hi[:-2] & hi[2:]
        runs = [(a, z) for a, z in true_runs(closed) if z - a >= min_len and a >= 1]
        if not runs:
            continue
        a, z = max(runs, key=lambda az: az[1] - az[0])
        seg = slice(a, z)
        if float(np.mean(hi[seg])) < ONSET_MIN_DENSITY:
            continue
        if float(np.mean(hi[:a])) > ONSET_MAX_SLOW_BEFORE:
            continue
        k = int(np.count_nonzero(slowest[seg] == i))
        if not _beyond_chance(k, z - a, len(per)) or k / (z - a) < STRAGGLER_CONSISTENT:
            continue
        value = median(bmed[i, seg])
        others = median(omed[seg])
        share = (value - others) / ref
        before = median(exc[:a]) / ref
        out.append(StragglerEvent(
            metric, r, value, others, share, k / (z - a), onset=int(first[a]),
            end=None if z >= nb else int(last[z - 1]), share_before=before))
    return out


def _step_reference(run: Run, ranks: list[int]) -> float | None:
    """The step time all ranks share under synchronous data parallelism: the median of the
    ranks' median step_time_s, else of their data + compute time."""
    meds = [_median_after_warmup("step_time_s", t)
            for t in _rank_traces(run, "step_time_s", ranks).values()]
    meds = [m for m in meds if math.isfinite(m) and m > 0]
    if meds:
        return median(np.array(meds))
    d = _rank_traces(run, "data_time_s", ranks)
    c = _rank_traces(run, "compute_time_s", ranks)
    sums = [_median_after_warmup("data_time_s", d[r]) + _median_after_warmup("compute_time_s", c[r])
            for r in d if r in c]
    sums = [s for s in sums if math.isfinite(s) and s > 0]
    return median(np.array(sums)) if sums else None


def _pick(run: Run, metric: str, ranks: list[int], step_ref: float | None,
          floor_s: float) -> list[StragglerEvent]:
    """Onset events first (a rank that became slow is named with its onset, even when the
    whole-run rule would also catch it), then the whole-run straggler if it is another rank."""
    found = _onsets(run, metric, ranks, step_ref, floor_s)
    whole = _slowest(run, metric, ranks, step_ref, floor_s)
    if whole is not None and all(e.rank != whole.rank for e in found):
        found.append(whole)
    return found


@dataclass(frozen=True)
class StragglerEvents:
    """Everything the straggler rule found: the events to report, and the notes that go with
    them (a forward that waits for another rank, a second metric on the same rank)."""

    events: tuple[StragglerEvent, ...]
    notes: dict[int, tuple[Evidence, ...]]
    step_ref: float | None


def straggler_events(run: Run) -> StragglerEvents | None:
    """The straggler events of a run with >= 2 ranks (None with fewer)."""
    global _TRACES
    ranks = [r for r in run.ranks() if r is not None]
    if len(ranks) < 2:
        return None
    outer = _TRACES is None
    if outer:
        _TRACES = {}
    try:
        return _straggler_events(run, ranks)
    finally:
        if outer:
            _TRACES = None


def _straggler_events(run: Run, ranks: list[int]) -> StragglerEvents:
    step_ref = _step_reference(run, ranks)
    data = _pick(run, "data_time_s", ranks, step_ref, STRAGGLER_MIN_EXCESS_S)
    comp = _pick(run, "compute_time_s", ranks, step_ref, STRAGGLER_MIN_EXCESS_S)
    notes: dict[int, list[Evidence]] = {}
    kept_comp: list[StragglerEvent] = []
    for c in comp:
        waits_for = next((d for d in data if d.rank != c.rank
                          and c.excess <= 1.1 * d.excess + STRAGGLER_MIN_EXCESS_S), None)
        if waits_for is not None:
            notes.setdefault(waits_for.rank, []).append(Evidence(
                "compute_time_s", c.onset, c.value, c.others,
                note=f"rank {c.rank}'s forward is slower by about rank {waits_for.rank}'s "
                     f"extra data wait: it waits for rank {waits_for.rank} in a collective "
                     "inside the timed forward (e.g. DDP broadcast_buffers), so it is not a "
                     "straggler itself"))
        else:
            kept_comp.append(c)
    found: list[StragglerEvent] = []
    by_rank: dict[int, list[StragglerEvent]] = {}
    for e in [*kept_comp, *data]:
        by_rank.setdefault(e.rank, []).append(e)
    for r, evs in by_rank.items():
        # One finding per rank: the larger excess names it, the other is evidence.
        evs.sort(key=lambda e: -e.excess)
        found.append(evs[0])
        notes.setdefault(r, []).extend(_evidence(e) for e in evs[1:])
    if not found:
        # Neither split names a rank (or none is logged): the step time itself. A rank whose
        # whole step is slower while its data wait is not (a slow GPU, a throttled host, a
        # step timed before the gradient sync) is still the one the others wait for.
        found = _pick(run, "step_time_s", ranks, step_ref, STEP_STRAGGLER_MIN_EXCESS_S)
    return StragglerEvents(tuple(found), {r: tuple(v) for r, v in notes.items()}, step_ref)


@register_detector("straggler")
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
    A rank that *becomes* slow (over the same thresholds in >= 80% of the blocks of a
    stretch covering >= 20% of the run, after being slow in <= 20% of the blocks before it)
    is reported with that onset. Warning at >= 20%. step_time_s is used only when neither
    names a rank (or neither is logged), with a 5 ms floor and lower confidence. A rank
    whose forward is slower only by about another rank's extra data wait is waiting for it in
    a collective inside the forward (DDP ``broadcast_buffers``, FSDP all-gathers): that rank
    is not reported, the data straggler is.

    A single-process run has nothing to compare: no finding and no "check not run". A
    multi-rank run without per-rank timings is a check not run."""
    ranks = [r for r in run.ranks() if r is not None]
    if len(ranks) < 2:
        return []
    if not any(len(_rank_traces(run, m, ranks)) >= 2 for m in _STRAGGLER_METRICS):
        return NotRun("needs per-rank timings (>= 5 points) from at least 2 ranks",
                      missing=_STRAGGLER_METRICS)
    ev = straggler_events(run)
    if ev is None:
        return []
    from trainmedic.diagnose.detectors.timing import folded_throughputs

    return folded_throughputs(run, [_straggler_finding(run, s, ev.step_ref,
                                                       list(ev.notes.get(s.rank, ())))
                                    for s in ev.events])


def _evidence(s: StragglerEvent) -> Evidence:
    where = (f"from step {s.onset}" + (f" to {s.end}" if s.end is not None else "")
             if s.onset is not None else "after warm-up")
    return Evidence(s.metric, s.onset, s.value, s.others,
                    note=f"median {s.metric} on rank {s.rank} vs the median of the other "
                         f"ranks' ({where}); slowest in {100 * s.consistent:.0f}% of blocks")


def _straggler_finding(run: Run, s: StragglerEvent, step_ref: float | None,
                       notes: list[Evidence]) -> Finding:
    ms = f"{1e3 * s.excess:.3g} ms"
    since = ""
    if s.onset is not None:
        since = f" from step {s.onset}" + (f" to step {s.end}" if s.end is not None
                                           else " to the end")
    if s.metric == "data_time_s":
        of_step = (f", about {100 * s.share:.0f}% of each {fmt(step_ref)} s step"
                   if step_ref is not None else "")
        summary = (f"rank {s.rank}'s input pipeline holds the other ranks up{since}: it waits "
                   f"{fmt(s.value)} s per step for data vs {fmt(s.others)} s on the others, "
                   f"and every rank waits for it at the gradient sync ({ms} per step"
                   f"{of_step})")
    elif s.metric == "compute_time_s":
        slower = (f"{1 + s.share:.3g}x as long" if s.share >= 1
                  else f"{100 * s.share:.0f}% longer")
        summary = (f"rank {s.rank} computes slower than the other ranks{since}: its forward "
                   f"takes {slower} ({fmt(s.value)} s vs {fmt(s.others)} s), and every rank "
                   f"waits for it at the gradient sync")
    else:
        summary = (f"rank {s.rank} is {100 * s.share:.0f}% slower in step_time_s than the "
                   f"other ranks{since} ({fmt(s.value)} s vs {fmt(s.others)} s); log "
                   f"data_time_s and compute_time_s per rank to tell a slow input pipeline "
                   f"from slow compute")
    ev = [_evidence(s), *notes]
    if s.onset is not None and s.share_before is not None:
        ev.append(Evidence(s.metric, s.onset, s.share, s.share_before,
                           note="its excess over the other ranks as a share of the "
                                "reference, from the onset vs before it"))
    comm = {r: Trace.of(run, "comm_time_s", r) for r in run.ranks() if r is not None}
    if s.rank in comm and all(c is not None and len(c) for c in comm.values()):
        cm = {r: median(thin(c.values)) for r, c in comm.items() if c is not None}
        ev.append(Evidence("comm_time_s", None, cm[s.rank],
                           median(np.array([v for r, v in cm.items() if r != s.rank])),
                           note="the straggler waits least in the collective: the others "
                                "wait for it"))
    onset = s.onset
    if onset is None:
        t = Trace.of(run, s.metric, s.rank)
        onset = int(t.steps[0]) if t is not None else None
    return Finding(
        symptom="straggler", severity=s.severity,
        confidence=0.55 if s.metric == "step_time_s" else 0.85,
        onset_step=onset, end_step=s.end, rank=s.rank, metric=s.metric, summary=summary,
        evidence=tuple(ev))
