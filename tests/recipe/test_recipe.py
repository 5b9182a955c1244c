"""Recipe validation (each bad field named) and load_recipe's one-line errors."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

import trainmedic
from trainmedic.errors import ConfigError, InputError, UnreadableInputError
from trainmedic.recipe import Recipe, config_hash, load_recipe

torch = pytest.importorskip("torch")

SRC = pathlib.Path(trainmedic.__file__).resolve().parents[1]


def parts() -> dict[str, Any]:
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return {"model": model, "optimizer": opt, "loss_fn": lambda m, b: m(b).sum(),
            "data": [torch.ones(2, 3)]}


def test_a_good_recipe_and_its_defaults() -> None:
    r = Recipe(**parts())
    assert r.precision == "fp32" and r.grad_accum == 1 and r.scheduler is None
    assert r.config_hash == config_hash({})
    with pytest.raises(TypeError):
        Recipe(parts()["model"])  # type: ignore[call-arg]  # keyword-only


@pytest.mark.parametrize(("field", "value"), [
    ("model", object()), ("optimizer", object()), ("loss_fn", 3),
    ("data", iter([1, 2])), ("data", 5), ("scheduler", object()), ("scaler", object()),
    ("precision", "fp8"), ("grad_accum", 0), ("grad_accum", 1.5), ("grad_accum", True),
    ("max_grad_norm", 0), ("max_grad_norm", float("nan")), ("config", [1]),
    ("config", {"x": object()}), ("seed", -1), ("seed", "0"),
])
def test_bad_field_is_named(field: str, value: Any) -> None:
    kw = parts()
    kw[field] = value
    with pytest.raises(ConfigError, match=field):
        Recipe(**kw)


def test_fp16_needs_a_scaler() -> None:
    with pytest.raises(ConfigError, match="scaler: fp16-mixed needs a GradScaler"):
        Recipe(**parts(), precision="fp16-mixed")


def test_optimizer_over_a_stale_copy_is_refused() -> None:
    kw = parts()
    stale = torch.nn.Linear(3, 1)
    kw["optimizer"] = torch.optim.SGD(stale.parameters(), lr=0.1)
    with pytest.raises(ConfigError, match="optimizer holds 2 tensor"):
        Recipe(**kw)


def test_scheduler_of_another_optimizer_is_refused() -> None:
    kw = parts()
    other = torch.optim.SGD(kw["model"].parameters(), lr=0.1)
    kw["scheduler"] = torch.optim.lr_scheduler.StepLR(other, 1)
    with pytest.raises(ConfigError, match="scheduler steps another optimizer"):
        Recipe(**kw)


def test_config_hash_is_canonical() -> None:
    assert config_hash({"a": 1, "b": [2, 3]}) == config_hash({"b": [2, 3], "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})
    assert len(config_hash({})) == 16


RECIPE_FILE = '''
import torch
from trainmedic import Recipe

def build(*, lr=0.1, width=3):
    model = torch.nn.Linear(width, 1)
    return Recipe(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=lr),
                  loss_fn=lambda m, b: m(b).sum(), data=[torch.ones(2, width)],
                  config={"lr": lr, "width": width})

def broken():
    raise RuntimeError("no data\\nhere")

def not_a_recipe():
    return 42

value = 3
'''


@pytest.fixture
def recipe_file(tmp_path: pathlib.Path) -> pathlib.Path:
    p = tmp_path / "my_recipe.py"
    p.write_text(RECIPE_FILE)
    return p


def test_load_from_a_file_with_overrides(recipe_file: pathlib.Path) -> None:
    r = load_recipe(f"{recipe_file}:build", lr=0.5, width=4)
    assert r.config == {"lr": 0.5, "width": 4}
    assert r.optimizer.param_groups[0]["lr"] == 0.5


def test_load_from_a_module(recipe_file: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(recipe_file.parent))
    assert load_recipe("my_recipe:build").config["width"] == 3


@pytest.mark.parametrize(("spec", "kw", "error", "match"), [
    ("nocolon", {}, InputError, "expected module:function"),
    ("mod:", {}, InputError, "expected module:function"),
    ("mod:not-an-id", {}, InputError, "expected module:function"),
    ("no_such_module_xyz:fn", {}, InputError, "no module named 'no_such_module_xyz'"),
    ("{file}:missing", {}, InputError, "has no attribute 'missing'"),
    ("{file}:value", {}, InputError, "value is a int, expected a callable"),
    ("{file}:build", {"depth": 2}, ConfigError, "depth: recipe .* takes no such parameter; "
                                               "it takes lr, width"),
    ("{file}:broken", {}, InputError, "raised RuntimeError: no data here"),
    ("{file}:not_a_recipe", {}, InputError, "returned a int, expected a trainmedic.Recipe"),
    ("{dir}/absent.py:fn", {}, UnreadableInputError, "no such Python file"),
    ("trainmedic.demo:recipe", {"bogus": 1}, ConfigError, "bogus: recipe .* no such parameter"),
])
def test_load_errors_are_one_line(recipe_file: pathlib.Path, spec: str, kw: dict[str, Any],
                                  error: type[Exception], match: str) -> None:
    spec = spec.format(file=recipe_file, dir=recipe_file.parent)
    with pytest.raises(error, match=match) as info:
        load_recipe(spec, **kw)
    assert "\n" not in str(info.value)


def test_lazy_export_does_not_import_torch() -> None:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    code = ("import sys, trainmedic, trainmedic.recipe\n"
            "assert trainmedic.Recipe is trainmedic.recipe.Recipe\n"
            "assert 'torch' not in sys.modules, 'torch imported'\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
    with pytest.raises(AttributeError):
        trainmedic.Nothing  # noqa: B018
