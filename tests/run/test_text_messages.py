"""Text logs that hold no step counter or no usual metric lines: timing-only lines, the fp16
scaler's overflow messages alone, Chinese names, warnings with source paths, and a console log
saved under a source file's suffix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainmedic.errors import UnrecognizedInputError
from trainmedic.run import load_run
from trainmedic.run.vocabulary import translate_cjk


def write(p: Path, text: str) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p


def test_timing_only_lines_without_a_counter_are_read_over_line_order(tmp_path):
    text = "".join(f"load_data_time: {d}, train_step_time: {t}. \n" for d, t in
                   [(0.0001, 0.665), (0.0001, 0.652), (19.6173, 0.686), (0.0002, 0.664)])
    run = load_run(str(write(tmp_path / "train.log", text)))
    assert run.get("data_time_s").values.tolist() == [0.0001, 0.0001, 19.6173, 0.0002]
    assert run.get("step_time_s").steps.tolist() == [0, 1, 2, 3]
    assert not run.has("loss")


def test_a_progress_bar_rate_beside_table_cells_is_not_a_timing_log(tmp_path):
    # YOLOv7's epoch rows end in a tqdm bar ("4.27s/it"): one known name among the table's
    # cells, so the rows are read as the aligned table they are, not as timing lines.
    head = "     Epoch   gpu_mem       box       obj       cls     total    labels  img_size\n"
    text = "".join(
        head + f"    {e}/299     65.1G       nan   0.0152         0       nan      1869       "
        f"320: 100%|####| 729/729 [51:52<00:00,  4.27s/it]\n\n" for e in (41, 42, 43))
    run = load_run(str(write(tmp_path / "train_output.log", text)))
    assert run.has("loss") and np.isnan(run.get("loss").values).all()
    assert run.get("loss").steps.tolist() == [41, 42, 43]


def test_overflow_messages_alone_are_a_loss_scale_series(tmp_path):
    scales = [8.165126103939127e-202 / 2 ** i for i in range(6)]
    text = "".join("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to "
                   f"{s!r}\n" for s in scales)
    run = load_run(str(write(tmp_path / "train_output.log", text)))
    ls = run.get("loss_scale")
    assert ls.steps.tolist() == list(range(6))
    assert np.allclose(ls.values, scales, rtol=1e-12, atol=0)


def test_one_overflow_message_is_still_not_a_log(tmp_path):
    p = write(tmp_path / "x.log", "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss "
                                   "scale: 65536, reducing to 32768\nsome other text\n")
    with pytest.raises(UnrecognizedInputError):
        load_run(str(p))


def test_chinese_names_put_the_test_loss_on_the_validation_side(tmp_path):
    text = ("-------第 1 轮训练开始------\n"
            + "".join(f"训练次数：{s}, Loss：{v}\n" for s, v in
                      [(100, 1.98), (200, 1.91), (300, 1.73), (400, 1.55)])
            + "整体测试集上的Loss: 262.62\n整体测试集上的正确率: 0.389\n")
    run = load_run(str(write(tmp_path / "train_output.log", text)))
    assert run.get("loss").steps.tolist() == [100, 200, 300, 400]
    assert run.get("loss").values.tolist() == [1.98, 1.91, 1.73, 1.55]
    assert run.get("val_loss").values.tolist() == [262.62]


@pytest.mark.parametrize(("zh", "en"), [
    ("训练次数：100, Loss：1.98", "train step :100, Loss:1.98"),
    ("第 3 轮", "epoch 3"),
    ("第120步 损失: 0.5", "step 120 loss : 0.5"),
    ("epoch 3 loss 0.5", "epoch 3 loss 0.5"),
])
def test_translate_cjk(zh, en):
    assert " ".join(translate_cjk(zh).split()) == en


def test_a_warning_with_a_source_path_adds_no_metric(tmp_path):
    text = ("/opt/envs/lib/python3.8/site-packages/torch/nn/functional.py:718: UserWarning: x\n"
            + "".join(f"step {s} loss {v}\n" for s, v in [(1, 2.0), (2, 1.9), (3, 1.8)]))
    run = load_run(str(write(tmp_path / "train.log", text)))
    assert sorted(run.metrics()) == ["loss"]


def test_a_console_log_saved_with_a_py_suffix_is_read_when_nothing_else_is(tmp_path):
    lines = "".join(f"Epoch {e}/3\n30s - loss: {v} - acc: 0.5 - val_loss: {v + 0.1}\n"
                    for e, v in [(1, 1.5), (2, 1.2), (3, 1.0)])
    write(tmp_path / "run" / "training_log.py", "Train on 400 samples\n" + lines)
    write(tmp_path / "run" / "train.py", "import torch\nloss = 1.5\nprint('loss', loss)\n")
    run = load_run(str(tmp_path / "run"))
    assert run.get("loss").values.tolist() == [1.5, 1.2, 1.0]
    assert any(n.kind == "misnamed_log" for n in run.notes)


def test_a_python_script_named_like_a_log_is_not_read(tmp_path):
    write(tmp_path / "run" / "log_utils.py", "def log(step, loss):\n    print('step', step, "
                                              "'loss', loss)\n")
    with pytest.raises(UnrecognizedInputError):
        load_run(str(tmp_path / "run"))


def test_an_average_meter_value_in_parentheses_is_its_running_average():
    from trainmedic.run.linepairs import line_pairs

    pairs, _ = line_pairs("Epoch: [0][85/190]\tTime 7.259 (3.692)\tData 0.003 (0.004)\t"
                          "Loss 0.6710 (2.5391)")
    assert pairs["time"] == 7.259 and pairs["time_avg"] == 3.692
    assert pairs["loss"] == 0.671 and pairs["loss_avg"] == 2.5391
    # a unit or words inside the parentheses are not an average
    assert "step_avg" not in line_pairs("step 10 (of 100) loss 2.0")[0]
    assert line_pairs("Time: 0.312s (0.315s)")[0].get("time_s") == 0.312


def test_a_prose_first_line_with_commas_is_not_a_csv_header(tmp_path):
    # Megatron-LM's log opens with "> building train, validation, and test datasets ...".
    line = (" [2026-11-20 10:00:00] iteration {i:8d}/     200 | consumed samples: {s:12d} | "
            "elapsed time per iteration (ms): 34.6 | learning rate: 7.500000E-04 | lm loss: "
            "{v:E} | loss scale: 65536.0 | grad norm: 1.168 |\n")
    text = ("> building train, validation, and test datasets ...\ntraining ...\n"
            + "".join(line.format(i=i, s=32 * i, v=3.4 - 0.1 * k)
                      for k, i in enumerate(range(5, 30, 5))))
    run = load_run(str(write(tmp_path / "megatron_train.log", text)))
    assert run.get("loss").steps.tolist() == [5, 10, 15, 20, 25]
    assert run.has("loss_scale") and run.has("grad_norm") and run.has("step_time_s")


def test_timm_lines_give_step_time_rate_lr_and_data_time(tmp_path):
    text = "".join(f"Train: 0 [  {b}/75 ( {b}%)]  Loss: 0.95 (1.05)  Time: 0.014s, 1136.29/s  "
                   f"LR: 1.000e-02  Data: 0.012 (0.012)\n" for b in range(0, 50, 10))
    run = load_run(str(write(tmp_path / "train.log", text)))
    assert run.get("step_time_s").values[0] == 0.014
    assert run.get("data_time_s").values[0] == 0.012
    assert run.get("samples_per_s").values[0] == 1136.29 and run.get("lr").values[0] == 0.01


def test_an_it_column_is_the_step_and_a_bare_dead_column_the_models_dead_fraction(tmp_path):
    import json

    rows = [{"it": i, "loss": 1.6 - 0.001 * i, "dead": 1.0} for i in range(10, 110, 10)]
    p = write(tmp_path / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    run = load_run(str(p))
    assert run.get("loss").steps.tolist() == list(range(10, 110, 10))
    assert run.get("layer/model/dead_frac").values.tolist() == [1.0] * 10


def test_nemo_progress_bar_step_timing_in_seconds(tmp_path):
    text = "\r".join(f"Epoch 0: {i}%|#  | {i * 10}/1000 [01:00<09:00, 1.67it/s, v_num=0, "
                     f"reduced_train_loss={3 - 0.01 * i:.3f}, global_step={i * 10 - 1}.0, "
                     f"train_step_timing in s=0.6{i % 3}]" for i in range(1, 20)) + "\n"
    run = load_run(str(write(tmp_path / "nemo.log", text)))
    assert run.has("loss") and run.get("step_time_s").values[0] == 0.61


@pytest.mark.parametrize("layout", ["markdown", "spaces"])
def test_the_hf_notebook_table_pasted_as_markdown_or_text(tmp_path, layout):
    rows = [(i, 2.3 - 0.1 * i, 2.2 - 0.08 * i, 0.5 + 0.02 * i) for i in range(1, 8)]
    if layout == "markdown":
        text = ("| Epoch | Training Loss | Validation Loss | Accuracy |\n|---|---|---|---|\n"
                + "".join(f"| {e} | {a:.6f} | {b:.6f} | {c:.6f} |\n" for e, a, b, c in rows))
    else:
        text = ("Epoch  Training Loss  Validation Loss  Accuracy\n"
                + "".join(f"{e}      {a:.6f}       {b:.6f}         {c:.6f}\n"
                          for e, a, b, c in rows))
    run = load_run(str(write(tmp_path / "train_output.log", text)))
    assert run.get("loss").steps.tolist() == list(range(1, 8))
    assert run.get("val_loss").values[0] == pytest.approx(2.12)


def test_marian_abbreviated_names_read_the_update_count_as_the_step(tmp_path):
    lines = "".join(
        f"[2019-05-02 10:0{i}:01] Ep. 1 : Up. {500 * (i + 1)} : Sen. {64 * (i + 1)},000 : "
        f"Cost {7.8 - 0.4 * i:.8f} : Time 60.{i}2s : 98{i}6.54 words/s : L.r. 3.0000e-04\n"
        for i in range(6))
    run = load_run(write(tmp_path / "train.log", lines))
    loss = run.get("loss")
    assert loss is not None and list(loss.steps) == [500, 1000, 1500, 2000, 2500, 3000]
    assert loss.values[0] == pytest.approx(7.8)
    assert run.get("lr").values[-1] == pytest.approx(3e-4)
    assert run.get("tokens_per_s").values[0] == pytest.approx(9806.54)


def test_a_bracketed_count_before_name_value_pairs_is_the_step(tmp_path):
    # big_vision's train loop logs "[step] name=value, ..." behind an absl prefix
    lines = "".join(f"I0502 10:00:{i}1.123 140000 train.py:300] [{100 * (i + 1)}] "
                    f"train_loss={6.8 - 0.5 * i:.4f}, learning_rate=0.000{i + 1}\n"
                    for i in range(6))
    run = load_run(write(tmp_path / "train.log", lines))
    assert list(run.get("loss").steps) == [100, 200, 300, 400, 500, 600]
    assert run.get("lr").values[2] == pytest.approx(3e-4)


def _sb3_block(i: int) -> str:
    return "\n".join([
        "-----------------------------------------",
        "| rollout/                |             |",
        f"|    ep_rew_mean          | {-1200 + 50 * i}    |",
        "| time/                   |             |",
        f"|    iterations           | {i + 1}          |",
        f"|    total_timesteps      | {2048 * (i + 1)}       |",
        "| train/                  |             |",
        f"|    loss                 | {12.3 - i:.2f}        |",
        "|    learning_rate        | 0.0003      |",
        "-----------------------------------------"]) + "\n"


def test_stable_baselines_console_tables_are_one_row_per_block(tmp_path):
    text = "Using cpu device\n" + "".join(_sb3_block(i) for i in range(5))
    run = load_run(write(tmp_path / "train.log", text))
    loss = run.get("loss")
    assert list(loss.steps) == [2048 * (i + 1) for i in range(5)]
    assert list(loss.values) == pytest.approx([12.3 - i for i in range(5)])
    assert "rollout/ep_rew_mean" in run.metrics()


def test_tabulate_blocks_without_pipes_are_read_too(tmp_path):
    # rlkit / garage dump each epoch's record with tabulate between rules of dashes
    text = "".join("---------------------------  ----------\n"
                   f"epoch                          {i}\n"
                   f"trainer/QF1 Loss               {0.9 - 0.1 * i:.3f}\n"
                   f"trainer/Policy Loss            {-1.0 - i:.3f}\n"
                   "---------------------------  ----------\n" for i in range(4))
    run = load_run(write(tmp_path / "progress.log", text))
    # two losses of an actor-critic: neither is "the" loss, both are kept by name
    assert sorted(run.metrics()) == ["trainer/Policy Loss", "trainer/QF1 Loss"]
    assert list(run.get("trainer/QF1 Loss").steps) == [0, 1, 2, 3]


def test_dashed_rules_in_an_ordinary_console_log_do_not_make_blocks(tmp_path):
    text = "".join(f"{'-' * 40}\nstep {i * 10} | loss {2.0 - 0.1 * i:.3f} | lr 0.001\n"
                   for i in range(6))
    run = load_run(write(tmp_path / "train.log", text))
    assert list(run.get("loss").steps) == [0, 10, 20, 30, 40, 50]


def _composer(epochs: int, per_epoch: int, eval_back: int) -> str:
    out = []
    for e in range(epochs):
        for b in range(1, per_epoch + 1):
            g = e * per_epoch + b
            out.append(f"[epoch={e + 1}][batch={g}/{epochs * per_epoch}]:\n"
                       f"\t Train time/epoch: {e}\n\t Train time/batch: {g - 1}\n"
                       f"\t Train loss/train/total: {2.0 - 0.01 * g:.4f}\n"
                       f"\t Train l2_norm/grad/global: 0.5\n")
        end = (e + 1) * per_epoch - eval_back
        out.append(f"[Eval batch=4/4] Eval on eval data\n[epoch={e + 1}][batch={end}/"
                   f"{epochs * per_epoch}]:\n\t Eval metrics/eval/CrossEntropy: "
                   f"{2.1 - 0.05 * e:.4f}\n")
    return "".join(out)


@pytest.mark.parametrize("eval_back", [0, 1])
def test_composer_blocks_step_by_the_batch_counter_across_epochs(tmp_path, eval_back):
    # the evaluation's block repeats the last training step (or one a little before it)
    run = load_run(write(tmp_path / "composer_stdout.txt", _composer(3, 6, eval_back)))
    assert list(run.get("loss").steps) == list(range(1, 19))
    assert run.get("val_loss").values.tolist() == pytest.approx([2.1, 2.05, 2.0])
    assert run.get("grad_norm") is not None


def test_catalyst_epoch_summaries_are_read_and_its_bars_left_to_them(tmp_path):
    lines = []
    for e in range(1, 5):
        lines.append(f"{e}/4 * Epoch ({e}) train: 100% 32/32 [00:00<00:00, 358.88it/s, "
                     f"loss=0.{9 - e}]")
        lines.append(f"train ({e}/4) loss: {1.0 - 0.1 * e:.4f} | lr: 0.003 | _timer/_fps: 968.8 "
                     f"| _timer/batch_time: 0.033 | _timer/data_time: 0.030")
        lines.append(f"{e}/4 * Epoch ({e}) valid: 100% 2/2 [00:00<00:00, 80.00it/s, loss=0.5]")
        lines.append(f"valid ({e}/4) loss: {1.1 - 0.1 * e:.4f} | _timer/batch_time: 0.001")
        lines.append(f"* Epoch ({e}/4) ")
    run = load_run(write(tmp_path / "catalyst_train.log", "\n".join(lines) + "\n"))
    assert list(run.get("loss").steps) == [1, 2, 3, 4]
    assert run.get("loss").values.tolist() == pytest.approx([0.9, 0.8, 0.7, 0.6])
    assert run.get("val_loss").values.tolist() == pytest.approx([1.0, 0.9, 0.8, 0.7])
    assert run.get("data_time_s").values[0] == pytest.approx(0.030)


def test_a_long_banner_before_the_metric_lines_does_not_hide_the_log(tmp_path):
    # a config dump and a dataset summary (80 lines) before 12 epoch lines, each followed by a
    # checkpoint message: under 30% of all lines are metric lines, over 30% from the first one
    banner = "".join(f"2026-05-08 22:39:24 | INFO |   Class [{i:02d}] C{i}: {100 + i} images\n"
                     for i in range(80))
    epochs = "".join(
        f"2026-05-08 23:{e:02d}:00 | INFO | Epoch [{e:03d}/30] TrainLoss={2.0 - 0.05 * e:.4f} "
        f"TrainAcc={50 + e:.2f}% | ValLoss={1.5 - 0.02 * e:.4f} | LR=1.00e-04 | Time=480.3s\n"
        f"2026-05-08 23:{e:02d}:01 | INFO | [Checkpoint] saved to checkpoints/best.pt\n"
        for e in range(1, 13))
    run = load_run(write(tmp_path / "training.log", banner + epochs))
    assert list(run.get("loss").steps) == list(range(1, 13))
    assert run.get("val_loss").values[0] == pytest.approx(1.48)


def test_torchtitans_validate_lines_are_the_validation_loss(tmp_path):
    # "validate step: 50  loss: 2.96" sits between training lines of the same step: read as
    # the training loss it made step 50 appear twice (a replay that never happened)
    lines = []
    for s in range(10, 210, 10):
        lines.append(f"[rank0]:[titan] 2025-11-30 09:00:00,011 - root - INFO - step: {s:3d}  "
                     f"loss: {3.6 - s / 100:7.4f}  grad_norm:  0.47  tps: 31,803")
        if s % 50 == 0:
            lines.append(f"[rank0]:[titan] 2025-11-30 09:00:00,202 - root - INFO - validate "
                         f"step: {s}  loss: {3.5 - s / 100:7.4f}  memory:  0.26GiB(0.00%)")
    p = tmp_path / "train.log"
    p.write_text("\n".join(lines) + "\n")
    run = load_run(str(p))
    assert run.get("val_loss").steps.tolist() == [50, 100, 150, 200]
    loss = run.get("loss")
    assert loss.is_monotonic and len(loss) == 20


def test_cyclegans_loss_log_sums_the_generator_terms_and_drops_the_date_headers(tmp_path):
    # pytorch-CycleGAN-and-pix2pix's loss_log.txt: a "Training Loss (<ctime>)" header per
    # run, then one line per print with the generator's terms and the discriminators'
    head = "================ Training Loss (Fri Sep  1 03:07:14 2017) ================\n"
    rows = "".join(f"(epoch: 1, iters: {i * 100}, time: 28.9) D_A: 0.2 G_A: 0.5 Cyc_A: 1.9 "
                   f"D_B: 0.4 G_B: 0.5 Cyc_B: 1.4 \n" for i in range(1, 11))
    p = tmp_path / "loss_log.txt"
    p.write_text(head + rows)
    run = load_run(str(p))
    assert not [m for m in run.metrics() if "sep" in m or "fri" in m]
    loss = run.get("loss")
    assert loss is not None and np.allclose(loss.values, 0.5 + 1.9 + 0.5 + 1.4)


def test_openclips_times_and_lr_are_read(tmp_path):
    # "Data (t): 0.002 Batch (t): 0.031, 2064.5/s, 2064.5/s/gpu LR: 0.0005": the (t) times
    # are the data wait and the step time; "/gpu" is the rate's, not part of "LR"
    p = tmp_path / "out.log"
    p.write_text("".join(
        f"2025-12-02,09:00:00 | INFO | Train Epoch: 0 [{k * 640:5d}/6400 ({k * 10}%)] Data (t): "
        f"0.002 Batch (t): 0.031, 2064.5/s, 2064.5/s/gpu LR: 0.000500 Logit Scale: 14.286 "
        f"Loss: {1.0 - k / 20:.5f} ({1.0 - k / 20:.5f})\n" for k in range(1, 11)))
    run = load_run(str(p))
    assert np.allclose(run.get("data_time_s").values, 0.002)
    assert np.allclose(run.get("step_time_s").values, 0.031)
    assert np.allclose(run.get("lr").values, 5e-4)


def test_deepspeeds_wall_clock_breakdown_gives_each_rank_its_forward_time(tmp_path):
    # ds_train_node0_rank<N>.log: "time (ms) | fwd_microstep: 0.65 | ... | step_microstep:
    # 0.09" after each step line; rank 1 slows from step 100 (anomaly detection left on)
    from trainmedic.diagnose import diagnose

    for rank in (0, 1):
        lines = []
        for s in range(5, 305, 5):
            fwd = 0.6 * (25 if rank == 1 and s > 100 else 1)
            lines.append(f"[2025-12-02 09:00:00,024] [INFO] [logging.py:128:log_dist] [Rank "
                         f"{rank}] step={s}, skipped=0, lr=[0.003], mom=[(0.9, 0.999)]")
            lines.append(f"[2025-12-02 09:00:00,024] [INFO] [logging.py:128:log_dist] [Rank "
                         f"{rank}] time (ms) | fwd_microstep: {fwd:.2f} | bwd_microstep: 1.46 | "
                         f"step_microstep: 0.09")
            lines.append(f"[2025-12-02 09:00:00,025] [INFO] [engine.py:2100:train] step={s} "
                         f"loss={1.0 / (1 + s / 50):.4f}")
        (tmp_path / f"ds_train_node0_rank{rank}.log").write_text("\n".join(lines) + "\n")
    run = load_run(str(tmp_path))
    assert np.allclose(run.get("compute_time_s", 0).values, 6e-4)
    f = [f for f in diagnose(run).findings if f.symptom == "straggler"]
    assert f and f[0].rank == 1 and f[0].severity == "warning"


def test_a_validation_bars_rate_is_not_the_training_step_time(tmp_path):
    # NeMo / Lightning: "Validation DataLoader 0: 100%|...| 1/1 [00:00<00:00, 55.02it/s]"
    # between training bars whose postfix carries "train_step_timing in s"
    lines = []
    for s in range(5, 125, 5):
        lines.append(f"Epoch 0:  8%|          | {s}/120 [00:00<00:00, 259.14it/s, v_num=0, "
                     f"reduced_train_loss={1.5 - s / 100:.3f}, global_step={s - 1}.000, "
                     f"train_step_timing in s=0.00386, lr=0.003]")
        if s % 50 == 0:
            lines.append("Validation DataLoader 0: 100%|██████████| 1/1 [00:00<00:00, "
                         "55.02it/s]")
    p = tmp_path / "nemo.log"
    p.write_text("\n".join(lines) + "\n")
    run = load_run(str(p))
    assert np.allclose(run.get("step_time_s").values, 0.00386)


def test_a_metrics_readings_in_brackets_keep_the_value_across_ranks(tmp_path):
    # MAE-style metric logger: "predict_loss: [local: 0.6975 | reduced: 0.6919]"
    p = tmp_path / "log.txt"
    p.write_text("".join(
        f"[02:40:09.090134] Epoch: [3]  [{k * 20}/460]  eta: 0:03:07  lr: 0.000100  predict_loss:"
        f" [local: {0.69 + 0.01 * (k % 3):.4f} | reduced: 0.6919]  time: 0.4870  data: 0.0002  "
        f"max mem: 9145\n" for k in range(6, 14)))
    run = load_run(str(p))
    assert np.allclose(run.get("loss").values, 0.6919)


def test_progress_bar_redraws_give_one_row_per_step(tmp_path):
    # kohya's "steps: 0%| | 1/400 [..., avr_loss=0.704]" after "epoch 1/2": the bar's position
    # is the step, not the epoch line before it
    draws = "".join(f"\rsteps:   {k // 4}%|          | {k}/400 [00:00<00:00, 185.24it/s, "
                    f"avr_loss={0.7 - k / 2000:.3f}]" for k in range(1, 401))
    (tmp_path / "kohya.log").write_text("epoch 1/2\n" + draws + "\n")
    run = load_run(str(tmp_path / "kohya.log"))
    assert len(run.get("loss")) == 400 and run.get("loss").is_monotonic
    # Ultralytics' console captured to a file: every redraw of an epoch's row is kept; the
    # finished draw (40/40) is the epoch's
    lines = ["      Epoch    GPU_mem       loss  Instances       Size"]
    for ep in range(1, 9):
        lines.append("".join(f"\r        {ep}/8         0G      {1.4 - ep / 10 - p / 4000:.3f}"
                             f"         32         64:  {p * 100 // 40}%|██        | {p}/40 "
                             f"[00:00<00:00, 283.71it/s]" for p in (10, 20, 30, 40)))
    (tmp_path / "yolo.log").write_text("\n".join(lines) + "\n")
    loss = load_run(str(tmp_path / "yolo.log")).get("loss")
    assert loss.steps.tolist() == list(range(1, 9)) and loss.is_monotonic


def test_a_last_epoch_cut_short_keeps_its_steps_after_the_others(tmp_path):
    # Lightning's Rich bar, epochs of 40 batches and a last one of 20 (max_steps reached)
    lines = [f"Epoch {ep}/7 ━━━━ {p}/{40 if ep < 7 else 20} 0:00:00 • 0:00:00 1115.01it/s "
             f"v_num: 0 train_loss_step: {44.6 - ep / 10:.3f}"
             for ep in range(8) for p in range(5, (41 if ep < 7 else 21), 5)]
    (tmp_path / "rich.log").write_text("\n".join(lines) + "\n")
    loss = load_run(str(tmp_path / "rich.log")).get("loss")
    assert loss.is_monotonic and int(loss.steps[-1]) == 7 * 40 + 20


def test_detectron2s_run_summary_does_not_shadow_the_step_time(tmp_path):
    # the last line averages the whole run: read as a step it became the only step_time_s
    # point, and the per-step "time" column went unread
    lines = [f"[12/02 09:00:00 d2.utils.events]:  eta: 0:00:03  iter: {i}  total_loss: "
             f"{1 - i / 1000:.4f}  time: 0.0135  last_time: 0.0123  data_time: 0.0088  "
             f"last_data_time: 0.0074   lr: 0.003  max_mem: 267M" for i in range(19, 300, 20)]
    lines += ["[12/02 09:00:03 d2.engine.hooks]: Overall training speed: 298 iterations in "
              "0:00:03 (0.0117 s / it)",
              "[12/02 09:00:03 d2.engine.hooks]: Total training time: 0:00:03 (0:00:00 on hooks)"]
    p = tmp_path / "log.txt"
    p.write_text("\n".join(lines) + "\n")
    run = load_run(str(p))
    assert len(run.get("step_time_s")) == 15
    assert run.get("step_time_s").values[0] == pytest.approx(0.0135)
