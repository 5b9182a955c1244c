"""Detectors on per-layer health: ``dead_units``, ``saturated_activations``, the per-layer rule
of ``vanishing_gradients`` and the per-layer evidence of ``exploding_gradients``.

Synthetic runs (varied levels, onsets, ranks, no-fire cases), then tiny models really trained
with ``LayerHealth`` driven by hand (arm / forward / backward / on_grads / collect), the
collected values written into a ``RunStore`` the way the watcher writes them, read back with
``load_paths`` and diagnosed: the fault is in the training, not a number typed into a log.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from trainmedic.diagnose import diagnose
from trainmedic.diagnose.detectors.layers import layer_modules, sustained_onset
from trainmedic.diagnose.finding import Finding
from trainmedic.diagnose.registry import NotRun, get_detector
from trainmedic.run.series import Run


def findings(symptom: str, run: Run) -> list[Finding]:
    res = get_detector(symptom).fn(run)
    assert isinstance(res, list), res
    return res


def not_run(symptom: str, run: Run) -> NotRun:
    res = get_detector(symptom).fn(run)
    assert isinstance(res, NotRun), res
    return res


def layer_run(stat: str, levels: dict[str, np.ndarray], *, every: int = 50,
              rank: int | None = None, run: Run | None = None,
              order: list[str] | None = None) -> Run:
    run = run if run is not None else Run("synthetic")
    for module, values in levels.items():
        steps = np.arange(len(values)) * every
        run.add(f"layer/{module}/{stat}", steps, values, rank=rank)
    if order is not None:
        run.meta["layer_order"] = order
    return run


def noisy(level: float | np.ndarray, n: int = 20, sd: float = 0.02, seed: int = 0,
          lo: float = 0.0, hi: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.broadcast_to(level, (n,)) + rng.normal(0, sd, n), lo, hi)


# ------------------------------------------------------------------------------ helpers
def test_module_order_from_meta_else_first_appearance() -> None:
    run = layer_run("dead_frac", {"b": noisy(0.0), "a": noisy(0.0), "c": noisy(0.0)})
    assert layer_modules(run, "dead_frac") == ["b", "a", "c"]
    run.meta["layer_order"] = ["c", "x", "a"]  # x: no such series; b: not in the order
    assert layer_modules(run, "dead_frac") == ["c", "a", "b"]
    run.meta["layer_order"] = "not a list"
    assert layer_modules(run, "dead_frac") == ["b", "a", "c"]


def test_sustained_onset() -> None:
    steps = np.arange(10) * 10
    v = np.array([0, 0, 0.9, 0, 0, 0.8, 0.9, 0.1, 0.9, 0.9])
    assert sustained_onset(steps, v, 0.5) == 50  # not the lone point at 20
    assert sustained_onset(steps, np.full(10, 0.9), 0.5) == 0
    tail = np.array([0, 0, 0, 0, 0, 0, 0, 0.9, 0.9, 0.1])  # the last point dips
    assert sustained_onset(steps, tail, 0.5) == 70


# ------------------------------------------------------------------------------ dead_units
@pytest.mark.parametrize("level,severity", [(1.0, "error"), (0.995, "error"),
                                            (0.7, "warning"), (0.52, "warning")])
def test_dead_units_levels(level: float, severity: str) -> None:
    run = layer_run("dead_frac", {"fc1.act": noisy(0.0, sd=0.005, seed=1),
                                  "fc2.act": np.concatenate([noisy(0.01, 8, 0.005),
                                                             noisy(level, 12, 0.003)])})
    (f,) = findings("dead_units", run)
    assert f.severity == severity
    assert f.onset_step == 8 * 50
    assert "fc2.act" in f.summary and "fc1.act" not in f.summary
    assert f.evidence[0].metric == "layer/fc2.act/dead_frac"
    assert f.evidence[0].value == pytest.approx(level, abs=0.01)
    assert f.evidence[0].basis == "measured"


def test_dead_units_rising_is_info_and_flat_moderate_is_nothing() -> None:
    rising = np.concatenate([noisy(0.05, 10, 0.01), noisy(0.35, 10, 0.01)])
    (f,) = findings("dead_units", layer_run("dead_frac", {"relu": rising}))
    assert f.severity == "info"
    flat = noisy(0.35, 20, 0.01)  # as many dead from the start and not rising: below warning
    assert findings("dead_units", layer_run("dead_frac", {"relu": flat})) == []


@pytest.mark.parametrize("level", [0.0, 0.05, 0.2, 0.45])
def test_dead_units_healthy_levels_do_not_fire(level: float) -> None:
    run = layer_run("dead_frac", {f"r{i}": noisy(level, 30, 0.03, seed=i) for i in range(4)})
    assert findings("dead_units", run) == []


def test_dead_units_one_bad_measurement_is_not_sustained() -> None:
    v = noisy(0.02, 20, 0.01)
    v[7] = 1.0
    v[-1] = 0.9  # the last point alone: the median of the last third stays low
    assert findings("dead_units", layer_run("dead_frac", {"relu": v})) == []


def test_dead_units_names_the_worst_layers_first_and_born_dead() -> None:
    run = layer_run("dead_frac", {f"block{i}.relu": noisy(lv, 12, 0.002, seed=i)
                                  for i, lv in enumerate([0.6, 0.0, 0.9, 0.55])})
    (f,) = findings("dead_units", run)
    assert f.severity == "warning" and f.onset_step == 0
    assert "from the first measurement" in f.summary
    assert [e.metric for e in f.evidence] == ["layer/block2.relu/dead_frac",
                                              "layer/block0.relu/dead_frac",
                                              "layer/block3.relu/dead_frac"]


def test_dead_units_per_rank() -> None:
    run = layer_run("dead_frac", {"relu": noisy(0.0, 12)}, rank=0)
    layer_run("dead_frac", {"relu": noisy(0.8, 12)}, rank=1, run=run)
    (f,) = findings("dead_units", run)
    assert f.rank == 1


def test_dead_units_too_few_points_or_nothing_logged() -> None:
    assert "3" in not_run("dead_units",
                          layer_run("dead_frac", {"relu": np.array([1.0, 1.0])})).reason
    nr = not_run("dead_units", Run("empty"))
    assert nr.missing == ("layer/<module>/dead_frac",) and "layer_every" in nr.reason
    acts_only = layer_run("act_mean", {"gelu": noisy(0.1)})
    nr = not_run("dead_units", acts_only)
    assert not nr.missing and "ReLU" in nr.reason


# ------------------------------------------------------------------- saturated_activations
@pytest.mark.parametrize("level,severity", [(0.97, "warning"), (0.6, "warning"),
                                            (0.3, "info")])
def test_saturated_levels(level: float, severity: str) -> None:
    run = layer_run("saturated_frac", {"h1": noisy(level, 15, 0.01),
                                       "h2": noisy(0.01, 15, 0.005)},
                    order=["h1", "h2", "head"])
    (f,) = findings("saturated_activations", run)
    assert f.severity == severity and "h1" in f.summary and "h2" not in f.summary


@pytest.mark.parametrize("level", [0.0, 0.008, 0.1, 0.2])
def test_saturated_healthy_levels_do_not_fire(level: float) -> None:
    run = layer_run("saturated_frac", {"h": noisy(level, 20, 0.02)})
    assert findings("saturated_activations", run) == []


def test_a_saturated_output_layer_is_info() -> None:
    run = layer_run("saturated_frac", {"hidden": noisy(0.01, 15, 0.005),
                                       "out_sigmoid": noisy(0.95, 15, 0.01)},
                    order=["fc", "hidden", "out", "out_sigmoid"])
    (f,) = findings("saturated_activations", run)
    assert f.severity == "info" and "last module" in f.summary


# ------------------------------------------------------- vanishing_gradients (per layer)
def grad_layers(first: np.ndarray, mid: np.ndarray, last: np.ndarray, *,
                every: int = 50, run: Run | None = None) -> Run:
    return layer_run("grad_norm", {"embed": first, "blocks.0.fc": mid, "head": last},
                     every=every, run=run, order=["embed", "blocks.0.fc", "head"])


@pytest.mark.parametrize("scale", [1e-2, 1.0, 1e3])
def test_vanishing_through_depth_fires_at_any_scale(scale: float) -> None:
    rng = np.random.default_rng(0)
    n = 15
    last = scale * np.exp(rng.normal(0, 0.3, n))
    run = grad_layers(last * 3e-6, last * 1e-3, last)
    (f,) = findings("vanishing_gradients", run)
    assert f.severity == "warning" and f.onset_step == 0
    assert f.metric == "layer/embed/grad_norm"
    assert "'embed'" in f.summary and "'head'" in f.summary
    e = f.evidence[0]
    assert e.metric == "layer/embed/grad_norm" and e.reference is not None
    assert e.value is not None and e.value / e.reference == pytest.approx(3e-6, rel=0.5)


def test_vanishing_through_depth_info_band_and_healthy() -> None:
    n = 15
    last = np.full(n, 0.5)
    (f,) = findings("vanishing_gradients", grad_layers(last * 5e-4, last, last))
    assert f.severity == "info"
    for ratio in (0.5, 0.05, 3e-3, 20.0):
        assert findings("vanishing_gradients", grad_layers(last * ratio, last, last)) == []


def test_vanishing_through_depth_onset_when_it_develops() -> None:
    n = 20
    last = np.full(n, 1.0)
    first = np.where(np.arange(n) < 8, 0.3, 1e-6)
    (f,) = findings("vanishing_gradients", grad_layers(first, last, last))
    assert f.onset_step == 8 * 50 and "from step 400" in f.summary


def test_vanishing_uses_module_order_not_name_order() -> None:
    n = 12
    small, big = np.full(n, 1e-7), np.full(n, 1.0)
    run = layer_run("grad_norm", {"a_head": big, "z_embed": small})
    run.meta["layer_order"] = ["z_embed", "a_head"]
    (f,) = findings("vanishing_gradients", run)
    assert f.metric == "layer/z_embed/grad_norm"
    run.meta["layer_order"] = ["a_head", "z_embed"]  # the big one first: no vanishing
    assert findings("vanishing_gradients", run) == []


def test_vanishing_skips_norm_layers_when_types_are_known() -> None:
    n = 12
    run = layer_run("grad_norm", {"ln_in": np.full(n, 1e-8), "fc": np.full(n, 0.5),
                                  "head": np.full(n, 0.4)},
                    order=["ln_in", "fc", "head"])  # an input LayerNorm first in order
    assert findings("vanishing_gradients", run)  # types unknown: ln_in vs head fires
    run.meta["layer_types"] = {"ln_in": "LayerNorm", "fc": "Linear", "head": "Linear"}
    assert findings("vanishing_gradients", run) == []  # fc vs head


def test_vanishing_merges_depth_evidence_into_the_global_finding() -> None:
    steps = np.arange(0, 1000, 10)
    gn = np.where(steps < 500, 1.0, 1e-5)
    run = Run("both")
    run.add("grad_norm", steps, gn)
    run.add("loss", steps, np.full(steps.size, 2.0))
    grad_layers(np.full(20, 1e-8), np.full(20, 1e-3), np.full(20, 1.0), run=run)
    (f,) = findings("vanishing_gradients", run)
    assert f.metric == "grad_norm" and f.severity == "warning"
    assert {e.metric for e in f.evidence} == {"grad_norm", "layer/embed/grad_norm"}
    assert "through depth" in f.summary


def test_vanishing_from_layers_alone_and_not_run_without_any_grad_norm() -> None:
    run = grad_layers(np.full(5, 1e-9), np.full(5, 1e-3), np.full(5, 1.0))
    assert not run.has("grad_norm")
    assert findings("vanishing_gradients", run)
    assert not_run("vanishing_gradients", Run("empty")).missing == ("grad_norm",)
    one = layer_run("grad_norm", {"only": np.full(5, 1.0)})
    assert "layers" in not_run("vanishing_gradients", one).reason


# ------------------------------------------------ exploding_gradients: per-layer evidence
def test_exploding_names_the_layer_that_grew_most() -> None:
    steps = np.arange(0, 2000)
    rng = np.random.default_rng(0)
    gn = np.exp(rng.normal(0, 0.1, steps.size)) * np.where(steps < 1200, 1.0,
                                                           np.exp((steps - 1200) / 100))
    run = Run("explode")
    run.add("grad_norm", steps, gn)
    ls = steps[::50]
    grow = np.where(ls < 1200, 1.0, np.exp((ls - 1200) / 100))
    layer_run("grad_norm", {"embed": 0.1 * grow ** 0.3, "mlp.fc": 0.5 * grow,
                            "head": 0.2 * grow ** 0.5}, run=run,
              order=["embed", "mlp.fc", "head"])
    fs = findings("exploding_gradients", run)
    f = max(fs, key=lambda x: x.level)
    layer_ev = [e for e in f.evidence if e.metric.startswith("layer/")]
    assert [e.metric for e in layer_ev] == ["layer/mlp.fc/grad_norm"]
    assert "'mlp.fc' grew most" in f.summary
    e = layer_ev[0]
    assert e.value is not None and e.reference == pytest.approx(0.5)
    assert e.value / 0.5 > 10


def test_exploding_spike_on_a_measured_step_names_the_layer() -> None:
    steps = np.arange(0, 1000)
    rng = np.random.default_rng(1)
    gn = np.exp(rng.normal(0, 0.05, steps.size))
    gn[600] = 200.0
    run = Run("spike")
    run.add("grad_norm", steps, gn)
    ls = steps[::50]
    a, b = np.full(ls.size, 0.3), np.full(ls.size, 0.7)
    a[ls == 600] = 90.0
    b[ls == 600] = 2.0
    layer_run("grad_norm", {"attn": a, "mlp": b}, run=run, order=["attn", "mlp"])
    (f,) = findings("exploding_gradients", run)
    assert f.onset_step == 600 and "'attn' grew most (300x)" in f.summary


def test_exploding_without_layer_data_is_unchanged() -> None:
    steps = np.arange(0, 1000)
    gn = np.ones(steps.size)
    gn[600] = 200.0
    run = Run("spike")
    run.add("grad_norm", steps, gn)
    (f,) = findings("exploding_gradients", run)
    assert all(not e.metric.startswith("layer/") for e in f.evidence)


# --------------------------------------------------------------- really trained models
torch = pytest.importorskip("torch")
nn = torch.nn


@pytest.fixture()
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def train_recorded(run_dir: pathlib.Path, model: Any, steps: int = 80, every: int = 5,
                   lr: float = 0.05, batch: int = 64, dim: int = 16,
                   meta: bool = True) -> Run:
    """SGD on 4 Gaussian blobs; LayerHealth on every ``every``-th step, its values written
    into a RunStore with the loss and global grad norm, as the watcher writes them."""
    from trainmedic.live.layer_health import LayerHealth
    from trainmedic.run.loader import load_paths
    from trainmedic.run.store import RunStore

    gen = torch.Generator().manual_seed(0)
    centers = torch.randn(4, dim, generator=gen) * 2
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    lh = LayerHealth(model, every=every)
    store = RunStore(run_dir, rank=None, world_size=None)
    try:
        for step in range(steps):
            y = torch.randint(0, 4, (batch,), generator=gen)
            x = centers[y] + torch.randn(batch, dim, generator=gen)
            armed = lh.scheduled(step)
            if armed:
                lh.arm()
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            gn = torch.linalg.vector_norm(torch.stack(
                [p.grad.norm() for p in model.parameters() if p.grad is not None]))
            if armed:
                lh.on_grads()
            opt.step()
            row = {"loss": loss.item(), "grad_norm": gn.item()}
            if armed:
                row.update({k: v.item() for k, v in lh.collect().items()})
                m = lh.pop_meta()
                if m and meta:
                    store.set_meta(**m)
            store.log(step, row)
    finally:
        store.close()
    return load_paths([str(run_dir)])


def mlp(act: Callable[[], Any], depth: int = 2, width: int = 32, dim: int = 16) -> Any:
    layers: list[Any] = []
    d = dim
    for _ in range(depth):
        layers += [nn.Linear(d, width), act()]
        d = width
    return nn.Sequential(*layers, nn.Linear(d, 4))


def serious(run: Run, symptom: str) -> list[Finding]:
    return [f for f in diagnose(run, only={symptom}).findings
            if f.symptom == symptom and f.severity in ("warning", "error")]


@pytest.mark.usefixtures("_one_thread")
def test_relu_mlp_with_very_negative_biases_has_dead_units(tmp_path: pathlib.Path) -> None:
    torch.manual_seed(0)
    model = mlp(nn.ReLU)
    with torch.no_grad():
        model[2].bias[:20] = -30.0  # 20 of 32 units of the second hidden layer never fire
    run = train_recorded(tmp_path / "dead", model)
    dead = run.get("layer/3/dead_frac")
    assert dead is not None and np.median(dead.values) >= 20 / 32  # the fault happened
    f = serious(run, "dead_units")
    assert f and f[0].severity == "warning" and f[0].onset_step == 0
    assert "layer/3/dead_frac" in {e.metric for e in f[0].evidence}
    assert "layer/1/dead_frac" not in {e.metric for e in f[0].evidence}
    d = diagnose(run)
    routed = next(x for x in d.findings if x.symptom == "dead_units")
    assert routed.causes and routed.interventions

    torch.manual_seed(0)
    healthy = train_recorded(tmp_path / "ok", mlp(nn.ReLU))
    assert healthy.get("layer/3/dead_frac") is not None
    assert not [x for x in diagnose(healthy, only={"dead_units"}).findings]


@pytest.mark.usefixtures("_one_thread")
def test_a_whole_dead_layer_is_an_error(tmp_path: pathlib.Path) -> None:
    torch.manual_seed(0)
    model = mlp(nn.ReLU)
    with torch.no_grad():
        model[0].bias.fill_(-30.0)
    run = train_recorded(tmp_path, model, steps=40)
    (f,) = serious(run, "dead_units")
    assert f.severity == "error" and "'1' (100%)" in f.summary


@pytest.mark.usefixtures("_one_thread")
def test_tanh_mlp_with_huge_init_saturates(tmp_path: pathlib.Path) -> None:
    torch.manual_seed(0)
    model = mlp(nn.Tanh)
    with torch.no_grad():
        for m in model:
            if isinstance(m, nn.Linear):
                m.weight.normal_(0, 3.0)
    run = train_recorded(tmp_path / "sat", model)
    f = serious(run, "saturated_activations")
    assert f and {"layer/1/saturated_frac", "layer/3/saturated_frac"} <= {
        e.metric for e in f[0].evidence}
    torch.manual_seed(0)
    ok = train_recorded(tmp_path / "ok", mlp(nn.Tanh))
    assert ok.get("layer/1/saturated_frac") is not None
    assert not diagnose(ok, only={"saturated_activations"}).findings


@pytest.mark.usefixtures("_one_thread")
def test_deep_sigmoid_mlp_vanishes_through_depth(tmp_path: pathlib.Path) -> None:
    torch.manual_seed(0)
    run = train_recorded(tmp_path / "deep", mlp(nn.Sigmoid, depth=10), steps=60)
    (f,) = serious(run, "vanishing_gradients")
    assert f.metric == "layer/0/grad_norm" and "'20'" in f.summary  # first vs the head
    assert f.onset_step == 0
    torch.manual_seed(0)
    shallow = train_recorded(tmp_path / "relu", mlp(nn.ReLU, depth=3), steps=60)
    assert not serious(shallow, "vanishing_gradients")


@pytest.mark.usefixtures("_one_thread")
def test_without_meta_the_store_keeps_module_order(tmp_path: pathlib.Path) -> None:
    """LayerHealth logs a step's stats as one dict in module order; the store keeps the
    first-logged order, so the per-layer rule works without ``layer_order`` too."""
    torch.manual_seed(0)
    run = train_recorded(tmp_path, mlp(nn.Sigmoid, depth=10), steps=30, meta=False)
    assert "layer_order" not in run.meta
    assert layer_modules(run, "grad_norm")[0] == "0"
    assert layer_modules(run, "grad_norm")[-1] == "20"
    assert serious(run, "vanishing_gradients")
