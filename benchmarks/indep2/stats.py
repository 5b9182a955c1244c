"""Summarise labels.json: per split faulty/healthy counts, symptoms, formats, families."""
import collections
import json
import os

d = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "labels.json")))["runs"]
for sp in ("C", "D"):
    runs = {k: v for k, v in d.items() if v["split"] == sp}
    faulty = [k for k, v in runs.items() if v["faults"]]
    print(f"split {sp}: {len(runs)} runs, {len(faulty)} faulty, {len(runs) - len(faulty)} healthy")
    sy = collections.Counter(f["symptom"] for v in runs.values() for f in v["faults"])
    print("  symptoms:", dict(sorted(sy.items())))
    print("  formats:", dict(sorted(collections.Counter(v["format"] for v in runs.values()).items())))
    print("  families:", dict(sorted(collections.Counter(v["family"] for v in runs.values()).items())))
    inv = [k for k, v in runs.items() if v["fault"] != "none" and not v["faults"]]
    print("  injected bug but labelled healthy:", inv)
