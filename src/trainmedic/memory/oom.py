"""Explain a CUDA/ROCm out-of-memory error: the verdict, the arithmetic behind it, the fixes.

The message itself is read by :mod:`trainmedic.memory.oom_message` (its formats are documented
there); a memory snapshot by :mod:`trainmedic.memory.snapshot`. Figures read from a message have
basis ``measured``; figures derived from them ``estimated``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trainmedic.errors import UnreadableInputError, UnrecognizedInputError
from trainmedic.memory.gpus import format_bytes
from trainmedic.memory.ledger import Basis
from trainmedic.memory.oom_message import MessageFormat, OomReport, ProcessMemory, parse_oom

__all__ = [
    "MessageFormat",
    "Verdict",
    "ProcessMemory",
    "OomReport",
    "Figure",
    "OomExplanation",
    "parse_oom",
    "explain_oom",
    "explain_oom_file",
    "PEAK_REDUCTION_FIXES",
]

OomSource = Literal["message", "snapshot"]

Verdict = Literal[
    "fragmentation", "other_process", "memory_cap", "single_huge_allocation",
    "free_but_refused", "genuinely_full", "unknown",
]

_HUGE_FRACTION = 0.25
"""A single request of at least this fraction of the device is called huge (hypothesis)."""
_FRAG_MATERIAL_FRACTION = 0.05
"""Reserved-but-unallocated below this fraction of reserved is too little to call the OOM
fragmentation, even when it exceeds the (small) request."""
_DOMINANT_FRACTION = 0.25
"""Other processes holding at least this fraction of the device make them the main cause."""
_PRIORITY: tuple[str, ...] = (
    "memory_cap", "huge_certain", "fragmentation", "free_but_refused", "other_process",
    "huge_hypothesis", "genuinely_full")
"""Which cause is the verdict when several apply: measured causes before hypotheses."""
_PRIORITY_DOMINANT_OTHERS: tuple[str, ...] = (
    "memory_cap", "other_process", "huge_certain", "fragmentation", "free_but_refused",
    "huge_hypothesis", "genuinely_full")
"""The order when other processes hold a large share of the device."""
_CONTEXT_ALLOWANCE_BYTES = 2**30
"""Memory a process holds outside PyTorch's allocator without anything being wrong (CUDA
context, cuBLAS/cuDNN workspaces): assumed 1 GiB when judging old messages (estimated)."""


@dataclass(kw_only=True, frozen=True)
class Figure:
    """One number of an explanation, with where it came from."""

    name: str
    """What the number is (``requested``, ``reserved_unallocated``...)."""
    bytes: int
    """The figure."""
    basis: Basis
    """``measured`` (printed in the message) or ``estimated`` (derived)."""
    note: str = ""
    """How it was derived, when estimated."""


@dataclass(kw_only=True, frozen=True)
class OomExplanation:
    """Why the allocation failed and what to change, with the arithmetic behind it."""

    verdict: Verdict
    """The main cause."""
    summary: str
    """One line for a terminal."""
    figures: tuple[Figure, ...]
    """The numbers the verdict rests on."""
    reasons: tuple[str, ...]
    """The arithmetic that decided the verdict, one claim per line."""
    fixes: tuple[str, ...]
    """What to change, most effective first."""
    also: tuple[Verdict, ...] = ()
    """Other causes that contribute."""
    notes: tuple[str, ...] = ()
    """Caveats (rounding, hypotheses, several OOMs in the log)."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (figures keep their basis)."""
        return {
            "verdict": self.verdict,
            "summary": self.summary,
            "figures": [
                {"name": f.name, "bytes": f.bytes, "basis": f.basis,
                 **({"note": f.note} if f.note else {})}
                for f in self.figures
            ],
            "reasons": list(self.reasons),
            "fixes": list(self.fixes),
            "also": list(self.also),
            "notes": list(self.notes),
        }


PEAK_REDUCTION_FIXES: tuple[str, ...] = (
    "smaller micro-batch with gradient accumulation to keep the effective batch "
    "(activations shrink in proportion; same optimization except for batch-statistics layers)",
    "activation recomputation (gradient checkpointing): keeps one input per block, about "
    "one extra forward pass of compute",
    "bf16 mixed precision if training in fp32 (halves activations)",
    "an 8-bit optimizer (e.g. bitsandbytes AdamW8bit): Adam state from 8 to 2 bytes/param",
    "ZeRO / FSDP sharding of optimizer state, gradients and parameters across GPUs",
    "CPU offload of optimizer state or parameters (slower steps)",
)
"""The usual peak reductions, in the order to try them; ``trainmedic memory plan`` sizes each."""


_VERDICT_OF: dict[str, Verdict] = {
    "memory_cap": "memory_cap", "huge_certain": "single_huge_allocation",
    "huge_hypothesis": "single_huge_allocation", "fragmentation": "fragmentation",
    "free_but_refused": "free_but_refused", "other_process": "other_process",
    "genuinely_full": "genuinely_full"}


def _segment_bytes(requested: int) -> int:
    """Bytes the caching allocator asks the driver for when no cached block fits a request.

    CUDACachingAllocator.cpp ``get_allocation_size``: requests up to 1 MiB (kSmallSize) get a
    2 MiB segment (kSmallBuffer), up to 10 MiB (kMinLargeAlloc) a 20 MiB one (kLargeBuffer),
    larger ones are rounded up to 2 MiB (kRoundLarge).
    """
    if requested <= 2**20:
        return 2 * 2**20
    if requested < 10 * 2**20:
        return 20 * 2**20
    return -(-requested // (2 * 2**20)) * (2 * 2**20)


def _print_slack(value: int) -> int:
    """Half a unit of the last printed digit of ``value`` (format_size prints 2 decimals)."""
    for scale in (2**40, 2**30, 2**20, 2**10):
        if value > scale:
            return scale // 200
    return 0


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.0f}%" if whole else "n/a"


def _conf_var(report: OomReport) -> str:
    if report.alloc_conf_var:
        return report.alloc_conf_var
    return "PYTORCH_HIP_ALLOC_CONF" if report.backend == "HIP" else "PYTORCH_CUDA_ALLOC_CONF"


def _split_processes(report: OomReport) -> tuple[ProcessMemory | None, tuple[ProcessMemory, ...]]:
    """(the listed process that is probably this one, the others).

    Inside a container NVML reports host PIDs, so PyTorch cannot match its own process and
    lists it as ``Process N``; a listed process holding at least what PyTorch reserved, when
    the message has no "this process" clause, is taken to be this process (a hypothesis).
    """
    procs = report.processes
    if report.this_process_bytes is not None or not procs or not report.reserved_bytes:
        return None, procs
    candidates = [p for p in procs if p.used_bytes >= report.reserved_bytes]
    if not candidates:
        return None, procs
    me = min(candidates, key=lambda p: p.used_bytes)
    return me, tuple(p for p in procs if p is not me)


def explain_oom(report: OomReport) -> OomExplanation:
    """The verdict on one OOM report: fragmentation, another process, a memory cap, one huge
    allocation, a device that is simply full, or free memory the driver would not give.

    Pure: reads only ``report``. The thresholds (a request of >= 25% of the device is "huge";
    1 GiB of non-PyTorch memory per process is normal) are stated in the reasons they decide.
    """
    figures: list[Figure] = []
    reasons: list[str] = []
    notes: list[str] = []
    also: list[Verdict] = []

    def fig(name: str, value: int | None, basis: Basis | None, note: str = "") -> None:
        if value is not None:
            figures.append(Figure(name=name, bytes=int(value), basis=basis or "estimated",
                                  note=note))

    b = report.basis
    req, total, free = report.requested_bytes, report.total_bytes, report.free_bytes
    alloc, reserved = report.allocated_bytes, report.reserved_bytes
    unalloc, cap = report.reserved_unallocated_bytes, report.allowed_bytes
    fig("requested", req, b.get("requested_bytes"))
    fig("total_capacity", total, b.get("total_bytes"))
    fig("free_on_device", free, b.get("free_bytes"))
    fig("allowed_cap", cap, b.get("allowed_bytes"))
    fig("allocated_by_pytorch", alloc, b.get("allocated_bytes"))
    fig("reserved_by_pytorch", reserved, b.get("reserved_bytes"),
        "allocated + reserved-but-unallocated" if b.get("reserved_bytes") == "estimated" else "")
    fig("reserved_unallocated", unalloc, b.get("reserved_unallocated_bytes"),
        "reserved - allocated" if b.get("reserved_unallocated_bytes") == "estimated" else "")
    fig("private_pools", report.private_pool_bytes, b.get("private_pool_bytes"))
    fig("this_process_total", report.this_process_bytes, b.get("this_process_bytes"))

    me, others = _split_processes(report)
    if me is not None:
        notes.append(
            f"Process {me.pid} holds {format_bytes(me.used_bytes)}, at least the "
            f"{format_bytes(reserved or 0)} PyTorch reserved, and the message has no 'this "
            f"process' clause: most likely it is this process under a container's PID "
            f"namespace (hypothesis)"
        )
    for p in others:
        fig(f"process_{p.pid}", p.used_bytes, "measured")
    this_total = report.this_process_bytes
    if this_total is None and me is not None:
        this_total = me.used_bytes
    outside: int | None = None
    if total is not None and free is not None and reserved is not None:
        outside = max(0, total - free - reserved)
        fig("held_outside_pytorch", outside, "estimated",
            "total - free - reserved: other processes, CUDA context, non-PyTorch allocations")
    if this_total is not None and reserved is not None:
        fig("this_process_non_pytorch", max(0, this_total - reserved), "estimated",
            "this process's total - reserved (CUDA context, cuBLAS/NCCL workspaces)")
    if report.occurrences > 1:
        notes.append(
            f"{report.occurrences} OOM messages in the text ({report.distinct_messages} "
            f"distinct); explained: the last one with figures, at line {report.line}"
        )
    if report.location:
        notes.append(f"failing line: {report.location}")

    if req is None:
        summary = ("an allocation outside PyTorch's caching allocator failed (the message "
                   "carries no figures)")
        reasons.append(
            f"'{report.message[:60]}' is raised by a CUDA/library call (context creation, "
            f"cuBLAS/cuDNN workspace, NCCL buffers), not by the caching allocator"
        )
        return OomExplanation(
            verdict="unknown", summary=summary, figures=tuple(figures), reasons=tuple(reasons),
            fixes=("check nvidia-smi for other processes on the device",
                   "rerun with CUDA_LAUNCH_BLOCKING=1 to find the failing call",
                   "the device is usually already near full: see `trainmedic memory plan`",
                   *PEAK_REDUCTION_FIXES),
            notes=tuple(notes))

    notes.append("message figures are printed to 2 decimals: each is within half a unit of "
                 "its last digit")
    conf = _conf_var(report)
    shortfall = req - (free or 0)
    others_bytes = sum(p.used_bytes for p in others)
    pids = ", ".join(f"{p.pid} ({format_bytes(p.used_bytes)})" for p in others)
    limit = cap if cap is not None else total
    # Every cause the figures support; the first in _PRIORITY is the verdict, the rest "also".
    found: dict[str, tuple[str, list[str], str]] = {}
    segment = _segment_bytes(req)
    if cap is not None and reserved is not None and reserved + segment > cap - _print_slack(cap):
        found["memory_cap"] = (
            f"PyTorch is capped at {format_bytes(cap)} (set_per_process_memory_fraction): "
            f"reserved {format_bytes(reserved)} + the {format_bytes(segment)} segment a "
            f"{format_bytes(req)} request needs (estimated) reaches the cap, with "
            f"{format_bytes(free or 0)} still free on the device",
            ["raise or remove torch.cuda.set_per_process_memory_fraction"],
            f"the per-process memory cap ({format_bytes(cap)}) is reached")
    huge_reason = (
        f"one request of {format_bytes(req)} is {_pct(req, total or 0)} of the device: a single "
        f"tensor this large is usually the LM logits (batch x seq x vocab x 4 bytes in fp32) "
        f"or eager attention scores (batch x heads x seq^2 x 2 bytes) (hypothesis: the failing "
        f"line tells)")
    huge_fixes = [
        "shrink or chunk that one tensor: chunked/fused cross-entropy for logits, SDPA/flash "
        "attention instead of eager (no seq^2 scores), a smaller batch or sequence",
        "check the shapes: a request near or above the device size is often a bug "
        "(broadcast, wrong dimension)"]
    if limit is not None and req > limit:
        found["huge_certain"] = (
            f"requested {format_bytes(req)} > {'allowed' if cap else 'total'} "
            f"{format_bytes(limit)}: no freeing can make room for it; " + huge_reason,
            huge_fixes, f"one allocation of {format_bytes(req)} is larger than the device")
    elif total is not None and req >= _HUGE_FRACTION * total:
        found["huge_hypothesis"] = (
            huge_reason, huge_fixes,
            f"one allocation of {format_bytes(req)} does not fit next to the rest")
    covers = unalloc is not None and (unalloc >= req or (
        free is not None and unalloc + free >= req and 2 * unalloc >= req))
    material = bool(unalloc and reserved and unalloc >= _FRAG_MATERIAL_FRACTION * reserved)
    if covers and not material:
        notes.append(
            f"reserved-but-unallocated {format_bytes(unalloc or 0)} would cover the request but "
            f"is under {_FRAG_MATERIAL_FRACTION:.0%} of reserved: defragmenting would only "
            f"delay the next OOM")
    if covers and material and unalloc is not None:
        legacy = report.message_format.startswith("allocator-legacy")
        found["fragmentation"] = (
            f"reserved-but-unallocated {format_bytes(unalloc)}"
            + (f" + free {format_bytes(free or 0)}" if unalloc < req else "")
            + f" >= requested {format_bytes(req)}: PyTorch holds the memory, but no free block "
            f"is large enough (what is cached after the OOM retry lies in segments that still "
            f"hold live tensors, or in the small-allocation pool)",
            [f"set {conf}=max_split_size_mb:<N> (N a little below your large allocations, "
             f"e.g. 512): blocks above N MiB are never split, so large free blocks stay whole; "
             f"torch >= 2.1 offers expandable_segments:True instead" if legacy else
             f"set {conf}=expandable_segments:True: the allocator then grows one mapped "
             f"segment instead of cudaMalloc'ing separate ones, so the free tail of a segment "
             f"can serve a larger request and split blocks stop stranding memory",
             "keep tensor shapes steady (pad or bucket sequence lengths) so freed blocks fit "
             "the next request",
             "torch.cuda.empty_cache() does not help: the cached memory sits in segments that "
             "hold live tensors"],
            f"fragmentation: {format_bytes(unalloc)} reserved but unallocated, "
            f"{format_bytes(req)} requested")
    if free is not None and free >= req:
        found["free_but_refused"] = (
            f"the driver reports {format_bytes(free)} free >= requested {format_bytes(req)}, "
            f"yet the allocation failed",
            ["look for a limit outside PyTorch: a vGPU/HAMi or MIG slice, a container or WSL "
             "(WDDM) memory limit",
             "look for another process allocating at the same moment (nvidia-smi during the "
             "run)"],
            f"{format_bytes(free)} free on the device, yet {format_bytes(req)} was refused")
    if shortfall > 0 and others_bytes >= shortfall:
        found["other_process"] = (
            f"other processes hold {format_bytes(others_bytes)} ({pids}); free "
            f"{format_bytes(free or 0)} + theirs >= requested {format_bytes(req)}: without them "
            f"the allocation would fit",
            [f"stop or move the other processes ({pids}), or use another GPU "
             f"(CUDA_VISIBLE_DEVICES)",
             "check for leftovers of earlier runs and several ranks on one GPU (LOCAL_RANK)"],
            f"other processes hold {format_bytes(others_bytes)} of the device")
    elif not report.processes and outside is not None:
        # No NVML process list (old format, ROCm, WSL): what is neither free nor PyTorch's,
        # beyond a normal context, is held by someone else.
        excess = outside - _CONTEXT_ALLOWANCE_BYTES
        if shortfall > 0 and excess >= shortfall:
            found["other_process"] = (
                f"total - free - reserved = {format_bytes(outside)} is held outside PyTorch's "
                f"allocator; beyond a 1 GiB allowance for the CUDA context that is "
                f"{format_bytes(excess)} >= the {format_bytes(shortfall)} missing: another "
                f"process (or, on a shared-memory APU, the system) holds it",
                ["find who holds the memory (nvidia-smi / rocm-smi); stop it or use another GPU"],
                f"about {format_bytes(excess)} is held outside PyTorch")
    too_big = limit is not None and req > limit
    if not found or (set(found) <= {"huge_hypothesis"} and not too_big):
        found.setdefault("genuinely_full", (
            f"requested {format_bytes(req)} > free {format_bytes(free or 0)}"
            + (f" + reserved-but-unallocated {format_bytes(unalloc)}" if unalloc else "")
            + (f"; PyTorch's tensors hold {format_bytes(alloc)} ({_pct(alloc, total or 0)} of "
               f"the device)" if alloc is not None else ""),
            ["run `trainmedic memory plan` to see which category fills the device and the "
             "smallest change that fits"],
            "the device is full: the peak must come down"))
    dominant = total is not None and others_bytes >= _DOMINANT_FRACTION * total
    order = _PRIORITY_DOMINANT_OTHERS if dominant else _PRIORITY
    ranked = [k for k in order if k in found]
    reason, fixes, summary = found[ranked[0]]
    verdict = _VERDICT_OF[ranked[0]]
    reasons.append(reason)
    fixes_list = list(fixes)
    for key in ranked[1:]:
        reasons.append(f"also {_VERDICT_OF[key]}: {found[key][0]}")
        also.append(_VERDICT_OF[key])
    if verdict not in ("free_but_refused", "fragmentation") or "genuinely_full" in found:
        fixes_list += [f for f in PEAK_REDUCTION_FIXES if f not in fixes_list]
    if this_total is not None and reserved is not None \
            and this_total - reserved > _CONTEXT_ALLOWANCE_BYTES:
        reasons.append(
            f"this process holds {format_bytes(this_total - reserved)} outside PyTorch's "
            f"allocator (beyond a 1 GiB context allowance that is another library in the same "
            f"process: TensorRT, CTranslate2, cupy, NCCL buffers)")
    if verdict != "fragmentation" and "fragmentation" not in found and unalloc and reserved \
            and unalloc >= 0.2 * reserved:
        also.append("fragmentation")
        reasons.append(f"reserved-but-unallocated is {_pct(unalloc, reserved)} of reserved: "
                       f"fragmentation contributes")
    return OomExplanation(verdict=verdict, summary=summary, figures=tuple(figures),
                          reasons=tuple(reasons), fixes=tuple(fixes_list), also=tuple(also),
                          notes=tuple(notes))


def explain_oom_file(path: str | Path, *, device: int | None = None,
                     ) -> tuple[OomSource, OomExplanation]:
    """Explain the OOM in a file: a log holding an OOM message (the last one is explained) or
    a ``torch.cuda.memory._dump_snapshot`` pickle (``device``: which GPU of it).

    Returns which of the two the file was, and the explanation. Raises
    :class:`UnreadableInputError` when the file cannot be opened (or the snapshot read), and
    :class:`UnrecognizedInputError` when a log holds no OOM message.
    """
    file = Path(path)
    try:
        with file.open("rb") as stream:
            head = stream.read(2)
    except OSError as exc:
        raise UnreadableInputError(str(path), f"cannot open ({exc.strerror}); expected a log "
                                   "with a CUDA OOM message or a memory snapshot") from exc
    # A snapshot is a pickle: protocol 2+ starts with 0x80; older protocols are text, so the
    # file name decides for them.
    if head[:1] == b"\x80" or file.suffix.lower() in (".pickle", ".pkl", ".pk"):
        # Imported here: snapshot builds on this module's types.
        from trainmedic.memory.snapshot import explain_snapshot, read_snapshot, summarize_snapshot

        summary = summarize_snapshot(read_snapshot(file), path=str(path))
        return "snapshot", explain_snapshot(summary, device=device)
    report = parse_oom(file.read_text(encoding="utf-8", errors="replace"))
    if report is None:
        raise UnrecognizedInputError(
            str(path), "no out-of-memory message found; expected a log or traceback with "
            "'CUDA out of memory' (or a torch.cuda.memory._dump_snapshot pickle)")
    return "message", explain_oom(report)
