"""A Hugging Face ``config.json`` -> :class:`~trainmedic.memory.spec.ModelSpec`, per family.

No hub, no weights, no torch: the config's fields are read with each family's own names and
defaults, and ``num_params`` is the exact parameter count of the model transformers builds
from the config (with the head ``architectures[0]`` names when the family knows it, else the
family's usual head; tied weights counted once).

Families (``model_type``): gpt2, llama, mistral, mixtral, qwen2, gemma, phi, falcon (also the
legacy ``RefinedWebModel``/``RefinedWeb``), opt, bert, roberta, t5, vit, deepseek_v3. More are
added with :func:`register_family`. An unknown ``model_type`` is an
:class:`~trainmedic.errors.InputError` that points to measure mode, which builds any
``nn.Module`` from a factory instead.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainmedic.errors import (
    ConfigError,
    InputError,
    UnreadableInputError,
    UnsupportedModelError,
)
from trainmedic.memory.config_fields import ConfigFields
from trainmedic.memory.decoder_families import DECODER_FAMILIES
from trainmedic.memory.encoder_families import ENCODER_FAMILIES
from trainmedic.memory.family_registry import Family, FamilyRegistry
from trainmedic.memory.spec import ModelSpec

__all__ = [
    "FAMILIES",
    "Family",
    "FamilyRegistry",
    "family_for",
    "load_spec",
    "read_config",
    "register_family",
    "spec_from_config",
    "spec_with_layers",
    "supported_model_types",
]

logger = logging.getLogger(__name__)

#: The families trainmedic parses; :func:`register_family` adds to it.
FAMILIES = FamilyRegistry((*DECODER_FAMILIES, *ENCODER_FAMILIES))


def register_family(family: Family) -> None:
    """Make ``family`` parseable by :func:`spec_from_config` (RegistryError if a
    ``model_type`` of it is taken)."""
    FAMILIES.register(family)


def supported_model_types() -> tuple[str, ...]:
    """The ``model_type`` values :func:`spec_from_config` accepts, sorted."""
    return FAMILIES.model_types()


def family_for(config: Mapping[str, Any], *, source: str = "<config>") -> Family:
    """The registered family of ``config``; InputError for a missing or unknown model_type."""
    if not isinstance(config, Mapping):
        raise InputError(
            source, f"the config is a JSON {type(config).__name__}; expected a JSON object "
            f"(a Hugging Face config.json)"
        )
    model_type = config.get("model_type")
    supported = ", ".join(FAMILIES.model_types())
    if not isinstance(model_type, str) or not model_type:
        raise InputError(
            source, f"no 'model_type' in the config (got {model_type!r}); expected a Hugging "
            f"Face config.json with one of: {supported}"
        )
    family = FAMILIES.lookup(model_type)
    if family is None:
        raise UnsupportedModelError(
            source, f"model_type {model_type!r} is not a supported family (supported: "
            f"{supported}); to plan this model, measure it instead with "
            f"`trainmedic memory measure module:factory` (measure mode)",
            model_type=model_type,
        )
    return family


def spec_from_config(config: Mapping[str, Any], *, source: str = "<config>") -> ModelSpec:
    """Parse a config.json's contents (``source`` names it in errors) into a ModelSpec."""
    family = family_for(config, source=source)
    fields = ConfigFields(config, source=source, family=family.name)
    architectures = config.get("architectures")
    head_class = family.head_for(architectures)
    named = architectures[0] if isinstance(architectures, list) and architectures else None
    if isinstance(named, str) and family.head_aliases.get(named, named) != head_class:
        logger.info("%s: %r is not a head trainmedic counts for %s; counting %s instead",
                    source, named, family.name, head_class)
    return family.parse(fields, head_class, family.heads[head_class])


def read_config(path: str | Path) -> dict[str, Any]:
    """The JSON object in ``path``; UnreadableInputError when it cannot be read as one."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UnreadableInputError(
            str(path), f"cannot read the file ({reason}); expected a Hugging Face config.json"
        ) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnreadableInputError(
            str(path), f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            f"expected a Hugging Face config.json"
        ) from exc
    if not isinstance(data, dict):
        raise UnreadableInputError(
            str(path), f"the JSON is a {type(data).__name__}, not an object; expected a "
            f"Hugging Face config.json"
        )
    return data


def load_spec(path: str | Path) -> ModelSpec:
    """Read a config.json file and parse it (errors name the file)."""
    return spec_from_config(read_config(path), source=str(path))


def spec_with_layers(spec: ModelSpec, num_layers: int) -> ModelSpec:
    """The spec of the same model with ``num_layers`` blocks (per stack for encoder-decoder
    models), ``num_params`` recounted exactly from ``layer_params``.

    The blocks kept are those ``hf_build.build_hf_model(..., num_layers=...)`` builds: the
    first ``num_layers`` of each stack; for DeepSeek, the leading dense layers while at least
    one MoE layer remains (an all-dense model stays dense); extra blocks repeat the last kind.
    """
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ConfigError(f"num_layers is {num_layers!r}; expected a positive integer")
    encoder = spec.layer_params[:spec.num_layers]
    decoder = spec.layer_params[spec.num_layers:]
    if len(encoder) != spec.num_layers or len(decoder) != spec.num_decoder_layers:
        raise ConfigError(
            f"spec.layer_params has {len(spec.layer_params)} entries for "
            f"{spec.num_layers} + {spec.num_decoder_layers} blocks; expected one per block "
            f"(parse the spec with spec_from_config)"
        )
    dense = spec.num_dense_layers if spec.is_moe else 0
    new_dense = dense
    if 0 < dense < spec.num_layers:
        new_dense = min(dense, num_layers - 1)
    elif dense >= spec.num_layers > 0:
        new_dense = num_layers

    def pick(blocks: tuple[int, ...], start: int, stop: int, count: int) -> tuple[int, ...]:
        return tuple(blocks[min(start + i, stop - 1)] for i in range(count))

    if dense and new_dense < num_layers:
        layers = (pick(encoder, 0, dense, new_dense)
                  + pick(encoder, dense, len(encoder), num_layers - new_dense))
    else:
        layers = pick(encoder, 0, len(encoder), num_layers)
    decoder_layers = pick(decoder, 0, len(decoder), num_layers) if decoder else ()
    new_params = layers + decoder_layers
    return replace(
        spec,
        num_layers=num_layers,
        num_decoder_layers=num_layers if decoder else 0,
        num_dense_layers=min(new_dense, num_layers) if spec.is_moe else spec.num_dense_layers,
        layer_params=new_params,
        num_params=spec.num_params - sum(spec.layer_params) + sum(new_params),
    )
