"""Overfitting: validation loss turned up from its minimum while training loss kept falling."""

from __future__ import annotations

import math

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import log_if_positive, median, robust_sigma
from trainmedic.diagnose.trace import Trace, fmt, traces
from trainmedic.run.series import Run

__all__ = ["OVERFIT_MIN_RISE", "OVERFIT_WARN_RISE"]

#: Below this relative rise of validation loss over its minimum, nothing is reported.
OVERFIT_MIN_RISE = 0.01
#: At and above this rise (and OVERFIT_WARN_SIGMAS noise sigmas) it is a warning.
OVERFIT_WARN_RISE = 0.05
#: The rise must beat this many noise sigmas to be reported at all, and OVERFIT_WARN_SIGMAS
#: for a warning: the minimum of n noisy evaluations of a flat curve sits ~2-2.5 sigmas below
#: its level (expected minimum of n Gaussians), so a rise smaller than that is no evidence.
OVERFIT_MIN_SIGMAS = 2.5
OVERFIT_WARN_SIGMAS = 4.0
#: ... or this many when the rise is held for most of the run (see ``detect_overfitting``).
OVERFIT_LONG_WARN_SIGMAS = 3.0
#: With only three evaluations (HF's default 3-epoch fine-tune, one eval per epoch): the
#: first must be the lowest, the next two rise monotonically, and the last is this much higher.
OVERFIT_THREE_EVAL_RISE = 0.15
#: The training loss may rise by at most this much over the same interval.
TRAIN_TOLERANCE = 0.02


def _second_diff_sigma(t: np.ndarray) -> float:
    """Noise of a smooth curve: robust sigma of second differences / sqrt(6) (a linear trend
    cancels; white noise of sigma s gives second differences of sigma s*sqrt(6))."""
    if t.size < 4:
        return 0.0
    return robust_sigma(np.diff(t, n=2)) / math.sqrt(6.0)


def _train_levels(run: Run, vt: Trace, best_step: int) -> tuple[float, float] | None:
    """Training loss near ``best_step`` and near the last evaluation (medians of nearby
    points), or None when it is not logged there."""
    last_step = int(vt.steps[-1])
    tr = Trace.of(run, "loss", vt.rank) or Trace.of(run, "loss", None)
    if tr is None or len(tr) < 2:
        return None
    win = max(tr.interval, 0.05 * max(1, last_step - best_step))
    at_best = tr.level(int(best_step - win), int(best_step + win))
    at_end = tr.level(int(last_step - 2 * win), last_step + int(win))
    if at_best is None or at_end is None:
        return None
    return at_best, at_end


def _three_evals(run: Run, vt: Trace, t: np.ndarray, is_log: bool) -> list[Finding]:
    """Three evaluations are too few for a noise estimate, so the rule is shape-only: the
    first is the minimum, the other two rise monotonically, the last is >= 15% above the
    first, and the training loss fell over the same steps (a warning; otherwise nothing)."""
    v = vt.values
    if not (t[0] < t[1] < t[2]):
        return []
    rel = (math.exp(float(t[2] - t[0])) - 1.0) if is_log else (
        float(v[2] - v[0]) / max(abs(float(v[0])), 1e-12))
    if rel < OVERFIT_THREE_EVAL_RISE:
        return []
    best_step, last_step = int(vt.steps[0]), int(vt.steps[-1])
    levels = _train_levels(run, vt, best_step)
    if levels is None or not levels[1] < levels[0]:
        return []
    at_best, at_end = levels
    return [Finding(
        symptom="overfitting", severity="warning", confidence=0.6, onset_step=best_step,
        end_step=last_step, rank=vt.rank, metric="val_loss",
        summary=(f"validation loss was lowest at the first of 3 evaluations ({fmt(float(v[0]))}"
                 f" at step {best_step}) and rose at each of the next two, {100 * rel:.1f}% "
                 f"in all (training loss {fmt(at_best)} -> {fmt(at_end)}); best step "
                 f"{best_step}"),
        evidence=(Evidence("val_loss", best_step, float(v[0]), None,
                           note="lowest validation loss of 3 evaluations (best step)"),
                  Evidence("val_loss", last_step, float(v[2]), float(v[0]),
                           note="last of 3 evaluations, each higher than the one before"),
                  Evidence("loss", last_step, at_end, at_best,
                           note="training loss near the end vs near the best validation "
                                "step (medians of nearby points)")))]


@register_detector("overfitting", requires=("val_loss",))
def detect_overfitting(run: Run) -> list[Finding] | NotRun:
    """Needs >= 3 finite validation points and >= 2 evaluations after the minimum; exactly 3
    get the shape-only rule of ``_three_evals``.

    rise = median of the later half (at least min(3, n_after)) of the evaluations after the
    minimum, over the minimum (for the warning: over the median of the minimum and its two
    neighbours). Reported when rise >= 1% and >= 2.5 noise sigmas (sigma from
    second differences near and after the minimum), the last min(3, n_after) evaluations are
    still >= max(1 sigma, 0.5%) above the minimum, and the training loss did not rise by more
    than 2% over the same steps.
    Warning when rise >= 5% and >= 4 sigmas (3 sigmas when >= 20 and over half of the
    evaluations come after the minimum; >= 15% with only 2 evaluations after the
    minimum); info otherwise (a mild upturn is worth knowing,
    not alarming).
    """
    out: list[Finding] = []
    trs = traces(run, "val_loss", min_points=3)
    for vt in trs:
        n = len(vt)
        t, is_log = log_if_positive(vt.values)
        m = int(np.argmin(t))
        after = t[m + 1:]
        if after.size < 2:
            continue
        if n == 3:
            f3 = _three_evals(run, vt, t, is_log)
            out.extend(f3)
            continue
        # Late level: the median of the later half of the evaluations after the minimum.
        k = max(min(3, after.size), math.ceil(after.size / 2))
        end_level = median(after[-k:])
        rise = end_level - float(t[m])
        rel = (math.exp(rise) - 1.0) if is_log else rise / max(abs(float(t[m])), 1e-12)
        # For the warning, the rise is measured from the median of the minimum and its
        # neighbours: the single lowest of many noisy evaluations sits ~2 sigmas below the
        # curve (selection bias), so a rise from it alone turned flat, noisy validation curves
        # into warnings (1 in 25-50 at 3-5% eval noise over 20-40 evaluations).
        base = median(t[max(0, m - 1):m + 2])
        rise_b = end_level - base
        rel_b = (math.exp(rise_b) - 1.0) if is_log else rise_b / max(abs(base), 1e-12)
        # Noise measured near and after the minimum (the early descent's curvature would
        # inflate a whole-run estimate).
        local = t[max(0, m - 3):]
        sig = _second_diff_sigma(local if local.size >= 8 else t)
        if rel < OVERFIT_MIN_RISE or rise < OVERFIT_MIN_SIGMAS * sig:
            continue
        if median(after) <= float(t[m]):
            continue
        # The rise must still be there at the very end (not a bump that has come back down).
        if median(after[-min(3, after.size):]) - float(t[m]) < max(sig, 0.005):
            continue
        best_step = int(vt.steps[m])
        last_step = int(vt.steps[-1])
        tr = Trace.of(run, "loss", vt.rank) or Trace.of(run, "loss", None)
        train_ev: list[Evidence] = []
        train_note = "training loss not logged"
        train_ok = True
        if tr is not None and len(tr) >= 2:
            win = max(tr.interval, 0.05 * max(1, last_step - best_step))
            at_best = tr.level(int(best_step - win), int(best_step + win))
            at_end = tr.level(int(last_step - 2 * win), last_step + int(win))
            if at_best is not None and at_end is not None:
                train_ok = at_end <= at_best * (1 + TRAIN_TOLERANCE) if at_best > 0 else (
                    at_end <= at_best + TRAIN_TOLERANCE * abs(at_best))
                train_ev.append(Evidence("loss", last_step, at_end, at_best,
                                         note="training loss near the end vs near the best "
                                              "validation step (medians of nearby points)"))
                train_note = (f"training loss {fmt(at_best)} -> {fmt(at_end)}")
        if not train_ok:
            continue
        rs = rise_b / sig if sig > 0 else math.inf
        # A rise held for most of the run (>= 20 evaluations and over half of them after the
        # minimum) is measured by a median of >= 10 late points, so 3 sigmas suffice.
        long_rise = after.size >= max(20, n / 2)
        need = OVERFIT_LONG_WARN_SIGMAS if long_rise else OVERFIT_WARN_SIGMAS
        strong = rel_b >= OVERFIT_WARN_RISE and rs >= need
        # Two evaluations after the best are thin evidence: they must rise >= 15%.
        if after.size < 3 and rel_b < 3 * OVERFIT_WARN_RISE:
            strong = False
        sev: Severity = "warning" if strong else "info"
        conf = float(min(1.0, 0.45 + 0.05 * after.size + min(0.3, rel)))
        if not train_ev:
            conf = min(conf, 0.6)
        vmin = float(vt.values[m])
        vend = float(vt.values[-1])
        ev = [Evidence("val_loss", best_step, vmin, None,
                       note=f"lowest validation loss of {n} evaluations (best step)"),
              Evidence("val_loss", last_step, vend, vmin,
                       note=f"last evaluation vs the minimum; median of the last {k} is "
                            f"{100 * rel:.1f}% above it")]
        ev += train_ev
        out.append(Finding(
            symptom="overfitting", severity=sev, confidence=conf, onset_step=best_step,
            end_step=last_step, rank=vt.rank, metric="val_loss",
            summary=(f"validation loss reached its minimum {fmt(vmin)} at step {best_step} "
                     f"and rose {100 * rel:.1f}% over the next {after.size} evaluations "
                     f"({train_note}); best step {best_step}"),
            evidence=tuple(ev)))
    if not trs:
        return NotRun("needs at least 3 finite val_loss points")
    return out
