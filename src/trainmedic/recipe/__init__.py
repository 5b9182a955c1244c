"""The recipe: ``Recipe``, ``load_recipe("module:function")`` and the loop runner.

Importing this package does not import torch; the runner (``RecipeRunner``, ``run_recipe``)
imports it when first used.
"""

from __future__ import annotations

from typing import Any

from trainmedic.recipe.recipe import PRECISIONS, Recipe, config_hash, load_recipe

__all__ = ["Recipe", "PRECISIONS", "load_recipe", "config_hash", "RecipeRunner", "RunResult",
           "run_recipe"]


def __getattr__(name: str) -> Any:
    if name in ("RecipeRunner", "RunResult", "run_recipe"):
        from trainmedic.recipe import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'trainmedic.recipe' has no attribute {name!r}")
