"""One-metric exports (TensorBoard's "Download CSV", trackers' step,value files) and
Sacred's metrics.json, Ultralytics results.csv cut down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmedic.errors import UnrecognizedInputError
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


def test_tensorboard_json_export_takes_its_tag_from_the_file_name(tmp_path):
    p = tmp_path / "run-version_0-tag-train_loss.json"
    p.write_text(json.dumps([[1.7e9 + i, 10 * i, v] for i, v in enumerate([3.0, 2.0, 1.5])]))
    run = load_run(str(p))
    assert run.get("loss").values.tolist() == [3.0, 2.0, 1.5]
    assert list(run.get("loss").steps) == [0, 10, 20]


def test_a_dict_python_printed_is_read_as_its_literal(tmp_path):
    # print(history.history) > history.txt: single quotes and a bare nan, not JSON
    p = tmp_path / "history.txt"
    p.write_text(str({"loss": [0.9, 0.7, float("nan")], "val_loss": [1.0, 0.8, 0.85]}))
    run = load_run(str(p))
    assert run.get("loss").values[:2].tolist() == [0.9, 0.7]
    assert run.get("val_loss").values.tolist() == [1.0, 0.8, 0.85]


def test_a_printed_history_inside_a_console_log_is_read(tmp_path):
    p = tmp_path / "notebook.log"
    p.write_text("Epoch 1/3\n...\nEpoch 3/3\n...\n" + str(
        {"loss": [0.9, 0.7, 0.6], "val_loss": [1.0, 0.8, 0.85]}) + "\n")
    assert load_run(str(p)).get("val_loss").values.tolist() == [1.0, 0.8, 0.85]


def test_rows_under_one_key_beside_settings_and_plural_names(tmp_path):
    p = tmp_path / "results.json"
    p.write_text(json.dumps({"config": {"lr": 0.1}, "metrics": [
        {"step": i, "loss": 3.0 - i} for i in range(3)]}))
    run = load_run(str(p))
    assert run.get("loss").values.tolist() == [3.0, 2.0, 1.0]
    assert any(n.kind == "json_members_skipped" for n in run.notes)
    q = tmp_path / "curves.json"
    q.write_text(json.dumps({"train_losses": [3.0, 2.0, 1.5], "val_losses": [3.1, 2.5, 2.0]}))
    run = load_run(str(q))
    assert run.get("loss").values.tolist() == [3.0, 2.0, 1.5]
    assert run.get("val_loss").values.tolist() == [3.1, 2.5, 2.0]


def test_comment_lines_before_a_csv_header(tmp_path):
    p = tmp_path / "log.csv"
    p.write_text("# experiment: baseline\n# seed: 0\nstep,loss\n0,2.5\n1,2.4\n2,2.3\n")
    assert load_run(str(p)).get("loss").values.tolist() == [2.5, 2.4, 2.3]
    # np.savetxt(..., header="step,loss", delimiter=",") writes its header as a comment
    q = tmp_path / "saved.csv"
    q.write_text("# step,loss\n0,2.5\n1,2.4\n2,2.3\n")
    run = load_run(str(q))
    assert run.get("loss").values.tolist() == [2.5, 2.4, 2.3]
    assert list(run.get("loss").steps) == [0, 1, 2]


def test_nameless_numbers_take_their_name_from_the_file(tmp_path):
    values = [3.0, 2.5, 2.2, 2.0]
    (tmp_path / "losses.json").write_text(json.dumps(values))
    (tmp_path / "train_loss.txt").write_text("".join(f"{v}\n" for v in values))
    for name in ("losses.json", "train_loss.txt"):
        run = load_run(str(tmp_path / name))
        assert run.get("loss").values.tolist() == values
        assert any(n.kind == "metric_from_file_name" for n in run.notes)
    # a file of numbers whose name says nothing is not taken for a log
    (tmp_path / "ids.txt").write_text("".join(f"{v}\n" for v in values))
    with pytest.raises(UnrecognizedInputError):
        load_run(str(tmp_path / "ids.txt"))


def test_whole_model_dead_and_saturated_fractions_are_a_layer_named_model(tmp_path):
    p = tmp_path / "log.csv"
    p.write_text("step,loss,act/dead_frac,sat_frac\n" + "".join(
        f"{s},{1.0 - s / 100:.3f},0.97,0.8\n" for s in range(10, 110, 10)))
    run = load_run(str(p))
    assert run.has("layer/model/dead_frac") and run.has("layer/model/saturated_frac")
    from trainmedic.diagnose import diagnose

    found = {f.symptom for f in diagnose(run).findings if f.level >= 1}
    assert {"dead_units", "saturated_activations"} <= found


def test_a_dead_relu_fraction_spelled_out_is_the_whole_models_dead_fraction(tmp_path):
    p = tmp_path / "log.csv"
    p.write_text("step,loss,dead_relu_fraction\n" + "".join(
        f"{s},{1.0 - s / 100:.3f},0.9\n" for s in range(10, 110, 10)))
    assert load_run(str(p)).has("layer/model/dead_frac")


@pytest.mark.parametrize("name", ["tanh_saturation", "sat_ratio", "act_saturated_fraction"])
def test_an_activations_saturation_share_under_other_names(tmp_path, name):
    p = tmp_path / "log.csv"
    p.write_text(f"step,loss,{name},saturation\n" + "".join(
        f"{s},{1.0 - s / 100:.3f},0.8,1.2\n" for s in range(10, 110, 10)))
    run = load_run(str(p))
    assert run.has("layer/model/saturated_frac")
    assert run.has("saturation")  # a bare "saturation" (an augmentation knob) is not it


@pytest.mark.parametrize(("name", "read_as"), [
    ("Act/DeadFraction", "layer/model/dead_frac"),
    ("Act/SaturatedFraction", "layer/model/saturated_frac"),
    ("GradNorm/first_layer", "layer/first_layer/grad_norm"),
    ("act_dead_frac", "layer/model/dead_frac"),
])
def test_camel_case_tags_of_whole_model_stats(tmp_path, name, read_as):
    # TensorBoard tags written in CamelCase under a namespace read as their snake_case twins
    p = tmp_path / "log.csv"
    p.write_text(f"step,loss,grad_norm,{name}\n" + "".join(
        f"{s},{1.0 - s / 100:.3f},1.0,0.8\n" for s in range(10, 110, 10)))
    assert load_run(str(p)).has(read_as)
