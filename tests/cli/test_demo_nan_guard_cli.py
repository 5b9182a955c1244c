"""``trainmedic demo --fault diverge`` through the entry point: the NaN guard replays the first
non-finite step (the demo passes ``replay=`` to ``w.step``) and names a module of the demo
model, in the run store's ``nonfinite`` event and in the findings JSON and the HTML report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmedic.cli.main import main
from trainmedic.run.loader import load_paths

#: The diverge fault warms up over max(5, steps // 10) steps, then holds lr 1.0: with 20 steps
#: the loss overflows to NaN at step ~15, leaving a few non-finite steps to record.
STEPS = 20


@pytest.fixture(autouse=True)
def _single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def test_diverge_nan_guard_names_a_demo_module(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from trainmedic.demo.model import CharTransformer

    out = tmp_path / "diverge"
    assert main(["demo", "--fault", "diverge", "--steps", str(STEPS), "--out", str(out),
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)

    run = load_paths([str(out)])
    events = run.events_of("nonfinite")
    assert events, "the diverge demo never went non-finite"
    first = events[0]
    assert first.step < STEPS
    # Localized by the replay; without replay= it would read "not_localized" / None.
    assert first.data.get("where") in ("forward", "backward"), first.data
    module = first.data.get("module")
    names = dict(CharTransformer(10).named_modules())
    assert isinstance(module, str) and module != "" and module in names, module
    assert module.startswith("blocks."), module

    # The findings JSON carries the guard's answer into the incident's finding: a NaN loss,
    # or (where the gradients overflowed first and the guard's skipped updates kept the loss
    # finite: it depends on the CPU's kernels) the divergence that folded the NaN gradients.
    # A climb that began well before the first NaN is reported beside it, at its own onset.
    incident = {f["symptom"]: f for f in doc["findings"]
                if f["symptom"] in ("nonfinite_loss", "divergence", "nonfinite_grad")}
    assert "nonfinite_grad" not in incident, list(incident)
    assert all(f["severity"] == "error" for f in incident.values())
    broke = incident.get("nonfinite_loss") or incident["divergence"]
    assert f"`{module}`" in broke["summary"]
    if "nonfinite_loss" in incident:
        assert incident["nonfinite_loss"]["onset_step"] == first.step
    if "divergence" in incident:
        assert incident["divergence"]["onset_step"] < first.step
    reports = list(out.rglob("report.html"))
    assert reports and module in reports[0].read_text(encoding="utf-8")
