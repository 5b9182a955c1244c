"""The ``LogTable``: what one importer read from one file, before names are mapped.

Each importer returns the columns under the names the log used; the loader then maps names
(``trainmedic.run.names``), assigns the rank and merges the tables of one run into a ``Run``.
Keeping this step separate lets a user mapping (``--map loss=my/tag``) be checked against every
file of a run before any is judged to lack the source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

from trainmedic.run.series import ImportNote, Series

__all__ = ["UTF16_BOMS", "skip_preamble", "numbers_only", "LogTable", "NoteCounter",
           "steps_across_epochs", "cell_float", "MISSING_TOKENS", "MAX_STEP", "duration_seconds",
           "plain_scalars"]


#: The byte-order marks of UTF-16 text (little-endian first): PowerShell's `>` writes it.
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


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


def steps_across_epochs(steps: np.ndarray, epochs: np.ndarray) -> np.ndarray | None:
    """Global steps for a log whose step counter restarts every epoch, else None.

    MMDetection 2.x logs ``iter`` as the iteration *within* the epoch (mmcv TextLoggerHook:
    ``runner.inner_iter + 1``), so read raw the steps go back at every new epoch and would look
    like resumes. The counter counts as per-epoch only when it goes back at least twice, every
    time exactly where ``epoch`` increases, and ``epoch`` never decreases; then each epoch is
    offset by the lengths (largest steps) of the epochs before it.
    """
    if len(steps) < 3 or len(epochs) != len(steps):
        return None
    ep = np.asarray(epochs, dtype=np.float64)
    if not bool(np.isfinite(ep).all()) or bool((np.diff(ep) < 0).any()):
        return None
    back = np.diff(steps) < 0
    new_epoch = np.diff(ep) > 0
    if int(back.sum()) < 2 or bool((back & ~new_epoch).any()):
        return None
    uniq, inverse = np.unique(ep, return_inverse=True)
    top = np.full(len(uniq), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(top, inverse, steps)
    # A 1-based counter (mmcv) ends each epoch on its length; a 0-based one on length - 1.
    length = np.maximum(top[:-1], 0) + (1 if int(steps.min()) == 0 else 0)
    offsets = np.concatenate([[0], np.cumsum(length)])
    return (steps + offsets[inverse]).astype(np.int64)


# Non-finite values as Microsoft's C runtime printed them before VS2015 ("1.#INF",
# "-1.#IND") and after ("inf", "-nan(ind)"); Python's float() knows neither spelling.
_MSVC_NONFINITE = {
    "1.#inf": float("inf"), "-1.#inf": float("-inf"), "+1.#inf": float("inf"),
    "1.#ind": float("nan"), "-1.#ind": float("nan"), "1.#qnan": float("nan"),
    "-1.#qnan": float("nan"), "nan(ind)": float("nan"), "-nan(ind)": float("nan"),
    "1.#snan": float("nan"), "-1.#snan": float("nan"),
}


#: A numpy or torch scalar printed inside a dict or list (NumPy 2 prints ``np.float64(0.52)``,
#: so does the HF Trainer's log line holding one; torch ``tensor(0.52)``).
_SCALAR_REPR = re.compile(r"\b(?:np|numpy)\.(?:float|int|uint)(?:16|32|64|128)?\(\s*([^()]*?)\s*\)|"
                          r"\btensor\(\s*([-+\w.]+)\s*(?:,[^()]*)?\)")


def plain_scalars(text: str) -> str:
    """``text`` with numpy/torch scalar reprs replaced by their numbers."""
    if "(" not in text:
        return text
    return _SCALAR_REPR.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2),
                            text)


MAX_STEP = 2 ** 62
"""Step values at or above this are not step counts (an id, a ns timestamp); steps are stored
as int64, with headroom for making per-epoch steps global."""

MISSING_TOKENS = frozenset({"none", "null", "na", "n/a", "nil", "-", "--", "missing",
                            "undefined"})
"""Cells that say "not logged" (Python's ``str(None)``, R's ``NA``): missing, not text."""


def cell_float(text: str) -> float | None:
    """A logged cell as a float (``nan``, ``inf``, ``Infinity`` and MSVC's ``1.#INF`` count),
    or None when it is not a number."""
    try:
        return float(text)
    except ValueError:
        return _MSVC_NONFINITE.get(text.strip().lower())


_DURATION = re.compile(r"^\s*(?:(\d+)\s+days?,\s*)?(\d+):(\d{2}):(\d{2}(?:\.\d+)?)\s*$")


def duration_seconds(text: str) -> float | None:
    """``"0:03:29"`` / ``"4 days, 5:06:09"`` (Python's ``str(timedelta)``, which LLaMA-Factory
    and others log as elapsed time) in seconds, or None when ``text`` is not such a duration."""
    m = _DURATION.match(text)
    if m is None:
        return None
    days = int(m.group(1) or 0)
    return days * 86400.0 + int(m.group(2)) * 3600.0 + int(m.group(3)) * 60.0 + float(m.group(4))


def skip_preamble(head: bytes, f: BinaryIO, block: int) -> tuple[bytes, int]:
    """``head`` (the first bytes read from ``f``) past the blank lines and ``#`` comment lines
    before a CSV's header (a run's notes: ``# seed: 0``), reading more of ``f`` as needed, and
    the 1-based line number the header is on. When the first line after the comments is all
    numbers, the last comment is the header (``np.savetxt(header="step,loss")`` writes
    ``# step,loss``)."""
    line_no, last = 1, b""
    while head[:1] in (b"\n", b"\r", b" ", b"\t", b"#"):
        end = head.find(b"\n") if head[:1] == b"#" else 0
        if end < 0:  # a comment longer than the bytes read so far
            more = f.read(block)
            if not more:
                return b"", line_no
            head += more
            continue
        if end:
            last = head[:end]
        line_no += head[:end + 1].count(b"\n")
        head = head[end + 1:] or f.read(block)
    first = head.split(b"\n", 1)[0].rstrip(b"\r")
    if last and numbers_only(first):
        return last.lstrip(b"# ").rstrip(b"\r") + b"\n" + head, line_no - 1
    return head, line_no


def numbers_only(line: bytes) -> bool:
    """Whether a delimited line is all numbers (a data row, not a header)."""
    cells = re.split(rb"[,\t;]", line)
    return len(cells) > 1 and all(cell_float(c.decode("latin-1")) is not None for c in cells)
