"""The SQLite run store: round trip, crash safety, locking, degraded mode, rank files."""

from __future__ import annotations

import logging
import math
import os
import pathlib
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import trainmedic
from trainmedic.errors import ConfigError, TrainmedicError, UnrecognizedInputError
from trainmedic.run.store import (
    RunStore,
    StoreLockedError,
    is_store_file,
    read_rows,
    read_store,
    remove_store,
    store_path,
)

SRC = str(pathlib.Path(trainmedic.__file__).resolve().parents[1])


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    return env


@pytest.fixture(autouse=True)
def _no_torchrun_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def test_round_trip_keeps_values_order_and_meta(tmp_path: pathlib.Path) -> None:
    with RunStore(tmp_path, meta={"model": "mlp"}) as store:
        store.set_meta(batch_size=32, tags=["a", "b"])
        for step in range(100):
            store.log(step, {"loss": 1.0 / (step + 1), "lr": 0.1})
        store.log(100, {"loss": float("nan"), "grad_norm": float("inf"), "skipped": None})
    path = tmp_path / "metrics.sqlite"
    assert path.is_file() and is_store_file(path)
    run = read_store(path)
    assert run.metrics() == ["grad_norm", "loss", "lr"]
    assert run.ranks() == [None]
    loss = run.get("loss")
    assert loss is not None
    np.testing.assert_array_equal(loss.steps, np.arange(101))
    np.testing.assert_allclose(loss.values[:100], 1.0 / (np.arange(100) + 1))
    assert math.isnan(loss.values[100])  # SQLite stores NaN as NULL; read back as NaN
    gn = run.get("grad_norm")
    assert gn is not None and gn.values.tolist() == [math.inf]
    assert run.meta["model"] == "mlp" and run.meta["batch_size"] == 32
    assert run.meta["tags"] == ["a", "b"]
    assert run.meta["world_size"] == 1 and run.meta["rank"] is None
    assert run.meta["trainmedic_version"] == trainmedic.__version__
    assert run.meta["store_format"] == "trainmedic.store/1"
    assert "host" in run.meta and "started_at" in run.meta
    # A closed store is one self-contained file, and reading it leaves nothing beside it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.sqlite", "metrics.sqlite.lock"]


def test_table_is_long_format_readable_with_plain_sqlite(tmp_path: pathlib.Path) -> None:
    with RunStore(tmp_path) as store:
        store.log(7, {"loss": 2.5, "lr": 0.01})
    conn = sqlite3.connect(tmp_path / "metrics.sqlite")
    rows = conn.execute("SELECT step, metric, value FROM metrics_long ORDER BY seq").fetchall()
    conn.close()
    assert rows == [(7, "loss", 2.5), (7, "lr", 0.01)]


def test_reopening_appends_and_keeps_log_order(tmp_path: pathlib.Path) -> None:
    with RunStore(tmp_path) as store:
        for step in range(10):
            store.log(step, {"loss": float(step)})
    first = read_store(tmp_path / "metrics.sqlite").meta["started_at_unix"]
    with RunStore(tmp_path) as store:  # resumed from the checkpoint at step 5
        for step in range(5, 8):
            store.log(step, {"loss": 100.0 + step})
    run = read_store(tmp_path / "metrics.sqlite")
    loss = run.get("loss")
    assert loss is not None
    assert loss.steps.tolist() == list(range(10)) + [5, 6, 7]
    assert not loss.is_monotonic
    assert loss.clean().values[5] == 105.0  # last write wins in the clean view
    assert run.meta["sessions"] == 2
    assert run.meta["started_at_unix"] == first


def test_crash_mid_run_keeps_flushed_rows(tmp_path: pathlib.Path) -> None:
    script = textwrap.dedent(f"""
        import sys, time
        from trainmedic.run.store import RunStore
        store = RunStore({str(tmp_path)!r}, flush_rows=50, flush_interval_s=0.05)
        for step in range(1000):
            store.log(step, {{"loss": float(step)}})
        store.flush()
        print("flushed", flush=True)
        for step in range(1000, 1000000):   # still logging when the kill comes
            store.log(step, {{"loss": float(step)}})
            if step % 1000 == 0:
                time.sleep(0.001)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "flushed", proc.stderr.read() if proc.stderr else ""
        time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    path = tmp_path / "metrics.sqlite"
    assert (tmp_path / "metrics.sqlite-wal").exists()  # killed: the WAL was never folded back
    run = read_store(path)
    loss = run.get("loss")
    assert loss is not None and len(loss) >= 1000
    np.testing.assert_array_equal(loss.steps[:1000], np.arange(1000))
    np.testing.assert_array_equal(loss.values, loss.steps.astype(float))
    # The dead writer's lock went with its process: a new writer may continue the run.
    with RunStore(tmp_path) as store:
        store.log(5, {"loss": 5.0})


def test_live_store_is_readable_while_writing(tmp_path: pathlib.Path) -> None:
    with RunStore(tmp_path, flush_rows=10_000, flush_interval_s=0.05) as store:
        for step in range(20):
            store.log(step, {"loss": 1.0})
        deadline = time.monotonic() + 5
        n = 0
        while time.monotonic() < deadline:
            if (tmp_path / "metrics.sqlite-wal").exists():
                loss = read_store(tmp_path / "metrics.sqlite").get("loss")
                n = 0 if loss is None else len(loss)
                if n == 20:
                    break
            time.sleep(0.02)
        assert n == 20  # flushed by time, not by row count


def test_two_writers_on_one_rank_are_refused(tmp_path: pathlib.Path) -> None:
    with RunStore(tmp_path):
        with pytest.raises(StoreLockedError) as err:
            RunStore(tmp_path)
        assert isinstance(err.value, TrainmedicError)
        assert "another writer" in str(err.value)
        with RunStore(tmp_path, rank=1):  # another rank has its own file
            pass
    with RunStore(tmp_path):  # released on close
        pass


def test_two_writers_in_two_processes_are_refused(tmp_path: pathlib.Path) -> None:
    script = (f"from trainmedic.run.store import RunStore, StoreLockedError\n"
              f"try:\n    RunStore({str(tmp_path)!r})\nexcept StoreLockedError as e:\n"
              f"    print('refused:', e)\n")
    with RunStore(tmp_path):
        out = subprocess.run([sys.executable, "-c", script], env=_env(), capture_output=True,
                             text=True, timeout=60)
    assert out.stdout.startswith("refused:"), out.stderr


def test_unwritable_dir_warns_and_training_goes_on(tmp_path: pathlib.Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with caplog.at_level(logging.WARNING, logger="trainmedic.run.store"):
        store = RunStore(blocker / "run")  # no one can create a folder inside a file
    assert not store.enabled
    assert any("cannot write the run store" in r.getMessage() for r in caplog.records)
    store.log(0, {"loss": 1.0})  # a no-op, not an error
    store.set_meta(x=1)
    store.flush()
    store.close()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root can write into a read-only folder")
def test_read_only_dir_warns(tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with caplog.at_level(logging.WARNING):
            store = RunStore(ro)
        assert not store.enabled
        store.log(0, {"loss": 1.0})
        store.close()
    finally:
        ro.chmod(0o700)


def test_rank_file_naming(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert store_path(tmp_path) == tmp_path / "metrics.sqlite"
    with RunStore(tmp_path, rank=3, world_size=4) as store:
        assert store.path.name == "metrics.rank3.sqlite"
        store.log(0, {"loss": 1.0})
    run = read_store(tmp_path / "metrics.rank3.sqlite")
    assert run.ranks() == [3] and run.meta["world_size"] == 4
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with RunStore(tmp_path) as store:  # torchrun's environment
        assert store.path.name == "metrics.rank1.sqlite"
        store.log(0, {"loss": 1.0})
    assert read_store(tmp_path / "metrics.rank1.sqlite").ranks() == [1]
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    with RunStore(tmp_path / "single") as store:  # a world of one is a plain run
        assert store.path.name == "metrics.sqlite"


def test_rank_comes_from_meta_when_file_renamed(tmp_path: pathlib.Path) -> None:
    with RunStore(tmp_path, rank=2, world_size=4) as store:
        store.log(0, {"loss": 1.0})
    moved = tmp_path / "copy.sqlite"
    (tmp_path / "metrics.rank2.sqlite").rename(moved)
    assert read_store(moved).ranks() == [2]


def test_is_store_file_and_errors_on_foreign_files(tmp_path: pathlib.Path) -> None:
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"\x00\x01binary junk" * 10)
    assert not is_store_file(other)
    assert not is_store_file(junk)
    assert not is_store_file(tmp_path / "missing.sqlite")
    assert not is_store_file(tmp_path)
    with pytest.raises(UnrecognizedInputError) as err:
        read_store(other)
    assert str(other) in str(err.value)
    with pytest.raises(UnrecognizedInputError):
        read_store(junk)


def test_config_errors(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match="flush_rows"):
        RunStore(tmp_path, flush_rows=0)
    with pytest.raises(ConfigError, match="flush_interval_s"):
        RunStore(tmp_path, flush_interval_s=0)
    with pytest.raises(ConfigError, match="rank"):
        RunStore(tmp_path, rank=-1)
    with RunStore(tmp_path) as store:
        with pytest.raises(ConfigError, match="written by the store"):
            store.set_meta(rank=3)


def test_log_is_off_the_training_thread(tmp_path: pathlib.Path) -> None:
    """log() only enqueues: with the writer stuck on a slow disk, logging still returns fast."""
    store = RunStore(tmp_path, flush_rows=1)
    original = store._commit

    disk_back = threading.Event()

    def stuck_commit(conn: sqlite3.Connection, rows: list) -> None:  # type: ignore[type-arg]
        disk_back.wait(60.0)
        original(conn, rows)

    store._commit = stuck_commit  # type: ignore[method-assign]
    t0 = time.perf_counter()
    for step in range(200):
        store.log(step, {"loss": 1.0})
    # A commit on this thread would wait for the disk: a minute. 10 s is room for a stall of
    # the shared VM, and still cannot pass that.
    assert time.perf_counter() - t0 < 10.0
    store._commit = original  # type: ignore[method-assign]
    disk_back.set()
    store.close()
    loss = read_store(tmp_path / "metrics.sqlite").get("loss")
    assert loss is not None and len(loss) == 200


def test_store_module_does_not_import_torch() -> None:
    code = ("import sys, trainmedic.run.store\n"
            "assert 'torch' not in sys.modules, 'torch imported'\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


def test_read_is_fast_enough_for_a_long_run(tmp_path: pathlib.Path) -> None:
    with RunStore(tmp_path, flush_rows=10_000) as store:
        for step in range(50_000):
            store.log(step, {"loss": 1.0, "lr": 0.1, "grad_norm": 2.0, "step_time_s": 0.1})
    t0 = time.perf_counter()
    run = read_store(tmp_path / "metrics.sqlite")
    elapsed = time.perf_counter() - t0
    assert run.num_points == 200_000
    assert elapsed < 2.0  # ~0.15 s measured on 2 cores; generous for a noisy CI


def test_remove_store_refuses_a_store_being_written(tmp_path: pathlib.Path) -> None:
    store = RunStore(tmp_path)
    store.log(0, {"loss": 1.0})
    store.flush()
    path = store.path
    with pytest.raises(StoreLockedError, match="another writer"):
        remove_store(path)
    assert read_store(path).get("loss") is not None  # nothing of the live run was touched
    store.close()
    remove_store(path)
    assert not any(p.name != path.name + ".lock" for p in tmp_path.iterdir())
    remove_store(path)  # already gone: nothing to do


def test_read_rows_gives_one_row_per_step_in_a_range(tmp_path: pathlib.Path) -> None:
    with RunStore(tmp_path) as store:
        for step in range(10):
            store.log(step, {"loss": float(step), "lr": 0.1})
        store.log(5, {"loss": math.nan})  # a replayed step after a resume: the last wins
        store.log(4, {"grad_norm": 2.0})
    rows = read_rows(tmp_path / "metrics.sqlite", from_step=3, before_step=7)
    assert [s for s, _ in rows] == [3, 4, 5, 6]
    assert rows[1][1] == {"loss": 4.0, "lr": 0.1, "grad_norm": 2.0}
    assert math.isnan(rows[2][1]["loss"]) and rows[3][1] == {"loss": 6.0, "lr": 0.1}
    assert read_rows(tmp_path / "metrics.sqlite", from_step=20, before_step=30) == []
