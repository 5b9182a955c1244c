"""``trainmedic demo`` end to end through the entry point: trains for real, then diagnoses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmedic.cli.main import main


def test_demo_spike_names_the_fault(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--fault", "spike", "--out", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert any(f["symptom"] == "loss_spike" for f in doc["findings"])
    assert (out / "report.html").is_file() or any(out.rglob("report.html"))


def test_demo_bad_steps_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--steps", "0"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_demo_unknown_fault(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--fault", "gremlins"]) == 2
