"""Global L2 norms of many tensors (gradients, parameters, updates) for the watcher.

One fused ``torch._foreach_norm`` per device and dtype, then the norm of the norms. Never
overflowing: float32 squares overflow once values pass ~1.8e19, and a diverging run's finite
gradients must not read as infinite (the NaN guard would take them for a NaN).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["global_l2_norm"]


def global_l2_norm(torch: Any, tensors: list[Any]) -> Any:
    """Global L2 norm of ``tensors``, never overflowing: a float for CPU tensors, a 0-d
    float64 tensor on an accelerator (read later, in the batched fetch).

    A float32 sum of squares overflows once values pass ~1.8e19: a diverging run's finite
    gradients would read as an infinite norm, and the NaN guard would take a huge-but-finite
    step for a non-finite one. On an accelerator the norm accumulates in float64 (the
    reduction is memory-bound there, so it costs the same, and branching would need a sync);
    on CPU, where float64 doubles the cost and reading the result is free, float32 first and
    float64 only when that overflowed.
    """
    # No torch.no_grad() here: callers pass gradients or detached tensors (no graph is
    # built), and entering the context costs ~30 us per call inside a real CPU loop.
    if tensors[0].device.type == "cpu":
        # A float at once: on CPU each extra torch call costs ~10 us in a real loop (cold
        # dispatch after backward, measured), more than the arithmetic.
        value = float(_norms_as(torch, tensors, torch.float32).item())
        if math.isfinite(value):
            return value
        return float(_norms_as(torch, tensors, torch.float64).item())
    return _norms_as(torch, tensors, torch.float64)


def _norms_as(torch: Any, tensors: list[Any], dtype: Any) -> Any:
    try:  # one fused kernel per device and dtype
        norms = torch._foreach_norm(tensors, 2, dtype=dtype)
    except (AttributeError, RuntimeError, TypeError):
        norms = [torch.linalg.vector_norm(t, dtype=dtype) for t in tensors]
    dev = norms[0].device
    if any(n.device != dev for n in norms):
        norms = [n.to(dev) for n in norms]  # parameters on several devices
    return torch.linalg.vector_norm(torch.stack(norms))
