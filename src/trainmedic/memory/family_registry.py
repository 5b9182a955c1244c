"""The registry of model families: which ``model_type`` values parse into a ``ModelSpec``, how.

A :class:`Family` bundles what trainmedic needs to know about one Hugging Face model family:
the parser (config fields -> :class:`~trainmedic.memory.spec.ModelSpec`), the transformers
head classes it can count, and the config edits ``hf_build`` makes to build a shallower or
dropout-free copy of the model. New families are added with :meth:`FamilyRegistry.register`;
registering a ``model_type`` twice is a :class:`~trainmedic.errors.RegistryError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainmedic.errors import RegistryError
from trainmedic.memory.config_fields import ConfigFields
from trainmedic.memory.spec import HeadKind, ModelSpec

__all__ = ["Family", "FamilyRegistry", "Parser", "LayerEdit", "ConfigEdit"]

Parser = Callable[[ConfigFields, str, HeadKind], ModelSpec]
"""``parse(fields, head_class, head) -> ModelSpec``."""
LayerEdit = Callable[[dict[str, Any], int], dict[str, Any]]
"""``with_layers(config, num_layers) -> config`` with the depth changed (a new dict)."""
ConfigEdit = Callable[[dict[str, Any]], dict[str, Any]]
"""``edit(config) -> config`` (a new dict)."""


def _same(config: dict[str, Any]) -> dict[str, Any]:
    return dict(config)


@dataclass(kw_only=True, frozen=True)
class Family:
    """One model family: its ``model_type`` values, its parser and its head classes."""

    name: str
    """The normalized family name the parser writes into ``ModelSpec.family``."""
    model_types: tuple[str, ...]
    """``model_type`` values in config.json that belong to this family (legacy names too)."""
    parse: Parser
    """Builds the ``ModelSpec`` from the config's fields for the chosen head class."""
    heads: Mapping[str, HeadKind]
    """transformers head classes this family can count, and what each head computes."""
    default_head: str
    """The head counted when ``architectures[0]`` names none of ``heads`` (the usual LM head,
    or ``ViTModel``)."""
    head_aliases: Mapping[str, str] = field(default_factory=dict)
    """Legacy or remote-code class names counted as a known class (``RWForCausalLM`` ->
    ``FalconForCausalLM``)."""
    with_layers: LayerEdit
    """Changes the depth of a config of this family (``hf_build``'s ``num_layers``)."""
    dropout_keys: tuple[str, ...] = ()
    """Config keys holding dropout probabilities (``hf_build``'s ``dropout`` sets them all)."""
    to_transformers: ConfigEdit = _same
    """Rewrites a config into the form today's transformers reads (legacy Falcon names)."""

    def __post_init__(self) -> None:
        if self.default_head not in self.heads:
            raise RegistryError(
                f"family {self.name!r}: default_head {self.default_head!r} is not one of its "
                f"heads {sorted(self.heads)}; add it to heads"
            )

    def head_for(self, architectures: Any) -> str:
        """The head class to count for a config whose ``architectures`` field is given."""
        if isinstance(architectures, list) and architectures:
            first = architectures[0]
            if isinstance(first, str):
                first = self.head_aliases.get(first, first)
                if first in self.heads:
                    return first
        return self.default_head


class FamilyRegistry:
    """``model_type`` -> :class:`Family`, refusing duplicate registrations."""

    def __init__(self, families: Iterable[Family] = ()) -> None:
        self._by_type: dict[str, Family] = {}
        for family in families:
            self.register(family)

    def register(self, family: Family) -> None:
        """Add ``family`` under each of its ``model_types``; a taken one is a RegistryError."""
        taken = [mt for mt in family.model_types if mt in self._by_type]
        if taken:
            owner = self._by_type[taken[0]].name
            raise RegistryError(
                f"model_type {taken[0]!r} is already registered by family {owner!r}; "
                f"register {family.name!r} under another model_type"
            )
        if not family.model_types:
            raise RegistryError(f"family {family.name!r} names no model_type; give it one")
        for model_type in family.model_types:
            self._by_type[model_type] = family

    def lookup(self, model_type: str) -> Family | None:
        """The family registered for ``model_type``, or None."""
        return self._by_type.get(model_type)

    def families(self) -> tuple[Family, ...]:
        """Every registered family once, in registration order."""
        return tuple({id(f): f for f in self._by_type.values()}.values())

    def model_types(self) -> tuple[str, ...]:
        """Every registered ``model_type``, sorted."""
        return tuple(sorted(self._by_type))

    def __contains__(self, model_type: object) -> bool:
        return model_type in self._by_type
