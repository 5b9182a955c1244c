"""A step time read beside its own running average: the AverageMeter habit of printing
``Time 7.259 (3.692)`` (pytorch/examples' ImageNet script and the many scripts built on it,
timm's and DeiT's loggers) says how the current steps compare with the earlier ones, even in
an excerpt too short to show the change itself.

A running average since the start of the epoch (or of the run) lags the current value: when
every current step takes >= 1.5x the average while the average keeps rising towards it, the
steps averaged before the excerpt were faster - the run slowed down. A slow first step pulls
the average the other way (above the current steps), so start-up cannot trigger this.
The evidence rule is written out in docs/symptoms.md (throughput_regression).
"""

from __future__ import annotations

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding
from trainmedic.diagnose.trace import Trace, fmt
from trainmedic.run.series import Run

__all__ = ["slower_than_average", "AVG_SLOWER_RATIO", "AVG_MIN_POINTS"]

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
