"""Resident memory of this process, without psutil (not a dependency).

Linux: ``/proc/self/statm`` gives the *current* resident set in pages (proc(5)); reading it
costs a few microseconds, cheap enough for every step. Elsewhere ``resource.getrusage`` only
gives the *peak* resident set (``ru_maxrss``: KiB on Linux, bytes on macOS), which still grows
with a leak, so it is the fallback.
"""

from __future__ import annotations

import os
import sys

__all__ = ["rss_mb"]

_STATM = "/proc/self/statm"
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_HAS_STATM = os.path.exists(_STATM)


def rss_mb() -> float | None:
    """Resident set size of this process in MiB (current on Linux, peak elsewhere)."""
    if _HAS_STATM:
        try:
            with open(_STATM, "rb") as fh:
                fields = fh.read().split()
            return int(fields[1]) * _PAGE_BYTES / 2**20
        except (OSError, ValueError, IndexError):
            pass
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10
