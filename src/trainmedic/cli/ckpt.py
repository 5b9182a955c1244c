"""``trainmedic ckpt verify | latest | list`` (and ``resume-test``): which checkpoints can be
trusted.

Exit codes: ``verify`` 0 good, 1 damaged or uncommitted (each problem names its file), 2 not
a checkpoint or not a folder; ``latest`` 0 found (the path on stdout), 1 none verifies, 2 bad
root; ``list`` 0, 2 bad root. A Hugging Face Trainer ``checkpoint-N/`` folder (or an
output_dir of them) is named as such, exit 2, with the ``trainmedic diagnose`` command for its
``trainer_state.json``.
"""

from __future__ import annotations

import json
import sys

import click

from trainmedic.errors import UnrecognizedInputError

__all__ = ["ckpt"]


def _print_json(doc: object) -> None:
    sys.stdout.write(json.dumps(doc, indent=1) + "\n")


def _refuse_foreign(path: str, *, root: bool = False) -> None:
    """Exit 2 with one line when ``path`` is another tool's checkpoint (a Hugging Face
    Trainer ``checkpoint-N/``, or an output_dir of them); as a ROOT, only when it holds no
    step-* folder of trainmedic's too."""
    from trainmedic.checkpoint.foreign import describe_foreign

    what = describe_foreign(path)
    if what is None:
        return
    if root:
        from trainmedic.checkpoint.commit import scan

        if scan(path):
            return
    raise UnrecognizedInputError(path, what)



@click.group()
def ckpt() -> None:
    """Checkpoints: verify one, find the newest good one, list them, test a resume.

    A checkpoint is a step-* folder written by trainmedic's CheckpointManager: the state
    files and a manifest.json with every file's size and CRC-32, committed by an atomic
    rename (a .tmp-step-* folder is a save that has not finished).

    \b
    Examples:
      trainmedic ckpt verify ckpt/step-00001200
      trainmedic ckpt latest ckpt --run runs/exp1
      trainmedic ckpt list ckpt
    """


@ckpt.command("verify")
@click.argument("directory", metavar="DIR")
@click.option("--json", "as_json", is_flag=True,
              help="Print the report as JSON (status, problems with their files, notes).")
@click.option("--quick", is_flag=True,
              help="Check the manifest, the file list and the sizes only: no hashing, no "
                   "loading (fast on large checkpoints; misses flipped bytes).")
def verify_cmd(directory: str, as_json: bool, quick: bool) -> None:
    """Check one checkpoint folder: manifest, every file's size and CRC-32, every rank's
    training state, tensors load with weights_only=True and are finite.

    Exit 0 good, 1 damaged (each problem names the file and what is wrong), 2 not a
    checkpoint.

    \b
    Examples:
      trainmedic ckpt verify ckpt/step-00001200
      trainmedic ckpt verify ckpt/step-00001200 --json | jq .problems
    """
    from trainmedic.checkpoint.verify import verify
    from trainmedic.report.checkpoint_text import finite_text, size_text

    _refuse_foreign(directory)
    report = verify(directory, quick=quick)
    if report.status == "not_a_checkpoint":
        why = report.notes[0] if report.notes else "no manifest.json"
        raise UnrecognizedInputError(directory, f"not a checkpoint ({why}); expected a step-* "
                                                f"folder written by trainmedic's "
                                                f"CheckpointManager")
    if as_json:
        _print_json({"schema": "trainmedic.ckpt-verify/1", **report.to_dict()})
    else:
        m = report.manifest
        if report.ok and m is not None:
            checks = ("sizes match (not hashed: --quick)" if report.quick else
                      f"hashes match, {finite_text(report)}")
            ranks = f"{m.world_size} rank{'s' if m.world_size != 1 else ''}"
            click.echo(f"{report.path}: good: step {m.step}, {ranks}, {m.format} format, "
                       f"{len(m.files)} files ({size_text(m.size_bytes)}), {checks}")
        else:
            step = f": step {report.step}" if report.step is not None else ""
            click.echo(f"{report.path}: {report.status}{step}")
            for p in report.problems:
                click.echo(f"  {p}")
        for note in report.notes:
            click.echo(f"  note: {note}")
    raise click.exceptions.Exit(0 if report.ok else 1)


@ckpt.command("latest")
@click.argument("root", metavar="ROOT")
@click.option("--run", "run_dir", metavar="RUN_DIR",
              help="The run's store or logs: also skip checkpoints saved at or after the step "
                   "where `trainmedic diagnose` finds a divergence or a non-finite loss.")
@click.option("--json", "as_json", is_flag=True,
              help="Print {latest, step, divergence_onset, skipped: [...]} as JSON.")
def latest_cmd(root: str, run_dir: str | None, as_json: bool) -> None:
    """Print the newest checkpoint under ROOT that verifies fully, skipping uncommitted,
    partial and damaged ones (said on stderr). Exit 1 when none does.

    \b
    Examples:
      trainmedic ckpt latest ckpt
      trainmedic ckpt latest ckpt --run runs/exp1     # and not after the loss diverged
      python train.py --resume-from "$(trainmedic ckpt latest ckpt)"
    """
    from trainmedic.checkpoint.verify import find_latest

    _refuse_foreign(root, root=True)
    onset = None
    if run_dir is not None:
        from trainmedic.diagnose.onset import divergence_onset

        onset = divergence_onset(run_dir)
    result = find_latest(root, onset=onset)
    if as_json:
        _print_json(result.to_dict())
    else:
        for s in result.skipped:
            click.echo(f"skipped {s.path.name}: {s.status}"
                       + (f" ({s.reason})" if s.reason else ""), err=True)
        if result.path is not None:
            click.echo(str(result.path))
        else:
            click.echo(f"trainmedic: no checkpoint under {root} verifies", err=True)
    raise click.exceptions.Exit(0 if result.path is not None else 1)


@ckpt.command("list")
@click.argument("root", metavar="ROOT")
@click.option("--json", "as_json", is_flag=True,
              help="Print {root, checkpoints: [{path, step, status, size_bytes, reason, "
                   "created_utc}]} as JSON.")
@click.option("--quick", is_flag=True,
              help="Sizes only: no hashing or loading (status 'good' then means 'complete').")
def list_cmd(root: str, as_json: bool, quick: bool) -> None:
    """List every checkpoint folder under ROOT, highest step first: step, status (good,
    damaged, uncommitted, writing), size, creation time and what is wrong.

    \b
    Examples:
      trainmedic ckpt list ckpt
      trainmedic ckpt list ckpt --json | jq '.checkpoints[] | select(.status != "good")'
    """
    from trainmedic.checkpoint.verify import list_checkpoints
    from trainmedic.report.checkpoint_text import size_text

    _refuse_foreign(root, root=True)
    infos = list_checkpoints(root, quick=quick)
    if as_json:
        _print_json({"schema": "trainmedic.ckpt-list/1", "root": root,
                     "checkpoints": [i.to_dict() for i in infos]})
        return
    if not infos:
        click.echo(f"no checkpoints under {root}")
        return
    click.echo(f"{'step':>10}  {'status':<12} {'size':>10}  {'created (UTC)':<20} folder")
    for i in infos:
        line = (f"{i.step:>10}  {i.status:<12} {size_text(i.size_bytes):>10}  "
                f"{i.created_utc or '-':<20} {i.path.name}")
        if i.reason:
            line += f"  ({i.reason})"
        click.echo(line)


def _register_resume_test() -> None:
    # The recipe helper's command, when its module is installed (a guarded import: the rest
    # of the group works without it).
    try:
        from trainmedic.cli.ckpt_resume import resume_test
    except ImportError:
        return
    ckpt.add_command(resume_test)


_register_resume_test()
