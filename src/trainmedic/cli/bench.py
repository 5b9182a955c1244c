"""``trainmedic bench matmul|storage|data``: what this machine can give a training run. The
machine first, every figure labelled measured or estimated; ``--json``: one document
(schemas below). Exit 0, or 2 for bad usage."""

from __future__ import annotations

import json
from typing import Any

import click

from trainmedic.cli.options import parse_sets
from trainmedic.cli.presenter import progress_bar

__all__ = ["bench"]

SCHEMA_MATMUL = "trainmedic.bench.matmul/1"
SCHEMA_STORAGE = "trainmedic.bench.storage/1"
SCHEMA_DATA = "trainmedic.bench.data/1"


@click.group()
def bench() -> None:
    """Measure what this machine gives a training run: matmul FLOP/s, storage, data loading.

    \b
    Examples:
      trainmedic bench matmul
      trainmedic bench matmul --device cuda --dtype bfloat16 --quick
      trainmedic bench storage /mnt/checkpoints --size 1G --checkpoint 140GB
      trainmedic bench data trainmedic.demo:recipe --workers 0,1,2
    """


def _show(schema: str, result: Any, lines: Any, as_json: bool) -> None:
    """One JSON document (``--json``) or the text lines of ``trainmedic.report.bench_text``."""
    click.echo(json.dumps({"schema": schema, **result.to_dict()}, indent=2) if as_json
               else "\n".join(lines(result)))


def _int_list(text: str | None, option: str, low: int) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or any(v < low for v in values):
        raise click.BadParameter(f"expected comma-separated integers >= {low} (e.g. 0,1,2), "
                                 f"got {text!r}", param_hint=option)
    return values


# -- matmul ----------------------------------------------------------------------------------

@bench.command("matmul")
@click.option("--device", default=None, metavar="cpu|cuda[:N]",
              help="Where to multiply [default: cuda when present, else cpu].")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default=None,
              help="[default: bfloat16 on CUDA as mamf-finder, float32 on CPU].")
@click.option("--quick", is_flag=True, help="Fewer shapes and iterations.")
@click.option("--m", metavar="M[,M...]", help="Rows of A and C.")
@click.option("--n", metavar="N[,N...]", help="Columns of B and C.")
@click.option("--k", metavar="K[,K...]", help="The reduction dimension.")
@click.option("--m-range", type=(int, int, int), default=None, metavar="START STOP STEP",
              help="M from START (0 = STEP) below STOP, as mamf-finder's --m_range.")
@click.option("--n-range", type=(int, int, int), default=None, metavar="START STOP STEP")
@click.option("--k-range", type=(int, int, int), default=None, metavar="START STOP STEP")
@click.option("--iterations", type=click.IntRange(min=1), default=None,
              help="Timed iterations per shape [default: CPU 10, CUDA 100; --quick 5 / 20].")
@click.option("--warmup", type=click.IntRange(min=0), default=None,
              help="Untimed iterations per shape first [default: CPU 3, CUDA 50; quick 2/10].")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="torch CPU threads for the sweep [default: as torch has them].")
@click.option("--tf32", is_flag=True, help="float32 on CUDA: allow TF32 tensor cores.")
@click.option("--device-warmup-s", type=click.FloatRange(min=0), default=None,
              help="Run the first shape this long first [default: CUDA 30 s, CPU 0].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def matmul_cmd(device: str | None, dtype: str | None, quick: bool, iterations: int | None,
               warmup: int | None, threads: int | None, tf32: bool,
               device_warmup_s: float | None, as_json: bool, **dims: Any) -> None:
    """Achievable matmul FLOP/s (MAMF, after stas00's mamf-finder): sweep (m, n, k) shapes,
    take each shape's median over timed iterations, report the highest median and its shape.

    Give all three dimensions (values or ranges) to sweep their grid; otherwise a default set
    of shapes is used (CPU: 256..1024, a few seconds).

    \b
    Examples:
      trainmedic bench matmul
      trainmedic bench matmul --m 1024,2048 --n 1024 --k 1024 --json
      trainmedic bench matmul --device cuda --dtype bfloat16 --m-range 0 20480 256 \\
          --n 4096 --k 4096
    """
    import torch

    from trainmedic.bench.matmul import (
        default_iterations,
        default_shapes,
        requested_shapes,
        sweep_matmul,
    )
    from trainmedic.report.bench_text import matmul_lines

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    on_cpu = device == "cpu"
    dtype = dtype or ("float32" if on_cpu else "bfloat16")
    shapes = requested_shapes({d: dims[d] for d in "mnk"},
                              {d: dims[f"{d}_range"] for d in "mnk"}) or default_shapes(
        "cpu" if on_cpu else "cuda", quick=quick)
    defaults = default_iterations("cpu" if on_cpu else "cuda", quick=quick)
    with progress_bar(f"matmul {dtype} on {device}") as progress:
        sweep = sweep_matmul(device=device, dtype=dtype, shapes=shapes,
                             iterations=iterations or defaults[0],
                             warmup=defaults[1] if warmup is None else warmup,
                             threads=threads, tf32=tf32, device_warmup_s=device_warmup_s,
                             on_progress=progress)
    _show(SCHEMA_MATMUL, sweep, matmul_lines, as_json)


# -- storage ---------------------------------------------------------------------------------

@bench.command("storage")
@click.argument("path", metavar="PATH")
@click.option("--size", default="256MiB", show_default=True,
              help="Sequential file size (256MiB, 1G = 1 GiB, 2GB = 2*10**9 bytes).")
@click.option("--block", default="8MiB", show_default=True, help="Bytes per write/read call.")
@click.option("--small-files", type=click.IntRange(min=0), default=100, show_default=True,
              help="Small files for the create+write+fsync rate (0: skip).")
@click.option("--checkpoint", "checkpoints", multiple=True, metavar="SIZE",
              help="Estimate writing a checkpoint this big [default: 10GB]; repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def storage_cmd(path: str, size: str, block: str, small_files: int,
                checkpoints: tuple[str, ...], as_json: bool) -> None:
    """Sequential write (with fsync), warm and cold read, small-file rate, and the estimated
    time a checkpoint would take to write in PATH.

    Writes into a temporary subfolder of PATH that is always removed. The cold read is
    verified against the kernel's count of bytes fetched from storage where Linux gives it.

    \b
    Examples:
      trainmedic bench storage .
      trainmedic bench storage /mnt/checkpoints --size 1G --checkpoint 16GB --checkpoint 140GB
      trainmedic bench storage /scratch --small-files 1000 --json
    """
    from trainmedic.bench.storage import StorageConfig, bench_storage
    from trainmedic.memory.gpus import parse_size
    from trainmedic.report.bench_text import storage_lines

    config = StorageConfig(
        size_bytes=parse_size(size, field="--size"),
        block_bytes=parse_size(block, field="--block"), small_files=small_files,
        checkpoint_bytes=tuple(parse_size(c, field="--checkpoint") for c in checkpoints)
        or (10**10,))
    with progress_bar(f"storage {path}") as progress:
        result = bench_storage(path, config, on_progress=progress)
    _show(SCHEMA_STORAGE, result, storage_lines, as_json)


# -- data ------------------------------------------------------------------------------------

@bench.command("data")
@click.argument("recipe", metavar="MODULE:FUNCTION")
@click.option("--batches", type=click.IntRange(min=1), default=50, show_default=True,
              help="Batches timed per setting (after the first, timed apart).")
@click.option("--workers", default=None, metavar="W[,W...]",
              help="num_workers values [default: 0,1,2,4 up to the usable cores].")
@click.option("--pin-memory", type=click.Choice(["auto", "on", "off", "both"]),
              default="auto", show_default=True,
              help="pin_memory values (auto: both with CUDA, off without).")
@click.option("--prefetch", default="2,4", show_default=True, metavar="P[,P...]",
              help="prefetch_factor values (settings with workers).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="A recipe argument (VALUE read as JSON, else a string); repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def data_cmd(recipe: str, batches: int, workers: str | None, pin_memory: str, prefetch: str,
             sets: tuple[str, ...], as_json: bool) -> None:
    """The recipe's data loader alone (no model step): samples/s and batches/s across
    num_workers, pin_memory and prefetch_factor.

    A DataLoader is rebuilt over its dataset with the same batch size, collate function,
    shuffling and drop_last; any other iterable is measured as is. The first batch (worker
    start-up) is timed apart and left out of the rates.

    \b
    Examples:
      trainmedic bench data trainmedic.demo:recipe
      trainmedic bench data train.py:recipe --workers 0,2,4 --batches 200 --set batch_size=64
    """
    from trainmedic.bench.data import DataBenchConfig, bench_data
    from trainmedic.report.bench_text import data_lines

    pins = {"auto": None, "on": (True,), "off": (False,), "both": (False, True)}[pin_memory]
    config = DataBenchConfig(batches=batches, workers=_int_list(workers, "--workers", 0),
                             pin_memory=pins,
                             prefetch_factors=_int_list(prefetch, "--prefetch", 1) or (2,))
    with progress_bar(f"data {recipe}") as progress:
        result = bench_data(recipe, config, overrides=parse_sets(sets), on_progress=progress)
    _show(SCHEMA_DATA, result, data_lines, as_json)
