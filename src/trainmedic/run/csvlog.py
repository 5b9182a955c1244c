"""CSV training logs: Lightning's CSVLogger, Ultralytics results.csv, Keras CSVLogger, and
hand-written ``step,loss,...`` files.

Speed matters here (a million-row log must import in a fraction of a second), so the numeric
body is parsed by numpy's C tokenizer (``np.loadtxt``) one block of bytes at a time, straight
into preallocated per-column arrays: no Python object per cell. Empty cells (Lightning writes
sparse rows: a validation row leaves the training columns empty) are rewritten to a sentinel
number before parsing and turned into a "missing" mask after, which keeps a literal ``nan`` in
the log (a fact about the run) apart from a cell that was never written. A block that the fast
path cannot take (a word in a number column, a short row, quotes) is re-read line by line with
Python's ``csv`` module, so one bad line costs one block's speed, never the file.
"""

from __future__ import annotations

import csv
import io
import logging
from pathlib import Path

import numpy as np

from trainmedic.errors import UnreadableInputError, UnrecognizedInputError
from trainmedic.run.names import FALLBACK_STEP_COLUMNS, find_step_column
from trainmedic.run.series import Series
from trainmedic.run.table import LogTable, NoteCounter

__all__ = ["read_csv", "sniff_delimiter", "split_header"]

log = logging.getLogger(__name__)

BLOCK_BYTES = 1 << 20
"""Bytes parsed per numpy call: big enough to amortize the call, small enough to stay cheap in
memory (the file is never held whole)."""

_DELIMITERS = (b",", b"\t", b";")
_SENTINEL_TEXT = b"-1.2345678e300"
_SENTINEL = float(_SENTINEL_TEXT)
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
    row = next(csv.reader([text], delimiter=delim.decode()), [])
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


def _decode(b: bytes) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b.decode("latin-1")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class _Columns:
    """Growable column-major float64 storage (column j is row j, contiguous)."""

    def __init__(self, ncols: int, capacity: int) -> None:
        self.ncols = ncols
        self.data = np.empty((ncols, max(capacity, 16)), dtype=np.float64)
        self.missing: np.ndarray | None = None
        self.n = 0

    def _reserve(self, extra: int) -> None:
        need = self.n + extra
        cap = self.data.shape[1]
        if need <= cap:
            return
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
                self.missing = np.zeros(self.data.shape, dtype=bool)
            self.missing[:, self.n : self.n + m] = missing.T
        self.n += m


def _fast_block(block: bytes, delim: bytes, ncols: int
                ) -> tuple[np.ndarray, np.ndarray | None] | None:
    """Parse a block of complete lines with numpy, or None when it needs the careful path."""
    if b'"' in block:
        return None
    inserted = 0
    if (delim + delim in block or block.startswith(delim) or b"\n" + delim in block
            or delim + b"\n" in block):
        if _SENTINEL_TEXT in block:
            return None
        d, s = delim, _SENTINEL_TEXT
        # Each pattern is looked for before it is replaced: a replace copies the block.
        for pat, rep in ((d + d, d + s + d), (d + d, d + s + d), (b"\n" + d, b"\n" + s + d),
                         (d + b"\n", d + s + b"\n")):
            if pat in block:
                block = block.replace(pat, rep)
        if block.startswith(d):
            block = s + block
        inserted = block.count(s)
    try:
        arr = np.loadtxt(io.BytesIO(block), delimiter=delim.decode(), comments=None,
                         dtype=np.float64, ndmin=2, encoding="latin-1")
    except ValueError:
        return None
    if arr.shape[0] and arr.shape[1] != ncols:
        return None
    if not inserted:
        return arr, None
    missing = arr == _SENTINEL
    if int(missing.sum()) != inserted:
        return None
    arr[missing] = np.nan
    return arr, missing


def _careful_block(block: bytes, delim: bytes, names: list[str], first_line: int,
                   bad_cells: NoteCounter, bad_rows: NoteCounter, headers: NoteCounter
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Parse a block line by line; bad cells become missing, with a note naming the line."""
    ncols = len(names)
    text = _decode(block)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    vals = np.full((len(lines), ncols), np.nan)
    miss = np.ones((len(lines), ncols), dtype=bool)
    keep = np.zeros(len(lines), dtype=bool)
    header_set = [n.lower() for n in names]
    d = delim.decode()
    for i, line in enumerate(lines):
        line_no = first_line + i
        line = line.rstrip("\r")
        if not line.strip():
            continue
        row = next(csv.reader([line], delimiter=d), [])
        cells = [c.strip() for c in row]
        if [c.lower() for c in cells] == header_set:
            headers.add(line_no)
            continue
        if len(cells) != ncols:
            bad_rows.add(line_no, f"{len(cells)} fields, header has {ncols}")
            cells = (cells + [""] * ncols)[:ncols]
        keep[i] = True
        for j, c in enumerate(cells):
            if c == "":
                continue
            try:
                vals[i, j] = float(c)
                miss[i, j] = False
            except ValueError:
                bad_cells.add(line_no, f"{names[j]}={c[:20]!r}")
    return vals[keep], miss[keep]


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
        line_no = 1
        # Skip blank lines before the header.
        while head[:1] in (b"\n", b"\r", b" ", b"\t"):
            if head[:1] == b"\n":
                line_no += 1
            head = head[1:]
            if not head:
                head = f.read(BLOCK_BYTES)
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
        if all(_is_number(n) for n in names):
            raise UnrecognizedInputError(str(path), "first row is all numbers; expected a header "
                                         "row naming the columns (e.g. 'step,loss,lr')")
        ncols = len(names)
        line_no += 1  # first data line
        sample = body[:65536]
        avg_line = len(sample) / sample.count(b"\n") if sample.count(b"\n") else 64.0
        cols = _Columns(ncols, int(size / max(avg_line, 1.0) * 1.05) + 16)
        bad_cells = NoteCounter("non_numeric_cell", "non-numeric cells read as missing")
        bad_rows = NoteCounter("ragged_row", "rows whose field count differs from the header")
        headers = NoteCounter("repeated_header", "repeated header lines skipped")
        crlf = False
        pending = body
        at_eof = False
        while True:
            if not at_eof:
                more = f.read(BLOCK_BYTES)
                if more:
                    pending += more
                else:
                    at_eof = True
            cut = pending.rfind(b"\n") + 1
            if cut == 0 and not at_eof:
                continue  # one line longer than a block: read on
            block, pending = pending[:cut], pending[cut:]
            if block:
                nlines = block.count(b"\n")
                if b"\r" in block:
                    crlf = True
                    block = block.replace(b"\r\n", b"\n")
                parsed = None if b"\r" in block else _fast_block(block, delim, ncols)
                if parsed is None:
                    parsed = _careful_block(block, delim, names, line_no, bad_cells,
                                            bad_rows, headers)
                cols.append(*parsed)
                line_no += nlines
            if at_eof:
                break
        if pending.strip():
            _last_line(pending, delim, names, line_no, cols, table, bad_cells)
        for counter in (bad_cells, bad_rows, headers):
            counter.flush(table)
    if crlf:
        table.meta["line_endings"] = "crlf"
    if cols.n == 0:
        raise UnrecognizedInputError(str(path), f"has a header ({', '.join(names[:6])}) but no "
                                     "data rows; expected at least one row of numbers")
    _to_series(table, names, cols)
    return table


def _last_line(text: bytes, delim: bytes, names: list[str], line_no: int, cols: _Columns,
               table: LogTable, bad_cells: NoteCounter) -> None:
    """A last line without a newline: kept when it has every field, else a truncated write."""
    line = text.rstrip(b"\r")
    nfields = len(next(csv.reader([_decode(line)], delimiter=delim.decode()), []))
    if nfields < len(names):
        table.note("truncated_last_line",
                   f"last line has {nfields} of {len(names)} fields and no newline (the writer "
                   "was probably interrupted); it was left out", line=line_no)
        return
    dummy_rows = NoteCounter("ragged_row", "rows whose field count differs from the header")
    dummy_headers = NoteCounter("repeated_header", "repeated header lines skipped")
    vals, miss = _careful_block(line + b"\n", delim, names, line_no, bad_cells, dummy_rows,
                                dummy_headers)
    cols.append(vals, miss)
    dummy_rows.flush(table)


def _integral(x: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(x)) and np.all(x == np.floor(x))
                and (x.size == 0 or np.abs(x).max() < 2**62))


def _to_series(table: LogTable, names: list[str], cols: _Columns) -> None:
    n = cols.n
    data = cols.data[:, :n]
    missing = None if cols.missing is None else cols.missing[:, :n]
    step_name = find_step_column(names)
    row_keep: np.ndarray | None = None
    if step_name is not None:
        j = names.index(step_name)
        raw = data[j]
        ok = np.isfinite(raw)
        if missing is not None:
            ok &= ~missing[j]
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
            table.note("step_from_row_index",
                       f"column '{step_name}' is not whole numbers; steps are row numbers")
            steps = np.arange(raw.shape[0], dtype=np.int64)
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
        mask = None if missing is None else ~missing[j]
        if row_keep is not None:
            v = v[row_keep]
            mask = None if mask is None else mask[row_keep]
        if mask is not None and not bool(mask.all()):
            if not bool(mask.any()):
                continue  # never written: not a series
            table.columns[name] = Series(steps[mask], v[mask])
        else:
            table.columns[name] = Series(steps, v)
