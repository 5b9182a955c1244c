"""The declared runs of the corpus: healthy runs and fault runs, and the tune/holdout split.

A spec is a dict read by ``train.train`` (model family, optimizer, schedule, fault and its
parameters), by ``writers`` (``format`` and its options) and by ``labels`` (``expect``: the
symptoms the injected fault should show; ``tolerate``: secondary symptoms it may also show;
``story``: what was injected, for the notes).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

SPECS: list[dict] = []

# family -> (steps, batch, optimizer, lr): settings that train stably in a few seconds
BASE = {
    "mlp": dict(steps=300, batch=64, opt="adam", lr=1e-3),
    "cnn": dict(steps=200, batch=32, opt="adam", lr=3e-3),
    "resnet": dict(steps=120, batch=32, opt="adam", lr=2e-3),
    "vit": dict(steps=150, batch=32, opt="adamw", lr=1e-3),
    "chartf": dict(steps=160, batch=16, opt="adamw", lr=3e-3),
    "gru": dict(steps=200, batch=32, opt="adam", lr=5e-3),
    "lstm": dict(steps=200, batch=32, opt="adam", lr=5e-3),
    "ae": dict(steps=300, batch=64, opt="adam", lr=1e-3),
    "reg": dict(steps=300, batch=64, opt="sgd_plain", lr=0.1),
}
FAMILY_GROUP = {"mlp": "mlp", "mlp_deep": "mlp", "cnn": "cnn_bn", "resnet": "resnet_vit",
                "vit": "resnet_vit", "chartf": "char_transformer", "gru": "rnn", "lstm": "rnn",
                "rnn": "rnn", "ae": "mse", "reg": "mse"}
"""The six families of the brief (a run's ``family`` is the concrete model)."""

SHORT = {"tm_csv": "csv", "tm_jsonl": "jsonl", "units_csv": "units", "ns_jsonl": "ns",
         "rank_csv": "ranks", "lightning": "pl", "wandb_csv": "wandb", "wandb_jsonl": "wbjson",
         "hf": "hf", "tensorboard": "tb", "keras_csv": "kcsv", "keras_json": "kjson",
         "fairseq": "fairseq", "print_log": "print", "mlflow": "mlflow"}
EPOCH_FORMATS = {"keras_csv", "keras_json"}


def add(family: str, fault: str, fmt: str, seed: int = 0, tag: str = "", **kw) -> None:
    sp = {**BASE.get(family, BASE["mlp"]), "family": family, "fault": fault, "format": fmt,
          "seed": seed, **kw}
    if fmt in EPOCH_FORMATS and "n_train" not in sp and family != "chartf":
        # Keras logs one row per epoch: short epochs so the log has 20-40 rows
        sp["n_train"] = sp["batch"] * 8
        sp.setdefault("eval_every", 8)
    if fmt in EPOCH_FORMATS and family == "chartf":
        sp.setdefault("steps_per_epoch", 8)
        sp.setdefault("eval_every", 8)
    if fault == "none" and not sp.get("story"):
        sp["story"] = (f"healthy: {sp['opt']} lr={sp['lr']:g}, {sp.get('sched', 'const')} "
                       f"schedule, {sp['steps']} steps, batch {sp['batch']}"
                       + (f", clipped at {sp['clip']:g}" if sp.get("clip") else "")
                       + (f", noisy eval on {sp['n_eval']} samples" if sp.get("n_eval") else "")
                       + (", 2 ranks" if sp.get("ranks") == 2 else "") + ".")
    name = f"{family}-{fault if fault != 'none' else 'ok'}-{tag + '-' if tag else ''}" \
           f"{SHORT[fmt]}-s{seed}"
    assert all(s["name"] != name for s in SPECS), name
    sp["name"] = name
    SPECS.append(sp)


# ============================================================================ healthy runs
H = [
    # family, fmt, seed, tag, overrides
    ("mlp", "tm_csv", 0, "adam", dict()),
    ("mlp", "wandb_csv", 1, "sgdcos", dict(opt="sgd", lr=0.05, sched="cosine")),
    ("mlp", "hf", 2, "adamwlin", dict(opt="adamw", lr=2e-3, sched="linear", wd=0.01)),
    ("mlp", "keras_csv", 3, "rms", dict(opt="rmsprop", lr=1e-3)),
    ("mlp", "lightning", 4, "adamwcos", dict(opt="adamw", lr=2e-3, sched="cosine")),
    ("mlp", "units_csv", 5, "step", dict(opt="sgd", lr=0.05, sched="step", log_rss=True)),
    ("mlp", "tm_jsonl", 6, "short", dict(steps=80, eval_every=20)),
    ("mlp", "keras_json", 7, "noisy", dict(n_eval=48)),
    ("mlp", "rank_csv", 8, "ddp", dict(ranks=2)),
    ("cnn", "tm_csv", 0, "adam", dict()),
    ("cnn", "lightning", 1, "sgdcos", dict(opt="sgd", lr=0.05, sched="cosine")),
    ("cnn", "tensorboard", 2, "adamw", dict(opt="adamw", lr=3e-3, sched="warmup_const")),
    ("cnn", "hf", 3, "noisy", dict(n_eval=32)),
    ("cnn", "keras_csv", 4, "rms", dict(opt="rmsprop", lr=1e-3, keras_name="log")),
    ("cnn", "ns_jsonl", 5, "step", dict(opt="sgd", lr=0.05, sched="step", log_rss=True)),
    ("resnet", "wandb_jsonl", 0, "adam", dict(log_rss=True)),
    ("resnet", "tensorboard", 1, "sgdcos", dict(opt="sgd", lr=0.05, sched="cosine",
                                                tb_style="B")),
    ("resnet", "tm_csv", 2, "adamw", dict(opt="adamw", lr=2e-3, sched="linear")),
    ("resnet", "lightning", 3, "short", dict(steps=80, eval_every=20)),
    ("resnet", "rank_csv", 4, "ddp", dict(ranks=2)),
    ("vit", "hf", 0, "adamwcos", dict(sched="cosine")),
    ("vit", "tensorboard", 1, "adam", dict(opt="adam", tb_style="B")),
    ("vit", "units_csv", 2, "const", dict(log_rss=True)),
    ("vit", "keras_json", 3, "rms", dict(opt="rmsprop", lr=5e-4)),
    ("vit", "mlflow", 4, "adamwlin", dict(sched="linear")),
    # fairseq epochs are long next to the log interval: 37 updates an epoch, a line every 10
    ("chartf", "fairseq", 0, "cos", dict(sched="cosine", steps_per_epoch=37, eval_every=37)),
    # ... but an epoch of exactly N log intervals puts the epoch summary on the same
    # num_updates as the last train_inner line (a legitimate duplicate step, not a resume)
    ("chartf", "fairseq", 6, "epochsum", dict(sched="cosine", steps_per_epoch=20,
                                              eval_every=20)),
    ("chartf", "hf", 1, "lin", dict(sched="linear")),
    ("chartf", "wandb_csv", 2, "adam", dict(opt="adam", lr=2e-3, log_rss=True)),
    ("chartf", "tm_jsonl", 3, "noisy", dict(n_eval=8)),
    ("chartf", "fairseq", 4, "short", dict(steps=80, eval_every=37, sched="cosine",
                                           steps_per_epoch=37, fairseq_style="old")),
    ("chartf", "tensorboard", 5, "step", dict(sched="step")),
    # recurrent nets: clipped at 1.0 as practitioners do (grad_norm is logged before the clip)
    ("gru", "tm_csv", 0, "adam", dict(clip=1.0)),
    ("gru", "lightning", 1, "rms", dict(opt="rmsprop", lr=3e-3, clip=1.0)),
    ("gru", "keras_csv", 2, "cos", dict(sched="cosine", clip=1.0)),
    ("gru", "print_log", 3, "clip", dict(clip=1.0)),
    ("lstm", "wandb_jsonl", 0, "adam", dict(clip=1.0)),
    ("lstm", "ns_jsonl", 1, "cos", dict(sched="cosine", clip=1.0)),
    ("lstm", "hf", 2, "adamw", dict(opt="adamw", sched="linear", clip=1.0)),
    ("lstm", "mlflow", 3, "short", dict(steps=100, clip=1.0)),
    ("ae", "tm_csv", 0, "adam", dict()),
    ("ae", "wandb_csv", 1, "sgd", dict(opt="sgd", lr=0.1, sched="cosine")),
    ("ae", "keras_json", 2, "adamw", dict(opt="adamw")),
    ("ae", "tensorboard", 3, "rms", dict(opt="rmsprop", lr=5e-4)),
    ("ae", "print_log", 4, "step", dict(sched="step")),
    ("reg", "tm_csv", 0, "sgd", dict()),
    ("reg", "units_csv", 1, "sgdstep", dict(sched="step")),
    ("reg", "hf", 2, "adam", dict(opt="adam", lr=1e-3, tolerate=["flat_loss"], story=(
        "healthy, but the HF Trainer rounds the logged loss to 4 decimals: a loss of ~1e-6 "
        "is logged as 0.0 at every step, a flat line (tolerated)"))),
]
for fam, fmt, seed, tag, kw in H:
    add(fam, "none", fmt, seed, tag, **kw)

# ============================================================================ fault runs
# secondary symptoms a blown-up run also shows (a flat line after the blow-up, swings, grad
# spikes); a "plateau" beside a divergence is not among them (it contradicts it)
NF_TOL = ["divergence", "exploding_gradients", "loss_spike", "nonfinite_grad", "oscillation",
          "flat_loss"]
DIV_TOL = ["exploding_gradients", "loss_spike", "oscillation", "nonfinite_loss", "flat_loss"]
FLAT_TOL = ["plateau", "vanishing_gradients", "overfitting"]


def fault(family, kind, fmt, seed=0, expect=(), tolerate=(), story="", **kw):
    add(family, kind, fmt, seed, expect=list(expect), tolerate=list(tolerate), story=story,
        **kw)


S = "lr far too high"
fault("mlp", "lr_high", "tm_csv", 0, ["nonfinite_loss|divergence"],
      NF_TOL, S + " (SGD lr=30)", opt="sgd",
      lr=30.0)
fault("chartf", "lr_high", "wandb_csv", 1, ["nonfinite_loss|divergence"],
      NF_TOL, S + " (AdamW lr=1)",
      lr=1.0)
fault("cnn", "lr_high", "lightning", 2, ["nonfinite_loss|divergence"], DIV_TOL, S +
      " (SGD lr=50)", opt="sgd", lr=50.0)
fault("gru", "lr_high", "tensorboard", 3, ["divergence|flat_loss|oscillation"],
      DIV_TOL, S + " (Adam lr=0.3)",
      lr=0.3)
S = "lr far too low (1e-7): the model does not move"
fault("mlp", "lr_low", "tensorboard", 0, ["flat_loss"], FLAT_TOL, S, lr=1e-7)
fault("resnet", "lr_low", "hf", 1, ["flat_loss"], FLAT_TOL, S, lr=1e-7)
fault("chartf", "lr_low", "jsonl" if False else "tm_jsonl", 2, ["flat_loss"], FLAT_TOL, S,
      lr=1e-7)
S = "optimizer.zero_grad() never called: gradients accumulate across steps"
fault("mlp", "no_zero_grad", "ns_jsonl", 0, ["divergence|oscillation"], DIV_TOL + ["divergence"], S,
      opt="sgd", lr=0.05)
fault("cnn", "no_zero_grad", "tm_jsonl", 1, ["divergence|oscillation"], DIV_TOL + ["divergence"], S,
      opt="sgd", lr=0.05)
S = "softmax in the model's head and F.cross_entropy on top (softmax applied twice)"
fault("mlp", "double_softmax", "keras_csv", 0, ["plateau"], ["flat_loss"], S)
fault("vit", "double_softmax", "wandb_csv", 1, ["plateau"], ["flat_loss"], S)
S = "labels shuffled independently of inputs (a sort applied to x only)"
fault("mlp", "shuffled_labels", "lightning", 0, ["flat_loss"], FLAT_TOL, S)
fault("cnn", "shuffled_labels", "tensorboard", 1, ["flat_loss"], FLAT_TOL, S)
S = "weight decay far too high (AdamW wd=50)"
fault("mlp", "wd_high", "units_csv", 0, ["flat_loss"], FLAT_TOL, S, opt="adamw", wd=50.0)
fault("resnet", "wd_high", "tm_csv", 1, ["flat_loss"], FLAT_TOL, S, opt="adamw", wd=50.0)
S = ("model.eval() before the loop and model.train() never called: BatchNorm uses its "
     "initial running stats on raw 0-255 pixels")
fault("cnn", "bn_eval", "tm_csv", 0, ["nonfinite_loss|divergence"], DIV_TOL + ["flat_loss"],
      S + " (SGD lr=0.05, which trains the same model in train mode)", opt="sgd", lr=0.05)
fault("resnet", "bn_eval", "wandb_csv", 1, ["nonfinite_loss|divergence"], DIV_TOL +
      ["flat_loss"], S + " (SGD lr=0.05, which trains the same model in train mode)",
      opt="sgd", lr=0.05)
S = "data sorted by class and never shuffled: each epoch walks the classes in order"
fault("mlp", "class_sorted", "tm_csv", 0, ["oscillation"], ["loss_spike", "plateau",
      "vanishing_gradients"], S + " (the grad norm falls to ~0 inside each one-class block)",
      opt="sgd", lr=0.05)
fault("cnn", "class_sorted", "units_csv", 1, ["oscillation"], ["loss_spike", "plateau"], S)
S = ("fp16 without a GradScaler: the gradients reaching each layer pass through fp16 in "
     "backward and the small ones underflow to zero")
S += " (with 16-step accumulation dividing the loss by 16, as usual)"
fault("ae", "fp16_no_scaler", "tm_csv", 0, [], ["plateau", "flat_loss",
      "vanishing_gradients"], S + ". Measured effect: final loss ~0.10 against ~0.09 for the "
      "same model in fp32 and a smaller grad norm; nothing a log alone can tell from a healthy "
      "run, so it is labelled faults: [] (a fault the logs cannot show)", batch=256, accum=8,
      steps=100)
S = "gradient accumulation over 8 micro-batches without dividing the loss by 8 (SGD)"
fault("mlp", "accum_not_divided", "lightning", 0, ["nonfinite_loss|divergence|flat_loss"],
      DIV_TOL, S, opt="sgd",
      lr=0.3, accum=8)
fault("gru", "accum_not_divided", "hf", 1, ["nonfinite_loss|divergence"], DIV_TOL, S +
      " (lr=0.5, which trains the same model with the loss divided)", opt="sgd", lr=0.5,
      accum=8, steps=150)
S = "reduction='sum' with an lr tuned for the mean (SGD)"
fault("mlp", "summed_loss", "tensorboard", 0, ["nonfinite_loss|divergence"], NF_TOL, S, opt="sgd",
      lr=0.05)
fault("gru", "summed_loss", "tm_jsonl", 1, ["nonfinite_loss|divergence"],
      DIV_TOL, S, opt="sgd", lr=0.05)
S = "a loop meant to freeze the embedding froze every layer but the head"
fault("resnet", "frozen", "lightning", 0, [], ["plateau", "flat_loss"], S + ". Measured: the "
      "head keeps learning on the random conv features (loss 1.39 -> ~1.0 in 400 steps, val "
      "1.33 -> 1.02, still falling), slower and higher than a trained backbone (~0.1) but not "
      "a plateau or a flat line: a log alone cannot tell it from a weaker model, so it is "
      "labelled faults: []", steps=400)
fault("chartf", "frozen", "fairseq", 1, ["plateau|flat_loss"], [], S, steps=400,
      steps_per_epoch=37,
      eval_every=37, fairseq_style="old")
S = ("validation rows drawn from the training set (leakage): val loss simply tracks train "
     "loss, which a log cannot tell from a healthy run")
fault("mlp", "leakage", "keras_json", 0, [], [], S, n_train=256, steps=240, hidden=256)
fault("cnn", "leakage", "hf", 1, [], [], S)
S = "weights initialised x100 (a custom init without 1/sqrt(fan_in))"
fault("mlp", "bad_init", "wandb_jsonl", 0, ["exploding_gradients"],
      ["divergence", "loss_spike", "oscillation", "plateau"], S)
fault("gru", "bad_init", "tm_csv", 1, ["exploding_gradients"],
      ["divergence", "loss_spike", "oscillation", "plateau", "flat_loss"], S, init_scale=30.0)
S = "16 sigmoid layers with default init: gradients vanish, loss flat"
S += "; the log has per-layer grad norms (layer/body.0 and layer/head)"
fault("mlp_deep", "vanishing", "tm_csv", 0, ["vanishing_gradients", "flat_loss"], ["plateau"],
      S, opt="sgd", lr=0.01, depth=16, layer_stats=True)
fault("mlp_deep", "vanishing", "ns_jsonl", 1, ["vanishing_gradients", "flat_loss"], ["plateau"],
      S, opt="sgd", lr=0.01, depth=20, layer_stats=True)
S = "a per-epoch StepLR(step_size=8, gamma=0.5) stepped every batch: lr collapses to ~0"
fault("cnn", "sched_per_batch", "lightning", 0, ["lr_schedule_anomaly"], ["plateau",
      "flat_loss"], S)
fault("chartf", "sched_per_batch", "hf", 1, ["lr_schedule_anomaly"], ["plateau", "flat_loss"],
      S)
fault("mlp", "sched_per_batch", "tm_csv", 2, ["lr_schedule_anomaly"], ["plateau", "flat_loss"],
      S, opt="sgd", lr=0.05)
S = "warm-up length set to 10x the run: the lr rises for the whole run"
fault("mlp", "lr_rising", "wandb_csv", 0, ["lr_schedule_anomaly"], ["plateau"], S,
      sched="never_ending_warmup", opt="sgd", lr=0.5)
fault("gru", "lr_rising", "tm_csv", 1, ["lr_schedule_anomaly"], ["plateau", "oscillation",
      "flat_loss"],
      S + " (an exponential schedule with gamma 1.02 instead of 0.98)", sched="rising",
      lr=1e-4)
S = ("warm-up to a peak lr far too high: loss improves, creeps up as the lr ramps, "
     "then blows up")
fault("chartf", "warmup_diverge", "tm_csv", 0, ["divergence|nonfinite_loss"],
      DIV_TOL + ["nonfinite_loss",
      "lr_schedule_anomaly"], S, sched="warmup_const", warmup=150, lr=0.3)
fault("vit", "warmup_diverge", "tensorboard", 1, ["divergence|nonfinite_loss"],
      DIV_TOL + ["nonfinite_loss",
      "lr_schedule_anomaly"], S, sched="warmup_const", warmup=140, lr=0.3, tb_style="B")
S = "poisoned batches (corrupt inputs / labels) at a few steps: loss spikes and recovers"
SPIKE_TOL = ["exploding_gradients", "divergence"]   # a poisoned step can leave the loss higher
fault("mlp", "poisoned_batches", "tm_csv", 0, ["loss_spike"], SPIKE_TOL, S,
      spike_steps=[120, 190, 260])
fault("ae", "poisoned_batches", "wandb_csv", 1, ["loss_spike"], SPIKE_TOL, S,
      spike_steps=[100, 220])
fault("chartf", "poisoned_batches", "tm_jsonl", 2, ["loss_spike"], SPIKE_TOL, S,
      spike_steps=[90, 150])
S = "data decoded on the main thread (a sleep in the loader): steps wait for data"
fault("cnn", "slow_loader", "tm_csv", 0, ["input_bound"], [], S, load_sleep=0.012)
fault("mlp", "slow_loader", "units_csv", 1, ["input_bound"], [], S)
fault("gru", "slow_loader", "ns_jsonl", 2, ["input_bound"], [], S, load_sleep=0.04,
      steps=120)
S = "a synchronous checkpoint every 50 steps (a sleep of ~20x the median step)"
fault("cnn", "periodic_stall", "tm_csv", 0, ["step_time_outliers"], [], S,
      stall_steps=[50, 100, 150], stall_s=0.3)
fault("chartf", "periodic_stall", "wandb_csv", 1, ["step_time_outliers"], [], S,
      stall_every=40, stall_steps=[40, 80, 120])
S = "2 ranks; rank 1's host slows down halfway (a sleep in its step), rank 0 waits for it"
fault("mlp", "straggler", "rank_csv", 0, ["straggler"], ["throughput_regression",
      "input_bound"], S, ranks=2, straggle_at=150, straggle_s=0.008)
fault("cnn", "straggler", "rank_csv", 1, ["straggler"], ["throughput_regression",
      "input_bound"], S, ranks=2, straggle_at=120, straggle_s=0.015)
S = "throughput halves halfway (a neighbour process takes the core)"
fault("cnn", "throughput_regression", "tm_csv", 0, ["throughput_regression"],
      ["step_time_outliers"], S, straggle_at=120)
fault("chartf", "throughput_regression", "wandb_jsonl", 1, ["throughput_regression"],
      ["step_time_outliers"], S, straggle_at=100)
S = "every step's output (and its graph) appended to a list: memory grows"
fault("mlp", "memory_growth", "tm_csv", 0, ["memory_growth"],
      ["throughput_regression"], S, hidden=256, batch=128)
fault("gru", "memory_growth", "units_csv", 1, ["memory_growth"], ["throughput_regression"],
      S + "; the retained graphs also slow the steps down", batch=128, clip=1.0)
fault("ae", "memory_growth", "wandb_csv", 2, ["memory_growth"],
      ["throughput_regression"], S, batch=256)
S = "tiny training set trained long: val loss turns up while train loss keeps falling"
fault("mlp", "overfitting", "keras_csv", 0, ["overfitting"], ["plateau"], S, n_train=64,
      batch=16, steps=320, eval_every=4, hidden=256, spread=0.5, lr=3e-3)
fault("gru", "overfitting", "lightning", 1, ["overfitting"], ["plateau"], S, n_train=64,
      batch=16, steps=300, eval_every=15, lr=1e-2)
fault("mlp", "overfitting", "tm_csv", 3, ["overfitting"], ["plateau"], S, n_train=48,
      batch=16, steps=300, eval_every=10, hidden=256, spread=0.8, lr=1e-3, n_eval=96)
S = ("a corrupt record in the val shard served for three evaluations (val loss NaN), "
     "then the shard was replaced")
fault("cnn", "eval_nan", "keras_json", 0, ["nonfinite_loss"], [], S, nan_evals=[10, 11, 12])
fault("mlp", "eval_nan", "tm_csv", 1, ["nonfinite_loss"], [], S, nan_evals=[4, 5, 6])
S = "regression in metres (loss ~1e-6); one batch arrives in millimetres: loss jumps ~1e5x"
fault("reg", "tiny_loss_jump", "tm_csv", 0, ["loss_spike"], SPIKE_TOL, S,
      spike_steps=[200])
fault("reg", "tiny_loss_jump", "tm_jsonl", 1, ["loss_spike"], SPIKE_TOL, S,
      spike_steps=[150, 240])
S = "three runs (lr sweep) appended into one file: the step restarts at 0 twice"
fault("mlp", "appended_runs", "tm_csv", 0, ["resume_discontinuity"], [], S, steps=120,
      appended=[dict(lr=1e-3), dict(lr=3e-3), dict(lr=1e-2)])
fault("gru", "appended_runs", "keras_csv", 1, ["resume_discontinuity"], [], S, steps=120,
      appended=[dict(lr=3e-3), dict(lr=5e-3, seed=2), dict(lr=1e-2, seed=3)])
S = ("the job died at step 200 and resumed from the checkpoint of step 150: steps 150-199 "
     "appear twice")
fault("cnn", "resume_repeat", "tm_jsonl", 0, ["resume_discontinuity"], [], S,
      ckpt_at=150, crash_at=200, steps=240)
fault("chartf", "resume_repeat", "fairseq", 1, ["resume_discontinuity"], [], S,
      ckpt_at=100, crash_at=140, steps_per_epoch=37, eval_every=37)
S = "first layer's bias initialised at -100: every ReLU is dead, only the head bias learns"
fault("mlp", "dead_relu", "tm_csv", 0, ["flat_loss", "dead_units"], ["vanishing_gradients",
      "plateau"], S + "; the log has the watcher's layer/body.1/dead_frac", layer_stats=True)
fault("mlp", "dead_relu", "lightning", 1, ["flat_loss"], ["dead_units", "vanishing_gradients",
      "plateau"], S, opt="sgd", lr=0.05)
S = ("the optimizer was built on a deepcopy of the model: it steps the copy, the trained "
     "model never changes (full-batch, so the loss is pinned)")
fault("mlp", "optimizer_copy", "tm_csv", 0, ["flat_loss"], ["plateau", "vanishing_gradients"],
      S, n_train=512, batch=512)
fault("ae", "optimizer_copy", "hf", 1, ["flat_loss"], ["plateau", "vanishing_gradients"], S,
      n_train=512, batch=512)
S = ("lr far too high in an HF Trainer run: the loss turns NaN but logging_nan_inf_filter "
     "keeps it out of the logged loss; grad_norm shows NaN")
fault("mlp", "nan_filtered", "hf", 0, ["nan_masked_in_logs"], ["nonfinite_grad",
      "exploding_gradients", "divergence", "nonfinite_loss", "loss_spike", "flat_loss"],
      S + "; from then on the logged loss is 0.0", opt="sgd",
      lr=30.0)


S = ("fp16 autocast with a GradScaler; from step 60 an L2-to-anchor regulariser "
     "sqrt(sum((w - w_anchor)^2)) is NaN in backward while w == w_anchor: every step is skipped, "
     "the weights never leave the anchor, the scale halves every step")
fault("mlp", "loss_scale_collapse", "tm_csv", 0, ["loss_scale_collapse"],
      ["flat_loss", "plateau", "nonfinite_grad"], S, anchor_at=60)
fault("ae", "loss_scale_collapse", "wandb_csv", 1, ["loss_scale_collapse"],
      ["flat_loss", "plateau", "nonfinite_grad"], S.replace("step 60", "step 100"),
      anchor_at=100)
S = ("lr far too high in an HF Trainer run (SGD lr=300): NaN losses are left out of the logged "
     "loss (logging_nan_inf_filter), grad_norm shows NaN")
fault("ae", "nan_filtered", "hf", 1, ["nan_masked_in_logs"], ["nonfinite_grad",
      "exploding_gradients", "divergence", "nonfinite_loss", "loss_spike", "flat_loss"], S,
      opt="sgd", lr=300.0)


# ============================================================================ added runs
# A second batch, all in the tune split (declared, outside the hash draw of assign_splits, so
# no run above changes split): each fault kind again in another family / format / severity,
# and more healthy runs (other optimizers, schedules, sizes, lengths, log intervals). Seeds 10+.
ADDED: list[str] = []


def tune_fault(family, kind, fmt, seed, expect=(), tolerate=(), story="", **kw):
    fault(family, kind, fmt, seed, expect, tolerate, story, split="tune", **kw)
    ADDED.append(SPECS[-1]["name"])


def tune_ok(family, fmt, seed, tag, **kw):
    add(family, "none", fmt, seed, tag, split="tune", **kw)
    ADDED.append(SPECS[-1]["name"])


tune_fault("resnet", "lr_high", "tensorboard", 10, ["nonfinite_loss|divergence|flat_loss"],
           NF_TOL, "lr far too high (Adam lr=10)", lr=10.0)
tune_fault("lstm", "lr_high", "ns_jsonl", 11, ["nonfinite_loss|divergence|flat_loss"], NF_TOL,
           "lr far too high (SGD lr=20, no clipping): the grad norm explodes with the loss",
           opt="sgd", lr=20.0)
tune_fault("vit", "lr_low", "wandb_jsonl", 10, ["flat_loss"], FLAT_TOL,
           "lr far too low (AdamW lr=1e-7): the model does not move", lr=1e-7)
tune_fault("ae", "lr_low", "units_csv", 11, ["flat_loss"], FLAT_TOL,
           "lr far too low (SGD lr=1e-6): the model does not move", opt="sgd", lr=1e-6)
S = "optimizer.zero_grad() never called: gradients accumulate across steps"
tune_fault("resnet", "no_zero_grad", "wandb_csv", 10, ["divergence|oscillation|flat_loss"],
           DIV_TOL + ["nonfinite_loss"], S + " (SGD lr=0.02)", opt="sgd", lr=0.02)
tune_fault("lstm", "no_zero_grad", "hf", 11, ["divergence|oscillation|flat_loss"],
           DIV_TOL + ["nonfinite_loss"], S + " (SGD lr=0.1)", opt="sgd", lr=0.1)
S = "softmax in the model's head and F.cross_entropy on top (softmax applied twice)"
tune_fault("cnn", "double_softmax", "tm_csv", 10, ["plateau"], ["flat_loss"], S + " (lr=1e-2)",
           lr=1e-2, steps=400)
tune_fault("chartf", "double_softmax", "tm_jsonl", 11, ["plateau|flat_loss"], [], S + "; with "
           "a vocabulary this size the floor ln(1 + (C-1)/e) is close to the start, so the loss "
           "barely moves")
S = "labels shuffled independently of inputs (a sort applied to x only)"
tune_fault("gru", "shuffled_labels", "print_log", 10, ["flat_loss"], FLAT_TOL, S, clip=1.0)
tune_fault("vit", "shuffled_labels", "mlflow", 11, ["flat_loss"], FLAT_TOL, S)
S = "weight decay far too high (AdamW wd=50)"
tune_fault("gru", "wd_high", "wandb_csv", 10, ["flat_loss"], FLAT_TOL, S, opt="adamw", wd=50.0)
tune_fault("cnn", "wd_high", "hf", 11, ["flat_loss"], FLAT_TOL, S, opt="adamw", wd=50.0)
tune_fault("cnn", "bn_eval", "print_log", 10, ["nonfinite_loss|divergence"],
           DIV_TOL + ["flat_loss"], "model.eval() before the loop and model.train() never "
           "called: BatchNorm uses its initial running stats on raw 0-255 pixels (SGD lr=0.1)",
           opt="sgd", lr=0.1)
S = "data sorted by class and never shuffled: each epoch walks the classes in order"
tune_fault("gru", "class_sorted", "wandb_jsonl", 10, ["oscillation"], ["loss_spike", "plateau",
           "vanishing_gradients"], S + " (SGD lr=0.1, clipped at 1)", opt="sgd", lr=0.1,
           clip=1.0)
tune_fault("vit", "class_sorted", "tm_jsonl", 11, ["oscillation"], ["loss_spike", "plateau",
           "divergence"], S + "; the loss ends inside a block of a new class, above where it "
           "started (the divergence rule is met: tolerated)")
tune_fault("reg", "fp16_no_scaler", "tm_jsonl", 10, ["flat_loss"], ["plateau",
           "vanishing_gradients"], "fp16 without a GradScaler on a regression with targets in "
           "units of 1e-6 and 16-step accumulation dividing the loss by 16: the gradients "
           "reaching the layer underflow to zero in fp16, the model never leaves its init",
           target_scale=1e-6, accum=16, steps=150)
S = "gradient accumulation over 8 micro-batches without dividing the loss by 8 (SGD)"
tune_fault("vit", "accum_not_divided", "tensorboard", 10,
           ["nonfinite_loss|divergence|flat_loss"], DIV_TOL, S + " (lr=0.1)", opt="sgd",
           lr=0.1, accum=8, steps=120)
S = "reduction='sum' with an lr tuned for the mean (SGD)"
tune_fault("ae", "summed_loss", "mlflow", 10, ["nonfinite_loss|divergence"], NF_TOL,
           S + " (lr=0.1, 64x256 elements summed)", opt="sgd", lr=0.1)
tune_fault("vit", "summed_loss", "units_csv", 11, ["nonfinite_loss|divergence|flat_loss"],
           NF_TOL, S + " (lr=0.05)", opt="sgd", lr=0.05)
S = "a loop meant to freeze the embedding froze every layer but the head"
tune_fault("gru", "frozen", "print_log", 10, ["plateau|flat_loss"], [], S + " (lr=1e-2)",
           steps=400, lr=1e-2)
tune_fault("gru", "leakage", "units_csv", 10, [], [], "validation rows drawn from the training "
           "set (leakage): val loss simply tracks train loss, which a log cannot tell from a "
           "healthy run", clip=1.0)
S = "weights initialised x100 (a custom init without 1/sqrt(fan_in))"
tune_fault("ae", "bad_init", "tensorboard", 10, ["exploding_gradients"],
           ["divergence", "loss_spike", "oscillation", "plateau", "nonfinite_loss", "flat_loss"],
           S, tb_style="B")
tune_fault("lstm", "bad_init", "wandb_csv", 11, ["exploding_gradients"],
           ["divergence", "loss_spike", "oscillation", "plateau", "flat_loss"],
           S.replace("x100", "x30"), init_scale=30.0)
tune_fault("mlp_deep", "vanishing", "tm_csv", 10, ["vanishing_gradients", "flat_loss"],
           ["plateau"], "24 sigmoid layers with default init (SGD lr=0.05): gradients vanish, "
           "loss flat; the log has per-layer grad norms (layer/body.0 and layer/head)",
           opt="sgd", lr=0.05, depth=24, layer_stats=True, steps=200)
tune_fault("gru", "sched_per_batch", "tm_jsonl", 10, ["lr_schedule_anomaly"],
           ["plateau", "flat_loss", "oscillation"], "a per-epoch CosineAnnealingLR(T_max=10) "
           "stepped every batch: the lr runs down to 0 in 10 steps and back up, again and again",
           per_batch_kind="cosine", sched_every=10, clip=1.0)
tune_fault("vit", "sched_per_batch", "wandb_csv", 11, ["lr_schedule_anomaly"],
           ["plateau", "flat_loss"], "a per-epoch ExponentialLR(gamma=0.9) stepped every batch: "
           "lr collapses to ~0", per_batch_kind="exp", gamma=0.9)
S = "warm-up length set to 10x the run: the lr rises for the whole run"
tune_fault("cnn", "lr_rising", "lightning", 10, ["lr_schedule_anomaly"], ["plateau"],
           S + " (SGD lr=0.1)", sched="never_ending_warmup", opt="sgd", lr=0.1)
tune_fault("lstm", "lr_rising", "print_log", 11, ["lr_schedule_anomaly"], ["plateau",
           "oscillation", "flat_loss"], "an exponential schedule with gamma 1.02 instead of "
           "0.98: the lr rises for the whole run", sched="rising", lr=1e-4, clip=1.0)
S = ("warm-up to a peak lr far too high: loss improves, creeps up as the lr ramps, "
     "then blows up")
tune_fault("mlp", "warmup_diverge", "units_csv", 10, ["divergence|nonfinite_loss"],
           DIV_TOL + ["nonfinite_loss", "lr_schedule_anomaly"], S + " (SGD to lr=20)",
           opt="sgd", sched="warmup_const", warmup=200, lr=20.0)
tune_fault("gru", "warmup_diverge", "hf", 11, ["divergence|nonfinite_loss"],
           DIV_TOL + ["nonfinite_loss", "lr_schedule_anomaly", "flat_loss"],
           S + " (Adam to lr=3)", sched="warmup_const", warmup=150, lr=3.0)
S = "poisoned batches (corrupt inputs / labels) at a few steps: loss spikes and recovers"
tune_fault("cnn", "poisoned_batches", "lightning", 10, ["loss_spike"], SPIKE_TOL, S,
           spike_steps=[99, 159])
tune_fault("lstm", "poisoned_batches", "tensorboard", 11, ["loss_spike"], SPIKE_TOL, S,
           spike_steps=[150, 185], clip=1.0)
S = "data decoded on the main thread (a sleep in the loader): steps wait for data"
tune_fault("vit", "slow_loader", "wandb_jsonl", 10, ["input_bound"], [], S, load_sleep=0.02)
tune_fault("lstm", "slow_loader", "tm_jsonl", 11, ["input_bound"], [], S, load_sleep=0.03,
           steps=120, clip=1.0)
S = "a synchronous checkpoint every 50 steps (a sleep of ~20x the median step)"
tune_fault("mlp", "periodic_stall", "tensorboard", 10, ["step_time_outliers"], [], S,
           stall_steps=[50, 100, 150, 200, 250], stall_s=0.1)
tune_fault("lstm", "periodic_stall", "units_csv", 11, ["step_time_outliers"], [],
           S.replace("50", "60"), stall_every=60, stall_steps=[60, 120, 180], stall_s=0.2,
           clip=1.0)
S = "2 ranks; rank 1's host slows down halfway (a sleep in its step), rank 0 waits for it"
tune_fault("gru", "straggler", "rank_csv", 10, ["straggler"], ["throughput_regression",
           "input_bound"], S, ranks=2, straggle_at=100, straggle_s=0.01, clip=1.0)
tune_fault("vit", "straggler", "rank_csv", 11, ["straggler"], ["throughput_regression",
           "input_bound"], S, ranks=2, straggle_at=60, straggle_s=0.02)
S = "throughput halves halfway (a neighbour process takes the core)"
tune_fault("mlp", "throughput_regression", "units_csv", 10, ["throughput_regression"],
           ["step_time_outliers"], S, straggle_at=150)
tune_fault("ae", "throughput_regression", "tensorboard", 11, ["throughput_regression"],
           ["step_time_outliers"], S, straggle_at=200, tb_style="B")
S = "every step's output (and its graph) appended to a list: memory grows"
tune_fault("cnn", "memory_growth", "ns_jsonl", 10, ["memory_growth"],
           ["throughput_regression"], S, batch=64)
tune_fault("chartf", "memory_growth", "tm_jsonl", 11, ["memory_growth"],
           ["throughput_regression"], S)
S = "tiny training set trained long: val loss turns up while train loss keeps falling"
tune_fault("cnn", "overfitting", "wandb_csv", 10, ["overfitting"], ["plateau"],
           S + " (48 images; a noisy 48-image eval)", n_train=48, batch=16, steps=400,
           eval_every=10, n_eval=48, lr=3e-3, width=16)
tune_fault("chartf", "overfitting", "tensorboard", 11, ["overfitting"], ["plateau"],
           S + " (a 1,000-character training text)", text_chars=1000, steps=500,
           eval_every=20)
S = ("a corrupt record in the val shard served for three evaluations (val loss NaN), "
     "then the shard was replaced")
tune_fault("chartf", "eval_nan", "fairseq", 10, ["nonfinite_loss"], [], S, nan_evals=[1, 2, 3],
           steps_per_epoch=37, eval_every=37, steps=260)
tune_fault("gru", "eval_nan", "tensorboard", 11, ["nonfinite_loss"], [], S,
           nan_evals=[3, 4, 5], clip=1.0)
S = "regression in metres (loss ~1e-6); one batch arrives in millimetres: loss jumps ~1e5x"
tune_fault("reg", "tiny_loss_jump", "wandb_jsonl", 10, ["loss_spike"], SPIKE_TOL, S,
           spike_steps=[120])
tune_fault("reg", "tiny_loss_jump", "ns_jsonl", 11, ["loss_spike"], SPIKE_TOL, S,
           spike_steps=[90, 180, 270], opt="adam", lr=1e-3, steps=320)
S = "three runs (lr sweep) appended into one file: the step restarts at 0 twice"
tune_fault("cnn", "appended_runs", "wandb_csv", 10, ["resume_discontinuity"], [], S, steps=80,
           appended=[dict(lr=1e-3), dict(lr=3e-3), dict(lr=1e-2)])
tune_fault("lstm", "appended_runs", "print_log", 11, ["resume_discontinuity"], [],
           S.replace("three", "two").replace(" twice", " once"), steps=100, clip=1.0,
           appended=[dict(lr=5e-3), dict(lr=1e-2, seed=12)])
S = ("the job died and resumed from an older checkpoint: the steps between appear twice")
tune_fault("mlp", "resume_repeat", "wandb_jsonl", 10, ["resume_discontinuity"], [], S,
           ckpt_at=150, crash_at=220)
tune_fault("gru", "resume_repeat", "hf", 11, ["resume_discontinuity"], [], S, ckpt_at=100,
           crash_at=160, clip=1.0)
S = "first layer's bias initialised at -100: every ReLU is dead, only the head bias learns"
tune_fault("ae", "dead_relu", "ns_jsonl", 10, ["dead_units", "plateau|flat_loss"],
           ["vanishing_gradients"], S + " (the head's bias learns the mean image, then the "
           "loss stops); the log has the watcher's layer/body.1/dead_frac", layer_stats=True)
tune_fault("mlp", "dead_relu", "hf", 11, ["flat_loss"], ["dead_units", "vanishing_gradients",
           "plateau"], S + " (RMSprop)", opt="rmsprop", lr=1e-3, hidden=128)
S = ("the optimizer was built on a deepcopy of the model: it steps the copy, the trained "
     "model never changes (full-batch, so the loss is pinned)")
tune_fault("cnn", "optimizer_copy", "tensorboard", 10, ["flat_loss"], ["plateau",
           "vanishing_gradients"], S, n_train=256, batch=256, steps=100)
tune_fault("gru", "optimizer_copy", "units_csv", 11, ["flat_loss"], ["plateau",
           "vanishing_gradients"], S, n_train=512, batch=512, steps=120)
tune_fault("reg", "nan_filtered", "hf", 10, ["nan_masked_in_logs"], ["nonfinite_grad",
           "exploding_gradients", "divergence", "nonfinite_loss", "loss_spike", "flat_loss"],
           "linear regression with SGD lr=3 (far too high) in an HF Trainer run: the loss grows "
           "geometrically to inf/NaN, and logging_nan_inf_filter keeps NaN out of the logged "
           "loss; grad_norm shows it", lr=3.0)
tune_fault("reg", "loss_scale_collapse", "wandb_jsonl", 11, ["loss_scale_collapse"],
           ["flat_loss", "plateau", "nonfinite_grad"], "fp16 autocast with a GradScaler; from "
           "step 120 an L2-to-anchor regulariser sqrt(sum((w - w_anchor)^2)) is NaN in backward "
           "while w == w_anchor: every step is skipped, the scale halves every step",
           anchor_at=120)

# ---------------------------------------------------------------------------- healthy (tune)
tune_ok("mlp", "print_log", 10, "long", opt="sgd_plain", lr=0.1, steps=500, log_every=10)
tune_ok("cnn", "units_csv", 10, "adamwcos", opt="adamw", lr=3e-3, sched="cosine", steps=450)
tune_ok("lstm", "tensorboard", 10, "rmsstep", opt="rmsprop", lr=3e-3, sched="step", steps=400,
        clip=1.0, tb_style="B")
tune_ok("vit", "tm_csv", 10, "tiny", opt="sgd", lr=0.05, sched="cosine", steps=40,
        eval_every=10)
tune_ok("chartf", "wandb_jsonl", 10, "tiny", opt="adam", lr=3e-3, steps=60, eval_every=20)
tune_ok("mlp", "lightning", 11, "tozero", lr=3e-3, spread=3.0, steps=400, log_every=5)
tune_ok("resnet", "hf", 10, "finetune", opt="adamw", lr=2e-4, sched="cosine", steps=100,
        pretrain_steps=150, log_every=10, story="healthy fine-tune: a ResNet pretrained "
        "(unlogged, 150 Adam steps) on the task, then AdamW lr=2e-4 with cosine for 100 steps")
tune_ok("chartf", "tm_jsonl", 10, "finetune", opt="adamw", lr=3e-4, sched="linear", steps=120,
        pretrain_steps=300, story="healthy fine-tune: a char transformer pretrained (unlogged, "
        "300 Adam steps), then AdamW lr=3e-4 with linear decay for 120 steps")
tune_ok("mlp", "keras_csv", 12, "finetune", opt="sgd", lr=0.01, hidden=128, steps=200,
        pretrain_steps=60, story="healthy fine-tune: an MLP pretrained (unlogged, 60 Adam "
        "steps), then SGD lr=0.01 for 200 steps")
tune_ok("gru", "ns_jsonl", 10, "noisy", n_eval=24, clip=1.0, rnn_hidden=64)
tune_ok("vit", "lightning", 11, "noisy", n_eval=16, sched="cosine", log_every=5)
tune_ok("reg", "wandb_csv", 10, "bigscale", opt="sgd_plain", lr=0.05, target_scale=1000.0,
        story="healthy: linear regression with targets ~1e3 (MSE ~1e7 at the start, the noise "
              "floor 1e6), SGD lr=0.05")
tune_ok("reg", "mlflow", 11, "tinyscale", opt="sgd_plain", lr=0.1, target_scale=1e-6,
        story="healthy: linear regression with targets ~1e-6 (MSE ~1e-11 at the start, the "
              "noise floor 1e-12), SGD lr=0.1")
tune_ok("mlp", "rank_csv", 10, "ddpcos", opt="sgd", lr=0.05, sched="cosine", ranks=2)
tune_ok("cnn", "rank_csv", 11, "ddp", opt="adamw", lr=3e-3, ranks=2, steps=150)
tune_ok("ae", "tm_csv", 10, "tiny", opt="adam", lr=2e-3, steps=30, eval_every=10)
tune_ok("lstm", "wandb_csv", 11, "long", opt="adamw", lr=5e-3, sched="cosine", steps=500,
        clip=1.0)
tune_ok("gru", "keras_json", 11, "sgdwarm", opt="sgd", lr=0.5, sched="warmup_const",
        clip=1.0)
tune_ok("chartf", "fairseq", 11, "rms", opt="rmsprop", lr=1e-3, sched="step", log_every=5,
        steps_per_epoch=50, eval_every=50, steps=200)
tune_ok("vit", "wandb_jsonl", 12, "long", opt="adam", lr=1e-3, sched="linear", steps=400,
        eval_every=50)
tune_ok("cnn", "mlflow", 12, "wide", opt="sgd", lr=0.05, sched="step", width=32, steps=150)
tune_ok("ae", "hf", 11, "every10", opt="rmsprop", lr=5e-4, log_every=10, steps=400)


def assign_splits(specs: list[dict], share: float = 0.4) -> dict[str, str]:
    """~40% holdout by a hash of the run name, stratified: within each fault kind (and, for
    the healthy runs, each family) the runs are ordered by hash and the first
    round(share * n) go to holdout, at least one each way when a kind has two runs or more."""
    groups: dict[str, list[str]] = defaultdict(list)
    out = {}
    for sp in specs:
        if sp.get("split"):   # declared (the added tune-only runs): outside the hash draw,
            out[sp["name"]] = sp["split"]   # so no earlier run changes split
            continue
        key = f"fault:{sp['fault']}" if sp["fault"] != "none" else f"healthy:{sp['family']}"
        groups[key].append(sp["name"])
    for _key, names in sorted(groups.items()):
        names = sorted(names, key=lambda n: hashlib.sha1(n.encode()).hexdigest())
        k = round(share * len(names))
        if len(names) >= 2:
            k = min(max(k, 1), len(names) - 1)
        for i, n in enumerate(names):
            out[n] = "holdout" if i < k else "tune"
    return out


# ============================================================================ variants
# The third batch (variants.py): every run above again with seed + 20 and, where the fault
# allows, another format; half of it is the second never-tuned split, ``holdout2``.
import variants  # noqa: E402

VARIANTS: list[str] = []
variants.extend(SPECS, add, VARIANTS)

# The fourth batch (variants.extend_severity): every original fault run again with its
# severity changed (milder or harsher), seed + 40; all tune.
SEVERITY: list[str] = []
variants.extend_severity(SPECS, add, SEVERITY)

# The fifth batch (variants.extend_healthy): every original healthy run four times more, seeds
# +60, +80, +100 and +120, formats redrawn; all tune.
HEALTHY: list[str] = []
variants.extend_healthy(SPECS, add, HEALTHY)
