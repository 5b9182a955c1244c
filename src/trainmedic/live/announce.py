"""When the watcher speaks: a line at the start, one at ``close()``, a progress line on a TTY.

The wording and the writing are :mod:`trainmedic.live.console`'s; this module only
decides when, from values the watcher already holds (no device sync of its own), and keeps
every rank but 0 of a distributed run silent.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from trainmedic.live.console import emit, exit_line, progress_line, start_line

__all__ = ["Announcer", "recorded_summary", "stderr_is_tty"]

#: Seconds between redraws of the progress line (a few per second: readable, and cheap).
PROGRESS_INTERVAL_S = 0.25


def stderr_is_tty() -> bool:
    """True when stderr is a terminal (not a pipe, a file or pytest's capture)."""
    try:
        return bool(sys.stderr is not None and sys.stderr.isatty())
    except (AttributeError, OSError, ValueError):
        return False


def recorded_summary(cfg: Any, *, cuda: bool, nan_policy: str,
                     forward_clock: bool) -> list[str]:
    """What a watcher with config ``cfg`` records, in the start line's words."""
    per_step = "loss, lr, grad norm, step time" + (", compute time" if forward_clock else "")
    per_step += ", GPU memory" if cuda else ", host memory"
    out = [per_step]
    if cfg.param_every is not None:
        out.append(f"update ratio every {cfg.param_every} steps")
    if cfg.layer_every is not None:
        out.append(f"layer health every {cfg.layer_every} steps")
    out.append(f"live alerts every {cfg.alert_every} steps" if cfg.alert_every is not None
               else "no live alerts")
    out.append(f"NaN guard: {nan_policy}")
    return out


class Announcer:
    """The watcher's terminal lines. ``announce``: the start and exit lines; ``progress``:
    the live line (``None``: on when stderr is a TTY). Silent on ranks other than 0."""

    def __init__(self, *, announce: bool, progress: bool | None, rank: int | None,
                 count_alerts: Callable[[], int]) -> None:
        speaks = rank is None or rank == 0
        self.announce = announce and speaks
        self.progress = speaks and (stderr_is_tty() if progress is None else progress)
        self._count_alerts = count_alerts
        self._shown = False
        self._loss: float | None = None
        self._t_next = 0.0
        self._t_prev: float | None = None
        self._s_prev = 0

    def start(self, run_dir: str, recorded: list[str], note: str | None) -> None:
        if self.announce:
            emit(start_line(run_dir, recorded, note=note))

    def tick(self, s: int, loss: float | None) -> None:
        """After step ``s``; redraws at most every ``PROGRESS_INTERVAL_S``. ``loss``: the
        step's loss when the watcher holds it as a host float (else the last one held)."""
        if loss is not None:
            self._loss = loss
        now = time.perf_counter()
        if now < self._t_next:
            return
        self._t_next = now + PROGRESS_INTERVAL_S
        rate = None
        if self._t_prev is not None and now > self._t_prev:
            rate = (s - self._s_prev) / (now - self._t_prev)
        self._t_prev, self._s_prev = now, s
        emit(progress_line(s, loss=self._loss, it_per_s=rate, alerts=self._count_alerts()),
             transient=True)
        self._shown = True

    def close(self, run_dir: str, *, first_step: int | None, last_step: int | None,
              stored: bool) -> None:
        if self._shown:
            emit("", transient=True)  # the progress line gives way to the exit line
            self._shown = False
        if self.announce:
            emit(exit_line(run_dir, first_step=first_step, last_step=last_step,
                           alerts=self._count_alerts(), stored=stored))
