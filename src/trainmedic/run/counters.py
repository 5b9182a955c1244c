"""Progress counters: where a console line sits in the run.

Trainers print their position as an epoch and a place inside it (``Epoch [1][1550/23454]``,
``| epoch 1 | 200/ 2983 batches``, ``Epoch 2, Batch 100``) rather than a global step. These
patterns and ``epoch_positions`` turn such counters into one global step the line reader
(``textlog``) can put rows on.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from trainmedic.run.table import cell_float
from trainmedic.run.vocabulary import TRAIN_SIDE, VAL_SIDE

__all__ = ["PROGRESS", "EPOCH_BATCH_PAIR", "MMENGINE_ITER", "KERAS_EPOCH", "END_OF_EPOCH",
           "DARKNET", "ESPNET_EPOCH", "EPOCH_THEN_ITER", "STEP_NAME_VALUE", "step_name_value",
           "LEADING_COUNT", "POSITION_KEYS", "EPOCH_KEYS", "epoch_positions", "TQDM_BAR",
           "bar_step_time", "progress_offsets"]

PROGRESS = (
    # mmcv/mmdet: "Epoch [1][1550/23454]"
    # (and the PyTorch ImageNet example's "Epoch: [0][  10/5005]")
    # (mmengine: "Epoch(train)  [1][  50/1000]")
    re.compile(r"\bepoch(?:\(train\))?:?\s*\[(?P<epoch>\d+)\]\s*\[\s*(?P<pos>\d+)\s*/\s*"
               r"(?P<of>\d+)\]", re.I),
    # tqdm / Lightning progress bars: "Epoch 0:  50%|#####     | 500/1000 [00:10<00:10, ..."
    # (and a script's own description: "Epoch 3/10: ", "[Epoch 3] ", "epoch 3 train: ")
    re.compile(r"\bepoch\s*\[?\s*(?P<epoch>\d+)(?:\s*/\s*\d+)?\s*\]?[^%|\d]{0,20}?\s*\d+%\|"
               r"[^|]*\|\s*(?P<pos>\d+)\s*/\s*(?P<of>\d+)", re.I),
    # PyTorch-Ignite's ProgressBar: "Epoch [1/19]: [4/16]  25%|██        , batch_loss=5.85"
    re.compile(r"\bepoch\s*\[\s*(?P<epoch>\d+)\s*/\s*\d+\s*\]\s*:\s*\[\s*(?P<pos>\d+)\s*/\s*"
               r"(?P<of>\d+)\s*\]", re.I),
    # timm: "Train: 3 [ 100/1251 (  8%)]" (epochs from 0)
    re.compile(r"\btrain:\s*(?P<epoch>\d+)\s*\[\s*(?P<pos>\d+)\s*/\s*(?P<of>\d+)", re.I),
    # fairseq train_inner: "epoch 001:    200 / 1374" (before 0.6: "epoch 001  1000 / 331737")
    re.compile(r"\bepoch\s+(?P<epoch>\d+)(?:\s*:\s*|\s+)(?P<pos>\d+)\s*/\s*(?P<of>\d+)", re.I),
    # PyTorch word_language_model: "| epoch   1 |   200/ 2983 batches"
    re.compile(r"\bepoch\s+(?P<epoch>\d+)\s*\|\s*(?P<pos>\d+)\s*/\s*(?P<of>\d+)\s+batches", re.I),
    # PyTorch examples (MNIST): "Train Epoch: 1 [640/60000 (1%)]"
    re.compile(r"\bepoch:?\s*(?P<epoch>\d+)\s*\[\s*(?P<pos>\d+)\s*/\s*(?P<of>\d+)", re.I),
    # Lightning's RichProgressBar: "Epoch 3/29  ━━━━━━━━╸━━━━━━━ 50/100 0:00:05 • 0:00:05"
    re.compile(r"\bepoch\s+(?P<epoch>\d+)\s*/\s*\d+\s+[━╸╺╼╾─ ]*[━╸╺╼╾─][━╸╺╼╾─ ]*"
               r"(?P<pos>\d+)\s*/\s*(?P<of>\d+)", re.I),
    # PyTorch's super-resolution example: "===> Epoch[1](10/100): Loss: 0.0123"
    re.compile(r"\bepoch\s*\[\s*(?P<epoch>\d+)\s*\]\s*\(\s*(?P<pos>\d+)\s*/\s*(?P<of>\d+)\s*\)",
               re.I),
    # "Epoch [1/10], Step [100/600]", "epoch 1/10 iter 50/200"
    re.compile(r"\bepoch\s*\[?\s*(?P<epoch>\d+)\s*/\s*\d+\s*\]?[,:|\s-]*(?:step|iter|"
               r"iteration|batch)\s*\[?\s*(?P<pos>\d+)\s*/\s*(?P<of>\d+)\s*\]?", re.I),
)
#: PyTorch's CIFAR-10 tutorial prints "[epoch, batch] loss: x" ("[1,  2000] loss: 2.187").
EPOCH_BATCH_PAIR = re.compile(r"^\s*\[\s*(?P<epoch>\d+)\s*,\s*(?P<pos>\d+)\s*\]")
#: YOLACT: "[  0]     530 || B: 3.233 | ..." - the epoch in brackets, then the global iteration.
EPOCH_THEN_ITER = re.compile(r"^\s*\[\s*(?P<epoch>\d+)\s*\]\s+(?P<iter>\d+)\s*\|\|")
#: A long log of one metric per line, "<step> <name> <value>" (Karpathy's build-nanogpt
#: log.txt: "0 val 10.9310", "0 hella 0.2413", "0 train 10.934416").
STEP_NAME_VALUE = re.compile(r"^\s*(?P<step>\d+)\s+(?P<name>[A-Za-z][\w/.-]*)\s+"
                             r"(?P<value>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+|nan|inf))\s*$",
                             re.I)


def step_name_value(raw: str) -> dict[str, Any] | None:
    """The row of a "<step> <name> <value>" line, or None. A bare side word names that
    side's loss: "0 train 10.93" is the training loss, "0 val 10.93" the validation loss."""
    m = STEP_NAME_VALUE.match(raw)
    if m is None:
        return None
    v = cell_float(m.group("value"))
    if v is None:
        return None
    name = m.group("name").lower()
    side = "train" if name in TRAIN_SIDE else "val" if name in VAL_SIDE else None
    return {"_global": int(m.group("step")), f"{side}_loss" if side else name: v}


#: mmengine's iteration-based runner: "Iter(train) [  50/1000]" is iteration 50.
MMENGINE_ITER = re.compile(r"\biter\(train\)\s*\[\s*(\d+)\s*/\s*\d+\s*\]", re.I)
KERAS_EPOCH = re.compile(r"^\s*epoch\s+(?P<epoch>\d+)\s*/\s*(?P<of>\d+)\s*$", re.I)
END_OF_EPOCH = re.compile(r"\bend of epoch\s+(?P<epoch>\d+)", re.I)

#: Darknet (AlexeyAB's YOLO): " 1234: 2.345678, 2.456789 avg loss, 0.001000 rate, 4.512 seconds,
#: 78976 images" - each value before its name; the iteration first.
DARKNET = re.compile(r"^\s*(?P<iter>\d+):\s*(?P<loss>-?[\d.]+|-?nan|-?inf),\s*(?P<avg>-?[\d.]+|"
                     r"-?nan|-?inf)\s+avg(?:\s+loss)?,\s*(?P<lr>[\d.eE+-]+)\s+rate,\s*"
                     r"(?P<secs>[\d.]+)\s+seconds,\s*(?P<images>\d+)\s+images", re.I)
#: ESPnet: "3epoch:train:201-300batch:" (batches 201-300 of epoch 3) and "3epoch results:".
ESPNET_EPOCH = re.compile(r"\b(\d+)epoch(?::(?:train|valid):(\d+)-(\d+)batch:?| results:)")
#: A line that starts with its position in the epoch and a comma (MONAI's tutorials:
#: "12/50, train_loss: 0.6123, step time: 0.1234").
LEADING_COUNT = re.compile(r"^\s*(?P<pos>\d+)\s*/\s*(?P<of>\d+)\s*,\s")

EPOCH_KEYS = ("epoch", "training_epoch", "train_epoch", "ep")

#: Keys that can count a position inside an epoch ("Epoch 2, Batch 100", "epoch 3 iter 40").
POSITION_KEYS = ("batch", "batch_idx", "iter", "it", "iteration", "step", "steps")


def epoch_positions(rows: list[tuple[int, dict[str, Any]]]) -> None:
    """``Epoch 1, Batch 100`` ... ``Epoch 2, Batch 1``: a counter that goes back exactly where
    the epoch goes up is a position inside the epoch, not the step. Each such row gets a
    global step (``_global``): the epoch's offset (epochs since the first, times the span of a
    full epoch's positions plus one stride) plus the position. Nothing changes when a progress
    pattern already gave one or the epoch ever goes back; a position that goes back inside
    an epoch (a resume that replays batches) goes back in the global step too, where the
    continuity check sees it."""
    if not rows or any("_global" in r for _, r in rows):
        return
    n = len(rows)
    for ek in EPOCH_KEYS:
        for pk in POSITION_KEYS:
            pts = [(r[ek], r[pk]) for _, r in rows if isinstance(r.get(ek), (int, float))
                   and isinstance(r.get(pk), (int, float))]
            if len(pts) < max(4, n // 2) or not all(
                    float(e).is_integer() and float(q).is_integer() for e, q in pts):
                continue
            ep = np.asarray([e for e, _ in pts], dtype=np.int64)
            pos = np.asarray([q for _, q in pts], dtype=np.int64)
            de, dp = np.diff(ep), np.diff(pos)
            if np.any(de < 0) or not np.any((dp < 0) & (de > 0)):
                continue
            inside = dp[(de == 0) & (dp > 0)]
            if inside.size == 0:
                continue
            stride = int(np.median(inside))
            # Positions count from the epoch's start, so every epoch spans at least the lowest
            # to the highest position seen in any (an excerpt that shows batches 20-40 of one
            # epoch and 60-100 of another still has epochs of >= 100 batches).
            span = int(pos.max() - pos.min())
            per_epoch = span + stride
            first = int(ep.min())
            for _, r in rows:
                e, q = r.get(ek), r.get(pk)
                if isinstance(e, (int, float)) and isinstance(q, (int, float)):
                    r["_global"] = (int(e) - first) * per_epoch + int(q)
            return


#: A tqdm bar: "  3%|▎         | 100/3000 [00:10<05:00,  9.80it/s]" (the part in brackets
#: up to a postfix of metrics, which stays on the line).
TQDM_BAR = re.compile(r"(?P<pct>\d{1,3})%\|[^|]*\|\s*(?P<pos>\d+)\s*/\s*(?P<of>\d+)\s*"
                  r"(?:\[[\d:?]+<[\d:?]+,\s*(?P<rate>[\d.?]+)\s*(?P<unit>it/s|s/it)\]?)?")


def bar_step_time(bar: re.Match[str]) -> str:
    """" | step_time <s> s" from a tqdm bar's rate (its smoothed it/s or s/it), put after the
    line's own metrics so a logged step time wins; "" when the bar shows no rate yet."""
    rate = cell_float(bar.group("rate") or "")
    if rate is None or not rate > 0:
        return ""
    return f" | step_time {1.0 / rate if bar.group('unit') == 'it/s' else rate:.6g} s"


def progress_offsets(progress: list[tuple[dict[str, Any], int, int, int]]) -> None:
    """Global steps of progress counters (``(row, epoch, position, positions per epoch)``)
    in place, where reading them line by line (``(epoch - 1) * of + position``) is wrong: a
    log whose epochs count from 0 (``Epoch: [0][10/500]``; epochs 0 and 1 would share their
    steps), or one whose last epoch shows a shorter ``/of`` (a run cut by ``max_steps``:
    ``/20`` after epochs of ``/40``): an epoch's offset is in full epochs."""
    if not progress:
        return
    full = max(p[3] for p in progress)
    first = min(p[1] for p in progress)
    if first == 0 or any(p[3] != full for p in progress):
        base = min(1, first)
        for row, ep, pos, _of in progress:
            row["_global"] = (ep - base) * full + pos
