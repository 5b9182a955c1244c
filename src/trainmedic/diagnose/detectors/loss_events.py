"""Detectors for events on the loss curve: non-finite values, spikes, divergence, and NaN
losses a logger hid.

Thresholds are chosen so that a healthy run of any shape stays silent: a point must stand out
both by *ratio* (it matters) and by *robust z* against the run's own noise (it is not noise).
The evidence rules are written out in docs/symptoms.md; keep the two in step.
"""

from __future__ import annotations

import math

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.localization import (
    localized_evidence,
    localized_phrase,
    nonfinite_event,
)
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import (
    blocks,
    diff_sigma,
    hinge_fit,
    log_if_positive,
    median,
    robust_sigma,
    theil_sen_z,
    trailing_reference,
    true_runs,
)
from trainmedic.diagnose.trace import Trace, fmt, traces
from trainmedic.run.series import Run

__all__ = ["loss_like_metrics", "SPIKE_RATIO", "SPIKE_Z", "HF_FRAMEWORKS"]

#: ``run.meta["framework"]`` values of a log written by the Hugging Face Trainer.
HF_FRAMEWORKS = ("hf_trainer", "huggingface", "transformers", "hf")

#: Canonical metrics whose names contain "loss" but are not losses.
_NOT_LOSSES = {"loss_scale"}

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
#: Divergence: sustained rise above the running minimum level by this factor.
DIVERGE_RATIO = 1.5
DIVERGE_ERROR_RATIO = 3.0


def loss_like_metrics(run: Run) -> list[str]:
    """``loss`` first, then ``val_loss``, then any other metric with "loss" in its name
    (component losses an importer left under their own names, e.g. ``dynamics_loss_step``)."""
    names = run.metrics()
    out: list[str] = [m for m in ("loss", "val_loss") if m in names]
    out += [m for m in names if "loss" in m.lower() and m not in out and m not in _NOT_LOSSES
            and not m.startswith("layer/")]
    return out


# --------------------------------------------------------------------------- nonfinite_loss
@register_detector("nonfinite_loss")
def detect_nonfinite_loss(run: Run) -> list[Finding] | NotRun:
    """Any NaN/inf in a loss series. Persistent (to the last point, or >= 3 in a row) is an
    error; an isolated non-finite value followed by finite ones is a warning. When the NaN
    guard localized a step of the first non-finite stretch, the summary names the module and
    where it broke, and the localization is evidence."""
    names = loss_like_metrics(run)
    if not names:
        return NotRun("log loss to enable this check", missing=("loss",))
    findings: list[Finding] = []
    for rank in run.ranks():
        hits: list[tuple[int, str, Trace, int]] = []  # (first bad step, metric, trace, index)
        for m in names:
            t = Trace.of(run, m, rank)
            if t is None:
                continue
            bad = ~np.isfinite(t.all_values)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                hits.append((int(t.all_steps[i]), m, t, i))
        if not hits:
            continue
        # Train loss leads when it is affected; else the earliest affected series.
        hits.sort(key=lambda h: (h[0], h[1] != "loss"))
        primary = next((h for h in hits if h[1] == "loss"), hits[0])
        onset = min(h[0] for h in hits)
        evidence = []
        persistent_any = False
        end_step = primary[0]
        for step, m, t, i in hits[:4]:
            bad = ~np.isfinite(t.all_values)
            runs = true_runs(bad)
            first_run = runs[0]
            longest = max(b - a for a, b in runs)
            persistent = bool(bad[-1]) or longest >= 3
            persistent_any = persistent_any or persistent
            if m == primary[1]:
                end_step = int(t.all_steps[first_run[1] - 1])
            prev = t.all_values[:i][np.isfinite(t.all_values[:i])]
            ref = float(prev[-1]) if prev.size else None
            fin_steps = t.all_steps[:i][np.isfinite(t.all_values[:i])]
            ref_step = int(fin_steps[-1]) if prev.size else None
            n_bad = int(bad.sum())
            tail = " through the last logged point" if bool(bad[-1]) else ""
            evidence.append(Evidence(
                metric=m, step=step, value=float(t.all_values[i]), reference=ref,
                note=(f"first non-finite {m}; {n_bad} of {len(t.all_values)} logged points "
                      f"are non-finite{tail}; reference = last finite value"
                      + (f", at step {ref_step}" if ref_step is not None else ""))))
        severity: Severity = "error" if persistent_any else "warning"
        what = "stayed non-finite" if persistent_any else "recovered afterwards"
        metrics_txt = ", ".join(h[1] for h in hits[:4])
        summary = (f"{primary[1]} became {fmt(float(primary[2].all_values[primary[3]]))} at "
                   f"step {onset} and {what} ({metrics_txt})")
        # The live watcher's NaN guard replayed the step: name where it broke.
        event = nonfinite_event(run, rank, onset, None if persistent_any else end_step)
        if event is not None:
            summary += f"; {localized_phrase(event)}"
            evidence[1:1] = localized_evidence(event)
        findings.append(Finding(
            symptom="nonfinite_loss", severity=severity, confidence=1.0, onset_step=onset,
            end_step=None if persistent_any else end_step, rank=rank, metric=primary[1],
            summary=summary, evidence=tuple(evidence)))
    return findings


# --------------------------------------------------------------------------- loss_spike
def _spike_candidates(t: np.ndarray, is_log: bool, window: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Boolean candidates plus the reference, sigma and jump (transformed units) per point."""
    ref, sig = trailing_reference(t, window)
    floor = 0.02 if is_log else 0.0
    global_sig = diff_sigma(t)
    scale = np.fmax(np.nan_to_num(sig, nan=0.0), max(floor, 0.8 * global_sig))
    if not is_log:
        scale = np.fmax(scale, 0.02 * np.abs(np.nan_to_num(ref)) + 1e-12)
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


@register_detector("loss_spike", requires=("loss",))
def detect_loss_spike(run: Run) -> list[Finding] | NotRun:
    """Loss points far above the trailing median of the previous ~50 logged points; the
    finding says whether (and when) the loss came back to that level. A jump that stays up is
    folded into ``divergence`` by the engine when that fires too."""
    out: list[Finding] = []
    trs = traces(run, "loss", min_points=10)
    for tr in trs:
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
        start_lv = median(t[: max(3, len(t) // 20)])
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
                or (undone >= SPIKE_UNDONE_FRACTION and dur >= 2)
                or dur >= SPIKE_LONG_POINTS)
            if rank_i >= outstanding:
                strong = False
            if rec is None and b_end >= len(t) and ratio < 10.0:
                strong = False  # one point at the very end, recovery unseen: too little
            sev: Severity = "warning" if strong else "info"
            conf = float(min(1.0, 0.5 + 0.1 * math.log2(max(ratio, 1.0)) + 0.01 * zpk))
            onset = int(tr.steps[a])
            end = int(tr.steps[rec]) if rec is not None else None
            why = ""
            if strong and ratio < SPIKE_WARN_RATIO:
                why = (f"; it undid {100 * undone:.0f}% of the progress made"
                       if undone >= SPIKE_UNDONE_FRACTION and dur >= 2 else "")
                why += f"; it lasted {dur} logged points" if dur >= SPIKE_LONG_POINTS else ""
            ev = [Evidence("loss", int(tr.steps[peak]), float(tr.values[peak]), ref_val,
                           note=f"median of the previous {window} logged points "
                                f"(robust z = {zpk:.0f}){why}")]
            if rec is not None:
                ev.append(Evidence("loss", end, float(tr.values[rec]), ref_val,
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
                end_step=end, rank=tr.rank, metric="loss",
                summary=(f"loss jumped {ratio:.3g}x its running median at step {onset}"
                         f"{back_txt}{more}"),
                evidence=tuple(ev)))
    if not trs:
        return NotRun("needs at least 10 finite loss points")
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


# --------------------------------------------------------------------------- divergence
#: Trend branch: a significant rise of at least this ratio over the final stretch.
DIVERGE_TREND_RATIO = 1.15
#: ... whose robust slope is at least this many standard errors above zero ...
DIVERGE_TREND_Z = 4.0
#: ... over at least this fraction of the run's steps.
DIVERGE_TREND_MIN_FRACTION = 0.2

#: Metric-name fragments of a reward/return (RL): a loss may rise while the policy improves.
_REWARD_HINTS = ("reward", "return", "ep_rew", "episode_rew", "ep_ret")
#: Generator / discriminator loss names: a GAN's losses rise and fall against each other.
_GEN_HINTS = ("g_loss", "loss_g", "gen_loss", "loss_gen", "generator")
_DISC_HINTS = ("d_loss", "loss_d", "disc_loss", "loss_disc", "discriminator", "critic")


def _rise_expected(run: Run) -> str:
    """Why a rising loss may be legitimate in this run ("" when nothing says so): a
    reward/return-like metric is logged and improving (RL: the loss of a policy or value
    function follows the data the policy now collects), or both generator- and
    discriminator-like losses are logged (a GAN's losses trade off)."""
    names = [m.lower() for m in run.metrics()]
    if any(h in m for m in names for h in _GEN_HINTS) and \
            any(h in m for m in names for h in _DISC_HINTS):
        return "generator and discriminator losses are logged (a GAN: they trade off)"
    for m in run.metrics():
        if not any(h in m.lower() for h in _REWARD_HINTS) or "loss" in m.lower():
            continue  # (a reward model's loss is a loss, not a reward)
        t = Trace.of(run, m, None) or next(iter(traces(run, m)), None)
        if t is None or len(t) < 8:
            continue
        q = max(2, len(t) // 4)
        if median(t.values[-q:]) > median(t.values[:q]):
            return f"{m} improved over the run (RL: the loss follows the data the policy sees)"
    return ""


def _epoch_sawtooth(run: Run, tr: Trace, t: np.ndarray, onset_step: int) -> str:
    """Empty unless the loss also rose within an earlier epoch: then a rise that starts at an
    epoch boundary is the per-epoch sawtooth (the loss drops when each epoch starts over data
    the model has seen, then climbs back), not a divergence. Needs a logged ``epoch``."""
    ep = Trace.of(run, "epoch", tr.rank) or Trace.of(run, "epoch", None)
    if ep is None or len(ep) < 8:
        return ""
    whole = np.floor(ep.values + 1e-9)
    bounds = ep.steps[1:][np.diff(whole) > 0]
    if bounds.size < 2:
        return ""
    # The boundary the rise starts from (within 10% of the run), and the epoch before it.
    near = np.flatnonzero(np.abs(bounds - onset_step) <= 0.1 * max(1, tr.span))
    if near.size == 0 or int(near[0]) == 0:
        return ""
    b1 = int(bounds[int(near[0])])
    b0 = int(bounds[int(near[0]) - 1])
    i0, i1 = np.searchsorted(tr.steps, [b0, b1])
    if i1 - i0 < 20:
        return ""
    y = blocks(tr.steps[i0:i1], t[i0:i1], max_blocks=40).median
    if y.shape[0] < 8:
        return ""
    _, z = theil_sen_z(y)
    if z >= DIVERGE_TREND_Z / 2:
        return "the loss also rose within the previous epoch (a per-epoch sawtooth)"
    return ""


def _hinge_onset(lv: np.ndarray, lo: int, hi: int, is_log: bool) -> int:
    """The change point of a flat-then-rising level: the index in ``[lo, hi]`` that best fits
    ``lv[lo:]`` by a constant and then a line rising from it (a hinge, i.e. continuous
    two-phase regression; Hinkley 1971). A log-space loss is fitted both in log space (an
    exponential blow-up is a line there) and in linear space (a linear rise is), and the
    better relative fit wins: a line fitted to the wrong shape pulls the hinge early."""
    y = lv[lo:]
    c, r = hinge_fit(y, hi - lo + 1)
    if is_log:
        c2, r2 = hinge_fit(np.exp(y - float(y.min())), hi - lo + 1)
        if r2 < r:
            c = c2
    return lo + c


@register_detector("divergence", requires=("loss",))
def detect_divergence(run: Run) -> list[Finding] | NotRun:
    """The loss level rose >= 1.5x above its running minimum and stayed there to the end, or
    rose steadily (a significant robust slope) by >= 1.15x over the final >= 20% of the run.

    Levels are block medians (<= 200 blocks), so single spikes do not count; the rise must
    also beat 5x the block-to-block noise and, for losses that fell by orders of magnitude,
    10% of the log-progress already made. The onset is the change point of a flat-then-rising
    fit from the lowest level before the rise.
    """
    out: list[Finding] = []
    trs = traces(run, "loss", min_points=8)
    for tr in trs:
        t, is_log = log_if_positive(tr.values)
        bl = blocks(tr.steps, t, max_blocks=200 if len(tr) >= 600 else max(8, len(tr) // 3))
        lv = bl.median
        nb = len(lv)
        if nb < 4:
            continue
        cummin = np.minimum.accumulate(lv)
        elev = lv - cummin
        sig_b = diff_sigma(lv)
        if is_log:
            progress = max(0.0, float(lv[0] - cummin[-1]))
            theta = max(math.log(DIVERGE_RATIO), 5.0 * sig_b, 0.1 * progress)
            theta_trend = max(math.log(DIVERGE_TREND_RATIO), 5.0 * sig_b, 0.1 * progress)
        else:
            scale_abs = max(abs(float(cummin[-1])), 1e-12)
            progress = max(0.0, float(lv[0] - cummin[-1]))
            theta = max((DIVERGE_RATIO - 1.0) * scale_abs, 5.0 * sig_b)
            theta_trend = max((DIVERGE_TREND_RATIO - 1.0) * scale_abs, 5.0 * sig_b,
                              0.1 * progress)
        high = elev >= theta
        # The elevated suffix: every block from its start to the end is elevated.
        k = nb
        while k > 0 and high[k - 1]:
            k -= 1
        n_blocks = nb - k
        trend_branch = not (n_blocks >= max(2, math.ceil(0.05 * nb))
                            and int(len(tr) - bl.start[min(k, nb - 1)]) >= 3)
        if trend_branch:
            # Trend branch: a slow, sustained rise from the last block within noise of the
            # running minimum (the change point) to the end.
            near_min = np.flatnonzero(elev <= 2.0 * sig_b)
            m = int(near_min[-1]) if near_min.size else 0
            span = max(1, int(tr.steps[-1] - tr.steps[0]))
            n_blocks = nb - m - 1
            if n_blocks < 8 or int(tr.steps[-1] - bl.first_step[m]) < \
                    DIVERGE_TREND_MIN_FRACTION * span:
                continue
            tail_q = max(2, n_blocks // 4)
            if median(lv[-tail_q:]) - float(cummin[m]) < theta_trend:
                continue
            _, z = theil_sen_z(lv[m:])
            if z < DIVERGE_TREND_Z:
                continue
            k = m + 1
        # The lowest level before the rise, then the change point between it and the rise.
        kmin = int(np.argmin(lv[:k])) if k > 0 else 0
        j = _hinge_onset(lv, kmin, max(kmin, k - 1), is_log) if k - kmin >= 2 else k
        onset_i = int(bl.start[j])
        onset = int(tr.steps[onset_i])
        end_lv = median(lv[k:]) if not trend_branch else median(lv[-max(2, (nb - k) // 4):])
        best = float(cummin[k - 1]) if k > 0 else float(lv[0])
        if is_log:
            ratio = math.exp(end_lv - best)
            undone = end_lv >= float(lv[0]) and float(lv[0]) - best > math.log(1.2)
        else:
            ratio = (end_lv / best) if best > 0 else math.inf
            undone = end_lv >= float(lv[0]) and float(lv[0]) > best
        sev: Severity = "error" if (ratio >= DIVERGE_ERROR_RATIO or undone) else "warning"
        legit = _rise_expected(run) or (
            _epoch_sawtooth(run, tr, t, onset) if trend_branch else "")
        if legit:
            sev = "info"
        conf = float(min(1.0, 0.55 + 0.1 * math.log2(max(ratio, 1.0)) + 0.02 * n_blocks))
        if trend_branch:
            conf = min(conf, 0.7)
        inv = math.exp if is_log else float
        how = (f"median level of the last {n_blocks} blocks of {bl.size} points vs the lowest "
               f"earlier block median") if not trend_branch else (
               f"median of the last {max(2, (nb - k) // 4)} blocks of {bl.size} points, after "
               f"a significant robust upward slope over {n_blocks} blocks (z >= "
               f"{DIVERGE_TREND_Z:.0f}), vs the lowest earlier block median")
        ev = [
            Evidence("loss", int(bl.first_step[kmin]), float(inv(lv[kmin])), None,
                     note=f"lowest level before the rise (median of a block of {bl.size} points)"),
            Evidence("loss", int(tr.steps[-1]), float(inv(end_lv)), float(inv(best)),
                     note=how),
        ]
        if legit:
            ev.append(Evidence("loss", None, None, None, note=f"a rise may be expected: {legit}"))
        tail = " and ended above where it started" if undone else ""
        verb = "rose steadily" if trend_branch else "rose"
        out.append(Finding(
            symptom="divergence", severity=sev, confidence=conf, onset_step=onset,
            end_step=None, rank=tr.rank, metric="loss",
            summary=(f"loss {verb} from step {onset} to {ratio:.3g}x its best level "
                     f"({fmt(inv(best))} -> {fmt(inv(end_lv))}) and stayed up to the last "
                     f"logged step {int(tr.steps[-1])}{tail}"),
            evidence=tuple(ev)))
    if not trs:
        return NotRun("needs at least 8 finite loss points")
    return out


# --------------------------------------------------------------------------- nan_masked
def _filter_known(run: Run) -> bool:
    fw = str(run.meta.get("framework", "")).lower()
    return fw in HF_FRAMEWORKS or bool(run.meta.get("logging_nan_inf_filter"))


@register_detector("nan_masked_in_logs", requires=("loss",))
def detect_nan_masked(run: Run) -> list[Finding] | NotRun:
    """A logger dropped non-finite losses from its average (HF Trainer's
    ``logging_nan_inf_filter``, on by default). Two rules, from what the data shows:

    (a) grad_norm is NaN/inf at a logged step whose loss is finite. Isolated points with the
        loss on trend are what fp16 loss scaling skipping overflow steps looks like (info);
        >= 2 consecutive, a rising density, a loss reaction, or a last-point one is a warning
        (error when grad_norm stays non-finite to the end).
    (b) under the HF Trainer only: the logged loss drops to exactly 0.0 straight from a value
        >= 0.01 (the Trainer logs 0.0 when every step in the window was NaN), or the last
        >= 4 logged losses are bit-identical after the loss had varied - unless that value is
        at the logging resolution after losses already < 0.01 (a converged loss rounded to 4
        decimals), or grad_norm is finite at those steps.
    """
    out: list[Finding] = []
    hf = _filter_known(run)
    # trainmedic's own watcher records every step's loss unfiltered: a finite loss beside a
    # NaN grad_norm there is a backward-only NaN (nonfinite_grad), not a masking logger.
    unfiltered = run.meta.get("format") == "trainmedic.store"
    for tr in traces(run, "loss"):
        if len(tr.all_values) < 2:
            continue
        g = Trace.of(run, "grad_norm", tr.rank)
        if g is not None and not unfiltered and not bool(np.isfinite(g.all_values).all()):
            finite_loss_steps = tr.all_steps[np.isfinite(tr.all_values)]
            bad_g = ~np.isfinite(g.all_values)
            masked = bad_g & np.isin(g.all_steps, finite_loss_steps)
            if masked.any():
                idx = np.flatnonzero(masked)
                at_end = bool(bad_g[-1])
                why = _masked_grad_alarm(idx, bad_g, g.all_steps, tr)
                sev: Severity = "error" if at_end and idx.size >= 2 else (
                    "warning" if at_end or why else "info")
                onset = int(g.all_steps[idx[0]])
                lv = tr.value_at(onset)
                out.append(Finding(
                    symptom="nan_masked_in_logs", severity=sev,
                    confidence=0.9 if hf else 0.6, onset_step=onset,
                    end_step=None if at_end else int(g.all_steps[idx[-1]]), rank=tr.rank,
                    metric="loss",
                    summary=(f"grad_norm was non-finite at {idx.size} logged step(s) from step "
                             f"{onset} while the logged loss stayed finite ({fmt(lv)}): the "
                             f"logger likely averaged only the finite losses"
                             + (f" ({why})" if why else
                                "" if at_end else
                                "; isolated points with the loss on trend, as fp16 loss "
                                "scaling skipping an overflow step looks")),
                    evidence=(
                        Evidence("grad_norm", onset, float(g.all_values[idx[0]]), None,
                                 note=f"{idx.size} of {len(g.all_values)} logged grad_norm "
                                      f"values are non-finite at steps with a finite loss"),
                        Evidence("loss", onset, lv, None,
                                 note="loss logged at the same step"),
                    )))
                continue
        if not hf or len(tr) < 6:
            continue
        v = tr.values
        zero_jump = np.flatnonzero((v[1:] == 0.0) & (v[:-1] >= 0.01))
        if zero_jump.size:
            i = int(zero_jump[0]) + 1
            out.append(Finding(
                symptom="nan_masked_in_logs", severity="warning", confidence=0.7,
                onset_step=int(tr.steps[i]), rank=tr.rank, metric="loss",
                summary=(f"logged loss fell from {fmt(float(v[i - 1]))} to exactly 0.0 at step "
                         f"{int(tr.steps[i])}: the HF Trainer logs 0.0 when every loss in the "
                         f"logging window was NaN/inf and was filtered"),
                evidence=(Evidence("loss", int(tr.steps[i]), 0.0, float(v[i - 1]),
                                   note="previous logged loss"),)))
            continue
        same = np.concatenate([[False], v[1:] == v[:-1]])
        tail = 0
        while tail < len(v) - 1 and same[len(v) - 1 - tail]:
            tail += 1
        distinct_before = np.unique(v[: len(v) - tail - 1]).size
        i = len(v) - tail - 1
        if tail >= 3 and distinct_before >= 5 and not _converged_flatline(v, i, tr, g):
            out.append(Finding(
                symptom="nan_masked_in_logs", severity="warning", confidence=0.5,
                onset_step=int(tr.steps[i]), rank=tr.rank, metric="loss",
                summary=(f"the last {tail + 1} logged losses are all exactly "
                         f"{fmt(float(v[-1]))} from step {int(tr.steps[i])}: a flatline this "
                         f"exact suggests NaN losses were filtered from the log"),
                evidence=(Evidence("loss", int(tr.steps[i]), float(v[-1]), None,
                                   note=f"{tail + 1} consecutive bit-identical logged values "
                                        f"after {distinct_before} distinct ones"),)))
    return out


#: HF Trainer rounds the logged loss to 4 decimals: a converged loss repeats 0.0 or 0.0001.
LOG_RESOLUTION = 5e-4


def _converged_flatline(v: np.ndarray, i: int, tr: Trace, g: Trace | None) -> bool:
    """True when bit-identical losses from index ``i`` on are explained without NaNs: the
    value is at the logging resolution (|v| <= 5e-4) after losses that were already below
    0.01 (a converged run fell there; a NaN-filtered window jumps there, which rule (b)'s
    zero-jump catches), or grad_norm is logged and finite at those steps (a NaN loss makes a
    NaN gradient)."""
    if abs(float(v[i])) <= LOG_RESOLUTION and bool(np.all(np.abs(v[max(0, i - 5):i]) < 0.01)):
        return True
    if g is None:
        return False
    tail_steps = tr.steps[i:]
    return bool(np.all(np.isin(tail_steps, g.steps)))


def _masked_grad_alarm(idx: np.ndarray, bad_g: np.ndarray, g_steps: np.ndarray,
                       tr: Trace) -> str:
    """Why non-finite grad_norm points at finite-loss steps are more than fp16 loss scaling
    skipping overflow steps (GradScaler skips the step and logs an inf/NaN norm at a few
    isolated steps, with the loss on trend): "" when nothing says so, else the reason.
    Reasons: >= 2 consecutive logged points; a rising density (>= 3 in the last quarter of
    the log, at >= 3x the rate before); or the loss reacting within 2 logged points (>= 1.2x
    or <= 1/1.2 the median of the 20 points before and beyond 4 of their robust sigmas, or
    exactly 0.0)."""
    if bool(np.any(bad_g[1:] & bad_g[:-1])):
        return ">= 2 consecutive logged points"
    n = bad_g.size
    q = (3 * n) // 4
    late = int(bad_g[q:].sum())
    early = int(bad_g[:q].sum())
    if late >= 3 and late / max(1, n - q) >= 3.0 * early / max(1, q):
        return "more and more often towards the end"
    for i in idx.tolist():
        j = int(np.searchsorted(tr.steps, g_steps[i], side="left"))
        if j < 5:
            continue
        before = tr.values[max(0, j - 20):j]
        near = tr.values[j:j + 3]
        if near.size == 0 or not bool(np.all(before > 0)):
            continue
        if bool(np.any(near <= 0.0)):
            return f"the loss reacted near step {int(g_steps[i])}"
        lb = np.log(before)
        # Beyond both 1.2x and the loss's own noise (4 robust sigmas of the 20 before).
        tol = max(math.log(1.2), 4.0 * robust_sigma(lb))
        if float(np.max(np.abs(np.log(near) - median(lb)))) >= tol:
            return f"the loss reacted near step {int(g_steps[i])}"
    return ""
