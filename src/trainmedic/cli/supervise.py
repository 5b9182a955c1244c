"""``trainmedic supervise -- CMD``: restart a training command from its newest trustworthy
checkpoint when it is preempted or fails, and record what each incident cost."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

import click

__all__ = ["supervise", "explain_tail"]


def explain_tail(lines: list[str]) -> tuple[str | None, str | None]:
    """(failure class, summary) of the root failure ``trainmedic explain`` finds in the
    command's last output lines; (None, None) when it recognises none."""
    from trainmedic.explain.log_text import LogText
    from trainmedic.explain.triage import explain_text

    root = explain_text(LogText.from_text("<command output>", "\n".join(lines))).root_incident
    return (root.code, root.summary) if root is not None else (None, None)


@click.command(context_settings={"ignore_unknown_options": True,
                                 "allow_interspersed_args": False})
@click.option("--run-dir", "run_dir", metavar="DIR", required=True,
              help="The run's folder: its run store gets the incidents; its checkpoints are "
                   "looked for under DIR/checkpoints unless --checkpoint-dir says otherwise.")
@click.option("--checkpoint-dir", metavar="DIR", default=None,
              help="Where the command saves its checkpoints (default: RUN_DIR/checkpoints).")
@click.option("--max-restarts", type=click.IntRange(min=0), default=3, show_default=True,
              help="Restarts allowed after the first start.")
@click.option("--backoff-s", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Wait before the first restart, doubled at each one (at most 60 s).")
@click.option("--kill-grace-s", type=click.FloatRange(min=0, min_open=True), default=45.0,
              show_default=True,
              help="After passing a stop (SIGTERM, Ctrl-C) on to CMD, seconds before its "
                   "process group gets SIGKILL.")
@click.option("--requeue", is_flag=True,
              help="Under SLURM (SLURM_JOB_ID set): `scontrol requeue` the job instead of "
                   "restarting in place (untested outside SLURM).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary as JSON on stdout (the command's output goes to stderr).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- CMD...")
def supervise(run_dir: str, checkpoint_dir: str | None, max_restarts: int, backoff_s: float,
              kill_grace_s: float, requeue: bool, as_json: bool,
              command: tuple[str, ...]) -> None:
    """Run CMD; when it exits 75 (preempted: saved and stopped) or fails (another status, or
    killed by a signal), restart it from the newest checkpoint that verifies, skipping those
    saved after the loss diverged, up to --max-restarts times.

    The checkpoint reaches CMD as TRAINMEDIC_RESUME_FROM / TRAINMEDIC_RESUME_STEP in its
    environment and in place of {checkpoint} in its arguments (dropped, with the option
    before it, when there is none yet). Each incident (exit code or signal, the failure class
    `trainmedic explain` finds in CMD's last output lines, the checkpoint used, the steps lost:
    measured from the heartbeat, estimated from the run store) goes into the run store; a
    summary closes the session.

    SIGTERM or Ctrl-C to supervise is passed on to CMD's process group and stops the
    restarts; the group gets SIGKILL --kill-grace-s later if it still runs.

    Exit 0 when CMD finished; 75 when the job was requeued, or when supervise itself was
    stopped after CMD saved on a preemption; 1 when the restarts ran out or it was stopped
    otherwise; 2 bad usage (CMD not found or not executable).

    \b
    Examples:
      trainmedic supervise --run-dir runs/ck -- \\
          trainmedic demo --out runs/ck --checkpoint-every 20 --steps 400 --resume
      trainmedic supervise --run-dir runs/exp1 --max-restarts 10 -- \\
          python train.py --resume-from {checkpoint}
      trainmedic supervise --run-dir runs/exp1 --requeue -- srun python train.py
    """
    from pathlib import Path

    from trainmedic.checkpoint.supervisor import SuperviseConfig, Supervisor
    from trainmedic.diagnose.onset import divergence_onset
    from trainmedic.errors import InputError
    from trainmedic.report.recovery_text import incident_text, supervise_summary_lines

    config = SuperviseConfig(command=tuple(command), run_dir=Path(run_dir),
                             checkpoint_dir=Path(checkpoint_dir) if checkpoint_dir else None,
                             max_restarts=max_restarts, backoff_s=backoff_s,
                             backoff_max_s=max(60.0, backoff_s), requeue=requeue,
                             kill_grace_s=kill_grace_s)
    seen = [0]

    def echo(line: str) -> None:
        (sys.stderr if as_json else sys.stdout).write(line + "\n")

    def on_event(kind: str, data: Mapping[str, Any]) -> None:
        if kind == "start":
            where = (f"from {data['checkpoint']} (step {data['checkpoint_step']})"
                     if data.get("checkpoint") else "from step 0")
            click.echo(f"trainmedic: start {data['attempt']} {where}: "
                       f"{' '.join(data['argv'])}", err=True)
        elif kind == "incident":
            seen[0] += 1
            click.echo(f"trainmedic: {incident_text(seen[0], data)}", err=True)
        elif kind == "backoff":
            click.echo(f"trainmedic: restarting in {data['wait_s']:.1f} s", err=True)
        elif kind == "start_failed":
            click.echo(f"trainmedic: the restart could not start ({data['error']}); giving up",
                       err=True)
        elif kind == "start_retry":
            click.echo(f"trainmedic: the restart could not start ({data['error']}); trying "
                       f"again in {data['wait_s']:.1f} s", err=True)

    def onset() -> int | None:
        # No store yet (nothing logged before the first save): nothing diverged.
        try:
            return divergence_onset(config.run_dir)
        except InputError:
            return None

    result = Supervisor(config, divergence_onset=onset, echo=echo, on_event=on_event,
                        explain_tail=explain_tail).run()
    doc = result.to_dict()
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    else:
        for line in supervise_summary_lines(doc):
            click.echo(line, err=True)
    last = result.incidents[-1] if result.incidents else None
    if result.final == "done":
        code = 0
    elif result.final == "requeued" or (result.final == "stopped" and last is not None
                                        and last.outcome == "preempted"):
        code = 75
    else:
        code = 1
    raise click.exceptions.Exit(code)
