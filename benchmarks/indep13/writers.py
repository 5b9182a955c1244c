"""indep13: one writer per log format. Each writes the on-disk layout of the imitated tool and returns the series
exactly as logged: {"unit": x unit, "loss": [(x, v)], "val": [...], "lr", "gn", "st" (s), "dt" (s), "rss" (MB),
"scale", "dead", "sat", "gfirst", "glast", "rank": {r: {"compute": [...], "wait": [...]}}, "hidden": [x of
points where the logger hid a NaN], "agg": how the loss was aggregated}."""
import json
import math
import os
import random
import time

T0 = 1764666000.0  # 2025-12-02 09:00:00 UTC


def ts(rec):
    return T0 + rec["wall"] + (75.0 if rec.get("seg") else 0.0)


def fin(v):
    return v is not None and math.isfinite(v)


def mean(v):
    return sum(v) / len(v) if v else None


def median(v):
    if not v:
        return None
    if any(not math.isfinite(x) for x in v):
        return float("nan")
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


FIELDS = ("loss", "gn", "st", "dt", "rss", "gfirst", "glast", "dead", "sat", "acc")


def windows(recs, every, how="mean"):
    """Rows at steps that are multiples of `every`; loss etc. aggregated over the records since the last row
    (a restart clears the window). lr and loss scale are the current values."""
    out, buf, seg = [], [], 0
    for r in recs:
        if r["seg"] != seg:
            buf, seg = [], r["seg"]
        buf.append(r)
        if r["step"] % every == 0:
            row = {"step": r["step"], "rec": r, "lr": r["lr"], "scale": r["scale"], "seg": r["seg"], "n": len(buf)}
            for f in FIELDS:
                vals = [b[f] for b in buf if b.get(f) is not None]
                if how == "last":
                    row[f] = vals[-1] if vals else None
                elif how == "median":
                    row[f] = median(vals)
                else:
                    row[f] = mean(vals)
            if "ranks" in r:
                row["ranks"] = [{k: mean([b["ranks"][i][k] for b in buf]) for k in ("compute", "fwd", "bwd", "wait")} for i in range(len(r["ranks"]))]
            out.append(row)
            buf = []
    return out


def epochs(recs, bpe):
    out = {}
    for r in recs:
        e = (r["step"] - 1) // bpe
        out.setdefault(e, []).append(r)
    rows = []
    for e, rs in sorted(out.items()):
        row = {"epoch": e, "step": rs[-1]["step"], "rec": rs[-1], "lr": rs[-1]["lr"], "n": len(rs)}
        for f in FIELDS:
            vals = [b[f] for b in rs if b.get(f) is not None]
            row[f] = mean(vals)
        row["dur"] = sum(b["st"] for b in rs)
        rows.append(row)
    return rows


def resumed_at(res):
    """{segment: the step count restored at that restart} (the step before the segment's first record)."""
    out = {}
    for r in res["recs"]:
        out.setdefault(r["seg"], r["step"] - 1)
    return out


def series(unit, agg):
    return {"unit": unit, "agg": agg, "loss": [], "val": [], "lr": [], "gn": [], "st": [], "dt": [], "rss": [],
            "scale": [], "dead": [], "sat": [], "gfirst": [], "glast": [], "rank": {}, "hidden": []}


def add(S, key, x, v):
    if v is not None:
        S[key].append((x, float(v)))


def mask_value(loss, mode, prev):
    """What a NaN-hiding logger writes. Returns (value, hidden)."""
    if fin(loss) or not mode:
        return loss, False
    if mode == "zero":
        return 0.0, True  # torch.nan_to_num(loss) before logging
    if mode == "prev":
        return prev if prev is not None else 0.0, True  # "if not finite: keep the last good value"
    raise ValueError(mode)


def fmt_g(v, nd=4):
    return "nan" if v is not None and not math.isfinite(v) else f"{v:.{nd}f}"


# ---------------------------------------------------------------------------------------------------- hf
def w_hf(d, res, cfg):
    S = series("step", "window mean (4 decimals), HF logging_nan_inf_filter")
    every = cfg["every"]
    bpe = res["bpe"]
    hist = []
    tr_loss, last_logged, nsteps = 0.0, 0, 0
    evals = {e["step"]: e for e in res["evals"]}
    for r in res["recs"]:
        s = r["step"]
        nsteps += 1
        if fin(r["loss"]):
            tr_loss += r["loss"]
            hid = False
        else:
            tr_loss += tr_loss / nsteps if nsteps > 1 else 0.0  # HF: tr_loss / (1 + global_step - _globalstep_last_logged)
            hid = True
            pending_hidden = True
        if hid:
            S.setdefault("_pending", True)
        if s % every == 0:
            v = round(tr_loss / nsteps, 4)
            ep = round(s / bpe, 4)
            gn = r["gn"]
            hist.append({"epoch": ep, "grad_norm": gn, "learning_rate": r["lr"], "loss": v, "step": s})
            add(S, "loss", s, v)
            add(S, "gn", s, gn)
            add(S, "lr", s, r["lr"])
            if S.pop("_pending", False):
                S["hidden"].append(s)
            tr_loss, nsteps = 0.0, 0
        if s in evals:
            e = evals[s]
            hist.append({"epoch": round(s / bpe, 4), "eval_loss": e["val"], "eval_runtime": 0.0521,
                         "eval_samples_per_second": 7677.5, "eval_steps_per_second": 19.194, "step": s})
            add(S, "val", s, e["val"])
    last = res["recs"][-1]
    tot = sum(r["st"] for r in res["recs"])
    hist.append({"epoch": round(last["step"] / bpe, 4), "step": last["step"], "total_flos": 0.0,
                 "train_loss": mean([r["loss"] for r in res["recs"]]), "train_runtime": round(tot, 4),
                 "train_samples_per_second": round(len(res["recs"]) * res["bs"] / tot, 3), "train_steps_per_second": round(len(res["recs"]) / tot, 3)})
    st = {"best_metric": None, "best_model_checkpoint": None, "epoch": round(last["step"] / bpe, 4), "eval_steps": cfg.get("eval_every", 50),
          "global_step": last["step"], "is_hyper_param_search": False, "is_local_process_zero": True, "is_world_process_zero": True,
          "log_history": hist, "logging_steps": every, "max_steps": cfg["steps"], "num_input_tokens_seen": 0,
          "num_train_epochs": math.ceil(cfg["steps"] / bpe), "save_steps": last["step"],
          "stateful_callbacks": {"TrainerControl": {"args": {"should_epoch_stop": False, "should_evaluate": False, "should_log": False,
                                                             "should_save": True, "should_training_stop": True}, "attributes": {}}},
          "total_flos": 0.0, "train_batch_size": res["bs"], "trial_name": None, "trial_params": None}
    p = os.path.join(d, f"checkpoint-{last['step']}")
    os.makedirs(p, exist_ok=True)
    with open(os.path.join(p, "trainer_state.json"), "w") as f:
        f.write(json.dumps(st, indent=2, sort_keys=True) + "\n")
    return S


def _iso(t, ms=True):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + (",%03d" % int((t % 1) * 1000) if ms else "")




def absl(t, src="train.py:120"):
    g = time.gmtime(t)
    return "I%02d%02d %02d:%02d:%02d.%06d 140213 %s]" % (g.tm_mon, g.tm_mday, g.tm_hour, g.tm_min, g.tm_sec, int((t % 1) * 1e6), src)


def hf_rows(res, every):
    """HF-Trainer-style logging: mean of the step losses since the last log, with logging_nan_inf_filter (a non-finite step
    loss is replaced by the running average of the window). Returns rows with 'hidden' where a NaN was replaced."""
    rows, tr, n, hid, seg = [], 0.0, 0, False, 0
    for r in res["recs"]:
        if r["seg"] != seg:
            tr, n, hid, seg = 0.0, 0, False, r["seg"]
        n += 1
        if fin(r["loss"]):
            tr += r["loss"]
        else:
            tr += tr / (n - 1) if n > 1 else 0.0
            hid = True
        if r["step"] % every == 0:
            rows.append({"step": r["step"], "loss": round(tr / n, 4), "hidden": hid, "rec": r})
            tr, n, hid = 0.0, 0, False
    return rows



def sig(v, n):
    """Round to n significant digits (what '{:.ng}' writes)."""
    return float(f"{v:.{n}g}") if fin(v) else v




def fnum(v, spec):
    return "nan" if not fin(v) else format(v, spec)


def rnd(v, nd):
    return round(v, nd) if fin(v) else v


def ev_map(res):
    return {(e["step"], e["seg"]): e for e in res["evals"]}


# ---------------------------------------------------------------------------------------------------- tb (SummaryWriter)
def w_tb(d, res, cfg):
    """torch.utils.tensorboard.SummaryWriter in runs/<date>_<host>/: Train/Loss, Val/Loss, Train/LR, Train/GradNorm,
    Perf/StepTime_ms, Perf/DataTime_ms, System/RSS_MB, AMP/LossScale, Act/DeadFraction, Act/SaturatedFraction,
    GradNorm/first_layer, GradNorm/last_layer; current-batch values every N steps; a resumed process adds a second event file."""
    from torch.utils.tensorboard import SummaryWriter
    S = series("global step", "current batch")
    every = cfg["every"]
    p = os.path.join(d, "runs", "Dec02_09-00-00_node017")
    os.makedirs(p, exist_ok=True)
    wr = SummaryWriter(p)
    seg = 0
    ev = ev_map(res)
    for r in res["recs"]:
        if r["seg"] != seg:
            wr.close()
            time.sleep(1.1)
            wr = SummaryWriter(p)
            seg = r["seg"]
        s = r["step"]
        if s % every == 0:
            t = ts(r)
            vals = [("Train/Loss", r["loss"], "loss"), ("Train/LR", r["lr"], "lr"), ("Train/GradNorm", r["gn"], "gn"),
                    ("Perf/StepTime_ms", r["st"] * 1000, "st"), ("Perf/DataTime_ms", r["dt"] * 1000, "dt"), ("System/RSS_MB", r["rss"], "rss")]
            if r["scale"] is not None:
                vals.append(("AMP/LossScale", r["scale"], "scale"))
            if r["dead"] is not None:
                vals.append(("Act/DeadFraction", r["dead"], "dead"))
            if r["sat"] is not None:
                vals.append(("Act/SaturatedFraction", r["sat"], "sat"))
            if cfg.get("layer_gn"):
                vals += [("GradNorm/first_layer", r["gfirst"], "gfirst"), ("GradNorm/last_layer", r["glast"], "glast")]
            for tag, v, key in vals:
                wr.add_scalar(tag, v, s, walltime=t)
                add(S, key, s, v / 1000 if key in ("st", "dt") else v)
        e = ev.get((s, r["seg"]))
        if e:
            wr.add_scalar("Val/Loss", e["val"], s, walltime=ts(r) + 0.05)
            add(S, "val", s, e["val"])
    wr.close()
    return S




def epoch_rows(res):
    """per-epoch rows (epoch mean of the step losses; NaN steps stay in the mean) with the eval that closed the epoch."""
    bpe = res["bpe"]
    ev = {e["step"]: e for e in res["evals"]}
    rows = epochs(res["recs"], bpe)
    for r in rows:
        r["val"] = ev[r["step"]]["val"] if r["step"] in ev else None
        r["vacc"] = ev[r["step"]]["acc"] if r["step"] in ev else None
    return rows


def extras(S, x, w, keys=("dead", "sat", "gfirst", "glast")):
    for k in keys:
        if w.get(k) is not None:
            add(S, k, x, w[k])



def tq_num(v):
    """tqdm.format_num: '{:.3g}' unless str(v) is shorter."""
    if not fin(v):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    f = "{0:.3g}".format(v).replace("+0", "+").replace("-0", "-")
    n = str(v)
    return f if len(f) < len(n) else n


def tq_val(v):
    try:
        return float(tq_num(v))
    except ValueError:
        return float("nan")


def hms(t):
    t = int(t)
    return f"{t // 60:02d}:{t % 60:02d}"


BASE2 = ("ce", "cls_loss", "xent")


# ---------------------------------------------------------------------------------------------------- fairseq json log
def w_fsjson(d, res, cfg):
    """fairseq-train --log-format json --log-file: '<date> | INFO | train_inner | {"epoch": 1, "update": 0.781, "loss": "1.234",
    ...}' (interval means; values formatted as strings with '{:g}' after metrics rounding to 3 decimals; loss in base 2 for
    the cross-entropy criteria), '| INFO | valid | {...}', overflow notes under --fp16."""
    b2 = res["loss_word"] in BASE2
    S = series("num_updates", "mean over --log-interval updates, 3 decimals" + (", base 2 (loss / ln 2)" if b2 else ""))
    every = cfg["every"]
    bpe = res["bpe"]
    ev = ev_map(res)
    L = []
    t0 = T0
    conv = (lambda v: v / math.log(2)) if b2 else (lambda v: v)

    def lg(t, name, msg):
        L.append(f"{_iso(t, ms=False)} | INFO | {name} | {msg}")
    lg(t0, "fairseq_cli.train", f"task: custom_{res['loss_word']} ({'CrossEntropyCriterion' if b2 else 'custom criterion'})")
    lg(t0, "fairseq_cli.train", f"max tokens = None, max sentences = {res['bs']}")
    lg(t0, "fairseq.trainer", "begin training epoch 1")
    lg(t0, "fairseq_cli.train", "Start iterating over samples")
    seg, prev_scale, ep_seen = 0, None, 1
    for w in windows(res["recs"], every, "mean"):
        r, s = w["rec"], w["step"]
        t = ts(r)
        if w["seg"] != seg:
            seg = w["seg"]
            back = s - w["n"]
            lg(t - 1, "fairseq.trainer", f"Loaded checkpoint checkpoints/checkpoint_last.pt (epoch {back // bpe + 1} @ {back} updates)")
        e = (s - 1) // bpe + 1
        if e != ep_seen and e > ep_seen:
            lg(t - 0.01, "fairseq.trainer", f"begin training epoch {e}")
            ep_seen = e
        if r["scale"] is not None and prev_scale is not None and r["scale"] < prev_scale:
            lg(t - 0.02, "fairseq.trainer", f"NOTE: gradient overflow detected, ignoring gradient, setting loss scale to: {r['scale']:g}")
        prev_scale = r["scale"]
        lv = round(conv(w["loss"]), 3) if fin(w["loss"]) else w["loss"]
        st = {"epoch": e, "update": round((e - 1) + ((s - 1) % bpe + 1) / bpe, 3), "loss": f"{lv:g}"}
        if b2:
            st["ppl"] = f"{round(2 ** min(lv, 60), 2):g}" if fin(lv) else "nan"
        st.update({"wps": f"{round(res['bs'] * 16 / w['st'], 1):g}", "ups": f"{round(1 / w['st'], 2):g}", "wpb": f"{res['bs'] * 16:g}",
                   "bsz": f"{res['bs']:g}", "num_updates": str(s), "lr": f"{rnd(w['lr'], 8):g}",
                   "gnorm": f"{rnd(w['gn'], 3):g}" if fin(w["gn"]) else "inf"})
        if r["scale"] is not None:
            st["loss_scale"] = f"{r['scale']:g}"
            add(S, "scale", s, r["scale"])
        if w.get("sat") is not None:
            st["sat_frac"] = f"{round(w['sat'], 3):g}"
            add(S, "sat", s, round(w["sat"], 3))
        st.update({"train_wall": f"{round(sum(x['st'] for x in res['recs'] if x['step'] <= s), 0):g}", "gb_free": "0",
                   "wall": f"{round(r['wall'], 0):g}"})
        lg(t, "train_inner", json.dumps(st))
        add(S, "loss", s, lv)
        add(S, "lr", s, rnd(w["lr"], 8))
        add(S, "gn", s, rnd(w["gn"], 3) if fin(w["gn"]) else float("inf"))
        e_ = ev.get((s, w["seg"]))
        if e_:
            vl = round(conv(e_["val"]), 3)
            vs = {"epoch": e, "valid_loss": f"{vl:g}"}
            if b2:
                vs["valid_ppl"] = f"{round(2 ** min(vl, 60), 2):g}"
            vs.update({"valid_wps": "51234.5", "valid_wpb": f"{128 * 16}", "valid_bsz": "128", "valid_num_updates": str(s)})
            lg(t + 0.05, "valid", json.dumps(vs))
            add(S, "val", s, vl)
    lg(ts(res["recs"][-1]) + 0.1, "fairseq_cli.train", f"done training in {res['recs'][-1]['wall']:.1f} seconds")
    open(os.path.join(d, "train.log"), "w").write("\n".join(L) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- horovodrun (mpirun tag output)
def w_horovod(d, res, cfg):
    """horovodrun -np 2 python train.py > horovod_train.log: Open MPI --tag-output prefixes '[1,<rank>]<stdout>:' on every
    line; each rank prints 'step N | loss X | lr L | compute_ms C | allreduce_ms W | step_ms T' every N steps (loss = the
    averaged hvd.allreduce value, interval mean, 4 decimals); rank 0 prints 'eval step N | val_loss V'."""
    S = series("step N", "interval mean of the hvd.allreduce-averaged loss, 4 decimals")
    every = cfg["every"]
    ev = ev_map(res)
    ranks = len(res["recs"][0].get("ranks", [None]))
    S["rank"] = {r: {"compute": [], "wait": []} for r in range(ranks)}
    L = [f"[1,{k}]<stderr>:[{_iso(T0, ms=False)}] horovod rank {k} of {ranks}, local_rank {k}, backend gloo" for k in range(ranks)]
    for w in windows(res["recs"], every, "mean"):
        s = w["step"]
        for k in range(ranks):
            rk = w["ranks"][k] if "ranks" in w else {"compute": w["st"], "wait": 0.0}
            L.append(f"[1,{k}]<stdout>:step {s} | loss {fnum(w['loss'], '.4f')} | lr {w['lr']:.3e} | grad_norm {fnum(w['gn'], '.3f')} | "
                     f"compute_ms {rk['compute'] * 1000:.2f} | allreduce_ms {rk['wait'] * 1000:.2f} | step_ms {w['st'] * 1000:.2f}")
            S["rank"][k]["compute"].append((s, round(rk["compute"] * 1000, 2) / 1000))
            S["rank"][k]["wait"].append((s, round(rk["wait"] * 1000, 2) / 1000))
        add(S, "loss", s, rnd(w["loss"], 4))
        add(S, "lr", s, float(f"{w['lr']:.3e}"))
        add(S, "gn", s, rnd(w["gn"], 3))
        add(S, "st", s, round(w["st"] * 1000, 2) / 1000)
        e_ = ev.get((s, w["seg"]))
        if e_:
            L.append(f"[1,0]<stdout>:eval step {s} | val_loss {fnum(e_['val'], '.4f')}")
            add(S, "val", s, rnd(e_["val"], 4))
    open(os.path.join(d, "horovod_train.log"), "w").write("\n".join(L) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- pytorch/examples word_language_model
def w_wlm(d, res, cfg):
    """pytorch/examples word_language_model/main.py console (train_output.txt): '| epoch   1 |   200/  640 batches | lr 0.00 |
    ms/batch  4.51 | loss  0.63 | ppl     1.88' (mean over --log-interval batches, 2 decimals; lr printed with {:02.2f}),
    '| end of epoch   1 | time:  2.23s | valid loss  0.58 | valid ppl     1.79' and the closing test line."""
    S = series("(epoch-1)*batches_per_epoch + batch number", "mean over --log-interval batches, 2 decimals")
    every = cfg["every"]
    bpe = res["bpe"]
    ev = ev_map(res)
    L = []
    sep = "-" * 89
    ep_start = 0.0
    for w in windows(res["recs"], every, "mean"):
        s = w["step"]
        e, b = (s - 1) // bpe + 1, (s - 1) % bpe + 1
        lv = w["loss"]
        ppl = math.exp(min(lv, 700)) if fin(lv) else float("nan")
        L.append(f"| epoch {e:3d} | {b:5d}/{bpe:5d} batches | lr {w['lr']:02.2f} | ms/batch {w['st'] * 1000:5.2f} | "
                 f"loss {lv:5.2f} | ppl {ppl:8.2f}")
        add(S, "loss", s, rnd(lv, 2))
        add(S, "st", s, round(w["st"] * 1000, 2) / 1000)
        e_ = ev.get((s, w["seg"]))
        if e_:
            v = e_["val"]
            L += [sep, f"| end of epoch {e:3d} | time: {w['rec']['wall'] - ep_start:5.2f}s | valid loss {v:5.2f} | "
                       f"valid ppl {math.exp(min(v, 700)):8.2f}", sep]
            ep_start = w["rec"]["wall"]
            add(S, "val", s, rnd(v, 2))
    if res["evals"]:
        v = res["evals"][-1]["val"]
        L += ["=" * 89, f"| End of training | test loss {v:5.2f} | test ppl {math.exp(min(v, 700)):8.2f}", "=" * 89]
    open(os.path.join(d, "train_output.txt"), "w").write("\n".join(L) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- ignite ProgressBar
def w_igbar(d, res, cfg):
    """pytorch-ignite contrib ProgressBar(persist=True) attached with output_transform=lambda x: {"batch_loss": x}, recorded
    from a terminal (ignite_console.txt): 'Epoch [1/5]: [20/64]  31%|###       , batch_loss=0.523 [00:01<00:02]' redrawn with
    '\\r' (tqdm's 3 significant digits), then 'Validation Results - Epoch: 1  Avg loss: 0.4200'."""
    S = series("(epoch-1)*N + i in 'Epoch [e/E]: [i/N]'", "current batch, tqdm 3 significant digits")
    every = cfg["every"]
    bpe = res["bpe"]
    E = math.ceil(cfg["steps"] / bpe)
    ev = {e["step"]: e for e in res["evals"]}
    out = []
    line = ""
    for r in res["recs"]:
        s = r["step"]
        e, i = (s - 1) // bpe + 1, (s - 1) % bpe + 1
        if s % every == 0 or i == bpe:
            pct = 100 * i / bpe
            nb = int(pct // 10)
            bar = "█" * nb + " " * (10 - nb)
            el = r["wall"] - ((e - 1) * bpe / max(1, s)) * r["wall"]
            rem = el / i * (bpe - i)
            line += ("\r" if line else "") + f"Epoch [{e}/{E}]: [{i}/{bpe}] {pct:3.0f}%|{bar}, batch_loss={tq_num(r['loss'])} [{hms(el)}<{hms(rem)}]"
            add(S, "loss", s, tq_val(r["loss"]))
        if i == bpe or s == res["recs"][-1]["step"]:
            out.append(line)
            line = ""
            if s in ev:
                out.append(f"Validation Results - Epoch: {e}  Avg loss: {ev[s]['val']:.4f}")
                add(S, "val", s, round(ev[s]["val"], 4))
    open(os.path.join(d, "ignite_console.txt"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- pytorch-pfn-extras LogReport
def w_ppe(d, res, cfg):
    """pytorch-pfn-extras ExtensionsManager with LogReport(trigger=(N, 'iteration')) and observe_lr: result/log is a JSON list
    (indent 4) of {"train/loss" (mean of the reports since the last entry), "lr", "val/loss" (where the Evaluator ran),
    "epoch", "iteration", "elapsed_time"}; a step the loop skipped reports nothing."""
    S = series("iteration", "mean of the reported losses over the LogReport interval (steps that reported nothing are absent)")
    every = cfg["every"]
    bpe = res["bpe"]
    ev = ev_map(res)
    rows = []
    buf = []
    for r in res["recs"]:
        buf.append(r)
        s = r["step"]
        if s % every == 0:
            v = mean([b["loss"] for b in buf])
            row = {"train/loss": v, "lr": r["lr"]}
            e_ = ev.get((s, r["seg"]))
            if e_:
                row["val/loss"] = e_["val"]
                add(S, "val", s, e_["val"])
            row.update({"epoch": (s - 1) // bpe + (1 if s % bpe == 0 else 0), "iteration": s, "elapsed_time": round(r["wall"], 6)})
            rows.append(row)
            add(S, "loss", s, v)
            add(S, "lr", s, r["lr"])
            buf = []
    p = os.path.join(d, "result")
    os.makedirs(p, exist_ok=True)
    with open(os.path.join(p, "log"), "w") as f:
        json.dump(rows, f, indent=4)
    return S


# ---------------------------------------------------------------------------------------------------- TensorBoard UI CSV downloads
def w_tbcsv(d, res, cfg):
    """Scalars downloaded as CSV from the TensorBoard UI for a Lightning TensorBoardLogger run (tb_csv/run-version_0-tag-<tag>.csv,
    'Wall time,Step,Value', float32 values): train_loss, val_loss, lr-Adam (LearningRateMonitor), grad_2.0_norm_total and
    per-parameter grad_2.0_norm/<name> (lightning.pytorch.utilities.grad_norm), perf/step_time_ms, perf/data_time_ms,
    sys/rss_mb, act/dead_frac, act/sat_frac."""
    import struct
    f32 = lambda v: struct.unpack("f", struct.pack("f", v))[0] if fin(v) else v  # noqa: E731
    S = series("Step", "current batch (float32)")
    every = cfg["every"]
    ev = ev_map(res)
    tags = {}

    def put(tag, key, s, t, v, scale=1.0):
        if v is None:
            return
        v32 = f32(v * scale)
        tags.setdefault(tag, []).append((t, s, v32))
        if key:
            add(S, key, s, v32 / scale)
    names = cfg.get("_pnames", ("embed.weight", "head.weight"))
    for r in res["recs"]:
        s = r["step"]
        if s % every == 0:
            t = ts(r)
            put("train_loss", "loss", s, t, r["loss"])
            put("lr-Adam", "lr", s, t, r["lr"])
            put("grad_2.0_norm_total", "gn", s, t, r["gn"])
            if cfg.get("layer_gn"):
                put(f"grad_2.0_norm/{names[0]}", "gfirst", s, t, r["gfirst"])
                put(f"grad_2.0_norm/{names[1]}", "glast", s, t, r["glast"])
            put("perf/step_time_ms", "st", s, t, r["st"], 1000.0)
            put("perf/data_time_ms", "dt", s, t, r["dt"], 1000.0)
            put("sys/rss_mb", "rss", s, t, r["rss"])
            put("act/dead_frac", "dead", s, t, r["dead"])
            put("act/sat_frac", "sat", s, t, r["sat"])
        e_ = ev.get((s, r["seg"]))
        if e_:
            put("val_loss", "val", s, ts(r) + 0.05, e_["val"])
    p = os.path.join(d, "tb_csv")
    os.makedirs(p, exist_ok=True)
    for tag, rows in tags.items():
        with open(os.path.join(p, f"run-version_0-tag-{tag.replace('/', '_')}.csv"), "w") as f:
            f.write("Wall time,Step,Value\n")
            for t, s, v in rows:
                f.write(f"{t!r},{s},{v!r}\n")
    return S


# ---------------------------------------------------------------------------------------------------- DGL example console
def w_dgl(d, res, cfg):
    """DGL example-script console (dgl_train.log), one line per training epoch of the full-graph loop:
    'Epoch 00005 | Time(s) 0.0123 | Loss 1.2345 | Accuracy 0.5000 | ETputs(KTEPS) 123.45' (epoch 0-based; Time(s) = mean
    duration of the epochs from epoch 3 on; Accuracy = the last validation accuracy), then 'Test accuracy 91.23%'."""
    S = series("Epoch (0-based; one optimizer step per epoch)", "current step, 4 decimals")
    dur = []
    acc = 0.0
    ev = {e["step"]: e for e in res["evals"]}
    L = []
    for r in res["recs"]:
        s = r["step"]
        ep = s - 1
        if ep >= 3:
            dur.append(r["st"])
        if s in ev and ev[s]["acc"] is not None:
            acc = ev[s]["acc"]
        tm = mean(dur) if dur else float("nan")
        kteps = (res["bs"] * 40 / tm / 1000) if dur else float("nan")
        L.append(f"Epoch {ep:05d} | Time(s) {tm:.4f} | Loss {fnum(r['loss'], '.4f')} | Accuracy {acc:.4f} | ETputs(KTEPS) {kteps:.2f}")
        add(S, "loss", ep, rnd(r["loss"], 4))
        if dur:
            add(S, "st", ep, round(tm, 4))
    L.append(f"Test accuracy {100 * acc:.2f}%")
    open(os.path.join(d, "dgl_train.log"), "w").write("\n".join(L) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- diffusers / accelerate tqdm
def w_diffusers(d, res, cfg):
    """A diffusers-style accelerate training script's console (train_console.log): the '***** Running training *****' block
    from accelerate's get_logger, then the 'Steps' tqdm bar redrawn with '\\r' and set_postfix(step_loss=..., lr=...) (keys
    sorted, 3 significant digits), 'Saved state to output/checkpoint-N' lines."""
    S = series("n in 'n/total'", "current step, tqdm 3 significant digits")
    every = cfg["every"]
    tot = cfg["steps"]
    hdr = _iso(T0, ms=False)
    dt = time.strftime("%m/%d/%Y %H:%M:%S", time.gmtime(T0))
    L = [f"{dt} - INFO - __main__ - ***** Running training *****", f"{dt} - INFO - __main__ -   Num examples = {res['bpe'] * res['bs']}",
         f"{dt} - INFO - __main__ -   Num Epochs = {math.ceil(tot / res['bpe'])}",
         f"{dt} - INFO - __main__ -   Instantaneous batch size per device = {res['bs']}",
         f"{dt} - INFO - __main__ -   Total train batch size (w. parallel, distributed & accumulation) = {res['bs']}",
         f"{dt} - INFO - __main__ -   Gradient Accumulation steps = 1", f"{dt} - INFO - __main__ -   Total optimization steps = {tot}"]
    line = f"Steps:   0%|          | 0/{tot} [00:00<?, ?it/s]"
    for r in res["recs"]:
        s = r["step"]
        if s % every == 0:
            pct = 100 * s / tot
            nb = int(pct // 10)
            bar = "█" * nb + " " * (10 - nb)
            rate = s / max(1e-6, r["wall"])
            line += (f"\rSteps: {pct:3.0f}%|{bar}| {s}/{tot} [{hms(r['wall'])}<{hms((tot - s) / rate)}, {rate:5.2f}it/s, "
                     f"lr={tq_num(r['lr'])}, step_loss={tq_num(r['loss'])}]")
            add(S, "loss", s, tq_val(r["loss"]))
            add(S, "lr", s, tq_val(r["lr"]))
        if s % 100 == 0:
            L.append(line)
            L.append(f"{time.strftime('%m/%d/%Y %H:%M:%S', time.gmtime(ts(r)))} - INFO - accelerate.accelerator - Saving current state to output/checkpoint-{s}")
            L.append(f"{time.strftime('%m/%d/%Y %H:%M:%S', time.gmtime(ts(r)))} - INFO - __main__ - Saved state to output/checkpoint-{s}")
            line = ""
    if line:
        L.append(line)
    open(os.path.join(d, "train_console.log"), "w").write("\n".join(L) + "\n")
    return S


WRITERS = {"tb": w_tb, "hf": w_hf, "fsjson": w_fsjson, "horovod": w_horovod, "wlm": w_wlm, "igbar": w_igbar, "ppe": w_ppe,
           "tbcsv": w_tbcsv, "dgl": w_dgl, "diffusers": w_diffusers}
