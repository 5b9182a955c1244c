"""Memory growth: a steady climb over steps that is still going at the end (a leak).

Memory normally climbs at the start (the CUDA caching allocator reserves blocks, the first
evaluation allocates its buffers, DataLoader workers fork) and then stays flat; a leak - a
tensor kept in a list, a graph held by ``loss`` accumulated without ``.item()`` - keeps
climbing. So the first 10% of the run is skipped and the climb must continue into the last
quarter.
"""

from __future__ import annotations

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import blocks, diff_sigma, median, theil_sen
from trainmedic.diagnose.trace import fmt, traces
from trainmedic.run.series import Run

__all__ = ["MEMORY_METRICS", "GROWTH_WARN_REL", "GROWTH_INFO_REL", "GROWTH_MONOTONE_SHARE"]

#: mem_peak_mb counts too: a peak that is reset every step (Detectron2's ``max_mem``) or never
#: reset both stay flat after warm-up in a healthy run and climb with a leak.
MEMORY_METRICS = ("mem_alloc_mb", "mem_reserved_mb", "mem_peak_mb", "rss_mb")
#: Relative growth after warm-up: warning at >= 20% (and >= 100 MB) or a steady >= 50 MB, info
#: at >= 5% (>= 20 MB).
GROWTH_WARN_REL = 0.20
GROWTH_WARN_MB = 100.0
GROWTH_STEADY_MB = 50.0
GROWTH_INFO_REL = 0.05
GROWTH_INFO_MB = 20.0
#: ... and a warning from the info floor on when >= this share of >= 10 block-to-block moves
#: go up (a leak per step: the run's length sets its cost, not its size so far).
GROWTH_MONOTONE_SHARE = 0.95
#: A block within this share of the first block's level is still at the starting level.
ONSET_BAND_REL = 0.01


@register_detector("memory_growth", requires_any=MEMORY_METRICS)
def detect_memory_growth(run: Run) -> list[Finding] | NotRun:
    """After skipping the first 10% of points: end level (median of the last 3 of <= 50 block
    medians) minus start level (first 3), with >= 60% of block-to-block moves upward, a
    positive Theil-Sen slope, and >= 15% of the growth in the last quarter (still growing).
    Warning at >= 20% and >= 100 MB, or >= 50 MB (and >= 5%) with >= 80% of moves upward
    whatever its share, or >= 20 MB with >= 95% of >= 10 moves upward: a leak per step costs
    with the run's length, not with the base."""
    out: list[Finding] = []
    ran = False
    for metric in MEMORY_METRICS:
        for tr in traces(run, metric):
            if len(tr) < 10:
                continue
            ran = True
            skip = max(1, len(tr) // 10)
            s, v = tr.steps[skip:], tr.values[skip:]
            bl = blocks(s, v, max_blocks=50)
            lv = bl.median
            nb = len(lv)
            if nb < 6:
                continue
            start = median(lv[:3])
            end = median(lv[-3:])
            growth = end - start
            rel = growth / start if start > 0 else float("inf")
            if growth < GROWTH_INFO_MB or rel < GROWTH_INFO_REL:
                continue
            d = np.diff(lv)
            moves = d[d != 0]
            up_frac = float(np.mean(moves > 0)) if moves.size else 0.0
            slope = theil_sen(bl.first_step.astype(np.float64), lv)
            q = max(2, nb // 4)
            last_q = float(lv[-1] - lv[-q])
            if up_frac < 0.6 or slope <= 0 or last_q < 0.15 * growth:
                continue
            # Cost: a climb of >= 20% that is >= 100 MB, or >= 50 MB when it is steady (>= 80%
            # of moves up: a leak per step, whose cost grows with the run's length, however
            # large the base it sits on).
            # A climb with (nearly) every block above the one before is a leak whatever its
            # size so far: no noise makes RSS rise at 46 block boundaries out of 46.
            strong = (rel >= GROWTH_WARN_REL and growth >= GROWTH_WARN_MB) or (
                growth >= GROWTH_STEADY_MB and up_frac >= 0.8) or (
                up_frac >= GROWTH_MONOTONE_SHARE and nb >= 10)
            sev: Severity = "warning" if strong else "info"
            per_k = slope * 1000.0
            # Onset: the first block after the last one still at the first block's level
            # (within 2 sigmas of the block-to-block noise, or 1% of it: RSS moves by a page
            # or an allocator chunk), not the end of the skipped warm-up: a leak switched on
            # mid-run starts there; one that climbs from the start, at the start.
            band = max(2.0 * diff_sigma(lv), ONSET_BAND_REL * abs(float(lv[0])))
            at_start = np.flatnonzero(lv <= lv[0] + band)
            first = int(at_start[-1]) + 1 if at_start.size else 0
            onset = int(bl.first_step[min(first, nb - 1)]) if first > 1 else int(s[0])
            out.append(Finding(
                symptom="memory_growth", severity=sev, confidence=0.8, onset_step=onset,
                end_step=int(s[-1]), rank=tr.rank, metric=metric,
                summary=(f"{metric} grew {fmt(growth)} MB (+{100 * rel:.0f}%) from step "
                         f"{int(s[0])} to {int(s[-1])}, climbing from about step {onset}, "
                         f"about {fmt(per_k)} MB per 1000 steps, and was still growing at the "
                         f"end"),
                evidence=(Evidence(metric, int(s[-1]), end, start,
                                   note=f"median of the last 3 vs first 3 of {nb} block "
                                        f"medians, after skipping the first {skip} points; "
                                        f"{100 * up_frac:.0f}% of moves upward"),)))
    if not ran:
        return NotRun("needs at least 10 memory points")
    return out
