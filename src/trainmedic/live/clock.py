"""Timing a step's parts without a host-device sync.

On CPU a wall clock read around the work is the time of the work. On CUDA the host returns
from a launch long before the kernel ends, so host clocks time the launches; CUDA events
recorded on the stream time the GPU's work, and their ``elapsed_time`` is read only after the
watcher's batched fetch has synchronized (the events are then complete, so reading them
costs nothing more).

``ForwardClock`` times the training forward passes of one model (forward pre-hook to forward
hook). That is ``compute_time_s``: the compute no collective waits on. Under DDP the gradient
all-reduce runs inside backward and makes every rank wait for the slowest, so backward and
step times are equal across ranks and hide a straggler; the forward is not synchronized
(a DDP model is timed on its inner ``module``, so DDP's own pre-forward work is left out).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    import torch

    from trainmedic.live.watcher import Watcher

__all__ = ["ForwardClock", "TimedLoader", "CallIterator", "EventPair", "elapsed_s"]

T = TypeVar("T")

#: (start, end) CUDA events around one piece of GPU work.
EventPair = tuple[Any, Any]


def elapsed_s(pairs: list[EventPair]) -> float:
    """Seconds between each pair's events, summed. Call only once the events completed."""
    return sum(a.elapsed_time(b) for a, b in pairs) / 1000.0


def _inner_module(model: torch.nn.Module) -> torch.nn.Module:
    """The wrapped module of DDP / DataParallel / FSDP-style wrappers, else the model."""
    inner = getattr(model, "module", None)
    import torch

    return inner if isinstance(inner, torch.nn.Module) else model


class ForwardClock:
    """Sums the duration of training-mode forward passes of ``model`` within one step.

    ``on_forward_start`` (optional) is called at each training forward's start, e.g. to
    capture the RNG state the NaN guard replays with. Forwards under ``torch.no_grad()``
    (evaluation) are not counted.
    """

    def __init__(self, model: torch.nn.Module, *, cuda: bool, timed: bool = True,
                 on_forward_start: Callable[[], None] | None = None) -> None:
        import torch

        self._torch = torch
        self._cuda = cuda
        #: False: only ``on_forward_start`` runs (no timing, no post-hook; take() is None).
        self.timed = timed
        self._on_start = on_forward_start
        # Looked up once: these hooks run at every forward (module attribute lookups on a
        # cold cache cost more than the calls).
        self._grad_enabled = torch.is_grad_enabled
        self._now = time.perf_counter
        self._host_s = 0.0
        self._t0: float | None = None
        self._pairs: list[EventPair] = []
        self._start_event: Any = None
        target = _inner_module(model)
        self._handles = [target.register_forward_pre_hook(self._pre)]
        if timed:
            self._handles.append(target.register_forward_hook(self._post))

    def _pre(self, module: Any, args: Any) -> None:
        if not self._grad_enabled():
            return
        if self._on_start is not None:
            self._on_start()
        if not self.timed:
            return
        if self._cuda:
            ev = self._torch.cuda.Event(enable_timing=True)
            ev.record()
            self._start_event = ev
        else:
            self._t0 = self._now()

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self._cuda:
            if self._start_event is not None and self._grad_enabled():
                end = self._torch.cuda.Event(enable_timing=True)
                end.record()
                self._pairs.append((self._start_event, end))
                self._start_event = None
        elif self._t0 is not None and self._grad_enabled():
            self._host_s += self._now() - self._t0
            self._t0 = None

    def take(self) -> float | list[EventPair] | None:
        """This step's forward time: seconds on CPU, event pairs on CUDA (read them with
        :func:`elapsed_s` after a sync); ``None`` when no training forward ran."""
        if self._cuda:
            pairs, self._pairs = self._pairs, []
            return pairs or None
        s, self._host_s = self._host_s, 0.0
        return s if s > 0 else None

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


class TimedLoader(Generic[T]):
    """Wraps an iterable (a DataLoader) and charges the time spent in ``next()`` to the
    watcher's current step as data wait (``Watcher.wrap_loader`` makes it)."""

    def __init__(self, iterable: Iterable[T], watcher: Watcher) -> None:
        self._iterable = iterable
        self._watcher = watcher

    def __iter__(self) -> Iterator[T]:
        it = iter(self._iterable)
        take = self._watcher._next_batch  # one call per batch: times the wait, reads the RNG
        while True:
            try:
                item = take(it)
            except StopIteration:
                return
            yield item

    def __len__(self) -> int:
        return len(self._iterable)  # type: ignore[arg-type]


class CallIterator(Iterator[T]):
    """An iterator whose ``next()`` calls ``get``: one batch per call
    (``Watcher.fetch_batch`` times a loop that draws its batches by calling)."""

    def __init__(self, get: Callable[[], T]) -> None:
        self._get = get

    def __next__(self) -> T:
        return self._get()
