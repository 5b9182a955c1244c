"""Detectors for how the loss progresses: not at all (flat), then not any more (plateau), or
back and forth (oscillation).

All three look at block medians in log space (for positive losses), so the per-point noise
of a small-batch loss is averaged out before any level is compared.
"""

from __future__ import annotations

import math

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import blocks, diff_sigma, log_if_positive, median
from trainmedic.diagnose.trace import Trace, fmt, traces
from trainmedic.run.series import Run

__all__ = ["chance_classes", "FLAT_REL", "PLATEAU_MIN_FRACTION"]

#: Flat: the loss never got more than 3% below its starting level, and ended within 3% of it.
FLAT_REL = 0.03
#: Plateau: no improvement over at least this fraction of the run's steps.
PLATEAU_MIN_FRACTION = 0.25
#: Largest class count considered for the "at chance" check (ln k spacing shrinks as 1/k).
MAX_CHANCE_CLASSES = 1000


def chance_classes(level: float) -> int | None:
    """``k`` when ``level`` is within tolerance of ``ln k`` for an integer 2 <= k <= 1000.

    Cross-entropy of a classifier that predicts the uniform distribution over k classes is
    exactly ln k. The tolerance is min(0.003, 0.05 x the gap to ln(k+1)): 0.003 for k <= 16
    (ln 4 = 1.3863), 0.0005 for k = 100, so a chance match by coincidence stays under ~10%.
    ``level`` should be the median of the whole flat stretch (a precise estimate).
    """
    if not math.isfinite(level) or level < math.log(2) - 0.01:
        return None
    k = max(2, round(math.exp(level)))
    if k > MAX_CHANCE_CLASSES:
        return None
    tol = min(0.003, 0.05 * (math.log(k + 1) - math.log(k)))
    return k if abs(level - math.log(k)) <= tol else None


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
@register_detector("flat_loss", requires=("loss",))
def detect_flat_loss(run: Run) -> list[Finding] | NotRun:
    """The loss never fell more than 3% below its starting level (block medians, first 10%
    of points) and ends within 3% of it, over >= 8 logged points, and the noise is small
    enough that a 3% fall would have shown (standard error of the start-end difference
    <= 1.5%). At chance (level = ln k,
    on train or validation loss) or with lr = 0 it is an error; from a run that starts late
    (a resume) it is info; otherwise a warning."""
    out: list[Finding] = []
    ran = False
    for tr in traces(run, "loss"):
        if len(tr) < 8:
            continue
        ran = True
        lv, _, is_log, bsize = _levels(tr, max_blocks=min(100, max(4, len(tr) // 2)))
        nb = len(lv)
        head = max(1, math.ceil(0.1 * nb))
        # Only claim "flat" when the data could have shown a fall of FLAT_REL: the standard
        # error of (start level - end level) must be under half of it. With few, noisy points
        # a real improvement can hide in the noise.
        t_all, _ = log_if_positive(tr.values)
        sig = diff_sigma(t_all) if is_log else diff_sigma(t_all) / max(abs(median(t_all)), 1e-12)
        if 1.2533 * sig * math.sqrt(2.0 / (head * bsize)) > FLAT_REL / 2:
            continue
        first = median(lv[:head])
        last = median(lv[-head:])
        best_drop = _rel(first, float(lv.min()), is_log)
        end_change = abs(_rel(first, last, is_log))
        if best_drop >= FLAT_REL or end_change >= FLAT_REL:
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
        if k is None:
            k, k_src = chance_classes(median(tr.values)), "loss"
        lr = Trace.of(run, "lr", tr.rank) or Trace.of(run, "lr", None)
        lr_zero = lr is not None and len(lr) > 0 and bool(np.all(np.abs(lr.values) <= 1e-12))
        late_start = tr.steps[0] > max(10 * tr.interval, 0.2 * max(1, int(tr.steps[-1])))
        sev: Severity = "error" if (k is not None or lr_zero) else (
            "info" if late_start else "warning")
        ev = [Evidence("loss", int(tr.steps[0]), float(inv(first)), None,
                       note=f"median of the first {head} block(s) of the run"),
              Evidence("loss", int(tr.steps[-1]), lvl, float(inv(first)),
                       note=f"median of the last {head} block(s) vs the first; best block "
                            f"was only {100 * best_drop:.1f}% below the start")]
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
        out.append(Finding(
            symptom="flat_loss", severity=sev, confidence=0.9 if k is not None else 0.75,
            onset_step=int(tr.steps[0]), end_step=int(tr.steps[-1]), rank=tr.rank,
            metric="loss",
            summary=(f"loss stayed at {fmt(lvl)} (within {100 * FLAT_REL:.0f}% of its start) "
                     f"over {len(tr)} logged points, steps {int(tr.steps[0])}-"
                     f"{int(tr.steps[-1])}{chance}"),
            evidence=tuple(ev)))
    if not ran:
        return NotRun("needs at least 8 finite loss points")
    return out


# --------------------------------------------------------------------------- plateau
@register_detector("plateau", requires=("loss",))
def detect_plateau(run: Run) -> list[Finding] | NotRun:
    """After a descent of >= 10%, the loss level stopped improving by more than
    max(1%, 2 block sigmas) for >= 25% of the run's steps (and >= 5 blocks). Always info:
    a plateau is often the schedule doing its job; the router checks lr to say which."""
    out: list[Finding] = []
    ran = False
    for tr in traces(run, "loss"):
        if len(tr) < 12:
            continue
        ran = True
        lv, bsteps, is_log, _ = _levels(tr, max_blocks=min(100, max(6, len(tr) // 3)))
        nb = len(lv)
        if nb < 6:
            continue
        best = float(lv.min())
        if _rel(float(lv[0]), best, is_log) < 0.10:
            continue  # no descent: flat_loss territory
        sig = diff_sigma(lv)
        delta = max(math.log(1.01) if is_log else 0.01 * abs(best), 2.0 * sig)
        k = int(np.flatnonzero(lv <= best + delta)[0])
        span = max(1, int(tr.steps[-1] - tr.steps[0]))
        plateau_steps = int(tr.steps[-1] - bsteps[k])
        if plateau_steps < PLATEAU_MIN_FRACTION * span or nb - k < 5:
            continue
        inv = math.exp if is_log else float
        onset = int(bsteps[k])
        out.append(Finding(
            symptom="plateau", severity="info", confidence=0.6, onset_step=onset,
            end_step=int(tr.steps[-1]), rank=tr.rank, metric="loss",
            summary=(f"loss stopped improving at step {onset} (level {fmt(inv(best))}) and "
                     f"stayed there for {100 * plateau_steps / span:.0f}% of the run"),
            evidence=(Evidence("loss", onset, float(inv(lv[k])), float(inv(float(lv[0]))),
                               note="first block median within noise of the best level; "
                                    "reference = first block median"),)))
    if not ran:
        return NotRun("needs at least 12 finite loss points")
    return out


# --------------------------------------------------------------------------- oscillation
def _zigzag(x: np.ndarray, amp: float) -> list[int]:
    """Indices of alternating extrema whose successive differences are all >= ``amp``."""
    piv = [0]
    direction = 0
    for i in range(1, len(x)):
        d = x[i] - x[piv[-1]]
        if direction == 0:
            if abs(d) >= amp:
                direction = 1 if d > 0 else -1
                piv.append(i)
        elif direction > 0:
            if x[i] > x[piv[-1]]:
                piv[-1] = i
            elif x[piv[-1]] - x[i] >= amp:
                direction = -1
                piv.append(i)
        else:
            if x[i] < x[piv[-1]]:
                piv[-1] = i
            elif x[i] - x[piv[-1]] >= amp:
                direction = 1
                piv.append(i)
    return piv


def _cyclic_lr(run: Run, rank: int | None) -> bool:
    """True when the logged lr itself swings up and down by >= 2x at least twice (warm
    restarts, cyclical lr), so a loss that follows it is not a fault."""
    lr = Trace.of(run, "lr", rank) or Trace.of(run, "lr", None)
    if lr is None or len(lr) < 10 or bool(np.any(lr.values <= 0)):
        return False
    lv = blocks(lr.steps, np.log(lr.values), max_blocks=200).median
    return len(_zigzag(lv, math.log(2.0))) - 2 >= 2


@register_detector("oscillation", requires=("loss",))
def detect_oscillation(run: Run) -> list[Finding] | NotRun:
    """Block medians (>= 3 points each, >= 10 blocks) swing up and down: >= 4 reversals each
    of at least max(30%, 6 block sigmas), with a net move across them of at most half the
    distance travelled (a falling trend with bounces is not an oscillation). Swings of >= 2x
    (>= 4 reversals) are a warning; smaller ones need >= 6 reversals and are info; and any of
    them is info when the logged lr itself cycles (>= 2 reversals of >= 2x)."""
    out: list[Finding] = []
    ran = False
    for tr in traces(run, "loss"):
        n = len(tr)
        if n < 30:
            continue
        ran = True
        t, is_log = log_if_positive(tr.values)
        bl = blocks(tr.steps, t, size=max(3, math.ceil(n / 200)))
        lv = bl.median
        if len(lv) < 10:
            continue
        # Point noise from first differences (a trend is negligible point to point); the
        # MAD inside 3-point blocks would be biased low.
        sig_point = diff_sigma(t)
        sig_block = 1.2533 * sig_point / math.sqrt(bl.size)
        if is_log:
            amp = max(math.log(1.3), 6.0 * sig_block)
        else:
            amp = max(0.3 * median(np.abs(lv)), 6.0 * sig_block)
        piv = _zigzag(lv, amp)
        reversals = len(piv) - 2
        if reversals < 4:
            continue
        swings = np.abs(np.diff(lv[piv]))
        # A trend with bounces is not an oscillation: the net move across the swinging
        # stretch must be at most half of the distance travelled.
        if abs(float(lv[piv[-1]] - lv[piv[0]])) > 0.5 * float(swings.sum()):
            continue
        med_swing = median(swings)
        big = math.exp(med_swing) >= 2.0 if is_log else med_swing >= median(np.abs(lv))
        sev: Severity = "warning" if big and reversals >= 4 else "info"
        if not big and reversals < 6:
            continue
        cyclic = _cyclic_lr(run, tr.rank)
        if cyclic:
            sev = "info"  # the schedule itself cycles (SGDR, CLR): swings are by design
        onset = int(bl.first_step[piv[1]])
        swing_txt = f"{math.exp(med_swing):.2f}x" if is_log else fmt(med_swing)
        out.append(Finding(
            symptom="oscillation", severity=sev, confidence=0.6, onset_step=onset,
            end_step=int(bl.last_step[piv[-1]]), rank=tr.rank, metric="loss",
            summary=(f"loss level swung up and down {reversals} times by a median "
                     f"{swing_txt} (block medians of {bl.size} points)"),
            evidence=(Evidence("loss", onset, None, None,
                               note=f"{reversals} reversals of block medians, each move "
                                    f">= {math.exp(amp) if is_log else amp:.3g}"
                                    f"{'x' if is_log else ''}; threshold = max(30%, 6 block "
                                    f"sigmas)" + ("; lr follows a cyclic schedule, so "
                                                  "swings are expected" if cyclic else "")),)))
    if not ran:
        return NotRun("needs at least 30 finite loss points")
    return out
