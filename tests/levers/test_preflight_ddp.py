"""``ddp_equivalence`` on 2 spawned gloo ranks: the healthy zoo recipe passes, a summed loss
and BatchNorm without SyncBatchNorm fail with their cause named (tests/levers/zoo.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmedic.levers.preflight import PreflightReport
from trainmedic.levers.preflight_ddp import ddp_equivalence, with_ddp_check

ZOO = Path(__file__).parent / "zoo.py"


@pytest.mark.parametrize(("factory", "overrides", "status", "needle"), [
    ("healthy", {}, "pass", "relative L2 error"),
    ("sum_loss", {}, "fail", "the loss is a sum"),
    ("healthy", {"batchnorm": True}, "fail", "SyncBatchNorm"),
])
def test_ddp_equivalence(factory: str, overrides: dict[str, object], status: str,
                         needle: str) -> None:
    result = ddp_equivalence(f"{ZOO}:{factory}", overrides, timeout_s=120)
    assert result.status == status, result
    assert needle in result.summary + (result.fix or "")
    if status == "pass":
        err = result.evidence[0].value
        assert isinstance(err, float) and err <= 1e-4


def test_a_recipe_that_fails_to_load_in_the_ranks_is_a_failure_not_a_hang() -> None:
    report = with_ddp_check(PreflightReport(results=(), passed=True),
                            f"{ZOO}:no_such_factory", {}, timeout_s=60)
    (result,) = report.results
    assert result.status == "fail" and not report.passed
    assert "no_such_factory" in result.summary


def test_cli_adds_the_check_with_ddp(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from trainmedic.cli.main import main

    rc = main(["check", f"{ZOO}:sum_loss", "--only", "label_range", "--ddp", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and not doc["passed"]
    assert [c["name"] for c in doc["checks"]] == ["label_range", "ddp_equivalence"]
    assert doc["checks"][1]["status"] == "fail"
