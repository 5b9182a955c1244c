"""``trainmedic demo``: train the tiny character transformer on CPU, with one fault injected.

The demo is the demo recipe (``trainmedic.demo.char_recipe.recipe``) run by
:class:`~trainmedic.recipe.runner.RecipeRunner` under the watcher: the product's one training
loop. A fault (``trainmedic.demo.faults``: the registry and what each one does) changes the
recipe, the batches or the step, never the recorded numbers; the watcher records what
happened into the run store exactly as it would for a user's loop.

Checkpoints (``checkpoint_every``, ``resume``) are the runner's: model, optimizer, schedule and
the training state (step, the RNG streams, the data loader's position) through
``CheckpointManager`` under ``<run_dir>/checkpoints``, so a resumed demo draws the very batches
the uninterrupted one would and records the same losses. SIGTERM / SIGUSR1 save at the next
step boundary and stop the run (:class:`~trainmedic.checkpoint.preemption.Preempted`); touching
``<run_dir>/checkpoints/SAVE_NOW`` saves and goes on. The ``flat`` fault's stale copy (the
one its optimizer steps) is the optimizer's: a resumed ``flat`` run carries it on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import logging
import pathlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainmedic.demo.faults import FAULTS, get_fault
from trainmedic.errors import ConfigError
from trainmedic.run.store import remove_store

if TYPE_CHECKING:
    from pathlib import Path


__all__ = ["DemoConfig", "FAULTS", "DEFAULT_STEPS", "run_demo"]

logger = logging.getLogger(__name__)

#: Steps per demo when not given: long enough for every detector to see its fault clearly.
DEFAULT_STEPS = 200

#: Per-layer health every this many steps: the demo shows the full watcher.
_LAYER_EVERY = 25
#: The peak lr of the healthy demo (AdamW); the diverge fault sets its own.
_PEAK_LR = 3e-3
#: The 64 held-out windows ``val_loss`` is taken on (the same ones every run).
_VAL_WINDOWS = 64
_VAL_SEED = 12345


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

    skip_steps: tuple[int, int] | None = None
    """Drop the batches of steps ``(first, last)`` (0-based, inclusive) when the run reaches
    ``first`` (``RecipeRunner.skip_steps``): to step past the data behind a spike on a
    resume. Recorded in the store as a ``batches_skipped`` event."""

    skip_next: int | None = None
    """Drop the batches of the next this many steps, from where the run starts or resumes
    (>= 1). Under ``trainmedic supervise`` every restart would skip again: use
    ``skip_steps``."""

    def __post_init__(self) -> None:
        if self.skip_steps is not None:
            ok = (isinstance(self.skip_steps, tuple) and len(self.skip_steps) == 2
                  and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                          for v in self.skip_steps)
                  and self.skip_steps[0] <= self.skip_steps[1])
            if not ok:
                raise ConfigError(f"skip_steps must be (first, last) step numbers with "
                                  f"0 <= first <= last, got {self.skip_steps!r}")
        if self.skip_next is not None:
            _check_int("skip_next", self.skip_next, 1, 1_000_000)
        if self.skip_steps is not None and self.skip_next is not None:
            raise ConfigError("skip_next: give skip_steps or skip_next, not both")
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


def _recipe(cfg: DemoConfig) -> Any:
    """The demo recipe with the fault's changes: no dropout and no clipping (the demo shows
    what a plain loop does), 8 characters of window jitter."""
    from trainmedic.demo.char_recipe import recipe

    fault = get_fault(cfg.fault)
    settings: dict[str, Any] = {"steps": cfg.steps, "seed": cfg.seed, "dropout": 0.0,
                                "batch_size": cfg.batch_size, "context_len": cfg.context_len,
                                "lr": _PEAK_LR, "max_grad_norm": None}
    settings.update(fault.overrides(cfg.steps))
    return fault.adapt(recipe(**settings))


def _val_windows(context_len: int) -> tuple[Any, Any]:
    """The fixed held-out windows (inputs, next-character targets) of ``val_loss``."""
    import torch

    from trainmedic.demo.char_recipe import encoded_corpus

    ids, _ = encoded_corpus()
    val = ids[-(len(ids) // 10):]
    starts = torch.randint(0, len(val) - context_len - 1, (_VAL_WINDOWS,),
                           generator=torch.Generator().manual_seed(_VAL_SEED))
    return (torch.stack([val[s:s + context_len] for s in starts]),
            torch.stack([val[s + 1:s + context_len + 1] for s in starts]))


def run_demo(config: DemoConfig, *,
             progress: Callable[[int, int], None] | None = None) -> pathlib.Path:
    """Train the demo with ``config.fault`` injected; return the run_dir holding its store.

    ``progress(done, total)`` is called after every step. With checkpoints on, a SIGTERM or
    SIGUSR1 saves at the next step boundary and raises
    :class:`~trainmedic.checkpoint.preemption.Preempted` once the store is closed.
    """
    import torch

    from trainmedic.checkpoint.preemption import Preempted, PreemptionWatch
    from trainmedic.demo.char_recipe import next_char_loss
    from trainmedic.live import watch
    from trainmedic.recipe.runner import RecipeRunner

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
        recipe = _recipe(cfg)
        model = recipe.model
        val_x, val_y = _val_windows(cfg.context_len)

        def evaluate() -> float:
            model.eval()
            with torch.no_grad():
                loss = next_char_loss(model, (val_x, val_y))
            model.train()
            return float(loss)

        B, T = cfg.batch_size, cfg.context_len
        meta = {"demo_fault": cfg.fault, "demo_seed": cfg.seed, "demo_steps": cfg.steps,
                "model": "CharTransformer(d_model=64, n_layers=2)",
                "batch_size": B, "context_len": T,
                "peak_lr": recipe.optimizer.defaults["lr"],
                "optimizer": type(recipe.optimizer).__name__,
                "config": {k: str(v) for k, v in dataclasses.asdict(cfg).items()}}
        with contextlib.ExitStack() as stack:
            preemption = None
            if manager is not None and cfg.checkpoint_every is not None:
                preemption = stack.enter_context(
                    PreemptionWatch(flag_file=cfg.checkpoint_dir / "SAVE_NOW"))
            runner = RecipeRunner(recipe, manager=manager, save_every=cfg.checkpoint_every,
                                  preemption=preemption, force=cfg.force)
            if resuming:
                runner.resume()
            skip = cfg.skip_steps
            if cfg.skip_next is not None:
                skip = (runner.loop.step, runner.loop.step + cfg.skip_next - 1)
            if skip is not None:
                runner.skip_steps(*skip)
            # The demo command draws its own progress and says where the run went: the
            # watcher's start/exit lines and progress line would say it twice.
            w = stack.enter_context(watch(model, recipe.optimizer, run_dir=run_dir, meta=meta,
                                          layer_every=_LAYER_EVERY, nan_policy="skip",
                                          start_step=runner.loop.step, announce=False,
                                          progress=False))
            runner.fetch_batch = get_fault(cfg.fault).fetch(runner, w.fetch_batch, cfg.steps)
            drawn: list[Any] = [None]

            def on_batch(batch: Any) -> None:
                drawn[0] = batch

            def on_step(done: int, loss: Any) -> None:
                # replay: the NaN guard reruns this batch, only on a non-finite step.
                w.step(loss, batch_size=B, tokens=B * T,
                       replay=functools.partial(recipe.loss_fn, model, drawn[0]))
                if done % cfg.eval_every == 0 or done == cfg.steps:
                    w.log({"val_loss": evaluate()})
                if progress is not None:
                    progress(done, cfg.steps)

            def on_skip(first: int, last: int, batches: int) -> None:
                w.store.event(first, "batches_skipped",
                              {"first_step": first, "last_step": last,
                               "micro_batches": batches,
                               "samples": batches * B, "tokens": batches * B * T})

            runner.on_batch, runner.on_step, runner.on_skip = on_batch, on_step, on_skip
            result = runner.run(cfg.steps)
            drawn.clear()
        if manager is not None:
            manager.wait()
        if result.preempted:
            raise Preempted(result.step, result.saved[-1], result.signal)
    finally:
        torch.set_num_threads(threads_before)
    return run_dir
