"""Symptom locators run on the series as logged, and the rule from each fault kind to its labels."""
import math
import statistics as S

import numpy as np


def fin(pts):
    return [(x, v) for x, v in pts if v is not None and math.isfinite(v)]


def rmed(vs, k=5):
    return [float(np.median(vs[max(0, i - k + 1):i + 1])) for i in range(len(vs))]


def nonfinite(loss):
    for x, v in loss:
        if v is None or not math.isfinite(v):
            return {"onset_step": x}
    return None


def masked(log):
    return {"onset_step": log["masked"][0]} if log["masked"] else None


def shifted(pts, floor):
    return [(x, v - floor) for x, v in fin(pts)] if floor is not None else fin(pts)


def spikes(pts, floor, k=3.0):
    p = shifted(pts, floor)
    ev = []
    for i in range(4, len(p)):
        ref = float(np.median([v for _, v in p[max(0, i - 8):i]]))
        if ref > 0 and p[i][1] > k * ref:
            ev.append(p[i][0])
    return {"onset_step": ev[0], "event_steps": ev} if ev else None


def divergence(pts, floor, ratio=1.5):
    p = shifted(pts, floor)
    if len(p) < 8:
        return None
    xs = [x for x, _ in p]
    rm = rmed([v for _, v in p])
    i0 = int(np.argmin(rm))
    m = rm[i0]
    if m <= 0:
        m = 1e-12
    tail = rm[-max(2, len(rm) // 10):]
    if min(tail) > ratio * m and rm[-1] > ratio * m and (rm[-1] - m) > 1e-3:
        for j in range(i0, len(rm)):
            if p[j][1] > ratio * m:
                return {"onset_step": xs[j]}
    return None


def flat(pts, floor, ratio=0.85):
    p = shifted(pts, floor)
    if len(p) < 10:
        return None
    v = [q for _, q in p]
    a = float(np.median(v[:max(1, len(v) // 20)]))
    b = float(np.median(v[-max(2, len(v) // 5):]))
    return {"onset_step": None} if a > 0 and b > ratio * a else None


def final_level(pts, floor):
    p = shifted(pts, floor)
    v = [q for _, q in p]
    return float(np.median(v[-max(2, len(v) // 10):])) if v else float("nan")


def plateau(pts, floor, twin, ratio=1.5):
    if twin is None:
        return None
    a, b = final_level(pts, floor), final_level(twin, floor)
    return {"onset_step": None, "_ratio": a / b if b > 0 else float("inf")} if b > 0 and a > ratio * b else None


def overfitting(val, loss, rise=0.10, fin_ratio=1.2):
    v = fin(val)
    if len(v) < 4:
        return None
    vs = [q for _, q in v]
    i0 = int(np.argmin(vs))
    m = vs[i0]
    if m <= 0:
        return None
    later = [x for x, q in v[i0 + 1:] if q > (1 + rise) * m]
    l = fin(loss)
    falling = len(l) > 4 and np.median([q for _, q in l[-max(2, len(l) // 5):]]) < np.median([q for _, q in l[:max(2, len(l) // 5)]])
    if vs[-1] > fin_ratio * m and len(later) >= 2 and falling:
        return {"onset_step": v[i0][0], "onset_range": [v[i0][0], later[0]]}
    # a train/val gap of more than 20x that keeps widening: val creeps up while train goes to ~0
    lt = float(np.median([q for _, q in l[-max(2, len(l) // 5):]])) if len(l) > 4 else float("inf")
    up = [x for x, q in v[i0 + 1:] if q > 1.05 * m]
    if falling and vs[-1] > 1.08 * m and vs[-1] > 20 * lt and len(up) >= 0.8 * len(v[i0 + 1:]) and len(up) >= 3:
        return {"onset_step": v[i0][0], "onset_range": [v[i0][0], up[0]], "_gap": vs[-1] / lt}
    return None


def exploding(gn, k=10.0):
    if not gn:
        return None
    f = [q for _, q in fin(gn)]
    early = float(np.median(f[:max(3, len(f) // 10)])) if f else 0
    for x, q in gn:
        if q is None or not math.isfinite(q) or q > 1e3 or (early > 0 and q > k * early):
            return {"onset_step": x if x != gn[0][0] else None}
    return None


def vanishing(log):
    a, b = dict(fin(log["gnf"])), dict(fin(log["gnl"]))
    xs = [x for x in a if x in b and b[x] > 0]
    if len(xs) >= 5:
        r = float(np.median([a[x] / b[x] for x in xs]))
        if r < 1e-2:
            return {"onset_step": None, "_ratio": r}
    return None


def dead(log):
    d = fin(log["dead"])
    for i, (x, q) in enumerate(d):
        if q > 0.5 and all(v > 0.5 for _, v in d[i:]):
            return {"onset_step": None if i == 0 else x}
    return None


def input_bound(log, ratio=0.5):
    st, dt = dict(fin(log["st"])), dict(fin(log["dt"]))
    xs = [x for x in st if x in dt and st[x] > 0]
    r = [(x, dt[x] / st[x]) for x in xs]
    if not r:
        return None
    hi = [x for x, q in r if q > ratio]
    if len(hi) < 0.3 * len(r):
        return None
    for i, (x, q) in enumerate(r):
        if q > ratio and sum(1 for _, v in r[i:] if v > ratio) >= 0.9 * (len(r) - i):
            return {"onset_step": None if i == 0 else x}
    return None


def stalls(log, k=4.0):
    s = fin(log["st"])
    ev = [s[i][0] for i in range(4, len(s)) if s[i][1] > k * float(np.median([q for _, q in s[max(0, i - 8):i]]))]
    return {"onset_step": ev[0], "event_steps": ev} if len(ev) >= 2 else None


def creep(log, ratio=1.5):
    s = [q for _, q in fin(log["st"])]
    if len(s) < 20:
        return None
    n = max(3, len(s) // 10)
    a, b = float(np.median(s[:n])), float(np.median(s[-n:]))
    return {"onset_step": None, "_ratio": b / a} if b > ratio * a else None


def memory(log, mb=50.0):
    r = [q for _, q in fin(log["rss"])]
    if len(r) < 10:
        return None
    ups = sum(1 for a, b in zip(r, r[1:]) if b >= a)
    if r[-1] - r[0] > mb and ups > 0.6 * (len(r) - 1):
        return {"onset_step": None, "_growth": r[-1] - r[0]}
    return None


def straggler(log, ratio=1.5):
    a, b = dict(fin(log.get("c0", []))), dict(fin(log.get("c1", [])))
    xs = [x for x in a if x in b and a[x] > 0]
    r = [(x, b[x] / a[x]) for x in xs]
    for i, (x, q) in enumerate(r):
        if q > ratio and sum(1 for _, v in r[i:] if v > ratio) >= 0.9 * (len(r) - i):
            return {"onset_step": None if i == 0 else x}
    return None


def scale_collapse(log):
    s = fin(log["scale"])
    if not s:
        return None
    v = [q for _, q in s]
    if min(v) < max(v) / 1000 and v[-1] < 1:
        i = len(v) - 1
        while i > 0 and v[i - 1] > v[i]:
            i -= 1
        return {"onset_step": s[min(i + 1, len(s) - 1)][0]}
    return None


def resume(loss):
    for (x0, _), (x1, _) in zip(loss, loss[1:]):
        if x1 <= x0:
            return {"onset_step": x1, "event_steps": [x0]}
    return None


def lr_anomaly(lr):
    v = [q for _, q in fin(lr)]
    if len(v) < 8:
        return None
    mx = max(v)
    # a schedule that reaches ~0 and then climbs back smoothly (not a one-step restart jump)
    i0 = int(np.argmin(v))
    if v[i0] < 0.05 * mx and i0 < len(v) - 3 and i0 > 0 and max(v[:i0]) > 0.5 * mx:
        after = v[i0:]
        ups = sum(1 for a, b in zip(after, after[1:]) if b > a)
        big_jump = max(b - a for a, b in zip(after, after[1:])) > 0.5 * mx
        if after[-1] > 0.5 * mx and ups >= 3 and not big_jump:
            return {"onset_step": lr[[q for _, q in lr].index(v[i0])][0]}
    # still rising at the end, well past where a warm-up normally stops
    half = v[len(v) // 2:]
    if all(b >= a for a, b in zip(half, half[1:])) and half[-1] > 1.5 * half[0]:
        return {"onset_step": None}
    return None


def accum(log, k=4):
    l, v = fin(log["loss"]), fin(log["val"])
    if len(v) < 3:
        return None
    ld = dict(l)
    r = []
    for x, q in v:
        near = [ld[y] for y in ld if abs(y - x) <= 2 * max(1, (l[1][0] - l[0][0]) if len(l) > 1 else 1)]
        if near and q > 0:
            r.append((x, near[-1] / q))
    if not r:
        return None
    rs = [q for _, q in r]
    if np.median(rs) > 2.0:
        return {"onset_step": None}
    for i in range(1, len(r)):
        if np.median(rs[:i]) < 1.5 and np.median(rs[i:]) > 2.0 and len(rs[i:]) >= 2:
            return {"onset_step": r[i][0]}
    return None


def oscillation(pts, floor):
    p = shifted(pts, floor)
    v = rmed([q for _, q in p], 3)
    if len(v) < 20:
        return None
    swings, lo, lo_i, first = 0, v[0], 0, None
    state = "down"
    hi = v[0]
    for i, q in enumerate(v):
        if state == "down":
            if q < lo:
                lo, lo_i = q, i
            elif lo > 0 and q > 2.0 * lo:
                state, hi = "up", q
                swings += 1
                first = first if first is not None else p[lo_i][0]
        else:
            if q > hi:
                hi = q
            elif q < 0.5 * hi:
                state, lo, lo_i = "down", q, i
    if swings >= 3:
        return {"onset_step": first}
    # slow swings: at least 2 climbs of >=1.5x lasting >= 3 logged points, each followed by a fall of >=3 points
    raw = [q for _, q in p]
    climbs, i, first = 0, 0, None
    while i < len(raw) - 1:
        j = i
        while j + 1 < len(raw) and raw[j + 1] > raw[j]:
            j += 1
        if j - i >= 3 and raw[i] > 0 and raw[j] > 1.5 * raw[i]:
            k = j
            while k + 1 < len(raw) and raw[k + 1] < raw[k]:
                k += 1
            if k - j >= 3 and raw[k] < 0.67 * raw[j]:
                climbs += 1
                first = p[i][0] if first is None else first
            i = max(k, j + 1)
        else:
            i = j + 1 if j > i else i + 1
    return {"onset_step": first} if climbs >= 2 else None


def measure(log, floor, twin=None, loose=False, kind="sup", k_acc=4):
    """All locators. loose=True applies the looser thresholds used for `tolerated`."""
    L = log["loss"] if kind != "rl" else log["value_loss"]
    out = {}
    f = nonfinite(log["loss"]);  f and out.setdefault("nonfinite_loss", f)
    f = masked(log);  f and out.setdefault("nan_masked_in_logs", f)
    f = spikes(L, floor, 2.5 if loose else 3.0);  f and out.setdefault("loss_spike", f)
    f = divergence(L, floor, 1.3 if loose else 1.5);  f and out.setdefault("divergence", f)
    if kind == "sup":
        f = flat(L, floor, 0.7 if loose else 0.85);  f and out.setdefault("flat_loss", f)
        f = overfitting(log["val"], L, 0.10, 1.1 if loose else 1.2);  f and out.setdefault("overfitting", f)
        f = accum(log, k_acc);  f and out.setdefault("grad_accum_misnormalization", f)
    f = plateau(L, floor, twin, 1.25 if loose else 1.5);  f and out.setdefault("plateau", f)
    f = exploding(log["gn"], 5.0 if loose else 10.0);  f and out.setdefault("exploding_gradients", f)
    f = vanishing(log);  f and out.setdefault("vanishing_gradients", f)
    f = dead(log);  f and out.setdefault("dead_units", f)
    f = input_bound(log);  f and out.setdefault("input_bound", f)
    f = stalls(log, 3.0 if loose else 4.0);  f and out.setdefault("step_time_outliers", f)
    f = creep(log, 1.25 if loose else 1.5);  f and out.setdefault("throughput_regression", f)
    f = memory(log, 20.0 if loose else 50.0);  f and out.setdefault("memory_growth", f)
    f = straggler(log);  f and out.setdefault("straggler", f)
    f = scale_collapse(log);  f and out.setdefault("loss_scale_collapse", f)
    f = resume(log["loss"]);  f and out.setdefault("resume_discontinuity", f)
    f = lr_anomaly(log["lr"]);  f and out.setdefault("lr_schedule_anomaly", f)
    f = oscillation(L, floor);  f and out.setdefault("oscillation", f)
    return out


# fault kind -> (symptoms it should show, consequences that are defensible readings)
EXPECT = {
    "clip_zero": (["flat_loss"], ["plateau", "vanishing_gradients"]),
    "sched_double_step": (["lr_schedule_anomaly"], ["loss_spike", "divergence", "oscillation"]),
    "wrong_param_group": (["plateau", "flat_loss"], ["vanishing_gradients"]),
    "adam_eps_1": (["plateau", "flat_loss"], []),
    "sgd_mom_999": (["oscillation", "divergence", "nonfinite_loss", "loss_spike"], ["exploding_gradients", "plateau", "flat_loss"]),
    "warmup_overshoot": (["lr_schedule_anomaly"], ["divergence", "loss_spike", "nonfinite_loss", "exploding_gradients", "oscillation"]),
    "label_flip_midrun": (["divergence", "loss_spike"], ["plateau", "overfitting"]),
    "label_offby1": (["overfitting"], ["divergence"]),
    "mask_inverted": (["overfitting"], ["divergence"]),
    "gan_d_overpower": (["divergence"], ["loss_spike", "exploding_gradients"]),
    "reward_scale_explode": (["divergence", "loss_spike"], ["exploding_gradients", "oscillation"]),
    "loader_repeat_subset": (["overfitting"], ["oscillation"]),
    "eval_on_train": ([], []),
    "stale_reload": (["loss_spike"], ["divergence", "resume_discontinuity"]),
    "tie_broken": ([], []),
    "infonce_temp_tiny": (["plateau", "exploding_gradients", "oscillation"], ["loss_spike", "flat_loss"]),
    "lr_too_high": (["divergence", "nonfinite_loss", "exploding_gradients"], [ "loss_spike", "oscillation", "nonfinite_grad"]),
    "lr_too_low": (["flat_loss", "plateau"], []),
    "nan_midrun": (["nonfinite_loss"], ["nonfinite_grad", "exploding_gradients"]),
    "nan_masked": (["nan_masked_in_logs"], ["nonfinite_loss", "nonfinite_grad", "flat_loss", "exploding_gradients"]),
    "overfit_tiny": (["overfitting"], []),
    "corrupt_batch": (["loss_spike"], ["exploding_gradients"]),
    "grad_explode": (["exploding_gradients"], ["divergence", "nonfinite_loss", "loss_spike", "nonfinite_grad", "oscillation"]),
    "vanishing_sigmoid": (["vanishing_gradients"], ["flat_loss", "plateau", "saturated_activations"]),
    "dead_relu": (["dead_units"], ["flat_loss", "plateau", "vanishing_gradients"]),
    "loss_scale_collapse": (["loss_scale_collapse"], ["nonfinite_grad", "flat_loss", "plateau"]),
    "slow_loader": (["input_bound"], ["throughput_regression", "step_time_outliers"]),
    "periodic_stall": (["step_time_outliers"], ["input_bound"]),
    "step_creep": (["throughput_regression"], ["step_time_outliers"]),
    "straggler": (["straggler"], ["throughput_regression"]),
    "mem_leak": (["memory_growth"], ["throughput_regression"]),
    "resume_replay": (["resume_discontinuity"], ["loss_spike", "step_time_outliers"]),
    "grad_accum_unnorm": (["grad_accum_misnormalization"], ["loss_spike"]),
    "sigmoid_bce": (["plateau", "flat_loss"], []),
}
FALLBACK = ["divergence", "flat_loss", "plateau", "overfitting"]


def clean(f):
    return {k: v for k, v in f.items() if not k.startswith("_")}


def label(kind, log, floor, twin=None, fam_kind="sup"):
    strict = measure(log, floor, twin, False, fam_kind)
    loose = measure(log, floor, twin, True, fam_kind)
    faults = []
    if kind != "none":
        prim, cons = EXPECT[kind]
        for s in prim:
            if s in strict:
                faults.append(dict(symptom=s, **clean(strict[s])))
        if not faults:
            for s in FALLBACK:
                if s in strict:
                    faults.append(dict(symptom=s, **clean(strict[s])))
        for s in ("nonfinite_loss", "nan_masked_in_logs"):
            if s in strict and s not in [f["symptom"] for f in faults]:
                faults.append(dict(symptom=s, **clean(strict[s])))
        if prim == ["nan_masked_in_logs"] or kind == "nan_masked":
            faults = [f for f in faults if f["symptom"] != "nonfinite_loss" or True]
    else:
        cons = []
    have = {f["symptom"] for f in faults}
    tol = []
    prim_rest = [s for s in (EXPECT[kind][0] if kind != 'none' else []) if s not in FALLBACK or kind == 'sgd_mom_999']
    for s in list(cons) + prim_rest + sorted(strict) + sorted(loose):
        if s not in have and s not in [t["symptom"] for t in tol]:
            src = strict.get(s) or loose.get(s) or {"onset_step": None}
            tol.append({"symptom": s, "onset_step": src.get("onset_step")})
    return faults, tol, strict
