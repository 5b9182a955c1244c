"""JSON Lines and JSON-rows importer, and HF trainer_state.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trainmedic.errors import UnrecognizedInputError
from trainmedic.run.hf_state import read_hf_state
from trainmedic.run.jsonlog import flatten, read_json_rows, read_jsonl

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"


def write(tmp_path: Path, text: str, name: str = "metrics.jsonl") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_detectron2_metrics_json():
    t = read_jsonl(LOGS / "detectron2_metrics.json")
    assert t.step_column == "iteration"
    assert t.columns["total_loss"].steps.tolist() == [19, 39, 59, 79]
    assert t.columns["fast_rcnn/cls_accuracy"].values.tolist() == [0.8] * 4
    assert t.columns["bbox/AP"].steps.tolist() == [79]


def test_nested_objects_flattened_and_strings_ignored():
    t = read_jsonl(LOGS / "nested.jsonl")
    assert set(t.columns) == {"train/loss", "train/lr", "eval/loss"}
    assert t.columns["eval/loss"].steps.tolist() == [1, 2, 3]
    assert not [n for n in t.notes if n.kind == "non_numeric_cell"]  # 'note' is a text key


def test_flatten():
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a/b": 1, "a/c/d": 2, "e": 3}


def test_nonfinite_literals_and_strings(tmp_path):
    p = write(tmp_path, '{"step": 1, "loss": NaN}\n{"step": 2, "loss": Infinity}\n'
              '{"step": 3, "loss": "nan"}\n{"step": 4, "loss": "-inf"}\n{"step": 5, "loss": 1}\n')
    v = read_jsonl(p).columns["loss"].values
    assert np.isnan(v[0]) and v[1] == np.inf and np.isnan(v[2]) and v[3] == -np.inf
    assert v[4] == 1.0


def test_truncated_last_line_kept_good_lines(tmp_path):
    p = write(tmp_path, '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.9}\n{"step": 3, "lo')
    t = read_jsonl(p)
    assert t.columns["loss"].steps.tolist() == [1, 2]
    note = next(n for n in t.notes if n.kind == "truncated_last_line")
    assert note.line == 3


def test_bad_middle_line_skipped_with_line_number(tmp_path):
    p = write(tmp_path, '{"step": 1, "loss": 2.0}\nnot json\n[1, 2]\n{"step": 3, "loss": 1.8}\n')
    t = read_jsonl(p)
    assert t.columns["loss"].steps.tolist() == [1, 3]
    note = next(n for n in t.notes if n.kind == "skipped_line")
    assert note.line == 2 and "2 lines" in note.detail


def test_non_numeric_value_of_numeric_key_is_noted(tmp_path):
    p = write(tmp_path, '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": "oops"}\n'
              '{"step": 3, "loss": 1.8}\n')
    t = read_jsonl(p)
    assert t.columns["loss"].steps.tolist() == [1, 3]
    note = next(n for n in t.notes if n.kind == "non_numeric_cell")
    assert note.line == 2


def test_decreasing_steps_kept_in_log_order(tmp_path):
    p = write(tmp_path, "".join(json.dumps({"iteration": s, "total_loss": 1.0})
                                + "\n" for s in (19, 19, 39, 20, 40)))
    assert read_jsonl(p).columns["total_loss"].steps.tolist() == [19, 19, 39, 20, 40]


def test_empty_jsonl(tmp_path):
    with pytest.raises(UnrecognizedInputError, match="is empty"):
        read_jsonl(write(tmp_path, "\n\n"))


def test_jsonl_without_numbers(tmp_path):
    with pytest.raises(UnrecognizedInputError, match="no numeric"):
        read_jsonl(write(tmp_path, '{"a": "x"}\n{"a": "y"}\n'))


def test_rows_without_step_dropped(tmp_path):
    p = write(tmp_path, '{"env_info": "cuda", "seed": 0}\n{"iter": 10, "loss": 2.0}\n'
              '{"iter": 20, "loss": 1.5}\n{"iter": 30, "loss": 1.2}\n')
    t = read_jsonl(p)
    assert t.step_column == "iter"
    assert t.columns["loss"].steps.tolist() == [10, 20, 30]
    assert "seed" not in t.columns
    assert any(n.kind == "missing_step" for n in t.notes)


def test_json_rows_list_and_columns(tmp_path):
    t = read_json_rows(tmp_path / "x.json", [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}])
    assert t.columns["loss"].steps.tolist() == [1, 2]
    t = read_json_rows(tmp_path / "x.json", {"step": [5, 6], "loss": [2.0, 1.0]})
    assert t.columns["loss"].steps.tolist() == [5, 6]
    with pytest.raises(UnrecognizedInputError, match="not a training log"):
        read_json_rows(tmp_path / "config.json", {"hidden_size": 768, "vocab": "x"})


def test_hf_trainer_state_rows_and_meta():
    doc = json.loads((LOGS / "hf_trainer_state.json").read_text())
    t = read_hf_state(LOGS / "hf_trainer_state.json", doc)
    assert t.columns["loss"].steps.tolist() == [5, 10, 15, 20]
    assert t.columns["eval_loss"].steps.tolist() == [10, 20]
    assert t.columns["eval_accuracy"].values.tolist() == [0.4, 0.5]
    assert t.columns["learning_rate"].values[0] == 5e-05
    # predict rows (no step) are not series; the summary row is meta, not a series
    assert "predict_loss" not in t.columns
    assert "train_loss" not in t.columns and "train_runtime" not in t.columns
    assert t.meta["hf_train_summary"]["train_loss"] == 2.0
    assert any(n.kind == "rows_without_step" for n in t.notes)
    for k, v in {"max_steps": 20, "global_step": 20, "logging_steps": 5, "eval_steps": 10,
                 "num_train_epochs": 2}.items():
        assert t.meta[k] == v


def test_hf_state_with_no_step_rows(tmp_path):
    with pytest.raises(UnrecognizedInputError, match="log_history"):
        read_hf_state(tmp_path / "s.json", {"log_history": [{"predict_loss": 1.0}]})


def test_mmdet_per_epoch_iter_becomes_global(tmp_path):
    lines = ['{"env_info": "x"}']
    for ep in (1, 2, 3):
        for it in (50, 100, 150):
            lines.append(json.dumps({"mode": "train", "epoch": ep, "iter": it, "loss": 1.0 / ep,
                                     "time": 0.5, "data_time": 0.1}))
        lines.append(json.dumps({"mode": "val", "epoch": ep, "iter": 150, "bbox_mAP": 0.1 * ep}))
    t = read_jsonl(write(tmp_path, "\n".join(lines) + "\n"))
    assert t.columns["loss"].steps.tolist() == [50, 100, 150, 200, 250, 300, 350, 400, 450]
    assert t.columns["bbox_mAP"].steps.tolist() == [150, 300, 450]
    assert any(n.kind == "step_per_epoch" for n in t.notes)


def test_real_resume_is_not_globalized(tmp_path):
    # steps go back without a new epoch: a resume, kept as logged
    rows = [(1, 10), (1, 20), (1, 30), (1, 20), (1, 30), (2, 10), (2, 20)]
    p = write(tmp_path, "".join(json.dumps({"epoch": e, "iter": i, "loss": 1.0}) + "\n"
                                for e, i in rows))
    assert read_jsonl(p).columns["loss"].steps.tolist() == [10, 20, 30, 20, 30, 10, 20]


def test_tracker_scalar_events_one_batch_per_line(tmp_path):
    # ClearML's offline session: each line a batch of events {metric: title, variant:
    # series, iter, value}; vectors and console lines are not scalars
    from trainmedic.run import load_run

    lines = []
    for it in range(5, 105, 5):
        ev = [{"type": "training_stats_scalar", "task": "t", "iter": it, "metric": "loss",
               "variant": "train", "value": 2.0 - it / 100, "timestamp": 1},
              {"type": "training_stats_scalar", "task": "t", "iter": it,
               "metric": "learning_rate", "variant": "lr", "value": 0.003, "timestamp": 1},
              {"type": "training_stats_scalar", "task": "t", "iter": it, "metric": "grad_norm",
               "variant": "total", "value": 0.7, "timestamp": 1},
              {"type": "training_stats_vector", "task": "t", "iter": it, "metric": "hist",
               "variant": "w", "value": 1.0, "timestamp": 1}]
        if it % 25 == 0:
            ev.append({"type": "training_stats_scalar", "task": "t", "iter": it,
                       "metric": "loss", "variant": "val", "value": 2.1 - it / 100,
                       "timestamp": 1})
        lines.append(json.dumps(ev))
    d = tmp_path / "offline-1" / "metrics.jsonl"
    d.parent.mkdir()
    d.write_text("\n".join(lines) + "\n")
    run = load_run(str(tmp_path))
    assert sorted(run.metrics()) == ["grad_norm", "loss", "lr", "val_loss"]
    assert run.get("loss").steps.tolist() == list(range(5, 105, 5))
    assert run.get("val_loss").values.tolist() == pytest.approx([1.85, 1.6, 1.35, 1.1])


def test_allennlp_metrics_files_one_per_epoch(tmp_path):
    from trainmedic.run import load_run

    ser = tmp_path / "serialization"
    ser.mkdir()
    (ser / "config.json").write_text('{"trainer": {"num_epochs": 12}}')
    for e in range(12):
        (ser / f"metrics_epoch_{e}.json").write_text(json.dumps(
            {"best_epoch": 0, "training_duration": "0:00:00.007", "epoch": e,
             "training_loss": 1.0 - 0.05 * e, "validation_loss": 1.1 - 0.02 * e}, indent=2))
    run = load_run(str(tmp_path))
    assert run.get("loss").steps.tolist() == list(range(12))
    assert run.get("val_loss").values.tolist() == pytest.approx([1.1 - 0.02 * e
                                                                 for e in range(12)])


def test_an_evaluation_rows_timings_are_not_training_step_times(tmp_path):
    # mmengine's vis_data/scalars.json: the validation row carries the val loop's own
    # per-iteration "time" and "data_time", 10x a training step's
    lines = []
    for step in range(10, 310, 10):
        lines.append(json.dumps({"lr": 0.01, "data_time": 2e-5, "loss": 1.0 - step / 1000,
                                 "time": 0.0014, "epoch": step // 20, "iter": step,
                                 "step": step}))
        if step % 50 == 0:
            lines.append(json.dumps({"val/loss": 0.9, "data_time": 0.0011, "time": 0.0123,
                                     "step": step}))
    t = read_jsonl(write(tmp_path, "\n".join(lines) + "\n", name="scalars.json"))
    assert np.all(t.columns["time"].values == pytest.approx(0.0014))
    assert len(t.columns["val_time"]) == 6


def test_a_progress_counter_string_is_the_step(tmp_path):
    # ms-swift's logging.jsonl: "global_step/max_steps": "5/300", and a rate named in brackets
    rows = [{"loss": 1.0 - 0.01 * i, "train_speed(iter/s)": 60.0 + i,
             "global_step/max_steps": f"{5 * (i + 1)}/300", "percentage": f"{i}%"}
            for i in range(12)]
    p = write(tmp_path, "\n".join(json.dumps(r) for r in rows) + "\n", "logging.jsonl")
    t = read_jsonl(p)
    assert t.step_column == "global_step"
    assert t.columns["loss"].steps.tolist() == [5 * (i + 1) for i in range(12)]
    assert t.columns["max_steps"].values.tolist() == [300.0] * 12
    from trainmedic.diagnose import diagnose
    from trainmedic.run import load_run
    mapping = diagnose(load_run(str(p))).mapping
    assert {"column": "train_speed(iter/s)", "canonical": "step_time_s"}.items() <= \
        next(m for m in mapping if m["column"] == "train_speed(iter/s)").items()


def test_mmcv_evaluation_rows_are_validation_at_the_training_position(tmp_path):
    # mmcv 1.x's .log.json: "iter" restarts every epoch, and an evaluation row's "iter" is
    # the length of the validation loader (16 here), not a position
    rows = [{"env_info": "MMCV: 1.7.2", "seed": 1}]
    for ep in (1, 2, 3):
        for it in (5, 10, 15, 20):
            rows.append({"mode": "train", "epoch": ep, "iter": it, "lr": 0.003,
                         "loss": 2.0 / (ep * it)})
            if it == 20:
                rows.append({"mode": "val", "epoch": ep, "iter": 16, "lr": 0.003,
                             "loss": 1.0 / ep})
    p = write(tmp_path, "".join(json.dumps(r) + "\n" for r in rows), name="x.log.json")
    t = read_jsonl(p)
    assert t.columns["loss"].steps.tolist() == list(range(5, 65, 5))
    assert t.columns["val_loss"].steps.tolist() == [20, 40, 60]
    assert t.columns["val_loss"].values.tolist() == [1.0, 0.5, 1 / 3]
    assert t.columns["lr"].steps.tolist() == t.columns["loss"].steps.tolist()


@pytest.mark.parametrize(("key", "word"), [("split", "valid"), ("phase", "eval"),
                                           ("stage", "validation"), ("mode", "test")])
def test_rows_an_evaluation_wrote_are_the_validation_side(tmp_path, key, word):
    # {"phase": "eval", "step": 100, "loss": ...}: a loss on the evaluation's rows is the
    # validation loss, at the row's own step (only mmcv's "iter" counts validation batches)
    rows = []
    for s in range(10, 210, 10):
        rows.append({key: "train", "step": s, "loss": 2.0 - s / 200})
        if s % 50 == 0:
            rows.append({key: word, "step": s, "loss": 2.1 - s / 250})
    t = read_jsonl(write(tmp_path, "".join(json.dumps(r) + "\n" for r in rows)))
    assert len(t.columns["loss"]) == 20
    assert t.columns["val_loss"].steps.tolist() == [50, 100, 150, 200]
