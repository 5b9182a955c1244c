"""Build the independent trainmedic evaluation corpus.

    .venv/bin/python benchmarks/indep/make_runs.py --jobs 2

Trains every run declared below (tiny models, synthetic data made in code),
writes its logs under benchmarks/indep/runs/<name>/ in the run's format, and
writes benchmarks/indep/labels.json with labels computed from the logged
numbers (see indep_label.py and README.md).
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import re
import shutil
import sys
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

RUNS_DIR = os.path.join(HERE, "runs")
LABELS = os.path.join(HERE, "labels.json")

SPECS = []


def R(name, family, fault, fmt, **kw):
    SPECS.append(dict(name=name, family=family, fault=fault, format=fmt, **kw))


def H(name, family, fmt, **kw):
    R(name, family, None, fmt, **kw)


# ============================================================================ healthy runs
H("h_mlp_adam_hf", "mlp", "hf", steps=300, bs=32, lr=1e-3, eval_every=50, log="gn", desc="MLP on Gaussian blobs, Adam, constant lr")
H("h_mlp_mom_stepdecay_kcsv", "mlp", "keras_csv", n_train=1280, bs=64, epochs=30, opt="momentum", lr=0.02, sched="step", step_epochs=10, gamma=0.3, eval_every="epoch", log="acc lr", sep=0.8, desc="MLP, SGD momentum, StepLR every 10 epochs")
H("h_cnn_adam_cos_tb", "cnn", "tb", steps=400, bs=32, lr=3e-3, sched="cosine", eval_every=100, log="lr gn", desc="CNN+BN, Adam, cosine")
H("h_cnn_nest_onecycle_light", "cnn", "lightning", n_train=1920, bs=32, steps=480, opt="nesterov", lr=0.05, sched="onecycle", log_every=20, eval_every="epoch", log="lr acc", desc="CNN+BN, SGD nesterov, OneCycle")
H("h_resnet_mom_cos_wandb", "resnet", "wandb", steps=300, bs=32, opt="momentum", lr=0.05, sched="cosine", eval_every=50, log="lr gn time", var=0, desc="tiny ResNet, SGD momentum, cosine")
H("h_resnet_adamw_wucos_mlflow", "resnet", "mlflow", steps=250, bs=32, opt="adamw", lr=3e-3, sched="warmup_cosine", warmup=25, log_every=5, eval_every=50, log="lr", desc="tiny ResNet, AdamW, warm-up + cosine")
H("h_tfm_adamw_wucos_nanogpt", "tfm", "con_nanogpt", steps=400, bs=32, opt="adamw", lr=3e-3, sched="warmup_cosine", warmup=40, eval_every=100, desc="char transformer LM, AdamW, warm-up + cosine")
H("h_tfm_adam_jsonl", "tfm", "jsonl", steps=300, bs=32, lr=2e-3, eval_every=50, log="lr gn time", var=1, desc="char transformer LM, Adam constant")
H("h_lstm_adam_onecycle_wandb", "lstm", "wandb", steps=400, bs=32, lr=1e-2, sched="onecycle", eval_every=50, log="lr", var=1, desc="LSTM next-value regression on noisy sines, OneCycle")
H("h_lstm_rms_plateau_light", "lstm", "lightning", n_train=1200, bs=40, steps=450, opt="rmsprop", lr=3e-3, sched="plateau", log_every=10, eval_every="epoch", log="lr", desc="LSTM regression, RMSprop, ReduceLROnPlateau")
H("h_gru_rms_step_csv", "gru", "csv", n_train=1600, steps=300, bs=32, opt="rmsprop", lr=3e-3, sched="step", step_epochs=2, gamma=0.5, eval_every=50, log="lr time", var=1, desc="GRU frequency classifier, RMSprop, StepLR")
H("h_gru_adam_conepoch", "gru", "con_epoch", steps=300, bs=32, lr=2e-3, eval_every=100, log="lr time", desc="GRU classifier, Adam")
H("h_ae_adam_linear_mlflow", "ae", "mlflow", steps=500, bs=64, lr=2e-3, sched="linear", eval_every=100, log="lr", var=1, desc="MLP autoencoder (MSE) on 16x16 images, linear decay")
H("h_ae_adagrad_kjson", "ae", "keras_json", n_train=1000, bs=50, epochs=25, opt="adagrad", lr=0.05, eval_every="epoch", desc="autoencoder, Adagrad")
H("h_linreg_sgd_csv", "linreg", "csv", steps=200, bs=32, opt="sgd", lr=0.05, log_every=5, eval_every=25, log="lr", var=2, desc="linear regression, plain SGD")
H("h_logreg_adagrad_kjson", "logreg", "keras_json", n_train=1000, bs=50, epochs=20, opt="adagrad", lr=0.1, eval_every="epoch", log="acc", desc="logistic regression, Adagrad")
H("h_conv1d_adam_step_jsonl", "conv1d", "jsonl", n_train=1600, steps=400, bs=32, lr=3e-3, sched="step", step_epochs=4, gamma=0.3, eval_every=100, log="lr", var=2, desc="1-D conv net on waveforms, StepLR")
H("h_conv1d_mom_cos_coniter", "conv1d", "con_iter", steps=300, bs=32, opt="momentum", lr=0.03, sched="cosine", eval_every=50, desc="1-D conv net, SGD momentum, cosine")
H("h_vit_adamw_wucos_hf", "vit", "hf", steps=300, bs=32, opt="adamw", lr=2e-3, sched="warmup_cosine", warmup=30, eval_every=50, log="gn", var=1, desc="tiny ViT, AdamW warm-up + cosine (HF Trainer layout)")
H("h_vit_adam_onecycle_tb", "vit", "tb", steps=300, bs=32, lr=3e-3, sched="onecycle", log="lr", var=1, desc="tiny ViT, OneCycle")
H("h_gan_ring", "gan", "con_gan", steps=1500, bs=64, lr=2e-4, log_every=50, tolerate=["flat_loss", "plateau", "oscillation"], desc="2-D GAN on a ring of Gaussians; D/G losses hover near equilibrium (a GAN's losses are not expected to fall)")
H("h_mlp_bs4_noisy_jsonl", "mlp", "jsonl", steps=1000, bs=4, opt="sgd", lr=0.01, log_every=1, log="lr", desc="batch size 4, every step logged: noisy but healthy")
H("h_cnn_bs8_noisy_coniter", "cnn", "con_iter", steps=600, bs=8, lr=1e-3, log_every=1, desc="batch size 8, every step logged")
H("h_tfm_bs8_noisy_wandb", "tfm", "wandb", steps=400, bs=8, lr=2e-3, log_every=1, log="lr", var=2, desc="char LM, batch 8, every step logged")
H("h_mlp_warmup_tb", "mlp", "tb", steps=400, bs=32, opt="adamw", lr=3e-3, sched="warmup_linear", warmup=60, log="lr", var=2, desc="MLP, linear warm-up then linear decay")
H("h_cnn_stepdecay_conepoch", "cnn", "con_epoch", n_train=1280, steps=600, bs=32, opt="momentum", lr=0.05, sched="step", step_epochs=5, gamma=0.2, noise=0.8, log="lr", desc="CNN, SGD step decay every 5 epochs (loss drops at each decay)")
H("h_resnet_stepdecay_jsonl", "resnet", "jsonl", n_train=960, steps=300, bs=32, opt="momentum", lr=0.05, sched="step", step_epochs=3, gamma=0.2, noise=0.8, log="lr time", var=0, desc="tiny ResNet, step decay")
H("h_mlp_finetune_hf", "mlp", "hf", pretrain_steps=12, steps=200, bs=32, lr=1e-3, eval_every=50, log="gn", desc="fine-tune: starts from a trained model, loss starts low")
H("h_tfm_finetune_nanogpt", "tfm", "con_nanogpt", pretrain_steps=150, steps=200, bs=32, lr=1e-3, eval_every=50, log_every=5, desc="char LM fine-tune at low lr: starts low, small further gains")
H("h_cnn_finetune_kcsv", "cnn", "keras_csv", pretrain_steps=200, n_train=960, bs=32, epochs=10, lr=3e-4, eval_every="epoch", log="acc", desc="CNN fine-tune, starts low")
H("h_logreg_nearzero_csv", "logreg", "csv", steps=400, bs=32, lr=0.05, sep=4.0, log="lr", var=3, desc="separable data: loss goes to ~0")
H("h_cnn_nearzero_tb", "cnn", "tb", steps=400, bs=32, lr=3e-3, noise=0.1, C=3, log="lr", var=0, desc="easy images: loss goes to ~0")
H("h_mlp_nearzero_wandb", "mlp", "wandb", steps=400, bs=32, lr=3e-3, sep=5.0, log="lr", var=0, desc="well separated blobs: loss to ~0")
H("h_mlp_short40_jsonl", "mlp", "jsonl", steps=40, bs=32, lr=5e-3, log_every=1, log="lr", var=0, desc="short run, 40 steps")
H("h_conv1d_short60_tqdm", "conv1d", "con_tqdm", steps=60, bs=32, lr=5e-3, log_every=2, desc="short run, 60 steps")
H("h_linreg_short50_mlflow", "linreg", "mlflow", steps=50, bs=16, opt="sgd", lr=0.05, log_every=1, var=0, desc="short run, 50 steps")
H("h_vit_short80_light", "vit", "lightning", n_train=640, steps=80, bs=32, lr=1e-3, log_every=5, eval_every="epoch", desc="short run, 80 steps")
H("h_mlp_2rank_jsonl", "mlp", "jsonl", ranks=2, steps=300, bs=32, lr=1e-3, log_every=5, log="time", var=0, desc="2 simulated DDP ranks, equal speed")
H("h_cnn_2rank_csv", "cnn", "csv", ranks=2, steps=250, bs=32, lr=2e-3, log_every=5, log="time", var=1, desc="2 simulated DDP ranks, equal speed")
H("h_mlp_amp_jsonl", "mlp", "jsonl", amp=dict(init=2.0 ** 16, interval=50), steps=500, bs=32, lr=1e-3, log_every=5, log="scale", var=2, desc="simulated fp16 dynamic loss scaling: scale backs off and grows back")
H("h_tfm_amp_mmengine", "tfm", "con_mmengine", amp=dict(init=2.0 ** 16, interval=40), steps=300, bs=32, lr=2e-3, log="scale", desc="char LM with simulated dynamic loss scaling")
H("h_mlp_resume_clean_jsonl", "mlp", "jsonl", resume=dict(ckpt_every=100, crash_at=300, gap_s=45.0), steps=500, bs=32, lr=1e-3, log_every=10, log="lr", var=1, tolerate=["step_time_outliers"], desc="pre-empted at a checkpoint step and resumed: no step repeated")
H("h_cnn_resume_clean_tb", "cnn", "tb", resume=dict(ckpt_every=50, crash_at=200, gap_s=30.0), steps=350, bs=32, lr=2e-3, log_every=10, var=0, tolerate=["step_time_outliers"], desc="resumed at a checkpoint step, second event file, steps contiguous")
H("h_cnn_timing_mmengine", "cnn", "con_mmengine", steps=300, bs=32, lr=2e-3, log="mem", desc="time/data_time/memory logged, nothing wrong")
H("h_mlp_mem_csv", "mlp", "csv", steps=400, bs=64, lr=1e-3, eval_every=100, log="time mem lr", var=0, desc="time and memory logged, flat memory")
H("h_resnet_sysmem_mlflow", "resnet", "mlflow", steps=250, bs=32, lr=2e-3, eval_every=50, log="mem time", var=0, desc="system memory logged, flat")
H("h_mlp_plateau_kcsv", "mlp", "keras_csv", n_train=1000, bs=50, epochs=30, lr=3e-3, sched="plateau", patience=2, eval_every="epoch", log="lr acc", sep=0.8, desc="ReduceLROnPlateau, learning_rate column")
H("h_lstm_rms_tb", "lstm", "tb", steps=400, bs=32, opt="rmsprop", lr=2e-3, eval_every=100, log="lr gn", var=2, desc="LSTM regression, RMSprop")
H("h_cnn_pytex", "cnn", "con_pytex", n_train=1920, bs=32, epochs=5, opt="momentum", lr=0.02, log_every=10, eval_every="epoch", desc="classic examples/mnist-style console")
H("h_gru_pytex", "gru", "con_pytex", n_train=1280, bs=32, epochs=8, lr=5e-3, log_every=10, eval_every="epoch", desc="GRU, examples-style console")
H("h_tfm_tqdm", "tfm", "con_tqdm", steps=300, bs=32, lr=2e-3, log_every=5, eval_every=100, log="lr", desc="tqdm-style bar")
H("h_linreg_coniter", "linreg", "con_iter", steps=300, bs=32, opt="nesterov", lr=0.01, eval_every=50, log="lr", desc="linear regression, nesterov")
H("h_tfm_hf_logging5", "tfm", "hf", steps=300, bs=32, opt="adamw", lr=2e-3, sched="linear", log_every=5, eval_every=50, log="gn", var=0, first_step=True, desc="char LM in HF Trainer layout, logging_steps=5")
H("h_ae_wandb", "ae", "wandb", steps=400, bs=64, lr=2e-3, sched="cosine", eval_every=50, log="lr time", var=2, desc="autoencoder, cosine")
H("h_mlp_light_acc", "mlp", "lightning", n_train=1600, bs=32, steps=500, lr=1e-3, log_every=10, eval_every="epoch", log="acc", var=1, desc="Lightning CSV with accuracy")
H("h_conv1d_kjson", "conv1d", "keras_json", n_train=960, bs=32, epochs=15, lr=3e-3, eval_every="epoch", log="acc", desc="1-D conv net, Keras-style history")
H("h_gru_jsonl_timing", "gru", "jsonl", steps=250, bs=32, lr=5e-3, log_every=5, log="time data", var=2, desc="GRU with step/data time logged")
H("h_lstm_conepoch_mem", "lstm", "con_epoch", steps=400, bs=32, lr=5e-3, log="lr mem", desc="LSTM with memory logged")
H("h_vit_mmengine", "vit", "con_mmengine", steps=300, bs=32, opt="adamw", lr=2e-3, sched="cosine", log="gn", desc="ViT, mmengine-style log")
H("h_lstm_clip_csv", "lstm", "csv", steps=400, bs=32, opt="adam", lr=3e-3, clip=1.0, log="gn lr", var=2, desc="LSTM regression with grad clipping (logged norm is pre-clip)")
H("h_logreg_mlflow", "logreg", "mlflow", steps=300, bs=32, opt="sgd", lr=0.1, eval_every=50, log="lr gn", var=1, desc="logistic regression, SGD")
H("h_ae_tqdm", "ae", "con_tqdm", steps=300, bs=64, opt="rmsprop", lr=1e-3, log_every=10, desc="autoencoder, RMSprop")

# ============================================================================ faulty runs
# --- lr far too high
R("lrhigh_mlp_sgd_tb", "mlp", "lr_too_high", "tb", steps=300, bs=32, opt="sgd", lr=3.0, eval_every=50, log="lr gn", desc="SGD lr=8 on an MLP")
R("lrhigh_cnn_sgd_hf", "cnn", "lr_too_high", "hf", steps=300, bs=32, opt="sgd", lr=20.0, eval_every=50, log="gn", first_step=True, desc="SGD lr=20 on a BN CNN")
R("lrhigh_tfm_mom_nanogpt", "tfm", "lr_too_high", "con_nanogpt", steps=300, bs=32, opt="momentum", lr=1.0, eval_every=50, log_every=5, desc="SGD momentum lr=1 on a char transformer")
R("lrhigh_linreg_sgd_csv", "linreg", "lr_too_high", "csv", steps=200, bs=32, opt="sgd", lr=0.5, feat_range=6.0, log_every=2, log="lr", var=3, desc="SGD lr=0.5, features up to 6x unit scale")
R("lrhigh_gan", "gan", "lr_too_high", "con_gan", steps=800, bs=64, lr=0.01, lr_d=0.1, manual_bce=True, log_every=10, desc="GAN, discriminator lr=0.1, hand-written BCE")
R("lrhigh_lstm_sgd_wandb", "lstm", "lr_too_high", "wandb", steps=300, bs=32, opt="sgd", lr=1.5, log_every=5, eval_every=50, log="lr gn", var=0, desc="SGD lr=1.5 on an LSTM")
R("lrhigh_conv1d_mom_kcsv", "conv1d", "lr_too_high", "keras_csv", n_train=960, bs=32, epochs=15, opt="momentum", lr=3.0, ref=dict(lr=0.05), eval_every="epoch", log="acc", desc="SGD momentum lr=3: blows up in epoch 0, then stuck at chance")
# --- lr far too low
R("lrlow_mlp_kjson", "mlp", "lr_too_low", "keras_json", n_train=1000, bs=50, epochs=20, opt="sgd", lr=1e-5, eval_every="epoch", log="acc", desc="SGD lr=1e-5")
R("lrlow_resnet_light", "resnet", "lr_too_low", "lightning", n_train=960, steps=300, bs=32, opt="sgd", lr=1e-5, log_every=10, eval_every="epoch", desc="SGD lr=1e-5 on ResNet")
R("lrlow_vit_jsonl", "vit", "lr_too_low", "jsonl", steps=300, bs=32, lr=1e-7, log="lr", var=0, desc="Adam lr=1e-7")
R("lrlow_gru_conepoch", "gru", "lr_too_low", "con_epoch", steps=300, bs=32, opt="adagrad", lr=1e-5, log="lr time", desc="Adagrad lr=1e-5")
# --- NaN from log(0)
R("nanlog_logreg_jsonl", "logreg", "nan_log0", "jsonl", steps=300, bs=32, opt="sgd", lr=2.0, sep=3.0, manual_bce=True, log_every=5, log="lr gn", var=0, desc="hand-written BCE log(sigmoid) / log(1-sigmoid) saturates to log(0)")
R("nanlog_mlp_coniter", "mlp", "nan_log0", "con_iter", steps=500, bs=32, lr=0.05, sep=3.0, label_noise=0.05, manual_ce=True, desc="hand-written CE -log(softmax[y]) on noisy labels; softmax underflows to 0")
R("nanlog_mlpw_mlflow", "mlp", "nan_log0", "mlflow", steps=500, bs=32, lr=0.1, sep=3.0, width=128, label_noise=0.05, manual_ce=True, log="gn", var=0, desc="hand-written CE -log(softmax[y]) on a wide MLP, 5% wrong labels")
# --- NaN from dividing by a zero norm
R("nannorm_mlp_wandb", "mlp", "nan_zero_norm", "wandb", steps=400, bs=32, lr=2e-3, l2norm=True, zero_rows=1, eval_every=50, log="gn lr", var=1, desc="x / x.norm() without eps; one all-zero feature row in the data")
R("nannorm_conv1d_light", "conv1d", "nan_zero_norm", "lightning", n_train=2000, steps=500, bs=32, lr=3e-3, standardize=True, flat=0.0005, log_every=5, eval_every="epoch", desc="(x-mean)/std without eps; one flat (dead-sensor) signal")
R("nannorm_ae_csv", "ae", "nan_zero_norm", "csv", steps=400, bs=32, lr=2e-3, l2norm=True, blank=0.0005, log_every=5, log="lr", var=2, desc="image / image.norm() without eps; one blank image")
# --- poisoned batches
R("poison_cnn_tb", "cnn", "poisoned_batch", "tb", steps=400, bs=32, lr=2e-3, log_every=5, fp=dict(steps=[150, 300], what="labels"), log="gn", var=1, desc="two batches from a shard with scrambled labels")
R("poison_mlp_csv", "mlp", "poisoned_batch", "csv", steps=500, bs=32, opt="momentum", lr=0.01, clip=1.0, log_every=5, fp=dict(steps=[200, 201, 420], what="labels"), log="gn", var=0, desc="corrupted batches with scrambled labels (clipping on)")
R("poison_tfm_nanogpt", "tfm", "poisoned_batch", "con_nanogpt", steps=400, bs=32, lr=2e-3, log_every=1, fp=dict(steps=[180, 300], what="tokens"), desc="two batches with garbage targets")
R("poison_lstm_mlflow", "lstm", "poisoned_batch", "mlflow", steps=400, bs=32, lr=3e-3, log_every=2, fp=dict(steps=[160, 330], what="targets", factor=1000.0), var=1, desc="targets x1000 in two batches")
# --- exploding gradients in an RNN without clipping
R("explode_rnn_jsonl", "rnn", "rnn_explode", "jsonl", steps=400, bs=32, opt="sgd", lr=0.02, hh_gain=1.2, log_every=5, log="gn", var=0, desc="ReLU Elman RNN, no clipping, recurrent init gain 1.2")
R("explode_rnn_wandb", "rnn", "rnn_explode", "wandb", steps=400, bs=32, opt="momentum", lr=0.03, hh_gain=1.3, log_every=5, log="gn lr", var=1, desc="ReLU RNN, momentum, no clipping")
R("explode_rnn_tb", "rnn", "rnn_explode", "tb", steps=400, bs=32, opt="sgd", lr=0.03, hh_gain=1.2, L=64, log_every=5, log="gn", var=2, desc="ReLU RNN on length-64 sequences, no clipping")
# --- vanishing gradients in a deep sigmoid net
R("vanish_mlp_light", "mlp", "vanishing_sigmoid", "lightning", n_train=1600, steps=300, bs=32, opt="sgd", lr=0.05, depth=10, act="sigmoid", log_every=10, eval_every="epoch", log="gn layer_gn", desc="10-layer sigmoid MLP; per-layer grad norms logged (Lightning grad_norm utility names)")
R("vanish_mlp_mmengine", "mlp", "vanishing_sigmoid", "con_mmengine", steps=300, bs=32, opt="sgd", lr=0.05, depth=8, act="sigmoid", log="gn", desc="8-layer sigmoid MLP, only the global grad norm logged")
R("vanish_mlp_tb", "mlp", "vanishing_sigmoid", "tb", steps=300, bs=32, opt="sgd", lr=0.1, depth=12, act="sigmoid", log="gn layer_gn", var=0, desc="12-layer sigmoid MLP, per-layer grad norms logged")
R("vanish_mlp_kjson", "mlp", "vanishing_sigmoid", "keras_json", n_train=1000, bs=50, epochs=20, opt="sgd", lr=0.05, depth=10, act="sigmoid", eval_every="epoch", desc="10-layer sigmoid MLP, per-epoch history (no grad norm)")
# --- dead ReLUs
R("dead_mlp_jsonl", "mlp", "dead_relu", "jsonl", steps=300, bs=32, lr=1e-3, dead_bias=-6.0, log="gn", var=1, desc="hidden biases initialised to -6")
R("dead_conv1d_conepoch", "conv1d", "dead_relu", "con_epoch", steps=300, bs=32, lr=1e-3, dead_bias=-8.0, log="lr", desc="conv biases initialised to -8")
R("dead_ae_kcsv", "ae", "dead_relu", "keras_csv", n_train=1000, bs=50, epochs=20, lr=2e-3, dead_bias=-5.0, eval_every="epoch", ref=True, desc="autoencoder hidden biases -5: decoder can only learn the mean image")
# --- forgot optimizer.zero_grad()
R("nozero_mlp_csv", "mlp", "no_zero_grad", "csv", steps=300, bs=32, opt="sgd", lr=0.05, log_every=5, log="gn", var=0, desc="optimizer.zero_grad() missing, SGD")
R("nozero_cnn_light", "cnn", "no_zero_grad", "lightning", n_train=960, steps=300, bs=32, lr=2e-3, log_every=5, eval_every="epoch", desc="zero_grad missing, Adam")
R("nozero_linreg_tqdm", "linreg", "no_zero_grad", "con_tqdm", steps=300, bs=32, opt="momentum", lr=0.005, log_every=5, desc="zero_grad missing, SGD momentum")
# --- softmax before CrossEntropyLoss
R("softmax_mlp_hf", "mlp", "softmax_before_ce", "hf", steps=400, bs=32, lr=1e-3, C=10, sep=1.5, eval_every=100, log="gn", ref=True, desc="model output softmaxed, then nn.CrossEntropyLoss")
R("softmax_cnn_kjson", "cnn", "softmax_before_ce", "keras_json", n_train=960, bs=32, epochs=15, opt="momentum", lr=0.05, C=6, eval_every="epoch", log="acc", ref=True, desc="softmax before CE, CNN 6 classes")
R("softmax_vit_wandb", "vit", "softmax_before_ce", "wandb", steps=300, bs=32, lr=2e-3, eval_every=50, var=2, ref=True, desc="softmax before CE, ViT")
# --- random labels
R("randlab_mlp_kcsv", "mlp", "random_labels", "keras_csv", n_train=3000, bs=100, epochs=20, lr=1e-3, width=32, eval_every="epoch", log="acc", desc="labels permuted independently of inputs")
R("randlab_gru_pytex", "gru", "random_labels", "con_pytex", n_train=1280, bs=32, epochs=6, lr=3e-3, log_every=10, eval_every="epoch", desc="labels permuted")
R("randlab_cnn_mlflow", "cnn", "random_labels", "mlflow", steps=400, bs=32, lr=2e-3, eval_every=50, var=1, desc="labels permuted")
# --- class-sorted, unshuffled data
R("sorted_cnn_jsonl", "cnn", "unshuffled_sorted", "jsonl", n_train=1600, steps=400, bs=32, opt="sgd", lr=0.05, noise=1.0, log_every=1, var=2, desc="shuffle=False on a class-sorted dataset")
R("sorted_conv1d_tb", "conv1d", "unshuffled_sorted", "tb", n_train=1280, steps=400, bs=32, opt="momentum", lr=0.05, log_every=2, log="lr", var=0, desc="class-sorted, unshuffled")
R("sorted_logreg_coniter", "logreg", "unshuffled_sorted", "con_iter", n_train=1600, steps=300, bs=32, opt="sgd", lr=0.2, log_every=2, desc="class-sorted, unshuffled")
# --- validation problems
R("valshift_mlp_light", "mlp", "val_shift", "lightning", n_train=1600, steps=500, bs=32, lr=2e-3, log_every=10, eval_every="epoch", desc="validation blobs from a shifted distribution")
R("valshift_cnn_hf", "cnn", "val_shift", "hf", steps=400, bs=32, lr=2e-3, eval_every=40, desc="validation images with inverted contrast and other frequencies")
R("valleak_mlp_kcsv", "mlp", "val_leak", "keras_csv", n_train=1000, bs=50, epochs=20, lr=2e-3, eval_every="epoch", log="acc", desc="validation split carved out of the training set")
R("valleak_gru_coniter", "gru", "val_leak", "con_iter", steps=300, bs=32, lr=5e-3, eval_every=50, desc="validation = training samples")
# --- overfitting on a tiny train set
R("overfit_mlp_kcsv", "mlp", "overfit_tiny", "keras_csv", n_train=64, bs=16, epochs=60, lr=3e-3, width=256, sep=0.8, eval_every="epoch", log="acc", desc="64 training samples, wide MLP")
R("overfit_mlp40_hf", "mlp", "overfit_tiny", "hf", n_train=40, bs=8, steps=400, lr=3e-3, width=256, sep=0.7, eval_every=20, log="gn", desc="40 training samples, wide MLP")
R("overfit_tfm_nanogpt", "tfm", "overfit_tiny", "con_nanogpt", train_chars=300, bs=16, steps=500, lr=3e-3, eval_every=25, desc="char LM trained on 300 characters")
R("overfit_tfm200_wandb", "tfm", "overfit_tiny", "wandb", train_chars=200, bs=16, steps=400, lr=3e-3, eval_every=20, log="lr", var=0, desc="char LM trained on 200 characters")
# --- weight decay far too high
R("wd_mlp_mlflow", "mlp", "wd_too_high", "mlflow", steps=400, bs=32, opt="adamw", lr=2e-3, wd=20.0, log="lr", ref=dict(wd=0.01), var=0, desc="AdamW weight_decay=20")
R("wd_resnet_conepoch", "resnet", "wd_too_high", "con_epoch", steps=300, bs=32, opt="momentum", lr=0.05, wd=0.3, log="lr", ref=dict(wd=0.0), desc="SGD weight_decay=0.3")
R("wd_linreg_kjson", "linreg", "wd_too_high", "keras_json", n_train=1000, bs=50, epochs=20, opt="sgd", lr=0.05, wd=2.0, eval_every="epoch", ref=dict(wd=0.0), desc="SGD weight_decay=2 on linear regression")
# --- frozen layers
R("frozen_cnn_tb", "cnn", "frozen", "tb", steps=400, bs=32, lr=3e-3, eval_every=100, ref=True, var=2, desc="everything frozen, only the head trains")
R("frozen_tfm_wandb", "tfm", "frozen", "wandb", steps=300, bs=32, lr=3e-3, eval_every=50, ref=True, var=1, desc="embeddings+blocks frozen, only lm head trains")
# --- BatchNorm left in eval mode (raw pixel inputs rely on BN)
R("bneval_cnn_light", "cnn", "bn_eval", "lightning", n_train=960, steps=300, bs=32, opt="momentum", lr=0.05, raw_pixels=True, log_every=5, eval_every="epoch", ref=True, desc="model.eval() from a pre-training sanity eval never undone; inputs are raw 0-255 pixels")
R("bneval_resnet_pytex", "resnet", "bn_eval", "con_pytex", n_train=960, bs=32, epochs=8, opt="momentum", lr=0.02, raw_pixels=True, log_every=5, eval_every="epoch", ref=True, desc="BN in eval mode, raw pixels")
# --- per-epoch scheduler stepped every batch
R("schedbatch_mlp_hf", "mlp", "sched_per_batch", "hf", steps=400, bs=32, opt="momentum", lr=0.05, sched="step", step_epochs=1, gamma=0.5, ref=True, log="gn", desc="StepLR(step_size=1 epoch, gamma=0.5) stepped every batch")
R("schedbatch_cnn_csv", "cnn", "sched_per_batch", "csv", steps=400, bs=32, opt="momentum", lr=0.05, sched="exp", gamma=0.9, log="lr", ref=True, var=1, desc="ExponentialLR(0.9) meant per epoch, stepped per batch")
R("schedbatch_gru_tqdm", "gru", "sched_per_batch", "con_tqdm", steps=300, bs=32, lr=5e-3, sched="step", step_epochs=2, gamma=0.5, ref=True, desc="StepLR per batch, lr not logged")
# --- lr schedule that increases
R("schedup_tfm_jsonl", "tfm", "sched_increasing", "jsonl", steps=300, bs=32, lr=3e-3, sched="warmup_in_samples", warmup_samples=9600, log="lr", var=2, desc="warm-up length given in samples (9600) but counted in steps: lr rises all run")
R("schedup_mlp_mlflow", "mlp", "sched_increasing", "mlflow", steps=400, bs=32, opt="momentum", lr=0.1, sched="cosine_signbug", log="lr", var=1, desc="cosine with the sign flipped: lr rises from 2% to 100%")
R("schedup_conv1d_tb", "conv1d", "sched_increasing", "tb", steps=400, bs=32, opt="momentum", lr=0.05, sched="linear_decay_signbug", log="lr", var=1, desc="linear 'decay' 1+2t/T: lr triples")
# --- warm-up that diverges
R("warmdiv_tfm_hf", "tfm", "warmup_diverge", "hf", steps=300, bs=32, opt="momentum", lr=3.0, sched="warmup_cosine", warmup=100, log="gn", eval_every=50, desc="warm-up to SGD-momentum peak lr 3")
R("warmdiv_mlp_conepoch", "mlp", "warmup_diverge", "con_epoch", steps=400, bs=32, lr=0.5, sched="warmup_const", warmup=100, log="lr", desc="warm-up to Adam lr 0.5, then constant")
R("warmdiv_mlp_wandb", "mlp", "warmup_diverge", "wandb", steps=300, bs=32, opt="sgd", lr=3.0, sched="warmup_const", warmup=100, log="lr gn", var=1, desc="warm-up to SGD lr 3")
# --- fp16 loss-scale collapse (simulated dynamic loss scaler)
R("lscale_mlp_jsonl", "mlp", "loss_scale_collapse", "jsonl", amp=dict(init=2.0 ** 16, interval=100), steps=400, bs=32, opt="sgd", lr=1.5, log_every=5, log="scale gn", var=0, desc="fp16-style scaler; lr too high makes grads grow, scaler keeps backing off")
R("lscale_linreg_mmengine", "linreg", "loss_scale_collapse", "con_mmengine", amp=dict(init=2.0 ** 16, interval=50), steps=300, bs=32, opt="sgd", lr=0.06, feat_range=6.0, sched="warmup_const", warmup=100, log="scale gn", desc="scaler; warm-up takes SGD past its stability limit, grads grow, scale keeps halving")
R("lscale_lstm_wandb", "lstm", "loss_scale_collapse", "wandb", amp=dict(init=2.0 ** 16, interval=100), steps=300, bs=32, opt="sgd", lr=1.1, sched="warmup_const", warmup=150, log="scale lr", var=2, desc="scaler; LSTM warmed up to a too-high SGD lr")
# --- data loader becomes slow
R("slowload_cnn_mmengine", "cnn", "slow_loader", "con_mmengine", steps=400, bs=32, lr=2e-3, fp=dict(onset=200, sleep=0.02), log="mem", desc="loader sleeps 20 ms per batch from step 200")
R("slowload_mlp_csv", "mlp", "slow_loader", "csv", steps=500, bs=64, lr=1e-3, fp=dict(onset=260, sleep=0.012), log="time", var=1, desc="loader slow from step 260, only step time logged")
R("slowload_vit_wandb", "vit", "slow_loader", "wandb", steps=300, bs=32, lr=2e-3, fp=dict(onset=150, sleep=0.03), log="time data", var=0, desc="loader slow from step 150, data time logged")
R("slowload_gru_tb", "gru", "slow_loader", "tb", steps=300, bs=32, lr=5e-3, fp=dict(onset=120, sleep=0.03), log="time", var=0, desc="loader slow from step 120")
# --- input bound from the start (python per-sample augmentation in the main process)
R("inbound_cnn_jsonl", "cnn", "input_bound", "jsonl", steps=200, bs=32, lr=2e-3, fp=dict(sleep=0.015), log="time data", var=1, desc="loader always slow: data wait ~3x the compute")
R("inbound_resnet_mmengine", "resnet", "input_bound", "con_mmengine", steps=200, bs=32, lr=2e-3, aug_py=40, fp=dict(sleep=0.0), desc="per-sample python augmentation in the training process")
# --- periodic stalls
R("stall_mlp_jsonl", "mlp", "periodic_stall", "jsonl", steps=500, bs=32, lr=1e-3, log_every=5, fp=dict(period=50, stall=0.15), log="time", var=0, desc="synchronous checkpoint upload every 50 steps")
R("stall_tfm_nanogpt", "tfm", "periodic_stall", "con_nanogpt", steps=300, bs=32, lr=2e-3, log_every=10, fp=dict(period=40, stall=0.2), desc="stall every 40 iterations")
R("stall_cnn_mlflow", "cnn", "periodic_stall", "mlflow", steps=400, bs=32, lr=2e-3, log_every=10, fp=dict(period=50, stall=0.15), log="time", var=1, desc="stall every 50 steps")
# --- memory growth
R("leak_mlp_csv", "mlp", "memory_leak", "csv", steps=400, bs=32, lr=1e-3, width=256, fp=dict(monitor_bs=512), log="mem time", var=0, desc="monitor loss summed as a tensor with grad -> every graph kept")
R("leak_cnn_wandb", "cnn", "memory_leak", "wandb", steps=300, bs=32, lr=2e-3, fp=dict(monitor_bs=128), log="mem", var=2, desc="monitor loss accumulated with grad enabled")
R("leak_tfm_mlflow", "tfm", "memory_leak", "mlflow", steps=250, bs=32, lr=2e-3, fp=dict(monitor_bs=32), log="mem", var=0, desc="monitor loss accumulated with grad enabled, char LM")
# --- resumed run replaying steps
R("replay_mlp_jsonl", "mlp", "resume_replay", "jsonl", resume=dict(ckpt_every=100, crash_at=370, gap_s=60.0), steps=600, bs=32, lr=1e-3, log_every=10, log="lr", var=0, desc="pre-empted at 370, resumed from checkpoint 300: steps 301-370 logged twice")
R("replay_cnn_tb", "cnn", "resume_replay", "tb", resume=dict(ckpt_every=50, crash_at=240, gap_s=30.0), steps=400, bs=32, lr=2e-3, log_every=10, var=1, desc="resumed from step 200 after dying at 240; a second event file repeats steps 210-240")
R("replay_lstm_conepoch", "lstm", "resume_replay", "con_epoch", resume=dict(ckpt_every=100, crash_at=450, gap_s=40.0), steps=700, bs=32, lr=3e-3, log_every=10, log="lr", desc="resumed from 400 after dying at 450")
# --- straggler rank
R("strag_mlp_jsonl", "mlp", "straggler", "jsonl", ranks=2, steps=300, bs=32, lr=1e-3, log_every=5, fp=dict(sleep=0.004), log="time", var=1, desc="rank 1 on a throttled host (+4 ms per step)")
R("strag_cnn_csv", "cnn", "straggler", "csv", ranks=2, steps=250, bs=32, lr=2e-3, log_every=5, fp=dict(sleep=0.006), log="time data", var=0, desc="rank 1 slower (+6 ms)")
# --- NaN hidden by the logger
R("nanmask_mlp_hf", "mlp", "nan_filtered", "hf", steps=400, bs=32, lr=1e-3, fp=dict(steps=[230]), log="gn", eval_every=100, desc="a NaN record at step 230 poisons the weights; HF's logging_nan_inf_filter logs 0.0 for all-NaN windows")
R("nanmask_logreg_jsonl", "logreg", "nan_filtered", "jsonl", steps=300, bs=32, lr=0.1, opt="sgd", nan_guard=True, mask="drop", log_every=1, fp=dict(steps=[90, 150, 151, 220]), var=0, desc="NaN batches skipped by a guard and dropped from the log")
R("nanmask_cnn_csv", "cnn", "nan_filtered", "csv", steps=300, bs=32, lr=2e-3, nan_guard=True, mask="zero", log_every=1, fp=dict(steps=[120, 121, 200]), var=2, desc="NaN batches skipped, logged as 0 via nan_to_num")
# --- gradient accumulation not divided
R("accum_mlp_coniter", "mlp", "accum_undivided", "con_iter", steps=250, bs=16, accum=8, opt="sgd", lr=0.5, log_every=5, desc="8 micro-steps summed, not averaged (loss and grads x8)")
R("accum_cnn_light", "cnn", "accum_undivided", "lightning", n_train=1280, steps=300, bs=16, accum=4, opt="momentum", lr=0.05, log_every=5, eval_every="epoch", desc="4 micro-steps summed, not averaged")


def normalise(spec):
    s = dict(spec)
    s.setdefault("seed", zlib.crc32(s["name"].encode()) % 100000)
    s.setdefault("bs", 64)
    s.setdefault("lr", 1e-3)
    s.setdefault("opt", "adam")
    s.setdefault("log_every", 10)
    s["log"] = set(s.get("log", "").split())
    if s.get("fault") in ("slow_loader", "input_bound", "periodic_stall", "straggler") or s["format"] in ("con_mmengine",):
        s["log"] |= {"time"}
    if s["format"] == "con_mmengine":
        s["log"] |= {"data"}
    if "epochs" in s:
        s["steps"] = s["epochs"] * (s.get("n_train", 2000) // s["bs"]) // s.get("accum", 1)
    if s["family"] == "tfm" and s.get("fault") == "nan_log0":
        pass
    return s


def assign_splits(specs, by):
    """Greedy stratified A/B split, done after labelling: each run goes to the side that keeps
    its fault kind, labelled symptoms, format, family, healthy/faulty flag and the totals
    most balanced (rarest groups first, ties broken by a hash of the name)."""
    from collections import Counter, defaultdict

    keys_of = {}
    for s in specs:
        lab = by[s["name"]]["lab"]
        ks = [("fault", s["fault"] or "none"), ("format", s["format"]), ("family", s["family"]),
              ("healthy", not lab["faults"])]
        ks += [("sym", f["symptom"]) for f in lab["faults"]]
        keys_of[s["name"]] = ks
    freq = Counter(k for ks in keys_of.values() for k in ks)
    order = sorted(specs, key=lambda s: (min(freq[k] for k in keys_of[s["name"]] if k[0] in ("fault", "sym")),
                                         s["fault"] or "~", s["name"]))
    W = {"fault": 3, "sym": 3, "format": 3, "family": 2, "healthy": 2}
    cnt = defaultdict(lambda: [0, 0])
    tot = [0, 0]
    for s in order:
        ks = keys_of[s["name"]]
        costs = []
        for side in (0, 1):
            c = 0.0
            for k in ks:
                a, b = cnt[k]
                na, nb = (a + 1, b) if side == 0 else (a, b + 1)
                c += W[k[0]] * ((na - nb) ** 2 - (a - b) ** 2)
            ta, tb = (tot[0] + 1, tot[1]) if side == 0 else (tot[0], tot[1] + 1)
            c += 3 * ((ta - tb) ** 2 - (tot[0] - tot[1]) ** 2)
            costs.append(c)
        side = 0 if costs[0] < costs[1] else 1 if costs[1] < costs[0] else zlib.crc32(s["name"].encode()) % 2
        for k in ks:
            cnt[k][side] += 1
        tot[side] += 1
        s["split"] = "AB"[side]


def run_one(spec):
    import warnings

    import torch

    warnings.filterwarnings("ignore")

    torch.set_num_threads(1)
    from indep_formats import WRITERS
    from indep_label import label
    from indep_train import train

    from indep_label import RULES, TIMING

    t0 = time.time()
    out = os.path.join(RUNS_DIR, spec["name"])
    expected = set(sum(RULES[spec["fault"]], [])) if spec.get("fault") else set()
    for attempt in range(4):
        tr = train(spec)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        S = WRITERS[spec["format"]](spec, tr, out)
        if not (spec["log"] & {"time", "data"}) and spec["format"] != "con_nanogpt":
            break
        # wall-clock numbers depend on what else the machine runs; a timing symptom the run was
        # not built to have (another process stealing the CPU) -> train again, up to 3 times
        found = label(spec, S, tr, None)["found"]
        if not [c for c in found if c in TIMING and c not in expected]:
            break
        time.sleep(1.0)
    t_train = time.time() - t0
    ref = None
    if spec.get("ref"):
        rs = dict(spec)
        rs["fault"] = None  # the same run without the bug (plus any overrides that undo it)
        if isinstance(spec["ref"], dict):
            rs.update(spec["ref"])
        rtr = train(rs)
        ls = [r["loss"] for r in rtr["steps"]]
        k = max(3, len(ls) // 10)
        ref = float(sum(ls[-k:]) / k)
    lab = label(spec, S, tr, ref)
    return dict(name=spec["name"], S=S, lab=lab, t_train=t_train, t_total=time.time() - t0, ref=ref, attempts=attempt + 1,
                raw_nonfinite=next((r["step"] for r in tr["steps"] if r.get("nonfinite")), None),
                total=tr["total"])


def _jsonable(o):
    if isinstance(o, float):
        return o if math.isfinite(o) else str(o)
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    return o


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default=None, help="regex on run names (debug; labels.json is then not written)")
    ap.add_argument("--show", action="store_true", help="print measured symptoms per run")
    args = ap.parse_args()
    specs = [normalise(s) for s in SPECS]
    names = [s["name"] for s in specs]
    assert len(names) == len(set(names)), "duplicate run names"
    if args.only:
        specs = [s for s in specs if re.search(args.only, s["name"])]
    os.makedirs(RUNS_DIR, exist_ok=True)
    t0 = time.time()
    ctx = mp.get_context("fork")
    results = []
    with ctx.Pool(args.jobs, maxtasksperchild=1) as pool:
        for res in pool.imap_unordered(run_one, specs):
            results.append(res)
            lab = res["lab"]
            f = ",".join(f"{x['symptom']}@{x['onset_step']}" for x in lab["faults"]) or "-"
            o = lab.get("osc") or {}
            print(f"{res['name']:34s} {res['t_total']:5.1f}s faults={f} found={sorted(lab['found'])} extra={lab.get('extra')} osc={o.get('amp', 0):.3f}/{o.get('autocorr', 0):.2f}", flush=True)
            if args.show:
                print("    ", json.dumps(_jsonable({k: {kk: vv for kk, vv in v.items() if kk != 'spikes'} for k, v in lab["found"].items()}))[:1500])
    wall = time.time() - t0
    print(f"wall {wall:.1f}s, train time sum {sum(r['t_total'] for r in results):.1f}s")
    if args.only:
        return
    from indep_notes import build_labels

    by = {r["name"]: r for r in results}
    assign_splits(specs, by)
    labels = build_labels(specs, by)
    with open(LABELS, "w") as f:
        json.dump(labels, f, indent=1)
        f.write("\n")
    print("wrote", LABELS)


if __name__ == "__main__":
    main()
