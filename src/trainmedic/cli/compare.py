"""``trainmedic compare A B [C ...]``: runs side by side, each read on its own."""

from __future__ import annotations

import click

from trainmedic.cli.options import parse_mapping

__all__ = ["compare"]


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="A B [C ...]")
@click.option("--by", type=click.Choice(["step", "tokens", "time"]), default="step",
              show_default=True,
              help="Align on equal steps, equal tokens seen (tokens_per_s x step_time_s or a "
                   "token counter) or equal time spent in steps.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the comparison JSON (schema trainmedic.compare/1) instead.")
@click.option("--html", metavar="FILE", help="Also write a self-contained HTML page with "
                                             "overlay plots.")
@click.option("--metric", "metrics", multiple=True, metavar="NAME",
              help="Compare only this canonical metric (repeatable), e.g. --metric loss.")
@click.option("--level", type=click.FloatRange(0.5, 0.999), default=0.95, show_default=True,
              help="Confidence level of the bootstrap intervals.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the bootstrap (same runs and seed: same intervals).")
@click.option("--map", "maps", multiple=True, metavar="CANONICAL=SOURCE",
              help="Read metric SOURCE as CANONICAL in every run (repeatable).")
def compare(paths: tuple[str, ...], by: str, as_json: bool, html: str | None,
            metrics: tuple[str, ...], level: float, seed: int, maps: tuple[str, ...]) -> None:
    """Compare runs: is B better than A, by how much, and how sure.

    Each PATH (a run store folder, a log file or a folder of logs) is read as its own run;
    they are never merged. The first is the baseline A; every other is set against it: the
    config keys that differ, each metric's difference at equal steps (or tokens, or time)
    with a moving-block bootstrap interval, the step where the runs part beyond noise,
    throughput and memory deltas, and a verdict on val_loss (else loss). Exit 0 when
    compared, 2 when a path cannot be read or the runs share no metric over a common range.

    \b
    Examples:
      trainmedic compare runs/baseline runs/lr-3e-3
      trainmedic compare runs/a runs/b runs/c --by tokens --html compare.html
      trainmedic compare a/trainer_state.json b/trainer_state.json --json | jq .pairs[0].verdict
    """
    from trainmedic.compare import CompareConfig, compare_paths
    from trainmedic.errors import ConfigError

    if len(paths) < 2:
        raise ConfigError(f"compare: got {len(paths)} path; expected at least 2 runs, e.g. "
                          "trainmedic compare runs/a runs/b")
    config = CompareConfig(by=by, level=float(level), seed=seed,
                           metrics=tuple(metrics) or None)
    result = compare_paths(list(paths), config=config, mapping=parse_mapping(maps) or None)
    if html:
        from trainmedic.report.compare_html import write_compare_html

        written = write_compare_html(result, html)
        click.echo(f"trainmedic: wrote {written}", err=True)
    if as_json:
        import json

        from trainmedic.report.compare_text import to_json

        click.echo(json.dumps(to_json(result), indent=2, default=str, allow_nan=False))
    else:
        from trainmedic.report.compare_text import render_text

        click.echo(render_text(result), nl=False)
