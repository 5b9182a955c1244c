"""Labels derived from the LOGGED points (what the writer put in the file), not from the injection alone.

Each locator takes the logged points (and the run spec) and returns None when the symptom is not
visible, or (onset, extra, note): onset in the file's x unit (or None), extra = {onset_range|event_steps}.
"""
import math
import statistics as st


def F(v):
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def main_pts(pts):
    return [p for p in pts if p.get("rank", 0) == 0]


def series(pts, key):
    return [(p["x"], p[key]) for p in pts if key in p and p[key] is not None]


def fmt(v):
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def med(vs):
    vs = [v for v in vs if F(v)]
    return st.median(vs) if vs else float("nan")


# ------------------------------------------------------------------ locators
def nonfinite_loss(pts, spec):
    s = [(x, v) for x, v in series(main_pts(pts), "loss")]
    bad = [x for x, v in s if not F(v)]
    if not bad:
        return None
    after = [v for x, v in s if x > bad[-1]]
    extra = {}
    if len(bad) < len(s) and any(F(v) for x, v in s if x > bad[0]):
        extra = {"event_steps": bad[:10]}
    return bad[0], extra, f"first non-finite logged loss at x={bad[0]} ({len(bad)} non-finite points" + \
        (", finite again afterwards)" if after else ", never recovers)")


def nan_masked_in_logs(pts, spec):
    m = [p["x"] for p in main_pts(pts) if p.get("masked")]
    if not m:
        return None
    p0 = next(p for p in pts if p.get("masked"))
    return m[0], {}, f"non-finite loss hidden by the logger from x={m[0]} (written as {fmt(p0['loss'])}; {len(m)} points masked)" + \
        (f"; grad norm at that point {fmt(p0.get('gnorm'))}" if "gnorm" in p0 else "")


def spikes(pts, ratio=3.0):
    s = series(main_pts(pts), "loss")
    ev = []
    for i in range(3, len(s)):
        prev = [v for _, v in s[max(0, i - 8):i] if F(v)]
        if len(prev) >= 3 and F(s[i][1]) and s[i][1] > ratio * st.median(prev) and s[i][1] - st.median(prev) > 0.05:
            # recovered afterwards?
            ev.append(s[i][0])
    return ev, s


def loss_spike(pts, spec):
    ev, s = spikes(pts)
    want = spec.get("bug", {}).get("steps")
    if not ev:
        return None
    if want:  # the spikes from the injected batches: logged points that cover an injected step
        ev2 = [x for x in ev if any(0 <= _to_step(x, spec) - w < spec.get("log_every", 10) + 1 for w in want)]
        ev = ev2 or ev
    vals = {x: v for x, v in s}
    return ev[0], {"event_steps": ev}, "loss spikes at x=" + ", ".join(f"{x} ({fmt(vals[x])})" for x in ev[:5])


def _to_step(x, spec):
    return x + spec.get("_x_off", 0)


def divergence(pts, spec):
    s = [(x, v) for x, v in series(main_pts(pts), "loss")]
    if len(s) < 6:
        return None
    # smoothed (rolling median of 5; non-finite counts as +inf)
    vals = [v if F(v) else float("inf") for _, v in s]
    sm = [st.median(vals[max(0, i - 2):i + 3]) for i in range(len(s))]
    i_min = min(range(len(sm)), key=lambda i: sm[i])
    vm = sm[i_min]
    k = max(2, len(s) // 5)
    tail = sm[-k:]
    if i_min >= len(s) - k or not (st.median(tail) > 1.5 * vm + 0.05):
        return None
    for i in range(i_min + 1, len(s)):
        if sm[i] > 1.5 * vm + 0.05:
            return s[i][0], {}, f"smoothed loss min {fmt(vm)} at x={s[i_min][0]}, above 1.5x that from x={s[i][0]}, last {fmt(s[-1][1])}"
    return None


def flat_loss(pts, spec):
    s = [v for _, v in series(main_pts(pts), "loss") if F(v)]
    if len(s) < 5:
        return None
    a = med(s[:max(1, len(s) // 10)])
    b = med(s[-max(1, len(s) // 5):])
    if b > 0.85 * a:
        return None, {}, f"loss median first 10% {fmt(a)}, last 20% {fmt(b)} (ratio {b / a:.2f})"
    return None


def plateau(pts, spec, strict=True):
    s = series(main_pts(pts), "loss")
    s = [(x, v) for x, v in s if F(v)]
    if len(s) < 6:
        return None
    at = spec.get("bug", {}).get("at")
    if at is not None:  # stops improving after an event at a known step
        before = [v for x, v in s if _to_step(x, spec) < at][-3:]
        after = [v for x, v in s if _to_step(x, spec) >= at]
        if before and after and min(after) > 0.9 * min(before):
            x0 = next(x for x, v in s if _to_step(x, spec) >= at)
            return x0, {}, f"loss {fmt(med(before))} before x={x0}, {fmt(med(after[-5:]))} at the end (no further progress)"
        return None
    k = max(1, len(s) // 10)
    sm = [med([v for _, v in s[max(0, i - 2):i + 3]]) for i in range(len(s))]
    a, z = sm[0], med([v for _, v in s[-k:]])
    drop = a - z
    if drop <= 0:
        return None
    r20 = next(s[i][0] for i in range(len(s)) if sm[i] - z <= 0.2 * drop)
    r05 = next(s[i][0] for i in range(len(s)) if sm[i] - z <= 0.05 * drop)
    if strict:  # a visible plateau: the loss stops improving in the first half and the second half is flat
        half = [v for _, v in s[len(s) // 2:]]
        i05 = [x for x, _ in s].index(r05)
        if i05 > 0.5 * len(s) or med(half[-max(2, len(half) // 3):]) < 0.93 * med(half[:max(2, len(half) // 3)]):
            return None
    return None, {"onset_range": [r20, r05]}, f"loss {fmt(a)} -> {fmt(z)}, within 20% of its final drop at x={r20}, 5% at x={r05}"


def overfitting(pts, spec, strict=True):
    v = series(main_pts(pts), "val_loss")
    v = [(x, y) for x, y in v if F(y)]
    if len(v) < 4:
        return None
    xm, ym = min(v, key=lambda t: t[1])
    after = [y for x, y in v if x > xm]
    if v[-1][1] < 1.1 * ym or v[-1][0] == xm:
        return None
    if strict and not (len([y for y in after if y > 1.05 * ym]) >= 2 and v[-1][1] > 1.2 * ym):
        return None
    hi = next((x for x, y in v if x > xm and y > 1.1 * ym), v[-1][0])
    tr = [y for _, y in series(main_pts(pts), "loss") if F(y)]
    return xm, {"onset_range": [xm, hi]}, f"val loss min {fmt(ym)} at x={xm}, last {fmt(v[-1][1])}; train loss {fmt(tr[0])} -> {fmt(tr[-1])}"


def exploding_gradients(pts, spec):
    s = [(x, v) for x, v in series(main_pts(pts), "gnorm")]
    if len(s) < 4:
        return None
    early = med([v for _, v in s[:3]])
    for x, v in s:
        if not F(v) or v > 10 * early or v > 1e3:
            return x, {}, f"grad norm early median {fmt(early)}, {fmt(v)} at x={x}, max {fmt(max((u for _, u in s if F(u)), default=float('nan')))}"
    return None


def vanishing_gradients(pts, spec):
    s = [(p["x"], p["g_first"], p["g_last"]) for p in main_pts(pts) if "g_first" in p]
    if not s:
        return None
    r = [(x, a / b if b > 0 else 0.0) for x, a, b in s]
    bad = [x for x, q in r if q < 0.01]
    if len(bad) < 0.8 * len(r):
        return None
    return bad[0], {}, f"first-layer/last-layer grad norm ratio {r[0][1]:.2e} at x={r[0][0]}, {r[-1][1]:.2e} at the end"


def _frac(key, name):
    def f(pts, spec):
        s = series(main_pts(pts), key)
        bad = [(x, v) for x, v in s if v > 0.5]
        if not bad:
            return None
        return bad[0][0], {}, f"{name} fraction {s[0][1]:.3f} at x={s[0][0]}, {s[-1][1]:.3f} at the end"
    return f


dead_units = _frac("dead", "dead ReLU")
saturated_activations = _frac("sat", "saturated")


def input_bound(pts, spec):
    s = [(p["x"], p["data_ms"] / p["step_ms"]) for p in main_pts(pts) if p.get("step_ms")]
    bad = [x for x, r in s if r > 0.5]
    if len(bad) < 0.3 * len(s):
        return None
    frm = spec["bug"].get("from", 1)
    onset = None if frm <= 1 else bad[0]
    return onset, {}, f"data time / step time median {med([r for _, r in s]):.2f}; > 0.5 from x={bad[0]}"


def step_time_outliers(pts, spec, ratio=4.0):
    s = series(main_pts(pts), "step_ms")
    ev = []
    for i in range(3, len(s)):
        prev = [v for _, v in s[max(0, i - 8):i]]
        if s[i][1] > ratio * st.median(prev) and s[i][1] - st.median(prev) > 5:
            ev.append(s[i][0])
    if not ev:
        return None
    return ev[0], {"event_steps": ev[:20]}, f"step-time outliers at x={ev[:6]} (median {fmt(med([v for _, v in s]))} ms, max {fmt(max(v for _, v in s))} ms)"


def throughput_regression(pts, spec, ratio=1.5):
    s = [v for _, v in series(main_pts(pts), "step_ms")]
    k = max(2, len(s) // 10)
    a, b = med(s[:k]), med(s[-k:])
    if b < ratio * a:
        return None
    return None, {}, f"median step time first 10% {a:.2f} ms, last 10% {b:.2f} ms"


def memory_growth(pts, spec, mb=50):
    s = series(main_pts(pts), "mem_mb")
    if not s:
        return None
    g = s[-1][1] - s[0][1]
    if g < mb:
        return None
    return None, {}, f"RSS {s[0][1]:.0f} MB -> {s[-1][1]:.0f} MB (+{g:.0f} MB)"


def straggler(pts, spec):
    r0 = [p for p in pts if p.get("rank") == 0]
    r1 = [p for p in pts if p.get("rank") == 1]
    if not r1:
        return None
    flags = [(a["x"], b["fwd_ms"] > 1.5 * a["fwd_ms"] and a["wait_ms"] > 2) for a, b in zip(r0, r1)]
    if sum(f for _, f in flags) < 3:
        return None
    # onset: first point from which at least 90% of the remaining points show the slow rank
    bad = [x for i, (x, f) in enumerate(flags) if f and sum(g for _, g in flags[i:]) >= 0.9 * (len(flags) - i)]
    if not bad:
        return None
    frm = spec["bug"].get("from", 1)
    onset = None if frm <= 1 else bad[0]
    return onset, {}, (f"rank1 compute {med([p['fwd_ms'] for p in r1[-5:]]):.1f} ms vs rank0 "
                       f"{med([p['fwd_ms'] for p in r0[-5:]]):.1f} ms; rank0 waits {med([p['wait_ms'] for p in r0[-5:]]):.1f} ms; from x={bad[0]}")


def loss_scale_collapse(pts, spec):
    s = series(main_pts(pts), "scale")
    if not s or min(v for _, v in s) >= 1:
        return None
    mx = 0
    for x, v in s:
        mx = max(mx, v)
        if v < mx / 1000:
            return x, {}, f"loss scale max {mx:g}, {v:g} at x={x}, last {s[-1][1]:g}"
    return None


def resume_discontinuity(pts, spec):
    s = [p["x"] for p in main_pts(pts)]
    for i in range(1, len(s)):
        if s[i] <= s[i - 1]:
            return s[i], {"event_steps": [s[i - 1]]}, f"x goes back from {s[i - 1]} to {s[i]} at line/point {i + 1}"
    return None


def lr_schedule_anomaly(pts, spec):
    s = series(main_pts(pts), "lr")
    kind = spec["bug"]["kind"]
    peak = spec["lr"]
    if kind == "warmup_never":
        mx = max(v for _, v in s)
        if s[-1][1] >= 0.99 * mx and mx < 0.5 * peak:
            return None, {}, f"lr still rising at the end: {s[0][1]:.3g} -> {s[-1][1]:.3g} (configured peak {peak:g})"
        return None
    # collapse to ~0 long before the end of the run, or a drop to 0 at a resume
    n = len(s)
    for i, (x, v) in enumerate(s):
        if v <= 1e-3 * peak and i < 0.9 * n and all(u <= 1e-3 * peak for _, u in s[i:]):
            prev = s[i - 1][1] if i else float("nan")
            return x, {}, f"lr {prev:.3g} -> {v:.3g} at x={x} and stays there ({n - i} of {n} logged points)"
    return None


LOCATORS = {k: v for k, v in globals().items() if k in (
    "nonfinite_loss", "nan_masked_in_logs", "loss_spike", "divergence", "flat_loss", "plateau", "overfitting",
    "exploding_gradients", "vanishing_gradients", "dead_units", "saturated_activations", "input_bound",
    "step_time_outliers", "throughput_regression", "memory_growth", "straggler", "loss_scale_collapse",
    "resume_discontinuity", "lr_schedule_anomaly")}


def grad_accum_misnormalization(pts, spec):
    s = [(p["x"], p["loss"], p.get("val_loss")) for p in main_pts(pts)]
    k = spec.get("accum", 1)
    frm = spec["bug"].get("from", 1)
    if frm <= 1:
        r = [l / v for _, l, v in s if v and F(l) and F(v)]
        if r and med(r) > 0.6 * k:
            return None, {}, f"train loss / val loss median ratio {med(r):.2f} (accumulation k={k})"
        return None
    before = [l for x, l, _ in s if _to_step(x, spec) < frm][-5:]
    after = [(x, l) for x, l, _ in s if _to_step(x, spec) >= frm]
    if before and after and med([l for _, l in after[:5]]) > 0.6 * k * med(before):
        return after[0][0], {}, f"logged loss {fmt(med(before))} before x={after[0][0]}, {fmt(med([l for _, l in after[:5]]))} after (k={k})"
    return None


LOCATORS["grad_accum_misnormalization"] = grad_accum_misnormalization
LOCATORS["oscillation"] = lambda pts, spec: None  # only labelled by hand-checked rule below


# ------------------------------------------------------------------ auto tolerated readings
def auto_tolerated(pts, spec, labelled):
    tol = []
    checks = [("step_time_outliers", lambda: step_time_outliers(pts, spec, 3.0)),
              ("loss_spike", lambda: (spikes(pts, 2.5)[0] or None)),
              ("overfitting", lambda: overfitting(pts, spec, False)),
              ("memory_growth", lambda: memory_growth(pts, spec, 20)),
              ("throughput_regression", lambda: throughput_regression(pts, spec, 1.25)),
              ("exploding_gradients", lambda: exploding_gradients(pts, spec)),
              ("flat_loss", lambda: flat_loss(pts, spec)),
              ("plateau", lambda: plateau(pts, dict(spec, bug={}), False) if spec["steps"] <= 150 else None)]
    for name, fn in checks:
        if name in labelled:
            continue
        try:
            r = fn()
        except Exception:  # noqa: BLE001
            r = None
        if r:
            tol.append(name)
    return tol
