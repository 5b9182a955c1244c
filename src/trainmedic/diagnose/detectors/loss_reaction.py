"""How the loss answered a gradient event: did it jump, did it shake the jump off, did it fall.

The gradient detectors ask these before they grade a spike or a growth: a gradient event the
loss never noticed is info, one the loss reacted to is a warning.
"""

from __future__ import annotations

import math

import numpy as np

from trainmedic.diagnose.stats import diff_sigma, median
from trainmedic.diagnose.trace import Trace, fmt
from trainmedic.run.series import Run

__all__ = ["LOSS_REACTION_RATIO", "LOSS_REACTION_SIGMAS", "RECOVERY_POINTS", "loss_fall",
           "loss_fell_since", "loss_reacted", "loss_recovered"]

#: A loss point this much above its trailing median counts as the loss reacting.
LOSS_REACTION_RATIO = 1.2
#: ... and this many robust sigmas of the loss's own point-to-point noise.
LOSS_REACTION_SIGMAS = 8.0


def _loss_trace(run: Run, rank: int | None) -> Trace | None:
    return Trace.of(run, "loss", rank) or Trace.of(run, "loss", None)


def _reaction_window(lt: Trace, step: int, horizon: int) -> tuple[int, int, float, float] | None:
    """``(i, j, ref, peak)``: loss points ``i:j`` span ``step`` .. ``step + horizon``, ``ref`` is
    the median of the 20 before, ``peak`` the window's top; None without 3 before and 1 in it."""
    i = int(np.searchsorted(lt.steps, step, side="left"))
    j = int(np.searchsorted(lt.steps, step + horizon, side="right"))
    if i >= len(lt) or i < 3:
        return None
    ref = median(lt.values[max(0, i - 20):i])
    peak = float(np.max(lt.values[i:max(j, i + 1)]))
    return i, j, ref, peak


def loss_reacted(run: Run, rank: int | None, step: int, horizon: int) -> tuple[bool, str]:
    """Did the loss jump at ``step`` or within ``horizon`` steps after it?

    A jump must clear two bars: >= ``LOSS_REACTION_RATIO`` x the median of the 20 points before,
    *and* >= ``LOSS_REACTION_SIGMAS`` robust sigmas of the loss's own point noise (sigma of
    first differences / sqrt(2) over the 50 points before, in log space for a positive loss).
    Per-step losses are noisy (Lightning's ``train_loss_step`` is one batch: 10-25% is common),
    so the ratio alone is met by noise on one of the few points in the horizon, which turned
    isolated clipped grad-norm spikes into warnings.
    """
    lt = _loss_trace(run, rank)
    if lt is None or len(lt) < 6:
        return False, "loss not logged near this step"
    window = _reaction_window(lt, step, horizon)
    if window is None:
        return False, "too few loss points around this step"
    i, _, ref, peak = window
    before = lt.values[max(0, i - 50):i]
    if ref > 0 and peak > 0 and bool(np.all(before > 0)):
        sig = diff_sigma(np.log(before))
        size = math.log(peak / ref)
    else:
        sig = diff_sigma(before)
        size = (peak - ref) / abs(ref) if ref != 0 else 0.0
        sig = sig / abs(ref) if ref != 0 else sig
    if ref > 0 and peak >= LOSS_REACTION_RATIO * ref and size >= LOSS_REACTION_SIGMAS * sig:
        return True, (f"loss rose to {fmt(peak)} vs median {fmt(ref)} just before "
                      f"({size / sig:.0f} sigma of its noise)" if sig > 0 else
                      f"loss rose to {fmt(peak)} vs median {fmt(ref)} just before")
    if ref > 0 and peak >= LOSS_REACTION_RATIO * ref:
        return False, (f"loss reached {fmt(peak)} vs median {fmt(ref)} just before, within "
                       f"its own noise ({size / max(sig, 1e-300):.1f} sigma)")
    return False, f"loss stayed at {fmt(peak)} vs median {fmt(ref)} just before"


#: A loss that reacted to a gradient spike mildly (its peak under 1.5x the level before) and
#: is back within this many logged points after the reaction window (median within 5% of the
#: level before) shook it off.
RECOVERY_POINTS = 5
MILD_REACTION_RATIO = 1.5


def loss_recovered(run: Run, rank: int | None, step: int, horizon: int) -> bool:
    """Whether the loss shook off its reaction at ``step``: its peak within ``horizon`` steps
    under MILD_REACTION_RATIO x the median of the 20 points before, and the median of the
    RECOVERY_POINTS logged points after the reaction window within 5% of that median. A bad
    batch that doubles the loss is worth a warning even when the next step is fine."""
    lt = _loss_trace(run, rank)
    window = None if lt is None else _reaction_window(lt, step, horizon)
    if lt is None or window is None:
        return False
    _, j, ref, peak = window
    after = lt.values[j: j + RECOVERY_POINTS]
    if after.size < RECOVERY_POINTS:
        return False
    return ref > 0 and peak < MILD_REACTION_RATIO * ref and median(after) <= 1.05 * ref


def loss_fall(run: Run, rank: int | None) -> tuple[float | None, float | None]:
    """(relative fall of the loss from its first to its last tenth, its first level)."""
    tr = _loss_trace(run, rank)
    if tr is None or len(tr) < 6:
        return None, None
    q = max(2, len(tr) // 10)
    head, tail = median(tr.values[:q]), median(tr.values[-q:])
    if not head or not math.isfinite(head):
        return None, head
    return (head - tail) / abs(head), head


def loss_fell_since(run: Run, rank: int | None, step: int) -> float | None:
    """Relative fall of the loss from just before ``step`` to the end of the run."""
    tr = _loss_trace(run, rank)
    if tr is None or len(tr) < 10:
        return None
    i = int(np.searchsorted(tr.steps, step))
    q = max(2, len(tr) // 10)
    before = tr.values[max(0, i - q): max(i, 2)]
    after = tr.values[-q:]
    b = median(before)
    if not b or not math.isfinite(b):
        return None
    return (b - median(after)) / abs(b)
