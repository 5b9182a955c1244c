"""Property tests: one synthetic run written in many console layouts (logger prefixes, step
words, loss words, separators, extra fields, number formats, evaluation lines, tables) reads
back its loss and validation loss exactly - steps and values. The layouts are drawn from
seeded generators, so a failure names its seed; the regressions found that way are pinned
below them."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from trainmedic.run import load_run

PREFIX = ["", "2024-03-01 12:00:{s:02d},123 - INFO - ", "[2024-03-01 12:00:{s:02d}] ",
          "I0301 12:00:{s:02d}.123456 1234 train.py:88] ", "[rank0]: ", "INFO:root:",
          "[2024-03-01 12:00:{s:02d},123][train][INFO] - ",
          "2024-03-01 12:00:{s:02d},123 - mmengine - INFO - ",
          "2024-03-01 12:00:{s:02d}.123 | INFO     | __main__:train_step:148 - "]  # loguru
STEP = ["step {i}", "Step: {i}", "iter {i}", "Iteration {i}/{N}", "[{i}/{N}]", "it={i}",
        "global_step={i}", "step={i}", "Step [{i}/{N}]", "iteration: {i}", "Iter: {i:>6d}",
        "| step {i:06d}", "Train step {i}"]
LOSS = ["loss {v}", "loss: {v}", "loss={v}", "Loss = {v}", "train_loss: {v}", "'loss': {v}",
        "loss {v} ({a})", "loss: {v} (avg: {a})", "train/loss={v}", "total_loss: {v}"]
SEP = [", ", " | ", "\t", "  ", " - ", " ", "; "]
EXTRA = [["lr: {lr:.3e}", "lr {lr:.6f}", "learning_rate={lr:.2e}", "LR: {lr:.3e}"],
         ["grad_norm: {g:.3f}", "gnorm {g:.3f}", "grad norm {g:.4f}"],
         ["time: {t:.3f}s", "{tm:.1f}ms/it", "step_time={t:.3f}", "iter time: {tm:.1f} ms",
          "{ips:.2f} it/s", "{ips:.2f}it/s"],
         ["eta 0:01:{s:02d}", "mem 1234MB", "max mem: 2345", "tokens/s 123456"]]
EVAL = ["Evaluating at step {i}: val_loss {w}", "[eval] step {i} | loss {w}",
        "step {i} val_loss: {w}", "Validation | step {i} | loss: {w}",
        "eval step={i} eval_loss={w}", "Iter {i} - validation loss: {w}",
        "step {i}: val loss {w}", "{{'eval_loss': {w}, 'step': {i}}}"]
NOISE = ["Saving checkpoint to ckpt/step_{i}.pt", "  warnings.warn(", "", "-" * 60,
         " 45%|████▌     | 450/1000 [00:12<00:15, 36.1it/s]", "Model saved."]
EPOCH = ["Epoch {e}/{E}", "epoch {e}", "Epoch: {e}", "[Epoch {e}]", "Epoch {e:03d}:", "epoch={e}",
         "Epoch [{e}/{E}]", "EPOCH {e}", "| epoch {e:3d}"]
TRAIN = ["loss: {v}", "train loss {v}", "Train Loss: {v}", "train_loss={v}", "loss {v}",
         "Training Loss: {v}", "train/loss: {v}", "avg loss: {v}"]
VAL = ["val_loss: {w}", "val loss {w}", "Val Loss: {w}", "val_loss={w}", "valid loss {w}",
       "Validation Loss: {w}", "eval_loss: {w}", "val/loss: {w}", "test loss: {w}"]
FMT = ["{:.4f}", "{:.6f}", "{:.4e}", "{:.5g}", "{:.3f}"]


def _fmt(rng: random.Random):
    f = rng.choice(FMT)
    return lambda v: f.format(v)


def step_log(rng: random.Random) -> tuple[str, list[int], list[float], list[int], list[float]]:
    pre, st, lo, sep = (rng.choice(x) for x in (PREFIX, STEP, LOSS, SEP))
    ev = rng.choice(EVAL) if rng.random() < 0.5 else None
    fmt = _fmt(rng)
    extras = [rng.choice(opts) for opts in EXTRA if rng.random() < 0.5]
    noisy = rng.random() < 0.5
    every, n = 5, 60
    steps = [every * (k + 1) for k in range(n)]
    loss = [2.5 * math.exp(-k / 25) + 0.3 + 0.05 * rng.random() for k in range(n)]
    lines: list[str] = []
    vsteps: list[int] = []
    val: list[float] = []
    avg = loss[0]
    for j, (i, v) in enumerate(zip(steps, loss, strict=True)):
        avg = 0.9 * avg + 0.1 * v
        t = 0.2 + 0.01 * (j % 3)
        parts = [st.format(i=i, N=steps[-1]), lo.format(v=fmt(v), a=fmt(avg))]
        parts += [e.format(lr=1e-3 * (1 - i / 400), g=1 + 0.1 * (j % 7), t=t, tm=1000 * t,
                           ips=1 / t, s=j % 60) for e in extras]
        lines.append(pre.format(s=j % 60) + sep.join(parts))
        if noisy and j % 7 == 3:
            lines.append(rng.choice(NOISE).format(i=i))
        if ev and i % 50 == 0:
            w = float(fmt(2.6 * math.exp(-j / 25) + 0.4))
            lines.append(pre.format(s=j % 60) + ev.format(i=i, w=fmt(w)))
            vsteps.append(i)
            val.append(w)
    return "\n".join(lines) + "\n", steps, [float(fmt(v)) for v in loss], vsteps, val


def epoch_log(rng: random.Random) -> tuple[str, list[int], list[float], list[int], list[float]]:
    pre, ep, tr, va, sep = (rng.choice(x) for x in (PREFIX, EPOCH, TRAIN, VAL, SEP))
    fmt = _fmt(rng)
    n_epochs = rng.choice([8, 12, 20])
    loss = [float(fmt(2.0 * math.exp(-e / 6) + 0.2 + 0.01 * rng.random())) for e in range(n_epochs)]
    val = [float(fmt(2.1 * math.exp(-e / 6) + 0.3 + 0.01 * rng.random())) for e in range(n_epochs)]
    lines = [pre.format(s=e % 60) + sep.join([ep.format(e=e, E=n_epochs), tr.format(v=fmt(v)),
                                              va.format(w=fmt(w))])
             for e, v, w in zip(range(1, n_epochs + 1), loss, val, strict=True)]
    epochs = list(range(1, n_epochs + 1))
    return "\n".join(lines) + "\n", epochs, loss, epochs, val


def table_log(rng: random.Random) -> tuple[str, list[int], list[float], list[int], list[float]]:
    head = rng.choice([("epoch", "train_loss", "val_loss"), ("Epoch", "Train Loss", "Val Loss"),
                       ("epoch", "loss", "val_loss")])
    fmt = _fmt(rng)
    style = rng.choice(["spaces", "pipes", "markdown", "grid"])
    loss = [float(fmt(2.0 * math.exp(-e / 6) + 0.2)) for e in range(12)]
    val = [float(fmt(2.1 * math.exp(-e / 6) + 0.3)) for e in range(12)]
    rows = [head] + [(str(e), fmt(v), fmt(w)) for e, v, w in
                     zip(range(1, 13), loss, val, strict=True)]
    width = max(len(c) for r in rows for c in r) + 2
    if style == "spaces":
        lines = ["".join(c.ljust(width) for c in r) for r in rows]
    elif style == "pipes":
        lines = [" | ".join(c.ljust(width) for c in r) for r in rows]
    elif style == "markdown":
        lines = ["| " + " | ".join(r) + " |" for r in rows]
        lines.insert(1, "|" + "|".join("---" for _ in head) + "|")
    else:
        rule = "+" + "+".join("-" * (width + 2) for _ in head) + "+"
        lines = [rule] + sum([["| " + " | ".join(c.ljust(width) for c in r) + " |", rule]
                              for r in rows], [])
    return "\n".join(lines) + "\n", list(range(1, 13)), loss, list(range(1, 13)), val


@pytest.mark.parametrize("make", [step_log, epoch_log, table_log])
def test_generated_layouts_read_back_exactly(tmp_path: Path, make) -> None:
    failures = []
    for seed in range(80):
        text, steps, loss, vsteps, val = make(random.Random(seed))
        p = tmp_path / f"{seed}.log"
        p.write_text(text)
        run = load_run(str(p))
        got = run.get("loss")
        why = None
        if got is None:
            why = f"no loss among {run.metrics()}"
        elif got.steps.tolist() != steps or not np.allclose(got.values, loss, rtol=1e-6):
            why = f"loss read as {got.steps.tolist()[:3]} {got.values.tolist()[:3]}"
        elif vsteps:
            gv = run.get("val_loss")
            if gv is None or gv.steps.tolist() != vsteps or not np.allclose(gv.values, val):
                why = f"val_loss read as {None if gv is None else gv.steps.tolist()[:3]}"
        if why:
            failures.append(f"seed {seed}: {why}: {text.splitlines()[0][:120]!r}")
    assert not failures, "\n".join(failures)


def test_a_rate_unit_followed_by_its_own_number_is_a_name(tmp_path: Path) -> None:
    # "loss: 2.8 tokens/s 123456": the loss has no unit; tokens/s names the next number
    p = tmp_path / "t.log"
    p.write_text("".join(f"Step [{5 * k}/300] loss: {3 - k / 10:.4f} tokens/s 123456\n"
                         for k in range(1, 11)))
    run = load_run(str(p))
    assert run.get("loss").values[0] == pytest.approx(2.9)
    assert run.get("tokens_per_s").values[0] == 123456


def test_a_bare_position_counter_is_the_step_only_when_it_never_goes_back(tmp_path: Path) -> None:
    p = tmp_path / "t.log"
    p.write_text("".join(f"[rank0]: [{5 * k}/300] loss: {3 - k / 10:.4f}\n"
                         for k in range(1, 11)))
    assert load_run(str(p)).get("loss").steps.tolist() == [5 * k for k in range(1, 11)]
    # a position inside each epoch restarts: it is no step, the rows keep their order
    p.write_text("".join(f"[{5 * (k % 5 + 1)}/25] loss: {3 - k / 10:.4f}\n"
                         for k in range(1, 11)))
    assert load_run(str(p)).get("loss").steps.tolist() == list(range(10))


def test_a_validation_line_after_a_logger_prefix_is_the_validation_side(tmp_path: Path) -> None:
    p = tmp_path / "t.log"
    lines = []
    for k in range(1, 21):
        head = "2024-03-01 12:00:01,123 - __main__ - INFO - "
        lines.append(f"{head}step {5 * k} loss {3 - k / 10:.3f}")
        if k % 5 == 0:
            lines.append(f"{head}Validation | step {5 * k} | loss: {2.5 - k / 20:.3f}")
    p.write_text("\n".join(lines) + "\n")
    run = load_run(str(p))
    assert len(run.get("loss")) == 20
    assert run.get("val_loss").steps.tolist() == [25, 50, 75, 100]


BAR_HEAD = ["Epoch {e}: ", "Epoch {e}/{E}: ", "train epoch {e}: ", "[Epoch {e}] ",
            "epoch {e} train: ", "Train Epoch {e}: "]
BAR_POST = ["loss={v}", "loss={v}, v_num=0", "loss: {v}", "train_loss={v}", "loss={v}, acc=0.9"]


@pytest.mark.parametrize("seed", range(40))
def test_progress_bars_drawn_several_times_per_epoch_give_increasing_steps(tmp_path, seed):
    # a tqdm bar under a script's own epoch description, redrawn within each epoch (one line
    # per draw, or the draws joined by carriage returns): one global position per draw
    rng = random.Random(seed)
    head, post = rng.choice(BAR_HEAD), rng.choice(BAR_POST)
    n_epochs, per_epoch, draws = rng.choice([3, 5]), rng.choice([20, 100]), rng.choice([2, 4])
    lines, finals = [], []
    for e in range(1, n_epochs + 1):
        parts = []
        for d in range(1, draws + 1):
            i = per_epoch * d // draws
            v = round(2.0 * math.exp(-(e - 1 + d / draws) / 2) + 0.2, 4)
            parts.append(head.format(e=e, E=n_epochs) + f"{100 * i // per_epoch:3d}%|"
                         f"{'#' * (10 * i // per_epoch):<10}| {i}/{per_epoch} [00:05<00:05, "
                         f"3.30it/s, {post.format(v=v)}]")
        finals.append(v)
        lines += ["\r".join(parts)] if seed % 2 else parts
    p = tmp_path / "bar.log"
    p.write_text("\n".join(lines) + "\n")
    loss = load_run(str(p)).get("loss")
    assert loss is not None and bool(np.all(np.diff(loss.steps) > 0)), loss
    assert set(finals) <= set(loss.values.tolist())


def test_printed_trainer_dicts_holding_numpy_scalars(tmp_path: Path) -> None:
    # NumPy 2 prints a scalar as np.float64(0.52): the HF Trainer's printed log dict holding
    # one was no dict to literal_eval, and the loss was the run summary's train_loss alone
    lines = []
    for k in range(1, 21):
        lines.append(f"{{'loss': np.float64({2.5 - k / 10:.4f}), 'grad_norm': np.float32(1.25), "
                     f"'learning_rate': 4.9e-05, 'epoch': {k / 100}}}")
    lines.append("{'train_runtime': 123.4, 'train_loss': 1.1, 'epoch': 0.2}")
    p = tmp_path / "trainer.log"
    p.write_text("\n".join(lines) + "\n")
    run = load_run(str(p))
    assert len(run.get("loss")) == 20 and run.get("grad_norm").values[0] == 1.25


def test_keras_3_bars_drawn_partway_through_an_epoch_are_not_epochs(tmp_path: Path) -> None:
    # Keras 3 prints no "ETA:" word on its partial draws: "234/938 ━━━━━━ 2s - loss: ..."
    lines = []
    for e in range(1, 6):
        lines.append(f"Epoch {e}/5")
        lines.append(f"\x1b[1m234/938\x1b[0m \x1b[32m━━━━━\x1b[0m\x1b[37m━━━━━━━━━━━━━━━\x1b[0m "
                     f"\x1b[1m2s\x1b[0m - loss: {3.0 - e / 10:.4f}")
        lines.append(f"\x1b[1m938/938\x1b[0m \x1b[32m━━━━━━━━━━━━━━━━━━━━\x1b[0m\x1b[37m\x1b[0m "
                     f"\x1b[1m3s\x1b[0m 3ms/step - loss: {2.0 - e / 10:.4f} - val_loss: 2.1000")
    p = tmp_path / "keras.log"
    p.write_text("\n".join(lines) + "\n")
    loss = load_run(str(p)).get("loss")
    assert loss.values.tolist() == pytest.approx([1.9, 1.8, 1.7, 1.6, 1.5])


def test_mingpt_iteration_time(tmp_path: Path) -> None:
    # minGPT's trainer callback: "iter_dt 4.35ms; iter 150: train loss 0.57230"
    p = tmp_path / "log.txt"
    p.write_text("".join(f"iter_dt {4 + k % 3:.2f}ms; iter {k}: train loss {2 - k / 100:.5f}\n"
                         for k in range(100, 130)))
    run = load_run(str(p))
    assert run.get("step_time_s").values[:2].tolist() == pytest.approx([0.005, 0.006])
    assert run.get("loss").steps[0] == 100


@pytest.mark.parametrize(("train", "val"), [
    ("epoch {e} | train | loss={v}", "epoch {e} | valid | loss={w}"),
    ("[Epoch {e}] Train | loss {v}", "[Epoch {e}] Valid | loss {w}"),
    ("Epoch: {e}, Train Loss: {v}", "Test Epoch: {e} Loss: {w}"),
    ("Train Epoch: {e} Loss: {v}", "Validation Epoch: {e} Loss: {w}"),
])
def test_a_side_word_standing_alone_marks_the_line(tmp_path: Path, train: str, val: str) -> None:
    # one line per side and epoch; the side is a field of its own (or the line's first word)
    lines = []
    for e in range(1, 13):
        lines.append(f"2024-03-01 12:00:01,123 - INFO - {train.format(e=e, v=2 - e / 10)}")
        lines.append(f"2024-03-01 12:00:01,123 - INFO - {val.format(e=e, w=2.5 - e / 20)}")
    p = tmp_path / "train.log"
    p.write_text("\n".join(lines) + "\n")
    run = load_run(str(p))
    assert run.get("loss").values.tolist() == pytest.approx([2 - e / 10 for e in range(1, 13)])
    assert run.get("val_loss").values.tolist() == pytest.approx([2.5 - e / 20
                                                                 for e in range(1, 13)])
