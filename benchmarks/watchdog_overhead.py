"""What the hang watchdog adds to a healthy training step (issue 15, "Watchdog cost").

A tiny MLP trained on CPU with one torch thread, 200 steps per round, rounds alternating
without / with a running :class:`HangWatchdog` (its thread polling every 0.05 s and writing a
heartbeat every 0.1 s: 20x and 100x more often than the defaults, to make any cost show);
the order inside each pair alternates too. Reports the mean of the per-pair ratios
(with / without) and a 95% t interval. Run: ``python benchmarks/watchdog_overhead.py [PAIRS]``.
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
import time

import torch
from benchmarks.machine import one_line

from trainmedic.dist.watchdog import HangWatchdog, HangWatchdogConfig

STEPS = 200


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


def main(pairs: int = 30) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 64))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randn(32, 64)
    cfg = HangWatchdogConfig(floor_s=60.0, heartbeat_interval_s=0.1, poll_interval_s=0.05,
                             flight_recorder_entries=0, dump_children=False)
    ratios, base, watched = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        wd = HangWatchdog(cfg, run_dir=tmp).start()
        _round(model, opt, x, y, None)  # warm-up
        for i in range(pairs):
            order = (False, True) if i % 2 == 0 else (True, False)
            got = {w: _round(model, opt, x, y, wd if w else None) for w in order}
            base.append(got[False])
            watched.append(got[True])
            ratios.append(got[True] / got[False])
        wd.close()
    mean = statistics.fmean(ratios)
    # t(0.975, 29) = 2.045; close enough for 20-60 pairs
    half = 2.045 * statistics.stdev(ratios) / math.sqrt(len(ratios))
    print(one_line())
    print(f"measured: {pairs} interleaved pairs x {STEPS} steps; step time median "
          f"{statistics.median(base) * 1e3:.3f} ms without, "
          f"{statistics.median(watched) * 1e3:.3f} ms with the watchdog")
    print(f"measured: with/without ratio mean {mean:.4f}, 95% CI [{mean - half:.4f}, "
          f"{mean + half:.4f}] ({(mean - 1) * 100:+.2f}%)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
