"""indep12: one writer per log format. Each writes the on-disk layout of the imitated tool and returns the series
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


# ---------------------------------------------------------------------------------------------------- icefall (k2) train log
def w_icefall(d, res, cfg):
    """icefall recipe log exp/log/log-train-<date>: '<date> INFO [train.py:868] (0/1) Epoch E, batch B, loss[loss=X, over F
    frames. ], tot_loss[loss=Y, over G frames. ], batch size: N, lr: L, grad_scale: S' every log_interval batches (B is the
    0-based batch index in the epoch; loss[] is the current batch per frame, tot_loss[] icefall's decaying running sum with
    reset_interval 200), and 'Epoch E, validation: loss=V, over F frames.' lines."""
    S = series("global batch = (epoch-1)*batches_per_epoch + batch + 1 (= optimizer step)", "current batch ('loss[loss=...]', 4 significant digits)")
    every, bpe, bs = cfg["every"], res["bpe"], res["bs"]
    fpb = bs * 12
    ev = ev_map(res)
    p = os.path.join(d, "exp", "log")
    os.makedirs(p, exist_ok=True)
    out = [f"{_iso(T0)} INFO [train.py:1052] Training started", f"{_iso(T0)} INFO [train.py:1062] Device: cpu",
           f"{_iso(T0)} INFO [train.py:1071] {{'best_train_loss': inf, 'best_valid_loss': inf, 'log_interval': {every}, 'reset_interval': 200, 'valid_interval': {cfg.get('eval_every', 50)}, 'world_size': 1, 'use_fp16': {bool(cfg.get('fp16'))}}}",
           f"{_iso(T0)} INFO [train.py:1079] About to create model", f"{_iso(T0)} INFO [train.py:1083] Number of model parameters: 48213"]
    tot, totf = 0.0, 0.0
    for r in res["recs"]:
        s = r["step"]
        e, b = (s - 1) // bpe + 1, (s - 1) % bpe
        if fin(r["loss"]):
            tot = tot * (1 - 1 / 200) + r["loss"] * fpb
            totf = totf * (1 - 1 / 200) + fpb
        if (s - 1) % every == 0:
            line = (f"{_iso(ts(r))} INFO [train.py:868] (0/1) Epoch {e}, batch {b}, loss[loss={fnum(r['loss'], '.4g')}, over {fpb:.2f} frames. ], "
                    f"tot_loss[loss={fnum(tot / max(totf, 1), '.4g')}, over {totf:.2f} frames. ], batch size: {bs}, lr: {r['lr']:.2e}")
            if r["scale"] is not None:
                line += f", grad_scale: {r['scale']:.1f}" if r["scale"] >= 0.1 else f", grad_scale: {r['scale']:.3g}"
                add(S, "scale", s, float(f"{r['scale']:.1f}") if r["scale"] >= 0.1 else sig(r["scale"], 3))
            out.append(line)
            add(S, "loss", s, sig(r["loss"], 4))
            add(S, "lr", s, float(f"{r['lr']:.2e}"))
        if (s, r["seg"]) in ev:
            v = ev[(s, r["seg"])]["val"]
            out.append(f"{_iso(ts(r) + 0.2)} INFO [train.py:888] Computing validation loss")
            out.append(f"{_iso(ts(r) + 0.4)} INFO [train.py:897] (0/1) Epoch {e}, validation: loss={fnum(v, '.4g')}, over {fpb * 16:.2f} frames. ")
            out.append(f"{_iso(ts(r) + 0.4)} INFO [train.py:898] (0/1) Maximum memory allocated so far is {int(r['rss'])}MB")
            add(S, "val", s, sig(v, 4))
    out.append(f"{_iso(ts(res['recs'][-1]) + 1)} INFO [train.py:1135] Done!")
    open(os.path.join(p, "log-train-2025-12-02-09-00-00"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- Transformer-XL train log
def w_txlog(d, res, cfg):
    """kimiyoung/transformer-xl pytorch train.py log (LM-TFM-<dataset>/<date>/log.txt): '| epoch   1 step      200 |    200 batches |
    lr 0.00025 | ms/batch 12.34 | loss  3.12 | ppl    22.651' every log_interval (mean over the interval, '{:5.2f}'), and
    '| Eval   1 at step      200 | time:  1.23s | valid loss  3.05 | valid ppl    21.117' between dashed lines."""
    S = series("step (global optimizer step in '| epoch E step N |')", "mean over log_interval, 2 decimals")
    every, bpe = cfg["every"], res["bpe"]
    ev = ev_map(res)
    p = os.path.join(d, "LM-TFM-synth", "20251202-090000")
    os.makedirs(p, exist_ok=True)
    out = ["=" * 100]
    for k, v in (("n_layer", 1), ("n_head", 1), ("d_model", 32), ("tgt_len", 16), ("mem_len", 32), ("lr", cfg["lr"]),
                 ("max_step", cfg["steps"]), ("log_interval", every), ("eval_interval", cfg.get("eval_every", 50)), ("batch_size", res["bs"])):
        out.append(f"    - {k} : {v}")
    out += ["=" * 100, "#params = 12345", "#non emb params = 11577"]
    ne = 0
    for w in windows(res["recs"], every, "mean"):
        r, s = w["rec"], w["step"]
        e = (s - 1) // bpe + 1
        L = w["loss"]
        ppl = math.exp(L) if fin(L) and L < 700 else float("inf") if fin(L) else float("nan")
        out.append(f"| epoch {e:3d} step {s:>8d} | {s:>6d} batches | lr {w['lr']:.3g} | ms/batch {w['st'] * 1000:5.2f} | loss {fnum(L, '5.2f'):>5s} | ppl {ppl:9.3f}")
        add(S, "loss", s, rnd(L, 2))
        add(S, "lr", s, sig(w["lr"], 3))
        add(S, "st", s, round(w["st"] * 1000, 2) / 1000)
        e_ = ev.get((s, w["seg"]))
        if e_:
            ne += 1
            v = e_["val"]
            vp = math.exp(v) if fin(v) and v < 700 else float("nan")
            out += ["-" * 100, f"| Eval {ne:3d} at step {s:>8d} | time: {0.4 + 0.01 * ne:5.2f}s | valid loss {fnum(v, '5.2f'):>5s} | valid ppl {vp:9.3f}", "-" * 100]
            add(S, "val", s, rnd(v, 2))
    out += ["-" * 100, "Exiting from training early" if False else "End of training"]
    open(os.path.join(p, "log.txt"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- pytorch/examples imagenet
def w_ptimagenet(d, res, cfg):
    """pytorch/examples imagenet/main.py console (train_output.txt): ProgressMeter lines 'Epoch: [0][ 10/ 64]\\tTime  0.012 ( 0.015)\\t
    Data  0.001 ( 0.002)\\tLoss 1.2345e+00 (1.3456e+00)\\tAcc@1  45.00 ( 40.00)\\tAcc@5 100.00 (100.00)' every print_freq batches
    (i % print_freq == 0, i 0-based; current value and epoch running average), then 'Test: [0/1]' and ' * Acc@1 ... Acc@5 ...'."""
    S = series("global step = epoch * batches_per_epoch + i + 1 (epoch and i 0-based, from 'Epoch: [e][ i/N]')", "current batch ('Loss x (avg)': the first number)")
    every, bpe = cfg["every"], res["bpe"]
    ev = ev_map(res)
    out = []
    acc = {}
    for r in res["recs"]:
        s = r["step"]
        e, i = (s - 1) // bpe, (s - 1) % bpe
        if i == 0:
            acc = {"t": [], "d": [], "l": [], "a": []}
        acc["t"].append(r["st"])  # batch_time is measured end to end (it includes the data wait)
        acc["d"].append(r["dt"])
        acc["l"].append(r["loss"])
        a1 = 100 * (r["acc"] if r["acc"] is not None else 0.0)
        acc["a"].append(a1)
        if i % every == 0:
            w = len(str(bpe))
            out.append(f"Epoch: [{e}][{i:>{w}d}/{bpe}]\tTime {r['st']:6.3f} ({mean(acc['t']):6.3f})\tData {r['dt']:6.3f} ({mean(acc['d']):6.3f})\t"
                       f"Loss {fnum(r['loss'], '.4e')} ({fnum(mean(acc['l']), '.4e')})\tAcc@1 {a1:6.2f} ({mean(acc['a']):6.2f})\tAcc@5 100.00 (100.00)")
            add(S, "loss", s, float(fnum(r["loss"], ".4e")))
            add(S, "st", s, round(r["st"], 3))
            add(S, "dt", s, round(r["dt"], 3))
        e_ = ev.get((s, r["seg"]))
        if e_:
            v = e_["val"]
            va = 100 * (e_["acc"] or 0.0)
            out.append(f"Test: [0/1]\tTime  0.021 ( 0.021)\tLoss {fnum(v, '.4e')} ({fnum(v, '.4e')})\tAcc@1 {va:6.2f} ({va:6.2f})\tAcc@5 100.00 (100.00)")
            out.append(f" * Acc@1 {va:.3f} Acc@5 100.000")
            add(S, "val", s, float(fnum(v, ".4e")))
    open(os.path.join(d, "train_output.txt"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- DeiT / MAE log.txt
def w_deitlog(d, res, cfg):
    """facebookresearch/deit (and MAE, DINO) output_dir/log.txt: one JSON object per epoch, {"train_lr", "train_loss", "test_loss",
    "test_acc1", "test_acc5", "epoch", "n_parameters"} (train_loss = MetricLogger global average over the epoch)."""
    S = series("epoch (0-based)", "epoch mean (MetricLogger global_avg), full precision")
    p = os.path.join(d, "output")
    os.makedirs(p, exist_ok=True)
    lines = []
    for r in epoch_rows(res):
        o = {"train_lr": r["lr"], "train_loss": r["loss"]}
        if r["val"] is not None:
            o.update({"test_loss": r["val"], "test_acc1": 100 * (r["vacc"] or 0.0), "test_acc5": 100.0})
            add(S, "val", r["epoch"], r["val"])
        o.update({"epoch": r["epoch"], "n_parameters": 12345})
        lines.append(json.dumps(o))
        add(S, "loss", r["epoch"], r["loss"])
        add(S, "lr", r["epoch"], r["lr"])
    open(os.path.join(p, "log.txt"), "w").write("\n".join(lines) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- PyG example console
def w_pyg(d, res, cfg):
    """PyTorch Geometric example-script console (train_output.txt): 'Epoch: 001, Loss: 0.6931, Val Loss: 0.7012, Val Acc: 0.5000'
    once per epoch (Loss = total_loss / num_graphs over the epoch), then 'Median time per epoch: 0.1234s'."""
    S = series("epoch (1-based, 'Epoch: 001')", "epoch mean, 4 decimals")
    out = []
    rows = epoch_rows(res)
    for r in rows:
        e = r["epoch"] + 1
        line = f"Epoch: {e:03d}, Loss: {fnum(r['loss'], '.4f')}"
        if r["val"] is not None:
            line += f", Val Loss: {fnum(r['val'], '.4f')}, Val Acc: {r['vacc'] or 0.0:.4f}"
            add(S, "val", e, rnd(r["val"], 4))
        out.append(line)
        add(S, "loss", e, rnd(r["loss"], 4))
    out.append(f"Median time per epoch: {median([r['dur'] for r in rows]):.4f}s")
    open(os.path.join(d, "train_output.txt"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- PyKEEN training-loop tqdm
def w_pykeen(d, res, cfg):
    """PyKEEN pipeline console (pykeen_train.log): the 'Training epochs on cpu' tqdm bar redrawn with '\\r' after every epoch with
    postfix 'loss=<epoch mean>, prev_loss=<previous>' (tqdm set_postfix formats numbers with '{:.3g}'), inner 'Training batches on
    cpu' bars (leave=False) cleared between epochs."""
    S = series("epoch (n in 'n/N epoch')", "epoch mean (tqdm postfix, 3 significant digits)")
    rows = epoch_rows(res)
    N = len(rows)
    bpe = res["bpe"]
    buf = ["INFO:pykeen.pipeline.api:Using device: cpu", "INFO:pykeen.triples.triples_factory:Creating inverse triples",
           "INFO:pykeen.training.training_loop:Dropping last (incomplete) batch each epoch (1/%d)" % bpe]
    t = 0.0
    prev = None
    frames = [f"Training epochs on cpu:   0%|          | 0/{N} [00:00<?, ?epoch/s]"]
    for r in rows:
        t += r["dur"]
        n = r["epoch"] + 1
        frames.append(f"Training batches on cpu:   0%|          | 0/{bpe} [00:00<?, ?batch/s]")
        frames.append(f"Training batches on cpu: 100%|##########| {bpe}/{bpe} [00:00<00:00, {bpe / max(r['dur'], 1e-3):.2f}batch/s]")
        frames.append(" " * 80)
        pct = int(100 * n / N)
        bar = "#" * (pct // 10) + " " * (10 - pct // 10)
        rate = n / max(t, 1e-3)
        pf = f"loss={fnum(r['loss'], '.3g')}" + (f", prev_loss={fnum(prev, '.3g')}" if prev is not None else "")
        frames.append(f"Training epochs on cpu: {pct:3d}%|{bar}| {n}/{N} [00:{int(t):02d}<00:{int((N - n) / max(rate, 1e-3)) % 60:02d}, {rate:.2f}epoch/s, {pf}]")
        add(S, "loss", n, sig(r["loss"], 3))
        prev = r["loss"]
    buf.append("\r".join(frames))
    buf.append("INFO:pykeen.evaluation.evaluator:Evaluation took 0.21s seconds")
    open(os.path.join(d, "pykeen_train.log"), "w").write("\n".join(buf) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- Detectron2 console
def w_d2console(d, res, cfg):
    """Detectron2 CommonMetricPrinter console (log.txt in the output dir): '[12/02 09:00:05 d2.utils.events]:  eta: 0:00:10  iter: 19
    total_loss: 1.234  loss_cls: ...  time: 0.0123  last_time: 0.0120  data_time: 0.0010  last_data_time: 0.0009   lr: 0.00025
    max_mem: 123M' every 20 iterations (losses = median over the 20-iteration window, '{:.4g}'; time = global average, last_time
    = latest; data_time = average of the last 20)."""
    S = series("iter (0-based, 'iter: N' = optimizer step - 1)", "median over the last 20 iterations ('{:.4g}')")
    every = cfg.get("every", 20)
    p = os.path.join(d, "output")
    os.makedirs(p, exist_ok=True)
    out = [f"[12/02 09:00:00 detectron2]: Rank of current process: 0. World size: 1",
           f"[12/02 09:00:00 detectron2]: Full config saved to ./output/config.yaml",
           f"[12/02 09:00:00 d2.engine.train_loop]: Starting training from iteration 0"]
    recs = res["recs"]
    M = cfg["steps"]
    for k, r in enumerate(recs):
        it = r["step"] - 1
        if (it + 1) % every == 0 or it == M - 1:
            win = recs[max(0, k - 19):k + 1]
            L = median([w["loss"] for w in win])
            tg = mean([w["st"] for w in recs[:k + 1]])
            dt20 = mean([w["dt"] for w in win])
            eta = int(tg * (M - it - 1))
            g = time.gmtime(ts(r))
            stamp = "[%02d/%02d %02d:%02d:%02d d2.utils.events]:" % (g.tm_mon, g.tm_mday, g.tm_hour, g.tm_min, g.tm_sec)
            mem = max(w["rss"] for w in recs[:k + 1])
            out.append(f"{stamp}  eta: 0:{eta // 60:02d}:{eta % 60:02d}  iter: {it}  total_loss: {fnum(L, '.4g')}  {res['loss_word']}: {fnum(L, '.4g')}  "
                       f"time: {tg:.4f}  last_time: {r['st']:.4f}  data_time: {dt20:.4f}  last_data_time: {r['dt']:.4f}   lr: {r['lr']:.5g}  max_mem: {mem:.0f}M")
            add(S, "loss", it, sig(L, 4))
            add(S, "st", it, round(r["st"], 4))
            add(S, "dt", it, round(dt20, 4))
            add(S, "lr", it, sig(r["lr"], 5))
            add(S, "rss", it, round(mem))
    out.append(f"[12/02 09:{int(ts(recs[-1]) - T0) // 60 % 60:02d}:00 d2.engine.hooks]: Overall training speed: {M - 2} iterations in 0:00:0{min(9, int(sum(r['st'] for r in recs)))} ({mean([r['st'] for r in recs]):.4f} s / it)")
    open(os.path.join(p, "log.txt"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- mmcv 1.x json log
def w_mmcv(d, res, cfg):
    """mmcv 1.x TextLoggerHook json log work_dirs/<cfg>/<ts>.log.json: a first line with env_info/config/seed, then one object per
    log interval {"mode": "train", "epoch", "iter" (1-based in the epoch), "lr", "memory" (MB), "data_time", "loss", "grad_norm",
    "time", + the model's extra log_vars} (interval means, rounded to 5 decimals as mmcv does) and {"mode": "val", ...} rows."""
    S = series("global iter = (epoch-1)*iters_per_epoch + iter", "mean over the log interval (5 decimals)")
    every, bpe = cfg["every"], res["bpe"]
    ev = ev_map(res)
    p = os.path.join(d, "work_dirs", f"{cfg['family']}_exp")
    os.makedirs(p, exist_ok=True)
    lines = [json.dumps({"env_info": "sys.platform: linux\nPython: 3.11\nCUDA available: False\nPyTorch: 2.13.0+cpu\nMMCV: 1.7.2", "config": f"model = dict(type='{cfg['family']}')\noptimizer = dict(type='Adam', lr={cfg['lr']})\nlog_config = dict(interval={every})\n", "seed": cfg.get("seed", 0), "exp_name": "train.py", "hook_msgs": {}})]
    for w in windows(res["recs"], every, "mean"):
        r, s = w["rec"], w["step"]
        e, it = (s - 1) // bpe + 1, (s - 1) % bpe + 1
        o = {"mode": "train", "epoch": e, "iter": it, "lr": r["lr"], "memory": int(w["rss"]), "data_time": round(w["dt"], 5),
             "loss": rnd(w["loss"], 5), "grad_norm": rnd(w["gn"], 5)}
        if r["scale"] is not None:
            o["loss_scale"] = r["scale"]
        for k, nm in (("dead", "dead_frac"), ("sat", "gate_sat_frac"), ("gfirst", "grad_norm_first"), ("glast", "grad_norm_last")):
            if w.get(k) is not None and (k in ("dead", "sat") or cfg.get("layer_gn")):
                o[nm] = round(w[k], 5)
                add(S, k, s, round(w[k], 5))
        o["time"] = round(w["st"] + w["dt"], 5)
        lines.append(json.dumps(o).replace("NaN", "NaN"))
        add(S, "loss", s, rnd(w["loss"], 5))
        add(S, "lr", s, r["lr"])
        add(S, "gn", s, rnd(w["gn"], 5))
        add(S, "rss", s, int(w["rss"]))
        add(S, "st", s, round(w["st"] + w["dt"], 5))
        add(S, "dt", s, round(w["dt"], 5))
        if r["scale"] is not None:
            add(S, "scale", s, r["scale"])
        e_ = ev.get((s, w["seg"]))
        if e_:
            lines.append(json.dumps({"mode": "val", "epoch": e, "iter": 16, "lr": r["lr"], "loss": rnd(e_["val"], 5)}))
            add(S, "val", s, rnd(e_["val"], 5))
    open(os.path.join(p, "20251202_090000.log.json"), "w").write("\n".join(lines) + "\n")
    open(os.path.join(p, "20251202_090000.log"), "w").write(f"{_iso(T0)} - mmcv - INFO - Environment info: see .log.json\n")
    return S


# ---------------------------------------------------------------------------------------------------- torchrun --log-dir (elastic)
def w_elastic(d, res, cfg):
    """torchrun --nproc-per-node 2 --max-restarts 1 --log-dir logs --redirects 3: per-worker files
    logs/<run_id>_<rand>/attempt_<k>/<local_rank>/stdout.log and stderr.log; each worker prints '[step N] loss=X lr=Y gnorm=G
    fwd_bwd_ms=F allreduce_ms=W step_ms=T rss_mb=R' every N steps (loss all-reduced, means over the interval) and rank 0 prints
    '[eval] step N val_loss=V'; a restarted worker group writes a new attempt folder."""
    S = series("step N in '[step N]'", "mean over the print interval of the all-reduced loss (4 decimals)")
    every = cfg["every"]
    ev = ev_map(res)
    root = os.path.join(d, "logs", "a3f91c2e_7q1k2x9d")
    ranks = len(res["recs"][0].get("ranks", [None, None]))
    outs = {}
    S["rank"] = {r: {"compute": [], "wait": []} for r in range(ranks)}
    for w in windows(res["recs"], every, "mean"):
        r, s, a = w["rec"], w["step"], w["seg"]
        for k in range(ranks):
            rk = w["ranks"][k] if "ranks" in w else {"compute": w["st"], "wait": 0.0}
            line = (f"[step {s}] loss={fnum(w['loss'], '.4f')} lr={w['lr']:.4e} gnorm={fnum(w['gn'], '.4f')} fwd_bwd_ms={rk['compute'] * 1000:.2f} "
                    f"allreduce_ms={rk['wait'] * 1000:.2f} step_ms={w['st'] * 1000:.2f} rss_mb={w['rss']:.1f}")
            for key, nm in (("dead", "dead_frac"), ("sat", "sat_frac"), ("gfirst", "gn_first"), ("glast", "gn_last")):
                if w.get(key) is not None and (key in ("dead", "sat") or cfg.get("layer_gn")):
                    line += f" {nm}={w[key]:.4f}"
            outs.setdefault((a, k), []).append(line)
            S["rank"][k]["compute"].append((s, round(rk["compute"] * 1000, 2) / 1000))
            S["rank"][k]["wait"].append((s, round(rk["wait"] * 1000, 2) / 1000))
        add(S, "loss", s, rnd(w["loss"], 4))
        add(S, "lr", s, float(f"{w['lr']:.4e}"))
        add(S, "gn", s, rnd(w["gn"], 4))
        add(S, "st", s, round(w["st"] * 1000, 2) / 1000)
        add(S, "rss", s, round(w["rss"], 1))
        for key in ("dead", "sat", "gfirst", "glast"):
            if w.get(key) is not None and (key in ("dead", "sat") or cfg.get("layer_gn")):
                add(S, key, s, round(w[key], 4))
        e_ = ev.get((s, w["seg"]))
        if e_:
            outs.setdefault((a, 0), []).append(f"[eval] step {s} val_loss={fnum(e_['val'], '.4f')}")
            add(S, "val", s, rnd(e_["val"], 4))
    segs = sorted({a for a, _ in outs})
    for a in segs:
        for k in range(ranks):
            p = os.path.join(root, f"attempt_{a}", str(k))
            os.makedirs(p, exist_ok=True)
            head = [f"world_size=2 rank={k} local_rank={k} master=127.0.0.1:29500 restart_count={a}"]
            open(os.path.join(p, "stdout.log"), "w").write("\n".join(head + outs.get((a, k), [])) + "\n")
            err = ""
            if a < segs[-1]:
                err = ("Traceback (most recent call last):\n  File \"train.py\", line 212, in <module>\n    main()\n"
                       "  File \"train.py\", line 188, in main\n    dist.all_reduce(t)\n"
                       "torch.distributed.DistBackendError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.17]:29500\n")
            open(os.path.join(p, "stderr.log"), "w").write(err or "\n")
    return S


# ---------------------------------------------------------------------------------------------------- MONAI StatsHandler
def w_monai(d, res, cfg):
    """MONAI SupervisedTrainer with StatsHandler (logging to train.log): '<date> - INFO - Epoch: 1/20, Iter: 10/32 -- Loss: 0.6931 '
    every N iterations (current batch, '{:.4f}'), and '<date> - INFO - Epoch[1] Metrics -- val_loss: 0.6500 ' plus
    'Key metric: val_loss best value: ... at epoch: ...' from the evaluator's StatsHandler."""
    S = series("global iteration = (epoch-1)*iters_per_epoch + iter", "current batch, 4 decimals")
    every, bpe = cfg["every"], res["bpe"]
    E = math.ceil(cfg["steps"] / bpe)
    ev = ev_map(res)
    out = [f"{_iso(T0)} - INFO - Engine run resuming from iteration 0, epoch 0 until {E} epochs"]
    best = None
    for r in res["recs"]:
        s = r["step"]
        e, it = (s - 1) // bpe + 1, (s - 1) % bpe + 1
        if it % every == 0:
            out.append(f"{_iso(ts(r))} - INFO - Epoch: {e}/{E}, Iter: {it}/{bpe} -- Loss: {fnum(r['loss'], '.4f')} ")
            add(S, "loss", s, rnd(r["loss"], 4))
        e_ = ev.get((s, r["seg"]))
        if e_:
            v = e_["val"]
            out.append(f"{_iso(ts(r) + 0.1)} - INFO - Epoch[{e}] Metrics -- val_loss: {fnum(v, '.4f')} ")
            if fin(v) and (best is None or v < best[0]):
                best = (v, e)
            if best:
                out.append(f"{_iso(ts(r) + 0.1)} - INFO - Key metric: val_loss best value: {best[0]:.4f} at epoch: {best[1]}")
            add(S, "val", s, rnd(v, 4))
        if it == bpe:
            out.append(f"{_iso(ts(r) + 0.2)} - INFO - Epoch[{e}] Complete. Time taken: 0:00:0{min(9, int(r['wall']))}.{int(r['wall'] * 1000) % 1000:03d}")
    out.append(f"{_iso(ts(res['recs'][-1]) + 1)} - INFO - Train completed, saved final checkpoint: runs/net_final_iteration={cfg['steps']}.pt")
    open(os.path.join(d, "train.log"), "w").write("\n".join(out) + "\n")
    return S


WRITERS = {"tb": w_tb, "hf": w_hf, "icefall": w_icefall, "txlog": w_txlog, "ptimagenet": w_ptimagenet, "deitlog": w_deitlog,
           "pyg": w_pyg, "pykeen": w_pykeen, "d2console": w_d2console, "mmcv": w_mmcv, "elastic": w_elastic, "monai": w_monai}
