"""The fifth set of public logs (benchmarks/public5): 40 real logs from other people's
repositories and issues, labelled by hand by a helper that never read or ran trainmedic.
Split V (analysed) must be read, keep its healthy logs quiet, and keep finding the faults it
finds today (one golden list: a reader or detector change that loses one shows here). Split W
is never asserted on: it is only scored, by
``benchmarks/corpus/score_devlogs.py --logs benchmarks/public5 --split W``."""

from __future__ import annotations

import sys

import pytest
from corpus_checks import ROOT, check_labels, labelled_runs, read_and_score

PUBLIC5 = ROOT / "benchmarks" / "public5"
#: Read as "no training log" for now: only epoch numbers and "7.49G" cells, no header.
UNREAD = {"yolov7_1354_gpumem_flat_clean"}
#: V logs whose every labelled fault is found (reader and detector work of 2026-12-02).
FOUND = {"animateanyone101_data_stall", "apex318_lossscale_collapse",
         "keras4662_valacc_frozen", "keras_kanji_staged_counter_reset",
         "llamafactory2810_gradnan_loss0", "opennmt1072_ppl_nan", "tf12287_stuck_ln2",
         "tfmodels5817_loss_spikes", "torch2769_lstm_step_slowdown"}


@pytest.fixture(scope="module")
def logs() -> dict:
    return labelled_runs(PUBLIC5 / "labels.json")


def test_labels_are_well_formed_and_cite_their_source(logs) -> None:
    check_labels(logs, PUBLIC5, ("V", "W"), at_least=40, healthy=5, faulty=10)
    sources = (PUBLIC5 / "SOURCES.md").read_text()
    for name, lab in logs.items():
        assert name in sources and lab["source"].startswith("https://github.com/"), name


def test_split_v_is_read_and_flags_no_healthy_log(logs) -> None:
    unread, flagged = read_and_score(logs, PUBLIC5, ("V",))
    assert set(unread) <= UNREAD, unread
    assert flagged == set()


def test_split_v_faults_found_stay_found(logs) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))
    from score_devlogs import diagnose_path
    from scoring import score_run

    missed = []
    for name in sorted(FOUND):
        found, span, err = diagnose_path(PUBLIC5 / name)
        rs = score_run(name, logs[name], found, span)
        if err or rs.hits < rs.faults:
            missed.append(name)
    assert missed == []
