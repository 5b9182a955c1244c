"""``trainmedic dist check``: every rank can meet, talk and allocate, and the environment is
sane. Run under torchrun or srun; rank 0 prints the report (``--json``: schema
``trainmedic.dist.check/1``). Exit 0 all passed, 1 a check failed or a rank is missing,
2 bad usage."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from trainmedic.dist.bringup import CheckResult

__all__ = ["dist", "check_cmd"]


@click.group()
def dist() -> None:
    """Distributed health on torch.distributed (gloo on CPU, NCCL on GPU).

    \b
    Examples:
      torchrun --standalone --nproc-per-node 8 -m trainmedic dist check
      srun --ntasks-per-node 8 python -m trainmedic dist check --json
      trainmedic dist watch --dir runs/exp1/hang -- torchrun --nproc-per-node 8 train.py
      trainmedic dist diagnose runs/exp1
    """


@dist.command("check")
@click.option("--backend", type=click.Choice(["auto", "gloo", "nccl"]), default="auto",
              show_default=True, help="auto: nccl when CUDA is available, else gloo.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.1), default=60.0,
              show_default=True,
              help="Seconds to wait for a rank at any step; a later rank is named missing.")
@click.option("--alloc", default=None, metavar="SIZE",
              help="Bytes each rank allocates and touches [default: 1GiB on CUDA, 64MiB on "
                   "CPU; 0 skips].")
@click.option("--verbose", is_flag=True, help="Also list the environment's info lines.")
@click.option("--json", "as_json", is_flag=True, help="Rank 0 prints one JSON document.")
def check_cmd(backend: str, timeout_s: float, alloc: str | None, verbose: bool,
              as_json: bool) -> None:
    """Rank bring-up check, after stas00's torch-distributed-gpu-test: each rank reports its
    host, local rank, device, world size and backend; barrier, all_reduce, all_gather and
    broadcast are checked against known values and timed; each rank allocates and touches
    memory on its device; NCCL_* variables, /dev/shm, ulimit -l, shared GPUs and the
    rendezvous (MASTER_ADDR:MASTER_PORT) are checked.

    It never hangs: a rank that dies or does not arrive within --timeout is named, also when
    torchrun stops the others (SIGTERM). Without a launcher it checks a 1-rank group in this
    process and prints the torchrun line to check N ranks.

    \b
    Examples:
      torchrun --standalone --nproc-per-node 2 -m trainmedic dist check
      torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \\
          --rdzv-endpoint $MASTER_ADDR:29500 -m trainmedic dist check --timeout 120
      srun --ntasks-per-node 8 python -m trainmedic dist check --json
      NCCL_DEBUG=INFO torchrun --standalone --nproc-per-node 8 -m trainmedic dist check
    """
    from trainmedic.dist.bringup import CheckConfig, run_check
    from trainmedic.memory.gpus import parse_size
    from trainmedic.report.dist_text import check_lines

    alloc_bytes = None if alloc is None else (0 if alloc.strip() == "0" else
                                             parse_size(alloc, field="--alloc"))

    def emit(result: CheckResult) -> None:
        # rank 0 owns stdout; another rank only speaks (on stderr) about its own failure
        stream = sys.stdout if result.reporter == 0 else sys.stderr
        text = (json.dumps(result.to_dict(), indent=2) if as_json
                else "\n".join(check_lines(result, verbose=verbose)))
        click.echo(text, file=stream)
        stream.flush()

    result = run_check(CheckConfig(backend=backend, timeout_s=timeout_s,
                                   alloc_bytes=alloc_bytes), emit)
    if result.exit_code:
        raise click.exceptions.Exit(result.exit_code)


def _add_hang_commands() -> None:
    from trainmedic.cli.dist_hang import diagnose, watch

    dist.add_command(watch)
    dist.add_command(diagnose)


_add_hang_commands()
