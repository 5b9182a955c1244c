"""The live watcher: per-step telemetry of a training loop, recorded into the run store.

``trainmedic.watch(model, optimizer)`` (this package's ``watch``; the package is not named
``watch`` so that the function can be ``trainmedic.watch``). Importing this package does not
import torch (nor transformers or lightning); the watcher imports torch when it starts, and
the callbacks import their framework when first used.
"""

from __future__ import annotations

from typing import Any

from trainmedic.live.config import WatchConfig
from trainmedic.live.watcher import TimedLoader, Watcher, watch

__all__ = ["watch", "Watcher", "WatchConfig", "TimedLoader", "NonFiniteError", "HFCallback",
           "LightningCallback"]


def __getattr__(name: str) -> Any:
    # Lazy: nan_guard imports torch; the callbacks import their framework.
    if name == "NonFiniteError":
        from trainmedic.live.nan_guard import NonFiniteError

        return NonFiniteError
    if name == "HFCallback":
        from trainmedic.live.hf_callback import TrainmedicCallback as HFCallback

        return HFCallback
    if name == "LightningCallback":
        from trainmedic.live.lightning_callback import TrainmedicCallback as LightningCallback

        return LightningCallback
    raise AttributeError(f"module 'trainmedic.live' has no attribute {name!r}")
