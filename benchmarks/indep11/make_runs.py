"""Run list, training (one forked worker at a time, results cached in /tmp/indep11_cache), writing, labels, split.
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
CACHE = "/tmp/indep11_cache"
TWIN_DIR = "/tmp/indep11_twin"

BASE = {
    "pointnet": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "ncf": dict(steps=400, lr=3e-2, opt="adam", bs=128),
    "resmlp": dict(steps=300, lr=3e-3, opt="adamw", bs=32),
    "vae": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "cfc": dict(steps=300, lr=5e-3, opt="adam", bs=32),
    "tft": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "pairrank": dict(steps=300, lr=3e-3, opt="adam", bs=16),
}
EPOCH_EVAL = {"keras2", "ultra", "richpl"}
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
H("pointnet", "tb", "warm-up + cosine at a high peak lr (warm-up bump)", sched="warmup_cos", warmup=40, lr=1e-2, every=5)
H("pointnet", "ultra", "per-epoch console, 8 epochs of 40 batches", n_train=1280, steps=320)
H("pointnet", "hf", "ReduceLROnPlateau(mode=min) on val loss: planned lr drops", sched="rop", rop_mode="min", patience=1, eval_every=20, every=10)
H("pointnet", "submitit", "2 simulated ranks of equal speed", ranks=2, bs=64, every=5)
H("ncf", "kohya", "saddle-shaped start (slow first 150 steps), then learns; kohya moving average", every=1)
H("ncf", "wandbcsv", "batch 16, every step logged (noisy)", bs=16, lr=1e-2, every=1)
H("ncf", "polyaxon", "long flat fine-tune: pretrained 600 steps (unlogged), then lr 3e-4", pretrain=600, pre_lr=3e-2, lr=3e-4, every=10)
H("ncf", "slurm", "log starts mid-run: the requeued job resumed exactly at step 200 and only its .out is kept", crash=(200, 200), ckpt_every=50, start_log=200, every=5)
H("resmlp", "keras2", "per-epoch console, 6 epochs (64 batches each)", steps=384)
H("resmlp", "fshydra", "planned lr drop x0.1 at update 150", sched="step_drop", drop_at=150, every=10)
H("resmlp", "richpl", "current-batch loss with Rich bar, 5 epochs of 64 batches", steps=320, every=5)
H("resmlp", "mlflow", "cosine with warm restarts (lr jumps back up)", sched="cos_restart", period=100, every=5)
H("vae", "tb", "KL warm-up over 120 steps: the logged loss rises while beta ramps to 1, then settles", kl_warmup=120, every=5)
H("vae", "wandbcsv", "simulated fp16 dynamic loss scale that backs off and grows", fp16=True, growth=40, every=5)
H("vae", "kohya", "kohya moving average of the negative ELBO", every=1)
H("vae", "submitit", "2 simulated ranks of equal speed", ranks=2, bs=64, every=10)
H("cfc", "slurm", "preempted at step 150 and requeued; exact resume from the step-150 checkpoint", crash=(150, 150), ckpt_every=50, every=5)
H("cfc", "tb", "OneCycle", sched="onecycle", every=5)
H("cfc", "polyaxon", "reported every 40 steps only (8 points)", steps=320, every=40, eval_every=80)
H("cfc", "keras2", "per-epoch console, 10 epochs", n_train=960, steps=300)
H("tft", "hf", "warm-up + linear decay", sched="warmup_linear", warmup=30, every=10)
H("tft", "richpl", "quantile loss, current batch", n_train=1280, every=4)
H("tft", "fshydra", "simulated fp16 loss scale (backs off, grows)", fp16=True, growth=50, every=5)
H("pairrank", "tb", "batch 4, every step logged (noisy)", bs=4, every=1)
H("pairrank", "wandbcsv", "pairwise loss settles high (noisy relevance), current batch", every=5)
H("pairrank", "slurm", "triangular cyclic lr (max 4x)", sched="cyclic", max_mult=4.0, period=100, every=5)

# ------------------------------------------------------------------ injected bugs
R("unit_sphere_noeps", "pointnet", "tb", "unit-sphere normalisation without eps; a degenerate cloud at step 121", bad_steps=(120,), every=5)
R("unit_sphere_noeps", "pointnet", "kohya", "same, degenerate cloud at step 151", bad_steps=(150,), every=1)
R("unit_sphere_guarded", "pointnet", "hf", "same at step 101; the loop skips the NaN batch; HF logging_nan_inf_filter", bug="unit_sphere_noeps", bad_steps=(100,), nan_guard=True, every=10)
R("unit_sphere_guarded", "pointnet", "polyaxon", "same at step 140; the loop skips the NaN batch and reports nothing for it", bug="unit_sphere_noeps", bad_steps=(139,), nan_guard=True, mask="skip", every=5)
R("unit_mixup_shard", "tft", "slurm", "a shard in W instead of kW (x1000) at steps 101 and 201", bad_steps=(100, 200), every=1)
R("unit_mixup_shard", "tft", "mlflow", "a shard in W instead of kW at step 91", bad_steps=(90,), every=1)
R("exp_gamma_typo", "tft", "fshydra", "ExponentialLR gamma 1.03 (meant 0.97)", sched="exp", gamma=1.03, lr=1e-3, every=5)
R("exp_gamma_typo", "resmlp", "wandbcsv", "ExponentialLR gamma 1.025 (meant 0.975)", sched="exp", gamma=1.025, lr=1e-3, every=5)
R("beta_ramp_uncapped", "vae", "polyaxon", "KL weight s/50 without min(1, .)", kl_warmup=50, every=5)
R("beta_ramp_uncapped", "vae", "richpl", "KL weight s/40 without min(1, .)", kl_warmup=40, n_train=1280, every=5)
R("opt_on_stale_copy", "vae", "keras2", "optimizer built before a helper deep-copied the model", n_train=1280, steps=320)
R("opt_on_stale_copy", "cfc", "hf", "optimizer built before a helper deep-copied the model", every=10)
R("pair_diff_typo", "pairrank", "slurm", "pair differences s_i - s_i", every=5)
R("pair_diff_typo", "pairrank", "kohya", "pair differences s_i - s_i", every=1)
R("embed_from_pretrained_frozen", "ncf", "tb", "item tables from nn.Embedding.from_pretrained (freeze=True)", every=5)
R("embed_from_pretrained_frozen", "ncf", "fshydra", "item tables frozen", every=10)
R("pool_wrong_dim", "pointnet", "mlflow", "global max over channels instead of points (P == C == 64)", every=5)
R("pool_wrong_dim", "pointnet", "ultra", "global max over channels; per-epoch console", n_train=1280, steps=320)
R("sorted_by_label_noshuffle", "resmlp", "tb", "label-sorted shards, shuffle=False; SGD lr 0.05", opt="sgd", lr=0.05, every=2)
R("sorted_by_label_noshuffle", "pointnet", "slurm", "label-sorted shards, shuffle=False; SGD lr 0.05", opt="sgd", lr=0.05, every=2)
R("subset_size_swapped", "ncf", "richpl", "trains on the 64-row slice; batch 16; eval every 20 steps", bs=16, lr=1e-2, steps=300, eval_every=20, every=1)
R("subset_size_swapped", "ncf", "keras2", "trains on the 64-row slice; batch 16; validation_freq 5 epochs", bs=16, lr=1e-2, steps=300, eval_every=20)
R("init_std_one", "resmlp", "fshydra", "all Linear weights N(0, 1), layer-scale 1, depth 4", depth=4, every=5)
R("init_std_one", "resmlp", "polyaxon", "all Linear weights N(0, 1), layer-scale 1, depth 3", depth=3, every=5)
R("act_swap_sigmoid", "pointnet", "wandbcsv", "10-layer sigmoid per-point MLP; layer grad norms logged", layer_gn=True, every=5)
R("act_swap_sigmoid", "cfc", "mlflow", "8-layer sigmoid input stack; layer grad norms logged", layer_gn=True, every=5)
R("json_decode_per_sample", "tft", "tb", "JSON + strptime decode per sample in the main process", every=5)
R("json_decode_per_sample", "tft", "polyaxon", "JSON + strptime decode per sample", every=10)
R("hard_neg_refresh", "ncf", "slurm", "all-user re-scoring every 25 steps inside the step", refresh_every=25, every=5)
R("hard_neg_refresh", "ncf", "tb", "all-user re-scoring every 40 steps", refresh_every=40, every=1)
R("attn_maps_cached", "tft", "slurm", "attention outputs kept with their graph every step; batch 64", bs=64, every=10)
R("attn_maps_cached", "tft", "wandbcsv", "attention outputs kept with their graph; batch 64", bs=64, every=10)
R("rank1_per_sample_loop", "pairrank", "submitit", "rank 1 per-sample loss loop from step 100", ranks=2, bs=32, bug_step=100, every=5)
R("rank1_per_sample_loop", "ncf", "submitit", "rank 1 per-sample loss loop from step 1", ranks=2, bs=64, every=10)
R("sqrt_ties_guard", "pairrank", "tb", "|d| as sqrt(d**2); duplicated documents from step 121; non-finite-grad steps skipped", bug="abs_via_sqrt_ties", dup_from=120, grad_guard=True, every=5)
R("sqrt_ties_guard", "pairrank", "fshydra", "same from update 151", bug="abs_via_sqrt_ties", dup_from=150, grad_guard=True, every=5)
R("sqrt_ties_scaler", "pairrank", "polyaxon", "same from step 101 under the simulated fp16 scaler", bug="abs_via_sqrt_ties", dup_from=100, fp16=True, every=5)
R("sqrt_ties_scaler", "pairrank", "mlflow", "same from step 151 under the simulated fp16 scaler", bug="abs_via_sqrt_ties", dup_from=150, fp16=True, every=5)
R("accum_sum_logged", "cfc", "fshydra", "accum 4, loss not divided, logged sum", accum=4, steps=200, every=5)
R("accum_sum_logged", "ncf", "hf", "accum 4, loss not divided, logged sum", accum=4, steps=250, bs=64, every=10)
R("requeue_no_resume", "cfc", "slurm", "preempted at 180; requeued without --resume: restarts at step 0", crash=(180, 0), every=5)
R("requeue_no_resume", "vae", "tb", "preempted at 150; requeued without --resume", crash=(150, 0), every=5)
R("bias_fill_sign", "ncf", "polyaxon", "MLP-tower biases filled with -2; dead fraction logged", probe="dead", every=10)
R("bias_fill_sign", "resmlp", "wandbcsv", "channel-MLP biases filled with -3; dead fraction logged", probe="dead", every=5)
R("ts_in_ms", "cfc", "tb", "time gaps in ms fed to the CfC time gate; gate saturation logged", probe="sat", every=5)
R("ts_in_ms", "cfc", "polyaxon", "time gaps in ms; gate saturation logged", probe="sat", every=10)
R("seen_list_linear_scan", "ncf", "tb", "negative sampler scans a growing Python list", every=5)
R("seen_list_linear_scan", "ncf", "slurm", "negative sampler scans a growing Python list", every=10)
R("rop_mode_max", "vae", "hf", "ReduceLROnPlateau(mode=max) on val loss, eval every 10", sched="rop", rop_mode="max", eval_every=10, every=10)
R("rop_mode_max", "pointnet", "fshydra", "ReduceLROnPlateau(mode=max), eval every 10", sched="rop", rop_mode="max", eval_every=10, every=5)

# internal key (cache, seed) in declaration order; the public run name is a seeded permutation, so ids carry no information
_order = list(range(len(SPECS)))
random.Random(20261202).shuffle(_order)
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
    no-trace runs across I11a/I11b is kept (greedy, then two refinement passes)."""
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
                c[a] = c.get(a, 0) + (1 if sp == "I11a" else -1)
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
                        assign[n] = "I11a" if n in combo else "I11b"
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
