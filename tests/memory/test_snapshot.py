"""Reading memory snapshots safely and explaining them (trainmedic.memory.snapshot).

The expected figures are worked out by hand in the docstrings of
tests/data/memory/make_snapshots.py, which writes the fixtures.
"""

from __future__ import annotations

import copyreg
import importlib.util
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainmedic.errors import UnreadableInputError
from trainmedic.memory.snapshot import explain_snapshot, read_snapshot, summarize_snapshot

DATA = Path(__file__).resolve().parents[1] / "data" / "memory"
MiB = 2**20
GiB = 2**30
MARKER = "trainmedic_snapshot_pwned"


def _make_snapshots():
    spec = importlib.util.spec_from_file_location("make_snapshots", DATA / "make_snapshots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def summary(name: str):
    path = DATA / f"{name}.pickle"
    return summarize_snapshot(read_snapshot(path), path=str(path))


@pytest.mark.parametrize("name", ["fragmented", "full", "legacy_no_trace"])
def test_fixtures_match_their_generator(name: str) -> None:
    built = getattr(_make_snapshots(), name)()
    assert read_snapshot(DATA / f"snapshot_{name}.pickle") == built


def test_fragmented_figures() -> None:
    s = summary("snapshot_fragmented")
    assert s.has_frames and s.has_trace and [d.device for d in s.devices] == [0]
    d = s.devices[0]
    assert d.segments == 3
    assert d.reserved_bytes == GiB + 512 * MiB + 2 * MiB
    assert d.allocated_bytes == (300 + 300 + 312) * MiB + MiB // 2
    assert d.requested_bytes == d.allocated_bytes - 512
    assert d.reserved_unallocated_bytes == d.reserved_bytes - d.allocated_bytes
    assert d.inactive_bytes == (200 + 224 + 100 + 100) * MiB + 3 * MiB // 2
    assert d.inactive_split_bytes == d.inactive_bytes  # every free block shares a segment
    assert d.inactive_split_blocks == 5
    assert d.small_pool_inactive_bytes == 3 * MiB // 2
    assert d.largest_free_block_bytes == 224 * MiB
    assert [s.largest_free_bytes for s in d.segments_with_free] == [224 * MiB, 100 * MiB,
                                                                     3 * MiB // 2]
    assert [a.size_bytes for a in d.largest_allocations] == [312 * MiB, 300 * MiB, 300 * MiB,
                                                             MiB // 2]
    assert d.oom is not None
    assert (d.oom.size_bytes, d.oom.device_free_bytes) == (400 * MiB, 150 * MiB)
    # the tail stops at the oom: the later "snapshot" action is not in it
    assert [e.action for e in d.trace_tail] == ["segment_alloc", "alloc", "free_requested",
                                                "free_completed", "oom"]


def test_frames_prefer_user_code_over_torch_internals() -> None:
    d = summary("snapshot_fragmented").devices[0]
    frames = d.largest_allocations[0].frames
    assert frames == ("/home/user/proj/model.py:42 forward",
                      "/home/user/proj/train.py:88 train_step")
    assert not any("functional.py" in f or "??" in f for f in frames)


def test_fragmentation_verdict_from_the_snapshot() -> None:
    e = explain_snapshot(summary("snapshot_fragmented"))
    assert e.verdict == "fragmentation"
    assert "expandable_segments:True" in e.fixes[0]
    figures = {f.name: f for f in e.figures}
    assert figures["requested"].bytes == 400 * MiB
    assert figures["largest_free_block"].bytes == 224 * MiB
    assert figures["inactive_large_pool"].bytes == 624 * MiB
    assert all(f.basis == "measured" for f in e.figures)
    assert any("model.py:42" in n for n in e.notes)


def test_full_device_and_second_device() -> None:
    s = summary("snapshot_full")
    assert [d.device for d in s.devices] == [0, 1]
    d0, d1 = s.devices
    assert d0.reserved_bytes == 8 * GiB and d0.inactive_bytes == 32 * MiB
    assert d0.largest_allocations[0].frames[0] == "/home/user/proj/train.py:120 compute_loss"
    assert (d1.reserved_bytes, d1.allocated_bytes, d1.oom) == (GiB, 0, None)
    assert d1.inactive_split_bytes == 0  # one free block alone in its segment
    e = explain_snapshot(s)
    assert e.verdict == "single_huge_allocation" and "genuinely_full" in e.also
    assert any("trainmedic memory plan" in f for f in e.fixes)
    assert any("train.py:120 compute_loss" in n for n in e.notes)
    idle = explain_snapshot(s, device=1)
    assert idle.verdict == "unknown" and "no OOM" in idle.summary
    assert explain_snapshot(s, device=7).verdict == "unknown"


def test_legacy_snapshot_without_trace() -> None:
    s = summary("snapshot_legacy_no_trace")
    assert not s.has_trace and s.has_frames
    d = s.devices[0]
    assert (d.allocated_bytes, d.requested_bytes) == (16 * MiB, 15 * MiB)
    assert d.inactive_split_bytes == 48 * MiB and d.oom is None and d.trace_tail == ()
    assert explain_snapshot(s).verdict == "fragmentation"  # 75% of reserved stranded


def test_summary_bounds_its_lists() -> None:
    s = summarize_snapshot(read_snapshot(DATA / "snapshot_fragmented.pickle"), top=1,
                           trace_tail=2)
    d = s.devices[0]
    assert len(d.largest_allocations) == 1 and len(d.segments_with_free) == 1
    assert [e.action for e in d.trace_tail] == ["free_completed", "oom"]


# --- refusing what is not plain data --------------------------------------------------------


class _System:
    """Pickles as a call of os.system (what a malicious snapshot would contain)."""

    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


def _assert_refused(path: Path, *needles: str) -> None:
    with pytest.raises(UnreadableInputError) as err:
        read_snapshot(path)
    message = str(err.value)
    assert message.startswith(str(path)), message
    for needle in needles:
        assert needle in message, message
    assert not (Path.cwd() / MARKER).exists()


def test_malicious_fixture_is_refused_without_side_effects(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _assert_refused(DATA / "snapshot_malicious.pickle", "os.system", "refused")


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_any_global_is_refused(tmp_path, monkeypatch, protocol: int) -> None:
    monkeypatch.chdir(tmp_path)
    snapshot = {"segments": [{"total_size": 1, "blocks": [{"size": 1, "state": "inactive",
                                                           "frames": [_System()]}]}]}
    path = tmp_path / "nested.pickle"
    path.write_bytes(pickle.dumps(snapshot, protocol=protocol))
    _assert_refused(path, "system")  # os.system or posix.system


def test_extension_code_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    copyreg.add_extension("os", "system", 0xBEEF)
    try:
        data = pickle.dumps(_System(), protocol=2)
    finally:
        copyreg.remove_extension("os", "system", 0xBEEF)
    path = tmp_path / "ext.pickle"
    path.write_bytes(data)
    _assert_refused(path, "refused")


def test_persistent_id_is_refused(tmp_path) -> None:
    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return "storage" if obj == "weights" else None

    path = tmp_path / "pid.pickle"
    with path.open("wb") as f:
        Pickler(f).dump({"segments": ["weights"]})
    _assert_refused(path, "persistent id")


@pytest.mark.parametrize(("value", "needle"), [
    ({"segments": [], "extra": {1, 2}}, "set"),
    ({"segments": [], "extra": b"raw"}, "bytes"),
    ({"segments": [], "extra": {(1, 2): 3}}, "tuple dict key"),
    ([1, 2, 3], "'segments'"),
    ({"device_traces": []}, "'segments'"),
])
def test_only_plain_snapshot_data_is_accepted(tmp_path, value, needle: str) -> None:
    path = tmp_path / "odd.pickle"
    path.write_bytes(pickle.dumps(value))
    _assert_refused(path, needle)


@pytest.mark.parametrize(("content", "needle"), [
    (b"", "not a readable pickle"),
    (b"segments: []\n", "not a readable pickle"),
    (pickle.dumps({"segments": [1, 2, 3]})[:-3], "not a readable pickle"),
])
def test_garbage_is_unreadable(tmp_path, content: bytes, needle: str) -> None:
    path = tmp_path / "garbage.pickle"
    path.write_bytes(content)
    _assert_refused(path, needle)


def test_missing_file(tmp_path) -> None:
    _assert_refused(tmp_path / "absent.pickle", "cannot be read")


def test_shared_references_are_checked_once(tmp_path) -> None:
    # 40 levels of ten references to the level below: 10**40 paths, 40 objects.
    level: list = []
    for _ in range(40):
        level = [level] * 10
    path = tmp_path / "laughs.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "x": level}))
    start = time.perf_counter()
    assert read_snapshot(path)["segments"] == []
    assert time.perf_counter() - start < 1.0


def test_reading_snapshots_needs_no_torch() -> None:
    code = ("import sys\n"
            "import trainmedic.memory.snapshot as s, trainmedic.memory.oom, "
            "trainmedic.memory.kv, trainmedic.memory.gpus\n"
            f"s.summarize_snapshot(s.read_snapshot({str(DATA / 'snapshot_full.pickle')!r}))\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 0, done.stderr
