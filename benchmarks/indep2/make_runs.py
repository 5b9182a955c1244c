"""Rebuild the indep2 corpus: train every spec, write its log, derive its label.

usage: ../../.venv/bin/python make_runs.py [--only NAME_SUBSTR] [--jobs 2]"""
import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch  # noqa: E402

torch.set_num_threads(1)
from labels import label, sanity  # noqa: E402
from specs import EPOCH_FMTS, build  # noqa: E402
from train import train  # noqa: E402
import writers as W  # noqa: E402
import writers2 as W2  # noqa: E402

WRITERS = dict(hf=W.w_hf, lightning=W.w_lightning, keras_csv=W.w_keras_csv, keras_console=W.w_keras_console,
               fastai=W.w_fastai, tb=W.w_tb, wandb=W.w_wandb, mlflow=W.w_mlflow, jsonl=W.w_jsonl, csv=W.w_csv,
               ignite=W2.w_ignite, mmengine=W2.w_mmengine, nanogpt=W2.w_nanogpt, logging=W2.w_logging,
               tqdm=W2.w_tqdm, ranks=W2.w_ranks)
INSTANT = ("lightning", "tb", "nanogpt", "tqdm", "ignite")  # these tools log the current batch loss


def assign_splits(specs):
    """Stratify: alternate within each bug kind (healthy: within family) while
    greedily balancing formats and families between C and D."""
    import itertools
    groups = {}
    for s in specs:
        key = s["bug"] if s["bug"] != "none" else "none:" + s["family"]
        groups.setdefault(key, []).append(s)
    cnt = {}

    def bump(s, sp, d):
        for k in (sp, (sp, "fmt", s["fmt"]), (sp, "fam", s["family"]), (sp, "h", s["bug"] == "none")):
            cnt[k] = cnt.get(k, 0) + d

    def cost():
        keys = {k[1:] for k in cnt if isinstance(k, tuple)}
        c = sum(abs(cnt.get(("C",) + k, 0) - cnt.get(("D",) + k, 0)) for k in keys)
        return c + 2 * abs(cnt.get("C", 0) - cnt.get("D", 0))

    for key in sorted(groups, key=lambda k: (-len(groups[k]), k)):
        g = sorted(groups[key], key=lambda s: s["name"])
        n, best = len(g), None
        for nc in {n // 2, n - n // 2}:
            for combo in itertools.combinations(range(n), nc):
                sp = ["C" if i in combo else "D" for i in range(n)]
                for s, x in zip(g, sp):
                    bump(s, x, 1)
                c = cost()
                for s, x in zip(g, sp):
                    bump(s, x, -1)
                if best is None or c < best[0]:
                    best = (c, sp)
        for s, x in zip(g, best[1]):
            s["split"] = x
            bump(s, x, 1)


def run_one(spec):
    try:
        return _run_one(spec)
    except Exception:
        import traceback
        return spec["name"], {"error": traceback.format_exc()}, 0.0


def _run_one(spec):
    torch.set_num_threads(1)
    t0 = time.time()
    rec = train(spec)
    d = os.path.join(HERE, "runs", spec["name"])
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    fmt = spec["fmt"]
    if fmt in EPOCH_FMTS:
        rows, evs = W.epoch_rows(rec, ema=(fmt == "fastai")), []
    else:
        rows = W.sample_steps(rec, spec["log_every"], "last" if fmt in INSTANT else "mean")
        evs = W.sample_evals(rec)
    masked = []
    if spec.get("mask"):
        masked = W.mask(rows, spec["mask"], ("loss", "grad_norm"))
        W.mask(evs, spec["mask"], ("val_loss",))
    unit = WRITERS[fmt](rec, spec, d, rows, evs)
    lab = label(spec, rec, rows, evs, unit, masked)
    lab["_warn"] = sanity(spec, rec, rows, evs, unit, masked)
    return spec["name"], lab, time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    specs = build()
    names = [s["name"] for s in specs]
    assert len(names) == len(set(names)), "duplicate run names"
    assign_splits(specs)
    todo = [s for s in specs if any(o in s["name"] for o in a.only.split(","))]
    t0 = time.time()
    out = {}
    ctx = mp.get_context("fork")
    with ctx.Pool(a.jobs, maxtasksperchild=1) as pool:
        for name, lab, wall in pool.imap_unordered(run_one, todo):
            if "error" in lab:
                print("ERROR", name, lab["error"], flush=True)
                continue
            warn = lab.pop("_warn")
            out[name] = lab
            print(f"{time.time() - t0:7.1f}s {wall:5.1f}s {name:34s} {[f['symptom'] for f in lab['faults']]} chk={warn}", flush=True)
    path = os.path.join(HERE, "labels.json")
    if a.only and os.path.exists(path):
        old = json.load(open(path))["runs"]
        old.update(out)
        out = old
    rule = ("a finding at warning or above hits a fault when the symptom is equal and, where the fault has an onset_step, "
            "its onset is within max(20 steps, 10% of the run) of onset_step, of any event_steps entry, or inside onset_range "
            "widened by that tolerance; any other finding at warning or above that no 'tolerated' entry covers is a false "
            "positive; a healthy run has faults: [].")
    json.dump({"_rule": rule, "runs": {k: out[k] for k in sorted(out)}}, open(path, "w"), indent=1)
    print(f"built {len(todo)} runs in {time.time() - t0:.1f}s wall")


if __name__ == "__main__":
    main()
