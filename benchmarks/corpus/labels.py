"""Labels from the numbers a run's file holds.

A spec names the symptom(s) its injected fault is expected to show (``expect``) and the
secondary symptoms that may come with it (``tolerate``). Here each expected symptom is checked
against the written view (``check``): if the data does not show it, the run is labelled
without it and the note says so (a fault the logs cannot show is not a fault of the labels).
Onsets are read from the same view, on the file's own step axis.
"""

from __future__ import annotations

import math
import statistics as st

import numpy as np

STEP_TIMED = {"tm_csv", "tm_jsonl", "units_csv", "ns_jsonl", "rank_csv", "wandb_csv",
              "wandb_jsonl", "tensorboard"}
"""Formats whose files hold every step's time."""


def _xs(view, key):
    return [x for x, _ in view.get(key, [])]


def _vs(view, key):
    return [v for _, v in view.get(key, [])]


def _fin(vals):
    return [v for v in vals if v is not None and math.isfinite(v)]


def xmap(sp: dict, res: dict):
    """Training step (0-based) -> the step the file shows for it."""
    f = sp["format"]
    spe = res["steps_per_epoch"]
    every = sp.get("log_every", 5 if f in ("hf", "print_log") else 10)
    if f in ("keras_csv", "keras_json"):
        return lambda s: s // spe
    if f in ("hf", "fairseq", "print_log"):
        return lambda s: math.ceil((s + 1) / every) * every
    if f == "lightning":
        return lambda s: math.ceil((s + 1) / every) * every - 1
    return lambda s: s


def smooth(vals, k=5):
    a = np.asarray(vals, float)
    if len(a) < k:
        return a
    out = np.convolve(a, np.ones(k) / k, mode="valid")
    return np.concatenate([np.full(k - 1, out[0]), out])


# ----------------------------------------------------------------------------- onsets
def onset_first_nonfinite(view, key="loss"):
    for x, v in view.get(key, []):
        if v is None or not math.isfinite(v):
            return x
    return None


def _divergence(view):
    """(start, blow) indices into view['loss'] or None. The loss diverged when its smoothed
    value ends well above (3x) its best and stays there, or turns non-finite after a finite
    start. ``start`` is where the climb begins (the best smoothed loss before the blow-up),
    ``blow`` the first point above 3x that best (or the first non-finite one)."""
    pts = view["loss"]
    vals = [v if (v is not None and math.isfinite(v)) else math.nan for _, v in pts]
    n = len(vals)
    first_bad = next((i for i, v in enumerate(vals) if math.isnan(v)), None)
    fin = vals[:first_bad] if first_bad is not None else vals
    if len(fin) < 2 and first_bad is None:
        return None
    sm = smooth(fin, 5) if len(fin) >= 5 else np.asarray(fin, float)
    if first_bad is None:
        # diverged: the end of the run is back at least half-way from its best to where it
        # started, or above 3x where it started
        i_min = int(np.argmin(sm))
        mn, first = sm[i_min], float(np.mean(fin[:3]))
        tail = float(np.mean(sm[-max(3, n // 10):]))
        level = min(mn + 0.5 * (first - mn), 3 * first) if first > mn else 3 * first
        chance = view.get("_chance")
        if chance and tail > 3 * chance:
            # a classifier ending far above chance level (ln C) has diverged, even when its
            # first logged loss was already the blown-up one
            blow = next(i for i in range(n) if fin[i] > 3 * chance)
        elif not (tail > level and tail > 1.5 * mn and i_min < n - max(3, n // 10)):
            return None
        else:
            blow = next(i for i in range(i_min, n) if sm[i] > level)
            blow = next((i for i in range(i_min, blow + 1) if fin[i] > level), blow)
    else:
        blow = first_bad
    start = int(np.argmin(sm[:max(1, blow)])) if blow > 0 else 0
    return start, blow


def onset_divergence(view):
    r = _divergence(view)
    if r is None:
        return None, None
    xs = [x for x, _ in view["loss"]]
    return xs[r[0]], (xs[r[0]], xs[r[1]])


def onset_overfit(view):
    pts = [(x, v) for x, v in view.get("val_loss", []) if math.isfinite(v)]
    if len(pts) < 4:
        return None, None
    raw = [v for _, v in pts]
    i_raw = int(np.argmin(raw))
    i_sm = int(np.argmin(smooth(raw, 3)))
    lo, hi = min(i_raw, i_sm), max(i_raw, i_sm)
    return pts[i_raw][0], (pts[lo][0], pts[hi][0])


def onset_lr_collapse(view):
    pts = view.get("lr", [])
    if not pts:
        return None, None
    top = max(v for _, v in pts)
    for x, v in pts:
        if v < 0.01 * top:
            return x, (pts[0][0], x)
    return None, None


# ----------------------------------------------------------------------------- checks
def check(sym: str, sp, res, view) -> tuple[bool, str]:
    """Whether the data shows ``sym``; the string is the evidence (or its absence)."""
    loss = _vs(view, "loss")
    fl = _fin(loss)
    gn = _fin(_vs(view, "grad_norm"))
    n = len(loss)
    if sym in ("nonfinite_loss",):
        x = onset_first_nonfinite(view) if onset_first_nonfinite(view) is not None else \
            onset_first_nonfinite(view, "val_loss")
        return x is not None, f"first non-finite loss at {x}"
    if sym == "nan_masked_in_logs":
        raw = [r["loss"] for r in res["steps"]]
        bad = sum(not math.isfinite(v) for v in raw)
        return bad > 0 and all(math.isfinite(v) for v in loss), \
            f"{bad} non-finite losses in training, none in the file"
    if sym == "divergence":
        x, rng = onset_divergence(view)
        return x is not None, f"climb from {x}, blow-up range {rng}"
    if sym == "flat_loss":
        head = st.mean(fl[: max(1, n // 20)])
        tail = st.mean(fl[-max(1, n // 5):])
        chance = view.get("_chance")
        at_chance = chance is not None and tail >= 0.9 * chance
        return tail > 0.85 * head or at_chance, \
            f"first {head:.4g}, last-fifth mean {tail:.4g}" + \
            (f", ln(C) = {chance:.4g}" if chance else "")
    if sym == "plateau":
        # the loss came down, then stopped: the second half's fitted change is < 5% of its
        # level (a still-falling loss is not a plateau)
        half = np.asarray(fl[n // 2:], float)
        slope = np.polyfit(np.arange(len(half)), half, 1)[0] if len(half) > 2 else 0.0
        change = abs(slope) * len(half) / max(1e-12, float(np.mean(half)))
        dropped = np.mean(fl[: max(1, n // 20)]) > 1.15 * np.mean(half)
        return bool(change < 0.05 and dropped), \
            f"second half {half.min():.4g}..{half.max():.4g}, fitted change {change:.1%} " \
            f"of its level"
    if sym == "oscillation":
        half = np.asarray(fl[n // 2:])
        p10, p50, p90 = np.percentile(half, [10, 50, 90])
        q3 = np.mean(fl[n // 2: 3 * n // 4])
        q4 = np.mean(fl[3 * n // 4:])
        r = (p90 - p10) / max(1e-12, p50)
        return bool(r > 0.35 and q4 > 0.7 * q3), \
            f"second half p10..p90 {p10:.3g}..{p90:.3g} (x{r:.2f} of median {p50:.3g}), " \
            f"last quarter {q4:.3g} vs third {q3:.3g}"
    if sym == "overfitting":
        x, _ = onset_overfit(view)
        vals = _fin(_vs(view, "val_loss"))
        ok = x is not None and vals[-1] > 1.15 * min(vals)
        return ok, f"val min {min(vals):.4g} at {x}, last {vals[-1]:.4g}"
    if sym == "loss_spike":
        raw = [r["loss"] for r in res["steps"]]
        med = st.median(raw)
        ev = sp.get("spike_steps", [])
        ratios = [raw[s] / max(1e-30, st.median(raw[max(0, s - 10):s])) for s in ev]
        return all(r > 2 for r in ratios) and len(ev) > 0, \
            f"spike/median-before ratios {[round(r, 1) for r in ratios]} (median {med:.3g})"
    if sym == "exploding_gradients":
        return bool(gn) and st.median(gn) > 100, f"median grad norm {st.median(gn):.3g}"
    if sym == "vanishing_gradients":
        first = [r["layer/body.0/grad_norm"] for r in res["steps"]
                 if "layer/body.0/grad_norm" in r]
        if first:
            return st.median(first) < 1e-4, \
                f"first layer's median grad norm {st.median(first):.3g} (total {st.median(gn):.3g})"
        return bool(gn) and st.median(gn) < 1e-3, f"median grad norm {st.median(gn):.3g}"
    if sym == "lr_schedule_anomaly":
        lr = _vs(view, "lr")
        return True, f"lr {lr[0]:.3g} -> max {max(lr):.3g} -> last {lr[-1]:.3g}"
    if sym == "input_bound":
        r = st.median(s["data_time_s"] / s["step_time_s"] for s in res["steps"])
        return r > 0.5, f"median data share {r:.2f}"
    if sym == "step_time_outliers":
        t = [s["step_time_s"] for s in res["steps"]]
        med = st.median(t)
        ev = sp.get("stall_steps", [])
        ratios = [t[s] / med for s in ev]
        return all(r > 8 for r in ratios), f"stall/median {min(ratios):.0f}-{max(ratios):.0f}x"
    if sym in ("straggler", "throughput_regression"):
        at = sp.get("straggle_at", len(res["steps"]) // 2)
        key = "compute_time_s" if sym == "straggler" else "step_time_s"
        rows = res["ranks"][1] if sym == "straggler" else res["steps"]
        a = st.median(r[key] for r in rows[:at])
        b = st.median(r[key] for r in rows[at:])
        return b > 1.8 * a, f"median {key} {a * 1e3:.2f} ms -> {b * 1e3:.2f} ms"
    if sym == "memory_growth":
        rss = [r["rss_mb"] for r in res["steps"]]
        return rss[-1] - rss[0] > 50, f"rss {rss[0]:.0f} -> {rss[-1]:.0f} MB"
    if sym == "loss_scale_collapse":
        sc = [r["loss_scale"] for r in res["steps"] if "loss_scale" in r]
        return bool(sc) and sc[-1] < 1e-3 * max(sc), \
            f"loss scale {max(sc):.3g} at most, {sc[-1]:.3g} at the end"
    if sym == "dead_units":
        d = [r["layer/body.1/dead_frac"] for r in res["steps"] if "layer/body.1/dead_frac" in r]
        return bool(d) and st.median(d) > 0.5, \
            f"median dead_frac of layer body.1 {st.median(d) if d else float('nan'):.2f}"
    if sym == "resume_discontinuity":
        xs = _xs(view, "loss")
        back = sum(1 for a, b in zip(xs, xs[1:], strict=False) if b <= a)
        return back > 0, f"step goes back {back} time(s)"
    raise ValueError(sym)


def onset_for(sym: str, sp, res, view) -> dict:
    xm = xmap(sp, res)
    if sym == "nonfinite_loss":
        x = onset_first_nonfinite(view)
        if x is None:
            x = onset_first_nonfinite(view, "val_loss")
        return {"symptom": sym, "onset_step": x}
    if sym == "nan_masked_in_logs":
        s = next(i for i, r in enumerate(res["steps"]) if not math.isfinite(r["loss"]))
        return {"symptom": sym, "onset_step": xm(s)}
    if sym == "divergence":
        x, rng = onset_divergence(view)
        return {"symptom": sym, "onset_step": x, "onset_range": list(rng)}
    if sym == "overfitting":
        x, rng = onset_overfit(view)
        return {"symptom": sym, "onset_step": x, "onset_range": list(rng)}
    if sym == "loss_spike":
        ev = sorted({xm(s) for s in sp["spike_steps"]})
        return {"symptom": sym, "onset_step": ev[0], "event_steps": ev}
    if sym == "step_time_outliers":
        ev = sorted({xm(s) for s in sp["stall_steps"]})
        return {"symptom": sym, "onset_step": ev[0], "event_steps": ev}
    if sym in ("straggler", "throughput_regression"):
        return {"symptom": sym, "onset_step": xm(sp.get("straggle_at", len(res["steps"]) // 2))}
    if sym == "loss_scale_collapse":
        sc = [r.get("loss_scale") for r in res["steps"]]
        i = next(i for i in range(1, len(sc)) if sc[i] is not None and sc[i] < sc[i - 1])
        return {"symptom": sym, "onset_step": xm(i)}
    if sym == "lr_schedule_anomaly" and sp["fault"] == "sched_per_batch":
        x, rng = onset_lr_collapse(view)
        return {"symptom": sym, "onset_step": x, "onset_range": list(rng)}
    # a condition of the whole run (from step 0): no single onset
    return {"symptom": sym, "onset_step": None}


def _train_still_falls(view) -> bool:
    """The training loss at the end is below where it was at the best validation point."""
    x_best, _ = onset_overfit(view)
    pts = [(x, v) for x, v in view["loss"] if math.isfinite(v)]
    if x_best is None or not pts:
        return False
    near = [v for x, v in pts if x <= x_best][-5:] or [pts[0][1]]
    tail = [v for _, v in pts[-max(1, len(pts) // 10):]]
    return st.mean(tail) < st.mean(near)


def _appended_part_symptoms(res: dict, view: dict) -> list[tuple[str, str]]:
    """flat_loss / overfitting as one part of an appended log shows them (the measured
    numbers, part by part): flat when its last fifth is > 85% of its first twentieth or at
    >= 90% of ln C; overfitting when its last evaluation is > 1.2x its lowest, which is not
    its last, while its training loss at the end is below where it was at that lowest."""
    out: list[tuple[str, str]] = []
    chance = view.get("_chance")
    parts = sorted({r.get("part", 0) for r in res["steps"]})
    for p in parts:
        loss = [r["loss"] for r in res["steps"] if r.get("part", 0) == p
                and math.isfinite(r["loss"])]
        if len(loss) >= 10:
            head = st.mean(loss[: max(1, len(loss) // 20)])
            tail = st.mean(loss[-max(1, len(loss) // 5):])
            if tail > 0.85 * head or (chance is not None and tail >= 0.9 * chance):
                out.append(("flat_loss", f"part {p + 1} of the appended runs stayed flat "
                                         f"(first {head:.4g}, last fifth {tail:.4g})"))
        ev = [e for e in res["evals"] if e.get("part", 0) == p
              and e.get("val_loss") is not None and math.isfinite(e["val_loss"])]
        vals = [e["val_loss"] for e in ev]
        if len(vals) >= 3:
            i = vals.index(min(vals))
            near = [r["loss"] for r in res["steps"] if r.get("part", 0) == p
                    and r["step"] <= ev[i]["step"] and math.isfinite(r["loss"])][-5:]
            end = loss[-max(1, len(loss) // 10):] if loss else []
            if i < len(vals) - 1 and vals[-1] > 1.2 * vals[i] and near and end and \
                    st.mean(end) < st.mean(near):
                out.append(("overfitting", f"part {p + 1} of the appended runs overfits (val "
                                           f"{vals[i]:.4g} at its best, {vals[-1]:.4g} at its "
                                           f"end)"))
    return out


def label_run(sp: dict, res: dict, view: dict) -> dict:
    faults, notes = [], [sp.get("story", "")]
    if res["kind"] == "ce":   # ln C, in bits where the log reports base-2 losses (fairseq)
        view["_chance"] = math.log(res["n_classes"]) / (math.log(2) if sp["format"] == "fairseq"
                                                         else 1.0)
    extra_tol = []
    for entry in sp.get("expect", []):
        # "a|b": the first alternative the data shows is the label, the others are tolerated
        alts = entry.split("|")
        chosen = None
        for sym in alts:
            ok, ev = check(sym, sp, res, view)
            if ok:
                chosen = sym
                faults.append(onset_for(sym, sp, res, view))
                notes.append(f"{sym}: {ev}.")
                break
            notes.append(f"not {sym} ({ev}).")
        if chosen is None:
            notes.append(f"NOT LABELLED {entry}: the data does not show it.")
        extra_tol += [a for a in alts if a != chosen]
    tolerated = [{"symptom": s, "onset_step": None}
                 for s in dict.fromkeys(list(sp.get("tolerate", [])) + extra_tol)
                 if not any(f["symptom"] == s for f in faults)]
    # a validation loss that turns up while the training loss falls is overfitting, even where
    # no fault was injected (a healthy run trained past its best): tolerated where it is seen
    vals = _fin(_vs(view, "val_loss"))
    blown = any(f["symptom"] in ("divergence", "nonfinite_loss") for f in faults)
    # (the rise: the last evaluation > 1.2x the lowest, or the median of the last quarter of
    # the evaluations >= 1.1x it - a 10% worse validation loss held to the end)
    q = max(2, len(vals) // 4)
    held = len(vals) >= 8 and vals.index(min(vals)) < len(vals) - q and \
        st.median(vals[-q:]) >= 1.1 * min(vals)
    if len(vals) >= 4 and not blown and \
            not any(f["symptom"] == "overfitting" for f in faults) and \
            (vals[-1] > 1.2 * min(vals) or held) and vals.index(min(vals)) < len(vals) - 1 and \
            "overfitting" not in sp.get("tolerate", []) and _train_still_falls(view):
        x, rng = onset_overfit(view)
        tolerated.append({"symptom": "overfitting", "onset_step": x, "onset_range": list(rng)})
        notes.append(f"val loss {min(vals):.4g} at its best, {vals[-1]:.4g} at the end while "
                     f"the training loss kept falling (mild overfitting): tolerated.")
    # timing seen on a shared 2-core machine: an outlier step or a slowdown the fault did not
    # inject is real data but not the fault; it is tolerated where it happened
    if sp["format"] in STEP_TIMED:
        t = [r["step_time_s"] for r in res["steps"]]
        xm = xmap(sp, res)
        injected = set(sp.get("stall_steps", []))
        # a run slowed down on purpose halfway is judged against each half's own median
        cut = sp.get("straggle_at", len(t) // 2) \
            if sp["fault"] in ("straggler", "throughput_regression") else len(t)
        meds = [st.median(t[:cut])] * cut + [st.median(t[cut:]) if t[cut:] else 0] * (len(t) - cut)
        slow = [xm(i) for i, v in enumerate(t) if v > 5 * meds[i] and i not in injected]
        if slow and not any(f["symptom"] == "step_time_outliers" for f in faults + tolerated):
            tolerated.append({"symptom": "step_time_outliers", "onset_step": None})
        elif slow:
            tolerated.append({"symptom": "step_time_outliers", "onset_step": slow[0],
                              "onset_range": [slow[0], slow[-1]]})
        if slow:
            notes.append(f"{len(slow)} step(s) over 5x the median step time that the fault did "
                         f"not inject (warm-up, machine load: at {slow[:8]}): tolerated.")
        # a slowdown of >= 30% held over a fifth of the run (any fifth after the first),
        # against the first fifth's median step time
        w = max(3, len(t) // 5)
        a = st.median(t[:w])
        later = [st.median(t[i:i + w]) for i in range(w, len(t) - w + 1, max(1, w // 2))]
        b = max(later, default=0.0)
        k = len(t) // 3   # ... or the last third 1.5x slower than the first third
        if st.median(t[-k:]) > 1.5 * st.median(t[:k]):
            a, b = st.median(t[:k]), st.median(t[-k:])
        # ... or, from some step to the end (>= 5% of the run), >= 30% slower than before it
        tail_min = max(5, len(t) // 20)
        for cut in range(max(3, len(t) // 10), len(t) - tail_min + 1, max(1, len(t) // 100)):
            before_c, after_c = st.median(t[:cut]), st.median(t[cut:])
            if after_c > 1.3 * before_c and after_c / before_c > b / max(a, 1e-12):
                a, b = before_c, after_c
        if b > 1.3 * a and not any(f["symptom"] in ("throughput_regression", "straggler")
                                   for f in faults) and \
                "throughput_regression" not in sp.get("tolerate", []):
            tolerated.append({"symptom": "throughput_regression", "onset_step": None})
            notes.append(f"median step time {a * 1e3:.2f} ms in the first fifth, "
                         f"{b * 1e3:.2f} ms in the slowest later fifth (machine load, not "
                         f"injected): tolerated.")
    # runs appended into one file: each is a training of its own, and what one of them shows
    # (a run that never left chance, a run that overfits) is real data the fault (the
    # appending) did not cause: tolerated where a part shows it
    if sp.get("appended"):
        for sym, why in _appended_part_symptoms(res, view):
            if not any(f["symptom"] == sym for f in faults + tolerated):
                tolerated.append({"symptom": sym, "onset_step": None})
                notes.append(f"{why}: tolerated.")
    # a loss that turned NaN in a format whose logger filters NaN (HF's
    # logging_nan_inf_filter) shows nan_masked_in_logs whatever the fault was: tolerated
    seen = {f["symptom"] for f in faults + tolerated}
    if "nan_masked_in_logs" not in seen and check("nan_masked_in_logs", sp, res, view)[0]:
        tolerated.append({"symptom": "nan_masked_in_logs", "onset_step": None})
        notes.append("non-finite losses in training that the logger filtered out: "
                     "nan_masked_in_logs tolerated.")
    return {"faults": faults, "tolerated": tolerated, "notes": " ".join(n for n in notes if n),
            "family": sp["family"], "fault": sp["fault"], "format": sp["format"],
            "optimizer": sp.get("opt", "adam"), "schedule": sp.get("sched", "const"),
            "seed": sp["seed"]}


def summary(sp, res, view, label, train_s) -> str:
    loss = [r["loss"] for r in res["steps"]]
    fl = _fin(loss)
    gn = _fin([r["grad_norm"] for r in res["steps"]])
    lr = [r["lr"] for r in res["steps"]]
    vl = _fin([e["val_loss"] for e in res["evals"]])
    t = [r["step_time_s"] for r in res["steps"]]
    nf = len(loss) - len(fl)
    fs = ",".join(f"{f['symptom']}@{f.get('onset_step')}" for f in label["faults"]) or "healthy"
    warn = " !!" if "NOT LABELLED" in label["notes"] else ""
    return (f"{sp['name']:38s} {train_s:4.1f}s loss {loss[0]:.3g}->{loss[-1]:.3g} "
            f"min {min(fl) if fl else float('nan'):.3g}{f' nonfinite {nf}' if nf else ''} | "
            f"gn {min(gn) if gn else 0:.2g}..{max(gn) if gn else 0:.2g} | lr {min(lr):.2g}.."
            f"{max(lr):.2g} | val {vl[0] if vl else 0:.3g}/{min(vl) if vl else 0:.3g}/"
            f"{vl[-1] if vl else 0:.3g} | st {st.median(t) * 1e3:.1f}ms max "
            f"{max(t) * 1e3:.0f} | {fs}{warn}")
