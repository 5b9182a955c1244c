"""The trained corpus (benchmarks/corpus): its labels are well formed and complete, and
diagnosing a fixed sample of its tune split neither crashes nor flags a healthy run.

``MIN_RECALL`` is a regression bar on the tune sample, set below what the detectors reach
there (0.93 when it was set); the holdout split is never asserted on, only reported by
``benchmarks/corpus/score_corpus.py``, so nothing is tuned to it.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "benchmarks" / "corpus"
LABELS = CORPUS / "labels.json"

MIN_RECALL = 0.85
"""Recall bar on the tune sample below: a regression guard under the 0.93 measured when it was
set (the issue's goal, 0.95, is for the never-tuned split, reported by score_corpus.py)."""

SAMPLE_SIZE = 25
SYMPTOMS = {
    "nonfinite_loss", "loss_spike", "divergence", "flat_loss", "plateau", "oscillation",
    "overfitting", "exploding_gradients", "vanishing_gradients", "input_bound",
    "step_time_outliers", "memory_growth", "straggler", "nonfinite_grad", "nan_masked_in_logs",
    "loss_scale_collapse", "grad_accum_misnormalization", "resume_discontinuity", "dead_units",
    "saturated_activations", "throughput_regression", "lr_schedule_anomaly",
}
FAMILY_GROUP = {"mlp": "mlp", "mlp_deep": "mlp", "cnn": "cnn_bn", "resnet": "resnet_vit",
                "vit": "resnet_vit", "chartf": "char_transformer", "gru": "rnn", "lstm": "rnn",
                "rnn": "rnn", "ae": "mse", "reg": "mse"}


def _added() -> set[str]:
    """The second batch of runs (``specs.ADDED``): tune-only by declaration, outside the
    stratified hash draw and outside the fixed regression sample below."""
    sys.path.insert(0, str(CORPUS))
    from specs import ADDED

    return set(ADDED)


@pytest.fixture(scope="module")
def labels() -> dict:
    data = json.loads(LABELS.read_text())
    assert isinstance(data.get("_rule"), str) and "max(20 steps, 10% of the run)" in data["_rule"]
    return data["runs"]


def _entries_ok(entries: list) -> None:
    for e in entries:
        assert e["symptom"] in SYMPTOMS, e
        assert "onset_step" in e
        if e.get("onset_range") is not None:
            lo, hi = e["onset_range"]
            assert lo <= hi
        for s in e.get("event_steps", []):
            assert isinstance(s, (int, float))


def test_labels_well_formed_and_runs_exist(labels):
    for name, lab in labels.items():
        assert (CORPUS / "runs" / name).is_dir(), f"{name}: no run folder"
        assert any(p.is_file() for p in (CORPUS / "runs" / name).rglob("*")), name
        assert lab["split"] in ("tune", "holdout"), name
        assert set(lab) >= {"faults", "tolerated", "notes", "family", "fault", "format"}, name
        _entries_ok(lab["faults"])
        _entries_ok(lab["tolerated"])
    on_disk = {p.name for p in (CORPUS / "runs").iterdir() if p.is_dir()}
    assert on_disk == set(labels), f"folders without labels: {sorted(on_disk - set(labels))}"


def test_counts_meet_the_bars(labels):
    families = {FAMILY_GROUP[v["family"]] for v in labels.values()}
    kinds = {v["fault"] for v in labels.values() if v["fault"] != "none"}
    healthy = [k for k, v in labels.items() if v["fault"] == "none" and not v["faults"]]
    assert len(families) >= 6, families
    assert len(kinds) >= 25, kinds
    assert len(healthy) >= 40
    assert len({v["format"] for v in labels.values()}) >= 10


def test_splits_are_stratified(labels):
    splits = Counter(v["split"] for v in labels.values())
    assert splits["tune"] and splits["holdout"]
    # 0.25, not 0.3: the second batch of runs (specs.ADDED, ~80) is tune-only by design, so
    # that the detector engineer has more data to develop on while the holdout split (53 runs,
    # ~40% of the first 121) stays exactly as it was; that brings its share to ~0.26
    assert 0.25 <= splits["holdout"] / len(labels) <= 0.5, splits
    added = _added()
    assert all(labels[k]["split"] == "tune" for k in added)
    # stratification is a property of the hash draw: the declared tune-only runs cannot put a
    # kind (or family) into holdout, so they are left out of the per-kind check
    drawn = {k: v for k, v in labels.items() if k not in added}
    by_kind: dict[str, set] = {}
    for v in drawn.values():
        by_kind.setdefault(v["fault"], set()).add(v["split"])
    counts = Counter(v["fault"] for v in drawn.values())
    for kind, sp in by_kind.items():
        if counts[kind] >= 2:
            assert sp == {"tune", "holdout"}, kind
    for fam in {v["family"] for v in drawn.values()}:
        runs = [v for v in drawn.values() if v["family"] == fam]
        if len(runs) >= 2:
            assert {v["split"] for v in runs} == {"tune", "holdout"}, fam


def _sample(labels: dict) -> list[str]:
    """A fixed sample of the tune split: every healthy run of one seed set plus fault runs,
    chosen by name order so the test is the same on every machine. Drawn from the first 121
    runs only (the added tune-only runs are scored by score_corpus.py), so that adding runs
    does not move this regression guard."""
    added = _added()
    tune = sorted(k for k, v in labels.items() if v["split"] == "tune" and k not in added)
    healthy = [k for k in tune if not labels[k]["faults"]]
    faulty = [k for k in tune if labels[k]["faults"]]
    pick = healthy[::max(1, len(healthy) // 12)][:12]
    pick += faulty[::max(1, len(faulty) // (SAMPLE_SIZE - len(pick)))][:SAMPLE_SIZE - len(pick)]
    return pick


def test_tune_sample_scores_without_crash_and_no_healthy_run_flagged(labels):
    sys.path.insert(0, str(CORPUS))
    sys.path.insert(0, str(CORPUS.parent))
    from score_devlogs import diagnose_path
    from scoring import score_run, total

    sample = _sample(labels)
    assert len(sample) == SAMPLE_SIZE
    scores, flagged = [], []
    for name in sample:
        found, span, err = diagnose_path(CORPUS / "runs" / name)
        rs = score_run(name, labels[name], found, span)
        scores.append(rs)
        if rs.flagged:
            flagged.append(f"{name}: {rs.false}")
    assert not flagged, "healthy runs with a warning-or-above finding not tolerated: " + \
        "; ".join(flagged)
    assert total(scores).recall >= MIN_RECALL
