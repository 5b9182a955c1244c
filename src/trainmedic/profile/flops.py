"""FLOPs of one training step, counted by torch, and the analytic counts they are checked against.

:func:`count_flops` runs a callable (one micro-batch's forward and backward) under
``torch.utils.flop_counter.FlopCounterMode``, torch's own counter: matmuls, convolutions and
the fused attention kernels it knows. It does not know the CPU kernel of
``scaled_dot_product_attention`` (``_scaled_dot_product_flash_attention_for_cpu`` and its
backward): there the attention would count zero, so they are added here with torch's own
formula for the fused kernels (``sdpa_flop_count``: 4·b·h·s_q·s_k·d forward, twice that
backward), and the report says how many FLOPs came from it.

Conventions (the ones MFU figures are quoted in): a multiply-add is 2 FLOPs; elementwise ops,
norms and softmax count nothing; attention counts the full s_q × s_k score matrix even under a
causal mask, as torch's counter and PaLM's appendix B both do.

Analytic counts for checking (Kaplan et al. 2020 / PaLM, Chowdhery et al. 2022, appendix B):
a dense decoder costs 6·N FLOPs per token for the weights (2 forward, 4 backward) plus
12·L·h·d_head·s per token for attention scores and values (forward + backward).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainmedic.errors import ConfigError

__all__ = ["FlopCount", "count_flops", "transformer_train_flops_per_token", "mfu"]


@dataclass(kw_only=True, frozen=True)
class FlopCount:
    """What :func:`count_flops` counted in one call."""

    total: int
    """FLOPs of the call (forward and backward when the callable runs both)."""

    by_op: Mapping[str, int] = field(default_factory=dict)
    """FLOPs per aten op name, largest first."""

    added_by_formula: int = 0
    """Of ``total``, the FLOPs torch's counter did not count (CPU attention kernels) and
    this module added by formula."""

    basis: str = "measured"
    """``measured``: counted by FlopCounterMode on the ops that ran (formula-added attention
    included: its shapes are the ones that ran)."""

    recompute: int | None = 0
    """Of ``total``, the FLOPs of forward ops run again during the backward pass (activation
    checkpointing): hardware FLOPs, not model FLOPs. ``None`` when it could not be told apart
    (a backward that builds a graph, ``create_graph=True``, looks the same: see
    :func:`count_flops`)."""

    @property
    def model_flops(self) -> int | None:
        """FLOPs the model needs (MFU's numerator): ``total`` less the recompute; ``None``
        when the recompute is unknown."""
        return None if self.recompute is None else self.total - self.recompute


def _cpu_attention_mapping() -> dict[Any, Any]:
    """FlopCounterMode ``custom_mapping`` entries for the CPU attention kernels it lacks."""
    import torch
    from torch.utils import flop_counter

    aten = torch.ops.aten
    mapping: dict[Any, Any] = {}
    forward = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    backward = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    known = flop_counter.flop_registry
    if forward is not None and forward.default not in known and forward not in known:
        def forward_flops(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any,
                          out_shape: Any = None, **kwargs: Any) -> int:
            return int(flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape))

        mapping[forward] = forward_flops
    if backward is not None and backward.default not in known and backward not in known:
        def backward_flops(grad_out_shape: Any, query_shape: Any, key_shape: Any,
                           value_shape: Any, *args: Any, out_shape: Any = None,
                           **kwargs: Any) -> int:
            return int(flop_counter.sdpa_backward_flop_count(grad_out_shape, query_shape,
                                                             key_shape, value_shape))

        mapping[backward] = backward_flops
    return mapping


def count_flops(fn: Callable[[], Any]) -> FlopCount:
    """Run ``fn()`` once under FlopCounterMode and return what it counted.

    ``fn`` is typically one micro-batch: ``loss_fn(model, batch).backward()``. It runs for real
    (on the model's device), so it changes gradients (and BatchNorm statistics) as a step would.
    """
    from torch.utils.flop_counter import FlopCounterMode

    extra = _cpu_attention_mapping()
    counter = FlopCounterMode(display=False, custom_mapping=extra)
    phases = _PhaseFlops(counter.flop_registry)
    # ``phases`` is entered first, so it sits under the counter on the mode stack: it sees
    # every op the counter sees, after the counter, with the same formulas.
    with phases, counter:
        fn()
    by_op: dict[str, int] = {}
    for op, n in counter.get_flop_counts().get("Global", {}).items():
        name = str(op).removeprefix("aten.")
        by_op[name] = by_op.get(name, 0) + int(n)
    extra_names = {str(op).removeprefix("aten.").split(".")[0] for op in extra}
    added = sum(n for name, n in by_op.items() if name.split(".")[0] in extra_names)
    ordered = dict(sorted(by_op.items(), key=lambda kv: -kv[1]))
    recompute: int | None = phases.recompute
    if phases.recompute > phases.forward or not phases.can_tell:
        # More "recomputed" than forward FLOPs is no checkpointing: a backward with
        # create_graph=True (a gradient penalty) runs its own ops with grad enabled.
        recompute = None
    return FlopCount(total=int(counter.get_total_flops()), by_op=ordered,
                     added_by_formula=added, recompute=recompute)


def _phase_mode_class() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode

    class PhaseFlops(TorchDispatchMode):
        """FLOPs by phase: forward (outside any backward) and recompute (an op that runs
        inside a backward pass with grad enabled). A backward's own ops run with grad
        disabled; the forward ops activation checkpointing replays in the backward run with
        grad enabled, reentrant or not (torch.utils.checkpoint: both recompute under
        ``torch.enable_grad()``)."""

        def __init__(self, formulas: Mapping[Any, Any]) -> None:
            super().__init__()
            import torch

            self.formulas = formulas
            self.forward = 0
            self.recompute = 0
            self._task_id = getattr(torch._C, "_current_graph_task_id", None)
            self.can_tell = self._task_id is not None
            self._grad_enabled = torch.is_grad_enabled

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            formula = self.formulas.get(func._overloadpacket)
            if formula is not None and self._task_id is not None:
                in_backward = self._task_id() != -1
                if not in_backward:
                    self.forward += int(formula(*args, **kwargs, out_val=out))
                elif self._grad_enabled():
                    self.recompute += int(formula(*args, **kwargs, out_val=out))
            return out

    return PhaseFlops


def _PhaseFlops(formulas: Mapping[Any, Any]) -> Any:  # noqa: N802 - a class made lazily
    return _phase_mode_class()(formulas)


def transformer_train_flops_per_token(*, n_params: int, n_layers: int, n_heads: int,
                                      head_dim: int, seq_len: int) -> float:
    """Training FLOPs per token of a dense decoder (forward + backward), PaLM appendix B:
    ``6·N + 12·L·H·Q·T`` with ``N`` the parameters in matmuls (exclude the embedding lookup
    table unless its weights are tied to the output layer), ``L`` layers, ``H`` heads of
    ``Q`` dims and ``T`` the sequence length."""
    for name, v in (("n_params", n_params), ("n_layers", n_layers), ("n_heads", n_heads),
                    ("head_dim", head_dim), ("seq_len", seq_len)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"{name} must be an integer >= 0, got {v!r}")
    return 6.0 * n_params + 12.0 * n_layers * n_heads * head_dim * seq_len


def mfu(flops_per_step: float, step_time_s: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilization (PaLM, Chowdhery et al. 2022, appendix B): the FLOPs a step
    needs, over the time it took, over the peak the hardware can do. Recomputation is not
    counted (that would be hardware FLOPs utilization, HFU)."""
    for name, v in (("flops_per_step", flops_per_step), ("step_time_s", step_time_s),
                    ("peak_flops_per_s", peak_flops_per_s)):
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ConfigError(f"{name} must be a finite number > 0, got {v!r}")
    return flops_per_step / step_time_s / peak_flops_per_s
