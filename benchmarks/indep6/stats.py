"""Validate labels.json against runs/ (and README.md against run names) and print per-split counts."""
import collections
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SYMPTOMS = {"nonfinite_loss", "loss_spike", "divergence", "flat_loss", "plateau", "oscillation", "overfitting",
            "exploding_gradients", "vanishing_gradients", "input_bound", "step_time_outliers", "memory_growth",
            "straggler", "nonfinite_grad", "nan_masked_in_logs", "loss_scale_collapse", "grad_accum_misnormalization",
            "resume_discontinuity", "dead_units", "saturated_activations", "throughput_regression", "lr_schedule_anomaly"}
RULE4 = None
p4 = os.path.join(HERE, "..", "indep5", "labels.json")
if os.path.exists(p4):
    RULE4 = json.load(open(p4))["_rule"]

L = json.load(open(os.path.join(HERE, "labels.json")))
runs = L["runs"]
errors = []
if RULE4 is not None and L["_rule"] != RULE4:
    errors.append("_rule differs from indep5's")
for name, r in runs.items():
    for k in ("split", "family", "fault", "format", "faults", "tolerated", "notes"):
        if k not in r:
            errors.append(f"{name}: missing field {k}")
    d = os.path.join(HERE, "runs", name)
    files = [os.path.join(dp, f) for dp, _, fs in os.walk(d) for f in fs]
    if not files or not all(os.path.getsize(f) > 0 for f in files):
        errors.append(f"{name}: missing or empty files")
    for f in r["faults"] + r["tolerated"]:
        if f["symptom"] not in SYMPTOMS:
            errors.append(f"{name}: unknown symptom {f['symptom']}")
        if f.get("onset_step") is not None and not isinstance(f["onset_step"], (int, float)):
            errors.append(f"{name}: bad onset {f['onset_step']}")
    if {f["symptom"] for f in r["faults"]} & {t["symptom"] for t in r["tolerated"]}:
        errors.append(f"{name}: a symptom is both labelled and tolerated")
    if r["split"] not in ("K", "L"):
        errors.append(f"{name}: split {r['split']}")
    if r["fault"] == "none" and r["faults"]:
        errors.append(f"{name}: designed-healthy run with faults")
extra = set(os.listdir(os.path.join(HERE, "runs"))) - set(runs)
if extra:
    errors.append(f"run folders without labels: {sorted(extra)}")
readme = os.path.join(HERE, "README.md")
if os.path.exists(readme):
    txt = open(readme).read()
    named = [n for n in runs if n in txt]
    if named:
        errors.append(f"README.md names runs: {named[:5]}")
size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(os.path.join(HERE, "runs")) for f in fs)
print("errors:", errors or "none")
print(f"runs/ size: {size / 2**20:.1f} MB")

by = collections.defaultdict(collections.Counter)
sym = collections.defaultdict(collections.Counter)
fmt = collections.defaultdict(collections.Counter)
fam = collections.defaultdict(collections.Counter)
kind = collections.defaultdict(collections.Counter)
for name, r in runs.items():
    s = r["split"]
    by[s]["runs"] += 1
    by[s]["faulty" if r["faults"] else "healthy"] += 1
    if r["fault"] != "none":
        by[s]["injected"] += 1
        if not r["faults"]:
            by[s]["injected_no_trace"] += 1
    for f in r["faults"]:
        sym[f["symptom"]][s] += 1
    fmt[r["format"]][s] += 1
    fam[r["family"]][s] += 1
    kind[r["fault"].split(" (")[0]][s] += 1
for s in sorted(by):
    print(s, dict(by[s]))
for title, tab in (("symptom", sym), ("fault kind", kind), ("family", fam), ("format", fmt)):
    print(f"{title:28s}   K   L")
    for k in sorted(tab):
        print(f"  {k:26s} {tab[k]['K']:3d} {tab[k]['L']:3d}")
sys.exit(1 if errors else 0)
