"""Parsing and explaining real CUDA/ROCm OOM messages (trainmedic.memory.oom).

Fixtures are real messages users posted (tests/data/memory/SOURCES.md). Expected figures are
the numbers as printed in each message, read by hand and converted here with binary units.
"""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path

import pytest

from trainmedic.memory.gpus import format_bytes
from trainmedic.memory.oom import OomReport, explain_oom, parse_oom

DATA = Path(__file__).resolve().parents[1] / "data" / "memory"
UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def sz(text: str) -> int:
    value, unit = text.split()
    return int((Decimal(value) * UNITS[unit]).to_integral_value())  # nearest byte


def report(name: str) -> OomReport:
    parsed = parse_oom((DATA / name).read_text(encoding="utf-8"))
    assert parsed is not None, name
    return parsed


# file -> (format, backend, device, requested, total, free, allocated, reserved-unallocated)
FIGURES = {
    "oom_legacy_fragmentation.txt": ("allocator-legacy", "CUDA", 0, "10.84 GiB", "23.65 GiB",
                                     "10.26 GiB", "1.06 GiB", None),
    "oom_legacy_cached.txt": ("allocator-legacy-cached", "CUDA", 0, "1024.00 KiB", "11.17 GiB",
                              "576.00 KiB", "10.90 GiB", "30.96 MiB"),
    "oom_legacy_hint_huge.txt": ("allocator-legacy", "CUDA", 0, "1.71 GiB", "6.00 GiB",
                                 "1.04 GiB", "3.49 GiB", None),
    "oom_torch21_multi.txt": ("allocator", "CUDA", 0, "64.00 MiB", "14.58 GiB", "52.50 MiB",
                              "14.36 GiB", "31.91 MiB"),
    "oom_torch22_expandable.txt": ("allocator", "CUDA", 0, "22.00 MiB", "23.65 GiB",
                                   "11.06 MiB", "22.90 GiB", "194.87 MiB"),
    "oom_other_process_multi.txt": ("allocator", "CUDA", 0, "24.00 MiB", "7.60 GiB",
                                    "11.38 MiB", "224.63 MiB", "47.37 MiB"),
    "oom_wrapped_pr99699.txt": ("allocator", "CUDA", 0, "138.00 MiB", "15.90 GiB", "8.44 MiB",
                                "14.12 GiB", "410.41 MiB"),
    "oom_container_device1.txt": ("allocator", "CUDA", 1, "1.25 GiB", "93.02 GiB", "1.18 GiB",
                                  "90.63 GiB", "120.54 MiB"),
    "oom_free_but_refused_hami.txt": ("allocator", "CUDA", 0, "6.00 GiB", "23.53 GiB",
                                      "22.27 GiB", "0 bytes", "0 bytes"),
    "oom_hip_apu.txt": ("allocator", "HIP", 0, "3.31 GiB", "128.00 GiB", "780.24 MiB",
                        "57.70 GiB", "75.82 MiB"),
    "oom_hip_allowed_private_pools.txt": ("allocator", "HIP", 0, "2.00 MiB", "287.98 GiB",
                                          "275.86 GiB", "1017.01 MiB", "54.99 MiB"),
    "oom_huge_larger_than_device.txt": ("allocator", "CUDA", 0, "55.57 GiB", "12.00 GiB",
                                        "9.02 GiB", "984.52 MiB", "463.48 MiB"),
    "oom_huge_with_other_process.txt": ("allocator", "CUDA", 0, "125537.24 GiB", "23.64 GiB",
                                        "8.26 GiB", "13.86 GiB", "213.20 MiB"),
}


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figures_as_printed(name: str) -> None:
    fmt, backend, device, req, total, free, alloc, unalloc = FIGURES[name]
    r = report(name)
    assert (r.message_format, r.backend, r.device_index) == (fmt, backend, device)
    assert r.requested_bytes == sz(req)
    assert r.total_bytes == sz(total)
    assert r.free_bytes == sz(free)
    assert r.allocated_bytes == sz(alloc)
    if unalloc is not None:
        assert r.reserved_unallocated_bytes == sz(unalloc)
        assert r.basis["reserved_unallocated_bytes"] == "measured"
        assert r.basis["reserved_bytes"] == "estimated"
        assert r.reserved_bytes == sz(alloc) + sz(unalloc)


def test_legacy_reserved_is_measured_and_unallocated_derived() -> None:
    r = report("oom_legacy_fragmentation.txt")
    assert r.reserved_bytes == sz("12.53 GiB")
    assert r.basis["reserved_bytes"] == "measured"
    assert r.reserved_unallocated_bytes == sz("12.53 GiB") - sz("1.06 GiB")
    assert r.basis["reserved_unallocated_bytes"] == "estimated"


def test_processes_this_process_cap_and_private_pools() -> None:
    r = report("oom_free_but_refused_hami.txt")
    assert [(p.pid, p.used_bytes) for p in r.processes] == [
        (766286, sz("28.06 MiB")), (906550, sz("442.57 MiB")), (923794, sz("384.00 MiB"))]
    assert r.this_process_bytes is None
    r = report("oom_wrapped_pr99699.txt")
    assert [(p.pid, p.used_bytes) for p in r.processes] == [(1246069, sz("577.00 MiB"))]
    assert r.this_process_bytes == sz("15.32 GiB")
    r = report("oom_hip_allowed_private_pools.txt")
    assert r.allowed_bytes == sz("1.05 GiB")
    assert r.private_pool_bytes == sz("17.00 MiB")


def test_several_ooms_report_the_last_and_count_them() -> None:
    r = report("oom_torch21_multi.txt")
    assert (r.occurrences, r.distinct_messages) == (3, 3)
    assert r.processes[0].pid == 4157994  # the third message, not the first two
    text = (DATA / "oom_torch21_multi.txt").read_text(encoding="utf-8")
    assert text.splitlines()[r.line - 1].startswith("torch.cuda.OutOfMemoryError")
    assert r.location == "gpt.py:79 in forward: attention = Q @ K.transpose(2, 3)"
    assert "3 OOM messages" in " ".join(explain_oom(r).notes)


def test_repeated_identical_message_counts_as_one_distinct() -> None:
    message = (DATA / "oom_legacy_fragmentation.txt").read_text(encoding="utf-8")
    r = parse_oom(f"logger: {message}\nTraceback ...\nRuntimeError: {message}")
    assert r is not None and (r.occurrences, r.distinct_messages) == (2, 1)


@pytest.mark.parametrize("prefix", ["", "RuntimeError: ", "torch.OutOfMemoryError: ",
                                    "torch.cuda.OutOfMemoryError: ", "OutOfMemoryError: "])
def test_prefix_does_not_matter(prefix: str) -> None:
    bare = (DATA / "oom_torch22_expandable.txt").read_text(encoding="utf-8").split("\n")[1]
    bare = bare.split(": ", 1)[1]
    assert bare.startswith("CUDA out of memory.")
    r = parse_oom(prefix + bare)
    assert r is not None and r.requested_bytes == sz("22.00 MiB")
    assert r.this_process_bytes == sz("23.60 GiB")


def test_runtime_error_without_figures() -> None:
    r = report("oom_runtime_error.txt")
    assert r.message_format == "runtime-error"
    assert r.requested_bytes is None and r.total_bytes is None
    assert r.location is not None and r.location.startswith("functional.py:2905 in layer_norm")
    e = explain_oom(r)
    assert e.verdict == "unknown" and e.figures == ()
    assert any("CUDA_LAUNCH_BLOCKING" in f for f in e.fixes)


@pytest.mark.parametrize("text", ["", (DATA / "no_oom.txt").read_text(encoding="utf-8"),
                                  "CUDA out of memory",  # no "Tried to allocate"
                                  "RuntimeError: CUDA error: device-side assert triggered"])
def test_no_oom_is_none(text: str) -> None:
    assert parse_oom(text) is None


def test_cut_short_message_is_partial() -> None:
    r = parse_oom("CUDA out of memory. Tried to allocate 16.00 MiB. GPU 0 has a total capacty "
                  "of 23.53 GiB of which 64.00 KiB is free.\nonly 24G in A30")
    assert r is not None and r.message_format == "allocator-partial"
    assert (r.requested_bytes, r.free_bytes) == (sz("16.00 MiB"), sz("64.00 KiB"))
    assert r.allocated_bytes is None
    assert explain_oom(r).verdict == "genuinely_full"


VERDICTS = {
    "oom_legacy_fragmentation.txt": ("fragmentation", {"single_huge_allocation"}),
    "oom_legacy_cached.txt": ("genuinely_full", set()),
    "oom_legacy_hint_huge.txt": ("single_huge_allocation", {"genuinely_full"}),
    "oom_legacy_other_process.txt": ("other_process", {"single_huge_allocation"}),
    "oom_torch21_multi.txt": ("genuinely_full", set()),
    "oom_torch22_expandable.txt": ("genuinely_full", set()),
    "oom_other_process_multi.txt": ("other_process", {"fragmentation"}),
    "oom_wrapped_pr99699.txt": ("other_process", set()),
    "oom_container_device1.txt": ("genuinely_full", set()),
    "oom_free_but_refused_hami.txt": ("free_but_refused", {"single_huge_allocation"}),
    "oom_hip_apu.txt": ("other_process", set()),
    "oom_hip_allowed_private_pools.txt": ("memory_cap", {"fragmentation", "free_but_refused"}),
    "oom_huge_larger_than_device.txt": ("single_huge_allocation", {"fragmentation"}),
    "oom_huge_with_other_process.txt": ("single_huge_allocation", set()),
}


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_verdicts(name: str) -> None:
    verdict, also = VERDICTS[name]
    e = explain_oom(report(name))
    assert e.verdict == verdict
    assert set(e.also) == also
    assert e.summary and e.reasons and e.fixes


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_measured_figures_are_the_printed_numbers(name: str) -> None:
    r = report(name)
    e = explain_oom(r)
    assert e.figures
    for f in e.figures:
        assert f.basis in ("measured", "estimated")
        if f.basis == "measured":
            # A measured figure prints back to the very text of the message.
            assert format_bytes(f.bytes) in r.message, (f.name, f.bytes)
        else:
            assert f.note, f.name  # every estimate says how it was derived


def test_fragmentation_fix_names_the_setting_the_torch_version_has() -> None:
    legacy = explain_oom(report("oom_legacy_fragmentation.txt"))
    assert "max_split_size_mb" in legacy.fixes[0]
    assert "PYTORCH_CUDA_ALLOC_CONF" in legacy.fixes[0]
    modern = explain_oom(report("oom_other_process_multi.txt"))
    assert modern.verdict == "other_process"
    assert "3936" in modern.fixes[0] and "5.38 GiB" in modern.fixes[0]
    assert any("this process holds" in r for r in modern.reasons)  # 2.19 GiB vs 272 MiB
    r = report("oom_other_process_multi.txt")
    assert r.alloc_conf_var == "PYTORCH_ALLOC_CONF"
    reasons = " ".join(modern.reasons)
    assert "47.37 MiB" in reasons and "24.00 MiB" in reasons


def test_container_process_is_taken_as_this_one() -> None:
    e = explain_oom(report("oom_container_device1.txt"))
    assert not any(f.name == "process_2752205" for f in e.figures)
    assert any("2752205" in n and "hypothesis" in n for n in e.notes)
    e = explain_oom(report("oom_torch21_multi.txt"))
    assert any("4157994" in n and "container" in n for n in e.notes)


def test_genuinely_full_points_to_the_planner_and_ranked_fixes() -> None:
    e = explain_oom(report("oom_torch22_expandable.txt"))
    text = "\n".join(e.fixes)
    assert "trainmedic memory plan" in e.fixes[0]
    order = [text.index(k) for k in ("micro-batch", "recomputation", "bf16", "8-bit",
                                     "ZeRO", "offload")]
    assert order == sorted(order)
    # 194.87 MiB cached covers the 22 MiB request but is under 1% of reserved: said, not blamed
    assert any("would only delay" in n for n in e.notes)


def test_huge_request_is_a_stated_hypothesis() -> None:
    e = explain_oom(report("oom_legacy_hint_huge.txt"))
    assert "28%" in e.reasons[0] and "hypothesis" in e.reasons[0]
    e = explain_oom(report("oom_huge_larger_than_device.txt"))
    assert "no freeing can make room" in e.reasons[0]


def test_hip_fix_uses_the_hip_variable() -> None:
    r = report("oom_hip_apu.txt")
    assert r.alloc_conf_var == "PYTORCH_HIP_ALLOC_CONF"
    assert "APU" in explain_oom(r).reasons[0]


def test_explain_is_pure() -> None:
    r = report("oom_wrapped_pr99699.txt")
    assert explain_oom(r) == explain_oom(r)
    assert explain_oom(r).to_json()["verdict"] == "other_process"


def test_a_long_log_is_read_quickly() -> None:
    noise = "step 10: loss 2.31 lr 3e-4 Process 12 has 1.00 GiB memory in use.\n" * 50_000
    text = noise + (DATA / "oom_torch21_multi.txt").read_text(encoding="utf-8") + noise
    start = time.perf_counter()
    r = parse_oom(text)
    assert time.perf_counter() - start < 2.0
    assert r is not None and r.occurrences == 3 and r.processes[0].pid == 4157994


def test_explain_oom_file_tells_a_log_from_a_snapshot(tmp_path: Path) -> None:
    from trainmedic.errors import UnreadableInputError, UnrecognizedInputError
    from trainmedic.memory.oom import explain_oom_file

    log = DATA / "oom_torch22_expandable.txt"
    kind, explanation = explain_oom_file(log)
    assert kind == "message"
    report = parse_oom(log.read_text(encoding="utf-8"))
    assert report is not None and explanation == explain_oom(report)
    kind, _ = explain_oom_file(DATA / "snapshot_fragmented.pickle")
    assert kind == "snapshot"
    with pytest.raises(UnrecognizedInputError, match="no out-of-memory message found"):
        explain_oom_file(DATA / "no_oom.txt")
    with pytest.raises(UnreadableInputError, match=r"^.*missing\.log: cannot open \("):
        explain_oom_file(tmp_path / "missing.log")
