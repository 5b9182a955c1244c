"""Console-style log writers (Ignite, mmengine, nanoGPT, logging module, tqdm)
and the per-rank writer for the two-rank runs."""
import datetime as dt
import math
from writers import _w, g, ts, w_jsonl, w_csv, fin


def _evs_after(rows, evs):
    """map training-row index -> evals written right after it (time order)."""
    out = {}
    for e in evs:
        for i, r in enumerate(rows):
            if r["x"] == e["x"] and r.get("segment", 0) == e.get("segment", 0):
                out.setdefault(i, []).append(e)
                break
    return out


def w_ignite(rec, spec, d, rows, evs):
    after, out, spe = _evs_after(rows, evs), [], rec["spe"]
    for i, r in enumerate(rows):
        if r["loss"] is not None:
            out.append(f"Epoch[{int((r['x'] - 1) // spe) + 1}] Iteration[{r['x']}] Loss: {g(r['loss'], '{:.4f}')}")
        for e in after.get(i, []):
            acc = f"Avg accuracy: {e['val_acc']:.4f} " if "val_acc" in e else ""
            out.append(f"Validation Results - Epoch: {int((e['x'] - 1) // spe) + 1}  {acc}Avg loss: {g(e['val_loss'], '{:.4f}')}")
    _w(f"{d}/train.log", "\n".join(out) + "\n")
    return "Ignite engine.state.iteration (global)"


def w_mmengine(rec, spec, d, rows, evs):
    after, out, T = _evs_after(rows, evs), [], spec["steps"]
    W = len(str(T))
    for i, r in enumerate(rows):
        t = ts(r, spec["seed"]).strftime("%Y/%m/%d %H:%M:%S")
        eta = dt.timedelta(seconds=int(max(0, T - r["x"]) * r["step_ms"] / 1000))
        s = (f"{t} - mmengine - INFO - Iter(train) [{r['x']:>{W}}/{T}]  base_lr: {spec['lr']:.4e} lr: {r['lr']:.4e}  "
             f"eta: {eta}  time: {r['step_ms'] / 1000:.4f}  data_time: {r['data_ms'] / 1000:.4f}  memory: {int(r['rss_mb'])}  ")
        if r.get("grad_norm") is not None:
            s += f"grad_norm: {g(r['grad_norm'])}  "
        if r["loss"] is not None:
            s += f"loss: {g(r['loss'])}"
        out.append(s.rstrip())
        for e in after.get(i, []):
            nv = max(1, 512 // 64)
            acc = f"accuracy/top1: {100 * e['val_acc']:.4f}  " if "val_acc" in e else ""
            out.append(f"{t} - mmengine - INFO - Iter(val) [{nv}/{nv}]    {acc}loss: {g(e['val_loss'])}  data_time: 0.0012  time: 0.0051")
            out.append(f"{t} - mmengine - INFO - Saving checkpoint at {e['x']} iterations")
    _w(f"{d}/{dt.datetime(2024, 5, 1).strftime('%Y%m%d')}_120000/{dt.datetime(2024, 5, 1).strftime('%Y%m%d')}_120000.log", "\n".join(out) + "\n")
    return "mmengine Iter(train) counter"


def w_nanogpt(rec, spec, d, rows, evs):
    after, out = _evs_after(rows, evs), []
    for i, r in enumerate(rows):
        for e in after.get(i, []):
            out.append(f"step {e['x']}: train loss {g(r['loss'])}, val loss {g(e['val_loss'])}")
        if r["loss"] is not None:
            mfu = 0.012 * 20.0 / max(r["step_ms"], 1e-3)
            out.append(f"iter {r['x']}: loss {g(r['loss'])}, time {r['step_ms']:.2f}ms, mfu {100 * mfu:.2f}%")
    _w(f"{d}/out.txt", "\n".join(out) + "\n")
    return "nanoGPT iter number"


def w_logging(rec, spec, d, rows, evs, fname="train.log", rank=None):
    after, out = _evs_after(rows, evs), []
    P = spec.get("kv", ("step", "loss", "lr", "grad_norm", "step_time"))
    who = spec.get("logger", "INFO")
    for i, r in enumerate(rows):
        t = ts(r, spec["seed"])
        stamp = t.strftime("%Y-%m-%d %H:%M:%S") + f",{t.microsecond // 1000:03d}"
        if r["loss"] is None:  # logger skipped the line
            continue
        s = f"{stamp} {who} {P[0]}={r['x']} {P[1]}={g(r['loss'])} {P[2]}={r['lr']:.3e}"
        if r.get("grad_norm") is not None:
            s += f" {P[3]}={g(r['grad_norm'])}"
        s += f" {P[4]}={r['step_ms'] / 1000:.4f}s"
        if "fwd_bwd_ms" in r:
            s += f" fwd_bwd={r['fwd_bwd_ms']:.1f}ms wait={r['wait_ms']:.1f}ms"
        if spec.get("log_mem"):
            s += f" mem={r['rss_mb']:.0f}MB"
        if "data_ms" in r and spec.get("log_data"):
            s += f" data_time={r['data_ms'] / 1000:.4f}s"
        out.append(s)
        for e in after.get(i, []):
            acc = f" val_acc={e['val_acc']:.4f}" if "val_acc" in e else ""
            out.append(f"{stamp} {who} eval {P[0]}={e['x']} val_{P[1]}={g(e['val_loss'])}{acc}")
    _w(f"{d}/{fname}", "\n".join(out) + "\n")
    return f"'{P[0]}=' field"


def _bar(n, T, width=10):
    frac = n / T
    full = int(frac * width)
    parts = " ▏▎▍▌▋▊▉"
    rem = int((frac * width - full) * 8)
    s = "█" * full + (parts[rem] if full < width else "")
    return s.ljust(width)


def _hms(sec):
    sec = int(sec)
    return f"{sec // 60:02d}:{sec % 60:02d}" if sec < 3600 else f"{sec // 3600}:{sec % 3600 // 60:02d}:{sec % 60:02d}"


def w_tqdm(rec, spec, d, rows, evs):
    after, T = _evs_after(rows, evs), spec["steps"]
    buf = f"train:   0%|          | 0/{T} [00:00<?, ?it/s]"
    for i, r in enumerate(rows):
        rate = 1000.0 / max(r["step_ms"], 1e-6)
        el, rem = r["time"], (T - r["x"]) / rate
        post = f"loss={g(r['loss'], '{:.3f}')}" if r["loss"] is not None else ""
        if spec.get("tq_lr"):
            post += f", lr={r['lr']:.2e}"
        buf += f"\rtrain: {int(100 * r['x'] / T):3d}%|{_bar(r['x'], T)}| {r['x']}/{T} [{_hms(el)}<{_hms(rem)}, {rate:.2f}it/s, {post}]"
        for e in after.get(i, []):
            buf += f"\n[eval] step {e['x']}: val_loss={g(e['val_loss'], '{:.4f}')}" + (f" acc={e['val_acc']:.3f}" if "val_acc" in e else "") + "\n"
    _w(f"{d}/stdout.log", buf + "\n")
    return "tqdm counter n (global step)"


RANK_FMT = {"jsonl": w_jsonl, "logging": w_logging, "csv": w_csv}


def w_ranks(rec, spec, d, rows, evs):
    """Two per-rank logs.  Each rank logs its own shard loss and own compute time;
    the collective makes the wall step equal on both ranks."""
    base = spec.get("rank_base", "jsonl")
    per = []
    for rk in range(2):
        rr = []
        for r in rows:
            c = dict(r)
            own, slow = r["rank_ms"][rk], max(r["rank_ms"])
            c["loss"] = r["rank_loss"][rk] if fin(r["loss"]) else r["loss"]
            c["fwd_bwd_ms"], c["wait_ms"] = own, slow - own
            rr.append(c)
        ev = evs if rk == 0 else []
        if base == "jsonl":
            w_jsonl(rec, spec, d, rr, ev, fname=f"rank{rk}/metrics.jsonl")
        elif base == "csv":
            w_csv(rec, spec, d, rr, ev, fname=f"logs_rank{rk}.csv")
        else:
            w_logging(rec, spec, d, rr, ev, fname=f"node0.rank{rk}.log")
        per.append(rr)
    rows[:] = per[0]
    rec["_per_rank"] = per
    return "global step (both ranks)"
