"""The fourth set of public logs (benchmarks/public4): 40 real logs from other people's
repositories and issues, labelled by hand by a helper that never read or ran trainmedic.
Split T (analysed) must be read without an error and keep its healthy logs quiet. Split U is
never asserted on: it is only scored, by
``benchmarks/corpus/score_devlogs.py --logs benchmarks/public4 --split U``, so nothing is
tuned to it."""

from __future__ import annotations

import pytest
from corpus_checks import ROOT, check_labels, labelled_runs, read_and_score

PUBLIC4 = ROOT / "benchmarks" / "public4"
#: Read as "no training log" for now (known gaps of the readers).
UNREAD: set[str] = set()


@pytest.fixture(scope="module")
def logs() -> dict:
    return labelled_runs(PUBLIC4 / "labels.json")


def test_labels_are_well_formed_and_cite_their_source(logs) -> None:
    check_labels(logs, PUBLIC4, ("T", "U"), at_least=40, healthy=5, faulty=10)
    sources = (PUBLIC4 / "SOURCES.md").read_text()
    for name, lab in logs.items():
        assert name in sources and lab["source"].startswith("https://github.com/"), name


def test_split_t_is_read_and_flags_no_healthy_log(logs) -> None:
    unread, flagged = read_and_score(logs, PUBLIC4, ("T",))
    assert set(unread) <= UNREAD, unread
    assert flagged == set()
