"""The resume test: three fresh processes on a recipe; equal on the demo recipe (shuffle,
dropout, AdamW, LambdaLR, jittered windows drawn in workers), and a deliberately broken
resume is caught with the broken state named."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from trainmedic.checkpoint.resume_test import ResumeTestConfig, resume_test
from trainmedic.cli.main import main
from trainmedic.errors import ConfigError, InputError

pytest.importorskip("torch")

# 600 characters in windows of 16 (+ up to 8 of jitter): 9 batches of 4 an epoch, so 12 steps
# cross an epoch boundary after the resume at 5.
SMALL: dict[str, Any] = {"train_chars": 600, "batch_size": 4, "context_len": 16,
                         "dropout": 0.2, "steps": 12}


def run(at: int = 5, steps: int = 12, **kw: Any) -> Any:
    overrides = dict(SMALL, **kw.pop("overrides", {}))
    return resume_test(ResumeTestConfig(recipe="trainmedic.demo:recipe", steps=steps, at=at,
                                        overrides=overrides, concurrent=True, **kw))


@pytest.mark.parametrize(("field", "kw"), [
    ("recipe", {"recipe": "nocolon"}), ("steps", {"steps": 1}), ("at", {"at": 0}),
    ("at", {"at": 8}), ("atol", {"atol": -1.0}), ("overrides", {"overrides": {"x": object()}}),
    ("sabotage", {"sabotage": "gremlins"}), ("timeout_s", {"timeout_s": 0}),
    ("concurrent", {"concurrent": 1}),
])
def test_bad_config_is_named(field: str, kw: dict[str, Any]) -> None:
    base: dict[str, Any] = {"recipe": "m:f", "steps": 8, "at": 3}
    with pytest.raises(ConfigError, match=field):
        ResumeTestConfig(**{**base, **kw})


def test_the_demo_recipe_resumes_exactly(tmp_path: pathlib.Path) -> None:
    report = run(root=tmp_path / "ck")
    assert report.equal, report.differences
    assert report.first_difference is None and report.differences == []
    assert len(report.losses_straight) == 12 and report.losses_resumed == \
        report.losses_straight[5:]
    assert report.max_loss_diff == 0.0 and report.max_weight_diff == 0.0
    assert report.checkpoint is not None and pathlib.Path(report.checkpoint).is_dir()
    assert set(report.timings_s) == {"straight", "first", "resume"}


@pytest.mark.slow
def test_the_demo_recipe_resumes_exactly_with_two_workers() -> None:
    report = run(overrides={"num_workers": 2})
    assert report.equal, report.differences


@pytest.mark.parametrize(("sabotage", "kw", "named"), [
    ("rng", {}, "rng.torch_cpu"),
    ("data", {}, "data position"),
    # (and within --atol: the boundary is then compared within it too)
    pytest.param("optimizer", {"atol": 1e-6}, "optimizer", marks=pytest.mark.slow),
    # The RNG restored first: replaying the epoch's batches (their jitter) draws from it.
    pytest.param("rng-before-data", {}, "rng.torch_cpu", marks=pytest.mark.slow),
    # The loader's generator left as built, the RNG right: saved in the second epoch (9
    # batches an epoch), its replayed permutation is the first epoch's.
    pytest.param("generator", {"at": 10}, "data order", marks=pytest.mark.slow),
])
def test_a_broken_resume_is_caught_and_named(sabotage: str, kw: dict[str, Any],
                                             named: str) -> None:
    kw = dict(kw)
    at, atol = kw.pop("at", 4), kw.pop("atol", None)
    report = run(at=at, steps=at + 2, sabotage=sabotage, atol=atol, overrides=kw)
    assert not report.equal
    assert report.first_difference == named, report.differences
    assert report.differences[0].startswith(named)
    assert report.max_weight_diff > 0


RECIPES = '''
import time
import torch
from trainmedic import Recipe

def unseeded(**kw):
    torch.manual_seed(time.time_ns() % 2**62)  # another init in every process
    model = torch.nn.Linear(3, 1)
    return Recipe(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                  loss_fn=lambda m, b: m(b).pow(2).mean(), data=[torch.ones(2, 3)])
'''


@pytest.mark.slow
def test_a_recipe_that_is_not_reproducible_is_named_first(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "recipes.py"
    path.write_text(RECIPES)
    report = resume_test(ResumeTestConfig(recipe=f"{path}:unseeded", steps=4, at=2,
                                          concurrent=True))
    assert not report.equal and report.first_difference == "determinism"


def test_errors_in_the_phase_processes_come_back_as_one_line() -> None:
    with pytest.raises(ConfigError, match="bogus: recipe trainmedic.demo:recipe takes no "):
        resume_test(ResumeTestConfig(recipe="trainmedic.demo:recipe", steps=3, at=1,
                                     overrides={"bogus": 1}))
    with pytest.raises(InputError, match="no module named 'no_such_mod'"):
        resume_test(ResumeTestConfig(recipe="no_such_mod:fn", steps=3, at=1))


def test_cli_exit_codes_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["ckpt", "resume-test", "trainmedic.demo:recipe", "--steps", "6", "--at", "2",
            "--concurrent"] + [f"--set={k}={json.dumps(v)}" for k, v in SMALL.items()]
    assert main(args + ["--sabotage", "rng", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert not doc["equal"] and doc["first_difference"] == "rng.torch_cpu"
    assert doc["steps"] == 6 and doc["at"] == 2 and len(doc["losses_resumed"]) == 4
    assert main(args[:3] + ["--steps", "4", "--at", "4"]) == 2
    assert main(args + ["--set", "bogus=1"]) == 2
    assert main(args + ["--set", "no-equals"]) == 2
    err = capsys.readouterr().err
    assert "bogus: recipe" in err and "Traceback" not in err


@pytest.mark.slow
def test_cli_says_equal_and_exits_0(tmp_path: pathlib.Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    args = ["ckpt", "resume-test", "trainmedic.demo:recipe", "--steps", "6", "--at", "2",
            "--workers", "0", "--root", str(tmp_path)]
    assert main(args + [f"--set={k}={json.dumps(v)}" for k, v in SMALL.items()]) == 0
    out = capsys.readouterr().out
    assert "EQUAL (bitwise): 4 losses after the resume and the final weights match" in out
    assert f"checkpoint kept: {tmp_path}" in out
