"""Why a step is slow: a short torch.profiler window split into the parts of a step, FLOPs
(FlopCounterMode) and MFU against a measured peak, the bottleneck class with its evidence, and
the levers that would help ranked by expected gain.

Importing this package does not import torch; its functions import it when called.
"""

from __future__ import annotations

from typing import Any

__all__ = ["profile_recipe", "ProfileConfig", "ProfileReport", "count_flops", "FlopCount",
           "mfu"]

_LAZY = {
    "profile_recipe": "trainmedic.profile.session",
    "ProfileConfig": "trainmedic.profile.session",
    "ProfileReport": "trainmedic.profile.breakdown",
    "count_flops": "trainmedic.profile.flops",
    "FlopCount": "trainmedic.profile.flops",
    "mfu": "trainmedic.profile.flops",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'trainmedic.profile' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
