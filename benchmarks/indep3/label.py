"""Write every run in its format and derive labels from the logged numbers."""
import json, math, os, shutil, statistics as stt
from writers import WRITERS, EPOCH_FORMATS, mask_rows, per_epoch

RULE = ("a finding at warning or above hits a fault when the symptom is equal and, where the fault has an onset_step, its onset is within "
        "max(20 steps, 10% of the run) of onset_step, of any event_steps entry, or inside onset_range widened by that tolerance; any other "
        "finding at warning or above that no 'tolerated' entry covers is a false positive; a healthy run has faults: [].")
FAULT_OF = dict(lr_high="lr_too_high", lr_low="lr_too_low", warmup_hot="warmup_too_hot", sched_per_batch="epoch_scheduler_stepped_per_batch",
                rising="rising_lr_schedule", missing_zero_grad="missing_zero_grad", summed_loss="summed_instead_of_mean_loss",
                double_softmax="double_softmax", div0="division_by_zero_nan", nan_masked="nan_hidden_by_logger", poison="poisoned_batches",
                shuffled_labels="shuffled_labels", sorted="class_sorted_unshuffled", tiny_train="tiny_train_set", frozen="frozen_backbone",
                wd_high="weight_decay_too_high", exploding_rnn="exploding_rnn", vanishing="vanishing_deep_sigmoid", dead_relu="dead_relu",
                saturated="saturated_tanh", loss_scale="loss_scale_collapse", mem_leak="memory_leak_kept_graph", slow_loader="slow_data_loader",
                slow_rank="slow_rank", creep="step_time_creep", outliers="step_time_stalls", resume_old="resume_from_older_checkpoint",
                appended="appended_second_run", leak="train_val_leakage", none="none")


def fin(v): return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def F(sym, onset=None, **kw):
    d = {"symptom": sym, "onset_step": onset}; d.update(kw); return d


def auto_instability(rows):
    """nonfinite / divergence / oscillation readings from the true loss series (global steps)."""
    out, notes = [], []
    nf = next((r["step"] for r in rows if not fin(r["loss"])), None)
    L = [(r["step"], r["loss"]) for r in rows if fin(r["loss"]) and (nf is None or r["step"] < nf)]
    if not L: return [F("nonfinite_loss", nf)], f"loss non-finite from step {nf}"
    l0 = stt.median([v for _, v in L[:3]]); lmin = min(v for _, v in L)
    notes.append(f"first loss {l0:.4g}, min {lmin:.4g}, last finite {L[-1][1]:.4g} at step {L[-1][0]}")
    if nf is not None:
        out.append(F("nonfinite_loss", nf)); notes.append(f"first non-finite loss at step {nf}")
    up = next((s for s, v in L if v > 2.5 * l0 and v > l0 + 0.5), None)
    tail = [v for _, v in L[int(len(L) * 0.75):]]
    if up is not None and tail and stt.median(tail) > 2 * max(lmin, 1e-8) and stt.median(tail) > 1.5 * l0:
        out.append(F("divergence", up)); notes.append(f"loss first > 2.5x start at step {up}; tail median {stt.median(tail):.4g}")
    elif len(tail) > 6 and nf is None:
        d = [abs(tail[i + 1] - tail[i]) for i in range(len(tail) - 1)]
        rel = stt.mean(d) / max(stt.mean(tail), 1e-8)
        notes.append(f"last-quarter mean |dloss|/mean loss {rel:.3f}")
        if rel > 0.35: out.append(F("oscillation", None))
        elif stt.median(tail) > 0.9 * l0: out.append(F("flat_loss", None)); notes.append("no net progress")
    return out, "; ".join(notes)


def tol_env(rows):
    t = []
    st = [r["step_time"] for r in rows]
    if max(st) > 6 * stt.median(st): t.append(F("step_time_outliers"))
    if rows[-1]["rss_mb"] - rows[0]["rss_mb"] > 8: t.append(F("memory_growth"))
    return t


def label_run(c, R):
    rows, evals, ev, bug, bp = R["rows"], R["evals"], R["ev"], c["bug"], c.get("bp", {})
    faults, tol, notes = [], tol_env(rows), []
    losses = [r["loss"] for r in rows if fin(r["loss"])]
    base = f"loss first {rows[0]['loss']:.4g} -> last {rows[-1]['loss']:.4g} (min {min(losses):.4g})" if losses else ""
    n = rows[-1]["step"]
    if bug in ("lr_high", "warmup_hot", "missing_zero_grad", "summed_loss", "sorted"):
        f, nt = auto_instability(rows); faults += f; notes.append(nt)
        if bug == "warmup_hot" and not faults:
            fl = [r for r in rows if fin(r["loss"])]; pk = max(fl, key=lambda r: r["loss"])
            w = c.get("warm", 50)
            faults.append(F("loss_spike", pk["step"], onset_range=[w // 3, int(w * 1.5)]))
            notes.append(f"during warm-up to lr {c['lr']} loss rises {fl[0]['loss']:.4g} -> peak {pk['loss']:.4g} at step {pk['step']}, never recovers below start")
            tol.append(F("flat_loss"))
        if bug == "sorted" and not any(x["symptom"] == "oscillation" for x in faults):
            faults.append(F("oscillation")); notes.append("class-sorted batches: loss swings with class blocks")
        tol += [F("loss_spike"), F("oscillation"), F("divergence"), F("exploding_gradients"), F("plateau")]
    elif bug == "lr_low" or bug == "wd_high":
        faults.append(F("flat_loss")); tol += [F("plateau")]; notes.append(base)
    elif bug == "sched_per_batch":
        lr0 = rows[0]["lr"]; s1 = next((r["step"] for r in rows if r["lr"] < 0.01 * lr0), None)
        faults.append(F("lr_schedule_anomaly", None)); tol += [F("plateau"), F("flat_loss")]
        notes.append(f"lr {lr0:.3g} -> {rows[-1]['lr']:.3g}; below 1% of start by step {s1} (epoch-level StepLR(3) stepped per batch); {base}")
    elif bug == "rising":
        faults.append(F("lr_schedule_anomaly", None))
        f, nt = auto_instability(rows); faults += [x for x in f if x["symptom"] in ("nonfinite_loss", "divergence")]
        tol += [F("oscillation"), F("loss_spike"), F("exploding_gradients"), F("flat_loss"), F("plateau")]
        notes.append(f"lr {rows[0]['lr']:.3g} -> {rows[-1]['lr']:.3g} (rising); {nt}")
    elif bug == "double_softmax":
        faults.append(F("plateau")); tol += [F("flat_loss")]; notes.append(base + "; CE on softmax outputs cannot go near 0")
    elif bug == "div0":
        nf = next(r["step"] for r in rows if not fin(r["loss"]))
        faults.append(F("nonfinite_loss", nf)); tol += [F("nonfinite_grad", nf)]; notes.append(f"{base}; loss NaN from step {nf}")
    elif bug == "nan_masked":
        nf = next(r["step"] for r in rows if not fin(r["loss"]))
        faults.append(F("nan_masked_in_logs", nf)); tol += [F("nonfinite_loss", nf), F("flat_loss"), F("plateau"), F("nonfinite_grad", nf)]
        notes.append(f"true loss NaN from step {nf}; logger writes it as {bp['mask']} (" +
                     {"zero": "loss/grad_norm = 0.0", "prev": "repeats last finite value", "skip": "loss key missing, lr still logged"}[bp["mask"]] + ")")
    elif bug == "poison":
        at = [a + 1 for a in bp["at"]]
        vals = {r["step"]: r["loss"] for r in rows}
        faults.append(F("loss_spike", at[0], event_steps=at)); tol += [F("oscillation")]
        notes.append("; ".join(f"step {a}: loss {vals.get(a, float('nan')):.4g} vs {vals.get(a - 1, float('nan')):.4g} before" for a in at))
    elif bug == "shuffled_labels":
        faults.append(F("flat_loss")); tol += [F("plateau"), F("overfitting")]
        notes.append(base + (f"; val {evals[0]['val_loss']:.4g} -> {evals[-1]['val_loss']:.4g}" if evals else ""))
    elif bug == "tiny_train":
        vm = min(evals, key=lambda e: e["val_loss"])
        faults.append(F("overfitting", vm["step"])); tol += [F("oscillation")]
        notes.append(f"train {base}; val min {vm['val_loss']:.4g} at step {vm['step']} -> {evals[-1]['val_loss']:.4g} at end ({bp.get('n')} training samples)")
    elif bug == "frozen":
        faults.append(F("plateau")); tol += [F("flat_loss")]; notes.append(base + "; only head trainable")
    elif bug == "exploding_rnn":
        g0 = rows[0]["grad_norm"]; up = next((r["step"] for r in rows if not fin(r["grad_norm"]) or r["grad_norm"] > 10 * max(g0, 1e-3)), None)
        gmax = max((r["grad_norm"] for r in rows if fin(r["grad_norm"])), default=float("nan"))
        if up is not None: faults.append(F("exploding_gradients", up))
        else: notes.append("NO VISIBLE TRACE: grad norm never grew -> labelled healthy")
        f, nt = auto_instability(rows); faults += [x for x in f if x["symptom"] == "nonfinite_loss"]
        tol += [F("loss_spike"), F("divergence"), F("oscillation"), F("nonfinite_grad"), F("flat_loss"), F("plateau")]
        notes.append(f"grad_norm first {g0:.3g}, max finite {gmax:.3g}, >10x start at step {up}; {nt}")
    elif bug == "vanishing":
        faults.append(F("vanishing_gradients")); tol += [F("flat_loss"), F("plateau")]
        notes.append(f"first-layer grad norm {rows[0]['grad_first']:.2e} -> {rows[-1]['grad_first']:.2e}; {base}")
    elif bug == "dead_relu":
        faults.append(F("dead_units")); tol += [F("flat_loss"), F("plateau"), F("vanishing_gradients")]
        notes.append(f"dead fraction (first ReLU) {rows[0]['dead_frac']:.3f} -> {rows[-1]['dead_frac']:.3f}; {base}")
    elif bug == "saturated":
        faults.append(F("saturated_activations")); tol += [F("plateau"), F("flat_loss"), F("oscillation"), F("vanishing_gradients")]
        notes.append(f"saturated fraction (|tanh|>0.97, first layer) {rows[0]['dead_frac']:.3f} -> {rows[-1]['dead_frac']:.3f}; {base}")
    elif bug == "loss_scale":
        at = bp["at"] + 1
        faults.append(F("loss_scale_collapse", at)); tol += [F("flat_loss"), F("plateau"), F("nonfinite_grad", at)]
        notes.append(f"loss_scale {rows[0]['loss_scale']:.3g} -> {rows[-1]['loss_scale']:.3g}, halving every step from {at} (all steps skipped); {base}")
    elif bug == "mem_leak":
        faults.append(F("memory_growth")); tol = [t for t in tol if t["symptom"] != "memory_growth"]
        notes.append(f"RSS {rows[0]['rss_mb']:.1f} MB -> {rows[-1]['rss_mb']:.1f} MB")
    elif bug == "slow_loader":
        faults.append(F("input_bound"))
        notes.append(f"median data_time {stt.median(r['data_time'] for r in rows) * 1000:.1f} ms of step_time {stt.median(r['step_time'] for r in rows) * 1000:.1f} ms")
    elif bug == "slow_rank":
        m0 = stt.median(r["step_time"] for r in rows); m1 = stt.median(r["step_time"] for r in R["rows1"])
        faults.append(F("straggler")); notes.append(f"median step time rank0 {m0 * 1000:.1f} ms, rank1 {m1 * 1000:.1f} ms")
        tol += tol_env(R["rows1"])
    elif bug == "creep":
        tol = [t for t in tol if t["symptom"] != "step_time_outliers"] + [F("step_time_outliers")]
        faults.append(F("throughput_regression")); q = len(rows) // 10
        notes.append(f"median step time first 10% {stt.median(r['step_time'] for r in rows[:q]) * 1000:.1f} ms, last 10% {stt.median(r['step_time'] for r in rows[-q:]) * 1000:.1f} ms")
    elif bug == "outliers":
        at = [a + 1 for a in bp["at"]]; tol = [t for t in tol if t["symptom"] != "step_time_outliers"]
        faults.append(F("step_time_outliers", at[0], event_steps=at))
        notes.append(f"stalls of {bp['spike'] * 1000:.0f} ms at steps {at}; median step {stt.median(r['step_time'] for r in rows) * 1000:.1f} ms")
    elif bug == "resume_old":
        cr = bp["crash"]; vals = {r["step"]: r["loss"] for r in rows}
        nxt = next(r for r in rows if r["step"] > cr)
        if nxt["loss"] > 1.5 * vals.get(cr, 1e9): faults.append(F("resume_discontinuity", nxt["step"])); tol += [F("loss_spike")]
        else: notes.append("NO VISIBLE TRACE (model had converged before step " + str(bp["from"]) + ") -> labelled healthy"); tol += [F("loss_spike"), F("resume_discontinuity")]
        notes.append(f"at step {cr} reloaded weights from step {bp['from']} without rewinding the counter: loss {vals.get(cr, float('nan')):.4g} at {cr} -> {nxt['loss']:.4g} at {nxt['step']}")
    elif bug == "appended":
        k = ev["append_at"]; r2 = rows[k]
        faults.append(F("resume_discontinuity", r2["step"], event_steps=[ev["first_end"]])); tol += [F("loss_spike")]
        notes.append(f"file holds two runs: steps 1..{ev['first_end']} then restarts at step {r2['step']} (line {k + 1}); loss {rows[k - 1]['loss']:.4g} -> {r2['loss']:.4g}")
    elif bug == "leak":
        notes.append(f"val set is a copy of train rows; no visible fault in logs ({base}; val {evals[0]['val_loss']:.4g} -> {evals[-1]['val_loss']:.4g}) -> labelled healthy")
    else:
        f, nt = auto_instability(rows); notes.append(nt)
        if f:
            notes.append("minibatch-noise/short-run reading of " + ",".join(x["symptom"] for x in f) + " tolerated (no bug injected)")
            tol += [F(x["symptom"]) for x in f]
        tail = losses[int(len(losses) * 0.7):]
        if tail and (tail[0] - min(tail)) < 0.03 * abs(tail[0]): tol.append(F("plateau"))
        if R.get("rows1"): tol += tol_env(R["rows1"])
    return faults, tol, "; ".join(x for x in notes if x)


def to_axis(fmt, spe, s):
    if s is None: return None
    if fmt == "keras_csv": return int(math.ceil(s / spe)) - 1
    if fmt == "keras_console": return int(math.ceil(s / spe))
    if fmt == "lightning": return s - 1
    return s


def unit(fmt, c):
    return {"keras_csv": "epoch (0-based)", "keras_console": "epoch (1-based)", "lightning": "0-based global step (step column)"}.get(fmt, "global optimizer step (1-based)")


def label_and_write(here, sp, res, secs, partial=False):
    root = os.path.join(here, "runs")
    if not partial and os.path.isdir(root): shutil.rmtree(root)
    os.makedirs(root, exist_ok=True)
    lp = os.path.join(here, "labels.json")
    labels = json.load(open(lp))["runs"] if partial and os.path.exists(lp) else {}
    # stratified split: alternate within each bug kind, and within healthy by family order
    cnt = {}
    order = sorted(range(len(sp)), key=lambda i: (sp[i]["bug"], sp[i]["family"], sp[i]["name"]))
    split = {}
    for k, i in enumerate(order):
        b = sp[i]["bug"]; cnt[b] = cnt.get(b, 0) + 1
        split[i] = "EF"[(cnt[b] + (len(cnt) if b != "none" else 0)) % 2]
    for i, (c, R) in enumerate(zip(sp, res)):
        d = os.path.join(root, c["name"]); os.makedirs(d, exist_ok=True)
        rows = R["rows"]; spe = R["ev"]["spe"]
        out_rows = mask_rows(rows, c["bp"]["mask"]) if c["bug"] == "nan_masked" else rows
        o = dict(c, name=c["name"])
        if "rows1" in R:
            for rk, rr in (("rank0", out_rows), ("rank1", R["rows1"])):
                os.makedirs(f"{d}/{rk}", exist_ok=True); WRITERS[c["format"]](f"{d}/{rk}", rr, R["evals"], spe, o)
        else:
            WRITERS[c["format"]](d, out_rows, R["evals"], spe, o)
        faults, tol, notes = label_run(c, R)
        for f in faults + tol:
            f["onset_step"] = to_axis(c["format"], spe, f["onset_step"])
            if "event_steps" in f: f["event_steps"] = [to_axis(c["format"], spe, s) for s in f["event_steps"]]
        fault = "none" if c["bug"] == "leak" else FAULT_OF[c["bug"]] + ("" if faults or c["bug"] == "none" else " (no visible trace)")
        seen = set(); tol2 = []
        for t in tol:
            if t["symptom"] not in seen and t["symptom"] not in {f["symptom"] for f in faults}:
                seen.add(t["symptom"]); tol2.append({"symptom": t["symptom"], "onset_step": None})
        labels[c["name"]] = {"split": split[i], "family": c["family"], "fault": fault, "format": c["format"] + ("_per_rank" if "rows1" in R else ""),
                             "faults": faults, "tolerated": tol2,
                             "notes": f"{notes}. x-axis unit: {unit(c['format'], c)}; {spe} steps/epoch; run {rows[-1]['step']} steps, opt {c['opt']} lr {c['lr']:.3g} sched {c['sched']} bs {c['bs']}.",
                             "train_seconds": round(R["secs"], 2)}
    json.dump({"_rule": RULE, "runs": dict(sorted(labels.items()))}, open(lp, "w"), indent=1)
    print(f"wrote {len(labels)} runs in {secs:.1f}s")
