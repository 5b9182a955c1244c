"""How the CLI shows a diagnosis: terminal report, ``--json`` on stdout, ``--html FILE``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from trainmedic.errors import InputError

if TYPE_CHECKING:
    from trainmedic.diagnose.finding import Diagnosis
    from trainmedic.run.series import Run

__all__ = ["present", "progress_bar"]


def present(diagnosis: Diagnosis, run: Run, *, as_json: bool, html: str | None,
            verbose: bool = False) -> None:
    """Print the diagnosis (JSON or the terminal report) and write the HTML report if asked.

    With ``--json`` stdout carries only the JSON document, so it can be piped to ``jq``;
    anything else (the HTML path) goes to stderr.
    """
    if html:
        from trainmedic.report import write_html

        target = Path(html)
        if target.is_dir():
            raise InputError(str(target), "--html expects a file path, got a directory")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_html(diagnosis, run, target)
        except OSError as exc:
            raise InputError(str(target), f"cannot write the HTML report ({exc.strerror})") from exc

    if as_json:
        from trainmedic.report import to_json

        sys.stdout.write(to_json(diagnosis) + "\n")
    else:
        from trainmedic.report import render_terminal

        render_terminal(diagnosis, run, verbose=verbose)

    if html:
        click.echo(f"HTML report: {html}", err=as_json)


@contextmanager
def progress_bar(label: str) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar on a terminal; nothing when stderr is piped."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
