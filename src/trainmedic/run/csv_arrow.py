"""The body of a large CSV log read by pyarrow's multi-threaded CSV reader (optional extra).

``csvlog.read_csv`` parses the header itself (BOM, blank lines, delimiter, names, which columns
hold numbers) and hands the body's byte range here. pyarrow reads it in parallel into float64
columns, with nulls for empty cells and for the "not logged" tokens, and a literal ``nan`` kept
as NaN (a fact about the run, not a missing cell).

This path reads a file exactly as the numpy reader would, or not at all. Whatever it would
read differently, or could not give a line number for, makes it return None, and the caller
reads the file with the numpy reader, which notes each bad line by number: a row whose field
count differs from the header (pyarrow's invalid-row handler sees them, but gives no row
numbers when it reads with threads), a cell that is not a number (a repeated header,
``1.#INF``, a word: the float64 conversion fails), a carriage return that ends no line in the
body's first 64 KiB. Past those, such a carriage return is read as a line break (as Python's
universal newlines read it), where the numpy reader reads it as junk inside a line: finding
one would take a scan of the whole file. A last line without a newline and with too few
fields (a writer killed mid-line) is handled here: left out and noted, as the numpy reader
does.

pyarrow is imported only when this module is, and ``csvlog`` imports it only for bodies of at
least ``csvlog.ARROW_MIN_BYTES``, so start-up on a small log does not pay for it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from trainmedic.run.table import MISSING_TOKENS

__all__ = ["ArrowBody", "read_body"]

log = logging.getLogger(__name__)

_NULLS = sorted({v for t in MISSING_TOKENS for v in (t, t.upper(), t.title())} | {""})
"""Cells read as missing. The numpy reader compares tokens case-insensitively; a spelling not
listed here (``nOnE``) fails conversion, and the file goes to that reader."""


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for p in text.split(".")[:2]:
        digits = "".join(c for c in p if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


USABLE = _version(pa.__version__) >= (14, 0)
"""An older pyarrow (an ML environment may carry one) lacks some of what this reader uses
(the invalid-row handler, ``Table.drop_columns``): the numpy reader reads instead."""


class ArrowBody:
    """What pyarrow read: one float64 array per column (NaN where missing), the missing masks
    (None for a column with no missing cell), the row count, and what the caller notes."""

    def __init__(self, values: list[np.ndarray], missing: list[np.ndarray | None], rows: int,
                 crlf: bool, truncated_at: int | None) -> None:
        self.values = values
        self.missing = missing
        self.rows = rows
        self.crlf = crlf
        self.truncated_at = truncated_at


class _Fallback(Exception):
    """The numpy reader must read this file."""


def read_body(path: Path, body_start: int, sample: bytes, delim: bytes, names: list[str],
              keep: list[int]) -> ArrowBody | None:
    """Read the data lines from byte ``body_start`` (just after the header's newline) to the
    end of ``path``; ``sample`` is the body's first bytes, already read. None when the numpy
    reader must read the file instead (see the module docstring)."""
    if not USABLE:
        log.debug("%s: pyarrow %s is older than 14: read by the numpy reader", path,
                  pa.__version__)
        return None
    try:
        return _read(path, body_start, sample, delim, names, keep)
    except _Fallback as why:
        log.debug("%s: read by the numpy reader (%s)", path, why)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        log.debug("%s: pyarrow could not read it (%s); read by the numpy reader", path, exc)
    return None


def _read(path: Path, body_start: int, sample: bytes, delim: bytes, names: list[str],
          keep: list[int]) -> ArrowBody:
    crlf = _carriage_returns(sample)
    size = path.stat().st_size
    last, last_text = _truncated_last_line(path, size, delim, len(names))
    crlf = crlf or last.endswith(b"\r\n")
    invalid: list[str] = []

    def on_invalid(row: pacsv.InvalidRow) -> str:
        invalid.append(row.text)
        # Any bad row but the truncated last line sends the file to the numpy reader: stop
        # at the first ("error" makes read_csv raise ArrowInvalid).
        return "skip" if row.text == last_text else "error"

    with pa.OSFile(str(path)) as src:  # streamed: the file is never mapped or held whole
        src.seek(body_start)
        table = pacsv.read_csv(
            src,
            read_options=pacsv.ReadOptions(column_names=names, use_threads=True),
            parse_options=pacsv.ParseOptions(delimiter=delim.decode(), quote_char='"',
                                             double_quote=True, escape_char=False,
                                             newlines_in_values=False, ignore_empty_lines=True,
                                             invalid_row_handler=on_invalid),
            convert_options=pacsv.ConvertOptions(
                include_columns=[names[j] for j in keep],
                column_types={names[j]: pa.float64() for j in keep},
                null_values=_NULLS, strings_can_be_null=True, quoted_strings_can_be_null=True,
                check_utf8=False))
    truncated_at = None
    if last_text is not None and invalid == [last_text]:
        invalid = []
        truncated_at = _count_newlines(path) + 1
    if invalid:
        raise _Fallback(f"{len(invalid)} rows with a field count unlike the header's")
    rows = table.num_rows
    values: list[np.ndarray] = []
    missing: list[np.ndarray | None] = []
    pool = pa.default_memory_pool()
    for j in keep:
        col = table.column(names[j])
        # a float column's nulls become NaN; the chunks are copied into one array
        values.append(np.asarray(col.to_numpy(), dtype=np.float64))
        missing.append(np.asarray(col.is_null().to_numpy(), dtype=bool)
                       if col.null_count else None)
        del col
        # Drop the column once copied and hand what arrow's allocator can free back to the
        # system. Columns' chunks share the allocator's pages, so little comes back until
        # the last column goes; still, at a million rows the peak is about 250 MB instead of
        # 265 MB with one release at the end (benchmarks/diagnose_1m.py measures the whole).
        table = table.drop_columns([names[j]])
        pool.release_unused()
    return ArrowBody(values, missing, rows, crlf, truncated_at)


def _carriage_returns(sample: bytes) -> bool:
    """Whether the body's first bytes end lines with CRLF. A carriage return that ends no line
    there (the numpy reader reads it as junk in a line, pyarrow as a line break) makes the
    numpy reader read the file. Past the sample, pyarrow reads one as a line break, as
    Python's universal newlines do; scanning the whole file for one would cost a tenth of the
    read."""
    if b"\r" not in sample:
        return False
    if sample.count(b"\r") != sample.count(b"\r\n") + sample.endswith(b"\r"):
        raise _Fallback("a carriage return inside a line")
    return True


def _truncated_last_line(path: Path, size: int, delim: bytes, ncols: int
                         ) -> tuple[bytes, str | None]:
    """The file's last bytes, and the text of its last line when that is a truncated write (no
    newline and fewer fields than the header): the numpy reader leaves it out with a note, and
    here it is pyarrow's only invalid row."""
    with path.open("rb") as f:
        f.seek(max(0, size - 65536))
        tail = f.read()
    if tail.endswith(b"\n"):
        return tail, None
    cut = tail.rfind(b"\n")
    if cut < 0:
        raise _Fallback("last line longer than 64 KiB")
    line = tail[cut + 1:].rstrip(b"\r")
    if not line.strip():
        return tail, None
    text = line.decode("utf-8", errors="replace")
    from trainmedic.run.csvlog import _split_row  # csv.Error-proof (a CR inside the line)

    if len(_split_row(text, delim.decode())) >= ncols:
        return tail, None
    return tail, text


def _count_newlines(path: Path) -> int:
    n = 0
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
    return n
