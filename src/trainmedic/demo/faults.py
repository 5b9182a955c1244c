"""The demo's faults: small objects in a registry, each changing the recipe, the batches or
the step of the one training loop (``RecipeRunner``), never the recorded numbers.

=========  ================================================================================
fault      mechanism
=========  ================================================================================
none       AdamW, linear warm-up then cosine decay to 10 %, peak lr 3e-3: the boring default
diverge    SGD with momentum 0.9 at lr 1.0, warmed up over 10 % of the steps, then held: the
           weights grow geometrically, the loss climbs and overflows to inf/NaN; the
           watcher's NaN guard drops every non-finite update and replays the first ones to
           name the module where the first non-finite value appeared
spike      three poisoned batches late in the run (corrupt labels: ordinary text in, one
           rare character as every label, a different one each time); the loss jumps and is
           back to normal the next step
flat       the optimizer holds a stale deep copy of the model's parameters (built before the
           model was re-created), so every step updates the copy and the model never learns
overfit    the training set is 0.4 % of the corpus (~430 characters, in overlapping windows):
           the model memorizes it and the validation loss turns up while the training loss
           keeps falling
stall      the data loader sleeps 20 ms per batch (a slow disk / decode stand-in), so the
           loop waits for data most of each step
leak       the loss keeps every step's logits and probabilities (still attached to their
           autograd graph) "for an end-of-epoch metric", and a copy of the weights every step
           "to pick the best one at the end", in lists never cleared: resident memory grows
=========  ================================================================================

A fault is registered with :func:`register_fault` (a second one of the same name is a
``RegistryError``); ``FAULTS`` lists them, ``none`` first.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainmedic.errors import RegistryError

if TYPE_CHECKING:
    from trainmedic.recipe.recipe import Recipe
    from trainmedic.recipe.runner import RecipeRunner

__all__ = ["Fault", "register_fault", "get_fault", "FAULTS"]

#: Every fault by name, in registration order.
_REGISTRY: dict[str, Fault] = {}

Fetch = Callable[[Callable[[], Any]], Any]


@dataclass(frozen=True)
class Fault:
    """One injected fault. The default changes nothing (the healthy run)."""

    name: str

    def overrides(self, steps: int) -> Mapping[str, Any]:
        """Changes to the demo recipe's settings (``trainmedic.demo.char_recipe.recipe``)."""
        return {}

    def adapt(self, recipe: Recipe) -> Recipe:
        """The recipe as the fault leaves it (a changed loss or optimizer)."""
        return recipe

    def fetch(self, runner: RecipeRunner, fetch: Fetch, steps: int) -> Fetch:
        """How each training batch is drawn (``fetch(next_batch)``): a slow or corrupt one."""
        return fetch


def register_fault(fault: Fault) -> Fault:
    """Add ``fault`` to the registry; a name registered twice is a ``RegistryError``."""
    if fault.name in _REGISTRY:
        raise RegistryError(f"demo fault {fault.name!r} is already registered; pick another "
                            "name")
    _REGISTRY[fault.name] = fault
    return fault


def get_fault(name: str) -> Fault:
    """The registered fault ``name``; an unknown one is a ``RegistryError`` listing them."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise RegistryError(f"no demo fault {name!r}; expected one of "
                            f"{', '.join(_REGISTRY)}") from None


@dataclass(frozen=True)
class _Diverge(Fault):
    """Plain SGD with momentum at a rate it cannot take: unlike Adam, whose step size is
    bounded by the lr, nothing stops the weights growing geometrically."""

    def overrides(self, steps: int) -> Mapping[str, Any]:
        return {"optimizer": "sgd", "lr": 1.0, "momentum": 0.9, "schedule": "hold"}


#: Where the poisoned batches fall, as shares of the run.
SPIKE_AT = (0.55, 0.7, 0.85)


@dataclass(frozen=True)
class _Spike(Fault):
    def fetch(self, runner: RecipeRunner, fetch: Fetch, steps: int) -> Fetch:
        import torch

        at = sorted({int(f * steps) for f in SPIKE_AT})
        counts: torch.Tensor | None = None

        def poisoned(get: Callable[[], Any]) -> Any:
            nonlocal counts
            x, y = fetch(get)
            step = runner.loop.step
            if step not in at:
                return x, y
            if counts is None:  # the rarest characters of the training text, rarest first
                ids = runner.recipe.data.dataset.ids  # type: ignore[attr-defined]
                counts = torch.bincount(ids, minlength=int(ids.max()) + 1).argsort()
            # A corrupt batch: the labels are one junk (rare) character throughout.
            return x, torch.full_like(y, int(counts[at.index(step)]))

        return poisoned


@dataclass(frozen=True)
class _Flat(Fault):
    def adapt(self, recipe: Recipe) -> Recipe:
        # The bug: an optimizer over a copy made before the "real" model was set up (e.g.
        # before loading weights or moving devices); it steps the copy only. (Done after the
        # recipe is built: a Recipe refuses such an optimizer, which is the point of it.)
        stale = copy.deepcopy(recipe.model)
        recipe.optimizer.param_groups[0]["params"] = list(stale.parameters())
        return recipe


#: The overfit fault's share of the training text.
OVERFIT_TRAIN_FRACTION = 0.004


@dataclass(frozen=True)
class _Overfit(Fault):
    def overrides(self, steps: int) -> Mapping[str, Any]:
        from trainmedic.demo.char_recipe import encoded_corpus

        ids, _ = encoded_corpus()
        n_train = len(ids) - len(ids) // 10
        return {"train_chars": max(64 * 4, int(n_train * OVERFIT_TRAIN_FRACTION)),
                "stride": 1, "jitter": 0}


#: The stall fault's sleep per batch.
STALL_SLEEP_S = 0.020


@dataclass(frozen=True)
class _Stall(Fault):
    def fetch(self, runner: RecipeRunner, fetch: Fetch, steps: int) -> Fetch:
        def slow(get: Callable[[], Any]) -> Any:
            def get_slowly() -> Any:
                time.sleep(STALL_SLEEP_S)  # the slow loader: real wall time, measured
                return get()

            return fetch(get_slowly)

        return slow


@dataclass(frozen=True)
class _Leak(Fault):
    def adapt(self, recipe: Recipe) -> Recipe:
        import torch.nn.functional as F

        kept: list[Any] = []

        def leaky_loss(model: Any, batch: Any) -> Any:
            x, y = batch
            logits = model(x)
            # "for an end-of-epoch calibration metric": graph and all, never cleared
            kept.extend((logits, logits.softmax(-1)))
            # "to pick the best weights at the end": a full copy every step
            kept.extend(p.detach().clone() for p in model.parameters())
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

        return dataclasses.replace(recipe, loss_fn=leaky_loss)


for _f in (Fault("none"), _Diverge("diverge"), _Spike("spike"), _Flat("flat"),
           _Overfit("overfit"), _Stall("stall"), _Leak("leak")):
    register_fault(_f)

#: Every fault ``trainmedic demo --fault`` accepts, ``none`` first.
FAULTS: tuple[str, ...] = tuple(_REGISTRY)
