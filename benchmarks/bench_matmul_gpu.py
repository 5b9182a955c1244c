"""Achievable matmul FLOP/s (MAMF) on a real GPU, per dtype, next to the datasheet peak.

Runs ``trainmedic.bench.sweep_matmul`` (mamf-finder semantics: per-shape median over timed
iterations with a 256 MiB cache flush between them, the highest median wins) for bf16, fp16,
fp32 and fp32 with TF32 over mamf-finder's quick range (m from 0 to 20480 in steps, n = k =
4096), and prints each measured figure beside the bf16/fp16 dense datasheet figure of
``trainmedic.memory.gpus`` for the device torch names (the catalog has no fp32/TF32 figure:
shown as "no datasheet figure"). The first sweep warms the GPU for ``--device-warmup-s``
(mamf-finder: 30 s), as a cold GPU boosts higher on the first shapes.

Without a CUDA device it says so and exits 0. Run:
    python benchmarks/bench_matmul_gpu.py [--m-range 0 20480 1024] [--n 4096 --k 4096]
        [--dtypes bfloat16,float16,float32,tf32] [--iterations 100 --warmup 50] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def datasheet_tflops(device_name: str, dtype: str) -> tuple[str, float | None]:
    """(catalog entry or why none, dense TFLOP/s or None) for the device and dtype."""
    from trainmedic.errors import ConfigError
    from trainmedic.memory.gpus import lookup_gpu

    try:
        spec = lookup_gpu(device_name)
    except ConfigError as exc:
        return f"not in the catalog ({exc})", None
    return spec.name, spec.dense_tflops(dtype)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m-range", type=int, nargs=3, default=[0, 20480, 1024],
                   metavar=("START", "STOP", "STEP"))
    p.add_argument("--n", type=int, nargs="+", default=[4096])
    p.add_argument("--k", type=int, nargs="+", default=[4096])
    p.add_argument("--dtypes", default="bfloat16,float16,float32,tf32")
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--device-warmup-s", type=float, default=30.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    import torch

    if not torch.cuda.is_available():
        print(f"bench_matmul_gpu: no CUDA device (torch {torch.__version__}); skipped")
        return 0

    from trainmedic.bench.machine import describe_machine
    from trainmedic.bench.matmul import grid_shapes, shape_range, sweep_matmul

    machine = describe_machine()
    name = torch.cuda.get_device_name(0)
    shapes = grid_shapes(shape_range(*args.m_range, field="--m-range"), args.n, args.k)
    # --json: stdout carries the JSON document only; the lines go to stderr
    out = sys.stderr if args.json else sys.stdout
    print(machine.one_line(), file=out)
    print(f"device: {name}; {len(shapes)} shapes (m {args.m_range}, n {args.n}, k {args.k}), "
          f"{args.iterations} timed + {args.warmup} warm-up iterations per shape", file=out)
    rows = []
    warm = args.device_warmup_s
    for label in args.dtypes.split(","):
        dtype, tf32 = ("float32", True) if label == "tf32" else (label, False)
        t0 = time.perf_counter()
        s = sweep_matmul(device="cuda", dtype=dtype, shapes=shapes, tf32=tf32,
                         iterations=args.iterations, warmup=args.warmup,
                         device_warmup_s=warm)
        warm = 0.0  # the device is warm after the first sweep
        entry, sheet = datasheet_tflops(name, dtype if not tf32 else "tf32")
        measured = s.peak_flops_per_s / 1e12
        share = f"{100 * measured / sheet:.1f}% of datasheet" if sheet else \
            "no datasheet figure in the catalog"
        print(f"  {label:>9}: {measured:8.1f} TFLOP/s measured (MAMF, median) at "
              f"{'x'.join(map(str, s.best_shape))}; fastest iteration "
              f"{s.best_single_flops_per_s / 1e12:.1f} TFLOP/s measured; datasheet "
              f"{f'{sheet:.1f} TFLOP/s' if sheet else '-'} ({entry}); {share}; "
              f"{time.perf_counter() - t0:.0f} s", file=out)
        rows.append({"dtype": label, "measured_tflops": measured, "best_shape": s.best_shape,
                     "fastest_iteration_tflops": s.best_single_flops_per_s / 1e12,
                     "datasheet_tflops": sheet, "catalog_entry": entry,
                     "basis": {"measured_tflops": "measured", "datasheet_tflops": "datasheet"}})
    if args.json:
        print(json.dumps({"schema": "trainmedic.bench.matmul_gpu/1",
                          "machine": machine.to_dict(), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
