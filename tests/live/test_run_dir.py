"""A run_dir that already holds a record: WatchConfig.if_exists (error, version, overwrite,
resume), applied by trainmedic.live.run_dir before the store opens."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from trainmedic.errors import ConfigError
from trainmedic.live import watch
from trainmedic.live.run_dir import last_step
from trainmedic.run.store import RunStore, StoreLockedError, read_store

torch = pytest.importorskip("torch")


def _run(run_dir: pathlib.Path, losses: list[float], **kw: Any) -> Any:
    model = torch.nn.Linear(4, 1)
    kw.setdefault("alert_every", None)
    kw.setdefault("announce", False)
    with watch(model, None, run_dir=run_dir, **kw) as w:
        for loss in losses:
            w.step(loss)
    return w


def _losses(path: pathlib.Path) -> tuple[list[int], list[float]]:
    s = read_store(path).get("loss")
    assert s is not None
    return s.steps.tolist(), s.values.tolist()


def test_error_is_one_line_naming_the_dir_and_the_choices(tmp_path: pathlib.Path) -> None:
    _run(tmp_path, [1.0, 2.0, 3.0], meta={"cfg": "A"})
    with pytest.raises(ConfigError) as info:
        _run(tmp_path, [9.0], meta={"cfg": "B"})
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"{tmp_path}: this run_dir already holds a run's record (steps up "
                          f"to 2)")
    for choice in ("if_exists='version'", "'resume'", "'overwrite'", "new run_dir"):
        assert choice in msg
    assert read_store(tmp_path / "metrics.sqlite").meta["cfg"] == "A"  # left as it was
    assert _losses(tmp_path / "metrics.sqlite") == ([0, 1, 2], [1.0, 2.0, 3.0])


def test_version_numbers_each_run_as_lightning_does(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    dirs = [_run(tmp_path, [float(i)], if_exists="version", announce=True).run_dir
            for i in range(3)]
    assert dirs == [tmp_path / f"version_{i}" for i in range(3)]
    for i, d in enumerate(dirs):
        assert _losses(d / "metrics.sqlite") == ([0], [float(i)])
    err = capsys.readouterr().err
    assert f"recording to {tmp_path / 'version_2'}" in err
    assert f"trainmedic diagnose {tmp_path / 'version_2'}" in err
    # a folder without a store (another tool's version_7) is not skipped past; one whose
    # number is higher but holds a store is
    (tmp_path / "version_7").mkdir()
    assert _run(tmp_path, [1.0], if_exists="version").run_dir == tmp_path / "version_3"
    # a resume (start_step > 0) continues the latest version
    w = _run(tmp_path, [5.0], if_exists="version", start_step=1)
    assert w.run_dir == tmp_path / "version_3"
    assert _losses(w.run_dir / "metrics.sqlite") == ([0, 1], [1.0, 5.0])


def test_version_ranks_agree_whichever_starts_first(tmp_path: pathlib.Path) -> None:
    for job in range(2):
        # rank 0 creates version_<job> before rank 1 looks: rank 1 still picks it
        a = _run(tmp_path, [1.0], if_exists="version", rank=0, world_size=2)
        b = _run(tmp_path, [1.0], if_exists="version", rank=1, world_size=2)
        assert a.run_dir == b.run_dir == tmp_path / f"version_{job}"
        assert sorted(p.name for p in a.run_dir.glob("*.sqlite")) == [
            "metrics.rank0.sqlite", "metrics.rank1.sqlite"]


def test_overwrite_moves_the_earlier_record_aside_and_keeps_other_files(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = tmp_path / "checkpoints" / "step_2.pt"
    ckpt.parent.mkdir()
    ckpt.write_bytes(b"weights")
    _run(tmp_path, [1.0, 2.0, 3.0])
    w = _run(tmp_path, [7.0], if_exists="overwrite", announce=True)
    assert w.run_dir == tmp_path
    assert _losses(tmp_path / "metrics.sqlite") == ([0], [7.0])
    old = tmp_path / ".replaced" / "1" / "metrics.sqlite"
    assert _losses(old) == ([0, 1, 2], [1.0, 2.0, 3.0])  # moved, not deleted
    assert ckpt.read_bytes() == b"weights"  # not the watcher's to move
    assert f"the earlier record was moved to {old.parent}" in capsys.readouterr().err
    _run(tmp_path, [8.0], if_exists="overwrite")
    assert _losses(tmp_path / ".replaced" / "2" / "metrics.sqlite") == ([0], [7.0])
    # on an empty run_dir there is nothing to move
    fresh = tmp_path / "fresh"
    _run(fresh, [1.0], if_exists="overwrite")
    assert not (fresh / ".replaced").exists()


def test_overwrite_moves_the_stores_of_ranks_this_run_does_not_have(
        tmp_path: pathlib.Path) -> None:
    for rank in (0, 1):
        _run(tmp_path, [1.0, 2.0], rank=rank, world_size=2)
    _run(tmp_path, [3.0], if_exists="overwrite")  # one process over a 2-rank record
    assert sorted(p.name for p in tmp_path.glob("*.sqlite")) == ["metrics.sqlite"]
    assert sorted(p.name for p in (tmp_path / ".replaced" / "1").glob("*.sqlite")) == [
        "metrics.rank0.sqlite", "metrics.rank1.sqlite"]


def test_overwrite_leaves_a_store_another_process_writes(tmp_path: pathlib.Path) -> None:
    with RunStore(tmp_path) as live:
        live.log(0, {"loss": 1.0})
        live.flush()
        with pytest.raises(StoreLockedError):
            _run(tmp_path, [2.0], if_exists="overwrite")
    assert _losses(tmp_path / "metrics.sqlite") == ([0], [1.0])


def test_resume_appends_after_the_last_step(tmp_path: pathlib.Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    _run(tmp_path, [1.0, 2.0, 3.0])
    w = _run(tmp_path, [4.0, 5.0], if_exists="resume", announce=True)
    assert w.current_step == 5
    assert _losses(tmp_path / "metrics.sqlite") == ([0, 1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0, 5.0])
    assert read_store(tmp_path / "metrics.sqlite").meta["sessions"] == 2
    err = capsys.readouterr().err
    assert "appending to the earlier record, from step 3" in err
    assert "recorded steps 3-4 to" in err
    # on an empty run_dir "resume" is a new run
    assert _run(tmp_path / "new", [1.0], if_exists="resume").current_step == 1


def test_last_step(tmp_path: pathlib.Path) -> None:
    assert last_step(tmp_path / "metrics.sqlite") is None
    with RunStore(tmp_path) as store:
        store.log(4, {"loss": 1.0})
        store.log(2, {"loss": 1.0})
    assert last_step(tmp_path / "metrics.sqlite") == 4
    (tmp_path / "junk.sqlite").write_bytes(b"not a database")
    assert last_step(tmp_path / "junk.sqlite") is None


def test_overwrite_that_cannot_move_the_record_says_so(tmp_path: pathlib.Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from trainmedic.live import run_dir as run_dir_mod

    _run(tmp_path, [1.0])

    def refuse(src: object, dst: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(run_dir_mod.os, "replace", refuse)
    with pytest.raises(ConfigError, match=r"if_exists='overwrite' could not move"):
        _run(tmp_path, [2.0], if_exists="overwrite")
    monkeypatch.setattr(run_dir_mod.os, "replace", os.replace)
    assert _losses(tmp_path / "metrics.sqlite") == ([0], [1.0])
