"""End to end over console and export habits trainmedic was not built on: the same run (a
loss that falls, then diverges from step 200 of 300; or stays healthy) written the way
Megatron-LM, DeepSpeed, OpenNMT, timm, mmengine, Keras, HF, torchtune, nanoGPT, the PyTorch
examples, tqdm bars, TensorBoard's CSV export, W&B's chart export, Sacred and plain CSVs
write it, with colours, progress-bar backspaces, UTF-16 and decimal commas. Each must be read
and get the divergence (and the healthy run nothing loud)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from trainmedic.diagnose import diagnose
from trainmedic.run import load_run

N = 300
ONSET = 200


def _losses(diverge: bool) -> list[float]:
    rng = random.Random(0)
    out = []
    for i in range(N):
        v = 6.0 * math.exp(-i / 60) + 1.5 + rng.gauss(0, 0.03)
        if diverge and i >= ONSET:
            v *= math.exp((i - ONSET) / 25)
        out.append(v)
    return out


def _writers(L: list[float]) -> dict[str, tuple[str, int]]:
    """{file name: (content, steps per row)}."""
    r = range(N)
    return {
        "megatron.log": ("".join(
            f" [2024-01-01 10:00:00] iteration {i + 1:8d}/   10000 | consumed samples: "
            f"{512 * (i + 1):12d} | elapsed time per iteration (ms): 1200.0 | learning rate: "
            f"1.500E-04 | global batch size:   512 | lm loss: {L[i]:.6E} | loss scale: 1.0 | "
            f"grad norm: 1.234 |\n" for i in r), 1),
        "deepspeed.log": ("".join(
            f"[2024-01-01 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step={i + 1}, "
            f"skipped=0, lr=[0.0001]\nsteps: {i + 1} loss: {L[i]:.4f} iter time (s): 0.512\n"
            for i in r), 1),
        "opennmt.log": ("".join(
            f"[2023-01-01 12:00:00,000 INFO] Step {(i + 1) * 50}/100000; acc: 12.34; ppl: 9.9; "
            f"xent: {L[i]:.2f}; lr: 0.00050; 1234/5678 tok/s;     30 sec;\n" for i in r), 50),
        "timm.log": ("".join(
            f"Train: {i // 100} [{(i % 100) * 10:4d}/1000 ({i % 100:3d}%)]  Loss: {L[i]:.4f} "
            f"({L[i]:.4f})  Time: 0.345s,  742.12/s  LR: 1.000e-03  Data: 0.012 (0.015)\n"
            for i in r), 10),
        "mmengine.log": ("".join(
            f"2023/05/01 12:00:00 - mmengine - INFO - Epoch(train)  [{i // 100 + 1}]"
            f"[{(i % 100 + 1) * 10:4d}/1000]  lr: 1.0000e-02  eta: 1:00:00  time: 0.5000  "
            f"data_time: 0.0100  memory: 3000  loss: {L[i]:.4f}\n" for i in r), 10),
        "keras_stdout.log": ("".join(
            f"Epoch {i + 1}/{N}\n1875/1875 [==============================] - 5s 2ms/step - "
            f"loss: {L[i]:.4f} - accuracy: 0.9145\n" for i in r), 1),
        "hf_stdout.log": ("".join(
            f"{{'loss': {L[i]:.4f}, 'grad_norm': 1.23, 'learning_rate': 4.9e-05, "
            f"'epoch': {i / 100:.2f}}}\n" for i in r), 1),
        "torchtune.log": ("".join(
            f"Step {i + 1} | loss:{L[i]:.6f} lr:2e-05 tokens_per_second_per_gpu:1234.5\n"
            for i in r), 1),
        "nanogpt.log": ("".join(f"iter {i}: loss {L[i]:.4f}, time 45.67ms, mfu 12.30%\n"
                                for i in r), 1),
        "epoch_batch.log": ("".join(f"Epoch {i // 100 + 1}, Batch {i % 100 + 1}, "
                                    f"Loss: {L[i]:.4f}\n" for i in r), 1),
        "imagenet.log": ("".join(
            f"Epoch: [{i // 50}][{(i % 50) * 10:4d}/ 500]\tTime  0.345 ( 0.567)\tData  0.012 "
            f"( 0.123)\tLoss {L[i]:.4e} ({L[i]:.4e})\tAcc@1   0.00 (  0.12)\n" for i in r), 10),
        "cifar.log": ("".join(f"[{i // 12 + 1}, {(i % 12 + 1) * 2000:5d}] loss: {L[i]:.3f}\n"
                              for i in r), 2000),
        "tqdm.log": ("".join(f"Epoch {i // 40}: {i % 40 * 100 // 40}%|###  | {i % 40}/40 "
                             f"[00:01<00:02, 20.0it/s, loss={L[i]:.3f}]\r" for i in r) + "\n",
                     1),
        "estimator.log": ("".join(f"INFO:tensorflow:loss = {L[i]:.5f}, step = {i * 100} "
                                  f"(10.5 sec)\n" for i in r), 100),
        "run-.-tag-train_loss.csv": ("Wall time,Step,Value\n" + "".join(
            f"{1.7e9 + i},{i},{L[i]}\n" for i in r), 1),
        "wandb_export.csv": ('"Step","rosy-sun-12 - train/loss","rosy-sun-12 - train/loss__MIN"\n'
                             + "".join(f'"{i}","{L[i]}","{L[i] * 0.99}"\n' for i in r), 1),
        "metrics.json": (json.dumps({"train.loss": {"steps": list(r), "values": L}}), 1),
        "excel.csv": ("Iteration,Training Loss,Learning Rate\n" + "".join(
            f"{i},{L[i]},1e-3\n" for i in r), 1),
        "excel_de.csv": ("Schritt;loss\n" + "".join(
            f"{i};{L[i]:.6f}\n".replace(".", ",") for i in r), 1),
        "rich_colours.log": ("".join(f"\x1b[32mEpoch {i // 10}\x1b[0m step {i} \x1b[1mloss"
                                     f"\x1b[0m={L[i]:.4f} lr=0.001\n" for i in r), 1),
        "keras_bars.log": ("".join(
            f"Epoch {i + 1}/{N}\n" + "".join(
                f"\r{k:3d}/100 [====] - ETA: 0s - loss: {L[i] * 1.01:.4f}" + "\b" * 40
                for k in (1, 50)) + f"\r100/100 [==============================] - 1s "
            f"5ms/step - loss: {L[i]:.4f}\n" for i in r), 1),
    }


FILES = sorted(_writers(_losses(False)))


def _diagnose(tmp_path: Path, name: str, diverge: bool):
    text, per_row = _writers(_losses(diverge))[name]
    p = tmp_path / name
    p.write_text(text)
    if name == "nanogpt.log":  # and once more as PowerShell's redirect writes it: UTF-16
        p.write_text(text, encoding="utf-16")
    return diagnose(load_run(str(p))), per_row


@pytest.mark.parametrize("name", FILES)
def test_divergence_is_found_in_every_format(tmp_path, name):
    dx, per_row = _diagnose(tmp_path, name, diverge=True)
    loud = [f for f in dx.findings if f.level >= 1]
    assert [f.symptom for f in loud] == ["divergence"], [f.summary for f in loud]
    # within the scoring tolerance: 10% of the run (30 rows), in the log's own step units
    assert abs(loud[0].onset_step - ONSET * per_row) <= 30 * per_row


@pytest.mark.parametrize("name", FILES)
def test_the_healthy_run_is_quiet_in_every_format(tmp_path, name):
    dx, _ = _diagnose(tmp_path, name, diverge=False)
    assert [f.summary for f in dx.findings if f.level >= 1] == []


def test_a_healthy_fp16_megatron_run_with_overflow_skips_is_quiet(tmp_path) -> None:
    # dynamic loss scaling: an overflow now and then (grad norm nan, the iteration skipped,
    # the scale halved), the scale doubled back every 500 iterations; the loss falls fast in
    # warm-up, and by chance the skips bunch up late (which alone reads as "more and more often")
    rng = random.Random(11)
    scale, lines = 2.0 ** 16, []
    for i in range(2000):
        loss = 7.5 * math.exp(-i / 300) + 2.8 + rng.gauss(0, 0.06)
        skipped = i in (12, 935, 1762, 1823, 1978, 1984)  # 4 of 6 in the last quarter
        if skipped:
            scale /= 2
        elif i % 500 == 499:
            scale *= 2
        gn = "nan" if skipped else f"{1.0 + rng.random() * 0.3:.3f}"
        lines.append(f" [2024-01-01 10:00:00] iteration {i + 1:8d}/    2000 | lm loss: "
                     f"{loss:.6E} | loss scale: {scale:.1f} | grad norm: {gn} | number of "
                     f"skipped iterations: {int(skipped):3d} |\n")
    p = tmp_path / "megatron_fp16.log"
    p.write_text("".join(lines))
    dx = diagnose(load_run(str(p)))
    assert [f.summary for f in dx.findings if f.level >= 1] == []
