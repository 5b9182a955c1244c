"""The minimal live watcher: per-step telemetry of a PyTorch loop into the run store.

>>> from trainmedic.watch import watch                              # doctest: +SKIP
>>> with watch(model, optimizer, run_dir="runs/exp1") as w:
...     for x, y in w.wrap_loader(loader):      # times the wait for each batch
...         optimizer.zero_grad()
...         loss = loss_fn(model(x), y)
...         loss.backward()
...         optimizer.step()                     # the grad norm is taken just before this
...         w.step(loss, batch_size=len(x))
...     w.log({"val_loss": evaluate(model)})     # any other metric, at the current step

Per step it records ``loss``, ``lr`` (``optimizer.param_groups[0]["lr"]``), ``grad_norm``
(global L2 norm over the model's gradients, taken in an optimizer step pre-hook, i.e. after
backward and after any clipping: pass ``grad_norm=`` the value ``clip_grad_norm_`` returns to
record the pre-clip norm), ``step_time_s`` (wall time of the step: from the request for its
first batch when the loader is wrapped, else from the previous ``step()`` call, to this
``step()``; evaluation between steps is not counted),
``data_time_s`` (time spent waiting in the wrapped loader during that step), ``rss_mb``, and
on CUDA ``mem_alloc_mb``/``mem_peak_mb``; ``samples_per_s`` when ``batch_size`` is given and
``loss_scale`` when a ``GradScaler`` is given (the scale after this step's ``update()``: it
halves on a step whose gradients overflowed).

No host-device sync per step: values that live on a GPU (loss, grad norm, loss scale) stay
there and are fetched together every ``fetch_every`` steps with one ``tolist()``; on CPU they
are read at once (unless ``fetch_every`` > 1 is asked for). The full watcher (per-layer
stats, NaN guard, callbacks) is a later issue; this class keeps its hooks
(``_on_pre_optimizer_step``, ``_pending``) open for it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from trainmedic.errors import ConfigError
from trainmedic.run.store import RunStore
from trainmedic.watch.host_memory import rss_mb

if TYPE_CHECKING:
    import torch

__all__ = ["Watcher", "TimedLoader", "watch"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
_MB = float(2**20)


class TimedLoader(Generic[T]):
    """Wraps an iterable (a DataLoader) and charges the time spent in ``next()`` to the
    watcher's current step as data wait."""

    def __init__(self, iterable: Iterable[T], watcher: Watcher) -> None:
        self._iterable = iterable
        self._watcher = watcher

    def __iter__(self) -> Iterator[T]:
        it = iter(self._iterable)
        clock = time.perf_counter
        while True:
            t0 = clock()
            self._watcher._batch_requested(t0)
            try:
                item = next(it)
            except StopIteration:
                self._watcher._add_data_wait(clock() - t0)
                return
            self._watcher._add_data_wait(clock() - t0)
            yield item

    def __len__(self) -> int:
        return len(self._iterable)  # type: ignore[arg-type]


class Watcher:
    """Records one training loop's telemetry into a :class:`RunStore`. Use :func:`watch`."""

    def __init__(
        self,
        model: torch.nn.Module | None,
        optimizer: torch.optim.Optimizer | None,
        *,
        run_dir: str | os.PathLike[str],
        rank: int | None = None,
        world_size: int | None = None,
        start_step: int = 0,
        scaler: Any | None = None,
        fetch_every: int | None = None,
        meta: Mapping[str, Any] | None = None,
        flush_rows: int = 512,
        flush_interval_s: float = 1.0,
    ) -> None:
        import torch

        if start_step < 0:
            raise ConfigError(f"start_step must be >= 0, got {start_step}")
        if fetch_every is not None and fetch_every < 1:
            raise ConfigError(f"fetch_every must be >= 1, got {fetch_every}")
        self._torch = torch
        self.model = model
        self.optimizer = optimizer
        self.scaler = scaler
        if rank is None and torch.distributed.is_available() and torch.distributed.is_initialized():
            rank = torch.distributed.get_rank()
            world_size = torch.distributed.get_world_size()
            if world_size == 1:
                rank = None
        self._params = self._collect_params()
        self._device = self._params[0].device if self._params else torch.device("cpu")
        self._cuda = self._device.type == "cuda"
        # On CPU a value is read as soon as it exists; on an accelerator it waits for a batch.
        self.fetch_every = fetch_every if fetch_every is not None else (50 if self._cuda else 1)
        self.store = RunStore(run_dir, rank=rank, world_size=world_size, meta=meta,
                              flush_rows=flush_rows, flush_interval_s=flush_interval_s)
        self.run_dir = self.store.run_dir
        self._step = int(start_step)
        self._data_wait_s = 0.0
        self._t_last = time.perf_counter()
        self._t_request: float | None = None
        self._grad_norm_now: torch.Tensor | None = None
        self._pending: list[tuple[int, dict[str, torch.Tensor]]] = []
        self._hook = None
        self._closed = False
        if optimizer is not None and hasattr(optimizer, "register_step_pre_hook"):
            self._hook = optimizer.register_step_pre_hook(self._on_pre_optimizer_step)
        if self._cuda:
            torch.cuda.reset_peak_memory_stats(self._device)

    # -- public API -------------------------------------------------------------------
    @property
    def current_step(self) -> int:
        """The step the next :meth:`step` call records (``log`` uses the last one)."""
        return self._step

    def wrap_loader(self, iterable: Iterable[T]) -> TimedLoader[T]:
        """Iterate ``iterable`` through this to record ``data_time_s`` per step."""
        return TimedLoader(iterable, self)

    def step(self, loss: Any, *, batch_size: int | None = None,
             grad_norm: Any | None = None, step: int | None = None,
             **extra: Any) -> None:
        """Close one optimizer step: record its loss and the telemetry gathered during it.

        ``loss`` may be a tensor (detached here, never kept with its graph) or a number.
        ``step`` overrides the internal counter (e.g. after a resume); ``extra`` records more
        scalars for this step under their own names.
        """
        if self._closed:
            return
        torch = self._torch
        now = time.perf_counter()
        start = self._t_request if self._t_request is not None else self._t_last
        step_time_s = now - start
        self._t_last = now
        self._t_request = None
        if step is not None:
            self._step = int(step)
        s = self._step
        host: dict[str, float | None] = {
            "step_time_s": step_time_s,
            "data_time_s": self._data_wait_s,
            "rss_mb": rss_mb(),
        }
        self._data_wait_s = 0.0
        if batch_size is not None and step_time_s > 0:
            host["samples_per_s"] = batch_size / step_time_s
        lr = self._lr()
        device: dict[str, Any] = {}
        if lr is not None:
            if isinstance(lr, torch.Tensor) and self._defers(lr):
                device["lr"] = lr.detach().reshape(())
            else:
                host["lr"] = float(lr)
        if grad_norm is None:
            gn = self._grad_norm_now if self._grad_norm_now is not None else self._grad_norm()
        else:
            gn = grad_norm
        self._grad_norm_now = None
        for name, value in (("loss", loss), ("grad_norm", gn), *extra.items()):
            if value is None:
                continue
            if isinstance(value, torch.Tensor):
                if not self._defers(value):
                    host[name] = value.detach().item()  # no device to wait for
                else:
                    device[name] = value.detach().reshape(())
            else:
                host[name] = float(value)
        if self.scaler is not None:
            scale = getattr(self.scaler, "_scale", None)
            if isinstance(scale, torch.Tensor) and not self._defers(scale):
                host["loss_scale"] = scale.item()
            elif isinstance(scale, torch.Tensor):
                device["loss_scale"] = scale.detach().reshape(()).clone()
            elif self.scaler.is_enabled():
                host["loss_scale"] = float(self.scaler.get_scale())
        if self._cuda:
            host["mem_alloc_mb"] = torch.cuda.memory_allocated(self._device) / _MB
            host["mem_peak_mb"] = torch.cuda.max_memory_allocated(self._device) / _MB
        self.store.log(s, host)
        if device:
            self._pending.append((s, device))
            if len(self._pending) >= self.fetch_every:
                self._fetch()
        self._step = s + 1

    def log(self, metrics: Mapping[str, Any], *, step: int | None = None) -> None:
        """Record other scalars (``val_loss``, ...) at ``step`` (default: the last step)."""
        if self._closed:
            return
        s = max(self._step - 1, 0) if step is None else int(step)
        torch = self._torch
        host = {k: float(v) for k, v in metrics.items()
                if not isinstance(v, torch.Tensor) or not self._defers(v)}
        dev = {k: v.detach().reshape(()) for k, v in metrics.items()
               if isinstance(v, torch.Tensor) and self._defers(v)}
        if host:
            self.store.log(s, host)
        if dev:
            self._pending.append((s, dev))
            if len(self._pending) >= self.fetch_every:
                self._fetch()

    def close(self) -> None:
        """Fetch what is pending, remove the hook, close the store. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._fetch()
        finally:
            if self._hook is not None:
                self._hook.remove()
            self.store.close()

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------
    def _collect_params(self) -> list[torch.Tensor]:
        if self.model is not None:
            return [p for p in self.model.parameters() if p.requires_grad]
        if self.optimizer is not None:
            return [p for g in self.optimizer.param_groups for p in g["params"]]
        return []

    def _defers(self, value: Any) -> bool:
        """Hold a tensor for the batched fetch (an accelerator tensor, or ``fetch_every > 1``)
        rather than reading it now (a CPU tensor: ``item()`` costs no sync)."""
        return bool(value.device.type != "cpu" or self.fetch_every > 1)

    def _batch_requested(self, t: float) -> None:
        # The step starts when its first batch is asked for, so work done between steps
        # (evaluation, logging, a checkpoint save after step()) is not charged to a step.
        if self._t_request is None:
            self._t_request = t

    def _add_data_wait(self, seconds: float) -> None:
        self._data_wait_s += seconds

    def _lr(self) -> Any:
        if self.optimizer is None or not self.optimizer.param_groups:
            return None
        return self.optimizer.param_groups[0].get("lr")

    def _on_pre_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        # After backward (and after any clipping), before the update changes anything.
        self._grad_norm_now = self._grad_norm()

    def _grad_norm(self) -> torch.Tensor | None:
        torch = self._torch
        grads = [p.grad for p in self._params if p.grad is not None and not p.grad.is_sparse]
        if not grads:
            return None
        with torch.no_grad():
            try:
                norms = torch._foreach_norm(grads)  # one fused kernel per device and dtype
            except (AttributeError, RuntimeError):
                norms = [torch.linalg.vector_norm(g) for g in grads]
            dev = norms[0].device
            if any(n.device != dev or n.dtype != torch.float32 for n in norms):
                norms = [n.to(dev, torch.float32) for n in norms]  # mixed devices/dtypes
            return torch.linalg.vector_norm(torch.stack(norms))

    def _fetch(self) -> None:
        """Bring pending device values to the host with one transfer and record them."""
        if not self._pending:
            return
        torch = self._torch
        pending, self._pending = self._pending, []
        first = next(iter(pending[0][1].values()))
        flat = [v.to(first.device, torch.float64) for _, d in pending for v in d.values()]
        values = torch.stack(flat).tolist()
        i = 0
        for s, d in pending:
            row = {}
            for name in d:
                row[name] = values[i]
                i += 1
            self.store.log(s, row)


def watch(model: torch.nn.Module | None, optimizer: torch.optim.Optimizer | None, *,
          run_dir: str | os.PathLike[str], **kwargs: Any) -> Watcher:
    """Start watching a training loop; use as a context manager (see :class:`Watcher`)."""
    return Watcher(model, optimizer, run_dir=run_dir, **kwargs)
