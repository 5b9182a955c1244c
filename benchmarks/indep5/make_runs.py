"""Run list, training (one worker process), writing runs/, labelling and the I/J split.

  ../../.venv/bin/python make_runs.py                 # everything (rebuilds runs/ and labels.json)
  ../../.venv/bin/python make_runs.py --only a,b --show   # a subset, prints measurements, labels.json untouched
"""
import argparse
import collections
import json
import math
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

RULE = ("a finding at warning or above hits a fault when the symptom is equal and, where the fault has an onset_step, "
        "its onset is within max(20 steps, 10% of the run) of onset_step, of any event_steps entry, or inside onset_range "
        "widened by that tolerance; any other finding at warning or above that no 'tolerated' entry covers is a false "
        "positive; a healthy run has faults: [].")

DEF = {  # per-family defaults that train well
    "convmixer": dict(opt="adam", lr=3e-3, bs=32, steps=200, log_every=5, eval_every=40),
    "tab": dict(opt="adam", lr=3e-3, bs=32, steps=600, log_every=10, eval_every=60, task="reg"),
    "sgns": dict(opt="adam", lr=1e-2, bs=128, steps=600, log_every=10, eval_every=100),
    "bpr": dict(opt="adam", lr=1e-2, bs=128, steps=600, log_every=10, eval_every=100),
    "vqvae": dict(opt="adam", lr=2e-3, bs=32, steps=600, log_every=10, eval_every=100),
    "flow": dict(opt="adam", lr=2e-3, bs=64, steps=600, log_every=10, eval_every=100),
    "ssm": dict(opt="adamw", lr=3e-3, bs=32, steps=250, log_every=5, eval_every=25),
    "s2s": dict(opt="adam", lr=5e-3, bs=32, steps=300, log_every=5, eval_every=50),
    "mdn": dict(opt="adam", lr=3e-3, bs=64, steps=600, log_every=10, eval_every=60),
}
RUNS = {}


def _add(name, family, fmt, fault, seed, **kw):
    s = dict(DEF[family])
    s.update(name=name, family=family, format=fmt, fault=fault, seed=seed)
    s.update(kw)
    assert name not in RUNS, name
    RUNS[name] = s


def H(family, fmt, tag, seed, **kw):
    _add(f"h_{family}_{tag}_{fmt}", family, fmt, "none", seed, **kw)


def B(fault, family, fmt, seed, tag="", **kw):
    _add(f"b_{fault.replace('_', '')}_{family}{tag}_{fmt}", family, fmt, fault, seed, **kw)


# ------------------------------------------------------------------------------------------------ healthy (40)
H("convmixer", "tb", "adamwu", 1, sched="cosine", warmup=20, log_every=2, log_time=True)
H("convmixer", "catalyst", "momdrop", 2, opt="momentum", lr=0.05, steps=256, sched="step", milestones=[160])
H("convmixer", "composer", "sgd1cyc", 3, opt="sgd", lr=0.2, sched="onecycle")
H("convmixer", "hfconsole", "short", 4, opt="adamw", steps=40, log_every=2, eval_every=20, sched="cosine")
H("convmixer", "lightning", "noisy", 5, opt="radam", bs=8, steps=300, log_every=1, eval_every=50)
H("tab", "csvcum", "long", 11, steps=2000, log_every=20, eval_every=200, log_mem=True)
H("tab", "sacred", "adagrad", 12, task="cls", opt="adagrad", lr=0.03, steps=360, log_gn=True)
H("tab", "pylog", "rmsexp", 13, opt="rmsprop", lr=2e-3, sched="exp", gamma=0.997, log_time=True, log_mem=True)
H("tab", "tb", "sgdr", 14, task="cls", opt="nesterov", lr=0.02, sched="sgdr", period=200, steps=800, log_every=5)
H("tab", "deepspeed", "fp16", 15, opt="adam", scaler=100, steps=500, log_every=5)
H("tab", "ranks", "ddp", 16, task="cls", opt="adamw", ranks=True, bs=64, steps=300, log_every=5)
H("sgns", "dvclive", "long", 21, steps=3000, log_every=50, eval_every=500, sched="linear", log_time=True)
H("sgns", "print", "short", 22, opt="adagrad", lr=0.3, steps=60, log_every=2, eval_every=30)
H("sgns", "wandb", "adagrad", 23, opt="adagrad", lr=0.2, log_gn=True, log_time=True)
H("sgns", "raytune", "adamax", 24, opt="adamax", lr=2e-2, log_every=25, eval_every=100)
H("bpr", "torchtune", "adam", 31, log_every=5)
H("bpr", "hfconsole", "cos", 32, opt="adamw", sched="warmup_cosine", warmup=40, steps=800)
H("bpr", "sacred", "rms", 33, opt="rmsprop", lr=3e-3, log_time=True)
H("bpr", "print", "resume", 34, opt="nadam", steps=500, ckpt_every=100, crash_at=300, resume_from=300)
H("vqvae", "wandb", "adam", 41, log_gn=True, log_mem=True)
H("vqvae", "composer", "adamax", 42, opt="adamax", lr=4e-3)
H("vqvae", "tb", "warm", 43, opt="adamw", warmup=50, sched="cosine", steps=800, log_time=True)
H("vqvae", "catalyst", "radam", 44, opt="radam", lr=3e-3)
H("flow", "raytune", "long", 51, steps=1500, log_every=30, eval_every=150, log_time=True)
H("flow", "pylog", "adamw", 52, opt="adamw", log_time=True, logger_name="flows.realnvp")
H("flow", "lightning", "rms", 53, opt="rmsprop", lr=1e-3)
H("flow", "dvclive", "bump", 54, opt="nadam", lr=6e-3, warmup=30, sched="cosine", log_every=5, log_gn=True)
H("ssm", "torchtune", "wucos", 61, sched="warmup_cosine", warmup=25, log_every=1)
H("ssm", "sacred", "adam", 62, opt="adam", steps=200)
H("ssm", "hfconsole", "nadam", 63, opt="nadam", lr=4e-3, steps=150, log_every=5)
H("ssm", "deepspeed", "const", 64, steps=120, log_every=2)
H("s2s", "wandb", "adam", 71, log_time=True, log_gn=True)
H("s2s", "print", "rms", 72, opt="rmsprop", lr=2e-3, log_every=10)
H("s2s", "csvcum", "clipwu", 73, clip=1.0, warmup=30, sched="linear", steps=250)
H("s2s", "composer", "nadam", 74, opt="nadam", lr=2e-3, clip=1.0, steps=200, log_every=4, log_gn=True)
H("mdn", "tb", "adam", 81, log_time=True)
H("mdn", "lightning", "mom", 82, opt="momentum", lr=0.01, steps=800)
H("mdn", "torchtune", "adamw", 83, opt="adamw", steps=400, log_every=2)
H("mdn", "print", "noisy", 84, bs=16, steps=400, log_every=1, eval_every=100)
H("mdn", "deepspeed", "rmsdrop", 85, opt="rmsprop", lr=2e-3, sched="step", milestones=[400], steps=700)

# ------------------------------------------------------------------------------------------------ injected
# new kinds
B("zerograd_after_bwd", "tab", "pylog", 101, opt="momentum", lr=0.02)
B("zerograd_after_bwd", "convmixer", "dvclive", 102, log_gn=True)
B("causal_leak", "ssm", "wandb", 103, leak=True)
B("causal_leak", "ssm", "sacred", 104, leak=True, opt="adam", steps=200)
B("pad_in_loss", "s2s", "composer", 105, pad_in_loss=True)
B("pad_in_loss", "s2s", "csvcum", 106, pad_in_loss=True, opt="rmsprop", lr=2e-3)
B("opt_reset_epoch", "tab", "tb", 107, task="cls", lr=1e-2, steps=640, log_every=1, n_train=1024)
B("opt_reset_epoch", "tab", "hfconsole", 108, lr=1e-2, steps=640, log_every=2, n_train=1024)
B("warmup_restart_epoch", "convmixer", "lightning", 109, opt="momentum", lr=0.05, warmup=20, steps=256)
B("warmup_restart_epoch", "bpr", "deepspeed", 110, opt="adamw", warmup=80, steps=500, log_every=5)
B("warmup_restart_epoch", "sgns", "torchtune", 111, warmup=100, steps=600, log_every=5)
B("dup_batches", "tab", "print", 112, task="cls", opt="sgd", lr=0.1, log_every=1, steps=400, dup=4)
B("dup_batches", "convmixer", "tb", 113, log_every=1, steps=400, dup=4)
B("clip_prescale", "tab", "sacred", 114, opt="momentum", lr=0.02, scaler=200, ref_drop=["fault"])
B("clip_prescale", "flow", "wandb", 115, opt="momentum", lr=5e-3, scaler=200)
B("clip_prescale", "convmixer", "deepspeed", 116, scaler=200)
B("dropout_typo", "tab", "raytune", 117, task="cls", dropout=0.9, log_every=20, ref_drop=["dropout"])
B("dropout_typo", "tab", "catalyst", 118, dropout=0.9, hidden=128, ref_drop=["dropout"])
B("loss_x_const", "tab", "csvcum", 119, opt="sgd", lr=0.01, const=1e4)
B("loss_x_const", "sgns", "print", 120, opt="sgd", lr=0.5, const=1e3)
B("val_misaligned", "convmixer", "hfconsole", 121)
B("val_misaligned", "tab", "lightning", 122, task="cls", opt="adamw")
B("embed_maxnorm", "sgns", "dvclive", 123, max_norm=1e-3)
B("embed_maxnorm", "bpr", "wandb", 124, max_norm=1e-3)
B("fp16_underflow", "tab", "tb", 125, underflow_div=1e9, log_gn=True)
B("fp16_underflow", "vqvae", "pylog", 126, underflow_div=4e6)
B("temp_anneal_nan", "convmixer", "composer", 127, tau_half=20, steps=300)
B("temp_anneal_nan", "convmixer", "sacred", 128, tau_half=60, opt="momentum", lr=0.05, steps=300, log_every=10)
B("exp_overflow", "flow", "raytune", 129, unbounded_scale=True, opt="momentum", lr=1e-3, log_every=5)
B("exp_overflow", "mdn", "lightning", 130, naive_mix=True, ls_gain=20.0, lr=1e-2, log_every=5)
B("lr_unit_typo", "s2s", "hfconsole", 131, lr=1.0, ref_set={"lr": 1e-3})
B("lr_unit_typo", "ssm", "torchtune", 132, lr=0.1, ref_set={"lr": 1e-4})
B("lr_unit_typo", "tab", "catalyst", 133, task="cls", lr=1.0, ref_set={"lr": 1e-3})
B("hook_leak", "tab", "csvcum", 134, hidden=256, bs=128, steps=500)
B("hook_leak", "mdn", "dvclive", 135, log_mem=True, bs=1024, steps=600)
# classic kinds
B("lr_too_high", "bpr", "sacred", 136, opt="sgd", lr=200.0)
B("lr_too_high", "vqvae", "wandb", 137, opt="sgd", lr=100.0)
B("lr_too_high", "flow", "print", 138, opt="momentum", lr=0.3)
B("lr_too_low", "sgns", "catalyst", 139, opt="sgd", lr=1e-3, steps=1600)
B("lr_too_low", "ssm", "lightning", 140, lr=1e-6)
B("grad_explode", "s2s", "tb", 141, opt="sgd", lr=3.0)
B("grad_explode", "s2s", "pylog", 142, opt="sgd", lr=3.0, seed2=1)
B("vanishing_sigmoid", "tab", "tb", 143, task="cls", depth=12, act="sigmoid", log_layers=True, opt="sgd", lr=0.05)
B("vanishing_sigmoid", "tab", "pylog", 144, depth=10, act="sigmoid", log_layers=True, opt="momentum", lr=0.01)
B("dead_relu", "tab", "pylog", 145, bias_init=-6.0, log_dead=True)
B("dead_relu", "convmixer", "tb", 146, bias_init=-6.0, log_dead=True, opt="momentum", lr=0.02)
B("overfit_tiny", "ssm", "raytune", 147, n_train=8, bs=8, steps=300, log_every=5, eval_every=20)
B("overfit_tiny", "tab", "wandb", 148, task="cls", n_train=48, hidden=128, steps=800, eval_every=40)
B("label_noise", "convmixer", "lightning", 149, noise=0.6, n_train=256, steps=600, eval_every=40)
B("label_noise", "tab", "composer", 150, task="cls", noise=0.5, n_train=256, hidden=128, steps=1500, eval_every=100, log_every=10)
B("corrupt_batch", "tab", "torchtune", 151, bad_steps=[300], factor=60.0, log_every=2)
B("corrupt_batch", "flow", "hfconsole", 152, bad_steps=[250, 420], factor=30.0, log_every=2)
B("corrupt_batch", "vqvae", "csvcum", 153, bad_steps=[350], factor=40.0, log_every=1)
B("nan_midrun", "mdn", "composer", 154, nan_at=330)
B("nan_midrun", "flow", "deepspeed", 155, nan_at=270, log_every=5)
B("nan_midrun", "convmixer", "print", 156, nan_at=120)
B("nan_masked", "tab", "wandb", 157, nan_at=350, mask="prev")
B("nan_masked", "vqvae", "dvclive", 158, nan_at=300, mask="zero")
B("nan_masked", "flow", "hfconsole", 159, nan_at=380, mask="hf")
B("loss_scale_collapse", "tab", "deepspeed", 160, task="cls", scaler=100, lsc_from=250, log_every=5)
B("loss_scale_collapse", "mdn", "sacred", 161, scaler=100, lsc_from=300)
B("slow_loader", "convmixer", "catalyst", 162, slow_from=100, slow_s=0.03, steps=256)
B("slow_loader", "tab", "raytune", 163, slow_s=0.004, log_time=True, log_every=20)
B("slow_loader", "sgns", "pylog", 164, slow_from=300, slow_s=0.006, log_time=True)
B("sync_save_stall", "tab", "tb", 165, stall_every=100, stall_s=0.2, log_time=True, log_every=1)
B("sync_save_stall", "bpr", "wandb", 166, stall_every=50, stall_s=0.25, log_time=True, log_every=1)
B("straggler", "tab", "ranks", 167, bs=64, strag_s=0.01)
B("straggler", "mdn", "ranks", 168, bs=128, strag_s=0.008, strag_from=200)
B("resume_replay", "sgns", "print", 169, ckpt_every=100, crash_at=450, resume_from=300)
B("resume_replay", "bpr", "torchtune", 170, ckpt_every=100, crash_at=380, resume_from=200, log_every=5)


def job(spec):
    import engine
    import writers
    t = time.time()
    rec = engine.train(spec)
    secs = time.time() - t
    ref = None
    if spec.get("ref_drop") or spec.get("ref_set"):
        r2 = engine.train(spec, want_ref=True)
        v = [p["loss"] for p in r2["points"]]
        ref = statistics.median(v[int(0.9 * len(v)):])
    d = os.path.join(HERE, "runs", spec["name"])
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    L = writers.WRITERS[spec["format"]](d, spec, rec)
    return spec["name"], L, ref, secs, rec["spe"], rec["n_train"]


def notes_for(spec, L, spe, info, ref, found):
    v = [a for a in L["loss"] if isinstance(a, float) and math.isfinite(a) or isinstance(a, int)]
    parts = []
    if L["loss"]:
        parts.append(f"loss first {L['loss'][0]:.4g} -> last {L['loss'][-1]:.4g} (min {min(v):.4g})" if v else "loss never finite")
    if L["val"]:
        parts.append(f"val loss {L['val'][0]:.4g} -> {L['val'][-1]:.4g} (min {min(L['val']):.4g})")
    if ref is not None:
        parts.append(f"same run without the bug ends at {ref:.4g}")
    parts += info
    parts.append(f"x-axis unit: {L['unit']}; {spe} optimizer steps/epoch; run {spec['steps']} steps, opt {spec['opt']} "
                 f"lr {spec['lr']:g} sched {spec.get('sched', 'const')}{' warmup ' + str(spec['warmup']) if spec.get('warmup') else ''} "
                 f"bs {spec['bs']}, logged every {spec['log_every']}")
    return "; ".join(parts) + "."


def split(labels):
    """Stratified I/J split: within each fault kind (healthy: each family) runs sorted by format alternate,
    starting on the split that is behind overall; then format balance is improved by swapping within a kind."""
    groups = collections.defaultdict(list)
    for n, r in labels.items():
        groups[r["fault"].split(" ")[0] if r["fault"] != "none" else "none:" + r["family"]].append(n)
    cnt = collections.Counter()
    for k in sorted(groups, key=lambda k: (len(groups[k]), k)):
        names = sorted(groups[k], key=lambda n: (labels[n]["format"], n))
        first = "I" if cnt["I"] <= cnt["J"] else "J"
        for i, n in enumerate(names):
            s = first if i % 2 == 0 else ("J" if first == "I" else "I")
            labels[n]["split"] = s
            cnt[s] += 1

    def imbalance():
        f = collections.defaultdict(collections.Counter)
        for r in labels.values():
            f[r["format"]][r["split"]] += 1
            f["fam:" + r["family"]][r["split"]] += 1
            f["faulty" if r["faults"] else "healthy"][r["split"]] += 1
        return sum(abs(c["I"] - c["J"]) for c in f.values())
    for _ in range(3):
        for k, names in groups.items():
            for a in names:
                for b in names:
                    if labels[a]["split"] == "I" and labels[b]["split"] == "J":
                        before = imbalance()
                        labels[a]["split"], labels[b]["split"] = "J", "I"
                        if imbalance() >= before:
                            labels[a]["split"], labels[b]["split"] = "I", "J"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--show", action="store_true")
    a = ap.parse_args()
    specs = [s for n, s in RUNS.items() if not a.only or any(o in n for o in a.only.split(","))]
    t0 = time.time()
    out = {}
    with mp.get_context("fork").Pool(1, maxtasksperchild=1) as pool:     # one worker process
        for name, L, ref, secs, spe, ntr in pool.imap_unordered(job, specs):
            out[name] = (L, ref, secs, spe)
            print(f"{name:45s} {secs:6.1f}s", flush=True)
    import label as LB
    labels = {}
    for s in specs:
        L, ref, secs, spe = out[s["name"]]
        faults, tol, info, found, extra = LB.label(L, s, ref)
        fault = s["fault"]
        if fault != "none" and not faults:
            fault += " (no visible trace)"
        labels[s["name"]] = dict(split=None, family=s["family"] + (("_" + s["task"]) if s["family"] == "tab" else ""),
                                 fault=fault, format=s["format"], faults=faults, tolerated=tol,
                                 notes=notes_for(s, L, spe, info, ref, found), train_seconds=round(secs, 2))
        if a.show or (s["fault"] == "none" and found) or (s["fault"] != "none" and not faults) or extra:
            print("==", s["name"], "faults", [(f["symptom"], f["onset_step"]) for f in faults], "found", {k: v["info"] for k, v in found.items()},
                  "| tol", [t["symptom"] for t in tol])
            if a.show:
                print("   loss", [round(x, 4) if isinstance(x, float) else x for x in L["loss"][:: max(1, len(L['loss']) // 25)]])
                print("   val", [round(x, 4) for x in L["val"]])
    print(f"trained {len(specs)} runs in {time.time() - t0:.0f}s (sum of train time {sum(o[2] for o in out.values()):.0f}s)")
    if a.only:
        return
    for stale in set(os.listdir(os.path.join(HERE, "runs"))) - set(labels):
        shutil.rmtree(os.path.join(HERE, "runs", stale))
    split(labels)
    for n in labels:
        labels[n]["family"] = labels[n]["family"].replace("tab_reg", "tab").replace("tab_cls", "tab")
    with open(os.path.join(HERE, "labels.json"), "w") as f:
        json.dump({"_rule": RULE, "runs": dict(sorted(labels.items()))}, f, indent=1)


if __name__ == "__main__":
    main()
