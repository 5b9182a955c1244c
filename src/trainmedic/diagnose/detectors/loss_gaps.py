"""A training loss missing from a few rows where the loop's other metrics were logged.

Loggers that drop non-finite values (Comet drops a NaN point; a loop guarded by ``if not
math.isfinite(loss): continue`` skips the batch and its log call for the loss alone) leave a
gap in the loss at exactly the steps where it went NaN, while the learning rate, the grad
norm and the step time of the same rows are there. A loss logged less often than those
metrics is not such a gap: the rule asks that the other metric was logged at every one of the
loss's steps and at only a few more.
"""

from __future__ import annotations

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding
from trainmedic.diagnose.trace import Trace
from trainmedic.run.series import Run

__all__ = ["loss_gaps", "GAP_REFERENCES", "GAP_MAX_SHARE"]

#: The loop's per-step metrics whose rows the loss should be on.
GAP_REFERENCES = ("lr", "grad_norm", "step_time_s", "data_time_s", "samples_per_s",
                  "tokens_per_s")
#: At most this share of the loss's points may be missing (more is another cadence).
GAP_MAX_SHARE = 0.05


def loss_gaps(run: Run, tr: Trace) -> Finding | None:
    """The loss (>= 10 points) is missing at 1 to max(2, 5%) steps strictly inside its span
    where a reference metric was logged, and that metric was logged at every step of the
    loss too (the same rows): a logger or guard dropped a non-finite loss there. Warning,
    onset at the first missing step; a grad norm of exactly 0 or non-finite there is named."""
    if len(tr) < 10:
        return None
    steps = tr.all_steps
    lo, hi = int(steps[0]), int(steps[-1])
    have = set(steps.tolist())
    for m in GAP_REFERENCES:
        o = Trace.of(run, m, tr.rank)
        if o is None or len(o.all_steps) < 10:
            continue
        inside = o.all_steps[(o.all_steps > lo) & (o.all_steps < hi)]
        inside_set = set(inside.tolist())
        missing = sorted(inside_set - have)
        if not missing or len(missing) > max(2, GAP_MAX_SHARE * len(tr)):
            continue
        if not {s for s in have if lo < s < hi} <= inside_set:
            continue  # the reference is not on the loss's rows: another cadence
        g = Trace.of(run, "grad_norm", tr.rank)
        g_at = {} if g is None else dict(zip(g.all_steps.tolist()[::-1],  # (first wins)
                                             g.all_values.tolist()[::-1], strict=True))
        gv = [float(g_at[s]) for s in missing if s in g_at]
        skipped = [v for v in gv if v == 0.0 or not np.isfinite(v)]
        where = ", ".join(str(s) for s in missing[:4]) + ("..." if len(missing) > 4 else "")
        extra = (f"; the grad norm there is {'0' if all(np.isfinite(gv)) else 'non-finite'} "
                 f"(the step was skipped)" if skipped and len(skipped) == len(missing) else "")
        return Finding(
            symptom="nan_masked_in_logs", severity="warning", confidence=0.5,
            onset_step=int(missing[0]), rank=tr.rank, metric="loss",
            summary=(f"the loss is missing at step(s) {where} while {m} was logged there, as "
                     f"at every other logged step{extra}: a logger or guard that drops "
                     f"non-finite values hid a NaN/inf loss"),
            evidence=(Evidence(m, int(missing[0]), None, None,
                               note=f"{m} logged at {len(missing)} step(s) inside the loss's "
                                    f"span where the loss is not"),))
    return None
