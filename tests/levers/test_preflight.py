"""The preflight API: results and config validate, the registry refuses duplicates, batches
split along dim 0, and ``run_checks`` leaves the recipe exactly as it found it."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import namedtuple
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from trainmedic.errors import ConfigError, RegistryError
from trainmedic.levers.preflight import (
    Check,
    CheckResult,
    Evidence,
    PreflightConfig,
    PreflightReport,
    check_names,
    get_check,
    passed,
    register_check,
    run_checks,
)
from trainmedic.levers.preflight_state import names_of, split_batch
from trainmedic.recipe import RecipeRunner
from trainmedic.recipe.recipe import load_recipe

ZOO = Path(__file__).resolve().parent / "zoo.py"


def test_importing_levers_does_not_import_torch() -> None:
    code = ("import sys, trainmedic.levers as l; l.__all__; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


def test_a_check_name_registered_twice_is_a_registry_error() -> None:
    name = check_names()[0]
    with pytest.raises(RegistryError, match="already registered"):
        register_check(Check(name=name, what="again", run=lambda s: passed(name, "ok")))
    with pytest.raises(RegistryError, match="expected one of label_range"):
        get_check("no_such_check")
    with pytest.raises(RegistryError):
        run_checks(load_recipe(f"{ZOO}:healthy"), only=["no_such_check"])


def test_results_and_config_validate() -> None:
    with pytest.raises(ConfigError, match="fix"):
        CheckResult(name="x", status="fail", summary="broken")
    with pytest.raises(ConfigError, match="status"):
        CheckResult(name="x", status="warn", summary="?")
    with pytest.raises(ConfigError, match="basis"):
        Evidence(label="x", value=1, basis="guessed")
    with pytest.raises(ConfigError, match="passed"):
        PreflightReport(results=(CheckResult(name="x", status="fail", summary="s", fix="f"),),
                        passed=True)
    for field, bad in (("overfit_factor", 1.5), ("batches", 0), ("microbatch_tolerance", 0),
                       ("precisions", ("fp32",)), ("seed", -1)):
        with pytest.raises(ConfigError, match=field):
            PreflightConfig(**{field: bad})


def test_only_runs_those_checks_in_registry_order_and_the_report_is_json() -> None:
    report = run_checks(load_recipe(f"{ZOO}:healthy"),
                        only=["init_loss", "optimizer_coverage"])
    assert [r.name for r in report.results] == ["optimizer_coverage", "init_loss"]
    doc = json.loads(json.dumps(report.to_dict(source="zoo")))
    assert doc["schema"] == "trainmedic.preflight/1" and doc["passed"] is True
    assert doc["counts"] == {"pass": 2, "fail": 0, "skip": 0}
    ev = doc["checks"][1]["evidence"]
    assert {e["basis"] for e in ev} == {"measured", "estimated"}  # ln C is a formula


def test_split_batch_splits_every_tensor_along_dim_0() -> None:
    Pair = namedtuple("Pair", "x y")
    batch = {"a": torch.arange(12).reshape(6, 2), "b": (torch.arange(6), Pair(
        torch.ones(6, 3), torch.zeros(6))), "scale": torch.tensor(2.0), "tag": "t"}
    parts = split_batch(batch, 3)
    assert len(parts) == 3
    assert torch.equal(parts[1]["a"], torch.tensor([[4, 5], [6, 7]]))
    assert isinstance(parts[2]["b"][1], Pair) and parts[2]["b"][1].x.shape == (2, 3)
    assert parts[0]["scale"] is batch["scale"] and parts[0]["tag"] == "t"
    assert torch.equal(torch.cat([p["b"][0] for p in parts]), batch["b"][0])


def test_names_are_grouped_by_module() -> None:
    names = ["a.weight", "a.bias", "b.c.weight", "top"] + [f"m{i}.w" for i in range(9)]
    out = names_of(names, limit=3)
    assert out[:3] == ("a (weight, bias)", "b.c (weight)", "(model) (top)")
    assert out[3] == "and 9 more modules"


def _state(recipe: Any) -> dict[str, Any]:
    opt = recipe.optimizer.state_dict()
    gens = [g.get_state() for g in (recipe.data.generator,)]
    return {"model": {k: v.clone() for k, v in recipe.model.state_dict().items()},
            "opt_state": {k: {n: (t.clone() if isinstance(t, torch.Tensor) else t)
                              for n, t in s.items()} for k, s in opt["state"].items()},
            "groups": json.dumps(opt["param_groups"], sort_keys=True),
            "flags": [m.training for m in recipe.model.modules()],
            "grads": [p.grad for p in recipe.model.parameters()],
            "torch_rng": torch.get_rng_state(), "py_rng": random.getstate(),
            "np_rng": np.random.get_state()[1].copy(), "gens": gens,
            "sched": json.dumps(recipe.scheduler.state_dict(), default=str)}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return bool(np.array_equal(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_check_leaves_model_optimizer_rng_and_loader_bitwise_unchanged() -> None:
    recipe = load_recipe("trainmedic.demo:recipe", batch_size=8, context_len=16, steps=40,
                         precision="bf16-mixed")
    RecipeRunner(recipe).run(2)  # optimizer state, a scheduler past step 0
    recipe.model.eval()  # an unusual mode, to see it come back
    random.random()
    before = _state(recipe)
    report = run_checks(recipe)
    assert report.passed
    after = _state(recipe)
    for key in before:
        assert _same(before[key], after[key]), key
    # and training goes on as it would have: the next steps equal those of a twin that was
    # never checked (the same global RNG state handed to both: it is process-wide)
    twin = load_recipe("trainmedic.demo:recipe", batch_size=8, context_len=16, steps=40,
                       precision="bf16-mixed")
    RecipeRunner(twin).run(2)
    rng = torch.get_rng_state()
    losses = []
    for r in (recipe, twin):
        runner = RecipeRunner(r)
        runner._started = True  # already seeded: go on from here
        runner.loop.step = 2
        torch.set_rng_state(rng)
        losses.append(runner.run(4).losses)
    assert losses[0] == losses[1]


def test_buffers_and_grads_come_back_too() -> None:
    recipe = load_recipe(f"{ZOO}:healthy", batchnorm=True)
    with torch.no_grad():
        recipe.model.norm.running_mean.fill_(0.25)  # type: ignore[union-attr]
    marker = torch.full_like(recipe.model.fc1.weight, 7.0)  # type: ignore[union-attr]
    recipe.model.fc1.weight.grad = marker.clone()  # type: ignore[union-attr]
    run_checks(recipe)
    assert torch.all(recipe.model.norm.running_mean == 0.25)  # type: ignore[union-attr]
    assert torch.equal(recipe.model.fc1.weight.grad, marker)  # type: ignore[union-attr]
    assert recipe.model.head.weight.grad is None  # type: ignore[union-attr]


def test_an_empty_loader_is_a_config_error() -> None:
    recipe = load_recipe(f"{ZOO}:healthy")
    empty = type(recipe)(model=recipe.model, optimizer=recipe.optimizer,
                         loss_fn=recipe.loss_fn, data=[])
    with pytest.raises(ConfigError, match="no batch"):
        run_checks(empty, only=["gradients_flow"])


def test_a_loss_that_raises_fails_the_check_with_the_message() -> None:
    recipe = load_recipe(f"{ZOO}:healthy")

    def broken(model: Any, batch: Any) -> Any:
        raise ValueError("shapes (16, 10) and (3,) do not match")

    bad = type(recipe)(model=recipe.model, optimizer=recipe.optimizer, loss_fn=broken,
                       data=recipe.data)
    r = run_checks(bad, only=["gradients_flow"]).result("gradients_flow")
    assert r.status == "fail" and "ValueError: shapes (16, 10)" in r.summary and r.fix
