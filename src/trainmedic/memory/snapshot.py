"""Read a CUDA memory snapshot (``torch.cuda.memory._dump_snapshot``) safely, and explain it.

A snapshot is a pickle of plain data (``torch/cuda/memory.py``, ``_snapshot`` docstring)::

    {"segments": [{"device", "address", "total_size", "stream", "segment_type": "small"|"large",
                   "allocated_size", "active_size",
                   "blocks": [{"size", "requested_size", "address",
                               "state": "active_allocated"|"active_awaiting_free"|"inactive",
                               "frames": [{"filename", "line", "name"}, ...]}]}],
     "device_traces": [[{"action": "alloc"|"free_requested"|"free_completed"|"segment_alloc"
                                   |"segment_free"|"oom"|"snapshot",
                         "addr", "size", "stream", "frames", "device_free" (oom only)}]]}

(older snapshots keep a block's frames and requested size in ``history[0]``). Since a pickle
can run code while it loads, :func:`read_snapshot` uses an unpickler that admits **no class
at all**: a pickle that names any global (``os.system``, a torch class) is refused with an
:class:`UnreadableInputError` before anything is called, and the loaded value must consist of
dicts, lists, tuples, strings, numbers, booleans and None. torch is not imported.

Every figure here is read from the snapshot (basis ``measured``) or summed from such readings
(``estimated`` only where a formula, not a sum, is involved).
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmedic.errors import UnreadableInputError
from trainmedic.memory.gpus import format_bytes
from trainmedic.memory.oom import PEAK_REDUCTION_FIXES, Figure, OomExplanation, Verdict

__all__ = [
    "Allocation",
    "TraceEvent",
    "SegmentFree",
    "DeviceMemory",
    "SnapshotSummary",
    "read_snapshot",
    "summarize_snapshot",
    "explain_snapshot",
]

_PLAIN_TYPES = (dict, list, tuple, str, int, float, bool, type(None))
_HUGE_FRACTION = 0.25
"""A failed request of at least this share of (reserved + free) is called huge (hypothesis)."""
_TOP_FRAMES = 3
"""Python frames kept per allocation (innermost user code first)."""


class _Refused(Exception):
    """The pickle asked for something the snapshot reader never admits."""


class _PlainDataUnpickler(pickle.Unpickler):
    """An unpickler that resolves no global: no class, no function, no extension code."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"it references {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("it uses a persistent id")


def _check_plain(value: Any) -> None:
    """Raise _Refused unless ``value`` is made only of the plain types (shared objects once)."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if not isinstance(item, _PLAIN_TYPES):
            raise _Refused(f"it holds a {type(item).__name__}")
        if isinstance(item, dict | list | tuple):
            if id(item) in seen:
                continue
            seen.add(id(item))
            if isinstance(item, dict):
                for key in item:
                    if not isinstance(key, str | int):
                        raise _Refused(f"it holds a {type(key).__name__} dict key")
                stack.extend(item.values())
            else:
                stack.extend(item)


def read_snapshot(path: str | Path) -> dict[str, Any]:
    """The snapshot dict in ``path``, loaded without admitting any class.

    Raises :class:`UnreadableInputError` naming the file when it cannot be read, is not a
    pickle, references any global (the usual code-execution route of a malicious pickle),
    holds anything but plain data, or has no ``segments`` list.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise UnreadableInputError(str(p), f"cannot be read ({exc.strerror or exc}); expected "
                                   f"a snapshot saved by torch.cuda.memory._dump_snapshot") from exc
    expected = ("expected a snapshot saved by torch.cuda.memory._dump_snapshot, which holds "
                "only dicts, lists, strings and numbers")
    try:
        value = _PlainDataUnpickler(io.BytesIO(data)).load()
        _check_plain(value)
    except _Refused as exc:
        raise UnreadableInputError(str(p), f"refused to load: {exc}; {expected}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
            AttributeError, UnicodeDecodeError, MemoryError, RecursionError) as exc:
        raise UnreadableInputError(str(p), f"is not a readable pickle ({type(exc).__name__}: "
                                   f"{str(exc)[:80]}); {expected}") from None
    if not isinstance(value, dict) or not isinstance(value.get("segments"), list):
        kind = type(value).__name__
        raise UnreadableInputError(str(p), f"holds a {kind} without a 'segments' list; {expected}")
    return value


@dataclass(kw_only=True, frozen=True)
class Allocation:
    """One live block (``active_allocated``) of the snapshot."""

    device: int
    """Device index."""
    size_bytes: int
    """Block size (rounded by the allocator)."""
    requested_bytes: int
    """Size the caller asked for."""
    frames: tuple[str, ...]
    """``file:line name`` of the innermost Python frames, user code before torch internals."""


@dataclass(kw_only=True, frozen=True)
class TraceEvent:
    """One allocator action of ``device_traces``."""

    action: str
    """``alloc``, ``free_requested``, ``free_completed``, ``segment_alloc``, ``segment_free``,
    ``oom`` or ``snapshot``."""
    size_bytes: int
    """Bytes of the action (for ``oom``: the request that failed)."""
    addr: int | None
    """Address (absent for ``oom``)."""
    device_free_bytes: int | None
    """Free device memory the driver reported (``oom`` only)."""
    frames: tuple[str, ...]
    """As :attr:`Allocation.frames`."""


@dataclass(kw_only=True, frozen=True)
class SegmentFree:
    """Free space inside one segment (a cudaMalloc'd region)."""

    address: int
    """Segment start address."""
    total_bytes: int
    """Segment size."""
    free_bytes: int
    """Inactive bytes in it."""
    largest_free_bytes: int
    """Its largest inactive block: the largest request it can serve without a new segment."""
    pool: str
    """``large`` or ``small`` (small-pool segments serve only requests up to 1 MiB)."""


@dataclass(kw_only=True, frozen=True)
class DeviceMemory:
    """The allocator state of one device in the snapshot."""

    device: int
    """Device index."""
    segments: int
    """Segments (cudaMalloc'd regions) PyTorch holds."""
    reserved_bytes: int
    """Sum of segment sizes: what PyTorch holds from the driver."""
    allocated_bytes: int
    """Sum of ``active_allocated`` block sizes (live tensors)."""
    requested_bytes: int
    """Sum of what those allocations asked for (before rounding)."""
    awaiting_free_bytes: int
    """``active_awaiting_free`` blocks: freed, waiting for another stream."""
    reserved_unallocated_bytes: int
    """reserved - allocated."""
    inactive_bytes: int
    """Free blocks in the cache."""
    inactive_split_bytes: int
    """Free blocks in segments that also hold live or pending blocks: cached memory that
    ``empty_cache`` cannot return and that larger requests cannot use (fragmentation)."""
    inactive_split_blocks: int
    """How many such blocks."""
    small_pool_inactive_bytes: int
    """Free bytes in small-pool segments (unusable for requests above 1 MiB)."""
    largest_free_block_bytes: int
    """Largest free block of the large pool."""
    segments_with_free: tuple[SegmentFree, ...]
    """Segments with free space, most free first (the first ``top``)."""
    largest_allocations: tuple[Allocation, ...]
    """Largest live blocks, largest first (the first ``top``)."""
    oom: TraceEvent | None
    """The last ``oom`` event of the trace, when there is one."""
    trace_tail: tuple[TraceEvent, ...]
    """The allocator actions up to and including that ``oom`` (or the trace's end)."""


@dataclass(kw_only=True, frozen=True)
class SnapshotSummary:
    """A snapshot file, summarized per device."""

    path: str
    """The file read ("" when summarized from a dict)."""
    devices: tuple[DeviceMemory, ...]
    """Devices with segments or trace events, by index."""
    has_frames: bool
    """Whether allocations carry Python stack frames (``_record_memory_history`` on)."""
    has_trace: bool
    """Whether ``device_traces`` holds any event."""


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _frames(raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list):
        return ()
    python = [f for f in raw if isinstance(f, dict)
              and str(f.get("filename", "")).endswith(".py")]

    def is_torch(frame: Mapping[str, Any]) -> bool:
        name = str(frame.get("filename", "")).replace("\\", "/")
        return "/torch/" in name or name.startswith("torch/")

    chosen = [f for f in python if not is_torch(f)][:_TOP_FRAMES] or python[:_TOP_FRAMES]
    return tuple(f"{f.get('filename')}:{_int(f.get('line'))} {f.get('name', '?')}"
                 for f in chosen)


def _block_extra(block: Mapping[str, Any]) -> tuple[Any, int]:
    """(frames, requested size) of a block, old snapshots keeping both in ``history[0]``."""
    if "frames" in block or "requested_size" in block:
        return block.get("frames"), _int(block.get("requested_size", block.get("size")))
    history = block.get("history")
    if isinstance(history, list) and history and isinstance(history[0], dict):
        return history[0].get("frames"), _int(history[0].get("real_size", block.get("size")))
    return None, _int(block.get("size"))


def _event(raw: Mapping[str, Any]) -> TraceEvent:
    return TraceEvent(
        action=str(raw.get("action", "?")),
        size_bytes=_int(raw.get("size")),
        addr=_int(raw["addr"]) if "addr" in raw else None,
        device_free_bytes=_int(raw["device_free"]) if "device_free" in raw else None,
        frames=_frames(raw.get("frames")),
    )


def _device_summary(device: int, segments: Sequence[Mapping[str, Any]], trace: Sequence[Any],
                    *, top: int, tail: int) -> DeviceMemory:
    reserved = allocated = requested = awaiting = inactive = 0
    split_bytes = split_blocks = small_inactive = largest_free = 0
    seg_free: list[SegmentFree] = []
    allocations: list[Allocation] = []
    for seg in segments:
        blocks = [b for b in seg.get("blocks", []) if isinstance(b, dict)]
        total = _int(seg.get("total_size"))
        reserved += total
        pool = str(seg.get("segment_type", "large"))
        free_here = largest_here = 0
        for block in blocks:
            size, state = _int(block.get("size")), block.get("state")
            if state == "active_allocated":
                frames, asked = _block_extra(block)
                allocated += size
                requested += asked
                allocations.append(Allocation(device=device, size_bytes=size,
                                              requested_bytes=asked, frames=_frames(frames)))
            elif state == "active_awaiting_free":
                awaiting += size
            else:
                inactive += size
                free_here += size
                largest_here = max(largest_here, size)
                if len(blocks) > 1:
                    split_bytes += size
                    split_blocks += 1
        if pool == "small":
            small_inactive += free_here
        else:
            largest_free = max(largest_free, largest_here)
        if free_here:
            seg_free.append(SegmentFree(address=_int(seg.get("address")), total_bytes=total,
                                        free_bytes=free_here, largest_free_bytes=largest_here,
                                        pool=pool))
    events = [e for e in trace if isinstance(e, dict)]
    oom_index = max((i for i, e in enumerate(events) if e.get("action") == "oom"), default=None)
    end = len(events) if oom_index is None else oom_index + 1
    seg_free.sort(key=lambda s: (-s.free_bytes, s.address))
    allocations.sort(key=lambda a: -a.size_bytes)
    return DeviceMemory(
        device=device, segments=len(segments), reserved_bytes=reserved,
        allocated_bytes=allocated, requested_bytes=requested, awaiting_free_bytes=awaiting,
        reserved_unallocated_bytes=reserved - allocated, inactive_bytes=inactive,
        inactive_split_bytes=split_bytes, inactive_split_blocks=split_blocks,
        small_pool_inactive_bytes=small_inactive, largest_free_block_bytes=largest_free,
        segments_with_free=tuple(seg_free[:top]), largest_allocations=tuple(allocations[:top]),
        oom=_event(events[oom_index]) if oom_index is not None else None,
        trace_tail=tuple(_event(e) for e in events[max(0, end - tail):end]),
    )


def summarize_snapshot(snapshot: Mapping[str, Any], *, path: str = "", top: int = 10,
                       trace_tail: int = 20) -> SnapshotSummary:
    """Per-device totals, fragmentation, largest allocations and the trace before an OOM.

    ``snapshot`` is what :func:`read_snapshot` returns (or ``torch.cuda.memory._snapshot()``);
    ``top`` bounds the lists of allocations and segments, ``trace_tail`` the trace events.
    """
    by_device: dict[int, list[Mapping[str, Any]]] = {}
    for seg in snapshot.get("segments", []):
        if isinstance(seg, dict):
            by_device.setdefault(_int(seg.get("device", 0)), []).append(seg)
    traces = snapshot.get("device_traces") or []
    traces = traces if isinstance(traces, list) else []
    devices = sorted(set(by_device) | {i for i, t in enumerate(traces) if t})
    summaries = tuple(
        _device_summary(d, by_device.get(d, []),
                        traces[d] if d < len(traces) and isinstance(traces[d], list) else [],
                        top=top, tail=trace_tail)
        for d in devices
    )
    has_frames = any(a.frames for s in summaries for a in s.largest_allocations) or any(
        e.frames for s in summaries for e in s.trace_tail)
    return SnapshotSummary(path=path, devices=summaries, has_frames=has_frames,
                           has_trace=any(s.trace_tail for s in summaries))


def explain_snapshot(summary: SnapshotSummary, *, device: int | None = None) -> OomExplanation:
    """The verdict on one device of a snapshot, from the snapshot's own numbers.

    The device is ``device``, else the one whose trace ends in an ``oom``, else the one with
    the most reserved memory. With an ``oom`` event: fragmentation when the cache's free large
    blocks add up to the failed request but none is large enough (or with the driver's free
    memory they cover it); otherwise the device is full (and a request of >= 25% of reserved
    + free is called huge, a hypothesis). Without one: the fragmentation figures only.
    """
    if not summary.devices:
        return OomExplanation(verdict="unknown", summary="the snapshot holds no segments",
                              figures=(), reasons=("no segment and no trace event",), fixes=())
    if device is not None:
        chosen = next((d for d in summary.devices if d.device == device), None)
        if chosen is None:
            have = [d.device for d in summary.devices]
            return OomExplanation(verdict="unknown", summary=f"device {device} is not in it",
                                  figures=(), reasons=(f"devices present: {have}",), fixes=())
    else:
        with_oom = [d for d in summary.devices if d.oom is not None]
        chosen = with_oom[-1] if with_oom else max(summary.devices,
                                                   key=lambda d: d.reserved_bytes)
    d = chosen
    large_free = d.inactive_bytes - d.small_pool_inactive_bytes
    figures = [
        Figure(name="reserved", bytes=d.reserved_bytes, basis="measured"),
        Figure(name="allocated", bytes=d.allocated_bytes, basis="measured"),
        Figure(name="reserved_unallocated", bytes=d.reserved_unallocated_bytes,
               basis="measured"),
        Figure(name="inactive_split", bytes=d.inactive_split_bytes, basis="measured"),
        Figure(name="inactive_large_pool", bytes=large_free, basis="measured"),
        Figure(name="largest_free_block", bytes=d.largest_free_block_bytes, basis="measured"),
    ]
    notes = [f"device {d.device}; sums of the snapshot's block sizes"]
    if d.largest_allocations:
        biggest = d.largest_allocations[0]
        where = f" at {biggest.frames[0]}" if biggest.frames else ""
        notes.append(f"largest live allocation: {format_bytes(biggest.size_bytes)}{where}")
    if not summary.has_frames:
        notes.append("no stack frames: record them with torch.cuda.memory._record_memory_history()"
                     " before the run")
    split_share = d.inactive_split_bytes / d.reserved_bytes if d.reserved_bytes else 0.0
    frag_fixes = (
        "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments grow in place, so free "
        "space at a segment's end serves larger requests and split blocks stop stranding memory",
        "keep tensor shapes steady (pad or bucket sequence lengths)",
    )
    if d.oom is None:
        verdict: Verdict = "fragmentation" if split_share >= 0.2 else "unknown"
        return OomExplanation(
            verdict=verdict,
            summary=f"no OOM in the trace; {split_share:.0%} of reserved is free but stranded "
                    f"in split segments",
            figures=tuple(figures),
            reasons=(f"inactive split blocks {format_bytes(d.inactive_split_bytes)} of reserved "
                     f"{format_bytes(d.reserved_bytes)}",),
            fixes=frag_fixes if verdict == "fragmentation" else (),
            notes=tuple(notes))
    req = d.oom.size_bytes
    free = d.oom.device_free_bytes or 0
    figures[:0] = [Figure(name="requested", bytes=req, basis="measured"),
                   Figure(name="free_on_device", bytes=free, basis="measured")]
    if d.oom.frames:
        notes.append(f"failing allocation at {d.oom.frames[0]}")
    notes.append("segments are as dumped: if the dump ran after the exception unwound, the "
                 "failed step's tensors may already be free; the oom event's figures are exact")
    reasons: list[str] = []
    also: list[Verdict] = []
    if large_free >= req > d.largest_free_block_bytes or (
            large_free + free >= req and 2 * large_free >= req):
        verdict = "fragmentation"
        reasons.append(
            f"free large-pool blocks total {format_bytes(large_free)}"
            + (f" + {format_bytes(free)} free on the device" if large_free < req else "")
            + f" >= requested {format_bytes(req)}, but the largest is "
              f"{format_bytes(d.largest_free_block_bytes)}")
        fixes: tuple[str, ...] = frag_fixes
        line = (f"fragmentation: {format_bytes(req)} requested, free blocks total "
                f"{format_bytes(large_free)}, largest {format_bytes(d.largest_free_block_bytes)}")
    else:
        visible = d.reserved_bytes + free
        huge = visible and req >= _HUGE_FRACTION * visible
        verdict = "single_huge_allocation" if huge else "genuinely_full"
        reasons.append(
            f"requested {format_bytes(req)} > free on device {format_bytes(free)} + free large "
            f"blocks {format_bytes(large_free)}; live tensors hold "
            f"{format_bytes(d.allocated_bytes)}")
        if huge:
            also.append("genuinely_full")
            reasons.append(
                f"the request is {req / visible:.0%} of reserved + free: one tensor this large "
                f"is usually the LM logits or eager attention scores (hypothesis; see the "
                f"failing allocation's frames)")
        fixes = ("run `trainmedic memory plan` to see which category fills the device",
                 *PEAK_REDUCTION_FIXES)
        line = (f"one allocation of {format_bytes(req)} does not fit next to the rest" if huge
                else f"the device is full: {format_bytes(req)} requested, "
                     f"{format_bytes(free)} free")
    if verdict != "fragmentation" and split_share >= 0.2:
        also.append("fragmentation")
        reasons.append(f"{split_share:.0%} of reserved is free but in split segments")
    return OomExplanation(verdict=verdict, summary=line, figures=tuple(figures),
                          reasons=tuple(reasons), fixes=fixes, also=tuple(also),
                          notes=tuple(notes))
