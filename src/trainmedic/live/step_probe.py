"""What the watcher measures each step beside the loop's own values: the resident set, GC
pauses and, under DDP on CPU, the gradient all-reduce.

* ``rss_mb``: the process's resident set (:func:`~trainmedic.live.host_memory.rss_mb`), read on
  the training thread at most every ``rss_interval_s`` seconds; the steps in between record
  the last reading. Reading ``/proc/self/statm`` costs 15-30 us on a training loop's cold
  caches: once per 50 ms that is under 0.1% of any step, with no thread of its own (a sampling
  thread wakes 20 times a second and must take the GIL from the training thread each time).
  ``rss_interval_s=None`` reads it at every step.
* ``gc_time_s``: seconds Python's garbage collector ran since the previous step, timed by a
  ``gc.callbacks`` hook (called at the start and end of each collection: a few per minute in a
  torch loop, whose tensors are not tracked objects). A long pause shows as a slow step; with
  this series the diagnosis can say so instead of leaving the cause unchecked.
* ``comm_time_s``: under ``DistributedDataParallel`` with gloo (CPU), seconds from each
  gradient bucket's all-reduce launch to its completion, summed over the step, through a DDP
  communication hook that does what DDP does without one (``allreduce_hook``: divide by the
  world size, all-reduce, as the built-in reducer). It overlaps backward, so it is not time
  the step lost; a fast rank's is longer (it waits for the slow one): what the straggler
  detector compares. DDP cannot take a hook off again: it stays on the model after the watcher
  closes (it does what DDP does). A model that already has a comm hook keeps it (no
  ``comm_time_s``); on CUDA the futures complete when the work is queued, not done, so it is
  not recorded there.
* on a GPU, with ``pynvml``: the latest NVML reading (:mod:`~trainmedic.live.gpu_telemetry`).
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

from trainmedic.live.gpu_telemetry import GpuSampler, open_nvml
from trainmedic.live.host_memory import rss_mb

__all__ = ["StepProbe", "GcClock"]

logger = logging.getLogger(__name__)


class GcClock:
    """Seconds Python's garbage collector ran, through a ``gc.callbacks`` hook installed on
    creation; :meth:`take` returns them since the last call; :meth:`close` removes the hook
    (idempotent)."""

    def __init__(self) -> None:
        self._s = 0.0
        self._start: float | None = None
        gc.callbacks.append(self._on_gc)
        self._closed = False

    def take(self) -> float:
        s, self._s = self._s, 0.0
        return s

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        elif self._start is not None:
            self._s += time.perf_counter() - self._start
            self._start = None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                gc.callbacks.remove(self._on_gc)
            except ValueError:
                pass


class StepProbe:
    """The readings of one watcher; :meth:`close` removes the GC hook and stops the GPU
    sampler (idempotent). ``model``: the model the watcher watches (a CPU DDP model gets the
    timing comm hook); ``device``: its CUDA device, sampled every ``gpu_sample_s`` (``None``:
    not sampled)."""

    def __init__(self, rss_interval_s: float | None, model: Any = None, *,
                 device: Any = None, gpu_sample_s: float | None = None) -> None:
        self.rss_interval_s = rss_interval_s
        self._rss = rss_mb()
        self._next_rss = time.perf_counter() + (rss_interval_s or 0.0)
        self._gc = GcClock()
        self._comm_s: float | None = None
        if model is not None:
            self._time_allreduce(model)
        self._gpu: GpuSampler | None = None
        if gpu_sample_s is not None and (opened := open_nvml(device)):
            self._gpu = GpuSampler(*opened, gpu_sample_s)

    def rss(self, now: float) -> float | None:
        """The resident set in MiB, read again when ``rss_interval_s`` has passed since the
        last reading (``now``: a perf_counter reading the caller already took)."""
        if now >= self._next_rss:
            self._rss = rss_mb()
            self._next_rss = now + (self.rss_interval_s or 0.0)
        return self._rss

    def gc_s(self) -> float:
        """Seconds of garbage collection since the last call."""
        return self._gc.take()

    def extras(self) -> dict[str, float | None]:
        """What a step records besides its own values: ``gc_time_s``; ``comm_time_s`` when
        timed; the latest GPU reading when sampled (``gpu_util``, ``gpu_sm_clock_mhz``,
        ``gpu_power_w``, ``gpu_temp_c``, ``gpu_throttle_reasons``)."""
        out: dict[str, float | None] = {"gc_time_s": self.gc_s()}
        if (comm := self.comm_s()) is not None:
            out["comm_time_s"] = comm
        if self._gpu is not None:
            out.update(self._gpu.latest)
        return out

    def comm_s(self) -> float | None:
        """Seconds of gradient all-reduce since the last call; ``None`` when not timed."""
        s = self._comm_s
        if s is not None:
            self._comm_s = 0.0
        return s

    def _time_allreduce(self, model: Any) -> None:
        import torch

        ddp = torch.nn.parallel.DistributedDataParallel
        if not isinstance(model, ddp) or any(p.is_cuda for p in model.parameters()):
            return
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        # No annotations: DDP checks a hook's (they would be strings here, postponed).
        def timed_allreduce(state, bucket):
            t0 = time.perf_counter()

            def done(fut: Any) -> Any:
                self._comm_s = (self._comm_s or 0.0) + time.perf_counter() - t0
                return fut.value()

            return allreduce_hook(state, bucket).then(done)

        try:  # the DDP model's own process group (a subgroup, or the world)
            model.register_comm_hook(model.process_group, timed_allreduce)
        except RuntimeError as exc:  # the user's own hook is there: keep it
            logger.info("no comm_time_s: the DDP model already has a comm hook (%s)", exc)
            return
        self._comm_s = 0.0

    def close(self) -> None:
        if self._gpu is not None:
            self._gpu.close()
        self._gc.close()
