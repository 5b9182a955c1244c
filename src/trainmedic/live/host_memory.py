"""Resident memory of this process, without psutil (not a dependency).

Linux: ``/proc/self/statm`` gives the *current* resident set in pages (proc(5)). Elsewhere
``resource.getrusage`` only gives the *peak* resident set (``ru_maxrss``: KiB on Linux, bytes
on macOS), which still grows with a leak, so it is the fallback.

Reading statm takes ~1 us in a tight loop but 15-30 us once per training step: the syscall
then runs on cold caches (measured in the demo loop by ``benchmarks/watch_overhead.py``), the
largest single item of the watcher's per-step work on CPU; the watcher reads it at most every
``rss_interval_s`` (:class:`~trainmedic.live.step_probe.StepProbe`).
"""

from __future__ import annotations

import os
import sys

__all__ = ["rss_mb"]

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
