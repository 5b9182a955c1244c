"""The corpus: real log excerpts from public issues and logs made with gloo, each named in
SOURCES.json with its expected classes and root (a new excerpt there is a new test case)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmedic.explain import CLASSES, explain_log
from trainmedic.explain.log_text import read_log

DATA = Path(__file__).resolve().parents[1] / "data" / "explain"
SOURCES: dict[str, dict] = json.loads((DATA / "SOURCES.json").read_text())


def test_every_excerpt_is_indexed_and_every_index_entry_exists() -> None:
    on_disk = {p.name for p in DATA.glob("*.log")}
    assert on_disk == set(SOURCES)
    for name, entry in SOURCES.items():
        assert entry["url"] and entry["root"] in entry["classes"], name
        assert set(entry["classes"]) <= set(CLASSES), name


def test_every_class_has_at_least_one_real_excerpt() -> None:
    # from public issues (the generated gloo logs do not count)
    real = {c for e in SOURCES.values() if e["url"].startswith("https://") for c in e["classes"]}
    assert real == set(CLASSES)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_excerpt_is_named_with_its_classes_and_root(name: str) -> None:
    report = explain_log(DATA / name)
    assert sorted({i.code for i in report.incidents}) == SOURCES[name]["classes"]
    root = report.root_incident
    assert root is not None and root.code == SOURCES[name]["root"]
    for inc in report.incidents:  # evidence lines are the log's own lines
        lines = read_log(DATA / name).lines
        assert inc.evidence and all(lines[e.line - 1].rstrip()[:400] == e.text
                                    for e in inc.evidence)
        assert inc.next_steps and inc.causes


def _root(name: str):
    root = explain_log(DATA / name).root_incident
    assert root is not None
    return root


def test_nccl_timeout_first_rank_is_the_earliest_stamp_not_the_first_line() -> None:
    root = _root("nccl_timeout_basicsr_737.log")  # rank 1 prints first, rank 0 is earlier
    assert root.fields["first_rank"] == 0 and root.fields["first_rank_by"] == "earliest time stamp"
    assert (root.fields["op"], root.fields["seq_num"], root.fields["timeout_ms"]) == (
        "ALLREDUCE", 808, 600000)
    assert root.fields["ranks_timed_out"] == [0, 1, 2]


def test_nccl_timeout_without_stamps_takes_the_first_line() -> None:
    root = _root("nccl_timeout_ofa_271.log")
    assert root.fields["first_rank"] == 1 and root.fields["first_rank_by"] == "first appearing line"
    assert root.fields["timeout_ms"] == 1800000


def test_nccl_timeout_with_two_ops_at_one_seq_is_called_a_desync() -> None:
    root = _root("nccl_timeout_nccl_1409.log")
    assert root.fields["collectives_seen"] == ["ALLREDUCE #80078", "BROADCAST #80078"]
    assert "desync" in root.causes[0].cause


def test_device_assert_names_the_assertion_and_the_launch_blocking_step() -> None:
    root = _root("cuda_device_assert_unet_375.log")
    assert root.fields["assertion"] == "t >= 0 && t < n_classes"
    assert "CUDA_LAUNCH_BLOCKING=1" in root.next_steps[0] and "label range" in root.next_steps[0]
    assert "vocabulary" in _root("cuda_device_assert_pytorch_29966.log").causes[0].cause


def test_xid_gets_its_catalogue_meaning() -> None:
    root = _root("gpu_xid_nvsentinel_155.log")
    assert root.fields["xid"] == 79 and "fallen off the bus" in root.fields["meaning"]
    codes = [i.fields["xid"] for i in explain_log(DATA / "gpu_xid_gpud_46.log").incidents]
    assert codes == [13, 109]


def test_cuda_oom_figures_come_from_memory_oom_parser() -> None:
    from trainmedic.memory.oom_message import parse_oom

    text = (DATA / "cuda_oom_generateu_10.log").read_text()
    report = parse_oom(text)
    assert report is not None
    root = _root("cuda_oom_generateu_10.log")
    assert root.fields["requested_bytes"] == report.requested_bytes
    assert root.fields["total_bytes"] == report.total_bytes


def test_sigkill_alone_says_a_manual_kill_is_possible() -> None:
    root = _root("gloo_sigkill.log")
    assert root.code == "host_oom_kill" and root.fields["seen"].startswith("SIGKILL only")
    assert any("manual" in c.cause and c.likelihood == "low" for c in root.causes)
    kernel = _root("host_oom_kill_tranx_41.log")
    assert kernel.fields["pid"] == 25315 and kernel.causes[0].likelihood == "high"


def test_torchrun_root_cause_block_is_read() -> None:
    root = _root("torchrun_child_failed_minigpt4_237.log")
    assert (root.fields["failed_rank"], root.fields["exitcode"], root.fields["host"]) == (
        0, 1, "n136-117-136.byted.org")
    inc = next(i for i in explain_log(DATA / "gloo_record.log").incidents
               if i.code == "torchrun_child_failed")
    assert inc.fields["failed_rank"] == 1
    assert inc.fields["exception"].startswith("ValueError: label 7 out of range")
    assert inc.fields["last_frame"].endswith("make_gloo_logs.py:42 in _work")


def test_gloo_raise_root_is_rank_1s_exception_and_rank_0_lost_its_peer() -> None:
    report = explain_log(DATA / "gloo_raise.log")
    root = report.root_incident
    assert root is not None and root.code == "python_exception" and root.rank == 1
    assert root.fields["raised_at"].endswith("make_gloo_logs.py:42 in _work")
    peer = next(i for i in report.incidents if i.code == "nccl_error")
    assert peer.rank == 0 and peer.tier == "secondary" and peer.line < root.line


def test_a_traceback_ending_in_a_cuda_error_is_that_error() -> None:
    report = explain_log(DATA / "cuda_illegal_access_pytorch_34220.log")
    assert [i.code for i in report.incidents] == ["cuda_illegal_access"]
    assert report.incidents[0].fields["raised_at"].endswith("base_model.py:152 in "
                                                            "get_current_losses")


def test_python_exception_names_the_innermost_user_frame() -> None:
    root = _root("python_exception_bench2drive_25.log")
    assert root.fields["exception"] == "KeyError"
    assert root.fields["raised_at"].endswith("B2D_vad_dataset.py:253 in get_map_info")
