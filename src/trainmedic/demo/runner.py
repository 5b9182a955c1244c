"""``trainmedic demo``: train the tiny character transformer on CPU, with one fault injected.

Every fault is produced by the training itself, never by editing recorded numbers; the
watcher records what happened into the run store exactly as it would for a user's loop.

=========  ================================================================================
fault      mechanism
=========  ================================================================================
none       AdamW, linear warm-up then cosine decay to 10 %, peak lr 3e-3: the boring default
diverge    SGD with momentum 0.9 at lr 1.0, warmed up over 10 % of the steps, then held: the
           weights grow geometrically, the loss climbs from step ~10 and overflows to inf/NaN
           about step 23; the watcher's NaN guard drops every non-finite update and replays the
           first ones to name the module where the first non-finite value appeared
spike      three poisoned batches late in the run (corrupt labels: ordinary text in, one
           rare character as every label, a different one each time); the loss jumps ~3.5x
           and is back to normal the next step
flat       the optimizer holds a stale deep copy of the model's parameters (built before the
           model was re-created), so every step updates the copy and the model never learns
overfit    the training set is 0.4 % of the corpus (~430 characters): the model memorizes it
           and the validation loss turns up while the training loss keeps falling
stall      the data loader sleeps 20 ms per batch (a slow disk / decode stand-in), so the
           loop waits for data most of each step
leak       the loop keeps every step's logits and probabilities (still attached to their
           autograd graph) "for an end-of-epoch metric", and a copy of the weights every step
           "to pick the best one at the end", in lists never cleared: resident memory grows by
           ~0.9 MB a step
=========  ================================================================================

Checkpoints (``checkpoint_every``, ``resume``): the model and optimizer through
``CheckpointManager`` under ``<run_dir>/checkpoints``, and the training state of
``trainmedic.checkpoint.training_state`` (step, the global RNG streams and, in ``extra``, the
state of the generator the batches are drawn from), so a resumed demo draws the very batches
the uninterrupted one would and records the same losses. The learning rate is a function of
the step, so there is no scheduler state. SIGTERM / SIGUSR1 save at the next step boundary and
stop the run (:class:`~trainmedic.checkpoint.preemption.Preempted`); touching
``<run_dir>/checkpoints/SAVE_NOW`` saves and goes on. The ``flat`` fault's stale copy (the
one its optimizer steps) is not saved: a resumed ``flat`` run starts the copy over.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import gc
import logging
import math
import pathlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainmedic.errors import ConfigError
from trainmedic.run.store import remove_store

if TYPE_CHECKING:
    from pathlib import Path

    from trainmedic.checkpoint.preemption import Preempted

__all__ = ["DemoConfig", "FAULTS", "DEFAULT_STEPS", "run_demo"]

logger = logging.getLogger(__name__)

#: Every fault ``trainmedic demo --fault`` accepts, ``none`` first.
FAULTS: tuple[str, ...] = ("none", "diverge", "spike", "flat", "overfit", "stall", "leak")

#: Steps per demo when not given: long enough for every detector to see its fault clearly.
DEFAULT_STEPS = 200

_PEAK_LR = 3e-3
_DIVERGE_LR = 1.0
_DIVERGE_MOMENTUM = 0.9
#: Per-layer health every this many steps: the demo shows the full watcher.
_LAYER_EVERY = 25
_STALL_SLEEP_S = 0.020
_OVERFIT_TRAIN_FRACTION = 0.004
_SPIKE_AT = (0.55, 0.7, 0.85)


@dataclass(kw_only=True, frozen=True)
class DemoConfig:
    """What ``run_demo`` trains. Every field is checked; a bad one raises ``ConfigError``."""

    fault: str = "none"
    """The fault to inject: one of ``FAULTS``."""

    steps: int = DEFAULT_STEPS
    """Optimizer steps to train (at least 10)."""

    out_dir: pathlib.Path | None = None
    """The run directory for the store; ``None``: ``./trainmedic-demo/<fault>``. A store
    already there is replaced, so a rerun does not look like a resume."""

    seed: int = 0
    """Seed for the model init, the batch order and the poisoned batches (>= 0)."""

    batch_size: int = 16
    """Sequences per step (>= 1)."""

    context_len: int = 64
    """Characters per sequence (8 to 512)."""

    eval_every: int = 10
    """Evaluate ``val_loss`` on the held-out split every this many steps (>= 1)."""

    num_threads: int | None = None
    """torch CPU threads while the demo runs (restored after); ``None``: 1. The model is too
    small to gain from more, and on a 2-vCPU machine two OpenMP threads next to the store's
    writer thread made some steps take seconds (measured), which is noise in step times."""

    checkpoint_every: int | None = None
    """Save a checkpoint every this many steps under ``<run_dir>/checkpoints`` (the last 3
    kept); ``None``: none (SIGTERM then stops the demo as it would any process)."""

    resume: bool = False
    """Continue from the latest good checkpoint under ``<run_dir>/checkpoints``: the store is
    kept and the run goes on from the checkpoint's step. With no checkpoint there, the demo
    starts from step 0."""

    force: bool = False
    """With ``resume``: continue even from a checkpoint saved with another config (more
    ``steps``, another ``seed``); the differences are logged as a warning. Without it such a
    checkpoint is refused with the differences named."""

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise ConfigError(f"fault must be one of {', '.join(FAULTS)}; got {self.fault!r}")
        _check_int("steps", self.steps, 10, 1_000_000)
        _check_int("seed", self.seed, 0, 2**63 - 1)
        _check_int("batch_size", self.batch_size, 1, 4096)
        _check_int("context_len", self.context_len, 8, 512)
        _check_int("eval_every", self.eval_every, 1, 1_000_000)
        if self.num_threads is not None:
            _check_int("num_threads", self.num_threads, 1, 1024)
        if self.checkpoint_every is not None:
            _check_int("checkpoint_every", self.checkpoint_every, 1, 1_000_000)
        for name in ("resume", "force"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.out_dir is not None and not isinstance(self.out_dir, pathlib.Path):
            try:
                object.__setattr__(self, "out_dir", pathlib.Path(self.out_dir))
            except TypeError:
                raise ConfigError(f"out_dir must be a path, got {self.out_dir!r}") from None

    @property
    def run_dir(self) -> pathlib.Path:
        """Where the run store goes."""
        if self.out_dir is not None:
            return self.out_dir
        return pathlib.Path("trainmedic-demo") / self.fault

    @property
    def checkpoint_dir(self) -> pathlib.Path:
        """Where checkpoints go: ``<run_dir>/checkpoints``."""
        return self.run_dir / "checkpoints"

    def training_config(self) -> dict[str, Any]:
        """What defines the training (hashed into each checkpoint: a checkpoint of another
        fault, seed, length or batch shape is refused)."""
        return {"demo_fault": self.fault, "steps": self.steps, "seed": self.seed,
                "batch_size": self.batch_size, "context_len": self.context_len}


def _check_int(name: str, value: Any, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise ConfigError(f"{name} must be between {lo} and {hi}, got {value}")


def _lr_at(step: int, steps: int, peak: float, *, decay: bool = True) -> float:
    """Linear warm-up over 10 % of the run (at least 5 steps), then cosine down to 10 %
    (or held at ``peak`` when ``decay`` is off)."""
    warm = max(5, steps // 10)
    if step < warm:
        return peak * (step + 1) / warm
    if not decay:
        return peak
    progress = (step - warm) / max(1, steps - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))))


def trusted_before(run_dir: Path) -> Callable[[], int | None]:
    """What the demo's checkpoint manager calls to know from which step checkpoints hold a
    broken model: the divergence onset ``trainmedic diagnose`` finds in the demo's run."""
    from trainmedic.diagnose.onset import divergence_onset

    return lambda: divergence_onset(run_dir)


def _clear_store(run_dir: pathlib.Path) -> None:
    """Remove an earlier demo's store files (only ours) so the new run starts its own record;
    a store that a running demo is writing is refused (StoreLockedError), not deleted."""
    if not run_dir.is_dir():
        return
    for p in sorted(run_dir.glob("metrics*.sqlite")):
        remove_store(p)


def _return_freed_memory() -> None:
    """Hand freed heap pages back to the OS (glibc ``malloc_trim``), so ``rss_mb`` starts from
    the memory really in use. Without it, a demo run in a long-lived process (a test session,
    a notebook) first refills pages an earlier run freed, and a leak hides for a while.
    Collect cyclic garbage first: objects an earlier run left in reference cycles would
    otherwise be freed by the collector *during* this run, and the leak would refill them."""
    gc.collect()
    try:
        import ctypes
        import ctypes.util

        name = ctypes.util.find_library("c")
        if name and "libc" in name:
            ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass


def _save(manager: Any, model: Any, optimizer: Any, gen: Any, step: int, batch: int,
          context: int) -> pathlib.Path:
    """A checkpoint at the boundary after ``step`` steps: weights, optimizer, counters, RNG,
    and the batch generator's state (the demo's data position)."""
    from trainmedic.checkpoint import training_state

    loop = training_state.LoopState(step=step, samples_seen=step * batch,
                                    tokens_seen=step * batch * context)
    train = training_state.capture(loop, config_hash=None,
                                   extra={"batch_generator": gen.get_state()})
    path: pathlib.Path = manager.save(step, {"model": model, "optimizer": optimizer,
                                             "train": train})
    return path


def _resume(manager: Any, model: Any, optimizer: Any, gen: Any, force: bool) -> int:
    """Load the latest good checkpoint into the model, optimizer, RNG and batch generator;
    return its step."""
    from trainmedic.checkpoint import training_state

    loaded = manager.load({"model": model, "optimizer": optimizer}, force=force)
    loop = training_state.LoopState()
    training_state.restore(loaded.train, loop)
    gen.set_state(loaded.train["extra"]["batch_generator"])
    logger.info("demo resumed from %s at step %d", loaded.path, loop.step)
    return loop.step


def run_demo(config: DemoConfig, *,
             progress: Callable[[int, int], None] | None = None) -> pathlib.Path:
    """Train the demo with ``config.fault`` injected; return the run_dir holding its store.

    ``progress(done, total)`` is called after every step. With checkpoints on, a SIGTERM or
    SIGUSR1 saves at the next step boundary and raises
    :class:`~trainmedic.checkpoint.preemption.Preempted` once the store is closed.
    """
    import numpy as np
    import torch
    import torch.nn.functional as F

    from trainmedic.checkpoint.preemption import Preempted, PreemptionWatch
    from trainmedic.demo.corpus import load_corpus
    from trainmedic.demo.model import CharTransformer
    from trainmedic.live import watch

    cfg = config
    run_dir = cfg.run_dir
    manager: Any = None
    if cfg.checkpoint_every is not None or cfg.resume:
        from trainmedic.checkpoint.manager import CheckpointManager

        # Resume from, and keep, the newest checkpoint saved before a divergence.
        manager = CheckpointManager(cfg.checkpoint_dir, keep_last=3,
                                    trusted_before=trusted_before(run_dir),
                                    config=cfg.training_config())
    resuming = cfg.resume and manager.latest() is not None
    if not resuming:
        _clear_store(run_dir)
    _return_freed_memory()
    threads_before = torch.get_num_threads()
    torch.set_num_threads(cfg.num_threads or 1)
    try:
        text = load_corpus()
        vocab = sorted(set(text))
        ids = np.frombuffer(text.encode("latin-1", "replace"), dtype=np.uint8)
        lut = np.zeros(256, dtype=np.int64)
        for i, ch in enumerate(vocab):
            lut[ord(ch) if ord(ch) < 256 else ord("?")] = i
        data = torch.from_numpy(lut[ids])
        n_val = len(data) // 10
        train, val = data[:-n_val], data[-n_val:]
        if cfg.fault == "overfit":
            train = train[: max(cfg.context_len * 4, int(len(train) * _OVERFIT_TRAIN_FRACTION))]
        T, B = cfg.context_len, cfg.batch_size
        if len(train) <= T + 1:
            raise ConfigError(f"context_len {T} is longer than the training text")

        gen = torch.Generator().manual_seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        model = CharTransformer(len(vocab), context_len=T)
        peak = _DIVERGE_LR if cfg.fault == "diverge" else _PEAK_LR
        optimizer: torch.optim.Optimizer
        if cfg.fault == "flat":
            # The bug: an optimizer built over a copy made before the "real" model was set up
            # (e.g. before loading weights or moving devices); it steps the copy only.
            stale = copy.deepcopy(model)
            optimizer = torch.optim.AdamW(stale.parameters(), lr=peak, weight_decay=0.01)
        elif cfg.fault == "diverge":
            # Plain SGD with momentum at a rate it cannot take: unlike Adam, whose step size
            # is bounded by the lr, nothing stops the weights growing geometrically.
            optimizer = torch.optim.SGD(model.parameters(), lr=peak,
                                        momentum=_DIVERGE_MOMENTUM)
        else:
            optimizer = torch.optim.AdamW(model.parameters(), lr=peak, weight_decay=0.01)
        start = 0
        if resuming:
            start = _resume(manager, model, optimizer, gen, cfg.force)

        val_gen = torch.Generator().manual_seed(12345)
        val_starts = torch.randint(0, len(val) - T - 1, (64,), generator=val_gen)
        val_x = torch.stack([val[s:s + T] for s in val_starts])
        val_y = torch.stack([val[s + 1:s + T + 1] for s in val_starts])
        rare_chars = torch.bincount(train, minlength=len(vocab)).argsort().tolist()
        spike_steps = {int(f * cfg.steps) for f in _SPIKE_AT} if cfg.fault == "spike" else set()

        def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            for step in range(start, cfg.steps):
                if cfg.fault == "stall":
                    time.sleep(_STALL_SLEEP_S)  # the slow loader: real wall time, measured
                starts = torch.randint(0, len(train) - T - 1, (B,), generator=gen)
                x = torch.stack([train[s:s + T] for s in starts])
                y = torch.stack([train[s + 1:s + T + 1] for s in starts])
                if step in spike_steps:
                    # A corrupt batch: the labels are one junk (rare) character throughout.
                    junk = rare_chars[len(spike_steps & set(range(step)))]
                    y = torch.full_like(y, junk)
                yield x, y

        def evaluate() -> float:
            model.eval()
            with torch.no_grad():
                logits = model(val_x)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), val_y.reshape(-1))
            model.train()
            return float(loss)

        kept_for_metric: list[torch.Tensor] = []  # the leak's list
        meta = {"demo_fault": cfg.fault, "demo_seed": cfg.seed, "demo_steps": cfg.steps,
                "model": "CharTransformer(d_model=64, n_layers=2)",
                "batch_size": B, "context_len": T, "peak_lr": peak,
                "optimizer": type(optimizer).__name__,
                "config": {k: str(v) for k, v in dataclasses.asdict(cfg).items()}}

        def batch_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            logits = model(x)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

        preempted: Preempted | None = None
        with contextlib.ExitStack() as stack:
            preemption = None
            if manager is not None and cfg.checkpoint_every is not None:
                preemption = stack.enter_context(
                    PreemptionWatch(flag_file=cfg.checkpoint_dir / "SAVE_NOW"))
            # The demo command draws its own progress and says where the run went: the
            # watcher's start/exit lines and progress line would say it twice.
            w = stack.enter_context(watch(model, optimizer, run_dir=run_dir, meta=meta,
                                          layer_every=_LAYER_EVERY, nan_policy="skip",
                                          start_step=start, announce=False, progress=False))
            for step, (x, y) in enumerate(w.wrap_loader(batches()), start=start):
                for group in optimizer.param_groups:
                    group["lr"] = _lr_at(step, cfg.steps, peak, decay=cfg.fault != "diverge")
                model.zero_grad(set_to_none=True)
                logits = model(x)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
                loss.backward()
                optimizer.step()
                if cfg.fault == "leak":
                    # "for an end-of-epoch calibration metric": graph and all, never cleared
                    kept_for_metric.extend((logits, logits.softmax(-1)))
                    # "to pick the best weights at the end": a full copy every step
                    kept_for_metric.extend(p.detach().clone() for p in model.parameters())
                # replay: the NaN guard reruns this batch, only on a non-finite step.
                w.step(loss, batch_size=B, tokens=B * T,
                       replay=functools.partial(batch_loss, x, y))
                if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
                    w.log({"val_loss": evaluate()})
                if progress is not None:
                    progress(step + 1, cfg.steps)
                if manager is None:
                    continue
                request = preemption.poll() if preemption is not None else None
                due = cfg.checkpoint_every is not None and (step + 1) % cfg.checkpoint_every == 0
                if due or request is not None:
                    path = _save(manager, model, optimizer, gen, step + 1, B, T)
                    if request == "save" and preemption is not None:
                        preemption.clear_save_request()
                    if request == "stop" and preemption is not None:
                        preempted = Preempted(step + 1, path, preemption.signal_received)
                        break
        del kept_for_metric
        if manager is not None:
            manager.wait()
        if preempted is not None:
            raise preempted
    finally:
        torch.set_num_threads(threads_before)
    return run_dir
