"""Run list, training (one forked worker at a time, results cached in /tmp/indep12_cache), writing, labels, split.
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
CACHE = "/tmp/indep12_cache"
TWIN_DIR = "/tmp/indep12_twin"

BASE = {
    "txl": dict(steps=300, lr=3e-3, opt="adam", bs=16),
    "crf": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "cnp": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "kge": dict(steps=330, lr=1e-2, opt="adam", bs=32),
    "mil": dict(steps=300, lr=3e-3, opt="adam", bs=32),
    "lista": dict(steps=300, lr=1e-3, opt="adam", bs=32),
    "gin": dict(steps=300, lr=3e-3, opt="adam", bs=32),
}
EPOCH_EVAL = {"deitlog", "pyg", "pykeen"}
SPLITS = ("I12a", "I12b")
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
H("txl", "tb", "warm-up + cosine at a high peak lr (warm-up bump)", sched="warmup_cos", warmup=40, lr=8e-3, every=5)
H("txl", "txlog", "planned lr drop x0.1 at step 200", sched="step_drop", drop_at=200, every=10)
H("txl", "hf", "cosine with warm restarts every 100 steps", sched="cos_restart", period=100, every=10)
H("txl", "d2console", "constant lr, Detectron2-style median window", every=20)
H("crf", "icefall", "simulated fp16 dynamic loss scale that backs off and grows", fp16=True, growth=40, every=5)
H("crf", "mmcv", "ReduceLROnPlateau(mode=min) on val loss: planned lr drops", sched="rop", rop_mode="min", patience=1, eval_every=20, every=5)
H("crf", "ptimagenet", "batch 4, every step printed (noisy)", bs=4, every=1)
H("crf", "tb", "OneCycle", sched="onecycle", every=5)
H("cnp", "monai", "batch 4, every iteration logged (noisy Gaussian NLL)", bs=4, every=1)
H("cnp", "elastic", "2 torchrun workers of equal speed", ranks=2, bs=64, every=5)
H("cnp", "hf", "warm-up + linear decay", sched="warmup_linear", warmup=30, every=10)
H("kge", "pykeen", "per-epoch tqdm postfix, 15 epochs")
H("kge", "tb", "triangular cyclic lr (max 4x)", sched="cyclic", max_mult=4.0, period=100, lr=3e-3, every=5)
H("kge", "mmcv", "long flat fine-tune: pretrained 600 steps (unlogged), then lr 3e-4", pretrain=600, pre_lr=1e-2, lr=3e-4, every=5)
H("mil", "deitlog", "per-epoch JSON log, 15 epochs of 20 batches", n_train=640, steps=300)
H("mil", "elastic", "2 torchrun workers of equal speed", ranks=2, bs=64, every=10)
H("mil", "icefall", "worker preempted at step 150 and restarted; exact resume from the step-150 checkpoint", crash=(150, 150), ckpt_every=50, every=5)
H("lista", "hf", "plain Adam, constant lr", every=10)
H("lista", "d2console", "warm-up + cosine", sched="warmup_cos", warmup=30, every=20)
H("lista", "tb", "restart with an exact resume at step 150 (new event file)", crash=(150, 150), ckpt_every=50, every=5)
H("gin", "pyg", "per-epoch console, 10 epochs of 32 batches", bs=64, steps=320)
H("gin", "ptimagenet", "ProgressMeter every 10 batches", every=10)
H("gin", "monai", "StatsHandler every 5 iterations, per-epoch val", every=5, eval_every=64)
H("gin", "elastic", "2 torchrun workers of equal speed", ranks=2, bs=64, every=5)

# ------------------------------------------------------------------ injected bugs
R("crf_probspace_forward", "crf", "tb", "probability-space CRF forward; unstandardised shard at step 151", bad_steps=(150,), every=5)
R("crf_probspace_forward", "crf", "icefall", "same; unstandardised shard at step 121", bad_steps=(120,), every=5)
R("empty_set_pool", "cnp", "monai", "context size randint(0, k); an empty context at step 151", bad_steps=(150,), every=2)
R("empty_set_pool", "mil", "d2console", "an all-masked bag at step 131", bad_steps=(130,), every=20)
R("empty_set_pool_guarded", "cnp", "hf", "empty context at step 101; the loop skips the NaN batch; HF logging_nan_inf_filter", bug="empty_set_pool", bad_steps=(100,), nan_guard=True, every=10)
R("empty_set_pool_guarded", "mil", "mmcv", "all-masked bag at step 141; the loop skips it and logs nothing for it", bug="empty_set_pool", bad_steps=(140,), nan_guard=True, mask="skip", every=5)
R("megagraph_shard", "gin", "tb", "mis-parsed merged-graph batches at steps 101 and 201", bad_steps=(100, 200), every=1)
R("megagraph_shard", "gin", "ptimagenet", "mis-parsed merged-graph batches at steps 121 and 221", bad_steps=(120, 220), every=2)
R("l2_reg_sign", "kge", "pykeen", "regulariser subtracted (lam 0.5)", lam=0.5)
R("l2_reg_sign", "kge", "mmcv", "regulariser subtracted (lam 0.5)", lam=0.5, every=5)
R("clip_value_typo", "gin", "pyg", "clip_grad_value_(1e-5) with SGD momentum", opt="sgdm", lr=0.05, bs=64, steps=320)
R("clip_value_typo", "lista", "hf", "clip_grad_value_(1e-5) with SGD momentum", opt="sgdm", lr=0.05, every=10)
R("readout_mean_for_sum", "gin", "tb", "mean readout for a counting task", every=5)
R("readout_mean_for_sum", "gin", "deitlog", "mean readout; per-epoch JSON", bs=64, steps=320)
R("mems_not_carried", "txl", "txlog", "new memory discarded every segment", every=10)
R("mems_not_carried", "txl", "hf", "new memory discarded every segment", every=10)
R("domain_blocks_noshuffle", "mil", "monai", "site-ordered shards, SequentialSampler; SGD lr 1.0", opt="sgd", lr=1.0, key_strength=0.2, every=1)
R("domain_blocks_noshuffle", "mil", "tb", "site-ordered shards, SequentialSampler; SGD lr 1.0", opt="sgd", lr=1.0, key_strength=0.2, every=2)
R("glob_one_shard", "mil", "deitlog", "one shard of ten read; 40 epochs of 10 batches", bs=20, steps=400, key_strength=0.5)
R("glob_one_shard", "mil", "pyg", "one shard of ten read; 40 epochs of 10 batches; lr 6e-3", bs=20, steps=400, key_strength=0.4, lr=6e-3)
R("lista_lipschitz_sqrt", "lista", "hf", "step size 1/||D|| instead of 1/||D||^2, 8 unrolled layers", every=10)
R("lista_lipschitz_sqrt", "lista", "tb", "same, 10 unrolled layers", depth=10, every=5)
R("residual_dropped", "mil", "tb", "16-block tanh stack without its residual adds; layer grad norms logged", depth=16, layer_gn=True, every=5)
R("residual_dropped", "mil", "elastic", "same on 2 workers; layer grad norms printed", depth=16, layer_gn=True, ranks=2, bs=64, every=5)
R("edge_list_python_collate", "gin", "ptimagenet", "per-edge Python collate in the main process", every=5)
R("edge_list_python_collate", "gin", "d2console", "per-edge Python collate in the main process", every=20)
R("metric_sweep_in_step", "kge", "tb", "filtered-rank sweep inside the step every 30 steps", sweep_every=30, every=1)
R("metric_sweep_in_step", "crf", "ptimagenet", "token-accuracy sweep inside the step every 25 steps", sweep_every=25, every=1)
R("loss_tensor_history", "crf", "mmcv", "history.append(loss) keeps every graph", every=5)
R("loss_tensor_history", "crf", "tb", "history.append(loss) keeps every graph", every=5)
R("rank1_detect_anomaly", "mil", "elastic", "rank 1 in anomaly mode from step 101", ranks=2, bs=64, bug_step=100, every=5)
R("rank1_detect_anomaly", "cnp", "elastic", "rank 1 in anomaly mode from step 1", ranks=2, bs=64, every=10)
R("pad_rows_sqrt_guard", "mil", "tb", "variable-size padded bags from step 151; sqrt norm; non-finite-grad steps skipped", bug="pad_rows_sqrt", pad_from=150, grad_guard=True, every=5)
R("pad_rows_sqrt_guard", "mil", "hf", "same from step 121", bug="pad_rows_sqrt", pad_from=120, grad_guard=True, every=10)
R("pad_rows_sqrt_scaler", "mil", "icefall", "same from step 181 under the simulated fp16 scaler", bug="pad_rows_sqrt", pad_from=180, fp16=True, every=5)
R("pad_rows_sqrt_scaler", "mil", "tb", "same from step 151 under the simulated fp16 scaler", bug="pad_rows_sqrt", pad_from=150, fp16=True, every=5)
R("accum_log_sum", "crf", "mmcv", "accum 4; logged loss is the sum of micro-batch losses", accum=4, steps=200, eval_every=20, every=5)
R("accum_log_sum", "cnp", "txlog", "accum 4; logged loss is the sum of micro-batch losses", accum=4, steps=200, eval_every=20, every=5)
R("step_not_restored", "gin", "elastic", "restart at step 180 from the step-150 checkpoint; step counter back to 0", crash=(180, 150), ckpt_every=50, ranks=2, bs=64, every=5)
R("step_not_restored", "kge", "tb", "restart at step 200 from the step-150 checkpoint; step counter back to 0", crash=(200, 150), ckpt_every=50, every=5)
R("norm_gamma_zero_all", "mil", "tb", "every LayerNorm weight zero-initialised; dead fraction logged", probe="dead", every=5)
R("norm_gamma_zero_all", "mil", "mmcv", "every LayerNorm weight zero-initialised; dead fraction logged", probe="dead", every=5)
R("gate_temperature_typo", "mil", "tb", "sigmoid(U h / 0.01); gate saturation logged", probe="sat", every=5)
R("gate_temperature_typo", "mil", "elastic", "sigmoid(U h / 0.01) on 2 workers; gate saturation printed", probe="sat", ranks=2, bs=64, every=5)
R("mem_len_untruncated", "txl", "txlog", "memory never truncated to mem_len", every=10)
R("mem_len_untruncated", "txl", "d2console", "memory never truncated to mem_len", every=20)
R("cosine_tmax_epochs_per_batch", "cnp", "hf", "CosineAnnealingLR(T_max=30 epochs) stepped per batch", sched="cos_tmax", tmax=30, every=5)
R("cosine_tmax_epochs_per_batch", "lista", "tb", "CosineAnnealingLR(T_max=25 epochs) stepped per batch", sched="cos_tmax", tmax=25, every=5)
R("warmup_iters_times_bpe", "gin", "mmcv", "LinearLR total_iters x batches per epoch", sched="linear_warmup", warmup=100 * 64, every=5)
R("warmup_iters_times_bpe", "kge", "tb", "LinearLR total_iters x batches per epoch", sched="linear_warmup", warmup=330 * 22, every=5)

# internal key (cache, seed) in declaration order; the public run name is a seeded permutation, so ids carry no information
_order = list(range(len(SPECS)))
random.Random(20261212).shuffle(_order)
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
    no-trace runs across I12a/I12b is kept (greedy, then two refinement passes)."""
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
