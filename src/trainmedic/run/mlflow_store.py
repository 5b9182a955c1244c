"""MLflow file stores (``mlruns/``): one run is a folder holding ``meta.yaml`` and ``metrics/``.

Each metric is a file under ``metrics/`` whose path is the metric key (``metrics/train/box_loss``
holds the key ``train/box_loss``), one line per logged value: ``<timestamp ms> <value> <step>``
(mlflow/store/tracking/file_store.py). ``params/`` and ``tags/`` hold no series and are not
read. The key path is the raw name, so the alias table and the vocabulary resolve it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from trainmedic.errors import UnreadableInputError, UnrecognizedInputError
from trainmedic.run.series import Series
from trainmedic.run.table import LogTable, NoteCounter, cell_float

__all__ = ["is_mlflow_run", "find_mlflow_runs", "read_mlflow_run"]

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
    name = _run_name(run_dir)
    if name:
        table.meta["mlflow_run_name"] = name
    if not table.columns:
        raise UnrecognizedInputError(str(run_dir), "is an MLflow run with no metric values; "
                                     "expected metrics/<key> files of '<timestamp> <value> "
                                     "<step>' lines")
    return table


def _run_name(run_dir: Path) -> str | None:
    try:
        text = (run_dir / "meta.yaml").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("run_name:"):
            return line.split(":", 1)[1].strip().strip("'\"") or None
    return None
