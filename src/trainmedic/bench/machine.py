"""The host a benchmark ran on, torch-aware, so every measured figure says where it came from.

``describe_machine()`` returns a :class:`Machine`: CPU model, usable and host cores, RAM, OS,
Python, torch (version, intra-op threads) and, when CUDA is present, each device's name,
compute capability and memory. ``benchmarks/machine.py`` is the standard-library-only cousin
used by scripts that must not import torch; the fields they share have the same names.
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Machine", "CudaDevice", "describe_machine", "usable_cores"]


@dataclass(kw_only=True, frozen=True)
class CudaDevice:
    """One CUDA (or ROCm, which torch also calls ``cuda``) device as torch reports it."""

    index: int
    """``torch.cuda`` device index."""
    name: str
    """``torch.cuda.get_device_name`` (e.g. ``NVIDIA H100 80GB HBM3``)."""
    capability: str
    """Compute capability ``major.minor`` (e.g. ``9.0``)."""
    total_bytes: int
    """``total_memory`` of the device properties, bytes."""


@dataclass(kw_only=True, frozen=True)
class Machine:
    """The host and the software a measurement ran with."""

    cpu_model: str
    """``model name`` from /proc/cpuinfo, else ``platform.processor()``."""
    cores_usable: int
    """CPUs this process may run on (affinity mask: containers and taskset limit it)."""
    cores_host: int | None
    """``os.cpu_count()``: the host's logical CPUs."""
    ram_bytes: int | None
    """MemTotal from /proc/meminfo, bytes (None where unreadable)."""
    os: str
    """Distribution and kernel (``PRETTY_NAME`` of /etc/os-release), else ``platform``."""
    python: str
    """Python version."""
    torch: str | None
    """torch version (None: torch is not installed)."""
    torch_threads: int | None
    """``torch.get_num_threads()``: intra-op threads a CPU matmul may use."""
    load_average: str | None
    """1/5/15-minute load when described: other work on the host slows every benchmark."""
    cuda: tuple[CudaDevice, ...] = field(default_factory=tuple)
    """CUDA devices torch sees (empty without CUDA)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (``cuda`` as a list of dicts)."""
        d = asdict(self)
        d["cuda"] = [asdict(c) for c in self.cuda]
        return d

    def one_line(self) -> str:
        """The machine as one line, for the head of a printed report."""
        ram = f"{self.ram_bytes / 2**30:.1f} GiB RAM" if self.ram_bytes else "RAM unknown"
        torch_part = (f"torch {self.torch} ({self.torch_threads} threads)" if self.torch
                      else "no torch")
        gpus = "; ".join(f"cuda:{c.index} {c.name} (sm {c.capability}, "
                         f"{c.total_bytes / 2**30:.1f} GiB)" for c in self.cuda) or "no CUDA"
        return (f"machine: {self.cpu_model}, {self.cores_usable} usable cores (host "
                f"{self.cores_host}), {ram}, {self.os}; Python {self.python}, {torch_part}; "
                f"{gpus}; load average {self.load_average}")


def usable_cores() -> int:
    """CPUs this process may use: the affinity mask, not the host count (a container or
    ``taskset`` gives fewer than ``os.cpu_count()``)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _cpu_model() -> str:
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _ram_bytes() -> int | None:
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            try:
                return int(line.split()[1]) * 1024  # the kernel writes kB meaning KiB
            except (IndexError, ValueError):
                return None
    return None


def _os_name() -> str:
    for line in (_read("/etc/os-release") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return f"{line.split('=', 1)[1].strip(chr(34))}, {platform.system()} " \
                   f"{platform.release()}"
    return platform.platform()


def _load_average() -> str | None:
    text = _read("/proc/loadavg")
    return " ".join(text.split()[:3]) if text else None


def _cuda_devices(torch: Any) -> tuple[CudaDevice, ...]:
    try:
        if not torch.cuda.is_available():
            return ()
        out = []
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            out.append(CudaDevice(index=i, name=torch.cuda.get_device_name(i),
                                  capability=f"{props.major}.{props.minor}",
                                  total_bytes=int(props.total_memory)))
        return tuple(out)
    except RuntimeError:  # a driver that fails to initialise: describe the host without it
        return ()


def describe_machine() -> Machine:
    """Describe this host and the torch it runs (imports torch when installed)."""
    cuda: tuple[CudaDevice, ...] = ()
    torch_version: str | None = None
    threads: int | None = None
    try:
        import torch
    except ImportError:
        pass
    else:
        torch_version, threads = str(torch.__version__), torch.get_num_threads()
        cuda = _cuda_devices(torch)
    return Machine(cpu_model=_cpu_model(), cores_usable=usable_cores(),
                   cores_host=os.cpu_count(), ram_bytes=_ram_bytes(), os=_os_name(),
                   python=platform.python_version(), torch=torch_version,
                   torch_threads=threads, load_average=_load_average(), cuda=cuda)
