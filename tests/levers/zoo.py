"""A zoo of small recipes for ``trainmedic check``: one healthy MLP classifier, and each
planted bug a copy of it (or a tiny token model) with one thing wrong.

Loaded by file path (``load_recipe(f"{ZOO}:sum_loss")``), as a user's ``train.py`` would be.
Every factory takes ``seed`` and builds everything from it, so two loads are identical.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainmedic.recipe.recipe import Recipe

CLASSES = 10
FEATURES = 16
BATCH = 16


class MLP(nn.Module):
    """Two hidden layers, dropout between them, ``CLASSES`` logits."""

    def __init__(self, *, dropout: float = 0.1, batchnorm: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(FEATURES, 32)
        self.norm = nn.BatchNorm1d(32) if batchnorm else nn.Identity()
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(32, 32)
        self.head = nn.Linear(32, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(F.relu(self.norm(self.fc1(x))))
        return self.head(self.drop(F.relu(self.fc2(h))))


def _data(seed: int, *, label_offset: int = 0, n: int = 4 * BATCH) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEATURES, generator=g)
    y = torch.randint(0, CLASSES, (n,), generator=g) + label_offset
    return DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True, drop_last=True,
                      generator=torch.Generator().manual_seed(seed + 1))


def ce_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


def _recipe(model: nn.Module, *, seed: int, loss_fn=ce_loss, params=None, data=None,
            **kw) -> Recipe:
    opt = torch.optim.AdamW(model.parameters() if params is None else params, lr=1e-2)
    return Recipe(model=model, optimizer=opt, loss_fn=loss_fn,
                  data=data if data is not None else _data(seed), seed=seed, **kw)


def healthy(seed: int = 0, batchnorm: bool = False, precision: str = "fp32") -> Recipe:
    torch.manual_seed(seed)
    return _recipe(MLP(batchnorm=batchnorm), seed=seed, precision=precision)


def missing_layer(seed: int = 0) -> Recipe:
    """The head is left out of the optimizer (built over the hidden layers only)."""
    torch.manual_seed(seed)
    m = MLP()
    return _recipe(m, seed=seed, params=[*m.fc1.parameters(), *m.fc2.parameters()])


def frozen_in_optimizer(seed: int = 0) -> Recipe:
    """fc1 is frozen after the optimizer was built over every parameter."""
    torch.manual_seed(seed)
    m = MLP()
    r = _recipe(m, seed=seed)
    m.fc1.requires_grad_(False)
    return r


class _WithUnused(MLP):
    def __init__(self) -> None:
        super().__init__()
        self.aux = nn.Linear(32, CLASSES)  # an auxiliary head forward never calls


def unused_layer(seed: int = 0) -> Recipe:
    torch.manual_seed(seed)
    return _recipe(_WithUnused(), seed=seed)


def sum_loss(seed: int = 0) -> Recipe:
    """The loss is summed over the batch instead of averaged."""
    torch.manual_seed(seed)

    def loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x), y, reduction="sum")

    return _recipe(MLP(), seed=seed, loss_fn=loss)


def scaled_logits(seed: int = 0) -> Recipe:
    """The output layer's init is 100x too large: the model starts confidently wrong."""
    torch.manual_seed(seed)
    m = MLP()
    with torch.no_grad():
        m.head.weight.mul_(100)
    return _recipe(m, seed=seed)


def detached(seed: int = 0) -> Recipe:
    """The loss is computed from detached logits (and made differentiable again for a
    "metric" refactor): backward runs, but nothing reaches the model."""
    torch.manual_seed(seed)

    def loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        logits = model(x).detach().requires_grad_()
        return F.cross_entropy(logits, y)

    return _recipe(MLP(), seed=seed, loss_fn=loss)


class _AlwaysDropout(MLP):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.dropout(F.relu(self.fc1(x)), 0.3, training=True)  # the bug: hard-coded on
        return self.head(F.relu(self.fc2(h)))


def dropout_in_eval(seed: int = 0) -> Recipe:
    torch.manual_seed(seed)
    return _recipe(_AlwaysDropout(), seed=seed)


#: Made once, without a seed: its draws differ in every process and advance between calls.
_UNSEEDED = np.random.default_rng()


def nondeterministic(seed: int = 0) -> Recipe:
    """Input noise drawn from a generator nobody seeds (an augmentation)."""
    torch.manual_seed(seed)

    def loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        noise = torch.from_numpy(_UNSEEDED.normal(0.0, 0.1, size=tuple(x.shape))).float()
        return F.cross_entropy(model(x + noise), y)

    return _recipe(MLP(), seed=seed, loss_fn=loss)


def labels_out_of_range(seed: int = 0) -> Recipe:
    """Labels run 1..C (one-based), so the label C appears."""
    torch.manual_seed(seed)
    return _recipe(MLP(), seed=seed, data=_data(seed, label_offset=1))


class _Regressor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 1))
        with torch.no_grad():
            self.body[2].bias.fill_(1000.0)  # start at the targets' mean

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x).squeeze(-1)


def bf16_fragile(seed: int = 0) -> Recipe:
    """Regression on unnormalized targets (1000 + a signal of ~0.1), trained in bf16: near
    1000 bf16 values are 4 apart, so the residuals the loss is made of round away."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4 * BATCH, FEATURES, generator=g)
    y = 1000.0 + 0.1 * x[:, 0] + 0.01 * torch.randn(4 * BATCH, generator=g)
    data = DataLoader(TensorDataset(x, y), batch_size=BATCH)

    def loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        xb, yb = batch
        return F.mse_loss(model(xb).float(), yb)

    return _recipe(_Regressor(), seed=seed, loss_fn=loss, data=data, precision="bf16-mixed")


class TokenModel(nn.Module):
    def __init__(self, vocab: int = 12) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, 16)
        self.out = nn.Linear(16, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.emb(ids)))


def per_token_norm(seed: int = 0) -> Recipe:
    """Padded sequences of different lengths, grad_accum 2, and the default
    ``F.cross_entropy(ignore_index=-100)``: a mean over each micro-batch's own tokens, so a
    short micro-batch's tokens weigh more (the bug transformers fixed in 4.46)."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    n, t = 4 * 8, 12
    ids = torch.randint(0, 12, (n, t), generator=g)
    labels = (ids * 5 + 1) % 12  # learnable: a function of the token
    lengths = torch.tensor([2 if i % 8 < 4 else t for i in range(n)])  # short, then long rows
    labels[torch.arange(t)[None, :] >= lengths[:, None]] = -100
    data = [{"input_ids": ids[i:i + 8], "labels": labels[i:i + 8]} for i in range(0, n, 8)]

    def loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = model(batch["input_ids"])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1))

    return _recipe(TokenModel(), seed=seed, loss_fn=loss, data=data, grad_accum=2)
