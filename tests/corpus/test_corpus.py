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
    """The second to fifth batches of runs (``specs.ADDED``, ``specs.SEVERITY`` and
    ``specs.HEALTHY``, tune-only by declaration, and ``specs.VARIANTS``, drawn into tune and
    holdout2 by ``variants.extend``): outside the stratified hash draw of the first batch and
    outside the fixed regression sample below."""
    sys.path.insert(0, str(CORPUS))
    from specs import ADDED, HEALTHY, SEVERITY, VARIANTS

    return set(ADDED) | set(VARIANTS) | set(SEVERITY) | set(HEALTHY)


def _variants() -> set[str]:
    sys.path.insert(0, str(CORPUS))
    from specs import VARIANTS

    return set(VARIANTS)


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
        assert lab["split"] in ("tune", "holdout", "holdout2"), name
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
    assert splits["tune"] and splits["holdout"] and splits["holdout2"]
    variants = _variants()
    added = _added() - variants
    assert all(labels[k]["split"] == "tune" for k in added)
    # the first batch: ~40% holdout by the hash draw, stratified by kind and family (the
    # declared tune-only runs cannot put a kind into holdout, so they are left out)
    first = {k: v for k, v in labels.items() if k not in added and k not in variants}
    assert 0.3 <= sum(v["split"] == "holdout" for v in first.values()) / len(first) <= 0.5
    _stratified(first, {"tune", "holdout"}, healthy_only=False)
    # the third batch: half of each kind (healthy runs: each family) in holdout2
    third = {k: labels[k] for k in variants}
    assert all(v["split"] in ("tune", "holdout2") for v in third.values())
    assert 0.4 <= sum(v["split"] == "holdout2" for v in third.values()) / len(third) <= 0.6
    _stratified(third, {"tune", "holdout2"}, healthy_only=True)


def _stratified(runs: dict, both: set, *, healthy_only: bool) -> None:
    """Every kind with >= 2 runs has runs in both splits; so has every family (its healthy
    runs, where the draw was per family of healthy runs)."""
    by_kind: dict[str, set] = {}
    for v in runs.values():
        by_kind.setdefault(v["fault"], set()).add(v["split"])
    counts = Counter(v["fault"] for v in runs.values())
    for kind, sp in by_kind.items():
        if counts[kind] >= 2:
            assert sp == both, kind
    for fam in {v["family"] for v in runs.values()}:
        group = [v for v in runs.values() if v["family"] == fam
                 and (v["fault"] == "none" or not healthy_only)]
        if len(group) >= 2:
            assert {v["split"] for v in group} == both, fam


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


@pytest.mark.parametrize(("name", "loud", "quiet"), [
    # a GRU on class-sorted data: inside each one-class block the loss falls to ~1e-6 and
    # jumps back to ~1e-2 at the next class; 1e4x in log space is not a divergence
    ("gru-class_sorted-wbjson-s10", {"oscillation"}, {"divergence"}),
    # no zero_grad, a print log whose "Step [95/200]" goes on across epochs: the loss swings
    # by orders of magnitude as it climbs (an accuracy is logged: a cross-entropy)
    ("cnn-no_zero_grad-print-s21", {"divergence"}, set()),
    # weight decay 50: the loss falls, then every weight decays and it returns to ln 4
    ("resnet-wd_high-ns-s21", {"flat_loss"}, {"divergence", "plateau"}),
    # a loss printed with 4 decimals reaches 0.0000: not frozen weights
    ("mlp-ok-tozero-print-s31", set(), {"plateau"}),
    # a summed loss blows up early; the validation loss follows: one incident, the val rise
    # is the divergence seen on the evaluations (a related entry), not overfitting
    ("mlp-summed_loss-sev-ns-s40", {"divergence"}, {"overfitting"}),
    # class-sorted data: the loss ends on one more swing up, not a divergence
    ("gru-class_sorted-sev-ns-s50", {"oscillation"}, {"divergence"}),
    # a GRU at chance that starts to learn: its gradients grow tenfold as the loss falls
    ("gru-slow_loader-sev-units-s42", {"input_bound"}, {"exploding_gradients"}),
])
def test_trained_runs_read_as_their_cause(name, loud, quiet):
    sys.path.insert(0, str(CORPUS))
    sys.path.insert(0, str(CORPUS.parent))
    from score_devlogs import diagnose_path

    found, _span, err = diagnose_path(CORPUS / "runs" / name)
    assert not err
    got = {sym for sym, sev, _ in found if sev in ("warning", "error")}
    assert loud <= got and not (quiet & got), (name, found)
