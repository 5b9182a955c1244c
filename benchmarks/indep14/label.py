"""indep14: symptom locators run on the logged series (from writers.py), the rule from fault kind to labelled symptoms,
and the automatic `tolerated` readings (the same locators at looser thresholds)."""
import math

from writers import fin, median

# fault kind -> its own symptoms (what the bug shows when it shows at all)
EXPECT = {
    "std_no_eps": ["nonfinite_loss"],
    "std_no_eps_guarded": ["nan_masked_in_logs"],
    "target_shard_scrambled": ["loss_spike"],
    "lr_scaled_twice": ["divergence"],
    "zero_grad_after_backward": ["flat_loss"],
    "unfreeze_head_only": ["plateau"],
    "shuffle_false_sorted": ["oscillation", "loss_spike"],
    "train_idx_uses_val_size": ["overfitting"],
    "init_gain_typo": ["exploding_gradients"],
    "encoder_under_no_grad": ["vanishing_gradients"],
    "per_item_json_decode": ["input_bound"],
    "ckpt_with_dataset": ["step_time_outliers"],
    "preds_kept_with_graph": ["memory_growth"],
    "rank1_detect_anomaly": ["straggler"],
    "pairdist_sqrt_reg": ["nonfinite_grad"],
    "pairdist_sqrt_reg_scaler": ["loss_scale_collapse"],
    "accum_log_sum": ["grad_accum_misnormalization"],
    "resume_step_from_epoch": ["resume_discontinuity"],
    "focal_prior_bias_all": ["dead_units"],
    "raw_units_into_gate": ["saturated_activations"],
    "auroc_over_history": ["throughput_regression"],
    "sched_step_per_microbatch": ["lr_schedule_anomaly"],
}
# kinds whose loss definition is unchanged, so the final level can be judged against a bug-free twin
TWIN_KINDS = {"unfreeze_head_only"}
GENERIC = ["divergence", "flat_loss", "plateau", "overfitting"]

STRICT = dict(spike=3.0, div=1.5, flat=0.85, plateau=1.5, explode=10.0, st_out=4.0, thr=1.5, mem=50.0, overfit=1.2,
              inb=0.5, frac=0.5, strag=1.5, vanish=1e-2, accum=2.0, osc=2.0, scale=1000.0)
LOOSE = dict(spike=2.5, div=1.3, flat=0.7, plateau=1.25, explode=5.0, st_out=3.0, thr=1.25, mem=20.0, overfit=1.1,
             inb=0.35, frac=0.35, strag=1.25, vanish=3e-2, accum=1.5, osc=1.5, scale=100.0)


def roll_median(v, k=5):
    return [median(v[max(0, i - k + 1):i + 1]) for i in range(len(v))]


def since(xs, cond):
    """First x from which at least 90% of the remaining points satisfy cond."""
    n = len(xs)
    for i in range(n):
        rest = cond[i:]
        if cond[i] and sum(rest) >= 0.9 * len(rest):
            return xs[i]
    return None


def locate(S, T, twin_final=None):
    """Return {symptom: {"onset_step":..., "event_steps":..., "onset_range":..., "why": str}}."""
    out = {}
    L = S["loss"]
    xs = [x for x, _ in L]
    # resume discontinuity (x goes back)
    for i in range(1, len(xs)):
        if xs[i] < xs[i - 1]:
            out["resume_discontinuity"] = {"onset_step": xs[i], "event_steps": [xs[i - 1]],
                                           "why": f"x goes back from {xs[i - 1]} to {xs[i]}"}
            break
    # non-finite and masked
    bad = [x for x, v in L if not math.isfinite(v)]
    if bad:
        out["nonfinite_loss"] = {"onset_step": bad[0], "why": f"first non-finite logged loss at {bad[0]} ({len(bad)} points)"}
    if S["hidden"]:
        out["nan_masked_in_logs"] = {"onset_step": S["hidden"][0], "why": f"logger hid a NaN at {S['hidden'][0]}"}
    F = [(x, v) for x, v in L if math.isfinite(v)]
    if bad:
        F = [(x, v) for x, v in F if x < bad[0]]
    fx = [x for x, _ in F]
    fv = [v for _, v in F]
    n = len(fv)
    # loss spikes
    ev = []
    scale = (max(fv[:max(1, n // 20)]) - min(fv)) if n else 0.0  # the run's own loss drop, a floor for "large"
    for i in range(8, n):
        m = median(fv[i - 8:i])
        if m > 0 and fv[i] > T["spike"] * m and fv[i] - m > max(0.02, 0.1 * scale):
            ev.append(fx[i])
    if ev:
        out["loss_spike"] = {"onset_step": ev[0], "event_steps": ev[:20], "why": f"{len(ev)} logged points > {T['spike']}x the median of the previous 8"}
    # divergence
    if n >= 8:
        rm = roll_median(fv, 5)
        j = min(range(n), key=lambda i: rm[i])
        mn = rm[j]
        tail = median(rm[int(0.8 * n):])
        if mn > 0 and tail > T["div"] * mn and j < 0.8 * n:
            on = next(fx[i] for i in range(j, n) if rm[i] > T["div"] * mn)
            out["divergence"] = {"onset_step": on, "why": f"rolling-median-5 loss min {mn:.4g} at {fx[j]}, final 20% {tail:.4g}"}
        elif mn <= 0 and n:
            pass
        # flat
        head = median(fv[:max(1, int(0.05 * n))])
        tl = median(fv[int(0.8 * n):])
        if head > 0 and tl > T["flat"] * head and tl <= 1.2 * head and "divergence" not in out:
            out["flat_loss"] = {"onset_step": None, "why": f"last-20% median {tl:.4g} vs first-5% median {head:.4g}"}
        # oscillation: repeated large swings of the smoothed loss
        sm = [sum(fv[max(0, i - 2):i + 1]) / len(fv[max(0, i - 2):i + 1]) for i in range(n)]
        swings, lo, lo_i, on = 0, sm[0], 0, None
        i = 1
        hi = None
        while i < n:
            if sm[i] < lo:
                lo, lo_i = sm[i], i
            if lo > 0 and sm[i] > T["osc"] * lo and sm[i] - lo > 0.1 * scale:
                k = i
                pk = sm[i]
                while k + 1 < n and sm[k + 1] >= sm[k]:
                    k += 1
                    pk = sm[k]
                back = next((q for q in range(k, n) if sm[q] < pk / T["osc"]), None)
                if back is None:
                    break
                swings += 1
                on = on if on is not None else fx[lo_i]
                lo, lo_i = sm[back], back
                i = back
            i += 1
        if swings >= 2:
            out["oscillation"] = {"onset_step": on, "why": f"{swings} swings of {T['osc']}x in the 3-point mean loss"}
    # plateau against a bug-free twin
    if twin_final is not None and n:
        fin_lvl = median(fv[int(0.9 * n):]) if n >= 10 else fv[-1]
        if bad:
            fin_lvl = None
        if fin_lvl is not None and fin_lvl > T["plateau"] * twin_final and fin_lvl - twin_final > 0.01:
            out["plateau"] = {"onset_step": None, "why": f"final level {fin_lvl:.4g} vs bug-free twin {twin_final:.4g}"}
    # overfitting
    V = [(x, v) for x, v in S["val"] if math.isfinite(v)]
    if len(V) >= 4 and n >= 5:
        vx = [x for x, _ in V]
        vv = [v for _, v in V]
        j = min(range(len(vv)), key=lambda i: vv[i])
        mn = vv[j]
        above = [i for i in range(j + 1, len(vv)) if vv[i] > 1.1 * mn]
        tr_at_min = median([v for x, v in F if x <= vx[j]][-5:] or [fv[0]])
        tr_end = median(fv[int(0.8 * n):])
        if mn > 0 and vv[-1] > T["overfit"] * mn and len(above) >= 2 and tr_end < tr_at_min:
            hi = next((vx[i] for i in range(j, len(vv)) if vv[i] > 1.1 * mn), vx[-1])
            out["overfitting"] = {"onset_step": vx[j], "onset_range": [vx[j], hi],
                                  "why": f"val min {mn:.4g} at {vx[j]}, final {vv[-1]:.4g}; train {tr_at_min:.4g} -> {tr_end:.4g}"}
    # non-finite gradient norm while the logged loss is still finite
    G = S["gn"]
    lossd = dict(L)
    for x, v in G:
        if not math.isfinite(v) and x in lossd and math.isfinite(lossd[x]):
            out["nonfinite_grad"] = {"onset_step": x, "why": f"grad norm {v} at {x} while the logged loss is {lossd[x]:.4g}"}
            break
    # grad norm
    if G:
        gx = [x for x, _ in G]
        gv = [v for _, v in G]
        early = median([v for v in gv[:max(3, len(gv) // 10)] if math.isfinite(v)] or [1.0])
        for x, v in G:
            if not math.isfinite(v) or v > 1e3 or (early > 0 and v > T["explode"] * early and v > 1.0):
                out["exploding_gradients"] = {"onset_step": x, "why": f"grad norm {v:.4g} at {x} (early median {early:.4g})"}
                break
    if S["gfirst"] and S["glast"]:
        gl = dict(S["glast"])
        rat = [(x, v / gl[x]) for x, v in S["gfirst"] if x in gl and gl[x] > 0 and math.isfinite(v)]
        if rat:
            on = since([x for x, _ in rat], [r < T["vanish"] for _, r in rat])
            if on is not None and median([r for _, r in rat]) < T["vanish"]:
                out["vanishing_gradients"] = {"onset_step": on, "why": f"first/last layer grad-norm ratio median {median([r for _, r in rat]):.2e}"}
    for key, sym in (("dead", "dead_units"), ("sat", "saturated_activations")):
        if S[key]:
            on = since([x for x, _ in S[key]], [v > T["frac"] for _, v in S[key]])
            if on is not None:
                out[sym] = {"onset_step": on, "why": f"{key} fraction > {T['frac']} from {on}"}
    # timing
    st = [(x, v) for x, v in S["st"] if fin(v) and v > 0]
    if len(st) >= 10:
        sx = [x for x, _ in st]
        sv = [v for _, v in st]
        m = len(sv)
        a, b = median(sv[:max(2, m // 10)]), median(sv[-max(2, m // 10):])
        if b > T["thr"] * a:
            on = since(sx, [v > 0.5 * (a + b) for v in sv])  # midway between the early and late levels
            lo = since(sx, [v > a + 0.2 * (b - a) for v in sv])  # a gradual creep starts earlier
            out["throughput_regression"] = {"onset_step": on, "why": f"step time first-10% median {a:.4g}s, last-10% {b:.4g}s"}
            if lo is not None and on is not None and lo < on:
                out["throughput_regression"]["onset_range"] = [lo, on]
        ev = [sx[i] for i in range(8, m) if sv[i] > T["st_out"] * median(sv[i - 8:i])]
        if len(ev) >= 2:
            out["step_time_outliers"] = {"onset_step": ev[0], "event_steps": ev[:30], "why": f"{len(ev)} step times > {T['st_out']}x median of previous 8"}
        D = dict(S["dt"])
        if D:
            fr = [(x, D[x] / v) for x, v in st if x in D]
            if fr:
                on = since([x for x, _ in fr], [f > T["inb"] for _, f in fr])
                if on is not None:
                    out["input_bound"] = {"onset_step": on if on != fr[0][0] else None, "why": f"data/step time > {T['inb']} from {on}"}
    R = S["rss"]
    if len(R) >= 5:
        rv = [v for _, v in R]
        grow = rv[-1] - rv[0]
        ups = sum(1 for i in range(1, len(rv)) if rv[i] >= rv[i - 1])
        if grow > T["mem"] and ups >= 0.6 * (len(rv) - 1):
            on = next(x for x, v in R if v > rv[0] + 0.1 * grow)
            out["memory_growth"] = {"onset_step": on, "why": f"RSS {rv[0]:.1f} -> {rv[-1]:.1f} MB"}
    if S["rank"]:
        c0, c1 = dict(S["rank"][0]["compute"]), S["rank"][1]["compute"]
        rat = [(x, v / c0[x]) for x, v in c1 if x in c0 and c0[x] > 0]
        on = since([x for x, _ in rat], [r > T["strag"] for _, r in rat])
        if on is not None:
            out["straggler"] = {"onset_step": on if on != rat[0][0] else None, "why": f"rank1/rank0 compute > {T['strag']} from {on}"}
    SC = S["scale"]
    if SC:
        mx = max(v for _, v in SC)
        i1 = next((i for i, (_, v) in enumerate(SC) if v < 1 and v < mx / T["scale"]), None)
        if i1 is not None:
            k = i1
            while k > 0 and SC[k - 1][1] > SC[k][1]:
                k -= 1
            out["loss_scale_collapse"] = {"onset_step": SC[k][0], "why": f"loss scale max {mx:.4g} falls below 1 at {SC[i1][0]}"}
    LR = S["lr"]
    if len(LR) >= 6:
        lx = [x for x, _ in LR]
        lv = [v for _, v in LR]
        mx = max(lv)
        # (e) the lr descends from above half its peak to near 0 and climbs back gradually, more than once (a cosine run past its
        # period); onset = the first such minimum, events = all of them
        mins = []
        for i in range(1, len(lv) - 3):
            if lv[i] < 0.05 * mx and lv[i] <= lv[i - 1] and lv[i] < lv[i + 1] and max(lv[:i]) > 0.5 * mx:
                later = lv[i:i + 8]
                if sum(later[q + 1] > later[q] for q in range(len(later) - 1)) >= 3 and max(lv[i:]) > 0.5 * mx:
                    mins.append(lx[i])
        if len(mins) >= 2:
            out["lr_schedule_anomaly"] = {"onset_step": mins[0], "event_steps": mins[:20],
                                          "why": f"lr falls below 5% of its peak {mx:.3g} and climbs back gradually {len(mins)} times (first minimum at {mins[0]})"}
        # (a) an abrupt drop followed by a gradual climb back (a warm-up that restarts mid-run)
        for i in range(1, len(lv) - 3):
            if "lr_schedule_anomaly" in out:
                break
            if lv[i] < lv[i - 1] / 2.5 and i > len(lv) * 0.1:
                later = lv[i:]
                peak = max(later)
                climb = [later[q + 1] >= later[q] for q in range(min(len(later) - 1, 6))]
                if peak > 3 * lv[i] and sum(climb) >= 3:
                    out["lr_schedule_anomaly"] = {"onset_step": lx[i], "why": f"lr drops {lv[i - 1]:.3g} -> {lv[i]:.3g} at {lx[i]} and climbs back to {peak:.3g} gradually"}
                    break
        # (b) lr reaches ~0 long before the end and climbs back smoothly
        if "lr_schedule_anomaly" not in out:
            j = min(range(len(lv)), key=lambda i: lv[i])
            if lv[j] < 1e-2 * mx and j < 0.8 * len(lv) and max(lv[j:]) > 0.5 * mx:
                ups = [lv[q + 1] > lv[q] for q in range(j, len(lv) - 1)]
                if sum(ups) >= 3:
                    out["lr_schedule_anomaly"] = {"onset_step": lx[j], "why": f"lr reaches {lv[j]:.3g} at {lx[j]} and climbs back"}
        # (c) still rising over the whole second half (a staircase counts: non-decreasing, and 1.5x up from the middle)
        if "lr_schedule_anomaly" not in out:
            h = lv[len(lv) // 2:]
            if len(h) >= 3 and all(h[q + 1] >= h[q] for q in range(len(h) - 1)) and h[-1] > 1.5 * h[0]:
                out["lr_schedule_anomaly"] = {"onset_step": None, "why": f"lr still rising over the second half ({h[0]:.3g} -> {h[-1]:.3g})"}
        # (d) lr collapses below 1e-3 of its peak before 60% of the run and stays there
        if "lr_schedule_anomaly" not in out:
            on = since(lx, [v < 1e-3 * mx for v in lv])
            if on is not None and lx.index(on) < 0.6 * len(lv):
                lo = next(x for x, v in LR if v <= 1.0001e-2 * mx)
                out["lr_schedule_anomaly"] = {"onset_step": on, "why": f"lr below 1e-3 of its peak {mx:.3g} from {on} (below 1e-2 from {lo})"}
                if lo < on:
                    out["lr_schedule_anomaly"]["onset_range"] = [lo, on]
    # grad-accumulation misnormalisation: train/val ratio
    if len(V) >= 3 and n >= 5:
        rs = []
        for vx_, vv_ in V:
            near = [v for x, v in F if abs(x - vx_) <= max(1, (fx[-1] - fx[0]) / 20)]
            if near and vv_ > 0:
                rs.append((vx_, median(near) / vv_))
        if len(rs) >= 3:
            r_all = median([r for _, r in rs])
            if r_all > T["accum"] and rs[0][1] > T["accum"]:
                out["grad_accum_misnormalization"] = {"onset_step": None, "why": f"train/val ratio {r_all:.2f} from the start"}
            else:
                for i in range(2, len(rs)):
                    a = median([r for _, r in rs[:i]])
                    b = median([r for _, r in rs[i:]])
                    if b > T["accum"] * a and b > 1.5 and all(r > T["accum"] * a for _, r in rs[i:]):
                        out["grad_accum_misnormalization"] = {"onset_step": rs[i][0], "why": f"train/val ratio {a:.2f} -> {b:.2f} at {rs[i][0]}"}
                        break
    return out


def assign(kind, found, loose):
    """-> (faults, tolerated). kind None = designed healthy."""
    base = kind.split(" ")[0] if kind else None
    labels = []
    if base:
        own = [s for s in EXPECT[base] if s in found]
        labels = own or [s for s in GENERIC if s in found]
        for s in ("nonfinite_loss", "nan_masked_in_logs"):
            if s in found and s not in labels:
                labels.append(s)
    faults = []
    for s in labels:
        f = {"symptom": s, "onset_step": found[s].get("onset_step")}
        for k in ("event_steps", "onset_range"):
            if k in found[s]:
                f[k] = found[s][k]
        faults.append(f)
    tol = []
    seen = set(labels)
    for s, v in list(found.items()) + list(loose.items()):
        if s not in seen:
            seen.add(s)
            src = "strict" if s in found else "loose"
            tol.append({"symptom": s, "onset_step": v.get("onset_step"), "reason": f"{src} reading: {v['why']}"})
    if base:
        for s in EXPECT[base]:
            if s not in seen:
                seen.add(s)
                tol.append({"symptom": s, "onset_step": None, "reason": "a listed consequence of this fault kind, not found in the logged numbers"})
    return faults, tol
