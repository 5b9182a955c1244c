"""The resume test: three fresh processes on a recipe; equal on the demo recipe (shuffle,
dropout, AdamW, LambdaLR, jittered windows drawn in workers), and a deliberately broken
resume is caught with the broken state named."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from trainmedic.cli.main import main
from trainmedic.errors import ConfigError, InputError
from trainmedic.recipe.resume_test import ResumeTestConfig, resume_test

pytest.importorskip("torch")

# 600 characters in windows of 16 (+ up to 8 of jitter): 9 batches of 4 an epoch, so 12 steps
# cross an epoch boundary after the resume at 5.
SMALL: dict[str, Any] = {"train_chars": 600, "batch_size": 4, "context_len": 16,
                         "dropout": 0.2, "steps": 12}


def run(at: int = 5, steps: int = 12, progress: Any = None, **kw: Any) -> Any:
    overrides = dict(SMALL, **kw.pop("overrides", {}))
    return resume_test(ResumeTestConfig(recipe="trainmedic.demo:recipe", steps=steps, at=at,
                                        overrides=overrides, concurrent=True, **kw),
                       progress=progress)


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
    said: list[str] = []
    report = run(root=tmp_path / "ck", progress=said.append)
    # one line as each phase starts (the first two at once: concurrent)
    assert said == ["straight run: 12 steps", "first run: 5 steps, then a save (at the same "
                    "time)", "resumed run: load step 5 in a fresh process, then 7 steps"]
    assert report.equal, report.differences
    assert report.first_difference is None and report.differences == []
    assert len(report.losses_straight) == 12 and report.losses_resumed == \
        report.losses_straight[5:]
    assert report.max_loss_diff == 0.0 and report.max_weight_diff == 0.0
    assert report.checkpoint is not None and pathlib.Path(report.checkpoint).is_dir()
    assert {"straight", "first", "resume"} <= set(report.timings_s)


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
import os
import time
import torch
from trainmedic import Recipe

def unseeded(**kw):
    torch.manual_seed(time.time_ns() % 2**62)  # another init in every process
    model = torch.nn.Linear(3, 1)
    return Recipe(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                  loss_fn=lambda m, b: m(b).pow(2).mean(), data=[torch.ones(2, 3)])

def _seeded(loss_fn, config):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    # batch i is full of i, so a loss function knows the step (one epoch of 6 batches)
    return Recipe(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                  loss_fn=loss_fn, data=[torch.full((2, 3), float(i)) for i in range(6)],
                  config=config, seed=0)

def drifts_once(token: str, at: int):
    # The first process to reach a step after `at` perturbs it by a few ulps, as a GEMM
    # whose blocking changed with its thread count would; no other process does.
    def loss_fn(m, b):
        loss = m(b).pow(2).mean()
        if int(b[0, 0]) == at + 1:
            try:
                os.close(os.open(token, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return loss
            return loss * (1 + 2**-20)
        return loss
    return _seeded(loss_fn, {"token": token, "at": at})

CALLS = [0]

def hidden_state():
    # A factor kept outside the model, optimizer and loader (calls in this process): a
    # resume cannot restore it, and every process reproduces itself.
    def loss_fn(m, b):
        CALLS[0] += 1
        return m(b).pow(2).mean() * (1 + 1e-3 * CALLS[0])
    return _seeded(loss_fn, {})

def noisy(at: int):
    # Every process adds its own noise after `at`: nothing reproduces bitwise. (The factor
    # becomes a float32: 1e-3 spans ~8400 of its steps, so two processes match with odds
    # of ~1e-8; 1e-6 spanned only 8, and a fresh-clone CI run here drew a match.)
    def loss_fn(m, b):
        loss = m(b).pow(2).mean()
        if int(b[0, 0]) > at:
            r = (1 + int.from_bytes(os.urandom(4), "little")) / 2**32
            return loss * (1 + 1e-3 * r)
        return loss
    return _seeded(loss_fn, {"at": at})
'''


@pytest.mark.slow
def test_a_recipe_that_is_not_reproducible_is_named_first(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "recipes.py"
    path.write_text(RECIPES)
    report = resume_test(ResumeTestConfig(recipe=f"{path}:unseeded", steps=4, at=2,
                                          concurrent=True))
    assert not report.equal and report.first_difference == "determinism"


@pytest.fixture
def recipes(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "recipes.py"
    path.write_text(RECIPES)
    return path


@pytest.mark.slow
def test_a_drift_after_an_exact_boundary_is_repeated_and_the_exact_pair_found(
        recipes: pathlib.Path, tmp_path: pathlib.Path) -> None:
    token = tmp_path / "drifted"
    report = resume_test(ResumeTestConfig(
        recipe=f"{recipes}:drifts_once", steps=5, at=2, concurrent=True,
        overrides={"token": str(token), "at": 2}))
    assert token.exists()  # one of the first three runs drifted
    assert report.equal, report.differences
    assert report.differences == [] and report.max_loss_diff == 0.0
    assert report.max_weight_diff == 0.0 and report.losses_resumed == \
        report.losses_straight[2:]
    assert len(report.notes) == 1 and "drifted apart by up to" in report.notes[0]
    assert "resumes exactly" in report.notes[0]
    assert {"straight-2", "resume-2"} <= set(report.timings_s)


@pytest.mark.slow
def test_a_state_outside_the_checkpoint_is_told_from_nondeterminism(
        recipes: pathlib.Path) -> None:
    report = resume_test(ResumeTestConfig(recipe=f"{recipes}:hidden_state", steps=5, at=2,
                                          concurrent=True))
    assert not report.equal and report.first_difference == "loss"
    assert report.differences[-1].startswith("repeated: each straight run and each resumed "
                                             "run reproduces itself"), report.differences


@pytest.mark.slow
def test_kernels_that_never_reproduce_are_named_as_determinism(
        recipes: pathlib.Path) -> None:
    report = resume_test(ResumeTestConfig(recipe=f"{recipes}:noisy", steps=5, at=2,
                                          concurrent=True, overrides={"at": 2}))
    assert not report.equal and report.first_difference == "determinism"
    assert "no resumed run matched a straight one" in report.differences[0]
    assert "--atol" in report.differences[0]


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


def test_cli_prints_the_notes(capsys: pytest.CaptureFixture[str]) -> None:
    from trainmedic.cli.ckpt_resume import _print
    from trainmedic.recipe.resume_test import ResumeReport

    report = ResumeReport(equal=True, first_difference=None, differences=[],
                          notes=["two runs from the same inputs drifted apart by up to 2e-07"],
                          steps=5, at=2, atol=None, losses_straight=[1.0] * 5,
                          losses_resumed=[1.0] * 3, max_loss_diff=0.0, max_weight_diff=0.0,
                          checkpoint=None, timings_s={"straight": 1.0})
    _print("m:f", report)
    out = capsys.readouterr().out
    assert "EQUAL (bitwise)" in out
    assert "  note: two runs from the same inputs drifted apart by up to 2e-07" in out


def test_the_phases_run_with_a_fixed_mkl_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainmedic.recipe.resume_test import _child_env

    monkeypatch.delenv("MKL_DYNAMIC", raising=False)
    monkeypatch.setenv("OMP_DYNAMIC", "TRUE")  # the user's own setting is kept
    env = _child_env()
    assert env["MKL_DYNAMIC"] == "FALSE" and env["OMP_DYNAMIC"] == "TRUE"


@pytest.mark.parametrize("tty", [True, False])
def test_cli_shows_progress_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch,
                                               tty: bool) -> None:
    from click.testing import CliRunner

    import trainmedic.cli.ckpt_resume as cli_resume
    import trainmedic.recipe.resume_test as rt
    from trainmedic.cli.main import cli

    def fake(config: ResumeTestConfig, *, progress: Any = None) -> Any:
        for phase in ("straight", "first", "resume"):
            if progress is not None:
                progress(rt._phase_line(phase, config))
        return rt.ResumeReport(equal=True, first_difference=None, differences=[], notes=[],
                               steps=config.steps, at=config.at, atol=None,
                               losses_straight=[1.0] * 6, losses_resumed=[1.0] * 4,
                               max_loss_diff=0.0, max_weight_diff=0.0, checkpoint=None,
                               timings_s={"straight": 1.0})

    monkeypatch.setattr(rt, "resume_test", fake)
    monkeypatch.setattr(cli_resume, "_stderr_is_tty", lambda: tty)
    result = CliRunner().invoke(cli, ["ckpt", "resume-test", "m:f", "--steps", "6", "--at",
                                      "2"])
    assert result.exit_code == 0, result.output
    assert "EQUAL (bitwise)" in result.stdout
    if not tty:
        assert result.stderr == ""  # pipes and tests stay clean
        return
    lines = result.stderr.splitlines()
    assert len(lines) == 3 and all(ln.startswith("resume-test [") for ln in lines)
    assert lines[0].endswith("s] straight run: 6 steps")
    assert lines[2].endswith("s] resumed run: load step 2 in a fresh process, then 4 steps")
