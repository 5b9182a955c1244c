"""A training history saved as one JSON object of per-epoch lists.

Keras' ``History.history`` (``json.dump(model.fit(...).history)``) and many hand-written
histories look like ``{"loss": [...], "val_loss": [...], "accuracy": [...]}``: the list index
is the epoch. Lists may differ in length (two models' histories side by side, a metric added
late); each becomes its own series. Keys that are not per-epoch lists (a timestamp, the class
names, ``best_epoch``, a short ``phase_starts`` list) are not series: they are listed in the
mapping as ignored, and phase boundaries become a note.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainmedic.run.names import find_step_column
from trainmedic.run.series import Series
from trainmedic.run.table import LogTable

__all__ = ["read_history"]

_PHASE_WORDS = ("phase", "stage", "milestone")


def read_history(table: LogTable, doc: dict[str, Any]) -> LogTable:
    """Fill ``table`` from an object of lists; steps are epochs counted from 1 unless a list
    named like a step (``epoch``, ``step``) of the same length gives them."""
    from trainmedic.run.jsonlog import _numeric_list, as_number

    table.format = "json_history"
    numeric: dict[str, list[float | None]] = {}
    ignored: dict[str, str] = {}
    for k, v in doc.items():
        if _numeric_list(v):
            numeric[str(k)] = [as_number(x) for x in v]
        elif isinstance(v, list):
            ignored[str(k)] = f"a list of {len(v)} non-numeric values"
        else:
            ignored[str(k)] = "a single value, not a series"
    longest = max(len(v) for v in numeric.values())
    series_keys = [k for k, v in numeric.items() if len(v) >= max(2, longest // 2)]
    for k, v in numeric.items():
        if k in series_keys:
            continue
        ignored[k] = f"a list of {len(v)} values beside series of {longest}"
        if any(w in k.lower() for w in _PHASE_WORDS):
            starts = [int(x) for x in v if x is not None and float(x).is_integer()]
            if starts and len(starts) == len(v) and all(0 <= x <= longest for x in starts):
                table.note("phases", f"'{k}' marks phases starting at epochs "
                           f"{', '.join(str(x) for x in starts)} (list index)")
                table.meta.setdefault("phase_starts", starts)
    step_key = find_step_column(series_keys)
    step_vals = numeric.get(step_key) if step_key else None
    if step_key is not None and step_vals is not None and all(
            x is not None and float(x).is_integer() for x in step_vals):
        table.step_column = step_key
    else:
        step_key = None
        table.note("step_from_row_index", "history lists have no step or epoch list; steps "
                   "are list positions counted from 1 (one per epoch)")
    given = (np.asarray([int(x) for x in step_vals if x is not None], dtype=np.int64)
             if step_key is not None and step_vals is not None else None)
    for k in series_keys:
        if k == step_key:
            continue
        vals = numeric[k]
        if given is not None and given.shape[0] == len(vals):
            steps = given
        else:
            steps = np.arange(1, len(vals) + 1, dtype=np.int64)
        arr = np.asarray([np.nan if x is None else x for x in vals], dtype=np.float64)
        keep = np.asarray([x is not None for x in vals])
        table.columns[k] = Series(steps[keep], arr[keep])
    if ignored:
        table.meta["ignored_columns"] = ignored
    return table
