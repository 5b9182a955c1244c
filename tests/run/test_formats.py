"""Formats read by content: Keras history JSON and CSVLogger, LLaMA-Factory trainer_log.jsonl,
MLflow file stores, console logs, one-column files; and run.meta["mapping"]."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trainmedic.errors import UnrecognizedInputError
from trainmedic.run import load_run
from trainmedic.run.loader import detect_format

DATA = Path(__file__).resolve().parent.parent / "data" / "logs" / "text"


def write(p: Path, text: str) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def mapping_of(run, column):
    return [m for m in run.meta["mapping"] if m["column"] == column]


def test_keras_history_lists_of_different_lengths(tmp_path):
    doc = {"loss": [1.0, 0.8, 0.6], "val_loss": [1.1, 0.9], "accuracy": [0.1, 0.2, 0.3],
           "classes": ["a", "b"], "phase_starts": [0, 2], "backbone": "resnet",
           "phase_labels": ["x", "y"]}
    doc["loss"] += [0.5, 0.4, 0.3]
    doc["accuracy"] += [0.4, 0.5, 0.6]
    doc["val_loss"] += [0.7, 0.6, 0.5, 0.6]
    run = load_run(str(write(tmp_path / "history.json", json.dumps(doc))))
    loss = run.get("loss")
    assert loss is not None and list(loss.steps) == [1, 2, 3, 4, 5, 6]
    assert len(run.get("val_loss")) == 6
    assert not run.has("phase_starts") and not run.has("classes")
    assert mapping_of(run, "backbone")[0]["how"].startswith("ignored:")
    assert mapping_of(run, "phase_starts")[0]["how"].startswith("ignored:")
    assert any(n.kind == "phases" for n in run.notes)


def test_one_line_history_is_a_history(tmp_path):
    p = write(tmp_path / "h.json", json.dumps({"train_loss": [3, 2, 1], "val_loss": [3, 3, 4],
                                               "best_epoch": 1}))
    run = load_run(str(p))
    assert list(run.get("loss").values) == [3, 2, 1] and run.has("val_loss")


def test_keras_csvlogger_with_a_log_extension(tmp_path):
    p = write(tmp_path / "training.log", "epoch,acc,loss,val_acc,val_loss\n0,0.1,2.0,0.1,2.1\n"
              "1,0.2,1.5,0.2,1.9\n2,0.3,1.2,0.2,2.0\n")
    assert detect_format(p) == "csv"
    run = load_run(str(p))
    assert list(run.get("val_loss").steps) == [0, 1, 2]


def test_llamafactory_trainer_log(tmp_path):
    lines = [
        {"current_steps": 10, "total_steps": 30, "loss": 2.5, "eval_loss": None,
         "learning_rate": 1e-5, "epoch": 0.33, "percentage": 33.3, "elapsed_time": "0:00:20",
         "remaining_time": "0:00:40"},
        {"current_steps": 20, "total_steps": 30, "loss": 2.1, "eval_loss": None,
         "learning_rate": 2e-5, "epoch": 0.66, "percentage": 66.6, "elapsed_time": "0:00:40",
         "remaining_time": "0:00:20"},
        {"current_steps": 30, "total_steps": 30, "loss": 1.9, "eval_loss": 2.0,
         "learning_rate": 1e-5, "epoch": 1.0, "percentage": 100, "elapsed_time": "0:01:10",
         "remaining_time": "0:00:00"},
    ]
    p = write(tmp_path / "trainer_log.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n")
    run = load_run(str(p))
    assert list(run.get("loss").steps) == [10, 20, 30]
    assert run.get("val_loss").values.tolist() == [2.0]
    st = run.get("step_time_s")
    assert st is not None and st.values.tolist() == pytest.approx([2.0, 3.0])
    assert mapping_of(run, "elapsed_time")[0]["how"].startswith("derived:")


def _mlflow_run(root: Path, exp: str, run_id: str, metrics: dict[str, list[float]],
                start_ms: int = 1700000000000, stage: str = "active") -> None:
    d = root / exp / run_id
    write(d / "meta.yaml", f"run_id: {run_id}\nrun_name: r{run_id}\nstart_time: {start_ms}\n"
          f"lifecycle_stage: {stage}\n")
    write(d / "params" / "lr0", "0.01")
    write(d / "tags" / "mlflow.user", "me")
    for key, vals in metrics.items():
        write(d / "metrics" / key, "".join(f"{1700000000000 + i} {v} {i}\n"
                                           for i, v in enumerate(vals)))


def test_mlflow_file_store(tmp_path):
    root = tmp_path / "mlruns"
    write(root / "1" / "meta.yaml", "name: exp\n")
    _mlflow_run(root, "1", "abc", {"train/loss": [3, 2, 1], "val/loss": [3, 2.5, 2.4],
                                   "lr/pg0": [0.1, 0.1, 0.01]})
    run = load_run(str(tmp_path))
    assert run.get("loss").values.tolist() == [3, 2, 1]
    assert run.has("val_loss") and run.has("lr")
    assert list(run.get("loss").steps) == [0, 1, 2]


def test_mlflow_store_with_two_runs_reads_the_newest_never_both(tmp_path):
    root = tmp_path / "mlruns"
    _mlflow_run(root, "1", "b", {"loss": [5, 4]}, start_ms=1700000000000)
    _mlflow_run(root, "1", "a", {"loss": [3, 2]}, start_ms=1700000999000)
    _mlflow_run(root, "1", "c", {"loss": [9, 9]}, start_ms=1700009999000, stage="deleted")
    run = load_run(str(root))
    assert run.get("loss").values.tolist() == [3, 2] and run.meta["mlflow_run_id"] == "a"
    (note,) = [n for n in run.notes if n.kind == "other_runs"]
    assert "1 deleted MLflow run(s) not read" in note.detail and "1/b" in note.detail
    assert run.meta["config"] == {"lr0": "0.01"} and run.meta["tags"] == {}


FAIRSEQ = (DATA / "fairseq_train_inner.log").read_text()

NANOGPT = """\
step 0: train loss 10.9, val loss 10.9
iter 0: loss 10.9, time 1200.5ms, mfu -100.00%
iter 10: loss 9.8, time 110.2ms, mfu 30.1%
iter 20: loss 9.1, time 110.4ms, mfu 30.2%
step 20: train loss 9.0, val loss 9.2
iter 30: loss 8.7, time 110.1ms, mfu 30.2%
"""

KERAS = (DATA / "keras_stdout.txt").read_text()

GENERIC = """\
2024-01-01 10:00:00 INFO starting
2024-01-01 10:00:01 INFO step=1 loss=2.50 lr=0.001 grad_norm=3.0
2024-01-01 10:00:02 INFO step=2 loss=2.40 lr=0.001 grad_norm=2.9
2024-01-01 10:00:03 INFO step=3 loss=2.30 lr=0.001 grad_norm=2.7
"""

HF_DICTS = """\
{'loss': 2.1, 'learning_rate': 4e-05, 'epoch': 0.1}
{'loss': 1.9, 'learning_rate': 3e-05, 'epoch': 0.2}
{'loss': 1.7, 'learning_rate': 2e-05, 'epoch': 0.3}
{'train_runtime': 12.0, 'train_samples_per_second': 100.0, 'epoch': 0.3}
"""

MMDET = (DATA / "mmdet_v1.log").read_text()

WORDLM = """\
| epoch   1 |   200/ 1000 batches | lr 20.00 | ms/batch 11.43 | loss 7.74 | ppl 2300.0
| epoch   1 |   400/ 1000 batches | lr 20.00 | ms/batch 11.41 | loss 7.27 | ppl 1400.0
-----------------------------------------------------------------------------------------
| end of epoch   1 | time: 35.24s | valid loss 7.10 | valid ppl 1200.0
-----------------------------------------------------------------------------------------
| epoch   2 |   200/ 1000 batches | lr 20.00 | ms/batch 11.40 | loss 7.00 | ppl 1100.0
"""


def test_fairseq_console_log(tmp_path):
    run = load_run(str(write(tmp_path / "train.log", FAIRSEQ)))
    assert list(run.get("loss").steps) == [100, 200, 300]
    assert run.get("val_loss").values.tolist() == [8.2]
    assert list(run.get("val_loss").steps) == [300]
    assert run.has("grad_norm") and run.has("loss_scale") and run.has("tokens_per_s")
    assert run.get("step_time_s").values.tolist() == pytest.approx([0.5, 0.52])


def test_nanogpt_console_log(tmp_path):
    run = load_run(str(write(tmp_path / "out.txt", NANOGPT)))
    assert list(run.get("loss").steps) == [0, 10, 20, 30]
    assert run.get("step_time_s").values[1] == pytest.approx(0.1102)
    assert list(run.get("val_loss").steps) == [0, 20]


def test_keras_stdout(tmp_path):
    run = load_run(str(write(tmp_path / "keras.txt", KERAS)))
    assert list(run.get("loss").steps) == [1, 2, 3]
    assert run.get("val_loss").values.tolist() == [1.10, 1.00, 1.05]
    assert run.get("step_time_s").values.tolist() == pytest.approx([0.004, 0.003, 0.003])


def test_generic_key_value_lines(tmp_path):
    run = load_run(str(write(tmp_path / "train.log", GENERIC)))
    assert list(run.get("loss").steps) == [1, 2, 3] and run.has("grad_norm")


def test_printed_hf_dicts(tmp_path):
    run = load_run(str(write(tmp_path / "stdout.txt", HF_DICTS)))
    assert run.get("loss").values.tolist() == [2.1, 1.9, 1.7] and run.has("lr")


def test_mmdet_text_log_global_steps(tmp_path):
    run = load_run(str(write(tmp_path / "20191231.log", MMDET)))
    assert list(run.get("loss").steps) == [50, 100, 150]
    assert run.has("data_time_s") and run.has("mem_peak_mb")


def test_word_language_model_log(tmp_path):
    run = load_run(str(write(tmp_path / "log.txt", WORDLM)))
    assert list(run.get("loss").steps) == [200, 400, 1200]
    assert list(run.get("val_loss").steps) == [1000]
    assert run.get("step_time_s").values[0] == pytest.approx(0.01143)


def test_detr_log_txt_is_json_lines(tmp_path):
    rows = [{"epoch": i, "train_lr": 1e-3, "train_loss": 5 - i, "train_loss_ce": 1.0,
             "test_loss": 5.5 - i, "test_loss_ce": 1.1, "n_parameters": 41000000}
            for i in range(4)]
    run = load_run(str(write(tmp_path / "log.txt", "\n".join(json.dumps(r) for r in rows))))
    assert run.get("loss").values.tolist() == [5, 4, 3, 2]
    assert run.get("val_loss").values.tolist() == [5.5, 4.5, 3.5, 2.5]


@pytest.mark.parametrize("text", [
    "Install the package with pip install foo.\nThen run it.\nVersion 2.0 is out.\n",
    "numpy==1.26\ntorch==2.3\nclick>=8\n",
    "Dear team,\nthe meeting is at 10:30 in room 4.\nRegards\n",
])
def test_text_that_is_not_a_training_log_is_refused(tmp_path, text):
    p = write(tmp_path / "notes.txt", text)
    with pytest.raises(UnrecognizedInputError) as exc:
        load_run(str(p))
    assert "notes.txt" in str(exc.value)


def test_one_column_csv_loads_over_row_numbers(tmp_path):
    run = load_run(str(write(tmp_path / "loss.csv", "loss\n2.3\n2.1\n1.9\n1.8\n")))
    assert list(run.get("loss").steps) == [1, 2, 3, 4]
    assert mapping_of(run, "(row)")[0]["how"] == "row index (no step column)"


def test_console_log_beside_its_extracted_csv_is_read_once(tmp_path):
    write(tmp_path / "raw_log.txt", NANOGPT)
    write(tmp_path / "metrics.csv", "step,loss,step_time_s\n0,10.9,1.2005\n10,9.8,0.1102\n"
          "20,9.1,0.1104\n30,8.7,0.1101\n")
    run = load_run(str(tmp_path))
    assert list(run.get("loss").steps) == [0, 10, 20, 30]
    assert any(n.kind == "duplicate_source" for n in run.notes)


def test_console_log_with_other_metrics_is_merged(tmp_path):
    write(tmp_path / "raw_log.txt", NANOGPT)
    write(tmp_path / "gpu.csv", "step,gpu_util\n0,90\n10,91\n")
    run = load_run(str(tmp_path))
    assert run.has("loss") and run.has("gpu_util")


def test_mapping_lists_every_column(tmp_path):
    p = write(tmp_path / "m.csv", "step,perf/step_time_ms,train_loss,acc,name\n"
              "1,100,2.0,0.1,a\n2,110,1.9,0.2,b\n3,105,1.8,0.3,c\n")
    run = load_run(str(p))
    m = run.meta["mapping"]
    assert all(set(e) == {"file", "column", "canonical", "how"} for e in m)
    by = {e["column"]: e for e in m}
    assert by["step"]["how"] == "step"
    assert by["perf/step_time_ms"] == {"file": str(p), "column": "perf/step_time_ms",
                                       "canonical": "step_time_s", "how": "unit ms->s"}
    assert by["train_loss"]["canonical"] == "loss"
    assert by["acc"]["how"] == "kept as raw" and by["acc"]["canonical"] is None
    np.testing.assert_allclose(run.get("step_time_s").values, [0.1, 0.11, 0.105])


def test_no_loss_is_not_an_error(tmp_path):
    run = load_run(str(write(tmp_path / "m.csv", "step,foo,bar\n1,2,3\n2,3,4\n")))
    assert not run.has("loss")
    assert {e["column"] for e in run.meta["mapping"]} >= {"step", "foo", "bar"}


def test_user_map_is_recorded(tmp_path):
    p = write(tmp_path / "m.csv", "step,foo\n1,2\n2,3\n")
    run = load_run(str(p), mapping={"loss": "foo"})
    assert mapping_of(run, "foo")[0] == {"file": str(p), "column": "foo", "canonical": "loss",
                                         "how": "user --map"}


def test_cumulative_clock_is_differentiated(tmp_path):
    p = write(tmp_path / "m.csv", "step,loss,elapsed\n10,3,5\n20,2,25\n30,1,40\n")
    run = load_run(str(p))
    st = run.get("step_time_s")
    assert list(st.steps) == [20, 30] and st.values.tolist() == pytest.approx([2.0, 1.5])


def test_timestamp_named_time_is_not_a_step_time(tmp_path):
    p = write(tmp_path / "m.csv", "step,loss,time\n1,3,1700000000\n2,2,1700000010\n"
              "3,1,1700000020\n")
    assert not load_run(str(p)).has("step_time_s")


def test_per_epoch_time_column(tmp_path):
    p = write(tmp_path / "m.csv", "epoch,loss,time\n1,3,30.5\n2,2,29.8\n3,1,31.0\n")
    run = load_run(str(p))
    assert run.get("step_time_s").values.tolist() == [30.5, 29.8, 31.0]
    assert "per epoch" in mapping_of(run, "time")[0]["how"]


def test_iterations_per_second_inverted(tmp_path):
    p = write(tmp_path / "m.csv", "step,loss,it/s\n1,3,2.0\n2,2,4.0\n")
    run = load_run(str(p))
    assert run.get("step_time_s").values.tolist() == [0.5, 0.25]


def test_gan_history_sets_objective(tmp_path):
    p = write(tmp_path / "h.json", json.dumps({"G_loss": [40, 35, 33], "D_loss": [0.5, 0.4, 0.6],
                                               "epoch_seconds": [60, 61, 59]}))
    run = load_run(str(p))
    assert run.meta["objective"] == "adversarial"
    assert run.get("loss").values.tolist() == [40, 35, 33] and run.has("d_loss")
    assert run.get("step_time_s").values.tolist() == [60, 61, 59]


def test_pytorch_example_progress_lines(tmp_path):
    text = "".join(f"Train Epoch: {e} [{b * 640}/1280 ({b * 50}%)]\tLoss: {2 - e / 10 - b / 100}\n"
                   for e in (1, 2) for b in (0, 1))
    run = load_run(str(write(tmp_path / "mnist.log", text)))
    assert list(run.get("loss").steps) == [0, 640, 1280, 1920]


def test_epoch_step_progress_lines(tmp_path):
    text = "".join(f"Epoch [{e}/2], Step [{s}/200], Loss: {1.0 / (e * s)}\n"
                   for e in (1, 2) for s in (100, 200))
    run = load_run(str(write(tmp_path / "train.log", text)))
    assert list(run.get("loss").steps) == [100, 200, 300, 400]


def test_global_step_counter_in_epoch_progress_lines(tmp_path):
    # "Epoch [2/3] Step [95/200]": the position goes on across the epoch change, so /200 is
    # the run's length and the position is already the global step (not 200 + 95)
    text = "".join(f"Epoch [{1 + (s - 1) // 90}/3] Step [{s}/200] Loss: {3.0 - s / 100}\n"
                   for s in range(5, 201, 5))
    run = load_run(str(write(tmp_path / "train.log", text)))
    assert list(run.get("loss").steps) == list(range(5, 201, 5))


def test_wandb_runtime_is_a_clock(tmp_path):
    p = write(tmp_path / "wandb.csv", "_step,_runtime,_timestamp,train/loss\n"
              "0,10,1700000010,3\n10,30,1700000030,2\n20,50,1700000050,1\n")
    assert load_run(str(p)).get("step_time_s").values.tolist() == pytest.approx([2.0, 2.0])


def test_progress_timing_joins_the_next_summary_line(tmp_path):
    text = "".join(f" [==== 136/136 ===>]  Tot: 1m13s | Step: {600 + e}ms\n"
                   f"Training Epoch: {e} Average Loss: {3.0 - e / 10}\nSaving model..\n"
                   for e in (1, 2, 3))
    run = load_run(str(write(tmp_path / "train.log", text)))
    assert list(run.get("loss").steps) == [1, 2, 3]
    assert run.get("step_time_s").values.tolist() == pytest.approx([0.601, 0.602, 0.603])


def test_a_training_line_without_its_step_is_not_given_the_last_one(tmp_path):
    text = ("| epoch 012 | loss 4.1 | nll_loss 2.4 | num_updates 4399\n"
            "| epoch 012 | valid on 'valid' subset | valid_loss 4.0 | valid_nll_loss 2.2\n"
            "| epoch 013 | loss 4.0 | nll_loss 2.3 | num_updates 4766\n"
            "| epoch 014 | loss 3.9 | nll_l")
    run = load_run(str(write(tmp_path / "train.log", text)))
    assert list(run.get("loss").steps) == [4399, 4766]
    assert list(run.get("val_loss").steps) == [4399]


def test_loss_lines_without_a_counter_are_steps(tmp_path):
    run = load_run(str(write(tmp_path / "out.txt", "start\nLoss: 2.3\nLoss: 2.1\nLoss: 1.9\n")))
    assert run.get("loss").values.tolist() == [2.3, 2.1, 1.9]


def test_a_config_dump_is_not_a_log(tmp_path):
    p = write(tmp_path / "args.txt", "lr: 0.1\nbatch_size: 32\nepochs: 10\nloss: 0.0\n"
              "warmup: 100\n")
    with pytest.raises(UnrecognizedInputError):
        load_run(str(p))


def test_pretty_printed_json_is_not_a_console_log(tmp_path):
    doc = {"log_history": [{"step": i, "loss": 2.0 - i / 10, "epoch": i / 10}
                           for i in range(1, 6)], "max_steps": 5, "global_step": 5}
    p = write(tmp_path / "state.dat", json.dumps(doc, indent=2))
    assert detect_format(p) == "json"
    assert load_run(str(p)).meta["sources"][0]["format"] == "hf_trainer_state"


def test_fairseq_json_log_format(tmp_path):
    run = load_run(str(DATA / "fairseq_json.log"))
    assert list(run.get("loss").steps) == [100, 200, 300]
    assert list(run.get("val_loss").steps) == [200]
    assert run.get("train_loss").values.tolist() == [8.8]
    assert run.has("grad_norm") and run.has("step_time_s")


def test_console_log_sampling_a_metric_differently_is_not_interleaved(tmp_path):
    write(tmp_path / "raw_log.txt", NANOGPT)
    write(tmp_path / "epochs.csv", "step,loss\n15,9.5\n35,8.5\n")
    run = load_run(str(tmp_path))
    assert list(run.get("loss").steps) == [15, 35]
    assert any(n.kind == "duplicate_source" for n in run.notes)


def test_json_lists_of_rows_per_split(tmp_path):
    doc = {"train": [{"epoch": e, "loss": 3 - e / 2} for e in (1, 2, 3)],
           "val": [{"epoch": e, "loss": 3.1 - e / 3} for e in (1, 2, 3)]}
    run = load_run(str(write(tmp_path / "log.json", json.dumps(doc, indent=1))))
    assert run.get("loss").values.tolist() == [2.5, 2.0, 1.5]
    assert list(run.get("val_loss").steps) == [1, 2, 3]


def test_per_epoch_console_lines_with_a_time(tmp_path):
    text = "".join(f"Epoch: {e} | Train Loss: {2 - e / 10} | Val Loss: {2.1 - e / 20} | "
                   f"Time: {30 + e % 2}.5s\n" for e in range(1, 6))
    run = load_run(str(write(tmp_path / "train.log", text)))
    assert list(run.get("loss").steps) == [1, 2, 3, 4, 5] and run.has("val_loss")
    assert run.get("step_time_s").values.tolist() == [31.5, 30.5, 31.5, 30.5, 31.5]


PIPE_LOG = "".join(
    f"2025-12-02 03:40:00,0{i:02d} - trainer - INFO - step {i}/40 | loss {2.0 - 0.01 * i:.4f} "
    f"| lr 5.000e-02 | grad_norm 0.152 | {2.0 + 0.1 * i:.1f} ms/it | data 0.{i % 3} ms "
    f"| rss 330.5MB\n" for i in range(1, 13))


MMF_LOG = "".join(
    f"iter: {100 * i} train_loss: {2.9 - 0.01 * i:.4f}  val_loss: 3.4{i} time(s): "
    f"{190 + i}.5 s\n" for i in range(1, 9))


def test_a_unit_in_the_name_and_after_the_number_is_read_once(tmp_path):
    run = load_run(str(write(tmp_path / "train_output.log", MMF_LOG)))
    assert run.has("step_time_s"), sorted(m for m, _ in run.series)
    assert not any("_s_s" in m for m, _ in run.series)


PADDLE_LOG = "".join(
    f"2021-03-30 06:55:{i:02d} [INFO]\t[TRAIN] epoch: 1, iter: {20 * i}/500, loss: "
    f"{2.0 - 0.01 * i:.4f}, lr: 0.009657, batch_cost: 0.{5300 + i}, reader_cost: 0.0{i}, "
    f"ips: 3.7425 samples/sec | ETA 00:04:16\n" for i in range(1, 9))


IMAGENET_LOG = "".join(
    f"Epoch: [0][{741 + 20 * i:4d}/1424]   Time  1.{187 + i} ( 1.292)    Data  0.00{i} ( 0.048)"
    f"    Loss 5.3948e+00 (6.1603e+00)    Acc@1   4.56 (  1.79)   Acc@5  14.22 (  6.43)\n"
    for i in range(1, 9))


OLD_FAIRSEQ = "".join(
    f"| epoch 001  {1000 * i} / 331737 loss={9.6 - 0.4 * i:.2f} (10.94), wps=18515, "
    f"wpb=31259, bsz=861, lr=1.25, clip=100%, gnorm=2.0540\n" for i in range(1, 7))


def test_an_epoch_over_its_total_is_not_a_position(tmp_path):
    """'[Epoch 10/13] [Batch 9/64]': the epoch count is no 'epoch 1, position 0 of 13'."""
    text = "".join(f"[Epoch {e}/13] [Batch {b}/64] [D loss: 0.3] [G loss: 2.7]\n"
                   for e in (9, 10, 11) for b in (9, 19, 29))
    run = load_run(str(write(tmp_path / "gan.log", text)))
    steps = run.get("d_loss").steps.tolist() if run.has("d_loss") else []
    assert steps == sorted(steps) and len(set(steps)) == 9


YOLO_CUT = "".join(
    f"     {e}/299     65.1G    0.{40 + e}   0.01516         0    0.0{e}      1869       320: "
    f"100%|████████| 729/729 [51:52<00:00,  4.27s/it]\n"
    f"               Class      Images      Labels           P           R      mAP@.5  "
    f"mAP@.5:.95: 100%|████| 41/41 [00:58<00:00,  1.43s/it]\n"
    f"                 all       20987      129965       0.848       0.542       0.609   "
    f"    0.332\n\n"
    f"     Epoch   gpu_mem       box       obj       cls     total    labels  img_size\n"
    for e in range(41, 45))


def test_an_excerpt_cut_before_its_first_header_keeps_its_first_row(tmp_path):
    """YOLOv5/v7's console repeats its header over every epoch's row; an issue excerpt that
    starts at a row is read with the header that follows it."""
    run = load_run(str(write(tmp_path / "train.log", YOLO_CUT)))
    assert run.get("loss").steps.tolist() == [41, 42, 43, 44]


def test_a_size_cell_keeps_its_unit(tmp_path):
    """Ultralytics prints GPU_mem as "65.1G": 65.1 GB of memory, not 65.1 MB."""
    run = load_run(str(write(tmp_path / "train.log", YOLO_CUT)))
    assert run.get("mem_alloc_mb").values.tolist() == pytest.approx([65.1 * 1024] * 4)


YOLO_RESULTS_TXT = "".join(
    f"{e:>7}/89     5.61G   0.0{7 - e}745    0.0277   0.01785     {0.123 - 0.01 * e:.3f}"
    f"         7       640"
    f"    0.7966    0.3577    0.3942    0.1884   0.04{5 - e}24   0.01313  0.004035\n"
    for e in range(5))


def test_a_headerless_yolo_results_txt_is_read_by_its_column_order(tmp_path):
    """YOLOv3/v5/v7 wrote results.txt without a header: epoch/last, gpu_mem, box, obj, cls,
    total, labels, img_size, P, R, mAP@.5, mAP@.5:.95, then the validation box, obj, cls."""
    run = load_run(str(write(tmp_path / "results.txt", YOLO_RESULTS_TXT)))
    assert run.get("loss").steps.tolist() == [0, 1, 2, 3, 4]
    assert run.get("loss").values.tolist() == pytest.approx([0.123, 0.113, 0.103, 0.093, 0.083])
    # the validation loss is the sum of its three terms, as results.csv's is
    assert run.get("val_loss").values[0] == pytest.approx(0.04524 + 0.01313 + 0.004035)
    assert run.get("mem_alloc_mb").values[0] == pytest.approx(5.61 * 1024)
    bad = YOLO_RESULTS_TXT + "     5/89     5.61G   0.0745\n"  # a row cut short: not this shape
    with pytest.raises(UnrecognizedInputError):
        load_run(str(write(tmp_path / "cut" / "results.txt", bad)))


def test_caffe_test_net_outputs_are_the_validation_side(tmp_path):
    """Caffe: "Test net output #1: loss = 0.9 (* 1 = 0.9 loss)" is the evaluation's loss (not
    the training loss), and "(20 iter/s, 5.0s/100 iters)" is 0.05 s per iteration."""
    path = Path(__file__).resolve().parents[1] / "data" / "logs" / "caffe_test_net.log"
    run = load_run(str(path))
    assert run.get("val_loss").values.tolist() == pytest.approx([2.30259, 0.9])
    assert run.get("val_loss").steps.tolist() == [0, 300]
    assert run.get("loss").values.tolist() == pytest.approx([2.31, 1.51, 1.01, 0.81])
    assert run.get("step_time_s").values.tolist() == pytest.approx([0.05] * 4)


LLMC_LOG = "".join(
    f"step {i:4d}/74 | train loss {11 - 0.1 * i:.6f} | norm {15 - 0.1 * i:.4f} | lr 6.00e-04 | "
    f"({120 + i % 3:.2f} ms | {40000 + i} tok/s)\n" for i in range(1, 12))
TIMM_LOG = "".join(
    f"Train: 0 [ {100 * i:4d}/1251 ( {8 * i}%)]  Loss: {6.9 - 0.05 * i:.3f} (6.880)  Time: "
    f"0.{(i * 37) % 90 + 400}s,  512/s  (0.500s,  512/s)  LR: 1.000e-04  Data: 0.0{i % 9} "
    f"(0.010)\n" for i in range(1, 12))


DS_LOG = "".join(
    f"[2023-06-07 22:16:{i:02d},018] [INFO] [logging.py:96:log_dist] [Rank 0] step={10 * i}, "
    f"skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]\n"
    f"[2023-06-07 22:16:{i:02d},018] [INFO] [timer.py:260:stop] epoch=0/micro_step={10 * i}/"
    f"global_step={10 * i}, RunningAvgSamplesPerSec=12.5, CurrSamplesPerSec={12.4 + 0.02 * i:.3f}"
    f", MemAllocated=4.5GB, MaxMemAllocated={7.1 + 0.01 * i:.2f}GB\n"
    f"{{'loss': {2.0 - 0.05 * i:.4f}, 'learning_rate': 0.0001, 'epoch': {0.01 * i:.2f}}}\n"
    for i in range(1, 12))


def test_deepspeed_step_lines_with_hf_loss_dicts_between_them(tmp_path):
    """The HF Trainer's loss dict holds no step; DeepSpeed's lines around it do, and never a
    loss: the dict belongs to the last step. DeepSpeed's camelCase names are read."""
    run = load_run(str(write(tmp_path / "train.log", DS_LOG)))
    assert run.get("loss").steps.tolist()[:3] == [10, 20, 30]
    assert run.get("samples_per_s").values[0] == pytest.approx(12.42)
    assert run.get("mem_peak_mb").values[0] == pytest.approx(7.11 * 1024, rel=0.03)


#: Console formats read by the line reader: (log text, metric, what is compared, expected).
#: "steps" compares the metric's steps, else the first values. Each row is one format.
CONSOLE_CASES = [
    # "2.4 ms/it" is a step time and "data 0.1 ms" the data wait, a space before the unit
    (PIPE_LOG, "step_time_s", "values", [0.0021, 0.0022]),
    (PIPE_LOG, "data_time_s", "values", [1e-4, 2e-4, 0.0]),
    (PIPE_LOG, "rss_mb", "values", [330.5]),
    # PaddleSeg / PaddleDetection: batch_cost, reader_cost
    (PADDLE_LOG, "step_time_s", "values", [0.5301]),
    (PADDLE_LOG, "data_time_s", "values", [0.01, 0.02]),
    # pytorch/examples' ImageNet ProgressMeter: unitless "Time" and "Data"
    (IMAGENET_LOG, "step_time_s", "values", [1.188]),
    (IMAGENET_LOG, "data_time_s", "values", [0.001, 0.002]),
    # fairseq before 0.6: "| epoch 001  1000 / 331737 loss=..."
    (OLD_FAIRSEQ, "loss", "steps", [1000, 2000, 3000, 4000, 5000, 6000]),
    # llm.c: "| norm 14.9 |" is the grad norm, "(121.00 ms | ... tok/s)" the step time
    (LLMC_LOG, "grad_norm", "values", [14.9]),
    (LLMC_LOG, "step_time_s", "values", [0.121]),
    # timm: "Time: 0.437s ... Data: 0.01 (0.010)"
    (TIMM_LOG, "data_time_s", "values", [0.01, 0.02]),
    (TIMM_LOG, "step_time_s", "values", [0.437]),
]


@pytest.mark.parametrize("text,metric,what,expected", CONSOLE_CASES)
def test_console_formats(tmp_path, text: str, metric: str, what: str, expected: list) -> None:
    run = load_run(str(write(tmp_path / "train.log", text)))
    s = run.get(metric)
    assert s is not None, sorted(m for m, _ in run.series)
    got = s.steps.tolist() if what == "steps" else s.values[:len(expected)].tolist()
    assert got == pytest.approx(expected)


def test_dvclive_metric_files_are_named_by_their_path(tmp_path):
    """DVCLive writes dvclive/plots/metrics/train/ce.tsv and .../eval/ce.tsv, each a
    'timestamp step ce' table: two sides of one name, not one series logged twice."""
    base = tmp_path / "dvclive" / "plots" / "metrics"
    for side, off in (("train", 0.0), ("eval", 0.1)):
        write(base / side / "ce.tsv", "timestamp\tstep\tce\n" + "".join(
            f"{1796211932196 + i}\t{5 * (i + 1)}\t{1.5 - 0.01 * i + off:.4f}\n"
            for i in range(10)))
    run = load_run(str(tmp_path))
    assert run.get("loss").steps.tolist() == [5 * (i + 1) for i in range(10)]
    assert run.get("val_loss").values[0] == pytest.approx(1.6)


def test_ray_tune_progress_steps_by_its_training_iteration(tmp_path):
    rows = "".join(f"{2.0 - 0.1 * i:.3f},0.003,0.10{i},{i + 1},{0.1 * (i + 1):.3f}\n"
                   for i in range(6))
    write(tmp_path / "progress.csv",
          "train_loss,lr,time_this_iter_s,training_iteration,time_total_s\n" + rows)
    run = load_run(str(tmp_path))
    assert run.get("loss").steps.tolist() == [1, 2, 3, 4, 5, 6]
    assert run.get("step_time_s").values[3] == pytest.approx(0.103)


def test_a_markdown_report_is_read_when_nothing_else_is_in_the_folder(tmp_path):
    """A report.md whose table holds the metrics, the evaluation on every other row (an empty
    cell between pipes is a value not logged there, kept in its column)."""
    rows = "".join(f"| {5 * i} | {2.0 - 0.1 * i:.4f} | "
                   + (f"{1.9 - 0.1 * i:.4f}" if i % 2 == 0 else "") + " | 5.00e-03 |\n"
                   for i in range(1, 11))
    write(tmp_path / "report.md", "# Experiment report\n\nAdam, lr 0.005.\n\n"
          "| step | train nll | val nll | lr |\n|---:|---:|---:|---:|\n" + rows)
    run = load_run(str(tmp_path))
    assert run.get("loss").steps.tolist() == [5 * i for i in range(1, 11)]
    assert run.get("val_loss").steps.tolist() == [10, 20, 30, 40, 50]
    assert run.get("val_loss").values[0] == pytest.approx(1.7)


def test_pandas_nan_cells_of_an_every_kth_row_column_are_not_logged_values(tmp_path):
    """print(df) of a merged frame: val_loss every 5th row, NaN in between (not logged there);
    a loss that really went NaN (from some row to the end) keeps its NaN."""
    rows = "".join(f"{i:>3} {10 * (i + 1):>5} {1.6 - 0.05 * i:9.6f} "
                   + (f"{1.5 - 0.05 * i:9.6f}" if i % 5 == 4 else "      NaN")
                   + ("       NaN" if i >= 17 else f" {1.0:9.6f}") + "\n" for i in range(20))
    write(tmp_path / "metrics.txt", "    step      loss  val_loss      gnorm\n" + rows)
    run = load_run(str(tmp_path / "metrics.txt"))
    assert run.get("val_loss").steps.tolist() == [50, 100, 150, 200]
    g = run.get("grad_norm")
    assert g is not None and int(np.isnan(g.values).sum()) == 3


def test_an_eval_row_with_its_own_zero_clock_does_not_make_a_step_time_spike(tmp_path):
    """JSON lines whose eval record at the same step carries "time": 0: the next training
    row's time is measured from the training clock, not from that 0; "dt_ms" is the step."""
    rows = []
    for it in range(10, 310, 10):
        rows.append(json.dumps({"iter": it, "objective": 5.0 - it / 100, "time": 0.012 * it}))
        if it % 100 == 0:
            rows.append(json.dumps({"iter": it, "eval_objective": 4.0, "time": 0}))
    write(tmp_path / "log.jsonl", "\n".join(rows) + "\n")
    st = load_run(str(tmp_path / "log.jsonl")).get("step_time_s")
    assert st is not None and float(st.values.max()) == pytest.approx(0.012)
    write(tmp_path / "b" / "log.jsonl", "".join(
        json.dumps({"iter": it, "loss": 1.0, "dt_ms": 1.2}) + "\n" for it in range(1, 9)))
    assert load_run(str(tmp_path / "b" / "log.jsonl")).get("step_time_s").values[0] == \
        pytest.approx(0.0012)
