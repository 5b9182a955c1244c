"""Rebuild the corpus: python make_runs.py  (fixed seeds; 2 worker processes, 1 thread each)."""
import json, math, os, shutil, sys, time
import multiprocessing as mp
HERE = os.path.dirname(os.path.abspath(__file__)); sys.path.insert(0, HERE)
from writers import WRITERS, EPOCH_FORMATS, mask_rows

F_TIME = ["wandb", "mlflow", "jsonl", "csv", "logging", "bracket", "kv"]
F_EXTRA = ["tensorboard", "wandb", "jsonl", "csv", "logging", "kv"]
F_MEM = ["wandb", "mlflow", "jsonl", "csv", "logging", "kv"]
F_GN = ["hf", "tensorboard", "wandb", "mlflow", "jsonl", "csv", "logging", "kv"]
F_ALL = list(WRITERS)
FAM_LR = dict(linear=0.05, cnn_bn=0.01, unet=0.003, transformer=0.002, gru_seq2seq=0.005, pointmlp=0.003, widedeep=0.005,
              vae=0.002, simclr=0.002, diffusion=0.003, lstm_lm=0.005, deep_mlp=0.003)
CLS = ["linear", "cnn_bn", "transformer", "pointmlp", "gru_seq2seq", "lstm_lm", "deep_mlp"]


def S(name, fam, bug, fmt, **kw):
    d = dict(name=name, family=fam, bug=bug, format=fmt, seed=abs(hash(name)) % 1000 if False else sum(map(ord, name)) * 7 % 9973,
             opt="adam", lr=FAM_LR[fam], bs=32, steps=300, log_every=5, sched="constant", eval_every=0)
    d.update(kw); return d


def specs():
    B = []
    a = B.append
    a(S("b_lrhigh_linear", "linear", "lr_high", "hf", opt="sgd", lr=60.0, log_every=2, steps=200))
    a(S("b_lrhigh_cnn", "cnn_bn", "lr_high", "tensorboard", opt="momentum", lr=3.0, steps=200, log_every=2))
    a(S("b_lrlow_widedeep", "widedeep", "lr_low", "lightning", opt="sgd", lr=1e-6, steps=400, log_every=10, eval_every=100))
    a(S("b_lrlow_pointmlp", "pointmlp", "lr_low", "keras_csv", opt="adagrad", lr=1e-6, steps=470, log_every=1, bs=25))
    a(S("b_warmhot_transformer", "transformer", "warmup_hot", "wandb", lr=0.5, sched="warmup", warm=60, steps=300))
    a(S("b_warmhot_vae", "vae", "warmup_hot", "logging", opt="adamw", lr=0.3, sched="warmup", warm=80, steps=300))
    a(S("b_schedbatch_cnn", "cnn_bn", "sched_per_batch", "kv", opt="momentum", lr=0.05, sched="epoch_step", steps=300, log_every=3))
    a(S("b_schedbatch_lstm", "lstm_lm", "sched_per_batch", "csv", lr=0.01, sched="epoch_step", steps=300, log_every=5))
    a(S("b_rising_linear", "linear", "rising", "jsonl", opt="sgd", lr=0.02, sched="rising", steps=400, log_every=4))
    a(S("b_rising_diffusion", "diffusion", "rising", "mlflow", opt="rmsprop", lr=5e-4, sched="rising", steps=400, log_every=5))
    a(S("b_nozero_linear", "linear", "missing_zero_grad", "bracket", opt="momentum", lr=0.05, steps=300, log_every=5))
    a(S("b_nozero_pointmlp", "pointmlp", "missing_zero_grad", "hf", opt="sgd", lr=0.05, steps=300, log_every=5))
    a(S("b_sumloss_widedeep", "widedeep", "summed_loss", "tqdm", opt="sgd", lr=0.05, bs=64, steps=250, log_every=2))
    a(S("b_sumloss_unet", "unet", "summed_loss", "wandb", opt="momentum", lr=0.01, steps=150, log_every=2))
    a(S("b_dblsoft_transformer", "transformer", "double_softmax", "lightning", steps=400, log_every=10, eval_every=50))
    a(S("b_dblsoft_cnn", "cnn_bn", "double_softmax", "logging", opt="sgd", lr=0.05, steps=400, log_every=10))
    a(S("b_div0_vae", "vae", "div0", "kv", steps=300, log_every=3, bp={"at": 180}))
    a(S("b_div0_simclr", "simclr", "div0", "tensorboard", opt="adamw", steps=250, log_every=1, bp={"at": 140}))
    a(S("b_nanzero_linear", "linear", "nan_masked", "csv", opt="sgd", steps=400, log_every=4, bp={"at": 250, "mask": "zero"}))
    a(S("b_nanprev_diffusion", "diffusion", "nan_masked", "jsonl", steps=300, log_every=2, bp={"at": 150, "mask": "prev"}))
    a(S("b_nanskip_widedeep", "widedeep", "nan_masked", "wandb", steps=300, log_every=3, bp={"at": 200, "mask": "skip"}))
    a(S("b_poison_linear", "linear", "poison", "logging", opt="momentum", lr=0.02, steps=500, log_every=1, bp={"at": [210, 377]}))
    a(S("b_poison_diffusion", "diffusion", "poison", "mlflow", steps=400, log_every=1, bp={"at": [120, 260, 330]}))
    a(S("b_shuflab_pointmlp", "pointmlp", "shuffled_labels", "bracket", steps=300, log_every=5, eval_every=50))
    a(S("b_shuflab_linear", "linear", "shuffled_labels", "keras_console", opt="sgd", lr=0.1, steps=450, log_every=1, eval_every=78))
    a(S("b_sorted_linear", "linear", "sorted", "kv", opt="sgd", lr=0.2, steps=400, log_every=1))
    a(S("b_sorted_transformer", "transformer", "sorted", "hf", opt="adam", lr=0.003, steps=300, log_every=2))
    a(S("b_tiny_cnn", "cnn_bn", "tiny_train", "lightning", steps=600, log_every=10, eval_every=25, bp={"n": 48}, bs=16))
    a(S("b_tiny_widedeep", "widedeep", "tiny_train", "keras_csv", lr=0.01, steps=600, log_every=1, eval_every=4, bp={"n": 64}, bs=16))
    a(S("b_frozen_cnn", "cnn_bn", "frozen", "wandb", steps=400, log_every=5, eval_every=100))
    a(S("b_frozen_pointmlp", "pointmlp", "frozen", "tqdm", steps=300, log_every=3))
    a(S("b_wd_transformer", "transformer", "wd_high", "mlflow", opt="adamw", wd=30.0, steps=300, log_every=5))
    a(S("b_wd_linear", "linear", "wd_high", "hf", opt="sgd", lr=0.05, wd=5.0, steps=300, log_every=5))
    a(S("b_explode_gru", "gru_seq2seq", "exploding_rnn", "jsonl", opt="sgd", lr=0.5, steps=300, log_every=2, fopts={"hh_scale": 4.0}))
    a(S("b_explode_lstm", "lstm_lm", "exploding_rnn", "tensorboard", opt="sgd", lr=1.0, steps=300, log_every=2, fopts={"hh_scale": 4.0}))
    a(S("b_vanish_mlp", "deep_mlp", "vanishing", "csv", opt="sgd", lr=0.05, steps=400, log_every=4, fopts={"act": "sigmoid", "depth": 12}))
    a(S("b_vanish_mlp2", "deep_mlp", "vanishing", "kv", opt="momentum", lr=0.01, steps=300, log_every=3, fopts={"act": "sigmoid", "depth": 14}))
    a(S("b_dead_mlp", "deep_mlp", "dead_relu", "logging", steps=300, log_every=3, log_act=True, fopts={"act": "relu", "depth": 4, "bias_init": -4.0}))
    a(S("b_dead_mlp2", "deep_mlp", "dead_relu", "wandb", opt="sgd", lr=0.05, steps=300, log_every=5, log_act=True, fopts={"act": "relu", "depth": 5, "bias_init": -3.0}))
    a(S("b_sat_mlp", "deep_mlp", "saturated", "jsonl", steps=300, log_every=3, log_act=True, act_kind="tanh", fopts={"act": "tanh", "depth": 4, "w_scale": 8.0}))
    a(S("b_lscale_transformer", "transformer", "loss_scale", "csv", steps=300, log_every=2, bp={"at": 170}))
    a(S("b_lscale_unet", "unet", "loss_scale", "kv", steps=200, log_every=1, bp={"at": 90}))
    a(S("b_memleak_cnn", "cnn_bn", "mem_leak", "mlflow", steps=400, log_every=4))
    a(S("b_memleak_lstm", "lstm_lm", "mem_leak", "logging", steps=300, log_every=3))
    a(S("b_slowload_linear", "linear", "slow_loader", "jsonl", steps=200, log_every=2, bp={"sleep": 0.012}))
    a(S("b_slowload_widedeep", "widedeep", "slow_loader", "wandb", steps=150, log_every=1, bp={"sleep": 0.015}))
    a(S("b_straggler_linear", "linear", "slow_rank", "jsonl", steps=200, log_every=2, bp={"sleep": 0.006}))
    a(S("b_straggler_vae", "vae", "slow_rank", "logging", steps=150, log_every=3, bp={"sleep": 0.008}))
    a(S("b_creep_pointmlp", "pointmlp", "creep", "kv", steps=250, log_every=2, bp={"base": 0.0005, "rate": 4e-5}))
    a(S("b_creep_linear", "linear", "creep", "bracket", steps=300, log_every=3, bp={"base": 0.0, "rate": 3e-5}))
    a(S("b_outlier_diffusion", "diffusion", "outliers", "csv", steps=300, log_every=1, bp={"at": [77, 150, 151, 240], "spike": 0.06}))
    a(S("b_outlier_simclr", "simclr", "outliers", "wandb", steps=250, log_every=1, bp={"at": [60, 190], "spike": 0.08}))
    a(S("b_resume_cnn", "cnn_bn", "resume_old", "hf", opt="sgd", lr=0.05, steps=400, log_every=5, ckpt_every=50, bp={"crash": 300, "from": 100}))
    a(S("b_resume_lstm", "lstm_lm", "resume_old", "mlflow", steps=400, log_every=4, ckpt_every=100, bp={"crash": 320, "from": 100}))
    a(S("b_append_vae", "vae", "appended", "kv", steps=200, log_every=2))
    a(S("b_leak_linear", "linear", "leak", "lightning", steps=300, log_every=10, eval_every=50))
    # healthy runs
    fams = ["linear", "cnn_bn", "unet", "transformer", "gru_seq2seq", "pointmlp", "widedeep", "vae", "simclr", "diffusion", "lstm_lm", "deep_mlp"]
    opts = ["sgd", "momentum", "adam", "adamw", "rmsprop", "adagrad"]
    lrmul = dict(sgd=4.0, momentum=1.0, adam=1.0, adamw=1.0, rmsprop=0.5, adagrad=5.0)
    scheds = ["constant", "step", "cosine", "warmup", "linear", "onecycle", "exp"]
    steps = [60, 150, 300, 500, 800, 1500, 250, 40, 400]
    for i in range(36):
        fam = fams[i % 12]; o = opts[(i * 5 + i // 12) % 6]; fmt = F_ALL[(i * 7) % len(F_ALL)]
        st = steps[i % len(steps)]
        if fam in ("transformer", "gru_seq2seq", "lstm_lm", "unet") and st > 500: st = 400
        lr = FAM_LR[fam] * lrmul[o]
        if fam in ("simclr", "vae", "diffusion", "unet") and o in ("sgd", "momentum", "adagrad"): lr = FAM_LR[fam] * 2
        kw = dict(opt=o, lr=lr, sched=scheds[i % 7], warm=max(5, st // 10), steps=st, bs=[16, 32, 64][i % 3],
                  log_every=[1, 2, 5, 10, 20][i % 5] if st >= 150 else 1, eval_every=[0, 50, 100][i % 3])
        if fmt in EPOCH_FORMATS: kw.update(log_every=1, eval_every=0, bs=64, steps=max(st, 400), warm=40)
        if fam == "deep_mlp": kw["fopts"] = {"act": ["relu", "tanh"][i % 2], "depth": 4}; kw["log_act"] = True; kw["act_kind"] = ["relu", "tanh"][i % 2]
        if i % 6 == 1: kw["log_scale"] = True
        if i % 9 == 4: kw["ranks"] = True
        h = S(f"h_{i:02d}_{fam}_{o}", fam, "none", fmt, **kw)
        B.append(h)
    return B


def run_one(c):
    try:
        return _run_one(c)
    except Exception as e:
        import traceback; traceback.print_exc(); return None


def _run_one(c):
    import torch
    torch.set_num_threads(1)
    from engine import train
    t0 = time.time()
    if c["bug"] == "appended":
        r1, e1, ev = train(dict(c, bug="none", steps=int(c["steps"] * 0.6)))
        r2, e2, ev2 = train(dict(c, bug="none", seed=c["seed"] + 5))
        return dict(rows=r1 + r2, evals=e1 + e2, ev=dict(ev, append_at=len(r1), first_end=r1[-1]["step"]), secs=time.time() - t0)
    if c["bug"] == "slow_rank" or c.get("ranks"):
        r0, e0, ev = train(dict(c, bug="none", seed=c["seed"]))
        r1, e1, _ = train(dict(c, seed=c["seed"] + 1) if c["bug"] == "slow_rank" else dict(c, seed=c["seed"] + 1))
        return dict(rows=r0, rows1=r1, evals=e0, ev=ev, secs=time.time() - t0)
    rows, evals, ev = train(c)
    return dict(rows=rows, evals=evals, ev=ev, secs=time.time() - t0)


if __name__ == "__main__":
    t0 = time.time()
    sp = specs()
    only = sys.argv[1:]
    if only: sp = [s for s in sp if any(o in s["name"] for o in only)]
    import pickle
    cache = os.path.join(HERE, "_cache.pkl")
    if os.environ.get("REUSE") and os.path.exists(cache):
        res = pickle.load(open(cache, "rb"))
    else:
        with mp.get_context("fork").Pool(2) as pool:
            res = pool.map(run_one, sp, chunksize=1)
        if not only: pickle.dump(res, open(cache, "wb"))
    bad = [s["name"] for s, r in zip(sp, res) if r is None]
    if bad: print("FAILED:", bad)
    sp, res = [s for s, r in zip(sp, res) if r is not None], [r for r in res if r is not None]
    from label import label_and_write
    label_and_write(HERE, sp, res, time.time() - t0, partial=bool(only))
