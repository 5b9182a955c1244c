"""Drive a :class:`~trainmedic.recipe.recipe.Recipe` for N optimizer steps, with checkpoints.

One optimizer step: ``grad_accum`` micro-batches (an epoch may end inside a step: the next
epoch goes on), each ``loss_fn(model, batch) / grad_accum`` under autocast for the mixed
precisions, backward through the grad scaler when there is one (DDP's ``no_sync`` on all but
the last micro-batch); then unscale, clip to ``max_grad_norm``, ``optimizer.step()`` (through
the scaler), ``scaler.update()``, ``scheduler.step()``, ``zero_grad(set_to_none=True)``. The
loss recorded per step is the mean of its micro-batch losses, read from the device once per
:meth:`RecipeRunner.run` call, not once per step.

Checkpoints go through a manager with ``save(step, state)``, ``load(state, path=, force=)``
and ``latest()`` (:class:`~trainmedic.checkpoint.manager.CheckpointManager`): every
``save_every`` steps, when a :class:`~trainmedic.checkpoint.preemption.PreemptionWatch` says
so (then the run stops: :attr:`RunResult.preempted`), and on :meth:`RecipeRunner.save`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from trainmedic.checkpoint import training_state
from trainmedic.checkpoint.training_state import LoopState
from trainmedic.errors import ConfigError, InputError
from trainmedic.recipe.loader_state import LoaderPosition
from trainmedic.recipe.recipe import Recipe

if TYPE_CHECKING:
    import torch

    from trainmedic.checkpoint.preemption import PreemptionWatch

__all__ = ["RecipeRunner", "RunResult", "Checkpointer", "run_recipe", "batch_size_of",
           "device_type", "autocast"]

logger = logging.getLogger(__name__)


class Checkpointer(Protocol):
    """What the runner needs of a checkpoint manager (``CheckpointManager`` has it)."""

    def save(self, step: int, state: Mapping[str, Any]) -> Path: ...

    def load(self, state: Mapping[str, Any], *, path: str | Path | None = None,
             force: bool = False) -> Any: ...

    def latest(self) -> Path | None: ...


@dataclass(kw_only=True)
class RunResult:
    """What one :meth:`RecipeRunner.run` call did."""

    start_step: int
    """The step count when the call began (the first loss is of step ``start_step``)."""

    step: int
    """The step count when it returned."""

    losses: list[float] = field(default_factory=list)
    """The loss of every optimizer step it ran, in order."""

    saved: list[Path] = field(default_factory=list)
    """Checkpoints it committed, in order."""

    preempted: bool = False
    """True when a signal stopped it after a save (the caller exits with
    ``trainmedic.checkpoint.preemption.EXIT_PREEMPTED``)."""

    signal: int | None = None
    """The signal that stopped it, if any."""


def batch_size_of(batch: Any) -> tuple[int, int]:
    """``(samples, tokens)`` of a batch: the leading size of its first tensor, and the element
    count of its first integer tensor with >= 2 dims (token ids), else 0."""
    import torch

    tensors: list[torch.Tensor] = []

    def walk(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            tensors.append(x)
        elif isinstance(x, Mapping):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(batch)
    if not tensors:
        return 1, 0
    samples = int(tensors[0].shape[0]) if tensors[0].dim() else 1
    tokens = next((t.numel() for t in tensors
                   if t.dim() >= 2 and not t.is_floating_point() and not t.is_complex()
                   and t.dtype != torch.bool), 0)
    return samples, int(tokens)


def autocast(precision: str, device: str) -> contextlib.AbstractContextManager[Any]:
    """The autocast a ``Recipe.precision`` trains under on a ``device`` type: none for fp32,
    else to bf16 / fp16."""
    if precision == "fp32":
        return contextlib.nullcontext()
    import torch

    dtype = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
    return torch.autocast(device_type=device, dtype=dtype)


def device_type(model: Any) -> str:
    """The device type of the model's first parameter (``cpu`` when it has none)."""
    for p in model.parameters():
        return str(p.device.type)
    return "cpu"


class RecipeRunner:
    """Runs one recipe. ``manager``: a :class:`Checkpointer` (``None``: no checkpoints);
    ``save_every``: steps between saves; ``preemption``: an entered ``PreemptionWatch``;
    ``on_resize`` / ``force``: passed to the restore (see ``training_state.restore``)."""

    def __init__(self, recipe: Recipe, *, manager: Checkpointer | None = None,
                 save_every: int | None = None, preemption: PreemptionWatch | None = None,
                 on_resize: str = "refuse", force: bool = False) -> None:
        if not isinstance(recipe, Recipe):
            raise ConfigError(f"recipe must be a trainmedic.Recipe, got {type(recipe).__name__}")
        if save_every is not None and (isinstance(save_every, bool)
                                       or not isinstance(save_every, int) or save_every < 1):
            raise ConfigError(f"save_every must be an integer >= 1 or None, got {save_every!r}")
        if (save_every is not None or preemption is not None) and manager is None:
            raise ConfigError("manager: saving (save_every or preemption) needs a checkpoint "
                              "manager")
        if on_resize not in training_state.RESIZE_POLICIES:
            raise ConfigError(f"on_resize must be one of "
                              f"{', '.join(training_state.RESIZE_POLICIES)}, got {on_resize!r}")
        self.recipe = recipe
        self.manager = manager
        self.save_every = save_every
        self.preemption = preemption
        self.on_resize = on_resize
        self.force = force
        self.loop = LoopState()
        self.position = LoaderPosition(recipe.data, self.loop)
        self.resumed_from: Path | None = None
        #: Called with every micro-batch drawn for training (not the ones a resume replays).
        self.on_batch: Callable[[Any], None] | None = None
        #: Called after every optimizer step with (steps done, the step's loss tensor).
        self.on_step: Callable[[int, Any], None] | None = None
        #: Draws each training micro-batch: called with the function that takes the next one
        #: from the loader (``fetch_batch(next_batch) -> batch``), so a watcher can time the
        #: wait (``Watcher.fetch_batch``). Batches a resume replays do not go through it.
        self.fetch_batch: Callable[[Callable[[], Any]], Any] | None = None
        #: Wraps each part of a step, called with its name ("data", "forward", "backward",
        #: "optimizer"): a profiler sets it to time the parts (``None``: nothing wraps them).
        self.phase: Callable[[str], contextlib.AbstractContextManager[Any]] | None = None
        #: Called with (first, last, micro-batches dropped) when a skip is applied.
        self.on_skip: Callable[[int, int, int], None] | None = None
        self._skips: list[tuple[int, int]] = []
        self._started = False

    # -- skipping data -------------------------------------------------------------------------
    def skip_steps(self, first: int, last: int) -> None:
        """Drop the micro-batches of steps ``first..last`` (inclusive, 0-based) when the loop
        reaches step ``first``; ignored (logged) when the loop is already past ``first``."""
        for name, v in (("first", first), ("last", last)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ConfigError(f"skip_steps: {name} must be an integer >= 0, got {v!r}")
        if last < first:
            raise ConfigError(f"skip_steps: last ({last}) must be >= first ({first}); write "
                              f"the range as FIRST-LAST")
        self._skips.append((first, last))

    def _apply_skips(self) -> None:
        step = self.loop.step
        for first, last in list(self._skips):
            if step > first:
                logger.warning("not skipping the batches of steps %d-%d: the run is already "
                               "at step %d (the checkpoint's data position is past them)",
                               first, last, step)
                self._skips.remove((first, last))
            elif step == first:
                n = (last - first + 1) * self.recipe.grad_accum
                for _ in range(n):
                    self.position.next_batch()
                self._skips.remove((first, last))
                logger.info("skipped the %d micro-batches of steps %d-%d", n, first, last)
                if self.on_skip is not None:
                    self.on_skip(first, last, n)

    # -- state ---------------------------------------------------------------------------------
    def stateful(self) -> dict[str, Any]:
        """The Stateful objects a manager saves and loads (``None`` ones left out)."""
        r = self.recipe
        objs = {"model": r.model, "optimizer": r.optimizer, "scheduler": r.scheduler,
                "scaler": r.scaler}
        return {k: v for k, v in objs.items() if v is not None}

    def train_state(self) -> dict[str, Any]:
        """This rank's plain training state now (counters, RNG, data position)."""
        return training_state.capture(self.loop, loader=self.position,
                                      config_hash=self.recipe.config_hash)

    def save(self) -> Path:
        """Save a checkpoint at the current step boundary; return its path."""
        if self.manager is None:
            raise ConfigError("manager: save() needs a checkpoint manager")
        state = dict(self.stateful())
        state["train"] = self.train_state()
        return self.manager.save(self.loop.step, state)

    def resume(self, path: str | Path | None = None, *, sabotage: str | None = None) -> Any:
        """Load ``path`` (``None``: the latest good checkpoint) and restore the loop state.

        Returns the manager's ``LoadedCheckpoint``, or ``None`` when ``path`` is ``None`` and
        there is no checkpoint yet (the run starts fresh). ``sabotage`` ("rng", "data",
        "rng-before-data", "generator", "optimizer") breaks the resume on purpose, for resume
        tests.
        """
        if self.manager is None:
            raise ConfigError("manager: resume() needs a checkpoint manager")
        if self._started:
            raise ConfigError("resume() must come before run()")
        if path is None and self.manager.latest() is None:
            logger.info("no checkpoint to resume from: starting at step 0")
            return None
        objs = self.stateful()
        if sabotage == "optimizer":
            objs.pop("optimizer", None)
        loaded = self.manager.load(objs, path=path, force=self.force)
        train = getattr(loaded, "train", None)
        if not train:
            raise InputError(str(getattr(loaded, "path", path)), "the checkpoint holds no "
                             "training state for this rank (train_state.rank*.pt)")
        training_state.restore(train, self.loop, loader=self.position,
                               on_resize=self.on_resize, config_hash=self.recipe.config_hash,
                               force=self.force,
                               sabotage=None if sabotage == "optimizer" else sabotage)
        self.resumed_from = Path(loaded.path)
        self._started = True
        logger.info("resumed from %s at step %d", loaded.path, self.loop.step)
        return loaded

    # -- the loop ------------------------------------------------------------------------------
    def _seed(self) -> None:
        seed = self.recipe.seed
        if seed is None:
            return
        import numpy as np
        import torch

        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        return autocast(self.recipe.precision, device_type(self.recipe.model))

    def _one_step(self) -> torch.Tensor:
        import torch

        r = self.recipe
        model, opt, scaler = r.model, r.optimizer, r.scaler
        total: torch.Tensor | None = None
        phase = self.phase or contextlib.nullcontext
        for micro in range(r.grad_accum):
            with phase("data"):
                batch = self.position.next_batch() if self.fetch_batch is None \
                    else self.fetch_batch(self.position.next_batch)
            samples, tokens = batch_size_of(batch)
            self.loop.samples_seen += samples
            self.loop.tokens_seen += tokens
            if self.on_batch is not None:
                self.on_batch(batch)
            last = micro == r.grad_accum - 1
            sync = contextlib.nullcontext() if last or not hasattr(model, "no_sync") \
                else cast(Any, model).no_sync()
            with sync:
                with phase("forward"), self._autocast():
                    loss = r.loss_fn(model, batch)
                if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                    shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else ""
                    raise ConfigError(f"loss_fn must return a scalar tensor, got "
                                      f"{type(loss).__name__}{shape}")
                with phase("backward"):
                    scaled = loss / r.grad_accum
                    if scaler is not None:
                        scaler.scale(scaled).backward()
                    else:
                        scaled.backward()
            d = loss.detach().float().reshape(())
            total = d if total is None else total + d
        with phase("optimizer"):
            if r.max_grad_norm is not None:
                if scaler is not None:
                    scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), r.max_grad_norm)
            if scaler is not None:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            if r.scheduler is not None:
                r.scheduler.step()
            opt.zero_grad(set_to_none=True)
        self.loop.step += 1
        assert total is not None
        return total / r.grad_accum

    def run(self, until: int) -> RunResult:
        """Train until ``until`` optimizer steps are done in all (a resumed run counts the
        steps before the checkpoint); return what this call did."""
        import torch

        if isinstance(until, bool) or not isinstance(until, int) or until < 0:
            raise ConfigError(f"steps must be an integer >= 0, got {until!r}")
        if not self._started:
            self._seed()
            self._started = True
        self.recipe.model.train()
        result = RunResult(start_step=self.loop.step, step=self.loop.step)
        losses: list[torch.Tensor] = []
        beat = _Heartbeat.from_env()
        try:
            while self.loop.step < until:
                if self._skips:
                    self._apply_skips()
                loss = self._one_step()
                losses.append(loss)
                if self.on_step is not None:
                    self.on_step(self.loop.step, loss)
                request = self.preemption.poll() if self.preemption is not None else None
                due = self.save_every is not None and self.loop.step % self.save_every == 0
                if due or request is not None:
                    result.saved.append(self.save())
                if request == "save" and self.preemption is not None:
                    self.preemption.clear_save_request()
                if beat is not None:
                    beat.write(self.loop.step)
                if request == "stop":
                    result.preempted = True
                    result.signal = self.preemption.signal_received if self.preemption else None
                    logger.warning("preempted (signal %s): saved at step %d, stopping",
                                   result.signal, self.loop.step)
                    break
        finally:
            if beat is not None:
                beat.close()
            result.step = self.loop.step
            if losses:
                result.losses = torch.stack(losses).tolist()
        return result


class _Heartbeat:
    """The steps done, rewritten in place after every step (``TRAINMEDIC_HEARTBEAT``)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def from_env(cls) -> _Heartbeat | None:
        path = os.environ.get("TRAINMEDIC_HEARTBEAT")
        if not path:
            return None
        try:
            return cls(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
        except OSError as exc:
            logger.warning("cannot write the heartbeat file %s: %s", path, exc)
            return None

    def write(self, step: int) -> None:
        # Fixed width: a shorter number never leaves digits of a longer one behind.
        with contextlib.suppress(OSError):
            os.pwrite(self.fd, f"{step:>20}\n".encode(), 0)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def run_recipe(recipe: Recipe, steps: int, *, manager: Checkpointer | None = None,
               save_every: int | None = None, resume: bool = False,
               preemption: PreemptionWatch | None = None) -> RunResult:
    """Run ``recipe`` to ``steps`` optimizer steps in all; ``resume``: from the manager's
    latest good checkpoint when there is one."""
    runner = RecipeRunner(recipe, manager=manager, save_every=save_every, preemption=preemption)
    if resume:
        runner.resume()
    return runner.run(steps)
