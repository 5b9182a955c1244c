"""The engine: the rule registry, the root of one log, the job root across ranks' logs, and
input errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmedic.errors import InputError, RegistryError
from trainmedic.explain import Incident, explain_logs, explain_text, register_rule, unregister_rule
from trainmedic.explain.log_text import LogText
from trainmedic.explain.registry import rules

TIMEOUT = ("[rank{r}]:[E0312 10:{m}:00.000000000 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog "
           "caught collective operation timeout: WorkNCCL(SeqNum=41, OpType=ALLREDUCE, "
           "NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600100 milliseconds before "
           "timing out.")
ILLEGAL = ("[rank3]:[E0312 10:00:01.000000000 train.py] RuntimeError: CUDA error: an illegal "
           "memory access was encountered")


def test_a_class_registered_twice_is_an_error() -> None:
    rules()
    with pytest.raises(RegistryError, match="already registered"):
        register_rule("nccl_timeout")(lambda log: [])
    with pytest.raises(RegistryError, match="unknown class code"):
        register_rule("disk_full")(lambda log: [])
    with pytest.raises(RegistryError, match="needs doc="):
        register_rule("acme.disk_full")(lambda log: [])


def test_a_user_rule_runs_and_can_be_removed() -> None:
    def disk_full(log: LogText) -> list[Incident]:
        hits = [n for n, t in enumerate(log.lines, 1) if "No space left on device" in t]
        return [Incident(code="acme.disk_full", summary="disk full", path=log.path,
                         line=hits[0], evidence=log.evidence(hits))] if hits else []

    register_rule("acme.disk_full", doc="the scratch file system filled up")(disk_full)
    try:
        log = LogText.from_text("x.log", "step 1\nOSError: [Errno 28] No space left on device")
        assert [i.code for i in explain_text(log).incidents] == ["acme.disk_full"]
    finally:
        unregister_rule("acme.disk_full")
    assert explain_text(log).incidents == ()


def test_in_one_log_a_cuda_error_before_timeouts_is_the_root() -> None:
    text = "\n".join([ILLEGAL, TIMEOUT.format(r=0, m="10"), TIMEOUT.format(r=1, m="10")])
    report = explain_text(LogText.from_text("job.log", text))
    assert [i.code for i in report.incidents] == ["cuda_illegal_access", "nccl_timeout"]
    assert report.root_incident is not None and report.root_incident.rank == 3
    assert [i.code for i in report.consequences] == ["nccl_timeout"]


def test_timeouts_printed_first_are_still_consequences_of_a_later_cuda_error() -> None:
    text = "\n".join([TIMEOUT.format(r=0, m="10"), ILLEGAL])
    report = explain_text(LogText.from_text("job.log", text))
    assert report.root_incident is not None
    assert report.root_incident.code == "cuda_illegal_access"


def test_across_ranks_logs_the_job_root_is_the_earliest_stamp(tmp_path: Path) -> None:
    a, b, c = tmp_path / "rank0.log", tmp_path / "rank3.log", tmp_path / "rank5.log"
    a.write_text(TIMEOUT.format(r=0, m="10") + "\n")
    b.write_text("step 10 loss 2.1\n" + ILLEGAL + "\n")
    c.write_text("[rank5]:[E0312 10:05:00.000000000 x] RuntimeError: CUDA error: an illegal "
                 "memory access was encountered\n")
    out = explain_logs([a, b, c])
    assert out.job_root is not None and out.job_root_by == "earliest time stamp"
    k, i = out.job_root
    assert out.logs[k].path == str(b) and out.logs[k].incidents[i].rank == 3
    doc = out.to_json()
    assert doc["schema"] == "trainmedic.explain/1" and doc["job_root"]["class"] == \
        "cuda_illegal_access"


def test_without_stamps_each_log_keeps_its_root(tmp_path: Path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    b.write_text("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
                 " GPU 0 has a total capacity of 79.15 GiB of which 1.23 GiB is free.\n")
    out = explain_logs([a, b])
    assert out.job_root is None and out.notes
    assert [r.root_incident.code for r in out.logs if r.root_incident] == [
        "cuda_illegal_access", "cuda_oom"]


def test_missing_binary_and_folder_inputs_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot open"):
        explain_logs([tmp_path / "nope.log"])
    blob = tmp_path / "core.bin"
    blob.write_bytes(b"\x7fELF\x00\x00\x01" * 100)
    with pytest.raises(InputError, match="binary"):
        explain_logs([blob])
    with pytest.raises(InputError, match="folder"):
        explain_logs([tmp_path])


def test_an_empty_log_is_read_and_yields_nothing(tmp_path: Path) -> None:
    p = tmp_path / "empty.log"
    p.write_text("")
    out = explain_logs([p])
    assert not out.recognised and out.job_root is None
