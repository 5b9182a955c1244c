"""Run list, training (one forked worker at a time, results cached in /tmp/indep7_cache), writing, labels, split.
Usage: make_runs.py [--fresh] [--only r001,r002] [--relabel]"""
import json
import math
import multiprocessing as mp
import os
import pickle
import random
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
CACHE = "/tmp/indep7_cache"
TWIN_DIR = "/tmp/indep7_twin"

BASE = {
    "mixer": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "ftt": dict(steps=400, lr=3e-3, opt="adam", bs=32),
    "byol": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "siren": dict(steps=400, lr=3e-3, opt="adam", bs=64),
    "pinn": dict(steps=600, lr=1e-2, opt="adam", bs=64),
    "settf": dict(steps=400, lr=3e-3, opt="adam", bs=32),
    "dcn": dict(steps=400, lr=3e-3, opt="adam", bs=32),
    "ranknet": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "perceiver": dict(steps=400, lr=3e-3, opt="adam", bs=64),
}
EPOCH_EVAL = {"plbar", "mxnet", "espnet", "allennlp", "skorch", "tvref"}
SPECS = []
# copied verbatim from the "_rule" key of indep6/labels.json
RULE = ("a finding at warning or above hits a fault when the symptom is equal and, where the fault has an onset_step, its onset "
        "is within max(20 steps, 10% of the run) of onset_step, of any event_steps entry, or inside onset_range widened by that "
        "tolerance; any other finding at warning or above that no 'tolerated' entry covers is a false positive; a healthy run "
        "has faults: [].")


def H(family, fmt, note, **kw):
    SPECS.append(dict(kind=None, family=family, fmt=fmt, note=note, **kw))


def R(kind, family, fmt, note, **kw):
    SPECS.append(dict(kind=kind, family=family, fmt=fmt, note=note, **kw))


# ------------------------------------------------------------------ healthy by construction
H("mixer", "tb", "warm-up + cosine", sched="warmup_cos", warmup=30, every=5)
H("mixer", "hf", "cosine with warm restarts (lr jumps up at each restart)", sched="cos_restart", period=100, every=10)
H("mixer", "onmt", "planned lr drop x0.1 at step 200", sched="step_drop", drop_at=200, every=10)
H("mixer", "plbar", "batch 8, noisy per-step loss on the bar", bs=8, steps=400, n_train=640, every=1)
H("mixer", "wandb", "short run (60 steps) logged every step", steps=60, every=1, eval_every=20)
H("ftt", "wandb", "fp16-style dynamic loss scale that backs off and grows again", fp16=True, every=5)
H("ftt", "espnet", "OneCycle schedule", sched="onecycle", every=10)
H("ftt", "mlflow", "crash at 250 and exact resume from the step-250 checkpoint", crash=(250, 250), ckpt_every=50, every=10)
H("ftt", "tvref", "exponential decay", sched="exp", gamma=0.996, every=10)
H("ftt", "onmt", "long run (1500 steps)", steps=1500, every=25, eval_every=250)
H("byol", "tb", "warm-up + cosine, layer grad norms logged", sched="warmup_cos", warmup=40, every=5, layer_gn=True)
H("byol", "clearml", "self-supervised loss settles", every=10)
H("byol", "accelerate", "crash at 200 and exact resume", crash=(200, 200), ckpt_every=50, every=10)
H("byol", "mmjson", "batch 8, windowed mean", bs=8, every=10)
H("byol", "estimator", "long run (1200 steps), current-batch loss", steps=1200, every=50, eval_every=200)
H("siren", "skorch", "per-epoch table, noisy-pixel floor", steps=450)
H("siren", "allennlp", "per-epoch metrics files", steps=360)
H("siren", "hf", "warm-up then constant", sched="warmup_const", warmup=60, every=10)
H("siren", "mlflow", "planned lr drop at 250", sched="step_drop", drop_at=250, every=10)
H("siren", "wandb", "short run (60 steps)", steps=60, every=1, eval_every=20)
H("pinn", "tb", "tanh activations logged (not saturated), layer grad norms", probe="sat", layer_gn=True, every=10)
H("pinn", "accelerate", "cosine decay, layer grad norms", sched="cos", layer_gn=True, every=10)
H("pinn", "skorch", "per-epoch table; a PINN loss that falls late", steps=600)
H("pinn", "estimator", "current-batch loss every 25 steps", every=25, eval_every=100)
H("pinn", "mmjson", "windowed mean", every=10)
H("settf", "ppdet", "median-smoothed loss, no validation", every=10)
H("settf", "espnet", "warm-up + linear decay", sched="warmup_linear", warmup=40, every=10)
H("settf", "tbranks", "2 simulated ranks of equal speed", ranks=2, every=5)
H("settf", "clearml", "cosine with warm restarts", sched="cos_restart", period=130, every=10)
H("settf", "plbar", "Lightning bar, loss starts high (5-7) and drops fast", every=5)
H("dcn", "mxnet", "log-loss that settles high (~0.5)", steps=800, every=25)
H("dcn", "tb", "ReLU dead fraction logged (low)", probe="dead", every=10)
H("dcn", "hf", "log-loss settles high", every=20)
H("dcn", "accelranks", "2 simulated ranks of equal speed", ranks=2, every=10)
H("dcn", "wandb", "long run (1500 steps), dead fraction logged", steps=1500, probe="dead", every=25, eval_every=250)
H("ranknet", "tvref", "listwise loss settles far above 0", every=10, n_train=640)
H("ranknet", "ppdet", "listwise loss settles high", every=5)
H("ranknet", "allennlp", "per-epoch", n_train=640, steps=400)
H("ranknet", "mlflow", "crash at 150 and exact resume", crash=(150, 150), ckpt_every=50, every=5)
H("ranknet", "espnet", "Nesterov SGD", opt="nesterov", lr=0.05, n_train=640, every=5)
H("perceiver", "onmt", "warm-up + cosine", sched="warmup_cos", warmup=40, every=10)
H("perceiver", "skorch", "per-epoch, slow learner")
H("perceiver", "tb", "fp16-style loss scale that backs off and grows", fp16=True, every=5)
H("perceiver", "mxnet", "Speedometer windows", every=10)
H("perceiver", "allennlp", "per-epoch", steps=500)

# ------------------------------------------------------------------ injected bugs
R("lr_too_high", "mixer", "accelerate", "SGD+momentum lr 1.0", opt="sgdm", lr=1.0, every=5)
R("lr_too_high", "ranknet", "tvref", "SGD+momentum lr 5", opt="sgdm", lr=5.0, every=5, n_train=640)
R("lr_too_low", "ftt", "hf", "Adam lr 1e-6", lr=1e-6, every=10)
R("lr_too_low", "byol", "mmjson", "Adam lr 1e-6", lr=1e-6, every=10)
R("nan_midrun", "mixer", "tb", "NaN pixel in the batch of step 151", bug_step=150, every=5)
R("nan_midrun", "dcn", "espnet", "NaN numeric feature in the batch of step 201", bug_step=200, every=10, steps=800)
R("nan_masked", "ftt", "hf", "NaN feature at step 181, HF logging_nan_inf_filter hides it", bug="nan_midrun", bug_step=180, every=10)
R("nan_masked", "pinn", "accelerate", "NaN collocation point at step 301, loss passed through torch.nan_to_num before logging", bug="nan_midrun", bug_step=300, every=10, mask="zero")
R("overfit_tiny", "ftt", "skorch", "64 training rows", n_train=64, bs=16, steps=600)
R("overfit_tiny", "perceiver", "onmt", "128 training sequences", n_train=128, bs=32, steps=600, every=10, eval_every=25)
R("corrupt_batch", "siren", "tb", "coordinates x40 in the batch of step 151", bad_steps=(150,), every=1)
R("corrupt_batch", "dcn", "clearml", "numeric features x40 in the batches of steps 121 and 261", bad_steps=(120, 260), every=1)
R("grad_explode", "settf", "wandb", "plain SGD lr 0.2 on unnormalised set sums, no clipping", opt="sgd", lr=0.2, every=5)
R("grad_explode", "pinn", "mlflow", "SGD lr 0.05 on the second-derivative residual, no clipping", opt="sgd", lr=0.05, every=10)
R("vanishing", "pinn", "tb", "12 sigmoid layers, layer grad norms logged", depth=12, act="sigmoid", layer_gn=True, every=10)
R("vanishing", "pinn", "wandb", "14 sigmoid layers", depth=14, act="sigmoid", layer_gn=True, every=10)
R("dead_relu", "dcn", "tb", "deep-tower biases initialised at -6", bias_init=-6.0, probe="dead", every=10)
R("dead_relu", "dcn", "accelerate", "deep-tower biases initialised at -5", bias_init=-5.0, probe="dead", every=10)
R("tanh_saturate", "pinn", "wandb", "init gain 5 on tanh layers", init_gain=5.0, probe="sat", every=10)
R("tanh_saturate", "pinn", "mlflow", "init gain 8 on tanh layers", init_gain=8.0, probe="sat", every=10)
R("loss_scale_collapse", "ftt", "tb", "sqrt-at-0 penalty from step 151 under a simulated fp16 scaler", fp16=True, bug_step=150, every=5)
R("loss_scale_collapse", "perceiver", "mmjson", "sqrt-at-0 penalty from step 201", fp16=True, bug_step=200, every=10)
R("slow_loader", "mixer", "tvref", "6 ms decode per batch from the start", bug_step=0, sleep=0.006, every=5)
R("slow_loader", "settf", "espnet", "8 ms per batch from step 201", bug_step=200, sleep=0.008, every=10)
R("periodic_stall", "byol", "ppdet", "80 ms checkpoint upload every 40 steps", stall_every=40, stall=0.08, every=5)
R("periodic_stall", "ranknet", "mmjson", "60 ms upload every 50 steps", stall_every=50, stall=0.06, every=5)
R("step_creep", "dcn", "tb", "running median over all history", steps=600, every=10)
R("step_creep", "ftt", "estimator", "running median over all history", steps=600, every=20)
R("mem_leak", "mixer", "wandb", "monitoring forward on 8 samples outside no_grad, outputs kept in a list", every=10)
R("mem_leak", "perceiver", "allennlp", "monitoring forward on 8 samples outside no_grad, outputs kept in a list", n_train=640, steps=500)
R("straggler", "settf", "tbranks", "rank 1 sleeps 8 ms per step from the start", ranks=2, bug_step=0, sleep=0.008, every=5)
R("straggler", "dcn", "accelranks", "rank 1 sleeps 8 ms per step from step 201", ranks=2, bug_step=200, sleep=0.008, every=10)
R("resume_replay", "byol", "tb", "crash at 240, restart from the step-150 checkpoint", crash=(240, 150), ckpt_every=50, every=5)
R("resume_replay", "ranknet", "clearml", "crash at 200, restart from the step-100 checkpoint", crash=(200, 100), ckpt_every=50, every=5)
R("grad_accum_unnorm", "ftt", "wandb", "4 micro-batches summed", accum=4, bs=16, every=5)
R("grad_accum_unnorm", "siren", "accelerate", "accumulation 4 switched on at step 200, summed", accum=4, switch_at=200, bs=32, every=10, eval_every=25)
R("clip_value_tiny", "mixer", "espnet", "clip_grad_value_(1e-4) under SGD+momentum", opt="sgdm", lr=0.05, every=5)
R("clip_value_tiny", "dcn", "hf", "clip_grad_value_(1e-4) under Adam", every=10)
R("lr_ws_twice", "ftt", "clearml", "lr 1e-3 x8 x8", lr=1e-3, every=5)
R("lr_ws_twice", "perceiver", "tb", "lr 1e-3 x8 x8", lr=1e-3, every=5)
R("sched_resume_reset", "mixer", "mlflow", "warm-up+cosine, crash at 200, scheduler state not restored", sched="warmup_cos", warmup=50, crash=(200, 200), ckpt_every=50, every=5)
R("sched_resume_reset", "siren", "tb", "warm-up then constant, crash at 250, scheduler rebuilt", sched="warmup_const", warmup=60, crash=(250, 250), ckpt_every=50, every=5)
R("label_smooth_099", "mixer", "skorch", "label_smoothing=0.99", smooth=0.99, n_train=640, steps=400)
R("label_smooth_099", "perceiver", "plbar", "label_smoothing=0.99", smooth=0.99, every=5)
R("detach_encoder", "mixer", "accelerate", "pooled features detached before the head", every=10)
R("detach_encoder", "mixer", "ppdet", "pooled features detached before the head", every=5)
R("softmax_wrong_dim", "ranknet", "wandb", "ListNet softmax over dim 0", every=5)
R("softmax_wrong_dim", "settf", "mmjson", "attention-pooling softmax over dim 0", every=10)
R("pinn_no_create_graph", "pinn", "hf", "second derivative with create_graph=False", every=10)
R("pinn_no_create_graph", "pinn", "clearml", "second derivative with create_graph=False", every=10)
R("ff_scale_huge", "siren", "mlflow", "Fourier scale 6 (1.5 intended)", ff_scale=6.0, every=10, eval_every=25)
R("ff_scale_huge", "siren", "allennlp", "Fourier scale 10", ff_scale=10.0, steps=360)
R("grad_ascent", "dcn", "wandb", "Adam(maximize=True)", every=5)
R("grad_ascent", "byol", "espnet", "Adam(maximize=True)", every=5)
R("clip_after_step", "ranknet", "tb", "SGD lr 2 with clip_grad_norm_(1.0) after step()", opt="sgd", lr=2.0, clip=1.0, every=5)
R("clip_after_step", "settf", "hf", "SGD+momentum lr 0.02, clip after step()", opt="sgdm", lr=0.02, clip=1.0, every=5)
R("zero_init", "mixer", "clearml", "all weights and biases zeroed", every=10)
R("zero_init", "ranknet", "estimator", "all weights and biases zeroed", every=10, eval_every=50)
R("half_overflow", "mixer", "hf", "fp16 softmax without max-subtraction, logit scale 4", logit_scale=4.0, steps=400, every=10)
R("half_overflow", "mixer", "espnet", "fp16 softmax without max-subtraction, logit scale 4", logit_scale=4.0, steps=400, every=5)
R("profiler_left_on", "settf", "tb", "torch.profiler started at step 151 and never stopped", bug_step=150, every=5)
R("profiler_left_on", "ranknet", "accelerate", "torch.profiler started at step 101", bug_step=100, every=5)
R("pad_mask_inverted", "settf", "clearml", "key_padding_mask inverted", every=10)
R("pad_mask_inverted", "settf", "estimator", "key_padding_mask inverted", every=10, eval_every=50)
R("bn_tiny_batch", "dcn", "tvref", "BatchNorm with batch size 2", bs=2, bn=True, lr=1e-3, n_train=1200, every=10)
R("bn_tiny_batch", "dcn", "plbar", "BatchNorm with batch size 2", bs=2, bn=True, lr=1e-3, n_train=400, every=10)
R("aug_on_val", "siren", "skorch", "coordinate jitter applied to validation", steps=450)
R("aug_on_val", "siren", "espnet", "coordinate jitter applied to validation", every=3)
R("ema_frozen", "byol", "wandb", "EMA momentum 1.0", every=5)
R("ema_frozen", "byol", "mxnet", "EMA momentum 1.0", every=10)

R("grad_ascent", "ftt", "tb", "Adam(maximize=True)", every=5)
R("lr_too_high", "dcn", "mmjson", "plain SGD lr 30", opt="sgd", lr=30.0, every=5)
R("overfit_tiny", "dcn", "hf", "200 training rows", n_train=200, bs=20, steps=800, every=20, eval_every=50)
R("corrupt_batch", "settf", "mmjson", "point coordinates x40 in the batch of step 201", bad_steps=(200,), every=1)
H("dcn", "clearml", "batch 8, current-batch loss every step", bs=8, every=1, steps=500)

# internal key (cache, seed) in declaration order; the public run name is a seeded permutation, so ids carry no information
_order = list(range(len(SPECS)))
random.Random(20261202).shuffle(_order)
for i, s in enumerate(SPECS):
    s["key"] = f"s{i + 1:03d}"
    s["name"] = f"r{_order[i] + 1:03d}"


def cfg_of(spec, bug_free=False):
    cfg = dict(BASE[spec["family"]])
    cfg.update({k: v for k, v in spec.items() if k not in ("kind", "fmt", "note", "name", "key")})
    cfg["seed"] = 1000 + int(spec["key"][1:])
    if spec["kind"] and not bug_free:
        cfg.setdefault("bug", spec["kind"])
    if bug_free:
        for k in ("bug", "bug_step", "ff_scale", "smooth", "logit_scale", "bias_init", "bad_steps"):
            cfg.pop(k, None)
        if spec["kind"] == "lr_too_low":
            cfg["lr"] = BASE[spec["family"]]["lr"]
        if spec["kind"] == "bn_tiny_batch":
            cfg["bs"] = 32
            cfg["bn"] = True
        if spec["kind"] == "tanh_saturate":
            cfg.pop("init_gain", None)
        if spec["kind"] == "vanishing":
            cfg["depth"] = 3
            cfg["act"] = "tanh"
    cfg.setdefault("every", 10)
    if spec["fmt"] in EPOCH_EVAL and "eval_every" not in spec:
        n = cfg.get("n_train", {"siren": 600, "dcn": 12000}.get(spec["family"], 2000))
        cfg["eval_every"] = 20 if spec["family"] == "pinn" else max(1, n // cfg["bs"])
    cfg.setdefault("eval_every", 50)
    return cfg


def _train(args):
    import torch
    torch.set_num_threads(1)
    from engine import train
    cfg, path = args
    t = time.time()
    res = train(cfg)
    res["train_seconds"] = round(time.time() - t, 2)
    with open(path, "wb") as f:
        pickle.dump(res, f)
    return path


def run_all(specs, fresh):
    os.makedirs(CACHE, exist_ok=True)
    todo = []
    for s in specs:
        from models import FAMILIES  # noqa
        for twin in ([False, True] if needs_twin(s) else [False]):
            p = os.path.join(CACHE, s["key"] + ("_twin" if twin else "") + ".pkl")
            if fresh or not os.path.exists(p):
                c = cfg_of(s, bug_free=twin)
                todo.append((c, p))
    ctx = mp.get_context("fork")
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        for i, p in enumerate(pool.imap(_train, todo)):
            print(f"[{i + 1}/{len(todo)}] {os.path.basename(p)}", flush=True)


def needs_twin(s):
    from label import TWIN_KINDS
    k = s["kind"]
    return bool(k) and (k in TWIN_KINDS or f"{k}_{s['family']}" in TWIN_KINDS)


def fix_eval(spec, res, cfg):
    return res


def write_and_label(s):
    from writers import WRITERS
    from label import locate, assign, STRICT, LOOSE
    res = pickle.load(open(os.path.join(CACHE, s["key"] + ".pkl"), "rb"))
    cfg = cfg_of(s)
    d = os.path.join(HERE, "runs", s["name"])
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    S = WRITERS[s["fmt"]](d, res, cfg)
    twin_final = None
    if needs_twin(s):
        tres = pickle.load(open(os.path.join(CACHE, s["key"] + "_twin.pkl"), "rb"))
        td = os.path.join(TWIN_DIR, s["name"])
        shutil.rmtree(td, ignore_errors=True)
        os.makedirs(td)
        TS = WRITERS[s["fmt"]](td, tres, cfg_of(s, bug_free=True))
        tv = [v for _, v in TS["loss"] if math.isfinite(v)]
        from writers import median
        twin_final = median(tv[int(0.9 * len(tv)):]) if len(tv) >= 10 else tv[-1]
    found = locate(S, STRICT, twin_final)
    loose_all = locate(S, LOOSE, twin_final)
    loose = {k: v for k, v in loose_all.items() if k not in found}
    faults, tol = assign(s["kind"], found, loose)
    fault = s["kind"] or "none"
    if s["kind"] and not faults:
        fault += " (no visible trace)"
    lv = [v for _, v in S["loss"]]
    fv = [v for v in lv if math.isfinite(v)]
    vv = [v for _, v in S["val"] if math.isfinite(v)]
    cfg_show = {k: v for k, v in cfg.items() if k not in ("family",)}
    notes = [f"x unit: {S['unit']}", f"loss aggregation: {S['agg']}", f"loss word: {res['loss_word']}",
             f"config: {json.dumps(cfg_show, sort_keys=True)}", f"design: {s['note']}"]
    if fv:
        notes.append(f"logged loss first {fv[0]:.4g}, min {min(fv):.4g}, last {lv[-1]:.4g} ({len(lv)} points)")
    if vv:
        notes.append(f"logged val first {vv[0]:.4g}, min {min(vv):.4g}, last {vv[-1]:.4g} ({len(vv)} points)")
    if twin_final is not None:
        notes.append(f"bug-free twin final logged level {twin_final:.4g}")
    for f in faults:
        notes.append(f"{f['symptom']}: {found[f['symptom']]['why']}")
    return {"family": s["family"], "fault": fault, "format": s["fmt"], "faults": faults, "tolerated": tol,
            "notes": "; ".join(notes), "train_seconds": res["train_seconds"]}


def split(runs):
    """Stratified by fault kind (healthy runs by family): each group is split as evenly as possible, and among the even
    splits of a group the one that best balances formats, families, labelled symptoms, faulty/healthy labels and
    no-trace runs across I7a/I7b is kept (greedy, then two refinement passes)."""
    import itertools
    groups = {}
    for s in SPECS:
        if s["name"] in runs:
            key = ("K:" + s["kind"]) if s["kind"] else ("H:" + s["family"])
            groups.setdefault(key, []).append(s["name"])

    def attrs(n):
        r = runs[n]
        a = ["fmt:" + r["format"], "fam:" + r["family"], "lab:" + ("faulty" if r["faults"] else "healthy"), "all"]
        if r["fault"].endswith("(no visible trace)"):
            a.append("notrace")
        a += ["sym:" + f["symptom"] for f in r["faults"]]
        return a
    A = {n: attrs(n) for n in runs}
    assign = {}

    def cost():
        c = {}
        for n, sp in assign.items():
            for a in A[n]:
                c[a] = c.get(a, 0) + (1 if sp == "I7a" else -1)
        return sum(abs(v) * (3 if k in ("all", "notrace") or k.startswith("lab:") else 1) for k, v in c.items())
    keys = sorted(groups, key=lambda k: (-len(groups[k]), k))
    for rnd in range(3):
        for k in keys:
            g = sorted(groups[k])
            for n in g:
                assign.pop(n, None)
            best = None
            half = len(g) // 2
            sizes = [half] if len(g) % 2 == 0 else [half, half + 1]
            for m in sizes:
                for combo in itertools.combinations(g, m):
                    for n in g:
                        assign[n] = "I7a" if n in combo else "I7b"
                    c = cost()
                    if best is None or c < best[0]:
                        best = (c, dict((n, assign[n]) for n in g))
            assign.update(best[1])
    return assign


def main():
    args = sys.argv[1:]
    fresh = "--fresh" in args
    only = None
    if "--only" in args:
        only = set(args[args.index("--only") + 1].split(","))
    specs = [s for s in SPECS if only is None or s["name"] in only or s["key"] in only]
    if "--relabel" not in args:
        run_all(specs, fresh)
    lp = os.path.join(HERE, "labels.json")
    old = json.load(open(lp))["runs"] if os.path.exists(lp) else {}
    runs = dict(old)
    for s in specs:
        runs[s["name"]] = write_and_label(s)
        r = runs[s["name"]]
        print(s["key"], s["name"], s["family"], s["fmt"], r["fault"], [f["symptom"] for f in r["faults"]], flush=True)
    runs = {k: runs[k] for k in sorted(runs)}
    sp = split(runs)
    for k in runs:
        runs[k] = {"split": sp[k], **{kk: vv for kk, vv in runs[k].items() if kk != "split"}}
    rule = RULE
    json.dump({"_rule": rule, "runs": runs}, open(lp, "w"), indent=1)


if __name__ == "__main__":
    main()
