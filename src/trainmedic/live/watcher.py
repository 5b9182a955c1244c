"""The live watcher: per-step telemetry of a PyTorch loop, recorded into the run store.

>>> from trainmedic.live import watch                              # doctest: +SKIP
>>> with watch(model, optimizer, run_dir="runs/exp1", stop_on={"divergence"}) as w:
...     for x, y in w.wrap_loader(loader):      # times the wait for each batch
...         optimizer.zero_grad()
...         loss = loss_fn(model(x), y)
...         loss.backward()
...         optimizer.step()                     # grad norm (and the NaN check) just before it
...         w.step(loss, batch_size=len(x), replay=lambda: loss_fn(model(x), y))
...         if w.should_stop:                    # a live finding in stop_on, or runs/exp1/STOP
...             break
...     w.log({"val_loss": evaluate(model)})     # any other metric, at the current step

What is recorded and how (docs/tour.md, "In your loop"; every option is a field of
:class:`~trainmedic.live.config.WatchConfig`): loss, lr, the global grad norm (in an optimizer
pre-step hook), step and data time, forward time with several ranks, memory, throughput and
the loss scale. No host-device sync per step: GPU values are fetched every ``fetch_every``
steps with one ``tolist()``, except the one flag per step ``nan_policy="skip"``/``"raise"``
reads on an accelerator (default there: ``"record"``). On CPU, rows reach the store and the
alerts in batches of up to 32 steps or half ``flush_interval_s`` (:meth:`Watcher.flush`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from trainmedic.dist.watchdog import watchdog_for_run
from trainmedic.errors import ConfigError
from trainmedic.live.announce import Announcer, recorded_summary
from trainmedic.live.clock import CallIterator, ForwardClock, TimedLoader
from trainmedic.live.config import WatchConfig
from trainmedic.live.inputs import check_loss, check_optimizer_params, trainable_params
from trainmedic.live.norms import GradNorm, clip_grads_with_norm, update_stats
from trainmedic.live.recorder import Recorder, put_step_time, read_now
from trainmedic.live.run_dir import choose_run_dir, stop_file_path
from trainmedic.live.step_guard import StepGuard
from trainmedic.live.step_probe import StepProbe
from trainmedic.run.store import RunStore

if TYPE_CHECKING:
    import torch

__all__ = ["Watcher", "TimedLoader", "watch"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
_MB = float(2**20)
_STOP_FILE_EVERY = 100
#: Rows of the common CPU step are handed to the store and the live alerts this many at a
#: time (or after half the store's flush interval, whichever comes first).
_DRAIN_ROWS = 32


class Watcher:
    """Records one training loop's telemetry into a :class:`RunStore`. Use :func:`watch`.

    ``config`` or the same fields as keyword arguments (see :class:`WatchConfig`);
    ``rank``/``world_size`` default to torch.distributed's (or torchrun's environment);
    ``start_step`` numbers the first step (after a resume); ``scaler`` is a ``GradScaler``.
    A run_dir whose store already holds an earlier run's rows is handled as
    ``if_exists`` says (refused by default) unless ``start_step`` > 0 (a resume continues
    that record; a new run must not interleave).
    """

    def __init__(
        self,
        model: torch.nn.Module | None,
        optimizer: torch.optim.Optimizer | None,
        *,
        run_dir: str | os.PathLike[str],
        config: WatchConfig | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        start_step: int = 0,
        scaler: Any | None = None,
        meta: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        import torch

        if config is not None and options:
            raise ConfigError(f"pass either config= or keyword options, not both (got "
                              f"{sorted(options)} with a config)")
        try:
            cfg = config if config is not None else WatchConfig(**options)
        except TypeError as exc:
            raise ConfigError(f"watch(): {exc}; see trainmedic.live.WatchConfig for the "
                              f"options") from None
        if isinstance(start_step, bool) or not isinstance(start_step, int) or start_step < 0:
            raise ConfigError(f"start_step must be an integer >= 0, got {start_step!r}")
        if model is not None and not isinstance(model, torch.nn.Module):
            raise ConfigError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self._torch = torch
        self.config = cfg
        self.model = model
        self.optimizer = optimizer
        self.scaler = scaler
        if rank is None and torch.distributed.is_available() and torch.distributed.is_initialized():
            rank = torch.distributed.get_rank()
            world_size = torch.distributed.get_world_size()
            if world_size == 1:
                rank = None
        self._params = trainable_params(model, optimizer)
        self._grad_norm = GradNorm(torch, self._params)
        if model is not None and not self._params:
            n = sum(1 for _ in model.parameters())
            raise ConfigError(
                f"watch(): the model has no trainable parameters ({n} parameters, none with "
                f"requires_grad=True); unfreeze some, or pass the module that is trained")
        self._device = self._params[0].device if self._params else torch.device("cpu")
        self._cuda = self._device.type == "cuda"
        self.fetch_every = cfg.fetch_every if cfg.fetch_every is not None else (
            50 if self._cuda else 1)
        policy = cfg.nan_policy
        if policy == "auto":
            policy = "record" if self._device.type != "cpu" else "skip"
        self.nan_policy = policy
        self._meta = dict(meta or {})
        # A new run (start_step 0) on a store that holds a run's rows: cfg.if_exists, decided
        # before the store's meta is touched (the store refuses what is left).
        where = choose_run_dir(run_dir, cfg.if_exists, rank=rank, world_size=world_size,
                               start_step=start_step)
        start_step = where.start_step
        self.store = RunStore(where.path, rank=rank, world_size=world_size, meta=meta,
                              flush_rows=cfg.flush_rows, flush_interval_s=cfg.flush_interval_s,
                              refuse_earlier_run=where.refuse_earlier_run)
        self.run_dir = self.store.run_dir
        try:
            self._setup(start_step)
            self._announcer.start(str(self.run_dir), recorded_summary(
                cfg, cuda=self._cuda, nan_policy=self.nan_policy,
                forward_clock=self._forward is not None and self._forward.timed), where.note)
        except BaseException:
            for h in getattr(self, "_hooks", []):
                h.remove()
            clock, probe = getattr(self, "_forward", None), getattr(self, "_host", None)
            if clock is not None:
                clock.remove()
            if probe is not None:  # its GC hook and GPU thread
                probe.close()
            if (hang := getattr(self, "_hang", None)) is not None:
                hang.close()
            self.store.close()
            raise

    def _setup(self, start_step: int) -> None:
        """Everything after the store is open: hooks, clocks, layer health, live alerts."""
        cfg = self.config
        model, optimizer = self.model, self.optimizer
        self._step = self._first_step = int(start_step)
        self._stored = self.store.enabled
        self._announcer = Announcer(announce=cfg.announce, progress=cfg.progress,
                                    rank=self.store.rank, count_alerts=lambda: len(self.findings))
        self._tick = self._announcer.tick if self._announcer.progress else None
        self._data_wait_s = 0.0
        self._t_last = time.perf_counter()
        self._t_request: float | None = None
        self._grad_norm_now: torch.Tensor | float | None = None
        self._lr_now: Any = None  # the lr optimizer.step() used (a scheduler may move it after)
        # A norm already taken this step (by clip_grad_norm_(), or an integration's callback
        # before the framework clips): the pre-step hook uses it instead of reading every
        # gradient again. _norm_in_hook=False: the hook takes none (Lightning's callback,
        # where the hook runs before the step's backward).
        self._clip_norm: torch.Tensor | float | None = None
        self._norm_in_hook = True
        self._clip_meta_written = False
        self._host_only = (not self._cuda and self.fetch_every == 1
                           and self.scaler is None)
        self._host = StepProbe(cfg.rss_interval_s, model, device=self._device,
                               gpu_sample_s=cfg.gpu_sample_s if self._cuda else None)
        self._hooks: list[Any] = []
        self._closed = False
        self._guard = StepGuard(self.nan_policy, on_accelerator=self._device.type != "cpu",
                                record_event=self._record_event, device=self._device)
        self._rec = Recorder(self._torch, self.store, None, fetch_every=self.fetch_every,
                             drain_rows=_DRAIN_ROWS, drain_s=cfg.flush_interval_s / 2,
                             check_fetched=self._guard.check_fetched, flop_scales=cfg.flop_scales)
        # update_ratio: a copy of the parameters taken before the update on measured steps.
        self._before_update: list[torch.Tensor] | None = None
        self._param_stats: dict[str, Any] = {}
        self._last_step_event: Any = None
        self._stop_reason: str | None = None
        check_optimizer_params(model, optimizer, self.store, self._step)
        if optimizer is not None and hasattr(optimizer, "register_step_pre_hook"):
            self._hooks.append(optimizer.register_step_pre_hook(self._on_pre_optimizer_step))
            self._hooks.append(optimizer.register_step_post_hook(self._on_post_optimizer_step))
        self._forward: ForwardClock | None = None
        #: The guard's RNG state is read as each batch leaves the wrapped loader (wrap_loader)
        #: instead of in a forward pre-hook (see WatchConfig.forward_clock).
        self._rng_at_batch = False
        if model is not None:
            timed = cfg.forward_clock if cfg.forward_clock is not None \
                else self.store.world_size > 1
            guard = self._guard.drops_updates
            if timed or guard:
                self._forward = ForwardClock(
                    model, cuda=self._cuda, timed=timed,
                    on_forward_start=self._guard.capture_rng if guard else None)
        self._param_every = cfg.param_every
        self._layers: Any = None
        self._layers_armed = False
        if cfg.layer_every is not None and model is not None:
            from trainmedic.live.layer_health import LayerHealth

            self._layers = LayerHealth(model, every=cfg.layer_every,
                                       max_modules=cfg.layer_max_modules)
            if self._layers.scheduled(self._step):
                self._layers.arm()
                self._layers_armed = True
        stop_file = stop_file_path(self.run_dir, cfg.stop_file)
        self._stop_file = stop_file
        self._alerts: Any = None
        if cfg.alert_every is not None:
            from trainmedic.live.alerts import start_live_alerts

            self._alerts = start_live_alerts(cfg, self.store, dict(self._meta), stop_file,
                                             start_step)
            self._rec.alerts = self._alerts
        if self._cuda:
            self._torch.cuda.reset_peak_memory_stats(self._device)
        self._hang = watchdog_for_run(cfg.hang, run_dir=self.run_dir, rank=self.store.rank or 0,
                                      world_size=self.store.world_size, store=self.store)

    # -- public API -------------------------------------------------------------------
    @property
    def current_step(self) -> int:
        """The step the next :meth:`step` call records (``log`` uses the last one)."""
        return self._step

    @property
    def should_stop(self) -> bool:
        """True once a live finding in ``stop_on`` or the stop file asked the run to stop."""
        return self._stop_reason is not None

    @property
    def stop_reason(self) -> str | None:
        """Why :attr:`should_stop` is set, or ``None``."""
        return self._stop_reason

    @property
    def findings(self) -> list[Any]:
        """Every live finding raised so far (empty without live alerts)."""
        return list(self._alerts.findings) if self._alerts is not None else []

    def phase(self, name: str) -> contextlib.AbstractContextManager[None]:
        """``with w.phase("eval"):`` (or ``"checkpoint"``): the hang watchdog, when on, allows
        this phase its own, longer limit instead of k x the median step time."""
        return self._hang.phase(name) if self._hang is not None else contextlib.nullcontext()

    def wrap_loader(self, iterable: Iterable[T]) -> TimedLoader[T]:
        """Iterate ``iterable`` through this to record ``data_time_s`` per step. Without the
        forward clock, the NaN guard then reads the RNG state a replay needs (for dropout) as each
        batch arrives: exact unless the loop draws random numbers between batch and forward."""
        self._rng_from_batches()
        return TimedLoader(iterable, self)

    def _rng_from_batches(self) -> None:
        if self._forward is not None and not self._forward.timed and not self._closed:
            self._forward.remove()
            self._forward, self._rng_at_batch = None, True

    def clip_grad_norm_(self, max_norm: float, *, foreach: bool | None = None) -> Any:
        """``torch.nn.utils.clip_grad_norm_`` over the watched parameters (call it where the
        loop would call torch's, after ``scaler.unscale_``); returns the pre-clip norm, a 0-d
        tensor. The step then records that pre-clip norm, as HF Trainer and Lightning log it,
        and the gradients are read once for it, not twice. The norm is the watcher's
        overflow-safe one; the clipping is torch's arithmetic (``norms.clip_grads_with_norm``)."""
        torch = self._torch
        if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float)) \
                or not max_norm > 0:
            raise ConfigError(f"clip_grad_norm_(max_norm): expected a number > 0, got "
                              f"{max_norm!r}")
        norm = self._grad_norm()
        if norm is None:  # no gradients: nothing to clip, as torch returns 0
            return torch.zeros((), device=self._device)
        # float64, as the norm was taken: a finite norm past float32's range must not
        # turn into inf and a clip coefficient of 0 (zeroed gradients, a finite norm
        # recorded).
        total = torch.tensor(norm, dtype=torch.float64) if isinstance(norm, float) else norm
        clip_grads_with_norm(torch, self._params, float(max_norm), total, foreach=foreach)
        if not self._closed:
            self._clip_norm = norm
            if not self._clip_meta_written:
                self._clip_meta_written = True
                self.store.set_meta(grad_norm_basis="pre_clip")
        return total

    def step(self, loss: Any, *, batch_size: int | None = None, tokens: int | None = None,
             grad_norm: Any | None = None, step: int | None = None,
             replay: Callable[[], Any] | None = None, **extra: Any) -> None:
        """Close one optimizer step: record its loss and the telemetry gathered during it.

        ``loss`` may be a scalar tensor (detached here, never kept with its graph) or a
        number. ``tokens``: tokens in this step's batch (for ``tokens_per_s``). ``replay``:
        a closure recomputing the loss of this step's batch (``lambda: loss_fn(model(x), y)``)
        that the NaN guard calls, only when the step was non-finite, to name the first module
        that produced a non-finite value. ``step`` overrides the internal counter (e.g. a
        framework's own step number; a resumed run passes ``start_step=`` to ``watch``);
        ``extra`` records more scalars for this step under their own names.
        """
        if self._closed:
            return
        loss = check_loss(self._torch, loss)
        now = time.perf_counter()
        if self._t_request is not None:
            start = self._t_request
        else:
            start = self._t_last
            if self._rng_at_batch:  # this step's batch did not come from the wrapped loader
                self._rng_from_forward()
        self._t_last = now
        self._t_request = None
        if step is not None:
            self._step = int(step)
        s = self._step
        if self._hang is not None:  # two attribute writes and a deque append
            self._hang.step_done(s, now - start)
        gn: Any = grad_norm
        if gn is None:
            gn = self._grad_norm_now if self._grad_norm_now is not None else (
                self._clip_norm if self._clip_norm is not None else self._grad_norm())
        self._grad_norm_now = None
        self._clip_norm = None
        fwd = self._forward.take() if self._forward is not None else None
        data_s, self._data_wait_s = self._data_wait_s, 0.0
        fast = self._host_only and not extra and not self._param_stats \
            and not self._layers_armed
        if fast and loss is not None and type(loss) is not float:
            if loss.is_cpu:  # a tensor (check_loss): read now, no device to wait for
                loss = loss.item()
            else:
                fast = False
        if fast and gn is not None and type(gn) is not float:
            if not isinstance(gn, self._torch.Tensor):
                gn = float(gn)
            elif gn.is_cpu:
                gn = gn.item()
            else:
                fast = False
        if not fast:
            self._step_full(s, now - start, data_s, fwd, loss, gn, batch_size, tokens,
                            replay, extra)
            return
        # The common CPU step: every value is a host float now. The row is kept as a tuple
        # and built, stored and fed to the live alerts in a batch (Recorder.hold): run once
        # per step on cold caches, that Python costs more than reading the values.
        lr, self._lr_now = (self._lr() if self._lr_now is None else self._lr_now), None
        if lr is not None and type(lr) is not float:
            lr = float(lr)
        rec = self._rec
        host = self._host
        rec.hold((s, now - start, data_s, fwd, lr, loss, gn, host.rss(now), batch_size, tokens,
                  host.gc_s(), host.comm_s()), now)
        self._step = s + 1
        if not self._guard.end_healthy_step(loss, gn):
            # After recording: under "raise" the step's row is in the store before the error.
            rec.drain()
            self._guard.end_step(s, {"loss": loss, "grad_norm": gn}, replay=replay,
                                 model=self.model, scaler=self.scaler, before_raise=self.flush)
        if self._layers is not None and self._layers.scheduled(self._step):
            self._layers.arm()
            self._layers_armed = True
        self._after_step(s, loss)

    def _step_full(self, s: int, step_time_s: float, data_s: float, fwd: Any, loss: Any,
                   gn: Any, batch_size: int | None, tokens: int | None,
                   replay: Callable[[], Any] | None, extra: Mapping[str, Any]) -> None:
        """Any step: device values, extra metrics, param norms, layer health, a loss scale."""
        torch = self._torch
        rec = self._rec
        host: dict[str, float | None] = {"data_time_s": data_s, **self._host.extras(),
                                         "rss_mb": self._host.rss(time.perf_counter())}
        device: dict[str, Any] = {}
        if self._cuda:  # GPU time between consecutive steps; rates from it, at fetch
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            if self._last_step_event is not None:
                device["step_time_s"] = [(self._last_step_event, ev)]
                for name, count in (("samples_per_s", batch_size), ("tokens_per_s", tokens),
                                    *rec.flop_scales.items()):
                    if count is not None:
                        device[name] = ("rate", float(count))
            self._last_step_event = ev
        else:
            put_step_time(host, step_time_s, batch_size, tokens, rec.flop_scales)
        if fwd is not None:
            if isinstance(fwd, list):
                device["compute_time_s"] = fwd
            else:
                host["compute_time_s"] = fwd
        lr, self._lr_now = (self._lr() if self._lr_now is None else self._lr_now), None
        if lr is not None:
            if isinstance(lr, torch.Tensor) and rec.defers(lr):
                device["lr"] = lr.detach().reshape(())
            else:
                host["lr"] = float(lr)
        if loss is not None:
            rec.put(host, device, "loss", loss)
        if gn is not None:
            rec.put(host, device, "grad_norm", gn)
        for name, value in extra.items():
            if value is not None:
                rec.put(host, device, name, value)
        if self.scaler is not None:
            scale = getattr(self.scaler, "_scale", None)
            if isinstance(scale, torch.Tensor) and not rec.defers(scale):
                host["loss_scale"] = scale.item()
            elif isinstance(scale, torch.Tensor):
                device["loss_scale"] = scale.detach().reshape(()).clone()
            elif self.scaler.is_enabled():
                host["loss_scale"] = float(self.scaler.get_scale())
        if self._cuda:
            host["mem_alloc_mb"] = torch.cuda.memory_allocated(self._device) / _MB
            host["mem_reserved_mb"] = torch.cuda.memory_reserved(self._device) / _MB
            host["mem_peak_mb"] = torch.cuda.max_memory_allocated(self._device) / _MB
        if self._param_stats:
            for name, value in self._param_stats.items():
                if isinstance(value, float):
                    host[name] = value
                elif rec.defers(value):
                    device[name] = value
                else:
                    host[name] = value.item()
            self._param_stats = {}
        if self._layers is not None:
            stats = self._layers.collect() if self._layers_armed else {}
            self._layers_armed = False
            layer_meta = self._layers.pop_meta() if stats else None
            if layer_meta:  # module order as executed, types: what the detectors read
                self.store.set_meta(**layer_meta)
            if stats and rec.defers(next(iter(stats.values()))):
                device.update(stats)
            elif stats:
                host.update(read_now(torch, stats))
        rec.record(s, host)
        if device:
            rec.hold_device(s, device)
        self._step = s + 1
        # After recording: under "raise" the step's row is in the store before the error.
        self._guard.end_step(s, host, replay=replay, model=self.model, scaler=self.scaler,
                             before_raise=self.flush)
        if self._layers is not None and self._layers.scheduled(self._step):
            self._layers.arm()
            self._layers_armed = True
        self._after_step(s, host.get("loss", rec.last_loss))

    def log(self, metrics: Mapping[str, Any], *, step: int | None = None) -> None:
        """Record other scalars (``val_loss``, ...) at ``step`` (default: the last step)."""
        if self._closed:
            return
        self._rec.log(max(self._step - 1, 0) if step is None else int(step), metrics)

    def flush(self) -> None:
        """Fetch pending device values and commit everything recorded so far."""
        if self._closed:
            return
        self._rec.flush()
        self.store.flush()

    def close(self) -> None:
        """Fetch what is pending, run the last live-alert pass, remove every hook and close
        the store. Idempotent."""
        if self._closed:
            return
        try:
            self._rec.flush()
            if self._alerts is not None:
                self._alerts.close(final_step=max(self._step - 1, 0))
        finally:
            self._closed = True
            self._host.close()
            if self._hang is not None:
                self._hang.close()
            for h in self._hooks:
                h.remove()
            self._hooks = []
            if self._forward is not None:
                self._forward.remove()
            if self._layers is not None:
                self._layers.disarm()
            self.store.close()
            last = self._step - 1 if self._step > self._first_step else None
            self._announcer.close(str(self.run_dir), first_step=self._first_step,
                                  last_step=last, stored=self._stored)

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:  # a peer that died: the exception goes into the hang dump, if one is kept
            if self._hang is not None and exc is not None and not self._closed:
                self._hang.dump_exception(exc)
        finally:
            self.close()

    # -- loader and hooks -------------------------------------------------------------
    def _batch_requested(self, t: float) -> None:
        # The step starts when its first batch is asked for, so work done between steps
        # (evaluation, logging, a checkpoint save after step()) is not charged to a step.
        if self._t_request is None:
            self._t_request = t

    def fetch_batch(self, get: Callable[[], T]) -> T:
        """``get()`` a batch through the data clock (``RecipeRunner.fetch_batch = this``)."""
        self._rng_from_batches()
        return self._next_batch(CallIterator(get))

    def _next_batch(self, it: Iterator[T]) -> T:
        """The wrapped loader's next batch: the wait is charged to the current step (which
        starts at its first request), and the guard's RNG state read when it arrives."""
        t0 = time.perf_counter()
        if self._t_request is None:
            self._t_request = t0
        try:
            return next(it)
        finally:
            self._data_wait_s += time.perf_counter() - t0
            if self._rng_at_batch:
                self._guard.capture_rng()

    def _batch_arrived(self, wait_s: float) -> None:
        self._data_wait_s += wait_s
        if self._rng_at_batch:
            self._guard.capture_rng()

    def _rng_from_forward(self) -> None:
        """Back to reading the guard's RNG state in a forward pre-hook."""
        self._rng_at_batch = False
        if self.model is not None and self._forward is None and not self._closed:
            logger.debug("trainmedic: a step ran without a batch from the wrapped loader; "
                         "the NaN guard reads the RNG at each forward again")
            self._forward = ForwardClock(self.model, cuda=self._cuda, timed=False,
                                         on_forward_start=self._guard.capture_rng)

    def _lr(self) -> Any:  # a tensor lr copied: a scheduler may change it in place after
        groups = self.optimizer.param_groups if self.optimizer is not None else None
        lr: Any = groups[0].get("lr") if groups else None
        return lr.detach().clone() if hasattr(lr, "detach") else lr

    def _on_pre_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        # After backward (and after any clipping), before the update changes anything; the
        # pre-clip norm when clip_grad_norm_() took one this step.
        gn = self._clip_norm if self._clip_norm is not None else (
            self._grad_norm() if self._norm_in_hook else None)
        self._grad_norm_now, self._lr_now = gn, self._lr()
        if self._layers_armed:
            self._layers.on_grads()
        if self._guard.check_grads(gn, self._torch, self._params, self.optimizer):
            return  # update dropped: nothing to measure
        every = self._param_every
        if every is not None and self._step % every == 0 and self._params:
            with self._torch.no_grad():
                self._before_update = [p.clone() for p in self._params]

    def _on_post_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        before = self._before_update
        if before is None:
            return
        self._before_update = None
        self._param_stats = update_stats(self._torch, self._grad_norm, before, self._params)

    # -- recording --------------------------------------------------------------------
    def _record_event(self, s: int, kind: str, data: dict[str, Any]) -> None:
        self._rec.record_event(s, kind, data)

    def _after_step(self, s: int, loss: float | None = None) -> None:
        if self._tick is not None:  # the progress line, on a TTY: throttled, host values only
            self._tick(s, loss)
        alerts = self._alerts
        reason: str | None = None
        if alerts is not None:
            alerts.after_step(s, self._rec.drain)  # a pass sees every row up to this step
            reason = alerts.stop_reason
        elif self._stop_file is not None and s % _STOP_FILE_EVERY == 0 \
                and self._stop_file.exists():
            reason = f"stop file {self._stop_file} found at step {s}"
        if self._stop_reason is None and reason is not None:
            self._stop_reason = reason
            logger.warning("trainmedic: stop requested: %s", self._stop_reason)
            self.store.event(s, "stop_requested", {"reason": self._stop_reason})
            if self.config.on_stop is not None:  # once: the reason is set only once
                self._rec.flush()
                self.config.on_stop(self._stop_reason)


def watch(model: torch.nn.Module | None, optimizer: torch.optim.Optimizer | None, *,
          run_dir: str | os.PathLike[str], **kwargs: Any) -> Watcher:
    """Start watching a training loop; use as a context manager (see :class:`Watcher`)."""
    return Watcher(model, optimizer, run_dir=run_dir, **kwargs)

