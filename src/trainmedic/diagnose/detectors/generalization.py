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
#: The training loss may rise by at most this much over the same interval.
TRAIN_TOLERANCE = 0.02


def _second_diff_sigma(t: np.ndarray) -> float:
    """Noise of a smooth curve: robust sigma of second differences / sqrt(6) (a linear trend
    cancels; white noise of sigma s gives second differences of sigma s*sqrt(6))."""
    if t.size < 4:
        return 0.0
    return robust_sigma(np.diff(t, n=2)) / math.sqrt(6.0)


@register_detector("overfitting", requires=("val_loss",))
def detect_overfitting(run: Run) -> list[Finding] | NotRun:
    """Needs >= 4 finite validation points and >= 2 evaluations after the minimum.

    rise = median of the later half (at least min(3, n_after)) of the evaluations after the
    minimum, over the minimum. Reported when rise >= 1% and >= 2.5 noise sigmas (sigma from
    second differences near and after the minimum), the last min(3, n_after) evaluations are
    still >= max(1 sigma, 0.5%) above the minimum, and the training loss did not rise by more
    than 2% over the same steps.
    Warning when rise >= 5% and >= 4 sigmas (>= 15% with only 2 evaluations after the
    minimum); info otherwise (a mild upturn is worth knowing,
    not alarming).
    """
    out: list[Finding] = []
    ran = False
    for vt in traces(run, "val_loss"):
        n = len(vt)
        if n < 4:
            continue
        ran = True
        t, is_log = log_if_positive(vt.values)
        m = int(np.argmin(t))
        after = t[m + 1:]
        if after.size < 2:
            continue
        # Late level: the median of the later half of the evaluations after the minimum.
        k = max(min(3, after.size), math.ceil(after.size / 2))
        end_level = median(after[-k:])
        rise = end_level - float(t[m])
        rel = (math.exp(rise) - 1.0) if is_log else rise / max(abs(float(t[m])), 1e-12)
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
        rs = rise / sig if sig > 0 else math.inf
        strong = rel >= OVERFIT_WARN_RISE and rs >= OVERFIT_WARN_SIGMAS
        # Two evaluations after the best are thin evidence: they must rise >= 15%.
        if after.size < 3 and rel < 3 * OVERFIT_WARN_RISE:
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
    if not ran:
        return NotRun("needs at least 4 finite val_loss points")
    return out
