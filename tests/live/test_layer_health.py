"""LayerHealth: per-module stats on armed steps, checked against direct torch computations;
hooks only while armed, outputs and gradients unchanged, no activation kept, the stat-name
contract, module order, the module cap and bad arguments."""

from __future__ import annotations

import gc
import logging
import math
import weakref
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from trainmedic.errors import ConfigError  # noqa: E402
from trainmedic.live.layer_health import (  # noqa: E402
    MIN_DEAD_SAMPLES,
    ROOT_NAME,
    STATS,
    LayerHealth,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Dropout(0.0), nn.Linear(16, 1), nn.Sigmoid())


def _step(lh: LayerHealth, model: nn.Module, x: Any) -> dict[str, float]:
    """One armed step driven by hand, as the watcher drives it; values read as floats."""
    lh.arm()
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()
    lh.on_grads()
    return {k: v.item() for k, v in lh.collect().items()}


def _outputs(model: nn.Module, x: Any) -> dict[int, Any]:
    """Every submodule's output by id, from a plain (unwatched) forward."""
    seen: dict[int, Any] = {}
    hs = [m.register_forward_hook(lambda m, i, o: seen.__setitem__(id(m), o.detach()))
          for m in model.modules()]
    with torch.no_grad():
        model(x)
    for h in hs:
        h.remove()
    return seen


def test_stats_match_direct_computation() -> None:
    model = _mlp()
    with torch.no_grad():
        model[0].bias[:6] = -50.0  # 6 of 16 units dead on every input
        model[2].weight.mul_(20.0)  # drives the tanh into saturation
    x = torch.randn(64, 8)
    ref = _outputs(model, x)
    lh = LayerHealth(model, every=1)
    got = _step(lh, model, x)
    for name in ("0", "1", "2", "3", "5", "6"):
        out = ref[id(model.get_submodule(name))]
        assert got[f"layer/{name}/act_mean"] == pytest.approx(out.mean().item(), abs=1e-5)
        assert got[f"layer/{name}/act_std"] == pytest.approx(
            out.std(unbiased=False).item(), rel=1e-4, abs=1e-6)
        assert got[f"layer/{name}/act_absmax"] == pytest.approx(out.abs().max().item())
        assert got[f"layer/{name}/absmax_frac_of_dtype_max"] == pytest.approx(
            out.abs().max().item() / torch.finfo(torch.float32).max)
    for name in ("0", "2", "5"):
        lin = model.get_submodule(name)
        w = torch.cat([lin.weight.reshape(-1), lin.bias.reshape(-1)])
        g = torch.cat([lin.weight.grad.reshape(-1), lin.bias.grad.reshape(-1)])
        assert got[f"layer/{name}/weight_norm"] == pytest.approx(w.norm().item(), rel=1e-5)
        assert got[f"layer/{name}/grad_norm"] == pytest.approx(g.norm().item(), rel=1e-5)
    relu = ref[id(model[1])]
    assert got["layer/1/dead_frac"] == pytest.approx((relu.amax(0) <= 0).float().mean().item())
    assert got["layer/1/dead_frac"] >= 6 / 16
    tanh = ref[id(model[3])]
    sat = (tanh.abs() > 0.99).float().mean().item()
    assert got["layer/3/saturated_frac"] == pytest.approx(sat) and sat > 0.3
    sig = ref[id(model[6])]
    assert got["layer/6/saturated_frac"] == pytest.approx(
        ((sig < 0.01) | (sig > 0.99)).float().mean().item())
    # The contract: only the documented stats, only where they apply.
    assert {k.rsplit("/", 1)[1] for k in got} <= set(STATS)
    assert "layer/4/act_mean" not in got  # Dropout: a pass-through
    assert not any(k.startswith("layer/1/") and k.endswith("grad_norm") for k in got)
    assert not any(k.startswith(("layer/0/", "layer/2/")) and "frac" in k
                   and "dtype" not in k for k in got)


def test_values_are_0d_tensors_on_the_parameters_device_and_need_no_grad() -> None:
    model = _mlp()
    lh = LayerHealth(model, every=1)
    lh.arm()
    model(torch.randn(32, 8)).sum().backward()
    lh.on_grads()
    stats = lh.collect()
    assert stats
    for v in stats.values():
        assert isinstance(v, torch.Tensor) and v.dim() == 0
        assert v.device == model[0].weight.device and not v.requires_grad
        assert v.dtype in (torch.float32, torch.float64)  # norms accumulate in float64


def test_mean_and_std_stay_exact_when_the_mean_dwarfs_the_spread() -> None:
    """A float32 sum-of-squares variance is ~40% off at |mean| = 1000 std; two passes are not."""

    class Offset(nn.Module):
        def forward(self, x: Any) -> Any:
            return x * 0.01 + 10.0

    x = torch.randn(64, 256, 16)
    model = Offset()
    lh = LayerHealth(model, every=1)
    lh.arm()
    out = model(x)
    got = {k: v.item() for k, v in lh.collect().items()}
    ref = out.double()
    assert got[f"layer/{ROOT_NAME}/act_std"] == pytest.approx(
        ref.std(unbiased=False).item(), rel=1e-4)
    assert got[f"layer/{ROOT_NAME}/act_mean"] == pytest.approx(ref.mean().item(), rel=1e-6)


def test_large_activations_are_measured_in_chunks() -> None:
    """Above the scratch size (2^18 elements) the deviations are taken piece by piece."""
    model = nn.Sequential(nn.Linear(4, 3000), nn.Tanh())
    x = torch.randn(200, 4) * 3
    ref = _outputs(model, x)
    got = _step(LayerHealth(model, every=1), model, x)
    for name in ("0", "1"):
        out = ref[id(model.get_submodule(name))]
        assert out.numel() > 2 ** 18
        assert got[f"layer/{name}/act_std"] == pytest.approx(
            out.std(unbiased=False).item(), rel=1e-4)
    t = ref[id(model[1])]
    # Within one element: the threshold is rounded to the output's dtype by the
    # implementation (see the module docstring), so an element at 0.99 itself may differ.
    assert got["layer/1/saturated_frac"] == pytest.approx(
        (t.abs() > 0.99).double().mean().item(), abs=1.5 / t.numel())


def test_outputs_and_gradients_unchanged_and_hooks_gone_after_collect() -> None:
    x = torch.randn(16, 8)
    plain = _mlp()
    plain(x).sum().backward()
    watched = _mlp()
    lh = LayerHealth(watched, every=1)
    lh.arm()
    assert lh.armed and all(len(m._forward_hooks) == 1 for m in lh._modules)
    out = watched(x)
    out.sum().backward()
    lh.on_grads()
    assert torch.equal(out, plain(x))
    for p, q in zip(plain.parameters(), watched.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)
    lh.collect()
    assert not lh.armed
    assert all(not m._forward_hooks for m in watched.modules())
    assert lh.collect() == {}  # reset: nothing left over
    lh.arm()
    lh.disarm()
    lh.disarm()  # idempotent
    assert all(not m._forward_hooks for m in watched.modules())


def test_no_reference_to_an_activation_is_kept() -> None:
    made: list[weakref.ref[Any]] = []

    class Probe(nn.Module):
        def forward(self, x: Any) -> Any:
            y = torch.relu(x * 2.0)
            made.append(weakref.ref(y))
            return y

    model = nn.Sequential(nn.Linear(8, 32), Probe(), nn.ReLU(), nn.Linear(32, 1))
    lh = LayerHealth(model, every=1)
    lh.arm()
    model(torch.randn(64, 8)).sum().backward()
    gc.collect()
    assert made and made[0]() is None  # freed while still armed: the hooks kept no reference
    lh.on_grads()
    assert lh.collect()


def test_evaluation_forwards_under_no_grad_are_not_measured() -> None:
    model = _mlp()
    lh = LayerHealth(model, every=1)
    lh.arm()
    with torch.no_grad():
        model(torch.randn(32, 8))
    assert lh.collect() == {}


def test_a_module_called_twice_is_measured_over_both_calls() -> None:
    lin = nn.Linear(8, 8)
    model = nn.Sequential(lin, nn.ReLU())

    a, b = torch.randn(40, 8), torch.randn(24, 8) * 5 + 3
    lh = LayerHealth(model, every=1)
    lh.arm()
    out = torch.cat([lin(a), lin(b)])
    got = {k: v.item() for k, v in lh.collect().items()}
    assert got["layer/0/act_mean"] == pytest.approx(out.mean().item(), rel=1e-5)
    assert got["layer/0/act_std"] == pytest.approx(out.std(unbiased=False).item(), rel=1e-4)
    assert got["layer/0/act_absmax"] == pytest.approx(out.abs().max().item())


def test_dead_units_are_channels_for_conv_and_features_for_sequences() -> None:
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 8, 3, padding=1)
    with torch.no_grad():
        conv.bias[:2] = -1e3  # channels 0 and 1 dead on every pixel of every image
    model = nn.Sequential(conv, nn.ReLU())
    got = _step(LayerHealth(model, every=1), model, torch.randn(4, 3, 8, 8))
    assert got["layer/1/dead_frac"] == pytest.approx(2 / 8)

    conv1 = nn.Conv1d(3, 10, 3, padding=1)  # (N, C, L): channels on dim 1
    with torch.no_grad():
        conv1.bias[:5] = -1e3
    model = nn.Sequential(conv1, nn.ReLU())
    got = _step(LayerHealth(model, every=1), model, torch.randn(4, 3, 16))
    assert got["layer/1/dead_frac"] == pytest.approx(0.5)

    lin = nn.Linear(6, 10)  # (batch, time, features): features on the last dim
    with torch.no_grad():
        lin.bias[:3] = -1e3
    model = nn.Sequential(lin, nn.ReLU())
    got = _step(LayerHealth(model, every=1), model, torch.randn(2, 16, 6))
    assert got["layer/1/dead_frac"] == pytest.approx(0.3)


def test_dead_frac_needs_enough_values_per_unit() -> None:
    """With 4 samples a unit active on half the inputs looks dead 1 time in 16: not recorded."""
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
    got = _step(LayerHealth(model, every=1), model, torch.randn(MIN_DEAD_SAMPLES // 4, 8))
    assert "layer/1/dead_frac" not in got and "layer/1/act_mean" in got
    got = _step(LayerHealth(model, every=1), model, torch.randn(MIN_DEAD_SAMPLES, 8))
    assert "layer/1/dead_frac" in got


def test_fp16_output_headroom() -> None:
    class ToHalf(nn.Module):
        def forward(self, x: Any) -> Any:
            return (x * 1000.0).half()

    model = nn.Sequential(nn.Linear(4, 4), ToHalf())
    x = torch.randn(8, 4)
    ref = _outputs(model, x)[id(model[1])]
    got = _step(LayerHealth(model, every=1), model, x)
    absmax = ref.abs().max().float().item()
    assert got["layer/1/act_absmax"] == pytest.approx(absmax)
    assert got["layer/1/absmax_frac_of_dtype_max"] == pytest.approx(absmax / 65504.0)
    assert got["layer/1/absmax_frac_of_dtype_max"] > 1e-3


def test_containers_are_not_hooked_root_with_params_is_and_tied_params_count_once() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(()))
            self.emb = nn.Embedding(10, 4)
            self.body = nn.Sequential(nn.Linear(4, 4), nn.GELU())
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight  # tied, as in GPT-2

        def forward(self, idx: Any) -> Any:
            return self.head(self.body(self.emb(idx)) * self.scale)

    model = Tied()
    lh = LayerHealth(model, every=1)
    assert lh.module_order == [ROOT_NAME, "emb", "body.0", "body.1", "head"]
    got = _step(lh, model, torch.randint(0, 10, (4, 8)))
    assert f"layer/{ROOT_NAME}/grad_norm" in got  # the root's own parameter
    assert "layer/body/act_mean" not in got  # a container
    assert "layer/emb/grad_norm" in got and "layer/head/grad_norm" not in got
    assert "layer/head/act_mean" in got
    assert "layer/body.1/dead_frac" not in got  # GELU is not ReLU-family
    # Forward order, not registration order: the root's hook fires last.
    assert lh.module_order == ["emb", "body.0", "body.1", "head", ROOT_NAME]


def test_module_order_is_forward_order_and_pop_meta_reports_changes() -> None:
    class Reversed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.late = nn.Linear(4, 2)
            self.early = nn.Linear(3, 4)

        def forward(self, x: Any) -> Any:
            return self.late(torch.relu(self.early(x)))

    model = Reversed()
    lh = LayerHealth(model, every=3)
    assert lh.module_order == ["late", "early"]  # before any forward: registration order
    first = lh.pop_meta()
    assert first is not None and first["layer_order"] == ["late", "early"]
    assert lh.pop_meta() is None
    stats = _step(lh, model, torch.randn(5, 3))
    assert list(stats)[0].startswith("layer/early/")  # collected in forward order
    meta = lh.pop_meta()
    assert meta == {"layer_order": ["early", "late"],
                    "layer_types": {"early": "Linear", "late": "Linear"}, "layer_every": 3}
    _step(lh, model, torch.randn(5, 3))
    assert lh.pop_meta() is None  # unchanged


def test_schedule() -> None:
    lh = LayerHealth(_mlp(), every=50)
    assert [s for s in range(151) if lh.scheduled(s)] == [0, 50, 100, 150]


def test_unused_module_gets_no_grad_norm() -> None:
    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used = nn.Linear(4, 1)
            self.unused = nn.Linear(4, 1)

        def forward(self, x: Any) -> Any:
            return self.used(x)

    model = Branchy()
    got = _step(LayerHealth(model, every=1), model, torch.randn(3, 4))
    assert "layer/used/grad_norm" in got and "layer/unused/grad_norm" not in got
    assert "layer/unused/weight_norm" in got  # the weights are still there


def test_sparse_gradients_are_skipped() -> None:
    model = nn.Sequential(nn.Embedding(10, 4, sparse=True), nn.Linear(4, 1))
    got = _step(LayerHealth(model, every=1), model, torch.randint(0, 10, (3, 5)))
    assert "layer/0/grad_norm" not in got and "layer/0/weight_norm" in got
    assert "layer/1/grad_norm" in got


def test_cap_keeps_first_and_last_parametrized_layers_and_logs_once(
        caplog: pytest.LogCaptureFixture) -> None:
    layers: list[nn.Module] = []
    for _ in range(30):
        layers += [nn.Linear(4, 4), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(4, 1), nn.Sigmoid())
    with caplog.at_level(logging.INFO, logger="trainmedic.live.layer_health"):
        lh = LayerHealth(model, every=1, max_modules=10)
    order = lh.module_order
    assert len(order) == 10 and "0" in order and "60" in order
    assert len(set(order)) == 10
    assert sum("watches 10 of the model's 62 modules" in r.getMessage()
               for r in caplog.records) == 1
    got = _step(lh, model, torch.randn(16, 4))
    assert {k.split("/")[1] for k in got} <= set(order)


@pytest.mark.parametrize("kw", [{"every": 0}, {"every": -3}, {"every": 2.5}, {"every": True},
                                {"every": 5, "max_modules": 1}])
def test_bad_arguments_name_the_field(kw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as e:
        LayerHealth(_mlp(), **kw)
    assert ("max_modules" if "max_modules" in kw else "every") in str(e.value)


def test_not_a_module_is_refused() -> None:
    with pytest.raises(ConfigError, match="torch.nn.Module"):
        LayerHealth(object(), every=5)  # type: ignore[arg-type]


def test_gradient_accumulation_pools_micro_batches() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    lh = LayerHealth(model, every=1)
    xs = [torch.randn(20, 8) for _ in range(3)]
    lh.arm()
    for x in xs:
        model(x).sum().backward()
    lh.on_grads()
    got = {k: v.item() for k, v in lh.collect().items()}
    ref = torch.cat([model[0](x) for x in xs]).detach()
    assert got["layer/0/act_mean"] == pytest.approx(ref.mean().item(), rel=1e-5)
    assert got["layer/0/act_std"] == pytest.approx(ref.std(unbiased=False).item(), rel=1e-4)
    assert got["layer/0/grad_norm"] == pytest.approx(math.sqrt(
        model[0].weight.grad.square().sum().item() + model[0].bias.grad.square().sum().item()),
        rel=1e-5)


def test_end_to_end_through_watch(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``watch(..., layer_every=N)``: stats on every N-th step in the store, read back and
    diagnosed; a ReLU layer with most units born dead is named."""
    from trainmedic.diagnose import diagnose
    from trainmedic.live import watch
    from trainmedic.run.loader import load_paths

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    with torch.no_grad():
        model[0].bias[:24] = -30.0  # 24 of 32 units never fire
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with watch(model, opt, run_dir=tmp_path, layer_every=5) as w:
        for _ in range(40):
            x, y = torch.randn(64, 8), torch.randint(0, 4, (64,))
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            w.step(loss, batch_size=64)
    run = load_paths([str(tmp_path)])
    dead = run.get("layer/1/dead_frac")
    gn = run.get("layer/0/grad_norm")
    assert dead is not None and gn is not None
    assert list(dead.steps) == list(range(0, 40, 5)) and list(gn.steps) == list(range(0, 40, 5))
    assert min(dead.values) >= 24 / 32
    assert run.meta.get("layer_order", [None])[0] == "0"
    found = [f for f in diagnose(run).findings if f.symptom == "dead_units"]
    assert found and found[0].severity == "warning" and "'1'" in found[0].summary
