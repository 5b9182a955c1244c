"""What the hang watchdog adds to a healthy training step (issue 15, "Watchdog cost").

A tiny MLP trained on CPU with one torch thread (a ~0.4 ms step: the watchdog's per-step cost
is a method call, so a short step shows it most), 1000 steps per round, rounds alternating
without / with a :class:`HangWatchdog` started before the round and closed after it (so its
thread runs only in the "with" rounds); the order inside each pair alternates too. Twice:
with the defaults, and under stress (its thread polling every 0.05 s and writing a heartbeat
every 0.1 s: 20x and 100x more often than the defaults). Reports the mean of the per-pair
ratios (with / without), a 95% t interval and the median.
Run: ``python benchmarks/watchdog_overhead.py [PAIRS]``.
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
import time

import torch
from machine import one_line  # benchmarks/machine.py: run as python benchmarks/watchdog_overhead.py

from trainmedic.dist.watchdog import HangWatchdog, HangWatchdogConfig

STEPS = 1000


def _round(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
           y: torch.Tensor, wd: HangWatchdog | None) -> float:
    t0 = time.perf_counter()
    for s in range(STEPS):
        ts = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if wd is not None:
            wd.step_done(s, time.perf_counter() - ts)
    return (time.perf_counter() - t0) / STEPS


def _pairs(pairs: int, cfg: HangWatchdogConfig, model: torch.nn.Module,
           opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
           tmp: str) -> tuple[list[float], list[float], list[float]]:
    """``pairs`` A/B pairs, the order alternating; in a B round the watchdog runs (started
    before it, closed after it: its thread exists only then) and sees every step."""
    ratios, base, watched = [], [], []
    for i in range(pairs):
        got = {}
        for with_wd in ((False, True) if i % 2 == 0 else (True, False)):
            if with_wd:
                with HangWatchdog(cfg, run_dir=tmp) as wd:
                    got[True] = _round(model, opt, x, y, wd)
            else:
                got[False] = _round(model, opt, x, y, None)
        base.append(got[False])
        watched.append(got[True])
        ratios.append(got[True] / got[False])
    return ratios, base, watched


def main(pairs: int = 60) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 64))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randn(32, 64)
    configs = {
        "defaults": HangWatchdogConfig(flight_recorder_entries=0, dump_children=False),
        "stress (poll 0.05 s, heartbeat 0.1 s)": HangWatchdogConfig(
            heartbeat_interval_s=0.1, poll_interval_s=0.05, flight_recorder_entries=0,
            dump_children=False),
    }
    print(one_line())
    with tempfile.TemporaryDirectory() as tmp:
        _round(model, opt, x, y, None)  # warm-up
        for name, cfg in configs.items():
            ratios, base, watched = _pairs(pairs, cfg, model, opt, x, y, tmp)
            mean = statistics.fmean(ratios)
            # t(0.975, n-1) ~ 2.0 for 60+ pairs
            half = 2.0 * statistics.stdev(ratios) / math.sqrt(len(ratios))
            print(f"{name}: {pairs} interleaved pairs x {STEPS} steps (measured); step time "
                  f"median {statistics.median(base) * 1e3:.3f} ms without, "
                  f"{statistics.median(watched) * 1e3:.3f} ms with the watchdog; with/without "
                  f"ratio mean {mean:.4f}, 95% CI [{mean - half:.4f}, {mean + half:.4f}] "
                  f"({(mean - 1) * 100:+.2f}%), median {statistics.median(ratios):.4f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 60)
