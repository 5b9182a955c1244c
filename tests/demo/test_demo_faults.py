"""The demo's faults: a registry of small objects over the product's one training loop."""

from __future__ import annotations

import pathlib
import re

import pytest

from trainmedic.demo import FAULTS
from trainmedic.demo.faults import Fault, get_fault, register_fault
from trainmedic.errors import RegistryError

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "trainmedic"


def test_every_fault_is_a_registered_object_none_first() -> None:
    assert FAULTS[0] == "none"
    assert set(FAULTS) == {"none", "diverge", "spike", "flat", "overfit", "stall", "leak"}
    for name in FAULTS:
        assert isinstance(get_fault(name), Fault) and get_fault(name).name == name


def test_a_second_fault_of_one_name_is_refused() -> None:
    with pytest.raises(RegistryError, match="already registered"):
        register_fault(Fault("spike"))


def test_an_unknown_fault_lists_the_known_ones() -> None:
    with pytest.raises(RegistryError, match="expected one of none, diverge"):
        get_fault("gremlins")


def test_one_training_loop_in_the_product() -> None:
    # the demo trains through RecipeRunner: no backward() or optimizer step of its own
    demo = {p.name: p.read_text() for p in (SRC / "demo").glob("*.py")}
    assert not [n for n, t in demo.items() if re.search(r"\.backward\(|optimizer\.step\(", t)]
    assert "RecipeRunner(" in demo["runner.py"] and "if cfg.fault ==" not in demo["runner.py"]
    assert ".backward()" in (SRC / "recipe" / "runner.py").read_text()


def test_the_diverge_fault_only_changes_the_recipe_settings() -> None:
    assert get_fault("diverge").overrides(200) == {"optimizer": "sgd", "lr": 1.0,
                                                   "momentum": 0.9, "schedule": "hold"}
    assert get_fault("none").overrides(200) == {}
