"""One crash log as explain reads it: its lines, and per line the rank and time it names.

The file is read the way the run importers read a console log (``run.jsonlog.read_text``:
UTF-8 with or without BOM, UTF-16 with its BOM; binary content is refused with an InputError).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from trainmedic.errors import UnreadableInputError
from trainmedic.explain.incident import Evidence
from trainmedic.explain.timestamps import Stamp, find_stamp

__all__ = ["LogText", "read_log", "MAX_LOG_BYTES"]

MAX_LOG_BYTES = 512 << 20
"""A bigger file is refused: a crash log is read whole, in memory."""

_PREFIX_RANK = re.compile(
    r"^\s*(?:\[\d+\]\s*)?(?:\[(?:rank|default)\s*(\d+)\]:?|\[\d+,(\d+)\]<(?:stdout|stderr)>:)")
_MESSAGE_RANK = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]")


@dataclass(frozen=True)
class LogText:
    """The lines of one log; ``lines[i]`` is line ``i + 1``."""

    path: str
    lines: tuple[str, ...]
    _stamps: dict[int, Stamp | None] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_text(cls, path: str, text: str) -> LogText:
        return cls(path, tuple(text.splitlines()))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def line(self, number: int) -> str:
        """Line ``number`` (1-based)."""
        return self.lines[number - 1]

    def rank(self, number: int) -> int | None:
        """The rank line ``number`` names: its launcher prefix (``[rank3]:``, ``[default3]:``,
        Open MPI's ``[1,3]<stderr>:``) or c10d's ``[Rank 3]`` / ``[PG 1 Rank 3]``."""
        text = self.line(number)
        m = _PREFIX_RANK.match(text)
        if m:
            return int(m.group(1) or m.group(2))
        m = _MESSAGE_RANK.search(text)
        return int(m.group(1)) if m else None

    def evidence(self, numbers: list[int], limit: int = 4) -> tuple[Evidence, ...]:
        """The lines ``numbers`` (the first ``limit`` distinct ones, in log order) as evidence."""
        keep = sorted(set(numbers))[:limit]
        return tuple(Evidence(line=n, text=self.line(n).rstrip()[:400]) for n in keep)

    def stamp(self, number: int) -> Stamp | None:
        """The time stamp on line ``number``, if it carries one."""
        if number not in self._stamps:
            self._stamps[number] = find_stamp(self.line(number))
        return self._stamps[number]


def read_log(path: str | Path) -> LogText:
    """Read one log. Raises an InputError (exit 2) for a missing, unreadable, binary or too
    large file."""
    from trainmedic.run.jsonlog import read_text

    file = Path(path)
    try:
        size = file.stat().st_size
    except OSError as exc:
        raise UnreadableInputError(str(path), f"cannot open the file ({exc.strerror}); expected "
                                   "a crash log (a training job's console output)") from exc
    if file.is_dir():
        raise UnreadableInputError(str(path), "is a folder; expected a crash log file (pass "
                                   "each rank's log: trainmedic explain logs/*.log)")
    if size > MAX_LOG_BYTES:
        raise UnreadableInputError(str(path), f"is {size >> 20} MiB, over the "
                                   f"{MAX_LOG_BYTES >> 20} MiB read limit; pass the end of it "
                                   "(tail -n 200000 LOG > end.log)")
    return LogText.from_text(str(path), read_text(file, "crash log (console output)"))
