"""The live watcher: per-step telemetry of a training loop, recorded into the run store.

``from trainmedic.watch import watch``. Importing this package does not import torch; the
watcher does when it starts.
"""

from __future__ import annotations

from trainmedic.watch.watcher import TimedLoader, Watcher, watch

__all__ = ["watch", "Watcher", "TimedLoader"]
