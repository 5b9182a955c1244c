"""Training console logs: one line reader for what trainers print.

Every line is read by the same rules, a small table of patterns rather than one parser per
framework:

- a JSON object or a printed Python dict in the line (HF ``{'loss': 0.5, 'epoch': 0.1}``,
  fairseq ``--log-format json``, DETR ``log.txt``) is a row as it stands;
- otherwise the line is cut into ``key value`` pairs: each number takes as its key the words
  before it (``iter 100: loss 2.3456, time 12.34ms`` -> iter, loss, time_ms; ``| epoch 001 |
  loss 9.12 | lr 0.0005`` -> epoch, loss, lr; ``- loss: 0.12 - val_loss: 0.3``), a unit
  written after the number joins the key (``12.34ms`` -> ``time_ms``, ``49.66GiB`` ->
  ``memory_gib``), and a bare duration in parentheses is the line's step time;
- progress counters (``Epoch [1][1550/23454]``, ``| epoch 1 | 200/ 2983 batches``,
  ``epoch 001: 200 / 1374``) make a global step from the epoch and the position in it;
- Keras' ``Epoch 3/20`` line sets the epoch of the metric lines after it;
- a line saying it reports validation (``valid on 'valid' subset``) puts its keys on the
  validation side (``loss`` -> ``valid_loss``);
- a bare tqdm bar's position is the step of the metric lines printed next to or after it
  (the bar drawn most often: the training loop's); a step line with no metrics opens a row
  that the metric lines right under it fill (Composer), and a printed dict right under a
  step line joins that line's row (TF Object Detection).

The tokenizer is ``linepairs``, the progress counters ``counters``; ``aligned`` reads tables
with aligned spaces, blocks of ``name value`` lines (Stable-Baselines3) and one-column files.
A row needs a step (or a printed dict); the file is a training log when enough of its lines
are read (``recognized_share``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from trainmedic.errors import UnrecognizedInputError
from trainmedic.run import line_marks as marks
from trainmedic.run.aligned import aligned_rows, bare_numbers, is_single_column, record_rows
from trainmedic.run.counters import (
    DARKNET,
    END_OF_EPOCH,
    EPOCH_BATCH_PAIR,
    EPOCH_KEYS,
    EPOCH_THEN_ITER,
    ESPNET_EPOCH,
    KERAS_EPOCH,
    LEADING_COUNT,
    MMENGINE_ITER,
    PROGRESS,
    TQDM_BAR,
    bar_step_time,
    epoch_positions,
    progress_offsets,
    step_name_value,
)
from trainmedic.run.linepairs import (
    EVAL_ANNOUNCED,
    STEP_KEYS,
    VAL_PREFIXES,
    choose_step,
    dict_in_line,
    sectioned_pairs,
)
from trainmedic.run.rank_prefix import rank_lines
from trainmedic.run.scaler_messages import scale_message, scale_rows_alone, with_scale_rows
from trainmedic.run.table import LogTable, cell_float

__all__ = ["read_text_log", "read_text_logs", "recognized_share", "MIN_SHARE"]

MIN_SHARE = 0.3
"""Share of non-empty lines the reader must recognise for a file to count as a training log."""

_SIDE_WORDS = ("valid", "val", "validation", "eval", "test", "train", "training")
_TIME_SUFFIXES = ("_ms", "_s", "_us", "_sec", "_min")
_SAMPLE_LINES = 400
_MAX_LINE = 2048
_EPOCH_WORD = re.compile(r"\bepoch\b", re.I)
_TOKEN_WORDS = re.compile(r"[A-Za-z]{2,}")


class _Reader:
    """State across lines: the current epoch (Keras), the batches per epoch seen."""

    def __init__(self) -> None:
        self.epoch: int | None = None
        self.per_epoch: int | None = None
        self.rows: list[tuple[int, dict[str, Any]]] = []
        self.pending: dict[str, float] = {}
        self.eval_next = False  # a line announced an evaluation (EVAL_ANNOUNCED)
        self.stepless: list[tuple[int, dict[str, Any]]] = []
        self.recognized = 0
        self.lines = 0
        self.progress: list[tuple[dict[str, Any], int, int, int]] = []
        """(row, epoch, position, positions per epoch) of every progress counter read."""
        self.bars: dict[int, int] = {}
        """``{total: position}`` of the last draw of each bare tqdm bar (by its total)."""
        self.bar_draws: dict[int, int] = {}
        self.block: tuple[int, dict[str, Any]] | None = None
        """The row a step line opened, that the metric lines right under it fill
        (Composer's ``[epoch=1][batch=10/100]:`` over ``Train loss/train/total: 2.3``)."""
        self.block_no = 0
        self.block_open = False
        self.lead_pos: int | None = None
        self.lead_epoch = 0
        self.overlaps = 0
        self.attached: list[tuple[int, dict[str, Any]]] = []
        self.block_rows: list[dict[str, Any]] = []
        self.scales: list[tuple[int, float, int | None]] = []
        """(line number, scale, the step of a bar on the same line) of the fp16 scaler's
        overflow messages."""
        self.history: dict[str, Any] | None = None
        """A printed dict of per-epoch lists (Keras' ``history.history``), when one was seen."""

    def scale_bar_steps(self) -> list[int]:
        return [b for _, _, b in self.scales if b is not None]

    def counters_are_global(self) -> None:
        """``Epoch [2/3] Step [95/200]``: when the position never restarts as the epoch
        changes (it goes on from where the last epoch stopped), the counter already is the
        global step (``/200`` is the run's length, not the epoch's), not a position within
        the epoch: the global step is the position itself."""
        prog = self.progress
        pairs = list(zip(prog, prog[1:], strict=False))
        turns = [(a[2], b[2]) for a, b in pairs if b[1] > a[1]]
        if turns and all(after > before for before, after in turns):
            for row, _ep, pos, _of in prog:
                row["_global"] = pos

    def _attach(self, no: int, row: dict[str, Any]) -> bool:
        """Put a stepless metric line into the row of the step line right above it (a block
        of metric lines under a step line, or a printed dict after "Step 100 per-step time
        0.5s"), when none of its keys is already there."""
        if self.block is None or no - self.block_no > 1 or \
                any(k in STEP_KEYS or k in EPOCH_KEYS for k in row):
            return False
        first, target = self.block
        if any(k in target for k in row):
            self.overlaps += 1  # "Epoch 1" over per-batch "loss: x" lines: not one row
            return False
        target.update(row)
        if not self.block_open:
            self.rows.append((first, target))
            self.block_open = True
            self.block_rows.append(target)
        self.attached.append((no, dict(row)))
        self.block_no = no
        self.recognized += 1
        return True

    def undo_blocks(self) -> None:
        """When metric lines under step lines repeated their keys as often as they joined
        (``Epoch 1`` over five ``loss: x`` lines), the blocks were no rows: their lines go
        back to the stepless lines they are."""
        if not self.overlaps or self.overlaps < len(self.attached) / 2:
            return
        ids = {id(r) for r in self.block_rows}
        self.rows = [(no, r) for no, r in self.rows if id(r) not in ids]
        self.stepless = sorted(self.stepless + self.attached, key=lambda nr: nr[0])
        self.recognized -= len(self.attached)

    def line(self, no: int, raw: str) -> None:
        if "\x1b" in raw or "\b" in raw:
            raw = marks.TERMINAL.sub("", raw)
        if not raw.strip():
            return
        self.lines += 1
        if "training " in raw and marks.RUN_SUMMARY.search(raw):
            return  # a whole-run average, not a step's reading
        if raw[:1] in "IWEF" and (am := marks.ABSL_PREFIX.match(raw)):
            raw = raw[am.end():]
        elif " | " in raw and (lm := marks.LOGURU_PREFIX.match(raw)):
            raw = raw[lm.end():]
        elif raw[:1] in " [" and (lv := marks.BRACKET_LEVEL_PREFIX.match(raw)):
            raw = raw[lv.end():]
        if (scale := scale_message(raw)) is not None:
            bm = TQDM_BAR.search(raw) if "%|" in raw else None  # DeepSpeed's: after the bar
            self.scales.append((no, scale, int(bm.group("pos")) if bm else None))
            if bm is not None:  # the bar is drawn all the same
                of = int(bm.group("of"))
                self.bars[of] = int(bm.group("pos"))
                self.bar_draws[of] = self.bar_draws.get(of, 0) + 1
            self.recognized += 1
            return
        bar = TQDM_BAR.search(raw) if "%|" in raw else None
        if bar is not None and not _EPOCH_WORD.search(raw[:bar.start()]):
            # A bare tqdm bar (HF Trainer's "  3%|▎  | 100/3000 [00:10<05:00, 9.8it/s]"): its
            # position is the step of the metric lines printed next to or after it; its rate
            # the step time, unless it is an evaluation's ("Validation DataLoader 0: 100%|").
            of = int(bar.group("of"))
            self.bars[of] = int(bar.group("pos"))
            self.bar_draws[of] = self.bar_draws.get(of, 0) + 1
            evaluating = marks.EVAL_BAR.search(raw[:bar.start()])
            raw = raw[:bar.start()] + " | " + raw[bar.end():]
            words = _TOKEN_WORDS.search(raw)
            raw += "" if evaluating else bar_step_time(bar)
            if not words:
                self.recognized += 1
                return
        d = dict_in_line(raw)
        if d is not None:
            from trainmedic.run.jsonlog import as_number, flatten

            flat = flatten(d)
            if sum(1 for v in flat.values() if isinstance(v, list) and len(v) >= 2) and \
                    not any(as_number(v) is not None for v in flat.values()):
                # print(history.history): {'loss': [0.9, 0.7, ...], 'val_loss': [...]}
                self.history = flat
                self.recognized += 1
                return
            if any(as_number(v) is not None for v in flat.values()):
                # Orbit's "train | step: 10 | output: {'training_loss': 0.2}": step first
                for k, v in sectioned_pairs(raw[:raw.find("{")]).items():
                    flat.setdefault(k, v)
                if self._attach(no, flat):
                    return
                if self.bars:
                    flat["_bars"] = dict(self.bars)
                self.rows.append((no, flat))
                self.recognized += 1
            return
        if len(raw) > _MAX_LINE:
            # a metrics line is short; a pasted blob (a dict is read above, whole) is cut for
            # the tokenizer, whose cost grows with the line
            raw = raw[:_MAX_LINE]
        dm = DARKNET.match(raw)
        if dm:
            cells = {"loss": "loss", "avg_loss": "avg", "lr": "lr", "step_time_s": "secs",
                     "images": "images"}
            got = {k: cell_float(dm.group(g)) for k, g in cells.items()}
            if None not in got.values():  # "1.2.3 seconds" is no number: not this line
                self.rows.append((no, {"iter": int(dm.group("iter")), **got}))
                self.recognized += 1
                return
        if (one := step_name_value(raw)) is not None:
            self.rows.append((no, one))
            self.recognized += 1
            return
        m = KERAS_EPOCH.match(raw)
        if m:
            self.epoch = int(m.group("epoch"))
            self.recognized += 1
            return
        text = MMENGINE_ITER.sub(r"iter \1", marks.STAMP.sub(" | ", raw))
        if "epoch" in text:  # ESPnet: "3epoch:train:201-300batch:", "3epoch results:"
            text = ESPNET_EPOCH.sub(lambda m: f" epoch {m.group(1)} " + (
                f"batch {m.group(3)} | " if m.group(3) else "| "), text)
        row: dict[str, Any] = {}
        mid_bar = False  # a progress bar drawn inside its epoch (its postfix repeats the evals)
        for i, rx in enumerate(PROGRESS):
            pm = rx.search(text)
            if pm:
                ep, pos, of = int(pm.group("epoch")), int(pm.group("pos")), int(pm.group("of"))
                mid_bar = pos < of and "%|" in text
                self.per_epoch = of
                row["epoch"] = ep
                if i == 0:
                    row["iter"] = pos  # mmcv's "iter" is the position in the epoch
                row["_global"] = (ep - 1) * of + pos if ep >= 1 else pos
                self.progress.append((row, ep, pos, of))
                text = text[:pm.start()] + " | " + text[pm.end():]
                break
        lm = LEADING_COUNT.match(text) if "_global" not in row else None
        if lm:
            # MONAI's "12/50, train_loss: 0.61": the position in an epoch nobody numbers; an
            # epoch ends where the position goes back
            pos, of = int(lm.group("pos")), int(lm.group("of"))
            if self.lead_pos is not None and pos <= self.lead_pos:
                self.lead_epoch += 1
            self.lead_pos = pos
            row["_global"] = self.lead_epoch * of + pos
            text = " | " + text[lm.end():]
        if "_global" not in row and (ym := EPOCH_THEN_ITER.match(text)):
            row["epoch"], row["_global"] = int(ym.group("epoch")), int(ym.group("iter"))
            text = " | " + text[ym.end():]
        bm = EPOCH_BATCH_PAIR.match(text) if "_global" not in row else None
        if bm:
            # "[1,  2000] loss: 2.187": epoch and batch, made global by epoch_positions
            row["epoch"], row["batch"] = int(bm.group("epoch")), int(bm.group("pos"))
            text = " | " + text[bm.end():]
        em = END_OF_EPOCH.search(text)
        if em and "_global" not in row:
            ep = int(em.group("epoch"))
            row["epoch"] = ep
            if self.per_epoch:
                row["_global"] = ep * self.per_epoch
            text = text[:em.start()] + " | " + text[em.end():]
        side, text = marks.line_side(text, self.eval_next)
        pairs = sectioned_pairs(text)
        if mid_bar:
            # Lightning's bar keeps the last evaluation in its postfix ("..., val_loss=1.387")
            # at every redraw until the next one: only the epoch's last draw reports it
            pairs = {k: v for k, v in pairs.items() if not k.startswith(VAL_PREFIXES)}
        for k, v in pairs.items():
            if side and not any(k.startswith(s) for s in _SIDE_WORDS) and \
                    k not in EPOCH_KEYS + STEP_KEYS:
                k = f"{side}_{k}"
            row.setdefault(k, v)
        has_step = "_global" in row or any(k in row for k in STEP_KEYS + EPOCH_KEYS) or \
            "bracket_pos" in row or \
            any(k.endswith(("_iter", "_step", "_epoch")) and k.split("_")[0] in (
                "training", "train") for k in row)
        by_keras_epoch = False
        if not has_step and self.epoch is not None and (bar is None or _EPOCH_WORD.search(
                raw)) and any("loss" in k or "acc" in k for k in pairs):  # (a bar's own step)
            row["epoch"] = self.epoch
            has_step = by_keras_epoch = True
            if "ETA:" in text or ((km := marks.KERAS_COUNT.match(raw)) and
                                  int(km.group(1)) < int(km.group(2))):
                # "32/100 [=====>....] - ETA: 1s - loss: 0.52" (Keras 3: "32/100 ━━━━ 1s -
                # loss: 0.52"): a progress bar's running mean partway through the epoch; the
                # epoch's line is the finished draw
                self.recognized += 1
                return
        for k in [k for k in row if k.startswith("line_time_")]:
            # "67s - loss: ..." after "Epoch 3/20": the time the epoch took
            row[("epoch_time_" if by_keras_epoch else "step_time_") + k[len("line_time_"):]] = \
                row.pop(k)
        metrics = [k for k in row if k not in EPOCH_KEYS + STEP_KEYS
                   and k not in ("_global", "bracket_pos")]
        if not metrics and not has_step and EVAL_ANNOUNCED.match(text):
            self.eval_next = True
            return
        if metrics:
            self.eval_next = False
        if has_step and not metrics:
            self.block, self.block_no, self.block_open = (no, row), no, False
            self.recognized += 1
            return
        if not has_step and metrics and self._attach(no, row):
            return
        if has_step and metrics:
            for k, v in self.pending.items():
                row.setdefault(k, v)
            self.pending = {}
            if self.progress and side is None and "epoch" in row and "_global" not in row:
                # fairseq's "| epoch 001 | loss 8.85 | ... | num_updates 300" after its
                # "| epoch 001:  300 / 300 loss=8.80" lines: the epoch's mean at its last step
                row["_epoch_summary"] = True
            self.rows.append((no, row))
            self.recognized += 1
            self.block, self.block_no, self.block_open = (no, row), no, True
        elif not has_step:
            if side and metrics and self.rows and "_bars" not in self.rows[-1][1]:
                # a validation line without a step ("Test set: Average loss: ..."): it
                # belongs to the step of the training line before it (_table_from)
                self.rows.append((no, row))
                self.recognized += 1
                return
            if self.bars and metrics:
                row["_bars"] = dict(self.bars)
            if metrics and not raw.lstrip().startswith(('"', "'")):  # not JSON members
                self.stepless.append((no, dict(row)))
            # A progress bar's "Step: 646ms" before the epoch's summary line: its timings
            # belong to the next row.
            self.pending = {k: v for k, v in pairs.items() if k.endswith(_TIME_SUFFIXES)}
            if self.pending:
                self.recognized += 1


def _bar_steps(reader: _Reader) -> None:
    """Metric lines printed under bare tqdm bars take the position of the training loop's bar
    as their step: of the bars whose position at those lines never goes back and takes mostly
    distinct values (an eval loop's bar, a download's, or a bar that restarts every epoch,
    does not), the one seen at the most lines. With none, the lines keep no step from a bar."""
    tagged = [r.get("_bars", {}) for _, r in reader.rows + reader.stepless if "_bars" in r]
    main, best = None, 0
    for of in reader.bar_draws:
        pos = [b[of] for b in tagged if of in b]
        if len(pos) >= 2 and bool(np.all(np.diff(pos) >= 0)) and \
                len(set(pos)) >= 0.5 * len(pos) and len(pos) > best:
            main, best = of, len(pos)
    if main is None and len(reader.bar_draws) == 1 and len(reader.scale_bar_steps()) >= 2:
        main = next(iter(reader.bar_draws))  # one bar, whose steps the scaler lines name too
    barred = [(no, r) for no, r in reader.stepless
              if main is not None and main in r.get("_bars", {})]
    if barred:
        reader.stepless = [(no, r) for no, r in reader.stepless if "_bars" not in r]
        reader.rows = sorted(reader.rows + barred, key=lambda nr: nr[0])
        reader.recognized += len(barred)
    for _, r in reader.rows + reader.stepless:
        bars = r.pop("_bars", None)
        if bars is not None and main is not None and main in bars:
            r["_bar_step"] = bars[main]


def _scan(text: str | list[tuple[int, str]], limit: int | None = None) -> _Reader:
    """Read ``text`` (or its ``(line number, line)`` pairs) line by line."""
    reader = _Reader()
    lines = enumerate(text.splitlines(), 1) if isinstance(text, str) else text
    for no, line in lines:
        if limit is not None and reader.lines >= limit:
            break
        reader.line(no, line)
    reader.undo_blocks()
    _bar_steps(reader)
    progress_offsets(reader.progress)
    reader.counters_are_global()
    epoch_positions(reader.rows)
    if not reader.rows and len(reader.stepless) >= 3:
        # "Loss: 2.30" once per step with no counter: the lines are the steps, when a loss
        # key repeats on them (a config dump names its keys once). Two or more known metrics
        # alone and nothing else repeated ("load_data_time: 0.0001, train_step_time: 0.665")
        # count too: its timing is judged, the report says no loss was recognised.
        from trainmedic.run.names import resolve_names

        counts: dict[str, int] = {}
        for _, r in reader.stepless:
            for k in r:
                counts[k] = counts.get(k, 0) + 1
        repeated = [k for k, c in counts.items() if c >= 3]
        res = resolve_names(repeated)
        if "loss" in res.aliases or "val_loss" in res.aliases or (
                len(res.aliases) >= 2 and len(res.aliases) == len(repeated)):
            reader.rows = reader.stepless
            reader.recognized += len(reader.stepless)
            reader.stepless = []
    return reader


def recognized_share(text: str) -> float:
    """Share of the first non-empty lines that the reader recognises (0 when fewer than two
    rows with a step come out, or none of their keys names a known metric)."""
    reader = _scan(text, _SAMPLE_LINES)
    if (len(reader.rows) + len(reader.scales) < 2 and reader.history is None) or \
            not reader.lines:  # (an fp16 scaler's overflow message is a row too)
        return 0.0
    from trainmedic.run.names import find_step_column, resolve_names

    keys = list(dict.fromkeys(k for _, r in reader.rows for k in r if k != "_global"))
    keys += ["loss_scale"] if reader.scales else []
    if len(reader.rows) < 2 and reader.history is not None:
        keys = list(reader.history)
        return 1.0 if resolve_names(keys).aliases else 0.0
    res = resolve_names(keys)
    if not (res.aliases or res.derived) and find_step_column(keys) is None:
        return 0.0
    share = reader.recognized / reader.lines
    if share < MIN_SHARE and reader.recognized >= 5:  # a long banner before the first metrics
        first = min(no for no, _ in reader.rows)
        share = reader.recognized / (reader.lines - sum(
            1 for ln in text.splitlines()[:first - 1] if ln.strip()))
    return share


def read_text_logs(path: Path) -> list[LogTable]:
    """Read a console log into one ``LogTable``, or one per rank when several ranks' lines
    are interleaved in it (``[rank1]: step 10 loss 2.3``)."""
    from trainmedic.run.jsonlog import read_text

    text = read_text(path, "training log")
    groups = rank_lines(text)
    if groups is None:
        return [read_text_log(path, text)]
    out = []
    for rank, lines in sorted(groups.items()):
        reader = _scan(lines)
        if not reader.rows:
            continue
        table = _table_from(path, reader, LogTable(path=str(path), format="text", rank=rank))
        table.note("rank_prefix", f"rank {rank}'s lines read from their prefix")
        out.append(table)
    if not out:
        return [read_text_log(path, text)]
    return out


def read_text_log(path: Path, text: str | None = None) -> LogTable:
    """Read a console log (or a one-column file) into a ``LogTable``."""
    from trainmedic.run.jsonlog import read_text

    if text is None:
        text = read_text(path, "training log")
    table = LogTable(path=str(path), format="text")
    from trainmedic.run.aligned import single_column_table

    if is_single_column(text):
        return single_column_table(table, text)
    if bare_numbers(text):
        table.note("metric_from_file_name", f"one number per line and no name: the series "
                   f"takes its name from the file: '{path.stem}'")
        return single_column_table(table, f"{path.stem}\n{text}")
    from trainmedic.run.jsonlog import rows_to_table

    if (records := record_rows(text)) is not None:  # Stable-Baselines3's table, YOLO's .txt
        table.note("record_rows", f"read as {records[0]}")
        return rows_to_table(table, records[1])
    if recognized_share(text) < MIN_SHARE:
        rows = aligned_rows(text)
        if rows is not None:
            table.note("aligned_table", "read as a table of space-aligned columns under a "
                       "header line")
            return rows_to_table(table, rows)
    reader = _scan(text)
    if len(reader.rows) < 2 and reader.history is not None:
        from trainmedic.run.history import read_history

        table.note("printed_history", "read from a printed dict of per-epoch lists")
        return read_history(table, reader.history)
    return _table_from(path, reader, table)


def _table_from(path: Path, reader: _Reader, table: LogTable) -> LogTable:
    from trainmedic.run.jsonlog import rows_to_table

    if len(reader.rows) < 1 and len(reader.scales) >= 2:  # overflow messages alone
        table.note("loss_scale_from_messages", f"{len(reader.scales)} overflow messages of the "
                   "fp16 loss scaler and no metric lines: each message is one skipped step, "
                   "numbered in order from 0")
        return rows_to_table(table, scale_rows_alone(reader.scales))
    if len(reader.rows) < 1:
        raise UnrecognizedInputError(str(path), "is text, but no line reads as a training "
                                     "log line; expected lines such as 'step 100: loss 2.31' "
                                     "or 'epoch 3 | loss 0.52 | lr 0.001'")
    step = choose_step(reader.rows)
    rows: list[tuple[int | None, dict[str, Any]]] = []
    carried = 0
    last_step: Any = None
    stepped = {k for _, r in reader.rows if step in r for k in r}
    at_step: dict[Any, set[str]] = {}  # the keys each step's progress lines hold
    summaries = 0
    for no, r in reader.rows:
        r = dict(r)
        summary = bool(r.pop("_epoch_summary", False))
        r.pop("_bar_step" if step != "_bar_step" else "", None)
        r.pop("bracket_pos" if step != "bracket_pos" else "", None)
        if step is not None:
            v = r.pop(step, None)
            r.pop("_global", None)
            if v is None:
                # fairseq's "train_num_updates" / "valid_num_updates" on summary lines
                v = next((r.pop(k) for k in list(r) if k.endswith("_" + step)), None)
            if v is None and step in STEP_KEYS:
                # "step 20: train loss ..." among "iter 20: loss ..." lines: one counter
                v = next((r.pop(k) for k in STEP_KEYS if k in r), None)
            if v is None:
                # A validation line after a training line often omits the step (fairseq's
                # "valid on 'valid' subset"), and so does a loss the stepped lines never hold
                # (the HF dict between DeepSpeed's "step=10, skipped=0" lines): it belongs to
                # the last step. A training line without one (a cut last line) is left out.
                new = set(r) - stepped - set(EPOCH_KEYS)
                if last_step is None or (not all(
                        k.startswith(VAL_PREFIXES) for k in r if k not in EPOCH_KEYS) and (
                        not any("loss" in k for k in new) or "train_runtime" in r)):
                    continue  # (nor the Trainer's end-of-run summary: run averages)
                v = last_step
                carried += 1
            last_step = v
            # An epoch counter stays "epoch": the step is then the epoch (per-epoch times)
            name = "epoch" if step in EPOCH_KEYS else "step"
            r.pop(name, None)
            r[name] = int(v) if isinstance(v, (int, float)) and math.isfinite(v) else v
            if summary and r[name] in at_step:
                # the epoch's means at a step a progress line holds would read as a jump there
                held = at_step[r[name]] - set(EPOCH_KEYS) - {name}
                summaries += any(k in held for k in r)
                r = {k: x for k, x in r.items() if k not in held}
                if not set(r) - set(EPOCH_KEYS) - {name}:
                    continue
            elif not summary:
                at_step.setdefault(r[name], set()).update(r)
        else:
            r.pop("_global", None)
        rows.append((no, r))
    if step is not None and reader.scales:
        rows, n = with_scale_rows(rows, "epoch" if step in EPOCH_KEYS else "step", reader.scales)
        if n:
            table.note("loss_scale_from_messages", f"{len(reader.scales)} overflow messages of "
                       f"the fp16 loss scaler read as {n} loss_scale point(s), each one step "
                       "after the logged step before it")
    rows_to_table(table, rows)
    if any({"loss", "learning_rate", "epoch"} <= r.keys() and isinstance(r["epoch"], float)
           and not float(r["epoch"]).is_integer() for _, r in reader.rows[:50]):
        # the HF Trainer's printed log dicts: its NaN filter applies (nan_masked_in_logs)
        table.meta.setdefault("framework", "huggingface")
    if summaries:
        table.note("epoch_summary", f"{summaries} end-of-epoch summary lines repeat the step of "
                   "the epoch's last progress line with the epoch's means: not read there")
    if carried:
        table.note("step_carried", f"{carried} metric lines without a step were given the "
                   "step of the line before them")
    skipped = reader.lines - reader.recognized
    if skipped:
        table.note("skipped_line", f"{skipped} of {reader.lines} lines are not metric lines "
                   "(messages, warnings, progress bars) and were not read")
    if step == "_bar_step":
        table.note("step_from_progress_bar", "steps are the positions of the progress bar "
                   "drawn before each metric line")
    elif step == "bracket_pos":
        table.note("step_from_counter", "steps are the bare [i/N] counters of the metric lines")
    elif step is not None and step not in ("step", "_global"):
        table.meta["text_step_key"] = step
    if not table.columns:
        raise UnrecognizedInputError(str(path), "is text with step lines but no numeric "
                                     "metrics; expected lines such as 'step 100: loss 2.31'")
    return table
