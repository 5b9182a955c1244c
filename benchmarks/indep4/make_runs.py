"""Rebuild the indep4 corpus: train every run, write runs/<name>/..., derive labels.json from the logged points.

    ../../.venv/bin/python make_runs.py                 # everything (2 worker processes)
    ../../.venv/bin/python make_runs.py --only b_lrzero --show   # a subset, print series, labels.json untouched
"""
import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

FAM = {  # family defaults
    "gpt": dict(opt="adamw", lr=3e-3, bs=16, accum=2, steps=200, log_every=5, eval_every=50,
                sched={"kind": "warmup_linear", "warmup": 20}),
    "gcn": dict(opt="adam", lr=1e-2, bs=16, steps=300, log_every=10, eval_every=50),
    "tcn": dict(opt="adam", lr=3e-3, bs=32, steps=400, log_every=10, eval_every=50),
    "moe": dict(opt="adam", lr=3e-3, bs=32, steps=500, log_every=10, eval_every=50),
    "triplet": dict(opt="adam", lr=3e-3, bs=32, steps=300, log_every=10, eval_every=50),
    "ctc": dict(opt="adam", lr=1e-2, bs=32, steps=250, log_every=5, eval_every=50),
    "multitask": dict(opt="sgd", lr=0.05, bs=32, steps=600, log_every=10, eval_every=75),
    "kd": dict(opt="adam", lr=3e-3, bs=64, steps=600, log_every=10, eval_every=50),
    "deepnet": dict(opt="adam", lr=2e-3, bs=32, steps=500, log_every=10, eval_every=50),
}
X_OFF = {"lightning": 1, "nanogpt": 1, "detectron2": 1}
EPOCH_FMT = ("keras_csv", "yolo")

RUNS = []


def R(name, family, fmt, bug=None, expect=(), alt=(), tol=(), seed=None, **hp):
    spec = dict(FAM[family])
    spec.update(hp)
    spec.update(name=name, family=family, fmt=fmt, bug=bug or {}, expect=list(expect), alt=list(alt), tol=list(tol),
                seed=seed if seed is not None else 100 + len(RUNS))
    if fmt in EPOCH_FMT:
        spec["eval_every"] = None  # set from steps/epoch at run time
    RUNS.append(spec)


def H(name, family, fmt, **hp):
    R(name, family, fmt, **hp)


# ------------------------------------------------------------------ healthy runs (benign quirks noted)
H("h_gpt_megatron", "gpt", "megatron", amp=True, growth=40)              # benign loss-scale back-offs
H("h_gpt_nanogpt", "gpt", "nanogpt", sched={"kind": "inv_sqrt", "warmup": 30}, log_every=1, steps=150)
H("h_gpt_fairseq", "gpt", "fairseq", opt="lion", lr=4e-4, accum=1, steps=250)
H("h_gpt_short", "gpt", "pylog", steps=30, log_every=1, eval_every=10, accum=1)
H("h_gcn_lightning", "gcn", "lightning", log_every=5)
H("h_gcn_keras", "gcn", "keras_csv", steps=450)
H("h_gcn_yolo", "gcn", "yolo", opt="nesterov", lr=0.05, steps=450)
H("h_tcn_hf", "tcn", "hf", sched={"kind": "warmup_linear", "warmup": 40})
H("h_tcn_detectron2", "tcn", "detectron2", log_every=20, steps=600, sched={"kind": "poly", "power": 1.0})
H("h_tcn_tb", "tcn", "tb", sched={"kind": "plateau", "patience": 1}, eval_every=25)
H("h_tcn_long", "tcn", "csv", steps=2000, log_every=50, eval_every=200, opt="adafactor", lr=1e-2)
H("h_moe_mmengine", "moe", "mmengine", sched={"kind": "cosine_restarts", "T0": 125})
H("h_moe_timm", "moe", "timm", opt="adamw", log_every=20)
H("h_moe_pylog", "moe", "pylog", opt="lion", lr=3e-4)
H("h_moe_ranks", "moe", "ranks", ranks=2, bs=32, steps=300)
H("h_triplet_jsonl", "triplet", "jsonl")
H("h_triplet_mlflow", "triplet", "mlflow", opt="sgd", lr=0.05)
H("h_triplet_tqdm", "triplet", "tqdm", log_every=3, steps=150)
H("h_ctc_hf", "ctc", "hf")
H("h_ctc_fairseq", "ctc", "fairseq", sched={"kind": "inv_sqrt", "warmup": 25})
H("h_ctc_wandb", "ctc", "wandb", bs=16, steps=200)
H("h_mt_detectron2", "multitask", "detectron2", log_every=20)
H("h_mt_lightning", "multitask", "lightning", opt="nesterov", lr=0.03, log_every=10)
H("h_mt_keras", "multitask", "keras_csv", steps=750)
H("h_mt_yolo", "multitask", "yolo", sched={"kind": "step_epochs", "every_epochs": 3, "gamma": 0.3}, steps=900)
H("h_kd_mlflow", "kd", "mlflow")
H("h_kd_timm", "kd", "timm", opt="sgd", lr=0.05, log_every=10)
H("h_kd_tb", "kd", "tb", sched={"kind": "poly", "power": 2.0})
H("h_kd_ranks", "kd", "ranks", ranks=2, rank_style="pylog", steps=300)
H("h_deep_csv", "deepnet", "csv")
H("h_deep_jsonl", "deepnet", "jsonl", cfg={"act": "tanh"})
H("h_deep_tb", "deepnet", "tb", cfg={"depth": 6}, opt="nesterov", lr=0.02)
H("h_deep_megatron", "deepnet", "megatron", amp=True, growth=30)
H("h_deep_mmengine", "deepnet", "mmengine", sched={"kind": "warmup_linear", "warmup": 50}, log_every=25, steps=750)
H("h_gcn_wandb", "gcn", "wandb", opt="adafactor", lr=2e-2)

# ------------------------------------------------------------------ faulty runs
# gradient accumulation
R("b_accumsum_gpt_wandb", "gpt", "wandb", bug={"kind": "accum_sum"}, accum=4, bs=8, eval_every=25,
  expect=["grad_accum_misnormalization"])
R("b_accumsum_tcn_jsonl", "tcn", "jsonl", bug={"kind": "accum_sum", "from": 201}, accum=4, bs=16, opt="sgd", lr=0.02,
  expect=["grad_accum_misnormalization"], tol=["loss_spike"])
R("b_accumsum_mt_pylog", "multitask", "pylog", bug={"kind": "accum_sum"}, accum=4, bs=16, steps=300, eval_every=25,
  expect=["grad_accum_misnormalization"])
R("b_microstep_gpt_nanogpt", "gpt", "nanogpt", bug={"kind": "step_every_micro"}, accum=4, bs=8,
  alt=["divergence", "loss_spike", "nonfinite_loss"])
R("b_microstep_tcn_hf", "tcn", "hf", bug={"kind": "step_every_micro"}, accum=4, bs=16, opt="sgd", lr=0.05,
  alt=["nonfinite_loss", "divergence", "loss_spike", "oscillation"])
R("b_schedmicro_gpt_hf", "gpt", "hf", bug={"kind": "sched_in_micro"}, accum=4, bs=8,
  expect=["lr_schedule_anomaly"], tol=["plateau", "flat_loss"])
R("b_schedmicro_ctc_megatron", "ctc", "megatron", bug={"kind": "sched_in_micro"}, accum=3, bs=16, lr=5e-3,
  sched={"kind": "poly", "power": 1.0}, expect=["lr_schedule_anomaly"], alt=["flat_loss"], tol=["plateau"])
# train/eval mode
R("b_evalmode_mt_tb", "multitask", "tb", bug={"kind": "eval_mode"}, cfg={"dropout": 0.5}, opt="adam", lr=3e-3,
  alt=["overfitting", "divergence", "nonfinite_loss"])
R("b_evalmode_gpt_pylog", "gpt", "pylog", bug={"kind": "eval_mode"}, cfg={"dropout": 0.3, "n_train": 300}, steps=300,
  eval_every=25, alt=["overfitting"])
R("b_evaltrain_mt_csv", "multitask", "csv", bug={"kind": "eval_train_mode"}, cfg={"dropout": 0.5},
  alt=["overfitting"])
R("b_evaltrain_kd_hf", "kd", "hf", bug={"kind": "eval_train_mode"}, cfg={"dropout": 0.5}, alt=["overfitting"])
# labels misaligned
R("b_labelshift_mt_yolo", "multitask", "yolo", bug={"kind": "label_shift"}, cfg={"label_shift": True}, steps=600,
  expect=["flat_loss"], tol=["plateau", "overfitting"])
R("b_labelshift_kd_wandb", "kd", "wandb", bug={"kind": "label_shift"}, cfg={"label_shift": True},
  expect=["flat_loss"], tol=["plateau", "overfitting"])
# unnormalised inputs
R("b_rawinput_tcn_mlflow", "tcn", "mlflow", bug={"kind": "raw_input"}, cfg={"input_scale": 1000.0}, opt="sgd", lr=0.01,
  alt=["nonfinite_loss", "divergence", "loss_spike", "flat_loss", "exploding_gradients", "oscillation"])
R("b_rawinput_moe_pylog", "moe", "pylog", bug={"kind": "raw_input"}, cfg={"input_scale": 300.0}, opt="sgd", lr=0.01,
  alt=["nonfinite_loss", "divergence", "exploding_gradients", "loss_spike", "flat_loss", "oscillation"])
R("b_rawinput_gcn_keras", "gcn", "keras_csv", bug={"kind": "raw_input"}, cfg={"input_scale": 255.0}, steps=450,
  alt=["nonfinite_loss", "divergence", "overfitting", "flat_loss"])
# schedules
R("b_warmupnever_moe_timm", "moe", "timm", bug={"kind": "warmup_never"}, sched={"kind": "warmup_linear", "warmup": 50},
  lr=3e-3, expect=["lr_schedule_anomaly"], alt=["flat_loss"], tol=["plateau"])
R("b_warmupnever_kd_jsonl", "kd", "jsonl", bug={"kind": "warmup_never"}, sched={"kind": "const", "warmup": 60}, opt="sgd",
  lr=0.05, expect=["lr_schedule_anomaly"], alt=["flat_loss"], tol=["plateau"])
R("b_polybatch_tcn_mmengine", "tcn", "mmengine", bug={"kind": "poly_per_batch"},
  sched={"kind": "poly", "total_epochs": 20, "power": 1.0}, expect=["lr_schedule_anomaly"], alt=["flat_loss"], tol=["plateau"])
R("b_polybatch_gcn_detectron2", "gcn", "detectron2", bug={"kind": "poly_per_batch"}, opt="sgd", lr=0.05,
  sched={"kind": "poly", "total_epochs": 15, "power": 0.9}, expect=["lr_schedule_anomaly"], alt=["flat_loss"], tol=["plateau"])
R("b_lrzero_kd_megatron", "kd", "megatron", bug={"kind": "lr_zero_resume", "at": 301},
  sched={"kind": "warmup_linear", "warmup": 30}, expect=["lr_schedule_anomaly"], alt=["plateau"], tol=["flat_loss"])
R("b_lrzero_triplet_csv", "triplet", "csv", bug={"kind": "lr_zero_resume", "at": 151}, sched={"kind": "poly", "power": 1.0},
  expect=["lr_schedule_anomaly"], alt=["plateau"], tol=["flat_loss"])
# clipping
R("b_cliptiny_mt_lightning", "multitask", "lightning", bug={"kind": "clip_tiny"}, clip=1e-3, expect=["flat_loss"],
  tol=["plateau"])
R("b_cliptiny_kd_timm", "kd", "timm", bug={"kind": "clip_tiny"}, clip=1e-3, opt="sgd", lr=0.05, expect=["flat_loss"],
  tol=["plateau"])
R("b_cliptiny_deep_wandb", "deepnet", "wandb", bug={"kind": "clip_tiny"}, clip=1e-3, alt=["flat_loss"])
# init
R("b_biginit_deep_tb", "deepnet", "tb", bug={"kind": "init_too_large"}, cfg={"gain": 2.5},
  alt=["nonfinite_loss", "exploding_gradients", "divergence", "loss_spike", "flat_loss", "dead_units"])
R("b_biginit_gcn_wandb", "gcn", "wandb", bug={"kind": "init_too_large", "factor": 8.0},
  alt=["nonfinite_loss", "exploding_gradients", "divergence", "loss_spike", "flat_loss"])
R("b_noadjnorm_gcn_tb", "gcn", "tb", bug={"kind": "gcn_no_norm"}, cfg={"no_adj_norm": True, "layers": 4}, opt="sgd", lr=0.05,
  alt=["nonfinite_loss", "exploding_gradients", "divergence", "loss_spike", "flat_loss"])
# NaN / inf
R("b_log0_tcn_pylog", "tcn", "pylog", bug={"kind": "log0", "steps": [233]}, cfg={"log_target": True},
  expect=["nonfinite_loss"], tol=["nonfinite_grad"])
R("b_log0_tcn_hf", "tcn", "hf", bug={"kind": "log0", "steps": [167]}, cfg={"log_target": True},
  expect=["nan_masked_in_logs"], tol=["nonfinite_grad", "nonfinite_loss"])
R("b_sqrtzero_triplet_jsonl", "triplet", "jsonl", bug={"kind": "sqrt_at_zero"}, cfg={"sqrt_bug": True, "allow_self": True,
  "n_train": 12000}, bs=16, steps=400,
  expect=["nonfinite_loss"], tol=["nonfinite_grad"])
R("b_sqrtzero_triplet_tb", "triplet", "tb", bug={"kind": "sqrt_at_zero"}, cfg={"sqrt_bug": True, "allow_self": True},
  steps=300, lr=1e-2,
  expect=["nonfinite_loss"], tol=["nonfinite_grad"])
R("b_ctcinf_skip_tqdm", "ctc", "tqdm", bug={"kind": "ctc_inf", "steps": [90, 170]}, skip_nonfinite=True, log_every=1,
  expect=["nonfinite_loss"], tol=["nonfinite_grad", "loss_spike"])
R("b_ctcinf_noskip_fairseq", "ctc", "fairseq", bug={"kind": "ctc_inf", "steps": [120]}, log_every=5,
  expect=["nonfinite_loss"], tol=["nonfinite_grad"])
R("b_ctcinf_masked_jsonl", "ctc", "jsonl", bug={"kind": "ctc_inf", "steps": [100]}, logger_mask="prev", log_every=5,
  expect=["nan_masked_in_logs"], tol=["nonfinite_grad", "flat_loss"])
R("b_nanzero_kd_csv", "kd", "csv", bug={"kind": "log0_masked"}, cfg={"input_scale": 40.0}, opt="sgd", lr=0.5,
  logger_mask="zero", alt=["nan_masked_in_logs", "nonfinite_loss", "divergence"])
# corrupted batch -> spike then recovery
R("b_corrupt_tcn_wandb", "tcn", "wandb", bug={"kind": "corrupt_batch", "steps": [150, 290], "factor": 60.0}, log_every=5,
  expect=["loss_spike"])
R("b_corrupt_moe_lightning", "moe", "lightning", bug={"kind": "corrupt_batch", "steps": [220], "factor": 80.0},
  log_every=1, expect=["loss_spike"])
R("b_corrupt_deep_csv", "deepnet", "csv", bug={"kind": "corrupt_batch", "steps": [250], "factor": 300.0}, log_every=5,
  expect=["loss_spike"])
# lr too high after warm-up
R("b_hotwarm_gpt_nanogpt", "gpt", "nanogpt", bug={"kind": "warmup_too_hot"}, lr=0.3, accum=1,
  sched={"kind": "warmup_linear", "warmup": 60}, steps=250, log_every=2, alt=["divergence", "nonfinite_loss", "loss_spike"])
R("b_hotwarm_kd_mmengine", "kd", "mmengine", bug={"kind": "warmup_too_hot"}, opt="sgd", lr=3.0,
  sched={"kind": "const", "warmup": 100}, alt=["divergence", "nonfinite_loss", "loss_spike", "oscillation"])
R("b_lrhigh_moe_csv", "moe", "csv", bug={"kind": "lr_too_high"}, opt="lion", lr=0.05,
  alt=["divergence", "nonfinite_loss", "oscillation", "flat_loss"])
# frozen / stale optimizer
R("b_frozen_mt_mlflow", "multitask", "mlflow", bug={"kind": "frozen_layer", "prefixes": ["trunk"]},
  alt=["flat_loss", "plateau"])
R("b_frozen_tcn_keras", "tcn", "keras_csv", bug={"kind": "frozen_layer", "prefixes": ["convs"]}, steps=620,
  alt=["flat_loss", "plateau"])
R("b_staleopt_mt_hf", "multitask", "hf", bug={"kind": "stale_optimizer", "replace": ["trunk"]},
  alt=["flat_loss", "plateau"])
R("b_staleopt_tcn_fairseq", "tcn", "fairseq", bug={"kind": "stale_optimizer", "replace": ["convs"]},
  alt=["flat_loss", "plateau"])
# memory / time
R("b_leak_gpt_mlflow", "gpt", "mlflow", bug={"kind": "memory_leak"}, steps=250, accum=1, bs=32,
  expect=["memory_growth"])
R("b_leak_ctc_pylog", "ctc", "pylog", bug={"kind": "memory_leak"}, steps=300, expect=["memory_growth"])
R("b_stall_moe_megatron", "moe", "megatron", bug={"kind": "periodic_stall", "every": 50, "sleep": 0.25},
  expect=["step_time_outliers"])
R("b_stall_tcn_tb", "tcn", "tb", bug={"kind": "periodic_stall", "every": 40, "sleep": 0.4}, expect=["step_time_outliers"])
R("b_stall_kd_jsonl", "kd", "jsonl", bug={"kind": "periodic_stall", "every": 100, "sleep": 0.3}, log_every=5,
  expect=["step_time_outliers"])
R("b_slowload_gcn_timm", "gcn", "timm", bug={"kind": "slow_loader", "sleep": 0.012}, steps=200, expect=["input_bound"],
  tol=["step_time_outliers"])
R("b_slowload_triplet_mmengine", "triplet", "mmengine", bug={"kind": "slow_loader", "sleep": 0.04, "from": 151},
  expect=["input_bound"], tol=["throughput_regression", "step_time_outliers"])
R("b_creep_mt_wandb", "multitask", "wandb", bug={"kind": "step_creep", "per_step": 500}, expect=["throughput_regression"],
  tol=["step_time_outliers"])
R("b_creep_deep_pylog", "deepnet", "pylog", bug={"kind": "step_creep", "per_step": 600}, expect=["throughput_regression"],
  tol=["step_time_outliers"])
R("b_straggler_moe_ranks", "moe", "ranks", bug={"kind": "straggler", "sleep": 0.01}, ranks=2, steps=300,
  expect=["straggler"])
R("b_straggler_kd_ranks", "kd", "ranks", bug={"kind": "straggler", "sleep": 0.01, "from": 151}, ranks=2, steps=300,
  rank_style="pylog", expect=["straggler"], tol=["throughput_regression"])
# resume
R("b_replay_tcn_tb", "tcn", "tb", bug={"kind": "resume_replay", "save": 200, "crash": 280}, expect=["resume_discontinuity"])
R("b_replay_gpt_megatron", "gpt", "megatron", bug={"kind": "resume_replay", "save": 100, "crash": 160}, steps=260,
  expect=["resume_discontinuity"])
R("b_reset_moe_jsonl", "moe", "jsonl", bug={"kind": "resume_reset", "save": 10**9, "crash": 250},
  sched={"kind": "warmup_linear", "warmup": 40}, expect=["resume_discontinuity"], tol=["loss_spike"])
R("b_reset_kd_pylog", "kd", "pylog", bug={"kind": "resume_reset", "save": 10**9, "crash": 300}, expect=["resume_discontinuity"])
# mixed precision
R("b_lscale_gpt_megatron", "gpt", "megatron", bug={"kind": "loss_weight_blowup", "at": 121, "factor": 1e6}, amp=True,
  growth=40, expect=["loss_scale_collapse"], tol=["flat_loss", "plateau"])
R("b_lscale_deep_jsonl", "deepnet", "jsonl", bug={"kind": "loss_weight_blowup", "at": 201, "factor": 1e6}, amp=True,
  growth=50, expect=["loss_scale_collapse"], tol=["flat_loss", "plateau"])
R("b_lscale_ctc_fairseq", "ctc", "fairseq", bug={"kind": "loss_weight_blowup", "at": 101, "factor": 1e6}, amp=True,
  growth=40, expect=["loss_scale_collapse"], tol=["flat_loss", "plateau"])
# deep-net pathologies
R("b_vanish_deep_csv", "deepnet", "csv", bug={"kind": "vanishing_sigmoid"}, cfg={"act": "sigmoid", "depth": 12},
  expect=["vanishing_gradients"], alt=["flat_loss"], tol=["plateau"])
R("b_vanish_deep_tb", "deepnet", "tb", bug={"kind": "vanishing_sigmoid"}, cfg={"act": "sigmoid", "depth": 14}, opt="sgd",
  lr=0.05, expect=["vanishing_gradients"], alt=["flat_loss"], tol=["plateau"])
R("b_dead_deep_jsonl", "deepnet", "jsonl", bug={"kind": "dead_relu"}, cfg={"bias": -2.0}, expect=["dead_units"],
  alt=["flat_loss"], tol=["plateau", "vanishing_gradients"])
R("b_dead_moe_pylog", "moe", "pylog", bug={"kind": "dead_relu"}, cfg={"bias_init": -4.0}, opt="sgd", lr=0.02,
  expect=["dead_units"], alt=["flat_loss"], tol=["plateau"])
R("b_sat_deep_csv", "deepnet", "csv", bug={"kind": "saturated_tanh"}, cfg={"act": "tanh", "gain": 5.0},
  expect=["saturated_activations"], alt=["flat_loss"], tol=["plateau"])
# data / validation
R("b_tiny_mt_keras", "multitask", "keras_csv", bug={"kind": "tiny_train", "n": 48}, bs=16, steps=600, cfg={"dropout": 0.0},
  expect=["overfitting"])
R("b_tiny_gcn_yolo", "gcn", "yolo", bug={"kind": "tiny_train", "n": 24}, bs=8, steps=480, expect=["overfitting"])
R("b_tiny_gpt_hf", "gpt", "hf", bug={"kind": "tiny_train", "n": 24}, bs=8, accum=1, steps=300, eval_every=25, cfg={"dropout": 0.0},
  expect=["overfitting"])
R("b_valshift_tcn_detectron2", "tcn", "detectron2", bug={"kind": "val_shift"}, cfg={"val_shift": 1.5},
  alt=["overfitting"])
R("b_valshift_mt_keras", "multitask", "keras_csv", bug={"kind": "val_shift"}, cfg={"val_scale": 3.0}, steps=750,
  alt=["overfitting"])


def run_one(spec):
    import torch  # noqa: F401
    from engine import train
    from writers import WRITERS
    from models import FAMILIES
    t = time.time()
    fam = FAMILIES[spec["family"]](spec.get("cfg", {}), spec["seed"])
    n = spec["bug"].get("n", fam.n_train) if spec["bug"].get("kind") == "tiny_train" else fam.n_train
    spec["_spe"] = max(1, n // (spec["bs"] * spec.get("accum", 1)))
    if spec["fmt"] in EPOCH_FMT:
        spec["eval_every"] = spec["_spe"]
    spec["_x_off"] = X_OFF.get(spec["fmt"], 0)
    if spec["bug"].get("kind") == "init_too_large" and "factor" not in spec["bug"]:
        spec["bug"]["factor"] = 1.0
    recs = train(spec)
    secs = time.time() - t
    d = os.path.join(HERE, "runs", spec["name"])
    shutil.rmtree(d, ignore_errors=True)
    pts, unit = WRITERS[spec["fmt"]](d, recs, spec)
    return spec, pts, unit, secs


def labels_for(spec, pts, unit, secs):
    import label as L
    faults, notes, tol = [], [], list(spec["tol"])
    labelled = set()
    for sym in spec["expect"]:
        r = L.LOCATORS[sym](pts, spec)
        if r:
            onset, extra, note = r
            faults.append(dict(symptom=sym, onset_step=onset, **extra))
            notes.append(note)
            labelled.add(sym)
        else:
            notes.append(f"expected {sym} not visible in the logged numbers")
    for sym in spec["alt"]:
        r = L.LOCATORS[sym](pts, spec)
        if not r:
            continue
        onset, extra, note = r
        if not faults:
            faults.append(dict(symptom=sym, onset_step=onset, **extra))
            labelled.add(sym)
            notes.append(note)
        elif sym not in tol and sym not in labelled:
            tol.append(sym)
            notes.append(f"also visible ({sym}, tolerated): {note}")
    for t in L.auto_tolerated(pts, spec, labelled):
        if t not in tol:
            tol.append(t)
    tol = [t for t in tol if t not in labelled]
    m = L.main_pts(pts)
    ls = [p["loss"] for p in m]
    fl = [v for v in ls if L.F(v)]
    bug = spec["bug"].get("kind", "none")
    fault = bug
    if bug != "none" and not faults:
        fault = bug + " (no visible trace)"
    head = f"loss first {L.fmt(ls[0])} -> last {L.fmt(ls[-1])} (min {L.fmt(min(fl)) if fl else 'nan'})"
    vl = [p["val_loss"] for p in m if "val_loss" in p]
    if vl:
        head += f"; val loss {L.fmt(vl[0])} -> {L.fmt(vl[-1])} (min {L.fmt(min(v for v in vl if L.F(v)) if any(L.F(v) for v in vl) else float('nan'))})"
    s = spec.get("sched", {}).get("kind", "const")
    tail = (f"x-axis unit: {unit}; {spec['_spe']} optimizer steps/epoch; run {spec['steps']} steps, opt {spec['opt']} lr {spec['lr']:g} "
            f"sched {s} bs {spec['bs']}" + (f" accum {spec['accum']}" if spec.get("accum", 1) > 1 else "") +
            f", logged every {spec.get('log_every', 10) if spec['fmt'] not in EPOCH_FMT else 'epoch'}.")
    if bug != "none" and not faults:
        notes.append("the injected bug left no visible trace in the logged numbers: labelled healthy")
    return {"family": spec["family"], "fault": fault, "format": spec["fmt"],
            "faults": faults, "tolerated": [{"symptom": t, "onset_step": None} for t in tol],
            "notes": "; ".join([head] + notes) + ". " + tail, "train_seconds": round(secs, 2)}


def assign_splits(labels):
    """Stratified: within each injected-bug kind runs alternate G/H (healthy runs alternate by family); then
    swaps between two runs of the same kind (healthy: same family) that lower the G/H imbalance of labelled
    symptoms and formats."""
    groups = {}
    for name in sorted(labels):
        lab = labels[name]
        key = ("bug", lab["fault"].split(" (")[0]) if not name.startswith("h_") else ("healthy", lab["family"])
        groups.setdefault(key, []).append(name)
    out = {}
    flip = 0
    for key in sorted(groups):
        for i, n in enumerate(groups[key]):
            out[n] = "GH"[(i + flip) % 2]
        if len(groups[key]) % 2:
            flip += 1  # odd leftovers go alternately to G and H

    def cost():
        c = {}
        for n, s in out.items():
            d = 1 if s == "G" else -1
            for f in labels[n]["faults"]:
                c["s:" + f["symptom"]] = c.get("s:" + f["symptom"], 0) + d
            c["f:" + labels[n]["format"]] = c.get("f:" + labels[n]["format"], 0) + d
            c["h:" + str(bool(labels[n]["faults"]))] = c.get("h:" + str(bool(labels[n]["faults"])), 0) + d
        return sum(abs(v) * (2 if k.startswith("s:") else 1) for k, v in c.items())
    best = cost()
    improved = True
    while improved:
        improved = False
        for key in sorted(groups):
            g = groups[key]
            for i in range(len(g)):
                for j in range(i + 1, len(g)):
                    a, b = g[i], g[j]
                    if out[a] == out[b]:
                        continue
                    out[a], out[b] = out[b], out[a]
                    c = cost()
                    if c < best:
                        best, improved = c, True
                    else:
                        out[a], out[b] = out[b], out[a]
    return out


RULE = ("a finding at warning or above hits a fault when the symptom is equal and, where the fault has an onset_step, its "
        "onset is within max(20 steps, 10% of the run) of onset_step, of any event_steps entry, or inside onset_range widened "
        "by that tolerance; any other finding at warning or above that no 'tolerated' entry covers is a false positive; a "
        "healthy run has faults: [].")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--show", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    specs = [s for s in RUNS if not a.only or any(k in s["name"] for k in a.only.split(","))]
    names = [s["name"] for s in RUNS]
    assert len(names) == len(set(names)), "duplicate names"
    t0 = time.time()
    import torch  # noqa: F401  (imported once, inherited by the forked workers)
    import engine, writers, label  # noqa: F401,E401
    ctx = mp.get_context("fork")
    with ctx.Pool(a.jobs, maxtasksperchild=1) as pool:
        res = pool.map(run_one, specs, chunksize=1)
    labels = {}
    for spec, pts, unit, secs in res:
        labels[spec["name"]] = labels_for(spec, pts, unit, secs)
        if a.only:
            lab = labels[spec["name"]]
            print(f"{spec['name']:32s} {secs:6.1f}s faults={[(f['symptom'], f['onset_step']) for f in lab['faults']]} "
                  f"tol={[t['symptom'] for t in lab['tolerated']]}")
        if a.show:
            lab = labels[spec["name"]]
            print(f"== {spec['name']} [{spec['fmt']}] faults={[(f['symptom'], f['onset_step']) for f in lab['faults']]} "
                  f"tol={[t['symptom'] for t in lab['tolerated']]}\n   {lab['notes']}")
            step = max(1, len(pts) // 25)
            for p in pts[::step]:
                print("   ", {k: (round(v, 4) if isinstance(v, float) else v) for k, v in p.items()
                              if k in ("x", "loss", "val_loss", "lr", "gnorm", "step_ms", "data_ms", "mem_mb", "scale",
                                       "dead", "sat", "g_first", "g_last", "rank", "fwd_ms", "wait_ms", "masked")})
    wall = time.time() - t0
    print(f"trained {len(res)} runs in {wall:.1f} s wall, {sum(r[3] for r in res):.1f} s training")
    if a.only:
        return
    splits = assign_splits(labels)
    for n in labels:
        labels[n] = {"split": splits[n], **labels[n]}
    with open(os.path.join(HERE, "labels.json"), "w") as f:
        json.dump({"_rule": RULE, "runs": dict(sorted(labels.items()))}, f, indent=1, default=lambda o: None)


if __name__ == "__main__":
    main()
