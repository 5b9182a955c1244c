"""Factories for measure mode: a config's builder, and a user's function split in three."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from trainmedic.memory.factories import auto_factory, config_factory, split_factory
from trainmedic.memory.hf_build import build_auto_model, build_hf_model
from trainmedic.memory.measurement import FactoryError

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model-configs"


def test_config_factory_builds_the_planned_head_when_the_family_is_known(tmp_path: Path) -> None:
    known = config_factory(CONFIGS / "gpt2-large.json", 2, "eager")
    assert isinstance(known, functools.partial) and known.func is build_hf_model
    assert known.keywords == {"num_layers": 2, "attn_implementation": "eager"}
    other = tmp_path / "config.json"
    other.write_text(json.dumps({"model_type": "gpt_neox", "hidden_size": 64}))
    unknown = config_factory(other, None, "sdpa")
    assert isinstance(unknown, functools.partial) and unknown.func is build_auto_model
    # transformers builds flash attention only with its CUDA package: SDPA saves the same.
    flash = auto_factory(other, None, "flash")
    assert isinstance(flash, functools.partial)
    assert flash.keywords["attn_implementation"] == "sdpa"


def test_a_plain_model_gets_the_default_inputs_and_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    import trainmedic.memory.measurement as measure

    monkeypatch.setattr(measure, "default_inputs", lambda model, b, s: ("ids", model, b, s))
    monkeypatch.setattr(measure, "default_loss", lambda out, batch: ("ce", out, batch))
    parts = split_factory(lambda: "net", "pkg.models:build")
    assert parts.model() == "net"
    assert parts.inputs is not None and parts.inputs("net", 2, 8) == ("ids", "net", 2, 8)
    assert parts.loss is not None and parts.loss("out", "batch") == ("ce", "out", "batch")
    # measure names the user's function in its messages, not the wrapper.
    assert (parts.model.__module__, parts.model.__qualname__) == ("pkg.models", "build")


def test_a_recipe_dict_carries_its_own_inputs_and_loss() -> None:
    recipe: dict[str, Any] = {"model": "net", "inputs": lambda m, b, s: (m, b * s),
                              "loss": lambda out, batch: f"{out}/{batch}"}
    parts = split_factory(lambda: recipe, "pkg:mlp")
    assert parts.model() == "net"  # inputs and loss are known once the model was built
    assert parts.inputs is not None and parts.inputs("net", 2, 8) == ("net", 16)
    assert parts.loss is not None and parts.loss("y", "x") == "y/x"


def test_a_dict_without_a_model_is_refused() -> None:
    parts = split_factory(lambda: {"inputs": None}, "pkg:broken")
    with pytest.raises(FactoryError, match="^pkg:broken returned a dict without 'model'"):
        parts.model()
