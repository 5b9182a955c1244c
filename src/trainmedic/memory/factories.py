"""Model factories for measure mode: from a config, or from the user's ``module:function``.

A user's function returns either the model or a dict ``{"model": m, "inputs": fn, "loss":
fn}``; :func:`split_factory` turns it into the three parts :func:`~trainmedic.memory.measurement.
measure` takes. It cannot look at the return value before measuring (the function must run
inside measure's fake mode, where building allocates nothing), so the parts defer: the inputs
and loss read what the model factory found when measure called it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from trainmedic.errors import UnsupportedModelError

__all__ = ["FactoryParts", "auto_factory", "config_factory", "split_factory"]


class FactoryParts(NamedTuple):
    """What measure mode needs to build and train a model."""

    model: Callable[[], Any]
    """Builds the model (called inside measure's fake mode)."""
    inputs: Callable[[Any, int, int], Any] | None
    """``inputs(model, batch, seq)`` -> the batch (None: token ids)."""
    loss: Callable[[Any, Any], Any] | None
    """``loss(output, batch)`` -> the scalar (None: measure's default)."""


def _hf_attention(attention: str) -> str:
    # transformers builds flash attention only with its CUDA package; SDPA saves the same
    # tensors (Q, K, V, output, log-sum-exp) on the CPU kernels measure mode traces.
    return "sdpa" if attention == "flash" else attention


def auto_factory(config: str | Path, layers: int | None, attention: str) -> Callable[[], Any]:
    """Build whatever transformers builds from ``config`` (a family the planner lacks)."""
    from trainmedic.memory.hf_build import build_auto_model

    return functools.partial(build_auto_model, config, num_layers=layers,
                             attn_implementation=_hf_attention(attention))


def config_factory(config: str | Path, layers: int | None, attention: str) -> Callable[[], Any]:
    """A factory for a config: our family builder when the family is known, else transformers'.

    The family builder builds the head class the planner counts, so a measured ledger of it
    compares with the plan of the same config.
    """
    from trainmedic.memory.families import read_config, spec_from_config
    from trainmedic.memory.hf_build import build_hf_model

    try:
        spec_from_config(read_config(config), source=str(config))
    except UnsupportedModelError:
        return auto_factory(config, layers, attention)
    return functools.partial(build_hf_model, config, num_layers=layers,
                             attn_implementation=_hf_attention(attention))


def split_factory(fn: Callable[[], Any], name: str) -> FactoryParts:
    """Split a user's factory into (model factory, inputs, loss); ``name`` is its
    ``module:function`` for messages. A dict return carries all three."""
    from trainmedic.memory.measurement import FactoryError, default_inputs, default_loss

    probe: dict[str, Any] = {}

    def model_factory() -> Any:
        out = fn()
        if isinstance(out, dict):
            if "model" not in out:
                raise FactoryError(f"{name} returned a dict without 'model'; expected "
                                   f"{{'model': nn.Module, 'inputs': fn, 'loss': fn}}")
            probe.update(out)
            return out["model"]
        return out

    def inputs(model: Any, batch: int, seq: int) -> Any:
        if "inputs" in probe:
            return probe["inputs"](model, batch, seq)
        return default_inputs(model, batch, seq)

    def loss(output: Any, batch: Any) -> Any:
        if "loss" in probe:
            return probe["loss"](output, batch)
        return default_loss(output, batch)

    # measure names the factory in its messages by module and qualname: the user's, not ours.
    module, _, qualname = name.rpartition(":")
    model_factory.__module__, model_factory.__qualname__ = module, qualname
    return FactoryParts(model=model_factory, inputs=inputs, loss=loss)
