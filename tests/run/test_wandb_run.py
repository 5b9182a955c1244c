"""W&B runs: offline run folders written by the real wandb library read back equal to what
was logged (values, steps, config, summary); several runs in one wandb/ folder; a cut log; no
wandb installed; exported histories (CSV, Parquet)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from trainmedic.errors import MissingExtraError
from trainmedic.run import load_run

# What the writer logs (a pure function of the step, so the test can recompute it). 400 steps
# make the log span several 32 KiB blocks, so records split across blocks are read too.
N_STEPS = 400
CONFIG = {"lr": 3e-4, "batch_size": 8, "optimizer": {"name": "adamw", "eps": 1e-8},
          "layers": [2, 4], "tag": "baseline"}

_WRITER = textwrap.dedent("""\
    import math, sys, wandb
    root, name, scale = sys.argv[1], sys.argv[2], float(sys.argv[3])
    config = {config!r}
    run = wandb.init(project="tm-test", name=name, config=config, dir=root)
    for i in range({n}):
        row = {{"train/loss": scale * (2.0 - 0.1 * i) + 1e-9 * i, "lr": 1e-3 * (i + 1),
                "perf/step_time_s": 0.05 + 0.001 * (i % 3)}}
        if i % 4 == 3:
            row["val/loss"] = scale * (2.1 - 0.1 * i)
        if i == 7:
            row["grad_norm"] = float("nan")
        wandb.log(row, step=i)
    wandb.config.update({{"late_key": 5}})
    wandb.finish()
    """).format(config=CONFIG, n=N_STEPS)


def _loss(i: int, scale: float) -> float:
    return scale * (2.0 - 0.1 * i) + 1e-9 * i


def _write_runs(root: Path, runs: list[tuple[str, float]]) -> None:
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DIR=str(root),
               WANDB_CONSOLE="off", WANDB_DISABLE_GIT="true", WANDB_DISABLE_CODE="true")
    script = root / "writer.py"
    script.write_text(_WRITER)
    for name, scale in runs:
        subprocess.run([sys.executable, str(script), str(root), name, str(scale)], env=env,
                       check=True, timeout=120, capture_output=True, cwd=root)
    script.unlink()


@pytest.fixture(scope="module")
def wandb_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two offline runs written by the real wandb library, one after the other."""
    pytest.importorskip("wandb")
    root = tmp_path_factory.mktemp("wb")
    _write_runs(root, [("first", 1.0), ("second", 2.0)])
    return root


def _run_dirs(root: Path) -> list[Path]:
    return sorted(p for p in (root / "wandb").iterdir()
                  if p.name.startswith("offline-run-") and not p.is_symlink())


def test_an_offline_run_reads_back_equal_to_what_was_logged(wandb_root: Path) -> None:
    second = next(d for d in _run_dirs(wandb_root)
                  if load_run(str(d)).meta.get("run_name") == "second")
    log = next(second.glob("*.wandb"))
    assert log.stat().st_size > 2 * 32768
    run = load_run(str(second))
    steps = list(range(N_STEPS))
    loss = run.get("loss")
    assert loss is not None and loss.steps.tolist() == steps
    assert loss.values.tolist() == [_loss(i, 2.0) for i in steps]  # exact, not approx
    assert run.get("lr").values.tolist() == [1e-3 * (i + 1) for i in steps]
    val = run.get("val_loss")
    assert val.steps.tolist() == steps[3::4]
    assert val.values.tolist() == [2.0 * (2.1 - 0.1 * i) for i in steps[3::4]]
    st = run.get("step_time_s")
    assert st.values.tolist() == [0.05 + 0.001 * (i % 3) for i in steps]
    gn = run.get("grad_norm")
    assert gn.steps.tolist() == [7] and math.isnan(gn.values[0])
    assert run.meta["config"] == {**CONFIG, "late_key": 5}
    assert run.meta["summary"]["train/loss"] == _loss(N_STEPS - 1, 2.0)
    assert run.meta["run_name"] == "second" and run.meta["wandb_project"] == "tm-test"
    cols = {m["column"]: m["canonical"] for m in run.meta["mapping"]}
    assert cols["train/loss"] == "loss" and cols["val/loss"] == "val_loss"


def test_a_wandb_folder_with_two_runs_reads_the_newest_and_names_the_other(
        wandb_root: Path) -> None:
    run = load_run(str(wandb_root / "wandb"))
    assert run.meta["run_name"] == "second"  # written last
    assert len(run.get("loss")) == N_STEPS  # not the two runs merged
    other = [n for n in run.notes if n.kind == "other_runs"]
    assert other and _run_dirs(wandb_root)[0].name in other[0].detail


def test_a_runs_config_is_compared_once_not_again_from_its_config_yaml(
        wandb_root: Path, tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    from trainmedic.compare.config_diff import run_config

    # an online run also keeps files/config.yaml ({key: {value: ...}}); offline runs do not
    d = tmp_path / _run_dirs(wandb_root)[0].name
    shutil.copytree(_run_dirs(wandb_root)[0], d)
    (d / "files").mkdir(exist_ok=True)
    (d / "files" / "config.yaml").write_text("lr:\n  value: 0.0003\n")
    keys = run_config(load_run(str(d)), str(d))
    assert keys["config.lr"] == (3e-4, "meta") and keys["config.optimizer.eps"][0] == 1e-8
    assert not [k for k in keys if k.startswith("wandb.")]


def test_the_transaction_log_file_alone_is_read(wandb_root: Path) -> None:
    d = _run_dirs(wandb_root)[0]
    log = next(d.glob("*.wandb"))
    run = load_run(str(log))
    assert run.get("loss").steps.tolist() == list(range(N_STEPS))


def test_a_damaged_log_keeps_the_rows_before_the_damage(wandb_root: Path,
                                                        tmp_path: Path) -> None:
    log = next(_run_dirs(wandb_root)[0].glob("*.wandb"))
    data = log.read_bytes()
    k = int(len(data) * 0.6)
    bad = tmp_path / "run-bad.wandb"  # one byte flipped: that record's checksum fails
    bad.write_bytes(data[:k] + bytes([data[k] ^ 0xFF]) + data[k + 1:])
    run = load_run(str(bad))
    loss = run.get("loss")
    assert 0 < len(loss) < N_STEPS
    assert loss.steps.tolist() == list(range(len(loss)))
    scale = 1.0 if loss.values[0] == _loss(0, 1.0) else 2.0
    assert loss.values.tolist() == [_loss(i, scale) for i in range(len(loss))]
    assert any(n.kind == "truncated_record" for n in run.notes)
    cut = tmp_path / "run-cut.wandb"  # a writer killed mid-record
    cut.write_bytes(data[:k])
    assert 0 < len(load_run(str(cut)).get("loss")) < N_STEPS


# A run written by wandb 0.31 in offline mode (machine info, stats and code capture off),
# committed so that the paths below run where wandb is not installed (CI).
FIXTURE = Path(__file__).resolve().parent.parent / "data" / "trackers" / "wandb"


def test_the_committed_offline_run_reads_back() -> None:
    pytest.importorskip("wandb")
    run = load_run(str(FIXTURE))
    assert run.get("loss").steps.tolist() == [0, 10, 20, 30, 40]
    assert run.get("loss").values.tolist() == [1.0 - 0.125 * i for i in range(5)]
    assert run.meta["config"] == {"lr": 0.001, "batch_size": 4}


def test_without_wandb_a_run_folder_is_a_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.setitem(sys.modules, "wandb.proto", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'trainmedic\[wandb\]'"):
        load_run(str(FIXTURE))


def test_without_wandb_the_cli_exits_2_with_one_line(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from trainmedic.cli.main import main

    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.setitem(sys.modules, "wandb.proto", None)
    rc = main(["diagnose", str(FIXTURE)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "trainmedic[wandb]" in err


def test_a_wandb_folder_beside_other_logs_is_not_read_twice(tmp_path: Path) -> None:
    d = tmp_path / "out" / "wandb" / "run-20240101_000000-abc"
    d.mkdir(parents=True)
    # a file that is not a valid log: reading it would fail the test
    (d / "run-abc.wandb").write_bytes(b":W&B\xe1\xbe\x00" + b"\x01" * 40)
    (tmp_path / "out" / "metrics.csv").write_text("step,loss\n1,2.0\n2,1.5\n")
    run = load_run(str(tmp_path / "out"))
    assert run.get("loss").values.tolist() == [2.0, 1.5]
    assert any("W&B run folders not read" in n.detail for n in run.notes)


def test_a_damaged_header_is_not_a_wandb_log(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    from trainmedic.errors import UnrecognizedInputError

    p = tmp_path / "run-x.wandb"
    p.write_bytes(b":W&B\x00\x00\x00" + b"\x00" * 20)
    with pytest.raises(UnrecognizedInputError, match="not a W&B transaction log"):
        load_run(str(p))


def test_history_csv_dumped_by_pandas_maps_namespaced_keys(tmp_path: Path) -> None:
    # run.history().to_csv(): pandas writes its index as an unnamed first column
    rows = [",_step,_runtime,_timestamp,train/loss,val/loss,train/learning_rate"]
    for i in range(6):
        val = f"{1.5 - 0.1 * i}" if i % 2 else ""
        rows.append(f"{i},{i * 10},{i * 2.0},{1700000000 + 2 * i},{2.0 - 0.1 * i},{val},"
                    f"{1e-4 * (i + 1)}")
    p = tmp_path / "history.csv"
    p.write_text("\n".join(rows) + "\n")
    run = load_run(str(p))
    assert run.get("loss").steps.tolist() == [0, 10, 20, 30, 40, 50]
    assert run.get("loss").values.tolist() == pytest.approx([2.0 - 0.1 * i for i in range(6)])
    assert run.get("val_loss").steps.tolist() == [10, 30, 50]
    assert run.has("lr")


def test_history_parquet_export(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    steps = list(range(0, 50, 5))
    t = pa.table({"_step": steps, "_runtime": [s * 0.5 for s in steps],
                  "_timestamp": [1.7e9 + s * 0.5 for s in steps],
                  "train/loss": [3.0 - s / 50 for s in steps],
                  "val/loss": [3.1 - s / 50 if s % 10 == 0 else None for s in steps],
                  "media": [json.dumps({"_type": "image"})] * len(steps)})
    p = tmp_path / "history.parquet"
    pq.write_table(t, p)
    run = load_run(str(p))
    assert run.get("loss").steps.tolist() == steps
    assert run.get("loss").values.tolist() == [3.0 - s / 50 for s in steps]
    assert run.get("val_loss").steps.tolist() == steps[::2]
    assert not run.has("media")
    # _runtime is a clock: 2.5 s between rows 5 steps apart
    assert np.allclose(run.get("step_time_s").values, 0.5)


_RESUMER = textwrap.dedent("""\
    import sys, wandb
    root, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    run = wandb.init(project="tm-test", id="exp-lr3e-4_b", resume="allow", dir=root)
    for i in range(first, last):
        wandb.log({"train/loss": 5.0 - 0.01 * i}, step=i)
    wandb.finish()
    """)


def test_a_resumed_run_reads_its_sessions_as_one_run(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DIR=str(tmp_path),
               WANDB_CONSOLE="off", WANDB_DISABLE_GIT="true", WANDB_DISABLE_CODE="true")
    script = tmp_path / "resumer.py"
    script.write_text(_RESUMER)
    for first, last in ((0, 30), (30, 60)):  # two sessions of one run id
        subprocess.run([sys.executable, str(script), str(tmp_path), str(first), str(last)],
                       env=env, check=True, timeout=120, capture_output=True, cwd=tmp_path)
        time.sleep(1.1)  # the folder names carry the start time to the second
    script.unlink()
    sessions = [d for d in (tmp_path / "wandb").iterdir()
                if d.name.endswith("-exp-lr3e-4_b") and not d.is_symlink()]
    assert len(sessions) == 2
    run = load_run(str(tmp_path / "wandb"))
    loss = run.get("loss")
    assert loss is not None
    np.testing.assert_array_equal(loss.steps, np.arange(60))
    np.testing.assert_allclose(loss.values, 5.0 - 0.01 * np.arange(60))
