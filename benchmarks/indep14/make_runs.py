"""Run list, training (one forked worker at a time, results cached in /tmp/indep14_cache), writing, labels, split.
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
CACHE = "/tmp/indep14_cache"
TWIN_DIR = "/tmp/indep14_twin"

BASE = {
    "film": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "maxout": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "nam": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "srcnn": dict(steps=300, lr=1e-2, opt="adam", bs=32),
    "transe": dict(steps=300, lr=2e-2, opt="adam", bs=32),
    "mbnet": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "nalu": dict(steps=300, lr=3e-3, opt="adam", bs=32),
}
TASK = {"film": "cls", "maxout": "cls", "nam": "reg", "srcnn": "reg", "transe": "kg", "mbnet": "cls", "nalu": "reg"}
EPOCH_EVAL = {"superres", "ptabnet", "fastaicon"}
STEP_EVAL = {"pygcn"}
SPLITS = ("I14a", "I14b")
SPECS = []
RULE = ("a finding at warning or above hits a fault when the symptom is equal and, where the fault has an onset_step, its onset "
        "is within max(20 steps, 10% of the run) of onset_step, of any event_steps entry, or inside onset_range widened by that "
        "tolerance; any other finding at warning or above that no 'tolerated' entry covers is a false positive; a healthy run "
        "has faults: [].")


def H(family, fmt, note, **kw):
    SPECS.append(dict(kind=None, family=family, fmt=fmt, note=note, **kw))


def R(kind, family, fmt, note, **kw):
    SPECS.append(dict(kind=kind, family=family, fmt=fmt, note=note, **kw))


TAIL = lambda f: ("tail", f)  # noqa: E731  the pasted log starts mid-run (only steps after f x steps)
HEAD = lambda f: ("head", f)  # noqa: E731  the pasted log is cut after f x steps

# ------------------------------------------------------------------ healthy by construction
H("film", "tb", "warm-up + cosine at a high peak lr (warm-up bump)", sched="warmup_cos", warmup=40, lr=6e-3, every=5)
H("film", "loguru", "2 ranks of equal speed", ranks=2, bs=64, every=5)
H("film", "ptabnet", "per-epoch log, 256 training rows (8 batches per epoch)", n_train=256)
H("maxout", "structlog", "planned lr drop x0.1 at step 200; excerpt from step 150", sched="step_drop", drop_at=200, every=2, excerpt=TAIL(0.5))
H("maxout", "mingpt", "batch 4, every iteration printed (noisy); excerpt", bs=4, every=1, excerpt=TAIL(0.45))
H("maxout", "fastaicon", "fit_one_cycle, 256 rows", sched="onecycle", n_train=256)
H("nam", "hf", "cosine with warm restarts every 100 steps", sched="cos_restart", period=100, every=5)
H("nam", "pygcn", "plain Adam; paste cut at 60% of the run", excerpt=HEAD(0.6))
H("nam", "superres", "OneCycle; excerpt of the last 55%", sched="onecycle", excerpt=TAIL(0.45))
H("srcnn", "structlog", "simulated fp16 dynamic loss scale that backs off and grows", fp16=True, growth=40, every=5)
H("srcnn", "loguru", "preempted at step 150, exact resume from the step-150 checkpoint", crash=(150, 150), ckpt_every=50, every=5)
H("srcnn", "mingpt", "slow, small loss improvements late in the run; excerpt", every=2, excerpt=TAIL(0.5))
H("transe", "hf", "warm-up + constant", sched="warmup_const", warmup=30, every=10)
H("transe", "pyjsonlog", "triangular cyclic lr (max 4x)", sched="cyclic", max_mult=4.0, period=100, lr=5e-3, every=5)
H("transe", "loguru", "plain; paste cut at 55%", every=5, excerpt=HEAD(0.55))
H("mbnet", "tb", "batch 4, every step logged (noisy)", bs=4, every=1)
H("mbnet", "pygcn", "plain; excerpt of the last half", excerpt=TAIL(0.5))
H("mbnet", "ptabnet", "per-epoch log, 256 rows", n_train=256)
H("nalu", "tb", "warm-up + linear decay", sched="warmup_linear", warmup=30, every=5)
H("nalu", "hf", "ReduceLROnPlateau(mode=min) on val loss: planned lr drops", sched="rop", patience=1, eval_every=20, every=5)
H("nalu", "structlog", "big early drop not shown: excerpt from step 120, slow tail", every=5, excerpt=TAIL(0.4))
H("nalu", "fastaicon", "per-epoch table, 256 rows", n_train=256)

# ------------------------------------------------------------------ injected bugs
R("std_no_eps", "nam", "superres", "per-batch std without eps; constant column at step 161; excerpt", bad_steps=(160,), excerpt=TAIL(0.4))
R("std_no_eps", "maxout", "pyjsonlog", "per-batch std without eps; constant column at step 141", bad_steps=(140,), every=5)
R("std_no_eps_guarded", "film", "hf", "same at step 121; NaN batch skipped; HF logging_nan_inf_filter", bad_steps=(120,), nan_guard=True, every=10)
R("std_no_eps_guarded", "nalu", "structlog", "same at step 131; NaN batch skipped and not logged", bad_steps=(130,), nan_guard=True, mask="skip", every=1)
R("target_shard_scrambled", "mbnet", "mingpt", "label column scrambled at steps 171-173 and 241-242; excerpt", bad_steps=(170, 171, 172, 240, 241), every=1, excerpt=TAIL(0.4))
R("target_shard_scrambled", "nam", "loguru", "targets scrambled at steps 101-103 and 221-222", bad_steps=(100, 101, 102, 220, 221), every=1)
R("lr_scaled_twice", "maxout", "pygcn", "lr scaled by the batch rule twice (x64), SGD momentum; paste cut at 70%", opt="sgdm", lr=0.05, lr_mult=64.0, excerpt=HEAD(0.7))
R("lr_scaled_twice", "maxout", "loguru", "lr scaled by the batch rule twice (x32), SGD momentum", opt="sgdm", lr=0.05, lr_mult=32.0, every=2, n_train=256)
R("zero_grad_after_backward", "film", "ptabnet", "zero_grad between backward and step", n_train=256)
R("zero_grad_after_backward", "srcnn", "tb", "zero_grad between backward and step", every=5)
R("unfreeze_head_only", "mbnet", "hf", "only the head is unfrozen", every=10)
R("unfreeze_head_only", "nam", "structlog", "only the head is unfrozen", every=5)
R("shuffle_false_sorted", "nam", "mingpt", "target-sorted file, shuffle=False", every=1)
R("shuffle_false_sorted", "film", "superres", "class-sorted file, shuffle=False; excerpt", excerpt=TAIL(0.4))
R("train_idx_uses_val_size", "film", "pygcn", "train split of 96 rows; excerpt from step 46", n_train=96, excerpt=TAIL(0.15))
R("train_idx_uses_val_size", "maxout", "fastaicon", "train split of 64 rows", n_train=64)
R("init_gain_typo", "srcnn", "pyjsonlog", "xavier gain x12 on every conv", gain=12.0, every=5)
R("init_gain_typo", "nam", "hf", "xavier gain x30 on every linear", gain=30.0, every=5)
R("encoder_under_no_grad", "maxout", "tb", "first maxout layer under no_grad; layer grad norms", layer_gn=True, every=5)
R("encoder_under_no_grad", "mbnet", "structlog", "stem conv under no_grad; layer grad norms; excerpt", layer_gn=True, every=5, excerpt=TAIL(0.5))
R("per_item_json_decode", "nam", "loguru", "rows decoded from JSON per item; paste cut at 60%", featurize_reps=30, every=5, excerpt=HEAD(0.6))
R("per_item_json_decode", "film", "tb", "rows decoded from JSON per item", featurize_reps=20, every=5)
R("ckpt_with_dataset", "srcnn", "mingpt", "checkpoint with the dataset every 25 steps", every=1)
R("ckpt_with_dataset", "maxout", "pygcn", "checkpoint with the dataset every 25 steps; excerpt", excerpt=TAIL(0.4))
R("preds_kept_with_graph", "mbnet", "pyjsonlog", "outputs kept with their graph, backward(retain_graph=True)", every=5)
R("preds_kept_with_graph", "srcnn", "tb", "outputs kept with their graph, backward(retain_graph=True)", every=5)
R("rank1_detect_anomaly", "film", "loguru", "rank 1 under detect_anomaly from step 1", ranks=2, bs=64, every=5)
R("rank1_detect_anomaly", "transe", "loguru", "rank 1 under detect_anomaly from step 101; excerpt", ranks=2, bs=64, bug_step=100, every=5, excerpt=TAIL(0.25))
R("pairdist_sqrt_reg", "transe", "structlog", "sqrt pairwise-distance regulariser from step 151; non-finite-grad steps skipped; excerpt", reg_from=150, grad_guard=True, every=5, excerpt=TAIL(0.35))
R("pairdist_sqrt_reg", "maxout", "hf", "sqrt pairwise-distance regulariser from step 161; non-finite-grad steps skipped", reg_from=160, grad_guard=True, every=10)
R("pairdist_sqrt_reg_scaler", "film", "pyjsonlog", "same from step 151 under the simulated fp16 scaler", bug="pairdist_sqrt_reg", reg_from=150, fp16=True, every=5)
R("pairdist_sqrt_reg_scaler", "transe", "tb", "same from step 121 under the simulated fp16 scaler", bug="pairdist_sqrt_reg", reg_from=120, fp16=True, every=5)
R("accum_log_sum", "srcnn", "superres", "accum 4; logged loss is the sum of the micro-batches; excerpt", accum=4, steps=200, excerpt=TAIL(0.3))
R("accum_log_sum", "maxout", "hf", "accum 4; logged loss is the sum of the micro-batches", accum=4, steps=200, eval_every=20, every=5)
R("resume_step_from_epoch", "nalu", "mingpt", "restart at step 150; step rebuilt from the epoch; excerpt", crash=(150, 150), ckpt_every=50, every=2, excerpt=TAIL(0.3))
R("resume_step_from_epoch", "transe", "tb", "restart at step 230 from the step-225 checkpoint; step rebuilt from the epoch", crash=(230, 225), ckpt_every=25, every=5)
R("focal_prior_bias_all", "nam", "pyjsonlog", "focal prior bias on every linear; dead fraction logged", probe="dead", every=5)
R("focal_prior_bias_all", "srcnn", "structlog", "focal prior bias on every conv; dead fraction logged; excerpt", probe="dead", every=5, excerpt=TAIL(0.5))
R("raw_units_into_gate", "film", "tb", "unscaled inputs into the FiLM sigmoid gates; saturation logged", probe="sat", every=5)
R("raw_units_into_gate", "nalu", "pyjsonlog", "unscaled inputs into the NALU gates; saturation logged", probe="sat", every=5)
R("auroc_over_history", "transe", "mingpt", "Python AUROC over all scores so far, every step; excerpt", every=1, excerpt=TAIL(0.5))
R("auroc_over_history", "maxout", "pygcn", "Python AUROC over all predictions so far, every step")
R("sched_step_per_microbatch", "srcnn", "hf", "accum 4, cosine stepped per micro-batch", accum=4, steps=200, sched="cos0", eval_every=20, every=5)
R("sched_step_per_microbatch", "nalu", "loguru", "accum 4, cosine stepped per micro-batch; paste cut at 80%", accum=4, steps=200, sched="cos0", every=2, excerpt=HEAD(0.8))

# internal key (cache, seed) in declaration order; the public run name is a seeded permutation, so ids carry no information
_order = list(range(len(SPECS)))
random.Random(20261214).shuffle(_order)
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
    cfg["_task"] = TASK[spec["family"]]
    if spec["fmt"] in STEP_EVAL:
        cfg["every"] = 1
        cfg["eval_every"] = 1
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
    if cfg.get("excerpt"):
        # the log as pasted into an issue: it starts mid-run (tail) or is cut before the end (head); labels use only it
        how, fr = cfg["excerpt"]
        k = int(round(fr * cfg["steps"] / 10.0)) * 10
        if how == "tail":
            pos = next(i for i, r in enumerate(res["recs"]) if r["step"] > k)
            res = dict(res, recs=res["recs"][pos:], evals=[e for e in res["evals"] if e["step"] > k or e["seg"] >= 1])
            cfg["_excerpt_tail"] = k
        else:
            pos = next((i for i, r in enumerate(res["recs"]) if r["step"] > k and r["seg"] == 0), len(res["recs"]))
            res = dict(res, recs=res["recs"][:pos], evals=[e for e in res["evals"] if e["step"] <= k and e["seg"] == 0])
            cfg["_excerpt_head"] = k
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
    notes = [f"x unit: {S['unit']}"]
    if cfg.get("excerpt"):
        notes.append(f"EXCERPT: only optimizer steps {'after' if cfg['excerpt'][0] == 'tail' else 'up to'} {cfg.get('_excerpt_tail') or cfg.get('_excerpt_head')} are in the file")
    notes += [ f"loss aggregation: {S['agg']}", f"loss word: {res['loss_word']}",
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
    no-trace runs across I14a/I14b is kept (greedy, then two refinement passes)."""
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
