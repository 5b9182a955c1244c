"""Weights & Biases runs: run folders (``wandb/run-<date>_<time>-<id>/``,
``wandb/offline-run-*/``) read with the wandb library, and exported histories (CSV, Parquet).

A run folder's history lives only in its transaction log ``run-<id>.wandb`` (an offline run
writes no ``wandb-history.jsonl``). Each of its records is a ``wandb_internal_pb2.Record``,
decoded by wandb's own protobuf classes: ``run`` (the config at ``wandb.init``), ``config``
(later ``wandb.config`` updates), ``history`` (one ``wandb.log`` row: ``_step``, ``_runtime``,
``_timestamp`` and the logged keys, each value JSON-encoded) and ``summary`` (updates of the
last values). wandb >= 0.20 reads this log only in its Go core (``wandb sync``); the Python
package no longer ships a reader of the framing (``wandb.sdk.internal.datastore``, removed),
so ``_frames`` reads it here: LevelDB's log format (32 KiB blocks of records with a 7-byte
header ``crc32 u32, length u16, type u8``; FULL/FIRST/MIDDLE/LAST; see
https://github.com/google/leveldb/blob/main/doc/log_format.md) after a 7-byte file header
``":W&B", 0xBEE1, version 0``, as wandb's former ``datastore.py`` wrote and checked it. The
record contents are never parsed by hand.

A folder holding several runs (``wandb/``) is several experiments: the loader reads the newest
and names the others (``find_wandb_runs`` / ``newest_run``), never merging them. An exported
history (W&B's "Export CSV", ``run.history().to_parquet(...)``) needs no wandb: its CSV goes
through the CSV reader; its Parquet is read here with pyarrow (the ``fast`` extra).
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from trainmedic.errors import MissingExtraError, UnreadableInputError, UnrecognizedInputError
from trainmedic.run.names import find_step_column
from trainmedic.run.series import Series
from trainmedic.run.table import LogTable, NoteCounter

__all__ = ["WANDB_MAGIC", "is_wandb_run", "find_wandb_runs", "newest_run", "choose_wandb_run",
           "read_wandb_run",
           "read_parquet_history", "PARQUET_MAGIC"]

WANDB_MAGIC = b":W&B"
"""The first four bytes of a ``.wandb`` transaction log."""
PARQUET_MAGIC = b"PAR1"

_HEADER = struct.Struct("<4sHB")  # ident, magic, version
_HEADER_MAGIC = 0xBEE1  # zlib.crc32(b"Weights & Biases") & 0xFFFF, per wandb's datastore.py
_RECORD = struct.Struct("<IHB")  # crc32, length, type
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_TYPE_CRC = {t: zlib.crc32(bytes([t])) for t in (_FULL, _FIRST, _MIDDLE, _LAST)}
# run-<YYYYMMDD_HHMMSS>-<id>; an id set by the user may hold '-' and '_' (wandb.init(id=...)).
_RUN_DIR = re.compile(r"(?:offline-)?run-(\d{8}_\d{6})-(.+)")
_INSTALL = "pip install 'trainmedic[wandb]'"


def is_wandb_run(d: Path) -> bool:
    """True for a W&B run folder: it holds a ``run-<id>.wandb`` transaction log."""
    try:
        return d.is_dir() and any(e.name.endswith(".wandb") and e.is_file()
                                  for e in os.scandir(d))
    except OSError:
        return False


def find_wandb_runs(root: Path, max_depth: int = 6) -> list[Path]:
    """W&B run folders at or under ``root`` (``root`` itself included), oldest first.

    Symbolic links (``wandb/latest-run``) are not followed: they name a run already found.
    """
    out: list[Path] = []
    base = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        dirnames[:] = sorted(n for n in dirnames if not n.startswith("."))
        if any(f.endswith(".wandb") for f in filenames):
            out.append(d)
            dirnames[:] = []  # files/, logs/, tmp/ hold no further runs
            continue
        if len(d.parts) - base >= max_depth:
            dirnames[:] = []
    return sorted(out, key=_run_order)


def _run_order(d: Path) -> tuple[str, float]:
    m = _RUN_DIR.fullmatch(d.name)
    try:
        mtime = d.stat().st_mtime
    except OSError:
        mtime = 0.0
    return (m.group(1) if m else "", mtime)


def newest_run(runs: list[Path]) -> Path:
    """The run started last: by the date and time in its folder name, then by mtime."""
    return max(runs, key=_run_order)


def _run_id(d: Path) -> str | None:
    m = _RUN_DIR.fullmatch(d.name)
    return m.group(2) if m else None


def choose_wandb_run(root: Path, runs: list[Path], *,
                     others: bool) -> tuple[list[Path], str | None]:
    """The W&B run folders to read of ``runs`` found under ``root`` (one run), and a note.

    None when ``others`` (other logs found there hold the run: an HF output folder's
    trainer_state.json beside its wandb/ folder, read twice, would interleave the run at two
    step numberings); else the newest run: its folder, and the earlier folders of the same
    run id (``wandb.init(resume=...)`` starts a new ``run-<time>-<id>`` folder for each
    session of one run), oldest first; other ids are separate experiments, never merged.
    """
    rel = [str(r.relative_to(root)) if r != root else "." for r in runs]
    if others:
        return [], (f"W&B run folders not read, as the other logs here hold the run: "
                    f"{', '.join(rel[:5])}; pass a run folder to read it")
    pick = newest_run(runs)
    rid = _run_id(pick)
    mine = sorted((r for r in runs if r == pick or (rid is not None and _run_id(r) == rid)),
                  key=_run_order)
    rest = [r for r, p in zip(rel, runs, strict=True) if p not in mine]
    notes = []
    if len(mine) > 1:
        notes.append(f"W&B run {rid} was resumed: read its {len(mine)} session folders as one "
                     f"run, {', '.join(p.name for p in mine)}")
    if rest:
        from trainmedic.run.merge import other_runs_note

        notes.append(other_runs_note("W&B run folders", len(runs), pick.name, rest))
    return mine, "; ".join(notes) or None


def _proto() -> Any:
    try:
        from wandb.proto import wandb_internal_pb2
    except ImportError as exc:
        raise MissingExtraError(f"reading a W&B run folder needs the wandb library, which is "
                                f"not installed; install it with {_INSTALL}, or read the "
                                f"run's exported history CSV instead") from exc
    return wandb_internal_pb2


def _frames(data: bytes, path: str, table: LogTable) -> list[bytes]:
    """The payloads of the log's records, in order. A damaged or cut record (a run killed
    mid-write) ends the read with a note: what came before it is kept."""
    if len(data) < _HEADER.size:
        raise UnrecognizedInputError(path, "is too short for a W&B transaction log; expected "
                                     "a run-<id>.wandb file written by wandb")
    ident, magic, version = _HEADER.unpack_from(data)
    if ident != WANDB_MAGIC or magic != _HEADER_MAGIC or version != 0:
        raise UnrecognizedInputError(path, f"has header {ident!r}/{magic:#x}/v{version}, not "
                                     f"a W&B transaction log (':W&B'/0xbee1/v0)")
    out: list[bytes] = []
    pos, pending = _HEADER.size, bytearray()
    while pos + _RECORD.size <= len(data):
        room = _BLOCK - pos % _BLOCK
        if room < _RECORD.size:  # a block's tail too short for a header is padding
            pos += room
            continue
        crc, length, kind = _RECORD.unpack_from(data, pos)
        if kind == 0 and length == 0:
            break  # zero padding: the writer preallocated, nothing more was written
        chunk = data[pos + _RECORD.size:pos + _RECORD.size + length]
        if kind not in _TYPE_CRC or len(chunk) != length or \
                zlib.crc32(chunk, _TYPE_CRC[kind]) & 0xFFFFFFFF != crc:
            table.note("truncated_record", f"the transaction log is damaged or cut at byte "
                       f"{pos}; the {len(out)} records before it were read")
            return out
        pos += _RECORD.size + length
        if kind == _FULL:
            out.append(chunk)
        elif kind == _FIRST:
            pending = bytearray(chunk)
        else:
            pending += chunk
            if kind == _LAST:
                out.append(bytes(pending))
                pending = bytearray()
    return out


def _key(item: Any) -> str:
    # wandb.log({"a": {"b": 1}}) is stored as nested_key ["a", "b"]: shown as "a.b" by W&B
    return ".".join(item.nested_key) if len(item.nested_key) else str(item.key)


def _decode(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def _log_file(run_dir: Path) -> Path:
    if run_dir.is_file():
        return run_dir
    logs = sorted(p for p in run_dir.iterdir() if p.name.endswith(".wandb") and p.is_file())
    if not logs:
        raise UnrecognizedInputError(str(run_dir), "holds no run-<id>.wandb transaction log; "
                                     "expected a wandb/run-* or wandb/offline-run-* folder")
    return logs[-1]


def read_wandb_run(run_dir: Path) -> LogTable:
    """One W&B run (its folder, or its ``.wandb`` file): history columns by logged key over
    the step column (``_step`` unless a trainer's own step is logged: ``train/global_step``,
    see ``names.STEP_COLUMNS``); ``meta["config"]`` the config as logged (nested dicts kept),
    ``meta["summary"]`` the last values, ``meta["wandb_run_id"]``, ``meta["run_name"]``."""
    pb = _proto()
    log_path = _log_file(run_dir)
    table = LogTable(path=str(run_dir), format="wandb")
    try:
        data = log_path.read_bytes()
    except OSError as exc:
        raise UnreadableInputError(str(log_path), f"cannot open the W&B transaction log "
                                   f"({exc.strerror})") from exc
    rows: list[dict[str, Any]] = []
    config: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    bad = NoteCounter("skipped_record", "records the wandb library could not decode skipped")
    for i, frame in enumerate(_frames(data, str(log_path), table)):
        rec = pb.Record()
        try:
            rec.ParseFromString(frame)
        except Exception:  # protobuf's DecodeError; its module path varies by version
            bad.add(i)
            continue
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            rows.append({_key(it): _decode(it.value_json) for it in rec.history.item})
        elif kind == "run":
            _apply_config(config, rec.run.config)
            table.meta["wandb_run_id"] = rec.run.run_id
            if rec.run.project:
                table.meta["wandb_project"] = rec.run.project
            if rec.run.display_name:
                table.meta["run_name"] = rec.run.display_name
        elif kind == "config":
            _apply_config(config, rec.config)
        elif kind == "summary":
            for it in rec.summary.update:
                summary[_key(it)] = _decode(it.value_json)
            for it in rec.summary.remove:
                summary.pop(_key(it), None)
    bad.flush(table)
    config.pop("_wandb", None)
    table.meta["config"] = config
    table.meta["summary"] = {k: v for k, v in summary.items()
                             if k != "_wandb" and not k.startswith("_wandb.")}
    table.meta["tracker"] = "wandb"
    _fill(table, rows, str(log_path))
    return table


def _apply_config(config: dict[str, Any], rec: Any) -> None:
    for it in rec.update:
        config[_key(it)] = _decode(it.value_json)
    for it in rec.remove:
        config.pop(_key(it), None)


def _fill(table: LogTable, rows: list[dict[str, Any]], where: str) -> None:
    """Columns of every numeric key of ``rows`` over the step column; other values (media,
    histograms, strings) are listed as ignored."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    step_key = find_step_column(keys)
    if step_key is None:
        raise UnrecognizedInputError(where, "holds no history row with a step (_step); "
                                     "expected rows logged with wandb.log")
    table.step_column = step_key
    cols: dict[str, tuple[list[int], list[float]]] = {}
    ignored: dict[str, str] = {}
    stepless = 0
    for r in rows:
        st = _number(r.get(step_key))
        if st is None or not math.isfinite(st):
            stepless += 1
            continue
        for k, v in r.items():
            if k == step_key:
                continue
            x = _number(v)
            if x is None:
                # W&B encodes a logged NaN/inf as the JSON strings "NaN", "Infinity"
                x = _NONFINITE.get(v) if isinstance(v, str) else None
            if x is None:
                ignored.setdefault(k, f"not a number ({type(v).__name__})")
                continue
            s, vals = cols.setdefault(k, ([], []))
            s.append(int(st))
            vals.append(x)
    if stepless:
        table.note("skipped_row", f"{stepless} history rows without '{step_key}' skipped")
    for k, (s, vals) in cols.items():
        table.columns[k] = Series(np.asarray(s, dtype=np.int64), np.asarray(vals))
    for k in list(ignored):
        if k in table.columns:
            del ignored[k]  # numeric on most rows: the odd non-number is not the column
    if ignored:
        table.meta["ignored_columns"] = ignored
    if not table.columns:
        raise UnrecognizedInputError(where, "holds no numeric history values; expected "
                                     "metrics logged with wandb.log")


_NONFINITE = {"NaN": math.nan, "nan": math.nan, "Infinity": math.inf, "inf": math.inf,
              "-Infinity": -math.inf, "-inf": -math.inf}


def read_parquet_history(path: Path) -> LogTable:
    """A history exported to Parquet (``run.history().to_parquet(...)``, W&B's export):
    each numeric column over the step column, nulls left out."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise MissingExtraError(f"{path}: reading a Parquet history needs pyarrow, which is "
                                f"not installed; install it with pip install "
                                f"'trainmedic[fast]', or export the history as CSV") from exc
    try:
        data = pq.read_table(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise UnreadableInputError(str(path), f"is not a readable Parquet file ({exc}); "
                                   f"expected a history exported with to_parquet") from exc
    table = LogTable(path=str(path), format="parquet")
    rows = data.to_pylist()
    _fill(table, rows, str(path))
    return table
