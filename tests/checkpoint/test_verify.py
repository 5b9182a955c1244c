"""``verify`` / ``latest`` / ``list_checkpoints`` on real checkpoints damaged on purpose: one
flipped byte in each kind of file, a truncated file, a missing rank file, a leftover temporary
folder, a malicious pickle, a NaN weight, and a run whose loss diverged."""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

import pytest

from trainmedic.checkpoint import CheckpointManager, latest, list_checkpoints, verify
from trainmedic.checkpoint.commit import PendingCheckpoint
from trainmedic.checkpoint.manifest import (
    MANIFEST_NAME,
    FileRecord,
    read_manifest,
    write_manifest,
)
from trainmedic.checkpoint.verify import find_latest
from trainmedic.diagnose.onset import divergence_onset
from trainmedic.errors import InputError

torch = pytest.importorskip("torch")

FILES = ("model.pt", "optimizer.pt", "scheduler.pt", "train_state.rank0.pt", MANIFEST_NAME)


def _state(seed: int = 0) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, 5)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LinearLR(opt, total_iters=10)
    return {"model": model, "optimizer": opt, "scheduler": sched,
            "train": {"step": 1, "rng": torch.get_rng_state()}}


def _save(root: Path, steps: tuple[int, ...] = (10, 20)) -> list[Path]:
    mgr = CheckpointManager(root, keep_last=None)
    return [mgr.save(s, _state(s)) for s in steps]


def _flip(path: Path, at: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0xFF
    path.write_bytes(bytes(data))


def _relist(folder: Path, name: str) -> None:
    """Make the manifest agree with the file as it now is (a forged, consistent manifest),
    so that what is tested is the check after the hash."""
    m = read_manifest(folder)
    data = (folder / name).read_bytes()
    rec = FileRecord(path=name, size_bytes=len(data), hash=f"crc32:{zlib.crc32(data):08x}",
                     rank=0)
    files = tuple(rec if f.path == name else f for f in m.files)
    write_manifest(folder, type(m)(**{**m.__dict__, "files": files}))


def test_a_good_checkpoint(tmp_path: Path) -> None:
    _, path = _save(tmp_path)
    r = verify(path)
    assert r.ok and r.status == "good" and r.problems == () and r.notes == ()
    m = read_manifest(path)
    assert r.bytes_hashed == m.size_bytes == sum(
        (path / f.path).stat().st_size for f in m.files)
    sd = _state(20)
    want = (len(sd["model"].state_dict()) + 2 * len(list(sd["model"].parameters()))
            + len(sd["optimizer"].state))  # weights, Adam moments, step counters
    assert r.tensors_checked >= want
    q = verify(path, quick=True)
    assert q.ok and q.quick and q.bytes_hashed == 0


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("at", [0.0, 0.5, 0.999])
def test_one_flipped_byte_anywhere(tmp_path: Path, name: str, at: float) -> None:
    first, second = _save(tmp_path)
    _flip(second / name, at)
    r = verify(second)
    assert r.status == "damaged"
    assert any(p.file == name for p in r.problems), r.problems
    assert latest(tmp_path) == first
    assert verify(first).ok


def test_a_truncated_file(tmp_path: Path) -> None:
    first, second = _save(tmp_path)
    f = second / "optimizer.pt"
    size = f.stat().st_size
    os.truncate(f, size // 3)
    (p,) = verify(second).problems
    assert p.file == "optimizer.pt"
    assert p.what == f"{size // 3} bytes, the manifest says {size} (truncated)"
    assert latest(tmp_path) == first


def test_a_missing_rank_file(tmp_path: Path) -> None:
    first, second = _save(tmp_path)
    (second / "train_state.rank0.pt").unlink()
    (p,) = verify(second).problems
    assert (p.file, p.what) == ("train_state.rank0.pt", "missing (written by rank 0)")
    assert latest(tmp_path) == first
    # A manifest that never listed a rank's file (a save that lost one) is damaged too.
    m = read_manifest(second)
    write_manifest(second, type(m)(**{**m.__dict__, "world_size": 2}))
    (second / "train_state.rank0.pt").write_bytes(b"")
    problems = [str(p) for p in verify(second).problems]
    assert "train_state.rank1.pt: not in the manifest: rank 1's training state was not " \
           "saved" in problems


def test_a_leftover_temporary_folder_is_never_latest(tmp_path: Path) -> None:
    (first,) = _save(tmp_path, (10,))
    p = PendingCheckpoint.create(tmp_path, 30)
    rec = p.write_torch("model.pt", {"w": torch.ones(2)}, rank=0)
    write_manifest(p.path, type(read_manifest(first))(step=30, world_size=1, format="torch",
                                                       files=(rec,)))
    r = verify(p.path)
    assert r.status == "uncommitted" and "being written" in str(r.problems[0])
    assert latest(tmp_path) == first
    p._release(None)  # the writer dies without committing
    r = verify(p.path)
    assert "a save that did not finish" in str(r.problems[0])
    res = find_latest(tmp_path)
    assert res.path == first and [s.status for s in res.skipped] == ["uncommitted"]


def test_a_malicious_pickle_is_refused_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self) -> tuple[Any, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    first, second = _save(tmp_path)
    torch.save({"w": Evil()}, second / "model.pt")
    _relist(second, "model.pt")  # the hash matches: only weights_only stands in the way
    (p,) = verify(second).problems
    assert p.file == "model.pt" and "refused by torch.load(weights_only=True)" in p.what
    assert latest(tmp_path) == first
    with pytest.raises(InputError, match="refused by torch.load"):
        CheckpointManager(tmp_path).load({"model": _state()["model"]}, path=second)
    assert not marker.exists()


def test_a_non_finite_weight(tmp_path: Path) -> None:
    (first,) = _save(tmp_path, (10,))
    st = _state()
    with torch.no_grad():
        st["model"][0].weight[1, 2] = float("nan")
        st["model"][2].bias[0] = float("inf")
    bad = CheckpointManager(tmp_path, keep_last=None).save(20, st)
    r = verify(bad)
    assert [str(p) for p in r.problems] == [
        "model.pt: tensor 0.weight holds 1 non-finite value(s) (NaN/inf) of 35",
        "model.pt: tensor 2.bias holds 1 non-finite value(s) (NaN/inf) of 2",
    ]
    assert latest(tmp_path) == first


def test_folder_name_and_manifest_disagree(tmp_path: Path) -> None:
    (first,) = _save(tmp_path, (10,))
    moved = first.rename(tmp_path / "step-00000099")
    assert [str(p) for p in verify(moved).problems] == [
        "the folder name says step 99, the manifest says 10"]


def test_not_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    assert verify(tmp_path / "plain").status == "not_a_checkpoint"
    other = tmp_path / "other"
    other.mkdir()
    (other / MANIFEST_NAME).write_text(json.dumps({"name": "some other tool"}))
    assert verify(other).status == "not_a_checkpoint"
    (tmp_path / "step-00000001").mkdir()  # named like one: an incomplete checkpoint
    r = verify(tmp_path / "step-00000001")
    assert r.status == "damaged" and r.problems[0].file == MANIFEST_NAME
    with pytest.raises(InputError, match="no such folder"):
        verify(tmp_path / "nope")
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="not a folder"):
        verify(tmp_path / "f")


def test_extra_files_are_noted_not_damage(tmp_path: Path) -> None:
    (first,) = _save(tmp_path, (10,))
    (first / "notes.txt").write_text("hello")
    r = verify(first)
    assert r.ok and r.notes == ("not in the manifest (ignored): notes.txt",)


def test_list_checkpoints(tmp_path: Path) -> None:
    first, second, third = _save(tmp_path, (10, 20, 30))
    _flip(second / "model.pt")
    live = PendingCheckpoint.create(tmp_path, 40)
    dead = tmp_path / ".tmp-step-00000035-0a1b2c3d"
    dead.mkdir()
    os.utime(dead, (0, 0))
    got = [(i.step, i.status, i.path.name) for i in list_checkpoints(tmp_path)]
    assert got == [(40, "writing", live.path.name), (35, "uncommitted", dead.name),
                   (30, "good", third.name), (20, "damaged", second.name),
                   (10, "good", first.name)]
    infos = {i.step: i for i in list_checkpoints(tmp_path)}
    assert infos[20].reason.startswith("model.pt: content hash")
    assert infos[30].size_bytes == sum(p.stat().st_size for p in third.iterdir())
    assert infos[30].created_utc == read_manifest(third).created_utc
    live.abort()
    with pytest.raises(InputError, match="no such folder"):
        list_checkpoints(tmp_path / "missing")


def _loss_log(path: Path, bad_from: int, kind: str) -> Path:
    """A CSV training log: a smoothly falling loss, then NaN or a divergence from
    ``bad_from`` on."""
    rows = ["step,loss"]
    for s in range(200):
        loss = 2.0 * (0.99 ** s) + 0.3
        if s >= bad_from:
            loss = float("nan") if kind == "nan" else loss * (1.08 ** (s - bad_from + 1))
        rows.append(f"{s},{loss}")
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("kind", ["nan", "divergence"])
def test_latest_skips_checkpoints_after_the_loss_went_bad(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "ckpt"
    paths = _save(root, (50, 100, 120, 150))
    log = _loss_log(tmp_path / "metrics.csv", 110, kind)
    res = find_latest(root, onset=divergence_onset(log))
    assert res.divergence_onset is not None and 100 < res.divergence_onset <= 120
    if kind == "nan":
        assert res.divergence_onset == 110  # the first non-finite loss
    assert res.path == paths[1]
    assert [(s.step, s.status) for s in res.skipped] == [(150, "after_divergence"),
                                                         (120, "after_divergence")]
    assert latest(root) == paths[3]  # without the run: the newest good one


def test_find_latest_leaves_the_reporting_to_its_caller_and_latest_warns_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """`trainmedic ckpt latest` prints the skipped list itself: find_latest must not also log
    it as a warning (the user saw each damaged checkpoint twice); latest() logs it once."""
    first, second = _save(tmp_path)
    _flip(second / "model.pt")
    with caplog.at_level("DEBUG", logger="trainmedic.checkpoint"):
        res = find_latest(tmp_path)
    assert res.path == first and [s.path for s in res.skipped] == [second]
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="trainmedic.checkpoint"):
        assert latest(tmp_path) == first
        assert CheckpointManager(tmp_path).latest() == first
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 2 and all(second.name in w and "model.pt" in w for w in warned)


def test_a_dcp_checkpoint_reports_its_shards_and_tensors(tmp_path: Path) -> None:
    pytest.importorskip("trainmedic.checkpoint.sharded")
    state = _state()
    path = CheckpointManager(tmp_path, sharded=True).save(1, state)
    r = verify(path)
    assert r.ok, r.problems
    model_tensors = len(state["model"].state_dict())
    moments = sum(isinstance(v, torch.Tensor) for st in state["optimizer"].state.values()
                  for v in st.values())
    assert r.dcp_files == 1 and r.dcp_tensors == model_tensors + moments
    assert r.tensors_checked == 1  # the RNG state in train_state.rank0.pt
    doc = r.to_dict()
    assert doc["dcp_files"] == 1 and doc["dcp_tensors"] == r.dcp_tensors
    q = verify(path, quick=True)
    assert q.dcp_files is None and q.dcp_tensors is None
    assert verify(_save(tmp_path / "plain", (10,))[0]).dcp_tensors is None
