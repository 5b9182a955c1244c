"""``trainmedic demo``: train the built-in tiny model on CPU, with a real fault, and diagnose it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from trainmedic.cli.options import FAIL_ON_CHOICES, exit_code_for
from trainmedic.cli.presenter import progress_bar

if TYPE_CHECKING:
    from trainmedic.demo import DemoConfig

__all__ = ["demo"]

FAULTS = ("none", "diverge", "spike", "flat", "overfit", "stall", "leak")


@click.command()
@click.option("--fault", type=click.Choice(FAULTS), default="none", show_default=True,
              help="The fault to inject for real while training.")
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="Training steps (default: the fault's own default, a few hundred).")
@click.option("--out", "out_dir", metavar="DIR", default=None,
              help="Where to write the run store and report (default: runs/demo-<fault>).")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings JSON instead.")
@click.option("--html", metavar="FILE", default=None,
              help="HTML report path (default: <out>/report.html).")
@click.option("--fail-on", type=click.Choice(FAIL_ON_CHOICES), default="never", show_default=True,
              help="Exit 1 when a finding is at or above this severity.")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=None, metavar="N",
              help="Save a checkpoint every N steps under <out>/checkpoints; SIGTERM/SIGUSR1 "
                   "then save and stop (exit 75).")
@click.option("--resume", is_flag=True,
              help="Continue from the latest good checkpoint under <out>/checkpoints.")
@click.option("--force", is_flag=True,
              help="With --resume: continue even from a checkpoint saved with another config "
                   "(more --steps, another --seed); otherwise it is refused, the differences "
                   "named.")
@click.option("--skip-batches", "skip_batches", metavar="N|FIRST-LAST", default=None,
              help="Drop the batches of steps FIRST-LAST (as the run store numbers them) when "
                   "the run reaches FIRST, or of the next N steps from where it starts or "
                   "resumes: to step past the data behind a spike. Recorded as a "
                   "batches_skipped event.")
def demo(fault: str, steps: int | None, out_dir: str | None, seed: int, as_json: bool,
         html: str | None, fail_on: str, checkpoint_every: int | None, resume: bool,
         force: bool, skip_batches: str | None = None) -> None:
    """Train a tiny character-level transformer on CPU, record it, diagnose it, report it.

    The fault is injected for real (a too-high learning rate, poisoned batches, a frozen
    optimizer, a tiny training set, a slow data loader, a memory leak), never by editing
    recorded numbers. Takes well under a minute on 2 cores.

    \b
    Examples:
      trainmedic demo
      trainmedic demo --fault spike --out runs/spike
      trainmedic demo --fault diverge --json | jq '.findings[].symptom'
      trainmedic demo --checkpoint-every 50 --out runs/ck   # kill it, then:
      trainmedic demo --checkpoint-every 50 --out runs/ck --resume
      trainmedic demo --checkpoint-every 50 --out runs/ck --resume --steps 400 --force
      trainmedic demo --checkpoint-every 50 --out runs/ck --resume --skip-batches 120-130
    """
    # Imported here: `trainmedic diagnose` must not pay for the checkpoint package.
    from trainmedic.checkpoint.preemption import EXIT_PREEMPTED, Preempted
    from trainmedic.demo import DemoConfig, run_demo
    from trainmedic.diagnose.engine import diagnose as run_detectors
    from trainmedic.run import load_run

    out = Path(out_dir) if out_dir else Path("runs") / f"demo-{fault}"
    kwargs: dict[str, object] = {"fault": fault, "out_dir": out, "seed": seed,
                                 "checkpoint_every": checkpoint_every, "resume": resume,
                                 "force": force}
    if steps is not None:
        kwargs["steps"] = steps
    if skip_batches is not None:
        kwargs.update(_parse_skip(skip_batches))
    config = DemoConfig(**kwargs)  # type: ignore[arg-type]
    if resume:
        _say_where_it_resumes(config)
    if checkpoint_every is not None:
        click.echo(f"trainmedic: saving a checkpoint every {checkpoint_every} steps under "
                   f"{config.checkpoint_dir}", err=True)
    try:
        with progress_bar(f"training the demo model (fault: {fault})") as progress:
            run_dir = run_demo(config, progress=progress)
    except Preempted as stop:
        click.echo(f"trainmedic: {stop}; rerun with --resume to continue", err=True)
        raise click.exceptions.Exit(EXIT_PREEMPTED) from None
    run = load_run(str(run_dir))
    result = run_detectors(run)
    from trainmedic.cli.presenter import present

    present(result, run, as_json=as_json, html=html or str(Path(run_dir) / "report.html"))
    raise click.exceptions.Exit(exit_code_for(result.worst(), fail_on))


def _parse_skip(spec: str) -> dict[str, object]:
    """``N`` -> skip_next=N; ``FIRST-LAST`` -> skip_steps=(FIRST, LAST)."""
    text = spec.strip()
    try:
        if "-" in text:
            a, b = text.split("-", 1)
            first, last = int(a), int(b)
            if 0 <= first <= last:
                return {"skip_steps": (first, last)}
        elif int(text) >= 1:
            return {"skip_next": int(text)}
    except ValueError:
        pass
    raise click.BadParameter(f"got {spec!r}; expected N (the next N steps' batches, N >= 1) "
                             f"or FIRST-LAST step numbers, e.g. 1200-1210",
                             param_hint="--skip-batches")


def _say_where_it_resumes(config: DemoConfig) -> None:
    """Decide before training: say "resuming from X (step S)", or "starting from step 0", or
    refuse in one line (a checkpoint of another config without --force)."""
    from trainmedic.checkpoint.manager import CheckpointManager
    from trainmedic.checkpoint.manifest import config_differences, config_hash, read_manifest
    from trainmedic.demo.runner import trusted_before
    from trainmedic.errors import InputError

    root = config.checkpoint_dir
    # As the demo picks it: the newest good checkpoint saved before any divergence.
    latest = CheckpointManager(root, trusted_before=trusted_before(config.run_dir)).latest() \
        if root.is_dir() else None
    if latest is None:
        click.echo(f"trainmedic: no checkpoint under {root}: starting from step 0", err=True)
        return
    manifest = read_manifest(latest)
    current = config.training_config()
    where = f"trainmedic: resuming from {latest} (step {manifest.step})"
    if manifest.config_hash == config_hash(current):
        click.echo(where, err=True)
        return
    differences = "; ".join(config_differences(manifest.config, current)) or "another config"
    if not config.force:
        raise InputError(str(latest), f"saved with another config ({differences}); rerun "
                                      f"with the options it was saved with, or add --force "
                                      f"to continue from it anyway")
    click.echo(f"{where}, saved with another config ({differences}): continuing (--force)",
               err=True)
