"""Turn paths (files, folders, run stores) into one ``Run``.

Formats are recognized by content, not only by name: a trainer_state.json saved under any name
is found by its ``log_history``, an event file by its TFRecord header, a run store by the SQLite
magic. Folders are walked (bounded depth) and every recognizable log is read; the rank of a file
comes from a ``rank<N>`` in its name or in a folder name on its way; the files of one run are
merged into one ``Run`` in path order (so ``version_0`` comes before ``version_1`` and event files
in the order their names' timestamps give).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmedic.errors import InputError, UnreadableInputError, UnrecognizedInputError
from trainmedic.run import names as names_mod
from trainmedic.run.detection import WHAT_WE_READ, detect_format, names_look_like_log
from trainmedic.run.jsonlog import EPOCH_FILE, read_epoch_files
from trainmedic.run.mapping import table_to_run
from trainmedic.run.merge import drop_superseded_hf_states, merge_into, repeats
from trainmedic.run.rank_column import split_by_rank_column
from trainmedic.run.series import ImportNote, Run
from trainmedic.run.table import LogTable

__all__ = ["load_paths", "detect_format", "rank_of", "table_to_run", "read_file",
           "MAX_DEPTH", "MAX_FILES"]

log = logging.getLogger(__name__)

MAX_DEPTH = 6
"""Folder levels walked below a folder given on the command line."""
MAX_FILES = 5000
"""Files looked at in one folder tree before the walk stops (with a note)."""

# Never logs, and often huge: skipped without opening.
_SKIP_SUFFIXES = frozenset({
    ".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".pkl", ".pickle", ".npy", ".npz",
    ".h5", ".hdf5", ".onnx", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".mp4", ".zip", ".tar",
    ".gz", ".tgz", ".whl", ".so", ".pyc", ".yaml", ".yml", ".md", ".html",
    ".model", ".msgpack", ".parquet", ".arrow", ".wandb", ".lock",
    ".py", ".sh", ".c", ".cc", ".cpp", ".h", ".js", ".ts", ".css", ".toml", ".ini", ".cfg",
    ".ipynb", ".rst", ".tex", ".pdf",
})
#: Skipped suffixes that can still hold a console log saved under a log's name.
_TEXT_SUFFIXES = frozenset({".py", ".md", ".rst", ".sh"})
#: Files in a folder that hold a run's last values, not its history: read as rows they would
#: add a point at another step's numbering (W&B's summary at its _step beside a history read
#: at HF's global step made a spike and a resume that never happened).
_SUMMARY_FILES = frozenset({"wandb-summary.json"})
_SKIP_DIRS = frozenset({".git", "__pycache__", ".ipynb_checkpoints", "node_modules", ".venv"})
#: Hidden folders that are a tracker's run store, walked like any other: Guild AI keeps each
#: run's stdout as ``.guild/runs/<id>/.guild/output``, Polyaxon one JSON-lines file per metric
#: as ``.polyaxon/<run>/events/metric/<name>.plx``, submitit each task's output as
#: ``.submitit/<job>/<job>_<task>_log.out``.
_TRACKER_DOT_DIRS = frozenset({".guild", ".polyaxon", ".submitit"})
_RANK_RE = re.compile(r"(?:^|[^a-z0-9])rank[_\-.]?(\d+)(?!\d)", re.IGNORECASE)
# Keras' TensorBoard callback writes train/ and validation/ sub-folders with the same tags.
_ATTEMPT_RE = re.compile(r"attempt_\d+")
_SUBMITIT_LOG = re.compile(r"(\d+)_(\d+)_log\.(?:out|err)")
_SPLIT_DIRS = frozenset({"train", "training", "validation", "val", "eval", "evaluation", "test"})


def rank_of(path: Path, root: Path | None = None) -> int | None:
    """The rank a file belongs to: ``rank<N>`` / ``rank_N`` / ``rank-N`` in its name, else in
    the nearest folder name between it and ``root`` (``root`` itself included)."""
    parts = [path.name]
    if root is not None and root != path:
        try:
            rel = path.parent.relative_to(root)
            parts += list(reversed(rel.parts)) + [root.name]
        except ValueError:
            pass
    for part in parts:
        m = _RANK_RE.search(part)
        if m:
            return int(m.group(1))
    # torchrun --log-dir: <dir>/<run id>/attempt_<n>/<local rank>/stdout.log
    if path.parent.name.isdigit() and _ATTEMPT_RE.fullmatch(path.parent.parent.name):
        return int(path.parent.name)
    # submitit: .submitit/<job id>/<job id>_<task>_log.out, one task per rank
    if (sm := _SUBMITIT_LOG.fullmatch(path.name)) and sm.group(1) == path.parent.name:
        return int(sm.group(2))
    return None


@dataclass(frozen=True)
class _Found:
    path: Path
    fmt: str
    rank: int | None
    tag_prefix: str = ""
    explicit: bool = False
    """Named on the command line (an error in it is the user's error, not a skip)."""
    origin: int = 0
    """Which of the paths given it was found under."""


def _csv_header_is_log(path: Path) -> bool:
    """Inside a folder, a CSV is read only when its header names a step or a known metric
    (a predictions.csv or a dataset next to the logs is not a training log)."""
    from trainmedic.run.csvlog import sniff_delimiter, split_header
    from trainmedic.run.table import numbers_only

    with path.open("rb") as f:
        line, last = f.readline(65536).lstrip(b"\xef\xbb\xbf"), b""
        for _ in range(64):  # "# note" comment lines before the header
            if not line.lstrip().startswith(b"#"):
                break
            line, last = f.readline(65536), line
        if last and numbers_only(line.rstrip(b"\r\n")):  # np.savetxt's "# step,loss"
            line = last.lstrip(b"# ")
    d = sniff_delimiter(line.rstrip(b"\r\n"))
    if d is None:
        return False
    cols = split_header(line, d)
    return names_look_like_log(cols)


def _jsonl_first_row_is_log(path: Path) -> bool:
    """Inside a folder, a JSON Lines file is read only when its first object has a step or a
    known metric key (a dataset in JSONL next to the logs is not a training log)."""
    from trainmedic.run.jsonlog import flatten

    with path.open("rb") as f:
        line = f.readline(1 << 20)
    try:
        obj = json.loads(line.decode("utf-8-sig"))
    except ValueError:
        return False
    # The first line may be a header record (mmdetection's env_info): look at a second too.
    keys = list(flatten(obj)) if isinstance(obj, dict) else []
    if not names_look_like_log(keys):
        with path.open("rb") as f:
            f.readline(1 << 20)
            second = f.readline(1 << 20)
        try:
            obj2 = json.loads(second.decode("utf-8-sig"))
        except ValueError:
            return False
        keys = list(flatten(obj2)) if isinstance(obj2, dict) else []
    return names_look_like_log(keys)


def read_file(path: Path, fmt: str | None = None,
              tag_prefix: str = "") -> LogTable | Run | list[LogTable]:
    """Read one file (format detected unless given). A run store comes back as a ``Run``; a
    console log holding several ranks' lines as one table per rank."""
    fmt = fmt or detect_format(path)
    if fmt == "empty":
        raise UnrecognizedInputError(str(path), f"is empty; expected a training log "
                                     f"({WHAT_WE_READ})")
    if fmt == "store":
        return _read_store(path)
    if fmt == "tensorboard":
        from trainmedic.run.tbevents import read_tensorboard

        return read_tensorboard(path, tag_prefix=tag_prefix)
    if fmt == "csv":
        from trainmedic.run.csvlog import read_csv

        return read_csv(path)
    if fmt == "jsonl":
        from trainmedic.run.jsonlog import read_jsonl

        return read_jsonl(path)
    if fmt == "json":
        from trainmedic.run.jsonlog import read_json_document

        return read_json_document(path)
    if fmt == "text":
        from trainmedic.run.textlog import read_text_logs

        tables = read_text_logs(path)
        return tables[0] if len(tables) == 1 else tables
    if fmt == "mlflow":
        from trainmedic.run.mlflow_store import read_mlflow_run

        return read_mlflow_run(path)
    if fmt == "epoch_files":
        return read_epoch_files(path)
    if fmt == "wandb":
        from trainmedic.run.wandb_run import read_wandb_run

        return read_wandb_run(path)
    if fmt == "parquet":
        from trainmedic.run.wandb_run import read_parquet_history

        return read_parquet_history(path)
    raise UnrecognizedInputError(str(path), f"is not a training log trainmedic reads; expected "
                                 f"{WHAT_WE_READ}")


#: A one-metric export names its metric in the file, not in the column: TensorBoard's "Download
#: CSV" writes ``Wall time,Step,Value`` to ``run-<run>-tag-<tag>.csv``; trackers' per-metric
#: exports write ``step,value,timestamp``; Polyaxon's event files ``{"timestamp", "step",
#: "metric"}`` lines.
_VALUE_COLUMNS = frozenset({"value", "values", "y", "metric"})
_CLOCK_COLUMNS = frozenset({"wall time", "wall_time", "walltime", "timestamp", "time", "wall",
                            "relative time", "relative_time", "epoch_time"})
_TB_EXPORT = re.compile(r"^run[-_].*?[-_]tag[-_](?P<tag>.+)$")


def _name_value_column(table: LogTable, path: Path) -> None:
    """Rename a lone ``Value`` column (beside only clock columns) after the file it is in;
    name a DVCLive metric file's column by its path under ``plots/metrics``."""
    parts = [q.lower() for q in path.parts]
    if "plots" in parts and parts.index("plots") + 1 < len(parts) and \
            parts[parts.index("plots") + 1] == "metrics" and [
                c for c in table.columns if c.lower() not in _CLOCK_COLUMNS] == [path.stem]:
        # DVCLive writes dvclive/plots/metrics/<name>.tsv ("timestamp step <leaf>"): its name
        # is the path ("train/ce", "eval/ce"), not the leaf the two sides share
        name = "/".join(path.with_suffix("").parts[parts.index("plots") + 2:])
        table.columns[name] = table.columns.pop(path.stem)
        table.note("metric_from_file_name", f"DVCLive metric file: '{path.stem}' is '{name}'")
        return
    values = [c for c in table.columns if c.strip().lower() in _VALUE_COLUMNS]
    others = [c for c in table.columns if c not in values]
    if len(values) != 1 or any(c.strip().lower() not in _CLOCK_COLUMNS for c in others):
        return
    m = _TB_EXPORT.match(path.stem)
    name = m.group("tag") if m else path.stem
    if not name or name in table.columns:
        return
    table.columns[name] = table.columns.pop(values[0])
    table.note("metric_from_file_name", f"the column '{values[0]}' is the only metric, so it "
               f"takes its name from the file: '{name}'")


def _read_store(path: Path) -> Run:
    try:
        from trainmedic.run import store
    except ImportError as exc:
        raise UnrecognizedInputError(str(path), "is an SQLite file, but this build has no run "
                                     "store reader (trainmedic.run.store)") from exc
    if not store.is_store_file(path):
        raise UnrecognizedInputError(str(path), "is an SQLite database but not a trainmedic run "
                                     "store; expected a store written by trainmedic.watch")
    run: Run = store.read_store(path)
    return run


def _is_trainmedic_checkpoint(d: Path) -> bool:
    """A checkpoint written by trainmedic's CheckpointManager: weights, no metrics to read."""
    try:
        with open(d / "manifest.json", "rb") as f:
            head = f.read(256)
    except OSError:
        return False
    return b'"trainmedic.checkpoint/' in head


def _walk(root: Path, skip: frozenset[Path] = frozenset()) -> Iterator[tuple[Path, int]]:
    """Files under ``root`` with their depth, in natural path order, bounded in depth."""
    def natural(name: str) -> list[Any]:
        return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", name)]

    def rec(d: Path, depth: int) -> Iterator[tuple[Path, int]]:
        try:
            entries = sorted(os.scandir(d), key=lambda e: natural(e.name))
        except OSError as exc:
            raise UnreadableInputError(str(d), f"cannot list the folder ({exc.strerror})"
                                       ) from exc
        for e in entries:
            if (e.name.startswith(".") and e.name not in _TRACKER_DOT_DIRS) or \
                    e.name in _SKIP_DIRS:
                continue
            p = Path(e.path)
            try:
                if e.is_dir(follow_symlinks=False):
                    if depth < MAX_DEPTH and p not in skip and not _is_trainmedic_checkpoint(p):
                        yield from rec(p, depth + 1)
                elif e.is_file():
                    yield p, depth
            except OSError:
                continue

    yield from rec(root, 0)


def _scan_folder(root: Path, notes: list[ImportNote]) -> list[_Found]:
    found: list[_Found] = []
    skipped: list[str] = []
    summaries: list[str] = []
    unreadable: list[str] = []
    looked = 0
    from trainmedic.run.mlflow_store import find_mlflow_runs
    from trainmedic.run.wandb_run import find_wandb_runs

    mlruns = find_mlflow_runs(root, MAX_DEPTH)
    if mlruns:
        from trainmedic.run.mlflow_store import choose_mlflow_run

        picks, why = choose_mlflow_run(root, mlruns)
        if why:
            notes.append(ImportNote("other_runs", why, path=str(root)))
        found += [_Found(d, "mlflow", rank_of(d, root)) for d in picks]
    wandb_runs = find_wandb_runs(root, MAX_DEPTH)
    misnamed: list[Path] = []
    epoch_dirs: dict[Path, int] = {}  # AllenNLP's metrics_epoch_<N>.json, one file per epoch
    for p, _depth in _walk(root, frozenset(mlruns + wandb_runs)):
        if p.suffix.lower() in _SKIP_SUFFIXES and "tfevents" not in p.name:
            # a log saved under a script's or a document's suffix ("training_log.py", a
            # report.md whose table holds the metrics): read only when nothing else is there
            if p.suffix.lower() in _TEXT_SUFFIXES and ("log" in p.stem.lower() or
                                                      p.suffix.lower() == ".md"):
                misnamed.append(p)
            continue
        if p.name in _SUMMARY_FILES:
            summaries.append(str(p.relative_to(root)))
            continue
        if EPOCH_FILE.fullmatch(p.name):
            epoch_dirs[p.parent] = epoch_dirs.get(p.parent, 0) + 1
            continue
        looked += 1
        if looked > MAX_FILES:
            notes.append(ImportNote("walk_limit", f"stopped after {MAX_FILES} files under "
                                    f"{root}; pass sub-folders to read more", path=str(root)))
            break
        try:
            fmt = detect_format(p)
        except UnreadableInputError:
            unreadable.append(str(p.relative_to(root)))
            continue
        if fmt in (None, "empty"):
            continue
        if fmt in ("csv", "jsonl"):
            check = _csv_header_is_log if fmt == "csv" else _jsonl_first_row_is_log
            try:
                if not check(p):
                    skipped.append(str(p.relative_to(root)))
                    continue
            except (OSError, UnicodeDecodeError):
                unreadable.append(str(p.relative_to(root)))
                continue
        prefix = ""
        if fmt == "tensorboard" and p.parent != root and p.parent.name.lower() in _SPLIT_DIRS:
            prefix = p.parent.name
        found.append(_Found(p, fmt, rank_of(p, root), prefix))
    found += [_Found(d, "epoch_files", rank_of(d, root)) for d, n in epoch_dirs.items() if n >= 2]
    if wandb_runs:
        # wandb's own debug.log / debug-internal.log beside its run folders are not the run
        homes = {r.parent for r in wandb_runs}
        found = [f for f in found if not (f.path.parent in homes and
                                          f.path.name.startswith("debug"))]
        from trainmedic.run.wandb_run import choose_wandb_run

        picks, why = choose_wandb_run(root, wandb_runs, others=bool(found))
        if why:
            notes.append(ImportNote("skipped_file" if not picks else "other_runs", why,
                                    path=str(root)))
        found += [_Found(pick, "wandb", rank_of(pick, root)) for pick in picks]
    if not found:
        found = [_Found(p, "text", rank_of(p, root)) for p in misnamed if _log_not_code(p)]
        if found:
            notes.append(ImportNote("misnamed_log", "no log file under its usual names; read "
                                    f"{', '.join(str(f.path.relative_to(root)) for f in found)}"
                                    " by its content (a log or a table of metrics under a "
                                    "script's or a document's suffix)",
                                    path=str(root)))
    if summaries:
        notes.append(ImportNote("skipped_file", "run summaries (each metric's last value, not "
                                f"a history) were not read: {', '.join(summaries[:5])}",
                                path=str(root)))
    if skipped:
        notes.append(ImportNote("skipped_file", "CSV/JSONL files without a step or metric "
                                f"column were not read: {', '.join(skipped[:5])}"
                                + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""),
                                path=str(root)))
    if unreadable:
        notes.append(ImportNote("unreadable_file", f"could not open: {', '.join(unreadable[:5])}",
                                path=str(root)))
    return found


def _log_not_code(p: Path) -> bool:
    """A file with a source or document suffix but a log's name ("training_log.py", a console
    log saved from an editor) that holds a console log, not code: it does not parse as Python
    and reads as a text log."""
    try:
        if p.stat().st_size > 50_000_000 or detect_format(p) != "text":
            return False
        if p.suffix.lower() == ".py":
            import ast

            try:
                ast.parse(p.read_text(encoding="utf-8", errors="replace"))
                return False
            except (SyntaxError, ValueError):
                return True
        return True
    except (OSError, UnreadableInputError):
        return False


def _check_mapping(mapping: dict[str, str], tables: list[LogTable], runs: list[Run]) -> None:
    """Every source named by the user must exist in at least one file of the run."""
    available: list[str] = []
    for t in tables:
        available.extend(t.columns)
        if t.step_column:
            available.append(t.step_column)
    for r in runs:
        available.extend(r.metrics())
    low = {a.strip().lower() for a in available}
    for canonical, source in mapping.items():
        if source.strip().lower() in low:
            continue
        res = names_mod.resolve_names(available, {canonical: source})
        if res.families.get(canonical) == "user":  # e.g. a W&B export's "<run> - <key>"
            continue
        where = tables[0].path if len(tables) == 1 else (
            runs[0].source if not tables and runs else
            f"{len(tables) + len(runs)} files ({', '.join(t.path for t in tables[:3])}...)")
        close = names_mod.close_names(source, available)
        hint = (f"close names: {', '.join(close)}" if close
                else f"columns present: {', '.join(list(dict.fromkeys(available))[:10])}")
        raise InputError(where, f"--map {canonical}={source}: no column or tag named "
                         f"'{source}'; {hint}")


def load_paths(paths: list[str], mapping: dict[str, str] | None = None,
               line_pattern: str | Sequence[str] | None = None) -> Run:
    """Read every path (file, folder or run store) into one ``Run``.

    ``mapping`` is the user's ``{canonical: source}``; it overrides the alias table, and a
    source found in none of the files is an ``InputError`` listing close names.
    ``line_pattern`` (regular expressions with a ``step`` group and one named group per
    metric, ``run/line_pattern.py``) reads console logs instead of the built-in line reader.
    A path ``mlflow:<tracking uri>#<run id>`` is read through mlflow's client
    (``run/mlflow_client.py``).
    """
    from trainmedic.run.mlflow_client import is_mlflow_uri, read_mlflow_uri

    if not paths:
        raise UnrecognizedInputError("", "no path given; expected a log file or folder")
    if line_pattern is not None:
        from trainmedic.run.line_pattern import compile_line_patterns

        compile_line_patterns(line_pattern)  # a bad pattern is the user's error, before any read
    notes: list[ImportNote] = []
    found: list[_Found] = []
    direct: list[tuple[int, LogTable]] = []  # tracker runs read by URI, with their path index
    for index, raw in enumerate(paths):
        if is_mlflow_uri(raw):
            direct.append((index, read_mlflow_uri(raw)))
            continue
        p = Path(raw)
        if not p.exists():
            raise UnreadableInputError(raw, "does not exist; expected a log file or a folder "
                                       "of logs")
        if p.is_dir():
            if not os.access(p, os.R_OK | os.X_OK):
                raise UnreadableInputError(raw, "folder cannot be read (permission denied)")
            here = [_Found(f.path, f.fmt, f.rank, f.tag_prefix, f.explicit, index)
                    for f in _scan_folder(p, notes)]
            blocked = [n for n in notes if n.kind == "unreadable_file" and n.path == str(p)]
            if not here and blocked:
                raise UnreadableInputError(raw, f"holds files that cannot be opened "
                                           f"({blocked[0].detail}); check their permissions")
            if not here:
                raise UnrecognizedInputError(raw, f"holds no log trainmedic reads; looked for "
                                             f"{WHAT_WE_READ} (up to {MAX_DEPTH} folders deep)")
            found.extend(here)
        else:
            fmt = detect_format(p)
            if line_pattern is not None and fmt in (None, "text"):
                fmt = "pattern"  # a layout the built-in reader may not know: the user's regex
            if fmt is None:
                raise UnrecognizedInputError(raw, f"is not a training log trainmedic reads "
                                             f"(binary or unknown content); expected "
                                             f"{WHAT_WE_READ}")
            # A file named on the command line takes its rank from its name or its folder's
            # (logs/rank_1/metrics.csv).
            found.append(_Found(p, fmt, rank_of(p, p.parent), explicit=True,
                                origin=index))

    tables: list[LogTable] = [t for _, t in direct]
    runs: list[Run] = []
    origin: dict[int, int] = {id(t): i for i, t in direct}  # id(table or run) -> its path
    for f in found:
        try:
            if line_pattern is not None and f.fmt in ("text", "pattern"):
                from trainmedic.run.line_pattern import read_line_pattern

                got: LogTable | Run | list[LogTable] = read_line_pattern(f.path, line_pattern)
            else:
                got = read_file(f.path, f.fmt, f.tag_prefix)
        except UnrecognizedInputError as exc:
            if f.explicit or len(found) == 1:
                raise
            notes.append(ImportNote("skipped_file", exc.message, path=str(f.path)))
            continue
        for part in got if isinstance(got, list) else [got]:
            origin[id(part)] = f.origin
        if isinstance(got, Run):
            runs.append(got)
        elif isinstance(got, list):
            tables.extend(got)
        elif got.format in ("json_rows", "json_history") and not f.explicit and \
                not names_look_like_log(
                list(got.columns) + ([got.step_column] if got.step_column else [])):
            # A JSON document of numbers found in a folder (a config, a results table) is a
            # log only if it names a step or a metric.
            notes.append(ImportNote("skipped_file", "JSON with no step or metric key was not "
                                    "read", path=str(f.path)))
        else:
            if got.rank is None:
                got.rank = f.rank
            _name_value_column(got, f.path)
            for t in split_by_rank_column(got) or [got]:
                origin[id(t)] = f.origin
                tables.append(t)
    if not tables and not runs:
        first = notes[0].detail if notes else "nothing readable"
        raise UnrecognizedInputError(paths[0], f"holds no readable training log ({first}); "
                                     f"expected {WHAT_WE_READ}")
    tables = drop_superseded_hf_states(tables, notes)
    if mapping:
        _check_mapping(mapping, tables, runs)

    from trainmedic.run.merge import refuse_separate_runs

    source = paths[0] if len(paths) == 1 else ", ".join(paths)
    total = Run(source=source)
    owner: dict[tuple[str, int | None], int] = {}
    # Console logs last: one beside the metrics file extracted from it is read once.
    for t in sorted(tables, key=lambda t: t.format == "text"):
        part = table_to_run(t, mapping)
        # a later attempt's log continues the series: never read as a copy or a resampling
        fresh = t.format == "text" and bool(total.series) and not _restarted(t.path)
        if fresh and repeats(total, part):
            notes.append(ImportNote(
                "duplicate_source", "holds the metrics of another file of the run at the same "
                "steps (a console log beside the metrics taken from it); not read again",
                path=t.path))
            continue
        if fresh:
            shared = sorted({m for (m, rk) in part.series if (m, rk) in total.series
                             and m in names_mod.CANONICAL})
            if shared:
                # Another sampling of the same metrics (a console log printing every 100 steps
                # beside a per-epoch CSV) would interleave two series into one.
                notes.append(ImportNote(
                    "duplicate_source", f"logs {', '.join(shared[:4])} that another file of "
                    "the run also holds, at other steps; that file's series are used",
                    path=t.path))
                continue
        refuse_separate_runs(total, part, origin.get(id(t), 0), owner, paths)
        merge_into(total, part, t.path)
    for r in runs:
        if mapping:
            r = _remap_store_run(r, mapping)
        if "mapping" not in r.meta:  # a run store: its names are trainmedic's own
            r.meta["mapping"] = [
                {"file": r.source, "column": m, "canonical": m if m in names_mod.CANONICAL
                 else None, "how": "canonical" if m in names_mod.CANONICAL else "kept as raw"}
                for m in r.metrics()]
        refuse_separate_runs(total, r, origin.get(id(r), 0), owner, paths)
        merge_into(total, r, r.source)
    total.notes[:0] = notes
    if not total.series:
        raise UnrecognizedInputError(source, "was read but holds no numeric series; expected "
                                     "metrics such as loss or lr over steps")
    return total


def _restarted(path: str) -> bool:
    """A console log of a later attempt (torchrun --log-dir's ``attempt_<n>``, n >= 1): the
    same ranks restarted, whose lines continue the run's series (a step counter that goes
    back there is the resume to judge), not another sampling of them."""
    attempt = Path(path).parent.parent.name  # <attempt>/<local rank>/stdout.log
    return bool(_ATTEMPT_RE.fullmatch(attempt)) and attempt != "attempt_0"


def _remap_store_run(run: Run, mapping: dict[str, str]) -> Run:
    """Apply a user mapping to a run store's (already canonical) metric names."""
    out = Run(source=run.source, meta=dict(run.meta), notes=list(run.notes),
              events=list(run.events))
    inverse = {src: canon for canon, src in mapping.items()}
    for (metric, rank), s in run.series.items():
        out.series[(inverse.get(metric, metric), rank)] = s
    return out
