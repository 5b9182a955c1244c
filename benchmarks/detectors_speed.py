"""Time every registered detector (and the whole ``diagnose``) on a synthetic 1M-step run.

The run has 8 metrics logged at every step (loss, lr, grad_norm, step_time_s, data_time_s,
samples_per_s, mem_alloc_mb, rss_mb) plus a val_loss every 1000 steps, with realistic noise.
Usage: python benchmarks/detectors_speed.py [--steps N] [--repeat R]
Prints the time of each detector (best of R) and of diagnose() as a whole, and the machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from trainmedic.diagnose import diagnose
from trainmedic.diagnose.registry import detectors
from trainmedic.run.series import Run


def synthetic_run(n: int, seed: int = 0) -> Run:
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1)
    x = steps / n
    lr = 3e-4 * np.clip(x / 0.02, 0, 1) * 0.5 * (1 + np.cos(np.pi * x))
    loss = (2.0 + 6.0 * np.exp(-x * 20)) * np.exp(0.05 * rng.standard_normal(n))
    run = Run("synthetic-1M")
    run.add("loss", steps, loss)
    run.add("lr", steps, lr)
    run.add("grad_norm", steps, 1.5 * np.exp(0.2 * rng.standard_normal(n)))
    st = 0.1 * np.exp(0.05 * rng.standard_normal(n))
    run.add("step_time_s", steps, st)
    run.add("data_time_s", steps, 0.004 * np.exp(0.3 * rng.standard_normal(n)))
    run.add("samples_per_s", steps, 64 / st)
    run.add("mem_alloc_mb", steps, 5000 + rng.normal(0, 3, n))
    run.add("rss_mb", steps, 3000 + rng.normal(0, 5, n))
    vi = steps[999::1000]
    run.add("val_loss", vi, (2.1 + 6.0 * np.exp(-vi / n * 20)) * np.exp(
        0.01 * rng.standard_normal(vi.size)))
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    run = synthetic_run(args.steps)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
          f"python {platform.python_version()}, numpy {np.__version__}")
    print(f"run: {args.steps} steps, {len(run.metrics())} metrics, {run.num_points} points")
    total = 0.0
    for det in detectors():
        if det.missing(run):
            continue
        best = min(_time(lambda d=det: d.fn(run)) for _ in range(args.repeat))
        total += best
        print(f"  {det.symptom:24s} {best * 1000:8.1f} ms")
    print(f"sum of detectors: {total * 1000:.0f} ms")
    best = min(_time(lambda: diagnose(run)) for _ in range(args.repeat))
    d = diagnose(run)
    print(f"diagnose() total: {best * 1000:.0f} ms; findings: "
          f"{[(f.symptom, f.severity) for f in d.findings]}")


def _time(fn: object) -> float:
    t = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
