"""Run specifications: ~118 runs (bugged and healthy) with fixed seeds."""
import zlib

FAM = {
    "mlp_reg": dict(opt="adam", lr=3e-3, bs=64, steps=600),
    "mlp_bin": dict(opt="adam", lr=3e-3, bs=64, steps=400, model_opts=dict(dropout=0.1)),
    "cnn_bn": dict(opt="momentum", lr=0.05, bs=64, steps=300),
    "resnet": dict(opt="adam", lr=2e-3, bs=32, steps=160),
    "gru_cls": dict(opt="adam", lr=3e-3, bs=64, steps=400),
    "lstm_cls": dict(opt="adam", lr=5e-3, bs=64, steps=400),
    "rnn_cls": dict(opt="momentum", lr=0.02, bs=64, steps=800, model_opts=dict(rec_gain=1.0, nonlin="relu"), data_opts=dict(seq_len=40)),
    "conv1d": dict(opt="adam", lr=3e-3, bs=64, steps=300),
    "autoenc": dict(opt="adam", lr=3e-3, bs=64, steps=600),
    "vae": dict(opt="adam", lr=2e-3, bs=64, steps=600),
    "tiny_lm": dict(opt="adamw", lr=3e-3, bs=32, steps=300, wd=0.01, sched="cosine", sched_args=dict(warmup=30)),
    "recsys": dict(opt="adam", lr=1e-2, bs=256, steps=800),
    "siamese": dict(opt="adam", lr=3e-3, bs=64, steps=500),
    "ddp2": dict(opt="momentum", lr=0.05, bs=128, steps=200, ranks=2, fmt="ranks"),
    "fp16_mlp": dict(opt="adam", lr=3e-3, bs=64, steps=600, fp16=True, growth_interval=100),
    "leaky_mlp": dict(opt="adam", lr=1e-3, bs=128, steps=600, model_opts=dict(hidden=512)),
    "deep_mlp": dict(opt="momentum", lr=0.02, bs=64, steps=500, layer_gn=True),
}
EPOCH_FMTS = ("keras_csv", "keras_console", "fastai")
SPE = {"recsys": 44, "ddp2": 16, "leaky_mlp": 16, "resnet": 64}

NANLIKE = ["divergence", "loss_spike", "nonfinite_grad", "exploding_gradients"]


def R(name, fam, fmt, bug="none", seed=None, **kw):
    s = dict(FAM[fam])
    s.update(name=name, family=fam, fmt=fmt, bug=bug, seed=seed if seed is not None else 11 + zlib.crc32(name.encode()) % 89,
             log_every=10, eval_every=100, ba={})
    s.update(kw)
    if fmt in EPOCH_FMTS:
        spe = SPE.get(fam, max(1, s.get("n_train", 2048) // s["bs"]))
        s["eval_every"] = spe
        s["steps"] = kw.get("epochs", 15) * spe
    return s


def build():
    S = []
    a = S.append
    # ------------------------------------------------------------ healthy
    a(R("h_mlpreg_hf", "mlp_reg", "hf", opt="adamw", wd=0.01, sched="cosine", sched_args=dict(warmup=50)))
    a(R("h_mlpreg_kerascsv", "mlp_reg", "keras_csv", epochs=25))
    a(R("h_mlpreg_nanogpt", "mlp_reg", "nanogpt", opt="momentum", lr=0.02, sched="step", sched_args=dict(step_size=200, gamma=0.3)))
    a(R("h_mlpreg_long_jsonl", "mlp_reg", "jsonl", steps=2000, log_every=1, eval_every=250, palette=5, lr=1e-3))
    a(R("h_mlpreg_fastai", "mlp_reg", "fastai", epochs=12, sched="onecycle"))
    a(R("h_mlpbin_lightning", "mlp_bin", "lightning", sched="onecycle", log_every=20))
    a(R("h_mlpbin_kerascon", "mlp_bin", "keras_console", opt="rmsprop", lr=1e-3, sched="plateau", epochs=20))
    a(R("h_mlpbin_logging", "mlp_bin", "logging", opt="lion", lr=3e-4, sched="cosine", log_every=25))
    a(R("h_mlpbin_smallbatch_logging", "mlp_bin", "logging", bs=8, lr=1e-3, steps=500, log_every=1, kv=("it", "train_loss", "lr", "gnorm", "dt"),
        tolerate=["oscillation"], why="batch size 8 logged every step: noisy but trending down"))
    a(R("h_mlpbin_tqdm", "mlp_bin", "tqdm", log_every=5, tq_lr=True))
    a(R("h_cnn_tb", "cnn_bn", "tb", sched="cosine", log_every=5))
    a(R("h_cnn_fastai", "cnn_bn", "fastai", opt="adam", lr=2e-3, sched="onecycle", epochs=8))
    a(R("h_cnn_wandb", "cnn_bn", "wandb", opt="adamw", lr=2e-3, sched="linear", sched_args=dict(warmup=30)))
    a(R("h_cnn_lightning", "cnn_bn", "lightning", log_every=10, sched="step", sched_args=dict(step_size=4, gamma=0.2, unit="epoch")))
    a(R("h_resnet_mmengine", "resnet", "mmengine", opt="momentum", lr=0.05, sched="step", sched_args=dict(step_size=2, gamma=0.3, unit="epoch"), log_every=10, eval_every=64))
    a(R("h_resnet_jsonl", "resnet", "jsonl", sched="cosine", palette=3, log_every=5, eval_every=40))
    a(R("h_gru_ignite", "gru_cls", "ignite", log_every=10))
    a(R("h_gru_csv", "gru_cls", "csv", opt="rmsprop", lr=1e-3, steps=300, clip=1.0, palette=1))
    a(R("h_gru_mmengine", "gru_cls", "mmengine", sched="linear", sched_args=dict(warmup=20), log_every=20))
    a(R("h_lstm_tqdm", "lstm_cls", "tqdm", log_every=10))
    a(R("h_lstm_mlflow", "lstm_cls", "mlflow", opt="adagrad", lr=0.05))
    a(R("h_lstm_kerascon_k3", "lstm_cls", "keras_console", variant="k3", epochs=10))
    a(R("h_conv1d_kerascsv", "conv1d", "keras_csv", epochs=10))
    a(R("h_conv1d_hf", "conv1d", "hf", opt="sgd", lr=0.1, sched="linear", log_every=10, eval_every=50))
    a(R("h_conv1d_plateau_csv", "conv1d", "csv", sched="plateau", sched_args=dict(patience=1), eval_every=30, palette=4))
    a(R("h_ae_wandb", "autoenc", "wandb", sched="cosine"))
    a(R("h_ae_logging", "autoenc", "logging", opt="momentum", lr=0.05, kv=("step", "recon_loss", "lr", "grad_norm", "iter_time")))
    a(R("h_ae_short_hf", "autoenc", "hf", steps=30, log_every=1, eval_every=10))
    a(R("h_vae_jsonl", "vae", "jsonl", palette=1))
    a(R("h_vae_mlflow", "vae", "mlflow", opt="adamw", wd=0.01, sched="warmup_const", sched_args=dict(warmup=50)))
    a(R("h_lm_nanogpt", "tiny_lm", "nanogpt", log_every=5, eval_every=50))
    a(R("h_lm_hf", "tiny_lm", "hf", sched="linear", sched_args=dict(warmup=30), log_every=10, eval_every=50))
    a(R("h_lm_wandb", "tiny_lm", "wandb", opt="lion", lr=1e-3, log_every=5, eval_every=50))
    a(R("h_lm_tqdm_clip", "tiny_lm", "tqdm", clip=1.0, log_every=1, eval_every=100))
    a(R("h_rec_csv", "recsys", "csv", palette=5))
    a(R("h_rec_tb", "recsys", "tb", opt="adagrad", lr=0.1))
    a(R("h_siam_jsonl", "siamese", "jsonl", palette=0))
    a(R("h_siam_mmengine", "siamese", "mmengine", opt="lion", lr=3e-4))
    a(R("h_siam_hf", "siamese", "hf", log_every=5, eval_every=50))
    a(R("h_ddp_jsonl", "ddp2", "ranks", rank_base="jsonl", palette=0))
    a(R("h_ddp_logging", "ddp2", "ranks", rank_base="logging"))
    a(R("h_fp16_wandb", "fp16_mlp", "wandb", steps=1200))
    a(R("h_fp16_tb", "fp16_mlp", "tb", steps=600, log_every=5))
    a(R("h_resume_ok_jsonl", "mlp_reg", "jsonl", ba=dict(ckpt_every=200, crash_at=400, resume_from=400), palette=1,
        why="crash at step 400 and resume from the checkpoint of step 400: steps continue without repetition"))
    a(R("h_resume_ok_logging", "gru_cls", "logging", ba=dict(ckpt_every=100, crash_at=200, resume_from=200)))
    a(R("h_deep_relu_tb", "deep_mlp", "tb", model_opts=dict(act="relu", depth=6), opt="adam", lr=1e-3))
    a(R("h_tanh_probe_jsonl", "mlp_reg", "jsonl", model_opts=dict(act="tanh"), probe_acts=True, palette=0))
    a(R("h_relu_probe_wandb", "mlp_reg", "wandb", probe_acts=True))
    a(R("h_mem_mlflow", "leaky_mlp", "mlflow"))
    a(R("h_loader_mmengine", "cnn_bn", "mmengine", ba=dict(sleep_ms=1), why="constant 1 ms loader latency, small vs compute"))

    # ------------------------------------------------------------ bugs
    nan_tol = NANLIKE
    a(R("b_lrhigh_nan_logging", "mlp_reg", "logging", "lr_too_high", opt="sgd", lr=1.5, log_every=2,
        expect=[("nonfinite_loss", "nonfinite")], tolerate=nan_tol))
    a(R("b_lrhigh_nan_wandb", "mlp_reg", "wandb", "lr_too_high", seed=5, opt="momentum", lr=1.0,
        expect=[("nonfinite_loss", "nonfinite")], tolerate=nan_tol))
    a(R("b_lrhigh_osc_jsonl", "mlp_bin", "jsonl", "lr_too_high", lr=0.5, log_every=5, palette=1,
        expect=[("oscillation", "fixed", dict(onset_step=None, onset_range=[5, 240]),
                 "logged loss 44.6 at x=5, then bounces 0.51..1.25 up to x~240, then sits at 0.69-0.70 (chance, val 0.693)")],
        tolerate=["loss_spike", "divergence", "plateau", "flat_loss"]))
    a(R("b_lrhigh_osc_kerascsv", "mlp_bin", "keras_csv", "lr_too_high", lr=0.5, epochs=20,
        expect=[("divergence", "fixed", dict(onset_step=6, onset_range=[6, 12]),
                 "epoch loss 17.1 at epoch 0, falls to 0.482 at epoch 5 (val 0.474, acc 0.81), rises again (1.26 at epoch 10) "
                 "and settles at chance 0.69-0.70 with accuracy ~0.5 from epoch 12")],
        tolerate=["loss_spike", "oscillation", "plateau", "overfitting", "flat_loss"]))
    a(R("b_lrlow_tb", "gru_cls", "tb", "lr_too_low", opt="sgd", lr=1e-4, expect=[("flat_loss", "flat")], tolerate=["plateau", "vanishing_gradients"]))
    a(R("b_lrlow_kerascsv", "conv1d", "keras_csv", "lr_too_low", opt="sgd", lr=2e-5, epochs=12, expect=[("flat_loss", "flat")], tolerate=["plateau"]))
    a(R("b_warmhot_hf", "mlp_reg", "hf", "warmup_too_hot", opt="rmsprop", lr=0.05, sched="cosine", sched_args=dict(warmup=80),
        expect=[("oscillation", "fixed", dict(onset_step=None, onset_range=[10, 200]),
                 "HF window-mean loss bounces during the hot warm-up: 1.03, 0.78, 1.14, 1.28, 0.63 ... 0.48 (x=100), 2.01 (x=120), "
                 "1.60 (x=160), 1.10 (x=190), then decreases smoothly to 0.03")], tolerate=["divergence", "loss_spike", "plateau"]))
    a(R("b_warmhot_jsonl", "autoenc", "jsonl", "warmup_too_hot", opt="rmsprop", lr=0.05, sched="linear", sched_args=dict(warmup=40), log_every=5,
        expect=[("loss_spike", "spikes", "loss", 3.0)], tolerate=["divergence", "oscillation", "plateau"]))
    a(R("b_schedbatch_hf", "resnet", "hf", "sched_per_batch", sched="step", sched_args=dict(step_size=2, gamma=0.5, unit="epoch"),
        ba=dict(sched_per_batch=True), log_every=5, eval_every=40, expect=[("lr_schedule_anomaly", "lr", "drop")], tolerate=["plateau", "flat_loss"]))
    a(R("b_schedbatch_mlflow", "mlp_reg", "mlflow", "sched_per_batch", opt="momentum", lr=0.02, sched="step",
        sched_args=dict(step_size=3, gamma=0.7, unit="epoch"), ba=dict(sched_per_batch=True),
        expect=[("lr_schedule_anomaly", "lr", "drop")], tolerate=["plateau", "flat_loss"]))
    a(R("b_schedup_wandb", "mlp_bin", "wandb", "sched_increasing", opt="sgd", lr=0.05, sched="exp", sched_args=dict(gamma=1.01),
        expect=[("lr_schedule_anomaly", "lr", "rise")], tolerate=["divergence", "nonfinite_loss", "oscillation", "loss_spike", "exploding_gradients"]))
    a(R("b_schedup_lightning", "gru_cls", "lightning", "sched_increasing", sched="exp", sched_args=dict(gamma=1.008), lr=1e-3,
        expect=[("lr_schedule_anomaly", "lr", "rise")], tolerate=["divergence", "nonfinite_loss", "oscillation", "loss_spike", "plateau"]))
    a(R("b_nozero_jsonl", "mlp_reg", "jsonl", "missing_zero_grad", opt="momentum", lr=0.01, ba=dict(no_zero_grad=True), palette=0, log_every=5,
        expect=[("exploding_gradients", "grow", "grad_norm", 10.0), ("nonfinite_loss", "nonfinite")], tolerate=["divergence", "nonfinite_grad", "loss_spike"]))
    a(R("b_nozero_hf", "conv1d", "hf", "missing_zero_grad", ba=dict(no_zero_grad=True),
        expect=[("exploding_gradients", "grow", "grad_norm", 10.0)], tolerate=["oscillation", "loss_spike", "divergence"]))
    a(R("b_losssum_csv", "autoenc", "csv", "loss_sum", opt="sgd", lr=0.1, loss_bug="loss_sum", palette=5,
        expect=[("nonfinite_loss", "nonfinite")], tolerate=nan_tol, why="MSE summed over the batch: effective lr x64"))
    a(R("b_losssum_tb", "mlp_reg", "tb", "loss_sum", opt="momentum", lr=0.05, loss_bug="loss_sum", log_every=5,
        expect=[("nonfinite_loss", "nonfinite")], tolerate=nan_tol))
    a(R("b_accum_hf", "mlp_bin", "hf", "grad_accum_undivided", ba=dict(accum=4, accum_undivided=True), eval_every=50,
        expect=[("grad_accum_misnormalization", "accum_ratio", 4)],
        tolerate=["overfitting"]))
    a(R("b_accum_from_jsonl", "lstm_cls", "jsonl", "grad_accum_undivided", ba=dict(accum=4, accum_from=301, accum_undivided=True), palette=3,
        expect=[("grad_accum_misnormalization", "inject", "accum_from", "loss", 2.0)], tolerate=["loss_spike", "divergence", "overfitting"]))
    a(R("b_dsoftmax_tb", "cnn_bn", "tb", "double_softmax", loss_bug="double_softmax", opt="adam", lr=2e-3,
        expect=[("plateau", "plateau")], tolerate=["flat_loss", "vanishing_gradients"],
        why="softmax fed to CrossEntropyLoss: loss floor ~0.744 for 4 classes while val acc ~1"))
    a(R("b_dsoftmax_csv", "gru_cls", "csv", "double_softmax", loss_bug="double_softmax", palette=4,
        expect=[("plateau", "plateau")], tolerate=["flat_loss", "vanishing_gradients"]))
    a(R("b_sigbce_mlflow", "mlp_bin", "mlflow", "sigmoid_before_bce", loss_bug="sigmoid_bce",
        expect=[("plateau", "plateau")], tolerate=["flat_loss", "vanishing_gradients"]))
    a(R("b_logzero_mmengine", "mlp_bin", "mmengine", "log_of_zero", loss_bug="log_zero", lr=1e-2, log_every=5,
        expect=[("nonfinite_loss", "nonfinite")], tolerate=["nonfinite_grad"]))
    a(R("b_logzero_csv", "mlp_bin", "csv", "log_of_zero", seed=7, loss_bug="log_zero", lr=5e-3, palette=1,
        expect=[("nonfinite_loss", "nonfinite")], tolerate=["nonfinite_grad"]))
    a(R("b_divzero_tb", "siamese", "tb", "div_by_zero_norm", input_l2norm=True, ba=dict(zero_rows_from=251, no_eps=True),
        expect=[("nonfinite_loss", "nonfinite")], tolerate=["nonfinite_grad"], why="blank rows from step 251 are L2-normalised without eps (0/0)"))
    a(R("b_divzero_ignite", "siamese", "ignite", "div_by_zero_norm", input_l2norm=True, ba=dict(zero_rows_from=181, no_eps=True),
        expect=[("nonfinite_loss", "nonfinite")], tolerate=["nonfinite_grad"]))
    for i, (fmt, mode) in enumerate((("jsonl", "zero"), ("csv", "prev"), ("logging", "skip"), ("hf", "prev"), ("wandb", "zero"))):
        a(R(f"b_nanmask_{mode}_{fmt}", ["mlp_reg", "autoenc", "mlp_bin", "conv1d", "vae"][i], fmt, "nan_masked_by_logger", seed=20 + i,
            ba=dict(inf_at=[301, 233, 377, 151, 419][i]), mask=mode, palette=i % 6,
            expect=[("nan_masked_in_logs", "masked")], tolerate=["flat_loss", "plateau", "vanishing_gradients", "loss_spike"],
            why="a corrupted sample (inf) turns all weights NaN; the logger hides the NaN"))
    a(R("b_poison_tb", "conv1d", "tb", "poisoned_batches", ba=dict(poison_steps=[97, 180, 181, 260], poison_scale=25.0), log_every=1,
        expect=[("loss_spike", "inj_events", "poison_steps", "loss", 3.0)], tolerate=["exploding_gradients"]))
    a(R("b_poison_nanogpt", "recsys", "nanogpt", "poisoned_batches", ba=dict(poison_steps=[300, 550], poison_scale=20.0), log_every=1,
        expect=[("loss_spike", "inj_events", "poison_steps", "loss", 3.0)], why="two batches with ratings x20 (unit bug in one shard)"))
    a(R("b_poison_lightning", "mlp_reg", "lightning", "poisoned_batches", ba=dict(poison_steps=[150, 350, 351, 500], poison_scale=30.0), log_every=1,
        expect=[("loss_spike", "inj_events", "poison_steps", "loss", 3.0)], tolerate=[]))
    a(R("b_shuflabels_hf", "cnn_bn", "hf", "labels_shuffled", data_opts=dict(shuffle_labels=True), opt="adam", lr=2e-3,
        expect=[("flat_loss", "flat")], tolerate=["plateau", "overfitting"]))
    a(R("b_shuflabels_kerascon", "conv1d", "keras_console", "labels_shuffled", data_opts=dict(shuffle_labels=True), epochs=10,
        expect=[("flat_loss", "flat")], tolerate=["plateau", "overfitting"]))
    a(R("b_sorted_jsonl", "conv1d", "jsonl", "class_sorted_unshuffled", opt="sgd", lr=0.05, ba=dict(class_sorted=True), log_every=2, palette=4,
        expect=[("oscillation", "null", "loss swings with the class blocks inside every epoch (period 32 steps)")], tolerate=["loss_spike", "plateau"]))
    a(R("b_sorted_tb", "mlp_bin", "tb", "class_sorted_unshuffled", ba=dict(class_sorted=True), log_every=2,
        expect=[("oscillation", "null", "loss swings between the two class blocks (period 32 steps)")], tolerate=["loss_spike", "plateau"]))
    a(R("b_valleak_kerascsv", "mlp_reg", "keras_csv", "val_leak_from_train", data_opts=dict(val_leak=True), epochs=20,
        why="val set is a copy of train rows: val_loss tracks train loss; no symptom code applies"))
    a(R("b_valleak_wandb", "cnn_bn", "wandb", "val_leak_from_train", data_opts=dict(val_leak=True)))
    a(R("b_valshift_kerascon", "mlp_bin", "keras_console", "val_other_distribution", data_opts=dict(val_shift=2.0), epochs=20,
        expect=[("overfitting", "overfit")], tolerate=["plateau"]))
    a(R("b_valshift_mlflow", "cnn_bn", "mlflow", "val_other_distribution", data_opts=dict(val_shift=1.6), eval_every=25,
        expect=[("overfitting", "overfit")], tolerate=["plateau", "overfitting"]))
    a(R("b_tiny_kerascsv", "mlp_bin", "keras_csv", "tiny_train_set", n_train=96, model_opts=dict(hidden=256), bs=32, epochs=60,
        expect=[("overfitting", "overfit")], tolerate=["plateau"]))
    a(R("b_tiny_hf", "mlp_bin", "hf", "tiny_train_set", seed=3, n_train=96, model_opts=dict(hidden=256), bs=32, steps=500, eval_every=20, log_every=10,
        expect=[("overfitting", "overfit")], tolerate=["plateau"]))
    a(R("b_bneval_logging", "cnn_bn", "logging", "bn_left_in_eval_mode", ba=dict(forgot_train=True), eval_every=50,
        expect=[("nonfinite_loss", "nonfinite")], tolerate=["divergence", "loss_spike", "exploding_gradients", "nonfinite_grad"], why="model.train() never restored after the first eval (BN running stats frozen)"))
    a(R("b_noeval_lightning", "cnn_bn", "lightning", "eval_in_train_mode", ba=dict(no_eval_mode=True), eval_every=25,
        why="validation ran with dropout/BN batch statistics active"))
    a(R("b_frozen_mmengine", "gru_cls", "mmengine", "frozen_backbone", ba=dict(freeze_body=True), expect=[("flat_loss", "flat")], tolerate=["plateau"]))
    a(R("b_frozen_wandb", "lstm_cls", "wandb", "frozen_backbone", ba=dict(freeze_body=True), expect=[("flat_loss", "flat")], tolerate=["plateau"]))
    a(R("b_wd_tqdm", "mlp_bin", "tqdm", "weight_decay_too_high", opt="adamw", wd=40.0, lr=1e-2, expect=[("flat_loss", "flat")], tolerate=["plateau"]))
    a(R("b_wd_csv", "mlp_reg", "csv", "weight_decay_too_high", opt="adamw", wd=30.0, lr=1e-2, palette=5, expect=[("flat_loss", "flat")], tolerate=["plateau", "divergence", "overfitting"]))
    a(R("b_rnnexp_jsonl", "rnn_cls", "jsonl", "rnn_no_clipping", seed=2, log_every=5, palette=1,
        expect=[("exploding_gradients", "spikes", "grad_norm", 5.0), ("nonfinite_loss", "nonfinite")], tolerate=["loss_spike", "divergence", "nonfinite_grad"]))
    a(R("b_rnnexp_hf", "rnn_cls", "hf", "rnn_no_clipping", seed=2, lr=0.025, log_every=5,
        expect=[("exploding_gradients", "spikes", "grad_norm", 5.0), ("nonfinite_loss", "nonfinite")], tolerate=["loss_spike", "divergence", "nonfinite_grad"]))
    a(R("b_vanish_tb", "deep_mlp", "tb", "deep_sigmoid_net", expect=[("vanishing_gradients", "first", "grad_norm/layer0 ~1e-10 vs head ~0.1")],
        tolerate=["flat_loss", "plateau"]))
    a(R("b_vanish_wandb", "deep_mlp", "wandb", "deep_sigmoid_net", seed=4, model_opts=dict(act="sigmoid", depth=16),
        expect=[("vanishing_gradients", "first")], tolerate=["flat_loss", "plateau"]))
    a(R("b_dead_wandb", "mlp_reg", "wandb", "dead_relu_init", probe_acts=True, model_opts=dict(bias_init=-3.0), opt="sgd", lr=0.05,
        expect=[("dead_units", "threshold", "dead_frac", ">", 0.5)], tolerate=["flat_loss", "plateau", "vanishing_gradients"]))
    a(R("b_dead_jsonl", "mlp_reg", "jsonl", "dead_relu_init", seed=9, probe_acts=True, model_opts=dict(bias_init=-2.5, hidden=128), palette=3,
        expect=[("dead_units", "threshold", "dead_frac", ">", 0.5)], tolerate=["flat_loss", "plateau", "vanishing_gradients"]))
    a(R("b_tanhsat_tb", "mlp_reg", "tb", "tanh_bad_init", probe_acts=True, model_opts=dict(act="tanh", init_std=2.0), opt="sgd", lr=0.01,
        expect=[("saturated_activations", "threshold", "sat_frac", ">", 0.5)], tolerate=["plateau", "flat_loss"]))
    a(R("b_tanhsat_csv", "mlp_reg", "csv", "tanh_bad_init", seed=6, probe_acts=True, model_opts=dict(act="tanh", init_std=3.0), palette=0,
        expect=[("saturated_activations", "threshold", "sat_frac", ">", 0.5)], tolerate=["plateau", "flat_loss"]))
    a(R("b_scale_wandb", "siamese", "wandb", "fp16_scale_collapse", fp16=True, loss_bug="sqrt_nan", ba=dict(dup_from=201),
        expect=[("loss_scale_collapse", "threshold", "loss_scale", "<", 1.0)], tolerate=["flat_loss", "plateau", "nonfinite_grad"],
        why="a duplicated pair in every batch from step 201 gives sqrt(0) -> NaN grads; every step is skipped and the scale halves"))
    a(R("b_scale_jsonl", "siamese", "jsonl", "fp16_scale_collapse", seed=8, fp16=True, loss_bug="sqrt_nan", ba=dict(dup_from=121), palette=0,
        expect=[("loss_scale_collapse", "threshold", "loss_scale", "<", 1.0)], tolerate=["flat_loss", "plateau", "nonfinite_grad"]))
    a(R("b_leak_wandb", "leaky_mlp", "wandb", "memory_leak", ba=dict(leak_from=1), expect=[("memory_growth", "mem")]))
    a(R("b_leak_mmengine", "leaky_mlp", "mmengine", "memory_leak", ba=dict(leak_from=201), expect=[("memory_growth", "mem", "leak_from")]))
    a(R("b_slowload_mmengine", "mlp_reg", "mmengine", "slow_dataloader", ba=dict(sleep_ms=6), expect=[("input_bound", "input")]))
    a(R("b_slowload_logging", "conv1d", "logging", "slow_dataloader", ba=dict(sleep_ms=12, sleep_from=151), log_data=True,
        expect=[("input_bound", "input", "sleep_from")], tolerate=["throughput_regression", "step_time_outliers"]))
    a(R("b_stall_nanogpt", "mlp_reg", "nanogpt", "dataloader_stall", ba=dict(stall_every=100, stall_ms=300),
        expect=[("step_time_outliers", "spikes", "step_ms", 5.0)], tolerate=["input_bound"]))
    a(R("b_stall_jsonl", "gru_cls", "jsonl", "dataloader_stall", ba=dict(stall_every=75, stall_ms=350), log_every=1, palette=2,
        expect=[("step_time_outliers", "spikes", "step_ms", 5.0)], tolerate=["input_bound"]))
    a(R("b_straggler_jsonl", "ddp2", "ranks", "straggler_rank", ba=dict(rank_sleep_ms=8), rank_base="jsonl", palette=1,
        expect=[("straggler", "rank")]))
    a(R("b_straggler_csv", "ddp2", "ranks", "straggler_rank", seed=3, ba=dict(rank_sleep_ms=10, rank_sleep_from=101), rank_base="csv", palette=0,
        expect=[("straggler", "rank", "rank_sleep_from")], tolerate=["throughput_regression"]))
    a(R("b_resume_old_tb", "mlp_reg", "tb", "resume_older_checkpoint", ba=dict(ckpt_every=150, crash_at=470, resume_from=300),
        expect=[("resume_discontinuity", "segment")], tolerate=["loss_spike"]))
    a(R("b_resume_old_logging", "gru_cls", "logging", "resume_older_checkpoint", ba=dict(ckpt_every=100, crash_at=330, resume_from=200),
        expect=[("resume_discontinuity", "segment")], tolerate=["loss_spike"]))
    a(R("b_append_csv", "autoenc", "csv", "second_run_appended", ba=dict(append_steps=250), palette=2,
        expect=[("resume_discontinuity", "segment")], tolerate=["loss_spike"]))
    a(R("b_append_nanogpt", "tiny_lm", "nanogpt", "second_run_appended", ba=dict(append_steps=120), log_every=5, eval_every=50,
        expect=[("resume_discontinuity", "segment")], tolerate=["loss_spike"]))
    a(R("b_creep_wandb", "autoenc", "wandb", "step_time_creep", ba=dict(creep=True), steps=1500, log_every=10,
        expect=[("throughput_regression", "creep", "step_ms")]))
    a(R("b_creep_tqdm", "mlp_reg", "tqdm", "step_time_creep", ba=dict(creep=True), steps=2000, log_every=20,
        expect=[("throughput_regression", "creep", "step_ms")]))
    a(R("b_nfgrad_hf", "siamese", "hf", "sqrt_at_zero_grad", loss_bug="sqrt_nan", data_opts=dict(dup_every=1100), ba=dict(skip_nonfinite=True), log_every=1,
        expect=[("nonfinite_grad", "nf_events", "grad_norm")], why="duplicated pairs give sqrt(0) backward -> NaN grad norm; the step is skipped, loss stays finite"))
    a(R("b_nfgrad_tb", "siamese", "tb", "sqrt_at_zero_grad", seed=12, loss_bug="sqrt_nan", data_opts=dict(dup_every=1000), ba=dict(skip_nonfinite=True), log_every=1,
        expect=[("nonfinite_grad", "nf_events", "grad_norm")]))
    return S
