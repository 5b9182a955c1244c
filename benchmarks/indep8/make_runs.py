"""Run list, training (one forked worker at a time, results cached in /tmp/indep8_cache), writing, labels, split.
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
CACHE = "/tmp/indep8_cache"
TWIN_DIR = "/tmp/indep8_twin"

BASE = {
    "charcnn": dict(steps=300, lr=3e-3, opt="adam", bs=32, seq=40),
    "grud": dict(steps=240, lr=3e-3, opt="adam", bs=32, seq=20),
    "sage": dict(steps=300, lr=3e-3, opt="adam", bs=32, wd=5e-3, p_in=0.08, p_out=0.01, seq=1),
    "cpc": dict(steps=300, lr=3e-3, opt="adam", bs=32, seq=96),
    "sorter": dict(steps=400, lr=3e-3, opt="adam", bs=32, seq=10),
    "made": dict(steps=400, lr=3e-3, opt="adam", bs=64, seq=12),
    "deepar": dict(steps=300, lr=3e-3, opt="adam", bs=32, seq=36),
}
EPOCH_EVAL = {"flair", "gluonts"}
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
H("charcnn", "tb", "warm-up + cosine", sched="warmup_cos", warmup=30, every=5)
H("charcnn", "flair", "running epoch mean that resets each epoch (saw-tooth)", steps=372)
H("charcnn", "spacy", "summed loss per evaluation interval", every=25, eval_every=25)
H("charcnn", "torchtitan", "crash at 150 and exact resume from the step-150 checkpoint", crash=(150, 150), ckpt_every=50, every=10)
H("grud", "wandb", "tanh input layer saturation logged (low)", probe="sat", every=5)
H("grud", "marian", "planned lr drop x0.1 at step 160", sched="step_drop", drop_at=160, every=10)
H("grud", "hf", "warm-up then constant", sched="warmup_const", warmup=40, every=10)
H("grud", "llmc", "every step logged, batch 8 (noisy)", bs=8, n_train=600, steps=300)
H("sage", "hf", "cosine with warm restarts (lr jumps up)", sched="cos_restart", period=100, every=10)
H("sage", "spacy", "summed loss, graph accuracy score", every=20, eval_every=20)
H("sage", "mlflow", "planned lr drop at 200", sched="step_drop", drop_at=200, every=5)
H("sage", "flair", "tiny epochs (9 batches), running mean", steps=270)
H("cpc", "tb", "fp16-style loss scale that backs off and grows", fp16=True, growth=40, every=5)
H("cpc", "mmjson", "contrastive loss settles high", every=10)
H("cpc", "llmc", "every step, warm-up + linear decay", sched="warmup_linear", warmup=30)
H("cpc", "marian", "OneCycle", sched="onecycle", every=10)
H("sorter", "torchtitan", "warm-up + cosine, loss starts at ln 32", sched="warmup_cos", warmup=40, every=10)
H("sorter", "llmc", "crash at 200 and exact resume", crash=(200, 200), ckpt_every=50)
H("sorter", "spacy", "summed loss, accuracy score", every=25, eval_every=25)
H("sorter", "wandb", "cyclic lr (triangular, max 4x) that looks alarming", sched="cyclic", max_mult=4.0, period=100, every=5)
H("sorter", "tbranks", "2 simulated ranks of equal speed", ranks=2, every=5)
H("made", "mlflow", "ReLU dead fraction logged (low)", probe="dead", every=10)
H("made", "tb", "exponential decay", sched="exp", gamma=0.995, every=5)
H("made", "marian", "short run (60 steps)", steps=60, every=2, eval_every=20)
H("made", "gluonts", "long run, NLL in nats settles near 5", steps=800)
H("deepar", "gluonts", "Gaussian NLL that goes negative (low-noise series)", noise=(0.02, 0.06), steps=600)
H("deepar", "gluonts", "Gaussian NLL settles near 0.5", steps=500)
H("deepar", "torchtitan", "current-step loss every 10 steps", every=10)
H("deepar", "tbranks", "2 simulated ranks of equal speed, batch 128", ranks=2, bs=128, every=5)
H("deepar", "wandb", "Nesterov SGD", opt="nesterov", lr=0.02, every=5)

# ------------------------------------------------------------------ injected bugs
R("vocab_rebuilt_per_batch", "charcnn", "tb", "tokenizer vocabulary rebuilt from the corpus every batch", n_train=3000, every=5)
R("vocab_rebuilt_per_batch", "charcnn", "mmjson", "tokenizer vocabulary rebuilt every batch", n_train=3000, every=10)
R("adam_eps_zero", "charcnn", "flair", "Adam eps=0; a rare character appears from step 150", rare_from=150, fixed_len=True, steps=372)
R("adam_eps_zero", "charcnn", "llmc", "Adam eps=0; a rare character appears from step 120", rare_from=120, fixed_len=True)
R("unscaled_inputs", "grud", "wandb", "raw sensor units (x400 + 1000) into the tanh input layer", probe="sat", every=5)
R("unscaled_inputs", "grud", "mlflow", "raw sensor units into the tanh input layer", probe="sat", every=10)
R("sage_sum_agg", "sage", "hf", "sum aggregation, SGD+momentum lr 0.1", opt="sgdm", lr=0.1, every=5)
R("sage_sum_agg", "sage", "tb", "sum aggregation, plain SGD lr 0.2", opt="sgd", lr=0.2, every=5)
R("split_inverted", "sage", "marian", "train/val lists swapped: 40 train nodes", lr=1e-2, wd=0.0, steps=600, every=10, eval_every=25, hid=32)
R("split_inverted", "sage", "wandb", "train/val lists swapped", lr=5e-3, wd=0.0, steps=600, every=10, eval_every=10, hid=32)
R("opt_stale_params", "sage", "mlflow", "head rebuilt after the optimizer was created", every=5)
R("opt_stale_params", "sage", "spacy", "head rebuilt after the optimizer was created", every=20, eval_every=20)
R("nce_labels_zero", "cpc", "llmc", "InfoNCE targets all 0")
R("nce_labels_zero", "cpc", "torchtitan", "InfoNCE targets all 0", every=10)
R("feature_cache_grows", "cpc", "tb", "negative bank never truncated", every=5)
R("feature_cache_grows", "cpc", "torchtitan", "negative bank never truncated", every=10)
R("identical_views_sqrt", "cpc", "wandb", "sqrt-of-zero view-consistency term from step 150 under a simulated fp16 scaler", fp16=True, bug_step=150, every=5)
R("identical_views_sqrt", "cpc", "mmjson", "same, from step 100", fp16=True, bug_step=100, every=10)
R("residual_dropped", "sorter", "tb", "10 blocks without skip connections, sigmoid MLPs; layer grad norms logged", layer_gn=True, every=10)
R("residual_dropped", "sorter", "wandb", "10 blocks without skip connections", layer_gn=True, every=10)
R("init_bounds_negative", "made", "mlflow", "uniform_(w, -b, -b/10) init, dead fraction logged", probe="dead", every=10)
R("init_bounds_negative", "made", "tb", "uniform_(w, -b, -b/10) init", probe="dead", every=5)
R("cyclic_lr_max_typo", "sorter", "marian", "CyclicLR max_lr 30x base (typo)", sched="cyclic", max_mult=30.0, period=150, steps=600, every=10)
R("cyclic_lr_max_typo", "sorter", "llmc", "CyclicLR max_lr 30x base", sched="cyclic", max_mult=30.0, period=150, steps=600)
R("anomaly_mode_on", "grud", "marian", "torch.autograd.set_detect_anomaly(True) from step 120", bug_step=120, every=10)
R("anomaly_mode_on", "grud", "torchtitan", "anomaly mode from step 100", bug_step=100, every=10)
R("uneven_shard", "deepar", "tbranks", "rank 1 gets 7/8 of each batch", ranks=2, bs=256, every=5, steps=200)
R("uneven_shard", "sorter", "tbranks", "rank 1 gets 7/8 of each batch", ranks=2, bs=256, every=5, steps=200)
R("epoch_start_stall", "made", "llmc", "150 ms loader re-init at each epoch start", stall=0.15, steps=300)
R("epoch_start_stall", "charcnn", "tb", "150 ms loader re-init at each epoch start", stall=0.15, every=1)
R("sched_step_per_microbatch", "grud", "llmc", "CosineAnnealingLR (eta_min 0) stepped per micro-batch (accumulation 4)", sched="cos0", accum=4, bs=8)
R("sched_step_per_microbatch", "made", "marian", "cosine stepped per micro-batch (accumulation 4)", sched="cos", accum=4, bs=16, every=10)
R("sigma_relu", "deepar", "gluonts", "sigma = relu(.); 30% constant (stock-out) series; Adam lr 0.02", const_frac=0.3, lr=0.02, steps=400, seed=2063)
R("sigma_relu", "deepar", "wandb", "sigma = relu(.); 30% constant series; Adam lr 0.02", const_frac=0.3, lr=0.02, steps=400, every=5, seed=1064)
R("unscaled_shard", "deepar", "torchtitan", "unscaled batches at steps 121 and 241", bad_steps=(120, 240), every=1)
R("unscaled_shard", "deepar", "llmc", "unscaled batch at step 151", bad_steps=(150,))
R("nan_guard_skip", "deepar", "gluonts", "NaN value at step 201; the guard skips the batch", bug="nan_midrun", bug_step=200, nan_guard=True, steps=400)
R("nan_guard_skip", "made", "wandb", "NaN value at step 181; guard skips the batch and its log row", bug="nan_midrun", bug_step=180, nan_guard=True, mask="skip", every=5)
R("nan_guard_skip", "grud", "marian", "NaN value at step 121; guard skips the batch and its log row", bug="nan_midrun", bug_step=120, nan_guard=True, mask="skip", every=10)
R("step_counter_reset", "sorter", "torchtitan", "resume at 200 restarts the step counter at 1", crash=(200, 200), ckpt_every=50, every=10)
R("step_counter_reset", "made", "llmc", "resume at 150 restarts the step counter", crash=(150, 150), ckpt_every=50)
R("grad_accum_unnorm", "charcnn", "hf", "4 micro-batches summed", accum=4, bs=8, every=10)
R("grad_accum_unnorm", "made", "marian", "accumulation 4 switched on at step 200, summed", accum=4, switch_at=200, bs=16, every=10, eval_every=25)
R("lr_too_high", "deepar", "mmjson", "SGD+momentum lr 0.5", opt="sgdm", lr=0.5, every=10)
R("lr_too_high", "made", "hf", "plain SGD lr 8", opt="sgd", lr=8.0, every=10)
R("view_norm_grad_guard", "cpc", "tb", "sqrt-of-zero view term from step 120; steps with a non-finite grad norm are skipped", bug="identical_views_sqrt", bug_step=120, grad_guard=True, every=5)
R("view_norm_grad_guard", "cpc", "llmc", "same, from step 100", bug="identical_views_sqrt", bug_step=100, grad_guard=True)
R("sage_sum_agg", "sage", "wandb", "sum aggregation, plain SGD lr 0.2, denser graph", opt="sgd", lr=0.2, p_in=0.12, every=5)
H("grud", "tb", "fp16-style loss scale that backs off and grows", fp16=True, growth=30, every=5)
H("charcnn", "marian", "batch 8 logged every 2 updates (noisy)", bs=8, n_train=800, every=2, eval_every=50)

# internal key (cache, seed) in declaration order; the public run name is a seeded permutation, so ids carry no information
_order = list(range(len(SPECS)))
random.Random(88020812).shuffle(_order)
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
        for k in ("bug", "bug_step", "bad_steps", "rare_from"):
            cfg.pop(k, None)
    cfg.setdefault("every", 10)
    if spec["fmt"] == "gluonts":
        cfg["eval_every"] = 50
    elif spec["fmt"] in EPOCH_EVAL and "eval_every" not in spec:
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
    no-trace runs across I8a/I8b is kept (greedy, then two refinement passes)."""
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
                c[a] = c.get(a, 0) + (1 if sp == "I8a" else -1)
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
                        assign[n] = "I8a" if n in combo else "I8b"
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
