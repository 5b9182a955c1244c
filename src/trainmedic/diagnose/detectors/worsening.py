"""A loss that only got worse: never below where the log starts, rising on a significant trend.

The level and trend rules of ``divergence`` measure a rise from the lowest level reached, and
ask 1.15x or more so that a converged run's upward wander is not read as a divergence. A loss
that was never lower than its first logged points and climbs from there on a robust trend
needs no such margin: no healthy training makes its loss worse from the start (DINO's
collapse, 10.38 -> 11.00 over twelve epochs, 10 of 11 epochs up, toward ln 65536 = 11.09; a
Keras run whose loss drifts 0.27 -> 0.28 over an excerpt). Runs whose loss rises by design
(a GAN, RL with an improving reward) are left out, as for the other divergence rules.
"""

from __future__ import annotations

import math

import numpy as np

from trainmedic.diagnose.detectors.rewards import losses_trade_off
from trainmedic.diagnose.finding import Evidence, Finding
from trainmedic.diagnose.stats import blocks, median, theil_sen_z
from trainmedic.diagnose.trace import Trace, fmt
from trainmedic.run.series import Run

__all__ = ["worsening", "WORSE_MIN_POINTS", "WORSE_MIN_RISE", "WORSE_MIN_Z",
           "WORSE_START_SLACK"]

#: Finite positive points the rule needs (the short-log shape rules cover 5-7).
WORSE_MIN_POINTS = 8
#: The last quarter's median at least this far above the start (relative): below it a rise,
#: however significant, changes nothing a user would act on.
WORSE_MIN_RISE = 0.03
#: Theil-Sen slope through the block medians at least this many standard errors above zero.
WORSE_MIN_Z = 4.0
#: No block more than this far (relative) below the start: a loss that ever improved on its
#: start is the level and trend rules' to judge, from that best level.
WORSE_START_SLACK = 0.01


def worsening(run: Run, tr: Trace | None) -> Finding | None:
    """The loss of ``tr`` never went more than 1% below the median of its first tenth of
    blocks (<= 200 block medians, log space), its Theil-Sen slope is >= 4 standard errors
    above zero, and its last quarter's median is >= 3% above that start: warning, onset at
    the first logged point. None when a GAN or an improving reward explains a rise."""
    if tr is None or len(tr) < WORSE_MIN_POINTS or not bool(np.all(tr.values > 0)):
        return None
    lv = np.log(tr.values)
    bl = blocks(tr.steps, lv, max_blocks=200)
    level = bl.median
    m = int(level.shape[0])
    if m < WORSE_MIN_POINTS:
        return None
    start = median(level[: max(1, m // 10)])
    if float(level.min()) < start + math.log(1.0 - WORSE_START_SLACK):
        return None
    _, z = theil_sen_z(level)
    end = median(level[-max(1, m // 4):])
    rise = math.exp(end - start) - 1.0
    if z < WORSE_MIN_Z or rise < WORSE_MIN_RISE or losses_trade_off(run):
        return None
    first, last = int(tr.steps[0]), int(tr.steps[-1])
    return Finding(
        symptom="divergence", severity="warning", confidence=0.6, onset_step=first,
        end_step=last, rank=tr.rank, metric=tr.metric,
        summary=(f"{tr.metric} never went below where the log starts and rose on a steady trend "
                 f"(+{100 * rise:.1f}%, {fmt(math.exp(start))} -> {fmt(math.exp(end))}, from "
                 f"step {first} to {last}): the run got worse from its first logged step"),
        evidence=(Evidence(tr.metric, first, math.exp(start), None,
                           note="median of the first tenth of the blocks (the start)"),
                  Evidence(tr.metric, last, math.exp(end), math.exp(start),
                           note=f"median of the last quarter vs the start; Theil-Sen slope "
                                f"{z:.1f} standard errors above zero; no block more than "
                                f"{100 * WORSE_START_SLACK:g}% below the start")))
