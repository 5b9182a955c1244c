"""Watch a Hugging Face ``transformers`` Trainer run: a ``TrainerCallback`` that feeds the watcher.

>>> from trainmedic.live.hf_callback import TrainmedicCallback      # doctest: +SKIP
>>> trainer = Trainer(model, args, train_dataset=ds, eval_dataset=ev,
...                   callbacks=[TrainmedicCallback(run_dir="runs/exp1")])
>>> trainer.train()                         # then: trainmedic diagnose runs/exp1

Needs the ``hf`` extra (``pip install 'trainmedic[hf]'``: transformers and accelerate, which the
Trainer requires). One row per optimizer step, at HF's own ``state.global_step`` after that
step (1, 2, ...; the step numbers of HF's ``log_history``):

* ``loss``: what the model's ``forward`` returned as ``loss`` in training mode, combined over the
  micro-batches of the step the way the Trainer combines them (transformers/trainer.py,
  ``training_step``): summed when the Trainer passed ``num_items_in_batch`` (the model already
  divided by the token count of the whole step), else averaged. So the mean over a logging
  window equals the Trainer's logged ``loss``, except that a NaN step stays NaN here where
  ``logging_nan_inf_filter`` replaces it in HF's logs. Callbacks get no per-step loss, hence the
  forward hook. A loss the model does not return (``compute_loss_func``, label smoothing) is
  taken from ``on_log`` instead: one value per logging window, at the logging step.
* ``grad_norm``: the pre-clip global norm, as HF logs it. With clipping on
  (``max_grad_norm > 0``) it is taken at the end of the backward of the step's last micro-batch
  (after DDP's gradient all-reduce, before the Trainer clips), divided by the fp16 loss scale;
  with clipping off the watcher's optimizer pre-step hook takes it. Under FSDP or DeepSpeed the
  local gradients are shards, so the value is this rank's part, not the global norm.
* ``lr`` (read after ``optimizer.step()`` and before the scheduler steps: the rate that step
  used, as HF logs it), ``step_time_s`` (on CPU from the end of the previous step's logging,
  evaluation and saving to this optimizer step, so those are not charged to a step; on CUDA
  the watcher's GPU time between steps),
  ``data_time_s`` (the Trainer fetches all batches of a step before ``on_step_begin``: that
  interval), ``samples_per_s``, ``tokens_per_s`` (``input_ids`` elements, padding included),
  ``rss_mb``, CUDA memory, ``loss_scale`` under fp16.
* ``val_loss`` from ``eval_loss`` and the other evaluation metrics under their own names, at the
  step they were computed.

The NaN guard works as in a plain loop: with ``nan_policy="skip"`` (the default on CPU) a
non-finite step's update is dropped and the step replayed from its micro-batches to name the
first module that produced a NaN/inf. A live stop (``stop_on``, the stop file) sets
``control.should_training_stop``, and ``should_save`` when the run saves checkpoints.

No host-device sync is added (checked on an H200 with ``torch.cuda.set_sync_debug_mode``: the
same count per step with and without the callback): the loss, norm and scale stay tensors
until the watcher fetches them in a batch. The model is touched only through hooks (a forward
hook, and a gradient hook on the step's loss when clipping is on), removed at the end.
"""

from __future__ import annotations

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

try:
    from transformers import TrainerCallback
except ImportError as exc:  # the optional extra is missing
    raise MissingExtraError(
        "trainmedic.live.hf_callback needs Hugging Face transformers (and accelerate, which its "
        "Trainer requires); install the extra: pip install 'trainmedic[hf]'"
    ) from exc

if TYPE_CHECKING:
    import torch

__all__ = ["TrainmedicCallback"]

logger = logging.getLogger(__name__)

def queue_after_backward(fn: Any) -> None:
    """Run ``fn`` when the current backward pass has finished, after the callbacks already
    queued (DDP queues the wait for its gradient all-reduce from its first gradient hook, so a
    callback queued by a callback runs after it). This is how DDP and FSDP finalize a backward
    (torch/distributed/fsdp/_runtime_utils.py); the engine runs callbacks queued while running
    callbacks (torch/csrc/autograd/engine.cpp, ``GraphTask::exec_post_processing``)."""
    import torch

    engine = torch.autograd.Variable._execution_engine
    engine.queue_callback(lambda: engine.queue_callback(fn))


class TrainmedicCallback(TrainerCallback):
    """Record a ``transformers.Trainer`` run into a trainmedic run store (see the module doc).

    ``run_dir`` is the store's folder; ``watch_kwargs`` go to :class:`Watcher` (``fetch_every``,
    ``meta``, ``rank``, ``world_size``, ``scaler``, ...). Rank and world size default to the
    Trainer's (``args.process_index``, ``args.world_size``) when it runs more than one process.
    The live progress line is off (``progress=False``): the trainer has its own bar.
    """

    def __init__(self, run_dir: str | os.PathLike[str], **watch_kwargs: Any) -> None:
        self.run_dir = run_dir
        self.watch_kwargs = callback_watch_kwargs(watch_kwargs)
        self.watcher: Watcher | None = None
        self._handles: list[Any] = []
        self._clip = False
        self._scaler: Any = None
        self._gradient_state: Any = None
        self._loss_factor = 1.0
        # The optimizer step in flight (reset by _reset_step).
        self._losses: list[torch.Tensor] = []
        self._summed = False
        self._samples = 0
        self._tokens = 0
        self._grad_norm: torch.Tensor | float | None = None
        self._inputs: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self._mark = time.perf_counter()
        self._warned_no_loss = False
        self._any_loss = False
        self._replaying = False
        self._eval = PhaseSpan()  # the hang watchdog's eval limit during evaluation

    # -- Trainer events -----------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._close()  # a previous train() that raised never reached on_train_end
        model = kwargs.get("model")
        optimizer = kwargs.get("optimizer")
        if model is None:
            raise ConfigError("TrainmedicCallback: the Trainer passed no model to on_train_begin; "
                              "expected the Trainer's model")
        inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer
        self._scaler = getattr(optimizer, "scaler", None)  # its GradScaler under fp16
        kw = dict(self.watch_kwargs)
        if getattr(args, "world_size", 1) > 1:
            kw.setdefault("rank", args.process_index)
            kw.setdefault("world_size", args.world_size)
        if self._scaler is not None:
            kw.setdefault("scaler", self._scaler)
        meta = dict(kw.pop("meta", None) or {})
        meta.setdefault("source", "transformers.Trainer")
        meta.setdefault("grad_norm_basis", "pre_clip")
        meta.setdefault("gradient_accumulation_steps", int(args.gradient_accumulation_steps))
        self.watcher = Watcher(model, inner, run_dir=self.run_dir,
                               start_step=int(state.global_step), meta=meta, **kw)
        self._clip = bool(args.max_grad_norm and args.max_grad_norm > 0)
        # The Trainer multiplies a loss normalized by the token count of all processes by the
        # number of processes (trainer.py, compute_loss, average_tokens_across_devices).
        self._loss_factor = float(args.world_size) if (
            getattr(args, "average_tokens_across_devices", False) and args.world_size > 1) else 1.0
        try:  # True during the micro-batch whose backward ends the accumulation
            from accelerate.state import GradientState
            self._gradient_state = GradientState()
        except ImportError:  # pragma: no cover - the Trainer itself needs accelerate
            self._gradient_state = None
        self._handles.append(model.register_forward_hook(self._on_forward, with_kwargs=True))
        self._reset_step()
        self._mark = time.perf_counter()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        w = self.watcher
        if w is None:
            return
        now = time.perf_counter()
        self._reset_step()
        # The step's batches were fetched between the last mark and now (get_batch_samples).
        w._batch_requested(self._mark)
        w._batch_arrived(now - self._mark)

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        w = self.watcher
        if w is None:
            return
        torch = w._torch
        loss = None
        if self._losses:
            stacked = torch.stack(self._losses)
            loss = (stacked.sum() * self._loss_factor if self._summed else stacked.mean())
        replay = self._replay(kwargs.get("model"), self._inputs) if self._inputs else None
        w.step(loss, batch_size=self._samples or None, tokens=self._tokens or None,
               grad_norm=self._grad_norm, step=int(state.global_step) + 1, replay=replay)
        self._reset_step()  # also drops what a replay's forward and backward left here

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self._mark = time.perf_counter()
        w = self.watcher
        if w is not None and w.should_stop and not control.should_training_stop:
            # A live finding in stop_on, or the stop file: end the run the Trainer's way,
            # saving a checkpoint when the run saves them at all.
            logger.warning("trainmedic: stopping the Trainer at step %d: %s",
                           state.global_step, w.stop_reason)
            control.should_training_stop = True
            if args.save_strategy != "no":  # a str enum (trainer_utils.SaveStrategy)
                control.should_save = True
        if getattr(control, "should_evaluate", False):
            # The Trainer evaluates right after this (DefaultFlowCallback set the flag): the
            # eval limit covers building the eval loader and the first batch too.
            self._eval.open(w, "eval")
        return control

    def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None,
               **kwargs: Any) -> None:
        self._mark = time.perf_counter()
        w = self.watcher
        if w is None or not logs or self._any_loss or "loss" not in logs:
            return
        # No forward returned a loss: keep the Trainer's (a mean over the logging window).
        if not self._warned_no_loss:
            logger.warning("trainmedic: the model's forward returns no loss (compute_loss_func "
                           "or label smoothing?); recording the Trainer's logged loss, one value "
                           "per %d steps", args.logging_steps)
            w.store.set_meta(loss_source="trainer_log_window_mean")
            self._warned_no_loss = True
        w.log({"loss": logs["loss"]}, step=int(state.global_step))

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._eval.open(self.watcher, "eval")  # an evaluation not announced by on_step_end

    def on_predict(self, args: Any, state: Any, control: Any, metrics: Any = None,
                   **kwargs: Any) -> None:
        self._eval.close()  # trainer.predict() ends its prediction steps here, not in on_evaluate

    def on_evaluate(self, args: Any, state: Any, control: Any,
                    metrics: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self._eval.close()
        self._mark = time.perf_counter()
        w = self.watcher
        if w is None or not metrics:
            return
        w.log(eval_row(metrics), step=int(state.global_step))

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._mark = time.perf_counter()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._close()

    # -- internals ----------------------------------------------------------------------
    def _reset_step(self) -> None:
        self._losses = []
        self._summed = False
        self._samples = 0
        self._tokens = 0
        self._grad_norm = None
        self._inputs = []

    def _replay(self, model: Any, inputs: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> Any:
        """For the NaN guard: recompute the step's loss from its micro-batches. Called only
        on a non-finite step; with dropout and several micro-batches only the last one draws
        the same masks (the watcher restores the RNG state of the step's last forward)."""
        import torch

        if model is None:
            return None

        batches = tuple(inputs)

        def run() -> Any:
            total = None
            self._replaying = True  # the forwards below are not training steps to record
            try:
                for a, kw in batches:
                    loss = _loss_of(model(*a, **kw), kw, torch)
                    if loss is not None:
                        loss = loss.float().mean()
                        total = loss if total is None else total + loss
            finally:
                self._replaying = False
            return total

        return run

    def _close(self) -> None:
        self._eval.close()
        for h in self._handles:
            h.remove()
        self._handles = []
        if self.watcher is not None:
            self.watcher.close()
            self.watcher = None

    def _on_forward(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                    output: Any) -> None:
        w = self.watcher
        if w is None or not module.training or self._replaying:
            return
        torch = w._torch
        if not torch.is_grad_enabled():
            return
        loss = _loss_of(output, kwargs, torch)
        if loss is not None:
            # mean(): under DataParallel the loss holds one value per GPU.
            self._losses.append(loss.detach().float().mean())
            # The model divided by the whole step's token count: the Trainer sums micro-batches.
            self._summed = kwargs.get("num_items_in_batch") is not None
            self._any_loss = True
            if w.nan_policy in ("skip", "raise"):  # kept for a replay until the step ends
                self._inputs.append((args, kwargs))
        ids = kwargs.get("input_ids")
        first = ids if isinstance(ids, torch.Tensor) else _first_tensor(args, kwargs, torch)
        if first is not None and first.dim() >= 1:
            self._samples += int(first.shape[0])
        if isinstance(ids, torch.Tensor) and ids.dim() >= 2:
            self._tokens += ids.numel()
        if not self._clip:
            return  # no clipping: the watcher's pre-step norm is the pre-clip norm
        gs = self._gradient_state
        if gs is not None and not gs.sync_gradients:
            return  # not the last micro-batch: its gradients are still accumulating
        anchor = loss if loss is not None else _first_tensor((output,), {}, torch, grad=True)
        if anchor is not None and anchor.requires_grad:
            anchor.register_hook(self._on_backward_start)

    def _on_backward_start(self, grad: Any) -> None:
        queue_after_backward(self._take_grad_norm)

    def _take_grad_norm(self) -> None:
        w = self.watcher
        if w is None:
            return
        norm = w._grad_norm()
        scale = getattr(self._scaler, "_scale", None)
        if norm is not None and scale is not None and self._scaler.is_enabled():
            # the Trainer unscales, then clips
            if isinstance(norm, float):
                norm = norm / float(scale)
            else:
                norm = norm / scale.to(norm.device, norm.dtype)
        self._grad_norm = norm
        w._clip_norm = norm  # the watcher's pre-step hook takes it, not a third pass


def eval_row(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """An evaluation's metrics for the store: its loss as ``val_loss`` (the alias table of
    :mod:`trainmedic.run.names`), the other numbers under their own names, no ``epoch``."""
    rename = resolve_names([k for k in metrics if k != "epoch"]).rename()
    out: dict[str, Any] = {}
    for k, v in metrics.items():
        if k == "epoch" or isinstance(v, bool) or not _is_number(v):
            continue
        name = rename.get(k, k)
        out[name if name == "val_loss" else k] = v  # only the loss is renamed: eval throughput
    return out                                      # must not pass for training throughput


def _is_number(v: Any) -> bool:
    if isinstance(v, int | float):
        return True
    return hasattr(v, "numel") and v.numel() == 1


def _loss_of(output: Any, kwargs: Mapping[str, Any], torch: Any) -> torch.Tensor | None:
    if isinstance(output, Mapping):
        loss = output.get("loss")
    elif isinstance(output, tuple | list) and output and kwargs.get("labels") is not None:
        loss = output[0]  # return_dict=False: the loss leads (what Trainer.compute_loss takes)
    else:
        loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.numel() >= 1 and loss.dim() <= 1:
        return loss
    return None


def _first_tensor(args: Any, kwargs: Mapping[str, Any], torch: Any,
                  grad: bool = False) -> torch.Tensor | None:
    values: list[Any] = list(args) + list(kwargs.values())
    while values:
        v = values.pop(0)
        if isinstance(v, torch.Tensor):
            if not grad or v.requires_grad:
                return v
        elif isinstance(v, Mapping):
            values[:0] = list(v.values())
        elif isinstance(v, tuple | list):
            values[:0] = list(v)
    return None
