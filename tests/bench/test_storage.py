"""``trainmedic.bench.storage`` on tmp_path: figures consistent, files removed, bad folders
refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainmedic.bench import storage
from trainmedic.bench.storage import StorageConfig, bench_storage
from trainmedic.errors import ConfigError, InputError

SMALL = StorageConfig(size_bytes=3 * 2**20 + 123, block_bytes=2**20, small_files=5,
                      small_file_bytes=512, checkpoint_bytes=(10**9, 4 * 10**9))


def test_figures_are_positive_consistent_and_nothing_is_left(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    phases: list[tuple[int, int]] = []
    r = bench_storage(tmp_path, SMALL, on_progress=lambda d, n: phases.append((d, n)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
    assert r.bytes_written == SMALL.size_bytes
    assert r.write_bytes_per_s == pytest.approx(SMALL.size_bytes / r.write_s)
    for rate in (r.write_bytes_per_s, r.warm_read_bytes_per_s, r.cold_read_bytes_per_s,
                 r.small_files_per_s):
        assert rate is not None and rate > 0
    assert r.small_files == 5
    assert [c.checkpoint_bytes for c in r.checkpoints] == [10**9, 4 * 10**9]
    for c in r.checkpoints:
        assert c.write_time_s == pytest.approx(c.checkpoint_bytes / r.write_bytes_per_s)
    assert phases == [(1, 4), (2, 4), (3, 4), (4, 4)]
    if r.cold_verified is not None:
        # verified means /proc/self/io saw at least 90% of the file fetched from storage
        assert r.cold_verified == (r.cold_fetched_bytes >= 0.9 * SMALL.size_bytes)
    if r.cold_verified is not True:
        assert any("cold read" in n for n in r.notes)
    doc = r.to_dict()
    assert doc["basis"]["checkpoints"] == "estimated"
    assert doc["basis"]["write_bytes_per_s"] == "measured"


def test_a_failure_midway_still_removes_the_files(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_: object) -> float:
        raise KeyboardInterrupt

    monkeypatch.setattr(storage, "_small_files", interrupted)
    with pytest.raises(KeyboardInterrupt):
        bench_storage(tmp_path, SMALL)
    assert list(tmp_path.iterdir()) == []


def test_cold_read_not_fetched_from_storage_is_flagged(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # a counter that never moves stands for tmpfs, where pages cannot be dropped
    monkeypatch.setattr(storage, "read_bytes_counter", lambda: 0)
    r = bench_storage(tmp_path, SMALL)
    assert r.cold_verified is False and r.cold_fetched_bytes == 0
    assert any("not verified" in n for n in r.notes)


def test_bad_folders_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        bench_storage(tmp_path / "nope", SMALL)
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(InputError, match="is a file"):
        bench_storage(f, SMALL)
    huge = StorageConfig(size_bytes=2**62)
    with pytest.raises(InputError, match="free"):
        bench_storage(tmp_path, huge)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_refused(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(InputError, match="not writable"):
            bench_storage(ro, SMALL)
    finally:
        ro.chmod(0o700)


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ConfigError, match="^size_bytes"):
        StorageConfig(size_bytes=0)
    with pytest.raises(ConfigError, match="^checkpoint_bytes"):
        StorageConfig(checkpoint_bytes=(-1,))
