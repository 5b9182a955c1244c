"""How a parallel layout divides the model states and activations among GPUs.

The sharding follows the ZeRO paper (Rajbhandari et al. 2020, §5): stage 1 partitions the
optimizer states (and the fp32 master copy, which DeepSpeed keeps with them), stage 2 also the
gradients, stage 3 also the parameters. PyTorch FSDP's FULL_SHARD is stage 3, SHARD_GRAD_OP is
stage 2, HYBRID_SHARD shards within a node and replicates across nodes (Zhao et al. 2023,
"PyTorch FSDP", §3.2). Tensor parallelism splits the matmul weights and the activations between
them (Shoeybi et al. 2019, Megatron-LM); sequence parallelism also splits the activations outside
them (Korthikanti et al. 2022, §4.2.2). A 1F1B pipeline's first stage keeps the activations of up
to ``pp`` micro-batches in flight (Narayanan et al. 2021, §2.2; Korthikanti et al. §4.2.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from trainmedic.errors import ConfigError

__all__ = ["STRATEGIES", "RECOMPUTE", "OFFLOAD", "Layout", "layout"]

Strategy = Literal["single", "ddp", "zero1", "zero2", "zero3", "fsdp", "fsdp-grad-op",
                   "fsdp-hybrid"]
Recompute = Literal["none", "selective", "full"]
Offload = Literal["none", "optimizer", "params"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)
RECOMPUTE: tuple[str, ...] = get_args(Recompute)
OFFLOAD: tuple[str, ...] = get_args(Offload)

#: DeepSpeed's default ``reduce_bucket_size`` (elements) for ZeRO's gradient reduction.
ZERO_REDUCE_BUCKET_ELEMENTS = 500_000_000


@dataclass(kw_only=True, frozen=True)
class Layout:
    """The sharding factors one GPU sees, derived from the strategy and the GPU count."""

    strategy: str
    """The data-parallel strategy (one of :data:`STRATEGIES`)."""
    dp: int
    """Data-parallel degree: ``gpus / (tp * pp)``."""
    shard: int
    """Degree the sharded states are split over (``dp``, or the node size for hybrid)."""
    family: str
    """``single``, ``ddp``, ``zero`` or ``fsdp``: whose mixed-precision semantics apply."""
    shards_optimizer: bool
    shards_grads: bool
    shards_params: bool
    keeps_gathered: bool = False
    """The gathered (unsharded) parameters stay from forward to backward (FSDP SHARD_GRAD_OP):
    only the sharded copy is stored at rest."""

    def divisor(self, what: str) -> int:
        """Ways data parallelism splits the state ``what`` (optimizer, grads or params)."""
        flag = {
            "optimizer": self.shards_optimizer,
            "grads": self.shards_grads,
            "params": self.shards_params,
        }[what]
        return self.shard if flag else 1


def layout(
    strategy: str, *, gpus: int, tp: int, pp: int, gpus_per_node: int = 8
) -> Layout:
    """Check the degrees against each other and return the per-GPU sharding factors."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"strategy: got {strategy!r}, expected one of {list(STRATEGIES)}")
    for name, value in (("gpus", gpus), ("tp", tp), ("pp", pp), ("gpus_per_node", gpus_per_node)):
        if value < 1:
            raise ConfigError(f"{name}: got {value}, expected a positive integer")
    if gpus % (tp * pp):
        raise ConfigError(
            f"gpus: got {gpus}, expected a multiple of tp × pp = {tp} × {pp} = {tp * pp}"
        )
    dp = gpus // (tp * pp)
    if strategy == "single" and gpus != 1:
        raise ConfigError(
            f"strategy: got 'single' with gpus={gpus}; use ddp, zero1-3 or fsdp for several GPUs"
        )
    if strategy in ("single", "ddp"):
        family = "single" if strategy == "single" else "ddp"
        return Layout(strategy=strategy, dp=dp, shard=1, family=family,
                      shards_optimizer=False, shards_grads=False, shards_params=False)
    if strategy.startswith("zero"):
        stage = int(strategy[-1])
        return Layout(strategy=strategy, dp=dp, shard=dp, family="zero",
                      shards_optimizer=stage >= 1, shards_grads=stage >= 2,
                      shards_params=stage >= 3)
    if strategy == "fsdp-grad-op":
        return Layout(strategy=strategy, dp=dp, shard=dp, family="fsdp",
                      shards_optimizer=True, shards_grads=True, shards_params=True,
                      keeps_gathered=True)
    shard = min(dp, gpus_per_node // max(tp, 1) or 1) if strategy == "fsdp-hybrid" else dp
    return Layout(strategy=strategy, dp=dp, shard=max(shard, 1), family="fsdp",
                  shards_optimizer=True, shards_grads=True, shards_params=True)
