"""The options the ``trainmedic memory`` commands share (kept apart so that each command in
``cli/memory.py`` reads as: options, one library call, the report)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from trainmedic.memory.gpus import GpuTarget

__all__ = ["int_option", "choice_option", "gpu_options", "margin_option", "config_option",
           "gpu_target_of"]


def int_option(flag: str, default: int | None, help: str, *name: str) -> Callable[[Any], Any]:
    """An integer option (``name``: the parameter, when not the flag's)."""
    return click.option(flag, *name, type=int, default=default,
                        show_default=default is not None, help=help)


def choice_option(flag: str, *names: str, **kwargs: Any) -> Callable[[Any], Any]:
    """An option choosing among ``names``; the first is the default."""
    return click.option(flag, type=click.Choice(list(names)), default=names[0],
                        show_default=True, **kwargs)


def gpu_options(f: Any) -> Any:
    """``--gpu`` and ``--gpu-memory``, as every command with a verdict takes them."""
    f = click.option("--gpu-memory", default=None, metavar="SIZE", help="GPU memory, e.g. "
                     "80GB (10^9) or 80GiB (2^30); a bare 80 is read as 80GB.")(f)
    return click.option("--gpu", default=None, metavar="NAME",
                        help="GPU model, e.g. h100, a100-80gb.")(f)


margin_option = click.option("--margin", type=float, default=0.10, show_default=True,
                              help="Share of the GPU kept free for allocator fragmentation.")
config_option = click.option(
    "--config", required=True, metavar="FILE|ID",
    help="A Hugging Face config.json, its model folder, or a hub id (org/name) already in the "
         "local Hugging Face cache; no weights needed.")


def gpu_target_of(gpu: str | None, gpu_memory: str | None) -> GpuTarget | None:
    from trainmedic.memory.gpus import gpu_target

    target = gpu_target(gpu, gpu_memory, gpu_field="--gpu", memory_field="--gpu-memory")
    if target is not None and target.note:
        click.echo(f"trainmedic: note: {target.note}", err=True)
    return target
