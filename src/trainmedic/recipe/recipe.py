"""The recipe: what a user hands trainmedic so it can build and run their training.

A recipe factory is a function ``fn(**overrides) -> Recipe`` named ``module:function`` or
``path/to/file.py:function``; :func:`load_recipe` imports it and calls it. Resume tests,
profiling, lever trials and preflight checks all start from the same :class:`Recipe`, so it
holds only what defines the training: model, optimizer, schedule, data, objective, precision
and the batch/update semantics. This module does not import torch.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainmedic.errors import ConfigError, InputError, TrainmedicError
from trainmedic.recipe.entry_point import load_callable

if TYPE_CHECKING:
    import torch

__all__ = ["Recipe", "PRECISIONS", "load_recipe", "config_hash"]

#: ``Recipe.precision`` values: full fp32, or autocast to bf16 / fp16 around the loss.
PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed")


def config_hash(config: Mapping[str, Any]) -> str:
    """sha256 (first 16 hex digits) of the config as canonical JSON (sorted keys)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(kw_only=True, frozen=True)
class Recipe:
    """One training, ready to run. A bad field raises ``ConfigError`` naming it."""

    model: torch.nn.Module
    """The module trained, already on its device (wrap it in DDP / FSDP before handing it
    over). The checkpoint saves its ``state_dict``."""

    optimizer: torch.optim.Optimizer
    """Steps the model's parameters (every parameter it holds must be one of the model's, or
    a checkpoint would not restore it)."""

    loss_fn: Callable[[Any, Any], torch.Tensor]
    """``loss_fn(model, batch)`` -> the scalar loss of one micro-batch (a mean over it)."""

    data: Iterable[Any]
    """A re-iterable loader: one pass is one epoch (a ``DataLoader``, or a list of batches;
    not a generator, which runs once)."""

    scheduler: Any | None = None
    """An LR scheduler of ``optimizer``, stepped once per optimizer step; ``None``: none."""

    scaler: Any | None = None
    """A ``torch.amp.GradScaler`` (required with ``fp16-mixed``); ``None``: none."""

    precision: str = "fp32"
    """One of ``PRECISIONS``: ``fp32``, or autocast to ``bf16-mixed`` / ``fp16-mixed``."""

    grad_accum: int = 1
    """Micro-batches per optimizer step (>= 1); the loss is divided by it before backward."""

    max_grad_norm: float | None = None
    """Clip the global gradient norm to this (> 0) before each step; ``None``: no clipping."""

    config: Mapping[str, Any] = field(default_factory=dict)
    """The JSON-able settings the recipe was built from; hashed into each checkpoint, which a
    run with another config refuses to load."""

    seed: int | None = None
    """Seeds python, numpy and torch at the start of a fresh run (not on resume, which
    restores the streams); ``None``: leave them as the factory left them."""

    def __post_init__(self) -> None:
        _check_has("model", self.model, ("parameters", "state_dict", "load_state_dict"))
        _check_has("optimizer", self.optimizer,
                   ("step", "zero_grad", "state_dict", "load_state_dict"))
        if not hasattr(self.optimizer, "param_groups"):
            raise ConfigError(f"optimizer must be a torch optimizer (with param_groups), got "
                              f"{type(self.optimizer).__name__}")
        if not callable(self.loss_fn):
            raise ConfigError(f"loss_fn must be callable as loss_fn(model, batch), got "
                              f"{type(self.loss_fn).__name__}")
        if not isinstance(self.data, Iterable) or isinstance(self.data, Iterator):
            raise ConfigError(f"data must be re-iterable (a DataLoader or a list; one pass is "
                              f"one epoch), got {type(self.data).__name__}")
        if self.scheduler is not None:
            _check_has("scheduler", self.scheduler, ("step", "state_dict", "load_state_dict"))
            owner = getattr(self.scheduler, "optimizer", self.optimizer)
            if owner is not self.optimizer:
                raise ConfigError("scheduler steps another optimizer than the recipe's; build "
                                  "it over recipe.optimizer")
        if self.scaler is not None:
            _check_has("scaler", self.scaler,
                       ("scale", "step", "update", "unscale_", "state_dict", "load_state_dict"))
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got "
                              f"{self.precision!r}")
        if self.precision == "fp16-mixed" and self.scaler is None:
            raise ConfigError("scaler: fp16-mixed needs a GradScaler (fp16 gradients underflow "
                              "without loss scaling); pass scaler=torch.amp.GradScaler()")
        if isinstance(self.grad_accum, bool) or not isinstance(self.grad_accum, int) \
                or self.grad_accum < 1:
            raise ConfigError(f"grad_accum must be an integer >= 1, got {self.grad_accum!r}")
        m = self.max_grad_norm
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float))
                              or not math.isfinite(m) or m <= 0):
            raise ConfigError(f"max_grad_norm must be a finite number > 0 or None, got {m!r}")
        if not isinstance(self.config, Mapping):
            raise ConfigError(f"config must be a mapping, got {type(self.config).__name__}")
        try:
            config_hash(self.config)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"config must be JSON-able (str keys; numbers, strings, lists, "
                              f"dicts): {exc}") from None
        s = self.seed
        if s is not None and (isinstance(s, bool) or not isinstance(s, int) or s < 0):
            raise ConfigError(f"seed must be an integer >= 0 or None, got {s!r}")
        model_params = {id(p) for p in self.model.parameters()}
        stray = sum(1 for g in self.optimizer.param_groups for p in g["params"]
                    if id(p) not in model_params)
        if stray:
            raise ConfigError(f"optimizer holds {stray} tensor(s) that are not parameters of "
                              "the model (a stale copy?); a checkpoint saves the model's, so "
                              "build the optimizer over model.parameters()")

    @property
    def config_hash(self) -> str:
        """:func:`config_hash` of ``config``."""
        return config_hash(self.config)


def _check_has(name: str, obj: Any, methods: tuple[str, ...]) -> None:
    missing = [m for m in methods if not callable(getattr(obj, m, None))]
    if missing:
        raise ConfigError(f"{name}: a {type(obj).__name__} has no {', '.join(missing)}; "
                          f"expected a torch {name} object")


# -- loading ---------------------------------------------------------------------------------

def load_recipe(spec: str, **overrides: Any) -> Recipe:
    """Import the factory ``spec`` ("module:function" or "path/file.py:function"), call it with
    ``overrides`` and return its :class:`Recipe`. Every failure is a one-line
    :class:`~trainmedic.errors.TrainmedicError` naming the spec and what was expected."""
    if not isinstance(spec, str):
        raise ConfigError(f"recipe must be a 'module:function' string, got {spec!r}")
    fn = load_callable(spec, what="recipe function (returning a trainmedic.Recipe)")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    if sig is not None and not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        accepted = [n for n, p in sig.parameters.items()
                    if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
        for key in overrides:
            if key not in accepted:
                raise ConfigError(f"{key}: recipe {spec} takes no such parameter; it takes "
                                  f"{', '.join(accepted) or 'none'}")
    try:
        recipe = fn(**overrides)
    except TrainmedicError:
        raise
    except TypeError as exc:
        unexpected = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        if unexpected:
            raise ConfigError(f"{unexpected.group(1)}: recipe {spec} takes no such "
                              "parameter") from None
        raise InputError(spec, f"the recipe function raised TypeError: "
                         f"{' '.join(str(exc).split())}") from exc
    except Exception as exc:
        raise InputError(spec, f"the recipe function raised {type(exc).__name__}: "
                         f"{' '.join(str(exc).split())}") from exc
    if not isinstance(recipe, Recipe):
        raise InputError(spec, f"returned a {type(recipe).__name__}, expected a "
                         "trainmedic.Recipe")
    return recipe
