"""trainmedic: make PyTorch training runs advance correctly toward their quality target.

The top-level package stays light: importing it must not import torch, so that
``trainmedic diagnose`` on a log starts fast. Parts that need torch import it lazily.
"""

from __future__ import annotations

from trainmedic.errors import TrainmedicError

__version__ = "0.1.0"

__all__ = ["TrainmedicError", "__version__"]
