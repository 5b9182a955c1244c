"""Symptom locators on the points actually logged (the dict returned by a writer), and the rule from an injected
fault to its labelled (`faults`) and `tolerated` symptoms."""
import math
import statistics as st


def fin(v):
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def med(v):
    v = [a for a in v if fin(a)]
    return st.median(v) if v else float("nan")


def rolling_med(v, k=5):
    out = []
    for i in range(len(v)):
        w = [a for a in v[max(0, i - k // 2): i + k // 2 + 1] if fin(a)]
        out.append(st.median(w) if w else float("nan"))
    return out


def series(L, key):
    return L["xs"].get(key, []), L.get(key, [])


# ------------------------------------------------------------------ locators: each returns None or dict(onset, events?, range?, info)
def loc_nonfinite(L):
    x, v = L["x"], L["loss"]
    bad = [i for i, a in enumerate(v) if not fin(a)]
    if not bad:
        return None
    ev = None
    if any(fin(a) for a in v[bad[0]:]):     # recovers (skipped steps)
        ev = [x[i] for i in bad][:10]
    return dict(onset=x[bad[0]], events=ev, info=f"first non-finite logged loss at x={x[bad[0]]} ({len(bad)} of {len(v)} points)")


def loc_masked(L):
    if L["masked_x"]:
        return dict(onset=L["masked_x"][0], info=f"logger hid a non-finite loss at x={L['masked_x'][0]} ({len(L['masked_x'])} points)")
    return None


def loc_spikes(L, thr=3.0, only_first=False):
    x, v = L["x"], L["loss"]
    ev = []
    for i in range(4, len(v)):
        prev = [a for a in v[max(0, i - 8):i] if fin(a)]
        if len(prev) < 4 or not fin(v[i]):
            continue
        m = st.median(prev)
        if m > 0 and v[i] > thr * m:
            ev.append(x[i])
    if not ev:
        return None
    return dict(onset=ev[0], events=ev[:12], info=f"{len(ev)} logged losses above {thr}x the median of the previous 8 points, first at x={ev[0]}")


def loc_divergence(L, ratio=1.5):
    x, v = L["x"], L["loss"]
    n_f = len(v)
    for i, a in enumerate(v):
        if not fin(a):
            n_f = i
            break
    if n_f < 6:
        return None
    xv, vv = x[:n_f], v[:n_f]
    rm = rolling_med(vv, 5)
    am = min(range(len(rm)), key=lambda i: rm[i])
    mn = rm[am]
    tail = rm[int(0.8 * len(rm)):]
    if mn > 0 and med(tail) > ratio * mn and am < int(0.8 * len(rm)):
        on = next(xv[i] for i in range(am, len(rm)) if rm[i] > ratio * mn)
        return dict(onset=on, info=f"smoothed loss min {mn:.4g} at x={xv[am]}, last 20% median {med(tail):.4g} (>{ratio}x)")
    return None


def loc_flat(L, ratio=0.85):
    v = [a for a in L["loss"] if fin(a)]
    if len(v) < 8:
        return None
    a = med(v[: max(2, len(v) // 20)])
    b = med(v[int(0.8 * len(v)):])
    if a > 0 and b > ratio * a:
        return dict(onset=None, info=f"median of last 20% {b:.4g} vs first 5% {a:.4g} (ratio {b / a:.2f} > {ratio})")
    return None


def loc_overfit(L, end_ratio=1.2):
    x, v = L["val_x"], L["val"]
    if len(v) < 4:
        return None
    am = min(range(len(v)), key=lambda i: v[i] if fin(v[i]) else float("inf"))
    vm = v[am]
    if not fin(vm) or vm <= 0:
        return None
    after = [a for a in v[am + 1:] if fin(a) and a > 1.1 * vm]
    tr = [a for a in L["loss"] if fin(a)]
    train_falls = len(tr) > 4 and med(tr[int(0.8 * len(tr)):]) < 0.9 * med(tr[: max(2, len(tr) // 10)])
    if fin(v[-1]) and v[-1] > end_ratio * vm and len(after) >= 2 and train_falls:
        hi = next((x[i] for i in range(am + 1, len(v)) if fin(v[i]) and v[i] > 1.1 * vm), x[-1])
        return dict(onset=x[am], range=[x[am], hi], info=f"val loss min {vm:.4g} at x={x[am]}, last {v[-1]:.4g}; train falls")
    return None


def loc_exploding(L, k=10.0):
    x, g = series(L, "grad_norm")
    if len(g) < 6:
        return None
    early = med(g[: max(3, len(g) // 10)])
    for i, a in enumerate(g):
        if not fin(a) or a > 1e3 or (early > 0 and a > k * early):
            return dict(onset=x[i], info=f"grad norm {a:.4g} at x={x[i]} vs early median {early:.4g}")
    return None


def loc_vanishing(L):
    x, f = series(L, "gn_first")
    _, l = series(L, "gn_last")
    if f:
        r = med([a / b for a, b in zip(f, l) if fin(a) and fin(b) and b > 0])
        if fin(r) and r < 1e-2:
            return dict(onset=None, info=f"first/last layer grad-norm ratio median {r:.3g}")
    x, g = series(L, "grad_norm")
    if len(g) >= 6:
        m = med(g[len(g) // 2:])
        if fin(m) and m < 1e-6:
            return dict(onset=None, info=f"grad norm median over the second half {m:.3g}")
    return None


def loc_dead(L):
    x, dd = series(L, "dead")
    if dd and med(dd) > 0.5:
        return dict(onset=None, info=f"dead-unit fraction median {med(dd):.2f}")
    return None


def loc_input_bound(L):
    x, d = series(L, "data_time")
    _, s = series(L, "step_time")
    if len(d) < 5 or len(s) != len(d):
        return None
    r = [a / b if b > 0 else 0 for a, b in zip(d, s)]
    for i in range(len(r) - 4):
        later = r[i:]
        if r[i] > 0.5 and sum(a > 0.5 for a in later) >= 0.9 * len(later):
            on = None if i <= max(1, len(r) // 10) else x[i]
            return dict(onset=on, info=f"data time / step time > 0.5 from x={x[i]} (median {med(later):.2f})")
    return None


def loc_step_outliers(L, thr=4.0):
    x, s = series(L, "step_time")
    ev = []
    for i in range(4, len(s)):
        m = med(s[max(0, i - 8):i])
        if m > 0 and s[i] > thr * m:
            ev.append(x[i])
    if len(ev) >= 2:
        return dict(onset=ev[0], events=ev[:12], info=f"{len(ev)} step times above {thr}x the median of the previous 8")
    return None


def loc_throughput(L, ratio=1.5):
    x, s = series(L, "step_time")
    if len(s) < 10:
        return None
    a, b = med(s[: len(s) // 10 or 1]), med(s[-(len(s) // 10 or 1):])
    if a > 0 and b > ratio * a:
        on = next((x[i] for i in range(len(s)) if s[i] > (a + b) / 2 and med(s[i:]) > ratio * a), None)
        return dict(onset=on, info=f"step time median first 10% {a * 1e3:.2f} ms, last 10% {b * 1e3:.2f} ms")
    return None


def loc_memory(L, mb=50.0):
    x, m = series(L, "mem")
    if len(m) < 5:
        return None
    ups = sum(m[i + 1] >= m[i] for i in range(len(m) - 1))
    if m[-1] - m[0] > mb and ups >= 0.7 * (len(m) - 1):
        return dict(onset=None, info=f"memory {m[0]:.0f} -> {m[-1]:.0f} MB, rising at {ups}/{len(m) - 1} points")
    return None


def loc_straggler(L):
    r0, r1 = L["ranks"][0], L["ranks"][1]
    if not r0:
        return None
    rr = med([b / a for a, b in zip(r0, r1) if a > 0])
    if rr > 1.5:
        return dict(onset=None, info=f"rank1/rank0 compute time median ratio {rr:.2f}")
    return None


def loc_scale(L):
    x, s = series(L, "scale")
    if len(s) < 4:
        return None
    mx = max(s)
    if s[-1] < mx / 1000 and s[-1] < 1:
        i = next(k for k in range(len(s)) if s[k] < mx / 1000 and all(v < mx / 1000 for v in s[k:]))
        while i > 0 and s[i - 1] > s[i]:
            i -= 1
        return dict(onset=x[i], info=f"loss scale max {mx:g}, last {s[-1]:.3g}; falls without recovery from x={x[i]}")
    return None


def loc_resume(L):
    x = L["x"]
    for i in range(1, len(x)):
        if x[i] <= x[i - 1]:
            return dict(onset=x[i], events=[x[i - 1]], info=f"x goes back from {x[i - 1]} to {x[i]}")
    return None


def loc_lr(L):
    x, lr = series(L, "lr")
    drops = []
    for i in range(1, len(lr) - 1):
        if lr[i - 1] > 0 and lr[i] < 0.3 * lr[i - 1]:
            # a sudden fall that is undone later (a restarting warm-up), not a planned drop
            if max(lr[i:i + 400]) >= 0.9 * lr[i - 1]:
                drops.append(x[i])
    if len(drops) >= 2:
        return dict(onset=drops[0], events=drops[:12], info=f"lr falls suddenly to <30% and climbs back {len(drops)} times, first at x={drops[0]}")
    return None


def loc_oscillation(L, period):
    x, v = L["x"], L["loss"]
    if not period or len(v) < 8 * period:
        return None
    lv = [math.log(a) for a in v if fin(a) and a > 0]
    # the mean drop inside a repeat group vs the jump at a group start
    drops, jumps = [], []
    for g0 in range(0, len(lv) - period, period):
        drops.append(lv[g0] - lv[g0 + period - 1])
        jumps.append(lv[g0 + period] - lv[g0 + period - 1])
    d, j = st.mean(drops[len(drops) // 4:]), st.mean(jumps[len(jumps) // 4:])
    if d > 0.1 and j > 0.1:
        return dict(onset=None, info=f"period-{period} saw-tooth: mean log-loss drop {d:.2f} inside a group, jump {j:.2f} at the next")
    return None


def loc_plateau(L, ref_final):
    v = [a for a in L["loss"] if fin(a)]
    if ref_final is None or len(v) < 5:
        return None
    fl = med(v[int(0.9 * len(v)):])
    if fl > 1.5 * ref_final:
        return dict(onset=None, info=f"final loss {fl:.4g} vs {ref_final:.4g} for the same run without the bug (>1.5x)")
    return None


# ------------------------------------------------------------------ the rule
PRIMARY = {  # fault -> symptoms that are labelled when their locator finds them
    "zerograd_after_bwd": ["flat_loss"], "causal_leak": ["overfitting"], "pad_in_loss": [],
    "opt_reset_epoch": ["loss_spike"], "warmup_restart_epoch": ["lr_schedule_anomaly"],
    "dup_batches": ["oscillation", "loss_spike"], "clip_prescale": ["flat_loss", "plateau"], "dropout_typo": ["plateau", "flat_loss"],
    "loss_x_const": ["divergence", "nonfinite_loss"], "val_misaligned": ["overfitting"], "embed_maxnorm": ["flat_loss"],
    "fp16_underflow": ["flat_loss", "plateau", "vanishing_gradients"], "temp_anneal_nan": ["nonfinite_loss"],
    "exp_overflow": ["nonfinite_loss"], "lr_unit_typo": ["divergence", "flat_loss", "nonfinite_loss", "plateau"],
    "hook_leak": ["memory_growth"], "lr_too_high": ["divergence", "nonfinite_loss"], "lr_too_low": ["flat_loss"],
    "grad_explode": ["exploding_gradients"], "vanishing_sigmoid": ["vanishing_gradients"], "dead_relu": ["dead_units"],
    "overfit_tiny": ["overfitting"], "label_noise": ["overfitting"], "corrupt_batch": ["loss_spike"],
    "nan_midrun": ["nonfinite_loss"], "nan_masked": ["nan_masked_in_logs"], "loss_scale_collapse": ["loss_scale_collapse"],
    "slow_loader": ["input_bound"], "sync_save_stall": ["step_time_outliers"], "straggler": ["straggler"],
    "resume_replay": ["resume_discontinuity"], "none": [],
}
SECONDARY = {  # consequences an engineer may also report (tolerated)
    "zerograd_after_bwd": ["vanishing_gradients", "plateau"], "clip_prescale": ["vanishing_gradients"],
    "loss_x_const": ["exploding_gradients", "loss_spike", "flat_loss", "oscillation"],
    "lr_too_high": ["exploding_gradients", "loss_spike", "oscillation", "flat_loss"],
    "lr_unit_typo": ["exploding_gradients", "loss_spike", "oscillation", "plateau"],
    "temp_anneal_nan": ["nonfinite_grad", "divergence", "loss_spike"], "exp_overflow": ["nonfinite_grad", "divergence", "loss_spike", "exploding_gradients"],
    "nan_midrun": ["nonfinite_grad"], "nan_masked": ["nonfinite_loss", "nonfinite_grad", "flat_loss"],
    "grad_explode": ["loss_spike", "divergence", "oscillation"], "vanishing_sigmoid": ["flat_loss", "plateau"],
    "dead_relu": ["flat_loss", "plateau"], "label_noise": ["plateau"], "embed_maxnorm": ["vanishing_gradients", "plateau"],
    "fp16_underflow": [], "slow_loader": ["throughput_regression"], "sync_save_stall": [], "straggler": ["step_time_outliers"],
    "loss_scale_collapse": ["flat_loss", "plateau", "nonfinite_grad"], "corrupt_batch": ["exploding_gradients"],
    "resume_replay": ["loss_spike"], "opt_reset_epoch": ["oscillation"], "warmup_restart_epoch": ["loss_spike", "oscillation"],
    "dup_batches": ["overfitting"], "dropout_typo": [], "causal_leak": [], "val_misaligned": [],
    "hook_leak": ["throughput_regression"], "lr_too_low": ["plateau"], "overfit_tiny": [], "pad_in_loss": [],
}


def measure(L, spec, ref_final=None, strict=True):
    """All symptoms the locators find on this logged run."""
    found = {}
    for name, fn in [("nonfinite_loss", loc_nonfinite), ("nan_masked_in_logs", loc_masked), ("divergence", loc_divergence),
                     ("flat_loss", loc_flat), ("overfitting", loc_overfit), ("exploding_gradients", loc_exploding),
                     ("vanishing_gradients", loc_vanishing), ("dead_units", loc_dead), ("input_bound", loc_input_bound),
                     ("step_time_outliers", loc_step_outliers), ("throughput_regression", loc_throughput),
                     ("memory_growth", loc_memory), ("straggler", loc_straggler), ("loss_scale_collapse", loc_scale),
                     ("resume_discontinuity", loc_resume), ("lr_schedule_anomaly", loc_lr), ("loss_spike", loc_spikes)]:
        r = fn(L)
        if r:
            found[name] = r
    per = spec.get("dup") if spec.get("fault") == "dup_batches" and spec["log_every"] == 1 else None
    r = loc_oscillation(L, per)
    if r:
        found["oscillation"] = r
    r = loc_plateau(L, ref_final)
    if r:
        found["plateau"] = r
    return found


def loose(L, spec):
    """Defensible secondary readings found with looser thresholds (tolerated on any run)."""
    out = {}
    if loc_spikes(L, 2.5):
        out["loss_spike"] = 1
    if loc_step_outliers(L, 3.0):
        out["step_time_outliers"] = 1
    if loc_throughput(L, 1.25):
        out["throughput_regression"] = 1
    if loc_memory(L, 20.0):
        out["memory_growth"] = 1
    if loc_overfit(L, 1.1):
        out["overfitting"] = 1
    if loc_flat(L, 0.7):
        out["flat_loss"] = 1
    if loc_divergence(L, 1.3):
        out["divergence"] = 1
    if loc_exploding(L, 5.0):
        out["exploding_gradients"] = 1
    if spec["steps"] <= 150:
        out["plateau"] = 1
    return out


def label(L, spec, ref_final=None):
    fault = spec.get("fault", "none")
    found = measure(L, spec, ref_final)
    prim = PRIMARY[fault]
    faults, tol, info = [], [], []
    always = ["nonfinite_loss", "nan_masked_in_logs"] if fault != "none" else []
    for k in prim + [a for a in always if a not in prim]:
        if k in found:
            r = found[k]
            e = {"symptom": k, "onset_step": r["onset"]}
            if r.get("events") and (len(r["events"]) > 1 or k == "resume_discontinuity"):
                e["event_steps"] = r["events"]
            if r.get("range"):
                e["onset_range"] = r["range"]
            faults.append(e)
            info.append(f"{k}: {r['info']}")
    if fault != "none" and not faults:
        # the expected symptom is absent but the logs show another clear training problem: label what is seen
        for k in ["divergence", "flat_loss", "plateau", "overfitting"]:
            if k in found:
                r = found[k]
                e = {"symptom": k, "onset_step": r["onset"]}
                if r.get("events") and len(r["events"]) > 1:
                    e["event_steps"] = r["events"]
                if r.get("range"):
                    e["onset_range"] = r["range"]
                faults.append(e)
                info.append(f"{k} (not the expected symptom, but visible): {r['info']}")
    labelled = {f["symptom"] for f in faults}
    for k in SECONDARY.get(fault, []) + sorted(found) + sorted(loose(L, spec)):
        if k not in labelled and k not in {t["symptom"] for t in tol}:
            tol.append({"symptom": k, "onset_step": None})
    extra = [k for k in found if k not in labelled and k not in SECONDARY.get(fault, [])]
    return faults, tol, info, found, extra
