"""The commit protocol: a fresh locked temporary folder, files hashed while written, the rename
as the commit, liveness of a writer (alive, SIGKILLed, no lock yet), replacing a step, retention
and clean write errors."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from trainmedic.checkpoint import commit as commit_mod
from trainmedic.checkpoint.commit import (
    LOCK_NAME,
    PendingCheckpoint,
    apply_retention,
    clean_stale,
    parse_dir_name,
    scan,
    step_dir_name,
    writer_alive,
)
from trainmedic.checkpoint.manifest import MANIFEST_NAME, Manifest, read_manifest
from trainmedic.errors import ConfigError, InputError

torch = pytest.importorskip("torch")


def _commit(root: Path, step: int, payload: object = None) -> Path:
    p = PendingCheckpoint.create(root, step)
    rec = p.write_torch("model.pt", payload if payload is not None else {"w": torch.ones(3)},
                        rank=0)
    return p.commit(Manifest(step=step, world_size=1, format="torch", files=(rec,),
                             entries={"model": "model.pt"}))


def test_names() -> None:
    assert step_dir_name(1200) == "step-00001200"
    assert step_dir_name(123456789) == "step-123456789"
    assert parse_dir_name("step-00001200") == ("committed", 1200)
    assert parse_dir_name(".tmp-step-00001200-0a1b2c3d") == ("tmp", 1200)
    assert parse_dir_name(".del-step-00000007-0a1b2c3d") == ("deleting", 7)
    for name in ("step-12", "step-0000120x", "checkpoint-100", ".tmp-step-00000001"):
        assert parse_dir_name(name) is None


def test_a_save_is_invisible_until_the_rename(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    p = PendingCheckpoint.create(root, 5)
    assert p.path.parent == root and p.path.name.startswith(".tmp-step-00000005-")
    assert (p.path / LOCK_NAME).exists() and writer_alive(p.path)
    assert [d.kind for d in scan(root)] == ["tmp"]
    rec = p.write_torch("model.pt", {"w": torch.arange(4.0)}, rank=0)
    data = (p.path / "model.pt").read_bytes()
    assert rec.size_bytes == len(data) and rec.hash == f"crc32:{zlib.crc32(data):08x}"
    assert not (root / "step-00000005").exists()
    final = p.commit(Manifest(step=5, world_size=1, format="torch", files=(rec,)))
    assert final == root / "step-00000005"
    assert sorted(os.listdir(final)) == [MANIFEST_NAME, "model.pt"]  # lock removed
    assert not p.path.exists() and [d.kind for d in scan(root)] == ["committed"]
    assert read_manifest(final).files == (rec,)
    assert torch.equal(torch.load(final / "model.pt", weights_only=True)["w"], torch.arange(4.0))


def test_torch_zip_crc_setting_is_restored(tmp_path: Path) -> None:
    from torch.serialization import get_crc32_options, set_crc32_options

    p = PendingCheckpoint.create(tmp_path, 1)
    for setting in (True, False):
        set_crc32_options(setting)
        try:
            p.write_torch(f"m{setting}.pt", {"w": torch.ones(2)}, rank=0)
            assert get_crc32_options() is setting
        finally:
            set_crc32_options(True)
    p.abort()
    assert not p.path.exists()


def test_a_killed_writer_is_dead_a_live_one_alive(tmp_path: Path) -> None:
    code = (f"from trainmedic.checkpoint.commit import PendingCheckpoint\n"
            f"p = PendingCheckpoint.create({str(tmp_path)!r}, 3)\n"
            f"print(p.path, flush=True)\nimport time; time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        folder = Path(proc.stdout.readline().strip())
        assert writer_alive(folder)
        assert clean_stale(tmp_path) == [] and folder.exists()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not writer_alive(folder)  # the kernel dropped the flock with the process
    assert clean_stale(tmp_path) == [folder] and not folder.exists()


def test_a_folder_without_a_lock_is_alive_only_while_young(tmp_path: Path) -> None:
    folder = tmp_path / ".tmp-step-00000001-0a1b2c3d"
    folder.mkdir()
    assert writer_alive(folder)
    old = time.time() - commit_mod.GRACE_S - 5
    os.utime(folder, (old, old))
    assert not writer_alive(folder)


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_saving_a_step_again_replaces_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         exchange: bool) -> None:
    swapped: list[bool] = []
    real = commit_mod._exchange

    def spy(a: Path, b: Path) -> bool:
        swapped.append(real(a, b) if exchange else False)
        return swapped[-1]

    monkeypatch.setattr(commit_mod, "_exchange", spy)
    first = _commit(tmp_path, 7, {"w": torch.zeros(3)})
    second = _commit(tmp_path, 7, {"w": torch.full((3,), 2.0)})
    assert first == second and swapped == [exchange]
    assert torch.equal(torch.load(second / "model.pt", weights_only=True)["w"],
                       torch.full((3,), 2.0))
    assert sorted(os.listdir(tmp_path)) == ["step-00000007"]  # no hidden leftovers


def test_a_failed_swap_puts_the_old_checkpoint_back(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commit_mod, "_exchange", lambda a, b: False)
    old = _commit(tmp_path, 7, {"w": torch.zeros(3)})
    real = os.rename

    def rename(src: str | Path, dst: str | Path) -> None:
        if Path(src).name.startswith(".tmp-") and Path(dst).name.startswith("step-"):
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(commit_mod.os, "rename", rename)
    with pytest.raises(InputError, match="Input/output error"):
        _commit(tmp_path, 7, {"w": torch.ones(3)})
    assert sorted(os.listdir(tmp_path)) == ["step-00000007"]
    assert torch.equal(torch.load(old / "model.pt", weights_only=True)["w"], torch.zeros(3))


def test_retention_keeps_the_newest_and_the_protected(tmp_path: Path) -> None:
    for s in (1, 2, 3, 4, 5):
        _commit(tmp_path, s)
    live = PendingCheckpoint.create(tmp_path, 6)  # being written: never touched
    dead = tmp_path / ".tmp-step-00000009-deadbeef"
    dead.mkdir()
    old = time.time() - 3600
    os.utime(dead, (old, old))
    leftover = tmp_path / ".del-step-00000000-0a1b2c3d"
    leftover.mkdir()
    removed = apply_retention(tmp_path, 2, protect=[tmp_path / "step-00000001"])
    assert sorted(p.name for p in removed) == sorted(
        [dead.name, leftover.name, "step-00000002", "step-00000003"])
    left = sorted(d.path.name for d in scan(tmp_path))
    assert left == sorted(["step-00000001", "step-00000004", "step-00000005", live.path.name])
    live.abort()
    assert apply_retention(tmp_path, None) == []
    with pytest.raises(ConfigError, match="keep_last"):
        apply_retention(tmp_path, 0)


def test_root_that_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="cannot create the checkpoint folder") as info:
        PendingCheckpoint.create(blocker / "ckpt", 1)
    assert info.value.path == str(blocker / "ckpt")


def test_disk_full_is_a_clear_error_and_cleans_up(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    good = _commit(tmp_path, 1)
    p = PendingCheckpoint.create(tmp_path, 2)
    calls = {"n": 0}
    real = commit_mod.HashingWriter.write

    def write(self: object, data: object) -> int:
        calls["n"] += 1
        if calls["n"] > 2:
            self.error = OSError(errno.ENOSPC, "No space left on device")  # type: ignore[attr-defined]
            raise self.error  # type: ignore[attr-defined]
        return real(self, data)  # type: ignore[arg-type]

    monkeypatch.setattr(commit_mod.HashingWriter, "write", write)
    with pytest.raises(InputError) as info:
        p.write_torch("model.pt", {"w": torch.randn(1000)}, rank=0)
    msg = str(info.value)
    assert msg.startswith(f"{tmp_path}: cannot write checkpoint step 2 (model.pt: No space "
                          f"left on device)")
    assert "previous checkpoints are intact" in msg and "free space" in msg
    p.abort()
    assert sorted(os.listdir(tmp_path)) == ["step-00000001"]
    assert torch.equal(torch.load(good / "model.pt", weights_only=True)["w"], torch.ones(3))


def test_sync_files_false_skips_every_fsync_and_still_commits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainmedic.checkpoint.verify import verify

    calls = {"n": 0}
    real = os.fsync

    def counting(fd: int) -> None:
        calls["n"] += 1
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    p = PendingCheckpoint.create(tmp_path, 3, sync_files=False)
    rec = p.write_torch("model.pt", {"w": torch.randn(100)}, rank=0)
    p.sync_files()
    final = p.commit(Manifest(step=3, world_size=1, format="torch", files=(rec,),
                              entries={"model": "model.pt"}))
    assert calls["n"] == 0
    assert verify(final).status == "good"
    durable = PendingCheckpoint.create(tmp_path, 4)
    rec = durable.write_torch("model.pt", {"w": torch.randn(100)}, rank=0)
    durable.commit(Manifest(step=4, world_size=1, format="torch", files=(rec,),
                            entries={"model": "model.pt"}))
    assert calls["n"] >= 4  # the file, the manifest, the folder, the root
