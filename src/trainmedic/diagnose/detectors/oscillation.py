"""The ``oscillation`` detector: a loss level that swings up and down instead of settling
(class-sorted data, an lr at the edge of stability), told apart from a falling trend with
bounces, isolated spikes and a schedule that cycles by design.
"""

from __future__ import annotations

import math

import numpy as np

from trainmedic.diagnose.detectors.rewards import losses_trade_off
from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import blocks, diff_sigma, log_if_positive, median, theil_sen_z
from trainmedic.diagnose.trace import Trace, fmt, traces
from trainmedic.run.series import Run

__all__ = ["OSC_MIN_LINEAR_SHARE", "OSC_REPEATED_RATIO", "OSC_STATIONARY_Z"]


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


#: Oscillation: the median swing must also span this share of the starting loss level.
OSC_MIN_LINEAR_SHARE = 0.05
#: Oscillation: swings of this ratio repeated >= 6 times are a warning too, when the swinging
#: stretch has no trend (|robust slope| < 3 standard errors): a noisy loss still falling
#: fast also zig-zags, a model that forgets and relearns goes nowhere.
OSC_REPEATED_RATIO = 1.5
OSC_STATIONARY_Z = 3.0


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
    trs = traces(run, "loss", min_points=30)
    for tr in trs:
        n = len(tr)
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
        if not amp > 0:
            continue  # a constant loss (e.g. exactly 0.0 on every row) cannot swing
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
        if not med_swing > 0:
            continue
        # Isolated spikes also zig-zag (up, down, up, down) but spend little time high: an
        # oscillation spends >= 20% of its swinging stretch in the upper half of its swings.
        seg = lv[piv[0]: piv[-1] + 1]
        mid = 0.5 * (median(lv[piv[1::2]]) + median(lv[piv[0::2]]))
        if float(np.mean(seg > mid)) < 0.2 and float(np.mean(seg < mid)) > 0.8:
            continue
        big = math.exp(med_swing) >= 2.0 if is_log else med_swing >= median(np.abs(lv))
        if big and is_log:
            # Cost in the loss's own units: swings of a loss that already fell to ~0 (a 7x
            # swing between 0.004 and 0.03 after starting at 1.6) are the relative noise of a
            # tiny number, not a lost run. The swings must span >= 5% of the starting level.
            lo_hi = np.exp(lv[piv])
            swing_lin = median(np.abs(np.diff(lo_hi)))
            start = float(np.exp(median(lv[: max(1, len(lv) // 10)])))
            if swing_lin < OSC_MIN_LINEAR_SHARE * start:
                big = False
        # Cost: swings of >= 2x four times, or of >= 1.5x six times or more (the model loses
        # and relearns a third of its loss again and again), are a warning.
        # Both need a swinging stretch without trend: a noisy loss still falling fast bounces
        # too (a small-batch LSTM's per-step loss swings 3x on its way down).
        stationary = abs(theil_sen_z(lv[piv[0]: piv[-1] + 1])[1]) < OSC_STATIONARY_Z
        repeated = reversals >= 6 and (math.exp(med_swing) >= OSC_REPEATED_RATIO if is_log
                                       else med_swing >= 0.5 * median(np.abs(lv)))
        sev: Severity = "warning" if stationary and ((big and reversals >= 4) or repeated) \
            else "info"
        if not big and reversals < 6:
            continue
        cyclic = _cyclic_lr(run, tr.rank)
        if cyclic:
            sev = "info"  # the schedule itself cycles (SGDR, CLR): swings are by design
        legit = losses_trade_off(run)
        if legit:
            sev = "info"  # an RL objective's targets move (a DQN's at each sync), a GAN's trade
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
                                                  "swings are expected" if cyclic else "")
                               + (f"; swings may be expected: {legit}" if legit else "")),)))
    if not trs:
        return NotRun("needs at least 30 finite loss points")
    return out
