"""``trainmedic export``, driven through its entry point as a user runs it: a run recorded by
the watcher (and a log fixture) exported to CSV and TensorBoard and read back."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from trainmedic.cli.main import cli, main
from trainmedic.run.loader import load_paths
from trainmedic.run.series import Run

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"


@pytest.fixture(autouse=True)
def _single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def watched_run(run_dir: Path, *, steps: int = 8, rank: int | None = None) -> None:
    """A tiny real training loop recorded by ``trainmedic.watch``."""
    torch = pytest.importorskip("torch")
    from trainmedic.live import watch

    torch.set_num_threads(1)
    torch.manual_seed(0 if rank is None else rank)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with watch(model, opt, run_dir=run_dir, rank=rank,
               world_size=None if rank is None else 2) as w:
        for _ in range(steps):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            w.step(loss, batch_size=16)
        w.log({"val_loss": 0.75})


def assert_same(a: Run, b: Run, *, float32: bool = False) -> None:
    want = {k: s for k, s in a.series.items() if len(s)}
    assert sorted(want, key=str) == sorted(b.series, key=str)
    for key, s in want.items():
        values = s.values.astype(np.float32).astype(np.float64) if float32 else s.values
        np.testing.assert_array_equal(b.series[key].steps, s.steps, err_msg=str(key))
        np.testing.assert_array_equal(b.series[key].values, values, err_msg=str(key))


def event_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if "tfevents" in p.name)


def test_watched_run_to_csv_and_tensorboard(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tensorboard")
    run_dir, out_csv, tb = tmp_path / "run", tmp_path / "out" / "run.csv", tmp_path / "tb"
    watched_run(run_dir)
    capsys.readouterr()  # the watcher's own start and exit lines; the export's output follows
    assert main(["export", str(run_dir), "--csv", str(out_csv), "--tensorboard", str(tb)]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"wrote {out_csv}: 8 rows, ")
    assert lines[1].startswith(f"wrote {tb}{'/'}events.out.tfevents.")
    assert ": 8 steps, " in lines[1] and "the diagnosis overview" in lines[1]
    assert err == ""  # piped: no progress bar
    store = load_paths([str(run_dir)])
    assert {"loss", "lr", "grad_norm", "step_time_s", "val_loss"} <= set(store.metrics())
    assert_same(store, load_paths([str(out_csv)]))
    assert_same(store, load_paths([str(tb)]), float32=True)

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tb))
    acc.Reload()
    assert set(store.metrics()) <= set(acc.Tags()["scalars"])
    assert "trainmedic/overview" in acc.Tags()["tensors"]


def test_per_rank_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tensorboard")
    run_dir = tmp_path / "run"
    for rank in (0, 1):
        watched_run(run_dir, steps=5, rank=rank)
    out_csv, tb = tmp_path / "m.csv", tmp_path / "tb"
    assert main(["export", str(run_dir), "--csv", str(out_csv), "--tensorboard", str(tb)]) == 0
    out = capsys.readouterr().out
    # The store's val_loss was logged on both ranks: no rank-less CSV.
    assert sorted(p.name for p in tmp_path.glob("*.csv")) == ["m.rank0.csv", "m.rank1.csv"]
    assert "(rank 0)" in out and "(rank 1)" in out
    assert {p.parent.name for p in event_files(tb)} == {"rank0", "rank1", "tb"}
    store = load_paths([str(run_dir)])
    assert store.ranks() == [0, 1]
    assert_same(store, load_paths([str(p) for p in tmp_path.glob("*.csv")]))
    assert_same(store, load_paths([str(tb)]), float32=True)


def test_log_fixture_with_nonfinite_values(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    src = LOGS / "nan_inf.csv"
    out_csv = tmp_path / "x.csv"
    assert main(["export", str(src), "--csv", str(out_csv)]) == 0
    assert capsys.readouterr().out == f"wrote {out_csv}: 6 rows, 2 metrics\n"
    text = out_csv.read_text()
    assert "nan" in text and "\n4,-inf," in text
    assert_same(load_paths([str(src)]), load_paths([str(out_csv)]))


def test_no_target_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(LOGS / "nan_inf.csv")]) == 2
    assert "--tensorboard DIR and/or --csv FILE" in capsys.readouterr().err
    result = CliRunner().invoke(cli, ["export", str(LOGS / "nan_inf.csv")])
    assert result.exit_code == 2


def test_help_shows_an_example() -> None:
    result = CliRunner().invoke(cli, ["export", "--help"])
    assert result.exit_code == 0
    assert "Examples:" in result.output
    assert "trainmedic export runs/exp1 --csv exp1.csv" in result.output
    assert "rank<N>" in result.output  # where per-rank files go is documented


def test_existing_outputs_are_refused_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tensorboard")
    src = str(LOGS / "lightning_sparse.csv")
    out_csv, tb = tmp_path / "out.csv", tmp_path / "tb"
    out_csv.write_text("precious\n")
    assert main(["export", src, "--csv", str(out_csv), "--tensorboard", str(tb)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(out_csv) in err and "--force" in err
    assert out_csv.read_text() == "precious\n"
    assert not tb.exists() or event_files(tb) == []  # the TB half was not written either

    assert main(["export", src, "--csv", str(out_csv), "--tensorboard", str(tb),
                 "--force"]) == 0
    assert out_csv.read_text().startswith("step,")
    first = event_files(tb)
    assert len(first) == 1
    capsys.readouterr()
    assert main(["export", src, "--tensorboard", str(tb)]) == 2
    assert "already holds TensorBoard event files" in capsys.readouterr().err
    assert main(["export", src, "--tensorboard", str(tb), "--force"]) == 0
    second = event_files(tb)
    assert len(second) == 1 and second != first


def test_an_input_is_never_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tensorboard")
    src = tmp_path / "log.csv"
    src.write_text((LOGS / "resume.csv").read_text())
    assert main(["export", str(src), "--csv", str(src), "--force"]) == 2
    assert "the run is read from" in capsys.readouterr().err
    tb = tmp_path / "tb"
    assert main(["export", str(src), "--tensorboard", str(tb)]) == 0
    assert main(["export", str(tb), "--tensorboard", str(tb), "--force"]) == 2
    assert "overlaps the run being read" in capsys.readouterr().err


def test_missing_tensorboard_exits_2_naming_the_extra(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard.summary.writer.event_file_writer", None)
    out_csv = tmp_path / "out.csv"
    code = main(["export", str(LOGS / "resume.csv"), "--csv", str(out_csv),
                 "--tensorboard", str(tmp_path / "tb")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'trainmedic[tensorboard]'" in err
    assert not out_csv.exists()


def test_map_option_renames_like_diagnose(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "log.csv"
    src.write_text("step,my_objective\n" + "".join(f"{s},{3.0 - s / 10}\n" for s in range(20)))
    out_csv = tmp_path / "out.csv"
    assert main(["export", str(src), "--csv", str(out_csv),
                 "--map", "loss=my_objective"]) == 0
    assert out_csv.read_text().splitlines()[0] == "step,loss"
    assert main(["export", str(src), "--csv", str(tmp_path / "o2.csv"),
                 "--map", "loss=nope"]) == 2
    assert "--map loss=nope" in capsys.readouterr().err


def test_unreadable_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(tmp_path / "missing.csv"), "--csv", str(tmp_path / "o.csv")]) == 2
    assert "does not exist" in capsys.readouterr().err
