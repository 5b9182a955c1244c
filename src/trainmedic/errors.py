"""One error hierarchy for the whole library.

Every message says what arrived, what was expected and how to fix it, in one line, so the
CLI can print it as is and exit with code 2.
"""

from __future__ import annotations

__all__ = [
    "TrainmedicError",
    "InputError",
    "UnreadableInputError",
    "UnrecognizedInputError",
    "ConfigError",
    "RegistryError",
    "MissingExtraError",
    "UnsupportedModelError",
]


class TrainmedicError(Exception):
    """Base class of every error trainmedic raises on purpose."""


class InputError(TrainmedicError):
    """A file or folder given to trainmedic cannot be used as asked.

    ``path`` names the offending file so the CLI's one-line message can lead with it.
    """

    def __init__(self, path: str, message: str) -> None:
        self.path = str(path)
        self.message = message
        super().__init__(f"{self.path}: {message}")


class UnreadableInputError(InputError):
    """The file exists (or was named) but cannot be opened or decoded."""


class UnrecognizedInputError(InputError):
    """The file or folder holds nothing trainmedic knows how to read."""


class UnsupportedModelError(UnrecognizedInputError):
    """A model config names a ``model_type`` the analytic planner has no family for."""

    def __init__(self, path: str, message: str, *, model_type: str) -> None:
        self.model_type = model_type
        super().__init__(path, message)


class ConfigError(TrainmedicError, ValueError):
    """A configuration value is out of range; the message names the field."""


class RegistryError(TrainmedicError):
    """A rule was registered twice under one name, or looked up under an unknown one."""


class MissingExtraError(TrainmedicError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""
