"""The live watcher: per-step telemetry of a training loop, recorded into the run store.

``from trainmedic.watch import watch``. Importing this package does not import torch (nor
transformers or lightning); the watcher imports torch when it starts, and the callbacks
import their framework when first used.
"""

from __future__ import annotations

from typing import Any

from trainmedic.watch.config import WatchConfig
from trainmedic.watch.watcher import TimedLoader, Watcher, watch

__all__ = ["watch", "Watcher", "WatchConfig", "TimedLoader", "NonFiniteError"]


def __getattr__(name: str) -> Any:
    # Lazy: nan_guard imports torch.
    if name == "NonFiniteError":
        from trainmedic.watch.nan_guard import NonFiniteError

        return NonFiniteError
    raise AttributeError(f"module 'trainmedic.watch' has no attribute {name!r}")
