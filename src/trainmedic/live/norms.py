"""Global L2 norms of many tensors (gradients, parameters, updates) for the watcher.

One fused ``torch._foreach_norm`` per dtype, then the norm of the norms. Never overflowing:
float32 squares overflow once values pass ~1.8e19, and a diverging run's finite gradients
must not read as infinite (the NaN guard would take them for a NaN).

On CPU the cost is not the arithmetic but the calls: inside a real training loop each torch
call right after backward runs with cold caches (~10 us each on the benchmark's VM, measured
by ``benchmarks/watch_overhead.py``), so the CPU path makes as few as it can: one
``_foreach_norm`` per dtype, and the per-tensor norms are combined on the host by
``math.hypot`` (float64, scaled: it cannot overflow) instead of a ``stack`` and a second norm.
``_foreach_norm`` on CPU is a loop of one reduction per tensor, each costing about as much
for a 64-value LayerNorm weight as for a 16k-value matrix, so the gradients of the 1-D
parameters (biases, norm weights: half of a transformer's tensors, a sliver of its values)
are first joined by one ``torch.cat`` and reduced as one tensor (measured in the demo's loop:
half the tensors to reduce, ~20-30 us less per step).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["global_l2_norm", "GradNorm", "clip_grads_with_norm", "update_stats"]


def global_l2_norm(torch: Any, tensors: list[Any]) -> Any:
    """Global L2 norm of ``tensors``, never overflowing: a float for CPU tensors, a 0-d
    float64 tensor on an accelerator (read later, in the batched fetch).

    A float32 sum of squares overflows once values pass ~1.8e19: a diverging run's finite
    gradients would read as an infinite norm, and the NaN guard would take a huge-but-finite
    step for a non-finite one. On an accelerator the norm accumulates in float64 (the
    reduction is memory-bound there, so it costs the same, and branching would need a sync);
    on CPU, where float64 doubles the cost and reading the result is free, each tensor's norm
    in its own precision (float32 at least) combined in float64, and everything in float64
    only when that was not finite.
    """
    # No torch.no_grad() here: callers pass gradients or detached tensors (no graph is
    # built), and entering the context costs ~30 us per call inside a real CPU loop.
    if all(t.device.type == "cpu" for t in tensors):
        groups: dict[Any, list[Any]] = {}
        for t in tensors:
            groups.setdefault(t.dtype, []).append(t)
        return _cpu_norm(torch, list(groups.values()),
                         [_low_precision(torch, dtype) for dtype in groups])
    return _norms_as(torch, tensors, torch.float64)


class GradNorm:
    """The global gradient norm of a fixed list of parameters, called once per step.

    What does not change between steps is worked out once: the parameters grouped by dtype
    (a gradient has its parameter's dtype), whether everything is on the CPU, and, after the
    first sparse gradient, that sparse gradients are left out (as they always were: dense
    norms only). Returns a float on CPU, a 0-d float64 tensor on an accelerator (no sync),
    ``None`` when no parameter has a gradient.
    """

    def __init__(self, torch: Any, params: list[Any]) -> None:
        self._torch = torch
        self._params = params
        self._cpu = bool(params) and all(p.device.type == "cpu" for p in params)
        groups: dict[Any, list[Any]] = {}
        for p in params:
            groups.setdefault(p.dtype, []).append(p)
        # (parameters, the dtype to accumulate in: None = their own, float32 for 16-bit)
        self._groups = [(ps, _low_precision(torch, dtype)) for dtype, ps in groups.items()]
        self._sparse_seen = False
        # One dtype on CPU: the 1-D parameters' gradients are joined before the reduction.
        self._vectors: list[Any] = []
        self._others: list[Any] = params
        if self._cpu and len(self._groups) == 1:
            vectors = [p for p in params if p.dim() == 1]
            if len(vectors) > 1:
                self._vectors = vectors
                self._others = [p for p in params if p.dim() != 1]

    def __call__(self) -> Any:
        if not self._cpu or self._sparse_seen:
            return self._general()
        torch = self._torch
        if len(self._groups) == 1:
            grads = [g for p in self._others if (g := p.grad) is not None]
            if self._vectors:
                vectors = [g for p in self._vectors if (g := p.grad) is not None]
                if vectors:
                    grads.append(torch.cat(vectors) if len(vectors) > 1 else vectors[0])
            if not grads:
                return None
            lists = [grads]
            dtypes = [self._groups[0][1]]
        else:
            lists, dtypes = [], []
            for ps, dtype in self._groups:
                grads = [g for p in ps if (g := p.grad) is not None]
                if grads:
                    lists.append(grads)
                    dtypes.append(dtype)
            if not lists:
                return None
        try:
            return _cpu_norm(torch, lists, dtypes)
        except (NotImplementedError, RuntimeError):
            # A sparse gradient (nn.Embedding(sparse=True)): _foreach_norm has no sparse
            # kernel. Dense gradients only from here on, as the general path always did.
            self._sparse_seen = True
            return self._general()

    def of_aligned(self, tensors: list[Any]) -> Any:
        """Global norm of ``tensors`` laid out as the parameters are (one per parameter, same
        dtypes and devices: the parameters themselves, or their change in one update), with
        the grouping worked out at construction. Call it under ``torch.no_grad()`` when the
        tensors are parameters."""
        if not self._cpu or len(tensors) != len(self._params):
            return global_l2_norm(self._torch, tensors)
        if len(self._groups) == 1:
            return _cpu_norm(self._torch, [tensors], [self._groups[0][1]])
        return global_l2_norm(self._torch, tensors)

    def _general(self) -> Any:
        grads = [g for p in self._params if (g := p.grad) is not None and not g.is_sparse]
        if not grads:
            return None
        return global_l2_norm(self._torch, grads)


def _low_precision(torch: Any, dtype: Any) -> Any:
    """The dtype to accumulate ``dtype`` in: None (its own) for 32/64-bit, else float32."""
    return None if dtype in (torch.float32, torch.float64) else torch.float32


def _cpu_norm(torch: Any, lists: list[list[Any]], dtypes: list[Any]) -> float:
    """CPU: per-tensor norms (one fused call per list of one dtype; ``dtypes``: per list,
    None or the dtype to accumulate in), combined by ``math.hypot``; all in float64 when the
    result is not finite (an overflowing float32 norm, or a NaN/inf gradient: the float64
    result then says which, NaN or inf, as one norm of everything would)."""
    if len(lists) == 1:
        norms = (torch._foreach_norm(lists[0]) if dtypes[0] is None
                 else torch._foreach_norm(lists[0], 2, dtype=dtypes[0]))
    else:
        norms = []
        for ts, dtype in zip(lists, dtypes, strict=True):
            norms.extend(torch._foreach_norm(ts) if dtype is None
                         else torch._foreach_norm(ts, 2, dtype=dtype))
    value = math.hypot(*norms)  # float() of each 0-d tensor: a host read, free on CPU
    if math.isfinite(value):
        return value
    tensors = [t for ts in lists for t in ts]
    return float(_norms_as(torch, tensors, torch.float64).item())


def _norms_as(torch: Any, tensors: list[Any], dtype: Any) -> Any:
    try:  # one fused kernel per device and dtype
        norms = torch._foreach_norm(tensors, 2, dtype=dtype)
    except (AttributeError, RuntimeError, TypeError):
        norms = [torch.linalg.vector_norm(t, dtype=dtype) for t in tensors]
    dev = norms[0].device
    if any(n.device != dev for n in norms):
        norms = [n.to(dev) for n in norms]  # parameters on several devices
    return torch.linalg.vector_norm(torch.stack(norms))


def clip_grads_with_norm(torch: Any, params: list[Any], max_norm: float, total: Any,
                         foreach: bool | None = None) -> None:
    """Scale the gradients of ``params`` by ``min(1, max_norm / (total + 1e-6))``, torch's
    ``clip_grad_norm_`` arithmetic, given their global norm ``total`` (a 0-d float64 tensor).

    The coefficient is taken in float64, then cast to float32 once: a finite norm past
    float32's range still gives a (tiny) finite coefficient instead of inf -> 0 (zeroed
    gradients). The coefficient is a float32 scalar tensor, as torch's own clipping passes to
    ``_foreach_mul_`` (not measured on CUDA here: no session had a GPU). One
    ``_foreach_mul_`` per device and dtype, as torch groups them, unless ``foreach=False``."""
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0).to(torch.float32)
    groups: dict[tuple[Any, Any], list[Any]] = {}
    for p in params:
        g = p.grad
        if g is not None:
            groups.setdefault((g.device, g.dtype), []).append(g)
    on_device: dict[Any, Any] = {}
    with torch.no_grad():
        for (device, _dtype), grads in groups.items():
            c = on_device.get(device)
            if c is None:
                c = on_device[device] = coef.to(device)
            if foreach is False:
                for g in grads:
                    g.mul_(c)
            else:
                torch._foreach_mul_(grads, c)


def update_stats(torch: Any, norm: GradNorm, before: list[Any], after: list[Any]) -> dict[str, Any]:
    """``param_norm`` and ``update_ratio`` (the update's norm over the parameters') of one
    optimizer step, from a copy of the parameters taken ``before`` it (overwritten here with
    minus the update) and the parameters ``after`` it; floats on CPU, 0-d tensors (no sync)
    on an accelerator."""
    with torch.no_grad():  # on the parameters themselves: no graph under no_grad
        torch._foreach_sub_(before, after)  # minus the update, in the copy's memory
        param_norm = norm.of_aligned(after)
        update_norm = norm.of_aligned(before)
    if isinstance(param_norm, float):
        return {"param_norm": param_norm, "update_ratio": update_norm / max(param_norm, 1e-30)}
    return {"param_norm": param_norm, "update_ratio": update_norm / param_norm.clamp_min(1e-30)}
