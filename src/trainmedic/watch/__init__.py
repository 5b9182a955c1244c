"""The live watcher: per-step telemetry of a training loop, recorded into the run store.

``from trainmedic.watch import watch``. Importing this package does not import torch (nor
transformers or lightning); the watcher imports torch when it starts, and the callbacks
import their framework when first used.
"""

from __future__ import annotations

from typing import Any

from trainmedic.watch.config import WatchConfig
from trainmedic.watch.watcher import TimedLoader, Watcher, watch

__all__ = ["watch", "Watcher", "WatchConfig", "TimedLoader", "NonFiniteError", "HFCallback",
           "LightningCallback"]


def __getattr__(name: str) -> Any:
    # Lazy: nan_guard imports torch; the callbacks import their framework.
    if name == "NonFiniteError":
        from trainmedic.watch.nan_guard import NonFiniteError

        return NonFiniteError
    if name == "HFCallback":
        from trainmedic.watch.hf_callback import TrainmedicCallback as HFCallback

        return HFCallback
    if name == "LightningCallback":
        from trainmedic.watch.lightning_callback import TrainmedicCallback as LightningCallback

        return LightningCallback
    raise AttributeError(f"module 'trainmedic.watch' has no attribute {name!r}")
