"""``trainmedic memory oom``: why a real run ran out of GPU memory, from its log or a memory
snapshot."""

from __future__ import annotations

import click

__all__ = ["oom_cmd"]


@click.command("oom")
@click.argument("file", metavar="FILE")
@click.option("--device", type=int, default=None,
              help="For a snapshot with several GPUs: the device to explain.")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
def oom_cmd(file: str, device: int | None, as_json: bool) -> None:
    """Explain a CUDA out-of-memory error from a log, or from a memory snapshot.

    FILE is a log or traceback with the OOM message (torch 1.x/2.x CUDA, ROCm/HIP; the last one
    is explained), or a torch.cuda.memory._dump_snapshot pickle, read without admitting any
    class (nothing in it is executed). Says whether the memory was fragmented, held by another
    process, or genuinely full, with the arithmetic and what to change. Exit 1 when an OOM was
    found and explained.

    \b
    Examples:
      trainmedic memory oom train.log
      python train.py 2>&1 | tee run.log; trainmedic memory oom run.log --json
      trainmedic memory oom snapshot.pickle
    """
    from trainmedic.memory.oom import explain_oom_file
    from trainmedic.report.memory_json import dumps, oom_doc
    from trainmedic.report.memory_text import oom_lines

    kind, explanation = explain_oom_file(file, device=device)
    click.echo(dumps(oom_doc(explanation, kind=kind, source=file)) if as_json
               else "\n".join(oom_lines(explanation, source=file)))
    raise click.exceptions.Exit(1)
