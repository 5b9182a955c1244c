"""trainmedic: make PyTorch training runs advance correctly toward their quality target.

What a user touches is here, loaded on first use (PEP 562), so that ``import trainmedic`` stays
light: it imports neither torch nor numpy, and ``trainmedic diagnose`` on a log starts fast.

    >>> import trainmedic
    >>> d = trainmedic.diagnose_run("runs/exp1/")          # load what a run left, diagnose it
    >>> [f.symptom for f in d.findings]

The parts: ``load_run`` / ``Run`` (reading logs), ``diagnose_run`` / ``Diagnosis`` /
``Finding`` (diagnosis), ``watch`` / ``WatchConfig`` (recording a run while it trains, in
the loop: ``with trainmedic.watch(model, optimizer) as w``), ``Recipe`` / ``RecipeRunner`` (a
declared training), ``CheckpointManager`` (verified checkpoints), and every error of
``trainmedic.errors``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from trainmedic.errors import (
    ConfigError,
    ConfigMismatchError,
    DamagedCheckpointError,
    FactoryError,
    InputError,
    MissingExtraError,
    NoCheckpointError,
    NonFiniteError,
    RegistryError,
    StoreLockedError,
    TrainmedicError,
    UnreadableInputError,
    UnrecognizedInputError,
    UnsupportedModelError,
    UsageError,
)

if TYPE_CHECKING:
    from trainmedic.checkpoint import CheckpointManager
    from trainmedic.diagnose.finding import Diagnosis, Finding
    from trainmedic.live import WatchConfig, watch
    from trainmedic.recipe import Recipe, RecipeRunner
    from trainmedic.run import Run, load_run

from trainmedic._version import __version__

#: Lazily loaded names: public name -> (module, attribute).
_LAZY: dict[str, tuple[str, str]] = {
    "CheckpointManager": ("trainmedic.checkpoint", "CheckpointManager"),
    "Diagnosis": ("trainmedic.diagnose.finding", "Diagnosis"),
    "Finding": ("trainmedic.diagnose.finding", "Finding"),
    "Recipe": ("trainmedic.recipe", "Recipe"),
    "RecipeRunner": ("trainmedic.recipe", "RecipeRunner"),
    "Run": ("trainmedic.run", "Run"),
    "WatchConfig": ("trainmedic.live", "WatchConfig"),
    "watch": ("trainmedic.live", "watch"),
    "load_run": ("trainmedic.run", "load_run"),
}

__all__ = [
    "CheckpointManager",
    "ConfigError",
    "ConfigMismatchError",
    "DamagedCheckpointError",
    "Diagnosis",
    "FactoryError",
    "Finding",
    "InputError",
    "MissingExtraError",
    "NoCheckpointError",
    "NonFiniteError",
    "Recipe",
    "RecipeRunner",
    "RegistryError",
    "Run",
    "StoreLockedError",
    "TrainmedicError",
    "UnreadableInputError",
    "UnrecognizedInputError",
    "UnsupportedModelError",
    "UsageError",
    "WatchConfig",
    "__version__",
    "diagnose_run",
    "load_run",
    "watch",
]


def diagnose_run(*paths: str, mapping: dict[str, str] | None = None) -> Diagnosis:
    """Load what a run left behind (``load_run(*paths, mapping=...)``) and diagnose it.

    The entry point of ``trainmedic diagnose`` from Python: the ``Diagnosis`` holds the
    findings, the checks that could not run and how every column was read. Check
    ``loss_found`` before trusting an empty list: a log whose loss was not recognised was not
    judged.
    """
    from trainmedic.diagnose import diagnose
    from trainmedic.run import load_run

    return diagnose(load_run(*paths, mapping=mapping))


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'trainmedic' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    """The public names only (what a user should reach for), as tab completion shows them."""
    return list(__all__)
