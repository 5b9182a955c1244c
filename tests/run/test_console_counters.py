"""Console logs whose lines start with a bracketed time stamp (Megatron-LM, DeepSpeed,
OpenNMT), units written in parentheses after a name, and step counters that restart every
epoch (``Epoch 1, Batch 100``, ``Epoch: [0][10/500]``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainmedic.run import load_run
from trainmedic.run.loader import detect_format


def write(p: Path, text: str) -> Path:
    p.write_text(text)
    return p


def _loss(i: int) -> float:
    return round(4.0 - i / 100, 4)


MEGATRON = "".join(
    f" [2024-01-01 10:00:{i:02d}] iteration {i + 1:8d}/   10000 | consumed samples: "
    f"{512 * (i + 1):12d} | elapsed time per iteration (ms): {1200 + i:.1f} | learning rate: "
    f"1.500E-04 | global batch size:   512 | lm loss: {_loss(i):.6E} | loss scale: 1.0 | "
    f"grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    for i in range(6))


def test_megatron_log_starting_with_a_bracketed_stamp_is_a_console_log(tmp_path):
    p = write(tmp_path / "megatron.log", MEGATRON)
    assert detect_format(p) == "text"
    run = load_run(str(p))
    assert list(run.get("loss").steps) == [1, 2, 3, 4, 5, 6]
    assert run.get("loss").values[0] == pytest.approx(4.0)
    # "(ms)" after the name is the value's unit
    assert run.get("step_time_s").values[:2].tolist() == pytest.approx([1.2, 1.201])
    assert run.has("grad_norm") and run.has("lr") and run.has("loss_scale")


def test_deepspeed_iter_time_in_seconds(tmp_path):
    text = "".join(
        f"[2024-01-01 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step={i + 1}, "
        f"skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]\n"
        f"steps: {i + 1} loss: {_loss(i):.4f} iter time (s): 0.512 samples/sec: 250.1\n"
        for i in range(5))
    p = write(tmp_path / "ds.log", text)
    assert detect_format(p) == "text"
    run = load_run(str(p))
    assert list(run.get("loss").steps) == [1, 2, 3, 4, 5]
    assert run.get("step_time_s").values.tolist() == pytest.approx([0.512] * 5)
    assert run.has("samples_per_s")


def test_opennmt_log_reads_its_cross_entropy(tmp_path):
    text = "".join(
        f"[2023-01-01 12:00:00,000 INFO] Step {(i + 1) * 50}/100000; acc: 12.34; ppl: 54.6; "
        f"xent: {_loss(i):.2f}; lr: 0.00050; sents:    1234; bsz:  456/ 789/12; "
        f"1234/5678 tok/s;     30 sec;\n" for i in range(5))
    run = load_run(str(write(tmp_path / "onmt.log", text)))
    assert list(run.get("loss").steps) == [50, 100, 150, 200, 250]


@pytest.mark.parametrize("first", ["[1, 2, 3]", "[-0.5,", "[1.5e-3]"])
def test_a_json_array_still_sniffs_as_json(tmp_path, first):
    p = write(tmp_path / "a.json", first + "\n")
    assert detect_format(p) == "json"


def test_batch_counter_restarting_every_epoch_makes_a_global_step(tmp_path):
    text = "".join(f"Epoch {e}, Batch {b}, Loss: {_loss(10 * e + b):.4f}\n"
                   for e in (1, 2, 3) for b in range(1, 11))
    run = load_run(str(write(tmp_path / "train.log", text)))
    steps = run.get("loss").steps
    assert list(steps) == list(range(1, 31))
    assert bool(np.all(np.diff(steps) > 0))


def test_imagenet_example_zero_based_epochs_do_not_overlap(tmp_path):
    text = "".join(
        f"Epoch: [{e}][{b:4d}/  30]\tTime  0.345 ( 0.567)\tData  0.012 ( 0.123)\t"
        f"Loss {_loss(3 * e + b // 10):.4e} ({_loss(0):.4e})\tAcc@1   0.00 (  0.12)\n"
        for e in (0, 1, 2) for b in (0, 10, 20))
    run = load_run(str(write(tmp_path / "imagenet.log", text)))
    assert list(run.get("loss").steps) == [0, 10, 20, 30, 40, 50, 60, 70, 80]


def test_a_replay_inside_an_epoch_stays_a_step_going_back(tmp_path):
    # a resume inside epoch 2 replays batches 3-5: the global step goes back there too
    rows = [(1, b) for b in range(1, 8)] + [(2, b) for b in range(1, 6)] + \
        [(2, b) for b in range(3, 8)]
    text = "".join(f"Epoch {e}, Batch {b}, Loss: {_loss(b):.4f}\n" for e, b in rows)
    run = load_run(str(write(tmp_path / "train.log", text)))
    steps = run.get("loss").steps  # log order
    assert steps.tolist() == list(range(1, 13)) + list(range(10, 15))


def test_an_epoch_counter_alone_is_still_the_step(tmp_path):
    text = "".join(f"Epoch {e}, Loss: {_loss(e):.4f}\n" for e in range(1, 6))
    run = load_run(str(write(tmp_path / "train.log", text)))
    assert list(run.get("loss").steps) == [1, 2, 3, 4, 5]


def test_per_gpu_token_rate_is_the_token_rate(tmp_path):
    text = "".join(f"Step {i + 1} | loss:{_loss(i):.6f} lr:2e-05 "
                   f"tokens_per_second_per_gpu:{1234.5 + i}\n" for i in range(5))
    run = load_run(str(write(tmp_path / "log_1.txt", text)))
    assert run.get("tokens_per_s").values[0] == pytest.approx(1234.5)


def test_pytorch_cifar_tutorial_lines(tmp_path):
    # print(f'[{epoch + 1}, {i + 1:5d}] loss: {running_loss / 2000:.3f}')
    text = "".join(f"[{e}, {b:5d}] loss: {_loss(e * 10 + b // 2000):.3f}\n"
                   for e in (1, 2) for b in (2000, 4000, 6000)) + "Finished Training\n"
    p = write(tmp_path / "cifar.log", text)
    assert detect_format(p) == "text"
    run = load_run(str(p))
    assert list(run.get("loss").steps) == [2000, 4000, 6000, 8000, 10000, 12000]


def test_printed_tensors_are_their_numbers(tmp_path):
    text = "".join(f"epoch 0 step {i} loss: tensor({_loss(i):.4f}, device='cuda:0', "
                   f"grad_fn=<NllLossBackward0>)\n" for i in range(5))
    run = load_run(str(write(tmp_path / "train.log", text)))
    assert run.get("loss").values.tolist() == pytest.approx([_loss(i) for i in range(5)])


def test_python_logging_prefix_is_not_part_of_the_name(tmp_path):
    text = "".join(f"INFO:tensorflow:loss = {_loss(i):.5f}, step = {100 * i} (10.5 sec)\n"
                   for i in range(1, 6))
    run = load_run(str(write(tmp_path / "estimator.log", text)))
    assert list(run.get("loss").steps) == [100, 200, 300, 400, 500]


def test_tqdm_progress_bar_with_zero_based_epochs(tmp_path):
    text = "".join(f"Epoch {e}: {50 * b // 2}%|##   | {b}/4 [00:01<00:02, 20.0it/s, "
                   f"loss={_loss(4 * e + b):.3f}]\r" for e in (0, 1) for b in (1, 2, 3, 4))
    run = load_run(str(write(tmp_path / "bar.log", text + "\n")))
    assert list(run.get("loss").steps) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_timm_train_lines_make_steps_and_step_times(tmp_path):
    text = "".join(
        f"Train: {e} [{b:4d}/30 ({100 * b // 30:3d}%)]  Loss: {_loss(b):.4f} ({_loss(b):.4f})  "
        f"Time: {0.3 + 0.01 * ((e + b) % 3):.3f}s,  742.12/s  (0.350s,  731.43/s)  "
        f"LR: 1.000e-03  Data: 0.012 (0.015)\n" for e in (0, 1) for b in (0, 10, 20))
    run = load_run(str(write(tmp_path / "timm.log", text)))
    assert list(run.get("loss").steps) == [0, 10, 20, 30, 40, 50]
    assert run.get("step_time_s").values[:3].tolist() == pytest.approx([0.30, 0.31, 0.32])


def test_a_rising_time_column_is_still_a_clock(tmp_path):
    text = "".join(f"step {i} loss {_loss(i):.4f} time {10.0 * i + 5:.1f}s\n" for i in range(1, 8))
    run = load_run(str(write(tmp_path / "train.log", text)))
    assert run.get("step_time_s").values.tolist() == pytest.approx([10.0] * 6)


@pytest.mark.parametrize("prefix", ["[rank{r}]: ", "[default{r}]:", "{r}: ", "[1,{r}]<stdout>:"])
def test_interleaved_rank_lines_are_one_series_per_rank(tmp_path, prefix):
    text = "".join(prefix.format(r=r) + f"step {i} loss {_loss(i) + r / 100:.4f}\n"
                   for i in range(6) for r in range(3))
    run = load_run(str(write(tmp_path / "torchrun.log", text)))
    assert run.ranks() == [0, 1, 2]
    for r in range(3):
        assert list(run.get("loss", r).steps) == list(range(6))
        assert run.get("loss", r).values[0] == pytest.approx(4.0 + r / 100)


def test_numbered_lines_of_one_process_are_not_ranks(tmp_path):
    # "1: loss 2.3" counts steps: each number appears once, so it is not a rank label
    text = "".join(f"{i}: loss {_loss(i):.4f}\n" for i in range(1, 9))
    run = load_run(str(write(tmp_path / "train.log", text)))
    assert run.ranks() == [None]


def test_mmengine_epoch_train_lines_and_their_step_time(tmp_path):
    text = "".join(
        f"2023/05/01 12:00:00 - mmengine - INFO - Epoch(train)  [{e}][{b:3d}/100]  lr: 1.0e-02  "
        f"eta: 1:00:00  time: 0.5000  data_time: 0.0100  memory: 3000  loss: {_loss(b):.4f}\n"
        for e in (1, 2) for b in (50, 100))
    run = load_run(str(write(tmp_path / "20230501.log", text)))
    assert list(run.get("loss").steps) == [50, 100, 150, 200]
    # the time stamp "1:00:00" after "eta:" does not glue "eta" onto "time"
    assert run.get("step_time_s").values.tolist() == [0.5] * 4


def test_mmengine_iteration_based_runner(tmp_path):
    text = "".join(f"2023/05/01 12:00:00 - mmengine - INFO - Iter(train) [{i:4d}/1000]  "
                   f"lr: 1.0e-02  loss: {_loss(i):.4f}\n" for i in (50, 100, 150))
    run = load_run(str(write(tmp_path / "20230501.log", text)))
    assert list(run.get("loss").steps) == [50, 100, 150]


def test_ansi_colours_are_not_binary(tmp_path):
    text = "".join(f"\x1b[32mEpoch 0\x1b[0m step {i} \x1b[1mloss\x1b[0m={_loss(i):.4f}\n"
                   for i in range(6))
    p = write(tmp_path / "rich.log", text)
    assert detect_format(p) == "text"
    assert list(load_run(str(p)).get("loss").steps) == list(range(6))


def test_keras_progress_bars_with_backspaces_keep_the_epoch_line(tmp_path):
    text = "".join(
        f"Epoch {e}/3\n" + "".join(f"\r{k:3d}/100 [====] - ETA: 0s - loss: 9.9999" + "\b" * 40
                                   for k in (1, 50))
        + f"\r100/100 [==============================] - 1s 5ms/step - loss: {_loss(e):.4f}"
        f" - val_loss: {_loss(e) + 0.1:.4f}\n" for e in (1, 2, 3))
    p = write(tmp_path / "keras.log", text)
    assert detect_format(p) == "text"
    run = load_run(str(p))
    assert list(run.get("loss").steps) == [1, 2, 3]  # one row per epoch: not the ETA lines
    assert run.get("loss").values.tolist() == pytest.approx([_loss(e) for e in (1, 2, 3)])


def test_a_utf16_log_from_powershell(tmp_path):
    p = tmp_path / "log.txt"
    p.write_text("".join(f"step {i} loss {_loss(i):.4f}\n" for i in range(6)), encoding="utf-16")
    assert detect_format(p) == "text"
    assert load_run(str(p)).get("loss").values[0] == pytest.approx(4.0)


def test_a_csv_with_decimal_commas(tmp_path):
    p = write(tmp_path / "export.csv", "step;loss;lr\n" + "".join(
        f"{i};{str(_loss(i)).replace('.', ',')};1,5e-03\n" for i in range(6)))
    run = load_run(str(p))
    assert run.get("loss").values.tolist() == pytest.approx([_loss(i) for i in range(6)])
    assert run.get("lr").values[0] == pytest.approx(1.5e-3)
    assert any(n.kind == "decimal_comma" and n.path == str(p) for n in run.notes)


def test_a_semicolon_csv_with_decimal_points_is_read_as_it_is(tmp_path):
    p = write(tmp_path / "export.csv", "step;loss\n0;1.5\n1;1.25\n2;1.0\n")
    run = load_run(str(p))
    assert run.get("loss").values.tolist() == [1.5, 1.25, 1.0]
    assert not any(n.kind == "decimal_comma" for n in run.notes)


def test_a_printed_dict_with_a_bare_nan_is_read(tmp_path):
    # print({'loss': float('nan')}) writes a bare nan, which is no Python literal
    text = "".join(f"{{'loss': {'nan' if i == 3 else _loss(i)}, 'grad_norm': "
                   f"{'inf' if i == 4 else 1.5}, 'epoch': {i / 10}}}\n" for i in range(6))
    run = load_run(str(write(tmp_path / "stdout.log", text)))
    loss = run.get("loss").values
    assert np.isnan(loss[3]) and np.isfinite(np.delete(loss, 3)).all()
    assert np.isinf(run.get("grad_norm").values[4])


def test_a_space_aligned_table_is_a_log_only_when_its_names_say_so(tmp_path):
    rows = "".join(f"{i:5d}  {4.0 - i / 100:8.4f}\n" for i in range(20))
    log = write(tmp_path / "fit.txt", " epoch      loss\n" + rows)
    data = write(tmp_path / "points.txt", "     x         y\n" + rows)
    assert detect_format(log) == "text" and detect_format(data) is None
    assert load_run(str(log)).get("loss").values.tolist() == pytest.approx(
        [4.0 - i / 100 for i in range(20)])


def test_a_one_letter_size_is_megabytes_for_memory_and_a_count_otherwise(tmp_path):
    # Detectron2's console: "max_mem: 3000M" is MB; "params: 125M" elsewhere is a count
    text = "".join(f"[01/01 10:00:00 d2.utils.events]:  iter: {i * 20 + 19}  total_loss: "
                   f"{_loss(i):.3f}  params: 125M  max_mem: {3000 + 100 * i}M\n"
                   for i in range(5))
    run = load_run(str(write(tmp_path / "log.txt", text)))
    assert run.get("mem_peak_mb").values.tolist() == [3000 + 100 * i for i in range(5)]
    assert run.get("params").values.tolist() == [125e6] * 5


def test_bars_that_do_not_count_the_run_give_no_steps(tmp_path):
    # a bar that restarts each epoch ends at 100 every time, a download's bar at 5/5: their
    # positions are not the steps of the lines under them
    epochs = "".join(f"100%|##| 100/100 [00:10<00:00, 9.80it/s]\n{{'epoch': {e}, 'train_loss': "
                     f"{2.0 - 0.1 * e:.3f}}}\n" for e in range(1, 7))
    assert load_run(str(write(tmp_path / "a.log", epochs))).get("loss").steps.tolist() == \
        list(range(1, 7))
    dl = "Downloading: 100%|##| 5/5 [00:01<00:00, 5.0it/s]\n" + "".join(
        f"Loss: {2.0 - 0.05 * i:.4f}\n" for i in range(20))
    assert len(set(load_run(str(write(tmp_path / "b.log", dl))).get("loss").steps)) == 20


def test_a_longer_eval_bar_does_not_take_the_training_steps(tmp_path):
    lines = []
    for i in range(1, 1001):
        lines.append(f"{i // 10}%|#| {i}/1000 [00:01<00:09, 9.9it/s]\r")
        if i % 50 == 0:
            lines.append(f"{{'loss': {2.0 - i / 1000:.3f}, 'epoch': {i / 1000:.2f}}}\n")
        if i % 200 == 0:
            lines.extend(f"{k // 3}%|#| {k}/300 [00:01<00:00, 12.0it/s]\r" for k in range(1, 301))
            lines.append(f"{{'eval_loss': {1.5 - i / 2000:.3f}, 'epoch': {i / 1000:.2f}}}\n")
    run = load_run(str(write(tmp_path / "trainer.log", "".join(lines))))
    assert run.get("loss").steps.tolist() == list(range(50, 1001, 50))
    assert run.get("val_loss").steps.tolist() == list(range(200, 1001, 200))


def test_an_epoch_line_over_per_batch_losses_is_not_one_row(tmp_path):
    text = "".join(f"Epoch {e}\n" + "".join(f"loss: {2.0 - 0.01 * (5 * e + b):.4f}\n"
                                           for b in range(5)) for e in range(1, 5))
    assert len(load_run(str(write(tmp_path / "e.log", text))).get("loss")) == 20


def test_a_rank_column_splits_only_a_whole_table_of_repeated_steps(tmp_path):
    rows = "".join(f"{i},{r},{2.0 - i / 100}\n" for i in range(0, 50, 5) for r in (0, 1))
    blank = write(tmp_path / "blank.csv", "step,rank,loss\n" + rows + "110,,1.2\n")
    assert load_run(str(blank)).ranks() == [None]
    metric = write(tmp_path / "metric.csv", "step,rank,loss\n" + "".join(
        f"{i},{(2, 3, 5)[i % 3]},{2.0 - i / 100}\n" for i in range(12)))
    assert load_run(str(metric)).ranks() == [None]


def test_a_line_of_words_inside_a_space_aligned_table_is_not_a_new_header(tmp_path):
    text = "step loss lr\n0 2.5 0.1\n1 2.4 0.1\nSaving checkpoint\n2 2.3 0.1\n3 2.2 0.1\n"
    assert load_run(str(write(tmp_path / "t.txt", text))).get("loss").steps.tolist() == \
        [0, 1, 2, 3]


def test_a_darknet_line_with_a_broken_number_is_skipped_not_a_crash(tmp_path):
    text = "".join(f" {i}: 2.3, 2.4 avg loss, 0.001 rate, 1.2 seconds, 64 images\n"
                   for i in range(1, 6)) + " 6: 2.3, 2.4 avg loss, 0.001 rate, 1.2.3 seconds, " \
        "64 images\n"
    assert load_run(str(write(tmp_path / "d.log", text))).get("loss").steps.tolist() == \
        [1, 2, 3, 4, 5]


FAIRSEQ_OVERFLOW = (
    "| epoch 027 | loss 6.343 | nll_loss 4.984 | num_updates 10198 | lr 0.000626 | "
    "gnorm 0.390 | loss_scale 0.500 | wall 23080\n"
    "| epoch 027 | valid on 'valid' subset | valid_loss 8.30118 | num_updates 10198\n"
    + "".join(f"| WARNING: overflow detected, setting loss scale to: {0.5 / 2 ** i}\n"
              for i in range(1, 13)))


def test_fp16_scaler_overflow_messages_are_loss_scale_points(tmp_path):
    run = load_run(str(write(tmp_path / "train.log", FAIRSEQ_OVERFLOW)))
    ls = run.get("loss_scale")
    # the summary line's 0.5 at its step, then where the 12 halvings ended, one step later
    assert ls.steps.tolist() == [10198, 10199]
    assert ls.values.tolist() == pytest.approx([0.5, 0.5 / 2 ** 12])
    assert run.get("val_loss").values.tolist() == pytest.approx([8.30118])


def test_apex_and_deepspeed_overflow_messages_between_step_lines(tmp_path):
    lines = []
    for i in range(1, 7):
        lines.append(f"step {i * 10} | loss {2.0 - i / 10:.2f}")
        if i in (2, 4):
            lines.append("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale "
                         f"to {65536.0 / i}")
        if i == 5:
            lines.append("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
                         "8192, reducing to 4096")
    run = load_run(str(write(tmp_path / "log.txt", "\n".join(lines) + "\n")))
    assert run.get("loss_scale").steps.tolist() == [21, 41, 51]
    assert run.get("loss_scale").values.tolist() == pytest.approx([32768.0, 16384.0, 4096.0])
    assert run.get("loss").steps.tolist() == [10, 20, 30, 40, 50, 60]


def test_deepspeed_overflow_lines_on_tqdm_bars_with_one_printed_dict(tmp_path):
    """HF Trainer + DeepSpeed: the OVERFLOW message is printed on the line of the step's tqdm
    bar, and only one loss dict is printed: the bar names the steps of both."""
    bar = " 14%|█▍        | {}/2724 [13:55:57<86:19:20, 132.41s/it]"
    text = bar.format(377) + "\n"
    scale = 64
    for step in range(378, 383):
        text += bar.format(step) + ("[2023-06-07 22:16:00,018] [INFO] [loss_scaler.py:181:"
                                    "update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. "
                                    f"Attempted loss scale: {scale}, reducing to "
                                    f"{scale // 2}\n\n")
        scale //= 2
        if step == 380:
            text += ("                              \n{'loss': 2.0491, 'learning_rate': "
                     "0.0001961913563176343, 'epoch': 0.28}\n\n")
    run = load_run(str(write(tmp_path / "train_output.log", text)))
    assert run.get("loss_scale").steps.tolist() == [378, 379, 380, 381, 382]
    assert run.get("loss_scale").values.tolist() == pytest.approx([32, 16, 8, 4, 2])
    assert run.get("loss").steps.tolist() == [380]


def test_a_val_line_that_starts_with_its_epoch_is_validation(tmp_path):
    text = "".join(f"Train epoch {e} loss {1.5 - e / 10:.3f}\nVal epoch {e} has acc 0.4 and "
                   f"loss {1.6 - e / 20:.3f}\n" for e in range(4))
    run = load_run(str(write(tmp_path / "out.log", text)))
    assert run.get("loss").values.tolist() == pytest.approx([1.5, 1.4, 1.3, 1.2])
    assert run.get("val_loss").values.tolist() == pytest.approx([1.6, 1.55, 1.5, 1.45])


def test_printed_hf_trainer_dicts_say_the_framework(tmp_path):
    # the Trainer's console dicts (curly quotes pasted from an issue): its NaN filter applies
    text = "".join(f"{{\u2018loss\u2019: {1.4 + i / 50:.4f}, \u2018grad_norm\u2019: 2.5, "
                   f"\u2018learning_rate\u2019: {5e-5 - i * 3e-6:.3e}, \u2018epoch\u2019: "
                   f"{0.19 * (i + 1):.2f}}}\n" for i in range(6))
    run = load_run(str(write(tmp_path / "out.log", text)))
    assert run.meta.get("framework") == "huggingface"
    assert len(run.get("loss")) == 6


def test_prose_words_around_a_name_are_not_part_of_it(tmp_path):
    # a beginner's print log: "the loss is 1.2 and accuracy was 0.5"
    text = "".join(f"epoch {e}: the loss is {1.5 - e / 10:.2f} and accuracy was "
                   f"{0.5 + e / 20:.2f}\n" for e in range(6))
    run = load_run(str(write(tmp_path / "out.log", text)))
    assert run.get("loss").values.tolist() == pytest.approx([1.5, 1.4, 1.3, 1.2, 1.1, 1.0])
    assert run.has("accuracy")


def test_a_tqdm_bars_rate_is_the_step_time(tmp_path):
    text = "".join(f"train:  {i}%|#  | {i * 20}/2000 [00:0{i % 10}<00:02, "
                   f"{(900.0 / i):.2f}it/s, loss={1.0 / i:.3f}]\r" for i in range(1, 11))
    text += "train:  55%|#####  | 1100/2000 [01:00<00:50,  2.50s/it, loss=0.050]\n"
    run = load_run(str(write(tmp_path / "bar.log", text)))
    st = run.get("step_time_s")
    assert st.steps.tolist()[:2] == [20, 40] and st.steps.tolist()[-1] == 1100
    assert st.values[0] == pytest.approx(1 / 900.0) and st.values[-1] == pytest.approx(2.5)


def test_a_deepspeed_overflow_printed_after_a_bar_takes_the_bars_step(tmp_path):
    lines = []
    for i in range(1, 7):
        lines.append(f" {i * 10}%|#   | {i * 10}/100 [00:{i:02d}<01:00,  1.00s/it]")
        lines.append(f"{{'loss': {2.0 - i / 10:.2f}, 'learning_rate': 0.0001, 'epoch': {i / 10}}}")
        if i in (3, 4):
            lines.append(f" {i * 10 + 5}%|#   | {i * 10 + 5}/100 [00:{i:02d}<01:00,  1.00s/it]"
                         f"[2023-06-07 22:16:00,018] [INFO] [loss_scaler.py:181:update_scale] "
                         f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
                         f"{2 ** (8 - i)}, reducing to {2 ** (7 - i)}")
    run = load_run(str(write(tmp_path / "ds.log", "\n".join(lines) + "\n")))
    assert run.get("loss").steps.tolist() == [10, 20, 30, 40, 50, 60]
    assert run.get("loss_scale").steps.tolist() == [35, 45]
    assert run.get("loss_scale").values.tolist() == [16.0, 8.0]


def test_acc_at_1_and_acc_at_5_keep_their_names(tmp_path):
    # the PyTorch ImageNet example: "Acc@1   4.56 (  1.79)   Acc@5  14.22 (  6.43)"
    text = "".join(f"Epoch: [0][{i:4d}/1424]   Time  1.187 ( 1.292)    Loss {5.4 - i / 1e3:.4e} "
                   f"({6.1:.4e})    Acc@1   {4 + i / 100:.2f} (  1.79)   Acc@5  {14 + i / 50:.2f} "
                   f"(  6.43)\n" for i in range(741, 921, 20))
    run = load_run(str(write(tmp_path / "imagenet.log", text)))
    assert run.get("acc@1").values[0] == pytest.approx(11.41)
    assert run.get("acc@5").values[0] == pytest.approx(28.82)


def test_an_epoch_counter_that_never_moves_is_no_step(tmp_path):
    text = "".join(f"Epoch 2 train Loc Loss: 0.0043 Cls Loss: 0.0043 Tot Loss: 0.00{43 + i % 2} "
                   f"Accu :0.0008\n" for i in range(12))
    run = load_run(str(write(tmp_path / "out.log", text)))
    loss = run.get("loss")  # 'Tot Loss' is the total loss
    assert loss.steps.tolist() == list(range(12))
    assert any(n.kind == "step_from_row_index" for n in run.notes)


def test_a_rate_unit_after_a_value_names_the_rate(tmp_path):
    # MXNet's Speedometer and print logs: "Speed: 7.41 samples/sec", "12.5 img/s", "3.2 it/s"
    text = "".join(f"Epoch[0] Batch [{i * 100}]\tSpeed: {7.4 + i / 10:.2f} samples/sec\t"
                   f"loss={1.0 - i / 20:.3f}\n" for i in range(1, 7))
    run = load_run(str(write(tmp_path / "mx.log", text)))
    assert run.get("samples_per_s").values[0] == pytest.approx(7.5)
    text = "".join(f"iter {i} | loss {1.0 - i / 20:.3f} | {2.0 + i / 10:.1f} it/s\n"
                   for i in range(1, 7))
    run = load_run(str(write(tmp_path / "its.log", text)))
    assert run.get("step_time_s").values[0] == pytest.approx(1 / 2.1)


def test_review_fixes_for_the_readers(tmp_path):
    from trainmedic.run.scaler_messages import scale_message

    assert scale_message("[deepspeed] Grad overflow on iteration 1234. Reducing dynamic loss "
                         "scale from 65536 to 32768") == 32768.0
    assert scale_message("loss scale: 1024") is None
    # Keras-style rows with whole epochs and a learning_rate are not the HF Trainer's dicts
    text = "".join(f"{{'loss': {1.0 - e / 20:.3f}, 'learning_rate': 0.001, 'epoch': {e}}}\n"
                   for e in range(1, 7))
    run = load_run(str(write(tmp_path / "k.log", text)))
    assert run.meta.get("framework") != "huggingface"


def test_an_excerpt_of_epoch_positions_with_gaps_keeps_its_steps_in_order(tmp_path):
    # MXNet's Speedometer, pasted with elisions: batches 20-40 of epoch 0, 60-100 of epoch 60,
    # 20-60 of epoch 61; an epoch holds at least 100 batches, so epoch 61 starts after 60's
    pairs = [(0, 20), (0, 40), (60, 60), (60, 80), (60, 100), (61, 20), (61, 40), (61, 60)]
    text = "".join(f"Epoch[{e}] Batch [{b}]\tSpeed: 95.0 samples/sec\tTrain-CrossEntropy="
                   f"{1.0 - 0.01 * i:.6f}\n" for i, (e, b) in enumerate(pairs))
    run = load_run(str(write(tmp_path / "train.log", text)))
    steps = run.get("loss").steps
    assert np.all(np.diff(steps) > 0)
    assert steps.tolist()[-3:] == [6120, 6140, 6160]


def test_a_line_announcing_an_evaluation_makes_the_next_line_its_result(tmp_path):
    # PaddlePaddle scripts print the evaluation like a training line, after a notice
    lines = []
    for e in range(6):
        lines.append(f"epoch: {e},  loss is: {1.0 - 0.1 * e}, acc is: {0.5 + 0.05 * e}\n")
        lines.append("testing in eval mode......\n")
        lines.append(f"epoch: {e},  loss is: {1.2 - 0.1 * e}, acc is: {0.45 + 0.05 * e}\n")
    run = load_run(str(write(tmp_path / "training_log.txt", "".join(lines))))
    assert run.get("loss").values.tolist() == pytest.approx([1.0 - 0.1 * e for e in range(6)])
    assert run.get("val_loss").values.tolist() == pytest.approx(
        [1.2 - 0.1 * e for e in range(6)])
    assert run.get("loss").steps.tolist() == list(range(6))


def test_lightning_console_with_its_banner_and_a_stale_eval_in_the_bar(tmp_path):
    # "GPU available: False, used: False" is no CSV header; "train_loss_step" is the loss
    # (not a step counter); the bar repeats the last val_loss at every redraw, which counts
    # once per epoch (at the epoch's last draw), not at every redraw
    bar = "\u2588" * 5
    out = ["GPU available: False, used: False\n", "TPU available: False, using: 0 TPU cores\n",
           "\n", "  | Name  | Type | Params | Mode\n", "0 | model | Net  | 12.3 K | train\n"]
    val = None
    for e in range(8):
        for pos in (5, 10, 15, 20, 25, 31):
            post = f"v_num=0, train_loss_step={1.4 - 0.02 * e - 0.001 * pos:.3f}"
            if pos == 31:
                val = 1.5 - 0.03 * e
            if val is not None:
                post += f", val_loss={val:.3f}"
            if pos == 31:
                post += f", train_loss_epoch={1.4 - 0.02 * e:.3f}"
            out.append(f"\rEpoch {e}:  {pos * 100 // 31}%|{bar}| {pos}/31 [00:00<00:00, "
                       f"200.00it/s, {post}]")
        out.append("\n")
    p = write(tmp_path / "lightning_console.txt", "".join(out))
    assert detect_format(p) == "text"
    run = load_run(str(p))
    assert len(run.get("loss")) == 48
    assert run.get("val_loss").values.tolist() == pytest.approx([1.5 - 0.03 * e for e in range(8)])


def test_a_report_table_with_blank_columns_reads_values_by_their_column(tmp_path):
    # Chainer's PrintReport (ESPnet1's exp/*/results/log): validation columns stay blank
    # between evaluations; each value starts at its column
    names = ["epoch", "iteration", "main/loss", "validation/main/loss", "main/acc",
             "elapsed_time"]
    widths = [12, 12, 12, 22, 12, 14]
    def line(cells):
        return "".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip() + "\n"
    text = line(names)
    for i in range(1, 13):
        val = f"{3.0 - 0.1 * i:.4f}" if i % 4 == 0 else ""
        text += line(["0", str(100 * i), f"{3.2 - 0.1 * i:.5f}", val, f"{0.1 * i:.3f}",
                      f"{12.3 * i:.3f}"])
    run = load_run(str(write(tmp_path / "log", text)))
    assert run.get("loss").steps.tolist() == list(range(100, 1300, 100))
    assert run.get("val_loss").steps.tolist() == [400, 800, 1200]
    assert run.get("val_loss").values.tolist() == pytest.approx([2.6, 2.2, 1.8])


def test_spacy_training_table_under_its_banner(tmp_path):
    # `spacy train`: a banner, then "E  #  LOSS TOK2VEC  LOSS TEXTCAT  ...  SCORE", a rule of
    # dashes, one row per evaluation; the objective is the sum of the LOSS <pipe> columns
    head = ("\u2139 Saving to output directory: training\n\n" + "=" * 20 + " Training pipeline "
            + "=" * 20 + "\nE    #       LOSS TOK2VEC  LOSS TEXTCAT  CATS_SCORE  SCORE \n"
            "---  ------  ------------  ------------  ----------  ------\n")
    rows = "".join(f"{i // 5:>3}  {20 * i:>6}  {10.0 / i:>12.2f}  {20.0 / i:>12.2f}  "
                   f"{50 + i:>10.2f}  {0.5 + i / 100:>6.2f}\n" for i in range(1, 16))
    run = load_run(str(write(tmp_path / "train_output.txt", head + rows + "\u2714 Saved\n")))
    loss = run.get("loss")
    assert loss.steps.tolist() == [20 * i for i in range(1, 16)]
    assert loss.values.tolist() == pytest.approx([round(10.0 / i, 2) + round(20.0 / i, 2)
                                                  for i in range(1, 16)])


def test_ignite_progress_bar_positions_are_global_steps(tmp_path):
    # PyTorch-Ignite's ProgressBar: "Epoch [e/E]: [i/N]  pct%|bar, batch_loss=x [..]" (no
    # closing "|" after its bar), redrawn with carriage returns, one line per epoch
    lines = []
    for e in range(1, 5):
        draws = [f"Epoch [{e}/4]: [{i}/16] {100 * i // 16:3d}%|{'#' * (i // 2):<8}, "
                 f"batch_loss={2.0 / (e + i / 16):.3g} [00:00<00:00]" for i in (4, 8, 12, 16)]
        lines.append("\r".join(draws))
        lines.append(f"Validation Results - Epoch: {e}  Avg loss: {1.5 / e:.4f}")
    p = write(tmp_path / "ignite_console.txt", "\n".join(lines) + "\n")
    run = load_run(str(p))
    assert run.get("loss").steps.tolist() == list(range(4, 68, 4))
    assert run.get("val_loss").steps.tolist() == [16, 32, 48, 64]
