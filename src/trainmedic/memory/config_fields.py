"""Typed reads of a Hugging Face ``config.json``'s fields, with errors that name the field.

Each family parser reads its fields through one :class:`ConfigFields`, so every bad value
becomes the same kind of one-line :class:`~trainmedic.errors.InputError`: which field, what
arrived, what was expected. A field may have aliases (GPT-2's ``n_embd`` for ``hidden_size``,
T5's ``d_model``): the first name present with a non-null value wins, and a missing field is
reported under its first name with the aliases listed.

Fields that size the model (width, depth, heads, vocabulary, MLP width) are *required*: a
missing one is an error rather than transformers' default, which is some 7B model's value.
Secondary fields take the default the transformers config class gives them, so that the
parsed model is the one transformers would build from the same file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainmedic.errors import InputError

__all__ = ["ConfigFields"]

_ABSENT: Any = object()


class ConfigFields:
    """One config's fields, read with checks; errors cite ``source`` and the family name."""

    def __init__(self, config: Mapping[str, Any], *, source: str, family: str) -> None:
        self.config = config
        self.source = source
        self.family = family

    def error(self, message: str) -> InputError:
        """An :class:`InputError` about this config (to raise)."""
        return InputError(self.source, message)

    def find(self, *names: str) -> tuple[str, Any] | None:
        """The first of ``names`` present with a non-null value, and that value."""
        for name in names:
            value = self.config.get(name)
            if value is not None:
                return name, value
        return None

    def is_null(self, name: str) -> bool:
        """``name`` is present and explicitly ``null``."""
        return name in self.config and self.config[name] is None

    def _missing(self, names: tuple[str, ...]) -> InputError:
        others = "".join(f" (or '{alias}')" for alias in names[1:])
        return self.error(
            f"the {self.family} config has no '{names[0]}'{others}; the {self.family} family "
            f"needs it to size the model (add it as in the model's published config.json)"
        )

    def _integer(self, name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(f"'{name}' is {value!r}; expected an integer (fix it in the config)")
        if isinstance(value, float):
            if not value.is_integer():
                raise self.error(
                    f"'{name}' is {value!r}; expected a whole number (fix it in the config)"
                )
            value = int(value)
        return int(value)

    def size(self, *names: str, default: int | None = None) -> int:
        """A positive integer; ``default`` when absent (None: the field is required)."""
        found = self.find(*names)
        if found is None:
            if default is None:
                raise self._missing(names)
            return default
        name, value = found
        number = self._integer(name, value)
        if number <= 0:
            raise self.error(
                f"'{name}' is {number}; expected a positive integer (a {self.family} model "
                f"needs at least 1; fix it in the config)"
            )
        return number

    def count(self, *names: str, default: int = 0) -> int:
        """A non-negative integer (0 allowed), ``default`` when absent or null."""
        found = self.find(*names)
        if found is None:
            return default
        name, value = found
        number = self._integer(name, value)
        if number < 0:
            raise self.error(
                f"'{name}' is {number}; expected 0 or more (fix it in the config)"
            )
        return number

    def probability(self, *names: str, default: float) -> float:
        """A dropout probability in [0, 1), ``default`` when absent or null."""
        found = self.find(*names)
        if found is None:
            return default
        name, value = found
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(f"'{name}' is {value!r}; expected a probability in [0, 1)")
        if not 0.0 <= float(value) < 1.0:
            raise self.error(
                f"'{name}' is {value!r}; expected a probability in [0, 1) (fix it in the config)"
            )
        return float(value)

    def fraction(self, *names: str, default: float) -> float:
        """A number in (0, 1], ``default`` when absent or null."""
        found = self.find(*names)
        if found is None:
            return default
        name, value = found
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(f"'{name}' is {value!r}; expected a number in (0, 1]")
        if not 0.0 < float(value) <= 1.0:
            raise self.error(
                f"'{name}' is {value!r}; expected a number in (0, 1] (fix it in the config)"
            )
        return float(value)

    def flag(self, *names: str, default: bool) -> bool:
        """A boolean, ``default`` when absent or null."""
        found = self.find(*names)
        if found is None:
            return default
        name, value = found
        if not isinstance(value, bool):
            raise self.error(f"'{name}' is {value!r}; expected true or false")
        return value

    def text(self, *names: str, default: str) -> str:
        """A string, ``default`` when absent or null."""
        found = self.find(*names)
        if found is None:
            return default
        name, value = found
        if not isinstance(value, str):
            raise self.error(f"'{name}' is {value!r}; expected a string")
        return value

    def nested(self, name: str) -> Mapping[str, Any]:
        """A nested object (``rope_scaling``, ``quantization_config``); empty when absent."""
        value = self.config.get(name)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.error(f"'{name}' is {value!r}; expected an object")
        return value

    def dtype(self) -> str | None:
        """The stored dtype (``torch_dtype`` or, in newer files, ``dtype``), if a string."""
        found = self.find("torch_dtype", "dtype")
        return found[1] if found is not None and isinstance(found[1], str) else None

    def divides(self, *, numerator: tuple[str, int], denominator: tuple[str, int]) -> None:
        """Raise unless ``denominator`` divides ``numerator`` (both given as (field, value))."""
        (num_name, num), (den_name, den) = numerator, denominator
        if num % den:
            raise self.error(
                f"'{num_name}' ({num}) is not divisible by '{den_name}' ({den}); the "
                f"{self.family} family needs it to be (fix one of the two in the config)"
            )
