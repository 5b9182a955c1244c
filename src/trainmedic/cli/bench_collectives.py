"""``trainmedic bench collectives``: algbw and busbw per op and size as nccl-tests defines them,
and the rank the others wait for. Run under torchrun or srun; rank 0 prints (``--json``: schema
``trainmedic.bench.collectives/1``). Exit 0, 1 a slow rank or wrong results, 2 bad usage."""

from __future__ import annotations

import json

import click

__all__ = ["collectives"]


@click.command("collectives")
@click.option("--ops", default="all_reduce,all_gather,reduce_scatter,broadcast",
              show_default=True, help="Comma-separated collectives to time.")
@click.option("--sizes", default=None, metavar="LOW..HIGH[:F] | S,S,...",
              help="Message sizes S (nccl-tests' S: the whole array) [default: 1KiB..64MiB "
                   "on CPU, 1KiB..1GiB on CUDA, x4].")
@click.option("--iters", type=click.IntRange(min=1), default=None,
              help="Timed operations per size [default: CPU 10, CUDA 20].")
@click.option("--warmup", type=click.IntRange(min=0), default=None,
              help="Untimed operations per size first [default: CPU 2, CUDA 5].")
@click.option("--backend", type=click.Choice(["auto", "gloo", "nccl"]), default="auto",
              show_default=True, help="auto: nccl when CUDA is available, else gloo.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.1), default=120.0,
              show_default=True, help="Seconds any one collective may wait.")
@click.option("--slow-wait-ms", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="A slow rank costs the others at least this much wait per call ...")
@click.option("--slow-ratio", type=click.FloatRange(min=1), default=2.0, show_default=True,
              help="... and at least this many times its own time inside the call.")
@click.option("--json", "as_json", is_flag=True, help="Rank 0 prints one JSON document.")
def collectives(ops: str, sizes: str | None, iters: int | None, warmup: int | None,
                backend: str, timeout_s: float, slow_wait_ms: float, slow_ratio: float,
                as_json: bool) -> None:
    """Time all_reduce, all_gather, reduce_scatter and broadcast over message sizes and
    report time, algbw = S/t and busbw = algbw x factor (2(n-1)/n all_reduce, (n-1)/n
    all_gather and reduce_scatter, 1 broadcast), as nccl-tests. Each result is checked
    against known values. A rank the others wait for inside the collectives is flagged.

    \b
    Examples:
      torchrun --standalone --nproc-per-node 2 -m trainmedic bench collectives
      torchrun --standalone --nproc-per-node 8 -m trainmedic bench collectives \\
          --ops all_reduce --sizes 1MiB..1GiB:2 --json
      srun --ntasks-per-node 8 python -m trainmedic bench collectives --sizes 64MiB,256MiB
    """
    from trainmedic.bench.collectives import CollectivesConfig, parse_sizes, run_collectives
    from trainmedic.report.dist_text import collectives_lines

    gpu = backend == "nccl" or (backend == "auto" and _cuda())
    cfg = CollectivesConfig(
        ops=tuple(o.strip() for o in ops.split(",") if o.strip()),
        sizes_bytes=parse_sizes(sizes) if sizes else None,
        iters=iters if iters is not None else (20 if gpu else 10),
        warmup=warmup if warmup is not None else (5 if gpu else 2),
        backend=backend, timeout_s=timeout_s, slow_min_wait_s=slow_wait_ms / 1e3,
        slow_ratio=slow_ratio)
    result = run_collectives(cfg)
    if result is None:  # not rank 0: rank 0 prints
        return
    click.echo(json.dumps(result.to_dict(), indent=2) if as_json
               else "\n".join(collectives_lines(result)))
    if result.failures:
        raise click.exceptions.Exit(1)


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())
