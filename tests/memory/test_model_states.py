"""Model-state bytes against real torch optimizers (the oracle) and the ZeRO paper's figures."""

from __future__ import annotations

import pytest

from trainmedic.errors import ConfigError
from trainmedic.memory.model_states import (
    OPTIMIZERS,
    dtype_bytes,
    optimizer_state_bytes,
    precision_bytes,
)

torch = pytest.importorskip("torch")


def _state_bytes(opt: torch.optim.Optimizer) -> int:
    total = 0
    for state in opt.state.values():
        for v in state.values():
            # Skip the scalar step counters: they are not per-parameter state.
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                total += v.numel() * v.element_size()
    return total


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.GELU(), torch.nn.Linear(96, 32))


def _step(opt_cls: type, model: torch.nn.Module, **kw: object) -> torch.optim.Optimizer:
    opt = opt_cls(model.parameters(), **kw)
    model(torch.randn(4, 48)).square().mean().backward()
    opt.step()
    return opt


@pytest.mark.parametrize(
    ("name", "cls", "kw"),
    [
        ("sgd", torch.optim.SGD, {"lr": 0.1}),
        ("sgd-momentum", torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
        ("adam", torch.optim.Adam, {}),
        ("adamw", torch.optim.AdamW, {}),
    ],
)
def test_optimizer_state_matches_torch(name: str, cls: type, kw: dict) -> None:
    model = _model()
    numel = sum(p.numel() for p in model.parameters())
    opt = _step(cls, model, **kw)
    assert optimizer_state_bytes(name, numel=numel, state_dtype_bytes=4) == _state_bytes(opt)


def test_adafactor_factored_state_matches_torch() -> None:
    if not hasattr(torch.optim, "Adafactor"):
        pytest.skip("torch.optim.Adafactor needs torch >= 2.5")
    model = _model()
    opt = _step(torch.optim.Adafactor, model)
    numel = sum(p.numel() for p in model.parameters())
    shapes = tuple(tuple(p.shape) for p in model.parameters() if p.dim() == 2)
    expected = optimizer_state_bytes("adafactor", numel=numel, state_dtype_bytes=4,
                                     matrix_shapes=shapes)  # type: ignore[arg-type]
    assert expected == _state_bytes(opt)


def test_bf16_params_keep_bf16_adam_state() -> None:
    model = _model().to(torch.bfloat16)
    numel = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 48, dtype=torch.bfloat16)).float().square().mean().backward()
    opt.step()
    pb = precision_bytes("bf16")
    assert optimizer_state_bytes("adamw", numel=numel, state_dtype_bytes=pb.state_dtype) == (
        _state_bytes(opt))


def test_zero_paper_mixed_precision_adam_is_16_bytes_per_param() -> None:
    # Rajbhandari et al. 2020 §3.1: 2 + 2 + K with K = 12 (master, momentum, variance).
    pb = precision_bytes("bf16-mixed", strategy_family="zero")
    k = pb.master + optimizer_state_bytes("adam", numel=1, state_dtype_bytes=pb.state_dtype)
    assert (pb.param, pb.grad, k) == (2, 2, 12)


def test_eight_bit_adam_is_about_two_bytes_per_param() -> None:
    n = 10_000_000
    per_param = optimizer_state_bytes("adam-8bit", numel=n, state_dtype_bytes=4) / n
    assert 2.0 < per_param < 2.01


@pytest.mark.parametrize("bad", ["adamx", "", "ADAM"])
def test_unknown_optimizer_names_the_field(bad: str) -> None:
    with pytest.raises(ConfigError, match="optimizer"):
        optimizer_state_bytes(bad, numel=1, state_dtype_bytes=4)


def test_unknown_precision_and_dtype_name_the_field() -> None:
    with pytest.raises(ConfigError, match="precision"):
        precision_bytes("fp8-mixed")
    with pytest.raises(ConfigError, match="kv_dtype"):
        dtype_bytes("fp7", field="kv_dtype")
    assert dtype_bytes("BF16") == 2
    assert "lion" in OPTIMIZERS
