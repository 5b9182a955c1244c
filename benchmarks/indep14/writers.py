"""indep14: one writer per log format. Each writes the on-disk layout of the imitated tool and returns the series
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


def _ctime(t):
    return time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(t))


def _dt(t, fmt="%Y-%m-%d %H:%M:%S"):
    return time.strftime(fmt, time.gmtime(t))


# ---------------------------------------------------------------------------------------------------- mingpt
def w_mingpt(d, res, cfg):
    """minGPT (karpathy/minGPT projects/chargpt) batch-end callback printed to a terminal and tee'd to `out/chargpt/log.txt`:
    `iter_dt 12.34ms; iter 100: train loss 2.34567` every N iterations (iter_num is 0-based, the iteration just done;
    iter_dt is the wall time of that iteration). No validation line."""
    S = series("iter (0-based, = optimizer step - 1)", "current batch, 5 decimals")
    every = cfg["every"]
    p = os.path.join(d, "out", "chargpt")
    os.makedirs(p, exist_ok=True)
    lines = []
    if not cfg.get("_excerpt_tail"):
        lines += ["number of parameters: 0.%02dM" % (7 + len(res["recs"]) % 5), "running on device cpu"]
    seg = 0
    for r in res["recs"]:
        if r["seg"] != seg:
            seg = r["seg"]
            lines += ["running on device cpu", f"resuming from out/chargpt/model.pt (iter_num restored)"]
        it = r["step"] - 1
        if it % every == 0:
            v = float(fnum(r["loss"], ".5f"))
            lines.append(f"iter_dt {r['st'] * 1000:.2f}ms; iter {it}: train loss {fnum(r['loss'], '.5f')}")
            add(S, "loss", it, v)
            add(S, "st", it, round(r["st"] * 1000, 2) / 1000)
        if it > 0 and it % 500 == 0:
            lines.append("saving model")
    with open(os.path.join(p, "log.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- superres
def w_superres(d, res, cfg):
    """pytorch/examples super_resolution/main.py console `train_output.txt`: `===> Epoch[e](i/N): Loss: x` every iteration,
    `===> Epoch e Complete: Avg. Loss: x`, `===> Avg. PSNR: p dB` (validation, per epoch), `Checkpoint saved to ...`."""
    S = series("(epoch-1) x N + iteration", "current batch, 4 decimals; val as 10^(-PSNR/10)")
    bpe = res["bpe"]
    ev = {e["step"]: e for e in res["evals"]}
    lines = []
    if not cfg.get("_excerpt_tail"):
        lines += [f"Namespace(batchSize={res['bs']}, cuda=False, lr={cfg['lr']}, nEpochs={math.ceil(cfg['steps'] / bpe)}, seed=123, testBatchSize=128, threads=0, upscale_factor=2)",
                  "===> Loading datasets", "===> Building model"]
    acc = {}
    for r in res["recs"]:
        e, i = divmod(r["step"] - 1, bpe)
        v = r["loss"]
        lines.append(f"===> Epoch[{e + 1}]({i + 1}/{bpe}): Loss: {fnum(v, '.4f')}")
        add(S, "loss", r["step"], float(fnum(v, ".4f")))
        acc.setdefault(e, []).append(v)
        if i + 1 == bpe:
            lines.append(f"===> Epoch {e + 1} Complete: Avg. Loss: {fnum(sum(acc[e]) / bpe, '.4f')}")
        if r["step"] in ev:
            mse = ev[r["step"]]["val"]
            psnr = 10 * math.log10(1 / mse) if fin(mse) and mse > 0 else float("nan")
            lines.append(f"===> Avg. PSNR: {fnum(psnr, '.4f')} dB")
            add(S, "val", r["step"], 10 ** (-float(fnum(psnr, ".4f")) / 10) if fin(psnr) else float("nan"))
        if i + 1 == bpe:
            lines.append(f"Checkpoint saved to model_epoch_{e + 1}.pth")
    with open(os.path.join(d, "train_output.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- pygcn
def w_pygcn(d, res, cfg):
    """tkipf/pygcn train.py console `pygcn_train.log`: `Epoch: 0001 loss_train: 1.9458 acc_train: 0.1429 loss_val: 1.9366
    acc_val: 0.3433 time: 0.0123s` (one optimizer step per line, validation every line), `Optimization Finished!`,
    `Total time elapsed: ...s`, `Test set results: loss= ... accuracy= ...`."""
    S = series("Epoch (1-based, one optimizer step per line)", "current step, 4 decimals")
    ev = {e["step"]: e for e in res["evals"]}
    lines = []
    for r in res["recs"]:
        s = r["step"]
        e = ev.get(s)
        va = e["val"] if e else float("nan")
        vacc = e["acc"] if e and e["acc"] is not None else 0.0
        lines.append(f"Epoch: {s:04d} loss_train: {fnum(r['loss'], '.4f')} acc_train: {(r['acc'] or 0.0):.4f} "
                     f"loss_val: {fnum(va, '.4f')} acc_val: {vacc:.4f} time: {r['st']:.4f}s")
        add(S, "loss", s, float(fnum(r["loss"], ".4f")))
        if e:
            add(S, "val", s, float(fnum(va, ".4f")))
        add(S, "st", s, round(r["st"], 4))
    if not cfg.get("_excerpt_head"):
        tot = sum(r["st"] for r in res["recs"]) + 0.05 * len(res["recs"])
        lines += ["Optimization Finished!", f"Total time elapsed: {tot:.4f}s",
                  f"Test set results: loss= {fnum(res['evals'][-1]['val'], '.4f')} accuracy= {(res['evals'][-1]['acc'] or 0.0):.4f}"]
    with open(os.path.join(d, "pygcn_train.log"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- pytorch-tabnet
def w_ptabnet(d, res, cfg):
    """pytorch-tabnet `fit(..., eval_name=["val_0"])` verbose console `tabnet_fit.log`: `epoch 0  | loss: 1.2345  | val_0_mse: 0.9876  |  0:00:01s`
    (loss = mean over the epoch's batches, np.round(., 5)); the stop line and `Best weights from best epoch are automatically used!`."""
    met = "val_0_logloss" if cfg.get("_task") == "cls" else "val_0_mse"
    S = series("epoch (0-based)", "epoch mean of batch losses, 5 decimals")
    rows = epoch_rows(res)
    lines = []
    t0 = res["recs"][0]["wall"] - res["recs"][0]["st"]
    best = None
    for r in rows:
        msg = f"epoch {r['epoch']:<3}| loss: {str(rnd(r['loss'], 5)):<8}"
        add(S, "loss", r["epoch"], rnd(r["loss"], 5))
        if r["val"] is not None:
            msg += f"| {met}: {str(rnd(r['val'], 5)):<8}"
            add(S, "val", r["epoch"], rnd(r["val"], 5))
            if fin(r["val"]) and (best is None or r["val"] < best[1]):
                best = (r["epoch"], r["val"])
        el = int(r["rec"]["wall"] - t0) + 1
        msg += f"|  {str(__import__('datetime').timedelta(seconds=el)) + 's':<6}"
        lines.append(msg)
    if not cfg.get("_excerpt_head") and best:
        lines.append(f"Stop training because you reached max_epochs = {len(rows)} with best_epoch = {best[0]} and best_{met} = {round(best[1], 5)}")
        lines.append("Best weights from best epoch are automatically used!")
    with open(os.path.join(d, "tabnet_fit.log"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- fastai console table
def w_fastaicon(d, res, cfg):
    """fastai `learn.fit_one_cycle` progress table printed to a plain terminal, `fastai_console.txt`: header
    `epoch     train_loss  valid_loss  time    ` and one row per epoch; train_loss is the Recorder's smoothed loss
    (exponential moving average, beta 0.98, debiased) at the end of the epoch; 6 decimals; time mm:ss."""
    S = series("epoch (0-based)", "Recorder smooth_loss (EMA beta 0.98, debiased) at epoch end, 6 decimals")
    bpe = res["bpe"]
    ev = {e["step"]: e for e in res["evals"]}
    names = ["epoch", "train_loss", "valid_loss", "time"]
    lines = ["  ".join(f"{n:<10}" if i == 0 else f"{n:<10}" for i, n in enumerate(names)).rstrip()]
    lines = ["epoch     train_loss  valid_loss  time    "]
    avg, cnt, ep_t = 0.0, 0, 0.0
    for r in res["recs"]:
        cnt += 1
        avg = 0.98 * avg + 0.02 * r["loss"] if fin(r["loss"]) or True else avg
        sm = avg / (1 - 0.98 ** cnt)
        ep_t += r["st"] + 0.002
        if r["step"] % bpe == 0:
            e = r["step"] // bpe - 1
            v = ev.get(r["step"], {}).get("val", float("nan"))
            cells = [str(e), fnum(sm, ".6f"), fnum(v, ".6f"), hms(ep_t)]
            lines.append("".join(f"{c:<{max(len(n), len(c)) + 2}}" for c, n in zip(cells, ["epoch   ", "train_loss", "valid_loss", "time  "])))
            add(S, "loss", e, float(fnum(sm, ".6f")))
            add(S, "val", e, float(fnum(v, ".6f")))
            ep_t = 0.0
    with open(os.path.join(d, "fastai_console.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- structlog JSON lines
def w_structlog(d, res, cfg):
    """structlog with JSONRenderer, add_log_level and TimeStamper(fmt="iso", utc=True) to `logs/train.jsonl`:
    `{"step": 10, "loss": ..., "lr": ..., "grad_norm": ..., "step_time_ms": ..., "data_time_ms": ..., "rss_mb": ...,
    ["loss_scale", "dead_frac", "sat_frac", "grad_norm_first", "grad_norm_last"], "event": "train_step", "level": "info",
    "timestamp": "...Z"}`, eval lines `{"step": 50, "val_loss": ..., "event": "evaluation", ...}`; current-batch values
    every N steps; a restart logs `resumed_from_checkpoint`."""
    S = series("step", "current batch (full float repr)")
    every = cfg["every"]
    p = os.path.join(d, "logs")
    os.makedirs(p, exist_ok=True)
    ev = ev_map(res)
    lines = []
    seg = 0

    def emit(t, ev_name, **kw):
        o = dict(kw)
        o["event"] = ev_name
        o["level"] = "info"
        o["timestamp"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1e6):06d}Z"
        lines.append(json.dumps(o))
    rs = resumed_at(res)
    for r in res["recs"]:
        if r["seg"] != seg:
            seg = r["seg"]
            emit(ts(r) - 0.5, "resumed_from_checkpoint", checkpoint=f"ckpt/step_{rs[seg]}.pt", step=rs[seg])
        s = r["step"]
        if s % every == 0:
            kw = {"step": s, "epoch": (s - 1) // res["bpe"], "loss": r["loss"], "lr": r["lr"], "grad_norm": r["gn"],
                  "step_time_ms": round(r["st"] * 1000, 3), "data_time_ms": round(r["dt"] * 1000, 3), "rss_mb": round(r["rss"], 1)}
            for key, name in (("scale", "loss_scale"), ("dead", "dead_frac"), ("sat", "sat_frac")):
                if r[key] is not None:
                    kw[name] = r[key]
            if cfg.get("layer_gn"):
                kw["grad_norm_first"] = r["gfirst"]
                kw["grad_norm_last"] = r["glast"]
            emit(ts(r), "train_step", **kw)
            for key, name in (("loss", "loss"), ("lr", "lr"), ("gn", "grad_norm"), ("rss", "rss_mb"), ("scale", "loss_scale"),
                              ("dead", "dead_frac"), ("sat", "sat_frac"), ("gfirst", "grad_norm_first"), ("glast", "grad_norm_last")):
                if name in kw:
                    add(S, key, s, kw[name])
            add(S, "st", s, kw["step_time_ms"] / 1000)
            add(S, "dt", s, kw["data_time_ms"] / 1000)
        e = ev.get((s, r["seg"]))
        if e:
            emit(ts(r) + 0.03, "evaluation", step=s, val_loss=e["val"])
            add(S, "val", s, e["val"])
    with open(os.path.join(p, "train.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- loguru
def w_loguru(d, res, cfg):
    """loguru default format `YYYY-MM-DD HH:mm:ss.SSS | LEVEL    | module:function:line - message` in `logs/train.log`
    (2 ranks: `logs/train_rank0.log`, `logs/train_rank1.log`): `step 10/300 | loss 0.51234 | lr 3.000e-03 | grad_norm 1.2345 |
    step_ms 3.21 | data_ms 0.12 | rss_mb 312.4` (ranks: `fwd_bwd_ms`, `allreduce_ms`), `eval step 50 | val_loss ...`."""
    S = series("step", "current batch, 5 decimals (2 ranks: the averaged loss)")
    every = cfg["every"]
    p = os.path.join(d, "logs")
    os.makedirs(p, exist_ok=True)
    ev = ev_map(res)
    nr = cfg.get("ranks", 1)
    L = {r: [] for r in range(nr)}
    if nr > 1:
        S["rank"] = {r: {"compute": [], "wait": []} for r in range(nr)}

    def lg(rank, t, fn, line, msg, lvl="INFO"):
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1000):03d}"
        L[rank].append(f"{stamp} | {lvl:<8} | __main__:{fn}:{line} - {msg}")
    seg = 0
    rs = resumed_at(res)
    for rank in range(nr):
        if not cfg.get("_excerpt_tail"):
            lg(rank, ts(res["recs"][0]) - 1.0, "main", 212, f"config: lr={cfg['lr']} batch_size={res['bs']} max_steps={cfg['steps']} world_size={nr}")
    for r in res["recs"]:
        if r["seg"] != seg:
            seg = r["seg"]
            for rank in range(nr):
                lg(rank, ts(r) - 0.4, "main", 230, f"resumed from checkpoints/step_{rs[seg]}.pt")
        s = r["step"]
        if s % every == 0:
            t = ts(r)
            for rank in range(nr):
                msg = (f"step {s}/{cfg['steps']} | loss {fnum(r['loss'], '.5f')} | lr {r['lr']:.3e} | grad_norm {fnum(r['gn'], '.4f')} | "
                       f"step_ms {r['st'] * 1000:.2f} | data_ms {r['dt'] * 1000:.2f} | rss_mb {r['rss']:.1f}")
                if nr > 1:
                    rk = r["ranks"][rank]
                    msg += f" | fwd_bwd_ms {rk['compute'] * 1000:.2f} | allreduce_ms {rk['wait'] * 1000:.2f}"
                    S["rank"][rank]["compute"].append((s, round(rk["compute"] * 1000, 2) / 1000))
                    S["rank"][rank]["wait"].append((s, round(rk["wait"] * 1000, 2) / 1000))
                lg(rank, t + 0.001 * rank, "train_step", 148, msg)
            add(S, "loss", s, float(fnum(r["loss"], ".5f")))
            add(S, "lr", s, float(f"{r['lr']:.3e}"))
            add(S, "gn", s, float(fnum(r["gn"], ".4f")))
            add(S, "st", s, round(r["st"] * 1000, 2) / 1000)
            add(S, "dt", s, round(r["dt"] * 1000, 2) / 1000)
            add(S, "rss", s, round(r["rss"], 1))
        e = ev.get((s, r["seg"]))
        if e:
            lg(0, ts(r) + 0.02, "evaluate", 171, f"eval step {s} | val_loss {fnum(e['val'], '.5f')}")
            add(S, "val", s, float(fnum(e["val"], ".5f")))
    for rank in range(nr):
        name = "train.log" if nr == 1 else f"train_rank{rank}.log"
        with open(os.path.join(p, name), "w") as f:
            f.write("\n".join(L[rank]) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- python-json-logger
def w_pyjsonlog(d, res, cfg):
    """python-json-logger `JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s")` with `extra=` fields, file
    `train_log.json`: `{"asctime": "2025-12-02 09:00:01,123", "levelname": "INFO", "name": "trainer", "message": "train",
    "step": 10, "epoch": 0, "loss": ..., "lr": ..., "grad_norm": ..., "rss_mb": ..., ["loss_scale", "dead_frac", "sat_frac"]}`
    every N steps; `"message": "eval"` lines with `val_loss`."""
    S = series("step", "current batch (full float repr)")
    every = cfg["every"]
    ev = ev_map(res)
    lines = []

    def emit(t, msg, **kw):
        o = {"asctime": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + f",{int((t % 1) * 1000):03d}", "levelname": "INFO",
             "name": "trainer", "message": msg}
        o.update(kw)
        lines.append(json.dumps(o))
    for r in res["recs"]:
        s = r["step"]
        if s % every == 0:
            kw = {"step": s, "epoch": (s - 1) // res["bpe"], "loss": r["loss"], "lr": r["lr"], "grad_norm": r["gn"], "rss_mb": round(r["rss"], 2)}
            for key, name in (("scale", "loss_scale"), ("dead", "dead_frac"), ("sat", "sat_frac")):
                if r[key] is not None:
                    kw[name] = r[key]
            emit(ts(r), "train", **kw)
            for key, name in (("loss", "loss"), ("lr", "lr"), ("gn", "grad_norm"), ("rss", "rss_mb"), ("scale", "loss_scale"),
                              ("dead", "dead_frac"), ("sat", "sat_frac")):
                if name in kw:
                    add(S, key, s, kw[name])
        e = ev.get((s, r["seg"]))
        if e:
            emit(ts(r) + 0.03, "eval", step=s, val_loss=e["val"])
            add(S, "val", s, e["val"])
    with open(os.path.join(d, "train_log.json"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return S


WRITERS = {"tb": w_tb, "hf": w_hf, "mingpt": w_mingpt, "superres": w_superres, "pygcn": w_pygcn, "ptabnet": w_ptabnet,
           "fastaicon": w_fastaicon, "structlog": w_structlog, "loguru": w_loguru, "pyjsonlog": w_pyjsonlog}
