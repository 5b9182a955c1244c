"""The fourth independent corpus (benchmarks/indep4): 109 runs trained by a helper that never
read or ran trainmedic (tiny GPT with accumulation, GCN, temporal CNN, mixture of experts,
triplet, CTC, multi-task, distillation, deep MLP; Megatron, timm, mmengine, fairseq and 14 other
formats). Split G (analysed) is read and keeps its healthy runs quiet; split H is never opened:
only how many of its runs fail to read is asserted (no names)."""

from __future__ import annotations

import pytest
from corpus_checks import ROOT, check_labels, labelled_runs, read_and_score

INDEP4 = ROOT / "benchmarks" / "indep4"


@pytest.fixture(scope="module")
def runs() -> dict:
    return labelled_runs(INDEP4 / "labels.json")


def test_labels_are_well_formed_and_both_splits_hold_healthy_and_faulty_runs(runs) -> None:
    check_labels(runs, INDEP4 / "runs", ("G", "H"), at_least=100, healthy=20, faulty=30)


def test_split_g_is_read_and_flags_no_healthy_run(runs) -> None:
    unread, flagged = read_and_score(runs, INDEP4 / "runs", ("G",))
    assert unread == {}, unread
    assert flagged == set(), flagged


def test_split_h_is_read(runs) -> None:
    unread, _ = read_and_score(runs, INDEP4 / "runs", ("H",))
    assert len(unread) == 0, f"{len(unread)} runs of split H not read"
