"""Which columns of a run could hold its training loss, when no name said so.

A run whose loss was not recognised is never judged (``Diagnosis.loss_found``); the report
then asks for ``--map loss=COLUMN`` and names the likeliest columns. Names alone mislead
there: a counter the reader kept under a raw name ("Eit 12400", "ep", "n_iter") reads like any
other column. So the columns are read with their values:

- a name holding a loss word comes first ("recon_err", "objective", "cost", "G_mse",
  "batch_loss_g"), whatever its values (a loss printed in whole numbers is still a loss),
  unless it is a loss *scale* ("attempted_loss_scale");
- then the mathematicians' ``L`` ("L", "Le", "L_G", "l1");
- any other column only when it is no *counter* (every value an integer, never falling, rising
  at least twice: a step, an epoch, a sample count; or one integer >= 2 throughout: a batch
  size) and no name word says it is a rate, a time, a memory reading, a norm or a count;
- evaluation columns and accuracies are never offered.
"""

from __future__ import annotations

import re

import numpy as np

from trainmedic.run.names import CANONICAL
from trainmedic.run.series import Run
from trainmedic.run.vocabulary import ACC_WORDS

__all__ = ["loss_candidates", "is_counter"]

#: Canonical metrics that cannot be the training loss under another name.
_NOT_A_LOSS = frozenset({
    "step_time_s", "data_time_s", "compute_time_s", "comm_time_s", "gc_time_s", "lr",
    "grad_norm", "loss_scale", "param_norm", "update_ratio", "tokens_per_s", "samples_per_s",
    "mem_alloc_mb", "mem_reserved_mb", "mem_peak_mb", "rss_mb", "epoch", "mfu", "hfu"})
_LOSS_WORDS = ("loss", "nll", "mse", "objective", "cost", "err", "xent", "entropy")
#: The letter L alone or with a short suffix ("L", "Le", "L_G", "L1", "l_rec"), not "lr".
_L_NAME = re.compile(r"l(?:[_\-.]?\w{0,4})?")
_EVAL_SIDE = frozenset({"val", "eval", "test", "valid", "validation", "dev", "best"})
#: Words (as prefixes) of a loss-worded name that is a loss scale, a time or a count about
#: the loss, not a loss; and unit words, whole.
_SCALE = ("scale", "hysteresis", "overflow")
_ABOUT_LOSS = _SCALE + ("time", "count", "skip", "nan", "inf", "num", "iters", "steps")
_UNITS = frozenset({"ms", "s", "sec", "secs", "us", "pct", "percent"})
#: Words (as prefixes) of a name without a loss word that reads as no loss: a scale, a
#: rate, a time or its unit, a memory reading, a counter, a norm, a size.
_NEVER = _SCALE + ("flop", "tflop", "per", "time", "speed", "eta", "mem", "lr", "rate", "sec",
                   "ms", "us", "wall", "clock", "fps", "tok", "sample", "gpu", "cpu", "iter",
                   "skip", "grad", "norm", "micro", "batch", "alloc")
_UNLESS_LOSSY = ("data", "size", "count", "num", "total_steps", "percent")


def is_counter(values: np.ndarray) -> bool:
    """Integer values that never fall and rise at least twice (a step, an epoch logged at
    every batch, a sample count: no loss climbs in whole numbers), or integers >= 2 that never
    change (a batch size, a world size)."""
    v = values[np.isfinite(values)]
    if v.size < 3 or not bool(np.all(v == np.round(v))):
        return False
    d = np.diff(v)
    if bool(np.all(d == 0)):
        return float(abs(v[0])) >= 2.0
    return bool(np.all(d >= 0)) and int(np.count_nonzero(d > 0)) >= 2


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]


def loss_candidates(run: Run, limit: int = 3) -> list[str]:
    """Up to ``limit`` raw columns of ``run`` that could be the training loss, best first."""
    lossy: list[str] = []
    letter: list[str] = []
    rest: list[str] = []
    for name in run.metrics():
        if name in _NOT_A_LOSS or (name in CANONICAL and name != "loss"):
            continue
        low = name.lower()
        words = _words(name)
        if any(w in _EVAL_SIDE or w in ACC_WORDS for w in words):
            continue
        s = run.get(name)
        if s is None or not len(s):
            continue
        if any(w in low for w in _LOSS_WORDS):
            # a scale, a time or a count of something about the loss is no loss
            # ("attempted_loss_scale", "loss_time_ms", "nan_loss_count", "skipped_loss_iters")
            if not any(w.startswith(_ABOUT_LOSS) or w in _UNITS for w in words):
                lossy.append(name)
        elif _L_NAME.fullmatch(low):
            letter.append(name)
        elif not any(w.startswith(_NEVER + _UNLESS_LOSSY) for w in words) and \
                not is_counter(s.values):
            rest.append(name)
    return (lossy + letter + rest)[:limit]
