"""What the watcher reads about the host each step: the resident set and GC pauses.

* ``rss_mb``: the process's resident set (:func:`~trainmedic.live.host_memory.rss_mb`), read on
  the training thread at most every ``rss_interval_s`` seconds; the steps in between record
  the last reading. Reading ``/proc/self/statm`` costs 15-30 us on a training loop's cold
  caches: once per 50 ms that is under 0.1% of any step, with no thread of its own (a sampling
  thread wakes 20 times a second and must take the GIL from the training thread each time).
  ``rss_interval_s=None`` reads it at every step.
* ``gc_time_s``: seconds Python's garbage collector ran since the previous step, timed by a
  ``gc.callbacks`` hook (called at the start and end of each collection: a few per minute in a
  torch loop, whose tensors are not tracked objects). A long pause shows as a slow step; with
  this series the diagnosis can say so instead of leaving the cause unchecked.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from trainmedic.live.host_memory import rss_mb

__all__ = ["HostProbe"]


class HostProbe:
    """The host readings of one watcher; :meth:`close` removes the GC hook (idempotent)."""

    def __init__(self, rss_interval_s: float | None) -> None:
        self.rss_interval_s = rss_interval_s
        self._rss = rss_mb()
        self._next_rss = time.perf_counter() + (rss_interval_s or 0.0)
        self._gc_s = 0.0
        self._gc_start: float | None = None
        gc.callbacks.append(self._on_gc)
        self._closed = False

    def rss(self, now: float) -> float | None:
        """The resident set in MiB, read again when ``rss_interval_s`` has passed since the
        last reading (``now``: a perf_counter reading the caller already took)."""
        if now >= self._next_rss:
            self._rss = rss_mb()
            self._next_rss = now + (self.rss_interval_s or 0.0)
        return self._rss

    def gc_s(self) -> float:
        """Seconds of garbage collection since the last call."""
        s, self._gc_s = self._gc_s, 0.0
        return s

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        elif self._gc_start is not None:
            self._gc_s += time.perf_counter() - self._gc_start
            self._gc_start = None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                gc.callbacks.remove(self._on_gc)
            except ValueError:
                pass
