"""Tables a trainer prints with spaces between the columns.

fastai's recorder (``epoch  train_loss  valid_loss  accuracy  time``), pandas'
``DataFrame.to_string()`` (an index column before the values), Ultralytics' console
(``Epoch  GPU_mem  box_loss ...`` repeated over each epoch's row, the row ending in a progress
bar) and hand-written ``print(f"{step:6d} {loss:8.4f}")`` loops all print a header of names
over rows of values aligned by spaces. No delimiter says where a cell ends, so the CSV reader
cannot take them and the line reader sees numbers without names.

A header is a line of >= 2 names (no cell a number). A row under it holds one value per name
(pandas adds a leading row index): a number, a clock time (``00:05`` and ``1:02:03`` are
seconds), a count over a total (``3/300`` is 3), a size with a unit letter (``3.2G``), or a
word saying "not logged" (``No log``, ``nan``, ``-``). Anything after the last value of a row
is ignored (Ultralytics' progress bar). The table is read when most non-empty lines are such
rows or their headers.

The same table pasted as markdown (``| Epoch | Training Loss | Validation Loss |`` over a
``|---|---|`` rule: the HF Trainer's notebook table in an issue) is read through its pipes, and a
header whose names hold a space (``Epoch  Training Loss  Validation Loss``, the notebook table
copied as text) through its runs of two or more spaces, when the row below has that many values.

A record printed as a block of ``name value`` lines between rules of dashes, one block per
logging call, is read as one row per block: Stable-Baselines3's console table
(``| train/ | |`` opens a section whose names follow, ``|    loss | 12.3 |``) and the tabulate
dumps of rlkit and garage (``epoch  0`` / ``trainer/QF1 Loss  0.12`` between ``----  ----``).

YOLOv3/v5/v7's ``results.txt`` (before ``results.csv``) has no header: 15 fixed columns per
epoch, in the order their ``train.py`` writes them.

The one-column shapes are here too: a header word over one number per line
(``is_single_column``), and numbers alone, named by their file (``bare_numbers``).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from trainmedic.run.counters import TQDM_BAR
from trainmedic.run.series import Series
from trainmedic.run.table import MISSING_TOKENS, LogTable, cell_float
from trainmedic.run.vocabulary import unit_factor

__all__ = ["aligned_rows", "key_value_blocks", "yolo_results_rows", "record_rows",
           "is_single_column", "single_column_table", "bare_numbers", "MIN_ROWS"]

MIN_ROWS = 3
"""Rows of values a header must stand over for the text to be read as a table."""

_NAME = re.compile(r"^[A-Za-z_][\w./%()-]*$")
_CLOCK = re.compile(r"^(?:(\d+):)?(\d{1,2}):(\d{2}(?:\.\d+)?)$")
_COUNT = re.compile(r"^(\d+)/\d+$")
_SIZE = re.compile(r"^([-+]?\d+(?:\.\d+)?)([KMGT])i?B?$")
_SAMPLE_LINES = 400


def _size_mb(cell: str) -> float | None:
    """A size written with its unit letter (Ultralytics' GPU_mem "3.21G") in MB, else None."""
    m = _SIZE.match(cell)
    return float(m.group(1)) * (unit_factor("mem", m.group(2).lower() + "b") or 1.0) \
        if m else None


def _value(cell: str) -> float | None | str:
    """The number a cell holds, None when it says nothing was logged, "" when it is not a
    value at all."""
    v = cell_float(cell)
    if v is not None:
        return v
    low = cell.lower()
    if low in MISSING_TOKENS:
        return None
    m = _CLOCK.match(cell)
    if m:
        return int(m.group(1) or 0) * 3600.0 + int(m.group(2)) * 60.0 + float(m.group(3))
    m = _COUNT.match(cell) or _SIZE.match(cell)
    if m:
        return float(m.group(1))
    return ""


def _header(cells: list[str]) -> bool:
    # ("#" names a counter column after the first - spaCy's "E  #  LOSS ..." - never a
    # markdown title's "# Report")
    return len(cells) >= 2 and all(_NAME.match(c) or (c == "#" and i > 0) or (
        " " in c and _HEADER_WORD.match(c) and cell_float(c) is None)
        for i, c in enumerate(cells))


_RULE = re.compile(r"^:?-{3,}:?$")
_GRID_RULE = re.compile(r"^\s*\+(?:[-=]{3,}\+)+\s*$")


def _cells(line: str) -> list[str] | None:
    """The cells of a line: split on spaces, or on "|" for a markdown table row (people paste
    the HF Trainer's notebook table as one: "| Epoch | Training Loss | Validation Loss |");
    None for the table's |---|---| rule."""
    if _GRID_RULE.match(line):
        return None  # tabulate's grid: "+-------+------+" / "+=======+======+"
    if not line.lstrip().startswith("|"):
        if _DASHES.match(line):
            return None
        piped = [c.strip() for c in line.split("|")]
        # "epoch | train_loss | val_loss" over "1 | 2.20 | 2.40": a table printed with pipes
        # between its cells and none at the ends (each cell one value, or a name of words:
        # "step 10 | loss 2.3" is a line of pairs, not a table row)
        if len(piped) >= 3 and all(c and (" " not in c or (
                _HEADER_WORD.match(c) and not any(ch.isdigit() for ch in c))) for c in piped):
            return piped
        return line.split()
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if cells and all(_RULE.match(c) for c in cells):
        return None
    # an empty cell between pipes is a value not logged at that row (an evaluation every
    # other row), kept in its column
    return [c or "-" for c in cells] if len(cells) >= 2 else line.split()


def _wide_header(line: str, after: list[str]) -> list[str] | None:
    """A header whose names hold one space ("Epoch  Training Loss  Validation Loss", the HF
    notebook table copied as text): cells split on runs of >= 2 spaces or tabs, every one a
    name, as many as the values of the next non-empty line."""
    wide = [c for c in re.split(r"\s{2,}|\t", line.strip()) if c]
    if len(wide) < 2 or not all((_HEADER_WORD.match(c) or (c == "#" and i > 0)) and
                                cell_float(c) is None for i, c in enumerate(wide)):
        return None
    # (the rule of dashes under a header - spaCy's table - is not its first row)
    nxt = next((ln for ln in after if ln.strip() and not _DASHES.match(ln)), "")
    return wide if len(nxt.split()) == len(wide) else None


#: A rule of dash runs under a header ("---  ------  ------------": spaCy's training table).
_DASHES = re.compile(r"^\s*-{3,}(?:\s+-{2,})+\s*$")


def _row(cells: list[str], names: list[str], indexed: bool) -> dict[str, Any] | None:
    """The row a line's cells make under ``names``, or None when they do not fit. Only in an
    indexed table (``_indexed``) can a first cell be a row index."""
    n = len(names)
    vals = [_value(c.rstrip(":")) for c in cells]
    if indexed and len(vals) >= n + 1 and all(v != "" for v in vals[:n + 1]) and \
            isinstance(vals[0], float) and vals[0].is_integer() and \
            (len(vals) == n + 1 or vals[n + 1] == ""):
        cells, vals = cells[1:], vals[1:]  # pandas' row index before the values
    if len(vals) < n or any(v == "" for v in vals[:n]):
        return None
    if len(vals) > n and vals[n] != "" and not cells[n - 1].endswith(":"):
        return None  # more values than names, and no "640:" before a progress bar
    # a size keeps its unit: "3.21G" under GPU_mem is GPU_mem_mb = 3287.04
    row = {(f"{name}_mb" if (mb := _size_mb(c)) is not None else name):
           (mb if mb is not None else v)
           for name, c, v in zip(names, cells[:n], vals[:n], strict=True) if v is not None}
    return row if any(isinstance(v, float) for v in row.values()) else None


def _row_by_position(line: str, header: str, names: list[str]) -> dict[str, Any] | None:
    """A row with empty cells read by where its values stand: each value under the name whose
    column it starts in (Chainer's PrintReport, ESPnet1's ``log``, left-aligns every value at
    its column's start and leaves a column not reported this time blank)."""
    starts, at = [], 0
    for name in names:
        k = header.find(name, at)
        if k < 0:
            return None
        starts.append(k)
        at = k + len(name)
    row: dict[str, Any] = {}
    for m in re.finditer(r"\S+", line):
        col = max((j for j, st in enumerate(starts) if st <= m.start() + 1), default=None)
        v = _value(m.group())
        if col is None or names[col] in row or v == "":
            return None
        row[names[col]] = v
    return row if sum(isinstance(v, float) for v in row.values()) >= 2 else None


def _indexed(after: list[str], n: int) -> bool:
    """pandas' ``to_string()``: the rows under the header hold one cell more than its names,
    the first counting up by one (the row index)."""
    firsts = []
    for line in after:
        cells = line.split()
        if not cells:
            continue
        if len(cells) != n + 1 or cell_float(cells[0]) is None:
            return False
        firsts.append(float(cells[0]))
    return len(firsts) >= 2 and all(b - a == 1 for a, b in zip(firsts, firsts[1:], strict=False))


def aligned_rows(text: str, limit: int | None = None) -> list[tuple[int, dict[str, Any]]] | None:
    """``[(line number, {name: value})]`` of a space-aligned table, or None when ``text`` is
    not one (fewer than ``MIN_ROWS`` rows, or under half of the non-empty lines are rows or
    headers). ``limit`` reads only that many non-empty lines."""
    rows: list[tuple[int, dict[str, Any]]] = []
    names: list[str] | None = None
    indexed = False
    fitted = nonempty = 0
    lines = text.splitlines()
    # Lines above the first header: an excerpt cut inside a table whose header repeats
    # (Ultralytics' console prints it over every epoch's row) starts with a row.
    before: list[tuple[int, list[str]]] = []
    header_line = ""
    drawn: dict[int, bool] = {}  # line number -> the row's progress bar is full
    for i, line in enumerate(lines):
        no = i + 1
        cells = _cells(line.replace("No log", "-"))  # (HF notebooks' table cell)
        if cells is None:  # a markdown table's |---|---| rule
            nonempty += 1
            fitted += 1
            continue
        if not cells:
            continue
        nonempty += 1
        if limit is not None and nonempty > limit:
            break
        if names is None and (wide := _wide_header(line, lines[i + 1:])) and \
                len(wide) != len(cells):
            cells = wide  # names of two words: the rows below hold one value per wide cell
        if _header(cells) and (names is None or cells == names):
            header_line = line
            # the first header, or the same one again (Ultralytics repeats it every epoch); a
            # line of other words inside the table ("Saving checkpoint") is not a header
            if names is None:  # pandas pads its header by the index's width
                indexed = line[:1].isspace() and _indexed(lines[i + 1: i + 6], len(cells))
            elif before:  # the header came again: the rows above its first showing are its
                early = [(n, r) for n, c in before if (r := _row(c, cells, False))]
                rows[:0] = early
                fitted += len(early)
                before = []
            names = cells
            fitted += 1
            continue
        if names is None:
            before.append((no, cells))
            continue
        row = _row(cells, names, indexed)
        if row is None and len(cells) < len(names) and not line.lstrip().startswith("|"):
            row = _row_by_position(line, header_line, names)
        if row is not None:
            rows.append((no, row))
            fitted += 1
            if "%|" in line and (bar := TQDM_BAR.search(line)):
                drawn[no] = int(bar.group("pos")) >= int(bar.group("of"))
    if len(rows) < MIN_ROWS or fitted < 0.5 * nonempty:
        return None
    if any(drawn.values()):
        # A console captured to a file keeps every redraw of a row's progress bar (the
        # epoch's running mean at 10/40, 20/40, ...): the finished draw is the epoch's row.
        rows = [(no, r) for no, r in rows if drawn.get(no, True)]
    _drop_unlogged_nans(rows)
    return rows


def _drop_unlogged_nans(rows: list[tuple[int, dict[str, Any]]]) -> None:
    """pandas prints a value a merged frame does not hold as NaN: a column finite at every
    k-th row (k >= 2) and NaN at every other row is one logged every k rows (an evaluation),
    not a run that went NaN and back; its NaN cells are removed."""
    for name in {k for _, r in rows for k in r}:
        fin = [i for i, (_, r) in enumerate(rows) if isinstance(r.get(name), float)
               and math.isfinite(r[name])]
        gaps = {b - a for a, b in zip(fin, fin[1:], strict=False)}
        if len(fin) < 2 or len(gaps) != 1 or min(gaps) < 2:
            continue
        k = min(gaps)
        nan = [i for i, (_, r) in enumerate(rows) if isinstance(r.get(name), float)
               and math.isnan(r[name])]
        if nan and all((i - fin[0]) % k and i < fin[-1] + k for i in nan):
            for i in nan:
                del rows[i][1][name]


_HEADER_WORD = re.compile(r"^\s*[A-Za-z_][\w./ ()%-]{0,60}\s*$")

#: ``results.txt``'s columns (ultralytics/yolov5 v1-v5 train.py: "%10s" * 2 + "%10.4g" * 6 for
#: epoch/epochs-1, gpu_mem ("3.21G"), the box/obj/cls losses, their total, labels, img_size, then
#: "%10.4g" * 7 for P, R, mAP@.5, mAP@.5:.95 and the validation box/obj/cls losses).
_YOLO_TXT_NAMES = ("gpu_mem", "train/box_loss", "train/obj_loss", "train/cls_loss", "loss",
                   "labels", "img_size", "metrics/precision", "metrics/recall",
                   "metrics/mAP_0.5", "metrics/mAP_0.5:0.95", "val/box_loss", "val/obj_loss",
                   "val/cls_loss")
_YOLO_TXT_ROW = re.compile(r"^\s*(\d+)/\d+\s+(\S+(?:\s+\S+){13})\s*$")


def yolo_results_rows(text: str) -> list[tuple[int, dict[str, Any]]] | None:
    """Rows of a headerless YOLO ``results.txt`` (every non-empty line ``epoch/last gpu_mem``
    and 13 numbers), or None."""
    rows: list[tuple[int, dict[str, Any]]] = []
    for i, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        m = _YOLO_TXT_ROW.match(line)
        vals = [_value(c) for c in m.group(2).split()] if m else [""]
        if m is None or any(v == "" for v in vals):
            return None
        row = {k: v for k, v in zip(_YOLO_TXT_NAMES, vals, strict=True) if v is not None}
        if (mb := _size_mb(m.group(2).split()[0])) is not None:
            del row["gpu_mem"]
            row["gpu_mem_mb"] = mb
        rows.append((i + 1, {"epoch": float(m.group(1)), **row}))
    return rows if len(rows) >= 2 else None


def record_rows(text: str, limit: int | None = None
                ) -> tuple[str, list[tuple[int, dict[str, Any]]]] | None:
    """A log of one fixed shape per record, as (how it was read, rows): blocks of
    ``name value`` lines, or YOLO's headerless ``results.txt``."""
    if (rows := key_value_blocks(text, limit)) is not None:
        return "blocks of 'name value' lines between rules of dashes, one row per block", rows
    if (rows := yolo_results_rows(text)) is not None:
        return "a headerless YOLO results.txt: 15 columns in the order its train.py writes", rows
    return None


#: A rule of dashes (tabulate leaves gaps between its columns' rules).
_BLOCK_RULE = re.compile(r"^\s*\|?-{5,}[-\s|]*$")
#: ``name  value`` or ``| name | value |``: a name, then a value after a pipe or >= 2 spaces.
_KV_LINE = re.compile(r"^\s*\|?\s*(?P<name>[A-Za-z_][\w./%()-]*(?: [\w./%()-]+)*?)\s*"
                      r"(?:\|\s*|\s{2,})(?P<value>\S+)?\s*\|?\s*$")


def key_value_blocks(text: str, limit: int | None = None
                     ) -> list[tuple[int, dict[str, Any]]] | None:
    """``[(line number, {name: value})]``, one row per block of ``name value`` lines between
    rules of dashes, or None when ``text`` is not such a log (fewer than ``MIN_ROWS`` blocks
    of >= 2 numbers, or under half of the non-empty lines inside them). A name with no value
    that ends in "/" opens a section: the names under it are read as ``section/name``."""
    if "-----" not in text:
        return None
    rows: list[tuple[int, dict[str, Any]]] = []
    row: dict[str, Any] = {}
    start = 0
    section = ""
    used = nonempty = 0
    for i, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        nonempty += 1
        if limit is not None and nonempty > limit:
            break
        if nonempty == _SAMPLE_LINES and (not rows or used < 0.5 * nonempty):
            return None  # (a long console log with a dashed line in it: decided early)
        if _BLOCK_RULE.match(line):
            used += 1
            if sum(isinstance(v, float) for v in row.values()) >= 2:
                rows.append((start, row))
            row, section, start = {}, "", i + 1
            continue
        m = _KV_LINE.match(line)
        if m is None:
            continue
        name, value = m.group("name").strip(), m.group("value")
        if value is None or value == "|":
            if name.endswith("/"):
                section, used = name, used + 1
            continue
        v = _value(value)
        if v == "":
            continue
        used += 1
        row[section + name if not name.startswith(section) else name] = v
    if sum(isinstance(v, float) for v in row.values()) >= 2:
        rows.append((start, row))
    if len(rows) < MIN_ROWS or used < 0.5 * nonempty:
        return None
    return rows


def is_single_column(text: str) -> bool:
    """A header word over a column of numbers (``loss`` then one value per line)."""
    lines = [ln for ln in text.splitlines()[:60] if ln.strip()]
    if len(lines) < 3 or not _HEADER_WORD.match(lines[0]) or cell_float(lines[0]) is not None:
        return False
    body = lines[1:]
    if len(body) > 2 and not body[-1].endswith("\n"):
        body = body[:-1] if cell_float(body[-1].strip()) is None else body
    return all(cell_float(b.strip()) is not None for b in body)


def bare_numbers(text: str) -> bool:
    """One number per line and nothing else (``np.savetxt("loss.txt", losses)``): a series
    whose name is the file's."""
    lines = [ln.strip() for ln in text.splitlines()[:60] if ln.strip()]
    if len(lines) > 2 and not text.endswith("\n"):
        lines = lines[:-1]  # a last line cut at the sniffed bytes
    return len(lines) >= 3 and all(cell_float(ln) is not None for ln in lines)


def single_column_table(table: LogTable, text: str) -> LogTable:
    """``table`` filled from a one-column text (``is_single_column``): steps are row numbers."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    name = lines[0]
    vals = [cell_float(v) for v in lines[1:]]
    vals_f = np.asarray([np.nan if v is None else v for v in vals], dtype=np.float64)
    table.format = "csv"
    table.columns[name] = Series(np.arange(1, len(vals_f) + 1, dtype=np.int64), vals_f)
    table.note("step_from_row_index", f"one column ('{name}') and no step column; steps are "
               "row numbers counted from 1")
    return table
