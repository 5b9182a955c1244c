"""Resident memory of this process, without psutil (not a dependency).

Linux: ``/proc/self/statm`` gives the *current* resident set in pages (proc(5)). Elsewhere
``resource.getrusage`` only gives the *peak* resident set (``ru_maxrss``: KiB on Linux, bytes
on macOS), which still grows with a leak, so it is the fallback.

Reading statm takes ~1 us in a tight loop but 15-30 us once per training step: the syscall
then runs on cold caches (measured in the demo loop by ``benchmarks/watch_overhead.py``), the
largest single item of the watcher's per-step work on CPU. :class:`RssSampler` reads it on a
thread of its own instead, so the training thread only picks up the latest value.
"""

from __future__ import annotations

import os
import sys
import threading

__all__ = ["rss_mb", "RssSampler"]

_STATM = "/proc/self/statm"
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_HAS_STATM = os.path.exists(_STATM)


_statm_fd: int | None = None
_statm_pid: int | None = None


def _statm_read() -> bytes:
    """``/proc/self/statm`` through a descriptor kept open: one ``pread`` per call. Opening
    the file each time cost ~150 us per read inside a training loop here (27 us with
    ``pread``). ``/proc/self`` is resolved at open, so a forked child reopens its own."""
    global _statm_fd, _statm_pid
    pid = os.getpid()
    if _statm_fd is None or _statm_pid != pid:
        _statm_fd = os.open(_STATM, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        _statm_pid = pid
    return os.pread(_statm_fd, 128, 0)


def rss_mb() -> float | None:
    """Resident set size of this process in MiB (current on Linux, peak elsewhere)."""
    if _HAS_STATM:
        try:
            fields = _statm_read().split()
            return int(fields[1]) * _PAGE_BYTES / 2**20
        except (OSError, ValueError, IndexError):
            pass
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


class RssSampler:
    """:func:`rss_mb` read every ``interval_s`` seconds on a daemon thread; :meth:`read`
    returns the latest reading (at most ``interval_s`` old, plus the thread's wake-up
    latency) without a syscall. The thread waits on a held lock with a timeout (one C call
    per wake; an ``Event.wait`` builds a lock and runs Python on every call), which
    :meth:`close` releases to stop it at once; it holds the GIL only for the few bytecodes
    around the read (``os.pread`` releases it)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.value: float | None = rss_mb()
        self._gate = threading.Lock()
        self._gate.acquire()  # released by close(): the thread's wait then succeeds
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="trainmedic-rss", daemon=True)
        self._thread.start()

    def read(self) -> float | None:
        """The latest resident set size in MiB (``None`` where it cannot be read)."""
        return self.value

    def _run(self) -> None:
        wait, interval = self._gate.acquire, self.interval_s
        while not wait(True, interval):
            self.value = rss_mb()

    def close(self) -> None:
        """Stop the thread and wait for it (idempotent)."""
        if not self._closed:
            self._closed = True
            self._gate.release()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
