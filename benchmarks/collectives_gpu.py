"""NCCL collective bandwidth on this machine's GPUs: time, algbw and busbw per op and size as
nccl-tests defines them (``trainmedic.bench.collectives``), then the same sweep with one rank
made late on purpose, to show the slow-rank flag on the CUDA-event timing path.

Needs two or more CUDA devices; with fewer it says so and exits 0. Started plainly it launches
itself under torchrun (``torch.distributed.run --standalone``) on every visible GPU:

    python benchmarks/collectives_gpu.py [--nproc 8] [--sizes 1MiB..1GiB:2] [--iters 20]
        [--warmup 5] [--ops all_reduce,all_gather] [--late-ms 20] [--json]

Compare busbw with nccl-tests' ``all_reduce_perf -b 1M -e 1G -f 2 -g N`` on the same machine:
the figures are defined the same way (S the whole array; busbw = algbw x 2(n-1)/n for
all_reduce), but torch adds its own launch overhead per call, visible at small sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=None, help="ranks [default: every GPU]")
    p.add_argument("--sizes", default="1KiB..1GiB")
    p.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter,broadcast")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--late-ms", type=float, default=20.0,
                   help="second sweep: rank 1 sleeps this long before each call (0: skip)")
    p.add_argument("--json", action="store_true")
    return p.parse_args()


def _launch(args: argparse.Namespace) -> int:
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n < 2:
        print(f"collectives_gpu: {n} CUDA device(s) (torch {torch.__version__}); an NCCL "
              f"sweep needs 2 or more; skipped")
        return 0
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           str(args.nproc or n), __file__, *sys.argv[1:]]
    return subprocess.call(cmd)


def main() -> int:
    args = _args()
    if "RANK" not in os.environ:
        return _launch(args)
    from trainmedic.bench.collectives import CollectivesConfig, parse_sizes, run_collectives
    from trainmedic.report.dist_text import collectives_lines

    cfg = CollectivesConfig(ops=tuple(args.ops.split(",")), sizes_bytes=parse_sizes(args.sizes),
                            iters=args.iters, warmup=args.warmup, backend="nccl")
    docs = []
    t0 = time.perf_counter()
    healthy = run_collectives(cfg)
    sweeps = [("healthy", healthy)]
    if args.late_ms > 0:
        late_s = args.late_ms / 1e3
        small = CollectivesConfig(ops=("all_reduce",), sizes_bytes=parse_sizes("1MiB,16MiB"),
                                  iters=10, warmup=2, backend="nccl")
        rank = int(os.environ["RANK"])
        late = run_collectives(small, (lambda op, i: time.sleep(late_s)) if rank == 1 else None)
        sweeps.append((f"rank 1 late by {args.late_ms:g} ms per call", late))
    if int(os.environ["RANK"]) != 0:
        return 0
    for label, result in sweeps:
        assert result is not None
        if args.json:
            docs.append({"label": label, **result.to_dict()})
        else:
            print(f"== {label}")
            print("\n".join(collectives_lines(result)))
    if args.json:
        print(json.dumps({"schema": "trainmedic.bench.collectives_gpu/1", "sweeps": docs},
                         indent=2))
    else:
        print(f"elapsed {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
