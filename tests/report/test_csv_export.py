"""The wide CSV export: layout, round trip through trainmedic's own loader, per-rank files,
no silent overwrite, no half file after a crash."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from trainmedic.errors import InputError
from trainmedic.report.csv_export import wide_table, write_csv
from trainmedic.run.loader import load_paths
from trainmedic.run.series import Run

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"


def assert_same_series(a: Run, b: Run) -> None:
    """Every (metric, rank) of ``a`` is in ``b`` with the same steps and values, in log order
    (NaN equal to NaN, inf to inf), and ``b`` has nothing else."""
    want = {k: s for k, s in a.series.items() if len(s)}
    assert sorted(want, key=str) == sorted(b.series, key=str)
    for key, s in want.items():
        got = b.series[key]
        np.testing.assert_array_equal(got.steps, s.steps, err_msg=str(key))
        np.testing.assert_array_equal(got.values, s.values, err_msg=str(key))


def read_rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as f:
        return list(csv.reader(f))


@pytest.mark.parametrize("name", ["lightning_sparse.csv", "nan_inf.csv", "resume.csv",
                                  "hf_trainer_state.json", "detectron2_metrics.json"])
def test_fixture_round_trips_through_the_loader(tmp_path: Path, name: str) -> None:
    run = load_paths([str(LOGS / name)])
    out = tmp_path / "out.csv"
    (f,) = write_csv(run, out)
    assert f.path == out and f.rank is None
    assert_same_series(run, load_paths([str(out)]))


def test_layout_step_first_canonical_then_sorted_empty_cells_nonfinite_kept(
        tmp_path: Path) -> None:
    run = Run(source="x")
    run.add("zeta", [0, 2], [1.0, 2.0])
    run.add("alpha", [1], [0.5])
    run.add("lr", [0, 1, 2], [1e-3, 1e-3, 1e-3])
    run.add("loss", [0, 1, 2], [float("nan"), float("inf"), float("-inf")])
    run.add("val_loss", [2], [0.1 + 0.2])  # not exactly 0.3: repr keeps every digit
    out = tmp_path / "m.csv"
    write_csv(run, out)
    rows = read_rows(out)
    assert rows[0] == ["step", "loss", "val_loss", "lr", "alpha", "zeta"]
    assert rows[1] == ["0", "nan", "", "0.001", "", "1.0"]
    assert rows[2] == ["1", "inf", "", "0.001", "0.5", ""]
    assert rows[3] == ["2", "-inf", "0.30000000000000004", "0.001", "", "2.0"]
    assert len(rows) == 4  # one row per step


def test_resume_keeps_log_order(tmp_path: Path) -> None:
    run = Run(source="x")
    run.add("loss", [1, 2, 3, 2, 3, 4], [2.0, 1.9, 1.8, 1.95, 1.85, 1.7])
    run.add("lr", [1, 2, 3, 4], [0.1, 0.1, 0.1, 0.1])
    out = tmp_path / "m.csv"
    write_csv(run, out)
    back = load_paths([str(out)])
    assert_same_series(run, back)
    # Rows: the first block (loss's first run, all of lr), then loss's re-run after the resume.
    assert [r[0] for r in read_rows(out)[1:]] == ["1", "2", "3", "4", "2", "3", "4"]
    assert [r[1] for r in read_rows(out)[1:]] == ["2.0", "1.9", "1.8", "", "1.95", "1.85", "1.7"]


def test_wide_table_chunks_agree_with_one_block() -> None:
    rng = np.random.default_rng(1)
    run = Run(source="x")
    for k in range(4):
        steps = np.sort(rng.choice(50, size=20 + k, replace=False))
        run.add(f"m{k}", steps, rng.standard_normal(len(steps)))
    table = wide_table(run, None)
    (whole,) = list(table.chunks(size=10_000))
    parts = list(table.chunks(size=7))
    assert len(parts) == math.ceil(len(table) / 7)
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), whole[0])
    np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), whole[1])
    np.testing.assert_array_equal(np.concatenate([p[2] for p in parts]), whole[2])
    assert int(whole[2].sum()) == run.num_points


def test_per_rank_run_one_file_per_rank(tmp_path: Path) -> None:
    run = Run(source="x")
    for rank in (0, 1):
        run.add("loss", [0, 1, 2], [3.0 + rank, 2.0, float("nan")], rank)
        run.add("step_time_s", [0, 1, 2], [0.1, 0.2 * (rank + 1), 0.1], rank)
    run.add("val_loss", [2], [1.5])  # no rank
    out = tmp_path / "metrics.csv"
    files = write_csv(run, out)
    assert [(f.path.name, f.rank) for f in files] == [
        ("metrics.csv", None), ("metrics.rank0.csv", 0), ("metrics.rank1.csv", 1)]
    assert read_rows(tmp_path / "metrics.rank1.csv")[0] == ["step", "loss", "step_time_s"]
    back = load_paths([str(f.path) for f in files])
    assert_same_series(run, back)
    # The folder alone reads back the same way.
    assert_same_series(run, load_paths([str(tmp_path)]))


def test_run_store_with_layer_metrics_round_trips(tmp_path: Path) -> None:
    from trainmedic.run.store import RunStore

    with RunStore(tmp_path / "run", rank=None) as store:
        for step in range(20):
            values = {"loss": 2.0 / (step + 1), "lr": 1e-3,
                      "grad_norm": float("nan") if step == 7 else 1.0 + step}
            if step % 5 == 0:
                values["layer/blocks.0.attn/grad_norm"] = 0.01 * step
                values["layer/head/dead_frac"] = float("inf") if step == 10 else 0.25
            store.log(step, values)
    run = load_paths([str(tmp_path / "run")])
    out = tmp_path / "store.csv"
    write_csv(run, out)
    header = read_rows(out)[0]
    assert header[:4] == ["step", "loss", "grad_norm", "lr"]
    assert "layer/blocks.0.attn/grad_norm" in header
    assert_same_series(run, load_paths([str(out)]))


def test_refuses_to_overwrite_unless_forced(tmp_path: Path) -> None:
    run = load_paths([str(LOGS / "nan_inf.csv")])
    out = tmp_path / "out.csv"
    out.write_text("keep me\n")
    with pytest.raises(InputError, match="already exists.*--force"):
        write_csv(run, out)
    assert out.read_text() == "keep me\n"
    write_csv(run, out, force=True)
    assert out.read_text().startswith("step,")
    with pytest.raises(InputError, match="is a folder"):
        write_csv(run, tmp_path)


def test_a_crash_mid_write_leaves_no_file(tmp_path: Path) -> None:
    run = Run(source="x")
    run.add("loss", np.arange(10_000), np.linspace(3, 1, 10_000))
    out = tmp_path / "out.csv"

    def crash(done: int, total: int) -> None:
        if done >= 4096:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_csv(run, out, progress=crash)
    assert list(tmp_path.iterdir()) == []
    # And an existing file is left as it was.
    out.write_text("old\n")
    with pytest.raises(KeyboardInterrupt):
        write_csv(run, out, force=True, progress=crash)
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_metric_named_step_does_not_clash(tmp_path: Path) -> None:
    run = Run(source="x")
    run.add("loss", [0, 1], [1.0, 2.0])
    run.add("step", [0, 1], [100.0, 101.0])
    out = tmp_path / "out.csv"
    write_csv(run, out)
    assert read_rows(out)[0] == ["step", "loss", "raw/step"]
    back = load_paths([str(out)])
    np.testing.assert_array_equal(back.get("raw/step").values, [100.0, 101.0])  # type: ignore[union-attr]
    np.testing.assert_array_equal(back.get("loss").steps, [0, 1])  # type: ignore[union-attr]
