"""labels.json assembly: entries + short numeric justifications from the logged numbers."""
from __future__ import annotations

import math

import numpy as np

RULE = (
    "Labels come only from the numbers each run's log files record (after the framework's own "
    "aggregation/rounding), measured with the simple detectors in indep_label.py, never with trainmedic. "
    "faults = the symptoms the injected fault visibly produced; onset_step (in the file's own step units, "
    "see notes) only where the numbers pin a point in time (first NaN, first spike, validation minimum, "
    "start of a slowdown or of a climb, the repeated step), else null. A logged NaN/inf training loss is "
    "always a fault (nonfinite_loss); so is a logger that visibly masked NaNs (nan_masked_in_logs). "
    "tolerated = consequences a reasonable diagnosis may also report for that fault, plus anything else "
    "measured on the run. If an injected fault left no trace in the logged numbers, the run is labelled "
    "with what the numbers show (faults: [] if nothing) and the notes say so. Healthy runs (fault 'none') "
    "were checked to show none of the symptoms."
)


def _f(x):
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return f"{x:.3g}"


def justify(c, info):
    g = info.get
    if c == "nonfinite_loss":
        return f"first non-finite logged loss at {g('onset')}"
    if c == "divergence":
        if g("nonfinite_at") is not None:
            return f"loss min {_f(g('min'))} at {g('min_step')}, climbs from {g('onset')} and goes non-finite at {g('nonfinite_at')}"
        return f"loss min {_f(g('min'))} at {g('min_step')}, rises from ~{g('onset')} and ends at {_f(g('end'))} (start {_f(g('start'))})"
    if c == "loss_spike":
        sp = g("spikes")
        s0 = sp[0]
        more = f"; {len(sp)} spikes at {[x[0] for x in sp][:6]}" if len(sp) > 1 else ""
        return f"loss {_f(s0[1])} at {s0[0]} vs recent median {_f(s0[2])} ({s0[1] / max(s0[2], 1e-12):.0f}x), falls back right after{more}"
    if c == "flat_loss":
        return f"loss {_f(g('start'))} at start, best (5-pt median) {_f(g('best'))}, end {_f(g('end'))}: never 15% below start"
    if c == "plateau":
        return f"loss {_f(g('start'))} -> {_f(g('mid'))} at mid-run -> {_f(g('end'))} at the end; the same run without the fault ends at {_f(g('ref_end'))}"
    if c == "oscillation":
        return f"coherent swings around the trend: median amplitude {g('amp'):.2f} of the loss drop, lag-1 autocorrelation {g('autocorr'):.2f}"
    if c == "overfitting":
        return f"val min {_f(g('val_min'))} at {g('onset')}, ends {_f(g('val_end'))}; train {_f(g('train_at'))} -> {_f(g('train_end'))}"
    if c == "exploding_gradients":
        nf = f", non-finite at {g('nonfinite_at')}" if g("nonfinite_at") is not None else ""
        return f"grad norm early median {_f(g('early'))}, peak {_f(g('peak'))}, above 5x from {g('onset')}{nf}"
    if c == "nonfinite_grad":
        return f"grad norm non-finite from {g('onset')}"
    if c == "vanishing_gradients":
        if g("layers"):
            return f"per-layer grad norm (2nd half median): first layer {g('first_layer'):.2e} vs last {g('last_layer'):.2e} (ratio {g('ratio'):.1e})"
        return f"global grad norm median {g('median'):.2e} while the loss stays high"
    if c == "input_bound":
        on = f" from {g('onset')}" if g("onset") is not None else ""
        return f"data wait > 50% of the step at {g('frac'):.0%} of logged points{on} (median share {g('share_med'):.0%})"
    if c == "throughput_regression":
        return f"step time x{g('ratio'):.1f} (median after vs before) from ~{g('onset')}"
    if c == "step_time_outliers":
        return f"{g('n')} logged steps > 3x the median step time {_f(g('median'))} (worst {_f(g('worst'))}), first at {g('onset')}"
    if c == "memory_growth":
        return f"memory {_f(g('start'))} -> {_f(g('end'))} (+{g('growth'):.0%}), rising at {g('up_frac'):.0%} of points"
    if c == "lr_schedule_anomaly":
        if g("collapse_at") is not None:
            return f"lr {_f(g('first'))} falls below 1e-3 x its max by {g('collapse_at')} (ends {_f(g('last'))})"
        return f"lr rises from {_f(g('first'))} to {_f(g('last'))} and is still rising at the end of the run"
    if c == "loss_scale_collapse":
        return f"loss scale typical {_f(g('early'))} early, {_f(g('end'))} at the end; more than two halvings below typical from {g('onset')}"
    if c == "resume_discontinuity":
        return f"logged step goes back from {g('prev')} to {g('onset')}"
    if c == "straggler":
        ms = ", ".join(f"rank {k}: {_f(v)}" for k, v in sorted(g("medians").items()))
        return f"median step time {ms} (x{g('ratio'):.2f})"
    if c == "nan_masked_in_logs":
        if g("zero_at") is not None:
            return f"logged loss is exactly 0.0 at {g('n_zero')} points from {g('zero_at')}, non-zero before (NaN replaced by the logger)"
        return f"{g('n_gap')} logging points missing from {g('gap_at')} (NaN steps dropped by the logger)"
    return ""


def summary(S):
    tr = [(s, v) for s, v in S["train"] if v is not None and math.isfinite(v)]
    if not tr:
        return ""
    v = [x for _, x in tr]
    k = max(1, len(v) // 10)
    out = f"loss {_f(v[0])} -> {_f(float(np.median(v[-k:])))}"
    va = [(s, x) for s, x in S["val"] if x is not None and math.isfinite(x)]
    if va:
        i = int(np.argmin([x for _, x in va]))
        out += f"; val min {_f(va[i][1])} at {va[i][0]}, last {_f(va[-1][1])}"
    return out


def build_labels(specs, by):
    runs = {}
    for sp in specs:
        r = by[sp["name"]]
        lab, S = r["lab"], r["S"]
        parts = [sp.get("desc", "").rstrip(".") + "."]
        parts.append(f"Step unit: {S['unit']}.")
        parts.append(summary(S) + ".")
        for f in lab["faults"]:
            parts.append(f"{f['symptom']}: {justify(f['symptom'], lab['found'][f['symptom']])}.")
        parts += [n + "." for n in lab["notes"]]
        if sp.get("fault") and r.get("ref") is not None and not any(f["symptom"] == "plateau" for f in lab["faults"]):
            parts.append(f"Same run without the fault: final loss {_f(r['ref'])}.")
        if r.get("attempts", 1) > 1:
            parts.append(f"Trained {r['attempts']} times: earlier attempts showed timing noise from other processes.")
        runs[sp["name"]] = dict(split=sp["split"], family=sp["family"], fault=sp["fault"] or "none", format=sp["format"],
                                faults=lab["faults"], tolerated=lab["tolerated"], notes=" ".join(p for p in parts if p.strip(". ")))
    return {"_rule": RULE, "runs": runs}
