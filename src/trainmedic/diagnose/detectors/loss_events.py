"""The ``loss_spike`` detector: a loss that jumped far above its recent level (a divergence
is divergence.py's; a loss that went non-finite, or NaN losses a logger hid,
loss_nonfinite.py's).

Thresholds are chosen so that a healthy run of any shape stays silent: a point must stand out
both by *ratio* (it matters) and by *robust z* against the run's own noise (it is not noise).
The evidence rules are written out in docs/symptoms.md; keep the two in step.
"""

from __future__ import annotations

import math

import numpy as np

from trainmedic.diagnose.detectors.rewards import losses_trade_off
from trainmedic.diagnose.detectors.short_log import (
    SHORT_MIN_POINTS,
    TOWER_RATIO,
    towering_points,
)
from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import (
    diff_sigma,
    log_if_positive,
    median,
    trailing_reference,
    true_runs,
)
from trainmedic.diagnose.trace import fmt, traces
from trainmedic.run.series import Run

__all__ = ["SPIKE_RATIO", "SPIKE_Z"]

#: A spike must be at least this many times its trailing median ...
SPIKE_RATIO = 1.5
#: ... and this many robust sigmas above it.
SPIKE_Z = 8.0
#: At and above this ratio (and z >= SPIKE_Z_STRONG) a recovered spike is a warning.
SPIKE_WARN_RATIO = 3.0
SPIKE_Z_STRONG = 12.0
#: ... or when, on >= 2 logged points, it undoes this fraction of the progress made
#: (peak - pre-spike level over start level - pre-spike level) ...
SPIKE_UNDONE_FRACTION = 0.25
#: ... or stays up for this many logged points (both with z >= SPIKE_Z_STRONG).
SPIKE_LONG_POINTS = 5
#: Trailing window of the spike reference, in logged points.
SPIKE_WINDOW = 50
#: A spike of at least this ratio that undoes at least this share of the progress made (back
#: to about the starting level) is a warning at any z >= SPIKE_Z.
SPIKE_BACK_RATIO = 10.0
SPIKE_BACK_UNDONE = 0.75
# --------------------------------------------------------------------------- loss_spike
def _spike_candidates(t: np.ndarray, is_log: bool, window: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Boolean candidates plus the reference, sigma and jump (transformed units) per point."""
    ref, sig = trailing_reference(t, window)
    floor = 0.02 if is_log else 0.0
    global_sig = diff_sigma(t)
    # The first few points have no trailing history. A point there is a spike only when it
    # stands above both sides: the median of everything before it and of the next 5 points
    # (a healthy start falls, so its early points sit above what follows and never qualify).
    early = np.flatnonzero(np.isnan(ref))
    for i in early[(early >= 2) & (early + 3 < t.shape[0])]:
        ref[i] = max(median(t[:i]), median(t[i + 1: i + 6]))
    scale = np.fmax(np.nan_to_num(sig, nan=0.0), max(floor, 0.8 * global_sig))
    if not is_log:
        scale = np.fmax(scale, 0.02 * np.abs(np.nan_to_num(ref)) + 1e-12)
    if is_log:
        _two_sided(t, ref)
        _detrended_sigma(t, ref, scale, window, max(floor, 0.8 * global_sig))
    jump = t - ref
    with np.errstate(invalid="ignore", divide="ignore"):
        z = jump / scale
        if is_log:
            big = jump >= math.log(SPIKE_RATIO)
        else:
            big = jump >= (SPIKE_RATIO - 1.0) * np.abs(ref)
        cand = big & (z >= SPIKE_Z)
    cand &= np.isfinite(ref)
    return cand, ref, scale, jump


#: Two-sided reference: neighbours on each side (skipping the two next to the point).
TWO_SIDED_K = 5


def _two_sided(t: np.ndarray, ref: np.ndarray) -> None:
    """Where a point stands >= 1.3x above its trailing median, also compare it with its
    neighbourhood on both sides (the 5 points before it and the 5 after it, skipping the two
    next to it, which may belong to the same event): the level at the point interpolated
    between the two sides' medians (never under the lower of them), and keep whichever
    reference is lower.
    A trailing median lags a falling loss (a spike at 2.06 after 0.66, 0.53 was read as 2.6x
    its 0.80 trailing median); a step up that stays is no lower after the point, so a
    divergence gains nothing. The sigma stays the trailing one (ten neighbours are too few for
    a noise estimate, and another spike among them would inflate it). In place, log-space
    only."""
    with np.errstate(invalid="ignore"):
        pre = np.flatnonzero(np.isfinite(ref) & (t - ref >= math.log(1.3)))
    for i in pre[:2000]:
        lo = max(0, i - TWO_SIDED_K - 1)
        left = t[lo: max(0, i - 1)]
        right = t[i + 3: i + 3 + TWO_SIDED_K]
        if left.size < 3 or right.size < 3:
            continue
        # The level at i, interpolated between the two sides' medians at their centres: a
        # falling loss is lower at i than on its left.
        xl, xr = (lo + i - 2) / 2.0, (i + 3 + i + 2 + right.size) / 2.0
        ml, mr = median(left), median(right)
        local = ml + (mr - ml) * (i - xl) / (xr - xl)
        local = max(local, min(ml, mr))
        if local < ref[i]:
            ref[i] = local


def _detrended_sigma(t: np.ndarray, ref: np.ndarray, scale: np.ndarray, window: int,
                     floor: float) -> None:
    """For a point >= 1.5x its reference whose trailing MAD sigma keeps it under the z bar,
    measure the noise by first differences over the same window instead (robust sigma of the
    differences / sqrt 2): the MAD of a window that falls steeply counts the fall as noise (a
    per-step LSTM loss falling 1.15 -> 0.85 read as sigma 0.20 against a point noise of 0.06).
    In place, log-space only; never under the run's floor."""
    with np.errstate(invalid="ignore", divide="ignore"):
        pre = np.flatnonzero(np.isfinite(ref) & (t - ref >= math.log(SPIKE_RATIO))
                             & ((t - ref) / scale < SPIKE_Z))
    for i in pre[:2000]:
        w = t[max(0, i - window): i]
        if w.shape[0] >= 8:
            scale[i] = max(min(float(scale[i]), diff_sigma(w)), floor)


@register_detector("loss_spike", requires=("loss",))
def detect_loss_spike(run: Run) -> list[Finding] | NotRun:
    """Loss points far above the trailing median of the previous ~50 logged points; the
    finding says whether (and when) the loss came back to that level. A jump that stays up is
    folded into ``divergence`` by the engine when that fires too."""
    out: list[Finding] = []
    trs = traces(run, "loss", min_points=10)
    # A validation loss spikes too (an eval on a broken checkpoint, a bad epoch); it is
    # judged on its own series, and only a jump of >= 3x can be a warning there.
    vals = traces(run, "val_loss", min_points=10)
    for tr in trs + vals:
        t, is_log = log_if_positive(tr.values)
        window = min(SPIKE_WINDOW, max(5, len(tr) // 4))
        cand, ref, scale, jump = _spike_candidates(t, is_log, window)
        if not cand.any():
            continue
        events = []
        for a, b in _merge_runs(true_runs(cand), gap=2):
            peak = a + int(np.argmax(jump[a:b]))
            r0, s0 = float(ref[a]), float(scale[a])
            back = r0 + max(4.0 * s0, math.log(1.25) if is_log else 0.25 * abs(r0))
            after = np.flatnonzero(t[b:] <= back)
            rec = b + int(after[0]) if after.size else None
            # A jump that never comes back is still reported here (recovery not seen); when
            # the level stays up enough to be a divergence, the engine folds it into that.
            events.append((a, b, peak, rec, r0))
        if not events:
            continue
        events.sort(key=lambda e: -float(jump[e[2]]))
        n_events = len(events)
        # A spike is an isolated event. When a run has more than 3 candidates, they are its
        # noise distribution (a heavy-tailed loss), and only the top events separated from
        # the rest by a gap (log-jump >= 2x the next one's) can be warnings.
        outstanding = _outstanding([float(jump[e[2]]) for e in events])
        # The level the run started from (first 5% of points, >= 3): progress = start - ref.
        # (An RL loss whose reward improved, or a GAN's, makes no progress to undo: only the
        # ratio counts.)
        start_lv = median(t[: max(3, len(t) // 20)])
        rl = bool(losses_trade_off(run)) and tr.metric == "loss"
        for rank_i, (a, b_end, peak, rec, r0) in enumerate(events[:3]):
            # Linear-space losses (some values <= 0): the jump relative to |reference|.
            ratio = math.exp(float(jump[peak])) if is_log else (
                1.0 + float(jump[peak]) / abs(r0) if r0 else math.inf)
            zpk = float(jump[peak] / scale[peak])
            ref_val = math.exp(r0) if is_log else r0
            # Scale-free consequence: a loss with a high floor (an LM at 2.5 nats) cannot jump
            # 3x, yet a jump that undoes a quarter of the progress made, or that lasts for
            # several logged points, is an incident.
            undone = (float(jump[peak]) / (start_lv - r0)
                      if start_lv - r0 >= 4.0 * float(scale[a]) else 0.0)
            # (A one-point blip that is gone at the next logged point is a bad batch the
            # loss did not keep: the progress rule needs the jump on >= 2 points. A jump that
            # never comes back is a level shift - a new data stage or a divergence - and is
            # left to the 3x rule and to `divergence`.)
            dur = rec - a if rec is not None else 0
            strong = zpk >= SPIKE_Z_STRONG and (
                ratio >= SPIKE_WARN_RATIO
                or (not rl and undone >= SPIKE_UNDONE_FRACTION and dur >= 2)
                or (not rl and dur >= SPIKE_LONG_POINTS))
            # A jump back to where training began (>= 10x, undoing >= 75% of the progress)
            # is a batch the model is at chance on - corrupt or mislabeled data - even when
            # the loss is so noisy near 0 that 12 sigmas are out of reach.
            strong = strong or (ratio >= SPIKE_BACK_RATIO and undone >= SPIKE_BACK_UNDONE)
            if rank_i >= outstanding:
                strong = False
            if rec is None and b_end >= len(t) and ratio < 10.0:
                strong = False  # one point at the very end, recovery unseen: too little
            if tr.metric != "loss" and ratio < SPIKE_WARN_RATIO and dur < SPIKE_LONG_POINTS:
                # An eval is noisier evidence: under 3x, only a jump that lasts warns.
                strong = False
            sev: Severity = "warning" if strong else "info"
            conf = float(min(1.0, 0.5 + 0.1 * math.log2(max(ratio, 1.0)) + 0.01 * zpk))
            onset = int(tr.steps[a])
            end = int(tr.steps[rec]) if rec is not None else None
            why = ""
            if strong and ratio < SPIKE_WARN_RATIO:
                why = (f"; it undid {100 * undone:.0f}% of the progress made"
                       if undone >= SPIKE_UNDONE_FRACTION and dur >= 2 else "")
                why += f"; it lasted {dur} logged points" if dur >= SPIKE_LONG_POINTS else ""
            ev = [Evidence(tr.metric, int(tr.steps[peak]), float(tr.values[peak]), ref_val,
                           note=f"median of the previous {window} logged points "
                                f"(robust z = {zpk:.0f}){why}")]
            if rec is not None:
                ev.append(Evidence(tr.metric, end, float(tr.values[rec]), ref_val,
                                   note="first logged point back within noise of that median"))
            more = f"; {n_events} such spikes in the run" if n_events > 1 else ""
            if end is not None:
                back_txt = f" and recovered by step {end}"
            elif b_end >= len(t):
                back_txt = " at the last logged point (recovery not seen)"
            else:
                after_lv = median(t[b_end:])
                settled = math.exp(after_lv - r0) if is_log else (
                    1.0 + (after_lv - r0) / abs(r0) if r0 else math.inf)
                back_txt = (f" and did not come back (it settled at {settled:.3g}x the level "
                            f"before)")
            out.append(Finding(
                symptom="loss_spike", severity=sev, confidence=conf, onset_step=onset,
                end_step=end, rank=tr.rank, metric=tr.metric,
                summary=(f"{tr.metric} jumped {ratio:.3g}x its running median at step {onset}"
                         f"{back_txt}{more}"),
                evidence=tuple(ev)))
    out.extend(_towering(run, {f.onset_step for f in out}))
    if not trs and not out:
        return NotRun("needs at least 10 finite loss points")
    return out


def _towering(run: Run, seen: set[int | None]) -> list[Finding]:
    """Training-loss points >= 10x every other point of the log (``towering_points``) that
    the running-median rule did not report: a warning each, whatever the log's length (>= 5
    points) and noise."""
    out: list[Finding] = []
    for tr in traces(run, "loss", min_points=SHORT_MIN_POINTS):
        # A log whose first point comes >= 5 logging intervals into the run is an excerpt
        # (or a resumed run): its first point is not the run's start, high by nature.
        mid_run = tr.interval > 0 and int(tr.steps[0]) >= 5 * tr.interval
        idx = towering_points(tr.values, mid_run=mid_run)
        for i in idx:
            step = int(tr.steps[i])
            if any(s is not None and abs(s - step) <= tr.interval for s in seen):
                continue
            others = np.delete(tr.values, idx)
            rest = float(others.max())
            back = i + 1 < len(tr) and float(tr.values[i + 1]) < TOWER_RATIO * rest
            out.append(Finding(
                symptom="loss_spike", severity="warning", confidence=0.7, onset_step=step,
                end_step=int(tr.steps[i + 1]) if back else None, rank=tr.rank,
                metric="loss",
                summary=(f"loss jumped to {fmt(float(tr.values[i]))} at step {step}, "
                         f"{float(tr.values[i]) / rest:.3g}x the highest of every other "
                         f"logged point ({fmt(rest)})"
                         + (f" and was back at the next one (step {int(tr.steps[i + 1])})"
                            if back else
                            " at the last logged point (recovery not seen)"
                            if i + 1 == len(tr) else " and stayed up")),
                evidence=(Evidence("loss", step, float(tr.values[i]), rest,
                                   note=f"reference = the highest of the other {others.size} "
                                        f"logged points (a log this noisy hides a spike from "
                                        f"the running median's z-score)"),)))
    return out


def _outstanding(jumps_desc: list[float]) -> int:
    """How many of the largest events stand out: all of them when there are <= 3, else the
    top i (i <= 3) before the first gap where one log-jump is >= 2x the next."""
    if len(jumps_desc) <= 3:
        return len(jumps_desc)
    for i in range(1, 4):
        if jumps_desc[i - 1] >= 2.0 * jumps_desc[i]:
            return i
    return 0


def _merge_runs(runs: list[tuple[int, int]], gap: int) -> list[tuple[int, int]]:
    """Join index runs separated by at most ``gap`` points."""
    merged: list[tuple[int, int]] = []
    for a, b in runs:
        if merged and a - merged[-1][1] <= gap:
            merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    return merged
