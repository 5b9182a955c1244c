"""CSV training logs: Lightning's CSVLogger, Ultralytics results.csv, Keras CSVLogger, and
hand-written ``step,loss,...`` files.

The header is read here. A body of ``ARROW_MIN_BYTES`` or more is read by pyarrow's
multi-threaded reader when pyarrow is installed (``csv_arrow``; the ``fast`` extra), which
hands back any file it would read differently from the reader below.

Speed matters here (a million-row log must import in a fraction of a second), so without
pyarrow, or for a small log, the numeric body is parsed by numpy's C tokenizer
(``np.loadtxt``) one block of bytes at a time, straight into preallocated per-column arrays:
no Python object per cell. Empty cells (Lightning writes sparse rows: a validation row leaves
the training columns empty) are rewritten to a sentinel number before parsing and turned into
a "missing" mask after, which keeps a literal ``nan`` in the log (a fact about the run) apart
from a cell that was never written. A block that the fast path cannot take (a word in a number
column, a short row, quotes) is re-read line by line with Python's ``csv`` module, so one bad
line costs one block's speed, never the file.

numpy's parser holds the GIL, so on a machine with two or more cores a large body is split at a
line boundary and a forked child parses the second half into shared memory while this process
parses the first (only when this process runs no other thread, pyarrow's included; any failure
of the child means this process reads that half itself).
"""

from __future__ import annotations

import csv
import io
import logging
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from trainmedic.errors import UnreadableInputError, UnrecognizedInputError
from trainmedic.run.decimal_comma import decimal_commas, read_decimal_commas
from trainmedic.run.longcsv import long_form, read_long_csv
from trainmedic.run.names import FALLBACK_STEP_COLUMNS, find_step_column
from trainmedic.run.series import Series
from trainmedic.run.table import (
    MAX_STEP,
    MISSING_TOKENS,
    LogTable,
    NoteCounter,
    cell_float,
    skip_preamble,
    steps_across_epochs,
)

if TYPE_CHECKING:
    import mmap

    from trainmedic.run.csv_arrow import ArrowBody

__all__ = ["read_csv", "sniff_delimiter", "split_header"]

log = logging.getLogger(__name__)

ARROW_MIN_BYTES = 4 << 20
"""Bodies at least this big are read by pyarrow's multi-threaded reader (``csv_arrow``) when
pyarrow is installed (``pip install trainmedic[fast]``): below this, importing pyarrow (about
0.1 s) costs more than it saves. Setting ``TRAINMEDIC_CSV_NO_ARROW=1`` turns it off."""

PARALLEL_MIN_BYTES = 8 << 20
"""Bodies at least this big are parsed by two processes when the machine has two cores and the
calling process has no other thread (fork is only safe then). Setting the environment variable
``TRAINMEDIC_CSV_ONE_PROCESS=1`` turns this off."""

_CHILD_ROOM = 1.3
"""The child's shared buffer holds this times the rows its half is estimated to have."""

BLOCK_BYTES = 1 << 20
"""Bytes parsed per numpy call: big enough to amortize the call, small enough to stay cheap in
memory (the file is never held whole)."""

_DELIMITERS = (b",", b"\t", b";")
_SENTINEL_TEXT = b"-8e88"
"""Stands for an empty cell while numpy parses: short (it is parsed a million times in a sparse
log) and a value no training log holds; if one does, the count check sends the block to the
careful path."""
_SENTINEL = float(_SENTINEL_TEXT)
_TRUNCATED = ("last line has fewer fields than the header and no newline (the writer was "
              "probably interrupted); it was left out")
_BOM = b"\xef\xbb\xbf"


def sniff_delimiter(header_line: bytes) -> bytes | None:
    """The delimiter of a CSV header line, or None when it does not look like a header."""
    best = max(_DELIMITERS, key=header_line.count)
    if header_line.count(best) == 0:
        return None
    return best


def split_header(header_line: bytes, delim: bytes) -> list[str]:
    """Column names from the header line: decoded, unquoted, stripped (YOLO pads with spaces),
    blanks named ``col<i>`` and repeats suffixed ``.1``, ``.2`` so no column is lost."""
    text = _decode(header_line).strip("\r\n")
    row = _split_row(text, delim.decode())
    names: list[str] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(row):
        name = raw.strip() or f"col{i}"
        if name in seen:
            seen[name] += 1
            name = f"{name}.{seen[name]}"
        else:
            seen[name] = 0
        names.append(name)
    return names


def _split_row(line: str, delim: str) -> list[str]:
    """The fields of one line, as ``csv`` splits them. A line ``csv`` refuses (a carriage
    return inside an unquoted field, a field over its size limit) is split as well as can be:
    carriage returns read as spaces, then a plain split, so junk becomes bad cells, never a
    traceback."""
    try:
        return next(csv.reader([line], delimiter=delim), [])
    except csv.Error:
        pass
    try:
        return next(csv.reader([line.replace("\r", " ")], delimiter=delim), [])
    except csv.Error:
        return line.split(delim)


def _decode(b: bytes) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b.decode("latin-1")


def _is_number(text: str) -> bool:
    return cell_float(text) is not None


class _CapacityError(Exception):
    """A fixed (shared-memory) column store is full."""


class _Columns:
    """Column-major float64 storage (column j is row j, contiguous), growable unless it lives
    in a fixed shared-memory buffer (the forked reader's)."""

    def __init__(self, ncols: int, capacity: int,
                 shared: tuple[mmap.mmap, mmap.mmap] | None = None) -> None:
        self.ncols = ncols
        self.shared = shared
        capacity = max(capacity, 16)
        if shared is None:
            self.data = np.empty((ncols, capacity), dtype=np.float64)
        else:
            self.data = np.frombuffer(shared[0], dtype=np.float64,
                                      count=ncols * capacity).reshape(ncols, capacity)
        self.missing: np.ndarray | None = None
        self.n = 0

    def _reserve(self, extra: int) -> None:
        need = self.n + extra
        cap = self.data.shape[1]
        if need <= cap:
            return
        if self.shared is not None:
            raise _CapacityError(f"{need} rows > {cap}")
        new_cap = max(need, int(cap * 1.5))
        grown = np.empty((self.ncols, new_cap), dtype=np.float64)
        grown[:, : self.n] = self.data[:, : self.n]
        self.data = grown
        if self.missing is not None:
            gm = np.zeros((self.ncols, new_cap), dtype=bool)
            gm[:, : self.n] = self.missing[:, : self.n]
            self.missing = gm

    def append(self, block: np.ndarray, missing: np.ndarray | None) -> None:
        m = block.shape[0]
        if m == 0:
            return
        self._reserve(m)
        self.data[:, self.n : self.n + m] = block.T
        if missing is not None and bool(missing.any()):
            if self.missing is None:
                if self.shared is None:
                    self.missing = np.zeros(self.data.shape, dtype=bool)
                else:  # anonymous mmap pages start zeroed
                    self.missing = np.frombuffer(self.shared[1], dtype=bool,
                                                 count=self.data.size).reshape(self.data.shape)
            self.missing[:, self.n : self.n + m] = missing.T
        self.n += m


class _FastPath:
    """numpy parsing of whole blocks, remembering which empty-cell rewrites the file needs.

    Every pass over a block costs time at a million rows. Empty cells are rewritten to a
    sentinel number; which of the four rewrites a file needs (",," inside a row, ",,," runs,
    an empty first or last cell) is learned on the first block, and later blocks get only
    those. A block with another kind of empty cell makes numpy fail, and is then retried with
    every rewrite, so guessing wrong costs time, never data. The number of sentinels inserted
    comes from the length change, not from another scan.
    """

    def __init__(self, delim: bytes, ncols: int, keep: list[int]) -> None:
        d, s = delim, _SENTINEL_TEXT
        self.delim = delim
        self.ncols = ncols
        # Text columns (a timestamp string, a run name) are left out of numpy's work.
        self.usecols = None if len(keep) == ncols else keep
        self.width = len(keep)
        self.rewrites = ((d + d, d + s + d), (d + d, d + s + d), (b"\n" + d, b"\n" + s + d),
                         (d + b"\n", d + s + b"\n"))
        self.needed: set[int] | None = None  # unknown until the first block

    def parse(self, block: bytes) -> tuple[np.ndarray, np.ndarray | None] | None:
        """The block as an (n, ncols) array and its missing mask, or None (careful path)."""
        if self.needed is not None:
            got = self._try(block, self.needed)
            if got is not None:
                return got[0], got[1]
        got = self._try(block, None)
        if got is None:
            return None
        self.needed = got[2]
        return got[0], got[1]

    def _try(self, block: bytes, which: set[int] | None
             ) -> tuple[np.ndarray, np.ndarray | None, set[int]] | None:
        s = _SENTINEL_TEXT
        start_len = len(block)
        used: set[int] = set()
        for i, (pat, rep) in enumerate(self.rewrites):
            if which is None or i in which:
                n0 = len(block)
                block = block.replace(pat, rep)  # returns the block itself when pat is absent
                if len(block) != n0:
                    used.add(i)
        if block.startswith(self.delim):
            block = s + block
        inserted = (len(block) - start_len) // len(s)
        try:
            arr = np.loadtxt(io.BytesIO(block), delimiter=self.delim.decode(), comments=None,
                             quotechar=None, dtype=np.float64, ndmin=2, encoding="latin-1",
                             usecols=self.usecols)
        except ValueError:
            return None
        if arr.shape[0] and arr.shape[1] != self.width:
            return None
        if not inserted:
            return arr, None, used
        missing = arr == _SENTINEL
        if int(np.count_nonzero(missing)) != inserted:
            return None  # the sentinel value is in the data itself: read this block carefully
        arr[missing] = np.nan
        return arr, missing, used


def _careful_block(block: bytes, delim: bytes, names: list[str], keep_cols: list[int],
                   first_line: int, bad_cells: NoteCounter, bad_rows: NoteCounter,
                   headers: NoteCounter) -> tuple[np.ndarray, np.ndarray]:
    """Parse a block line by line into the ``keep_cols`` columns; bad cells become missing,
    with a note naming the line."""
    ncols = len(names)
    width = len(keep_cols)
    text = _decode(block)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    vals = np.full((len(lines), width), np.nan)
    miss = np.ones((len(lines), width), dtype=bool)
    keep = np.zeros(len(lines), dtype=bool)
    header_set = [n.lower() for n in names]
    d = delim.decode()
    for i, line in enumerate(lines):
        line_no = first_line + i
        line = line.rstrip("\r")
        if not line.strip():
            continue
        row = _split_row(line, d)
        cells = [c.strip() for c in row]
        if [c.lower() for c in cells] == header_set:
            headers.add(line_no)
            continue
        if len(cells) != ncols:
            bad_rows.add(line_no, f"{len(cells)} fields, header has {ncols}")
            cells = (cells + [""] * ncols)[:ncols]
        keep[i] = True
        for k, j in enumerate(keep_cols):
            c = cells[j]
            if c == "" or c.lower() in MISSING_TOKENS:
                continue
            x = cell_float(c)
            if x is None:
                bad_cells.add(line_no, f"{names[j]}={c[:20]!r}")
            else:
                vals[i, k] = x
                miss[i, k] = False
    return vals[keep], miss[keep]


class _Body:
    """Parses data lines (after the header) into ``cols``, keeping notes and line numbers."""

    def __init__(self, delim: bytes, names: list[str], keep: list[int], cols: _Columns,
                 first_line: int) -> None:
        self.delim = delim
        self.names = names
        self.keep = keep
        self.cols = cols
        self.line_no = first_line
        self.crlf = False
        self.fast = _FastPath(delim, len(names), keep)
        self.counters = {
            "bad_cells": NoteCounter("non_numeric_cell", "non-numeric cells read as missing"),
            "bad_rows": NoteCounter("ragged_row",
                                    "rows whose field count differs from the header"),
            "headers": NoteCounter("repeated_header", "repeated header lines skipped"),
        }
        self.truncated_at: int | None = None

    def block(self, block: bytes) -> None:
        """Parse complete lines (``block`` ends with a newline)."""
        nlines = block.count(b"\n")
        if b"\r" in block:
            self.crlf = True
            block = block.replace(b"\r\n", b"\n")
        parsed = None if b"\r" in block else self.fast.parse(block)
        if parsed is None:
            c = self.counters
            parsed = _careful_block(block, self.delim, self.names, self.keep, self.line_no,
                                    c["bad_cells"], c["bad_rows"], c["headers"])
        self.cols.append(*parsed)
        self.line_no += nlines

    def stream(self, f: BinaryIO, pending: bytes, stop: int | None) -> None:
        """Read ``f`` block by block from its current position (``pending`` already read) to
        the absolute offset ``stop`` (just after a newline) or to the end of the file."""
        pos = f.tell()
        at_end = False
        while True:
            if not at_end:
                want = BLOCK_BYTES if stop is None else min(BLOCK_BYTES, stop - pos)
                more = f.read(want) if want > 0 else b""
                pos += len(more)
                if more:
                    pending += more
                else:
                    at_end = True
            cut = pending.rfind(b"\n") + 1
            if cut == 0 and not at_end:
                continue  # one line longer than a block: read on
            blk, pending = pending[:cut], pending[cut:]
            if blk:
                self.block(blk)
            if at_end:
                break
        if pending.strip():
            self.last_line(pending)

    def last_line(self, text: bytes) -> None:
        """A last line without a newline: kept when it has every field, else a truncated
        write (a writer killed mid-line)."""
        line = text.rstrip(b"\r")
        nfields = len(_split_row(_decode(line), self.delim.decode()))
        if nfields < len(self.names):
            self.truncated_at = self.line_no
            return
        self.block(line + b"\n")

    def flush(self, table: LogTable) -> None:
        for counter in self.counters.values():
            counter.flush(table)
        if self.truncated_at is not None:
            table.note("truncated_last_line", _TRUNCATED, line=self.truncated_at)
        if self.crlf:
            table.meta["line_endings"] = "crlf"


def read_csv(path: Path) -> LogTable:
    """Read a CSV log with a header row into a ``LogTable`` (raw column names)."""
    table = LogTable(path=str(path), format="csv")
    try:
        f = path.open("rb")
    except OSError as exc:
        raise UnreadableInputError(str(path), f"cannot open the file ({exc.strerror}); "
                                   "expected a readable CSV log") from exc
    with f:
        size = path.stat().st_size
        head = f.read(BLOCK_BYTES)
        if head.startswith(_BOM):
            head = head[len(_BOM):]
        head, line_no = skip_preamble(head, f, BLOCK_BYTES)
        if not head:
            raise UnrecognizedInputError(str(path), "is empty; expected a CSV log with a header "
                                         "row and at least one data row")
        nl = head.find(b"\n")
        while nl < 0:
            more = f.read(BLOCK_BYTES)
            if not more:
                break
            head += more
            nl = head.find(b"\n")
        header_line = (head if nl < 0 else head[:nl]).rstrip(b"\r")
        body = b"" if nl < 0 else head[nl + 1:]
        delim = sniff_delimiter(header_line)
        if delim is None:
            raise UnrecognizedInputError(str(path), "first line has no ',', tab or ';'; expected "
                                         "a CSV header row such as 'step,loss'")
        names = split_header(header_line, delim)
        if (long_cols := long_form(names)) is not None:
            return read_long_csv(path, long_cols, delim.decode())
        if delim == b";" and decimal_commas(body[:65536]):
            return read_decimal_commas(path)
        if all(_is_number(n) for n in names):
            raise UnrecognizedInputError(str(path), "first row is all numbers; expected a header "
                                         "row naming the columns (e.g. 'step,loss,lr')")
        keep = _numeric_columns(body, delim, names)
        if not keep:
            raise UnrecognizedInputError(str(path), "has no column of numbers (columns: "
                                         f"{', '.join(names[:6])}); expected a metrics log")
        if len(keep) < len(names):
            text_cols = [n for j, n in enumerate(names) if j not in keep]
            table.note("text_column", f"columns holding text, not numbers, were not read: "
                       f"{', '.join(text_cols[:6])}")
        ncols = len(keep)
        body_start = f.tell() - len(body)
        sample = body[:65536]
        arrow = _read_with_arrow(path, body_start, size, sample, delim, names, keep)
        if arrow is not None:
            if arrow.crlf:
                table.meta["line_endings"] = "crlf"
            if arrow.truncated_at is not None:
                table.note("truncated_last_line", _TRUNCATED, line=arrow.truncated_at)
            if arrow.rows == 0:
                raise UnrecognizedInputError(str(path), f"has a header ({', '.join(names[:6])}) "
                                             "but no data rows; expected at least one row of "
                                             "numbers")
            _to_series(table, [names[j] for j in keep], arrow.values, arrow.missing)
            return table
        avg_line = len(sample) / sample.count(b"\n") if sample.count(b"\n") else 64.0
        est_rows = int((size - body_start) / max(avg_line, 1.0) * 1.05) + 16
        split = _split_point(f, body_start, size) if _can_fork(size - body_start) else None
        if split is None:
            parser = _Body(delim, names, keep, _Columns(ncols, est_rows), line_no + 1)
            parser.stream(f, body, None)
            parser.flush(table)
        else:
            parser = _read_halves(path, f, body, split, delim, names, keep, line_no + 1,
                                  est_rows, table)
    cols = parser.cols
    if cols.n == 0:
        raise UnrecognizedInputError(str(path), f"has a header ({', '.join(names[:6])}) but no "
                                     "data rows; expected at least one row of numbers")
    n = cols.n
    _to_series(table, [names[j] for j in keep], list(cols.data[:, :n]),
               [None] * len(keep) if cols.missing is None else list(cols.missing[:, :n]))
    return table


def _read_with_arrow(path: Path, body_start: int, size: int, sample: bytes, delim: bytes,
                     names: list[str], keep: list[int]) -> ArrowBody | None:
    """The body read by pyarrow (``csv_arrow``) when it is big enough to pay for importing
    pyarrow and pyarrow is installed; None when the numpy reader is to read it."""
    if size - body_start < ARROW_MIN_BYTES or os.environ.get("TRAINMEDIC_CSV_NO_ARROW"):
        return None
    try:
        from trainmedic.run import csv_arrow
    except ImportError:  # pyarrow is an optional extra (trainmedic[fast])
        return None
    return csv_arrow.read_body(path, body_start, sample, delim, names, keep)


def _numeric_columns(body: bytes, delim: bytes, names: list[str], sample_lines: int = 50
                     ) -> list[int]:
    """Indexes of the columns to read: all but those whose cells in the first lines are all
    text (a timestamp string, a run name; "None"/"NA" count as empty, not text). A column
    that turns to text later is still read, its text cells noted as non-numeric."""
    lines = _decode(body[:65536]).split("\n")[:-1][:sample_lines]
    text_only = [True] * len(names)
    seen = [False] * len(names)
    for row in (_split_row(ln.rstrip("\r"), delim.decode()) for ln in lines if ln.strip()):
        for j, cell in enumerate(row[:len(names)]):
            c = cell.strip()
            if c and c.lower() not in MISSING_TOKENS:
                seen[j] = True
                if _is_number(c):
                    text_only[j] = False
    return [j for j in range(len(names)) if not (seen[j] and text_only[j])]


def _can_fork(body_bytes: int) -> bool:
    """Whether a second process may parse half of a body this big."""
    # Linux only: macOS forks badly once system frameworks are loaded; Windows cannot fork.
    if body_bytes < PARALLEL_MIN_BYTES or not sys.platform.startswith("linux"):
        return False
    if os.environ.get("TRAINMEDIC_CSV_ONE_PROCESS"):  # opt-out, and for benchmarks
        return False
    # Forking a process that runs other threads can deadlock the child on a lock one of them
    # held (and Python 3.12+ warns about it); the diagnose CLI has one thread.
    if threading.active_count() != 1:
        return False
    # pyarrow's thread pools are threads that threading.active_count() does not see.
    if "pyarrow" in sys.modules:
        return False
    return len(os.sched_getaffinity(0)) >= 2


def _split_point(f: BinaryIO, body_start: int, size: int) -> int | None:
    """The offset just after the first newline past the middle of the body, or None."""
    here = f.tell()
    mid = body_start + (size - body_start) // 2
    f.seek(mid)
    chunk = f.read(1 << 16)
    f.seek(here)
    i = chunk.find(b"\n")
    if i < 0:
        return None
    split = mid + i + 1
    return split if here < split < size else None


def _read_halves(path: Path, f: BinaryIO, body: bytes, split: int, delim: bytes,
                 names: list[str], keep: list[int], first_line: int, est_rows: int,
                 table: LogTable) -> _Body:
    """Parse the body in two processes (``csv_fork.read_halves``); imported only when a body
    is big enough to fork for, so a small log's start-up never loads it."""
    from trainmedic.run.csv_fork import read_halves

    return read_halves(path, f, body, split, delim, names, keep, first_line, est_rows, table)


def _integral(x: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(x)) and np.all(x == np.floor(x))
                and (x.size == 0 or np.abs(x).max() < MAX_STEP))


def _to_series(table: LogTable, names: list[str], data: list[np.ndarray],
               missing: list[np.ndarray | None]) -> None:
    """Series from the columns ``names`` (``data[j]``; ``missing[j]`` marks cells never
    written, None when there are none)."""
    n = len(data[0])
    step_name = find_step_column(names)
    row_keep: np.ndarray | None = None
    if step_name is not None:
        j = names.index(step_name)
        raw = data[j]
        ok = np.isfinite(raw)
        step_missing = missing[j]
        if step_missing is not None:
            ok &= ~step_missing
        if not bool(ok.all()):
            dropped = int((~ok).sum())
            table.note("missing_step", f"{dropped} rows have no '{step_name}' value and were "
                       "left out")
            row_keep = ok
            raw = raw[ok]
        if _integral(raw):
            steps = raw.astype(np.int64)
            table.step_column = step_name
        else:
            too_big = int(np.count_nonzero(np.isfinite(raw) & (np.abs(raw) >= MAX_STEP)))
            why = (f"has {too_big} value(s) of 2^62 or more (too large to be a step count)"
                   if too_big else "is not whole numbers")
            table.note("step_from_row_index",
                       f"column '{step_name}' {why}; steps are row numbers")
            steps = np.arange(raw.shape[0], dtype=np.int64)
        epoch_j = next((k for k, nm in enumerate(names) if nm.lower() == "epoch"), None)
        if table.step_column and epoch_j is not None and epoch_j != j:
            ep = data[epoch_j] if row_keep is None else data[epoch_j][row_keep]
            glob = steps_across_epochs(steps, ep)
            if glob is not None:
                steps = glob
                table.note("step_per_epoch", f"'{step_name}' restarts every epoch; steps were "
                           "made global by adding the last step of the epochs before")
        if step_name.lower() in FALLBACK_STEP_COLUMNS and table.step_column:
            table.note("step_is_epoch", f"no step column; '{step_name}' is used as the step")
    else:
        steps = np.arange(n, dtype=np.int64)
        table.note("step_from_row_index", "no step column (looked for step, global_step, "
                   "iteration, iter, _step, trainer/global_step, epoch); steps are row numbers")
    for j, name in enumerate(names):
        if name == table.step_column:
            continue
        v = data[j]
        m = missing[j]
        mask = None if m is None else ~m
        if row_keep is not None:
            v = v[row_keep]
            mask = None if mask is None else mask[row_keep]
        if mask is not None and not bool(mask.all()):
            if not bool(mask.any()):
                continue  # never written: not a series
            table.columns[name] = Series(steps[mask], v[mask])
        else:
            table.columns[name] = Series(steps, v)
