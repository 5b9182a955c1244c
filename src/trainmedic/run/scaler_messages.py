"""The fp16 loss scaler's own messages in a text log, read as ``loss_scale`` points.

Dynamic loss scalers print a line each time an overflow makes them halve the scale, and these
lines are often the only record of it (fairseq's summary lines round the scale to 3 decimals,
so 0.00049 prints as 0):

- fairseq: ``NOTE: overflow detected, setting loss scale to: 0.00048828125``
- NVIDIA apex: ``Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0``
- DeepSpeed: ``[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536,
  reducing to 32768`` and ``Reducing dynamic loss scale from 65536 to 32768``

An overflow skips an update after the last logged step, so the scale a run of messages ends
at is placed one step after that step (never on a step a metric line already holds).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["scale_message", "scale_rows_alone", "with_scale_rows"]

_MESSAGE = re.compile(
    r"(?:overflow.*?(?:loss scale to|reducing to)|dynamic loss scale from \S+ to)\s*:?\s*"
    r"(?P<v>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)", re.I)


def scale_message(line: str) -> float | None:
    """The loss scale an overflow message sets, or None when the line is not one."""
    if "verflow" not in line and "VERFLOW" not in line and "loss scale from" not in line:
        return None
    m = _MESSAGE.search(line)
    return float(m.group("v")) if m else None


def with_scale_rows(rows: list[tuple[int | None, dict[str, Any]]], step_name: str,
                    messages: list[tuple[int, float, int | None]]
                    ) -> tuple[list[tuple[int | None, dict[str, Any]]], int]:
    """``rows`` (line number, row with ``step_name``) with one ``loss_scale`` row per run of
    messages after a logged step: the last scale set, one step after that step, unless a
    metric line holds that step; a message on the line of a progress bar takes the bar's
    step. Returns the rows in line order and how many were added."""
    if not messages:
        return rows, 0
    held = {r.get(step_name) for _, r in rows}
    at: dict[int, tuple[int, float]] = {}
    ordered = sorted(rows, key=lambda nr: nr[0] if nr[0] is not None else -1)
    j = 0
    last: Any = None
    for no, value, bar_step in messages:
        while j < len(ordered) and (ordered[j][0] or -1) < no:
            last = ordered[j][1].get(step_name)
            j += 1
        if bar_step is not None:
            at[bar_step] = (no, value)
        elif isinstance(last, int) and last + 1 not in held:
            at[last + 1] = (no, value)
    added: list[tuple[int | None, dict[str, Any]]] = [
        (no, {step_name: step, "loss_scale": v}) for step, (no, v) in at.items()]
    return sorted(rows + added, key=lambda nr: nr[0] if nr[0] is not None else -1), len(added)


def scale_rows_alone(messages: list[tuple[int, float, int | None]]
                     ) -> list[tuple[int | None, dict[str, Any]]]:
    """Rows for a log of overflow messages and nothing else (an excerpt of apex's or
    DeepSpeed's "reducing loss scale to ..." lines): each message is one skipped step,
    numbered in order from 0."""
    return [(no, {"step": i, "loss_scale": v}) for i, (no, v, _) in enumerate(messages)]
