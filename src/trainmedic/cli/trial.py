"""``trainmedic try RECIPE --lever NAME[=VALUE]``: one lever at a time, measured before and
after, with its displaced cost. Exit codes: 0 the trial ran (whatever it found), 2 bad input
(an unknown lever, a bad value, a recipe that cannot be loaded)."""

from __future__ import annotations

import click

from trainmedic.cli.options import parse_sets
from trainmedic.cli.presenter import progress_bar

__all__ = ["try_cmd"]


def _lever_help() -> str:
    from trainmedic.levers.lever_catalog import get_lever, lever_names

    rows = []
    for name in lever_names():
        lever = get_lever(name)
        head = f"{name}[={lever.value_help.split()[0]}]" if lever.value_help else name
        rows.append(f"  {head:<26}{lever.summary}")
    return "\n".join(rows)


class _TryCommand(click.Command):
    """Lists the levers in the help's epilog, built when help is shown: the catalog imports
    the recipe runner, which no other command should pay for at start-up."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.epilog = "\b\nLevers:\n" + _lever_help()
        super().format_epilog(ctx, formatter)


@click.command("try", cls=_TryCommand)
@click.argument("recipe", metavar="RECIPE")
@click.option("--lever", "levers", multiple=True, required=True, metavar="NAME[=VALUE]",
              help="The lever to try; repeat to stack: each next one is tried on top of the "
                   "ones before it.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Pass a setting to the recipe function (JSON value), e.g. --set "
                   "batch_size=32. Repeatable.")
@click.option("--rounds", type=click.IntRange(min=3), default=6, show_default=True,
              help="Rounds of baseline then lever; the first is warm-up, not counted.")
@click.option("--steps-per-round", type=click.IntRange(min=1), default=5, show_default=True,
              help="Timed optimizer steps of each variant per round.")
@click.option("--drain-steps", type=click.IntRange(min=0), default=None,
              help="Untimed steps of each variant at the start of each round [default: the "
                   "larger prefetch depth of the two loaders, num_workers x "
                   "prefetch_factor, times 3].")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON document (trainmedic.try/1).")
def try_cmd(recipe: str, levers: tuple[str, ...], sets: tuple[str, ...], rounds: int,
            steps_per_round: int, drain_steps: int | None, as_json: bool) -> None:
    """Try one lever on RECIPE: the baseline and the lever run interleaved (A/B/A/B), and the
    report gives the step-time change with its 95% interval, throughput, peak memory where
    it can be measured, and whether the loss stayed on the baseline's trajectory.

    RECIPE is a function returning a trainmedic.Recipe, as module:function or
    path/to/file.py:function. A stacked lever is refused when the one below it made the step
    slower, or had no clear effect while changing the loss.

    \b
    Examples:
      trainmedic try trainmedic.demo:recipe --lever num_workers=2 --set load_delay_s=0.03
      trainmedic try train.py:recipe --lever bf16 --rounds 10
      trainmedic try train.py:recipe --lever num_workers=4 --lever pin_memory --json
      trainmedic try train.py:recipe --lever micro_batch=4 --set batch_size=64
    """
    from trainmedic.levers.lever_catalog import parse_lever
    from trainmedic.levers.trial import TrialConfig, try_levers
    from trainmedic.report.trial_text import try_doc, try_lines

    choices = tuple(parse_lever(spec) for spec in levers)
    config = TrialConfig(rounds=rounds, steps_per_round=steps_per_round,
                         drain_steps=drain_steps)
    with progress_bar(f"try {' + '.join(c.label for c in choices)}") as progress:
        report = try_levers(recipe, choices, config, overrides=parse_sets(sets),
                            on_progress=progress)
    click.echo(try_doc(report) if as_json else "\n".join(try_lines(report)))
