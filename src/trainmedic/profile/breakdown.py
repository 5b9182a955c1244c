"""Where a step's time goes: a pure function of a captured :class:`~.window.Window`.

The step time and the time of each part (data, forward, backward, optimizer) come from the
timed steps (perf_counter, no profiler: the profiler's own cost would inflate the ops). Inside
each part, the profiled steps measure the time waited in collectives (exposed communication)
and in host-device syncs, which the profiler does not lengthen, and the time in ops, which it
does (it records each op's entry and exit): the part's extra length under the profiler is taken
off the ops. Python between ops is what remains of the timed part. Garbage-collection pauses
come from ``gc.callbacks`` and are taken out of the host time they happened in.

Bottleneck classes (the largest share of the step names the class):

============  =================================================================================
input         waiting for the next batch (``data``)
communication collectives the step waited on (exposed: not hidden behind compute)
sync          the host waiting for the accelerator to hand back a value (on a GPU only)
host          Python between ops (and GC pauses): launch-bound on a GPU, interpreter-bound on CPU
compute       time in ops, most of it in matmul-class kernels (mm, conv, attention)
memory        time in ops, most of it in elementwise / normalization / copy kernels, whose
              speed is set by memory bandwidth, not FLOPs (an estimate from op names)
============  =================================================================================
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from trainmedic.profile.window import PHASES, OpEvent, Span, Window

__all__ = ["Component", "Breakdown", "break_down", "BOTTLENECKS", "is_comm", "is_sync",
           "is_matmul_class"]

#: Bottleneck classes, in the order the report lists them.
BOTTLENECKS = ("input", "communication", "sync", "host", "compute", "memory")

_COMM_PREFIXES = ("c10d::", "_c10d", "gloo:", "nccl:", "nccl", "record_param_comms",
                  "ProcessGroup")
_COMM_WORDS = ("allreduce", "all_reduce", "allgather", "all_gather", "reduce_scatter",
               "reducescatter", "broadcast", "barrier", "alltoall", "all_to_all")
_SYNC_NAMES = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
               "cudaMemcpy", "hipStreamSynchronize", "hipDeviceSynchronize")
#: Ops that read a device value back to the host (``.item()``, ``if t:``, ``t.nonzero()``).
_VALUE_READS = ("aten::item", "aten::_local_scalar_dense", "aten::is_nonzero",
                "aten::nonzero")
_MATMUL_MARKS = ("mm", "matmul", "linear", "conv", "scaled_dot_product", "attention", "einsum",
                 "gemm", "baddbmm", "addmm", "bmm")


def is_comm(name: str) -> bool:
    """A collective or point-to-point op of torch.distributed (c10d, gloo, NCCL); not an aten
    op whose name only sounds like one (``aten::broadcast_tensors``)."""
    if name.startswith(_COMM_PREFIXES):
        return True
    return not name.startswith("aten::") and any(m in name.lower() for m in _COMM_WORDS)


def is_sync(name: str, device: str) -> bool:
    """An op that makes the host wait for the accelerator. On CPU nothing does."""
    if device == "cpu":
        return False
    return name.startswith(_SYNC_NAMES) or name in _VALUE_READS


def is_matmul_class(name: str) -> bool:
    """Ops whose time is set by FLOPs (matmul, convolution, attention), by name."""
    low = name.lower().removeprefix("aten::")
    return any(m in low for m in _MATMUL_MARKS)


@dataclass(frozen=True)
class Component:
    """One part of the step's time."""

    name: str
    """``data_wait``, ``forward_ops``, ``backward_ops``, ``optimizer_ops``,
    ``exposed_comm``, ``sync``, ``host_python``, ``gc``, ``loop_other``."""

    seconds_per_step: float
    share: float
    """Of the step time (the parts sum to 1 up to rounding)."""

    basis: str
    """``measured`` (timed directly) or ``estimated`` (from the profiled steps, applied
    to the timed part)."""

    note: str = ""


@dataclass(kw_only=True)
class Breakdown:
    """The step, split."""

    step_time_s: float
    """Median timed step (measured)."""

    step_time_min_s: float
    step_time_max_s: float
    steps: int
    profiled_steps: int = 0
    """Steps recorded by the profiler."""

    outlier_steps: int = 0
    """Timed steps outside 0.5-1.5x the median, left out of the split."""

    profiled_step_time_s: float | None
    """Median step under the profiler (its own cost shows as the difference)."""

    components: list[Component] = field(default_factory=list)
    host_by_phase: dict[str, float] = field(default_factory=dict)
    """Host Python seconds per step inside each part (where to look for it)."""

    overlapped_comm_s: float = 0.0
    """Collective time per step on other threads, hidden behind the step (not in the sum)."""

    matmul_share_of_ops: float | None = None
    """Of the time in ops, the share in matmul-class ops (by name; estimated)."""

    device_busy_share: float | None = None
    """Share of the profiled step during which a kernel ran on the accelerator (CUDA only)."""

    bottleneck: str = "compute"
    """One of ``BOTTLENECKS``."""

    bottleneck_evidence: str = ""

    def share(self, name: str) -> float:
        """The share of component ``name`` (0 when absent)."""
        return sum(c.share for c in self.components if c.name == name)


def _clip(a: float, b: float, lo: float, hi: float) -> float:
    return max(0.0, min(b, hi) - max(a, lo))


def _union_within(intervals: Iterable[tuple[float, float]], lo: float, hi: float) -> float:
    pieces = sorted((max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi)
    total, end = 0.0, lo
    for a, b in pieces:
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _phase_split(span: Span, ops: Sequence[OpEvent],
                 device: str) -> tuple[float, float, float, float]:
    """(exposed comm, sync, other ops, overlapped comm) seconds inside one profiled part.

    A collective runs on the backend's own thread (gloo, NCCL's): the step waits on it when
    nothing else runs on the step's thread meanwhile. So exposed communication is the time
    covered by a collective and not by an op on the step's thread; the rest of the
    collective's time was overlapped (hidden behind compute)."""
    comm: list[tuple[float, float]] = []
    main: list[tuple[float, float]] = []
    other: list[tuple[float, float]] = []
    sync = 0.0
    for op in ops:
        if op.end_s <= span.start_s or op.start_s >= span.end_s:
            continue
        # The step's own threads: the one that runs it, and autograd's (backward on a GPU);
        # not a loader's pin-memory thread, whose copies overlap the step.
        stepping = op.main_thread or op.name.startswith("autograd::")
        if is_comm(op.name):
            comm.append((op.start_s, op.end_s))
        elif is_sync(op.name, device) and op.main_thread:
            sync += _clip(op.start_s, op.end_s, span.start_s, span.end_s)
        elif stepping:
            other.append((op.start_s, op.end_s))
            main.append((op.start_s, op.end_s))
    lo, hi = span.start_s, span.end_s
    comm_total = _union_within(comm, lo, hi)
    exposed = _union_within(comm + main, lo, hi) - _union_within(main, lo, hi)
    busy = _union_within(other, lo, hi)
    room = max(0.0, span.duration_s - exposed - sync)
    return exposed, sync, min(busy, room), max(0.0, comm_total - exposed)


def break_down(window: Window) -> Breakdown:
    """Split the window's step into components and name the bottleneck class."""
    all_timed = [s.duration_s for s in window.timed_steps]
    if not all_timed:
        raise ValueError("the window holds no timed step")
    step = statistics.median(all_timed)
    # Steps far off the median (another process took the cores, a one-off stall) would
    # dominate the sums: the split is taken over the typical steps, and the dropped ones are
    # counted. (A recurring stall shows in every window; trainmedic diagnose finds periods.)
    kept = [s for s in window.timed_steps if 0.5 * step <= s.duration_s <= 1.5 * step] \
        or window.timed_steps  # a bimodal window (no step near the median): all of them
    timed = [s.duration_s for s in kept]
    n = len(timed)
    total = sum(timed)
    prof = [s.duration_s for s in window.steps]
    out = Breakdown(step_time_s=step, step_time_min_s=min(all_timed),
                    step_time_max_s=max(all_timed), steps=len(all_timed), outlier_steps=
                    len(all_timed) - n,
                    profiled_step_time_s=statistics.median(prof) if prof else None,
                    profiled_steps=len(prof))

    def in_kept(span: Span) -> bool:
        return any(k.start_s <= span.start_s and span.end_s <= k.end_s for k in kept)

    # Timed part totals (measured), and the profiled parts' inner split.
    timed_part = {p: sum(s.duration_s for s in window.timed_phases
                         if s.name == p and in_kept(s)) for p in PHASES}
    split: dict[str, list[float]] = {p: [0.0, 0.0, 0.0, 0.0] for p in PHASES}
    overlapped = 0.0
    for span in window.phases:
        comm, sync, ops, hidden = _phase_split(span, window.ops, window.device)
        acc = split.setdefault(span.name, [0.0, 0.0, 0.0, 0.0])
        acc[0] += comm
        acc[1] += sync
        acc[2] += ops
        acc[3] += span.duration_s
        overlapped += hidden
    gc_total = sum(g for s, g in zip(window.timed_steps, window.timed_gc_s, strict=False)
                   if s in kept)

    comps: list[Component] = []
    comps.append(Component("data_wait", timed_part["data"] / n, timed_part["data"] / total,
                           "measured", "waiting for the next batch from the loader"))
    comm_s = sync_s = 0.0
    host_total = 0.0
    n_prof = max(1, len(window.steps))
    for p in PHASES[1:]:
        comm, sync, ops, length = (x / n_prof for x in split.get(p, [0.0, 0.0, 0.0, 0.0]))
        t = timed_part[p] / n  # per step, timed
        if length <= 0:
            comps.append(Component(f"{p}_ops", t, t * n / total, "measured"))
            continue
        # Per step. Waiting (in a collective, for the device) takes as long under the
        # profiler; its own cost lands in the ops it records (their enter and exit), so the
        # part's extra length under the profiler comes off the ops, and the Python between
        # ops is what remains of the timed part.
        c = min(comm, t)
        y = min(sync, t - c)
        room = t - c - y
        ops_t = min(max(0.0, ops - max(0.0, length - t)), room)
        host = room - ops_t
        comm_s += c * n
        sync_s += y * n
        out.host_by_phase[p] = host
        host_total += host * n
        comps.append(Component(f"{p}_ops", ops_t, ops_t * n / total, "estimated",
                               "time inside torch ops"))
    gc_in_host = min(gc_total, host_total)
    comps.append(Component("exposed_comm", comm_s / n, comm_s / total, "estimated",
                           "collectives the step waited on"))
    comps.append(Component("sync", sync_s / n, sync_s / total, "estimated",
                           "host waiting on the accelerator for a value"))
    comps.append(Component("host_python", (host_total - gc_in_host) / n,
                           (host_total - gc_in_host) / total, "estimated",
                           "Python between ops (interpreter, launch overhead)"))
    comps.append(Component("gc", gc_in_host / n, gc_in_host / total, "measured",
                           "garbage-collection pauses (gc.callbacks)"))
    other = max(0.0, total - sum(timed_part.values()))
    if window.device == "cpu":
        comps.append(Component("loop_other", other / n, other / total, "measured",
                               "the loop between parts (bookkeeping, scheduler, hooks)"))
    else:  # the step ends with a sync: the host waits there for the work it queued
        comps.append(Component("device_wait", other / n, other / total, "measured",
                               "the step's end: waiting for the accelerator to finish the "
                               "queued work (and the loop's bookkeeping)"))
    out.components = comps

    out.overlapped_comm_s = overlapped / max(1, len(window.steps))
    # Over every op (not only the top ones), CUDA runtime calls (launches, syncs) left out.
    times = window.self_time_s or {n: t for n, t, _ in window.top_ops}
    op_times = {n: t for n, t in times.items() if not n.startswith("cuda")}
    op_time = sum(op_times.values())
    mm_time = sum(t for n, t in op_times.items() if is_matmul_class(n))
    if op_time > 0:
        out.matmul_share_of_ops = mm_time / op_time
    if window.device_busy and window.steps:
        busy = sum(_union_within(((k.start_s, k.end_s) for k in window.device_busy),
                                 s.start_s, s.end_s) for s in window.steps)
        out.device_busy_share = busy / sum(s.duration_s for s in window.steps)
    out.bottleneck, out.bottleneck_evidence = _classify(out)
    return out


def _classify(b: Breakdown) -> tuple[str, str]:
    ops = sum(c.share for c in b.components if c.name.endswith("_ops")
              or c.name == "device_wait")
    host = b.share("host_python") + b.share("gc") + b.share("loop_other")
    shares = {"input": b.share("data_wait"), "communication": b.share("exposed_comm"),
              "sync": b.share("sync"), "host": host, "ops": ops}
    if b.device_busy_share is not None and b.device_busy_share < 0.5 and shares["ops"] > 0:
        # On a GPU, host-side op time is launch time while the device sits idle.
        shares["host"] += shares.pop("ops")
    top = max(shares, key=lambda k: shares[k])
    pct = f"{shares[top]:.0%} of the step"
    if top == "input":
        return "input", f"{pct} waits for the next batch"
    if top == "communication":
        return "communication", f"{pct} waits in collectives"
    if top == "sync":
        return "sync", f"{pct} waits for the accelerator to hand back values"
    if top == "host":
        extra = (f"; the accelerator is busy {b.device_busy_share:.0%} of the step"
                 if b.device_busy_share is not None else "")
        return "host", f"{pct} is Python between ops (and GC){extra}"
    mm = b.matmul_share_of_ops
    if mm is not None and mm < 0.5:
        return "memory", (f"{pct} is in ops, {1 - mm:.0%} of that in elementwise, norm and "
                          "copy ops (bandwidth-bound by their names; estimated)")
    mm_text = f", {mm:.0%} of that in matmul-class ops" if mm is not None else ""
    return "compute", f"{pct} is in ops{mm_text}"
