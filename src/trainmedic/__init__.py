"""trainmedic: make PyTorch training runs advance correctly toward their quality target.

The top-level package stays light: importing it must not import torch, so that
``trainmedic diagnose`` on a log starts fast. Parts that need torch import it lazily.
"""

from __future__ import annotations

from typing import Any

from trainmedic.errors import TrainmedicError

__version__ = "0.1.0"

__all__ = ["TrainmedicError", "Recipe", "__version__"]


def __getattr__(name: str) -> Any:
    # Lazy, so that `import trainmedic` stays light; trainmedic.recipe does not import torch.
    if name == "Recipe":
        from trainmedic.recipe.recipe import Recipe

        return Recipe
    raise AttributeError(f"module 'trainmedic' has no attribute {name!r}")
