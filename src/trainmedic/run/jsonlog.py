"""JSON logs: JSON Lines (Detectron2's metrics.json, mmengine, W&B-style history, hand-written
``{"step": 1, "loss": 2.3}`` lines) and a JSON document holding rows (a list of objects, or an
object of equal-length lists).

Nested objects are flattened with ``/`` (``{"train": {"loss": 1}}`` -> ``train/loss``), the way
TensorBoard tags and W&B keys are written, so the alias table sees one naming scheme.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from trainmedic.errors import UnreadableInputError, UnrecognizedInputError
from trainmedic.run.names import FALLBACK_STEP_COLUMNS, STEP_COLUMNS, find_step_column
from trainmedic.run.series import Series
from trainmedic.run.table import (
    MAX_STEP,
    MISSING_TOKENS,
    UTF16_BOMS,
    LogTable,
    NoteCounter,
    cell_float,
    duration_seconds,
    plain_scalars,
    steps_across_epochs,
)
from trainmedic.run.vocabulary import TEST_SIDE, VAL_SIDE

__all__ = ["read_jsonl", "read_json_rows", "read_json_document", "read_text", "flatten",
           "as_number", "rows_to_table"]

_MAX_DEPTH = 8


def read_text(path: Path, expected: str) -> str:
    """The file as text (UTF-8, BOM dropped; UTF-16 with its BOM), or an
    UnreadableInputError naming ``expected``."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UnreadableInputError(str(path), f"cannot open the file ({exc.strerror}); "
                                   f"expected a readable {expected}") from exc
    if raw.startswith(UTF16_BOMS):
        # PowerShell's `python train.py > log.txt` writes UTF-16 with a byte-order mark
        try:
            return raw.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise UnreadableInputError(str(path), f"starts like UTF-16 text but is not (byte "
                                       f"{exc.start}); expected a {expected}") from exc
    if b"\x00" in raw[:4096]:
        raise UnrecognizedInputError(str(path), f"holds binary data; expected a {expected}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UnreadableInputError(str(path), f"is not UTF-8 text (byte {exc.start}); "
                                   f"expected a {expected}") from exc


def flatten(obj: Mapping[str, Any], prefix: str = "", depth: int = 0) -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a/b": 1}``."""
    out: dict[str, Any] = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and depth < _MAX_DEPTH:
            out.update(flatten(v, key + "/", depth + 1))
        else:
            out[key] = v
    return out


def as_number(v: Any) -> float | None:
    """A JSON value as a float, or None when it is not a number. Strings such as "NaN" or
    "inf" count: loggers write non-finite values that way because JSON has no literal."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        # JSON integers are unbounded (10**400 parses); beyond float64 they read as +-inf,
        # as a float literal that large would.
        try:
            return float(v)
        except OverflowError:
            return math.inf if v > 0 else -math.inf
    if isinstance(v, float):
        return v
    if isinstance(v, str):
        s = v.strip()
        if not s or len(s) > 40:
            return None
        return cell_float(s)
    return None


def rows_to_table(table: LogTable, rows: Iterable[tuple[int | None, Mapping[str, Any]]]
                  ) -> LogTable:
    """Fill ``table`` from flat rows ``(line number, {key: value})`` in log order."""
    rows = list(rows)
    keys: dict[str, None] = {}
    for _, r in rows:
        for k in r:
            keys.setdefault(k, None)
    step_name = find_step_column(keys)
    if step_name is not None:
        # The step must be in most rows to be the step: one odd key is not.
        with_step = sum(1 for _, r in rows if as_number(r.get(step_name)) is not None)
        if with_step < max(1, len(rows) // 2):
            step_name = None
    no_step = NoteCounter("missing_step", "rows without a step value left out")
    bad = NoteCounter("non_numeric_cell", "non-numeric values read as missing")
    huge = NoteCounter("overflow_value", "integers too large for a float read as inf")
    numeric_keys: set[str] = set()
    for _, r in rows:
        for k, v in r.items():
            if k not in numeric_keys and as_number(v) is not None:
                numeric_keys.add(k)
    steps: list[int | None] = list(range(len(rows)))
    if step_name is None:
        table.note("step_from_row_index", "no step key (looked for step, global_step, "
                   "iteration, iter, _step, trainer/global_step, epoch); steps are row numbers")
    else:
        raw_steps = [as_number(r.get(step_name)) for _, r in rows]
        too_big = sum(1 for (_, r), x in zip(rows, raw_steps, strict=True)
                      if x is not None and abs(x) >= MAX_STEP
                      and (math.isfinite(x) or isinstance(r.get(step_name), int)))
        if too_big:
            # No run takes 2^62 steps: such a column is an id or a timestamp in ns, and numpy
            # cannot hold it as int64 anyway.
            table.note("step_from_row_index",
                       f"'{step_name}' has {too_big} value(s) of 2^62 or more (too large to "
                       "be a step count); steps are row numbers")
            step_name = None
        elif any(x is not None and math.isfinite(x) and x != math.floor(x) for x in raw_steps):
            # e.g. only a fractional "epoch" to go by: row order is the honest step.
            table.note("step_from_row_index",
                       f"'{step_name}' is not whole numbers; steps are row numbers")
            step_name = None
        else:
            steps = [int(x) if x is not None and math.isfinite(x) else None for x in raw_steps]
            if len(rows) >= 3 and None not in steps and len(set(steps)) == 1:
                # "Epoch 2 train ... loss ..." on every line: a counter that never moves
                # orders nothing; row order does
                table.note("step_from_row_index", f"'{step_name}' has the same value on all "
                           f"{len(rows)} rows; steps are row numbers")
                step_name, steps = None, list(range(len(rows)))
    if step_name is not None and step_name.lower() not in FALLBACK_STEP_COLUMNS:
        _globalize(table, rows, steps, step_name)
    if step_name is not None and step_name.lower() in FALLBACK_STEP_COLUMNS:
        table.note("step_is_epoch", f"no step key; '{step_name}' is used as the step")
    cols_steps: dict[str, list[int]] = {}
    cols_vals: dict[str, list[float]] = {}
    for (line, r), step in zip(rows, steps, strict=True):
        if step is None:
            no_step.add(line)
            continue
        for k, v in r.items():
            if k == step_name or k not in numeric_keys:
                continue
            x = as_number(v)
            if x is None:
                if v is not None and not isinstance(v, (list, dict)) and \
                        str(v).strip().lower() not in MISSING_TOKENS:
                    bad.add(line, f"{k}={str(v)[:20]!r}")
                continue
            if isinstance(v, int) and math.isinf(x):
                huge.add(line, f"{k}={str(v)[:12]}...")
            cols_steps.setdefault(k, []).append(step)
            cols_vals.setdefault(k, []).append(x)
    table.step_column = step_name
    text_keys = [k for k in keys if k not in numeric_keys and k != step_name]
    if text_keys:
        table.meta["ignored_columns"] = {k: "no numeric value" for k in text_keys[:30]}
    for k in cols_steps:
        table.columns[k] = Series(np.asarray(cols_steps[k], dtype=np.int64),
                                  np.asarray(cols_vals[k], dtype=np.float64))
    no_step.flush(table)
    bad.flush(table)
    huge.flush(table)
    return table


def _globalize(table: LogTable, rows: list[tuple[int | None, Mapping[str, Any]]],
               steps: list[int | None], step_name: str) -> None:
    """Turn a per-epoch step counter into global steps in place (see steps_across_epochs)."""
    epoch_key = next((k for k in ("epoch", "Epoch") if any(k in r for _, r in rows)), None)
    if epoch_key is None:
        return
    idx = [i for i, s in enumerate(steps) if s is not None]
    ep = [as_number(rows[i][1].get(epoch_key)) for i in idx]
    if any(e is None for e in ep):
        return
    st = np.asarray([steps[i] for i in idx], dtype=np.int64)
    glob = steps_across_epochs(st, np.asarray(ep, dtype=np.float64))
    if glob is None:
        return
    for i, g in zip(idx, glob.tolist(), strict=True):
        steps[i] = g
    table.note("step_per_epoch", f"'{step_name}' restarts every epoch; steps were made global "
               "by adding the last step of the epochs before")


_ROW_TIMINGS = ("time", "data_time", "iter_time", "batch_time")
#: "5/300": a progress counter (step of planned steps) written as a string.
_PROGRESS = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


def _normalized_row(row: dict[str, Any]) -> dict[str, Any]:
    """A JSON row's values as the table reads them: elapsed times written as ``"H:MM:SS"``
    strings in seconds; a progress counter ``"5/300"`` as its numbers; the timings of an
    evaluation's row (mmengine's scalars.json writes ``{"val/loss": .., "data_time": ..,
    "time": .., "step": 50}``: the validation loop's per-iteration times) kept apart from the
    training step's as ``val_<name>``."""
    for k, v in list(row.items()):
        if isinstance(v, str) and ":" in v and len(v) < 40:
            secs = duration_seconds(v)
            if secs is not None:
                row[k] = secs
        elif isinstance(v, str) and (m := _PROGRESS.fullmatch(v)):
            # ms-swift's "global_step/max_steps": "5/300" (a progress counter as a string):
            # the step is its first number, the planned total its second
            first, _, second = k.partition("/")
            row[first or k] = int(m.group(1))
            if second:
                row[second] = int(m.group(2))
            if first and second:
                del row[k]
    if "loss" not in row and any(
            k.replace("/", "_").split("_")[0] in VAL_SIDE | TEST_SIDE for k in row):
        for k in _ROW_TIMINGS:
            if k in row:
                row[f"val_{k}"] = row.pop(k)
    return row


#: Generic words a tracker uses for a series of one metric ("total", "value"): the metric alone.
_PLAIN_VARIANTS = frozenset({"", "value", "total", "mean", "avg", "scalar"})


def scalar_events(obj: Any) -> list[dict[str, Any]] | None:
    """Rows from tracker events, one scalar each (a dict or a list of dicts with ``metric``,
    ``value`` and ``iter``/``step``; ClearML's offline ``metrics.jsonl`` holds batches of
    ``{"type": "training_stats_scalar", "metric": title, "variant": series, "iter",
    "value"}``): the name is ``title/series`` ("loss/train"), or the title alone when the
    series is a generic word or repeats it; None when ``obj`` is not such events."""
    evs = obj if isinstance(obj, list) else [obj]
    if not evs or not all(isinstance(e, dict) and "metric" in e and "value" in e and
                          ("iter" in e or "step" in e) for e in evs):
        return None
    out = []
    for e in evs:
        if e.get("type", "training_stats_scalar") != "training_stats_scalar":
            continue  # vectors, plots, debug images, console lines
        title, series = str(e["metric"]), str(e.get("variant", "")).strip()
        name = title if series.lower() in _PLAIN_VARIANTS | {title.lower()} else \
            f"{title}/{series}"
        out.append({"iter": e.get("iter", e.get("step")), name: e["value"]})
    return out


def read_jsonl(path: Path) -> LogTable:
    """Read a JSON Lines log: one JSON object per line."""
    text = read_text(path, "JSON Lines log (one JSON object per line)")
    table = LogTable(path=str(path), format="jsonl")
    if "\r" in text:
        table.meta["line_endings"] = "crlf"
    lines = text.splitlines()
    last = len(lines)
    while last and not lines[last - 1].strip():
        last -= 1
    rows: list[tuple[int | None, dict[str, Any]]] = []
    bad_lines = NoteCounter("skipped_line", "lines that are not JSON objects skipped")
    for i in range(last):
        line = lines[i].strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            if i == last - 1 and rows:
                table.note("truncated_last_line", "last line is not complete JSON (the writer "
                           "was probably interrupted); it was left out", line=i + 1)
            else:
                bad_lines.add(i + 1)
            continue
        events = scalar_events(obj)
        if events is not None:
            rows.extend((i + 1, e) for e in events)
            continue
        if not isinstance(obj, dict):
            bad_lines.add(i + 1)
            continue
        rows.append((i + 1, _normalized_row(flatten(obj))))
    bad_lines.flush(table)
    phase = next((k for k in _PHASE_KEYS if any(_is_eval(r.get(k)) for _, r in rows[:2000])),
                 None)
    if phase is not None:
        rows = _evaluation_rows(rows, table, phase)
    if not rows:
        what = "is empty" if not text.strip() else "has no line holding a JSON object"
        raise UnrecognizedInputError(str(path), f"{what}; expected a JSON Lines log "
                                     "(one object per line, e.g. {\"step\": 1, \"loss\": 2.3})")
    rows_to_table(table, rows)
    if not table.columns:
        raise UnrecognizedInputError(str(path), "has JSON objects but no numeric values; "
                                     "expected metrics such as {\"step\": 1, \"loss\": 2.3}")
    return table


#: A key that says which loop wrote the row: mmcv/mmdetection 2.x's ``.log.json`` writes
#: ``"mode": "train"`` or ``"val"``; other loggers "split", "phase", "stage", "subset".
_PHASE_KEYS = ("mode", "split", "phase", "stage", "subset")
_EVAL_PHASES = frozenset({"val", "valid", "validation", "eval", "evaluation", "test", "dev"})
_POSITION_KEYS = ("epoch", "iter", "step")


def _is_eval(v: Any) -> bool:
    return isinstance(v, str) and v.strip().lower() in _EVAL_PHASES


def _evaluation_rows(rows: list[tuple[int | None, dict[str, Any]]], table: LogTable,
                     phase: str) -> list[tuple[int | None, dict[str, Any]]]:
    """Rows an evaluation wrote (``"<phase>": "val"``): their ``loss`` is the validation
    loss, so the metrics the training rows also hold become ``val_<name>`` (an ``lr`` repeats
    the training row's and is dropped). mmcv's rows (``mode`` with ``iter``) count validation
    batches in ``iter``, not a training position: they take the position of the training row
    before them."""
    out: list[tuple[int | None, dict[str, Any]]] = []
    last_train: dict[str, Any] | None = None
    moved = 0
    trained = {k for _, r in rows if not _is_eval(r.get(phase)) for k in r}
    mmcv = phase == "mode" and any("iter" in r for _, r in rows[:50])
    for line, r in rows:
        if not _is_eval(r.get(phase)):
            if r.get(phase) is not None:
                last_train = r
            out.append((line, r))
            continue
        if mmcv and last_train is None:
            continue  # an evaluation before any training row has no position
        row = {k: last_train[k] for k in _POSITION_KEYS if k in last_train} \
            if mmcv and last_train is not None else {}
        for k, v in r.items():
            if k in (phase, "lr") or (mmcv and k in _POSITION_KEYS):
                continue
            if k.startswith(_VAL_NAMED) or (not mmcv and _is_position(k)):
                row[k] = v  # already the validation side's, or the row's own position
            else:
                # a name the training rows use too is the validation side's here ("loss"); an
                # evaluation's own metric ("bbox_mAP") keeps its name
                row[f"val_{k}" if k in trained else k] = v
        out.append((line, row))
        moved += 1
    if moved:
        table.note("evaluation_rows", f"{moved} rows marked \"{phase}\": <evaluation> read "
                   "as evaluations" + (" at the training position before them (their 'iter' "
                                       "counts validation batches)" if mmcv else ""))
    return out


def _is_position(key: str) -> bool:
    return key in STEP_COLUMNS or key.lower() in STEP_COLUMNS or key in ("epoch", "Epoch")


_VAL_NAMED = ("val_", "val/", "valid", "eval", "test")


def _numeric_list(v: Any) -> bool:
    return isinstance(v, list) and len(v) > 0 and any(as_number(x) is not None for x in v[:50])


def _is_series_object(v: Any) -> bool:
    """``{"steps": [...], "values": [...]}`` (Sacred's per-metric record)."""
    return isinstance(v, dict) and isinstance(v.get("values"), list) and bool(v["values"])


def read_json_rows(path: Path, doc: Any) -> LogTable:
    """A parsed JSON document of rows: ``[{...}, ...]`` or ``{"step": [...], "loss": [...]}``."""
    table = LogTable(path=str(path), format="json_rows")
    row_lists = {k: v for k, v in doc.items() if isinstance(v, list) and v and all(
        isinstance(r, dict) for r in v)} if isinstance(doc, dict) else {}
    if isinstance(doc, list) and doc and all(isinstance(r, dict) for r in doc):
        rows_to_table(table, ((None, flatten(r)) for r in doc))
    elif isinstance(doc, list) and len(doc) >= 2 and all(
            not isinstance(x, (list, dict)) and as_number(x) is not None for x in doc):
        # json.dump(losses, f): a list of numbers whose name is the file's ("losses.json")
        rows_to_table(table, ((None, {path.stem: x}) for x in doc))
        table.note("metric_from_file_name", "a list of numbers and no name: the series takes "
                   f"its name from the file: '{path.stem}'")
    elif isinstance(doc, list) and len(doc) >= 2 and all(
            isinstance(r, list) and len(r) == 3 and all(as_number(x) is not None for x in r)
            for r in doc):
        # TensorBoard's "Download JSON": [[wall_time, step, value], ...]; the loader names
        # the value after the file (run-<run>-tag-<tag>.json)
        rows_to_table(table, ((None, {"wall_time": r[0], "step": r[1], "value": r[2]})
                              for r in doc))
    elif row_lists and not any(_numeric_list(v) for v in doc.values()):
        # {"train": [{"epoch": 1, "loss": ..}], "val": [...]}: one list of rows per split;
        # {"config": {...}, "metrics": [{...}]}: the rows beside a run's settings
        steps = {c.lower() for c in STEP_COLUMNS + FALLBACK_STEP_COLUMNS}
        one = len(row_lists) == 1
        rows_to_table(table, ((None, {(kk if one or kk.lower() in steps else f"{k}/{kk}"): vv
                                      for kk, vv in flatten(r).items()})
                              for k, v in row_lists.items() for r in v))
        if len(row_lists) < len(doc):
            table.note("json_members_skipped", "members that are not lists of rows were not "
                       f"read: {', '.join(str(k) for k in doc if k not in row_lists)[:120]}")
    elif isinstance(doc, dict) and doc and all(_is_series_object(v) for v in doc.values()):
        # Sacred's metrics.json: {"train.loss": {"steps": [...], "values": [...], ...}}
        for name, obj in doc.items():
            values = obj["values"]
            at = obj.get("steps")
            if not isinstance(at, list) or len(at) != len(values):
                at = list(range(len(values)))
                table.note("step_from_row_index", f"'{name}' has no steps list of its length; "
                           "steps are its positions counted from 0")
            cells = [(as_number(st), as_number(v)) for st, v in zip(at, values, strict=True)]
            kept = [(int(st), v) for st, v in cells if st is not None and v is not None]
            if kept:
                table.columns[str(name)] = Series(
                    np.asarray([st for st, _ in kept], dtype=np.int64),
                    np.asarray([v for _, v in kept], dtype=np.float64))
    elif isinstance(doc, dict) and doc and any(_numeric_list(v) for v in doc.values()):
        from trainmedic.run.history import read_history

        read_history(table, doc)
    else:
        raise UnrecognizedInputError(str(path), "is JSON but not a training log; expected a "
                                     "trainer_state.json (with log_history), a list of metric "
                                     "objects, or one object per line")
    if not table.columns:
        raise UnrecognizedInputError(str(path), "is JSON with no numeric metrics; expected "
                                     "rows such as {\"step\": 1, \"loss\": 2.3}")
    return table


def _python_literal(text: str) -> Any:
    """A dict or list printed by Python (``print(history.history)``: single quotes, ``nan``)
    read with ``ast.literal_eval``, which evaluates literals only, never code; None when the
    text is not one, or is over 4 MiB (the parser's tree costs ~100x the text in memory)."""
    if len(text) > 4 << 20 or text.lstrip()[:1] not in ("{", "["):
        return None
    import ast

    text = plain_scalars(text)
    body = re.sub(r"(?<=[\[,:]\s)-?(?:nan|inf)\b|(?<=[\[,:])-?(?:nan|inf)\b",
                  lambda m: f'"{m.group(0)}"', text) if "nan" in text or "inf" in text else text
    try:
        doc = ast.literal_eval(body.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return doc if isinstance(doc, (dict, list)) else None


def read_json_document(path: Path) -> LogTable:
    """A JSON document (not JSON Lines): an HF trainer_state.json, a list of row objects, an
    object of lists (Keras history), ..., or a dict Python printed."""
    from trainmedic.run.hf_state import is_hf_state, read_hf_state

    text = read_text(path, "JSON log")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        # Several objects one per line whose first line is pretty-printed, or one batch of
        # tracker events per line ("[{...}, {...}]")? Try lines.
        if text.lstrip()[:1] in "{[" and text.count("\n") > 1:
            try:
                return read_jsonl(path)
            except UnrecognizedInputError:
                pass
        doc = _python_literal(text)
        if doc is not None:
            return read_json_rows(path, doc)
        raise UnrecognizedInputError(str(path), f"is not valid JSON ({exc.msg} at line "
                                     f"{exc.lineno}); expected a trainer_state.json or JSON "
                                     "Lines log") from exc
    except ValueError as exc:
        # Python refuses integer literals of more than 4300 digits (CVE-2020-10735 limit).
        raise UnrecognizedInputError(str(path), "holds a number too long to read (an integer "
                                     "of more than 4300 digits); expected a training log of "
                                     "ordinary numbers") from exc
    if is_hf_state(doc):
        return read_hf_state(path, doc)
    return read_json_rows(path, doc)


#: AllenNLP's trainer writes each epoch's metrics to ``metrics_epoch_<N>.json`` in the
#: serialization directory ("training_loss", "validation_loss", "epoch", ...).
EPOCH_FILE = re.compile(r"metrics_epoch_(\d+)\.json")


def read_epoch_files(folder: Path) -> LogTable:
    """One row per ``metrics_epoch_<N>.json`` file of ``folder``, at epoch N."""
    rows: list[tuple[int | None, dict[str, Any]]] = []
    table = LogTable(path=str(folder), format="json")
    for p in folder.iterdir():
        m = EPOCH_FILE.fullmatch(p.name)
        if m is None:
            continue
        try:
            doc = json.loads(read_text(p, "AllenNLP metrics file (a JSON object)"))
        except ValueError:
            table.note("skipped_file", f"{p.name} is not valid JSON; left out")
            continue
        if isinstance(doc, dict):
            rows.append((int(m.group(1)), {**flatten(doc), "epoch": int(m.group(1))}))
    if not rows:
        raise UnrecognizedInputError(str(folder), "has no readable metrics_epoch_<N>.json file; "
                                     "expected AllenNLP's per-epoch metrics")
    rows.sort(key=lambda r: r[0] or 0)
    return rows_to_table(table, rows)
