"""Run list, training (one forked worker at a time, results cached in /tmp/indep10_cache), writing, labels, split.
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
CACHE = "/tmp/indep10_cache"
TWIN_DIR = "/tmp/indep10_twin"

BASE = {
    "convnext": dict(steps=300, lr=3e-3, opt="adamw", bs=32),
    "fm": dict(steps=400, lr=5e-3, opt="adam", bs=64, n_train=6000),
    "indrnn": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "kernelnet": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "sdt": dict(steps=300, lr=1e-2, opt="adam", bs=32),
    "barlow": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "pg": dict(steps=300, lr=3e-3, opt="adam", bs=32),
}
EPOCH_EVAL = {"nnunet", "speechbrain", "timmcsv", "openclip"}
SPECS = []
# copied verbatim from the "_rule" key of indep9/labels.json
RULE = ("a finding at warning or above hits a fault when the symptom is equal and, where the fault has an onset_step, its onset "
        "is within max(20 steps, 10% of the run) of onset_step, of any event_steps entry, or inside onset_range widened by that "
        "tolerance; any other finding at warning or above that no 'tolerated' entry covers is a false positive; a healthy run "
        "has faults: [].")


def H(family, fmt, note, **kw):
    SPECS.append(dict(kind=None, family=family, fmt=fmt, note=note, **kw))


def R(kind, family, fmt, note, **kw):
    SPECS.append(dict(kind=kind, family=family, fmt=fmt, note=note, **kw))


# ------------------------------------------------------------------ healthy by construction
H("convnext", "tb", "warm-up + cosine at a high peak lr (warm-up bump)", sched="warmup_cos", warmup=40, lr=1e-2, every=5)
H("convnext", "timmcsv", "per-epoch summary, 20 epochs of 20 batches", n_train=640, steps=400)
H("convnext", "nemo", "planned lr drop x0.1 at step 150", sched="step_drop", drop_at=150, every=5)
H("convnext", "speechbrain", "per-epoch log, 15 epochs", n_train=640, steps=300)
H("convnext", "dsranks", "2 simulated ranks of equal speed", ranks=2, bs=64, every=5)
H("fm", "comet", "current-batch log loss every 5 steps (noisy)", every=5)
H("fm", "guild", "exponential lr decay", sched="exp", gamma=0.995, every=10)
H("fm", "hf", "cosine with warm restarts (lr jumps back up)", sched="cos_restart", period=100, every=10)
H("fm", "openclip", "batch 8, noisy", bs=8, lr=1e-3, every=10)
H("indrnn", "nanotron", "crash at 150 and exact resume from the step-150 checkpoint", crash=(150, 150), ckpt_every=50, every=5)
H("indrnn", "mlxlm", "warm-up + linear decay", sched="warmup_linear", warmup=30, every=5)
H("indrnn", "wandb", "first/last layer grad norms logged (healthy ratio)", layer_gn=True, every=5)
H("indrnn", "dsranks", "2 simulated ranks of equal speed", ranks=2, bs=64, every=5)
H("kernelnet", "mlflow", "long flat fine-tune: pretrained 400 steps (unlogged), then lr 1e-4", pretrain=400, lr=1e-4, every=5)
H("kernelnet", "tb", "batch 4, every step logged (noisy)", bs=4, every=1)
H("kernelnet", "nnunet", "per-epoch log, 15 epochs", n_train=640, steps=300)
H("kernelnet", "guild", "OneCycle", sched="onecycle", every=5)
H("sdt", "wandb", "gate saturation logged (gates sharpen as the tree trains)", probe="sat", every=5)
H("sdt", "hf", "warm-up then constant", sched="warmup_const", warmup=50, every=10)
H("sdt", "speechbrain", "per-epoch log, 15 epochs", n_train=640, steps=300)
H("sdt", "nemo", "crash at 200 and exact resume", crash=(200, 200), ckpt_every=50, every=5)
H("barlow", "openclip", "Barlow Twins loss settles high", every=10)
H("barlow", "wandb", "simulated fp16 dynamic loss scale that backs off and grows", fp16=True, growth=40, every=5)
H("barlow", "comet", "Barlow Twins, current batch", every=5)
H("barlow", "mlxlm", "long flat fine-tune: pretrained 300 steps (unlogged), then lr 1e-4", pretrain=300, lr=1e-4, every=10)
H("pg", "guild", "REINFORCE loss (noisy, RL-like), dead fraction logged", probe="dead", every=5)
H("pg", "nanotron", "REINFORCE, every 2 iterations", every=2)
H("pg", "tb", "triangular cyclic lr (max 4x)", sched="cyclic", max_mult=4.0, period=100, every=5)
H("pg", "timmcsv", "per-epoch summary, 15 epochs", n_train=640, steps=300)

# ------------------------------------------------------------------ injected bugs
R("batch_std_zero", "fm", "guild", "per-batch standardisation without eps; a constant column in the batch of step 151", bad_steps=(150,), every=10)
R("batch_std_zero", "fm", "nanotron", "same, constant column at step 121", bad_steps=(120,), every=5)
R("sdt_penalty_noeps", "sdt", "tb", "tree penalty without eps; a raw-unit shard (x60) at step 121 leaves a node unreached", bad_steps=(120,), every=5)
R("sdt_penalty_guarded", "sdt", "hf", "same at step 101; the loop skips the NaN batch; HF logging_nan_inf_filter", bug="sdt_penalty_noeps", bad_steps=(100,), nan_guard=True, every=10)
R("sdt_penalty_guarded", "sdt", "comet", "same at steps 150 and 200 (logged steps); skipped; Comet drops the NaN point", bug="sdt_penalty_noeps", bad_steps=(149, 199), nan_guard=True, every=10)
R("outlier_rows_unclipped", "kernelnet", "nemo", "3 glitched target rows (x200) at steps 101 and 201", bad_steps=(100, 200), every=1)
R("outlier_rows_unclipped", "fm", "mlflow", "4 glitched rows (x1000 in a numeric feature) at steps 91 and 181", bad_steps=(90, 180), every=1)
R("indrnn_uncapped", "indrnn", "tb", "recurrent weights init in [0.9, 1.15], |u|<=1 clamp missing", every=5)
R("indrnn_uncapped", "indrnn", "nanotron", "same", seed=7, every=5)
R("aux_weight_ramp_typo", "barlow", "mlflow", "off-diagonal weight ramp 1.025**step", every=5)
R("aux_weight_ramp_typo", "sdt", "guild", "tree-penalty weight ramp 1.025**step", every=5)
R("decay_past_zero", "convnext", "hf", "linear decay to 0 at 45% of the run, continues negative", sched="linear_est", est_frac=0.45, every=10)
R("decay_past_zero", "barlow", "nemo", "linear decay to 0 at 45% of the run, continues negative", sched="linear_est", est_frac=0.45, every=5)
R("lambda_int_div", "indrnn", "guild", "LambdaLR(min(1, s // 500)) with a 500-step warm-up: lr 0 throughout", sched="lambda_int_div", warmup=500, every=5)
R("lambda_int_div", "kernelnet", "comet", "LambdaLR(min(1, s // 400)): lr 0 throughout", sched="lambda_int_div", warmup=400, every=5)
R("loss_requires_grad_hack", "sdt", "nnunet", "loss.detach().requires_grad_(); 15 epochs", n_train=640, steps=300)
R("loss_requires_grad_hack", "convnext", "mlxlm", "loss.detach().requires_grad_()", every=10)
R("fm_pair_detached", "fm", "tb", "pairwise embeddings from a .detach()ed copy", every=10)
R("param_not_registered", "fm", "openclip", "FM factor matrix kept in a Python list (not a registered parameter)", every=10)
R("label_map_per_epoch", "convnext", "wandb", "label encoder re-fitted per epoch (40 batches)", n_train=1280, every=5)
R("label_map_per_epoch", "sdt", "openclip", "label encoder re-fitted per epoch (40 batches)", n_train=1280, every=5)
R("coarse_dedupe", "kernelnet", "hf", "near-duplicate filter on (rounded target, 3 feature signs) keeps a few dozen rows", bs=16, eval_every=25, every=5)
R("coarse_dedupe", "kernelnet", "timmcsv", "near-duplicate filter keeps a few dozen rows; per-epoch summary", bs=16)
R("indrnn_sigmoid_stack", "indrnn", "mlflow", "6-layer sigmoid IndRNN; first/last layer grad norms logged", layer_gn=True, every=5)
R("indrnn_sigmoid_stack", "indrnn", "guild", "6-layer sigmoid IndRNN", layer_gn=True, every=10)
R("hash_per_row_python", "fm", "openclip", "hashlib per row and field, 8 salts, in the main process", every=10)
R("hash_per_row_python", "fm", "wandb", "hashlib per row and field, 12 salts", hash_passes=12, every=5)
R("inline_full_metric", "convnext", "nemo", "full-train-set accuracy inside the step every 25 steps", metric_every=25, every=5)
R("inline_full_metric", "sdt", "comet", "full-train-set metric every 30 steps", metric_every=30, every=5)
R("grad_snapshots_kept", "barlow", "guild", "per-step gradient copies kept from step 1", steps=400, every=10)
R("grad_snapshots_kept", "convnext", "mlxlm", "per-step gradient copies kept (width 64)", width=64, every=10)
R("hook_registered_in_loop", "kernelnet", "wandb", "a clamp hook registered on every parameter each step", every=5)
R("hook_registered_in_loop", "barlow", "tb", "same, from step 100", bug_step=100, every=5)
R("rank1_detect_anomaly", "indrnn", "dsranks", "anomaly detection on rank 1 from step 100", ranks=2, bs=64, bug_step=100, every=5)
R("rank1_detect_anomaly", "convnext", "dsranks", "anomaly detection on rank 1 from step 120", ranks=2, bs=64, bug_step=120, every=5)
R("whiten_eigh_guard", "barlow", "hf", "zero-padded eigh whitening from step 120; non-finite-grad steps skipped", bug_step=120, grad_guard=True, every=10)
R("whiten_eigh_guard", "barlow", "nanotron", "same from step 150", bug_step=150, grad_guard=True, every=5)
R("whiten_eigh_scaler", "barlow", "wandb", "zero-padded eigh whitening from step 100 under the simulated fp16 scaler", bug_step=100, fp16=True, every=5)
R("whiten_eigh_scaler", "barlow", "guild", "same from step 150", bug_step=150, fp16=True, every=10)
R("allreduce_sum_not_avg", "sdt", "mlxlm", "4 simulated ranks, loss/gradients all-reduced with SUM", every=10)
R("allreduce_sum_not_avg", "kernelnet", "hf", "4 simulated ranks, SUM all-reduce", every=10)
R("resume_step_from_epoch", "indrnn", "guild", "crash at 150; exact restore but the step counter restarts at the epoch start (124)", crash=(150, 150), ckpt_every=50, every=5)
R("resume_step_from_epoch", "kernelnet", "nanotron", "crash at 200; step counter back to 186", crash=(200, 200), ckpt_every=50, every=5)
R("warmup_zeroed_relu_death", "pg", "tb", "warmup_steps 0 at peak lr 0.05; dead fraction logged", sched="warmup_zeroed", lr=0.05, probe="dead", every=5)
R("warmup_zeroed_relu_death", "pg", "mlflow", "warmup_steps 0 at peak lr 0.08", sched="warmup_zeroed", lr=0.08, probe="dead", every=5)
R("gate_temp_inverted", "sdt", "tb", "gate logits / 0.01; gate saturation logged", probe="sat", every=5)
R("gate_temp_inverted", "sdt", "guild", "gate logits / 0.01", probe="sat", every=10)
R("cosine_tmax_epochs", "indrnn", "hf", "CosineAnnealingLR(T_max=30 epochs) stepped per batch", sched="cos_tmax", tmax=30, every=5)
R("cosine_tmax_epochs", "pg", "comet", "CosineAnnealingLR(T_max=40) stepped per batch", sched="cos_tmax", tmax=40, every=5)

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
    no-trace runs across I10a/I10b is kept (greedy, then two refinement passes)."""
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
                c[a] = c.get(a, 0) + (1 if sp == "I10a" else -1)
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
                        assign[n] = "I10a" if n in combo else "I10b"
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
