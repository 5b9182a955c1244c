"""Metrics exported in long (tidy) form: one row per logged value, naming its metric.

Trackers export a run's metrics this way rather than one column per metric: Comet's
``metrics.csv`` (``metricName,metricValue,timestamp,step,epoch,runContext,offset``), MLflow's
metric tables and ``mlflow.search`` dumps (``key,value,step,timestamp``), pandas'
``df.melt()`` (``step,variable,value``). Read as a wide CSV, the value column is one
meaningless series and the step repeats once per metric (it looks like a resumed run), so the
rows are pivoted: one series per metric name, at the rows' own steps, in log order.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from trainmedic.errors import UnreadableInputError, UnrecognizedInputError
from trainmedic.run.series import Series
from trainmedic.run.table import LogTable, NoteCounter, cell_float

__all__ = ["long_form", "read_long_csv"]

#: Header names of the column that names each row's metric ...
NAME_COLUMNS = ("metricname", "metric_name", "metric", "key", "tag", "variable", "name")
#: ... of the one that holds its value ...
VALUE_COLUMNS = ("metricvalue", "metric_value", "value")
#: ... and of its step (the first present wins; without one, each metric counts its own rows).
STEP_COLUMNS = ("step", "global_step", "iteration", "iter", "_step", "epoch")


def _find(lower: list[str], wanted: tuple[str, ...]) -> int | None:
    for w in wanted:
        if w in lower:
            return lower.index(w)
    return None


def long_form(names: list[str]) -> tuple[int, int, int | None] | None:
    """(name, value, step) column indices when the header is a long-form export, else None:
    a column naming the metric and one holding its value, and no more than a few columns in
    all (a wide log with a ``name`` column of run names has its metrics as columns)."""
    lower = [n.strip().strip('"').lower() for n in names]
    ni, vi = _find(lower, NAME_COLUMNS), _find(lower, VALUE_COLUMNS)
    if ni is None or vi is None or ni == vi or len(lower) > 8:
        return None
    return ni, vi, _find(lower, STEP_COLUMNS)


def read_long_csv(path: Path, cols: tuple[int, int, int | None], delim: str) -> LogTable:
    """Pivot a long-form CSV (see ``long_form``) into one raw series per metric name."""
    ni, vi, si = cols
    table = LogTable(path=str(path), format="csv")
    try:
        text = path.read_text(encoding="utf-8-sig", errors="replace")
    except OSError as exc:
        raise UnreadableInputError(str(path), f"cannot read the file ({exc.strerror}); "
                                   "expected a readable CSV log") from exc
    rows = csv.reader(io.StringIO(text), delimiter=delim)
    header = next(rows, [])
    steps: dict[str, list[int]] = {}
    values: dict[str, list[float]] = {}
    bad = NoteCounter("non_numeric_cell", "rows whose value or step is not a number, skipped")
    for line_no, row in enumerate(rows, start=2):
        if len(row) <= max(ni, vi, si if si is not None else 0):
            continue
        name = row[ni].strip()
        value = cell_float(row[vi].strip())
        step = cell_float(row[si].strip()) if si is not None else float(len(steps.get(name, ())))
        if not name or value is None or step is None or step != step:
            bad.add(line_no, f"{name or '?'}={row[vi][:20]!r}")
            continue
        steps.setdefault(name, []).append(int(step))
        values.setdefault(name, []).append(value)
    if not values:
        raise UnrecognizedInputError(str(path), f"has a long-form header ({', '.join(header[:6])})"
                                     " but no row with a metric name and a numeric value; "
                                     "expected rows such as 'loss,0.52,100'")
    for name, st in steps.items():
        table.columns[name] = Series(np.asarray(st, dtype=np.int64),
                                     np.asarray(values[name], dtype=np.float64))
    table.step_column = header[si].strip() if si is not None else None
    table.note("long_form", f"one row per value ('{header[ni].strip()}' names the metric, "
               f"'{header[vi].strip()}' holds it): pivoted into {len(values)} series")
    bad.flush(table)
    return table
