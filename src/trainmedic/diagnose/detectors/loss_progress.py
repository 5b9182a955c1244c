"""Detectors for how the loss progresses: not at all (flat) or not any more (plateau); back
and forth is ``oscillation.py``'s.

Both look at block medians in log space (for positive losses), so the per-point noise of a
small-batch loss is averaged out before any level is compared.
"""

from __future__ import annotations

import math

import numpy as np

from trainmedic.diagnose.detectors.chance import (
    accuracy_at_chance,
    accuracy_learning,
    chance_finding,
    collapsed_to_chance,
    collapsed_to_mean,
    double_softmax_floor,
    near_chance_start,
    never_beats_chance,
    pinned_at_chance,
    start_classes,
)
from trainmedic.diagnose.detectors.loss_nonfinite import zero_loss_without_gradient
from trainmedic.diagnose.detectors.majority import FrozenAccuracy, frozen_accuracy
from trainmedic.diagnose.detectors.short_log import frozen_short
from trainmedic.diagnose.detectors.stuck import (
    StuckTail,
    frozen_from_start,
    pinned_eval,
    stuck_tail,
)
from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import (
    blocks,
    diff_sigma,
    log_if_positive,
    median,
    row_median,
    theil_sen_z,
)
from trainmedic.diagnose.trace import Trace, fmt, traces
from trainmedic.run.series import Run

__all__ = ["chance_classes", "FLAT_REL", "PLATEAU_MIN_FRACTION"]

#: Flat: the loss never got more than 3% below its starting level, and ended within 3% of it.
FLAT_REL = 0.03
#: Plateau: no improvement over at least this fraction of the run's steps.
PLATEAU_MIN_FRACTION = 0.25
MAX_CHANCE_CLASSES = 1000  # for "at chance" (ln k spacing shrinks as 1/k)


def chance_classes(level: float, se: float = 0.0) -> int | None:
    """``k`` when ``level`` is within tolerance of ``ln k`` for an integer 2 <= k <= 1000.

    Cross-entropy of a classifier that predicts the uniform distribution over k classes is
    exactly ln k. The tolerance is max(0.003, 3 x ``se``) (``se``: the standard error of
    ``level``, so a noisy but long flat run still matches), capped at a quarter of the gap to
    the nearer of ln(k-1), ln(k+1) so that the match stays specific to one k.
    ``level`` should be the median of the whole flat stretch (a precise estimate).
    """
    if not math.isfinite(level) or level < math.log(2) - 0.01 or level > 13.0:
        return None
    k = max(2, round(math.exp(level)))
    if k > MAX_CHANCE_CLASSES:
        return _vocab_at_chance(level, se)
    gap = math.log(k + 1) - math.log(k)
    if k > 2:
        gap = min(gap, math.log(k) - math.log(k - 1))
    tol = min(max(0.003, 3.0 * se), 0.25 * gap)
    return k if abs(level - math.log(k)) <= tol else None


#: Vocabulary sizes of common tokenizers (GPT-2 50257 and its padded 50304, LLaMA 32000,
#: LLaMA-3 128256, Mistral-Nemo/Gemma/Qwen, BERT 30522, T5 32128, ...): a language model that
#: predicts uniformly has a loss of ln(vocabulary). Past 1000 classes ln k is too dense to
#: match any k, so only these are matched (within 0.01 nats, or 3 standard errors).
VOCAB_SIZES: tuple[int, ...] = (30522, 32000, 32100, 32128, 32768, 49152, 50257, 50304, 50432,
                                51200, 65024, 65536, 100277, 100352, 128000, 128256, 131072,
                                151643, 151936, 152064, 250112, 256000, 262144)


def _vocab_at_chance(level: float, se: float) -> int | None:
    tol = max(0.01, 3.0 * se)
    best = min(VOCAB_SIZES, key=lambda v: abs(level - math.log(v)))
    return best if abs(level - math.log(best)) <= tol else None


def pinned(values: np.ndarray, min_points: int = 5) -> bool:
    """True when every value is the same to 6 significant digits: a loss (or an eval) that
    does not move at all is not noise-free learning, it is a model that is not updated (or a
    logger repeating one number)."""
    if values.shape[0] < min_points:
        return False
    lo, hi = float(values.min()), float(values.max())
    if lo == 0.0 and hi == 0.0:
        return False  # below the logger's rounding (HF rounds to 4 decimals), not stuck
    return math.isfinite(lo) and hi - lo <= 1e-6 * max(abs(hi), abs(lo), 1e-12)


def _levels(tr: Trace, max_blocks: int) -> tuple[np.ndarray, np.ndarray, bool, int]:
    t, is_log = log_if_positive(tr.values)
    bl = blocks(tr.steps, t, max_blocks=max_blocks)
    return bl.median, bl.first_step, is_log, bl.size


def _rel(a: float, b: float, is_log: bool) -> float:
    """Relative drop from level a to level b (positive when b is lower)."""
    if is_log:
        return 1.0 - math.exp(b - a)
    return (a - b) / abs(a) if a else 0.0


# --------------------------------------------------------------------------- flat_loss
def _stuck_finding(t: StuckTail, tr: Trace) -> Finding:
    """flat_loss for a loss identical from ``t.onset_step`` to the end (error when that is
    half the log or more, else warning)."""
    share = t.points / len(tr)
    k = chance_classes(t.value) if t.value > 0 else None
    what = (f"the level of predicting uniformly over {k} classes, ln({k}) = "
            f"{math.log(k):.4f}: the outputs saturated or the updates stopped" if k else
            "the model is not updated any more (updates skipped, outputs saturated)")
    return Finding(
        symptom="flat_loss", severity="error" if share >= 0.5 else "warning",
        confidence=0.85, onset_step=t.onset_step, end_step=int(tr.steps[-1]), rank=tr.rank,
        metric="loss",
        summary=(f"from step {t.onset_step} the loss is {fmt(t.value)} at every one of the "
                 f"last {t.points} logged points ({100 * share:.0f}% of the log), after "
                 f"{fmt(t.before)} just before: {what}"),
        evidence=(Evidence("loss", t.onset_step, t.value, t.before,
                           note=f"the same value to 6 digits at each of the {t.points} points "
                                f"from here to the end (the logger's rounding: "
                                f"{fmt(t.resolution) if t.resolution else 'full precision'})"
                                f"; reference = the value just before"),))



#: A peak lr under this cannot train (flat_loss waives its noise bound, as for lr = 0).
LR_TINY = 1e-6
#: A fall of the loss is "significant" at this many standard errors.
FLAT_SIGNIFICANT_Z = 3.0


def _fall_z(t: np.ndarray, size: int) -> tuple[float, float]:
    """Total change of a robust (Theil-Sen) line through the means of consecutive blocks of
    ``size`` points of ``t``, and its z-score (negative = falling); (0, 0) with fewer than 10
    blocks. One line through every point is far more precise than comparing the first and
    last 10%. Block means (not medians) keep the efficiency of the mean; the line and its
    noise estimate (``theil_sen_z``) stay robust to outlier blocks."""
    nb = t.shape[0] // size
    if nb < 10:
        return 0.0, 0.0
    slope, z = theil_sen_z(t[: nb * size].reshape(nb, size).mean(axis=1))
    return slope * (nb - 1), z


@register_detector("flat_loss", requires=("loss",))
def detect_flat_loss(run: Run) -> list[Finding] | NotRun:
    """The loss never fell more than 3% below its starting level and ends within 3% of it,
    over >= 8 logged points, and the noise is small enough that a 3% fall would have shown
    (standard error of the start-end difference <= 1.5%). Start, best and end are estimated
    at the same precision: the start and the end are medians of the first and last 10% of
    block medians, the best is the lowest sliding window of that same size, and it must beat
    the start by 3% + z standard errors (z = sqrt(2 ln #windows), the expected extreme of that
    many noise draws) to count as a fall. A fall under 3% that a robust trend line shows to be
    significant (>= 3 standard errors) is info ("slow learning"). At chance (level = ln k, on
    train or validation loss) or with lr = 0 it is an error (with lr = 0, whenever the loss
    shows no significant fall, however noisy); from a run that starts late (a resume) it is
    info; otherwise a warning."""
    out: list[Finding] = []
    trs = traces(run, "loss", min_points=8)
    for short in traces(run, "loss", min_points=3):
        pin = pinned_at_chance(run, short) if len(short) < 8 else None
        found = chance_finding(pin, short) if pin is not None else (
            frozen_short(short) if len(short) < 8 else None)  # (5-7 identical points)
        if found is not None:
            out.append(found)
    for tr in trs:
        if not bool(np.any(tr.values)):  # exactly 0: below rounding, unless no gradient
            out.extend(f for f in [zero_loss_without_gradient(run, tr)] if f)
            continue
        grad = Trace.of(run, "grad_norm", tr.rank) or Trace.of(run, "grad_norm", None)
        if (tail := stuck_tail(tr, grad)) is not None:
            out.append(_stuck_finding(tail, tr))
            continue
        lv, _, is_log, bsize = _levels(tr, max_blocks=min(100, max(4, len(tr) // 2)))
        nb = len(lv)
        head = max(1, math.ceil(0.1 * nb))
        t_all, _ = log_if_positive(tr.values)
        scale = 1.0 if is_log else max(abs(median(t_all)), 1e-12)
        sig = diff_sigma(t_all) / scale
        # Standard error of a median of `head` block medians of `bsize` points (a median of
        # medians: 1.2533^2 x sigma / sqrt(points) for blocks > 1 point).
        eff = 1.2533 * (1.2533 if bsize > 1 else 1.0)
        se_win = eff * sig / math.sqrt(head * bsize)
        # The trend is fitted after the first 10% (the start level's window): a quick drop
        # in the first few points (the init transient) does not make a stuck run "learning".
        change, z_change = _fall_z(t_all[head * bsize:] / scale, bsize)
        falling = z_change <= -FLAT_SIGNIFICANT_Z
        lr = Trace.of(run, "lr", tr.rank) or Trace.of(run, "lr", None)
        lr_zero = lr is not None and len(lr) > 0 and bool(np.all(np.abs(lr.values) <= 1e-12))
        # An lr whose peak is under 1e-6 (below any optimizer's useful range but preference
        # tuning's 5e-7 with its own falling loss) cannot move the model either: without a
        # significant fall the noise bound is waived, as for lr = 0.
        lr_tiny = lr is not None and len(lr) > 0 and not lr_zero and \
            float(np.max(np.abs(lr.values))) < LR_TINY
        first = median(lv[:head])
        last = median(lv[-head:])
        nwin = nb - head + 1
        if head > 1:
            win = np.lib.stride_tricks.sliding_window_view(lv, head)
            best_lv = float(row_median(win).min())
        else:
            best_lv = float(lv.min())
        z_ext = math.sqrt(2.0 * math.log(nwin)) if nwin > 1 else 0.0
        best_drop = _rel(first, best_lv, is_log)
        end_change = abs(_rel(first, last, is_log))
        fell = best_drop >= FLAT_REL + z_ext * se_win or end_change >= FLAT_REL
        # Only claim "flat" when the data could have shown a fall of FLAT_REL: the standard
        # error of (start level - end level) must be under half of it. With few, noisy points
        # a real improvement can hide in the noise. With lr = 0 the model cannot learn, so
        # the absence of a significant fall is enough.
        precise = 1.2533 * sig * math.sqrt(2.0 / (head * bsize)) <= FLAT_REL / 2
        is_pinned = pinned(tr.values)
        val_still = False
        if is_pinned:
            fell, falling, precise = False, False, True
        if lr_zero or lr_tiny:
            # With an lr that cannot train, the validation loss (an average over a whole set)
            # settles what a noisy training loss cannot: moving < 1% over >= 4 evaluations,
            # nothing was learned.
            val_still = (falling or fell) and _val_still(run, tr.rank)
            if (falling or fell) and not val_still:
                continue
            if val_still:
                falling = False
        elif not precise and _val_still(run, tr.rank, 5) and _no_fall(tr):
            # A noisy training loss cannot show a 3% fall, but the validation loss (averaged
            # over a whole set) can: moving < 1% over >= 5 evaluations while the training
            # loss's later half sits no lower than its start, nothing was learned.
            val_still, falling = True, False
        elif fell or not precise:
            continue
        inv = math.exp if is_log else float
        lvl = float(inv(last))
        val = Trace.of(run, "val_loss", tr.rank)
        # The chance check uses whole-run medians: over a flat stretch they are the most
        # precise level estimates (validation first: it is averaged over a whole set).
        val_level = median(val.values[len(val) // 2:]) if (
            val is not None and len(val)) else None
        k = chance_classes(val_level) if val_level is not None else None
        k_src = "val_loss"
        if k is None and not falling:
            # Standard error of the whole-run median (linear units: the loss is ~ln k).
            se_med = 1.2533 * diff_sigma(tr.values) / math.sqrt(len(tr))
            k, k_src = chance_classes(median(tr.values), se_med), "loss"
        late_start = tr.steps[0] > max(10 * tr.interval, 0.2 * max(1, int(tr.steps[-1])))
        if learning := accuracy_learning(run, tr.rank, k):
            k, falling = None, True  # a logged accuracy says the model learns: no chance claim
        if k is not None:
            falling = False  # the model predicts uniformly: whatever the train trend shows
        sev: Severity = "error" if (k is not None or lr_zero or is_pinned) else (
            "warning" if lr_tiny else "info" if late_start or (
                falling and (bool(learning) or not near_chance_start(tr))) else "warning")
        ev = [Evidence("loss", int(tr.steps[0]), float(inv(first)), None,
                       note=f"median of the first {head} block(s) of the run"),
              Evidence("loss", int(tr.steps[-1]), lvl, float(inv(first)),
                       note=f"median of the last {head} block(s) vs the first; the best "
                            f"window of {head} block(s) was only {100 * best_drop:.1f}% below "
                            f"the start")]
        if falling:
            ev.append(Evidence("loss", int(tr.steps[-1]), None, None,
                               note=f"a robust trend line falls {100 * abs(change):.2g}"
                                    f"{'% (log)' if is_log else '% of the level'} over the "
                                    f"run ({abs(z_change):.1f} standard errors): slow "
                                    f"learning, not none"))
        chance = ""
        if k is not None:
            ref = val_level if k_src == "val_loss" else median(tr.values)
            ev.append(Evidence(k_src, int(tr.steps[-1]), ref, math.log(k),
                               note=f"ln({k}) = {math.log(k):.5f}: the loss of predicting "
                                    f"uniformly over {k} classes"))
            chance = f"; at chance level: {k_src} ~ ln({k}) = {math.log(k):.4f}"
        if lr_zero:
            ev.append(Evidence("lr", int(lr.steps[0]) if lr else None, 0.0, None,
                               note="every logged lr is 0"))
        if lr_tiny and lr is not None:
            ev.append(Evidence("lr", int(lr.steps[0]), float(np.max(np.abs(lr.values))),
                               LR_TINY, note="peak logged lr, far too low to train"))
        slow = f"; {learning or 'it is falling slowly (significant trend)'}" if falling else ""
        if falling and sev == "warning" and not lr_tiny:
            k0 = start_classes(tr)
            slow += (f", but it started at chance, ln({k0}) = {math.log(k0 or 2):.4f}: the "
                     f"model barely left it over the whole run")
        if val_still and (vt := Trace.of(run, "val_loss", tr.rank) or
                          Trace.of(run, "val_loss", None)) is not None:
            slow = ("; the training batches are noisy, but the validation loss moved < 1% over "
                    "the run")
            ev.append(Evidence("val_loss", int(vt.steps[-1]), float(np.ptp(vt.values)),
                               median(vt.values), note=f"max - min of {len(vt)} evaluations "
                                                       f"vs their median (< 1%)"))
        if is_pinned:
            slow = "; every logged value is the same to 6 digits: the model is not updated"
            ev.append(Evidence("loss", int(tr.steps[-1]), float(tr.values.max() -
                                                                 tr.values.min()), None,
                               note="max - min of every logged loss value"))
        out.append(Finding(
            symptom="flat_loss", severity=sev, confidence=0.9 if k is not None else (
                0.5 if falling else 0.75),
            onset_step=int(tr.steps[0]), end_step=int(tr.steps[-1]), rank=tr.rank,
            metric="loss",
            summary=(f"loss stayed at {fmt(lvl)} (within {100 * FLAT_REL:.0f}% of its start) "
                     f"over {len(tr)} logged points, steps {int(tr.steps[0])}-"
                     f"{int(tr.steps[-1])}{chance}{slow}"),
            evidence=tuple(ev)))
    if not trs:
        return out or NotRun("needs at least 8 finite loss points")
    loud = {f.rank for f in out if f.level >= 1}
    for tr in trs:
        if tr.rank in loud:
            continue
        frozen = frozen_from_start(run, tr.rank)
        if frozen is not None:
            out = [f for f in out if f.rank != tr.rank]
            out.append(Finding(
                symptom="flat_loss", severity="error", confidence=0.85,
                onset_step=int(tr.steps[0]), end_step=int(tr.steps[-1]), rank=tr.rank,
                metric="val_loss",
                summary=(f"the model never left its initial state: the validation loss is "
                         f"identical ({fmt(frozen[1])}) at every evaluation from step "
                         f"{frozen[0]}, its second, to the end; whatever the training loss's "
                         f"batches show, the weights do not change"),
                evidence=(Evidence("val_loss", frozen[0], frozen[1], None,
                                   note="the same value, to 6 digits, at every later "
                                        "evaluation"),)))
            continue
        stuck = never_beats_chance(run, tr) or collapsed_to_chance(run, tr) or \
            accuracy_at_chance(run, tr) or collapsed_to_mean(run, tr)
        if stuck is not None:
            # Never beating chance outweighs an info "slow learning" reading of the same curve.
            out = [f for f in out if f.rank != tr.rank]
            out.append(chance_finding(stuck, tr))
            continue
        if any(f.rank == tr.rank and f.level >= 1 for f in out):
            continue
        unbeaten = _never_beat_first(run, tr)
        if unbeaten is not None:
            out = [f for f in out if f.rank != tr.rank]
            out.append(unbeaten)
    return out


#: Never beat its own first loss: the validation loss's best (running median of 3) is at
#: least this share of the first training loss ...
UNBEATEN_VAL = 0.97
#: ... and the training loss's lowest block median at least this share of it ...
UNBEATEN_TRAIN = 0.93
#: ... but not this far above it (a loss that blew up is a divergence's).
UNBEATEN_MAX = 1.3


def _never_beat_first(run: Run, tr: Trace) -> Finding | None:
    """The model never got better than it was at its first step: over >= 30 training points
    and >= 5 evaluations, the validation loss's best running median of 3 is >= 97% of the
    first training loss (the lower of the first point and the median of the first three), and
    the training loss's lowest block median is >= 93% of it (and neither above 1.3x: that is a
    blow-up). A from-scratch model starts at chance, so this is "never beat chance" without
    knowing the class count; a fine-tune starts at its pretrained loss, and one that never
    improves on it did not learn either. An lr so high that the model thrashes, labels
    detached from the inputs, weights decayed to zero. Not on a log that starts late (a
    resume), nor when the validation loss is still improving at the end (its last three
    evaluations never rise, and the last is below the first). Warning."""
    if len(tr) < 30 or tr.steps[0] > max(10 * tr.interval, 0.2 * max(1, int(tr.steps[-1]))):
        return None
    val = Trace.of(run, "val_loss", tr.rank) or Trace.of(run, "val_loss", None)
    if val is None or len(val) < 5:
        return None
    first = min(float(tr.values[0]), median(tr.values[:3]))
    if not first > 0:
        return None
    best_val = min(median(val.values[i:i + 3]) for i in range(len(val) - 2))
    v3 = val.values[-3:]
    if float(v3[0]) >= float(v3[1]) >= float(v3[2]) and float(v3[2]) < float(val.values[0]):
        return None  # still improving at the end, however slowly (a fine-tune near its floor)
    bl = blocks(tr.steps, tr.values, max_blocks=min(50, max(3, len(tr) // 3)))
    best_train = float(bl.median.min())
    rv, rt = best_val / first, best_train / first
    if not (UNBEATEN_VAL <= rv <= UNBEATEN_MAX and UNBEATEN_TRAIN <= rt <= UNBEATEN_MAX):
        return None
    return Finding(
        symptom="flat_loss", severity="warning", confidence=0.7,
        onset_step=int(tr.steps[0]), end_step=int(tr.steps[-1]), rank=tr.rank,
        metric="val_loss",
        summary=(f"the model never got better than at its first step: the validation loss's "
                 f"best ({fmt(best_val)}) is {100 * rv:.0f}% of the first training loss "
                 f"({fmt(first)}) and the training loss never got more than "
                 f"{100 * (1 - rt):.0f}% below it, over {len(tr)} logged points (an lr so "
                 f"high the model thrashes, labels detached from the inputs, or weights "
                 f"decayed to zero)"),
        evidence=(Evidence("loss", int(tr.steps[0]), first, None,
                           note="first training loss (the lower of the first point and the "
                                "median of the first three)"),
                  Evidence("val_loss", None, best_val, first,
                           note="lowest running median of 3 evaluations vs the first loss"),
                  Evidence("loss", None, best_train, first,
                           note="lowest block median of the training loss vs the first")))


# --------------------------------------------------------------------------- plateau
@register_detector("plateau", requires=("loss",))
def detect_plateau(run: Run) -> list[Finding] | NotRun:
    """After a descent of >= 10%, the loss level stopped improving by more than
    max(1%, 2 block sigmas) for >= 25% of the run's steps (and >= 5 blocks). Always info:
    a plateau is often the schedule doing its job; the router checks lr to say which."""
    out: list[Finding] = []
    trs = traces(run, "loss", min_points=12)
    for tr in trs:
        lv, bsteps, is_log, _ = _levels(tr, max_blocks=min(100, max(6, len(tr) // 3)))
        nb = len(lv)
        if nb < 6:
            continue
        best = float(lv.min())
        if _rel(float(lv[0]), best, is_log) < 0.10:
            continue  # no descent: flat_loss territory
        if not is_log and best <= 0.0 <= float(np.min(tr.values)):
            continue  # down to 0, a non-negative loss's floor (or below the logger's rounding)
        if collapsed_to_chance(run, tr) is not None or collapsed_to_mean(run, tr) is not None:
            continue  # back at chance: flat_loss reports the collapse
        sig = diff_sigma(lv)
        delta = max(math.log(1.01) if is_log else 0.01 * abs(best), 2.0 * sig)
        k = int(np.flatnonzero(lv <= best + delta)[0])
        span = max(1, int(tr.steps[-1] - tr.steps[0]))
        plateau_steps = int(tr.steps[-1] - bsteps[k])
        if plateau_steps < PLATEAU_MIN_FRACTION * span or nb - k < 5:
            continue
        inv = math.exp if is_log else float
        onset = int(bsteps[k])
        share = plateau_steps / span
        ev = [Evidence("loss", onset, float(inv(lv[k])), float(inv(float(lv[0]))),
                       note="first block median within noise of the best level; "
                            "reference = first block median")]
        sev, why = _plateau_cost(run, tr, onset, share)
        floor = double_softmax_floor(tr, onset)
        if floor is not None and sev == "info":
            sev = "warning"
            why = (f"; it sits at ln(1 + {floor.k - 1}/e) = {floor.landmark:.4f}, the lowest "
                   f"loss a softmax applied twice can reach over {floor.k} classes, and never "
                   f"went below it: a softmax in the head under a cross-entropy that applies "
                   f"log-softmax again")
        frozen = pinned_eval(run, tr.rank)
        if frozen_from_start(run, tr.rank) is not None:
            frozen = None  # never learned: flat_loss says so
        if frozen is not None and frozen[0] >= onset - 0.1 * span:
            sev = "error" if share >= 0.5 else "warning"
            why = (f"; validation loss identical ({fmt(frozen[1])}) at every evaluation from "
                   f"step {frozen[0]}: the weights stopped changing")
            ev.append(Evidence("val_loss", frozen[0], frozen[1], None,
                               note="the same value, to 6 digits, at every later evaluation"))
        if why and not frozen:
            ev.append(Evidence("loss", onset, float(inv(best)), None, note=why.lstrip("; ")))
        out.append(Finding(
            symptom="plateau", severity=sev, confidence=0.6 if sev == "info" else 0.75,
            onset_step=onset, end_step=int(tr.steps[-1]), rank=tr.rank, metric="loss",
            summary=(f"loss stopped improving at step {onset} (level {fmt(inv(best))}) and "
                     f"stayed there for {100 * share:.0f}% of the run{why}"),
            evidence=tuple(ev)))
    if not trs and not any(frozen_accuracy(run, r) for r in run.ranks()):
        return NotRun("needs at least 12 finite loss points")
    if not out and trs:
        frozen = pinned_eval(run, None)
        if frozen_from_start(run, None) is not None:
            frozen = None  # never learned: flat_loss says so
        if frozen is not None and trs:
            tr = trs[0]
            span = max(1, int(tr.steps[-1] - tr.steps[0]))
            share = (int(tr.steps[-1]) - frozen[0]) / span
            if share >= 0.25:
                out.append(Finding(
                    symptom="plateau", severity="error" if share >= 0.5 else "warning",
                    confidence=0.75, onset_step=frozen[0], end_step=int(tr.steps[-1]),
                    rank=tr.rank, metric="val_loss",
                    summary=(f"validation loss identical ({fmt(frozen[1])}) at every "
                             f"evaluation from step {frozen[0]} ({100 * share:.0f}% of the "
                             f"run): the weights stopped changing while training went on"),
                    evidence=(Evidence("val_loss", frozen[0], frozen[1], None,
                                       note="the same value, to 6 digits, at every later "
                                            "evaluation"),)))
    for rank in run.ranks():
        fa = frozen_accuracy(run, rank)
        if fa is not None and not any(f.rank == rank and f.level >= 1 for f in out):
            out = [f for f in out if f.rank != rank]  # (an info plateau of the same run)
            out.append(_frozen_accuracy_finding(fa, rank))
    return out


def _frozen_accuracy_finding(fa: FrozenAccuracy, rank: int | None) -> Finding:
    train = ("" if fa.train_max is None else
             f" and the training accuracy ({fa.train_metric}) never rose above it (max "
             f"{fmt(fa.train_max)})")
    return Finding(
        symptom="plateau", severity="warning", confidence=0.75, onset_step=fa.onset_step,
        rank=rank, metric=fa.metric,
        summary=(f"{fa.metric} is {fmt(fa.value)} at every one of the last {fa.evals} "
                 f"evaluations (from step {fa.onset_step}) while val_loss still moved "
                 f"{100 * fa.loss_move:.0f}% ({fmt(fa.loss_first)} -> {fmt(fa.loss_last)})"
                 f"{train}: the probabilities change but no prediction does - the model "
                 f"predicts one class for every input (on imbalanced data, the majority class: "
                 f"{fmt(fa.value)} of the validation set); weight or resample the classes, "
                 f"check the labels, or raise the lr"),
        evidence=(Evidence(fa.metric, fa.onset_step, fa.value, None,
                           note=f"the same value at each of the {fa.evals} evaluations from "
                                f"here to the last"),
                  Evidence("val_loss", fa.onset_step, fa.loss_last, fa.loss_first,
                           note="last vs first validation loss over the same evaluations")))


def _plateau_cost(run: Run, tr: Trace, onset: int, share: float) -> tuple[Severity, str]:
    """Severity from what the plateau costs: a plateau at chance level (ln k: the model
    predicts uniformly) is an error; any other plateau is info (often the schedule doing its
    job, or the data's floor), unless the evaluations show frozen weights (see the caller).
    ln k values are dense (ln 8 and ln 9 are 0.12 apart), so one curve near ln k can be a
    coincidence: chance needs the median of the plateau stretch within 0.1% of ln k on the
    training loss *and* the validation loss at the same k. A rule on "learned little, then
    stopped" was tried and dropped: a fine-tune or a hard task can plateau at 70% of its
    start, healthily."""
    a = int(np.searchsorted(tr.steps, onset))
    level = median(tr.values[a:]) if a < len(tr) else float("nan")
    k = chance_classes(level)
    if k is None or abs(level - math.log(k)) > 1e-3 * math.log(k):
        return "info", ""
    val = Trace.of(run, "val_loss", tr.rank) or Trace.of(run, "val_loss", None)
    if val is None or len(val) < 2:
        return "info", ""
    b = int(np.searchsorted(val.steps, onset))
    if b >= len(val) or chance_classes(median(val.values[b:])) != k:
        return "info", ""
    if share < PLATEAU_MIN_FRACTION:
        return "info", ""
    return "error", (f"; training and validation loss both at chance level ln({k}) = "
                     f"{math.log(k):.4f}: the model predicts uniformly")


def _val_still(run: Run, rank: int | None, min_evals: int = 4) -> bool:
    """The validation loss moved < 1% (max - min over its level) over >= ``min_evals``
    evaluations."""
    val = Trace.of(run, "val_loss", rank) or Trace.of(run, "val_loss", None)
    if val is None or len(val) < min_evals:
        return False
    lvl = abs(median(val.values))
    return lvl > 0 and float(val.values.max() - val.values.min()) < 0.01 * lvl


def _no_fall(tr: Trace) -> bool:
    """A positive training loss whose later half's median is >= 97% of its first tenth's."""
    v = tr.values
    return bool(np.all(v > 0)) and median(v[len(v) // 2:]) >= \
        (1.0 - FLAT_REL) * median(v[: max(1, len(v) // 10)])
