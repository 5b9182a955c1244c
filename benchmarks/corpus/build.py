"""Build the training corpus: really train every declared run, write its log, label it.

Usage (from the repository root)::

    .venv/bin/python benchmarks/corpus/build.py [--only NAME[,NAME...]] [--jobs 2] [--list]

Every run in ``specs.SPECS`` is trained on CPU (one thread per process, a few seconds) with its
fault injected into the training code (``train.py``), written in its log format
(``writers.py``) into ``runs/<name>/``, and labelled from the numbers the file holds
(``labels.py``). ``labels.json`` is rewritten with every run (``--only`` keeps the other runs'
labels as they were). A one-line summary of each run's numbers is printed so that every label
can be checked against the data that produced it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

RUNS = HERE / "runs"
LABELS = HERE / "labels.json"
CACHE = HERE / ".cache"
"""What each training measured (not committed): ``--relabel`` rewrites logs and labels from it."""

RULE = ("a finding at warning or above hits a fault when the symptom is equal and, where the "
        "fault has an onset_step, its onset is within max(20 steps, 10% of the run) of "
        "onset_step, of any event_steps entry, or inside onset_range widened by that tolerance; "
        "any other finding at warning or above that no 'tolerated' entry covers is a false "
        "positive; a healthy run has faults: []. Every run here was really trained "
        "(benchmarks/corpus/build.py) with its fault injected into the training code; labels "
        "were derived from the numbers in the written file and checked run by run (notes).")


def build_one(sp: dict, relabel: bool = False) -> tuple[str, dict, str]:
    import torch

    torch.set_num_threads(1)
    from labels import label_run, summary
    from train import train
    from writers import WRITERS

    t0 = time.perf_counter()
    cache = CACHE / f"{sp['name']}.json"
    if relabel and cache.exists():
        res = json.loads(cache.read_text())
        res["ranks"] = {int(k): v for k, v in res["ranks"].items()}
    elif sp.get("appended"):
        parts = [train({**sp, **over}) for over in sp["appended"]]
        res = parts[0]
        res = {**res, "steps": [r for p in parts for r in p["steps"]],
               "evals": [e for p in parts for e in p["evals"]], "parts": parts}
        # every part restarts its step/epoch counter: the file shows step going back to 0
        off = 0.0
        for i, p in enumerate(parts):
            for e in p["evals"]:
                e["part"] = i
            for r in p["steps"]:
                r["wall_s"] += off
                r["part"] = i
            off = p["steps"][-1]["wall_s"]
    else:
        res = train(sp)
    if not (relabel and cache.exists()):
        CACHE.mkdir(exist_ok=True)
        cache.write_text(json.dumps({k: v for k, v in res.items() if k != "parts"}))
    train_s = time.perf_counter() - t0
    d = RUNS / sp["name"]
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    view = WRITERS[sp["format"]](res, d, sp)
    label = label_run(sp, res, view)
    line = summary(sp, res, view, label, train_s)
    return sp["name"], label, line


def main(argv: list[str] | None = None) -> int:
    from machine import one_line
    from specs import SPECS, assign_splits

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated run names (or name prefixes)")
    ap.add_argument("--jobs", type=int, default=1, help="training processes (at most 2 here)")
    ap.add_argument("--list", action="store_true", help="list the runs and exit")
    ap.add_argument("--relabel", action="store_true",
                    help="do not retrain: rewrite logs and labels from the measurements of the "
                         "last build (.cache/), for runs that have them")
    args = ap.parse_args(argv)
    print(one_line(), flush=True)
    specs = SPECS
    if args.list:
        for sp in specs:
            print(sp["name"])
        return 0
    if args.only:
        want = args.only.split(",")
        specs = [s for s in specs if any(s["name"] == w or s["name"].startswith(w) for w in want)]
        if not specs:
            print(f"no run matches {args.only}", file=sys.stderr)
            return 2
    old = json.loads(LABELS.read_text())["runs"] if LABELS.exists() and args.only else {}
    labels = dict(old)
    t0 = time.perf_counter()
    jobs = max(1, min(args.jobs, 2))
    n = len(specs)
    ex = None
    if jobs == 1:
        results = (build_one(s, args.relabel) for s in specs)
    else:
        ex = ProcessPoolExecutor(jobs)
        results = ex.map(build_one, specs, [args.relabel] * len(specs), chunksize=1)
    for i, (name, label, line) in enumerate(results, 1):
        labels[name] = label
        print(f"[{i:3d}/{n}] {line}", flush=True)
    if ex is not None:
        ex.shutdown()
    names = {s["name"] for s in SPECS}
    labels = {k: v for k, v in labels.items() if k in names}
    split = assign_splits(SPECS)
    for k, v in labels.items():
        v["split"] = split[k]
    for stale in RUNS.iterdir() if RUNS.exists() else []:
        if stale.is_dir() and stale.name not in names:
            shutil.rmtree(stale)
    ordered = {k: labels[k] for k in sorted(labels)}
    LABELS.write_text(json.dumps({"_rule": RULE, "runs": ordered}, indent=1,
                                 allow_nan=False) + "\n")
    size = sum(p.stat().st_size for p in RUNS.rglob("*") if p.is_file())
    faults = {v["fault"] for v in ordered.values() if v["fault"] != "none"}
    healthy = sum(1 for v in ordered.values() if not v["faults"])
    print(f"built {n} runs in {time.perf_counter() - t0:.0f} s; labels.json has {len(ordered)} "
          f"runs ({len(faults)} fault kinds, {healthy} with faults: []), logs {size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
