"""The built-in demo: a tiny character transformer trained on CPU with a real fault injected.

``run_demo(DemoConfig(fault="spike"))`` trains, records with the watcher and returns the run
directory; the CLI then diagnoses it. ``recipe(**overrides)`` is the demo's training as a
:class:`~trainmedic.Recipe` (``trainmedic.demo:recipe``). Importing this package does not
import torch.
"""

from __future__ import annotations

from typing import Any

from trainmedic.demo.runner import DEFAULT_STEPS, FAULTS, DemoConfig, run_demo

__all__ = ["DemoConfig", "run_demo", "FAULTS", "DEFAULT_STEPS", "recipe"]


def recipe(**overrides: Any) -> Any:
    """The demo as a ``Recipe``: see :func:`trainmedic.demo.char_recipe.recipe` (imports
    torch when called)."""
    from trainmedic.demo.char_recipe import recipe as build

    return build(**overrides)
