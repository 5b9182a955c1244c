#!/usr/bin/env python3
"""Time ``write_html`` on a 1,000,000-step run with 8 metrics; print time, file size, machine.

    python benchmarks/html_speed.py [--steps 1000000] [--repeat 5]

The run is synthetic (a decaying noisy loss with a spike and a NaN stretch, lr warmup+cosine,
grad norm, step/data time, three memory series): what matters here is the point count, not the
shape. Printed: the first call's wall time (what one CLI invocation pays) and the median of
``--repeat`` further calls.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from trainmedic.diagnose.finding import Diagnosis, Evidence, Finding
from trainmedic.report import write_html
from trainmedic.run.series import Run


def build_run(n: int) -> tuple[Run, Diagnosis]:
    rng = np.random.default_rng(0)
    steps = np.arange(n, dtype=np.int64)
    loss = 3.0 * np.exp(-steps / (n / 5)) + 1.2 + 0.05 * rng.standard_normal(n)
    loss[n // 3] = 40.0
    loss[int(n * 0.8):int(n * 0.8) + 20] = np.nan
    warm = np.minimum(1.0, (steps + 1) / 2000)
    lr = 3e-4 * warm * (0.55 + 0.45 * np.cos(np.pi * steps / n))
    run = Run(source=f"synthetic {n:,}-step run")
    run.add("loss", steps, loss)
    run.add("lr", steps, lr)
    run.add("grad_norm", steps, np.abs(1 + 0.3 * rng.standard_normal(n)))
    run.add("step_time_s", steps, 0.25 + 0.02 * rng.random(n))
    run.add("data_time_s", steps, 0.01 + 0.01 * rng.random(n))
    run.add("mem_alloc_mb", steps, 20_000 + 0.001 * steps)
    run.add("mem_peak_mb", steps, 30_000 + 0.001 * steps)
    run.add("rss_mb", steps, 8_000 + 0.002 * steps + rng.random(n))
    metrics = run.metrics()
    findings = [
        Finding("loss_spike", "warning", 0.9, n // 3, "loss jumped 30x its median",
                (Evidence("loss", n // 3, 40.0, 1.3),), end_step=n // 3 + 1, metric="loss"),
        Finding("nonfinite_loss", "error", 1.0, int(n * 0.8), "loss became NaN",
                (Evidence("loss", int(n * 0.8), float("nan")),), metric="loss"),
    ]
    return run, Diagnosis(source=run.source, metrics_seen=metrics, findings=findings)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, numpy {np.__version__}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    run, diagnosis = build_run(args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.html"
        t0 = time.perf_counter()
        write_html(diagnosis, run, out)  # first call in the process, as the CLI makes it
        first = time.perf_counter() - t0
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            write_html(diagnosis, run, out)
            times.append(time.perf_counter() - t0)
        size = out.stat().st_size
    print(f"write_html: {args.steps:,} steps x {len(run.series)} metrics "
          f"({run.num_points:,} points)")
    print(f"  time  median {statistics.median(times):.3f} s  "
          f"(min {min(times):.3f}, max {max(times):.3f}, {args.repeat} runs); "
          f"first call {first:.3f} s")
    print(f"  size  {size:,} bytes ({size / 1e6:.2f} MB)")
    print(f"  machine: {machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
