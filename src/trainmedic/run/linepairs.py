"""One console line cut into ``key value`` pairs: the line reader's tokenizer.

Each number takes as its key the words before it (``iter 100: loss 2.3456, time 12.34ms`` ->
iter, loss, time_ms); a unit written after the number joins the key; separators (``|``,
``,``, `` - ``, tabs, ``...``) end a key; a value in parentheses right after a named value, in
its unit, is that value's running average (``<key>_avg``: AverageMeter's ``Time 7.259
(3.692)``); any other bare duration in parentheses is the line's step time; ``[valid]``
sections put their keys on the validation side; Chinese names are read in English
(``vocabulary.translate_cjk``); a printed dict or JSON object in the line is read whole
(``dict_in_line``). ``textlog`` builds rows from these.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

import numpy as np

from trainmedic.run.counters import EPOCH_KEYS
from trainmedic.run.table import cell_float, plain_scalars
from trainmedic.run.vocabulary import split_camel, translate_cjk

__all__ = ["line_pairs", "sectioned_pairs", "dict_in_line", "choose_step", "STEP_KEYS",
           "VAL_PREFIXES", "EVAL_ANNOUNCED"]

_NUM = r"[-+]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d*)?(?:[eE][-+]?\d+)?|[-+]?\.\d+|" \
       r"[-+]?(?:nan|NaN|NAN|inf|Inf|INF|Infinity)\b"
_RATE = r"(?:(?:samples?|imgs?|images?|tokens?|toks?|words?|seqs?|sequences?|it|its|steps?|" \
        r"batches?)\s?)?/\s?s(?:ec)?(?!\w|\s*=|\s?:\s*[-+.\d]|\s+[-+]?\d)"
# (not a name: "samples/sec: 250.1", "tokens/s 123456"; Marian's "9876.54 words/s : L.r. 3e-04"
# is a unit)
# (a bare "929.35/s" after a number is timm's samples per second)
_TOKEN = re.compile(r"(?P<num>" + _NUM + r")(?P<unit>s/\d+ iters?\b|"
                    r"\s?(?:ms|s|us)/(?:step|it|iter|batch)\b|"
                    r"\s?" + _RATE + r"|\s?(?:ms|us|sec|s)|%|"
                    r"\s?(?:GiB|GB|MiB|MB|KiB|KB|gib|gb|mib|mb|kb)|sec|min|h|[KMG])?(?![\w.])|"
                    r"(?P<word>[A-Za-z_][\w./%-]*(?:@\d+)?)|(?P<open>\()|(?P<close>\))|"
                    r"(?P<sep>[|,;\t]| - )")
STEP_KEYS = ("num_updates", "global_step", "step", "steps", "iteration", "iter", "it",
              "training_iter", "train_iter", "update", "updates", "batch_idx")
VAL_PREFIXES = ("valid", "val_", "validation", "eval", "test")
#: A line that announces an evaluation and holds no number ("testing in eval mode......",
#: "Evaluating...", "Running validation"): the metric line after it is the evaluation's,
#: even when it reads like a training line (PaddlePaddle scripts print both alike).
EVAL_ANNOUNCED = re.compile(r"^\W*(?:testing|evaluating|validating|(?:running|start(?:ing)?) "
                            r"(?:evaluation|validation|eval|test))\b", re.I)

_DROP_KEYS = frozenset({"eta", "remaining", "day", "days", "of", "at", "on", "in"})
_BARE_NONFINITE = re.compile(r"(?<=[:\[,]\s)-?(?:nan|inf)(?=\s*[,}\]])|(?<=[:\[,])-?(?:nan|inf)"
                             r"(?=\s*[,}\]])")
_SECTION = re.compile(r"\[(train|training|valid|validation|val|eval|test)\]", re.I)
_ELLIPSIS = re.compile(r"\.{2,}|…")
#: Catalyst's epoch summaries: "train (6/8) loss: 0.0093 | lr: 0.003 | ..." and "valid (6/8) ...":
#: the loader's name, then the epoch of the run's epochs.
_CATALYST = re.compile(r"^\s*(train|valid|validation|test)\s+\((\d+)/\d+\)\s+(?=\w)", re.I)
_CATALYST_BAR = re.compile(r"^\s*\d+/\d+\s+\*\s+Epoch\s+\(\d+\)\s+\w+:\s+\d+%")


#: Words of prose around a name ("Val epoch 0 has acc 0.249 and loss 1.386", "the loss is
#: 1.2"): not part of it.
_FILLER = frozenset({"and", "the", "an", "is", "was", "are", "were", "has", "have", "had",
                     "with"})


#: Marian's abbreviated names ("Ep. 1 : Up. 1000 : Sen. 64,000 : Cost 5.12 : ... : L.r. 3e-04"):
#: the update count is the step.
_ABBREVIATIONS = {"up.": "updates", "ep.": "epoch", "l.r.": "lr", "sen.": "sentences"}


def _norm_key(words: list[str]) -> str:
    # camelCase words kept apart before the case goes ("CurrSamplesPerSec", "valLoss")
    parts = [_ABBREVIATIONS.get(w.strip(":=[]").lower()) or split_camel(w.strip(":=[]")).lower()
             for w in words]
    key = "_".join(w for w in parts if w and w not in _FILLER)
    return key.strip("_")


#: A unit in parentheses after a name ("elapsed time per iteration (ms): 1234.5", DeepSpeed's
#: "iter time (s): 0.51") joins the name, as a unit written after the number does.
_NAME_UNIT = re.compile(r"\s*\(\s*(ms|s|sec|us|min|%|GB|GiB|MB|MiB|t)\s*\)\s*(?=[:=])|"
                        r"\s+in\s+(ms|s|sec)\s*(?=[:=])")  # NeMo: "train_step_timing in s=0.6"
#: A rate per device after a rate ("9226.24/s, 9226.24/s/gpu LR: 0.005", OpenCLIP): the
#: device word is no part of the next name.
_PER_DEVICE = re.compile(r"(\d)/s/(?:gpu|device|rank)\b")
_MS_SECTION = re.compile(r"\btime \(ms\)\s*\|")
_MS_NAME = re.compile(r"([A-Za-z_]\w*)\s*:")
#: One metric's readings in brackets: "predict_loss: [local: 0.6975 | reduced: 0.6919]".
_SUB_VALUES = re.compile(r"([A-Za-z_][\w.]*):\s*\[((?:\s*[A-Za-z_]\w*:\s*[-+\w.]+\s*[|,]?)+)\]")
_SUB_PAIR = re.compile(r"([A-Za-z_]\w*):\s*([-+\w.]+)")
#: Readings that are the run's value across ranks, or its average (the one to keep; a rank's
#: own or the current batch's is dropped).
_REDUCED = ("reduced", "global", "all_reduced", "allreduce", "synced", "avg", "mean")


def _sub_values(m: re.Match[str]) -> str:
    """``name: [local: a | reduced: b]`` -> ``name: b`` (the value across ranks), or
    ``name_<k>: v`` for each reading when none of them is the reduced one."""
    name = m.group(1)
    pairs = _SUB_PAIR.findall(m.group(2))
    reduced = [v for k, v in pairs if k.lower() in _REDUCED]
    if reduced:
        return f" | {name}: {reduced[0]} | "
    return " | " + " | ".join(f"{name}_{k}: {v}" for k, v in pairs) + " | "


#: big_vision's "[100] train_loss=6.81, learning_rate=0.0001": a bracketed count before
#: ``name=value`` pairs is the step.
_BRACKET_STEP = re.compile(r"(?<![\w\]])\[(\d+)\]\s+(?=[A-Za-z_][\w/.-]*\s*=\s*[-+.\d])")


#: NVIDIA Tacotron2's (and its forks') "Train loss 100 0.512345 Grad Norm 1.23 0.45s/it" and
#: "Validation loss 100:  0.612345": a loss name, then the iteration (an integer), then the
#: value (with a decimal point or an exponent). Read as the key taking the iteration, the
#: loss would climb with the step and the value would be lost.
_LOSS_STEP_VALUE = re.compile(r"\b((?:train(?:ing)?|val(?:id(?:ation)?)?|eval|test)?\s*loss)\s+"
                              r"(\d+):?\s+([-+]?(?:\d*\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+))"
                              r"(?![\w.])", re.I)


#: A bare "[i/N]" counter that no name precedes ("[rank0]: [100/3000] loss: 2.3"): a position,
#: taken as the step only when nothing else counts steps and it never goes back (see
#: ``choose_step``). "Step [100/600]" keeps its name; "Epoch [1/10]" too.
_BARE_COUNT = re.compile(r"\[\s*(\d+)\s*/\s*(\d+)\s*\]")


def _bare_counts(line: str) -> str:
    def sub(m: re.Match[str]) -> str:
        before = line[:m.start()].rstrip()
        if before[-1:].isalpha() or before[-1:] in (":", "=", "_", ")") or int(m.group(1)) > \
                int(m.group(2)):
            return m.group(0)
        return f" | bracket_pos={m.group(1)} | "
    return _BARE_COUNT.sub(sub, line)


#: Python logging's "INFO:tensorflow:" / "INFO:root:" / "WARNING:__main__:" line prefix.
_LOG_PREFIX = re.compile(r"^\s*(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL):[\w.]*:")


#: Caffe's per-output lines: "Test net output #1: loss = 0.9 (* 1 = 0.9 loss)" is the
#: evaluation's loss; "Train net output #0: loss = ..." repeats the iteration's loss.
_CAFFE_OUTPUT = re.compile(r"\b(Test|Train) net output #\d+:\s*([A-Za-z_][\w.-]*)\s*=\s*(\S+)"
                           r"(?:\s*\(\*[^)]*\))?")


#: A date as time.ctime() writes it ("Fri Sep  1 03:07:14 2017"), with or without the time
#: (looked for only on a line naming a weekday: the full search costs 5% of reading a line).
_WEEKDAY = re.compile("Mon |Tue |Wed |Thu |Fri |Sat |Sun ")
_CTIME = re.compile(r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\s+(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|"
                    r"Sep|Oct|Nov|Dec)\s+\d{1,2}(?:\s+\d{1,2}:\d{2}:\d{2})?(?:\s+\d{4})?\b")


#: A path to a source file in a warning or traceback ("functional.py:718", "TensorImpl.h:1156").
_SOURCE_FILE = re.compile(r"\w\.(?:py|pyx|h|hpp|c|cc|cpp|cu|cuh)$")


#: Words that make a name a metric's, so that a trailing "_step" or "_epoch" qualifies it.
_METRIC_PARTS = frozenset({"loss", "acc", "accuracy", "lr", "norm", "ppl", "perplexity", "f1",
                           "map", "iou", "reward", "error", "err", "auc", "bleu", "dice"})


def line_pairs(line: str) -> tuple[dict[str, float], bool]:
    """``{key: value}`` of one line cut into pairs, and whether a value had no key."""
    line = _LOG_PREFIX.sub(" ", translate_cjk(line))
    if _WEEKDAY.search(line) and _CTIME.search(line):  # "Training Loss (Fri Sep  1
        # 03:07:14 2017)": a date, no value
        line = _CTIME.sub(" | ", line)
    if "net output #" in line:
        line = _CAFFE_OUTPUT.sub(lambda m: ("val_" if m.group(1) == "Test" else "net_")
                                 + f"{m.group(2)} = {m.group(3)}", line)
    if ".." in line:  # "Epoch: 1/30... Step: 10... Loss: 2.3012..."
        line = _ELLIPSIS.sub(" | ", line)
    if "(" in line:
        line = plain_scalars(line)  # "tensor(2.3456, device='cuda:0')", "np.float64(0.5)"
    if "] " in line:
        line = _BRACKET_STEP.sub(r" | step=\1 | ", line)
    if "oss " in line:
        line = _LOSS_STEP_VALUE.sub(r" | step=\2 | \1: \3 | ", line)
    if "/" in line and "[" in line:
        line = _bare_counts(line)
    if "/s/" in line:
        line = _PER_DEVICE.sub(r"\1/s", line)
    if ": [" in line:
        line = _SUB_VALUES.sub(_sub_values, line)
    if "time (ms)" in line and (tm := _MS_SECTION.search(line)):
        # DeepSpeed's wall_clock_breakdown: "time (ms) | fwd_microstep: 0.65 | ... |
        # step_microstep: 0.09": every time after it is in ms; its "step" is the optimizer's
        rest = _MS_NAME.sub(lambda m: ("optimizer_step" if m.group(1).lower() == "step"
                                       else m.group(1)) + "_ms:", line[tm.end():])
        line = line[:tm.start()] + " | " + rest
    if ")" in line or " in " in line:
        line = _NAME_UNIT.sub(lambda m: "_" + ("pct" if m.group(1) == "%" else
                                               m.group(1) or m.group(2)), line)
    out: dict[str, float] = {}
    words: list[str] = []
    last_key = ""
    in_paren = False
    orphan = False
    after_value = False  # the token before was a named value (in ``last_unit``)
    last_unit = ""
    avg_slot = False  # inside "(...)" right after a named value: its running average
    for m in _TOKEN.finditer(line):
        if not m.group("open"):
            after_value = False
        if m.group("word"):
            if not _SOURCE_FILE.search(m.group("word")):
                words.append(m.group("word"))
            else:  # "/usr/lib/python3.8/.../functional.py:718: UserWarning": not a name
                words = []
                in_paren = True  # its line number is not a value without a name either
            continue
        if m.group("open"):
            in_paren = True
            avg_slot = after_value and not words
            after_value = False
            continue
        if m.group("close"):
            in_paren = avg_slot = False
            words = []
            continue
        if m.group("sep"):
            words = []
            continue
        v = cell_float(m.group("num").replace(",", ""))
        if v is None:
            continue
        unit = (m.group("unit") or "").strip().lower()
        # "Train loss/train/total: 2.3" (Composer): a namespaced name is the whole key
        spaced = bool(words) and words[-1][:1].isalpha() and "/" in words[-1].strip("/")
        key = _norm_key(words[-1:] if spaced else words[-3:])
        last = key.rsplit("_", 1)[-1]
        if key not in STEP_KEYS + EPOCH_KEYS and last in STEP_KEYS + EPOCH_KEYS and \
                key.split("_")[-2] not in _METRIC_PARTS:
            # "Training iter 3150", "Training Epoch: 1" (not Lightning's "train_loss_step":
            # a metric's per-step value)
            key = last
        if unit.startswith("s/") and unit[2:3].isdigit():
            # Caffe's "(1.03 iter/s, 19.4s/20 iters)": seconds per that many iterations
            key, unit, v = "step_time", "s", v / float(unit[2:].split()[0])
        elif unit.endswith(("/step", "/it", "/iter", "/batch")):
            key, unit = "step_time", unit.split("/")[0]
        elif "/s" in unit:
            # "Speed: 7.41 samples/sec", "12.5 img/s", "3.2 it/s": the unit names the rate
            noun = unit.split("/")[0].strip()
            key, unit = ("it_per_s" if noun in ("it", "its", "step", "steps", "batch",
                                                 "batches")
                         else "tokens_per_s" if noun.startswith(("tok", "word"))
                         else "samples_per_s"), ""
        if unit in ("k", "m", "g"):
            # Detectron2's "max_mem: 3000M" is megabytes; "params: 125M" is a count
            if "mem" in key:
                unit += "b"
            else:
                v *= {"k": 1e3, "m": 1e6, "g": 1e9}[unit]
                unit = ""
        if not key and avg_slot and last_key and unit == last_unit:
            # AverageMeter's "Time 7.259 (3.692)": the value, then its running average (in
            # the same unit; TF-slim's "loss = 0.83 (1.17 sec/step)" is the step's time)
            key = f"{last_key}_avg"
        if not key:
            timed = next((k for k in out if k.split("_")[0] == "time"), None)
            if in_paren and unit in ("s", "ms", "us", "sec", "min") and timed:
                key = "time_avg"  # timm's "Time: 0.30s, 742/s (0.35s, 731/s)": its average
            elif in_paren and unit in ("s", "ms", "us", "sec", "min"):
                key = "step_time"
            elif in_paren and unit == "%" and last_key:
                key = last_key
            elif unit in ("s", "ms", "min") and not out:
                key = "line_time"  # Keras "67s - loss: ...": the time of the epoch
            else:
                orphan = True
                continue
        suffix = "pct" if unit == "%" else unit
        if unit and not key.endswith("_" + suffix):  # "time(s): 561.6 s" is time_s once
            key = f"{key}_{suffix}"
        if key.split("_")[-1] not in _DROP_KEYS and key not in out:
            out[key] = v
        last_key = key.rsplit("_", 1)[0] if unit else key
        last_unit = unit
        words = []
        after_value, avg_slot = not in_paren, False
    return out, orphan


def sectioned_pairs(text: str) -> dict[str, float]:
    """``line_pairs`` of a line, where ``[valid]`` / ``[eval]`` / ``[test]`` mark the keys after
    them as the validation side until the next marker (ESPnet's "1epoch results: [train]
    loss=7.6, ... [valid] loss=5.5, acc=0.8")."""
    if "/" in text and "(" in text:
        if _CATALYST_BAR.match(text):
            return {}  # its postfix is a running value; the summary line under it has the mean
        text = _CATALYST.sub(lambda m: f"epoch {m.group(2)} [{m.group(1)}] ", text)
    if "[" not in text or not _SECTION.search(text):
        return line_pairs(text)[0]
    out: dict[str, float] = {}
    parts = _SECTION.split(text)
    out.update(line_pairs(parts[0])[0])
    for side, body in zip(parts[1::2], parts[2::2], strict=True):
        val = side.lower() not in ("train", "training")
        for k, v in line_pairs(body)[0].items():
            key = k if not val or k in STEP_KEYS + EPOCH_KEYS or k.startswith(VAL_PREFIXES) \
                else f"valid_{k}"
            out.setdefault(key, v)
    return out


def dict_in_line(line: str) -> dict[str, Any] | None:
    """The JSON object or printed Python dict in ``line`` (from its first ``{`` to its last
    ``}``; a bare ``nan``/``inf`` value is read as that number), or None."""
    i = line.find("{")
    if i < 0 or "}" not in line[i:]:
        return None
    body = plain_scalars(line[i:line.rfind("}") + 1])
    if "nan" in body or "inf" in body:
        # print() of a dict writes float('nan') as a bare nan ({'loss': nan}): no literal
        body = _BARE_NONFINITE.sub(lambda m: f'"{m.group(0)}"', body)
    for parse in (json.loads, ast.literal_eval):
        try:
            obj = parse(body)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(obj, dict):
            return {str(k): v for k, v in obj.items()}
    return None


def _rises(rows: list[tuple[int, dict[str, Any]]], key: str) -> bool:
    vals = np.asarray([r[key] for _, r in rows if isinstance(r.get(key), (int, float))], float)
    d = np.diff(vals)  # an eval block repeats a step or one a little back; a reset goes far back
    return vals.size >= max(2, len(rows) // 2) and bool(np.mean(d > 0) >= 0.5 and np.all(
        d >= -0.1 * (vals.max() - vals.min())))


def _never_back(rows: list[tuple[int, dict[str, Any]]], key: str) -> bool:
    """A counter present on most rows that rises and never goes back (a per-epoch position
    that restarts is no step)."""
    vals = np.asarray([r[key] for _, r in rows if isinstance(r.get(key), (int, float))], float)
    d = np.diff(vals)
    return vals.size >= max(3, len(rows) // 2) and bool(np.mean(d > 0) >= 0.9 and np.all(d >= 0))


def choose_step(rows: list[tuple[int, dict[str, Any]]]) -> str | None:
    """The key that counts steps: a global position if the lines gave one, else the first of
    the step keys present in most rows whose values do not repeat, else an epoch key."""
    n = len(rows)
    for k in ("num_updates", "global_step"):
        if sum(1 for _, r in rows if k in r) >= n / 2:
            return k
    if sum(1 for _, r in rows if "_global" in r) >= n / 2:
        return "_global"
    suffixed = tuple(sorted(k for k in {k for _, r in rows for k in r}
                            if k.endswith(("_iter", "_step", "num_updates"))))
    if _never_back(rows, "bracket_pos") and sum(
            1 for _, r in rows if any(k in r for k in STEP_KEYS + suffixed + ("_bar_step",))) \
            < n / 2:
        return "bracket_pos"
    for cands in (STEP_KEYS, suffixed, ("_bar_step",), EPOCH_KEYS):
        if cands is EPOCH_KEYS and _rises(rows, "batch"):
            return "batch"  # "[epoch=1][batch=10/100]": a batch counter that never resets
        best = None
        for k in cands:
            vals = [r[k] for _, r in rows if isinstance(r.get(k), (int, float))]
            if len(vals) < max(1, n // 2) or any(not float(v).is_integer() for v in vals):
                continue
            d = np.diff(np.asarray(vals, dtype=np.float64))
            if best is None:
                best = k
            if len(d) == 0 or float((d != 0).mean()) >= 0.95:
                return k
        if best is not None:
            return best
    return None
