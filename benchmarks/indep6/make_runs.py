"""Build indep6: train every run (one worker process), write its logs, label it, split K/L.

    ../../.venv/bin/python make_runs.py                  # everything; rewrites runs/ and labels.json
    ../../.venv/bin/python make_runs.py --only A,B --show  # a subset, prints measurements only
"""
import collections
import json
import math
import multiprocessing as mp
import os
import shutil
import sys
import time

import numpy as np

import engine
import label as LB
import writers
from models import FAMILIES

HERE = os.path.dirname(os.path.abspath(__file__))
RULE = json.load(open(os.path.join(HERE, "..", "indep5", "labels.json")))["_rule"] if os.path.exists(
    os.path.join(HERE, "..", "indep5", "labels.json")) else None

BASE = {
    "segnet": dict(steps=360, bs=32, lr=3e-3, opt="adam", eval_every=36),
    "ddpm": dict(steps=600, bs=128, lr=2e-3, opt="adam", eval_every=50),
    "mlm": dict(steps=600, bs=64, lr=3e-3, opt="adamw", eval_every=50),
    "gat": dict(steps=200, lr=5e-3, opt="adam", eval_every=10, wd=5e-4),
    "infonce": dict(steps=400, bs=64, lr=2e-3, opt="adam", eval_every=40),
    "ode": dict(steps=600, bs=64, lr=3e-3, opt="adam", eval_every=50),
    "hyper": dict(steps=800, bs=64, lr=3e-3, opt="adam", eval_every=50),
    "ens": dict(steps=500, bs=64, lr=2e-3, opt="adam", eval_every=50),
    "a2c": dict(steps=400, lr=3e-3, opt="adam"),
    "gan": dict(steps=600, bs=64, lr=1e-3, opt="adam"),
}
RUNS = []


def R(name, family, fault, fmt, every=10, twin=False, mask=None, logs=(), **cfg):
    c = dict(BASE[family]); c.update(cfg); c["family"] = family
    if fault not in ("none",) and fault not in c.get("bugs", []) and fault not in ("lr_too_high", "lr_too_low", "overfit_tiny",
                                                                                   "grad_explode", "vanishing_sigmoid", "dead_relu",
                                                                                   "sgd_mom_999", "adam_eps_1", "warmup_overshoot",
                                                                                   "gan_d_overpower", "infonce_temp_tiny"):
        c["bugs"] = list(c.get("bugs", [])) + [fault]
    RUNS.append(dict(name=name, family=family, fault=fault, format=fmt, every=every, twin=twin, mask=mask,
                     logs=set(logs), cfg=c))


H = lambda name, family, fmt, **kw: R(name, family, "none", fmt, **kw)

# ------------------------------------------------------------------ injected, new mechanisms
R("b_clipzero_ens_wandb", "ens", "clip_zero", "wandb", every=10)
R("b_clipzero_segnet_hf", "segnet", "clip_zero", "hf", every=6)
R("b_dblsched_hyper_mlflow", "hyper", "sched_double_step", "mlflow", every=10, sched="cos")
R("b_dblsched_infonce_pylog", "infonce", "sched_double_step", "pylog", every=5, sched="cos", lr=3e-3)
R("b_wrongparams_infonce_tb", "infonce", "wrong_param_group", "tb", every=5, twin=True, opt_subset="4.")
R("b_wrongparams_ode_md", "ode", "wrong_param_group", "md", every=20, twin=True, opt_subset="head")
R("b_eps1_mlm_fairseq", "mlm", "adam_eps_1", "fairseq", every=20, twin=True, opt="adam", eps=1.0, per_epoch=46)
R("b_eps1_hyper_zh", "hyper", "adam_eps_1", "zh", every=10, twin=True, eps=1.0)
R("b_mom999_ode_detectron2", "ode", "sgd_mom_999", "detectron2", every=5, opt="momentum", momentum=0.999, lr=0.01)
R("b_mom999_ens_pandas", "ens", "sgd_mom_999", "pandas", every=10, opt="momentum", momentum=0.999, lr=0.05)
R("b_overshoot_mlm_wandb", "mlm", "warmup_overshoot", "wandb", every=10, sched="warmup_overshoot", warmup=60, lr=2e-3)
R("b_overshoot_ddpm_mmengine", "ddpm", "warmup_overshoot", "mmengine", every=10, sched="warmup_overshoot", warmup=40, lr=1e-3, per_epoch=32)
R("b_labelflip_gat_keras", "gat", "label_flip_midrun", "keras", bug_at=100, eval_every=1)
R("b_labelflip_ens_lightning", "ens", "label_flip_midrun", "lightning", every=5, bug_at=250, eval_every=37)
R("b_offby1_gat_yolo", "gat", "label_offby1", "yolo", eval_every=1)
R("b_offby1_ens_mlflow", "ens", "label_offby1", "mlflow", every=10)
R("b_maskinv_mlm_nanogpt", "mlm", "mask_inverted", "nanogpt", every=10, eval_every=10)
R("b_maskinv_mlm_md", "mlm", "mask_inverted", "md", every=10, eval_every=20)
R("b_dwins_gan_tb", "gan", "gan_d_overpower", "tb", every=5, g_lr_mult=0.001, d_steps=3, d_width=128, d_lr_mult=1.0)
R("b_dwins_gan_wandb", "gan", "gan_d_overpower", "wandb", every=10, g_lr_mult=0.001, d_steps=3, d_width=128, d_lr_mult=2.0, seed=1)
R("b_rewardscale_a2c_sb3", "a2c", "reward_scale_explode", "sb3", every=5, bug_at=200)
R("b_rewardscale_a2c_tb", "a2c", "reward_scale_explode", "tb", every=4, bug_at=150, seed=2)
R("b_repeatsub_ens_detectron2", "ens", "loader_repeat_subset", "detectron2", every=10, steps=600)
R("b_repeatsub_segnet_zh", "segnet", "loader_repeat_subset", "zh", every=6, steps=480, eval_every=24)
R("b_evaltrain_gat_hf", "gat", "eval_on_train", "hf", every=2, n_train=16, dropout=0.0, per_epoch=1)
R("b_evaltrain_ens_keras", "ens", "eval_on_train", "keras", n_train=192, steps=450, eval_every=3, bs=64)
R("b_stalereload_hyper_pandas", "hyper", "stale_reload", "pandas", every=10, stale_snapshot=20, bug_at=500)
R("b_stalereload_ode_tqdm", "ode", "stale_reload", "tqdm", every=5, stale_snapshot=10, bug_at=350)
R("b_tiebroken_mlm_lightning", "mlm", "tie_broken", "lightning", every=10, eval_every=46)
R("b_tinytemp_infonce_mmengine", "infonce", "infonce_temp_tiny", "mmengine", every=5, twin=True, tau=0.005, per_epoch=32)
R("b_tinytemp_infonce_wandb", "infonce", "infonce_temp_tiny", "wandb", every=5, twin=True, tau=0.005, seed=3)
# ------------------------------------------------------------------ injected, classic classes
R("b_lrhigh_ode_tb", "ode", "lr_too_high", "tb", every=5, opt="sgd", lr=1.5, log_gn=True)
R("b_lrhigh_hyper_md", "hyper", "lr_too_high", "md", every=20, opt="adam", lr=0.3)
R("b_lrlow_segnet_mlflow", "segnet", "lr_too_low", "mlflow", every=6, lr=1e-6, twin=True)
R("b_lrlow_ddpm_pandas", "ddpm", "lr_too_low", "pandas", every=25, lr=1e-7, opt="sgd", twin=True)
R("b_nan_ode_zh", "ode", "nan_midrun", "zh", every=5, bug_at=333)
R("b_nan_hyper_wandb", "hyper", "nan_midrun", "wandb", every=10, bug_at=517)
R("b_nan_ens_tb", "ens", "nan_midrun", "tb", every=5, bug_at=240)
R("b_nanmask_ens_hf", "ens", "nan_masked", "hf", every=10, bug_at=301, mask="hf")
R("b_nanmask_ode_pylog", "ode", "nan_masked", "pylog", every=10, bug_at=410, mask="zero")
R("b_nanmask_hyper_md", "hyper", "nan_masked", "md", every=20, bug_at=455, mask="prev")
R("b_tiny_ens_wandb", "ens", "overfit_tiny", "wandb", every=10, n_train=64, steps=600, eval_every=25)
R("b_tiny_gat_lightning", "gat", "overfit_tiny", "lightning", every=2, n_train=12, dropout=0.0, eval_every=5, steps=300)
R("b_corrupt_hyper_tqdm", "hyper", "corrupt_batch", "tqdm", every=2, bug_steps=[402], corrupt_mult=30.0, corrupt_target=True)
R("b_corrupt_ode_mmengine", "ode", "corrupt_batch", "mmengine", every=1, bug_steps=[250, 251], corrupt_mult=40.0, per_epoch=32, opt="sgd", lr=0.05)
R("b_explode_ode_tb", "ode", "grad_explode", "tb", every=5, act="linear", K=12, dt=1.0, gain=1.6, opt="sgd", lr=1e-3, residual=True, shared=False)
R("b_explode_ode_pylog", "ode", "grad_explode", "pylog", every=5, act="linear", K=10, dt=1.0, gain=1.7, opt="momentum", lr=5e-4, residual=True, shared=False, seed=4)
R("b_vanish_ode_tb", "ode", "vanishing_sigmoid", "tb", every=10, act="sigmoid", K=12, residual=False, shared=False, opt="sgd", lr=0.05, logs=("gnf", "gnl"))
R("b_vanish_ode_pylog", "ode", "vanishing_sigmoid", "pylog", every=10, act="sigmoid", K=14, residual=False, shared=False, opt="momentum", lr=0.02, logs=("gnf", "gnl"), seed=5)
R("b_deadrelu_ode_tb", "ode", "dead_relu", "tb", every=10, act="relu", residual=False, shared=False, K=4, bias_init=-6.0, logs=("dead",))
R("b_deadrelu_ens_pylog", "ens", "dead_relu", "pylog", every=10, bias_init=-6.0, logs=("dead",))
R("b_scale_ens_mmengine", "ens", "loss_scale_collapse", "mmengine", every=5, amp=True, bug_at=260, logs=("scale",), per_epoch=37)
R("b_scale_hyper_wandb", "hyper", "loss_scale_collapse", "wandb", every=10, amp=True, bug_at=400, logs=("scale",))
R("b_slow_segnet_mmengine", "segnet", "slow_loader", "mmengine", every=6, loader_sleep=0.02, per_epoch=12)
R("b_slow_ddpm_detectron2", "ddpm", "slow_loader", "detectron2", every=10, bug_at=300, loader_sleep=0.006)
R("b_stall_ddpm_zh", "ddpm", "periodic_stall", "zh", every=1, stall_every=100, stall_s=0.25)
R("b_stall_ens_mlflow", "ens", "periodic_stall", "mlflow", every=1, stall_every=50, stall_s=0.25)
R("b_creep_hyper_pylog", "hyper", "step_creep", "pylog", every=10, steps=1200)
R("b_creep_ddpm_tb", "ddpm", "step_creep", "tb", every=10, steps=1500)
R("b_straggler_ens_pylogranks", "ens", "straggler", "pylogranks", every=10, ranks=2, straggle_s=0.008)
R("b_straggler_hyper_tbranks", "hyper", "straggler", "tbranks", every=10, ranks=2, straggle_s=0.008, bug_at=301)
R("b_leak_segnet_wandb", "segnet", "mem_leak", "wandb", every=6, bs=64, steps=300)
R("b_leak_mlm_mmengine", "mlm", "mem_leak", "mmengine", every=10, bs=64, steps=500, per_epoch=46)
R("b_replay_ode_nanogpt", "ode", "resume_replay", "nanogpt", every=10, ckpt_every=100, crash_at=450, resume_from=200)
R("b_replay_hyper_tqdm", "hyper", "resume_replay", "tqdm", every=10, ckpt_every=100, crash_at=560, resume_from=300)
R("b_replay_ens_pylog", "ens", "resume_replay", "pylog", every=5, ckpt_every=50, crash_at=330, resume_from=200)
R("b_accum_ddpm_hf", "ddpm", "grad_accum_unnorm", "hf", every=10, accum=4)
R("b_accum_ode_wandb", "ode", "grad_accum_unnorm", "wandb", every=10, accum=4, bug_at=301, steps=700)
R("b_sigbce_segnet_keras", "segnet", "sigmoid_bce", "keras", twin=True, eval_every=12)
R("b_sigbce_segnet_yolo", "segnet", "sigmoid_bce", "yolo", twin=True, eval_every=12, seed=6)

# ------------------------------------------------------------------ healthy (some scary-looking)
H("h_segnet_hf", "segnet", "hf", every=6)
H("h_segnet_tb_negloss", "segnet", "tb", every=3, lr=2e-3, opt="adamw")
H("h_segnet_keras", "segnet", "keras", eval_every=12, steps=480)
H("h_segnet_pandas", "segnet", "pandas", every=12, sched="cos")
H("h_ddpm_long_wandb", "ddpm", "wandb", every=25, steps=3000, bs=64, sched="warmup_cos", warmup=100)
H("h_ddpm_mlflow", "ddpm", "mlflow", every=10)
H("h_ddpm_nanogpt", "ddpm", "nanogpt", every=10, sched="step_drop", milestones=[400], lr=3e-3)
H("h_ddpm_amp_tb", "ddpm", "tb", every=10, amp=True, growth=100, logs=("scale",), steps=1000)
H("h_mlm_fairseq", "mlm", "fairseq", every=20, per_epoch=46, sched="warmup_lin", warmup=60)
H("h_mlm_lightning", "mlm", "lightning", every=10, eval_every=46)
H("h_mlm_warmup_hf", "mlm", "hf", every=10, sched="warmup_cos", warmup=80, lr=5e-3)
H("h_mlm_long_mmengine", "mlm", "mmengine", every=20, steps=1500, per_epoch=46, sched="cos")
H("h_gat_keras", "gat", "keras", eval_every=1)
H("h_gat_yolo", "gat", "yolo", eval_every=1, opt="adamw", steps=150)
H("h_gat_md", "gat", "md", every=5, eval_every=10, steps=120)
H("h_infonce_wandb", "infonce", "wandb", every=5)
H("h_infonce_restarts_tb", "infonce", "tb", every=5, sched="cos_restart", T0=100, lr=4e-3)
H("h_infonce_mmengine", "infonce", "mmengine", every=10, per_epoch=32, opt="radam")
H("h_ode_detectron2", "ode", "detectron2", every=5, opt="nadam")
H("h_ode_zh", "ode", "zh", every=5, opt="rmsprop", lr=1e-3)
H("h_ode_tqdm_short", "ode", "tqdm", every=1, steps=40, lr=1e-2, eval_every=10)
H("h_ode_deep_tb", "ode", "tb", every=10, logs=("gnf", "gnl", "dead"), act="relu", K=6)
H("h_ode_resume_nanogpt", "ode", "nanogpt", every=10, ckpt_every=100, crash_at=300, resume_from=300)
H("h_hyper_mlflow", "hyper", "mlflow", every=10, opt="adamw")
H("h_hyper_pylog", "hyper", "pylog", every=10, sched="onecycle", lr=5e-3)
H("h_hyper_ranks_tbranks", "hyper", "tbranks", every=10, ranks=2)
H("h_hyper_md_short", "hyper", "md", every=2, steps=60, lr=1e-2, eval_every=10)
H("h_ens_noisy_zh", "ens", "zh", every=1, bs=8, steps=500, lr=1e-3)
H("h_ens_lightning", "ens", "lightning", every=5, eval_every=37)
H("h_ens_pylogranks", "ens", "pylogranks", every=10, ranks=2)
H("h_ens_detectron2", "ens", "detectron2", every=10, opt="sgd", lr=0.1, sched="exp", gamma=0.998)
H("h_ens_hf", "ens", "hf", every=10, opt="adagrad", lr=0.03)
H("h_a2c_sb3", "a2c", "sb3", every=5)
H("h_a2c_tb", "a2c", "tb", every=4, seed=1)
H("h_a2c_sb3_long", "a2c", "sb3", every=10, steps=1000, seed=2, lr=1e-3)
H("h_gan_tb", "gan", "tb", every=5)
H("h_gan_wandb", "gan", "wandb", every=10, seed=1)
H("h_gan_zh", "gan", "zh", every=5, seed=2, lr=5e-4)
H("h_gan_pylog", "gan", "pylog", every=10, seed=3, steps=1000)
H("h_ddpm_yolo_epochs", "ddpm", "yolo", eval_every=32, steps=640)
H("h_infonce_pandas", "infonce", "pandas", every=10, sched="warmup_const", warmup=50)
H("h_mlm_nanogpt_long", "mlm", "nanogpt", every=20, steps=2000, sched="warmup_cos", warmup=100)


def per_epoch(spec):
    c = spec["cfg"]
    if "per_epoch" in c:
        return c["per_epoch"]
    f = c["family"]
    if f == "gat" or f in ("a2c", "gan"):
        return 1 if f == "gat" else 50
    n = {"segnet": 384, "ddpm": 4096, "mlm": 3000, "infonce": 2048, "ode": 2048, "hyper": 3000, "ens": 2400}[f]
    return max(1, c.get("n_train", n) // c.get("bs", 32))


CACHE = "/tmp/indep6_cache"


def job(spec):
    import hashlib, pickle
    key = hashlib.sha1(repr((sorted(spec["cfg"].items()), spec["twin"], spec["fault"])).encode()).hexdigest()
    p = os.path.join(CACHE, spec["name"] + "." + key + ".pkl")
    if os.path.exists(p) and "--fresh" not in sys.argv:
        return pickle.load(open(p, "rb"))
    out = job_(spec)
    os.makedirs(CACHE, exist_ok=True)
    pickle.dump(out, open(p, "wb"))
    return out


def job_(spec):
    t = time.perf_counter()
    recs = engine.train(spec["cfg"])
    out = {"recs": recs, "secs": time.perf_counter() - t}
    if spec["twin"]:
        c = dict(spec["cfg"]); c["bugs"] = []
        for k, v in (("eps", 1e-8), ("tau", 0.2)):
            if k in c:
                c[k] = v
        if spec["fault"] == "lr_too_low":
            c["lr"] = BASE[c["family"]]["lr"]; c["opt"] = BASE[c["family"]]["opt"]
        out["twin"] = engine.train(c)
        out["secs_twin"] = time.perf_counter() - t - out["secs"]
    return out


def g3(v):
    return "nan" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.4g}"


def notes(spec, log, faults, strict, word):
    L = log["loss"]
    f = [v for _, v in L if v is not None and math.isfinite(v)]
    w = "loss_G" if spec["family"] == "gan" else word
    s = f"x-axis unit: {log['x']}. {w} first {g3(L[0][1])} -> last {g3(L[-1][1])} (min {g3(min(f) if f else None)}), {len(L)} logged points"
    if log["val"]:
        vs = [v for _, v in log["val"]]
        s += f"; val first {g3(vs[0])} -> last {g3(vs[-1])} (min {g3(min(vs))}), {len(vs)} evals"
    if log["loss_D"]:
        s += f"; loss_D first {g3(log['loss_D'][0][1])} -> last {g3(log['loss_D'][-1][1])}"
    if log["value_loss"]:
        vl = [v for _, v in log["value_loss"]]
        s += f"; value_loss first {g3(vl[0])} -> max {g3(max(vl))} -> last {g3(vl[-1])}"
    for flt in faults:
        m = strict.get(flt["symptom"], {})
        extra = ", ".join(f"{k[1:]} {g3(v)}" for k, v in m.items() if k.startswith("_"))
        s += f"; {flt['symptom']} at x={flt.get('onset_step')}" + (f" ({extra})" if extra else "")
        if "event_steps" in flt:
            s += f" events {flt['event_steps'][:6]}"
    c = spec["cfg"]
    s += (f". Run: {c['steps']} steps, opt {c.get('opt')} lr {c['lr']} sched {c.get('sched', 'const')}, bs {c.get('bs', 'full')}, "
          f"logged every {spec['every']} steps ({'current batch' if spec['format'] in ('tb', 'tbranks', 'lightning', 'nanogpt', 'tqdm', 'zh') else 'window aggregate' if spec['format'] not in ('keras', 'yolo') else 'epoch mean'}).")
    if spec["family"] == "a2c":
        s += " The labelled loss series is value_loss (the total loss includes it); RL losses do not fall monotonically."
    if spec["family"] == "gan":
        s += " The labelled loss series is the generator loss; loss_D is logged next to it."
    if spec["family"] == "segnet":
        s += " Loss = BCE - soft Dice, bounded below by -1 (negative values are normal)."
    return s


def main():
    args = sys.argv[1:]
    only = None
    if "--only" in args:
        only = set(args[args.index("--only") + 1].split(","))
    show = "--show" in args
    specs = [s for s in RUNS if only is None or s["name"] in only]
    names = [s["name"] for s in RUNS]
    assert len(names) == len(set(names))
    if not show:
        shutil.rmtree(os.path.join(HERE, "runs"), ignore_errors=True)
    os.makedirs(os.path.join(HERE, "runs"), exist_ok=True)
    ctx = mp.get_context("fork")
    labels = {}
    t0 = time.time()
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        for spec, res in zip(specs, pool.imap(job, specs)):
            fam = FAMILIES[spec["family"]]
            d = os.path.join(HERE, "runs", spec["name"]) if not show else os.path.join("/tmp/indep6_show", spec["name"])
            shutil.rmtree(d, ignore_errors=True); os.makedirs(d)
            ws = dict(every=spec["every"], steps=spec["cfg"]["steps"], per_epoch=per_epoch(spec), bs=spec["cfg"].get("bs", 1),
                      word=fam.loss_word, family=spec["family"], cfg=spec["cfg"], mask=spec["mask"],
                      eval_every=spec["cfg"].get("eval_every"), **{"log_" + k: True for k in spec["logs"]})
            log = writers.WRITERS[spec["format"]](d, res["recs"], ws)
            twin = None
            if "twin" in res:
                td = "/tmp/indep6_twin/" + spec["name"]
                shutil.rmtree(td, ignore_errors=True); os.makedirs(td)
                twin = writers.WRITERS[spec["format"]](td, res["twin"], ws)["loss"]
            kind = "rl" if fam.rl else ("gan" if fam.custom else "sup")
            floor = 0.0 if fam.rl else fam.floor
            faults, tol, strict = LB.label(spec["fault"], log, floor, twin, kind)
            fault = spec["fault"]
            if fault != "none" and not faults:
                fault += " (no visible trace)"
            labels[spec["name"]] = {"family": spec["family"], "fault": fault, "format": spec["format"], "faults": faults,
                                    "tolerated": tol, "notes": notes(spec, log, faults, strict, fam.loss_word),
                                    "train_seconds": round(res["secs"] + res.get("secs_twin", 0), 2)}
            print(f"{spec['name']:34s} {res['secs']:5.1f}s faults={[(f['symptom'], f.get('onset_step')) for f in faults]} "
                  f"strict={sorted(strict)}", flush=True)
    print(f"total wall {time.time() - t0:.0f}s, train {sum(l['train_seconds'] for l in labels.values()):.0f}s")
    if show:
        return
    split(labels)
    out = {"_rule": RULE, "runs": {k: labels[k] for k in sorted(labels)}}
    for k, v in out["runs"].items():
        out["runs"][k] = {"split": v.pop("split"), **v}
    json.dump(out, open(os.path.join(HERE, "labels.json"), "w"), indent=1, sort_keys=False)


def split(labels):
    groups = collections.defaultdict(list)
    for n, l in labels.items():
        key = l["fault"].split(" (")[0]
        groups[key if key != "none" else "none/" + l["family"]].append(n)
    flip = 0
    for key in sorted(groups, key=lambda k: (-len(groups[k]), k)):
        for i, n in enumerate(sorted(groups[key], key=lambda n: (labels[n]["format"], n))):
            labels[n]["split"] = "KL"[(i + flip) % 2]
        if len(groups[key]) % 2:
            flip ^= 1

    def cost():
        c = 0
        for fld in ("format", "family"):
            cnt = collections.Counter((l[fld], l["split"]) for l in labels.values())
            c += sum(abs(cnt[(v, "K")] - cnt[(v, "L")]) for v in {l[fld] for l in labels.values()})
        cnt = collections.Counter((bool(l["faults"]), l["split"]) for l in labels.values())
        c += 3 * sum(abs(cnt[(v, "K")] - cnt[(v, "L")]) for v in (True, False))
        return c
    best = cost()
    improved = True
    while improved:
        improved = False
        for key, ns in groups.items():
            for a in ns:
                for b in ns:
                    if labels[a]["split"] == "K" and labels[b]["split"] == "L":
                        labels[a]["split"], labels[b]["split"] = "L", "K"
                        c = cost()
                        if c < best:
                            best, improved = c, True
                        else:
                            labels[a]["split"], labels[b]["split"] = "K", "L"


if __name__ == "__main__":
    main()
