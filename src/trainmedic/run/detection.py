"""Which kind of log a file holds, told by its content (the first 64 KiB), not by its name:
a SQLite header is a run store, a TFRecord frame an event file, a ``{...}`` per line JSON Lines,
a delimited header row a CSV, and text the line reader recognises a console log.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from trainmedic.errors import UnreadableInputError
from trainmedic.run.table import UTF16_BOMS

__all__ = ["detect_format", "names_look_like_log", "WHAT_WE_READ"]

_SNIFF_BYTES = 65536
_SQLITE_MAGIC = b"SQLite format 3\x00"
_GZIP_MAGIC = b"\x1f\x8b"
_WANDB_MAGIC = b":W&B"  # a W&B transaction log (run/wandb_run.py)
_PARQUET_MAGIC = b"PAR1"

WHAT_WE_READ = ("CSV logs with a header row, JSON Lines, HF trainer_state.json, Keras "
                "history JSON, TensorBoard event files, MLflow file stores, training console "
                "logs, trainmedic run stores (SQLite)")


def detect_format(path: Path) -> str | None:
    """``csv``, ``jsonl``, ``json``, ``tensorboard``, ``store``, ``wandb`` (a ``.wandb``
    transaction log), ``parquet``, ``text``, ``empty``, or None (not a log we read).

    Reads at most the first 64 KiB. Raises UnreadableInputError when the file cannot be opened.
    """
    try:
        with path.open("rb") as f:
            head = f.read(_SNIFF_BYTES)
    except OSError as exc:
        raise UnreadableInputError(str(path), f"cannot open the file ({exc.strerror}); expected "
                                   f"a readable log ({WHAT_WE_READ})") from exc
    if head.startswith(_SQLITE_MAGIC):
        return "store"
    if head.startswith(_WANDB_MAGIC):
        return "wandb"
    if head.startswith(_PARQUET_MAGIC):
        return "parquet"
    if "tfevents" in path.name:
        return "tensorboard"
    if len(head) >= 12:
        from trainmedic.run.tbevents import looks_like_tfrecord

        if looks_like_tfrecord(head):
            return "tensorboard"
    if head.startswith(UTF16_BOMS):
        # UTF-16 text (PowerShell's redirect): only a console log is read that way
        text16 = head[:len(head) // 2 * 2].decode("utf-16", errors="ignore")
        return "text" if text16.strip() and _is_text_log(text16) else None
    if head.startswith(_GZIP_MAGIC) or b"\x00" in head:
        return None
    text_head = head[3:] if head.startswith(b"\xef\xbb\xbf") else head
    stripped = text_head.lstrip()
    if not stripped:
        return "empty"
    try:
        text = stripped.decode("utf-8")
    except UnicodeDecodeError as exc:
        if 0 < exc.start >= len(stripped) - 4:  # a character cut at the 64 KiB boundary
            text = stripped[:exc.start].decode("utf-8")
        else:  # a Latin-1 CSV can still be a log; random bytes fail the printable test below
            text = stripped.decode("latin-1")
            first_line = text.split("\n", 1)[0]
            if any(d in first_line for d in (",", "\t", ";")) and _printable(text[:4096]):
                return "csv"
            return None
    if text[0] in "{[":
        first = text.split("\n", 1)[0].strip()
        try:
            obj = json.loads(first)
        except ValueError as exc:
            if str(exc).startswith("Extra data") and _is_text_log(text):
                # "[1,  2000] loss: 2.187" (PyTorch's CIFAR-10 tutorial): a whole bracketed
                # value and then words is a console line; no JSON document starts like that
                return "text"
            # "[rank0]:[titan] ..." or printed dicts "{'loss': 0.5}" are console logs; a
            # pretty-printed JSON document ("{", '{"a": ...', "[{") is JSON
            # ("[2024-01-01 10:00:00] iteration 100/ ..." - Megatron, DeepSpeed, OpenNMT - is
            # a console line: a JSON array's first element is a whole number before , or ])
            jsonish = first in ("{", "[") or first[:2] in ('{"', '["', "[{", "[[") or \
                bool(_JSON_NUMBER_ARRAY.match(first))
            # (not JSON-shaped and not a log the line reader knows: still text, so the error
            # a user sees says no line read as a log line, not that the JSON is invalid)
            return "json" if jsonish else "text"
        if isinstance(obj, dict) and "log_history" not in obj and not any(
                isinstance(v, list) and len(v) > 1 for v in obj.values()) and not any(
                isinstance(v, dict) and isinstance(v.get("values"), list)
                for v in obj.values()):
            return "jsonl"
        return "json"
    # the first line that is not a "# note" comment (a CSV's preamble)
    first_line = next((ln for ln in text.split("\n", 64) if not ln.lstrip().startswith("#")),
                      "")
    if any(d in first_line for d in (",", "\t", ";")) and _printable(text[:4096]):
        # "2019-12-31 00:21:04,166 - INFO - Epoch [1][50/100] lr: ..." has a comma too; a
        # header of column names cannot be such a line, and skips the line reader's sniff.
        if _header_like(first_line) and _rows_follow(text, first_line):
            return "csv"
        return "text" if _is_text_log(text) else "csv"
    if _printable(text[:4096]) and _is_text_log(
            text, whole=text_head.decode("utf-8", errors="ignore")):
        return "text"
    from trainmedic.run.aligned import bare_numbers

    if bare_numbers(text) and names_look_like_log([path.stem]):
        return "text"  # "loss.txt": one number per line, named by the file
    return None


_JSON_NUMBER_ARRAY = re.compile(r"\[\s*-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\s*(?:,|\]|$)")
_NOT_A_NAME = re.compile(r"^\s*[-+.\d]|[:=]\s*(?:[-+]?\.?\d|(?:true|false|none)\b)|"
                         r"\S\s+[-+]?\.?\d", re.I)


def _header_like(first_line: str) -> bool:
    """Whether a delimited first line reads as column names: no cell starts with a number
    and none holds ``name: 1.5``, ``name=1.5``, ``name 1.5`` or ``name: False`` (a console
    line that happens to hold a delimiter: Lightning's "GPU available: False, used: False")."""
    delim = next(d for d in (",", "\t", ";") if d in first_line)
    cells = first_line.rstrip("\r").split(delim)
    return all(c.strip() and not _NOT_A_NAME.search(c) for c in cells)


def _rows_follow(text: str, first_line: str) -> bool:
    """Whether a row with as many cells as the header follows it within 5 lines (Megatron's
    "> building train, validation, and test datasets ..." reads as three names, but no row of
    three cells comes after it)."""
    delim = next(d for d in (",", "\t", ";") if d in first_line)
    n = first_line.rstrip("\r").count(delim)
    lines = [ln for ln in text.split("\n", 64)[1:] if ln.strip() and not ln.startswith("#")]
    return not lines or any(ln.rstrip("\r").count(delim) == n for ln in lines[:5])


def _is_text_log(text: str, whole: str | None = None) -> bool:
    """Whether ``text`` (the sniffed head, leading blanks stripped) reads as a console log;
    ``whole`` is the same head with its leading blanks, for the aligned-table check (an
    indented header is pandas' index)."""
    from trainmedic.run.aligned import aligned_rows, is_single_column, record_rows
    from trainmedic.run.textlog import MIN_SHARE, recognized_share

    if is_single_column(text) or recognized_share(text) >= MIN_SHARE:
        return True
    # A table of space-aligned columns is a log when its names say so (step, loss, ...): a
    # whitespace-separated dataset ("x y" over numbers) is not.
    rows = aligned_rows(whole if whole is not None else text, limit=400)
    if rows is None and (records := record_rows(text, limit=400)) is not None:
        rows = records[1]  # blocks of "name value" lines, a headerless YOLO results.txt
    return rows is not None and names_look_like_log(list(dict.fromkeys(
        k for _, r in rows[:50] for k in r)))


def _printable(text: str) -> bool:
    # ESC (colours: ANSI sequences) and backspace (Keras' progress bar redrawing itself) are
    # what terminals print; the line reader drops them
    bad = sum(1 for ch in text if ord(ch) < 32 and ch not in "\r\n\t\x1b\b")
    return bad == 0


def names_look_like_log(cols: list[str]) -> bool:
    """Whether column or key names hold a step column or a metric the names table knows."""
    from trainmedic.run import names as names_mod

    if names_mod.find_step_column(cols) is not None:
        return True
    res = names_mod.resolve_names(cols)
    return bool(res.aliases or res.derived)
