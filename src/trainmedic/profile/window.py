"""Capture a short profiling window of a recipe's training: the raw, measured material.

:func:`capture` runs the recipe through its own loop (``RecipeRunner``): ``warmup`` steps
unprofiled (allocator, autotuning, loader workers start up), then ``3 * steps`` steps in
cycles of three: one that settles after the profiler stopped, one timed, one profiled
(torch.profiler's schedule: wait two, record one). A timed
step is measured on perf_counter, part by part (the runner marks ``data``, ``forward``,
``backward`` and ``optimizer``); a profiled step records every op under a ``record_function``
range per part. Alternating, not one pass after the other, lets both see the same machine: a
collective or a loader whose time swings from step to step swings alike in both. Python's
garbage collections are timed through ``gc.callbacks``. One more step runs outside the
profiler under a dispatch mode that records where each tensor value read on the host
(``aten::_local_scalar_dense``: an ``.item()``, ``float(t)``, ``if t:``) was called from.
Nothing here interprets the numbers: :mod:`trainmedic.profile.breakdown` does, as a pure
function of the :class:`Window`.

Times are seconds: perf_counter for the timed steps and GC pauses; the profiler's clock, each
recording cycle 10,000 s after the previous one, for the profiled steps, ops and kernels.
"""

from __future__ import annotations

import contextlib
import os
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainmedic.errors import ConfigError
from trainmedic.live.step_probe import GcClock

if TYPE_CHECKING:
    from trainmedic.recipe.recipe import Recipe

__all__ = ["WindowConfig", "Window", "OpEvent", "Span", "capture", "RANGE_PREFIX", "PHASES"]

#: Prefix of the ranges this module opens (they are not ops).
RANGE_PREFIX = "trainmedic::"
#: The parts of a step the runner marks, in order.
PHASES = ("data", "forward", "backward", "optimizer")


@dataclass(kw_only=True, frozen=True)
class WindowConfig:
    """How long a window to capture."""

    steps: int = 8
    """Optimizer steps profiled (>= 1). Short on purpose: a window, not a run."""

    warmup: int = 3
    """Steps run first, unprofiled (>= 0): loader workers, allocator and autotuners settle."""

    attribute_syncs: bool = True
    """Run one extra step to record the call site of every host-device sync."""

    trace_path: str | None = None
    """Also write the profiler's Chrome trace here (open it in Perfetto / chrome://tracing,
    or give it to Holistic Trace Analysis); ``None``: none written."""

    def __post_init__(self) -> None:
        for name, lo in (("steps", 1), ("warmup", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ConfigError(f"{name} must be an integer >= {lo}, got {v!r}")


@dataclass(frozen=True)
class Span:
    """A named interval (a step, a part of one, a GC pause)."""

    name: str
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class OpEvent:
    """One top-level op (not nested in another op) the profiler saw on the host."""

    name: str
    start_s: float
    end_s: float
    thread: int
    main_thread: bool
    """Ran on the thread that ran the step (others: autograd or communication threads)."""


@dataclass(kw_only=True)
class Window:
    """What one :func:`capture` measured."""

    timed_steps: list[Span] = field(default_factory=list)
    """Each timed step (the profiler waiting), on perf_counter: the true step times."""

    timed_phases: list[Span] = field(default_factory=list)
    """The parts of those steps (``PHASES``), on perf_counter; grad_accum > 1 repeats
    data, forward and backward within a step."""

    steps: list[Span] = field(default_factory=list)
    """Each profiled step, on the profiler's clock (slower than the timed steps by the
    profiler's own cost)."""

    phases: list[Span] = field(default_factory=list)
    """Each part of each step (``PHASES``), as many as the step ran (grad_accum > 1 repeats
    data, forward and backward)."""

    ops: list[OpEvent] = field(default_factory=list)
    """Top-level host ops in the window."""

    device_busy: list[Span] = field(default_factory=list)
    """Kernels that ran on an accelerator (empty on CPU)."""

    timed_gc_s: list[float] = field(default_factory=list)
    """Seconds of Python garbage collection in each timed step (as ``timed_steps``)."""

    sync_sites: dict[str, int] = field(default_factory=dict)
    """Tensor values read on the host in one step (``.item()``, ``float(t)``, ``if t:``), by
    the user call site ("train.py:88 in loss_fn"); reads inside torch's and trainmedic's own
    code are left out."""

    sync_device_reads: int = 0
    """Of those, the reads of a tensor on an accelerator: each one a host-device sync."""

    device: str = "cpu"
    """Where the model's parameters live (``cpu``, ``cuda``, ...)."""

    rank: int = 0
    world_size: int = 1
    torch_threads: int = 1
    self_time_s: dict[str, float] = field(default_factory=dict)
    """Self time of every host op over the profiled steps, by op name."""

    top_ops: list[tuple[str, float, int]] = field(default_factory=list)
    """(op name, self time in s over the window, calls), largest first: where time went."""


def _device_of(recipe: Recipe) -> str:
    for p in recipe.model.parameters():
        return str(p.device.type)
    return "cpu"


def capture(recipe: Recipe, config: WindowConfig | None = None, *,
            fetch_batch: Callable[[Callable[[], Any]], Any] | None = None) -> Window:
    """Run ``recipe`` for ``warmup + 3 * steps`` steps (and one attribution step) and return
    the window. ``fetch_batch`` wraps how each batch is drawn (a fault injector, a watcher)."""
    import torch
    from torch.profiler import ProfilerAction, ProfilerActivity, profile, record_function, schedule

    from trainmedic.recipe.runner import RecipeRunner

    cfg = config or WindowConfig()
    runner = RecipeRunner(recipe)
    runner.fetch_batch = fetch_batch
    device = _device_of(recipe)
    window = Window(device=device, torch_threads=torch.get_num_threads())
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        window.rank = torch.distributed.get_rank()
        window.world_size = torch.distributed.get_world_size()

    runner.run(cfg.warmup)
    _sync(device)

    # Timed and profiled steps alternate (torch.profiler's schedule), so both see the same
    # machine: a collective or a loader whose time swings from step to step swings alike in
    # both. A timed step is measured on perf_counter, part by part (a record_function range
    # costs nothing while the profiler waits); a recording step's events are read when its
    # cycle ends.
    clock_phases: list[Span] = []
    recording = False

    @contextlib.contextmanager
    def part(name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            with record_function(RANGE_PREFIX + name):
                yield
        finally:
            if not recording:
                clock_phases.append(Span(name, t0, time.perf_counter()))

    activities = [ProfilerActivity.CPU]
    if device == "cuda" and torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    events = _Events(window)

    def cycle_done(prof: Any) -> None:
        events.read(prof)
        if cfg.trace_path:  # the last cycle's trace stays
            prof.export_chrome_trace(cfg.trace_path)

    runner.phase = part
    gc_clock = GcClock()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*warmup.*")  # one step per cycle: on purpose
        warnings.filterwarnings("ignore", message=".*clears events.*")  # read per cycle
        # wait 2, record 1: the first waiting step after a recording one settles (the
        # profiler has just stopped and parsed its trace, at a different moment on each rank:
        # a collective in that step would wait for the slower rank); the second is timed.
        cycle = schedule(wait=2, warmup=0, active=1, repeat=cfg.steps)
        with profile(activities=activities, schedule=cycle, on_trace_ready=cycle_done) as prof:
            for i in range(3 * cfg.steps):
                recording = cycle(i) != ProfilerAction.NONE
                timed = i % 3 == 1
                mark = len(clock_phases)
                gc_clock.take()
                t0 = time.perf_counter()
                with record_function(f"{RANGE_PREFIX}step"):
                    runner.run(runner.loop.step + 1)
                    _sync(device)
                if timed:
                    window.timed_steps.append(Span("step", t0, time.perf_counter()))
                    window.timed_gc_s.append(gc_clock.take())
                elif not recording:  # a settling step: its parts are not kept
                    del clock_phases[mark:]
                prof.step()
    gc_clock.close()
    runner.phase = None
    window.timed_phases = clock_phases
    events.finish()

    # One more step: where the values read back from tensors were read.
    if cfg.attribute_syncs:
        window.sync_sites, window.sync_device_reads = _sync_sites(runner)
    return window


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


_OP_PREFIXES = ("aten::", "autograd::", "c10d::", "gloo:", "nccl:", "record_param_comms",
                "cuda", "torch::autograd", "_c10d", "ProcessGroup")


def _is_op(name: str) -> bool:
    return name.startswith(_OP_PREFIXES)


class _Events:
    """Reads each recording cycle's profiler events into the window (steps, parts, top-level
    ops, device kernels) and sums each op's self time over the cycles."""

    def __init__(self, window: Window) -> None:
        self.window = window
        self.self_time: dict[str, float] = {}
        self.calls: Counter[str] = Counter()
        self.cycles = 0

    def read(self, prof: Any) -> None:
        window = self.window
        events = list(prof.events())
        # Each cycle's clock starts at its own zero: cycles are set 10,000 s apart, so that
        # an op is only ever matched with the parts of its own step.
        off = self.cycles * 1e4
        self.cycles += 1
        main_thread: int | None = None
        for ev in events:
            name = ev.name
            if not name.startswith(RANGE_PREFIX):
                continue
            span = Span(name[len(RANGE_PREFIX):], off + ev.time_range.start / 1e6,
                        off + ev.time_range.end / 1e6)
            if span.name == "step":
                window.steps.append(span)
                main_thread = ev.thread
            elif span.name in PHASES:
                window.phases.append(span)
        for ev in events:
            name = ev.name
            device_type = str(getattr(ev, "device_type", "")).rsplit(".", 1)[-1]
            if device_type == "CUDA":
                window.device_busy.append(Span(name, off + ev.time_range.start / 1e6,
                                               off + ev.time_range.end / 1e6))
                continue
            if not _is_op(name):
                continue
            self.self_time[name] = self.self_time.get(name, 0.0) + ev.self_cpu_time_total / 1e6
            self.calls[name] += 1
            parent = ev.cpu_parent
            while parent is not None and not _is_op(parent.name):
                parent = parent.cpu_parent
            if parent is None:  # not nested in another op
                window.ops.append(OpEvent(name, off + ev.time_range.start / 1e6,
                                          off + ev.time_range.end / 1e6, ev.thread,
                                          ev.thread == main_thread))

    def finish(self) -> None:
        w = self.window
        w.steps.sort(key=lambda s: s.start_s)
        w.phases.sort(key=lambda s: s.start_s)
        w.ops.sort(key=lambda o: o.start_s)
        w.top_ops = sorted(((n, t, self.calls[n]) for n, t in self.self_time.items()),
                           key=lambda x: -x[1])[:15]
        w.self_time_s = dict(self.self_time)


def _sync_sites(runner: Any) -> tuple[dict[str, int], int]:
    """Run one step under a dispatch mode and count, per user call site, the ops that make
    the host wait for the device (reading a tensor's value)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    sync_ops = {torch.ops.aten._local_scalar_dense.default}
    sites: Counter[str] = Counter()
    device_reads = 0
    here = os.path.dirname(os.path.dirname(__file__))
    torch_dir = os.path.dirname(torch.__file__)

    class SyncSites(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            nonlocal device_reads
            if func in sync_ops:
                site = _user_frame(here, torch_dir)
                if site is not None:
                    sites[site] += 1
                    if args and getattr(args[0], "device", None) is not None \
                            and args[0].device.type != "cpu":
                        device_reads += 1
            return func(*args, **(kwargs or {}))

    with SyncSites():
        runner.run(runner.loop.step + 1)
    return dict(sites.most_common()), device_reads


def _user_frame(ours: str, torch_dir: str) -> str | None:
    """The innermost caller outside torch, as "file.py:line in function"; ``None`` when that
    caller is trainmedic's own loop (reading the step's losses once per run call)."""
    for frame in reversed(traceback.extract_stack()):
        path = frame.filename
        if path == __file__ or path.startswith(torch_dir) or "/torch/" in path:
            continue
        if path.startswith(ours):
            return None
        return f"{os.path.basename(path)}:{frame.lineno} in {frame.name}"
    return None
