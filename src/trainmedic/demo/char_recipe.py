"""The demo as a recipe: ``trainmedic.demo:recipe``, so every recipe tool runs on it.

The healthy demo's training (the tiny character transformer, AdamW, warm-up then cosine), fed
the way real runs are: a ``Dataset`` of corpus windows behind
``DataLoader(shuffle=True, num_workers=N, generator=...)``, each window starting at a random
offset (drawn in the worker, from the RNG torch seeds per worker), dropout, and a ``LambdaLR``.
That is every source of randomness an exact resume must carry: the sampler's permutation,
the workers' augmentation, dropout in the main process.

(The module is not called ``recipe.py``: importing a submodule binds its name on the package,
which would hide the function ``trainmedic.demo.recipe`` behind the module.)
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from trainmedic.demo.corpus import load_corpus
from trainmedic.demo.model import CharTransformer
from trainmedic.errors import ConfigError
from trainmedic.recipe.recipe import PRECISIONS, Recipe

__all__ = ["recipe", "CharWindows", "encoded_corpus", "next_char_loss", "OPTIMIZERS",
           "SCHEDULES"]


@functools.cache
def encoded_corpus() -> tuple[torch.Tensor, int]:
    """The shipped corpus as int64 character ids, and the vocabulary size (sorted characters).
    Encoded once per process (the recipe, the demo's validation windows and the overfit fault
    all read it): the tensor is shared, so slice it, never write into it."""
    text = load_corpus()
    vocab = sorted(set(text))
    index = {ch: i for i, ch in enumerate(vocab)}
    return torch.tensor([index[ch] for ch in text], dtype=torch.int64), len(vocab)


class CharWindows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Window ``i`` of ``context_len`` characters (and the next-character targets) starts at
    ``i * stride`` (default ``context_len``: windows side by side) plus a random offset in
    ``[0, jitter]``, drawn from torch's global RNG (in a worker: the one torch seeds
    ``base_seed + worker_id``). ``delay_s`` > 0 sleeps that long per window read: a slow disk
    or decode stand-in, which runs in the worker processes when there are any, so more
    workers overlap it (unlike the ``stall`` fault, which sleeps in the main process)."""

    def __init__(self, ids: torch.Tensor, context_len: int, jitter: int,
                 stride: int | None = None, delay_s: float = 0.0) -> None:
        self.ids = ids
        self.context_len = context_len
        self.jitter = jitter
        self.stride = stride or context_len
        self.delay_s = delay_s
        self.n = (len(ids) - context_len - 1 - jitter) // self.stride + 1
        if self.n < 1:
            raise ConfigError(f"train_chars: {len(ids)} characters hold no window of "
                              f"{context_len} + {jitter} jitter; give more")

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        off = int(torch.randint(0, self.jitter + 1, ())) if self.jitter else 0
        s = i * self.stride + off
        return self.ids[s:s + self.context_len], self.ids[s + 1:s + self.context_len + 1]


def next_char_loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def _lr_factor(step: int, *, steps: int, decay: bool = True) -> float:
    """Linear warm-up over 10 % of the steps (at least 5), then cosine down to 10 % (or held
    at the peak when ``decay`` is off), as a multiplier of the peak."""
    warm = max(5, steps // 10)
    if step < warm:
        return (step + 1) / warm
    if not decay:
        return 1.0
    progress = (step - warm) / max(1, steps - warm)
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def _int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"{name} must be an integer from {lo} to {hi}, got {value!r}")
    return value


#: ``optimizer`` values: AdamW (the boring default), or SGD with momentum.
OPTIMIZERS = ("adamw", "sgd")
#: ``schedule`` values: warm-up then cosine to 10 %, or warm-up then held at the peak.
SCHEDULES = ("cosine", "hold")


def recipe(*, steps: int = 200, seed: int = 0, num_workers: int = 0, dropout: float = 0.1,
           batch_size: int = 16, context_len: int = 64, lr: float = 3e-3,
           weight_decay: float = 0.01, grad_accum: int = 1, precision: str = "fp32",
           max_grad_norm: float | None = 1.0, train_chars: int | None = None, jitter: int = 8,
           loader_generator: bool = True, optimizer: str = "adamw", momentum: float = 0.9,
           schedule: str = "cosine", stride: int | None = None,
           load_delay_s: float = 0.0) -> Recipe:
    """The demo's char transformer as a :class:`~trainmedic.Recipe`.

    ``steps`` sizes the LR schedule (the runner is told how many steps to run);
    ``train_chars`` keeps only the first characters of the training split (small epochs, for
    tests that cross epoch boundaries); ``loader_generator`` False leaves the loader without
    a generator of its own, so it draws its permutation from the global torch RNG.
    ``optimizer`` (``OPTIMIZERS``; ``momentum`` for SGD), ``schedule`` (``SCHEDULES``) and
    ``stride`` (between window starts; default ``context_len``) are what the demo's faults
    change. ``load_delay_s`` (seconds per batch, default 0) makes reading the data slow:
    each sample sleeps ``load_delay_s / batch_size`` in ``__getitem__``, in the worker
    processes when ``num_workers`` > 0 (what ``trainmedic try --lever num_workers`` helps).
    """
    _int("steps", steps, 1, 10**9)
    _int("seed", seed, 0, 2**63 - 1)
    _int("num_workers", num_workers, 0, 64)
    _int("batch_size", batch_size, 1, 4096)
    _int("context_len", context_len, 8, 512)
    _int("grad_accum", grad_accum, 1, 1024)
    _int("jitter", jitter, 0, 4096)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) \
            or not 0 <= dropout < 1:
        raise ConfigError(f"dropout must be a number in [0, 1), got {dropout!r}")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < 10:
        raise ConfigError(f"lr must be a number in (0, 10), got {lr!r}")
    if isinstance(load_delay_s, bool) or not isinstance(load_delay_s, (int, float)) \
            or not 0 <= load_delay_s <= 60:
        raise ConfigError(f"load_delay_s must be a number of seconds per batch in [0, 60], "
                          f"got {load_delay_s!r}")
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got "
                          f"{optimizer!r}")
    if schedule not in SCHEDULES:
        raise ConfigError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if stride is not None:
        _int("stride", stride, 1, context_len)
    if precision not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got "
                          f"{precision!r}")
    ids, vocab_size = encoded_corpus()
    n_val = len(ids) // 10
    train = ids[:-n_val]
    if train_chars is not None:
        train = train[:_int("train_chars", train_chars, context_len + 2, len(train))]
    config: dict[str, Any] = {
        "recipe": "trainmedic.demo:recipe", "steps": steps, "seed": seed,
        "num_workers": num_workers, "dropout": dropout, "batch_size": batch_size,
        "context_len": context_len, "lr": lr, "weight_decay": weight_decay,
        "grad_accum": grad_accum, "precision": precision, "max_grad_norm": max_grad_norm,
        "train_chars": train_chars, "jitter": jitter, "loader_generator": loader_generator,
        "optimizer": optimizer, "momentum": momentum, "schedule": schedule, "stride": stride,
        "load_delay_s": load_delay_s}

    torch.manual_seed(seed)
    model = CharTransformer(vocab_size, context_len=context_len, dropout=float(dropout))
    opt: torch.optim.Optimizer = (
        torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
        if optimizer == "adamw" else
        torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        opt, functools.partial(_lr_factor, steps=steps, decay=schedule == "cosine"))
    scaler = torch.amp.GradScaler("cpu") if precision == "fp16-mixed" else None
    generator = torch.Generator().manual_seed(seed) if loader_generator else None
    windows = CharWindows(train, context_len, jitter, stride,
                          delay_s=float(load_delay_s) / batch_size)
    data = DataLoader(windows, batch_size=batch_size,
                      shuffle=True, drop_last=True, num_workers=num_workers,
                      generator=generator)
    return Recipe(model=model, optimizer=opt, loss_fn=next_char_loss, data=data,
                  scheduler=scheduler, scaler=scaler, precision=precision,
                  grad_accum=grad_accum, max_grad_norm=max_grad_norm, config=config, seed=seed)
