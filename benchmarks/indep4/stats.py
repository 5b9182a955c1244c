"""Validate labels.json against runs/ and print per-split counts."""
import collections
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SYMPTOMS = {"nonfinite_loss", "loss_spike", "divergence", "flat_loss", "plateau", "oscillation", "overfitting",
            "exploding_gradients", "vanishing_gradients", "input_bound", "step_time_outliers", "memory_growth",
            "straggler", "nonfinite_grad", "nan_masked_in_logs", "loss_scale_collapse", "grad_accum_misnormalization",
            "resume_discontinuity", "dead_units", "saturated_activations", "throughput_regression", "lr_schedule_anomaly"}

L = json.load(open(os.path.join(HERE, "labels.json")))
runs = L["runs"]
errors = []
for name, r in runs.items():
    d = os.path.join(HERE, "runs", name)
    files = [os.path.join(dp, f) for dp, _, fs in os.walk(d) for f in fs]
    if not files or not all(os.path.getsize(f) > 0 for f in files if not f.endswith(("params/lr", "params/batch_size"))):
        errors.append(f"{name}: missing or empty files")
    for f in r["faults"] + r["tolerated"]:
        if f["symptom"] not in SYMPTOMS:
            errors.append(f"{name}: unknown symptom {f['symptom']}")
    if r["split"] not in ("G", "H"):
        errors.append(f"{name}: split {r['split']}")
extra = set(os.listdir(os.path.join(HERE, "runs"))) - set(runs)
if extra:
    errors.append(f"run folders without labels: {sorted(extra)}")
print("errors:", errors or "none")

by = collections.defaultdict(collections.Counter)
sym = collections.defaultdict(collections.Counter)
fmt = collections.defaultdict(collections.Counter)
for name, r in runs.items():
    s = r["split"]
    by[s]["runs"] += 1
    by[s]["faulty" if r["faults"] else "healthy"] += 1
    if name.startswith("b_"):
        by[s]["injected"] += 1
        if not r["faults"]:
            by[s]["injected_no_trace"] += 1
    for f in r["faults"]:
        sym[f["symptom"]][s] += 1
    fmt[r["format"]][s] += 1
for s in sorted(by):
    print(s, dict(by[s]))
print("symptom                        G  H")
for k in sorted(sym):
    print(f"{k:28s} {sym[k]['G']:3d} {sym[k]['H']:3d}")
print("format                         G  H")
for k in sorted(fmt):
    print(f"{k:28s} {fmt[k]['G']:3d} {fmt[k]['H']:3d}")
sys.exit(1 if errors else 0)
