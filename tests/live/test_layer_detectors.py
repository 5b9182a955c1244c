"""The watcher's own per-layer health feeding the layer detectors, end to end: a real tiny CPU
training loop under ``watch(..., layer_every=N)``, the store read back with ``load_paths`` and
diagnosed. A deep tanh MLP driven into saturation is reported as ``saturated_activations``, one
initialised with tiny weights as ``vanishing_gradients`` (through depth), each naming the
modules; a healthy, normalised MLP trained the same way raises neither."""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from trainmedic.diagnose.engine import diagnose  # noqa: E402
from trainmedic.diagnose.finding import Diagnosis, Finding  # noqa: E402
from trainmedic.live import watch  # noqa: E402
from trainmedic.run.loader import load_paths  # noqa: E402
from trainmedic.run.series import Run  # noqa: E402

STEPS = 60
LAYER_EVERY = 5  # 12 measurements per layer: the detectors judge the last third (>= 3)
WIDTH = 32
DEPTH = 8  # hidden Linear+activation pairs


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _deep(act: type[nn.Module], std: float) -> nn.Sequential:
    """20 -> 8 x (Linear(32) + act) -> Linear(4), weights N(0, std), zero biases. Module
    names: Linear at even indices "0".."16", the activations at odd ones "1".."15"."""
    torch.manual_seed(0)
    dims = [20] + [WIDTH] * DEPTH
    layers: list[nn.Module] = []
    for a, b in zip(dims, dims[1:], strict=False):
        layers += [nn.Linear(a, b), act()]
    model = nn.Sequential(*layers, nn.Linear(WIDTH, 4))
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std)
            nn.init.zeros_(m.bias)
    return model


def _healthy() -> nn.Sequential:
    """Default init, a LayerNorm ahead of the tanh (so the detector has a layer to judge),
    then ReLU and GELU layers."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(20, 64), nn.LayerNorm(64), nn.Tanh(),
                         nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32), nn.GELU(),
                         nn.Linear(32, 4))


def _train(model: nn.Module, run_dir: pathlib.Path) -> tuple[Run, Diagnosis]:
    """SGD with momentum on a learnable 4-class task (labels: argmax of a fixed linear map of
    the inputs), watched with per-layer health every LAYER_EVERY steps; read back, diagnosed."""
    gen = torch.Generator().manual_seed(1)
    teacher = torch.randn(20, 4, generator=gen)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with watch(model, opt, run_dir=run_dir, layer_every=LAYER_EVERY) as w:
        for _ in range(STEPS):
            x = torch.randn(128, 20, generator=gen)
            y = (x @ teacher).argmax(1)
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            w.step(loss, batch_size=128)
    run = load_paths([str(run_dir)])
    return run, diagnose(run)


def _of(diagnosis: Diagnosis, symptom: str) -> list[Finding]:
    return [f for f in diagnosis.findings if f.symptom == symptom]


def _module_of(metric: str, stat: str) -> str:
    assert metric.startswith("layer/") and metric.endswith("/" + stat), metric
    return metric[len("layer/"):-len("/" + stat)]


def _ran(diagnosis: Diagnosis, symptom: str) -> bool:
    return symptom not in {c.symptom for c in diagnosis.checks_not_run}


def test_saturated_tanh_layers_are_named(tmp_path: pathlib.Path) -> None:
    """N(0, 1) weights on 32-wide layers: pre-activations with std ~5.7, so most tanh
    outputs sit beyond |0.99| from the first step."""
    model = _deep(nn.Tanh, std=1.0)
    modules: dict[str, Any] = dict(model.named_modules())
    run, dg = _train(model, tmp_path)
    sat = run.get("layer/1/saturated_frac")
    assert sat is not None and list(sat.steps) == list(range(0, STEPS, LAYER_EVERY))
    found = _of(dg, "saturated_activations")
    assert len(found) == 1, [f.symptom for f in dg.findings]
    f = found[0]
    # The last module is a Linear head, so no tanh is downgraded as an output layer.
    assert f.severity == "warning"
    assert f.evidence
    named = [_module_of(e.metric, "saturated_frac") for e in f.evidence]
    assert f.metric == f.evidence[0].metric
    for name, ev in zip(named, f.evidence, strict=True):
        assert isinstance(modules[name], nn.Tanh), name  # a real tanh of this model
        assert f"'{name}'" in f.summary
        assert ev.value is not None and 0.25 <= ev.value <= 1.0
    assert f.evidence[0].value is not None and f.evidence[0].value >= 0.5
    # The first hidden tanh is among the worst: measured directly from the store too.
    assert "1" in named
    assert float(np.median(sat.values[-4:])) >= 0.5


def test_small_init_vanishes_through_depth_first_layer_named(tmp_path: pathlib.Path) -> None:
    """N(0, 0.01) weights: each tanh layer (linear range) scales the backward signal by
    ~0.01 * sqrt(32), so the first Linear gets orders of magnitude less than the head."""
    model = _deep(nn.Tanh, std=0.01)
    modules: dict[str, Any] = dict(model.named_modules())
    first, last = "0", str(2 * DEPTH)
    assert isinstance(modules[first], nn.Linear) and isinstance(modules[last], nn.Linear)
    run, dg = _train(model, tmp_path)
    g_first, g_last = run.get(f"layer/{first}/grad_norm"), run.get(f"layer/{last}/grad_norm")
    assert g_first is not None and g_last is not None
    assert len(g_first) == len(g_last) == STEPS // LAYER_EVERY
    assert float(np.median(g_first.values / g_last.values)) < 1e-6  # the watcher's numbers

    found = _of(dg, "vanishing_gradients")
    assert len(found) == 1, [f.symptom for f in dg.findings]
    f = found[0]
    assert f.severity == "warning"
    assert f"first layer '{first}'" in f.summary and f"last layer '{last}'" in f.summary
    depth = [e for e in f.evidence if e.metric.startswith("layer/")]
    assert len(depth) == 1
    assert _module_of(depth[0].metric, "grad_norm") == first
    assert depth[0].value is not None and depth[0].reference is not None
    assert depth[0].reference > 0 and depth[0].value / depth[0].reference <= 1e-4
    # Tiny weights keep every tanh in its linear range: no saturation to report.
    assert _ran(dg, "saturated_activations") and not _of(dg, "saturated_activations")


def test_healthy_mlp_raises_neither(tmp_path: pathlib.Path) -> None:
    model = _healthy()
    run, dg = _train(model, tmp_path)
    # The stats the detectors read are there (not a vacuous pass) ...
    for metric in ("layer/2/saturated_frac", "layer/0/grad_norm", "layer/7/grad_norm",
                   "layer/4/dead_frac"):
        s = run.get(metric)
        assert s is not None and len(s) == STEPS // LAYER_EVERY, metric
    assert run.meta.get("layer_types", {}).get("2") == "Tanh"
    # ... the detectors judged them ...
    for symptom in ("saturated_activations", "vanishing_gradients", "dead_units"):
        assert _ran(dg, symptom), symptom
    # ... and found nothing; the model learned.
    symptoms = {f.symptom for f in dg.findings}
    assert not symptoms & {"saturated_activations", "vanishing_gradients", "dead_units"}, \
        [(f.symptom, f.summary) for f in dg.findings]
    loss = run.get("loss")
    assert loss is not None and loss.values[-1] < 0.5 * loss.values[0]
