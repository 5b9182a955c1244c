"""The machine a benchmark ran on, so every printed figure says where it came from.

Used by the scripts in this folder: ``describe()`` returns a dict (for ``--json``) and
``one_line()`` a short human summary. Only the standard library and an optional numpy import.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return f"{line.split('=', 1)[1].strip(chr(34))}, Linux {platform.release()}"
    except OSError:
        pass
    return platform.platform()


def _usable_cores() -> int:
    # The affinity mask is what a process may actually use (containers, taskset);
    # os.cpu_count() reports the host.
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 0


def _numpy_version() -> str | None:
    try:
        import numpy
    except ImportError:
        return None
    return str(numpy.__version__)


def _load_average() -> str | None:
    # Other work on the machine slows every tool; the 1/5/15-minute load says how busy it was.
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return None


def describe() -> dict[str, object]:
    """CPU model, usable and host cores, RAM, OS, and the Python/numpy running this script."""
    return {
        "cpu_model": _cpu_model(),
        "cores_usable": _usable_cores(),
        "cores_host": os.cpu_count(),
        "ram_gib": _ram_gib(),
        "os": _os_name(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "numpy": _numpy_version(),
        "load_average": _load_average(),
    }


def one_line(info: dict[str, object] | None = None) -> str:
    """``describe()`` as one line for a printed report."""
    d = info or describe()
    return (
        f"machine: {d['cpu_model']}, {d['cores_usable']} usable cores (host {d['cores_host']}), "
        f"{d['ram_gib']} GiB RAM, {d['os']}; Python {d['python']}, numpy {d['numpy']}; "
        f"load average {d['load_average']} at start"
    )


if __name__ == "__main__":
    print(one_line())
