"""Reading a run store (written by :mod:`trainmedic.run.store`): the whole record as a ``Run``
(``trainmedic diagnose``), or the rows of a range of steps (a resumed watcher's live alerts).

Readers never block the writer (WAL) and leave no files behind in someone else's folder. This
module must not import torch: ``trainmedic diagnose`` loads it.
"""

from __future__ import annotations

import json
import logging
import math
import pathlib
import re
import sqlite3
from typing import Any

import numpy as np

from trainmedic.errors import UnreadableInputError, UnrecognizedInputError
from trainmedic.run.series import Run, RunEvent, Series

__all__ = ["STORE_FORMAT", "connect_ro", "is_store_file", "read_rows", "read_store"]

logger = logging.getLogger(__name__)

#: Written to ``meta.store_format``; a reader refuses a newer major version it cannot parse.
STORE_FORMAT = "trainmedic.store/1"

_SQLITE_MAGIC = b"SQLite format 3\x00"
_RANK_RE = re.compile(r"rank(\d+)")


def connect_ro(path: pathlib.Path) -> sqlite3.Connection:
    """Open read-only without leaving files behind.

    With no ``-wal`` file next to it the store is closed (or was checkpointed): open it
    ``immutable`` so SQLite creates no ``-wal``/``-shm`` files in someone else's folder. With a
    ``-wal`` (a live writer, or a crash) open ``mode=ro`` so the WAL's committed rows are read.
    """
    uri = path.resolve().as_uri()
    wal = path.with_name(path.name + "-wal")
    if not wal.exists():
        return sqlite3.connect(uri + "?immutable=1", uri=True)
    try:
        conn = sqlite3.connect(uri + "?mode=ro", uri=True, timeout=5.0)
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return conn
    except sqlite3.Error:
        # A read-only folder without the -shm file cannot be opened "ro" in WAL mode;
        # immutable reads the main file alone (rows still only in the WAL are not seen).
        logger.warning("trainmedic: %s: cannot read its WAL file; rows not yet checkpointed "
                       "are skipped", path)
        return sqlite3.connect(uri + "?immutable=1", uri=True)


def is_store_file(path: pathlib.Path) -> bool:
    """True when ``path`` is a trainmedic run store (an SQLite file with our tables)."""
    path = pathlib.Path(path)
    try:
        if not path.is_file():
            return False
        with path.open("rb") as fh:
            if fh.read(16) != _SQLITE_MAGIC:
                return False
        conn = connect_ro(path)
        try:
            names = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        finally:
            conn.close()
    except (OSError, sqlite3.Error):
        return False
    return {"meta", "metrics", "metric_names"} <= names


def read_store(path: pathlib.Path) -> Run:
    """Read a run store into a ``Run``: every series in log order, keyed by this file's rank.

    The rank comes from the file name (``rank<N>``) or else from the stored meta; a
    single-process store gives rank ``None``. Raises ``UnrecognizedInputError`` for an SQLite
    file that is not a run store and ``UnreadableInputError`` for a corrupt one.
    """
    path = pathlib.Path(path)
    if not is_store_file(path):
        if path.is_file():
            raise UnrecognizedInputError(
                str(path), "not a trainmedic run store (expected an SQLite file with the "
                "tables meta, metric_names and metrics, as written by trainmedic.watch)")
        raise UnreadableInputError(str(path), "no such file")
    try:
        conn = connect_ro(path)
        try:
            meta: dict[str, Any] = {}
            for key, raw in conn.execute("SELECT key, value FROM meta"):
                try:
                    meta[str(key)] = json.loads(raw)
                except (TypeError, ValueError):
                    meta[str(key)] = raw
            names = dict(conn.execute("SELECT id, name FROM metric_names").fetchall())
            # One query in insertion order; NULL (a NaN when written) becomes NaN.
            rows = conn.execute(
                "SELECT step, metric_id, value FROM metrics ORDER BY rowid").fetchall()
            has_events = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' "
                                      "AND name='events'").fetchone() is not None
            event_rows = (conn.execute("SELECT step, kind, data FROM events ORDER BY rowid")
                          .fetchall() if has_events else [])
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise UnreadableInputError(
            str(path), f"the run store is damaged and SQLite cannot read it ({exc})") from None
    fmt = str(meta.get("store_format", STORE_FORMAT))
    if not fmt.startswith("trainmedic.store/1"):
        raise UnrecognizedInputError(
            str(path), f"run store format {fmt!r} is newer than this trainmedic reads "
            f"({STORE_FORMAT}); upgrade trainmedic")
    m = _RANK_RE.search(path.name)
    rank: int | None
    if m:
        rank = int(m.group(1))
    elif isinstance(meta.get("rank"), int) and int(meta.get("world_size") or 1) > 1:
        rank = int(meta["rank"])
    else:
        rank = None
    run = Run(source=str(path), meta={**meta, "format": "trainmedic.store"})
    for step, kind, raw in event_rows:
        try:
            data = json.loads(raw)
        except (TypeError, ValueError):
            data = {"raw": raw}
        run.events.append(RunEvent(int(step), str(kind),
                                   data if isinstance(data, dict) else {"value": data}, rank))
    if rows:
        arr = np.array(rows, dtype=np.float64)  # None → nan
        steps = arr[:, 0].astype(np.int64)
        ids = arr[:, 1].astype(np.int64)
        values = arr[:, 2]
        order = np.argsort(ids, kind="stable")  # stable: log order kept within a metric
        sorted_ids = ids[order]
        bounds = np.flatnonzero(np.diff(sorted_ids)) + 1
        for chunk in np.split(order, bounds):
            mid = int(ids[chunk[0]])
            name = str(names.get(mid, f"metric_{mid}"))
            run.series[(name, rank)] = Series(steps[chunk], values[chunk])
    return run


def read_rows(path: pathlib.Path, *, from_step: int,
              before_step: int) -> list[tuple[int, dict[str, float]]]:
    """The rows of steps ``from_step <= step < before_step``, one per step in step order:
    ``{metric: value}`` (NaN for a value stored as NULL), the latest logged value of a metric
    at a step winning, as a resumed run that replayed steps left them. What a resumed watcher
    feeds its live alerts so that their window does not start empty at the resume."""
    conn = connect_ro(pathlib.Path(path))
    try:
        names = dict(conn.execute("SELECT id, name FROM metric_names").fetchall())
        found = conn.execute("SELECT step, metric_id, value FROM metrics WHERE step >= ? AND "
                             "step < ? ORDER BY rowid", (int(from_step), int(before_step)))
        by_step: dict[int, dict[str, float]] = {}
        for step, mid, value in found:
            by_step.setdefault(int(step), {})[str(names.get(mid, f"metric_{mid}"))] = (
                math.nan if value is None else float(value))
    finally:
        conn.close()
    return sorted(by_step.items())
