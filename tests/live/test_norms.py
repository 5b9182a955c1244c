"""Global norms for the watcher, each checked against a float64 norm of all values at once."""

from __future__ import annotations

import math

import pytest

from trainmedic.live.norms import GradNorm, clip_grads_with_norm, global_l2_norm

torch = pytest.importorskip("torch")


def _oracle(tensors: list[torch.Tensor]) -> float:
    """The norm of every value, concatenated, in float64 (no per-tensor step at all)."""
    flat = torch.cat([t.detach().reshape(-1).to(torch.float64) for t in tensors])
    return float(torch.sqrt((flat * flat).sum()))


def _params(*specs: tuple[tuple[int, ...], torch.dtype]) -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.randn(shape).to(dtype)) for shape, dtype in specs]


def test_grad_norm_matches_clip_grad_norm_on_a_real_model() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(),
                                torch.nn.LayerNorm(32), torch.nn.Linear(32, 3))
    model(torch.randn(16, 8)).square().mean().backward()
    params = list(model.parameters())
    got = GradNorm(torch, params)()
    assert isinstance(got, float)
    assert got == pytest.approx(_oracle([p.grad for p in params]), rel=1e-6)
    clipped = torch.nn.utils.clip_grad_norm_(params, max_norm=math.inf)
    assert got == pytest.approx(float(clipped), rel=1e-6)


def test_mixed_dtypes_accumulate_in_float32_at_least() -> None:
    params = _params(((300,), torch.float32), ((64, 8), torch.bfloat16), ((5,), torch.float64),
                     ((7,), torch.float16), ((9,), torch.bfloat16))
    for p in params:
        p.grad = torch.randn(p.shape).to(p.dtype)
    want = _oracle([p.grad for p in params])
    assert GradNorm(torch, params)() == pytest.approx(want, rel=1e-6)
    assert global_l2_norm(torch, [p.grad for p in params]) == pytest.approx(want, rel=1e-6)
    # a bfloat16 sum of squares would be off by ~1e-2: the groups really run in float32
    bf = [p.grad for p in params if p.dtype == torch.bfloat16]
    assert global_l2_norm(torch, bf) == pytest.approx(_oracle(bf), rel=1e-6)


@pytest.mark.parametrize("foreach", [None, False])
def test_clipping_mixed_dtypes_scales_like_torch(foreach: bool | None) -> None:
    """Gradients of several dtypes (grouped per device and dtype) end as torch's clip leaves
    them given the same float64 norm, bit for bit."""
    if not hasattr(torch.nn.utils, "clip_grads_with_norm_"):
        pytest.skip("torch < 2.6 has no clip_grads_with_norm_ to compare with")
    specs = (((300,), torch.float32), ((64, 8), torch.bfloat16), ((7,), torch.float16),
             ((9,), torch.bfloat16), ((5,), torch.float32))
    ours, theirs = _params(*specs), _params(*specs)
    for a, b in zip(ours, theirs, strict=True):
        a.grad = torch.randn(a.shape).to(a.dtype) * 3
        b.grad = a.grad.clone()
    total = torch.tensor(_oracle([p.grad for p in ours]), dtype=torch.float64)
    clip_grads_with_norm(torch, ours, 1.0, total, foreach=foreach)
    torch.nn.utils.clip_grads_with_norm_(theirs, 1.0, total, foreach=foreach)
    for a, b in zip(ours, theirs, strict=True):
        assert a.grad.dtype == b.grad.dtype
        assert torch.equal(a.grad, b.grad), a.grad.dtype


def test_huge_finite_gradients_do_not_read_as_infinite() -> None:
    # 1e25 squared overflows float32 (max ~3.4e38): a float32 norm would be inf.
    params = _params(((1000,), torch.float32), ((10,), torch.float32))
    params[0].grad = torch.full((1000,), 1e25)
    params[1].grad = torch.full((10,), -3e24)
    got = GradNorm(torch, params)()
    assert math.isfinite(got)
    assert got == pytest.approx(_oracle([p.grad for p in params]), rel=1e-6)
    assert torch.linalg.vector_norm(params[0].grad).item() == math.inf  # what it avoids


@pytest.mark.parametrize(("bad", "want"), [(math.nan, "nan"), (math.inf, "inf"),
                                           (-math.inf, "inf")])
def test_a_nonfinite_gradient_gives_the_value_one_norm_would(bad: float, want: str) -> None:
    params = _params(((4,), torch.float32), ((3,), torch.float32), ((2,), torch.float32))
    for p in params:
        p.grad = torch.ones(p.shape)
    params[1].grad[0] = bad
    params[2].grad[1] = math.inf if bad != bad else 1.0  # NaN with an inf elsewhere: NaN
    got = GradNorm(torch, params)()
    oracle = float(torch.linalg.vector_norm(torch.cat([p.grad for p in params]).double()))
    assert math.isnan(got) if want == "nan" else got == math.inf
    assert math.isnan(oracle) if want == "nan" else oracle == math.inf


def test_parameters_without_a_gradient_are_left_out() -> None:
    params = _params(((6,), torch.float32), ((4,), torch.bfloat16), ((3,), torch.float32))
    norm = GradNorm(torch, params)
    assert norm() is None  # nothing has a gradient yet
    params[2].grad = torch.randn(3)
    assert norm() == pytest.approx(_oracle([params[2].grad]), rel=1e-6)
    params[1].grad = torch.randn(4).to(torch.bfloat16)
    assert norm() == pytest.approx(_oracle([params[1].grad, params[2].grad]), rel=1e-6)


def test_sparse_gradients_are_left_out_as_before() -> None:
    emb = torch.nn.Embedding(20, 4, sparse=True)
    lin = torch.nn.Linear(4, 2)
    params = [*emb.parameters(), *lin.parameters()]
    norm = GradNorm(torch, params)
    for _ in range(2):  # the second call takes the remembered dense-only path
        for p in params:
            p.grad = None
        lin(emb(torch.tensor([1, 5, 5]))).sum().backward()
        assert emb.weight.grad is not None and emb.weight.grad.is_sparse
        assert norm() == pytest.approx(_oracle([p.grad for p in lin.parameters()]), rel=1e-6)


def test_of_aligned_norms_parameters_and_their_updates() -> None:
    params = _params(((50, 3), torch.float32), ((3,), torch.float32))
    norm = GradNorm(torch, params)
    with torch.no_grad():
        assert norm.of_aligned(params) == pytest.approx(_oracle(params), rel=1e-6)
        before = [p.clone() for p in params]
        for p in params:
            p.mul_(1.01)
        delta = torch._foreach_sub(params, before)
        assert norm.of_aligned(delta) == pytest.approx(0.01 * _oracle(before), rel=1e-4)


def test_joined_vector_gradients_with_some_missing_or_strided() -> None:
    # One dtype on CPU: the 1-D gradients are reduced as one joined tensor.
    params = _params(((5, 4), torch.float32), ((4,), torch.float32), ((6,), torch.float32),
                     ((3,), torch.float32))
    norm = GradNorm(torch, params)
    assert len(norm._vectors) == 3
    params[0].grad = torch.randn(5, 4)
    assert norm() == pytest.approx(_oracle([params[0].grad]), rel=1e-6)
    params[2].grad = torch.randn(12)[::2]  # a strided view, as an expand or slice gives
    assert norm() == pytest.approx(_oracle([params[0].grad, params[2].grad]), rel=1e-6)
    params[1].grad = torch.randn(4)
    params[3].grad = torch.randn(3)
    assert norm() == pytest.approx(_oracle([p.grad for p in params]), rel=1e-6)
