"""Two small synthetic logs that probe specific claims about the log linters (issue 2, "Why").

They are labelled as synthetic wherever they are printed; the real-log study uses the public
logs in dev-logs. Each probe reproduces one situation exactly as the software that writes such
logs produces it:

- ``nan_after_flat_lr.csv``: LR warms up over 200 steps, then stays flat at its peak for 400
  steps, then the loss goes NaN at step 601. Tests whether a tool says the LR "was still
  rising" when the data shows it had been flat for 400 steps.
- ``hf_nan_filter/trainer_state.json``: an HF Trainer run (logging every 10 steps, eval every
  200) whose loss goes NaN at step 637 and stays NaN. With ``logging_nan_inf_filter=True``
  (the default) the Trainer adds ``tr_loss / (1 + global_step - last_logged)`` for a NaN
  step instead of the NaN (transformers, ``Trainer._inner_training_loop``), so the interval
  holding step 637 logs a slightly low finite loss and every later interval logs
  ``"loss": 0.0``; ``grad_norm`` is the last step's (NaN once the weights are NaN) and
  ``eval_loss`` is NaN. Python's json writes NaN as a bare ``NaN`` token, as HF's
  ``TrainerState.save_to_json`` does.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path


@dataclass(kw_only=True, frozen=True)
class Probe:
    """One generated probe log and its truth."""

    name: str
    """Short name for tables."""
    path: Path
    """The log file."""
    truth: str
    """What the data shows, in words."""
    nan_onset_step: int
    """First step whose true loss is NaN."""
    first_visible_step: int
    """First logged step where the fault is visible in the file."""


def nan_after_flat_lr(out_dir: Path) -> Probe:
    path = out_dir / "nan_after_flat_lr.csv"
    rng = random.Random(11)
    lines = ["step,loss,lr,grad_norm"]
    for s in range(1, 701):
        lr = 1e-3 * min(1.0, s / 200)
        if s <= 600:
            loss = (0.9 + 2.5 * math.exp(-s / 150)) * math.exp(rng.gauss(0, 0.03))
            gn = (0.8 + 1.5 * math.exp(-s / 100)) * math.exp(rng.gauss(0, 0.15))
            lines.append(f"{s},{loss:.5f},{lr:.4e},{gn:.4f}")
        else:
            lines.append(f"{s},nan,{lr:.4e},nan")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return Probe(name="probe: NaN after flat LR", path=path,
                 truth="lr flat at 1e-3 over steps 200-600, loss NaN from step 601",
                 nan_onset_step=601, first_visible_step=601)


def hf_nan_filter(out_dir: Path) -> Probe:
    path = out_dir / "hf_nan_filter" / "trainer_state.json"
    rng = random.Random(13)
    max_steps, logging_steps, eval_steps, nan_from = 1000, 10, 200, 637
    warmup, peak_lr = 50, 5e-5
    history: list[dict] = []
    tr_loss = 0.0
    total = 0.0
    last_logged = 0
    for gs in range(max_steps):  # gs = global_step before this step's increment
        step = gs + 1
        true_loss = (0.6 + 2.2 * math.exp(-step / 180)) * math.exp(rng.gauss(0, 0.04))
        if step >= nan_from:
            tr_loss = tr_loss + tr_loss / (1 + gs - last_logged)  # HF logging_nan_inf_filter
        else:
            tr_loss += true_loss
        grad_norm = float("nan") if step >= nan_from else 1.1 * math.exp(rng.gauss(0, 0.2))
        lr = peak_lr * (step / warmup if step <= warmup
                        else (max_steps - step) / (max_steps - warmup))
        if step % logging_steps == 0:
            history.append({"epoch": round(step / 250, 4), "grad_norm": grad_norm,
                            "learning_rate": lr, "loss": round(tr_loss / (step - last_logged), 4),
                            "step": step})
            total += tr_loss
            tr_loss = 0.0
            last_logged = step
        if step % eval_steps == 0:
            ev = float("nan") if step >= nan_from else 0.65 + 2.0 * math.exp(-step / 180)
            history.append({"epoch": round(step / 250, 4), "eval_loss": ev,
                            "eval_runtime": 12.5, "eval_samples_per_second": 80.0,
                            "eval_steps_per_second": 10.0, "step": step})
    history.append({"epoch": 4.0, "step": max_steps, "total_flos": 1.2e15,
                    "train_loss": total / max_steps, "train_runtime": 900.0,
                    "train_samples_per_second": 35.5, "train_steps_per_second": 1.11})
    state = {"best_metric": None, "best_model_checkpoint": None, "epoch": 4.0,
             "eval_steps": eval_steps, "global_step": max_steps,
             "is_hyper_param_search": False, "is_local_process_zero": True,
             "is_world_process_zero": True, "log_history": history,
             "logging_steps": logging_steps, "max_steps": max_steps, "num_train_epochs": 4,
             "save_steps": 500, "total_flos": 1.2e15, "train_batch_size": 8,
             "trial_name": None, "trial_params": None}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=2) + "\n")
    return Probe(name="probe: HF NaN-filtered loss", path=path,
                 truth="loss NaN from step 637; HF's nan filter logs loss 0.0 from step 650, "
                       "grad_norm NaN from step 640, eval_loss NaN at 800 and 1000",
                 nan_onset_step=nan_from, first_visible_step=640)


def write_all(out_dir: Path) -> list[Probe]:
    """Write both probes under ``out_dir`` (overwriting; they are deterministic)."""
    return [nan_after_flat_lr(out_dir), hf_nan_filter(out_dir)]
