"""``trainmedic try`` as a user runs it: help with examples and the levers, the six-part
report with every figure labelled, ``--json`` (trainmedic.try/1), exit 2 on bad input."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from trainmedic.cli.main import cli, main
from trainmedic.cli.trial import try_cmd

TINY = ["--set", "batch_size=8", "--set", "context_len=16", "--rounds", "3",
        "--steps-per-round", "2"]


@pytest.fixture()
def registered() -> Iterator[None]:
    """``try`` under the real ``trainmedic`` group, for this test only."""
    added = "try" not in cli.commands
    if added:
        cli.add_command(try_cmd)
    yield
    if added:
        cli.commands.pop("try")


def test_help_has_examples_and_levers() -> None:
    res = CliRunner().invoke(try_cmd, ["--help"])
    assert res.exit_code == 0
    assert "Examples:" in res.output and "trainmedic try trainmedic.demo:recipe" in res.output
    for name in ("num_workers[=N]", "micro_batch[=K]", "activation_checkpointing", "adam8bit"):
        assert name in res.output


def test_text_report_has_the_six_parts() -> None:
    res = CliRunner().invoke(try_cmd, ["trainmedic.demo:recipe", "--lever", "foreach", *TINY])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith("machine: ")
    assert lines[3].startswith("[1] foreach against the recipe as is: ")
    for part in ("observed constraint", "evidence", "intervention", "displaced cost",
                 "before / after", "remaining uncertainty"):
        assert sum(line.startswith(f"  {part}") for line in lines) == 1, part
    after = next(line for line in lines if line.startswith("  before / after"))
    assert "(measured)" in after and "95% interval" in after
    assert "peak memory: not performed" in res.output  # CPU: said, not invented


def test_json_document() -> None:
    res = CliRunner().invoke(try_cmd, ["trainmedic.demo:recipe", "--lever", "bf16", *TINY,
                                       "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["schema"] == "trainmedic.try/1" and doc["recipe"] == "trainmedic.demo:recipe"
    assert doc["overrides"] == {"batch_size": 8, "context_len": 16}
    assert doc["config"]["rounds"] == 3 and doc["refused"] == []
    t = doc["trials"][0]
    assert t["lever"] == "bf16" and t["changes_semantics"] is True
    assert t["contract_changes"] == ["precision"] and t["counted_rounds"] == 2
    assert len(t["effect"]["ratios"]) == 2 and t["effect"]["verdict"] in (
        "faster", "slower", "inconclusive")
    assert t["basis"]["step_time_s"] == "measured"
    assert t["basis"]["peak_bytes"] == "not_performed" and t["baseline"]["peak_bytes"] is None
    assert t["baseline"]["samples_per_step"] == 8
    assert doc["machine"]["cores_usable"] >= 1


@pytest.mark.parametrize(("args", "message"), [
    (["--lever", "warp_drive"], "no lever 'warp_drive'"),
    (["--lever", "num_workers=lots"], "expected an integer from 0 to 64"),
    (["--lever", "micro_batch=3"], "not a multiple of 3"),
    (["--lever", "channels_last"], "no Conv2d"),
    (["--lever", "bf16", "--set", "batch_size=0"], "batch_size must be an integer"),
    (["--lever", "bf16", "--rounds", "2"], "--rounds"),
    ([], "--lever"),
])
def test_bad_input_exits_2(registered: None, capsys: pytest.CaptureFixture[str],
                           args: list[str], message: str) -> None:
    assert main(["try", "trainmedic.demo:recipe", *args, "--set", "batch_size=8"]
                if "--set" not in args else ["try", "trainmedic.demo:recipe", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_recipe_that_cannot_load_exits_2(registered: None,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["try", "no_such_module_xyz:recipe", "--lever", "bf16"]) == 2
    assert "no_such_module_xyz" in capsys.readouterr().err
