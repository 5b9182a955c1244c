"""One error hierarchy for the whole library: every error trainmedic raises on purpose is
defined here.

Every message says what arrived, what was expected and how to fix it, in one line, so the CLI
can print it as is. The CLI exits 2 for a ``UsageError`` (what the user gave cannot be used:
a file, a value, a missing extra) and 3 for any other ``TrainmedicError`` (a run that went
wrong, e.g. a NaN under ``nan_policy="raise"``)::

    TrainmedicError
    ├── UsageError                      exit 2
    │   ├── InputError                  a file or folder (``.path`` names it)
    │   │   ├── UnreadableInputError
    │   │   ├── UnrecognizedInputError
    │   │   │   └── UnsupportedModelError
    │   │   ├── ConfigMismatchError     a checkpoint saved with another recipe config
    │   │   ├── DamagedCheckpointError  a checkpoint that does not verify
    │   │   └── NoCheckpointError       none verifies under the root
    │   ├── ConfigError (ValueError)    a value out of range; names the field
    │   │   ├── FactoryError            a model factory that cannot be loaded or traced
    │   │   └── StoreLockedError        another writer holds the run store
    │   ├── RegistryError               a rule registered twice, or unknown
    │   └── MissingExtraError (ImportError)   names the extra to install
    └── NonFiniteError                  exit 3: a NaN/inf step under nan_policy="raise"
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "TrainmedicError",
    "UsageError",
    "InputError",
    "UnreadableInputError",
    "UnrecognizedInputError",
    "UnsupportedModelError",
    "ConfigMismatchError",
    "DamagedCheckpointError",
    "NoCheckpointError",
    "ConfigError",
    "FactoryError",
    "StoreLockedError",
    "RegistryError",
    "MissingExtraError",
    "NonFiniteError",
]


class TrainmedicError(Exception):
    """Base class of every error trainmedic raises on purpose."""


class UsageError(TrainmedicError):
    """What the user gave cannot be used as asked (the CLI's exit code 2)."""


class InputError(UsageError):
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


class ConfigError(UsageError, ValueError):
    """A configuration value is out of range; the message names the field."""


class RegistryError(UsageError):
    """A rule was registered twice under one name, or looked up under an unknown one."""


class MissingExtraError(UsageError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class ConfigMismatchError(InputError):
    """The checkpoint was saved with another recipe config; ``differences`` names the keys."""

    def __init__(self, path: str, differences: list[str]) -> None:
        self.differences = differences
        shown = "; ".join(differences[:5]) + (
            f"; and {len(differences) - 5} more" if len(differences) > 5 else "")
        super().__init__(path, f"saved with another recipe config ({shown}); load it anyway "
                               f"with load(..., force=True) (trainmedic demo: --force), or "
                               f"resume with the config it was saved with")


class DamagedCheckpointError(InputError):
    """The checkpoint asked for does not verify; ``problems`` lists what is wrong."""

    def __init__(self, path: str, problems: list[Any]) -> None:
        self.problems = problems
        shown = "; ".join(str(p) for p in problems[:3]) + (
            f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        super().__init__(path, f"damaged checkpoint, not loaded: {shown}")


class NoCheckpointError(InputError):
    """``load(path=None)`` found no committed checkpoint that verifies under the root."""


class FactoryError(ConfigError):
    """The model factory could not be loaded, called, or traced through a training step."""


class StoreLockedError(ConfigError):
    """Another writer already holds the store file for this run_dir and rank."""


class NonFiniteError(TrainmedicError):
    """A step's loss or gradient was NaN/inf under the ``raise`` policy; ``.localization``
    (a ``trainmedic.live.nan_guard.Localization``) says where it first appeared (None when
    the step was not localized)."""

    def __init__(self, message: str, *, localization: Any = None) -> None:
        self.localization = localization
        super().__init__(message)
