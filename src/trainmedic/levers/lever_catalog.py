"""The levers ``trainmedic try`` can pull: each turns a freshly built recipe into another.

A lever says which parts of the training contract (DESIGN.md, "The recipe") it changes, and
whether it is expected to change the optimization numerics; the trial measures the rest.

=========================  ====================================  ==========================
lever[=VALUE]              what it does                          contract it changes
=========================  ====================================  ==========================
num_workers[=N]            the DataLoader with N workers         nothing
pin_memory                 page-locked batches                   nothing
prefetch[=N]               prefetch_factor N (needs workers)     nothing
bf16 / fp16                autocast (fp16 with a GradScaler)     precision (numerics: yes)
compile[=MODE]             ``torch.compile`` the model           nothing
channels_last              NHWC weights and 4-d inputs           nothing
foreach / fused            the optimizer's multi-tensor / fused  nothing
                           implementation
micro_batch[=K]            batch/K per micro-batch, accum*K      shapes and batch/update
activation_checkpointing   recompute each block of the model's   nothing
                           largest ModuleList/Sequential
adam8bit                   bitsandbytes' 8-bit AdamW             optimizer/schedule
                                                                 (numerics: yes)
=========================  ====================================  ==========================

A lever is registered with :func:`register_lever` (a second one of the same name is a
``RegistryError``, as the demo's faults are). :func:`parse_lever` reads ``NAME[=VALUE]``.
Transforms may change the fresh recipe's objects in place (compile wraps the model,
channels_last converts its parameters, the optimizer flags are set on its param groups): the
parameters stay the same tensors, so the optimizer and scheduler still match; never hand a
lever a recipe that something else is still training.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainmedic.errors import ConfigError, RegistryError
from trainmedic.levers import lever_transforms as tf

if TYPE_CHECKING:
    from trainmedic.recipe.recipe import Recipe

__all__ = ["CONTRACT_PARTS", "Lever", "LeverChoice", "register_lever", "get_lever",
           "lever_names", "parse_lever", "apply_levers"]

#: The parts of the training contract a lever may change (DESIGN.md, "The recipe").
CONTRACT_PARTS = ("model/data/objective", "optimizer/schedule", "precision",
                  "shapes and batch/update semantics")

_REGISTRY: dict[str, Lever] = {}


@dataclass(frozen=True)
class Lever:
    """One lever. Subclasses implement :meth:`apply` (and :meth:`parse` when it takes a
    value)."""

    name: str
    """What ``--lever NAME`` calls it."""
    summary: str
    """What it does, in one line."""
    changes: tuple[str, ...] = ()
    """The parts of ``CONTRACT_PARTS`` it changes (empty: none)."""
    changes_numerics: bool = False
    """Expected to change the optimization numerics (the trial marks it so whatever the
    measured loss says)."""
    targets: str = ""
    """The constraint it relieves, e.g. "time the step waits for data"."""
    cost: str = ""
    """What it is known to cost elsewhere (memory, cores, compile time, numerics)."""
    value_help: str = ""
    """The VALUE it takes (empty: none)."""

    def __post_init__(self) -> None:
        bad = [c for c in self.changes if c not in CONTRACT_PARTS]
        if bad:
            raise ConfigError(f"changes: got {bad!r}; expected parts of {CONTRACT_PARTS}")
        if not self.name or "=" in self.name or " " in self.name:
            raise ConfigError(f"name: got {self.name!r}; expected a word without '=' or spaces")

    def parse(self, raw: str | None) -> Any:
        """The lever's value from ``NAME=VALUE`` (``raw`` None: none given)."""
        if raw is not None:
            raise ConfigError(f"--lever {self.name}: takes no value, got {raw!r}; write "
                              f"--lever {self.name}")
        return None

    def apply(self, recipe: Recipe, value: Any) -> Recipe:
        """The recipe with the lever pulled."""
        raise NotImplementedError(f"lever {self.name} has no apply()")

    def _int(self, raw: str | None, default: int, lo: int, hi: int) -> int:
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            value = lo - 1
        if not lo <= value <= hi:
            raise ConfigError(f"--lever {self.name}: got {raw!r}, expected an integer from "
                              f"{lo} to {hi}, e.g. --lever {self.name}={max(lo, 2)}")
        return value


@dataclass(frozen=True)
class LeverChoice:
    """A lever with the value it was given."""

    lever: Lever
    value: Any = None

    @property
    def label(self) -> str:
        """``name`` or ``name=value``."""
        return self.lever.name if self.value is None else f"{self.lever.name}={self.value}"


def register_lever(lever: Lever) -> Lever:
    """Add ``lever`` to the registry; a name registered twice is a ``RegistryError``."""
    if lever.name in _REGISTRY:
        raise RegistryError(f"lever {lever.name!r} is already registered; pick another name")
    _REGISTRY[lever.name] = lever
    return lever


def get_lever(name: str) -> Lever:
    """The registered lever ``name``; an unknown one is a ``RegistryError`` listing them."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise RegistryError(f"--lever: no lever {name!r}; expected one of "
                            f"{', '.join(_REGISTRY)}") from None


def lever_names() -> Iterator[str]:
    """Registered lever names, in registration order."""
    return iter(tuple(_REGISTRY))


def parse_lever(spec: str) -> LeverChoice:
    """``"num_workers=2"`` -> the lever and its parsed value (unknown: ``RegistryError``; bad
    value: ``ConfigError``)."""
    name, sep, raw = spec.partition("=")
    lever = get_lever(name.strip())
    if sep and not raw.strip():
        raise ConfigError(f"--lever {spec!r}: empty value; write --lever {lever.name} or "
                          f"--lever {lever.name}=VALUE")
    return LeverChoice(lever, lever.parse(raw.strip() if sep else None))


def apply_levers(recipe: Recipe, choices: tuple[LeverChoice, ...]) -> Recipe:
    """``recipe`` with every lever of ``choices`` pulled, in order."""
    for choice in choices:
        recipe = choice.lever.apply(recipe, choice.value)
    return recipe


# -- data loading ----------------------------------------------------------------------------

@dataclass(frozen=True)
class _NumWorkers(Lever):
    def parse(self, raw: str | None) -> Any:
        from trainmedic.bench.machine import usable_cores

        return self._int(raw, max(1, min(4, usable_cores())), 0, 64)

    def apply(self, recipe: Recipe, value: Any) -> Recipe:
        loader = tf.require_loader(recipe, self.name)
        if loader.num_workers == value:
            raise ConfigError(f"--lever {self.name}={value}: the recipe already loads with "
                              f"num_workers={value}; nothing to try")
        return dataclasses.replace(recipe, data=tf.rebuild_loader(loader, num_workers=value))


@dataclass(frozen=True)
class _PinMemory(Lever):
    def apply(self, recipe: Recipe, value: Any) -> Recipe:
        loader = tf.require_loader(recipe, self.name)
        if loader.pin_memory:
            raise ConfigError(f"--lever {self.name}: the recipe's loader already pins memory; "
                              "nothing to try")
        return dataclasses.replace(recipe, data=tf.rebuild_loader(loader, pin_memory=True))


@dataclass(frozen=True)
class _Prefetch(Lever):
    def parse(self, raw: str | None) -> Any:
        return self._int(raw, 4, 1, 64)

    def apply(self, recipe: Recipe, value: Any) -> Recipe:
        loader = tf.require_loader(recipe, self.name)
        if loader.num_workers == 0:
            raise ConfigError(f"--lever {self.name}: prefetch_factor needs worker processes "
                              "and the recipe's loader has num_workers=0; stack it after "
                              "--lever num_workers")
        if loader.prefetch_factor == value:
            raise ConfigError(f"--lever {self.name}={value}: the loader already prefetches "
                              f"{value} batches per worker; nothing to try")
        return dataclasses.replace(recipe, data=tf.rebuild_loader(loader,
                                                                  prefetch_factor=value))


# -- precision -------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Precision(Lever):
    precision: str = "bf16-mixed"

    def apply(self, recipe: Recipe, value: Any) -> Recipe:
        if recipe.precision != "fp32":
            raise ConfigError(f"--lever {self.name}: the recipe already runs "
                              f"{recipe.precision}; this lever starts from fp32")
        scaler = recipe.scaler
        if self.precision == "fp16-mixed" and scaler is None:
            scaler = tf.grad_scaler(recipe.model)
        return dataclasses.replace(recipe, precision=self.precision, scaler=scaler)


# -- model -----------------------------------------------------------------------------------

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class _Compile(Lever):
    def parse(self, raw: str | None) -> Any:
        if raw is None:
            return None
        if raw not in COMPILE_MODES:
            raise ConfigError(f"--lever {self.name}: got mode {raw!r}, expected one of "
                              f"{', '.join(COMPILE_MODES)}")
        return raw

    def apply(self, recipe: Recipe, value: Any) -> Recipe:
        return dataclasses.replace(recipe, model=tf.compile_model(recipe.model, value))


@dataclass(frozen=True)
class _ChannelsLast(Lever):
    def apply(self, recipe: Recipe, value: Any) -> Recipe:
        model, loss_fn = tf.channels_last(recipe.model, recipe.loss_fn)
        return dataclasses.replace(recipe, model=model, loss_fn=loss_fn)


@dataclass(frozen=True)
class _Checkpointing(Lever):
    def apply(self, recipe: Recipe, value: Any) -> Recipe:
        tf.checkpoint_blocks(recipe.model)
        return recipe


# -- optimizer -------------------------------------------------------------------------------

@dataclass(frozen=True)
class _OptimizerImpl(Lever):
    flag: str = "foreach"

    def apply(self, recipe: Recipe, value: Any) -> Recipe:
        tf.set_optimizer_impl(recipe.optimizer, self.flag)
        return recipe


@dataclass(frozen=True)
class _Adam8bit(Lever):
    def apply(self, recipe: Recipe, value: Any) -> Recipe:
        return dataclasses.replace(recipe, optimizer=tf.adam8bit(recipe.optimizer,
                                                                 recipe.scheduler))


# -- batch -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _MicroBatch(Lever):
    def parse(self, raw: str | None) -> Any:
        return self._int(raw, 2, 2, 4096)

    def apply(self, recipe: Recipe, value: Any) -> Recipe:
        loader = tf.require_loader(recipe, self.name)
        size = int(loader.batch_size)
        if size % value:
            raise ConfigError(f"--lever {self.name}={value}: batch_size {size} is not a "
                              f"multiple of {value}, so the global batch would change; pick "
                              f"a divisor of {size}")
        return dataclasses.replace(recipe, grad_accum=recipe.grad_accum * value,
                                   data=tf.rebuild_loader(loader, batch_size=size // value))


_DATA = "time the step waits for the next batch (input-bound)"
_COMPUTE = "time in the model's kernels (compute- or memory-bound)"

for _lever in (
    _NumWorkers(
        "num_workers", "load batches in worker processes", targets=_DATA,
        cost="N more processes: cores and host memory (each worker holds a dataset copy)",
        value_help="N (default: the usable cores, at most 4)"),
    _PinMemory(
        "pin_memory", "page-locked host batches, for asynchronous copies to the GPU",
        targets="host-to-device copy time",
        cost="page-locked host memory; no use without CUDA"),
    _Prefetch(
        "prefetch", "more batches loaded ahead by each worker (prefetch_factor)", targets=_DATA,
        cost="host memory for N x workers batches", value_help="N (default 4)"),
    _Precision(
        "bf16", "autocast to bfloat16", ("precision",), True, targets=_COMPUTE,
        cost="bfloat16 rounding (8 bits of mantissa) in matmuls; on a CPU without bf16 "
             "units it is often slower", precision="bf16-mixed"),
    _Precision(
        "fp16", "autocast to float16 with a GradScaler", ("precision",), True,
        targets=_COMPUTE, cost="float16 range: loss scaling, skipped steps on overflow",
        precision="fp16-mixed"),
    _Compile(
        "compile", "torch.compile the model", targets=_COMPUTE + " and Python overhead",
        cost="compile time at the first steps (and at every new shape); compiled kernels "
             "round differently", value_help="MODE (default, reduce-overhead, max-autotune)"),
    _ChannelsLast(
        "channels_last", "NHWC memory format for Conv2d models", targets=_COMPUTE,
        cost="layout conversions where an op wants NCHW"),
    _OptimizerImpl(
        "foreach", "the optimizer's multi-tensor (foreach) implementation",
        targets="optimizer step time (many small kernels)",
        cost="a temporary copy of the gradients' size during the step", flag="foreach"),
    _OptimizerImpl(
        "fused", "the optimizer's fused kernel", targets="optimizer step time",
        cost="rounding may differ from the for-loop implementation", flag="fused"),
    _MicroBatch(
        "micro_batch", "batch_size/K per micro-batch, grad_accum*K (same global batch)",
        ("shapes and batch/update semantics",),
        targets="activation memory (peak bytes)",
        cost="K smaller forward/backward passes: usually slower; equal updates only when the "
             "loss is a per-sample mean over equal micro-batches and nothing (BatchNorm) "
             "couples samples", value_help="K (default 2; must divide batch_size)"),
    _Checkpointing(
        "activation_checkpointing", "recompute each block's activations in backward",
        targets="activation memory (peak bytes)",
        cost="one more forward of each block per step (~+30% compute)"),
    _Adam8bit(
        "adam8bit", "bitsandbytes' 8-bit AdamW (same hyperparameters)",
        ("optimizer/schedule",), True, targets="optimizer-state memory",
        cost="8-bit quantized optimizer state changes the updates"),
):
    register_lever(_lever)
