"""The NaN guard names the module where a NaN/inf first appeared - in the forward, the
backward, the loss, the parameters or the batch - and leaves the model exactly as it found it."""

from __future__ import annotations

import json
import math
import pathlib
from collections import OrderedDict
from collections.abc import Callable

import pytest

from trainmedic.diagnose.engine import diagnose
from trainmedic.live.nan_guard import (
    Localization,
    NonFiniteError,
    capture_rng_state,
    localize_nonfinite,
)
from trainmedic.run.store import RunStore, read_store

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


@pytest.fixture(autouse=True)
def _small_and_seeded() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)


# --------------------------------------------------------------------------- planted faults
class Bomb(nn.Module):
    """Identity, until armed for a batch: then its output is x * inf."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * math.inf if self.armed else x


class HandNorm(nn.Module):
    """A hand-rolled normalization with the eps outside the sqrt: the forward is finite on a
    constant row (std 0), the backward of sqrt at 0 is inf * 0 = NaN."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mu = x.mean(-1, keepdim=True)
        std = torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True))
        return (x - mu) / (std + 1e-5)


class SqrtGate(nn.Module):
    """Gates its input by sqrt(g): a gate at exactly 0 is a finite forward and an inf
    gradient for g (the input's gradient stays finite)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.g = nn.Parameter(torch.ones(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sqrt(self.g)


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.bomb = Bomb()
        self.act = nn.ReLU(inplace=True)  # in place on a hooked module's output: must work
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.out(self.act(self.bomb(self.lin(x))))
        h += x  # in place on the residual as well
        return h


class Net(nn.Module):
    def __init__(self, d: int = 8, n_blocks: int = 3) -> None:
        super().__init__()
        self.inp = nn.Linear(4, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(n_blocks))
        self.head = nn.Linear(d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        return self.head(h)


def step_and_skip(model: nn.Module, closure: Callable[[], torch.Tensor]) -> torch.Tensor:
    """One training step as the watcher sees it under the skip policy: forward, backward, a
    non-finite global grad norm or loss, every .grad set to None so nothing is updated."""
    loss = closure()
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    assert not (torch.isfinite(norm) and torch.isfinite(loss)), "the planted fault did not fire"
    for p in model.parameters():
        p.grad = None
    return loss.detach()


def train(model: nn.Module, closure: Callable[[], torch.Tensor], steps: int = 3) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        closure().backward()
        opt.step()
    opt.zero_grad(set_to_none=True)


def no_hooks_left(model: nn.Module) -> bool:
    for m in model.modules():
        if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks:
            return False
    return all(not p._backward_hooks for p in model.parameters())


# --------------------------------------------------------------------------- forward
def test_forward_inf_is_blamed_on_the_module_that_made_it_not_on_those_passing_it_on() -> None:
    model = Net()
    x, y = torch.randn(16, 4), torch.randn(16, 1)

    def closure() -> torch.Tensor:
        return F.mse_loss(model(x), y)

    train(model, closure)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.blocks[1].bomb.armed = True  # type: ignore[union-attr]
    step_and_skip(model, closure)
    loc = localize_nonfinite(model, closure, step=7)
    assert (loc.module, loc.where, loc.step) == ("blocks.1.bomb", "forward", 7), loc.detail
    assert loc.output_absmax == math.inf
    assert loc.input_absmax is not None and 0 < loc.input_absmax < 1e3
    assert "blocks.1.bomb" in loc.detail and "inf" in loc.detail
    assert loc.param_nonfinite == []
    # Nothing changed: parameters, grads, hooks.
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(p.grad is None for p in model.parameters())
    assert no_hooks_left(model)


def test_a_nan_from_a_containers_own_code_names_the_container_and_its_first_victim() -> None:
    class Mixer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pre = nn.Linear(8, 8)
            self.post = nn.Linear(8, 8)
            self.armed = False

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.pre(x)
            if self.armed:
                h = h / torch.zeros_like(h)  # functional code between submodules
            return self.post(h)

    model = nn.Sequential(OrderedDict(inp=nn.Linear(4, 8), mix=Mixer(), head=nn.Linear(8, 1)))
    x = torch.randn(8, 4)
    model.mix.armed = True  # type: ignore[union-attr]
    loc = localize_nonfinite(model, lambda: model(x).pow(2).mean(), step=1)
    assert (loc.module, loc.where) == ("mix", "forward"), loc.detail
    assert "`mix.post` was the first to receive it" in loc.detail


# --------------------------------------------------------------------------- loss
def test_log_of_a_zero_probability_in_the_loss_is_the_loss_not_a_module() -> None:
    model = nn.Sequential(OrderedDict(body=nn.Linear(4, 16), act=nn.Tanh(),
                                      head=nn.Linear(16, 3)))
    x = torch.randn(32, 4)
    y = torch.randint(0, 3, (32,))

    def closure() -> torch.Tensor:  # the classic bug: log(softmax) instead of log_softmax
        p = torch.softmax(model(x), dim=-1)
        return -torch.log(p.gather(1, y[:, None])).mean()

    train(model, closure)
    with torch.no_grad():
        model.head.weight.mul_(400.0)  # type: ignore[operator]  # confident: probs underflow
    step_and_skip(model, closure)
    loc = localize_nonfinite(model, closure, step=3)
    assert (loc.module, loc.where) == (None, "loss"), loc.detail
    assert loc.input_absmax is not None and math.isfinite(loc.input_absmax)
    assert "the loss" in loc.detail


# --------------------------------------------------------------------------- backward
def test_sqrt_at_zero_is_found_in_the_backward_although_the_forward_is_finite() -> None:
    model = nn.Sequential(OrderedDict(embed=nn.Linear(4, 8), norm=HandNorm(),
                                      act=nn.ReLU(inplace=True), head=nn.Linear(8, 1)))
    nn.init.zeros_(model.embed.bias)  # type: ignore[arg-type]
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    x[3] = 0.0  # a padding row: embed gives a constant row, std 0

    def closure() -> torch.Tensor:
        return F.mse_loss(model(x), y)

    loss = step_and_skip(model, closure)
    assert torch.isfinite(loss)  # the forward really was finite
    loc = localize_nonfinite(model, closure, step=11)
    assert (loc.module, loc.where) == ("norm", "backward"), loc.detail
    assert "non-finite gradient for its input" in loc.detail
    assert loc.output_absmax is not None and math.isfinite(loc.output_absmax)


def test_a_branch_sharing_its_input_with_the_culprit_is_not_blamed() -> None:
    class TwoBranches(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(4, 8)
            self.skip = nn.Linear(8, 8)  # runs first and reads the same tensor as `norm`
            self.norm = HandNorm()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.embed(x)
            return self.skip(h) + self.norm(h)

    model = nn.Sequential(OrderedDict(body=TwoBranches(), head=nn.Linear(8, 1)))
    nn.init.zeros_(model.body.embed.bias)  # type: ignore[union-attr,arg-type]
    x = torch.randn(16, 4)
    x[0] = 0.0
    loc = localize_nonfinite(model, lambda: model(x).pow(2).mean(), step=1)
    # The gradient of `h` sums both branches; only `norm`'s own share is non-finite.
    assert (loc.module, loc.where) == ("body.norm", "backward"), loc.detail


def test_a_non_finite_parameter_gradient_names_the_module_that_owns_it() -> None:
    model = nn.Sequential(OrderedDict(body=nn.Linear(4, 6), gate=SqrtGate(6),
                                      head=nn.Linear(6, 1)))
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with torch.no_grad():
        model.gate.g[2] = 0.0  # type: ignore[index]

    def closure() -> torch.Tensor:
        return F.mse_loss(model(x), y)

    step_and_skip(model, closure)
    loc = localize_nonfinite(model, closure, step=2)
    assert (loc.module, loc.where) == ("gate", "backward"), loc.detail
    assert "parameter gate.g" in loc.detail


def test_a_nan_only_in_the_gradient_of_the_loss_is_the_loss() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    x = torch.randn(8, 4)

    def closure() -> torch.Tensor:  # distance to itself: sqrt(0) in the loss's backward
        out = model(x)
        return torch.sqrt(((out - out.detach()) ** 2).sum())

    loc = localize_nonfinite(model, closure, step=4)
    assert (loc.module, loc.where) == (None, "loss"), loc.detail
    assert "gradient" in loc.detail


# --------------------------------------------------------------------------- state and data
def test_a_parameter_already_nan_is_reported_as_corrupted_state_without_replay() -> None:
    model = Net()
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    calls = []

    def closure() -> torch.Tensor:
        calls.append(1)
        return F.mse_loss(model(x), y)

    with torch.no_grad():
        model.blocks[2].out.weight[1, 3] = math.nan  # type: ignore[index]
        model.head.bias.fill_(math.inf)
    loc = localize_nonfinite(model, closure, step=9)
    assert (loc.module, loc.where) == ("blocks.2.out", "input"), loc.detail
    assert loc.param_nonfinite == ["blocks.2.out.weight", "head.bias"]
    assert loc.param_absmax is not None and math.isfinite(loc.param_absmax)
    assert calls == []  # nothing replayed: the state, not the step, is broken
    assert "earlier update" in loc.detail


def test_a_nan_in_the_batch_is_the_input() -> None:
    model = Net()
    x = torch.randn(16, 4)
    x[5, 2] = math.nan
    loc = localize_nonfinite(model, lambda: model(x).mean(), step=1)
    assert (loc.module, loc.where) == ("", "input"), loc.detail
    assert "batch" in loc.detail


# --------------------------------------------------------------------------- replay fidelity
class Coin(nn.Module):
    """Fires (x * inf) when its own random draw is below 0.3: only an exact RNG replay
    reproduces a given step."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * math.inf if bool(torch.rand(()) < 0.3) else x


def coin_model() -> nn.Module:
    model = nn.Sequential(OrderedDict(
        body=nn.Linear(4, 8), bn=nn.BatchNorm1d(8), drop=nn.Dropout(0.5), coin=Coin(),
        frozen_bn=nn.BatchNorm1d(8), head=nn.Linear(8, 1)))
    model.frozen_bn.eval()  # a submodule in eval mode inside a training model stays so
    return model


def _seed_where_only_the_first_draw_fires(x: torch.Tensor) -> int:
    for seed in range(200):
        model = coin_model()
        torch.manual_seed(seed)
        fired = [not bool(torch.isfinite(model(x)).all()) for _ in range(2)]
        if fired == [True, False]:
            return seed
    raise AssertionError("no seed found")


def test_replay_uses_the_steps_rng_and_restores_buffers_rng_grads_and_modes_bitwise() -> None:
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    seed = _seed_where_only_the_first_draw_fires(x)
    model = coin_model()
    torch.manual_seed(seed)
    rng = capture_rng_state("cpu")

    def closure() -> torch.Tensor:
        return F.mse_loss(model(x), y)

    step_and_skip(model, closure)
    sentinel = torch.full_like(model.head.weight, 0.25)  # type: ignore[arg-type]
    model.head.weight.grad = sentinel  # type: ignore[union-attr]
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    rng_after_step = torch.get_rng_state()
    modes = {n: m.training for n, m in model.named_modules()}

    seen_in_replay: list[int] = []
    spy = model.bn.register_forward_hook(  # type: ignore[union-attr]
        lambda m, a, out: seen_in_replay.append(int(m.num_batches_tracked)))
    loc = localize_nonfinite(model, closure, step=5, rng_state=rng)
    spy.remove()
    assert (loc.module, loc.where) == ("coin", "forward"), loc.detail
    assert seen_in_replay == [2]  # the replay's BatchNorm did count a batch ...

    for k, v in model.named_buffers():
        assert v.dtype == buffers[k].dtype and torch.equal(v, buffers[k]), k
    assert torch.equal(torch.get_rng_state(), rng_after_step)
    assert {n: m.training for n, m in model.named_modules()} == modes
    assert model.head.weight.grad is sentinel and bool((sentinel == 0.25).all())
    assert all(p.grad is None for n, p in model.named_parameters() if n != "head.weight")
    assert no_hooks_left(model)
    assert int(model.bn.num_batches_tracked) == 1  # type: ignore[union-attr]  # ... undone

    # From the RNG state after the step (no captured state), the coin does not fire again.
    again = localize_nonfinite(model, closure, step=5)
    assert again.where == "not_reproduced", again.detail
    assert torch.equal(torch.get_rng_state(), rng_after_step)  # its draws were undone too


def test_a_healthy_batch_is_not_reproduced_and_the_model_is_untouched() -> None:
    model = Net()
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    loc = localize_nonfinite(model, lambda: F.mse_loss(model(x), y), step=3)
    assert (loc.module, loc.where) == (None, "not_reproduced")
    assert "finite loss" in loc.detail
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(p.grad is None for p in model.parameters())
    assert no_hooks_left(model)


def test_a_replay_that_fails_is_reported_and_everything_is_restored() -> None:
    model = Net()
    x = torch.randn(16, 4)
    rng_before = torch.get_rng_state()

    def broken() -> torch.Tensor:
        model(x)
        raise RuntimeError("the closure broke")

    loc = localize_nonfinite(model, broken, step=2, rng_state=capture_rng_state())
    assert loc.where == "not_reproduced" and loc.module is None
    assert "RuntimeError: the closure broke" in loc.detail
    assert torch.equal(torch.get_rng_state(), rng_before)
    assert no_hooks_left(model)
    not_a_tensor = localize_nonfinite(model, lambda: 1.0, step=2)  # type: ignore[arg-type,return-value]
    assert not_a_tensor.where == "not_reproduced" and "float" in not_a_tensor.detail


def test_loss_scale_makes_an_overflowing_backward_reproduce() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    x = 1e3 * torch.randn(8, 4)  # the second layer's weight gradient: 8 x 3e38 x ~1e3

    def closure() -> torch.Tensor:
        return model(x).sum()

    big = localize_nonfinite(model, closure, step=1, loss_scale=3e38)
    assert (big.module, big.where) == ("1", "backward"), big.detail
    assert "non-finite gradient for its parameter 1." in big.detail
    assert localize_nonfinite(model, closure, step=1).where == "not_reproduced"


# --------------------------------------------------------------------------- the demo model
def _demo() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    from trainmedic.demo.model import CharTransformer

    model = CharTransformer(40, context_len=16, d_model=32, n_layers=2, n_heads=4)
    idx = torch.randint(0, 40, (4, 16))
    return model, idx[:, :-1], idx[:, 1:]


@pytest.mark.parametrize("name", ["blocks.1.mlp.2", "blocks.0.qkv", "ln_f"])
def test_charformer_nan_injected_into_a_named_inner_module_is_found(name: str) -> None:
    model, x, y = _demo()

    def closure() -> torch.Tensor:
        return F.cross_entropy(model(x).flatten(0, 1), y.flatten())

    armed = [True]
    hook = model.get_submodule(name).register_forward_hook(
        lambda m, a, out: out * math.nan if armed[0] else out)
    try:
        step_and_skip(model, closure)
        loc = localize_nonfinite(model, closure, step=40)
    finally:
        hook.remove()
    assert (loc.module, loc.where) == (name, "forward"), loc.detail


def test_charformer_attention_logit_overflow_is_the_blocks_own_code() -> None:
    model, x, y = _demo()
    with torch.no_grad():  # q.k beyond fp32's range: qkv's output is finite, the softmax not
        model.blocks[1].qkv.weight.mul_(1e20)  # type: ignore[index,union-attr,operator]
    loc = localize_nonfinite(
        model, lambda: F.cross_entropy(model(x).flatten(0, 1), y.flatten()), step=12)
    assert (loc.module, loc.where) == ("blocks.1", "forward"), loc.detail
    assert "`blocks.1.proj` was the first to receive it" in loc.detail
    assert "became NaN" in loc.detail


# --------------------------------------------------------------------------- records
def test_localization_is_json_and_the_error_carries_it() -> None:
    loc = Localization("blocks.1", "forward", 12, "output of `blocks.1` became inf",
                       input_absmax=2.0, output_absmax=math.inf, param_absmax=math.nan)
    d = json.loads(json.dumps(loc.as_dict(), allow_nan=False))
    assert d["output_absmax"] == "inf" and d["param_absmax"] == "nan"
    assert d["module"] == "blocks.1" and d["where"] == "forward" and d["step"] == 12
    err = NonFiniteError(f"step 12: non-finite loss; {loc.detail}", localization=loc)
    assert err.localization is loc and "blocks.1" in str(err)
    assert NonFiniteError("step 3: non-finite loss").localization is None


def test_a_recorded_localization_names_the_module_in_the_diagnosis(
        tmp_path: pathlib.Path) -> None:
    model = Net()
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    model.blocks[0].bomb.armed = True  # type: ignore[union-attr]
    loc = localize_nonfinite(model, lambda: F.mse_loss(model(x), y), step=30)
    with RunStore(tmp_path) as store:
        for s in range(40):
            store.log(s, {"loss": math.nan if s == 30 else 1.0 / (1 + s)})
        store.event(30, "nonfinite", loc.as_dict())
    run = read_store(tmp_path / "metrics.sqlite")
    f = next(f for f in diagnose(run).findings if f.symptom == "nonfinite_loss")
    assert f.onset_step == 30
    assert "`blocks.0.bomb` (forward)" in f.summary, f.summary
    ev = f.evidence[1]
    assert ev.metric == "layer/blocks.0.bomb/output_absmax" and ev.value == math.inf
    assert ev.basis == "measured" and ev.step == 30


# --------------------------------------------------------------------------- on a GPU
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@cuda
def test_cuda_rng_capture_does_not_sync_and_the_replay_restores_the_cuda_rng() -> None:
    dev = torch.device("cuda")
    x, y = torch.randn(64, 4, device=dev), torch.randn(64, 1, device=dev)
    seed = next(s for s in range(200) if _cuda_coin_fires(s, x) == [True, False])
    model = coin_model().to(dev)
    torch.manual_seed(seed)
    torch.cuda.set_sync_debug_mode("error")
    try:
        rng = capture_rng_state(dev)  # once per step in the watcher: must not sync
    finally:
        torch.cuda.set_sync_debug_mode("default")

    def closure() -> torch.Tensor:
        return F.mse_loss(model(x), y)

    step_and_skip(model, closure)
    cuda_after, buffers = torch.cuda.get_rng_state(dev), {
        k: v.clone() for k, v in model.named_buffers()}
    loc = localize_nonfinite(model, closure, step=3, rng_state=rng)
    assert (loc.module, loc.where) == ("coin", "forward"), loc.detail
    assert torch.equal(torch.cuda.get_rng_state(dev), cuda_after)
    for k, v in model.named_buffers():
        assert torch.equal(v, buffers[k]), k
    assert localize_nonfinite(model, closure, step=3).where == "not_reproduced"


def _cuda_coin_fires(seed: int, x: torch.Tensor) -> list[bool]:
    model = coin_model().to(x.device)
    torch.manual_seed(seed)
    return [not bool(torch.isfinite(model(x)).all()) for _ in range(2)]


@pytest.mark.gpu
@cuda
def test_fp16_attention_overflow_under_autocast_is_localized_with_its_dtype() -> None:
    model, x, y = _demo()
    model = model.cuda()
    x, y = x.cuda(), y.cuda()
    with torch.no_grad():  # qkv's output beyond fp16's 65504 (fine in fp32)
        model.blocks[0].qkv.weight.mul_(1e6)  # type: ignore[index,union-attr,operator]

    def closure() -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.float16):
            return F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())

    loc = localize_nonfinite(model, closure, step=8, rng_state=capture_rng_state("cuda"))
    assert (loc.module, loc.where) == ("blocks.0.qkv", "forward"), loc.detail
    assert loc.dtype == "torch.float16" and loc.output_absmax == math.inf
    assert loc.input_absmax is not None and loc.input_absmax < 100
