"""Where a watched run is recorded when its ``run_dir`` already holds a record.

:func:`choose_run_dir` applies ``WatchConfig.if_exists`` before the run store is opened:

* ``"error"``: a new run (``start_step`` 0) on a store holding metric rows raises one
  :class:`~trainmedic.errors.ConfigError` naming the folder and the choices;
* ``"version"``: every run goes to ``<run_dir>/version_N``, N one past the highest version
  holding this rank's store (0 for the first), as Lightning's loggers number runs;
* ``"overwrite"``: the earlier record (the store files only: checkpoints and the user's
  files stay where they are) is moved to ``<run_dir>/.replaced/N/``, never deleted;
* ``"resume"``: the run appends to the record, its steps going on after the last one.

Every rank decides from its own store file, so the ranks of one job agree on the version
and on where the earlier record went without talking to each other.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import re
import sqlite3

from trainmedic.errors import ConfigError
from trainmedic.run.store import _lock_store, _resolve_rank, store_file_name

__all__ = ["RunDirChoice", "choose_run_dir", "last_step", "stop_file_path"]

logger = logging.getLogger(__name__)

_VERSION_RE = re.compile(r"version_(\d+)")
_RANK_FILE_RE = re.compile(r"metrics\.rank(\d+)\.sqlite")
#: Where "overwrite" moves earlier records: a dot folder, which ``trainmedic diagnose`` of
#: the run_dir does not read (it would merge the old record into the new one).
REPLACED_DIR = ".replaced"
_SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")


@dataclasses.dataclass(frozen=True)
class RunDirChoice:
    """The folder the store opens, the step the run starts at, and what to tell the user."""

    path: pathlib.Path
    start_step: int
    refuse_earlier_run: bool
    note: str | None = None


def last_step(path: pathlib.Path) -> int | None:
    """The highest step recorded in the store at ``path``; ``None`` when it holds no metric
    rows, does not exist or cannot be read (the store's own check then decides)."""
    if not path.is_file():
        return None
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=5.0)
        try:
            row = conn.execute("SELECT MAX(step) FROM metrics").fetchone()
        finally:
            conn.close()
    except (OSError, sqlite3.Error):
        return None
    return int(row[0]) if row and row[0] is not None else None


def choose_run_dir(run_dir: str | os.PathLike[str], if_exists: str, *, rank: int | None,
                   world_size: int | None, start_step: int) -> RunDirChoice:
    """Apply ``if_exists`` to ``run_dir`` for this rank. A run with ``start_step`` > 0 is a
    resume: it appends to the record (the latest version's, under ``"version"``)."""
    base = pathlib.Path(run_dir)
    file_rank, world = _resolve_rank(rank, world_size)
    name = store_file_name(file_rank)
    if if_exists == "version":
        latest = _latest_version(base, name)
        if start_step > 0:
            n = max(latest, 0)
            return RunDirChoice(base / f"version_{n}", start_step, False,
                                f"resuming version_{n} at step {start_step}")
        return RunDirChoice(base / f"version_{latest + 1}", 0, True)
    if start_step > 0:
        return RunDirChoice(base, start_step, False, f"resuming at step {start_step}")
    if if_exists == "overwrite":
        try:
            moved = _move_aside(base, file_rank, world)
        except OSError as exc:
            raise ConfigError(f"{base}: if_exists='overwrite' could not move the earlier record "
                              f"to {base / REPLACED_DIR} ({exc}); make the folder writable or "
                              f"use a new run_dir") from exc
        note = f"the earlier record was moved to {moved}" if moved is not None else None
        return RunDirChoice(base, 0, True, note)
    last = last_step(base / name)
    if last is None:
        return RunDirChoice(base, 0, True)
    if if_exists == "resume":
        return RunDirChoice(base, last + 1, False,
                            f"appending to the earlier record, from step {last + 1}")
    raise ConfigError(
        f"{base}: this run_dir already holds a run's record (steps up to {last}); pass "
        f"if_exists='version' to record this run in {base / 'version_N'}, 'resume' to "
        f"append to it, or 'overwrite' to move it aside (to {base / REPLACED_DIR}), or "
        f"use a new run_dir")


def _latest_version(base: pathlib.Path, store_name: str) -> int:
    """The highest N whose ``version_N`` holds the store file ``store_name``; -1: none."""
    try:
        entries = list(os.scandir(base))
    except OSError:
        return -1
    found = [int(m.group(1)) for e in entries
             if (m := _VERSION_RE.fullmatch(e.name)) is not None
             and os.path.exists(os.path.join(e.path, store_name))]
    return max(found, default=-1)


def _records_of(base: pathlib.Path, rank: int | None, world: int) -> list[pathlib.Path]:
    """The store files this rank moves aside: its own, and on rank 0 (or a single process)
    those no rank of this run writes (an earlier run with more ranks, or another layout),
    which ``trainmedic diagnose`` would otherwise merge with this run's."""
    own = base / store_file_name(rank)
    files = [own] if own.is_file() else []
    if rank not in (None, 0):
        return files
    ours = {store_file_name(None)} if rank is None else {
        store_file_name(r) for r in range(world)}
    try:
        names = sorted(e.name for e in os.scandir(base) if e.is_file())
    except OSError:
        return files
    for n in names:
        if (n == store_file_name(None) or _RANK_FILE_RE.fullmatch(n)) and n not in ours:
            files.append(base / n)
    return files


def _move_aside(base: pathlib.Path, rank: int | None, world: int) -> pathlib.Path | None:
    """Move this rank's earlier store files to ``<base>/.replaced/N/`` (N one past the
    highest holding this rank's file), each under its writer's lock: a store a live run
    is writing raises ``StoreLockedError`` and stays where it is. Returns the folder."""
    files = _records_of(base, rank, world)
    if not files:
        return None
    root = base / REPLACED_DIR
    own = store_file_name(rank)
    n = 1 + max((int(e.name) for e in _scandir(root)
                 if e.name.isdigit() and os.path.exists(os.path.join(e.path, own))), default=0)
    dest = root / str(n)
    dest.mkdir(parents=True, exist_ok=True)
    for path in files:
        fd = _lock_store(path)
        try:
            for suffix in _SQLITE_SUFFIXES:
                src = path.with_name(path.name + suffix)
                if src.exists():
                    os.replace(src, dest / src.name)
        finally:
            if fd is not None:
                os.close(fd)
        logger.info("trainmedic: moved the earlier record %s to %s", path, dest)
    return dest


def _scandir(path: pathlib.Path) -> list[os.DirEntry[str]]:
    try:
        return list(os.scandir(path))
    except OSError:
        return []


def stop_file_path(run_dir: pathlib.Path, stop_file: str | os.PathLike[str] | None
                   ) -> pathlib.Path | None:
    """``WatchConfig.stop_file`` as a path: a relative one is under ``run_dir``."""
    if stop_file is None:
        return None
    path = pathlib.Path(stop_file)
    return path if path.is_absolute() else run_dir / path
