"""Labels from the logged numbers.

`scan(S)` measures, on the series exactly as logged, every symptom this corpus
uses (simple, explicit thresholds, written for this corpus only).  `label()`
then decides, per injected fault, which of the measured symptoms are the
fault's own (faults, with onset) and which are consequences to tolerate.  If
the injected fault left no measurable trace, the run is labelled with what
the numbers show (often faults: []) and the notes say so.
"""
from __future__ import annotations

import math

import numpy as np


def fin(x):
    return x is not None and math.isfinite(x)


def med(xs):
    xs = [x for x in xs if fin(x)]
    return float(np.median(xs)) if xs else float("nan")


def rolling_median(v, w=5):
    out = []
    for i in range(len(v)):
        out.append(float(np.median(v[max(0, i - w + 1):i + 1])))
    return np.array(out)


def first_nonfinite(ser):
    for s, v in ser:
        if not fin(v):
            return s
    return None


def finite_prefix(ser):
    out = []
    for s, v in ser:
        if not fin(v):
            break
        out.append((s, v))
    return out


# ----------------------------------------------------------------------------- detectors
def d_spikes(ser, ratio=2.5, z_min=8.0):
    """A point > `ratio` x the median of the previous 10 logged points whose log exceeds
    that median's log by more than 8 x the median |change| of the log-loss over the previous
    30 points -- so heavy-tailed small-batch noise, whose highs recur, does not count --
    and that comes back below 1.5x the median within 10 points."""
    pts = finite_prefix(ser)
    if len(pts) < 12:
        return []
    st = [s for s, _ in pts]
    v = np.array([x for _, x in pts])
    start = float(np.median(v[:3]))
    out = []
    i = 6
    while i < len(v):
        w = v[max(0, i - 30):i]
        base = float(np.median(v[max(0, i - 10):i]))
        if v[i] > ratio * base and v[i] - base > 0.02 * start and base > 0 and np.all(w > 0):
            lw = np.log(w)
            noise = float(np.median(np.abs(np.diff(lw))))  # point-to-point noise, trend-free
            z = (math.log(v[i]) - math.log(base)) / (noise + 1e-3)
            back = any(v[j] < 1.5 * base + 1e-9 for j in range(i + 1, min(len(v), i + 11)))
            # or a transient: the next 5 points are all below 10% of the peak (even if the
            # loss then settles higher than before: lasting damage is judged as divergence)
            nxt = v[i + 1:i + 6]
            back = back or (len(nxt) > 0 and float(nxt.max()) < 0.1 * v[i])
            if z > z_min and back:
                out.append((st[i], float(v[i]), base))
                i += 3
                continue
        i += 1
    return out


def d_divergence(ser):
    """Loss rose from its minimum and stayed up (or blew up)."""
    nf = first_nonfinite(ser)
    pts = finite_prefix(ser)
    if len(pts) < 8:
        return None
    st = [s for s, _ in pts]
    v = np.array([x for _, x in pts])
    sm = rolling_median(v, 5)
    imn = int(np.argmin(sm))
    mn = float(sm[imn])
    start = float(np.median(v[:3]))
    k = max(3, len(v) // 10)
    end = float(np.median(v[-k:]))
    if nf is not None:
        # blew up: divergence if the loss was already climbing before the NaN
        peak = float(np.max(v[imn:]))
        if peak > max(3 * mn, mn + 0.5 * abs(start - mn)) and imn < len(v) - 2:
            thr = mn + 0.2 * (peak - mn)
            on = next(st[j] for j in range(imn, len(v)) if v[j] > thr)
            return dict(onset=on, min=mn, min_step=st[imn], end=float("inf"), nonfinite_at=nf)
        return None
    rise = end - mn
    from_min = end > 1.5 * mn and rise > 0.3 * max(start - mn, 0.0) and rise > 0.1 * start and imn < len(v) - k
    above_start = end > 1.5 * start and imn < len(v) - k  # blew up instead of falling
    if from_min or above_start:
        thr = mn + 0.25 * rise
        on = None
        for j in range(imn, len(v)):
            if np.all(sm[j:] > thr):
                on = st[j]
                break
        return dict(onset=on, min=mn, min_step=st[imn], end=end, start=start)
    return None


def d_flat(ser, frac=0.85):
    pts = finite_prefix(ser)
    if len(pts) < 6:
        return None
    v = np.array([x for _, x in pts])
    n0 = max(1, len(v) // 20)
    start = float(np.median(v[:n0]))
    sm = rolling_median(v, 5)
    best = float(np.min(sm[n0:])) if len(sm) > n0 else start
    end = float(np.median(v[-max(3, len(v) // 10):]))
    if start > 0 and best > frac * start and end > frac * start:
        return dict(start=start, best=best, end=end)
    return None


def d_oscillation(ser):
    """Coherent swings around the trend: residual of a 3-point mean around a wide rolling
    median, relative to how far the loss fell (or to its level when it did not fall), and
    autocorrelated (white batch noise is not)."""
    pts = finite_prefix(ser)
    if len(pts) < 20:
        return None
    v = np.array([x for _, x in pts])
    n = len(v)
    w = max(9, n // 8)
    trend = np.array([np.median(v[max(0, i - w // 2):i + w // 2 + 1]) for i in range(n)])
    sm = np.convolve(v, np.ones(3) / 3, mode="same")
    r = (sm - trend)[int(n * 0.3):-1]
    start = float(np.median(v[:3]))
    scale = max(start - float(trend.min()), 0.2 * abs(start), 1e-12)
    amp = float(np.median(np.abs(r))) / scale
    rr = r - r.mean()
    ac = float(np.dot(rr[1:], rr[:-1]) / max(np.dot(rr, rr), 1e-30))
    return dict(amp=amp, autocorr=ac)


def d_overfit(train, val):
    vp = finite_prefix(val)
    if len(vp) < 4:
        return None
    vs = [s for s, _ in vp]
    vv = np.array([x for _, x in vp])
    imn = int(np.argmin(vv))
    mn = float(vv[imn])
    end = float(np.median(vv[-2:])) if len(vv) >= 3 else float(vv[-1])
    if imn >= len(vv) - 1:
        return None
    tp = finite_prefix(train)
    span = max(1, tp[-1][0] - tp[0][0]) if tp else 1
    t_at = med([x for s, x in tp if abs(s - vs[imn]) <= max(1, span * 0.1)])
    t_end = med([x for s, x in tp if s >= tp[-1][0] - span * 0.2])
    if end > 1.1 * mn and end - mn > 0.03 and fin(t_at) and t_end < 0.9 * t_at:
        return dict(onset=vs[imn], val_min=mn, val_end=end, train_at=t_at, train_end=t_end)
    return None


def d_grad_explode(gn):
    pts = [(s, v) for s, v in gn]
    if len(pts) < 8:
        return None
    early = med([v for _, v in pts[: max(4, len(pts) // 5)]])
    nf = first_nonfinite(pts)
    fv = [v for _, v in pts if fin(v)]
    peak = max(fv) if fv else float("nan")
    if not fin(early) or early <= 0:
        return None
    if (fin(peak) and peak > 10 * early) or nf is not None:
        on = next((s for s, v in pts if (not fin(v)) or v > 5 * early), None)
        return dict(onset=on, early=early, peak=peak, nonfinite_at=nf)
    return None


def d_vanish(gn, train, layer_gn=None, abs_thr=1e-3):
    """Per-layer norms logged: the first layer's gradient is < 1e-3 x the last layer's.
    Only a global norm: it is tiny (< 1e-3) while the loss is still far from its floor."""
    if layer_gn:
        names = list(layer_gn)
        meds = {n: med([x for _, x in layer_gn[n]][len(layer_gn[n]) // 2:]) for n in names}
        first, last = meds[names[0]], meds[names[-1]]
        if fin(first) and fin(last) and last > 0 and first < 1e-3 * last:
            return dict(first_layer=first, last_layer=last, ratio=first / last, layers=meds)
        return None
    v = [x for _, x in gn if fin(x)]
    if len(v) < 5:
        return None
    m = float(np.median(v[len(v) // 2:]))
    tv = [x for _, x in train if fin(x)]
    still_high = len(tv) > 5 and float(np.median(tv[-max(3, len(tv) // 10):])) > 0.3 * float(np.median(tv[:3]))
    if m < abs_thr and still_high:
        return dict(median=m, first=v[0])
    return None


def d_time(st):
    v = [x for _, x in st if fin(x)]
    if len(v) < 8:
        return {}
    m = float(np.median(v))
    out = {"median": m}
    outl = [(s, x) for s, x in st if fin(x) and x > 3 * m]
    out["outliers"] = outl
    # sustained change point
    best = None
    n = len(v)
    for k in range(max(3, n // 10), n - max(3, n // 10)):
        a, b = float(np.median(v[:k])), float(np.median(v[k:]))
        r = b / a if a > 0 else 0
        if best is None or r > best[0]:
            best = (r, k)
    if best:
        out["regress_ratio"], k = best
        # refine: first index after which the level stays high
        a = float(np.median(v[:k]))
        b = float(np.median(v[k:]))
        thr = (a + b) / 2
        j = k
        while j > 0 and v[j - 1] > thr:
            j -= 1
        while j < n and v[j] <= thr:
            j += 1
        out["regress_onset"] = st[min(j, n - 1)][0]
    return out


def d_mem(mem):
    v = [x for _, x in mem if fin(x)]
    if len(v) < 6:
        return None
    a, b = float(np.median(v[: max(2, len(v) // 10)])), float(np.median(v[-max(2, len(v) // 10):]))
    ups = np.mean(np.diff(v) >= 0)
    return dict(start=a, end=b, growth=b / a - 1 if a > 0 else 0, up_frac=float(ups))


def d_lr(lr, total_steps):
    pts = [(s, v) for s, v in lr if fin(v)]
    if len(pts) < 5:
        return None
    st = [s for s, _ in pts]
    v = np.array([x for _, x in pts])
    vmax = float(v.max())
    span = st[-1] - st[0] if st[-1] > st[0] else 1
    out = dict(max=vmax, first=float(v[0]), last=float(v[-1]))
    # collapse: below 1e-3 x peak within the first 35 % of the run
    j = next((i for i, x in enumerate(v) if x < 1e-3 * vmax), None)
    out["collapse_at"] = st[j] if j is not None and (st[j] - st[0]) < 0.35 * span else None
    # rises for the whole run (no decay phase, no plateau at peak)
    i30 = next(i for i, s in enumerate(st) if s - st[0] >= 0.3 * span)
    i80 = next(i for i, s in enumerate(st) if s - st[0] >= 0.8 * span)
    # still rising in the last fifth of the run: not a warm-up that ended
    out["rising"] = bool(v[-1] > 1.5 * v[i30] and v[-1] > 1.05 * v[i80] and np.all(np.diff(v[i30:]) >= -1e-12 * vmax))
    return out


def d_scale(sc):
    v = [x for _, x in sc if fin(x)]
    if len(v) < 5:
        return None
    early = float(np.median(v[: max(3, len(v) // 5)]))
    end = v[-1]
    out = dict(early=early, end=end, min=min(v))
    if end < early / 256:
        # onset: start of the final stretch spent more than two halvings below the early level
        j = len(v) - 1
        while j > 0 and v[j - 1] < early / 3.9:
            j -= 1
        out["collapse_onset"] = sc[j][0]
        out["collapsed"] = True
    else:
        out["collapsed"] = False
    return out


def d_resume(train):
    st = [s for s, _ in train]
    for i in range(1, len(st)):
        if st[i] <= st[i - 1]:
            return dict(onset=st[i], prev=st[i - 1])
    return None


def d_masked(train, every, unit_every=None):
    """Missing logging points (gaps) or exact zeros in a loss that is otherwise > 0."""
    st = [s for s, _ in train]
    v = [x for _, x in train]
    zeros = [s for s, x in train if x == 0.0]
    lvl = med([x for x in v if x != 0.0])
    out = {}
    if zeros and fin(lvl) and lvl > 1e-3:
        out["zero_at"] = zeros[0]
        out["n_zero"] = len(zeros)
    gaps = [(st[i - 1], st[i]) for i in range(1, len(st)) if st[i] - st[i - 1] > every]
    if gaps:
        out["gap_at"] = gaps[0][0] + every
        out["n_gap"] = sum((b - a) // every - 1 for a, b in gaps)
    return out or None


def scan(S, spec, tr):
    """All measurable symptoms on the logged series -> {symptom: info(with 'onset')}."""
    found = {}
    train = S["train"]
    mk0 = d_masked(train, spec.get("log_every", 1))
    if mk0 and "zero_at" in mk0:
        # logged 0.0 stands for NaN (masking logger): judge the loss curve before it
        train = [(s, v) for s, v in train if s < mk0["zero_at"]]
    nf = first_nonfinite(train)
    if nf is not None:
        found["nonfinite_loss"] = dict(onset=nf)
    # a masked (0.0) point after the curve counts as the non-finite value it stands for
    dv = d_divergence(train + ([(mk0["zero_at"], float("nan"))] if mk0 and "zero_at" in mk0 else []))
    if dv:
        found["divergence"] = dv
    sp = d_spikes(train)
    if sp:
        found["loss_spike"] = dict(onset=sp[0][0], spikes=sp)
    fl = d_flat(train)
    if fl:
        found["flat_loss"] = dict(onset=None, **fl)
    osc = d_oscillation(train)
    if osc is not None and osc["amp"] > 0.15 and osc["autocorr"] > 0.3:
        found["oscillation"] = dict(onset=None, **osc)
    if S["val"]:
        ov = d_overfit(train, S["val"])
        if ov:
            found["overfitting"] = ov
    if S["gn"]:
        ge = d_grad_explode(S["gn"])
        if ge:
            found["exploding_gradients"] = ge
            if ge.get("nonfinite_at") is not None:
                found["nonfinite_grad"] = dict(onset=ge["nonfinite_at"])
        elif first_nonfinite(S["gn"]) is not None:
            found["nonfinite_grad"] = dict(onset=first_nonfinite(S["gn"]))
        va = d_vanish(S["gn"], train, S.get("layer_gn"))
        if va:
            found["vanishing_gradients"] = dict(onset=None, **va)
    if S["step_time"]:
        t = d_time(S["step_time"])
        if t.get("outliers") and len(t["outliers"]) >= 2:
            found["step_time_outliers"] = dict(onset=t["outliers"][0][0], n=len(t["outliers"]), median=t["median"],
                                               worst=max(x for _, x in t["outliers"]))
        if t.get("regress_ratio", 0) > 1.6:
            found["throughput_regression"] = dict(onset=t["regress_onset"], ratio=t["regress_ratio"])
        if S["data_time"]:
            dtm = dict(S["data_time"])
            shares = [(s, dtm[s] / x) for s, x in S["step_time"] if s in dtm and fin(x) and x > 0]
            if shares:
                hi = [s for s, r in shares if r > 0.5]
                frac_hi = len(hi) / len(shares)
                if frac_hi > 0.25:
                    # first point after which the share stays mostly above 0.5
                    on = None
                    for i in range(len(shares)):
                        rest = [r for _, r in shares[i:]]
                        if np.mean(np.array(rest) > 0.5) > 0.9:
                            on = shares[i][0]
                            break
                    found["input_bound"] = dict(onset=on, frac=frac_hi, share_med=med([r for _, r in shares]))
    if S["mem"]:
        m = d_mem(S["mem"])
        if m and m["growth"] > 0.3 and m["up_frac"] > 0.6:
            found["memory_growth"] = dict(onset=None, **m)
    if S["lr"]:
        l = d_lr(S["lr"], tr["total"])
        if l and (l["collapse_at"] is not None or l["rising"]):
            found["lr_schedule_anomaly"] = dict(onset=None, **l)
    if S["scale"]:
        c = d_scale(S["scale"])
        if c and c["collapsed"]:
            found["loss_scale_collapse"] = dict(onset=c["collapse_onset"], **c)
    rs = d_resume(train)
    if rs:
        found["resume_discontinuity"] = rs
    if S["ranks"]:
        ms = {k: med([x for _, x in v["step_time"]]) for k, v in S["ranks"].items()}
        lo, hi = min(ms.values()), max(ms.values())
        if lo > 0 and hi / lo > 1.3:
            found["straggler"] = dict(onset=None, medians=ms, ratio=hi / lo)
    every = spec.get("log_every", 1)
    mk = d_masked(S["train"], every)
    if mk and (spec.get("fault") == "nan_filtered" or spec["format"] == "hf" or "zero_at" in mk):
        found["nan_masked_in_logs"] = dict(onset=mk.get("zero_at", mk.get("gap_at")), **mk)
    return found


# ----------------------------------------------------------------------------- per-fault decisions
LOSS_CONSEQ = ["divergence", "loss_spike", "oscillation", "exploding_gradients", "nonfinite_grad", "flat_loss", "plateau"]
RULES = {
    # fault: (ordered candidate primary symptoms [first found wins unless 'all'], tolerated)
    "lr_too_high": (["nonfinite_loss", "divergence", "flat_loss", "plateau", "oscillation"], LOSS_CONSEQ),
    "lr_too_low": (["flat_loss", "plateau"], ["plateau", "flat_loss", "vanishing_gradients"]),
    "nan_log0": (["nonfinite_loss"], ["nonfinite_grad", "divergence", "loss_spike", "exploding_gradients"]),
    "nan_zero_norm": (["nonfinite_loss"], ["nonfinite_grad", "divergence", "loss_spike", "exploding_gradients"]),
    "poisoned_batch": (["loss_spike", "divergence"], ["loss_spike", "exploding_gradients", "oscillation", "step_time_outliers"]),
    "rnn_explode": (["exploding_gradients"], ["loss_spike", "divergence", "oscillation", "nonfinite_grad", "flat_loss", "plateau"]),
    "vanishing_sigmoid": (["vanishing_gradients", "flat_loss"], ["flat_loss", "plateau", "vanishing_gradients"]),
    "dead_relu": (["flat_loss", "plateau"], ["vanishing_gradients", "plateau", "flat_loss"]),
    "no_zero_grad": (["nonfinite_loss", "divergence", "oscillation", "loss_spike"], LOSS_CONSEQ),
    "softmax_before_ce": (["plateau", "flat_loss"], ["flat_loss", "plateau", "vanishing_gradients"]),
    "random_labels": (["flat_loss", "plateau"], ["plateau", "flat_loss", "overfitting"]),
    "unshuffled_sorted": (["oscillation", "loss_spike"], ["loss_spike", "oscillation", "plateau", "divergence"]),
    "val_shift": (["overfitting"], []),
    "val_leak": ([], []),
    "overfit_tiny": (["overfitting"], []),
    "wd_too_high": (["plateau", "flat_loss"], ["flat_loss", "plateau", "vanishing_gradients"]),
    "frozen": (["plateau", "flat_loss"], ["flat_loss", "plateau"]),
    "bn_eval": (["divergence", "oscillation", "loss_spike", "plateau", "flat_loss"], LOSS_CONSEQ),
    "sched_per_batch": (["lr_schedule_anomaly", "plateau", "flat_loss"], ["plateau", "flat_loss", "vanishing_gradients"]),
    "sched_increasing": (["lr_schedule_anomaly", "divergence"], ["divergence", "oscillation", "loss_spike", "exploding_gradients", "plateau"]),
    "warmup_diverge": (["nonfinite_loss", "divergence", "flat_loss"], ["loss_spike", "exploding_gradients", "oscillation", "nonfinite_grad", "divergence", "flat_loss", "plateau"]),
    "loss_scale_collapse": (["loss_scale_collapse"], ["divergence", "exploding_gradients", "nonfinite_grad", "flat_loss", "plateau", "loss_spike", "oscillation"]),
    "slow_loader": (["input_bound", "throughput_regression"], ["throughput_regression", "step_time_outliers", "input_bound"]),
    "input_bound": (["input_bound"], ["step_time_outliers", "throughput_regression"]),
    "periodic_stall": (["step_time_outliers"], ["input_bound"]),
    "memory_leak": (["memory_growth"], ["throughput_regression", "step_time_outliers"]),
    "resume_replay": (["resume_discontinuity"], ["step_time_outliers", "loss_spike"]),
    "straggler": (["straggler"], ["step_time_outliers", "input_bound"]),
    "nan_filtered": (["nan_masked_in_logs"], ["nonfinite_loss", "nonfinite_grad", "loss_spike", "flat_loss", "divergence", "exploding_gradients"]),
    "accum_undivided": (["nonfinite_loss", "divergence", "oscillation", "loss_spike"], LOSS_CONSEQ),
}

# onset is only given where the numbers pin a point in time
ONSET = {"nonfinite_loss", "loss_spike", "divergence", "overfitting", "exploding_gradients", "input_bound",
         "throughput_regression", "step_time_outliers", "resume_discontinuity", "nan_masked_in_logs",
         "loss_scale_collapse", "nonfinite_grad"}


def _plateau(found, spec, tr, S, ref):
    """plateau: loss descended then stopped, at a level far above the same run without the fault."""
    if ref is None:
        return None
    pts = finite_prefix(S["train"])
    if len(pts) < 8:
        return None
    v = np.array([x for _, x in pts])
    start = float(np.median(v[:3]))
    end = float(np.median(v[-max(3, len(v) // 10):]))
    half = float(np.median(v[len(v) // 2 - max(1, len(v) // 20): len(v) // 2 + max(1, len(v) // 20) + 1]))
    if end > 1.5 * ref + 0.05 and end > 0.6 * half:
        return dict(onset=None, start=start, end=end, ref_end=ref, mid=half)
    return None


def label(spec, S, tr, ref=None):
    fault = spec.get("fault")
    found = scan(S, spec, tr)
    pl = _plateau(found, spec, tr, S, ref)
    if pl and "flat_loss" not in found:
        found["plateau"] = pl
    notes = []
    faults, tolerated = [], []
    osc = d_oscillation(S["train"])
    if fault is None:
        # healthy: nothing may show; any hit is reported so the run is fixed (or relabelled) by hand
        tol = [dict(symptom=c, onset_step=None) for c in spec.get("tolerate", [])]
        extra = [c for c in found if c not in spec.get("tolerate", [])]
        for c in extra:
            on = found[c].get("onset") if c in ONSET else None
            faults.append(dict(symptom=c, onset_step=int(on) if on is not None else None))
            notes.append(f"no fault injected, but the logged numbers show {c}")
        return dict(faults=faults, tolerated=tol, found=found, notes=notes, osc=osc, extra=extra)
    cands, tol = RULES[fault]
    tol = list(tol)
    chosen = []
    if fault in ("slow_loader",):
        chosen = [c for c in cands if c in found][:1]
    elif fault in ("vanishing_sigmoid",):
        chosen = ["vanishing_gradients"] if "vanishing_gradients" in found else (["flat_loss"] if "flat_loss" in found else [])
    elif fault in ("sched_per_batch", "sched_increasing"):
        chosen = ["lr_schedule_anomaly"] if "lr_schedule_anomaly" in found else [c for c in cands[1:] if c in found][:1]
    elif fault == "rnn_explode":
        chosen = ["exploding_gradients"] if "exploding_gradients" in found else [c for c in ("nonfinite_loss", "divergence", "loss_spike") if c in found][:1]
    else:
        chosen = [c for c in cands if c in found][:1]
    # a logged NaN/inf training loss is always labelled; so is a logger that visibly masked NaNs
    for c in ("nonfinite_loss", "nan_masked_in_logs"):
        if c in found and c not in chosen:
            chosen.append(c)
    if not chosen and found:
        # the fault's usual symptom is absent: label what the logged numbers do show
        chosen = list(found)
        notes.append("the fault's usual symptom did not show; labelled with what the logged numbers show")
    elif not chosen:
        notes.append("INJECTED FAULT DID NOT SHOW in the logged numbers; labelled healthy")
    for c in chosen:
        on = found[c].get("onset") if c in ONSET else None
        faults.append(dict(symptom=c, onset_step=int(on) if on is not None else None))
        if c == "loss_spike" and len(found[c].get("spikes") or []) > 1:
            # every spike measured is an event of the fault (two poisoned batches: two spikes)
            faults[-1]["event_steps"] = [int(sp[0]) for sp in found[c]["spikes"]]
    # consequences: the fault's usual companions + anything else measured on the run
    for c in tol:
        if c not in chosen and c not in tolerated:
            tolerated.append(c)
    extra = [c for c in found if c not in chosen and c not in tolerated]
    tolerated += extra
    tol_out = [dict(symptom=c, onset_step=None) for c in tolerated]
    return dict(faults=faults, tolerated=tol_out, found=found, notes=notes, extra=extra, osc=osc)

TIMING = {"step_time_outliers", "throughput_regression", "input_bound", "straggler"}
