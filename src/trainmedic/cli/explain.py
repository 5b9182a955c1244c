"""``trainmedic explain LOG...``: what a crashed job's log means and the next step."""

from __future__ import annotations

import click

from trainmedic.cli.options import FAIL_ON_CHOICES

__all__ = ["explain"]


@click.command("explain")
@click.argument("logs", nargs=-1, required=True, metavar="LOG [LOG ...]")
@click.option("--json", "as_json", is_flag=True,
              help="Print the trainmedic.explain/1 JSON document instead of text.")
@click.option("--fail-on", type=click.Choice(FAIL_ON_CHOICES), default="error",
              show_default=True,
              help="Exit 1 when a failure at or above this severity was recognised (every "
                   "class here is an error: a job that failed); 'never': exit 0 whenever "
                   "it ran.")
def explain(logs: tuple[str, ...], as_json: bool, fail_on: str) -> None:
    """Triage crash logs: name the root failure, its consequences, and the next step.

    Recognises NCCL watchdog timeouts and NCCL errors, CUDA device-side asserts, illegal
    memory accesses, Xid/ECC errors, CUDA out of memory, the host OOM killer (SIGKILL, exit
    137/-9), torchrun's ChildFailedError, SLURM time limit / preemption / node failure, and
    plain Python tracebacks. Several LOGs are read as the ranks of one job: the job's root is
    the earliest root by time stamp when the lines carry them. Facts read from a log are
    measured; causes are likely, not checked. A log with none of these says "nothing
    recognised". Exit codes as diagnose's: 0 nothing recognised (or --fail-on never), 1 a
    failure recognised, 2 a missing or unreadable file.

    \b
    Examples:
      trainmedic explain train.log
      trainmedic explain logs/rank*.log
      trainmedic explain slurm-1234.out --json
      trainmedic explain job.log && echo "no known failure"
      trainmedic explain job.log --fail-on never   # exit 0 whatever it finds
    """
    from trainmedic.explain.triage import explain_logs
    from trainmedic.report.explain_text import explain_json, explain_lines

    explanation = explain_logs(list(logs))
    click.echo(explain_json(explanation) if as_json else "\n".join(explain_lines(explanation)))
    if fail_on != "never" and explanation.recognised:
        raise click.exceptions.Exit(1)
