"""One-metric exports (TensorBoard's "Download CSV", trackers' step,value files) and
Sacred's metrics.json, Ultralytics results.csv cut down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmedic.run import load_run


def _tb_csv(p: Path, values: list[float]) -> Path:
    p.write_text("Wall time,Step,Value\n" + "".join(
        f"{1.7e9 + i},{10 * i},{v}\n" for i, v in enumerate(values)))
    return p


def test_tensorboard_csv_export_takes_its_tag_from_the_file_name(tmp_path):
    run = load_run(str(_tb_csv(tmp_path / "run-version_0-tag-train_loss.csv", [3.0, 2.0, 1.5])))
    assert run.get("loss").values.tolist() == [3.0, 2.0, 1.5]
    assert list(run.get("loss").steps) == [0, 10, 20]
    assert any(n.kind == "metric_from_file_name" for n in run.notes)


def test_a_folder_of_tensorboard_exports_is_one_run(tmp_path):
    _tb_csv(tmp_path / "run-a-tag-train_loss.csv", [3.0, 2.0, 1.5, 1.2])
    _tb_csv(tmp_path / "run-a-tag-val_loss.csv", [3.1, 2.2, 1.8, 1.9])
    _tb_csv(tmp_path / "run-a-tag-lr.csv", [1e-3] * 4)
    run = load_run(str(tmp_path))
    assert run.has("loss") and run.has("val_loss") and run.has("lr")


def test_a_value_column_beside_other_metrics_keeps_its_name(tmp_path):
    p = tmp_path / "train_loss.csv"
    p.write_text("step,value,loss\n0,1,3.0\n1,1,2.0\n2,1,1.0\n")
    run = load_run(str(p))
    assert run.get("loss").values.tolist() == [3.0, 2.0, 1.0]
    assert not any(n.kind == "metric_from_file_name" for n in run.notes)


def test_an_unknown_file_name_is_kept_raw_for_the_user_to_map(tmp_path):
    p = tmp_path / "export_17.csv"
    p.write_text("step,value,timestamp\n0,3.0,1\n1,2.0,2\n2,1.0,3\n")
    run = load_run(str(p))
    assert not run.has("loss") and "export_17" in run.metrics()
    assert load_run(str(p), mapping={"loss": "export_17"}).get("loss").values.tolist() == \
        [3.0, 2.0, 1.0]


def test_sacred_metrics_json(tmp_path):
    doc = {"train.loss": {"steps": [0, 5, 10], "values": [2.0, 1.5, 1.0],
                          "timestamps": ["2024-01-01T00:00:00"] * 3},
           "val.loss": {"steps": [10], "values": [1.2], "timestamps": ["2024-01-01"]}}
    p = tmp_path / "metrics.json"
    p.write_text(json.dumps(doc))
    run = load_run(str(p))
    assert list(run.get("loss").steps) == [0, 5, 10]
    assert run.get("val_loss").values.tolist() == [1.2]


def test_a_yolo_results_csv_without_lr_columns_still_sums_its_loss_terms(tmp_path):
    p = tmp_path / "results.csv"
    p.write_text("epoch,train/box_loss,train/cls_loss,val/box_loss,val/cls_loss,"
                 "metrics/mAP50(B)\n1,1.0,0.5,1.1,0.6,0.2\n2,0.8,0.4,1.0,0.5,0.3\n"
                 "3,0.7,0.3,0.9,0.4,0.4\n")
    run = load_run(str(p))
    assert run.get("loss").values.tolist() == pytest.approx([1.5, 1.2, 1.0])
    assert run.get("val_loss").values.tolist() == pytest.approx([1.7, 1.5, 1.3])


def test_loss_terms_without_any_yolo_column_are_not_summed(tmp_path):
    p = tmp_path / "results.csv"
    p.write_text("epoch,train/box_loss,train/cls_loss\n1,1.0,0.5\n2,0.8,0.4\n3,0.7,0.3\n")
    assert not load_run(str(p)).has("loss")


def test_a_wandb_run_folder_reads_the_history_not_the_summary(tmp_path):
    files = tmp_path / "wandb" / "run-20240101_000000-abc123" / "files"
    files.mkdir(parents=True)
    rows = [{"_step": i, "_runtime": 0.5 * i, "train/loss": 3.0 - 0.01 * i,
             "train/global_step": 8 * i} for i in range(20)]
    (files / "wandb-history.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (files / "wandb-summary.json").write_text(json.dumps({"train/loss": 2.81, "_step": 19}))
    run = load_run(str(files.parent))
    assert run.get("loss").steps.tolist() == [8 * i for i in range(20)]  # one series, no 19
    assert any("wandb-summary.json" in n.detail for n in run.notes)
