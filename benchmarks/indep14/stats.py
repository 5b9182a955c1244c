"""Validate labels.json against runs/ (and README.md against run names) and print per-split counts."""
import collections
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SPLITS = ("I14a", "I14b")
SYMPTOMS = {"nonfinite_loss", "loss_spike", "divergence", "flat_loss", "plateau", "oscillation", "overfitting",
            "exploding_gradients", "vanishing_gradients", "input_bound", "step_time_outliers", "memory_growth",
            "straggler", "nonfinite_grad", "nan_masked_in_logs", "loss_scale_collapse", "grad_accum_misnormalization",
            "resume_discontinuity", "dead_units", "saturated_activations", "throughput_regression", "lr_schedule_anomaly"}
sys.path.insert(0, HERE)
from make_runs import RULE  # noqa: E402  (the string copied from indep13/labels.json)

L = json.load(open(os.path.join(HERE, "labels.json")))
runs = L["runs"]
errors = []
if L.get("_rule") != RULE:
    errors.append("_rule differs from the indep13 string")
for name, r in runs.items():
    for k in ("split", "family", "fault", "format", "faults", "tolerated", "notes", "train_seconds"):
        if k not in r:
            errors.append(f"{name}: missing field {k}")
    d = os.path.join(HERE, "runs", name)
    files = [os.path.join(dp, f) for dp, _, fs in os.walk(d) for f in fs]
    if not files or not all(os.path.getsize(f) > 0 for f in files):
        errors.append(f"{name}: missing or empty files")
    if r["fault"] != "none" and not r["fault"].endswith("(no visible trace)"):
        if not any(f["symptom"] in r["notes"] for f in r["faults"]):
            errors.append(f"{name}: notes give no numbers for the labels")
    for f in r["faults"] + r["tolerated"]:
        if f["symptom"] not in SYMPTOMS:
            errors.append(f"{name}: unknown symptom {f['symptom']}")
        if f.get("onset_step") is not None and not isinstance(f["onset_step"], (int, float)):
            errors.append(f"{name}: bad onset {f['onset_step']}")
    if {f["symptom"] for f in r["faults"]} & {t["symptom"] for t in r["tolerated"]}:
        errors.append(f"{name}: a symptom is both labelled and tolerated")
    if r["split"] not in SPLITS:
        errors.append(f"{name}: split {r['split']}")
    if r["fault"] == "none" and r["faults"]:
        errors.append(f"{name}: designed-healthy run with faults")
    if r["fault"].endswith("(no visible trace)") and r["faults"]:
        errors.append(f"{name}: 'no visible trace' with faults")
    if r["fault"] != "none" and not r["fault"].endswith("(no visible trace)") and not r["faults"]:
        errors.append(f"{name}: injected fault without labels and without the no-trace marker")
extra = set(os.listdir(os.path.join(HERE, "runs"))) - set(runs)
if extra:
    errors.append(f"run folders without labels: {sorted(extra)}")
readme = os.path.join(HERE, "README.md")
if os.path.exists(readme):
    txt = open(readme).read()
    import re
    named = [n for n in runs if re.search(r"\b" + n + r"\b", txt)]
    if named:
        errors.append(f"README.md names runs: {named[:5]}")
else:
    errors.append("README.md missing")
size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(os.path.join(HERE, "runs")) for f in fs)
if size > 3.2 * 2**20:
    errors.append(f"runs/ is {size / 2**20:.1f} MB (limit ~3 MB)")
print("errors:", errors or "none")
print(f"runs: {len(runs)}, runs/ size: {size / 2**20:.1f} MB, summed train_seconds: {sum(r.get('train_seconds', 0) for r in runs.values()):.0f}")

by = collections.defaultdict(collections.Counter)
sym = collections.defaultdict(collections.Counter)
fmt = collections.defaultdict(collections.Counter)
fam = collections.defaultdict(collections.Counter)
kind = collections.defaultdict(collections.Counter)
for name, r in runs.items():
    s = r["split"]
    by[s]["runs"] += 1
    by[s]["faulty_labels" if r["faults"] else "healthy_labels"] += 1
    if "EXCERPT:" in r["notes"]:
        by[s]["excerpts"] += 1
    if r["fault"] == "none":
        by[s]["designed_healthy"] += 1
    else:
        by[s]["injected"] += 1
        if not r["faults"]:
            by[s]["injected_no_trace"] += 1
    for f in r["faults"]:
        sym[f["symptom"]][s] += 1
    fmt[r["format"]][s] += 1
    fam[r["family"]][s] += 1
    kind[r["fault"].split(" (")[0]][s] += 1
for s in SPLITS:
    print(s, dict(by[s]))
for title, tab in (("symptom", sym), ("fault kind", kind), ("family", fam), ("format", fmt)):
    print(f"{title:28s} {SPLITS[0]:>4s} {SPLITS[1]:>4s}")
    for k in sorted(tab):
        print(f"  {k:26s} {tab[k][SPLITS[0]]:4d} {tab[k][SPLITS[1]]:4d}")
sys.exit(1 if errors else 0)
