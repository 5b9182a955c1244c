"""FLOP counts against analytic counts on tiny models of three families, the CPU attention
formula FlopCounterMode lacks, and MFU arithmetic."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from trainmedic.errors import ConfigError
from trainmedic.profile.flops import count_flops, mfu, transformer_train_flops_per_token


def _train_flops(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                 loss: object = F.mse_loss) -> int:
    return count_flops(lambda: loss(model(x), y).backward()).total  # type: ignore[operator]


def test_mlp_matches_six_n_per_sample() -> None:
    # forward 2·in·out per sample and layer; backward 4·in·out (input and weight grads),
    # except the first layer, whose input needs no gradient: 2·in·out
    dims = [(32, 64), (64, 48), (48, 16)]
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 48), nn.ReLU(),
                          nn.Linear(48, 16))
    b = 8
    want = sum(6 * i * o * b for i, o in dims) - 2 * dims[0][0] * dims[0][1] * b
    got = _train_flops(model, torch.randn(b, 32), torch.randn(b, 16))
    assert abs(got - want) / want < 0.02
    assert got == want  # exact: only the matmuls count


def test_cnn_matches_the_convolution_formula() -> None:
    # forward 2·Cin·Cout·k²·Hout·Wout per sample; backward: weight grad the same, input grad
    # the same again except for the first conv (the image needs no gradient)
    b, h = 4, 16
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                          nn.Flatten(), nn.Linear(16 * h * h, 10))
    conv1 = 2 * 3 * 8 * 9 * h * h * b
    conv2 = 2 * 8 * 16 * 9 * h * h * b
    fc = 2 * 16 * h * h * 10 * b
    want = 2 * conv1 + 3 * conv2 + 3 * fc
    got = _train_flops(model, torch.randn(b, 3, h, h), torch.randint(0, 10, (b,)),
                       F.cross_entropy)
    assert abs(got - want) / want < 0.02


def test_transformer_matches_palm_within_two_percent_and_torch_convention_exactly() -> None:
    from trainmedic.demo.model import CharTransformer

    b, t, v, d, layers, heads = 4, 32, 33, 64, 2, 4
    torch.manual_seed(0)
    model = CharTransformer(v, context_len=t, d_model=d, n_layers=layers, n_heads=heads)
    idx = torch.randint(0, v, (b, t))
    count = count_flops(lambda: F.cross_entropy(model(idx).reshape(-1, v),
                                                idx.reshape(-1)).backward())
    # matmul weights: qkv, proj, two MLP layers per block, and the head (embeddings are
    # lookups); the input of the first block needs a gradient (embeddings train), so 6·N
    n_matmul = layers * (d * 3 * d + d * d + 2 * d * 4 * d) + d * v
    palm = transformer_train_flops_per_token(n_params=n_matmul, n_layers=layers,
                                             n_heads=heads, head_dim=d // heads,
                                             seq_len=t) * b * t
    assert abs(count.total - palm) / palm < 0.02
    # torch counts the fused attention backward as 2.5x its forward (the flash backward
    # recomputes the scores); PaLM counts 2x: the whole difference is that half forward
    attention_fwd = 4 * b * heads * t * t * (d // heads) * layers
    assert count.total - palm == attention_fwd // 2
    assert count.added_by_formula == attention_fwd * 3.5


def test_cpu_attention_is_added_where_torch_counts_nothing() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    q = torch.randn(2, 4, 16, 8, requires_grad=True)

    def attend() -> None:
        F.scaled_dot_product_attention(q, q, q).sum().backward()

    with FlopCounterMode(display=False) as plain:
        attend()
    count = count_flops(attend)
    fwd = 4 * 2 * 4 * 16 * 16 * 8
    if plain.get_total_flops() == 0:  # torch's counter does not know the CPU kernel
        assert count.added_by_formula == count.total == fwd + 2.5 * fwd
    else:  # a later torch counts it itself: nothing is added twice
        assert count.added_by_formula == 0 and count.total == plain.get_total_flops()


def test_mfu_is_flops_over_time_over_peak() -> None:
    assert mfu(6e12, 2.0, 10e12) == pytest.approx(0.3)
    # a slower step at the same FLOPs: MFU falls in proportion
    assert mfu(6e12, 4.0, 10e12) == pytest.approx(0.15)
    for bad in (0, -1.0, math.nan, math.inf):
        with pytest.raises(ConfigError, match="step_time_s"):
            mfu(1e9, bad, 1e12)


def test_palm_formula_refuses_bad_sizes() -> None:
    with pytest.raises(ConfigError, match="n_layers"):
        transformer_train_flops_per_token(n_params=10, n_layers=-1, n_heads=1, head_dim=1,
                                          seq_len=1)


class _Checkpointed(nn.Module):
    """Each Linear+ReLU block under activation checkpointing: the backward runs the block's
    Linear again (ReLU's saved output needs it), so the recompute is that Linear's forward."""

    def __init__(self, dims: list[tuple[int, int]], reentrant: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(i, o), nn.ReLU()) for i, o in dims)
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=self.reentrant)
        return x


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_recompute_is_hardware_flops_not_model_flops(reentrant: bool) -> None:
    dims = [(32, 64), (64, 48)]
    b = 8
    model = _Checkpointed(dims, reentrant)
    plain = nn.Sequential(*model.blocks)  # the same weights, no checkpointing
    x = torch.randn(b, 32, requires_grad=reentrant)  # reentrant needs an input that wants grad
    y = torch.randn(b, 48)
    got = count_flops(lambda: F.mse_loss(model(x), y).backward())
    reference = count_flops(lambda: F.mse_loss(plain(x), y).backward())
    forward = sum(2 * i * o * b for i, o in dims)
    assert got.recompute == forward  # every block's Linear ran again in the backward
    assert got.total == reference.total + forward
    assert got.model_flops == reference.total
    assert reference.recompute == 0


def test_a_backward_that_builds_a_graph_leaves_model_flops_unknown() -> None:
    # create_graph=True runs the backward's own ops with grad enabled, like a recompute:
    # more "recomputed" than forward FLOPs, so the split is refused rather than guessed
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    x = torch.randn(3, 8)

    def step() -> None:
        model(x).sum().backward(create_graph=True)

    with pytest.warns(UserWarning):
        got = count_flops(step)
    for p in model.parameters():
        p.grad = None  # the graph kept in .grad (torch's warning)
    assert got.total > 0
    assert got.recompute is None and got.model_flops is None
