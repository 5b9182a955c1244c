"""The independent corpus (benchmarks/indep): written apart from the house, its labels are well
formed, every run is read without an error, and split A (the one analysed) keeps its healthy
runs quiet. Split B is never asserted on: it is only scored by
``benchmarks/corpus/score_corpus.py --root benchmarks/indep --split B``, so nothing is tuned
to it."""

from __future__ import annotations

import pytest
from corpus_checks import ROOT, check_labels, labelled_runs, read_and_score

INDEP = ROOT / "benchmarks" / "indep"


@pytest.fixture(scope="module")
def runs() -> dict:
    return labelled_runs(INDEP / "labels.json")


def test_labels_are_well_formed_and_both_splits_hold_healthy_and_faulty_runs(runs) -> None:
    check_labels(runs, INDEP / "runs", ("A", "B"), at_least=140, healthy=25, faulty=40)


def test_every_run_is_read_and_split_a_flags_no_healthy_run(runs) -> None:
    unread, flagged = read_and_score(runs, INDEP / "runs")
    assert unread == {}
    assert {n for n in flagged if runs[n]["split"] == "A"} == set()
