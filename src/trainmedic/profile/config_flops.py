"""Training FLOPs of a transformer from its Hugging Face config, before anything runs.

PaLM (Chowdhery et al. 2022, appendix B): a dense decoder costs ``6·N + 12·L·H·Q·T`` FLOPs per
trained token, with ``N`` the weights in matmuls, ``L`` layers, ``H`` query heads of ``Q``
dims and ``T`` the sequence length (the attention scores and the weighted values, forward
and backward, over the full T x T matrix as torch's counter counts it). ``N`` here is the
model's parameters less its embedding tables, plus the vocabulary projection (a matmul
whether its weight is tied to the embedding or not). Norms and biases add a few per mille.

This is an estimate from the config; ``trainmedic profile RECIPE`` counts the FLOPs of the
ops that really run (FlopCounterMode). Families other than dense decoders (mixture of
experts, latent attention, encoders, encoder-decoders, vision) are refused rather than
estimated with a formula that does not hold for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainmedic.errors import ConfigError
from trainmedic.profile.flops import transformer_train_flops_per_token

if TYPE_CHECKING:
    from trainmedic.memory.spec import ModelSpec

__all__ = ["ConfigFlops", "config_train_flops"]


@dataclass(kw_only=True, frozen=True)
class ConfigFlops:
    """Estimated training FLOPs of one optimizer step of a dense decoder."""

    matmul_params: int
    """``N``: weights in matmuls (embedding tables out, the vocabulary projection in)."""

    flops_per_token: float
    """``6·N + 12·L·H·Q·T``: forward and backward of one token at sequence length T."""

    tokens_per_step: int
    """Batch x sequence length x gradient-accumulation steps."""

    flops_per_step: float
    """``flops_per_token`` x ``tokens_per_step``: the watcher's ``flops_per_step``."""

    basis: str = "estimated"
    """Always ``estimated``: a formula over the config, not a count of ops that ran."""


def config_train_flops(spec: ModelSpec, *, batch_size: int, seq_len: int,
                       grad_accum: int = 1) -> ConfigFlops:
    """FLOPs of one training step (forward + backward, no recompute) of the model ``spec``
    describes, on ``batch_size`` x ``grad_accum`` sequences of ``seq_len`` tokens."""
    for name, v in (("batch_size", batch_size), ("seq_len", seq_len),
                    ("grad_accum", grad_accum)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{name} must be an integer >= 1, got {v!r}")
    why = _unsupported(spec)
    if why:
        raise ConfigError(f"FLOPs of a {spec.family} config are not estimated ({why}); count "
                          "them on the model itself with `trainmedic profile RECIPE`")
    matmul = spec.num_params - spec.num_embedding_params + spec.hidden_size * spec.vocab_size
    per_token = transformer_train_flops_per_token(
        n_params=matmul, n_layers=spec.num_layers, n_heads=spec.num_heads,
        head_dim=spec.head_dim, seq_len=seq_len)
    tokens = batch_size * seq_len * grad_accum
    return ConfigFlops(matmul_params=matmul, flops_per_token=per_token,
                       tokens_per_step=tokens, flops_per_step=per_token * tokens)


def _unsupported(spec: ModelSpec) -> str:
    if spec.arch != "decoder" or spec.head != "causal-lm":
        return f"{spec.arch} with a {spec.head} head; the formula is for causal decoders"
    if spec.num_experts:
        return "mixture of experts: each token runs only some experts"
    if spec.attention == "mla" or spec.v_head_dim:
        return "latent attention has other projection and head sizes"
    return ""
