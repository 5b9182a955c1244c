"""The hang folder: what each rank's watchdog writes and what ``trainmedic dist diagnose``
reads. Plain files, one set per rank, so a rank's record survives another rank's death and
a reader needs neither torch nor SQLite.

Layout of ``<run_dir>/hang/`` (or ``$TRAINMEDIC_HANG_DIR``, set by ``trainmedic dist watch``):

* ``heartbeat.rank<N>.json``: the rank's latest heartbeat (last step, wall time, phase,
  recent step times), replaced atomically at most every heartbeat interval. A file, not only
  a run-store row: ``dist watch`` polls it from another process and a dead rank leaves its
  last one behind; the watchdog also records each heartbeat as a run-store event when it is
  given the watcher's store.
* ``rank<N>.hang<K>.stacks.txt``: every thread's Python stack (``faulthandler``) at the K-th
  hang of that rank; ``rank<N>.hang<K>.fr.json``: torch's flight-recorder buffer then;
  ``rank<N>.hang<K>.exception.txt``: the exception that ended the stall, if one did;
  ``rank<N>.hang<K>.json``: what the watchdog knew (step, phase, limit, heartbeats), written
  last, so its presence means the dump is complete.
* ``signal.rank<N>.pid<P>.txt`` (and ``.fr.json``): what the stack hook
  (:mod:`trainmedic.dist.stack_hook`) wrote when signalled: a data-loader worker's stack, or
  any process of a job run under ``dist watch`` without trainmedic's watchdog.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
from collections.abc import Mapping
from typing import Any

from trainmedic.dist.stack_hook import HANG_DIR_ENV, SIGNAL_PREFIX
from trainmedic.errors import InputError

__all__ = ["DUMP_SCHEMA", "HangRecord", "RankDump", "SignalDump", "dump_paths",
           "heartbeat_path", "next_dump_index", "read_hang_dir", "resolve_hang_dir",
           "write_json_atomic"]

DUMP_SCHEMA = "trainmedic.dist.hang_dump/1"
_HEARTBEAT_RE = re.compile(r"heartbeat\.rank(\d+)\.json")
_DUMP_RE = re.compile(r"rank(\d+)\.hang(\d+)\.json")
_SIGNAL_RE = re.compile(re.escape(SIGNAL_PREFIX) + r"(rank(\d+)|proc)\.pid(\d+)\.txt")
_HEADER = "# trainmedic-stack-hook "


def resolve_hang_dir(run_dir: str | os.PathLike[str] | None,
                     dump_dir: str | os.PathLike[str] | None = None) -> pathlib.Path:
    """``dump_dir`` if given, else ``$TRAINMEDIC_HANG_DIR``, else ``<run_dir>/hang``."""
    if dump_dir is not None:
        return pathlib.Path(dump_dir)
    env = os.environ.get(HANG_DIR_ENV)
    if env:
        return pathlib.Path(env)
    if run_dir is None:
        raise InputError("<none>", "no run_dir and no dump_dir for the hang watchdog; pass "
                                   "run_dir= or dump_dir=")
    return pathlib.Path(run_dir) / "hang"


def heartbeat_path(hang_dir: pathlib.Path, rank: int) -> pathlib.Path:
    return hang_dir / f"heartbeat.rank{rank}.json"


def dump_paths(hang_dir: pathlib.Path, rank: int, index: int) -> dict[str, pathlib.Path]:
    """The files of one rank's ``index``-th hang dump, by part."""
    stem = f"rank{rank}.hang{index}"
    return {part: hang_dir / f"{stem}.{suffix}" for part, suffix in (
        ("meta", "json"), ("stacks", "stacks.txt"), ("fr", "fr.json"),
        ("exception", "exception.txt"))}


def next_dump_index(hang_dir: pathlib.Path, rank: int) -> int:
    """One past the highest dump index ``rank`` has in ``hang_dir`` (0 for none)."""
    found = [-1]
    for p in hang_dir.glob(f"rank{rank}.hang*.json"):
        index = p.name[len(f"rank{rank}.hang"):-len(".json")]
        if index.isdigit():
            found.append(int(index))
    return max(found) + 1


def write_json_atomic(path: pathlib.Path, doc: Mapping[str, Any]) -> None:
    """Write then rename: a reader never sees half a file (rename is atomic on POSIX)."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, default=str))
    os.replace(tmp, path)


@dataclasses.dataclass(frozen=True)
class RankDump:
    """One rank's latest complete hang dump."""

    rank: int
    index: int
    meta: dict[str, Any]
    stacks: str
    """faulthandler's text; empty when the file is missing."""
    flight_recorder: dict[str, Any] | None
    exception: str | None


@dataclasses.dataclass(frozen=True)
class SignalDump:
    """What one process's stack hook wrote when signalled."""

    path: pathlib.Path
    rank: int | None
    header: dict[str, Any]
    stacks: str
    flight_recorder: dict[str, Any] | None


@dataclasses.dataclass(frozen=True)
class HangRecord:
    """Everything readable in a hang folder."""

    path: pathlib.Path
    heartbeats: dict[int, dict[str, Any]]
    dumps: dict[int, RankDump]
    signals: list[SignalDump]
    unreadable: list[str]
    """Files that were there but could not be read (named in the report, never fatal)."""


def _read_json(path: pathlib.Path, bad: list[str]) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        bad.append(f"{path.name} ({exc.__class__.__name__})")
        return None
    if not isinstance(doc, dict):
        bad.append(f"{path.name} (not a JSON object)")
        return None
    return doc


def _read_text(path: pathlib.Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def read_hang_dir(path: str | os.PathLike[str]) -> HangRecord:
    """Read a hang folder (or a run folder holding ``hang/``). Raises
    :class:`~trainmedic.errors.InputError` when it holds no heartbeat and no dump."""
    base = pathlib.Path(path)
    if (base / "hang").is_dir() and not any(base.glob("heartbeat.rank*.json")):
        base = base / "hang"
    if not base.is_dir():
        raise InputError(str(path), "no such folder; expected a run folder holding hang/ or a "
                                    "hang folder written by the watchdog or dist watch")
    bad: list[str] = []
    heartbeats: dict[int, dict[str, Any]] = {}
    latest: dict[int, int] = {}
    signal_files: list[tuple[pathlib.Path, int | None]] = []
    for entry in sorted(os.scandir(base), key=lambda e: e.name):
        if m := _HEARTBEAT_RE.fullmatch(entry.name):
            doc = _read_json(pathlib.Path(entry.path), bad)
            if doc is not None:
                heartbeats[int(m.group(1))] = doc
        elif m := _DUMP_RE.fullmatch(entry.name):
            r, k = int(m.group(1)), int(m.group(2))
            latest[r] = max(latest.get(r, -1), k)
        elif m := _SIGNAL_RE.fullmatch(entry.name):
            signal_files.append((pathlib.Path(entry.path),
                                 int(m.group(2)) if m.group(2) is not None else None))
    dumps: dict[int, RankDump] = {}
    for r, k in latest.items():
        parts = dump_paths(base, r, k)
        meta = _read_json(parts["meta"], bad)
        if meta is None:
            continue
        dumps[r] = RankDump(rank=r, index=k, meta=meta, stacks=_read_text(parts["stacks"]) or "",
                            flight_recorder=_read_json(parts["fr"], bad),
                            exception=_read_text(parts["exception"]))
    signals = [s for p, r in signal_files if (s := _read_signal(p, r, bad)) is not None]
    if not heartbeats and not dumps and not signals:
        raise InputError(str(path), "no heartbeat, hang dump or signal dump found; expected "
                                    "heartbeat.rank<N>.json or rank<N>.hang<K>.json files "
                                    "(written by HangWatchdog or trainmedic dist watch)")
    return HangRecord(path=base, heartbeats=heartbeats, dumps=dumps, signals=signals,
                      unreadable=bad)


def _read_signal(path: pathlib.Path, rank: int | None, bad: list[str]) -> SignalDump | None:
    text = _read_text(path)
    if text is None:
        return None
    first, _, rest = text.partition("\n")
    header: dict[str, Any] = {}
    if first.startswith(_HEADER):
        try:
            header = json.loads(first[len(_HEADER):])
        except ValueError:
            bad.append(f"{path.name} (bad header)")
    else:
        rest = text
    if "(most recent call first)" not in rest:
        return None  # registered, never signalled: nothing to say
    fr = _read_json(path.with_name(path.name[:-len(".txt")] + ".fr.json"), bad)
    return SignalDump(path=path, rank=rank, header=header, stacks=rest, flight_recorder=fr)
