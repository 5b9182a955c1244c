"""The ``divergence`` detector: the loss rose and stayed up (or blew up) instead of falling.

Level rules on block medians (a rise that stays above the running minimum, a slow significant
rise, a creep inside the run that later came down), level rules that need no rise (a
cross-entropy above uniform guessing over any vocabulary, a blow-up at the first steps), and
the guards that keep a swing, a collapse to chance or a batch-noise bounce out of it. Every
rule and threshold is written in docs/symptoms.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from trainmedic.diagnose.detectors.accumulation import val_did_not_follow
from trainmedic.diagnose.detectors.chance import collapsed_to_chance
from trainmedic.diagnose.detectors.evaluations import worse_than_first_eval
from trainmedic.diagnose.detectors.rewards import losses_trade_off
from trainmedic.diagnose.detectors.short_log import climbing_tail, short_divergence
from trainmedic.diagnose.detectors.worsening import worsening
from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import (
    blocks,
    diff_sigma,
    log_if_positive,
    median,
    ramp_fit,
    theil_sen_z,
    true_runs,
)
from trainmedic.diagnose.trace import Trace, fmt, traces
from trainmedic.run.series import Run
from trainmedic.run.vocabulary import ACC_WORDS

__all__ = ["DIVERGE_RATIO", "DIVERGE_ERROR_RATIO", "find_creep"]

#: Divergence: sustained rise above the running minimum level by this factor.
DIVERGE_RATIO = 1.5
DIVERGE_ERROR_RATIO = 3.0
#: ... and a level this far above the running minimum, and above the first level, is elevated
#: whatever the noise: a loss that swings wildly while it climbs (gradients that accumulate
#: without zero_grad) inflates the block-to-block noise until 5 sigmas exceed the climb.
DIVERGE_ALWAYS_RATIO = 10.0
#: A cross-entropy (a perplexity or an accuracy is logged) that stays this many nats above its
#: running minimum is elevated too, when that is less than DIVERGE_RATIO: e times the
#: perplexity.
CE_DIVERGE_NATS = 1.0


# --------------------------------------------------------------------------- divergence
#: Trend branch: a significant rise of at least this ratio over the final stretch.
DIVERGE_TREND_RATIO = 1.15
#: ... whose robust slope is at least this many standard errors above zero ...
DIVERGE_TREND_Z = 4.0
#: ... over at least this fraction of the run's steps.
DIVERGE_TREND_MIN_FRACTION = 0.2


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


def _hinge_onset(lv: np.ndarray, lo: int, hi: int) -> int:
    """The change point of a flat-then-rising level: the index in ``[lo, hi]`` after which
    ``lv[lo:]`` leaves a constant, by a flat-ramp-flat least-squares fit (``ramp_fit``: a
    three-phase regression; the two-phase hinge of Hinkley 1971 with a plateau after the
    rise). The plateau matters: a jump that then settles (warm-up into an lr far too high),
    or a blow-up that saturates, is no straight line, and a line fitted to it leans back and
    dates the rise blocks early. A positive loss is fitted in log space only: an exponential
    blow-up is a line there, and in linear units its first doublings look flat beside the
    plateau it reaches (the block levels are already in log space for a positive loss)."""
    c, _ = ramp_fit(lv[lo:], hi - lo + 1)
    return lo + c


#: Creep: a sustained rise inside the run (not only to its end) by at least this ratio ...
CREEP_RATIO = 1.05
#: ... over at least this fraction of the run's steps, significant at DIVERGE_TREND_Z.
CREEP_MIN_FRACTION = 0.25


@dataclass(frozen=True)
class Creep:
    """A sustained rise of the loss level: from block ``lo`` (its lowest level before) to
    block ``hi`` (its highest level), in transformed units (log for positive losses)."""

    lo: int
    hi: int
    rise: float
    z: float


def find_creep(lv: np.ndarray, steps: np.ndarray, span: int, is_log: bool) -> Creep | None:
    """The largest sustained rise of a block-median level ``lv`` (first steps ``steps``):
    the smoothed level's largest draw-up (its high minus the lowest level before it), kept
    when it lasts >= 25% of the run, rises >= 5% (and >= 5 block sigmas), and a robust
    (Theil-Sen) slope through the blocks of the stretch is >= DIVERGE_TREND_Z standard errors
    above zero. Healthy training does not climb for a quarter of the run; warm restarts,
    RL and GANs are excused by the caller."""
    nb = lv.shape[0]
    if nb < 8:
        return None
    w = 3 if nb >= 15 else 1
    sm = np.array([median(lv[max(0, i - w // 2): i + w // 2 + 1]) for i in range(nb)])
    cm_idx = np.zeros(nb, dtype=np.int64)
    best = 0
    for i in range(1, nb):
        if sm[i] < sm[best]:
            best = i
        cm_idx[i] = best
    draw = sm - sm[cm_idx]
    hi = int(np.argmax(draw))
    lo = int(cm_idx[hi])
    rise = float(draw[hi])
    sig_b = diff_sigma(lv)
    need = max(math.log(CREEP_RATIO) if is_log else (CREEP_RATIO - 1.0) * abs(float(sm[lo])),
               5.0 * sig_b)
    if hi - lo < 4 or rise < need or int(steps[hi] - steps[lo]) < CREEP_MIN_FRACTION * span:
        return None
    _, z = theil_sen_z(lv[lo: hi + 1])
    if z < DIVERGE_TREND_Z:
        return None
    return Creep(lo=lo, hi=hi, rise=rise, z=z)


def _creep_finding(run: Run, tr: Trace, lv: np.ndarray, bl_first: np.ndarray, c: Creep,
                   is_log: bool, size: int) -> Finding | None:
    """A divergence that rose inside the run and came back down (an lr drop, a restart)."""
    inv = math.exp if is_log else float
    onset = int(bl_first[c.lo])
    top = int(bl_first[c.hi])
    ratio = math.exp(c.rise) if is_log else (
        (float(inv(lv[c.lo])) + c.rise) / float(inv(lv[c.lo])) if lv[c.lo] else math.inf)
    legit = (losses_trade_off(run) if ratio < DIVERGE_ALWAYS_RATIO else "") or (
        _cyclic(run, tr.rank) and "the logged lr cycles (warm restarts)")
    sev: Severity = "info" if legit else "warning"
    ev = [Evidence(tr.metric, onset, float(inv(lv[c.lo])), None,
                   note=f"lowest level before the rise (block median of {size} points)"),
          Evidence(tr.metric, top, float(inv(lv[c.lo] + c.rise)), float(inv(lv[c.lo])),
                   note=f"highest level of the rise (smoothed block medians); a robust slope "
                        f"through the {c.hi - c.lo + 1} blocks is {c.z:.1f} standard errors "
                        f"above zero")]
    if legit:
        ev.append(Evidence(tr.metric, None, None, None, note=f"a rise may be expected: {legit}"))
    return Finding(
        symptom="divergence", severity=sev, confidence=0.65, onset_step=onset, end_step=top,
        rank=tr.rank, metric=tr.metric,
        summary=(f"{tr.metric} rose steadily from step {onset} to step {top} "
                 f"({ratio:.3g}x, {fmt(inv(lv[c.lo]))} -> {fmt(inv(lv[c.lo] + c.rise))}) "
                 f"over {100 * (top - onset) / max(1, tr.span):.0f}% of the run instead of "
                 f"falling, then came down"),
        evidence=tuple(ev))


#: ln of the largest tokenizer vocabulary in use (262144): a cross-entropy above it is worse
#: than predicting uniformly over any vocabulary, i.e. confidently wrong: diverged.
CE_ABOVE_UNIFORM_NATS = math.log(262144)
#: Metric-name fragments that say the loss is a cross-entropy (its exp is a perplexity) ...
_CE_HINTS = ("ppl", "perplexity")


def _ce_reason(run: Run) -> str | None:
    """"a perplexity" / "an accuracy" when a logged metric says the loss is a cross-entropy."""
    for m in run.metrics():
        low = m.lower()
        if any(h in low for h in _CE_HINTS):
            return "a perplexity"
        # an accuracy says the run is a classifier, whose loss is a cross-entropy in practice
        # (label smoothing and focal loss stay within it)
        if ACC_WORDS & set(re.split(r"[^a-z0-9]+", low)):
            return "an accuracy"
    return None


def _ce_above_uniform(run: Run, tr: Trace) -> Finding | None:
    """A cross-entropy loss (a perplexity or an accuracy is logged beside it) whose level
    stays above ln(262144) nats for >= 10% of the run: worse than uniform guessing over any
    vocabulary, so the model is confidently wrong (diverged), whether or not it was ever
    lower. The onset is the foot of the climb: the last point before that stretch within 1.5x
    of the lowest loss so far (the first point when the loss was never that low)."""
    if tr.metric != "loss" or _ce_reason(run) is None:
        return None
    above = tr.values > CE_ABOVE_UNIFORM_NATS
    if not bool(above.any()):
        return None
    runs_ = [(a, b) for a, b in true_runs(above)
             if int(tr.steps[b - 1] - tr.steps[a]) >= 0.1 * max(1, tr.span) and b - a >= 3]
    if not runs_:
        return None
    a, b = runs_[0]
    lvl = median(tr.values[a:b])
    low = np.minimum.accumulate(np.where(np.isfinite(tr.values), tr.values, np.inf))
    foot = np.flatnonzero(tr.values[:a] <= DIVERGE_RATIO * low[:a])
    if not foot.size and Trace.of(run, "grad_norm", tr.rank) is not None:
        return None  # there from the first step: exploding_gradients' init-scale rule owns it
    onset = int(tr.steps[foot[-1] if foot.size else 0])
    return Finding(
        symptom="divergence", severity="error", confidence=0.8, onset_step=onset,
        end_step=int(tr.steps[b - 1]), rank=tr.rank, metric="loss",
        summary=(f"loss (a cross-entropy: {_ce_reason(run)} is logged) climbed from step "
                 f"{onset} and stayed at {fmt(lvl)} nats from step {int(tr.steps[a])} to "
                 f"{int(tr.steps[b - 1])}, above ln(262144) = {CE_ABOVE_UNIFORM_NATS:.2f}: "
                 f"worse than uniform guessing over any vocabulary, so the model is "
                 f"confidently wrong"),
        evidence=(Evidence("loss", int(tr.steps[a]), lvl, CE_ABOVE_UNIFORM_NATS,
                           note=f"median over the {b - a} logged points of that stretch; "
                                f"reference = ln of the largest tokenizer vocabulary"),
                  Evidence("loss", onset, float(tr.values[foot[-1] if foot.size else 0]),
                           None, note="the foot of the climb: the last point within 1.5x of "
                                      "the lowest loss so far")))


#: A loss whose last half sits this many times above its first logged value, and that never
#: came back within 2x of it after its first few points, blew up at its first steps.
NEVER_BACK_RATIO = 5.0


def _never_back_to_start(run: Run, tr: Trace) -> Finding | None:
    """The loss jumped within its first few logged points and never came back: the median of
    its last half is >= 5x its first logged value, and >= 90% of the points after the first
    5% are >= 2x it. An lr far too high blows a model up at its first steps; the jump is inside
    the first block, so the running-minimum rule (block medians) cannot see it. Not when a
    rise may be legitimate (RL, a GAN). Error; onset at the first point >= 2x the first."""
    if tr.metric != "loss" or len(tr) < 10 or losses_trade_off(run):
        return None
    v0 = float(tr.values[0])
    if not (math.isfinite(v0) and v0 > 0):
        return None
    late = median(tr.values[len(tr) // 2:])
    rest = tr.values[max(1, len(tr) // 20):]
    if not late >= NEVER_BACK_RATIO * v0 or float(np.mean(rest >= 2.0 * v0)) < 0.9:
        return None
    first_up = int(np.flatnonzero(tr.values >= 2.0 * v0)[0])
    if first_up > max(3, len(tr) // 20):
        return None  # a later climb: the running-minimum rule sees it, with its own onset
    onset = int(tr.steps[first_up])
    return Finding(
        symptom="divergence", severity="error", confidence=0.8, onset_step=onset,
        end_step=None, rank=tr.rank, metric="loss",
        summary=(f"loss jumped from {fmt(v0)} at its first logged step to {fmt(late)} (median "
                 f"of the second half, {late / v0:.3g}x) and never came back within 2x of "
                 f"where it started: the model blew up in its first steps"),
        evidence=(Evidence("loss", int(tr.steps[0]), v0, None, note="first logged loss"),
                  Evidence("loss", int(tr.steps[-1]), late, v0,
                           note="median of the second half vs the first logged loss")))


def _foot(t: np.ndarray, start: np.ndarray, j: int, elevated: float) -> int:
    """The point index where a rise found at block ``j`` begins: when a point inside blocks
    ``j`` and ``j + 1`` jumps to the ``elevated`` level (1.5x the best level before the rise),
    that first elevated point; else (a slow rise) the first point of block ``j`` below it. A
    block median places the change only to within a block (a missing zero_grad took one block
    of three points from 0.06 down to 2e-4 and the next up to 0.8): the onset is the first
    logged step that shows the rise, as a reader of the log marks it (the point before it is
    the last good one, and a sparse log - fairseq every 1000 updates - puts them far apart)."""
    lo = int(start[min(j, start.shape[0] - 1)])
    hi = int(start[j + 2]) if j + 2 < start.shape[0] else t.shape[0]
    seg = t[lo:hi]
    # Points above the elevated level before the first point under it are the descent from
    # the init (a first block that holds the first loss), not the rise.
    low = np.flatnonzero(seg < elevated)
    if not low.size:
        return lo
    first_low = int(low[0])
    up = np.flatnonzero(~(seg[first_low:] < elevated))  # NaN counts as elevated
    if not up.size:
        # A slow rise (no jump inside): the lowest point there is only noise; the rise starts
        # where the descent from the init ended.
        return lo + first_low
    return lo + first_low + int(up[0])


def _swings_inside(lv: np.ndarray, amp: float) -> bool:
    """Whether an elevated stretch of block medians itself swings up and down (>= 4 reversals
    of at least ``amp``, half the elevation threshold): a loss that keeps falling back towards
    its best and climbing again (class-sorted data, an lr at the edge of stability)
    oscillates."""
    from trainmedic.diagnose.detectors.oscillation import _zigzag

    return len(_zigzag(lv, amp)) - 2 >= 4


def _val_kept_falling(run: Run, tr: Trace, onset: int) -> str:
    """Why a training-loss rise from ``onset`` is not the model diverging ("" when it may
    be): a validation loss with an evaluation after the onset, whose last is below its level
    at the onset (the evaluation before it). Averaged over a whole set, it kept improving
    while the batches' loss rose: noise or harder batches, not a model getting worse."""
    if tr.metric != "loss":
        return ""
    val = Trace.of(run, "val_loss", tr.rank) or Trace.of(run, "val_loss", None)
    if val is None:
        return ""
    i = int(np.searchsorted(val.steps, onset))
    if i < 1 or len(val) - i < 1:
        return ""
    at_onset = float(val.values[i - 1])
    last = float(val.values[-1])
    if not (math.isfinite(last) and last < at_onset):
        return ""
    return (f"the validation loss kept falling over the same steps ({fmt(at_onset)} -> "
            f"{fmt(last)})")


def _revisited(lv: np.ndarray, k: int, theta: float) -> bool:
    """Whether the level of the elevated suffix ``lv[k:]`` was reached before it, after the
    loss had first fallen clearly below it (by ``theta``), and left again downwards: a new
    swing to an old height, not a rise to where the run never went back to."""
    level = median(lv[k:])
    below = np.flatnonzero(lv[:k] < level - theta)
    if below.size == 0:
        return False
    seg = lv[int(below[0]):k]
    up = np.flatnonzero(seg >= level)
    return bool(up.size) and bool(np.any(seg[int(up[0]) + 1:] < level - theta))


def _cyclic(run: Run, rank: int | None) -> bool:
    from trainmedic.diagnose.detectors.oscillation import _cyclic_lr

    return _cyclic_lr(run, rank)


@register_detector("divergence", requires_any=("loss", "val_loss"))
def detect_divergence(run: Run) -> list[Finding] | NotRun:
    """The loss level rose >= 1.5x above its running minimum and stayed there to the end, or
    rose steadily (a significant robust slope) by >= 1.15x over the final >= 20% of the run.

    Levels are block medians (<= 200 blocks), so single spikes do not count; the rise must
    also beat 5x the block-to-block noise and, for losses that fell by orders of magnitude,
    10% of the log-progress already made. The onset is the change point of a flat-then-rising
    fit from the lowest level before the rise.
    """
    out: list[Finding] = []
    # Without a training loss, the validation loss is the only curve there is (fairseq's
    # valid lines, an eval-only export): it is judged the same way.
    trs = traces(run, "loss", min_points=8) or traces(run, "val_loss", min_points=8)
    if not trs:  # a short log (5-7 points) is judged by its shape
        out.extend(f for t in traces(run, "loss") if (f := short_divergence(t)) is not None)
    ce = _ce_reason(run) is not None
    for tr in trs:
        if tr.metric == "loss" and collapsed_to_chance(run, tr) is not None:
            continue  # a rise that ends at ln k is a collapse to chance: flat_loss reports it
        level = _ce_above_uniform(run, tr) or _never_back_to_start(run, tr) or \
            worse_than_first_eval(run, tr)
        if level is not None:
            out.append(level)
            continue
        t, is_log = log_if_positive(tr.values)
        # Evaluations are averages over a whole set already: a short validation-only series
        # is read point by point (blocks of two would merge the best evaluation with the jump).
        nmax = 200 if len(tr) >= 600 else len(tr) if (tr.metric != "loss" and len(tr) < 24) \
            else max(8, len(tr) // 3)
        bl = blocks(tr.steps, t, max_blocks=nmax)
        lv = bl.median
        nb = len(lv)
        if nb < 4:
            continue
        cummin = np.minimum.accumulate(lv)
        elev = lv - cummin
        sig_b = diff_sigma(lv)
        if is_log:
            progress = max(0.0, float(lv[0] - cummin[-1]))
            ratio_rise = math.log(DIVERGE_RATIO)
            if ce and float(cummin[-1]) <= math.log(CE_ABOVE_UNIFORM_NATS):
                # A cross-entropy's damage is in nats: +1 nat multiplies the perplexity by e
                # whatever the level, while 1.5x of a 6-nat LM loss is +3 nats (20x the
                # perplexity). The smaller of the two rises counts. (Only for a mean loss: a
                # level above ln(262144) nats is a summed one, whose nats mean nothing.)
                ratio_rise = min(ratio_rise, math.log1p(CE_DIVERGE_NATS *
                                                        math.exp(-float(cummin[-1]))))
            theta = max(ratio_rise, 5.0 * sig_b, 0.1 * progress)
            theta_trend = max(math.log(DIVERGE_TREND_RATIO), 5.0 * sig_b, 0.1 * progress)
        else:
            scale_abs = max(abs(float(cummin[-1])), 1e-12)
            progress = max(0.0, float(lv[0] - cummin[-1]))
            theta = max((DIVERGE_RATIO - 1.0) * scale_abs, 5.0 * sig_b)
            theta_trend = max((DIVERGE_TREND_RATIO - 1.0) * scale_abs, 5.0 * sig_b,
                              0.1 * progress)
        # Past 10x its running minimum and back above where the run began, a level is
        # elevated whatever the noise (near zero, log space makes 10x cheap: a loss that
        # went from 1e-6 back to 1e-2 gave back nothing that matters).
        high = (elev >= theta) | ((elev >= math.log(DIVERGE_ALWAYS_RATIO)) & (lv >= lv[0])) \
            if is_log else elev >= theta
        # The elevated suffix: every block from its start to the end is elevated.
        k = nb
        while k > 0 and high[k - 1]:
            k -= 1
        n_blocks = nb - k
        # A suffix under 3x its best, on fewer than 30 points, must last >= 10% of the blocks:
        # on a short, noisy run the last few blocks of a converged loss can sit 1.5x above its
        # luckiest block.
        big = k < nb and float(np.min(elev[k:])) >= (math.log(DIVERGE_ERROR_RATIO) if is_log
                                                   else (DIVERGE_ERROR_RATIO - 1.0) *
                                                   max(abs(float(cummin[-1])), 1e-12))
        suffix_points = int(len(tr) - bl.start[min(k, nb - 1)])
        min_suffix = 0.05 if (big or suffix_points >= 30) else 0.10
        trend_branch = not (n_blocks >= max(2, math.ceil(min_suffix * nb))
                            and suffix_points >= 3)
        if trend_branch and tr.metric != "loss":
            # A validation loss that rises slowly is overfitting's to judge (it says the
            # training side was not logged); only a jump that stays up is a divergence here.
            continue
        if trend_branch:
            # Trend branch: a slow, sustained rise from the last block within noise of the
            # running minimum (the change point) to the end.
            near_min = np.flatnonzero(elev <= 2.0 * sig_b)
            m = int(near_min[-1]) if near_min.size else 0
            span = max(1, int(tr.steps[-1] - tr.steps[0]))
            n_blocks = nb - m - 1
            ok = not (n_blocks < 8 or int(tr.steps[-1] - bl.first_step[m]) <
                      DIVERGE_TREND_MIN_FRACTION * span)
            tail_q = max(2, n_blocks // 4)
            ok = ok and median(lv[-tail_q:]) - float(cummin[m]) >= theta_trend
            ok = ok and theil_sen_z(lv[m:])[1] >= DIVERGE_TREND_Z
            if not ok:
                # No rise to the end: a rise inside the run that later came down.
                lv_c = blocks(tr.steps, t, max_blocks=min(60, max(8, len(tr) // 3)))
                c = find_creep(lv_c.median, lv_c.first_step, tr.span, is_log)
                if c is not None and c.hi < len(lv_c.median) - 1:
                    f = _creep_finding(run, tr, lv_c.median, lv_c.first_step, c, is_log,
                                       lv_c.size)
                    if f is not None:
                        out.append(f)
                continue
            k = m + 1
        elif _swings_inside(lv[max(0, k - 1):], 0.5 * theta) and \
                median(elev[k:]) < (math.log(2.0) if is_log else
                                    float(np.abs(cummin[-1]))) and \
                theil_sen_z(lv[k:])[1] < 2.0:
            # Up and down by as much as it rose, typically under 2x its best, with no upward
            # trend: an oscillation (class-sorted data), not a divergence.
            continue
        elif _revisited(lv, k, theta):
            # The loss was up at this level before, after its descent, and came back down:
            # the last of its swings (class-sorted data), which `oscillation` reports.
            continue
        # The lowest level before the rise, then the change point between it and the rise.
        kmin = int(np.argmin(lv[:k])) if k > 0 else 0
        j = _hinge_onset(lv, kmin, max(kmin, k - 1)) if k - kmin >= 2 else k
        base = float(cummin[max(0, k - 1)])
        onset_i = _foot(t, bl.start, j, base + math.log(DIVERGE_RATIO) if is_log
                        else base + (DIVERGE_RATIO - 1.0) * abs(base))
        onset = int(tr.steps[onset_i])
        end_lv = median(lv[k:]) if not trend_branch else median(lv[-max(2, (nb - k) // 4):])
        best = float(cummin[k - 1]) if k > 0 else float(lv[0])
        if is_log:
            ratio = math.exp(end_lv - best)
            undone = end_lv >= float(lv[0]) and float(lv[0]) - best > math.log(1.2)
        else:
            # a loss that can be negative (nnU-Net's Dice + CE, a continuous NLL): the rise
            # over the best level's magnitude, as end / best is for a positive loss
            ratio = (end_lv / best) if best > 0 else \
                1.0 + (end_lv - best) / abs(best) if best < 0 else math.inf
            undone = end_lv >= float(lv[0]) and float(lv[0]) > best
        sev: Severity = "error" if (ratio >= DIVERGE_ERROR_RATIO or undone) else "warning"
        # (a GAN's or an RL run's loss may rise, but its highest level not reach 10x the best:
        # that is a blow-up, a failure whatever trades off)
        top = float(np.max(lv[k:])) if k < nb else end_lv
        blown = (top - best >= math.log(DIVERGE_ALWAYS_RATIO)) if is_log else (
            top >= DIVERGE_ALWAYS_RATIO * best if best > 0 else ratio >= DIVERGE_ALWAYS_RATIO)
        legit = ("" if blown else losses_trade_off(run)) or (
            _epoch_sawtooth(run, tr, t, onset) if trend_branch else "") or (
            _val_kept_falling(run, tr, onset) if ratio < DIVERGE_ERROR_RATIO else
            val_did_not_follow(run, tr, onset))
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
            Evidence(tr.metric, int(bl.first_step[kmin]), float(inv(lv[kmin])), None,
                     note=f"lowest level before the rise (median of a block of {bl.size} points)"),
            Evidence(tr.metric, int(tr.steps[-1]), float(inv(end_lv)), float(inv(best)),
                     note=how),
        ]
        if legit:
            ev.append(Evidence(tr.metric, None, None, None,
                               note=f"a rise may be expected: {legit}"))
        tail = " and ended above where it started" if undone else ""
        if ce and is_log and float(inv(best)) <= CE_ABOVE_UNIFORM_NATS:
            nats = float(inv(end_lv)) - float(inv(best))
            # exp overflows past ~709 nats: a loss that climbed that far has no perplexity
            # worth printing, only its rise.
            ppl = f": {math.exp(nats):.3g}x the perplexity" if nats < 700 else ""
            tail += f" (+{nats:.3g} nats{ppl})"
        verb = "rose steadily" if trend_branch else "rose"
        out.append(Finding(
            symptom="divergence", severity=sev, confidence=conf, onset_step=onset,
            end_step=None, rank=tr.rank, metric=tr.metric,
            summary=(f"{tr.metric} {verb} from step {onset} " + (
                     f"to {ratio:.3g}x its best level" if inv(best) > 0 else
                     f"by {fmt(inv(end_lv) - inv(best))} above its best level") +
                     f" ({fmt(inv(best))} -> {fmt(inv(end_lv))}) and stayed up to the last "
                     f"logged step {int(tr.steps[-1])}{tail}"),
            evidence=tuple(ev)))
    for rank in run.ranks():
        if not any(f.rank == rank and f.metric == "loss" for f in out):
            tl = Trace.of(run, "loss", rank)
            climb = _climb_to_nan(run, rank) or climbing_tail(tl) or (
                climbing_tail(tl, any_length=True) if not losses_trade_off(run) else None) or (
                worsening(run, tl) if tl is not None and
                collapsed_to_chance(run, tl) is None else None)
            if climb is not None:
                out.append(climb)
    if not trs and not out:
        return NotRun("needs at least 8 finite loss points")
    return out


#: A loss that rose at every logged point over at least this many points just before its
#: first non-finite value ...
CLIMB_TO_NAN_POINTS = 3
#: ... by at least this factor in all, diverged, and the climb's start is the onset: a log
#: that blew up in its fourth epoch has too few finite points for the level analysis above.
CLIMB_TO_NAN_RATIO = 10.0


def _climb_to_nan(run: Run, rank: int | None) -> Finding | None:
    """The uninterrupted rise of the training loss into its first NaN/inf, if it is one."""
    s = run.get("loss", rank)
    if s is None:
        return None
    v = s.values
    bad = np.flatnonzero(~np.isfinite(v))
    if bad.size == 0 or int(bad[0]) < CLIMB_TO_NAN_POINTS:
        return None
    i = int(bad[0])
    pre = v[:i]
    if not bool(np.all(pre > 0)):
        return None
    m = i - 1
    while m > 0 and pre[m - 1] < pre[m]:
        m -= 1
    ratio = float(pre[i - 1] / pre[m])
    if i - m < CLIMB_TO_NAN_POINTS or ratio < CLIMB_TO_NAN_RATIO:
        return None
    onset = int(s.steps[m])
    return Finding(
        symptom="divergence", severity="error", confidence=0.8, onset_step=onset,
        end_step=int(s.steps[i]), rank=rank, metric="loss",
        summary=(f"loss rose at every one of its last {i - m} logged points before it became "
                 f"non-finite, {ratio:.3g}x in all ({fmt(float(pre[m]))} at step {onset} -> "
                 f"{fmt(float(pre[i - 1]))} at step {int(s.steps[i - 1])}), then "
                 f"{v[i]} at step {int(s.steps[i])}"),
        evidence=(Evidence("loss", onset, float(pre[m]), None,
                           note="start of the uninterrupted rise (the onset)"),
                  Evidence("loss", int(s.steps[i - 1]), float(pre[i - 1]), float(pre[m]),
                           note="last finite loss before the first non-finite one")))
