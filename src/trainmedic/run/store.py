"""The run store: trainmedic's own record of a training run, in SQLite, one file per rank.

Layout of ``<run_dir>``:

* ``metrics.sqlite`` for a single process, ``metrics.rank<N>.sqlite`` for rank ``N`` of a
  multi-process job (``RANK``/``WORLD_SIZE`` set by torchrun, or ``rank=`` given). One file per
  rank means no cross-process locking on the hot path and a rank's record survives another
  rank's crash.
* Tables: ``metrics(step, metric_id, value)`` in long format (one row per scalar, in log
  order, so the order itself stays evidence of a resume), ``metric_names(id, name)``, and
  ``events(step, kind, data)`` (JSON data: what the NaN guard localized, live findings), and
  ``meta(key, value)`` with JSON values (start time, rank, world size, host, version, and
  whatever the user adds with :meth:`RunStore.set_meta`). The view ``metrics_long`` joins
  the names in, for people reading the file with the ``sqlite3`` shell.
* WAL journal mode: readers (``trainmedic diagnose`` on a live run) never block the writer,
  and a crash loses at most the rows not yet committed (https://sqlite.org/wal.html).

The training thread only puts ``(step, metrics)`` on a queue; a writer thread converts,
batches and commits (every ``flush_rows`` rows or ``flush_interval_s`` seconds, and on close),
so logging never waits for the disk. A store that cannot be opened (unwritable folder) logs a
warning and turns into a no-op: losing telemetry must never stop training. Two writers on one
run_dir and rank are refused (an ``flock`` on ``<file>.lock``, released by the OS even if the
process dies, so a crash leaves no stale lock).

SQLite stores a NaN REAL as NULL; the reader (``store_reader``, re-exported here) maps NULL
back to NaN. inf round-trips as is.

This module must not import torch: ``trainmedic diagnose`` loads it.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import pathlib
import socket
import sqlite3
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from trainmedic.errors import ConfigError, StoreLockedError
from trainmedic.run.store_reader import STORE_FORMAT, is_store_file, read_rows, read_store

try:  # POSIX advisory locks; on Windows two writers are not detected (documented below).
    import fcntl
except ImportError:  # pragma: no cover - not on the CI platform
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "RunStore",
    "StoreLockedError",
    "remove_store",
    "STORE_FORMAT",
    "store_file_name",
    "store_path",
    "is_store_file",
    "read_store",
    "read_rows",
]

logger = logging.getLogger(__name__)

#: Meta keys the store writes itself; :meth:`RunStore.set_meta` may not overwrite them.
RESERVED_META = frozenset(
    {"store_format", "started_at", "started_at_unix", "rank", "world_size", "host", "pid",
     "trainmedic_version", "sessions"}
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS metric_names (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS metrics (
    step INTEGER NOT NULL,
    metric_id INTEGER NOT NULL REFERENCES metric_names(id),
    value REAL
);
CREATE TABLE IF NOT EXISTS events (step INTEGER NOT NULL, kind TEXT NOT NULL, data TEXT NOT NULL);
CREATE VIEW IF NOT EXISTS metrics_long AS
    SELECT m.rowid AS seq, m.step AS step, n.name AS metric, m.value AS value
    FROM metrics AS m JOIN metric_names AS n ON n.id = m.metric_id;
"""


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def _resolve_rank(rank: int | None, world_size: int | None) -> tuple[int | None, int]:
    """(rank for the file name, world size). ``None`` rank means a single-process store.

    An explicit ``rank`` always gets a rank file. Otherwise torchrun's ``RANK``/``WORLD_SIZE``
    decide: a world of more than one process gets rank files, a world of one a plain file.
    """
    if rank is not None:
        if rank < 0:
            raise ConfigError(f"rank must be >= 0, got {rank}")
        ws: int = world_size if world_size is not None else (_env_int("WORLD_SIZE") or rank + 1)
        return rank, max(ws, rank + 1)
    env_rank, env_ws = _env_int("RANK"), _env_int("WORLD_SIZE")
    ws_env = world_size if world_size is not None else env_ws
    if env_rank is not None and ws_env is not None and ws_env > 1:
        return env_rank, ws_env
    return None, 1


def store_file_name(rank: int | None) -> str:
    """``metrics.sqlite`` for a single process, ``metrics.rank<N>.sqlite`` for rank N."""
    return "metrics.sqlite" if rank is None else f"metrics.rank{int(rank)}.sqlite"


def store_path(run_dir: str | os.PathLike[str], rank: int | None = None) -> pathlib.Path:
    """Where the store of ``rank`` lives under ``run_dir``."""
    return pathlib.Path(run_dir) / store_file_name(rank)


class RunStore:
    """Append-only metric log of one rank of one run, written off the training thread.

    >>> with RunStore("runs/exp1") as store:          # doctest: +SKIP
    ...     store.set_meta(model="gpt-tiny", batch_size=16)
    ...     store.log(0, {"loss": 4.2, "lr": 1e-3})

    ``rank``/``world_size`` default to torchrun's environment. Reopening an existing store
    appends to it (a resumed run continues its record; replayed steps stay visible as such);
    ``refuse_earlier_run=True`` (a new run) refuses a store that already holds metric rows.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        rank: int | None = None,
        world_size: int | None = None,
        flush_rows: int = 512,
        flush_interval_s: float = 1.0,
        meta: Mapping[str, Any] | None = None,
        refuse_earlier_run: bool = False,
    ) -> None:
        if flush_rows < 1:
            raise ConfigError(f"flush_rows must be >= 1, got {flush_rows}")
        if not flush_interval_s > 0:
            raise ConfigError(f"flush_interval_s must be > 0, got {flush_interval_s}")
        self.rank, self.world_size = _resolve_rank(rank, world_size)
        self.run_dir = pathlib.Path(run_dir)
        self.path = store_path(self.run_dir, self.rank)
        self.flush_rows = int(flush_rows)
        self.flush_interval_s = float(flush_interval_s)
        # The training thread appends to a deque (atomic under the GIL) and wakes the writer
        # only every ``flush_rows`` rows: waking it on every step would make the two threads
        # trade the GIL each step, which showed as 2-6 ms hiccups on sub-millisecond steps.
        self._items: collections.deque[Any] = collections.deque()
        self._wake = threading.Event()
        self._rows_since_wake = 0
        self._stopping = False
        self._closed = False
        self._enabled = False
        self._lock_fd: int | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.rows_written = 0
        if meta:
            self._check_meta_keys(meta)
        try:
            self._open(dict(meta or {}), refuse_earlier_run=refuse_earlier_run)
        except StoreLockedError:
            raise
        except ConfigError:
            self._release_lock()
            raise
        except (OSError, sqlite3.Error) as exc:
            self._release_lock()
            logger.warning(
                "trainmedic: cannot write the run store at %s (%s); training goes on without "
                "recording metrics", self.path, exc)
            return
        self._enabled = True
        self._thread = threading.Thread(target=self._writer, daemon=True,
                                        name=f"trainmedic-store-{self.path.name}")
        self._thread.start()

    # -- opening ----------------------------------------------------------------------
    def _open(self, meta: dict[str, Any], *, refuse_earlier_run: bool) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        conn = sqlite3.connect(str(self.path), timeout=5.0, check_same_thread=False,
                               isolation_level=None)
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                logger.warning("trainmedic: %s could not switch to WAL (got %s)", self.path, mode)
            # NORMAL in WAL mode: a committed batch survives a process crash; only an OS
            # crash or power loss can drop the last commits (https://sqlite.org/pragma.html).
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
            self._names: dict[str, int] = dict(
                (str(n), int(i)) for i, n in conn.execute("SELECT id, name FROM metric_names"))
            if refuse_earlier_run:
                self._refuse_earlier_run(conn)
            now = time.time()
            from trainmedic._version import __version__

            own = {
                "store_format": STORE_FORMAT,
                "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                "started_at_unix": now,
                "rank": self.rank,
                "world_size": self.world_size,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "trainmedic_version": __version__,
            }
            conn.execute("BEGIN")
            # A reopened store keeps its first start time; "sessions" counts the openings.
            conn.executemany("INSERT OR IGNORE INTO meta(key, value) VALUES (?, ?)",
                             [(k, json.dumps(v)) for k, v in own.items()])
            for k in ("pid", "host"):
                conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                             (k, json.dumps(own[k])))
            row = conn.execute("SELECT value FROM meta WHERE key='sessions'").fetchone()
            sessions = (int(json.loads(row[0])) if row else 0) + 1
            conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('sessions', ?)",
                         (json.dumps(sessions),))
            for k, v in meta.items():
                conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                             (k, json.dumps(v, default=str)))
            conn.execute("COMMIT")
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _refuse_earlier_run(self, conn: sqlite3.Connection) -> None:
        """Raise ``ConfigError`` if the store holds metric rows; called before the meta is
        touched, so a refused run leaves the earlier one's record exactly as it was."""
        last = conn.execute("SELECT step FROM metrics ORDER BY rowid DESC LIMIT 1").fetchone()
        if last:
            raise ConfigError(
                f"{self.path}: this run_dir already holds a run's record (up to step "
                f"{int(last[0])}); a new run from step 0 would interleave with it. Use a new "
                f"run_dir, delete that file, or pass start_step= the step this run resumes at")

    def _acquire_lock(self) -> None:
        self._lock_fd = _lock_store(self.path)

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            try:
                os.close(self._lock_fd)  # closing the descriptor drops the flock
            finally:
                self._lock_fd = None

    # -- the training thread's side ---------------------------------------------------
    @property
    def enabled(self) -> bool:
        """False when the store could not be opened or has failed: logging is a no-op."""
        return self._enabled and self._error is None and not self._closed

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Record ``metrics`` (name → number) at ``step``. Returns at once; never raises on I/O.

        Values are converted with ``float()`` on the writer thread; ``None`` values are
        skipped.
        """
        if not self._enabled or self._closed or self._error is not None:
            return
        self._items.append((int(step), dict(metrics)))
        self._rows_since_wake += len(metrics)
        if self._rows_since_wake >= self.flush_rows:
            self._rows_since_wake = 0
            self._wake.set()

    def set_meta(self, values: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        """Add free-form, JSON-serializable facts about the run (model, batch size, ...)."""
        merged = {**(values or {}), **kwargs}
        self._check_meta_keys(merged)
        if not self._enabled or self._closed or self._error is not None:
            return
        self._items.append(("meta", merged))

    def event(self, step: int, kind: str, data: Mapping[str, Any] | None = None) -> None:
        """Record a non-numeric event at ``step`` (``kind`` a short code, ``data`` JSON-able)."""
        if not self._enabled or self._closed or self._error is not None:
            return
        self._items.append(("event", (int(step), str(kind), dict(data or {}))))
        self._wake.set()  # rare and important: commit it soon

    @staticmethod
    def _check_meta_keys(meta: Mapping[str, Any]) -> None:
        clash = sorted(set(meta) & RESERVED_META)
        if clash:
            raise ConfigError(
                f"set_meta: {clash} are written by the store itself; use other key names")

    def flush(self, timeout_s: float = 10.0) -> None:
        """Block until everything logged so far is committed (for tests and checkpoints)."""
        if not self.enabled:
            return
        done = threading.Event()
        self._items.append(("flush", done))
        self._wake.set()
        done.wait(timeout_s)

    def close(self) -> None:
        """Commit what is queued, stop the writer thread and release the lock. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._stopping = True
            self._wake.set()
            self._thread.join()
            self._thread = None
        self._release_lock()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            if not self._closed and self._thread is not None:
                self.close()
        except Exception:
            pass

    # -- the writer thread ------------------------------------------------------------
    def _writer(self) -> None:
        conn = self._conn
        items = self._items
        try:
            while True:
                # Wake every flush_interval_s, or sooner when flush_rows rows, a flush() or
                # close() asks; then drain what is queued and commit it in one transaction.
                self._wake.wait(self.flush_interval_s)
                self._wake.clear()
                stop = self._stopping
                rows: list[tuple[int, int, float | None]] = []
                events: list[threading.Event] = []
                while items:
                    item = items.popleft()
                    if item[0] == "meta":
                        self._commit(conn, rows)
                        rows = []
                        conn.execute("BEGIN")
                        conn.executemany(
                            "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                            [(k, json.dumps(v, default=str)) for k, v in item[1].items()])
                        conn.execute("COMMIT")
                    elif item[0] == "event":
                        self._commit(conn, rows)
                        rows = []
                        step, kind, data = item[1]
                        conn.execute("INSERT INTO events(step, kind, data) VALUES (?, ?, ?)",
                                     (step, kind, json.dumps(data, default=str)))
                    elif item[0] == "flush":
                        events.append(item[1])
                    else:
                        step, metrics = item
                        for name, value in metrics.items():
                            if value is None:
                                continue
                            rows.append((step, self._metric_id(conn, name), _to_float(value)))
                self._commit(conn, rows)
                for ev in events:
                    ev.set()
                if stop and not items:
                    break
        except BaseException as exc:  # disk full, I/O error: stop recording, keep training
            self._error = exc
            logger.warning("trainmedic: the run store %s stopped recording: %s", self.path, exc)
            _drain_flush_events(items)
        finally:
            try:
                if self._error is None:
                    # Fold the WAL back and leave WAL mode, so the closed store is one
                    # self-contained file that a reader can open without writing beside it.
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    conn.execute("PRAGMA journal_mode=DELETE")
            except sqlite3.Error:
                pass
            conn.close()

    def _metric_id(self, conn: sqlite3.Connection, name: str) -> int:
        mid = self._names.get(name)
        if mid is None:
            cur = conn.execute("INSERT OR IGNORE INTO metric_names(name) VALUES (?)", (name,))
            if cur.lastrowid and cur.rowcount:
                mid = int(cur.lastrowid)
            else:
                mid = int(conn.execute("SELECT id FROM metric_names WHERE name=?",
                                       (name,)).fetchone()[0])
            self._names[name] = mid
        return mid

    def _commit(self, conn: sqlite3.Connection, rows: list[tuple[int, int, float | None]]) -> None:
        if not rows:
            return
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO metrics(step, metric_id, value) VALUES (?, ?, ?)", rows)
        conn.execute("COMMIT")
        self.rows_written += len(rows)


def _lock_store(path: pathlib.Path) -> int | None:
    """Take the writer's lock of the store at ``path`` (an ``flock`` on ``<path>.lock``);
    return the descriptor that holds it (closing it releases the lock). Raises
    ``StoreLockedError`` when another writer holds it."""
    if fcntl is None:  # pragma: no cover
        return None
    lock_path = path.with_name(path.name + ".lock")
    fd = os.open(str(lock_path), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreLockedError(
            f"{path}: another writer already holds this run store (lock {lock_path}); "
            f"give each process its own run_dir, or its own rank (rank=N or torchrun's RANK)"
        ) from None
    except OSError:
        os.close(fd)
        raise
    return fd


def remove_store(path: str | os.PathLike[str]) -> None:
    """Delete the store at ``path`` (with its WAL and shared-memory files), under its
    writer's lock: a store a live run is writing raises ``StoreLockedError`` and is left as
    it is. The lock file stays (unlinking it would let two writers lock different files)."""
    path = pathlib.Path(path)
    fd = _lock_store(path)
    try:
        for suffix in ("", "-wal", "-shm", "-journal"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)
    finally:
        if fd is not None:
            os.close(fd)


def _to_float(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x  # SQLite would turn NaN into NULL anyway


def _drain_flush_events(items: collections.deque[Any]) -> None:
    while items:
        item = items.popleft()
        if isinstance(item, tuple) and item and item[0] == "flush":
            item[1].set()


# -- reading ------------------------------------------------------------------------------
