"""Run list, training (one forked worker at a time, results cached in /tmp/indep13_cache), writing, labels, split.
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
CACHE = "/tmp/indep13_cache"
TWIN_DIR = "/tmp/indep13_twin"

BASE = {
    "swin": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "ptx": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "hop": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "dino": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "nerf": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "gfn": dict(steps=300, lr=1e-2, opt="adam", bs=32),
    "tabnet": dict(steps=300, lr=1e-2, opt="adam", bs=32),
}
PNAMES = {"swin": ("embed.weight", "head.weight"), "dino": ("backbone.0.weight", "head.2.weight"),
          "nerf": ("l1.weight", "out.weight"), "tabnet": ("shared.fc.weight", "out.weight"), "hop": ("enc.0.weight", "head.2.weight"),
          "ptx": ("inp.weight", "head.weight"), "gfn": ("net.0.weight", "net.4.weight")}
EPOCH_EVAL = {"wlm", "igbar"}
SPLITS = ("I13a", "I13b")
SPECS = []
RULE = ("a finding at warning or above hits a fault when the symptom is equal and, where the fault has an onset_step, its onset "
        "is within max(20 steps, 10% of the run) of onset_step, of any event_steps entry, or inside onset_range widened by that "
        "tolerance; any other finding at warning or above that no 'tolerated' entry covers is a false positive; a healthy run "
        "has faults: [].")


def H(family, fmt, note, **kw):
    SPECS.append(dict(kind=None, family=family, fmt=fmt, note=note, **kw))


def R(kind, family, fmt, note, **kw):
    SPECS.append(dict(kind=kind, family=family, fmt=fmt, note=note, **kw))


# ------------------------------------------------------------------ healthy by construction
H("swin", "tb", "warm-up + cosine at a high peak lr (warm-up bump)", sched="warmup_cos", warmup=40, lr=6e-3, every=5)
H("swin", "wlm", "planned lr drop x0.1 at step 200; per-epoch validation", sched="step_drop", drop_at=200, every=10)
H("swin", "fsjson", "simulated fp16 dynamic loss scale that backs off and grows", fp16=True, growth=40, every=5)
H("ptx", "igbar", "batch 4, every iteration drawn (noisy)", bs=4, every=1, n_train=256)
H("ptx", "horovod", "2 horovod ranks of equal speed", ranks=2, bs=64, every=5)
H("ptx", "tbcsv", "cosine with warm restarts every 100 steps", sched="cos_restart", period=100, every=5)
H("hop", "hf", "plain Adam, constant lr", every=10)
H("hop", "diffusers", "OneCycle", sched="onecycle", every=5)
H("hop", "horovod", "2 horovod ranks of equal speed", ranks=2, bs=64, every=10)
H("hop", "tb", "capped memory bank of stored patterns (64)", bank=True, every=5)
H("dino", "tb", "EMA teacher: the DINO loss rises while the teacher sharpens, then falls", every=5)
H("dino", "hf", "worker preempted at step 150 and restarted; exact resume from the step-150 checkpoint", crash=(150, 150), ckpt_every=50, every=10)
H("dino", "wlm", "tiny per-epoch log (one line per epoch)", every=64)
H("nerf", "fsjson", "warm-up + linear decay", sched="warmup_linear", warmup=30, every=5)
H("nerf", "dgl", "one line per step (full-batch style console)", every=1)
H("nerf", "tb", "long flat fine-tune: pretrained 600 steps (unlogged), then lr 3e-4", pretrain=600, pre_lr=3e-3, lr=3e-4, every=5)
H("gfn", "tb", "triangular cyclic lr (max 4x)", sched="cyclic", max_mult=4.0, period=100, lr=3e-3, every=5)
H("gfn", "ppe", "restart with an exact resume at step 200", crash=(200, 200), ckpt_every=50, every=10)
H("gfn", "horovod", "2 horovod ranks of equal speed", ranks=2, bs=64, every=5)
H("tabnet", "ppe", "ReduceLROnPlateau(mode=min) on val loss: planned lr drops", sched="rop", rop_mode="min", patience=1, eval_every=20, every=5)
H("tabnet", "igbar", "per-epoch validation, 19 epochs of 16 batches", n_train=512, every=4)
H("tabnet", "tb", "batch 4, every step logged (noisy)", bs=4, every=1)
H("tabnet", "diffusers", "cosine decay", sched="cos", every=5)
H("tabnet", "hf", "warm-up + constant", sched="warmup_const", warmup=30, every=10)

# ------------------------------------------------------------------ injected bugs
R("zero_norm_normalize", "ptx", "tb", "rel / rel.norm() without eps; a cloud with a duplicated point at step 151", bad_steps=(150,), every=5)
R("zero_norm_normalize", "nerf", "diffusers", "d / d.norm() without eps; a degenerate camera pose at step 121", bad_steps=(120,), every=5)
R("zero_norm_normalize_guarded", "ptx", "hf", "same at step 101; the loop skips the NaN batch; HF logging_nan_inf_filter", bug="zero_norm_normalize", bad_steps=(100,), nan_guard=True, every=10)
R("zero_norm_normalize_guarded", "nerf", "ppe", "same at step 141; the loop skips the NaN batch and reports nothing for it", bug="zero_norm_normalize", bad_steps=(140,), nan_guard=True, mask="skip", every=10)
R("unnormalized_shard", "swin", "igbar", "0-255 images at steps 111 and 231", bad_steps=(110, 230), every=1)
R("unnormalized_shard", "ptx", "fsjson", "coordinates in mm (x1000) at steps 121 and 221", bad_steps=(120, 220), every=2)
R("maximize_str_flag", "swin", "ppe", "maximize='false' (truthy) with SGD momentum", opt="sgdm", lr=0.01, every=5)
R("maximize_str_flag", "hop", "dgl", "maximize='false' (truthy) with SGD momentum", opt="sgdm", lr=0.01, every=1)
R("optimizer_before_reinit", "ptx", "wlm", "model rebuilt after the optimizer was created", every=10)
R("optimizer_before_reinit", "hop", "tbcsv", "model rebuilt after the optimizer was created", every=5)
R("logz_plain_tensor", "gfn", "hf", "logZ a plain tensor, not a parameter", every=10)
R("logz_plain_tensor", "gfn", "diffusers", "logZ a plain tensor, not a parameter", every=5)
R("epoch_sorted_sampler", "tabnet", "tb", "whole-epoch sort by noise group; 16 batches per epoch", n_train=512, every=1)
R("epoch_sorted_sampler", "nerf", "igbar", "whole-epoch sort by ray noise level; 32 batches per epoch", n_train=1024, every=1)
R("kfold_inverted", "swin", "hf", "trains on one fold of five (256 images)", n_train=1280, eval_every=25, every=5)
R("kfold_inverted", "swin", "tbcsv", "trains on one fold of five (256 images)", n_train=1280, eval_every=25, every=5)
R("layerscale_init_typo", "ptx", "tbcsv", "LayerScale init 1e4 for 1e-4", every=5)
R("layerscale_init_typo", "ptx", "fsjson", "LayerScale init 1e4 for 1e-4", every=5)
R("stray_detach", "dino", "tb", "detach after the student's first block; layer grad norms logged", layer_gn=True, every=5)
R("stray_detach", "swin", "tbcsv", "detach after the patch embedding; per-parameter grad norms logged", layer_gn=True, every=5)
R("python_per_item_featurize", "tabnet", "tb", "per-cell Python featurisation in the main process", every=5)
R("python_per_item_featurize", "nerf", "tbcsv", "per-ray Python ray building in the main process", every=5)
R("gc_collect_in_loop", "hop", "tbcsv", "gc.collect() every 25 steps", gc_every=25, every=1)
R("gc_collect_in_loop", "gfn", "tb", "gc.collect() every 30 steps", gc_every=30, every=1)
R("swa_snapshots_kept", "dino", "tbcsv", "deepcopy of model+optimizer state every step", every=5)
R("swa_snapshots_kept", "swin", "tb", "deepcopy of model+optimizer state every step", every=5)
R("rank1_profiler_on", "hop", "horovod", "rank 1 under torch.profiler from step 101", ranks=2, bs=64, bug_step=100, every=5)
R("rank1_profiler_on", "tabnet", "horovod", "rank 1 under torch.profiler from step 1", ranks=2, bs=64, every=10)
R("where_grad_nan", "tabnet", "tb", "where(M>0, M*log M, 0) sparsity term from step 151; non-finite-grad steps skipped", lam_sparse=1e-3, reg_from=150, grad_guard=True, every=5)
R("where_grad_nan", "ptx", "hf", "where(d2>0, sqrt d2, 0) and duplicated points from step 121; non-finite-grad steps skipped", dup_from=120, grad_guard=True, every=10)
R("where_grad_nan_scaler", "tabnet", "fsjson", "same sparsity term from step 181 under the simulated fp16 scaler", bug="where_grad_nan", lam_sparse=1e-3, reg_from=180, fp16=True, every=5)
R("where_grad_nan_scaler", "ptx", "tb", "same sqrt from step 151 under the simulated fp16 scaler", bug="where_grad_nan", dup_from=150, fp16=True, every=5)
R("accum_rescale_twice", "swin", "wlm", "accum 4; logged loss multiplied by 4 again", accum=4, steps=200, eval_every=20, every=5)
R("accum_rescale_twice", "hop", "ppe", "accum 4; logged loss multiplied by 4 again", accum=4, steps=200, eval_every=20, every=5)
R("resume_lexical_ckpt", "dino", "fsjson", "restart at step 260; lexical sort picks the step-50 checkpoint", crash=(260, 250), ckpt_every=50, every=5)
R("resume_lexical_ckpt", "gfn", "wlm", "restart at step 240; lexical sort picks the step-50 checkpoint", crash=(240, 200), ckpt_every=50, every=10)
R("gate_bias_init_all", "ptx", "tb", "bias -4 on every Linear; dead fraction logged", probe="dead", every=5)
R("gate_bias_init_all", "nerf", "tbcsv", "bias -4 on every Linear; dead fraction logged", probe="dead", every=5)
R("softmax_temperature_inverted", "hop", "tb", "softmax(s / beta), beta = 1/d; saturation logged", probe="sat", every=5)
R("softmax_temperature_inverted", "hop", "fsjson", "softmax(s / beta), beta = 1/d; saturation logged", probe="sat", every=5)
R("unbounded_memory_bank", "hop", "wlm", "memory bank never evicted", bank=True, every=10)
R("unbounded_memory_bank", "gfn", "tb", "replay buffer never evicted, list-scan uniqueness check", buffer=True, every=5)
R("warmup_restarts_per_epoch", "swin", "tb", "warm-up lambda fed the in-epoch batch index", sched="warmup_const", warmup=40, every=5)
R("warmup_restarts_per_epoch", "dino", "ppe", "warm-up lambda fed the in-epoch batch index", sched="warmup_const", warmup=40, every=5)

# internal key (cache, seed) in declaration order; the public run name is a seeded permutation, so ids carry no information
_order = list(range(len(SPECS)))
random.Random(20261213).shuffle(_order)
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
    cfg["_pnames"] = PNAMES[spec["family"]]
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
    if cfg.get("start_log"):
        # only the requeued job's output is kept: the log starts mid-run
        k = cfg["start_log"]
        res = dict(res, recs=[r for r in res["recs"] if r["seg"] >= 1 or r["step"] > k], evals=[e for e in res["evals"] if e["seg"] >= 1])
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
    no-trace runs across I13a/I13b is kept (greedy, then two refinement passes)."""
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
                c[a] = c.get(a, 0) + (1 if sp == SPLITS[0] else -1)
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
                        assign[n] = SPLITS[0] if n in combo else SPLITS[1]
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
