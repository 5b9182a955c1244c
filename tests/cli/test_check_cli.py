"""``trainmedic check RECIPE``: the command object directly (CliRunner), and through the CLI's
entry point for the exit-2 paths (registered here for the test, as cli/main.py will)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from trainmedic.cli.check import check
from trainmedic.cli.main import cli, main

ZOO = Path(__file__).resolve().parents[1] / "levers" / "zoo.py"


@pytest.fixture()
def registered() -> Iterator[None]:
    added = "check" not in cli.commands
    if added:
        cli.add_command(check)
    yield
    if added:
        cli.commands.pop("check", None)


def test_a_healthy_recipe_passes_with_one_line_per_check() -> None:
    res = CliRunner().invoke(check, [f"{ZOO}:healthy"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert "9 checks, 8 passed, 0 failed, 1 skipped" in lines[0]
    status = [ln.split()[:2] for ln in lines if ln[:4] in ("PASS", "FAIL", "SKIP")]
    assert len(status) == 9
    assert ["SKIP", "mixed_precision"] in status
    assert "[measured" in res.output and "[estimated" in res.output


def test_a_failure_exits_1_with_its_evidence_and_fix() -> None:
    res = CliRunner().invoke(check, [f"{ZOO}:sum_loss", "--only", "microbatch_equivalence"])
    assert res.exit_code == 1, res.output
    assert "FAIL  microbatch_equivalence" in res.output
    assert "relative L2 error of the gradient, 2 x 8 vs 1 x 16: 0.5 [measured; pass: <= " \
        "0.0001]" in res.output
    assert "fix: return the mean over the micro-batch" in res.output


def test_json_is_the_report_document_and_set_reaches_the_recipe() -> None:
    res = CliRunner().invoke(check, ["trainmedic.demo:recipe", "--set", "batch_size=4",
                                     "--set", "context_len=16", "--set", "grad_accum=2",
                                     "--only", "microbatch_equivalence", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["schema"] == "trainmedic.preflight/1" and doc["passed"] is True
    (only,) = doc["checks"]
    assert only["name"] == "microbatch_equivalence" and "2 x 2 vs 1 x 4" in only["summary"]


def test_bad_usage_exits_2_with_one_line(registered: None,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", f"{ZOO}:no_such_recipe"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no attribute 'no_such_recipe'" in err[0]
    assert main(["check", f"{ZOO}:healthy", "--set", "no_such_arg=1"]) == 2
    assert "no_such_arg" in capsys.readouterr().err
    assert main(["check", f"{ZOO}:healthy", "--only", "nope"]) == 2
    assert "expected one of label_range" in capsys.readouterr().err
    assert main(["check", f"{ZOO}:sum_loss", "--only", "init_loss"]) == 1


def test_help_has_examples() -> None:
    res = CliRunner().invoke(check, ["--help"])
    assert res.exit_code == 0 and "Examples:" in res.output
    assert "trainmedic check trainmedic.demo:recipe" in res.output
