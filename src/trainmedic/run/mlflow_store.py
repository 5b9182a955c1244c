"""MLflow file stores (``mlruns/``): one run is a folder holding ``meta.yaml`` and ``metrics/``.

Each metric is a file under ``metrics/`` whose path is the metric key (``metrics/train/box_loss``
holds the key ``train/box_loss``), one line per logged value: ``<timestamp ms> <value> <step>``
(mlflow/store/tracking/file_store.py). The key path is the raw name, so the alias table and the
vocabulary resolve it. ``params/<key>`` and ``tags/<key>`` hold one value each (the file's
text): they become ``meta["config"]`` and ``meta["tags"]`` (without mlflow's own ``mlflow.*``
tags), as the client reader (``mlflow_client.py``) gives them, so a run reads the same either way.

A store holds one folder per run, ``<experiment id>/<run id>/``. Runs are never merged: a
resumed MLflow run logs on in its own folder (``mlflow.start_run(run_id=...)``), so two folders
are two experiments. ``choose_mlflow_run`` reads the newest and names the rest; runs deleted
in the UI (``lifecycle_stage: deleted`` in ``meta.yaml``) are left out.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import numpy as np

from trainmedic.errors import UnreadableInputError, UnrecognizedInputError
from trainmedic.run.series import Series
from trainmedic.run.table import LogTable, NoteCounter, cell_float

__all__ = ["is_mlflow_run", "find_mlflow_runs", "choose_mlflow_run", "find_run_by_id",
           "read_mlflow_run"]

log = logging.getLogger(__name__)

_MAX_METRICS = 2000


def is_mlflow_run(d: Path) -> bool:
    """True for an MLflow run folder: ``meta.yaml`` beside a ``metrics`` folder."""
    return (d / "meta.yaml").is_file() and (d / "metrics").is_dir()


def find_mlflow_runs(root: Path, max_depth: int = 6) -> list[Path]:
    """MLflow run folders at or under ``root`` (``root`` itself included), sorted."""
    out: list[Path] = []
    base_depth = len(root.parts)
    for dirpath, dirnames, _files in os.walk(root):
        d = Path(dirpath)
        dirnames[:] = sorted(n for n in dirnames if not n.startswith("."))
        if "metrics" in dirnames and is_mlflow_run(d):
            out.append(d)
            dirnames[:] = []  # a run's metrics/params/tags hold no further runs
            continue
        if len(d.parts) - base_depth >= max_depth:
            dirnames[:] = []
    return sorted(out)


def read_mlflow_run(run_dir: Path) -> LogTable:
    """Every metric file of one MLflow run as a column keyed by its metric key."""
    table = LogTable(path=str(run_dir), format="mlflow")
    mdir = run_dir / "metrics"
    bad = NoteCounter("skipped_line", "metric lines that are not '<timestamp> <value> <step>' "
                      "skipped")
    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(mdir):
        dirnames.sort()
        files.extend(Path(dirpath) / f for f in sorted(filenames) if not f.startswith("."))
        if len(files) > _MAX_METRICS:
            table.note("walk_limit", f"read the first {_MAX_METRICS} metrics of the run")
            files = files[:_MAX_METRICS]
            break
    for f in files:
        key = f.relative_to(mdir).as_posix()
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise UnreadableInputError(str(f), f"cannot open the MLflow metric file "
                                       f"({exc.strerror})") from exc
        steps: list[int] = []
        vals: list[float] = []
        for i, line in enumerate(text.splitlines(), 1):
            parts = line.split()
            if not parts:
                continue
            v = cell_float(parts[1]) if len(parts) >= 2 else None
            try:
                st = int(parts[2]) if len(parts) >= 3 else len(steps)
            except ValueError:
                st = None
            if v is None or st is None:
                bad.add(i, f"{key}")
                continue
            steps.append(st)
            vals.append(v)
        if steps:
            table.columns[key] = Series(np.asarray(steps, dtype=np.int64),
                                        np.asarray(vals, dtype=np.float64))
    bad.flush(table)
    meta = _meta(run_dir)
    table.meta["tracker"] = "mlflow"
    table.meta["mlflow_run_id"] = meta.get("run_id") or run_dir.name
    params = _values(run_dir / "params")
    tags = _values(run_dir / "tags")
    table.meta["config"] = params
    # the tag holds the name exactly; meta.yaml's copy may be folded or quoted by PyYAML
    name = tags.get("mlflow.runName") or meta.get("run_name")
    if name:
        table.meta["run_name"] = name
    table.meta["tags"] = {k: v for k, v in tags.items() if not k.startswith("mlflow.")}
    if not table.columns:
        raise UnrecognizedInputError(str(run_dir), "is an MLflow run with no metric values; "
                                     "expected metrics/<key> files of '<timestamp> <value> "
                                     "<step>' lines")
    return table


def _meta(run_dir: Path) -> dict[str, str]:
    """A run's ``meta.yaml`` as strings. mlflow writes it with PyYAML, which folds long values
    onto the next line and doubles quotes: read with PyYAML where it is installed (mlflow
    requires it); else the one-line ``key: value`` scalars (ids, times, the lifecycle stage)."""
    try:
        text = (run_dir / "meta.yaml").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    try:
        import yaml

        doc = yaml.safe_load(text)
        if isinstance(doc, dict):
            return {str(k): str(v) for k, v in doc.items() if v is not None}
    except ImportError:
        pass
    except Exception:  # yaml.YAMLError: a damaged file still gives its plain lines
        log.debug("meta.yaml of %s is not YAML; reading its plain lines", run_dir)
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key and not key[0].isspace():
            out[key.strip()] = value.strip().strip("'\"")
    return out


def _has_metrics(run_dir: Path) -> bool:
    for _dirpath, _dirnames, filenames in os.walk(run_dir / "metrics"):
        if any(not f.startswith(".") for f in filenames):
            return True
    return False


def _values(folder: Path) -> dict[str, str]:
    """``{key: text}`` of a ``params/`` or ``tags/`` folder (a key with '/' is a sub-path)."""
    out: dict[str, str] = {}
    if not folder.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for f in sorted(filenames):
            path = Path(dirpath) / f
            try:
                out[path.relative_to(folder).as_posix()] = path.read_text(
                    encoding="utf-8", errors="replace")
            except OSError:
                continue
            if len(out) >= _MAX_METRICS:
                return out
    return out


def _order(run_dir: Path, meta: dict[str, str]) -> tuple[float, float]:
    """Sort key: the start time ``meta.yaml`` gives (ms), else the file's mtime."""
    try:
        started = float(meta.get("start_time") or "nan")
    except ValueError:
        started = math.nan
    try:
        mtime = (run_dir / "meta.yaml").stat().st_mtime * 1000.0
    except OSError:
        mtime = 0.0
    return (mtime if math.isnan(started) else started, mtime)


def choose_mlflow_run(root: Path, runs: list[Path]) -> tuple[list[Path], str | None]:
    """The run of ``runs`` (found under ``root``) to read, and a note: the one started last
    (``start_time`` in ``meta.yaml``) that logged a metric, never several (two MLflow runs
    are two experiments); runs marked deleted, and runs without a metric (one that crashed at
    start, a sweep's parent), are left out unless nothing else is there."""
    metas = {r: _meta(r) for r in runs}  # each meta.yaml read once
    live = [r for r in runs if metas[r].get("lifecycle_stage") != "deleted"] or runs
    logged = [r for r in live if _has_metrics(r)] or live
    pick = max(logged, key=lambda r: _order(r, metas[r]))
    notes: list[str] = []
    rel = [str(r.relative_to(root)) if r != root else "." for r in logged if r != pick]
    if len(live) < len(runs):
        notes.append(f"{len(runs) - len(live)} deleted MLflow run(s) not read")
    if len(logged) < len(live):
        notes.append(f"{len(live) - len(logged)} MLflow run(s) without a logged metric not "
                     f"read")
    if rel:
        from trainmedic.run.merge import other_runs_note

        notes.append(other_runs_note("MLflow runs", len(logged),
                                     str(pick.relative_to(root)) if pick != root else ".", rel))
    return [pick], "; ".join(notes) or None


def find_run_by_id(store: Path, run_id: str) -> Path | None:
    """The folder of run ``run_id`` in the file store at ``store`` (``<experiment>/<run id>``)."""
    for exp in sorted(store.iterdir()) if store.is_dir() else []:
        d = exp / run_id
        if exp.is_dir() and is_mlflow_run(d):
            return d
    return d if is_mlflow_run(d := store / run_id) else None
