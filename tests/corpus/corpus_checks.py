"""What the labelled-set tests (test_indep*_corpus.py, test_public*_set.py) check, written
once: the labels are well formed, every log of a set is read, and an analysed split keeps its
healthy runs quiet. Scoring goes through benchmarks/corpus (the same rule as the benchmarks)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from trainmedic.diagnose.registry import SYMPTOMS

ROOT = Path(__file__).resolve().parents[2]


def labelled_runs(labels: Path) -> dict:
    """The ``runs`` of a labels.json, after checking its rule is the dev-logs' one."""
    data = json.loads(labels.read_text())
    assert "tolerated" in data["_rule"] and "onset_step" in data["_rule"]
    return data["runs"]


def check_labels(runs: dict, folder: Path, splits: tuple[str, ...], *, at_least: int,
                 healthy: int, faulty: int) -> None:
    """Every run in a known split, with its folder and known symptom codes; each split holds
    >= ``healthy`` healthy and >= ``faulty`` faulty runs."""
    assert len(runs) >= at_least
    for name, lab in runs.items():
        assert lab["split"] in splits, name
        assert (folder / name).is_dir(), name
        for f in lab["faults"] + lab["tolerated"]:
            assert f["symptom"] in SYMPTOMS, (name, f)
    for split in splits:
        labs = [v for v in runs.values() if v["split"] == split]
        assert sum(1 for v in labs if not v["faults"]) >= healthy
        assert sum(1 for v in labs if v["faults"]) >= faulty


def read_and_score(runs: dict, folder: Path, splits: tuple[str, ...] | None = None
                   ) -> tuple[dict[str, str], set[str]]:
    """Diagnose every run (of ``splits``, default all): ``({name: error}`` of the runs not
    read, the healthy runs flagged at warning or above)."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from score_devlogs import diagnose_path
    from scoring import score_run

    unread: dict[str, str] = {}
    flagged: set[str] = set()
    for name, lab in sorted(runs.items()):
        if splits is not None and lab["split"] not in splits:
            continue
        found, span, err = diagnose_path(folder / name)
        if err:
            unread[name] = err[:160]
        elif score_run(name, lab, found, span).flagged:
            flagged.add(name)
    return unread, flagged
