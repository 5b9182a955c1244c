"""The learning-rate schedule itself: an lr that collapses to ~0 long before the run ends, or
one that keeps rising when it should have levelled off or decayed.

Both are read from the logged ``lr`` alone, then weighed by what the loss did meanwhile: the
cost of a schedule bug is the compute spent at an lr that cannot train (collapse), or the
instability an ever-rising lr brings. The numbers (``ScheduleEvent``) are computed apart from
the words, so tests assert the numbers.

The classic collapse is a per-epoch scheduler (StepLR, ExponentialLR, CosineAnnealingLR with
``T_max`` in epochs) stepped once per *batch*: the decay meant for the whole run happens in its
first few hundred steps (PyTorch's docs: ``scheduler.step()`` belongs after the epoch for
epoch-based schedules). The classic rise is a warm-up whose length was given in the wrong unit
(epochs read as steps, or ``num_warmup_steps`` > ``num_training_steps``), so it never ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import log_if_positive, median, theil_sen_z
from trainmedic.diagnose.trace import Trace, fmt, traces
from trainmedic.run.series import Run

__all__ = ["ScheduleEvent", "schedule_events", "COLLAPSE_RATIO", "COLLAPSE_BEFORE",
           "RISE_MIN_FRACTION", "RISE_RATIO"]

#: Collapse: the lr fell below this fraction of its peak ...
COLLAPSE_RATIO = 1e-3
#: ... before this fraction of the run had passed, and stayed below to the end. Its onset is
#: where it last fell below this fraction of the peak.
COLLAPSE_BEFORE = 0.5
COLLAPSE_ONSET_RATIO = 0.01
#: Never-ending rise: the lr still rises over at least this fraction of the run ...
RISE_MIN_FRACTION = 0.6
#: ... by at least this factor, and ends at its peak.
RISE_RATIO = 2.0
#: A rise under which the loss still fell by this share over the last 40% is info.
RISE_HARMLESS_GAIN = 0.05
#: A rise whose increments grow this many times from its first quarter to its last is
#: geometric (the lr is multiplied every step: ExponentialLR with gamma > 1), not a warm-up:
#: linear warm-ups have constant increments and cosine ones shrinking increments at the end.
RISE_GEOMETRIC_ACCEL = 3.0
#: Cyclic collapse: the lr falls from >= half its peak to <= 5% of it at least this many
#: times (a per-epoch CosineAnnealingLR stepped per batch restarts every T_max steps; warm
#: restarts by design (SGDR) run a handful of cycles, usually growing).
CYCLES_MIN = 8
#: Warm-up restarts: the lr falls in one logged interval from >= 90% of its peak to <= 30% of
#: it and climbs back to >= 90%, at least this many times (a scheduler re-created every epoch,
#: a warm-up keyed to the step within the epoch). By design, restarts go the other way: SGDR
#: decays slowly and jumps up; a step decay falls at once but never climbs back.
RESTARTS_MIN = 2


@dataclass(frozen=True)
class ScheduleEvent:
    """What the lr did: ``kind`` is ``collapse``, ``cycles``, ``restarts`` or ``rise``."""

    kind: str
    onset_step: int
    peak_lr: float
    peak_step: int
    end_lr: float
    fraction: float
    """Share of the run's steps spent after the onset (collapse) or rising (rise)."""
    loss_gain_after: float | None = None
    """Relative fall of the loss level from the onset to the end (None when not logged)."""
    loss_gain_before: float | None = None
    """Relative fall of the loss level from the start to the onset."""
    count: int = 0
    """``cycles`` and ``restarts``: how many falls."""
    low_lr: float | None = None
    """``restarts``: the lr just after the first fall."""
    per_step_ratio: float | None = None
    """``rise``: when the lr grew geometrically (its increments grew >= RISE_GEOMETRIC_ACCEL x
    from the first to the last quarter of the rise), its mean ratio per logged step."""


def _loss_gain(run: Run, rank: int | None, lo: int, hi: int) -> float | None:
    """Relative fall of the loss median from the first tenth to the last tenth of [lo, hi]."""
    tr = Trace.of(run, "loss", rank) or Trace.of(run, "loss", None)
    if tr is None:
        return None
    a, b = np.searchsorted(tr.steps, [lo, hi + 1])
    v = tr.values[a:b]
    if v.shape[0] < 4:  # (a per-epoch log's last 40% can be 4-5 points: medians of 2)
        return None
    q = max(2, v.shape[0] // 10)
    head, tail = median(v[:q]), median(v[-q:])
    if not head or not math.isfinite(head):
        return None
    return (head - tail) / abs(head)


def _suffix_start(mask: np.ndarray) -> int:
    """The first index of the run of True values that lasts to the end (len when none)."""
    false = np.flatnonzero(~mask)
    return int(false[-1]) + 1 if false.size else 0


#: One restart is enough when the lr climbs back as a warm-up: >= this many logged rises
#: in a row from the fall to >= 90% of the peak.
RAMP_POINTS = 3


def _ramps_back(r: np.ndarray, i: int) -> bool:
    """Whether the lr (a share of its peak) climbs back from index ``i`` to >= 0.9 in a ramp
    of >= RAMP_POINTS rising logged points (the warm-up run again: a scheduler re-created at
    a resume without its state), not a jump (SGDR's restarts jump up; a step decay stays)."""
    back = np.flatnonzero(r[i:] >= 0.9)
    if not back.size:
        return False
    ramp = r[i: i + int(back[0]) + 1]
    return ramp.size > RAMP_POINTS and bool(np.all(np.diff(ramp) > 0))


def _cycles_to_zero(r: np.ndarray) -> list[int]:
    """Indices where an lr (as a share of its peak) reaches <= 5% after having been >= 50%
    (vectorized: the high and low points in order, and each high followed by a low)."""
    hi, lo = r >= 0.5, r <= 0.05
    idx = np.flatnonzero(hi | lo)
    if idx.size < 2:
        return []
    lab = hi[idx]
    falls = np.flatnonzero(lab[:-1] & ~lab[1:]) + 1
    return [int(i) for i in idx[falls]]


def schedule_events(run: Run, tr: Trace) -> list[ScheduleEvent]:
    """The schedule anomalies of one lr trace (numbers only)."""
    v = tr.values
    steps = tr.steps
    n = v.shape[0]
    if n < 10 or not bool(np.all(v >= 0)):
        return []
    first, last = int(steps[0]), int(steps[-1])
    span = max(1, last - first)
    peak_i = int(np.argmax(v))
    peak = float(v[peak_i])
    if not peak > 0:
        return []
    out: list[ScheduleEvent] = []
    # Collapse: below COLLAPSE_RATIO x peak from some point on, that point early in the run.
    low = v <= COLLAPSE_RATIO * peak
    if bool(low[-1]) and peak_i < n - 1:
        k = _suffix_start(low)
        # The collapse is where the lr last fell below 1% of its peak on its way down: from
        # there the run learns at a negligible rate (a per-epoch StepLR(8, 0.5) stepped per
        # batch is there after 56 steps, ExponentialLR(0.9) after 44), not at its first decay
        # (an ordinary schedule's too) nor where it finally crossed 1e-3.
        tenth = v > COLLAPSE_ONSET_RATIO * peak
        above = np.flatnonzero(tenth[peak_i + 1: k])
        j = peak_i + 1 + int(above[-1]) + 1 if above.size else peak_i + 1
        onset = int(steps[j])
        after = (last - int(steps[k])) / span
        if k > peak_i and after >= 1.0 - COLLAPSE_BEFORE and n - k >= 3:
            out.append(ScheduleEvent(
                kind="collapse", onset_step=onset, peak_lr=peak, peak_step=int(steps[peak_i]),
                end_lr=float(v[-1]), fraction=after,
                loss_gain_after=_loss_gain(run, tr.rank, onset, last),
                loss_gain_before=_loss_gain(run, tr.rank, first, onset)))
    # Cyclic collapse: the lr keeps running down to ~0 and back up, many times.
    cycles = _cycles_to_zero(v / peak)
    if len(cycles) >= CYCLES_MIN and not out:
        out.append(ScheduleEvent(
            kind="cycles", onset_step=int(steps[cycles[0]]), peak_lr=peak,
            peak_step=int(steps[peak_i]), end_lr=float(v[-1]),
            fraction=(last - int(steps[cycles[0]])) / span, count=len(cycles)))
    # Warm-up restarts: sudden falls from the peak that climb back to it.
    r = v / peak
    falls = [i + 1 for i in np.flatnonzero((r[:-1] >= 0.9) & (r[1:] <= 0.3))
             if bool(np.any(r[i + 2:] >= 0.9))]
    if (len(falls) >= RESTARTS_MIN or (len(falls) == 1 and _ramps_back(r, int(falls[0])))) \
            and not out:
        out.append(ScheduleEvent(
            kind="restarts", onset_step=int(steps[falls[0]]), peak_lr=peak,
            peak_step=int(steps[peak_i]), end_lr=float(v[-1]),
            fraction=(last - int(steps[falls[0]])) / span, count=len(falls),
            low_lr=float(v[falls[0]])))
    # A decay that came back: down to <= 5% of the peak, then a smooth climb (no jump of more
    # than 30% of the peak between logged points) back to >= 90% of it, once or a few times
    # (fewer than CYCLES_MIN), where no schedule climbs by design: a cosine whose T_max is
    # shorter than the run (or stepped per micro-batch) goes on as a cosine, back up and down
    # again (torch's CosineAnnealingLR is periodic past T_max). SGDR restarts jump up; a
    # cyclic lr (CLR) rarely dips to 5% of its top.
    lows = _cycles_to_zero(r)
    rebound = None
    if not out and 0 < len(lows) < CYCLES_MIN:
        for i in lows:
            seg = r[i:]
            low_i = i + int(np.argmin(seg[: int(np.argmax(seg >= 0.9))] if np.any(seg >= 0.9)
                                      else seg))
            back = np.flatnonzero(r[low_i:] >= 0.9)
            if back.size and 0 < low_i < n - 3 and float(np.max(r[:low_i])) >= 0.9 and \
                    float(np.max(np.diff(r[low_i: low_i + int(back[0]) + 1]))) <= 0.3:
                rebound = low_i
                break
    if rebound is not None:
        out.append(ScheduleEvent(
            kind="rebound", onset_step=int(steps[rebound]), peak_lr=peak,
            peak_step=int(steps[peak_i]), end_lr=float(v[-1]),
            fraction=(last - int(steps[rebound])) / span, low_lr=float(v[rebound]),
            count=len(lows)))
    # Never-ending rise: non-decreasing (within 1%) from some point to the end, over most of
    # the run, by RISE_RATIO or more, ending at the peak.
    t, is_log = log_if_positive(v)
    if is_log and v[-1] >= 0.99 * peak:
        drops = np.flatnonzero(t[:-1] > t[1:] + math.log(1.01))
        k = int(drops[-1]) + 1 if drops.size else 0
        # Still rising at the end: the lr first came within 2% of its final value in the
        # last tenth of the run (a warm-up followed by a constant lr reached it long before).
        reach = int(steps[int(np.argmax(v >= 0.98 * v[-1]))])
        still = (reach - first) / span >= 0.9
        rise_frac = (reach - int(steps[k])) / span
        grew = float(v[-1] / v[k]) if v[k] > 0 else math.inf
        moves = int(np.count_nonzero(np.diff(t[k:]) > 1e-9))
        if still and rise_frac >= RISE_MIN_FRACTION and grew >= RISE_RATIO and moves >= 5:
            tail_from = int(last - 0.4 * span)
            d = np.diff(v[k:])
            q = max(2, d.size // 4)
            head_inc, tail_inc = float(np.mean(d[:q])), float(np.mean(d[-q:]))
            geometric = d.size >= 8 and head_inc > 0 and \
                tail_inc >= RISE_GEOMETRIC_ACCEL * head_inc
            out.append(ScheduleEvent(
                kind="rise", onset_step=int(steps[k]), peak_lr=peak,
                peak_step=int(steps[peak_i]), end_lr=float(v[-1]), fraction=rise_frac,
                loss_gain_after=_loss_gain(run, tr.rank, tail_from, last),
                per_step_ratio=grew ** (1.0 / d.size) if geometric else None))
    return out


def unfinished(run: Run, last_step: int) -> str:
    """Why the log is known to stop before the run's planned end ("" when not known): a
    ``max_steps``/``total_steps`` past the last logged step, a ``total_steps`` column (LLaMA-
    Factory), or an ETA still above zero (Detectron2's ``eta_seconds``). A warm-up that is
    still rising there may simply not have ended yet."""
    for key in ("max_steps", "total_steps"):
        planned = run.meta.get(key)
        if isinstance(planned, int | float) and planned > last_step * 1.1:
            return f"{key} = {int(planned)} > last logged step {last_step}"
    for name in ("total_steps", "eta_seconds", "eta", "remaining_time_s"):
        t = Trace.of(run, name)
        if t is None or not len(t):
            continue
        if name == "total_steps" and float(t.values[-1]) > last_step * 1.1:
            return f"total_steps = {int(t.values[-1])} > last logged step {last_step}"
        if name != "total_steps" and float(t.values[-1]) > 0:
            return f"{name} was still {fmt(float(t.values[-1]))} at the last logged step"
    return ""


def _finding(ev: ScheduleEvent, tr: Trace, partial: str = "") -> Finding:
    if ev.kind == "cycles":
        n = ev.count
        period = (int(tr.steps[-1]) - ev.onset_step) / max(1, n - 1)
        return Finding(
            symptom="lr_schedule_anomaly", severity="warning", confidence=0.8,
            onset_step=ev.onset_step, end_step=int(tr.steps[-1]), rank=tr.rank, metric="lr",
            summary=(f"lr ran down to ~0 and back up {n} times, about every {period:.0f} steps "
                     f"(peak {fmt(ev.peak_lr)}): a per-epoch cosine schedule (CosineAnnealingLR "
                     f"with T_max in epochs) stepped every batch restarts like this"),
            evidence=(Evidence("lr", ev.onset_step, None, ev.peak_lr,
                               note=f"first fall from >= 0.5x to <= 0.05x the peak; {n} such "
                                    f"falls in the run"),))
    if ev.kind == "restarts":
        n, low = ev.count, float(ev.low_lr or 0.0)
        return Finding(
            symptom="lr_schedule_anomaly", severity="warning", confidence=0.75,
            onset_step=ev.onset_step, end_step=int(tr.steps[-1]), rank=tr.rank, metric="lr",
            summary=(f"lr fell at once from its peak {fmt(ev.peak_lr)} to {fmt(low)} and "
                     f"climbed back {f'{n} times' if n > 1 else 'once'}, first at step "
                     f"{ev.onset_step}: the warm-up starts over (" + (
                         "a scheduler re-created every epoch, or a warm-up keyed to the step "
                         "within the epoch)" if n > 1 else
                         "a scheduler re-created mid-run: a resume that did not restore its "
                         "state_dict)")),
            evidence=(Evidence("lr", ev.onset_step, low, ev.peak_lr,
                               note=f"first fall in one logged interval from >= 0.9x to "
                                    f"<= 0.3x the peak that climbed back to >= 0.9x; {n} "
                                    f"such falls"),))
    if ev.kind == "rebound":
        more = (f", {ev.count} times in all (each fall to <= 5% of the peak)"
                if ev.count > 1 else "")
        return Finding(
            symptom="lr_schedule_anomaly", severity="warning", confidence=0.7,
            onset_step=ev.onset_step, end_step=int(tr.steps[-1]), rank=tr.rank, metric="lr",
            summary=(f"lr decayed to {fmt(float(ev.low_lr or 0.0))} at step {ev.onset_step}, "
                     f"then climbed smoothly back to >= 90% of its peak {fmt(ev.peak_lr)}"
                     f"{more}: a cosine schedule whose T_max is shorter than the run (or "
                     f"stepped per micro-batch) goes back up"),
            evidence=(Evidence("lr", ev.onset_step, ev.low_lr, ev.peak_lr,
                               note="lowest lr of the first fall (<= 0.05x the peak)"),
                      Evidence("lr", int(tr.steps[-1]), ev.end_lr, ev.peak_lr,
                               note="last lr; the climb back to >= 0.9x the peak had no jump "
                                    "of more than 0.3x the peak between logged points")))
    if ev.kind == "collapse":
        stalled = ev.loss_gain_after is not None and ev.loss_gain_after < 0.05
        sev: Severity = "error" if stalled and ev.fraction >= 0.5 else "warning"
        loss_txt = ("" if ev.loss_gain_after is None else
                    f"; the loss improved only {100 * ev.loss_gain_after:.1f}% after it"
                    if stalled else
                    f"; the loss still fell {100 * ev.loss_gain_after:.0f}% after it")
        summary = (f"lr collapsed to {fmt(ev.end_lr)} (< {COLLAPSE_RATIO:g}x its peak "
                   f"{fmt(ev.peak_lr)}) at step {ev.onset_step} and stayed there for "
                   f"{100 * ev.fraction:.0f}% of the run{loss_txt}: a per-epoch schedule "
                   f"stepped per batch does this")
        evidence = [Evidence("lr", ev.peak_step, ev.peak_lr, None, note="peak lr"),
                    Evidence("lr", ev.onset_step, ev.end_lr, ev.peak_lr,
                             note=f"from this step the lr fell below 0.1x the peak, then "
                                  f"below {COLLAPSE_RATIO:g}x, and stayed there to the end; "
                                  f"value = last lr")]
        if ev.loss_gain_after is not None:
            evidence.append(Evidence("loss", ev.onset_step, ev.loss_gain_after, None,
                                     note="relative fall of the loss level from the collapse "
                                          "to the end (value)"))
        return Finding(symptom="lr_schedule_anomaly", severity=sev,
                       confidence=0.85 if stalled else 0.7, onset_step=ev.onset_step,
                       end_step=int(tr.steps[-1]), rank=tr.rank, metric="lr",
                       summary=summary, evidence=tuple(evidence))
    summary = (f"lr kept rising from step {ev.onset_step} to the last logged step "
               f"({fmt(ev.end_lr)}, its peak) over {100 * ev.fraction:.0f}% of the run: a "
               f"warm-up that never ends, or a schedule running backwards")
    # Severity follows cost. A rising lr that the loss still follows down has cost nothing
    # visible (info: short fine-tunes whose warm-up outlasts them, e.g. Detectron2's default
    # 1000 warm-up iterations in a 300-iteration run, train well); one under which the loss
    # stopped improving (or rose) over the last 40% is a warning. So is a log known to stop
    # before the run's planned end only info (the warm-up may simply not have ended yet).
    harmless = ev.loss_gain_after is not None and ev.loss_gain_after >= RISE_HARMLESS_GAIN
    if partial:
        summary += f"; but the log ends before the run's planned end ({partial}): the warm-up " \
                   f"may simply not have ended yet"
    elif ev.loss_gain_after is not None:
        summary += (f"; the loss still fell {100 * ev.loss_gain_after:.0f}% over the last 40% "
                    f"of the run" if harmless else
                    f"; over the last 40% of the run the loss changed by "
                    f"{-100 * ev.loss_gain_after:+.1f}%: the rising lr is costing progress")
    rise_sev: Severity = "info" if (partial or harmless) else "warning"
    if ev.per_step_ratio is not None:
        # Not a warm-up at all, whatever the loss did: the lr is multiplied every step.
        summary += (f"; it grows geometrically, x{ev.per_step_ratio:.4g} per logged step (its "
                    f"increments grew >= {RISE_GEOMETRIC_ACCEL:g}x from the first quarter of "
                    f"the rise to the last): an ExponentialLR with gamma > 1, a decay factor "
                    f"inverted, or an lr range test")
        rise_sev = "warning"
    return Finding(symptom="lr_schedule_anomaly", severity=rise_sev,
                   confidence=0.4 if rise_sev == "info" else 0.75,
                   onset_step=ev.onset_step, end_step=int(tr.steps[-1]), rank=tr.rank,
                   metric="lr", summary=summary,
                   evidence=(Evidence("lr", ev.onset_step, None, None,
                                      note="start of the rise"),
                             Evidence("lr", int(tr.steps[-1]), ev.end_lr, ev.peak_lr,
                                      note=f"last lr vs the peak; the lr never fell by more "
                                           f"than 1% between logged points since step "
                                           f"{ev.onset_step}")))


#: An lr of exactly 0 over at least this many logged points ...
ZERO_LR_MIN_POINTS = 3
#: ... and, when the lr was above 0 before, over at least this share of the run's steps.
ZERO_LR_MIN_FRACTION = 0.1


def _zero_lr(run: Run, rank: int | None) -> Finding | None:
    """The lr was logged as exactly 0 at every point from some step to the end (all of a log
    that starts mid-run, or >= 10% of it after a positive lr) while the loss kept being
    logged: the optimizer multiplies every update by 0, so those steps cost compute and change
    nothing (a LambdaLR or warm-up factor of 0, a schedule whose total steps are shorter than
    the run, an lr lost at a resume). Short logs count: three points at 0 are enough. A loss
    that still fell significantly over that stretch means the lr was only printed rounded to
    0 (e.g. "%.4f" of 5e-5), so that is not reported. Warning."""
    tr = Trace.of(run, "lr", rank)
    if tr is None or len(tr) < ZERO_LR_MIN_POINTS or bool(np.any(tr.values < 0)):
        return None
    k = _suffix_start(tr.values == 0)
    n_zero = len(tr) - k
    first, last = int(tr.steps[0]), int(tr.steps[-1])
    start = int(tr.steps[k]) if k < len(tr) else last
    if n_zero < ZERO_LR_MIN_POINTS or \
            (k > 0 and (last - start) < ZERO_LR_MIN_FRACTION * max(1, last - first)):
        return None
    if k == 0 and first <= 10 * tr.interval:
        # An lr of 0 from the run's first steps is a setting, not a schedule: the flat loss
        # it causes is flat_loss's finding (its cause "learning rate is 0" checks the lr). A
        # log that starts mid-run (an excerpt from step 5310) got there by the schedule.
        return None
    loss = Trace.of(run, "loss", rank) or Trace.of(run, "loss", None)
    if loss is None:
        return None
    a, b = np.searchsorted(loss.steps, [start, last + 1])
    lv = loss.values[a:b]
    if lv.shape[0] < ZERO_LR_MIN_POINTS:
        return None  # no training logged over the stretch
    _, z = theil_sen_z(lv)
    if z <= -3.0:
        return None  # the loss still fell: the lr was printed rounded, not 0
    head = median(lv[: max(1, lv.shape[0] // 2)])
    tail = median(lv[-max(1, lv.shape[0] // 2):])
    change = (tail - head) / abs(head) if head else 0.0
    where = (f"at all {n_zero} logged points (steps {start}-{last})" if k == 0 else
             f"from step {start} to the last logged step {last} ({n_zero} points, "
             f"{100 * (last - start) / max(1, last - first):.0f}% of the run; it was "
             f"{fmt(float(tr.values[k - 1]))} at step {int(tr.steps[k - 1])})")
    return Finding(
        symptom="lr_schedule_anomaly", severity="warning", confidence=0.8,
        onset_step=start, end_step=last, rank=rank, metric="lr",
        summary=(f"the lr was exactly 0 {where} while the loss was still computed (it moved "
                 f"{100 * change:+.1f}% over that stretch): every update is multiplied by 0, "
                 f"so these steps change nothing (an lr factor of 0 from a LambdaLR or warm-up, "
                 f"a schedule shorter than the run, or an lr lost at a resume)"),
        evidence=(Evidence("lr", start, 0.0, None,
                           note=f"lr = 0 at each of the {n_zero} logged points from here"),
                  Evidence("loss", last, float(tail), float(head),
                           note="loss median over the second half of the zero-lr stretch vs "
                                "the first half")))


#: At a resume, an lr this many times the lr logged just before the step went back ...
RESET_RATIO = 10.0


def _reset_at_resume(run: Run, rank: int | None) -> Finding | None:
    """The step went back to the start (to step 0 or 1, or within 1% of the step it left),
    the loss carried on (not a new training appended: see continuity.py), and the lr
    came back >= 10x the lr logged just before (and, when the replayed step was logged
    before, >= 2x off the lr it had then): the weights were restored but the step counter
    and the schedule started over (the scheduler's state_dict was not saved or not loaded).
    A resume to an older checkpoint keeps its step, and its lr is that step's. Warning."""
    from trainmedic.diagnose.detectors.continuity import fresh_starts, step_regressions

    lr, loss = run.get("lr", rank), run.get("loss", rank)
    if lr is None or loss is None:
        return None
    regs = step_regressions(loss)
    if not regs or fresh_starts(loss, regs):
        return None  # no resume, or new trainings appended to the log (continuity.py)
    for i, frm, to in step_regressions(lr):
        before, after = float(lr.values[i - 1]), float(lr.values[i])
        if not (before > 0 and after > 0 and math.isfinite(before + after)) or \
                after < RESET_RATIO * before or to > max(1.0, 0.01 * frm):
            continue  # (a resume to an older checkpoint keeps its step: not this)
        orig = lr.values[:i][lr.steps[:i] == to]
        if orig.size and max(after / float(orig[-1]), float(orig[-1]) / after) < 2.0:
            continue  # the replayed step has the lr it had the first time: it resumed
        ref, how = before, f"the lr at step {frm}, just before the resume"
        return Finding(
            symptom="lr_schedule_anomaly", severity="warning", confidence=0.75,
            onset_step=to, end_step=frm, rank=rank, metric="lr",
            summary=(f"the lr schedule restarted at the resume: after step {frm} the step went "
                     f"back to {to} with lr {fmt(after)}, {after / ref:.3g}x {how} "
                     f"({fmt(ref)}), while the loss carried on: the scheduler's state was not "
                     f"restored (save and load scheduler.state_dict() with the checkpoint)"),
            evidence=(Evidence("lr", to, after, ref, note=f"first lr after the resume vs {how}"),
                      Evidence("loss", regs[0][2], float(loss.values[regs[0][0]]),
                               float(loss.values[regs[0][0] - 1]),
                               note="loss after the resume vs just before: it carried on")))
    return None


def _negative_lr(run: Run, rank: int | None) -> Finding | None:
    """The lr logged below 0 at >= 2 points (no schedule goes there by design): the
    optimizer steps up the gradient, climbing the loss it should descend (a linear decay that
    runs past its end step, a warm-up or decay formula with the wrong sign). Error, onset at
    the first negative point."""
    tr = Trace.of(run, "lr", rank)
    if tr is None or len(tr) < 3:
        return None
    neg = np.flatnonzero(tr.values < 0)
    if neg.size < 2:
        return None
    first = int(tr.steps[neg[0]])
    return Finding(
        symptom="lr_schedule_anomaly", severity="error", confidence=0.9, onset_step=first,
        end_step=int(tr.steps[-1]), rank=tr.rank, metric="lr",
        summary=(f"lr went below 0 at step {first} ({fmt(float(tr.values[neg[0]]))}) and was "
                 f"negative at {neg.size} of {len(tr)} logged points (down to "
                 f"{fmt(float(tr.values.min()))}): the optimizer climbs the loss instead of "
                 f"descending it (a linear decay that runs past its last step, a schedule "
                 f"formula with the wrong sign)"),
        evidence=(Evidence("lr", first, float(tr.values[neg[0]]), 0.0,
                           note=f"first negative lr; {neg.size} negative points in all"),))


@register_detector("lr_schedule_anomaly", requires=("lr",))
def detect_lr_schedule_anomaly(run: Run) -> list[Finding] | NotRun:
    """The lr fell below 1e-3 x its peak before half the run and stayed there (warning; an
    error when the loss then improved < 5% over the rest of the run), or the lr rose without
    ever falling by more than 1% over >= 60% of the run, by >= 2x, ending at its peak
    (warning when the loss improved < 5% over the last 40% of the run; info when it still
    fell, or when the log is known to end before the run's planned end)."""
    out: list[Finding] = [f for r in run.ranks() if (f := _reset_at_resume(run, r))]
    out += [f for r in run.ranks() if (f := _negative_lr(run, r))]
    zeros = [f for r in run.ranks() if (f := _zero_lr(run, r))]
    trs = traces(run, "lr", min_points=10)
    if not trs:
        return out + zeros or NotRun("needs at least 10 lr points")
    seen_ranks: set[int | None] = set()
    for tr in trs:
        if tr.rank in seen_ranks:
            continue
        seen_ranks.add(tr.rank)
        partial = unfinished(run, int(tr.steps[-1]))
        events = schedule_events(run, tr)
        out.extend(_finding(ev, tr, partial) for ev in events)
        if not any(ev.kind == "collapse" for ev in events):
            out.extend(f for f in zeros if f.rank == tr.rank)
    return out
