"""One file holding every rank's rows, told apart by a ``rank`` column.

Per-rank logs concatenated into one table (``pd.concat`` of each rank's frame, or every rank
appending to one CSV) repeat each step once per rank. Read as one series, the steps go back
at every rank's block (a false resume) and a slow rank is averaged away. A column named like
a rank, holding 2-64 small whole numbers with >= 3 rows each, splits the table into one per
rank, as per-rank files would be.
"""

from __future__ import annotations

import numpy as np

from trainmedic.run.series import Series
from trainmedic.run.table import LogTable

__all__ = ["split_by_rank_column", "RANK_COLUMNS"]

RANK_COLUMNS = ("rank", "global_rank", "local_rank", "process_rank", "proc_rank",
                "process_index", "worker_rank")
"""Column names (lower case) that say which rank a row belongs to."""


def split_by_rank_column(table: LogTable) -> list[LogTable] | None:
    """One table per rank, or None when ``table`` has no usable rank column. Only columns
    written on every row can be split row by row; a sparse one is left out, with a note."""
    if table.rank is not None:
        return None
    name = next((c for c in table.columns if c.strip().lower() in RANK_COLUMNS), None)
    if name is None:
        return None
    col = table.columns[name]
    ranks = col.values
    if ranks.size < 6 or not np.all(np.isfinite(ranks)) or \
            not np.all(ranks == np.round(ranks)) or ranks.min() < 0:
        return None
    values, counts = np.unique(ranks.astype(np.int64), return_counts=True)
    if not 2 <= values.size <= 64 or counts.min() < 3:
        return None
    # The rank must be on every row (a blank cell cannot be given to a rank), and the ranks
    # must log the same steps (a metric that happens to be called "rank" does not repeat them).
    if ranks.size < max(len(s) for s in table.columns.values()):
        return None
    by_rank = [set(col.steps[ranks == r].tolist()) for r in values.tolist()]
    if len(by_rank[0] & by_rank[1]) < 0.5 * min(len(by_rank[0]), len(by_rank[1])):
        return None
    dense = [c for c, s in table.columns.items() if c != name and len(s) == ranks.size
             and np.array_equal(s.steps, col.steps)]
    sparse = [c for c in table.columns if c != name and c not in dense]
    out = []
    for r in values.tolist():
        mask = ranks == r
        t = LogTable(path=table.path, format=table.format, step_column=table.step_column,
                     meta=dict(table.meta), notes=list(table.notes), rank=int(r))
        for c in dense:
            s = table.columns[c]
            t.columns[c] = Series(s.steps[mask], s.values[mask])
        t.note("rank_column", f"rank {r}'s rows read from the '{name}' column")
        if sparse:
            t.note("rank_column", "columns not written on every row could not be given to a "
                   f"rank and were left out: {', '.join(sparse[:6])}")
        out.append(t)
    return out
