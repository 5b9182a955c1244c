"""The independent corpus (benchmarks/indep): written apart from the house, its labels are well
formed, every run is read without an error, and split A (the one analysed) keeps its healthy
runs quiet. Split B is never asserted on: it is only scored by
``benchmarks/corpus/score_corpus.py --root benchmarks/indep --split B``, so nothing is tuned
to it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from trainmedic.diagnose.registry import SYMPTOMS

ROOT = Path(__file__).resolve().parents[2]
INDEP = ROOT / "benchmarks" / "indep"


@pytest.fixture(scope="module")
def runs() -> dict:
    data = json.loads((INDEP / "labels.json").read_text())
    assert "tolerated" in data["_rule"] and "onset_step" in data["_rule"]
    return data["runs"]


def test_labels_are_well_formed_and_both_splits_hold_healthy_and_faulty_runs(runs) -> None:
    assert len(runs) >= 140
    for name, lab in runs.items():
        assert lab["split"] in ("A", "B"), name
        assert (INDEP / "runs" / name).is_dir(), name
        for f in lab["faults"] + lab["tolerated"]:
            assert f["symptom"] in SYMPTOMS, (name, f)
    for split in ("A", "B"):
        labs = [v for v in runs.values() if v["split"] == split]
        assert sum(1 for v in labs if not v["faults"]) >= 25
        assert sum(1 for v in labs if v["faults"]) >= 40


def test_every_run_is_read_and_split_a_flags_no_healthy_run(runs) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from score_devlogs import diagnose_path
    from scoring import score_run

    flagged = []
    for name, lab in sorted(runs.items()):
        found, span, err = diagnose_path(INDEP / "runs" / name)
        assert not err, (name, err)
        if lab["split"] == "A" and score_run(name, lab, found, span).flagged:
            flagged.append(name)
    assert flagged == []
