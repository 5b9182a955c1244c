"""``trainmedic ckpt resume-test RECIPE --steps N --at K``: prove a resume reproduces the run.

Registered in the ``ckpt`` group by ``trainmedic.cli.ckpt``. Exit codes: 0 the resumed run
reproduces the straight one, 1 it does not (the first differing state is named), 2 bad input.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from trainmedic.cli.options import parse_sets

__all__ = ["resume_test", "resume_test_command"]


@click.command("resume-test")
@click.argument("recipe", metavar="MODULE:FUNCTION")
@click.option("--steps", "steps", type=click.IntRange(min=2), required=True,
              help="N: steps of the straight run.")
@click.option("--at", "at", type=click.IntRange(min=1), required=True,
              help="K: save after this step, resume from it in a fresh process.")
@click.option("--atol", type=click.FloatRange(min=0), default=None,
              help="Count losses and weights equal within this (default: bitwise).")
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="Data-loader workers (the recipe's num_workers).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Another recipe argument (VALUE read as JSON, else a string); repeatable.")
@click.option("--root", metavar="DIR", default=None,
              help="Keep the checkpoint here (default: a temporary folder, deleted).")
@click.option("--concurrent", is_flag=True,
              help="Run the straight and the first run at once (twice the memory).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--sabotage", type=click.Choice(["rng", "data", "rng-before-data", "generator",
                                               "optimizer"]),
              default=None, hidden=True, help="Break the resume on purpose (self-test).")
def resume_test_command(recipe: str, steps: int, at: int, atol: float | None,
                        workers: int | None, sets: tuple[str, ...], root: str | None,
                        concurrent: bool, as_json: bool, sabotage: str | None) -> None:
    """Run a recipe N steps straight, and K steps + save + a fresh process + load + N-K
    steps; compare per-step losses and final weights bitwise (or within --atol).

    When they differ, names the state that differs first: model, optimizer, scheduler,
    scaler, counters, data position, data order, an RNG stream, or the first loss.

    \b
    Examples:
      trainmedic ckpt resume-test trainmedic.demo:recipe --steps 12 --at 5
      trainmedic ckpt resume-test train.py:recipe --steps 20 --at 7 --workers 2 --json
    """
    from trainmedic.recipe.resume_test import ResumeTestConfig
    from trainmedic.recipe.resume_test import resume_test as run_resume_test

    if at >= steps:
        raise click.BadParameter(f"--at ({at}) must be below --steps ({steps})",
                                 param_hint="--at")
    overrides = parse_sets(sets)
    if workers is not None:
        overrides["num_workers"] = workers
    config = ResumeTestConfig(recipe=recipe, steps=steps, at=at, atol=atol,
                              overrides=overrides, root=Path(root) if root else None,
                              sabotage=sabotage, concurrent=concurrent)
    report = run_resume_test(config, progress=_progress())
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        _print(recipe, report)
    raise click.exceptions.Exit(0 if report.equal else 1)


def _stderr_is_tty() -> bool:
    return sys.stderr.isatty()


def _progress() -> Callable[[str], None] | None:
    """On a terminal, one short line on stderr as each phase process starts (with the time
    since the test began); nothing when stderr is piped or captured."""
    if not _stderr_is_tty():
        return None
    t0 = time.perf_counter()

    def say(line: str) -> None:
        click.echo(f"resume-test [{time.perf_counter() - t0:5.1f} s] {line}", err=True)

    return say


#: The command under the name the ``ckpt`` group imports.
resume_test = resume_test_command


def _print(recipe: str, report: Any) -> None:
    mode = "bitwise" if report.atol is None else f"within {report.atol:g}"
    click.echo(f"resume-test {recipe}: {report.steps} steps straight vs {report.at} + save + "
               f"fresh process + load + {report.steps - report.at}")
    if report.equal:
        click.echo(f"  EQUAL ({mode}): {len(report.losses_resumed)} losses after the resume "
                   f"and the final weights match")
    else:
        click.echo(f"  DIFFERS ({mode}): first difference: {report.first_difference}")
    for line in report.differences:
        click.echo(f"    - {line}")
    for line in report.notes:
        click.echo(f"  note: {line}")
    click.echo(f"  max |loss diff| {report.max_loss_diff:.3g}, max |weight diff| "
               f"{report.max_weight_diff:.3g}")
    t = report.timings_s
    click.echo("  runs: " + ", ".join(f"{k} {v:.1f} s" for k, v in t.items()))
    if report.checkpoint:
        click.echo(f"  checkpoint kept: {report.checkpoint}")
