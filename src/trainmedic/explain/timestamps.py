"""Time stamps on crash-log lines, to order failures across ranks and across files.

Two forms are read: a full date (``2024-04-20T09:09:37``, ``2023-05-19_16:39:58``,
``[2024-05-08 08:47:31,261]``) and glog's month-day form that c10d/ProcessGroupNCCL prints
(``[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607]``: level, month (not zero-padded in
c10's logger), day, time; no year).
Kernel ``[ 1843.308145]`` stamps count seconds since boot and are not read (they do not order
lines across machines).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Stamp", "find_stamp", "comparable"]

_FULL = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})[T _](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?")
_GLOG = re.compile(r"(?:^|[\[\s:])[IWEF](\d{1,2})(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")


@dataclass(frozen=True)
class Stamp:
    """A time stamp as read from a line; ``year`` is None for glog's month-day form."""

    year: int | None
    key: tuple[int, int, int, int, int, float]
    """(month, day, hour, minute, second, fraction) for ordering."""
    text: str
    """The stamp as it reads in the log."""

    def before(self, other: Stamp) -> bool:
        if self.year is not None and other.year is not None and self.year != other.year:
            return self.year < other.year
        return self.key < other.key


def _frac(digits: str | None) -> float:
    return float("0." + digits) if digits else 0.0


def find_stamp(line: str) -> Stamp | None:
    """The first time stamp on ``line`` (a full date first, then glog's form), or None."""
    m = _FULL.search(line)
    if m:
        y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
        if 1 <= mo <= 12 and 1 <= d <= 31:
            return Stamp(y, (mo, d, h, mi, s, _frac(m.group(7))), m.group(0))
    g = _GLOG.search(line[:200])
    if g:
        mo, d, h, mi, s = (int(x) for x in g.groups()[:5])
        if 1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61:
            return Stamp(None, (mo, d, h, mi, s, _frac(g.group(6))), g.group(0).strip(" [:"))
    return None


def comparable(stamps: list[Stamp | None]) -> bool:
    """Whether every stamp is there, so that they can be put in order."""
    return bool(stamps) and all(s is not None for s in stamps)
