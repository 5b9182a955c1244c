"""What the watcher says on the terminal: the start line, the exit line, the progress line.

Pure functions return the text; :func:`emit` hands it to the ``trainmedic.live.console``
logger, whose one handler writes it to stderr (a script's own output on stdout stays clean).
Logging, not ``print``: a library's words go through logging, so a user can silence or
redirect them like any other (``logging.getLogger("trainmedic.live.console")``), and the
handler is only attached when that logger has none. The watcher (``announce.py``) decides
when: once at the start, once at ``close()``, and a throttled progress line on a TTY.
Nothing here imports torch, the watcher or ``report/`` (a domain package never does).
"""

from __future__ import annotations

import logging
import shlex
import sys
from collections.abc import Sequence

from trainmedic.numbers import fmt_num

__all__ = ["start_line", "exit_line", "progress_line", "emit", "LOGGER_NAME"]

_PREFIX = "trainmedic:"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def start_line(run_dir: str, recorded: Sequence[str], *, note: str | None = None) -> str:
    """``trainmedic: recording to runs/exp1 (loss, lr, ...)``, and the note on how the folder
    was chosen (a new version, an old record moved aside, a resume), when there is one."""
    what = f" ({'; '.join(recorded)})" if recorded else ""
    tail = f"; {note}" if note else ""
    return f"{_PREFIX} recording to {run_dir}{what}{tail}"


def exit_line(run_dir: str, *, first_step: int | None, last_step: int | None,
              alerts: int = 0, stored: bool = True) -> str:
    """Where the record went and the command that reads it; or that nothing was recorded."""
    if not stored:
        return (f"{_PREFIX} nothing was recorded: the run store under {run_dir} could not "
                f"be written (see the warning above)")
    if first_step is None or last_step is None:
        steps = "no steps"
    elif first_step == last_step:
        steps = f"step {first_step}"
    else:
        steps = f"steps {first_step}-{last_step}"
    found = f", {_plural(alerts, 'live alert')}" if alerts else ""
    return (f"{_PREFIX} recorded {steps}{found} to {run_dir}; read it with: "
            f"trainmedic diagnose {shlex.quote(run_dir)}")


def progress_line(step: int, *, loss: float | None, it_per_s: float | None,
                  alerts: int = 0) -> str:
    """``trainmedic: step 1200  loss 2.314  37.5 it/s  1 alert``: one short line, redrawn."""
    parts = [f"{_PREFIX} step {step}"]
    if loss is not None:
        parts.append(f"loss {fmt_num(loss)}")
    if it_per_s is not None and it_per_s > 0:
        parts.append(f"{it_per_s:.3g} it/s" if it_per_s < 1000 else f"{it_per_s:.0f} it/s")
    if alerts:
        parts.append(_plural(alerts, "alert"))
    return "  ".join(parts)


#: The logger the watcher's lines go to (propagate off: a root handler would print twice).
LOGGER_NAME = "trainmedic.live.console"


class _ConsoleHandler(logging.Handler):
    """Writes a record's message to the *current* ``sys.stderr`` (pytest and notebooks swap
    it): on a line of its own, or, with ``record.transient``, over the current line
    (``\r`` ... erase to end of line). A closed or broken stderr is ignored: saying where the
    run went must never stop the run."""

    def emit(self, record: logging.LogRecord) -> None:
        stream = sys.stderr
        if stream is None:  # pythonw, a daemon with no stderr
            return
        text = record.getMessage()
        try:
            if getattr(record, "transient", False):
                stream.write(f"\r{text}\x1b[K")
            else:
                stream.write(text + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass


def _logger() -> logging.Logger:
    log = logging.getLogger(LOGGER_NAME)
    if not log.handlers:
        log.addHandler(_ConsoleHandler())
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


def emit(text: str, *, transient: bool = False) -> None:
    """Say ``text``: a line of its own, or (``transient``) over the current line, to be
    redrawn by the next transient text (``emit("", transient=True)`` clears it)."""
    _logger().info("%s", text, extra={"transient": transient})
