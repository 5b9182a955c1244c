"""A run as a wide CSV: one row per step, one column per metric (``trainmedic export --csv``).

Layout: ``step`` first, then the metrics, canonical ones in DESIGN.md's order (``loss``,
``val_loss``, ``grad_norm``, ``lr``, ...), the rest sorted by name. A cell is empty where the
metric has no value at that step; NaN and inf are written as ``nan``, ``inf``, ``-inf``; every
value is written with ``repr`` (the shortest text that reads back to the same float64), so
``trainmedic.run.loader.load_paths([file])`` gives back the same series, bit for bit.

A per-rank run gets one file per rank, ``<stem>.rank<N><suffix>`` next to ``FILE`` (the
``rank<N>`` in the name is how the loader tells the ranks apart), plus ``FILE`` itself for the
series that have no rank. A ``rank`` column was the other choice; it would come back from the
loader as a metric named ``rank``.

Log order survives: a series whose steps go back (a resumed run re-logging steps) is cut into
segments where they go back, a step logged twice in a row takes two rows, and the rows are
these (segment, step, repeat) keys in order, so each column, read top to bottom, is the series
in the order it was logged. A run whose steps only increase has exactly one row per step.

Each file is written to a temporary file in the same folder and renamed over the target
(``os.replace`` is atomic on POSIX), so a crash never leaves half a file behind.
"""

from __future__ import annotations

import csv
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np

from trainmedic.errors import InputError
from trainmedic.run.names import CANONICAL
from trainmedic.run.series import Run

__all__ = ["WideTable", "ExportedFile", "Progress", "wide_table", "metric_order",
           "csv_targets", "check_csv_targets", "write_csv", "CHUNK_ROWS"]

Progress = Callable[[int, int], None]
"""``progress(done, total)``: rows written so far, over all files of one export."""

CHUNK_ROWS = 4096
"""Rows turned into a dense block at a time: memory stays ``CHUNK_ROWS x metrics`` however
long the run (a store with per-layer stats can hold hundreds of metrics)."""

_STEP_COLUMN = "step"


def metric_order(names: list[str]) -> list[str]:
    """Canonical metrics in DESIGN.md's order, then the others sorted by name."""
    rank = {m: i for i, m in enumerate(CANONICAL)}
    return sorted(names, key=lambda m: (rank.get(m, len(rank)), m))


@dataclass(frozen=True)
class WideTable:
    """One rank's series as rows of (step, value of each metric), in log order.

    ``steps[i]`` is the step of row ``i``; a metric's points sit in the rows ``rows[j]``
    (increasing) with the values ``values[j]``.
    """

    rank: int | None
    metrics: tuple[str, ...]
    steps: np.ndarray
    rows: tuple[np.ndarray, ...]
    values: tuple[np.ndarray, ...]

    def __len__(self) -> int:
        return int(self.steps.shape[0])

    def chunks(self, size: int = CHUNK_ROWS
               ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``(steps, values, present)`` blocks of at most ``size`` rows: ``values`` is
        ``rows x metrics`` float64 (NaN where absent, and where NaN was logged: ``present``
        tells them apart)."""
        pos = [0] * len(self.metrics)
        for lo in range(0, len(self), size):
            hi = min(lo + size, len(self))
            vals = np.full((hi - lo, len(self.metrics)), np.nan)
            present = np.zeros((hi - lo, len(self.metrics)), dtype=bool)
            for j, (rows, values) in enumerate(zip(self.rows, self.values, strict=True)):
                a = pos[j]
                b = a + int(np.searchsorted(rows[a:], hi))
                vals[rows[a:b] - lo, j] = values[a:b]
                present[rows[a:b] - lo, j] = True
                pos[j] = b
            yield self.steps[lo:hi], vals, present


def wide_table(run: Run, rank: int | None) -> WideTable:
    """The series of ``rank`` in ``run`` as a ``WideTable`` (empty series left out)."""
    names = metric_order([m for (m, r), s in run.series.items() if r == rank and len(s)])
    series = [run.series[(m, rank)] for m in names]
    if not series:
        empty = np.zeros(0, dtype=np.int64)
        return WideTable(rank, (), empty, (), ())
    all_steps = np.concatenate([s.steps for s in series])
    if all(s.is_monotonic for s in series):
        steps, inverse = np.unique(all_steps, return_inverse=True)
    else:
        keys = np.concatenate([_row_keys(s.steps) for s in series])
        # axis=0 sorts the (segment, step, repeat) triples lexicographically.
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        steps = uniq[:, 1]
    inverse = np.asarray(inverse).reshape(-1)
    bounds = np.cumsum([len(s) for s in series])[:-1]
    rows = tuple(np.split(inverse.astype(np.int64), bounds))
    return WideTable(rank, tuple(names), steps.astype(np.int64), rows,
                     tuple(s.values for s in series))


def _row_keys(steps: np.ndarray) -> np.ndarray:
    """``(segment, step, repeat)`` per point: the segment counts the times the step went back
    before this point; ``repeat`` counts the earlier points of the same step just before it
    (a step logged twice in a row: Lightning writes a train row and an epoch row at one step)."""
    d = np.diff(steps)
    seg = np.concatenate([[0], np.cumsum(d < 0)])
    new_step = np.concatenate([[True], d != 0])
    start = np.maximum.accumulate(np.where(new_step, np.arange(len(steps)), 0))
    repeat = np.arange(len(steps)) - start
    return np.stack([seg, steps, repeat], axis=1).astype(np.int64)


@dataclass(frozen=True)
class ExportedFile:
    """One file an export wrote, with what it holds (for the CLI's one line per file)."""

    path: Path
    rank: int | None
    rows: int
    """CSV rows, or scalar events (one per step) in an event file."""
    metrics: int
    unit: str = "rows"
    """What ``rows`` counts, for people: ``rows`` (CSV) or ``steps`` (event file)."""
    findings: int = 0
    overview: bool = False
    """The file holds the diagnosis overview text."""
    notes: tuple[str, ...] = field(default=())
    """What the reader of the file should know (values that the format changed)."""

    def describe(self) -> str:
        """``<path> (rank N): 300 steps, 7 metrics, 2 findings; <notes>``."""
        parts = []
        if self.rows or self.metrics:
            parts += [f"{self.rows} {self.unit}",
                      f"{self.metrics} metric{'s' if self.metrics != 1 else ''}"]
        if self.findings:
            parts.append(f"{self.findings} finding{'s' if self.findings != 1 else ''}")
        if self.overview:
            parts.append("the diagnosis overview")
        rank = f" (rank {self.rank})" if self.rank is not None else ""
        text = f"{self.path}{rank}: {', '.join(parts) or 'nothing'}"
        return text + "".join(f"; {n}" for n in self.notes)


def csv_targets(run: Run, path: str | os.PathLike[str]) -> dict[int | None, Path]:
    """``{rank: file}``: ``FILE`` for the series without a rank, ``<stem>.rank<N><suffix>``
    for rank ``N``."""
    base = Path(path)
    out: dict[int | None, Path] = {}
    for rank in run.ranks():
        if not any(r == rank and len(s) for (_, r), s in run.series.items()):
            continue
        out[rank] = base if rank is None else base.with_name(
            f"{base.stem}.rank{rank}{base.suffix}")
    return out


def check_csv_targets(targets: dict[int | None, Path], *, force: bool,
                      inputs: Sequence[str] = ()) -> None:
    """Refuse (``InputError``) to replace an input of the run, a folder, or, unless
    ``force``, an existing file."""
    read = {_resolved(p) for p in inputs}
    for target in targets.values():
        if _resolved(target) in read:
            raise InputError(str(target), "is a file the run is read from; choose another "
                             "--csv path (even --force will not replace an input)")
        if target.is_dir():
            raise InputError(str(target), "is a folder; --csv expects a file path")
        if target.exists() and not force:
            raise InputError(str(target), "already exists; pass --force to replace it, or "
                             "choose another --csv path")


def _resolved(p: str | os.PathLike[str]) -> Path:
    try:
        return Path(p).resolve()
    except OSError:  # pragma: no cover - a path that cannot be resolved is compared as given
        return Path(p)


def write_csv(run: Run, path: str | os.PathLike[str], *, force: bool = False,
              progress: Progress | None = None) -> list[ExportedFile]:
    """Write ``run`` as wide CSV at ``path`` (one file per rank, see the module docstring).

    Refuses with ``InputError`` when a target exists, unless ``force``. Returns one
    ``ExportedFile`` per file written.
    """
    targets = csv_targets(run, path)
    check_csv_targets(targets, force=force)
    tables = [wide_table(run, rank) for rank in targets]
    total = sum(len(t) for t in tables)
    done = 0
    written: list[ExportedFile] = []
    for table, target in zip(tables, targets.values(), strict=True):
        def step_done(n: int, _base: int = done) -> None:
            if progress is not None:
                progress(_base + n, total)

        _write_atomically(table, target, step_done)
        done += len(table)
        written.append(ExportedFile(target, table.rank, len(table), len(table.metrics)))
    return written


def _write_atomically(table: WideTable, target: Path, progress: Progress) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                        suffix=".tmp")
    except OSError as exc:
        raise InputError(str(target), f"cannot write the CSV ({exc.strerror})") from exc
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
            _write_rows(table, f, progress)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(str(target), f"cannot write the CSV ({exc.strerror})") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_rows(table: WideTable, f: TextIO, progress: Progress) -> None:
    writer = csv.writer(f, lineterminator="\n")
    # A metric literally named "step" would clash with the step column; the loader's own
    # convention for a name taken by another column is "raw/<name>".
    header = [_STEP_COLUMN] + [m if m != _STEP_COLUMN else f"raw/{m}" for m in table.metrics]
    writer.writerow(header)
    done = 0
    for steps, vals, present in table.chunks():
        rows = [
            [str(s)] + [repr(v) if p else "" for v, p in zip(vrow, prow, strict=True)]
            for s, vrow, prow in zip(steps.tolist(), vals.tolist(), present.tolist(),
                                     strict=True)
        ]
        writer.writerows(rows)
        done += len(rows)
        progress(done, len(table))
