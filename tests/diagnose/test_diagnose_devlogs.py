"""Diagnoses of the 12 real public logs in tests/data/devlogs (see README.md there).

These are a development set, not the target: rules were chosen from how training behaves in
general and checked against these. Problem logs must be found at the right onset; clean logs
must get nothing at warning or above.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from trainmedic.diagnose import Diagnosis, diagnose
from trainmedic.diagnose.finding import Finding
from trainmedic.run import load_run

DEVLOGS = Path(__file__).resolve().parents[1] / "data" / "devlogs"
NAMES = sorted(p.name for p in DEVLOGS.iterdir() if p.is_dir())
CLEAN = ["hf-spam-dense-eval", "pl-slm", "yolo-fire", "d2-waste", "d2-dup-iter"]


@cache
def diag(name: str) -> Diagnosis:
    return diagnose(load_run(str(DEVLOGS / name)))


def one(name: str, symptom: str) -> Finding:
    fs = [f for f in diag(name).findings if f.symptom == symptom]
    assert fs, f"{name}: no {symptom} in {[f.symptom for f in diag(name).findings]}"
    return fs[0]


def loud(name: str) -> list[str]:
    return [f"{f.symptom}/{f.severity}@{f.onset_step}" for f in diag(name).findings
            if f.level >= 1]


def test_all_twelve_present() -> None:
    assert len(NAMES) == 12


@pytest.mark.parametrize("name", NAMES)
def test_no_detector_crashes(name: str) -> None:
    d = diag(name)
    assert not [c for c in d.checks_not_run if c.reason.startswith("internal error")]
    for f in d.findings:
        assert f.causes and f.interventions


@pytest.mark.parametrize("name", CLEAN)
def test_clean_logs_get_nothing_at_warning(name: str) -> None:
    assert loud(name) == []


def test_detectron_warmup_longer_than_the_run_is_info() -> None:
    """d2-dup-iter's lr rises through all 300 iterations of a finished run (a warm-up longer
    than the run) while the loss falls 2.17 -> 0.35: named, at info (it cost nothing
    visible)."""
    f = one("d2-dup-iter", "lr_schedule_anomaly")
    assert f.severity == "info"


def test_detectron_duplicated_first_iteration_is_info() -> None:
    f = one("d2-dup-iter", "resume_discontinuity")
    assert f.severity == "info" and f.onset_step == 19


def test_ner_overfit_onset_at_val_minimum() -> None:
    f = one("hf-ner-overfit", "overfitting")
    assert f.level >= 1 and f.onset_step == 5600
    assert any("5600" in i.action for i in f.interventions)  # early stopping at best step


def test_pendulum_spike_recovers() -> None:
    f = one("pl-pendulum-spike", "loss_spike")
    assert f.severity == "warning" and f.onset_step == 16149
    assert f.end_step is not None and f.end_step <= 16149 + 100
    assert loud("pl-pendulum-spike") == ["loss_spike/warning@16149"]
    assert f.causes[0].cause.startswith("a bad batch")


def test_pinn_goes_nan_at_218() -> None:
    f = one("pl-pinn-nan", "nonfinite_loss")
    assert f.severity == "error" and f.onset_step == 218
    assert loud("pl-pinn-nan") == ["nonfinite_loss/error@218"]


def test_qa_is_flat_at_chance() -> None:
    f = one("hf-qa-chance", "flat_loss")
    assert f.level >= 1 and "ln(4)" in f.summary
    assert "4 classes" in f.causes[0].cause


def test_t5_grad_norm_spike_is_info_because_loss_did_not_react() -> None:
    f = one("hf-t5-noeval", "exploding_gradients")
    assert f.severity == "info" and f.onset_step == 190000
    assert loud("hf-t5-noeval") == []


def test_yolo_weed_overfits_after_early_minimum() -> None:
    f = one("yolo-weed-earlystop", "overfitting")
    assert f.level >= 1 and f.onset_step <= 3


def test_cpt_mild_upturn_is_reported_at_info() -> None:
    f = one("hf-cpt-rouge", "overfitting")
    assert f.severity == "info" and f.onset_step == 3294
    assert loud("hf-cpt-rouge") == []
