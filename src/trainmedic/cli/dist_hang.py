"""``trainmedic dist watch -- CMD ...`` and ``trainmedic dist diagnose RUN``: find which rank
is stuck where, in which collective."""

from __future__ import annotations

import click

__all__ = ["watch", "diagnose"]


@click.command("diagnose")
@click.argument("run", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print trainmedic.dist.hang/1 JSON.")
def diagnose(run: str, as_json: bool) -> None:
    """Merge the ranks' hang dumps and heartbeats under RUN into one report.

    Says where each rank is (file:line, in a collective, the data loader, a sleep), the
    collective and its sequence number (from torch's flight recorder), the ranks that never
    arrived, op or shape mismatches, and straggler scores. Exit 0: nothing hung; 1: a hang
    was found; 2: RUN holds no heartbeat or dump.

    \b
    Examples:
      trainmedic dist diagnose runs/exp1
      trainmedic dist diagnose runs/exp1/hang --json
    """
    from trainmedic.dist.hang_diagnosis import diagnose_hang_dir
    from trainmedic.report.hang_text import hang_json, hang_lines

    result = diagnose_hang_dir(run)
    click.echo(hang_json(result) if as_json else "\n".join(hang_lines(result)))
    if result.hung:
        raise click.exceptions.Exit(1)


@click.command("watch", context_settings={"ignore_unknown_options": True})
@click.option("--timeout", "timeout_s", type=float, default=300.0, show_default=True,
              help="Seconds without progress (a heartbeat's step, or output) before every "
                   "process of the job is asked for its stacks.")
@click.option("--dir", "hang_dir", type=click.Path(file_okay=False), default="hang",
              show_default=True, help="Where the dumps go.")
@click.option("--kill-after", "kill_after_s", type=click.FloatRange(min=0), default=None,
              help="End the whole job this many seconds after the dumps if there is still no "
                   "progress, and exit 124, so a launcher or `trainmedic supervise` can restart "
                   "it. Default: wait for the job to end by itself.")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def watch(timeout_s: float, hang_dir: str, kill_after_s: float | None,
          cmd: tuple[str, ...]) -> None:
    """Run CMD with hang dumps armed; on a stall, dump every rank's stacks and flight
    recorder, and print the merged diagnosis when the job ends. Exits with CMD's code (124
    when --kill-after ended it).

    \b
    Examples:
      trainmedic dist watch --timeout 600 --dir runs/exp1/hang -- \\
          torchrun --nproc-per-node 8 train.py
      trainmedic dist watch -- python train.py
      trainmedic supervise --run-dir runs/exp1 -- \\
          trainmedic dist watch --timeout 600 --kill-after 120 -- torchrun ... train.py
    """
    from trainmedic.dist.hang_diagnosis import diagnose_hang_dir
    from trainmedic.dist.supervisor import WatchRunConfig, run_watched
    from trainmedic.errors import InputError
    from trainmedic.report.hang_text import hang_lines

    cfg = WatchRunConfig(timeout_s=timeout_s, hang_dir=hang_dir, kill_after_s=kill_after_s)
    result = run_watched(list(cmd), cfg, on_line=click.echo)
    if result.hangs:
        click.echo(f"trainmedic: no progress for {timeout_s:g} s (measured); asked "
                   f"{len(result.signalled)} processes for their stacks", err=True)
    if result.killed:
        click.echo(f"trainmedic: still no progress {kill_after_s:g} s after the dumps: ended "
                   f"the job (exit 124)", err=True)
    try:
        diag = diagnose_hang_dir(result.hang_dir)
    except InputError:
        diag = None
    if diag is not None and (diag.hung or result.hangs):
        click.echo("\n".join(hang_lines(diag)), err=True)
    raise click.exceptions.Exit(result.returncode)
