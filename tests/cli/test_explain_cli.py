"""``trainmedic explain``: text and JSON output, exit codes, and errors as one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from trainmedic.cli.explain import explain

DATA = Path(__file__).resolve().parents[1] / "data" / "explain"
HEALTHY = Path(__file__).resolve().parents[1] / "data" / "devlogs" / "pl-slm" / "metrics.csv"


def test_text_report_puts_the_root_first_with_evidence_and_next_step() -> None:
    r = CliRunner().invoke(explain, [str(DATA / "gloo_raise.log")])
    assert r.exit_code == 1, r.output  # a failure recognised, as diagnose's --fail-on error
    lines = r.output.splitlines()
    assert lines[1].startswith("  root failure: python_exception (rank 1)")
    assert "next step:" in r.output and "read from the log (measured)" in r.output
    assert "not checked" in r.output and "gloo_raise.log:22:" in r.output


def test_json_document_has_the_schema_and_the_job_root() -> None:
    r = CliRunner().invoke(explain, [str(DATA / "nccl_timeout_basicsr_737.log"),
                                     str(DATA / "cuda_illegal_access_pytorch_34220.log"),
                                     "--json"])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.output)
    assert doc["schema"] == "trainmedic.explain/1" and doc["recognised"] is True
    assert doc["job_root"]["class"] == "cuda_illegal_access"
    root = doc["logs"][0]["root"]
    assert root["class"] == "nccl_timeout" and root["fields"]["first_rank"] == 0
    assert root["fields_basis"] == "measured"
    assert all(c["basis"] == "not_checked" for c in root["causes"])


def test_a_healthy_log_says_nothing_recognised_and_exits_0() -> None:
    r = CliRunner().invoke(explain, [str(HEALTHY)])
    assert r.exit_code == 0 and "nothing recognised" in r.output
    r = CliRunner().invoke(explain, [str(HEALTHY), "--fail-on", "info"])
    assert r.exit_code == 0


def test_fail_on_never_exits_0_on_a_failure() -> None:
    log = str(DATA / "slurm_timeout_zetta_671.log")
    r = CliRunner().invoke(explain, [log, "--fail-on", "never"])
    assert r.exit_code == 0 and "slurm_timeout" in r.output
    r = CliRunner().invoke(explain, [log])
    assert r.exit_code == 1 and "slurm_timeout" in r.output


def test_help_has_examples() -> None:
    r = CliRunner().invoke(explain, ["--help"])
    assert r.exit_code == 0 and "Examples:" in r.output and "trainmedic explain" in r.output


@pytest.fixture
def registered():
    from trainmedic.cli.main import cli

    added = "explain" not in cli.commands
    if added:
        cli.add_command(explain)
    yield
    if added:
        cli.commands.pop("explain", None)


def test_a_missing_file_is_exit_2_with_one_line(registered, tmp_path: Path, capsys) -> None:
    from trainmedic.cli.main import main

    assert main(["explain", str(tmp_path / "missing.log")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.log" in err[0] and "cannot open" in err[0]
    assert main(["explain"]) == 2  # no LOG: bad usage
