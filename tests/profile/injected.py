"""A small recipe with one injected cause of slowness, for the profile tests.

``recipe(cause=...)``: ``none``; ``sleep`` (the loader sleeps per batch); ``item`` (an
``.item()`` after every layer); ``busy`` (a Python busy loop in the loss); ``allreduce`` (an
extra all-reduce of a large tensor per step, under torchrun with gloo). Every injection times
itself with perf_counter and appends the seconds to ``INJECTED`` (and, when the environment
names ``TM_INJECT_LOG``, to that file as "rank seconds" lines): the truth the profile's
shares are checked against, measured independently of the profiler.
"""

from __future__ import annotations

import os
import time

import torch
from torch import nn

from trainmedic.recipe import Recipe

INJECTED: list[float] = []
SLEEP_S = 0.030
BUSY_S = 0.030
ALLREDUCE_FLOATS = 4 * 2**20


def _record(seconds: float) -> None:
    INJECTED.append(seconds)
    log = os.environ.get("TM_INJECT_LOG")
    if log:
        rank = os.environ.get("RANK", "0")
        with open(log, "a") as f:
            f.write(f"{rank} {seconds}\n")


class _Layer(nn.Module):
    def __init__(self, width: int, read_value: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.read_value = read_value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.fc(x))
        if self.read_value:
            t = time.perf_counter()
            _ = y.mean().item()  # the injected read of a value: a sync on a GPU
            _record(time.perf_counter() - t)
        return y


class _Sleepy(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, n: int, width: int, sleep: bool) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, width, generator=g)
        self.y = torch.randn(n, width, generator=g)
        self.sleep = sleep

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def recipe(*, cause: str = "none", width: int = 512, layers: int = 4, batch_size: int = 128,
           threads: int = 0) -> Recipe:
    if threads:
        torch.set_num_threads(threads)
    if cause == "allreduce" and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(*(_Layer(width, cause == "item") for _ in range(layers)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.utils.data.DataLoader(_Sleepy(batch_size * 64, width, cause == "sleep"),
                                       batch_size=batch_size, shuffle=True, drop_last=True)
    big = torch.ones(ALLREDUCE_FLOATS) if cause == "allreduce" else None

    def loss_fn(m: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        if cause == "busy":
            t = time.perf_counter()
            while time.perf_counter() - t < BUSY_S:
                pass
            _record(time.perf_counter() - t)
        if big is not None:
            t = time.perf_counter()
            torch.distributed.all_reduce(big)
            _record(time.perf_counter() - t)
        return ((m(x) - y) ** 2).mean()

    if cause == "sleep":
        base = data

        class Slow:
            def __iter__(self):  # type: ignore[no-untyped-def]
                for b in base:
                    t = time.perf_counter()
                    time.sleep(SLEEP_S)
                    _record(time.perf_counter() - t)
                    yield b

        data = Slow()  # type: ignore[assignment]
    return Recipe(model=model, optimizer=opt, loss_fn=loss_fn, data=data, seed=0)
