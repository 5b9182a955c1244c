"""The second independent corpus (benchmarks/indep2): 125 runs trained by a helper that never
read or ran trainmedic, with other families, bugs and log formats than benchmarks/indep. Its
labels are well formed, every run is read without an error, and split C (the one analysed)
keeps its healthy runs quiet but for the two whose labels disagree with trainmedic by design
(an evaluation timed inside every 100th step, a 5% validation rise held over half the run).
Split D is never asserted on: it is only scored by
``benchmarks/corpus/score_corpus.py --root benchmarks/indep2 --split D``."""

from __future__ import annotations

import pytest
from corpus_checks import ROOT, check_labels, labelled_runs, read_and_score

INDEP2 = ROOT / "benchmarks" / "indep2"
#: Healthy by their labels, flagged by trainmedic on purpose (see the module docstring).
KNOWN_DISAGREEMENTS = {"h_vae_jsonl", "h_mlpbin_kerascon"}


@pytest.fixture(scope="module")
def runs() -> dict:
    return labelled_runs(INDEP2 / "labels.json")


def test_labels_are_well_formed_and_both_splits_hold_healthy_and_faulty_runs(runs) -> None:
    check_labels(runs, INDEP2 / "runs", ("C", "D"), at_least=120, healthy=20, faulty=30)


def test_every_run_is_read_and_split_c_keeps_its_healthy_runs_quiet(runs) -> None:
    unread, flagged = read_and_score(runs, INDEP2 / "runs")
    assert unread == {}
    flagged_c = {n for n in flagged if runs[n]["split"] == "C"}
    assert flagged_c <= KNOWN_DISAGREEMENTS, flagged_c - KNOWN_DISAGREEMENTS
