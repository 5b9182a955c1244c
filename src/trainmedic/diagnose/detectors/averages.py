"""A step time read beside its own running average: the AverageMeter habit of printing
``Time 7.259 (3.692)`` (pytorch/examples' ImageNet script and the many scripts built on it,
timm's and DeiT's loggers) says how the current steps compare with the earlier ones, even in
an excerpt too short to show the change itself.

A running average since the start of the epoch (or of the run) lags the current value: when
every current step takes >= 1.5x the average while the average keeps rising towards it, the
steps averaged before the excerpt were faster - the run slowed down. A slow first step pulls
the average the other way (above the current steps), so start-up cannot trigger this.
An excerpt of 4-11 points (per-epoch times, a few pasted iterations) is too short for the
change-point test in ``timing.py``; there a step time that rose to >= 1.8x its first value and
stayed >= 1.4x it over >= 3 points to the end (the last two >= 1.5x) is the run slowing down
(``short_slowdown``); when only the first point was fast, the slowdown must still grow (a timer
read before any work is fast). A slow first point (start-up) only makes later ones look fast.
The evidence rules are written out in docs/symptoms.md (throughput_regression).
"""

from __future__ import annotations

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding
from trainmedic.diagnose.trace import Trace, fmt, traces
from trainmedic.run.series import Run

__all__ = ["slower_than_average", "short_slowdown", "THROUGHPUT_SERIES", "AVG_SLOWER_RATIO",
           "AVG_MIN_POINTS"]

#: The series a throughput is read from, best first, and whether higher is faster.
THROUGHPUT_SERIES = (("samples_per_s", True), ("tokens_per_s", True), ("step_time_s", False))

#: Every current step time is at least this many times its running average ...
AVG_SLOWER_RATIO = 1.5
#: ... at this many logged points or more, and the average rose over them.
AVG_MIN_POINTS = 5


def _average_of(run: Run, canonical: str) -> str | None:
    """The running-average series printed beside the column read as ``canonical`` (the line
    reader names it ``<column>_avg``), when that column was read without a unit change."""
    for m in run.meta.get("mapping", ()):
        if m.get("canonical") == canonical and m.get("how") in ("alias", "canonical"):
            col = str(m["column"]).lower()
            base, _, unit = col.rpartition("_")
            # "time" -> "time_avg"; timm's "time_s" (a unit after the number) -> "time_avg_s"
            for name in (f"{col}_avg", f"{base}_avg_{unit}" if base else ""):
                if name and run.has(name):
                    return name
    return None


def slower_than_average(run: Run) -> list[Finding]:
    """throughput_regression findings for ranks whose logged step time is >= 1.5x its printed
    running average at every one of >= 5 shared points, with that average rising."""
    avg_name = _average_of(run, "step_time_s")
    if avg_name is None:
        return []
    out: list[Finding] = []
    for rank in run.ranks():
        cur, avg = Trace.of(run, "step_time_s", rank), Trace.of(run, avg_name, rank)
        if cur is None or avg is None:
            continue
        steps, ci, ai = np.intersect1d(cur.steps, avg.steps, return_indices=True)
        c, a = cur.values[ci], avg.values[ai]
        if steps.size < AVG_MIN_POINTS or not bool(np.all(a > 0)):
            continue
        ratio = c / a
        if float(ratio.min()) < AVG_SLOWER_RATIO or not a[-1] > a[0]:
            continue
        first, last = int(steps[0]), int(steps[-1])
        out.append(Finding(
            symptom="throughput_regression", severity="warning", confidence=0.7,
            onset_step=first, end_step=last, rank=rank, metric="step_time_s",
            summary=(f"every logged step from {first} to {last} took {fmt(float(c.min()))}-"
                     f"{fmt(float(c.max()))} s, {float(np.median(ratio)):.2g}x the running "
                     f"average printed beside it ({fmt(float(a[0]))} -> {fmt(float(a[-1]))} s, "
                     f"still rising): the steps averaged before step {first} were that much "
                     f"faster - the run slowed down at or before the start of this log"),
            evidence=(Evidence("step_time_s", last, float(np.median(c)), float(a[0]),
                               note=f"median current step time vs the first running average "
                                    f"({avg_name}); every one of the {steps.size} points is "
                                    f">= {AVG_SLOWER_RATIO:g}x its average"),)))
    return out


#: A short series (fewer points than the change-point test needs, and at least this many) ...
SLOWDOWN_MIN_POINTS = 4
#: ... slowed down when its step time ends >= this many times its first value, ...
SHORT_END_RATIO = 1.8
#: ... the point before the last >= this, and every point from the onset on >= SHORT_STAY.
SHORT_LAST_RATIO = 1.5
SHORT_STAY = 1.4
#: When only the first point is fast, the slowdown must still grow: the last point >= this
#: many times the second.
SHORT_GROWING = 1.2
#: Two slow points at the end are enough when they keep slowing: the last >= this many times
#: the first and >= SHORT_GROWING x the one before (an excerpt pasted as the job slowed).
SHORT_TAIL_RATIO = 3.0


def short_slowdown(run: Run, max_points: int) -> list[Finding]:
    """throughput_regression findings for a step time (or a rate, inverted) with 4 to
    ``max_points - 1`` points that ended >= 1.8x its first value, the point before >= 1.5x,
    and stayed >= 1.4x it over >= 3 points from the onset on (still growing, the last >= 1.2x
    the second, when the onset is the second point), or over the last 2 when the last is
    >= 3x the first and >= 1.2x the one before."""
    out: list[Finding] = []
    for metric, rate in THROUGHPUT_SERIES:
        for tr in traces(run, metric):
            pos = tr.values > 0
            v, st = tr.values[pos], tr.steps[pos]
            if not SLOWDOWN_MIN_POINTS <= v.size < max_points:
                continue
            t = 1.0 / v if rate else v  # time per unit of work
            r = t / t[0]
            stay = np.flatnonzero(np.minimum.accumulate(r[::-1])[::-1] < SHORT_STAY)
            i = int(stay[-1]) + 1 if stay.size else 1
            # >= 3 points slow (one or two are an epoch summary, an eval step), or the last two
            # still slowing down (an eval step does not double again); after a lone fast
            # first point (a timer read before any work) only a slowdown still growing
            tail2 = i == v.size - 2 and r[-1] >= SHORT_TAIL_RATIO and \
                r[-1] >= SHORT_GROWING * r[-2]
            if r[-1] < SHORT_END_RATIO or r[-2] < SHORT_LAST_RATIO or \
                    (i > v.size - 3 and not tail2) or (i == 1 and r[-1] < SHORT_GROWING * r[1]):
                continue
            onset = int(st[i])
            what = (f"{metric} fell {100 * (1 - 1 / r[-1]):.0f}%" if rate else
                    f"step time rose {r[-1]:.2g}x")
            out.append(Finding(
                symptom="throughput_regression", severity="warning", confidence=0.6,
                onset_step=onset, rank=tr.rank, metric=metric,
                summary=(f"{what} over {v.size} logged points ({fmt(float(v[0]))} -> "
                         f"{fmt(float(v[-1]))}), >= {SHORT_STAY:g}x slower than the first "
                         f"from step {onset} to the end: the run slowed down and did not "
                         f"recover"),
                evidence=(Evidence(metric, int(st[-1]), float(v[-1]), float(v[0]),
                                   note=f"last point vs the first of {v.size} (too few for "
                                        f"the change-point test); every point from step "
                                        f"{onset} is >= {SHORT_STAY:g}x slower than the "
                                        f"first"),)))
        if out:
            break
    return out
