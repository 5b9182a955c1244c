"""Run one command as a child process and measure its wall time and its own peak RSS.

``resource.getrusage(RUSAGE_CHILDREN)`` is a running maximum over *all* children waited for
so far, so it cannot tell two tools apart; the rusage of exactly one reaped child is what
``os.wait4`` returns (Linux: ``ru_maxrss`` in KiB).

A Linux caveat decides how that child is started: ``exec`` folds the high-water RSS of the
address space it replaces into the new program's ``ru_maxrss``, and a child created by
``fork``/``vfork`` starts from the parent's pages. So a tool launched straight from this Python
process reports *at least this process's own peak* (~30 MB here, and ~300 MB if the parent
had held a 300 MB buffer: measured). To avoid that floor the tool is launched through GNU
``/usr/bin/time`` (a ~1 MB process that forks, execs the tool and wait4s it), and its ``%M``
is the tool's own peak. Without GNU time, the direct ``os.wait4`` figure is used and
``floor_rss_mb()`` tells how much of it is inherited. Grandchildren are not counted: none of
the measured tools spawns workers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

GNU_TIME = Path("/usr/bin/time")


@dataclass(kw_only=True, frozen=True)
class Measurement:
    """One finished child process."""

    argv: list[str]
    """The command that ran (without the /usr/bin/time wrapper)."""
    wall_s: float
    """Wall-clock seconds from spawn to reap, measured here."""
    peak_rss_mb: float
    """The child's own peak resident set size (``ru_maxrss``), in MiB."""
    rss_method: str
    """``gnu-time`` (the tool's own peak) or ``wait4`` (may include this process's floor)."""
    cpu_s: float | None
    """User + system CPU seconds of the child itself (less sensitive to machine load than
    wall time); None where it could not be read."""
    exit_code: int
    """Exit status; negative for a signal (``-9`` when it was killed for the timeout)."""
    timed_out: bool
    """True when the child ran past the timeout and was killed."""
    stdout: str
    """Everything the child wrote to stdout (decoded as UTF-8, invalid bytes replaced)."""
    stderr: str
    """Everything the child wrote to stderr."""


def _gnu_time_usable() -> bool:
    if not GNU_TIME.is_file():
        return False
    try:
        out = subprocess.run([str(GNU_TIME), "--version"], capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "GNU" in (out.stdout + out.stderr)


_USE_GNU_TIME = _gnu_time_usable()
RSS_METHOD = "gnu-time" if _USE_GNU_TIME else "wait4"
"""How peak RSS is read on this machine (see the module docstring)."""


def _read_gnu_time(path: str) -> tuple[float | None, float | None, int | None]:
    """(peak RSS MiB, CPU s, signal number) from a ``time -f "%M %U %S" -o path`` report."""
    rss_mb = cpu_s = None
    sig = None
    for line in Path(path).read_text(errors="replace").splitlines():
        line = line.strip()
        if line.startswith("Command terminated by signal"):
            sig = int(line.rsplit(" ", 1)[1])
            continue
        parts = line.split()
        if len(parts) == 3 and parts[0].isdigit():
            try:
                rss_mb = int(parts[0]) / 1024.0
                cpu_s = float(parts[1]) + float(parts[2])
            except ValueError:
                continue
    return rss_mb, cpu_s, sig


def run_measured(
    argv: Sequence[str],
    *,
    timeout_s: float = 600.0,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> Measurement:
    """Run ``argv`` to completion (or kill it at ``timeout_s``) and measure it."""
    with tempfile.NamedTemporaryFile(suffix=".time", delete=False) as tf:
        report = tf.name
    try:
        return _run(list(argv), timeout_s=timeout_s, env=env, cwd=cwd, report=report)
    finally:
        Path(report).unlink(missing_ok=True)


def _run(argv: list[str], *, timeout_s: float, env: dict[str, str] | None, cwd: str | None,
         report: str) -> Measurement:
    full = ([str(GNU_TIME), "-f", "%M %U %S", "-o", report, *argv] if _USE_GNU_TIME else argv)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        # A new session, so a timeout kills the tool and the time wrapper together.
        proc = subprocess.Popen(full, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True)
        timed_out = threading.Event()

        def _kill() -> None:
            timed_out.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout_s, _kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall_s = time.perf_counter() - start
        exit_code = os.waitstatus_to_exitcode(status)
        proc.returncode = exit_code  # reaped here, so Popen must not wait again
        rss_mb = usage.ru_maxrss / 1024.0
        cpu_s: float | None = usage.ru_utime + usage.ru_stime
        method = "wait4"
        if _USE_GNU_TIME:
            t_rss, t_cpu, sig = _read_gnu_time(report)
            cpu_s = t_cpu
            if t_rss is not None:
                rss_mb, method = t_rss, "gnu-time"
            if sig is not None:
                exit_code = -sig
        if timed_out.is_set():
            exit_code = -signal.SIGKILL
        out.seek(0)
        err.seek(0)
        return Measurement(
            argv=argv,
            wall_s=wall_s,
            peak_rss_mb=rss_mb,
            rss_method=method,
            cpu_s=cpu_s,
            exit_code=exit_code,
            timed_out=timed_out.is_set(),
            stdout=out.read().decode("utf-8", errors="replace"),
            stderr=err.read().decode("utf-8", errors="replace"),
        )


def floor_rss_mb() -> float:
    """Peak RSS reported for ``/bin/true``: the smallest figure this method can give."""
    return run_measured(["/bin/true"], timeout_s=30).peak_rss_mb
