"""``trainmedic check RECIPE``: preflight correctness checks on a recipe.

Exit codes: 0 no check failed (skips allowed), 1 a check failed, 2 a bad recipe spec, an
unknown ``--only`` name or a bad ``--set`` (one line on stderr).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from trainmedic.cli.options import parse_sets

if TYPE_CHECKING:
    from trainmedic.levers.preflight import Evidence, PreflightReport

__all__ = ["check"]

_MARK = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}


@click.command("check")
@click.argument("recipe", metavar="RECIPE")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="A recipe argument (VALUE read as JSON, else a string); repeatable.")
@click.option("--only", "only", multiple=True, metavar="NAME",
              help="Run only this check (repeatable); default: all of them.")
@click.option("--ddp", is_flag=True,
              help="Also check that 2 gloo ranks under DDP give one process's gradient "
                   "(spawns 2 processes that build the recipe again; CPU).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check(recipe: str, sets: tuple[str, ...], only: tuple[str, ...], ddp: bool,
          as_json: bool) -> None:
    """Preflight a recipe for silent correctness bugs before it burns compute.

    Each check runs a short experiment on the recipe's own model, loss and first batches and
    says PASS, FAIL or SKIP (with the reason), with the numbers it compared and, under a
    failure, the smallest fix: label_range, optimizer_coverage, gradients_flow, init_loss,
    microbatch_equivalence, mode_switch, determinism, mixed_precision, overfit_one_batch.
    With --ddp, also ddp_equivalence: 2 gloo ranks under DDP against one process (a loss
    summed over the batch, BatchNorm without SyncBatchNorm). The recipe's model, optimizer
    and RNG state are left as they were. Exit 1 when a check fails.

    \b
    Examples:
      trainmedic check trainmedic.demo:recipe --set batch_size=8 --set context_len=32
      trainmedic check train.py:recipe --only microbatch_equivalence --only init_loss
      trainmedic check mypkg.train:recipe --set precision=bf16-mixed --json
      trainmedic check train.py:recipe --only gradients_flow --ddp
    """
    from trainmedic.levers.preflight import check_names, run_checks
    from trainmedic.recipe.recipe import load_recipe

    overrides = parse_sets(sets)
    names = check_names()
    for name in only:
        if name not in names:
            raise click.BadParameter(f"no check {name!r}; expected one of {', '.join(names)}",
                                     param_hint="--only")
    loaded = load_recipe(recipe, **overrides)
    say = _progress()
    report = run_checks(loaded, only=list(only) or None, progress=say)
    if ddp:
        from trainmedic.levers.preflight_ddp import NAME, with_ddp_check

        if say is not None:
            say(NAME)
        report = with_ddp_check(report, recipe, overrides)
    if as_json:
        click.echo(json.dumps(report.to_dict(source=recipe), indent=2))
    else:
        for line in report_lines(recipe, report):
            click.echo(line)
    raise click.exceptions.Exit(0 if report.passed else 1)


def _progress() -> Callable[[str], None] | None:
    """On a terminal, one line on stderr as each check starts; nothing when piped."""
    if not sys.stderr.isatty():
        return None
    t0 = time.perf_counter()

    def say(name: str) -> None:
        click.echo(f"check [{time.perf_counter() - t0:5.1f} s] {name}", err=True)

    return say


def _value(v: object) -> str:
    if isinstance(v, tuple):
        return ", ".join(str(x) for x in v) or "none"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _evidence(e: Evidence) -> str:
    extra = [e.basis]
    if e.reference is not None:
        extra.append(f"vs {e.reference:.4g}")
    if e.tolerance:
        extra.append(f"pass: {e.tolerance}")
    return f"{e.label}: {_value(e.value)} [{'; '.join(extra)}]"


def report_lines(source: str, report: PreflightReport) -> list[str]:
    """The terminal report: a header, then per check its status line, evidence and fix."""
    counts = report.counts
    lines = [f"check {source}: {len(report.results)} checks, {counts['pass']} passed, "
             f"{counts['fail']} failed, {counts['skip']} skipped"]
    width = max((len(r.name) for r in report.results), default=0)
    for r in report.results:
        lines.append(f"{_MARK[r.status]}  {r.name:<{width}}  {r.summary}")
        for e in r.evidence:
            lines.append(f"      {_evidence(e)}")
        if r.fix:
            lines.append(f"      fix: {r.fix}")
    lines.append("Figures are measured on this machine from the recipe's first batches, "
                 "except those marked estimated.")
    return lines
