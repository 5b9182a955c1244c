"""More console and export habits, end to end (the run of ``test_format_zoo``: a loss that
falls, then diverges from row 200 of 300, or stays healthy): fastai's recorder table, pandas'
``to_string()``, Ultralytics' console, torchtitan, the PyTorch word-language-model and MNIST
examples, MLX, LitGPT, HF notebook tables, PaddleClas, mmcv and mmdet JSON, timm's
summary.csv, torchvision's references, absl-prefixed TF Object Detection lines, llm.c,
Composer's metric blocks, Ignite, scikit-learn, diffusers, Keras verbose=2, Lightning's rich
and NeMo's tqdm bars, hydra, accelerate, HF stdout with its tqdm bar drawn over the dicts,
YOLOv5's old console, TF's cifar10_train, Caffe, Darknet, kohya, Flax, Detectron2's console,
the PyTorch-GAN and super-resolution examples, Udacity's "..." lines and epoch blocks,
ESPnet, SpeechBrain, YOLOX, PaddleDetection, open_clip, nnU-Net, BasicSR, MONAI, YOLACT,
build-nanogpt's one-metric-per-line log.txt and TF Model Garden's Orbit controller.

Each is written from what the tool prints (no code copied); each must get exactly the
divergence near its onset (in the log's own step units), and its healthy twin nothing loud."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from test_format_zoo import ONSET, N, _losses

from trainmedic.diagnose import diagnose
from trainmedic.run import load_run

Step = Callable[[int], int]


def _every(k: int) -> Step:
    return lambda i: i * k


def _epochs(per_epoch_rows: int, stride: int, of: int, first_pos: int) -> Step:
    """Row i is at position first_pos + (i % per_epoch_rows) * stride of epoch i // rows."""
    return lambda i: (i // per_epoch_rows) * of + first_pos + (i % per_epoch_rows) * stride


def _writers(L: list[float]) -> dict[str, tuple[str, Step]]:
    r = range(N)
    ppl = [math.exp(min(v, 50.0)) for v in L]
    w: dict[str, tuple[str, Step]] = {
        "fastai.log": ("epoch     train_loss  valid_loss  accuracy  time    \n" + "".join(
            f"{i:<10d}{L[i]:<12.6f}{L[i] * 1.05:<12.6f}{0.5:<10.6f}00:05     \n" for i in r),
            _every(1)),
        "fastai_history.csv": ("epoch,train_loss,valid_loss,accuracy,time\n" + "".join(
            f"{i},{L[i]:.6f},{L[i] * 1.05:.6f},0.5,00:05\n" for i in r), _every(1)),
        "torchtitan.log": ("".join(
            f"[rank0]:[titan] 2025-01-01 10:00:00,000 - root - INFO - \x1b[31mstep: {i + 1:2d}"
            f"  \x1b[32mloss: {L[i]:7.4f}  \x1b[33mmemory: 20.50GiB(25.91%)  \x1b[34mtps: "
            f"3,456  \x1b[36mtflops: 100.12  \x1b[35mmfu: 30.12%\x1b[39m\n" for i in r),
            _every(1)),
        "wlm.log": ("".join(
            f"| epoch {i // 10 + 1:3d} | {(i % 10 + 1) * 200:5d}/ 2983 batches | lr 20.00 | "
            f"ms/batch 45.00 | loss {L[i]:5.2f} | ppl {ppl[i]:8.2f}\n" + (
                "-" * 89 + f"\n| end of epoch {i // 10 + 1:3d} | time: 140.00s | valid loss "
                f"{L[i] * 1.02:5.2f} | valid ppl {ppl[i]:8.2f}\n" + "-" * 89 + "\n"
                if i % 10 == 9 else "") for i in r), _epochs(10, 200, 2983, 200)),
        "mnist.log": ("".join(
            f"Train Epoch: {i // 10 + 1} [{(i % 10) * 640}/60000 ({(i % 10) * 100 // 94}%)]"
            f"\tLoss: {L[i]:.6f}\n" + (
                f"\nTest set: Average loss: {L[i] * 1.02:.4f}, Accuracy: 9800/10000 (98%)\n\n"
                if i % 10 == 9 else "") for i in r), _epochs(10, 640, 60000, 0)),
        "mlx.log": ("".join(
            f"Iter {i + 1}: Train loss {L[i]:.3f}, Learning Rate 1.000e-05, It/sec 0.512, "
            f"Tokens/sec 500.123, Trained Tokens {1000 * (i + 1)}, Peak mem 5.012 GB\n"
            for i in r), _every(1)),
        "litgpt.log": ("".join(
            f"Epoch 1 | iter {i + 1} step {i + 1} | loss train: {L[i]:.3f}, val: n/a | iter "
            f"time: 500.00 ms (step) remaining time: 0:10:00\n" for i in r), _every(1)),
        "hf_notebook.tsv": ("Step\tTraining Loss\n" + "".join(
            f"{(i + 1) * 10}\t{L[i]:.6f}\n" for i in r), _every(10)),
        "hf_notebook_nolog.tsv": ("Epoch\tTraining Loss\tValidation Loss\tAccuracy\n" + "".join(
            f"{i + 1}\t{'No log' if i < 3 else f'{L[i]:.6f}'}\t{L[i] * 1.02:.6f}\t0.5\n"
            for i in r), _every(1)),
        "paddle.log": ("".join(
            f"[2024/01/01 10:00:00] ppcls INFO: [Train][Epoch {i // 100 + 1}/10][Iter: "
            f"{i % 100}/100]lr: 0.10000, top1: 0.10000, CELoss: {L[i]:.5f}, loss: {L[i]:.5f}, "
            f"batch_cost: 0.50000s, reader_cost: 0.01000, ips: 100.00000 samples/s, eta: "
            f"0:10:00\n" for i in r), _every(1)),
        "mmcv.log": ("".join(
            f"2021-01-01 10:00:00,000 - mmdet - INFO - Epoch [{i // 100 + 1}][{(i % 100 + 1) * 50}"
            f"/5000]\tlr: 1.000e-02, eta: 1 day, 2:00:00, time: 0.500, data_time: 0.010, "
            f"memory: 3000, loss_rpn_cls: 0.5000, loss_cls: 0.3000, loss: {L[i]:.4f}\n"
            for i in r), _every(50)),
        "mmdet.log.json": ('{"env_info": "sys.platform: linux", "seed": 0}\n' + "".join(
            json.dumps({"mode": "train", "epoch": i // 100 + 1, "iter": (i % 100 + 1) * 50,
                        "lr": 0.01, "memory": 3000, "data_time": 0.01, "loss_cls": 0.3,
                        "loss": round(L[i], 4), "time": 0.5}) + "\n" for i in r), _every(50)),
        "yolo_console.log": ("".join(
            "\n      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size\n"
            f"{i + 1:>11}/{N}      3.2G  {L[i]:9.4f}  {L[i] * 0.5:9.4f}  {1.2:9.4f}         32"
            "        640: 100%|██████████| 50/50 [00:10<00:00,  5.00it/s]\n" for i in r),
            _every(1)),
        "timm_summary.csv": ("epoch,train_loss,eval_loss,eval_top1,eval_top5,lr\n" + "".join(
            f"{i},{L[i]},{L[i] * 1.02},50.0,80.0,0.001\n" for i in r), _every(1)),
        "tv_reference.log": ("".join(
            f"Epoch: [{i // 50}]  [{(i % 50) * 10:4d}/500]  eta: 1 day, 0:00:00  lr: 0.1  "
            f"img/s: 50.0  loss: {L[i]:.4f} ({L[i]:.4f})  acc1: 0.0000 (0.0000)  acc5: 0.0000 "
            "(0.0000)  time: 0.3450  data: 0.0150  max mem: 10000\n" for i in r), _every(10)),
        "absl_od.log": ("".join(
            f"I0101 10:00:{i % 60:02d}.000000 140000 model_lib_v2.py:705] Step {(i + 1) * 100} "
            f"per-step time 0.500s\nI0101 10:00:{i % 60:02d}.000000 140000 model_lib_v2.py:708]"
            " {'Loss/classification_loss': 0.5, 'Loss/localization_loss': 0.3, "
            f"'Loss/total_loss': {L[i]:.6f}, 'learning_rate': 0.01}}\n" for i in r),
            _every(100)),
        "llmc.log": ("".join(
            f"step {i + 1:4d}/{N} | train loss {L[i]:.6f} | norm 1.2345 | lr 1.00e-04 | "
            "(1500.00 ms | 50000 tok/s)\n" for i in r), _every(1)),
        "composer.log": ("".join(
            f"[epoch=1][batch={i + 1}/{N}]:\n\t Train time/epoch: 0\n\t Train time/batch: {i}\n"
            f"\t Train loss/train/total: {L[i]:.4f}\n\t Train metrics/train/LanguageCrossEntropy"
            f": {L[i]:.4f}\n\t Train throughput/batches_per_sec: 2.0\n" for i in r), _every(1)),
        "ignite.log": ("".join(f"Epoch[{i // 10 + 1}] Iteration[{(i % 10 + 1) * 10}/100] Loss: "
                               f"{L[i]:.2f}\n" for i in r), _every(10)),
        "sklearn.log": ("".join(f"Iteration {i + 1}, loss = {L[i]:.8f}\n" for i in r),
                        _every(1)),
        "diffusers.log": ("".join(
            f"Steps: {i * 100 // N:3d}%|█▌        | {i + 1}/{N} [00:50<07:30,  2.00it/s, "
            f"loss={L[i]:.3f}, lr=1e-5]\r" for i in r) + "\n", _every(1)),
        "keras_v2.log": ("".join(
            f"Epoch {i + 1}/{N}\n100/100 - 2s - loss: {L[i]:.4f} - accuracy: 0.8000 - val_loss: "
            f"{L[i] * 1.02:.4f} - val_accuracy: 0.7900 - 2s/epoch - 20ms/step\n" for i in r),
            _every(1)),
        "records.json": (json.dumps([{"step": i, "loss": L[i]} for i in r]), _every(1)),
        "aligned.txt": ("  step      loss        lr\n" + "".join(
            f"{i:6d}  {L[i]:8.4f}  0.001000\n" for i in r), _every(1)),
        "rich_bar.log": ("".join(
            f"Epoch {i // 10}/29  ━━━━━━━━━━━━━━━━━━━━ {i % 10 + 1}/10 0:00:05 • 0:00:00 "
            f"10.00it/s v_num: 0 train_loss: {L[i]:.3f}\n" for i in r), _every(1)),
        "nemo.log": ("".join(
            f"Epoch 0: {i * 100 // N:3d}%|█         | {i + 1}/{N} [00:10<01:30, 1.0it/s, v_num=0"
            f", reduced_train_loss={L[i]:.3f}, global_step={i:.1f}, consumed_samples="
            f"{8 * (i + 1):.1f}]\r" for i in r) + "\n", _every(1)),
        "hydra.log": ("".join(f"[2024-01-01 10:00:00,000][__main__][INFO] - step {i} loss "
                              f"{L[i]:.4f}\n" for i in r), _every(1)),
        "pandas_index.csv": (",step,loss\n" + "".join(f"{i},{i},{L[i]}\n" for i in r),
                             _every(1)),
        "pandas_string.txt": ("     step      loss\n" + "".join(
            f"{i:<5d}{i:5d}  {L[i]:8.6f}\n" for i in r), _every(1)),
        "nested.jsonl": ("".join(json.dumps({"step": i, "train": {"loss": L[i], "lr": 1e-3}})
                                 + "\n" for i in r), _every(1)),
        "accelerate.log": ("".join(f"12/01/2024 10:00:00 - INFO - __main__ - epoch 0 step {i}: "
                                   f"loss {L[i]:.4f}\n" for i in r), _every(1)),
        # HF Trainer's stdout and stderr in one file: the bar redrawn with \r, a dict printed
        # every 5 steps right after a draw (the bar's position is the global step)
        "hf_tqdm_dict.log": ("".join(
            f"  {i * 100 // N}%|▍  | {i + 1}/{N} [00:{i % 60:02d}<10:00,  2.1it/s]" + (
                f"{{'loss': {L[i]:.4f}, 'learning_rate': 4.9e-05, 'epoch': {i / 100:.2f}}}\n"
                if i % 5 == 4 else "\r") for i in r), lambda i: i + 1),
        "yolov5_old.log": ("".join(
            "\n     Epoch   gpu_mem       box       obj       cls    labels  img_size\n"
            f"   {i:>3d}/{N - 1}     3.12G   {L[i]:.4f}   {L[i] * 0.3:.4f}   0.0437       123"
            "       640: 100%|██████████| 50/50 [00:10<00:00,  5.00it/s]\n" for i in r),
            _every(1)),
        "tf_cifar10.log": ("".join(
            f"2016-01-01 10:00:00.000000: step {i * 10}, loss = {L[i]:.2f} (500.0 examples/sec;"
            " 0.256 sec/batch)\n" for i in r), _every(10)),
        "caffe.log": ("".join(
            f"I0101 10:00:00.000000 12345 solver.cpp:228] Iteration {i * 100}, loss = {L[i]:.4f}"
            "\nI0101 10:00:00.000000 12345 solver.cpp:244]     Train net output #0: loss = "
            f"{L[i]:.4f} (* 1 = {L[i]:.4f} loss)\nI0101 10:00:00.000000 12345 sgd_solver.cpp:106]"
            f" Iteration {i * 100}, lr = 0.01\n" for i in r), _every(100)),
        "darknet.log": ("".join(
            f" {i + 1}: {L[i] * 10:.6f}, {L[i] * 10:.6f} avg loss, 0.001000 rate, 4.512345 "
            f"seconds, {64 * (i + 1)} images, 100.5 hours left\nLoaded: 0.000040 seconds\n"
            for i in r), lambda i: i + 1),
        "udacity.log": ("".join(
            f"Epoch: {i // 10 + 1}/30... Step: {(i + 1) * 10}... Loss: {L[i]:.4f}... Val Loss: "
            f"{L[i] * 1.02:.4f}\n" for i in r), _every(10)),
        "tf_nmt.log": ("".join(f"Epoch {i // 10 + 1} Batch {(i % 10) * 100} Loss {L[i]:.4f} "
                               "Accuracy 0.1234\n" for i in r), _epochs(10, 100, 1000, 0)),
        "pytorch_gan.log": ("".join(
            f"[Epoch {i // 10}/30] [Batch {(i % 10) * 100}/938] [D loss: 0.500000] [G loss: "
            f"{L[i]:.6f}]\n" for i in r), _epochs(10, 100, 938, 0)),
        "superres.log": ("".join(f"===> Epoch[{i // 10 + 1}]({i % 10 + 1}/10): Loss: {L[i]:.4f}\n"
                                 for i in r), _every(1)),
        "bentrevett.log": ("".join(
            f"Epoch: {i + 1:02} | Time: 0m 12s\n\tTrain Loss: {L[i]:.3f} | Train PPL: "
            f"{ppl[i]:7.3f}\n\t Val. Loss: {L[i] * 1.02:.3f} |  Val. PPL: {ppl[i]:7.3f}\n"
            for i in r), _every(1)),
        "epoch_block.log": ("".join(f"Epoch {i + 1}\n  train loss: {L[i]:.4f}\n  val loss: "
                                    f"{L[i] * 1.02:.4f}\n" for i in r), _every(1)),
        "d2_text.log": ("".join(
            f"[01/01 10:00:00 d2.utils.events]:  eta: 0:10:00  iter: {i * 20 + 19}  total_loss: "
            f"{L[i]:.3f}  loss_cls: 0.5  loss_box_reg: 0.3  time: 0.5012  data_time: 0.0100  lr:"
            " 0.001  max_mem: 3000M\n" for i in r), _every(20)),
        "kohya.log": ("".join(
            f"steps: {i * 100 // N:3d}%|█  | {i + 1}/{N} [01:00<09:00,  1.66it/s, avr_loss="
            f"{L[i]:.4f}]\r" for i in r) + "\n", lambda i: i + 1),
        "flax.log": ("".join(
            f"I0101 10:00:00.000000 140000 train.py:400] train epoch: {i + 1}, loss: {L[i]:.4f}, "
            "accuracy: 50.00\n" for i in r), _every(1)),
        "keras_cr.log": ("".join(
            f"Epoch {i + 1}/{N}\n" + "".join(
                f"\r {k:3d}/100 [====>....] - ETA: 1s - loss: {L[i] * 1.01:.4f}" for k in (10, 50))
            + f"\r100/100 [==============================] - 1s 5ms/step - loss: {L[i]:.4f}\n"
            for i in r), _every(1)),
        "espnet.log": ("".join(
            f"[host] 2023-01-01 10:00:00,000 (trainer:732) INFO: {i // 10 + 1}epoch:train:"
            f"{(i % 10) * 100 + 1}-{(i % 10 + 1) * 100}batch: iter_time=1.234e-04, forward_time="
            f"0.123, loss_ctc={L[i] * 2:.3f}, loss_att={L[i]:.3f}, acc=0.123, loss="
            f"{L[i] * 1.3:.3f}, optim0_lr0=1.000e-05, train_time=0.500\n" for i in r),
            _epochs(10, 100, 1000, 100)),
        "speechbrain.log": ("".join(
            f"epoch: {i + 1}, lr: 1.00e+00 - train loss: {L[i]:.2f} - valid loss: "
            f"{L[i] * 1.02:.2f}, valid error: 5.00e-01\n" for i in r), lambda i: i + 1),
        "yolox.log": ("".join(
            f"2021-07-21 10:00:00 | INFO     | yolox.core.trainer:237 - epoch: {i // 10 + 1}/300"
            f", iter: {(i % 10 + 1) * 10}/100, mem: 5000Mb, iter_time: 0.500s, data_time: "
            f"0.010s, total_loss: {L[i] * 3:.1f}, iou_loss: 4.5, conf_loss: 8.1, cls_loss: 2.7,"
            " lr: 1.000e-04, size: 640, ETA: 1 day, 10:00:00\n" for i in r),
            _epochs(10, 10, 100, 10)),
        "ppdet.log": ("".join(
            f"[01/01 10:00:00] ppdet.engine INFO: Epoch: [{i // 10}] [{(i % 10) * 50:3d}/500] "
            f"learning_rate: 0.000010 loss_vfl: 1.000000 loss: {L[i] * 4:.6f} eta: 1 day, "
            "10:00:00 batch_cost: 0.5000 data_cost: 0.0100 ips: 10.0000 images/s\n"
            for i in r), _epochs(10, 50, 500, 0)),
        "open_clip.log": ("".join(
            f"2023-01-01,10:00:00 | INFO | Train Epoch: {i // 10} [{(i % 10) * 1024:8d}/10240 "
            f"({(i % 10) * 10}%)] Data (t): 0.010 Batch (t): 1.200, 800.000/s, 100.000/s/gpu LR:"
            f" 0.000001 Logit Scale: 14.286 Contrastive_loss: {L[i]:.4f} ({L[i]:.4f}) Loss: "
            f"{L[i]:.4f} ({L[i]:.4f})\n" for i in r), _epochs(10, 1024, 10240, 0)),
        "nnunet.log": ("".join(
            f"2023-01-01 10:00:00.000000: \n2023-01-01 10:00:00.000000: Epoch {i}\n"
            "2023-01-01 10:00:00.000000: Current learning rate: 0.00995\n"
            f"2023-01-01 10:00:00.000000: train_loss {-(1.0 - L[i] / 8):.4f}\n"
            f"2023-01-01 10:00:00.000000: val_loss {-(0.98 - L[i] / 8):.4f}\n"
            "2023-01-01 10:00:00.000000: Pseudo dice [0.8, 0.9]\n"
            "2023-01-01 10:00:00.000000: Epoch time: 100.5 s\n" for i in r), _every(1)),
        "basicsr.log": ("".join(
            f"2023-01-01 10:00:00,000 INFO: [train..][epoch:{i // 50:3d}, iter:{(i + 1) * 100:8,d}"
            f", lr:(1.000e-04,)] [eta: 1 day, 0:00:00, time (data): 0.500 (0.010)] l_pix: "
            f"{L[i] / 100:.4e} l_percep: {L[i]:.4e} l_g_gan: 1.0000e-01 l_d_real: 5.0000e-01 "
            "l_d_fake: 5.0000e-01\n" for i in r), lambda i: (i + 1) * 100),
        "monai.log": ("".join(
            f"{i % 10 + 1}/10, train_loss: {L[i]:.4f}, step time: 0.1234\n" + (
                f"epoch {i // 10 + 1} average loss: {L[i]:.4f}\n" if i % 10 == 9 else "")
            for i in r), lambda i: i + 1),
        "yolact.log": ("".join(
            f"[{i // 100:3d}] {(i + 1) * 10:7d} || B: {0.3 * L[i]:.3f} | C: {0.2 * L[i]:.3f} | "
            f"M: {0.4 * L[i]:.3f} | S: {0.1 * L[i]:.3f} | T: {L[i]:.3f} || ETA: 1 day, "
            f"17:55:18 || timer: 0.512\n" for i in r), lambda i: (i + 1) * 10),
        # build-nanogpt's log.txt: one metric per line, "<step> <name> <value>"
        "log.txt": ("".join(
            (f"{i} val {L[i] * 1.05:.4f}\n{i} hella 0.2500\n" if i % 50 == 0 else "") +
            f"{i} train {L[i]:.6f}\n" for i in r), _every(1)),
        # TF Model Garden's Orbit controller (absl prefix): the step before a printed dict
        "orbit.log": ("".join(
            f"I1130 09:00:00.019729 140213 controller.py:457] train | step: {(i + 1) * 10:6d} "
            f"| steps/sec: 524.2 | output: {{'learning_rate': 0.003, 'training_loss': "
            f"{L[i]!r}}}\n" for i in r), lambda i: (i + 1) * 10),
    }
    return w


FILES = sorted(_writers(_losses(False)))


def _diagnose(tmp_path: Path, name: str, diverge: bool):
    text, step_of = _writers(_losses(diverge))[name]
    p = tmp_path / name
    p.write_text(text)
    return diagnose(load_run(str(p))), step_of


@pytest.mark.parametrize("name", FILES)
def test_divergence_is_found_in_every_console(tmp_path, name):
    dx, step_of = _diagnose(tmp_path, name, diverge=True)
    loud = [f for f in dx.findings if f.level >= 1]
    assert [f.symptom for f in loud] == ["divergence"], [f.summary for f in loud]
    # within the scoring tolerance: 10% of the run (30 rows), in the log's own step units
    assert abs(loud[0].onset_step - step_of(ONSET)) <= step_of(ONSET + 30) - step_of(ONSET)


@pytest.mark.parametrize("name", FILES)
def test_the_healthy_run_is_quiet_in_every_console(tmp_path, name):
    dx, _ = _diagnose(tmp_path, name, diverge=False)
    assert [f.summary for f in dx.findings if f.level >= 1] == []


def test_hf_eval_rows_under_a_short_eval_bar_keep_the_training_step(tmp_path) -> None:
    # the eval loop's own bar (13/13) is drawn between training bars: the eval dict belongs
    # to the training step the last training bar showed, not to position 13
    lines = []
    for i in range(1, 101):
        lines.append(f"{i}%|#| {i}/100 [00:01<00:09, 9.9it/s]\r")
        if i % 10 == 0:
            lines.append(f"{{'loss': {2.0 - i / 100:.3f}, 'learning_rate': 5e-05, "
                         f"'epoch': {i / 100:.2f}}}\n")
        if i % 50 == 0:
            lines.extend(f"{k * 100 // 13}%|#| {k}/13 [00:01<00:00, 12.0it/s]\r"
                         for k in range(1, 14))
            lines.append(f"{{'eval_loss': {1.5 - i / 200:.3f}, 'epoch': {i / 100:.2f}}}\n")
    p = tmp_path / "trainer.log"
    p.write_text("".join(lines))
    run = load_run(str(p))
    assert run.get("loss").steps.tolist() == list(range(10, 101, 10))
    assert run.get("val_loss").steps.tolist() == [50, 100]


def test_the_mnist_examples_test_set_lines_are_its_evaluations(tmp_path) -> None:
    # "Test set: Average loss: ..." after each epoch's "Train Epoch" lines has no step of its
    # own: it is that epoch's evaluation (the test set evaluated each epoch is a validation)
    lines = []
    for e in range(1, 31):
        lines += [f"Train Epoch: {e} [{k * 640}/60000 ({k * 640 // 600}%)]\tLoss: "
                  f"{2.0 * 0.9 ** e - 0.001 * k:.6f}\n" for k in range(10)]
        lines.append(f"\nTest set: Average loss: {1.0 + 0.02 * abs(e - 12):.4f}, Accuracy: "
                     "9800/10000 (98%)\n\n")
    p = tmp_path / "mnist.log"
    p.write_text("".join(lines))
    run = load_run(str(p))
    val = run.get("val_loss")
    assert val is not None and len(val) == 30
    assert val.steps.tolist() == [(e - 1) * 60000 + 9 * 640 for e in range(1, 31)]
    loud = [f for f in diagnose(run).findings if f.level >= 1]
    assert [f.symptom for f in loud] == ["overfitting"]
    assert loud[0].onset_step == 11 * 60000 + 9 * 640
