"""Derive labels from the LOGGED series (canonical rows returned by a writer).

Each spec carries `expect`: a list of (symptom, rule) pairs, where the rule says
how to locate the onset in the logged numbers; if the rule finds nothing the
symptom is dropped and the notes say the bug was not visible."""
import math
import statistics as st


def fin(v):
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def ser(rows, key):
    return [(r["x"], r.get(key)) for r in rows if r.get(key) is not None or key == "loss"]


def med(v):
    v = [a for a in v if fin(a)]
    return st.median(v) if v else float("nan")


def x_of_step(rows, step, seg=0):
    """x of the logged row whose averaging window contains `step` (or the next one)."""
    for r in rows:
        if r.get("segment", 0) != seg:
            continue
        lo, hi = r.get("window", (r["step"], r["step"]))
        if step <= hi:
            return r["x"]
    return rows[-1]["x"]


def f3(v):
    if v is None:
        return "None"
    if not math.isfinite(v):
        return str(v)
    return f"{v:.4g}"


class Ctx:
    def __init__(self, spec, rec, rows, evs, unit, masked):
        self.spec, self.rec, self.rows, self.evs, self.unit, self.masked = spec, rec, rows, evs, unit, masked
        self.notes = []

    def vals(self, key):
        return [(r["x"], r[key]) for r in self.rows if r.get(key) is not None]


def r_nonfinite(c, key="loss"):
    src = c.evs if key == "val_loss" else c.rows
    prev = None
    for r in src:
        v = r.get(key)
        if v is not None and not math.isfinite(v):
            c.notes.append(f"{key} first non-finite ({v}) at x={r['x']}; last finite value before: {f3(prev)}")
            return dict(onset_step=r["x"])
        if fin(v):
            prev = v
    return None


def r_nf_events(c, key):
    ev = [x for x, a in c.vals(key) if not math.isfinite(a)]
    if not ev:
        return None
    c.notes.append(f"{key} non-finite at {len(ev)} logged points x={ev[:15]}{'...' if len(ev) > 15 else ''}; loss stays finite: "
                   f"{all(fin(a) for _, a in c.vals('loss'))}")
    return dict(onset_step=ev[0], event_steps=ev)


def r_masked(c):
    if not c.masked:
        return None
    mode = c.spec["mask"]
    c.notes.append(f"logger hid {len(c.masked)} non-finite loss values (mode={mode}: "
                   f"{'written as 0.0' if mode == 'zero' else 'previous value repeated' if mode == 'prev' else 'entries dropped'}) from x={c.masked[0]}")
    return dict(onset_step=c.masked[0])


def r_grow(c, key, factor):
    v = c.vals(key)
    if not v:
        return None
    n0 = max(3, len(v) // 10)
    base = med([a for _, a in v[:n0]])
    for x, a in v:
        if not fin(a) or a > factor * base:
            c.notes.append(f"{key}: early median {f3(base)}, exceeds {factor}x at x={x} (value {f3(a)}); max finite {f3(max([b for _, b in v if fin(b)], default=None))}")
            return dict(onset_step=x)
    return None


def r_spikes(c, key, factor, absmin=0.0):
    v = c.vals(key)
    ev = []
    if absmin:
        fv = [a for _, a in v if fin(a)]
        absmin = absmin * (fv[0] - min(fv)) if fv else 0.0
    for i, (x, a) in enumerate(v):
        nb = [b for _, b in v[max(0, i - 8):i]]  # causal: the recent past only
        if len(nb) < 3:
            continue
        m = med(nb)
        if fin(a) and fin(m) and a > factor * m and a - m > max(1e-6, absmin):
            ev.append(x)
    if not ev:
        return None
    c.notes.append(f"{key} spikes >{factor}x local median at x={ev[:12]}{'...' if len(ev) > 12 else ''} ({len(ev)} events)")
    return dict(onset_step=ev[0], event_steps=ev)


def r_inject_events(c, field, key, factor):
    """events = logged x whose window covers an injected step and where `key` is visibly high."""
    steps = c.spec["ba"][field]
    steps = steps if isinstance(steps, (list, tuple)) else [steps]
    v = c.vals(key)
    ev = []
    for s in steps:
        x = x_of_step(c.rows, s)
        i = [k for k, (xx, _) in enumerate(v) if xx == x]
        if not i:
            continue
        i = i[0]
        nb = [b for _, b in v[max(0, i - 6):i] + v[i + 1:i + 7]]
        if fin(v[i][1]) and v[i][1] > factor * med(nb):
            ev.append(x)
    if not ev:
        c.notes.append(f"injected {field} at steps {steps} not visible in logged {key}")
        return None
    c.notes.append(f"{key} visibly high (>{factor}x neighbours) at x={ev} (injected at steps {steps})")
    return dict(onset_step=ev[0], event_steps=ev)


def r_inject(c, field, key=None, ratio=None):
    """onset at the injected step; optionally verify that key changes by `ratio`."""
    s = c.spec["ba"][field]
    x = x_of_step(c.rows, s)
    if key:
        v = c.vals(key)
        before = med([a for xx, a in v if xx < x][-8:])
        after = med([a for xx, a in v if xx > x][:8])
        c.notes.append(f"{key}: median {f3(before)} before x={x}, {f3(after)} after (injected at step {s})")
        if ratio and not (after > ratio * before or (ratio < 1 and after < ratio * before)):
            c.notes.append("change below visibility threshold")
            return None
    return dict(onset_step=x)


def r_threshold(c, key, op, thr):
    for x, a in c.vals(key):
        if a is not None and ((op == ">" and a > thr) or (op == "<" and a < thr)):
            vv = [b for _, b in c.vals(key)]
            c.notes.append(f"{key} {op} {thr} first at x={x} (value {f3(a)}); range {f3(min(vv))}..{f3(max(vv))}")
            return dict(onset_step=x)
    return None


def r_overfit(c):
    ev = [(e["x"], e["val_loss"]) for e in c.evs if fin(e.get("val_loss"))] or \
         [(r["x"], r["val_loss"]) for r in c.rows if fin(r.get("val_loss"))]
    if len(ev) < 3:
        return None
    i = min(range(len(ev)), key=lambda k: ev[k][1])
    xm, vm = ev[i]
    later = [(x, v) for x, v in ev[i + 1:] if v > 1.1 * vm]
    if not later:
        c.notes.append(f"val_loss min {f3(vm)} at x={xm} never rises 10% above min")
        return None
    tr = [a for _, a in c.vals("loss") if fin(a)]
    c.notes.append(f"val_loss min {f3(vm)} at x={xm}, {f3(ev[-1][1])} at end; train loss {f3(tr[0])} -> {f3(tr[-1])}")
    return dict(onset_step=xm, onset_range=[xm, later[0][0]])


def r_flat(c):
    v = [a for _, a in c.vals("loss") if fin(a)]
    n0 = max(3, len(v) // 10)
    a, b = med(v[:n0]), med(v[-max(3, len(v) // 5):])
    c.notes.append(f"loss median first 10% {f3(a)}, last 20% {f3(b)} (ratio {b / a:.3f})")
    return dict(onset_step=None) if b > 0.85 * a else None


def r_plateau(c):
    v = [(x, a) for x, a in c.vals("loss") if fin(a)]
    sm = [(v[i][0], med([a for _, a in v[max(0, i - 2):i + 3]])) for i in range(len(v))]
    first, final = sm[0][1], med([a for _, a in sm[-max(3, len(sm) // 5):]])
    drop = first - final
    if drop <= 0:
        return None
    x1 = next(x for x, a in sm if a <= final + 0.2 * drop)
    x2 = next(x for x, a in sm if a <= final + 0.05 * drop)
    c.notes.append(f"loss {f3(first)} -> stalls at {f3(final)} (within 20% of remaining drop by x={x1}, 5% by x={x2})")
    return dict(onset_step=x1, onset_range=[x1, max(x1, x2)])


def r_fixed(c, res, why):
    """onset read off the logged series by hand (series are deterministic under the fixed seeds)."""
    c.notes.append(why)
    return dict(res)


def r_accum_ratio(c, k):
    tr = {r["x"]: r["loss"] for r in c.rows if fin(r.get("loss"))}
    rat = [tr[e["x"]] / e["val_loss"] for e in c.evs if e["x"] in tr and fin(e.get("val_loss")) and e["val_loss"] > 0]
    if not rat:
        return None
    m = med(rat)
    c.notes.append(f"logged train loss / eval loss at the same step: median {m:.2f} over {len(rat)} evals "
                   f"(train loss is the sum of {k} micro-batch losses; dropout makes the train-mode loss a bit higher)")
    return dict(onset_step=None) if m > 2.0 else None


def r_null(c, why=""):
    if why:
        c.notes.append(why)
    return dict(onset_step=None)


def r_first(c, why=""):
    c.notes.append(why or f"present from the first logged point x={c.rows[0]['x']}")
    return dict(onset_step=c.rows[0]["x"])


def r_lr(c, mode):
    v = c.vals("lr")
    lr0 = v[0][1]
    if mode == "drop":
        x1 = next((x for x, a in v if a < 0.5 * lr0), None)
        x2 = next((x for x, a in v if a < 1e-3 * lr0), None)
        if x1 is None:
            return None
        c.notes.append(f"lr {f3(lr0)} halves by x={x1}, < 1e-3x by x={x2}; final {f3(v[-1][1])}")
        return dict(onset_step=x1, onset_range=[x1, x2 if x2 is not None else x1])
    x1 = next((x for x, a in v if a > 1.5 * lr0), None)
    x2 = next((x for x, a in v if a > 4 * lr0), None)
    if x1 is None:
        return None
    c.notes.append(f"lr rises {f3(lr0)} -> {f3(v[-1][1])}; >1.5x at x={x1}, >4x at x={x2}")
    return dict(onset_step=v[0][0], onset_range=[v[0][0], x2 if x2 is not None else x1])


def r_segment(c):
    rs = c.rows
    for i in range(1, len(rs)):
        if rs[i].get("segment", 0) != rs[i - 1].get("segment", 0):
            c.notes.append(f"x goes {rs[i - 1]['x']} -> {rs[i]['x']} (loss {f3(rs[i - 1]['loss'])} -> {f3(rs[i]['loss'])})")
            return dict(onset_step=rs[i]["x"], event_steps=[rs[i - 1]["x"], rs[i]["x"]])
    return None


def r_rank(c, from_field=None):
    per = c.rec.get("_per_rank")
    x0 = x_of_step(c.rows, c.spec["ba"][from_field]) if from_field else c.rows[0]["x"]
    pre = [med([r["fwd_bwd_ms"] for r in per[k] if r["x"] < x0]) for k in range(2)] if from_field else None
    a = med([r["fwd_bwd_ms"] for r in per[0] if r["x"] >= x0])
    b = med([r["fwd_bwd_ms"] for r in per[1] if r["x"] >= x0])
    w = med([r["wait_ms"] for r in per[0] if r["x"] >= x0])
    c.notes.append(f"from x={x0}: median fwd_bwd_ms rank0 {a:.2f} vs rank1 {b:.2f}, rank0 median wait_ms {w:.2f}"
                   + (f"; before x={x0}: rank0 {pre[0]:.2f} vs rank1 {pre[1]:.2f}" if pre else ""))
    if not b > 2 * a:
        return None
    return dict(onset_step=x0 if from_field else None)


def r_input(c, from_field=None):
    x0 = x_of_step(c.rows, c.spec["ba"][from_field]) if from_field else c.rows[0]["x"]
    d = med([r["data_ms"] for r in c.rows if r["x"] >= x0])
    t = med([r["step_ms"] for r in c.rows if r["x"] >= x0])
    pre = med([r["data_ms"] / r["step_ms"] for r in c.rows if r["x"] < x0]) if from_field else None
    c.notes.append(f"from x={x0}: median data time {d:.2f} ms of {t:.2f} ms per step ({100 * d / t:.0f}%)"
                   + (f"; before: {100 * pre:.0f}% of the step" if pre is not None else ""))
    if d < 0.5 * t:
        return None
    return dict(onset_step=x0 if from_field else None)


def r_creep(c, key="step_ms"):
    v = c.vals(key)
    n0 = max(3, len(v) // 10)
    a, b = med([x for _, x in v[:n0]]), med([x for _, x in v[-n0:]])
    c.notes.append(f"{key} median first 10% {a:.2f}, last 10% {b:.2f} (x{b / a:.1f})")
    if b < 1.5 * a:
        return None
    x1 = next(x for x, t in v if t > 1.5 * a)
    return dict(onset_step=None) if x1 - v[0][0] < 0.3 * (v[-1][0] - v[0][0]) else dict(onset_step=x1)


def r_mem(c, field=None):
    v = c.vals("rss_mb")
    c.notes.append(f"RSS {v[0][1]:.0f} MB at x={v[0][0]} -> {v[-1][1]:.0f} MB at x={v[-1][0]}")
    if v[-1][1] - v[0][1] < 80:
        return None
    return r_inject(c, field) if field else dict(onset_step=None)


RULES = dict(accum_ratio=r_accum_ratio, input=r_input, fixed=r_fixed, nonfinite=r_nonfinite, nf_events=r_nf_events, masked=r_masked, grow=r_grow, spikes=r_spikes, inj_events=r_inject_events,
             inject=r_inject, threshold=r_threshold, overfit=r_overfit, flat=r_flat, plateau=r_plateau, null=r_null,
             first=r_first, lr=r_lr, segment=r_segment, rank=r_rank, creep=r_creep, mem=r_mem)


def sanity(spec, rec, rows, evs, unit, masked):
    """Independent checks printed during the build (not written to labels)."""
    c = Ctx(spec, rec, rows, evs, unit, masked)
    warn = []
    for nm, fn, args in (("overfit", r_overfit, ()), ("nonfinite", r_nonfinite, ()), ("flat", r_flat, ()),
                         ("spike", r_spikes, ("loss", 4.0, 0.25)), ("gn_grow", r_grow, ("grad_norm", 20.0)),
                         ("steptime", r_spikes, ("step_ms", 6.0))):
        try:
            if fn(c, *args) is not None:
                warn.append(nm)
        except (StopIteration, ValueError, ZeroDivisionError, TypeError):
            pass
    return warn


def label(spec, rec, rows, evs, unit, masked):
    c = Ctx(spec, rec, rows, evs, unit, masked)
    lv = [a for _, a in c.vals("loss") if fin(a)]
    c.notes.append(f"x-axis: {unit}; {len(rows)} logged train points x={rows[0]['x']}..{rows[-1]['x']}")
    if lv:
        c.notes.append(f"loss first {f3(lv[0])}, min {f3(min(lv))}, last finite {f3(lv[-1])}")
    ve = [e["val_loss"] for e in evs if fin(e.get("val_loss"))] or [r["val_loss"] for r in rows if fin(r.get("val_loss"))]
    if ve:
        c.notes.append(f"val_loss first {f3(ve[0])}, min {f3(min(ve))}, last {f3(ve[-1])}")
    faults = []
    for sym, rule, *args in spec.get("expect", []):
        res = RULES[rule](c, *args)
        if res is None:
            c.notes.append(f"expected {sym} ({rule}) NOT visible -> not labelled")
            continue
        faults.append(dict(symptom=sym, **res))
    if spec["bug"] != "none" and not faults:
        c.notes.append(f"injected bug '{spec['bug']}' left no visible symptom in the log; labelled healthy")
    tol = [dict(symptom=s, onset_step=None) for s in spec.get("tolerate", [])]
    have = {f["symptom"] for f in faults} | {t["symptom"] for t in tol}
    c3 = Ctx(spec, rec, rows, evs, unit, masked)
    if "overfitting" not in have and r_overfit(c3) is not None:
        tol.append(dict(symptom="overfitting", onset_step=None))
        c.notes.append("tolerated overfitting: " + c3.notes[-1])
    c4 = Ctx(spec, rec, rows, evs, unit, masked)
    if "loss_spike" not in have and r_spikes(c4, "loss", 4.0, 0.25) is not None:
        tol.append(dict(symptom="loss_spike", onset_step=None))
        c.notes.append("tolerated loss_spike: " + c4.notes[-1])
    if not any(s in ("step_time_outliers", "input_bound", "straggler", "throughput_regression") for s, *_ in spec.get("expect", [])):
        c2 = Ctx(spec, rec, rows, evs, unit, masked)
        if c.vals("step_ms") and r_spikes(c2, "step_ms", 6.0) is not None:
            tol.append(dict(symptom="step_time_outliers", onset_step=None))
            c.notes.append("tolerated step_time_outliers: logged step time has isolated OS-noise spikes (" + c2.notes[-1] + ")")
    if spec.get("why"):
        c.notes.append(spec["why"])
    return dict(split=spec["split"], family=spec["family"], fault=spec["bug"], format=spec["fmt"],
                faults=faults, tolerated=tol, notes="; ".join(c.notes))
