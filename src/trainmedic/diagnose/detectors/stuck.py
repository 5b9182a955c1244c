"""A training loss that stops moving at all partway through: every logged value identical from
some step to the end, after it had moved.

Batch losses are noisy: two consecutive ones agree to 6 significant digits only when nothing
changes between them. A model whose outputs saturated (a sigmoid/softmax pinned at 0.5 gives
exactly ln 2) or whose updates are all skipped logs the same number step after step. The
whole-log case is ``pinned`` in loss_progress.py; this is the same reading for a tail.

The same reading for evaluations (``pinned_eval``): a validation loss identical to the last
evaluation from some point on says the weights stopped changing.

The evidence rule is written out in docs/symptoms.md (flat_loss); keep the two in step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainmedic.diagnose.detectors.loss_nonfinite import nan_grads_under_tail
from trainmedic.diagnose.trace import Trace
from trainmedic.run.series import Run

__all__ = ["StuckTail", "stuck_tail", "stuck_resolution", "STUCK_MIN_POINTS", "STUCK_MIN_SHARE",
           "STUCK_MAX_RESOLUTION", "pinned_eval", "frozen_from_start", "PINNED_MIN_RESOLUTION",
           "FROZEN_START_GAP"]

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


#: How far (relative) the first evaluation may sit from the frozen value when the freeze starts
#: at the second: a model that never learned evaluates the same, up to its noise.
FROZEN_START_GAP = 0.05


def frozen_from_start(run: Run, rank: int | None) -> tuple[int, float] | None:
    """The pinned evaluations (see ``pinned_eval``) when they start at the second
    evaluation or earlier, the first within FROZEN_START_GAP of the frozen value when the
    freeze starts at the second: the weights froze before the model learned anything."""
    frozen = pinned_eval(run, rank)
    val = Trace.of(run, "val_loss", rank) or Trace.of(run, "val_loss", None)
    if frozen is None or val is None or len(val) < 2 or frozen[0] > int(val.steps[1]):
        return None
    # ... and the evaluation before a freeze at the second is already near the frozen value:
    # an fp16 scaler that collapsed after the first evaluation (1.882, then 1.273 frozen for
    # the rest of the run) froze a model that had learned
    v0 = float(val.values[0])
    if frozen[0] > int(val.steps[0]) and abs(v0 - frozen[1]) > FROZEN_START_GAP * abs(frozen[1]):
        return None
    return frozen


#: Identical evaluations say "frozen" only when the logged digits could show a change this
#: small relative to the level (a converged model's evaluations still move by ~1e-4 of it).
PINNED_MIN_RESOLUTION = 1e-5


def _resolution(v: np.ndarray) -> float:
    """The step of the logger's rounding: 10**-d for the fewest decimals d <= 8 that write every
    value exactly (a print log's "Val Loss: 0.1055" has 4), else 0. Unlike ``stuck_resolution``
    the tolerance is relative to each value alone: an evaluation of 1.8e-11 (fp16 underflow)
    keeps its digits instead of reading as a whole number."""
    for d in range(9):
        scaled = v * 10.0 ** d
        if bool(np.all(np.abs(scaled - np.round(scaled)) <= 1e-6 * np.abs(scaled))):
            return 10.0 ** -d
    return 0.0


def pinned_eval(run: Run, rank: int | None) -> tuple[int, float] | None:
    """(first step, value) of a run of >= 3 identical validation losses that lasts to the last
    evaluation, while the eval had moved before it. A run of zeros is not frozen: it is a
    loss below the logger's rounding (4 decimals in HF and most print logs)."""
    for name in ("val_loss",):
        val = Trace.of(run, name, rank) or Trace.of(run, name, None)
        if val is None or len(val) < 4:
            continue
        v = val.values
        if v[-1] == 0.0 or _resolution(v) > PINNED_MIN_RESOLUTION * abs(float(v[-1])):
            continue  # at or below what the logger's rounding can show
        k = len(v) - 1
        while k > 0 and abs(v[k - 1] - v[-1]) <= 1e-6 * max(abs(v[-1]), 1e-12):
            k -= 1
        if len(v) - k >= 3 and k >= 1:
            return int(val.steps[k]), float(v[-1])
    return None
