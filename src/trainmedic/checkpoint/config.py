"""What a :class:`~trainmedic.checkpoint.manager.CheckpointManager` does, as one frozen,
validated config (the shape of ``WatchConfig``): each field documented, each check naming its
field. ``CheckpointManager(root, keep_last=3, ...)`` builds one from its keywords;
``CheckpointManager.from_config(root, cfg)`` takes one made elsewhere (a recipe, a test).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainmedic.errors import ConfigError

__all__ = ["CheckpointConfig"]


@dataclass(kw_only=True, frozen=True)
class CheckpointConfig:
    """How checkpoints are written, kept and trusted."""

    keep_last: int | None = 3
    """Committed checkpoints to keep, newest by step (None: all); >= 1."""
    async_save: bool = False
    """Write in a background thread from a CPU copy; ``save()`` returns after the copy."""
    recipe_config: Mapping[str, Any] | None = field(default=None, compare=False)
    """The recipe's JSON-able config: recorded in each manifest and compared on load."""
    sharded: bool | None = None
    """True: torch.distributed.checkpoint (DCP) shards; False: plain files; None: decide from
    the world size and the model."""
    defer_copy: bool = False
    """Async save only: copy the state on the background thread too (``save()`` returns at
    once; the next step waits for the copy)."""
    sync_files: bool = True
    """fsync files and folders before the commit; False trades power-cut durability for speed,
    as DCP's option of that name does."""
    trusted_before: Callable[[], int | None] | None = field(default=None, compare=False)
    """Returns the step from which checkpoints hold a broken model (e.g.
    ``lambda: trainmedic.diagnose.onset.divergence_onset(run_dir)``); ``latest()`` skips
    those, and retention keeps the newest one before."""

    def __post_init__(self) -> None:
        k = self.keep_last
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ConfigError(f"keep_last must be an integer >= 1 or None, got {k!r}")
        for name in ("async_save", "defer_copy", "sync_files"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.sharded is not None and not isinstance(self.sharded, bool):
            raise ConfigError(f"sharded must be True, False or None, got {self.sharded!r}")
        rc = self.recipe_config
        if rc is not None and not isinstance(rc, Mapping):
            raise ConfigError(f"config must be a mapping (the recipe's JSON-able config), got "
                              f"{type(rc).__name__}")
        if rc is not None:  # a snapshot: later edits to the caller's dict change nothing
            object.__setattr__(self, "recipe_config", copy.deepcopy(dict(rc)))
        tb = self.trusted_before
        if tb is not None and not callable(tb):
            raise ConfigError(f"trusted_before must be a callable returning a step or None, "
                              f"got {type(tb).__name__}")
