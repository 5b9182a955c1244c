"""Sharded checkpoint throughput: trainmedic's ``save_sharded`` / ``load_sharded`` against plain
``torch.distributed.checkpoint`` on the same state, and ``verify_sharded``'s read rate.

Usage (from the repository root)::

    .venv/bin/python benchmarks/ckpt_sharded.py                    # ~1-2 minutes, 384 MB
    .venv/bin/python benchmarks/ckpt_sharded.py --state-mb 768 --rounds 5 --json
    .venv/bin/python benchmarks/ckpt_sharded.py --wrap ddp --dir /mnt/fast/tmp

Two gloo ranks on CPU (``torch.multiprocessing.spawn``, a FileStore), one torch thread each.
The model is a stack of ``--layers`` square Linear layers sized so that parameters plus
AdamW's two moments come to ``--state-mb`` (the step counters are a few bytes), wrapped with
FSDP2 ``fully_shard`` per layer (``--wrap fsdp``, each rank holds half) or DDP (every rank
holds all of it; DCP writes each replicated tensor once). One training step fills the moments.

Per round, in an order that alternates between rounds so that the disk's and page cache's
drift hits both alike:

* ``trainmedic``: ``save_sharded(dir, model, opt)``, then ``load_sharded(dir, model, opt)``
  (restricted metadata unpickler, completeness check, ``weights_only`` for non-tensors);
* ``plain DCP``: ``get_state_dict`` + ``dcp.save({"model", "optimizer"}, checkpoint_id=dir)``,
  then ``get_state_dict`` + ``dcp.load`` + ``set_state_dict`` (what torchtitan does).

Both write with DCP's ``FileSystemWriter`` defaults (one file per rank, fsync). A time is
rank 0's wall clock between barriers before and after the call; the figure is the median over
rounds, as MB/s of state (parameters + moments), and the ratio of throughputs trainmedic /
plain is the median over rounds of each round's back-to-back pair (with its min-max). Loads read
files just written, so they come from the page cache unless the machine evicted them: they
measure DCP's and trainmedic's work more than the disk. ``verify_sharded`` is timed once per
round on rank 0 alone (CRC of every zip member, ``torch.load``, finiteness), as MB/s of files
read. The machine is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from machine import describe, one_line  # noqa: E402

VARIANTS = ("trainmedic", "plain DCP")


def _width(state_mb: float, layers: int) -> int:
    """Square layers: parameters + exp_avg + exp_avg_sq in float32 are 12 bytes each."""
    return max(8, int((state_mb * 1e6 / 12 / layers) ** 0.5))


def _model(width: int, layers: int) -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False)
                                 for _ in range(layers)])


def _wrap(model: Any, how: str, world: int) -> Any:
    import torch

    if how == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def _timed(fn: Any) -> float:
    import torch.distributed as dist

    dist.barrier()
    t0 = time.perf_counter()
    fn()
    dist.barrier()
    return time.perf_counter() - t0


def _plain_save(directory: Path, model: Any, opt: Any) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optimizer": osd}, checkpoint_id=str(directory))


def _plain_load(directory: Path, model: Any, opt: Any) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    msd, osd = get_state_dict(model, opt)
    dcp.load({"model": msd, "optimizer": osd}, checkpoint_id=str(directory))  # in place
    set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)


def _worker(rank: int, world: int, args: dict[str, Any], init: str, out: str) -> None:
    import torch
    import torch.distributed as dist

    from trainmedic.checkpoint.sharded import load_sharded, save_sharded, verify_sharded

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                            timeout=timedelta(seconds=600))
    try:
        width = _width(args["state_mb"], args["layers"])
        model = _wrap(_model(width, args["layers"]), args["wrap"], world)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model(torch.randn(4, width)).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        n_params = sum(p.numel() for p in model.parameters())  # global numel, DTensor too
        state_bytes = 12 * n_params
        root = Path(args["dir"])
        times: dict[str, dict[str, list[float]]] = {
            v: {"save": [], "load": []} for v in VARIANTS}
        verify_s: list[float] = []
        files_bytes = 0
        for r in range(args["rounds"]):
            order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
            for v in order:
                d = root / f"r{r}-{v.replace(' ', '_')}"
                if v == "trainmedic":
                    times[v]["save"].append(_timed(lambda d=d: save_sharded(d, model, opt)))
                    times[v]["load"].append(_timed(lambda d=d: load_sharded(d, model, opt)))
                else:
                    times[v]["save"].append(_timed(lambda d=d: _plain_save(d, model, opt)))
                    times[v]["load"].append(_timed(lambda d=d: _plain_load(d, model, opt)))
            if rank == 0:
                d = root / f"r{r}-trainmedic"
                files_bytes = sum(p.stat().st_size for p in d.iterdir())
                t0 = time.perf_counter()
                problems = verify_sharded(d)
                verify_s.append(time.perf_counter() - t0)
                assert problems == [], problems
            dist.barrier()
            if rank == 0:
                for p in root.iterdir():
                    if p.name.startswith(f"r{r}-"):
                        shutil.rmtree(p)
        if rank == 0:
            Path(out).write_text(json.dumps({
                "state_bytes": state_bytes, "files_bytes": files_bytes, "params": n_params,
                "times_s": times, "verify_s": verify_s}))
    finally:
        dist.barrier()
        dist.destroy_process_group()


def _paired(times: dict[str, dict[str, list[float]]], what: str) -> tuple[float, float, float]:
    """Median, min and max over rounds of plain time / trainmedic time (throughput ratio):
    each round's pair ran back to back, so drift of the machine cancels."""
    ratios = [p / t for p, t in zip(times["plain DCP"][what], times["trainmedic"][what],
                                    strict=True)]
    return statistics.median(ratios), min(ratios), max(ratios)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--state-mb", type=float, default=384.0,
                    help="parameters + AdamW moments, MB (default 384)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--wrap", choices=("fsdp", "ddp"), default="fsdp")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp folder)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import torch
    import torch.multiprocessing as mp

    info = describe()
    os.environ["OMP_NUM_THREADS"] = "1"
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        work = Path(tmp) / "ckpts"
        work.mkdir()
        out = Path(tmp) / "result.json"
        cfg = {"state_mb": args.state_mb, "layers": args.layers, "rounds": args.rounds,
               "wrap": args.wrap, "dir": str(work)}
        mp.spawn(_worker, args=(2, cfg, f"file://{tmp}/store", str(out)), nprocs=2,
                 join=True)
        res = json.loads(out.read_text())
        disk = str(Path(tmp).resolve())
    mb = res["state_bytes"] / 1e6
    med = {v: {k: statistics.median(ts) for k, ts in res["times_s"][v].items()}
           for v in VARIANTS}
    verify_mbps = res["files_bytes"] / 1e6 / statistics.median(res["verify_s"])
    summary = {
        "machine": info, "torch": torch.__version__, "dir": disk, "wrap": args.wrap,
        "ranks": 2, "state_mb": round(mb, 1), "files_mb": round(res["files_bytes"] / 1e6, 1),
        "rounds": args.rounds, "median_s": med,
        "mb_per_s": {v: {k: round(mb / t, 1) for k, t in med[v].items()} for v in VARIANTS},
        "ratio_trainmedic_over_plain": {k: round(_paired(res["times_s"], k)[0], 3)
                                        for k in ("save", "load")},
        "ratio_range": {k: [round(x, 3) for x in _paired(res["times_s"], k)[1:]]
                        for k in ("save", "load")},
        "verify_mb_per_s": round(verify_mbps, 1),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(one_line(info))
    print(f"torch {torch.__version__}; 2 gloo ranks, {args.wrap}; state {mb:.0f} MB "
          f"({res['params'] / 1e6:.1f} M params + AdamW moments), files "
          f"{res['files_bytes'] / 1e6:.0f} MB in {disk}; median of {args.rounds} rounds")
    print(f"{'':12} {'save s':>8} {'save MB/s':>10} {'load s':>8} {'load MB/s':>10}")
    for v in VARIANTS:
        s, ld = med[v]["save"], med[v]["load"]
        print(f"{v:12} {s:8.3f} {mb / s:10.1f} {ld:8.3f} {mb / ld:10.1f}")
    r, rr = summary["ratio_trainmedic_over_plain"], summary["ratio_range"]
    print("throughput trainmedic / plain DCP, median of the rounds' paired ratios "
          f"(min-max): save {r['save']:.3f}x ({rr['save'][0]:.2f}-{rr['save'][1]:.2f}), "
          f"load {r['load']:.3f}x ({rr['load'][0]:.2f}-{rr['load'][1]:.2f})")
    print(f"verify_sharded (rank 0 alone, files just written): {verify_mbps:.0f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
