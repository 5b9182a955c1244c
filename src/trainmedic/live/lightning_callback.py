"""Watch a Lightning run: a ``Callback`` that feeds the watcher.

>>> from trainmedic.live.lightning_callback import TrainmedicCallback   # doctest: +SKIP
>>> trainer = lightning.Trainer(max_steps=1000,
...                             callbacks=[TrainmedicCallback(run_dir="runs/exp1")])
>>> trainer.fit(module, train_loader, val_loader)

Needs the ``lightning`` extra (``pip install 'trainmedic[lightning]'``); subclasses
``lightning.pytorch.callbacks.Callback``, or ``pytorch_lightning``'s when only that package is
installed (a Trainer accepts only callbacks of its own package). One row per optimizer step,
at ``trainer.global_step`` after that step (1, 2, ...):

* ``loss``: the mean over the step's micro-batches of what ``training_step`` returned (Lightning
  hands ``on_train_batch_end`` the loss divided by ``accumulate_grad_batches``; multiplied back
  here, lightning/pytorch/loops/optimization/automatic.py ``ClosureResult``).
* ``grad_norm``: the pre-clip global norm, taken in ``on_before_optimizer_step``, which Lightning
  calls after the AMP scaler unscaled the gradients and before it clips them
  (lightning/pytorch/plugins/precision/precision.py ``_after_closure``).
* ``lr`` (``optimizer.param_groups[0]``, read in ``on_before_optimizer_step``: the rate the step
  used, before a step-interval scheduler updates it ahead of ``on_train_batch_end``).
* ``step_time_s``: on CPU from the end of the previous step, or of a validation run, to the end
  of this step's last batch; on CUDA the watcher's GPU time between steps.
* ``data_time_s``: the gaps between ``on_train_batch_end`` (or a validation end) and the next
  ``on_train_batch_start``: fetching and moving the batch, plus Lightning's per-batch
  bookkeeping and callbacks that run after this one (a ``ModelCheckpoint`` save).
* ``samples_per_s`` (the batch's leading dimension), ``rss_mb``, CUDA memory, ``loss_scale``
  under 16-bit mixed precision (on an overflow step ``grad_norm`` is inf and the scale halves).
* ``val_loss`` and the other ``val*`` metrics the module logged, from ``trainer.callback_metrics``
  when a validation run ends (not the sanity check), at the current step.

No host-device sync is added (checked on an H200 with ``torch.cuda.set_sync_debug_mode``: one
more sync per run, at close, none per step): values stay tensors until the watcher fetches
them in a batch.
One optimizer (``trainer.optimizers[0]``) is watched. Under automatic optimization the NaN guard
records non-finite steps (``nan_policy="auto"`` means ``"record"`` here; see
``_record_nonfinite_only``); a live finding in ``stop_on`` or the stop file sets
``trainer.should_stop``.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainmedic.errors import ConfigError, MissingExtraError
from trainmedic.live.config import callback_watch_kwargs
from trainmedic.live.phase_span import PhaseSpan
from trainmedic.live.watcher import Watcher
from trainmedic.run.names import resolve_names

if TYPE_CHECKING:
    import torch

__all__ = ["TrainmedicCallback"]

logger = logging.getLogger(__name__)


def _callback_base() -> Any:
    """Lightning's ``Callback`` class: ``lightning.pytorch``'s, else ``pytorch_lightning``'s (a
    Trainer only accepts callbacks of its own package)."""
    for package in ("lightning.pytorch.callbacks", "pytorch_lightning.callbacks"):
        try:
            return importlib.import_module(package).Callback
        except ImportError:
            continue
    raise MissingExtraError("trainmedic.live.lightning_callback needs Lightning (lightning or "
                      "pytorch_lightning); install the extra: pip install 'trainmedic[lightning]'")


_Callback: Any = _callback_base()

class TrainmedicCallback(_Callback):
    """Record a Lightning ``Trainer.fit`` into a trainmedic run store (see the module doc).

    ``run_dir`` is the store's folder; ``watch_kwargs`` go to :class:`Watcher` (``fetch_every``,
    ``meta``, ``rank``, ``world_size``, ``scaler``, ...). Rank and world size default to the
    trainer's (``global_rank``, ``world_size``) when it runs more than one process.
    The live progress line is off (``progress=False``): the trainer has its own bar.
    """

    def __init__(self, run_dir: str | os.PathLike[str], **watch_kwargs: Any) -> None:
        self.run_dir = run_dir
        self.watch_kwargs = callback_watch_kwargs(watch_kwargs)
        self.watcher: Watcher | None = None
        self._last_step = 0
        self._mark = time.perf_counter()
        # The optimizer step in flight (reset by _reset_step).
        self._losses: list[torch.Tensor] = []
        self._samples = 0
        self._grad_norm: torch.Tensor | float | None = None
        self._lr: Any = None
        self._in_step = False
        self._eval = PhaseSpan()  # the hang watchdog's eval limit during validation

    # -- Lightning hooks ----------------------------------------------------------------
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._close()  # a previous fit that raised before on_exception could run
        if not trainer.optimizers:
            raise ConfigError("TrainmedicCallback: the trainer has no optimizer at train start; "
                              "expected configure_optimizers to return one")
        optimizer = trainer.optimizers[0]
        kw = dict(self.watch_kwargs)
        if trainer.world_size > 1:
            kw.setdefault("rank", trainer.global_rank)
            kw.setdefault("world_size", trainer.world_size)
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        if scaler is not None:
            kw.setdefault("scaler", scaler)
        _record_nonfinite_only(kw, pl_module)
        meta = dict(kw.pop("meta", None) or {})
        meta.setdefault("source", "lightning.Trainer")
        meta.setdefault("grad_norm_basis", "pre_clip")
        meta.setdefault("accumulate_grad_batches", int(trainer.accumulate_grad_batches))
        self._last_step = int(trainer.global_step)
        self.watcher = Watcher(pl_module, optimizer, run_dir=self.run_dir,
                               start_step=self._last_step, meta=meta, **kw)
        # Under automatic optimization its optimizer pre-step hook runs before Lightning's
        # closure (forward, backward): a norm there would read the previous step's
        # gradients. on_before_optimizer_step takes it instead; the hook still copies the
        # parameters for update_ratio. Under manual optimization the loop's own backward
        # has run by then, so the hook keeps the norm (and the NaN guard its veto).
        if pl_module.automatic_optimization:
            self.watcher._norm_in_hook = False
        self._reset_step()
        self._mark = time.perf_counter()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        w = self.watcher
        if w is None:
            return
        now = time.perf_counter()
        if not self._in_step:  # the first micro-batch of an optimizer step
            w._batch_requested(self._mark)
            self._in_step = True
        w._batch_arrived(now - self._mark)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        w = self.watcher
        if w is None:
            return
        # The rate this step uses: a step-interval scheduler updates it before
        # on_train_batch_end (training_epoch_loop.py, update_lr_schedulers).
        self._lr = optimizer.param_groups[0].get("lr") if optimizer.param_groups else None
        # Here, not in the watcher's optimizer pre-step hook: Lightning runs forward and
        # backward inside optimizer.step(closure), after that hook, which would see the
        # previous step's gradients. Unscaled, not yet clipped. Under manual optimization
        # the loop's backward has run before optimizer.step(), so the pre-step hook (which
        # fires before this callback) has taken it, and the NaN guard acts on it there.
        if pl_module.automatic_optimization:
            self._grad_norm = w._grad_norm()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        w = self.watcher
        if w is None:
            return
        torch = w._torch
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            if pl_module.automatic_optimization:
                loss = loss * trainer.accumulate_grad_batches  # undo Lightning's normalization
            self._losses.append(loss.detach().reshape(()).float())
        n = _batch_size(batch, torch)
        if n is not None:
            self._samples += n
        step = int(trainer.global_step)
        if step > self._last_step:  # this batch ended an optimizer step
            self._last_step = step
            loss_t = torch.stack(self._losses).mean() if self._losses else None
            extra = {} if self._lr is None else {"lr": self._lr}  # overrides the watcher's read
            w.step(loss_t, batch_size=self._samples or None, grad_norm=self._grad_norm,
                   step=step, **extra)
            self._reset_step()
            if w.should_stop and not trainer.should_stop:
                # A live finding in stop_on, or the stop file: Lightning stops at the end of
                # this batch (its ModelCheckpoint can save on train end).
                logger.warning("trainmedic: stopping the Trainer at step %d: %s", step,
                               w.stop_reason)
                trainer.should_stop = True
        self._mark = time.perf_counter()

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._eval.open(self.watcher, "eval")

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._eval.close()
        w = self.watcher
        if w is None or trainer.sanity_checking:
            return
        row = val_row(trainer.callback_metrics)
        if row:
            w.log(row, step=int(trainer.global_step))
        self._mark = time.perf_counter()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._close()  # keep what was recorded up to the failure

    # -- internals ----------------------------------------------------------------------
    def _reset_step(self) -> None:
        self._losses = []
        self._samples = 0
        self._grad_norm = None
        self._lr = None
        self._in_step = False

    def _close(self) -> None:
        self._eval.close()
        if self.watcher is not None:
            self.watcher.close()
            self.watcher = None


def _record_nonfinite_only(kw: dict[str, Any], pl_module: Any) -> None:
    """Make the NaN guard record only, under automatic optimization: its skip acts in the
    optimizer's pre-step hook, which Lightning runs before the closure computes this step's
    gradients (so it would judge, and drop, the previous step's)."""
    if not pl_module.automatic_optimization:
        return
    config = kw.get("config")
    policy = config.nan_policy if config is not None else kw.get("nan_policy", "auto")
    if policy in ("skip", "raise"):
        raise ConfigError(f"TrainmedicCallback: nan_policy={policy!r} cannot act under "
                          "Lightning's automatic optimization (the optimizer's pre-step hook "
                          "runs before the closure computes the gradients); use 'record', or "
                          "'auto', which records")
    if config is not None:
        kw["config"] = dataclasses.replace(config, nan_policy="record")
    else:
        kw["nan_policy"] = "record"


def val_row(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The validation metrics among ``callback_metrics``: the one the alias table of
    :mod:`trainmedic.run.names` maps to ``val_loss`` under that name, other ``val*`` metrics
    under their own. Training metrics are left out (``loss`` would collide with the step's)."""
    aliases = resolve_names(list(metrics)).aliases
    source = aliases.get("val_loss")
    out: dict[str, Any] = {}
    for k, v in metrics.items():
        if k == source:
            out["val_loss"] = v
        elif k.lower().startswith("val") and k != "val_loss":
            out[k] = v
    return out


def _batch_size(batch: Any, torch: Any) -> int | None:
    """The leading dimension of the batch's first tensor (shape only: no sync)."""
    todo = [batch]
    while todo:
        v = todo.pop(0)
        if isinstance(v, torch.Tensor):
            return int(v.shape[0]) if v.dim() >= 1 else None
        if isinstance(v, Mapping):
            todo[:0] = list(v.values())
        elif isinstance(v, tuple | list):
            todo[:0] = list(v)
    return None
