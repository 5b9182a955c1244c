"""``trainmedic export PATH... --tensorboard DIR --csv FILE``: a run's metrics (and findings)
in formats other tools read."""

from __future__ import annotations

import click

from trainmedic.cli.options import parse_mapping

__all__ = ["export"]


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--tensorboard", "tb_dir", metavar="DIR",
              help="Write TensorBoard event files here: every metric as scalars, one run "
                   "folder per rank (DIR/rank<N>/), and the findings as text "
                   "(tags trainmedic/findings and trainmedic/overview; TensorBoard shows 10 "
                   "texts per tag unless started with --samples_per_plugin text=1000).")
@click.option("--csv", "csv_file", metavar="FILE",
              help="Write a wide CSV here: a 'step' column, then one column per metric "
                   "(canonical first, then by name); empty cell = not logged at that step. A "
                   "per-rank run gets one file per rank, FILE's name with .rank<N> before "
                   "the suffix (metrics.rank1.csv), plus FILE for series without a rank.")
@click.option("--map", "maps", multiple=True, metavar="CANONICAL=SOURCE",
              help="Read metric SOURCE as CANONICAL (repeatable), e.g. --map loss=train/loss_step.")
@click.option("--force", is_flag=True,
              help="Replace an existing FILE, or the event files of a previous export in DIR "
                   "(DIR and DIR/rank<N>/); without it both are refused.")
def export(paths: tuple[str, ...], tb_dir: str | None, csv_file: str | None,
           maps: tuple[str, ...], force: bool) -> None:
    """Export a run to TensorBoard and/or CSV.

    Metrics go to both; the findings of `trainmedic diagnose` go to TensorBoard as text.
    PATH is anything `trainmedic diagnose` reads: log files, folders of them, run stores.
    At least one of --tensorboard and --csv is needed. The CSV reads back into trainmedic
    unchanged (NaN and inf included); TensorBoard stores float32 scalars. Prints one line per
    file written.

    \b
    Examples:
      trainmedic export runs/exp1 --tensorboard tb/exp1 && tensorboard --logdir tb
      trainmedic export runs/exp1 --csv exp1.csv
      trainmedic export lightning_logs/version_3 --csv v3.csv --map loss=train/loss_step
    """
    if not tb_dir and not csv_file:
        raise click.UsageError("nothing to write: give --tensorboard DIR and/or --csv FILE")
    from trainmedic.cli.presenter import progress_bar
    from trainmedic.report.csv_export import check_csv_targets, csv_targets, write_csv
    from trainmedic.report.tb_export import check_tensorboard_dir, require_tensorboard
    from trainmedic.run import load_run

    if tb_dir:
        require_tensorboard()
        check_tensorboard_dir(tb_dir, force=force, inputs=paths)
    mapping = parse_mapping(maps)
    run = load_run(*paths, mapping=mapping or None)
    if csv_file:
        # Every target is checked before anything is written: a refusal never leaves half an
        # export behind.
        check_csv_targets(csv_targets(run, csv_file), force=force, inputs=paths)

    written = []
    if csv_file:
        with progress_bar("writing CSV") as progress:
            written += write_csv(run, csv_file, force=force, progress=progress)
    if tb_dir:
        from trainmedic.diagnose.engine import diagnose as run_detectors
        from trainmedic.report.tb_export import write_tensorboard

        diagnosis = run_detectors(run)
        with progress_bar("writing TensorBoard events") as progress:
            written += write_tensorboard(run, diagnosis, tb_dir, force=force,
                                         progress=progress)
    for f in written:
        click.echo(f"wrote {f.describe()}")
