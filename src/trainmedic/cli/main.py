"""The ``trainmedic`` command: a click group with one module per subcommand.

Exit codes (DESIGN.md): 0 ran and nothing at or above ``--fail-on``; 1 findings at or above it;
2 bad usage or unreadable input (a ``UsageError``), with one line on stderr naming the file and
what was expected; 3 any other error (a run that failed, or a bug: one line too);
141 when the reader of stdout went away (``trainmedic diagnose ... | head``).
Set ``TRAINMEDIC_DEBUG=1`` to see the traceback of an error (and debug log lines);
``TRAINMEDIC_LOG_LEVEL=INFO`` (or DEBUG, WARNING, ERROR) sets what the library logs to stderr.
"""

from __future__ import annotations

import logging
import os
import sys

import click

from trainmedic._version import __version__
from trainmedic.errors import TrainmedicError, UsageError

__all__ = ["cli", "main"]

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
EXIT_BROKEN_PIPE = 141


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="trainmedic")
def cli() -> None:
    """Diagnose, optimize, scale and recover PyTorch training runs.

    \b
    First look:   trainmedic demo --fault spike
    Before a run: trainmedic memory plan --config config.json --batch 4 --seq 4096 --gpu h100
    After a run:  trainmedic diagnose runs/my-run/ --html report.html
    Two runs:     trainmedic compare runs/a runs/b --html compare.html
    No logs:      trainmedic triage --loss nan --since start --precision fp16
    A new run:    trainmedic advise train.py:recipe
    Recovering:   trainmedic ckpt latest checkpoints/; trainmedic ckpt plan --run runs/my-run
                  trainmedic supervise --run-dir runs/r -- python train.py --resume {checkpoint}
    Optimizing:   trainmedic profile train.py:recipe; trainmedic check train.py:recipe;
                  trainmedic try train.py:recipe --lever num_workers=4
    Hardware:     trainmedic bench matmul; trainmedic bench storage /scratch
    Distributed:  torchrun --nproc-per-node 8 -m trainmedic dist check
    Hung/crashed: trainmedic dist diagnose runs/my-run/; trainmedic explain slurm-1234.out
    """


def _register() -> None:
    # Subcommands live in their own modules; each keeps its heavy imports inside the command
    # body so that `trainmedic diagnose` on a log never pays for torch.
    from trainmedic.cli.advise import advise
    from trainmedic.cli.bench import bench
    from trainmedic.cli.bench_collectives import collectives
    from trainmedic.cli.check import check
    from trainmedic.cli.ckpt import ckpt
    from trainmedic.cli.ckpt_plan import plan as ckpt_plan
    from trainmedic.cli.compare import compare
    from trainmedic.cli.demo import demo
    from trainmedic.cli.diagnose import diagnose
    from trainmedic.cli.dist import dist
    from trainmedic.cli.explain import explain
    from trainmedic.cli.export import export
    from trainmedic.cli.memory import memory
    from trainmedic.cli.profile import profile
    from trainmedic.cli.supervise import supervise
    from trainmedic.cli.triage import triage
    from trainmedic.cli.trial import try_cmd

    cli.add_command(diagnose)
    cli.add_command(demo)
    cli.add_command(export)
    cli.add_command(memory)
    cli.add_command(ckpt)
    ckpt.add_command(ckpt_plan)  # its own module: ckpt.py holds the checkpoint readers
    cli.add_command(profile)
    cli.add_command(bench)
    bench.add_command(collectives)  # its own module: bench.py holds the one-process benches
    cli.add_command(check)
    cli.add_command(try_cmd)
    cli.add_command(explain)
    cli.add_command(dist)
    cli.add_command(compare)
    cli.add_command(triage)
    cli.add_command(advise)
    cli.add_command(supervise)


_register()


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of the record (a test runner or a
    caller may swap it after the handler was made)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def _configure_logging(debug: bool) -> None:
    """The library logs through ``logging.getLogger(__name__)`` and never configures it; the
    command does, for the ``trainmedic`` loggers only: one prefixed line per record on stderr,
    at WARNING unless ``TRAINMEDIC_LOG_LEVEL`` (or ``TRAINMEDIC_DEBUG``) says otherwise."""
    log = logging.getLogger("trainmedic")
    if not any(getattr(h, "_trainmedic_cli", False) for h in log.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("trainmedic: %(levelname)s: %(message)s"))
        handler._trainmedic_cli = True  # type: ignore[attr-defined]
        log.addHandler(handler)
        log.propagate = False
    wanted = os.environ.get("TRAINMEDIC_LOG_LEVEL", "DEBUG" if debug else "WARNING").upper()
    level = logging.getLevelName(wanted)
    log.setLevel(level if isinstance(level, int) else logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the CLI and turn errors into one line and an exit code."""
    debug = os.environ.get("TRAINMEDIC_DEBUG", "") not in ("", "0")
    _configure_logging(debug)
    try:
        # With standalone_mode=False click returns a command's Exit code instead of exiting.
        rc = cli.main(args=argv, prog_name="trainmedic", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("trainmedic: aborted", err=True)
        return 130
    except click.exceptions.ClickException as exc:
        # Usage errors: click prints "Usage: ... Error: ..." itself.
        exc.show()
        return EXIT_BAD_INPUT if exc.exit_code == 2 else exc.exit_code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except TrainmedicError as exc:
        if debug:
            raise
        click.echo(f"trainmedic: error: {_one_line(str(exc))}", err=True)
        # 2 only for what the user gave (a file, a value, a missing extra); a run that went
        # wrong (a NaN under nan_policy="raise") is a failure of its own, not bad usage.
        return EXIT_BAD_INPUT if isinstance(exc, UsageError) else EXIT_INTERNAL
    except KeyboardInterrupt:
        click.echo("trainmedic: interrupted", err=True)
        return 130
    except BrokenPipeError:
        # `trainmedic diagnose ... | head`: the reader went away; nothing left to say. 141
        # (128 + SIGPIPE) as the shell reports a tool killed by a closed pipe: neither 0 (the
        # report was not all read) nor 1, which means findings. stdout goes to /dev/null so
        # the interpreter's last flush does not fail on the closed pipe too.
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence: never a traceback
        if debug:
            raise
        click.echo(
            f"trainmedic: internal error: {type(exc).__name__}: {_one_line(str(exc))} "
            "(this is a bug; rerun with TRAINMEDIC_DEBUG=1 for the traceback and report it)",
            err=True,
        )
        return EXIT_INTERNAL
    return rc if isinstance(rc, int) else 0


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # no real stdout (a test runner's capture): nothing to flush into a pipe


def _one_line(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
