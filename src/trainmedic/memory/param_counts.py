"""Parameter counts of the building blocks the family parsers add up.

Each count is the number of elements of the tensors ``torch.nn`` allocates for the layer:
``nn.Linear(i, o, bias)`` holds an ``o x i`` weight and an ``o`` bias, ``nn.LayerNorm(d)`` a
weight and (by default) a bias of ``d``, an RMSNorm a weight of ``d``, ``nn.Embedding(n, d)``
an ``n x d`` table.
"""

from __future__ import annotations

__all__ = ["linear_params", "layernorm_params", "rmsnorm_params", "embedding_params"]


def linear_params(in_features: int, out_features: int, *, bias: bool) -> int:
    """Parameters of ``nn.Linear(in_features, out_features, bias=bias)``."""
    return in_features * out_features + (out_features if bias else 0)


def layernorm_params(width: int, *, affine: bool = True, bias: bool = True) -> int:
    """Parameters of ``nn.LayerNorm(width, elementwise_affine=affine, bias=bias)``."""
    if not affine:
        return 0
    return width * (2 if bias else 1)


def rmsnorm_params(width: int) -> int:
    """Parameters of an RMSNorm (one scale vector; T5's LayerNorm is the same)."""
    return width


def embedding_params(num_embeddings: int, width: int) -> int:
    """Parameters of ``nn.Embedding(num_embeddings, width)``."""
    return num_embeddings * width
