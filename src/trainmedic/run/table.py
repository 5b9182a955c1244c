"""The ``LogTable``: what one importer read from one file, before names are mapped.

Each importer returns the columns under the names the log used; the loader then maps names
(``trainmedic.run.names``), assigns the rank and merges the tables of one run into a ``Run``.
Keeping this step separate lets a user mapping (``--map loss=my/tag``) be checked against every
file of a run before any is judged to lack the source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainmedic.run.series import ImportNote, Series

__all__ = ["LogTable", "NoteCounter"]


@dataclass
class LogTable:
    """Raw series of one log file, keyed by the log's own column/tag names."""

    path: str
    format: str
    """``csv``, ``jsonl``, ``json_rows``, ``hf_trainer_state`` or ``tensorboard``."""
    columns: dict[str, Series] = field(default_factory=dict)
    step_column: str | None = None
    """The raw column the steps came from; None when steps are row numbers or native (TB)."""
    meta: dict[str, Any] = field(default_factory=dict)
    notes: list[ImportNote] = field(default_factory=list)
    rank: int | None = None

    def note(self, kind: str, detail: str, line: int | None = None) -> None:
        self.notes.append(ImportNote(kind=kind, detail=detail, path=self.path, line=line))


class NoteCounter:
    """Collects per-line problems of one kind, keeping the first few line numbers.

    A million bad cells must not become a million notes: the report needs the count and where
    the first ones are, so the user can look.
    """

    def __init__(self, kind: str, what: str, keep: int = 5) -> None:
        self.kind = kind
        self.what = what
        self.keep = keep
        self.count = 0
        self.first: list[tuple[int | None, str]] = []

    def add(self, line: int | None, sample: str = "") -> None:
        self.count += 1
        if len(self.first) < self.keep:
            self.first.append((line, sample))

    def merge(self, count: int, first: list, line_offset: int) -> None:
        """Fold in another counter's ``count`` and ``first`` (line numbers shifted)."""
        self.count += count
        for line, sample in first:
            if len(self.first) < self.keep:
                self.first.append((None if line is None else line + line_offset, sample))

    def flush(self, table: LogTable) -> None:
        if not self.count:
            return
        where = ", ".join(
            (f"line {ln}" if ln is not None else "?") + (f" ({s})" if s else "")
            for ln, s in self.first
        )
        more = f" and {self.count - len(self.first)} more" if self.count > len(self.first) else ""
        first_line = self.first[0][0] if self.first else None
        table.note(self.kind, f"{self.count} {self.what}: {where}{more}", line=first_line)
