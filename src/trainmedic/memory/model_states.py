"""Bytes per parameter of the model states: parameters, gradients, optimizer state, master weights.

The ZeRO paper (Rajbhandari et al. 2020, §3.1) names these the *model states* and counts
mixed-precision Adam as 2 + 2 + K bytes per parameter with K = 12 (fp32 master copy, momentum
and variance). What a run actually keeps depends on who implements the mixed precision, so the
semantics are spelled out per precision and strategy here, once, and echoed in every plan's notes:

- ``fp32``: fp32 params and grads; optimizer state in fp32.
- ``bf16-mixed`` / ``fp16-mixed`` on one device or DDP: PyTorch AMP (``torch.autocast``). Params
  and grads stay fp32, there is no separate master copy; matmuls run on low-precision casts of the
  weights, which autocast keeps for backward (counted as temporaries by the planner).
- ``bf16-mixed`` / ``fp16-mixed`` under ZeRO (DeepSpeed): low-precision params and grads, plus an
  fp32 master copy and fp32 optimizer state, sharded by stage (the ZeRO paper's 2 + 2 + 12).
- ``bf16-mixed`` / ``fp16-mixed`` under FSDP with ``MixedPrecision(param_dtype=bf16)``: the sharded
  fp32 params are what the optimizer updates (so no separate master), grads are reduced and kept in
  fp32; the unsharded low-precision params of the units in flight are temporaries.
- ``bf16`` (pure): bf16 params, grads and optimizer state; no master copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from trainmedic.errors import ConfigError

__all__ = [
    "PRECISIONS",
    "OPTIMIZERS",
    "DTYPE_BYTES",
    "PrecisionBytes",
    "precision_bytes",
    "optimizer_state_bytes",
    "dtype_bytes",
]

Precision = Literal["fp32", "bf16-mixed", "fp16-mixed", "bf16"]
Optimizer = Literal["sgd", "sgd-momentum", "adam", "adamw", "adam-8bit", "adafactor", "lion"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4,
    "float32": 4,
    "tf32": 4,
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "fp8": 1,
    "int8": 1,
    "int4": 0.5,
    "nf4": 0.5,
}


def dtype_bytes(name: str, *, field: str = "dtype") -> float:
    """Bytes per element of a dtype name (``bf16``, ``fp32``, ``int4``...)."""
    key = name.strip().lower()
    if key not in DTYPE_BYTES:
        raise ConfigError(
            f"{field}: got {name!r}, expected one of {sorted(DTYPE_BYTES)}"
        )
    return DTYPE_BYTES[key]


@dataclass(kw_only=True, frozen=True)
class PrecisionBytes:
    """Bytes per parameter of each model state, and the dtype sizes the activations use."""

    param: int
    """Bytes of one parameter as the model holds it."""
    grad: int
    """Bytes of one gradient element."""
    master: int
    """Bytes of the fp32 master copy (0 when the params are themselves fp32 or pure bf16)."""
    state_dtype: int
    """Bytes of one optimizer-state element (fp32 unless the run is pure bf16)."""
    compute: int
    """Bytes of a matmul input/output element: 2 under autocast or pure bf16, 4 in fp32."""
    residual: int
    """Bytes of the residual stream: fp32 under autocast (fp32 + bf16 promotes), 2 in pure bf16."""
    casts_weights: bool
    """Whether matmuls run on low-precision copies of fp32 weights (autocast)."""


def precision_bytes(precision: str, *, strategy_family: str = "single") -> PrecisionBytes:
    """Model-state sizes for a precision under a strategy family (single, ddp, zero, fsdp)."""
    if precision not in PRECISIONS:
        raise ConfigError(f"precision: got {precision!r}, expected one of {list(PRECISIONS)}")
    if precision == "fp32":
        return PrecisionBytes(
            param=4, grad=4, master=0, state_dtype=4, compute=4, residual=4, casts_weights=False
        )
    if precision == "bf16":
        return PrecisionBytes(
            param=2, grad=2, master=0, state_dtype=2, compute=2, residual=2, casts_weights=False
        )
    # Mixed precision: who implements it decides what is kept (module docstring).
    if strategy_family == "zero":
        return PrecisionBytes(
            param=2, grad=2, master=4, state_dtype=4, compute=2, residual=2, casts_weights=False
        )
    if strategy_family == "fsdp":
        return PrecisionBytes(
            param=4, grad=4, master=0, state_dtype=4, compute=2, residual=2, casts_weights=False
        )
    return PrecisionBytes(
        param=4, grad=4, master=0, state_dtype=4, compute=2, residual=4, casts_weights=True
    )


def optimizer_state_bytes(
    optimizer: str,
    *,
    numel: int,
    state_dtype_bytes: int,
    matrix_shapes: tuple[tuple[int, int], ...] = (),
) -> int:
    """Bytes of optimizer state for ``numel`` parameters.

    ``matrix_shapes`` lists the 2-D parameters (rows, cols), which Adafactor factors into a row
    and a column accumulator (Shazeer & Stern 2018, §3); the remaining elements keep a full
    second moment. 8-bit Adam keeps both moments in one byte each plus one fp32 absmax per block
    of 2048 (Dettmers et al. 2022, block-wise quantization).
    """
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"optimizer: got {optimizer!r}, expected one of {list(OPTIMIZERS)}")
    if optimizer == "sgd":
        return 0
    if optimizer in ("sgd-momentum", "lion"):
        # One buffer: the momentum (SGD) or the interpolated update's EMA (Lion, Chen et al. 2023).
        return numel * state_dtype_bytes
    if optimizer in ("adam", "adamw"):
        return 2 * numel * state_dtype_bytes
    if optimizer == "adam-8bit":
        blocks = -(-numel // 2048)
        return 2 * numel + 2 * blocks * 4
    # Adafactor without first moment (its default, beta1=None): factored second moment.
    factored = sum(r * c for r, c in matrix_shapes)
    factored_state = sum(r + c for r, c in matrix_shapes)
    return (factored_state + max(numel - factored, 0)) * state_dtype_bytes
