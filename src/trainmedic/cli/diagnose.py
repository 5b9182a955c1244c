"""``trainmedic diagnose PATH...``: findings, evidence, causes and fixes for a finished run."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from trainmedic.cli.options import FAIL_ON_CHOICES, exit_code_for, parse_mapping

if TYPE_CHECKING:
    from trainmedic.errors import UnrecognizedInputError

__all__ = ["diagnose"]


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--json", "as_json", is_flag=True,
              help="Print the findings JSON (schema trainmedic.findings/1) instead of the report.")
@click.option("--html", metavar="FILE", help="Also write a self-contained HTML report with plots.")
@click.option("--fail-on", type=click.Choice(FAIL_ON_CHOICES), default="error", show_default=True,
              help="Exit 1 when a finding is at or above this severity.")
@click.option("--map", "maps", multiple=True, metavar="CANONICAL=SOURCE",
              help="Read metric SOURCE as CANONICAL (repeatable), e.g. --map loss=train/loss_step.")
@click.option("--line-pattern", "line_patterns", multiple=True, metavar="REGEX",
              help="Read console lines with this regex: (?P<step>...) and one (?P<name>...) "
                   "per metric; repeatable (docs/trackers.md).")
@click.option("-v", "--verbose", is_flag=True, help="Show every cause, intervention and note.")
def diagnose(paths: tuple[str, ...], as_json: bool, html: str | None, fail_on: str,
             maps: tuple[str, ...], line_patterns: tuple[str, ...], verbose: bool) -> None:
    """Diagnose a training run from what it left behind.

    PATH is a log file (CSV, JSONL, Parquet, HF trainer_state.json, TensorBoard events, a
    console log), a folder holding several of them (per-rank files named *rank<N>*), a W&B
    run folder, an MLflow store or mlflow:<uri>#<run id>, or a trainmedic run store. Several
    PATHs are read as one run; separate runs are refused (trainmedic compare A B).

    \b
    Examples:
      trainmedic diagnose output/checkpoint-500/trainer_state.json
      trainmedic diagnose lightning_logs/version_3/metrics.csv --html report.html
      trainmedic diagnose runs/exp1 --json --fail-on warning | jq .findings
      trainmedic diagnose wandb/offline-run-20261201_101500-abc123
      trainmedic diagnose train.log --line-pattern 'iter (?P<step>\\d+): loss (?P<loss>[\\d.]+)'
    """
    from trainmedic.diagnose.engine import diagnose as run_detectors
    from trainmedic.errors import UnrecognizedInputError
    from trainmedic.run import load_run

    mapping = parse_mapping(maps)
    try:
        run = load_run(*paths, mapping=mapping or None, line_pattern=list(line_patterns) or None)
    except UnrecognizedInputError as exc:
        raise _with_crash_hint(exc, paths) from None
    result = run_detectors(run)
    from trainmedic.cli.presenter import present

    present(result, run, as_json=as_json, html=html, verbose=verbose)
    if not result.loss_found:
        # Never a false green: a run whose loss was not recognised was not judged (the CLI's
        # error path prints the one line and exits 2, after the report above).
        from trainmedic.errors import UnrecognizedInputError
        from trainmedic.report.wording import map_hint

        raise _with_crash_hint(UnrecognizedInputError(
            ", ".join(paths), f"no training loss recognised among its columns; "
            f"{map_hint(result)}"), paths)
    raise click.exceptions.Exit(exit_code_for(result.worst(), fail_on))


def _with_crash_hint(exc: UnrecognizedInputError, paths: tuple[str, ...]) -> Exception:
    """A log diagnose cannot read as a run may be a crash log: say so, and name `explain`."""
    from pathlib import Path

    from trainmedic.errors import TrainmedicError, UnrecognizedInputError
    from trainmedic.explain.triage import explain_log

    for path in paths:
        if not Path(path).is_file():
            continue
        try:
            root = explain_log(path).root_incident
        except TrainmedicError:
            continue
        if root is not None:
            return UnrecognizedInputError(
                exc.path, f"{exc.message.rstrip('.')}; it reads as a crash log ({root.code} at "
                f"line {root.line} of {path}): run `trainmedic explain {path}`")
    return exc
