"""The demo's model: a tiny pre-LayerNorm character-level transformer (GPT-style).

Small on purpose (2 layers, d_model 64, ~0.1 M parameters) so a few hundred steps run in
seconds on two CPU cores. Imports torch: only the demo loads this module.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from trainmedic.errors import ConfigError

__all__ = ["CharTransformer"]


def _dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    # p == 0 calls nothing: runs without dropout draw nothing from the RNG and keep the
    # module tree (which the watcher's layer health walks) exactly as it was.
    return F.dropout(x, p, training) if p > 0 else x


class _Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.dropout = dropout
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        shape = (b, t, self.n_heads, d // self.n_heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        p = self.dropout
        x = x + _dropout(self.proj(att.transpose(1, 2).reshape(b, t, d)), p, self.training)
        return x + _dropout(self.mlp(self.ln2(x)), p, self.training)


class CharTransformer(nn.Module):
    """Next-character model: ``forward(idx)`` gives logits of shape (batch, time, vocab).

    ``dropout``: the probability on the embeddings and on each residual branch (GPT-2's
    places); 0 (the default) applies none.
    """

    def __init__(self, vocab_size: int, *, context_len: int = 64, d_model: int = 64,
                 n_layers: int = 2, n_heads: int = 4, dropout: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {dropout!r}")
        self.dropout = dropout
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(context_len, d_model)
        self.blocks = nn.Sequential(*(_Block(d_model, n_heads, dropout)
                                      for _ in range(n_layers)))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        # GPT-2 style init: small normal weights, residual projections scaled by depth.
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = _dropout(self.tok(idx) + self.pos(torch.arange(t, device=idx.device)),
                     self.dropout, self.training)
        return self.head(self.ln_f(self.blocks(x)))
