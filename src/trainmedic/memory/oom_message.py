"""Read a CUDA/ROCm out-of-memory message from a log: the figures it prints, as an OomReport.

PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp) has printed three message
formats; :func:`parse_oom` reads all of them, with or without the exception-class prefix, and
finds them anywhere in a longer log or traceback:

- ``allocator-legacy`` (torch 1.4 to 2.0)::

    CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity;
    14.56 GiB already allocated; 3.75 MiB free; [4.77 GiB allowed; ]14.75 GiB reserved in
    total by PyTorch)

- ``allocator-legacy-cached`` (torch 1.0 to 1.3): the same, ending ``...; 30.96 MiB cached)``
  where "cached" is the reserved-but-unallocated memory;
- ``allocator`` (torch 2.1 on; "capacty" in 2.1)::

    CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB
    of which 1.23 GiB is free. [Process 12345 has 77.90 GiB memory in use. ]...[Including
    non-PyTorch memory, this process has X memory in use. ][Y allowed; ]Of the allocated
    memory A is allocated by PyTorch, [with P allocated in private pools (e.g., CUDA Graphs),
    ]and U is reserved by PyTorch but unallocated. ...

``HIP out of memory`` (ROCm) and ``XPU out of memory`` use the same sentences. A message cut
short is read as far as it goes (``allocator-partial``). ``CUDA error: out of memory`` (an
allocation outside the caching allocator: context, cuBLAS/NCCL workspaces) carries no numbers
and is reported as ``runtime-error``.

Every figure in a message is printed with two decimals in binary units (``format_size``), so a
parsed figure is within half a unit of the last digit (5.4 MB for a GiB figure) of the truth.
Figures read from the message have basis ``measured``; figures derived from them ``estimated``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from trainmedic.memory.ledger import Basis

__all__ = ["MessageFormat", "ProcessMemory", "OomReport", "parse_oom"]

MessageFormat = Literal[
    "allocator", "allocator-legacy", "allocator-legacy-cached", "allocator-partial",
    "runtime-error",
]

_UNIT_BYTES = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_S = r"(\d+(?:\.\d+)?) ?(bytes|KiB|MiB|GiB|TiB)"

_START_RE = re.compile(r"\b([A-Z]{2,5}) out of memory\.\s+Tried\s+to\s+allocate\s")
_RUNTIME_RE = re.compile(r"\b(CUDA|HIP) error: out of memory|CUBLAS_STATUS_ALLOC_FAILED")
_REQUESTED_RE = re.compile(r"Tried to allocate " + _S)
_LEGACY_RE = re.compile(
    r"\((?:GPU|Device) (\d+); " + _S + r" total capacity; " + _S + r" already allocated; "
    + _S + r" free; (?:" + _S + r" allowed; )?" + _S
    + r" (reserved in total by PyTorch|cached)\)"
)
_TOTAL_RE = re.compile(
    r"(?:GPU|Device|MLU|NPU) (\d+) has a total capac(?:i)?ty of " + _S + r" of which " + _S
    + r" ?is free\."
)
_PROCESS_RE = re.compile(r"Process (\d+) has " + _S + r" memory in use\.")
_SELF_RE = re.compile(r"Including non-PyTorch memory, this process has " + _S + r" memory in use")
_ALLOWED_RE = re.compile(_S + r" allowed;")
_ALLOCATED_RE = re.compile(r"Of the allocated memory " + _S + r" is allocated by PyTorch")
_PRIVATE_RE = re.compile(r"with " + _S + r" allocated in private pools")
_UNALLOCATED_RE = re.compile(r"and " + _S + r" is reserved by PyTorch but unallocated")
_END_RE = re.compile(
    r"reserved by PyTorch but unallocated\.|reserved in total by PyTorch\)|cached\)"
)
_CONF_RE = re.compile(r"PYTORCH_(?:CUDA_|HIP_)?ALLOC_CONF")
_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+), in ([^\s]+)[^\n]*\n(?:[ \t]+([^\n]*\S))?')

_WINDOW_CHARS = 3000
"""How far past its start a message is read (the longest real ones are ~800 characters)."""
_FRAME_LOOKBACK_CHARS = 6000
"""How far before a message its traceback's last frame is looked for."""


@dataclass(kw_only=True, frozen=True)
class ProcessMemory:
    """One ``Process <pid> has <size> memory in use`` clause of the message."""

    pid: int
    """Process id as NVML reports it (the host's PID namespace)."""
    used_bytes: int
    """Device memory the process holds, all allocators included."""


@dataclass(kw_only=True, frozen=True)
class OomReport:
    """The figures of one out-of-memory message, as printed. Sizes are None when absent."""

    backend: str
    """``CUDA``, ``HIP`` (ROCm) or ``XPU``, as the message names it."""
    message_format: MessageFormat
    """Which of the formats of the module docstring the message has."""
    device_index: int | None
    """The GPU index the message names (within CUDA_VISIBLE_DEVICES)."""
    requested_bytes: int | None
    """The allocation that failed ("Tried to allocate"), rounded up by the allocator."""
    total_bytes: int | None
    """Device capacity ("total capacity")."""
    free_bytes: int | None
    """Free device memory per the driver (cudaMemGetInfo) after the allocator gave back all
    it could."""
    allowed_bytes: int | None
    """Cap set by ``torch.cuda.set_per_process_memory_fraction``, when one is set."""
    allocated_bytes: int | None
    """Memory held by live tensors (PyTorch's "allocated"; includes private pools)."""
    reserved_bytes: int | None
    """Memory PyTorch's allocator holds from the driver (allocated + cached)."""
    reserved_unallocated_bytes: int | None
    """Reserved but not held by tensors: cached blocks the allocator could not use."""
    private_pool_bytes: int | None
    """Of ``allocated_bytes``, what CUDA-graph private pools hold."""
    this_process_bytes: int | None
    """All device memory of the failing process, non-PyTorch allocations included."""
    processes: tuple[ProcessMemory, ...] = ()
    """Other processes the message lists (NVML), in message order."""
    basis: Mapping[str, Basis] = field(default_factory=dict)
    """``measured`` or ``estimated`` for every ``*_bytes`` field that is not None."""
    allocator_hint: str | None = None
    """The allocator setting the message itself suggests (``expandable_segments`` or
    ``max_split_size_mb``)."""
    alloc_conf_var: str | None = None
    """The environment variable the message names (``PYTORCH_CUDA_ALLOC_CONF``, ...)."""
    location: str | None = None
    """The traceback's last frame before the message (``file:line in func: source``)."""
    message: str = ""
    """The message, whitespace collapsed."""
    line: int = 1
    """1-based line of the log where the message starts."""
    occurrences: int = 1
    """OOM messages found in the whole text; this report is of the last one with figures."""
    distinct_messages: int = 1
    """Of ``occurrences``, how many differ in text (a logger and a traceback often repeat)."""


def _size(value: str, unit: str) -> int:
    return int((Decimal(value) * _UNIT_BYTES[unit]).to_integral_value())


def _collapse(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _location(text: str, start: int) -> str | None:
    before = text[max(0, start - _FRAME_LOOKBACK_CHARS):start]
    frames = list(_FRAME_RE.finditer(before))
    if not frames:
        return None
    last = frames[-1]
    path, lineno, func, source = last.group(1), last.group(2), last.group(3), last.group(4)
    name = re.split(r"[\\/]", path)[-1]
    where = f"{name}:{lineno} in {func}"
    if source and not source.lstrip().startswith(("File ", "^", "~")):
        where += f": {source.strip()}"
    return where


def _parse_allocator(window: str, backend: str) -> dict[str, Any]:
    """The figures of one allocator message (``window`` starts at it, whitespace collapsed)."""
    end = _END_RE.search(window)
    msg = window[: end.end()] if end else window[:1000]
    out: dict[str, Any] = {"backend": backend, "message": msg}
    basis: dict[str, Basis] = {}
    requested = _REQUESTED_RE.search(msg)
    if requested:
        out["requested_bytes"] = _size(*requested.groups())
        basis["requested_bytes"] = "measured"
    legacy = _LEGACY_RE.search(msg)
    if legacy:
        g = legacy.groups()
        out["device_index"] = int(g[0])
        out["total_bytes"] = _size(g[1], g[2])
        out["allocated_bytes"] = _size(g[3], g[4])
        out["free_bytes"] = _size(g[5], g[6])
        if g[7] is not None:
            out["allowed_bytes"] = _size(g[7], g[8])
            basis["allowed_bytes"] = "measured"
        last = _size(g[9], g[10])
        basis.update(total_bytes="measured", allocated_bytes="measured", free_bytes="measured")
        if g[11] == "cached":
            out["message_format"] = "allocator-legacy-cached"
            out["reserved_unallocated_bytes"] = last
            out["reserved_bytes"] = out["allocated_bytes"] + last
            basis.update(reserved_unallocated_bytes="measured", reserved_bytes="estimated")
        else:
            out["message_format"] = "allocator-legacy"
            out["reserved_bytes"] = last
            out["reserved_unallocated_bytes"] = max(0, last - out["allocated_bytes"])
            basis.update(reserved_bytes="measured", reserved_unallocated_bytes="estimated")
    else:
        total = _TOTAL_RE.search(msg)
        if total:
            out["device_index"] = int(total.group(1))
            out["total_bytes"] = _size(total.group(2), total.group(3))
            out["free_bytes"] = _size(total.group(4), total.group(5))
            basis.update(total_bytes="measured", free_bytes="measured")
        out["processes"] = tuple(
            ProcessMemory(pid=int(m.group(1)), used_bytes=_size(m.group(2), m.group(3)))
            for m in _PROCESS_RE.finditer(msg)
        )
        for key, regex in (("this_process_bytes", _SELF_RE), ("allowed_bytes", _ALLOWED_RE),
                           ("allocated_bytes", _ALLOCATED_RE),
                           ("private_pool_bytes", _PRIVATE_RE),
                           ("reserved_unallocated_bytes", _UNALLOCATED_RE)):
            found = regex.search(msg)
            if found:
                out[key] = _size(found.group(1), found.group(2))
                basis[key] = "measured"
        if "allocated_bytes" in out and "reserved_unallocated_bytes" in out:
            # reserved = allocated (incl. private pools) + reserved-but-unallocated, as the
            # message's two figures are formed in CUDACachingAllocator.cpp.
            out["reserved_bytes"] = out["allocated_bytes"] + out["reserved_unallocated_bytes"]
            basis["reserved_bytes"] = "estimated"
        complete = total is not None and "reserved_unallocated_bytes" in out
        out["message_format"] = "allocator" if complete else "allocator-partial"
    if "expandable_segments" in msg:
        out["allocator_hint"] = "expandable_segments"
    elif "max_split_size_mb" in msg:
        out["allocator_hint"] = "max_split_size_mb"
    conf = _CONF_RE.search(window[: len(msg) + 300])
    if conf:
        out["alloc_conf_var"] = conf.group(0)
    out["basis"] = basis
    return out


def parse_oom(text: str) -> OomReport | None:
    """The last out-of-memory message in ``text`` (a log, a traceback, or the message alone).

    Returns None when the text holds no OOM message. When it holds several, the report is of
    the last one that carries figures, and ``occurrences``/``distinct_messages`` count them all.
    """
    starts = [(m.start(), m.group(1)) for m in _START_RE.finditer(text)]
    runtime = list(_RUNTIME_RE.finditer(text))
    if not starts and not runtime:
        return None
    occurrences = len(starts) + len(runtime)
    if starts:
        bounds = [s for s, _ in starts[1:]] + [len(text)]
        parsed = []
        for (start, backend), stop in zip(starts, bounds, strict=True):
            window = _collapse(text[start:min(stop, start + _WINDOW_CHARS)])
            parsed.append((start, _parse_allocator(window, backend)))
        distinct = len({p["message"] for _, p in parsed} | {m.group(0) for m in runtime})
        start, fields = parsed[-1]
    else:
        last = runtime[-1]
        start = last.start()
        backend = last.group(1) or "CUDA"
        fields = {"backend": backend, "message_format": "runtime-error",
                  "message": _collapse(text[start:start + 200].split("\n\n")[0])}
        distinct = len({m.group(0) for m in runtime})
    return OomReport(
        backend=fields["backend"],
        message_format=fields["message_format"],
        device_index=fields.get("device_index"),
        requested_bytes=fields.get("requested_bytes"),
        total_bytes=fields.get("total_bytes"),
        free_bytes=fields.get("free_bytes"),
        allowed_bytes=fields.get("allowed_bytes"),
        allocated_bytes=fields.get("allocated_bytes"),
        reserved_bytes=fields.get("reserved_bytes"),
        reserved_unallocated_bytes=fields.get("reserved_unallocated_bytes"),
        private_pool_bytes=fields.get("private_pool_bytes"),
        this_process_bytes=fields.get("this_process_bytes"),
        processes=fields.get("processes", ()),
        basis=fields.get("basis", {}),
        allocator_hint=fields.get("allocator_hint"),
        alloc_conf_var=fields.get("alloc_conf_var"),
        location=_location(text, start),
        message=fields["message"],
        line=text.count("\n", 0, start) + 1,
        occurrences=occurrences,
        distinct_messages=distinct,
    )
