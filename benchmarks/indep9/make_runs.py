"""Run list, training (one forked worker at a time, results cached in /tmp/indep9_cache), writing, labels, split.
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
CACHE = "/tmp/indep9_cache"
TWIN_DIR = "/tmp/indep9_twin"

BASE = {
    "capsnet": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "wavenet": dict(steps=300, lr=3e-3, opt="adam", bs=16),
    "performer": dict(steps=300, lr=2e-3, opt="adam", bs=32),
    "nbeats": dict(steps=300, lr=1e-3, opt="adam", bs=64),
    "dqn": dict(steps=400, lr=1e-3, opt="adam", bs=64),
    "kan": dict(steps=300, lr=3e-3, opt="adam", bs=64),
    "pixelcnn": dict(steps=300, lr=3e-3, opt="adam", bs=32),
}
EPOCH_EVAL = {"keras", "fastai", "ignite"}
SPECS = []
# copied verbatim from the "_rule" key of indep8/labels.json
RULE = ("a finding at warning or above hits a fault when the symptom is equal and, where the fault has an onset_step, its onset "
        "is within max(20 steps, 10% of the run) of onset_step, of any event_steps entry, or inside onset_range widened by that "
        "tolerance; any other finding at warning or above that no 'tolerated' entry covers is a false positive; a healthy run "
        "has faults: [].")


def H(family, fmt, note, **kw):
    SPECS.append(dict(kind=None, family=family, fmt=fmt, note=note, **kw))


def R(kind, family, fmt, note, **kw):
    SPECS.append(dict(kind=kind, family=family, fmt=fmt, note=note, **kw))


# ------------------------------------------------------------------ healthy by construction
H("capsnet", "keras", "per-epoch console, 30 epochs of 10 batches", n_train=320)
H("capsnet", "tb", "warm-up + cosine, ReLU dead fraction logged (low)", sched="warmup_cos", warmup=30, probe="dead", every=5)
H("capsnet", "ignite", "current-batch loss every 5 iterations, epoch validation", n_train=800, every=5)
H("capsnet", "orbit", "crash at 150 and exact resume from the step-150 checkpoint", crash=(150, 150), ckpt_every=50, every=10)
H("wavenet", "clu", "simulated fp16 dynamic loss scale that backs off and grows", fp16=True, growth=40, every=5)
H("wavenet", "litgpt", "batch 4, every iteration logged (noisy)", bs=4, every=1, eval_every=50)
H("wavenet", "paddle", "planned lr drop x0.1 at step 200", sched="step_drop", drop_at=200, every=5)
H("wavenet", "tb", "tanh input saturation logged (low)", probe="sat", every=5)
H("performer", "hf", "cosine with warm restarts (lr jumps back up)", sched="cos_restart", period=100, every=10)
H("performer", "ranks", "2 simulated ranks of equal speed", ranks=2, bs=64, every=5)
H("performer", "llamafactory", "warm-up then constant", sched="warmup_const", warmup=50, every=5)
H("performer", "fastai", "smoothed train loss, 10 epochs of 30 batches", n_train=960, steps=300)
H("nbeats", "mlflow", "exponential lr decay", sched="exp", gamma=0.993, every=5)
H("nbeats", "clu", "OneCycle", sched="onecycle", every=10)
H("nbeats", "keras", "per-epoch console, 40 epochs", n_train=512, bs=64, steps=320)
H("nbeats", "litgpt", "crash at 200 and exact resume", crash=(200, 200), ckpt_every=50, every=5)
H("dqn", "tb", "DQN TD loss (moves with the target-network syncs)", every=5)
H("dqn", "orbit", "DQN, longer run", steps=600, every=10)
H("dqn", "paddle", "DQN, target sync every 25 steps", sync_every=25, every=5)
H("dqn", "litgpt", "DQN, every 2 iterations", every=2)
H("kan", "swift", "KAN, Gaussian NLL that goes negative", gauss=True, every=5)
H("kan", "hf", "triangular cyclic lr (max 4x)", sched="cyclic", max_mult=4.0, period=100, every=5)
H("kan", "fastai", "smoothed train loss, 30 epochs", n_train=640, steps=300)
H("kan", "ignite", "Gaussian NLL below zero, current batch", gauss=True, n_train=1600, every=5)
H("kan", "ranks", "2 simulated ranks of equal speed", ranks=2, bs=128, every=5)
H("pixelcnn", "llamafactory", "warm-up + linear decay", sched="warmup_linear", warmup=30, every=5)
H("pixelcnn", "mlflow", "settles high (masked BCE of noisy bits)", every=5)
H("pixelcnn", "clu", "OneCycle, loss scale off", sched="onecycle", every=5)
H("pixelcnn", "orbit", "batch 8, noisy", bs=8, every=10)
H("nbeats", "paddle", "Nesterov SGD", opt="nesterov", lr=0.05, every=5)
H("capsnet", "swift", "swift log of a healthy run (RSS flat)", every=5)
H("wavenet", "hf", "planned lr drop at 150", sched="step_drop", drop_at=150, every=10)

# ------------------------------------------------------------------ injected bugs
R("label_smooth_one", "performer", "hf", "CrossEntropyLoss(label_smoothing=1.0)", every=10)
R("label_smooth_one", "performer", "llamafactory", "label_smoothing=1.0", every=5)
R("label_perm_desync", "capsnet", "ignite", "inputs and labels drawn with two different permutations", n_train=800, every=5)
R("label_perm_desync", "kan", "swift", "inputs and targets drawn with two different permutations", every=5)
R("routing_wrong_dim", "capsnet", "tb", "routing softmax over the input capsules (dim=1)", every=5)
R("routing_wrong_dim", "capsnet", "clu", "routing softmax over dim=1", every=10)
R("freeze_left_on", "kan", "mlflow", "backbone requires_grad_(False) never undone; only the output layer trains", every=5)
R("freeze_left_on", "pixelcnn", "orbit", "backbone frozen; only the 1x1 output conv trains", every=10)
R("debug_subset_left", "performer", "keras", "train_set[:48] debug slice left in", n_train=48, bs=16, steps=300)
R("debug_subset_left", "performer", "fastai", "train_set[:48] debug slice left in", n_train=48, bs=16, steps=300)
R("sgd_lr_momentum_high", "kan", "paddle", "SGD momentum 0.9, lr 0.5 (grad-norm clip 1.0 keeps it finite)", opt="sgdm", lr=0.5, clip=1.0, every=5)
R("sgd_lr_momentum_high", "nbeats", "llamafactory", "SGD momentum 0.9, lr 1.5, clip 1.0", opt="sgdm", lr=1.5, clip=1.0, every=5)
R("init_gain_x5", "nbeats", "clu", "every Linear weight x3 at init", gain=3.0, every=5)
R("init_gain_x5", "nbeats", "mlflow", "every Linear weight x4 at init", gain=4.0, every=5)
R("plain_chain_sigmoid", "nbeats", "tb", "6 blocks x 4 sigmoid layers chained without the residual stack; layer grad norms logged", layer_gn=True, every=5)
R("plain_chain_sigmoid", "nbeats", "clu", "same, CLU log", layer_gn=True, every=10)
R("gate_bias_init_all", "nbeats", "mlflow", "bias -3 on every Linear; dead fraction logged", probe="dead", every=5)
R("gate_bias_init_all", "nbeats", "tb", "bias -3 on every Linear", probe="dead", every=5)
R("no_mulaw_input", "wavenet", "tb", "raw int16-scale input, no mu-law; tanh saturation logged", probe="sat", every=5)
R("no_mulaw_input", "wavenet", "clu", "raw int16-scale input", probe="sat", every=10)
R("python_per_sample_aug", "kan", "paddle", "per-element Python jitter loop in the main process", aug_passes=150, every=5)
R("python_per_sample_aug", "capsnet", "tb", "per-element Python jitter loop", aug_passes=80, every=5)
R("cache_evict_periodic", "wavenet", "litgpt", "sample cache evicted every 40 steps (re-decode + 80 ms read)", evict_every=40, every=5)
R("cache_evict_periodic", "pixelcnn", "paddle", "cache evicted every 50 steps (re-decode + 150 ms read)", evict_every=50, stall=0.15, every=5)
R("per_full_resort", "dqn", "litgpt", "prioritized replay re-sorted in full every 40 steps", every=5)
R("per_full_resort", "dqn", "orbit", "prioritized replay re-sorted in full every 50 steps (40 passes)", resort_every=50, resort_passes=40, every=10)
R("aux_metric_tensor_accum", "capsnet", "swift", "logged-only flipped-view metric summed as a tensor from step 50", bug_step=50, every=5)
R("aux_metric_tensor_accum", "wavenet", "tb", "logged-only metric summed as a tensor from step 100", bug_step=100, every=5)
R("priority_keeps_graph", "dqn", "swift", "TD-error priorities stored without detach (hidden 512, batch 512)", hid=512, bs=512, steps=300, every=5)
R("priority_keeps_graph", "dqn", "mlflow", "priorities stored without detach", hid=512, bs=512, steps=300, every=5)
R("rank1_debug_hook", "performer", "ranks", "rank 1 re-runs its forward 3x in a debug hook from step 120", ranks=2, bs=64, bug_step=120, every=5)
R("rank1_debug_hook", "kan", "ranks", "rank 1 debug hook from step 100 (4 extra forwards)", ranks=2, bs=128, bug_step=100, extra_fwd=4, every=5)
R("where_nan_grad_scaler", "wavenet", "clu", "torch.where-guarded entropy bonus from step 150, simulated fp16 scaler", bug="where_nan_grad", bug_step=150, fp16=True, every=5)
R("where_nan_grad_scaler", "wavenet", "tb", "same from step 100", bug="where_nan_grad", bug_step=100, fp16=True, every=5)
R("where_nan_grad_guard", "wavenet", "mlflow", "same term from step 120, no scaler; non-finite-grad steps skipped", bug="where_nan_grad", bug_step=120, grad_guard=True, every=5)
R("where_nan_grad_guard", "wavenet", "swift", "same from step 200", bug="where_nan_grad", bug_step=200, grad_guard=True, every=10)
R("reduction_sum_accum", "performer", "swift", "criterion reduction='sum', accumulation 4 x batch 8", accum=4, bs=8, every=10)
R("reduction_sum_accum", "kan", "hf", "reduction='sum', accumulation 2 x batch 32", accum=2, bs=32, every=10)
R("ckpt_lexsort", "pixelcnn", "litgpt", "crash at 250, resume picks max('ckpt_50'..'ckpt_250') = ckpt_50", crash=(250, 250), ckpt_every=50, every=5)
R("ckpt_lexsort", "dqn", "clu", "crash at 300, resume from ckpt_50", crash=(300, 300), ckpt_every=50, every=10)
R("ema_deepcopy", "kan", "orbit", "EMA rebuilt with deepcopy every step from step 150", ema=True, copies=4, bug_step=150, every=10)
R("ema_deepcopy", "performer", "litgpt", "EMA deepcopy every step from step 120", ema=True, copies=4, bug_step=120, every=5)
R("warmup_wrong_units", "performer", "llamafactory", "500-step warm-up applied per epoch", sched="warmup_epochs_as_steps", warmup=500, lr=2e-2, every=5)
R("warmup_wrong_units", "capsnet", "hf", "500-step warm-up applied per epoch", sched="warmup_epochs_as_steps", warmup=500, lr=3e-2, n_train=640, every=10)
R("steplr_per_batch", "pixelcnn", "clu", "StepLR(step_size=30 epochs) stepped per batch", sched="steplr", step_size=30, every=5)
R("steplr_per_batch", "kan", "paddle", "StepLR(step_size=40) stepped per batch", sched="steplr", step_size=40, every=5)
R("hand_bce_log0", "pixelcnn", "litgpt", "hand-written BCE, Adam lr 0.01", lr=1e-2, every=5)
R("hand_bce_log0", "pixelcnn", "ignite", "hand-written BCE, Adam lr 0.01", lr=1e-2, seed=1, every=5)
R("empty_target_batch", "pixelcnn", "orbit", "empty inpainting masks in the batch of step 181", bad_steps=(180,), every=10)
R("empty_target_guarded", "pixelcnn", "hf", "empty masks at step 151; the loop skips the NaN batch; HF filter", bug="empty_target_batch", bad_steps=(150,), nan_guard=True, every=10)
R("empty_target_guarded", "pixelcnn", "llamafactory", "empty masks at step 201; skipped; HF-based filter", bug="empty_target_batch", bad_steps=(200,), nan_guard=True, every=5)
R("int16_shard", "wavenet", "litgpt", "int16 batches at steps 121 and 221", bad_steps=(120, 220), every=1)
R("int16_shard", "wavenet", "ignite", "int16 batches (x30000) at steps 151 and 251", bad_steps=(150, 250), corrupt_mult=30000.0, n_train=1000, every=1)
R("decay_sign_flip", "kan", "orbit", "hand-written decoupled weight decay with the sign flipped (wd 3)", wd_flip=3.0, seed=1, every=5)
R("decay_sign_flip", "pixelcnn", "fastai", "decoupled weight decay sign flipped (wd 3), 30 epochs", wd_flip=3.0, n_train=320, every=5)

# internal key (cache, seed) in declaration order; the public run name is a seeded permutation, so ids carry no information
_order = list(range(len(SPECS)))
random.Random(99031907).shuffle(_order)
for i, s in enumerate(SPECS):
    s["key"] = f"s{i + 1:03d}"
    s["name"] = f"r{_order[i] + 1:03d}"


def cfg_of(spec, bug_free=False):
    cfg = dict(BASE[spec["family"]])
    cfg.update({k: v for k, v in spec.items() if k not in ("kind", "fmt", "note", "name", "key")})
    cfg["seed"] = spec.get("seed", 1000 + int(spec["key"][1:]))
    if spec["kind"] and not bug_free:
        cfg.setdefault("bug", spec["kind"])
    if bug_free:
        for k in ("bug", "bug_step", "bad_steps"):
            cfg.pop(k, None)
    cfg.setdefault("every", 10)
    if spec["fmt"] in EPOCH_EVAL and "eval_every" not in spec:
        from models import FAMILIES
        cfg["eval_every"] = FAMILIES[spec["family"]](cfg, 0).batches_per_epoch()
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
    nan_steps = []
    if cfg.get("mask") == "skip":
        # the training loop's guard skipped the non-finite batch and did not log it: drop the record before writing
        nan_steps = [r["step"] for r in res["recs"] if not math.isfinite(r["loss"])]
        res = dict(res, recs=[r for r in res["recs"] if math.isfinite(r["loss"])])
    S = WRITERS[s["fmt"]](d, res, cfg)
    if nan_steps:
        S["hidden"] = [min(x for x, _ in S["loss"] if x >= nan_steps[0])]
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
    no-trace runs across I9a/I9b is kept (greedy, then two refinement passes)."""
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
                c[a] = c.get(a, 0) + (1 if sp == "I9a" else -1)
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
                        assign[n] = "I9a" if n in combo else "I9b"
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
