"""A training loss that stops moving at all partway through: every logged value identical from
some step to the end, after it had moved.

Batch losses are noisy: two consecutive ones agree to 6 significant digits only when nothing
changes between them. A model whose outputs saturated (a sigmoid/softmax pinned at 0.5 gives
exactly ln 2) or whose updates are all skipped logs the same number step after step. The
whole-log case is ``pinned`` in loss_progress.py; this is the same reading for a tail.

The evidence rule is written out in docs/symptoms.md (flat_loss); keep the two in step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainmedic.diagnose.detectors.loss_nonfinite import nan_grads_under_tail
from trainmedic.diagnose.trace import Trace

__all__ = ["StuckTail", "stuck_tail", "stuck_resolution", "STUCK_MIN_POINTS", "STUCK_MIN_SHARE",
           "STUCK_MAX_RESOLUTION"]

#: The identical tail holds at least this many logged points ...
STUCK_MIN_POINTS = 5
#: ... and at least this share of the logged points.
STUCK_MIN_SHARE = 0.3
#: A non-zero tail counts only when the logged digits could show a change this small relative
#: to its level (batch losses move by >= 1% from step to step; 4 decimals at 0.69 qualify,
#: 2 decimals at 0.05 do not).
STUCK_MAX_RESOLUTION = 1e-3


@dataclass(frozen=True)
class StuckTail:
    """The identical tail of a loss: from ``onset_step`` (index ``start``) to the end."""

    start: int
    onset_step: int
    value: float
    points: int
    before: float
    """The last logged value before the tail."""
    resolution: float


def stuck_resolution(v: np.ndarray) -> float:
    """10**-d for the fewest decimals d <= 8 that write every value exactly, else 0."""
    for d in range(9):
        scaled = v * 10.0 ** d
        if bool(np.all(np.abs(scaled - np.round(scaled)) <= 1e-6 * np.maximum(np.abs(scaled),
                                                                              1.0))):
            return 10.0 ** -d
    return 0.0


def stuck_tail(tr: Trace, grad: Trace | None = None) -> StuckTail | None:
    """The tail of ``tr`` (finite points) that repeats one value to 6 significant digits to
    the end, when it holds >= 5 points and >= 30% of them, something differed before it, and
    the digits could have shown a change (see the constants), and ``grad`` (the grad norm) is
    not NaN/inf under the tail; None otherwise."""
    v = tr.values
    n = v.shape[0]
    if n < STUCK_MIN_POINTS + 1:
        return None
    last = float(v[-1])
    same = np.abs(v - last) <= 1e-6 * max(abs(last), 1e-12)
    differ = np.flatnonzero(~same)
    if differ.size == 0:
        return None  # the whole log: loss_progress's ``pinned``
    k = int(differ[-1]) + 1
    points = n - k
    if points < max(STUCK_MIN_POINTS, math.ceil(STUCK_MIN_SHARE * n)):
        return None
    res = stuck_resolution(v)
    before = float(v[k - 1])
    # (res == 0: printed at full precision, so any change would have shown). A tail of
    # exact zeros is loss_nonfinite's (a NaN written as 0, or a loss below the rounding).
    if last == 0.0 or res > STUCK_MAX_RESOLUTION * abs(last):
        return None
    if nan_grads_under_tail(tr, grad):
        return None  # a logger repeating its last finite loss over NaN steps: nan_masked
    return StuckTail(start=k, onset_step=int(tr.steps[k]), value=last, points=points,
                     before=before, resolution=res)
