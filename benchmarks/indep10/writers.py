"""One writer per log format. Each writes the on-disk layout of the imitated tool and returns the series
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


# ---------------------------------------------------------------------------------------------------- tb
def w_tb(d, res, cfg):
    from torch.utils.tensorboard import SummaryWriter
    lw = res["loss_word"]
    S = series("global step", "current batch")
    every = cfg["every"]
    os.makedirs(os.path.join(d, "tb"), exist_ok=True)
    wr = SummaryWriter(os.path.join(d, "tb"))
    seg = 0
    evals = list(res["evals"])
    for r in res["recs"]:
        if r["seg"] != seg:
            wr.close()
            time.sleep(1.1)  # a new event file for the resumed process
            wr = SummaryWriter(os.path.join(d, "tb"))
            seg = r["seg"]
        s = r["step"]
        if s % every == 0:
            t = ts(r)
            vals = [(f"train/{lw}", r["loss"], "loss"), ("optim/lr", r["lr"], "lr"), ("optim/grad_norm", r["gn"], "gn"),
                    ("time/iter_ms", r["st"] * 1000, "st"), ("time/data_ms", r["dt"] * 1000, "dt"), ("sys/rss_mb", r["rss"], "rss")]
            if r["scale"] is not None:
                vals.append(("amp/scale", r["scale"], "scale"))
            if r["dead"] is not None:
                vals.append(("act/dead_frac", r["dead"], "dead"))
            if r["sat"] is not None:
                vals.append(("act/sat_frac", r["sat"], "sat"))
            if cfg.get("layer_gn"):
                vals += [("grad/first_layer_norm", r["gfirst"], "gfirst"), ("grad/last_layer_norm", r["glast"], "glast")]
            for tag, v, key in vals:
                wr.add_scalar(tag, v, s, walltime=t)
                add(S, key, s, v / 1000 if key in ("st", "dt") else v)
        for e in [e for e in evals if e["step"] == s and e["seg"] == r["seg"]]:
            wr.add_scalar(f"eval/{lw}", e["val"], s, walltime=ts(r) + 0.05)
            add(S, "val", s, e["val"])
            evals.remove(e)
    wr.close()
    return S


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


# ---------------------------------------------------------------------------------------------------- mlflow
def w_mlflow(d, res, cfg):
    lw = res["loss_word"]
    S = series("step (third field)", "window mean")
    rid = "5f2a9c0d41e84b7c9a1e3f6b2d7c8e90"
    base = os.path.join(d, "mlruns", "0")
    p = os.path.join(base, rid)
    for sub in ("metrics", "params", "tags", "artifacts"):
        os.makedirs(os.path.join(p, sub), exist_ok=True)
    os.makedirs(os.path.join(p, "metrics", "system"), exist_ok=True)
    os.makedirs(os.path.join(p, "metrics", "layer_grad_norm"), exist_ok=True)
    with open(os.path.join(base, "meta.yaml"), "w") as f:
        f.write(f"artifact_location: file://{base}\nexperiment_id: '0'\nlifecycle_stage: active\nname: Default\n")
    with open(os.path.join(p, "meta.yaml"), "w") as f:
        f.write(f"artifact_uri: file://{p}/artifacts\nend_time: {int(ts(res['recs'][-1]) * 1000)}\nentry_point_name: ''\nexperiment_id: '0'\n"
                f"lifecycle_stage: active\nrun_id: {rid}\nrun_name: train\nsource_type: 4\nstart_time: {int(T0 * 1000)}\nstatus: 3\n"
                f"tags: []\nuser_id: ml\n")
    for k in ("lr", "opt", "bs", "steps"):
        if k in cfg:
            open(os.path.join(p, "params", k), "w").write(str(cfg[k]))
    open(os.path.join(p, "tags", "mlflow.runName"), "w").write("train")
    files = {}

    def put(key, t, v, s):
        files.setdefault(key, []).append(f"{int(t * 1000)} {v!r} {s}\n")
    for w in windows(res["recs"], cfg["every"], "mean"):
        s, t = w["step"], ts(w["rec"])
        for key, v, sk in ((f"train_{lw}", w["loss"], "loss"), ("lr", w["lr"], "lr"), ("grad_norm", w["gn"], "gn"),
                           ("step_time_ms", w["st"] * 1000, "st"), ("data_time_ms", w["dt"] * 1000, "dt"), ("system/system_memory_usage_megabytes", w["rss"], "rss"),
                           ("loss_scale", w["scale"], "scale"), ("dead_relu_fraction", w["dead"], "dead"), ("tanh_saturation", w["sat"], "sat"),
                           ("layer_grad_norm/first", w["gfirst"] if cfg.get("layer_gn") else None, "gfirst"),
                           ("layer_grad_norm/last", w["glast"] if cfg.get("layer_gn") else None, "glast")):
            if v is None:
                continue
            put(key, t, float(v), s)
            add(S, sk, s, v / 1000 if sk in ("st", "dt") else v)
    for e in res["evals"]:
        put(f"val_{lw}", T0 + e["wall"], float(e["val"]), e["step"])
        add(S, "val", e["step"], e["val"])
    for key, lines in files.items():
        open(os.path.join(p, "metrics", key), "w").writelines(lines)
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


# ---------------------------------------------------------------------------------------------------- W&B offline history
def w_wandb(d, res, cfg):
    """wandb/offline-run-<date>-<id>/files/wandb-history.jsonl (train keys averaged over the logging interval; eval keys in the row
    of the same _step), wandb-summary.json, config.yaml."""
    lw = res["loss_word"]
    S = series("_step", "mean over the logging interval")
    p = os.path.join(d, "wandb", "offline-run-20251202_090000-k3x9q2vd", "files")
    os.makedirs(p, exist_ok=True)
    ev = {e["step"]: e for e in res["evals"]}
    out = []
    for w in windows(res["recs"], cfg["every"], "mean"):
        r, s = w["rec"], w["step"]
        row = {"_step": s, "_runtime": round(r["wall"], 6), "_timestamp": ts(r), f"train/{lw}": w["loss"], "train/lr": w["lr"],
               "train/grad_norm": w["gn"], "perf/step_time_ms": w["st"] * 1000, "perf/data_time_ms": w["dt"] * 1000, "system/rss_mib": w["rss"]}
        for key, v in (("loss", w["loss"]), ("lr", w["lr"]), ("gn", w["gn"]), ("st", w["st"]), ("dt", w["dt"]), ("rss", w["rss"])):
            add(S, key, s, v)
        if w["scale"] is not None:
            row["amp/loss_scale"] = w["scale"]
            add(S, "scale", s, w["scale"])
        for k, key in (("act/dead_fraction", "dead"), ("act/saturated_fraction", "sat")):
            if w[key] is not None:
                row[k] = w[key]
                add(S, key, s, w[key])
        if cfg.get("layer_gn"):
            row["grad_norm/first_layer"], row["grad_norm/last_layer"] = w["gfirst"], w["glast"]
            add(S, "gfirst", s, w["gfirst"])
            add(S, "glast", s, w["glast"])
        if s in ev:
            row[f"val/{lw}"] = ev[s]["val"]
            add(S, "val", s, ev[s]["val"])
        out.append(json.dumps(row))
    open(os.path.join(p, "wandb-history.jsonl"), "w").write("\n".join(out) + "\n")
    json.dump({"_step": res["recs"][-1]["step"], "_runtime": res["recs"][-1]["wall"]}, open(os.path.join(p, "wandb-summary.json"), "w"))
    open(os.path.join(p, "config.yaml"), "w").write("wandb_version: 1\n\n" + "".join(
        f"{k}:\n  desc: null\n  value: {cfg[k]}\n" for k in ("lr", "bs", "steps", "opt") if k in cfg))
    return S


# ---------------------------------------------------------------------------------------------------- NeMo console (Lightning bar)
def pl_num(v):
    """Lightning's Tqdm.format_num: tqdm's '{:.3g}' (or str if shorter), padded with zeros to 5 characters."""
    if not fin(v):
        return "nan"
    f = "{0:.3g}".format(v).replace("+0", "+").replace("-0", "-")
    n = f if len(f) < len(str(v)) else str(v)
    if "e" not in n:
        if "." not in n and len(n) < 5:
            n += "."
        n += "0" * (5 - len(n))
    return n


def w_nemo(d, res, cfg):
    """NeMo (exp_manager + Lightning TQDM bar) console tee'd to nemo_experiments/<name>/<date>/train_stdout.log. Bar postfix:
    reduced_train_loss (current step), global_step (0-based, logged inside training_step), consumed_samples,
    'train_step_timing in s', lr, val_loss once validated; numbers through Lightning's format_num (3 significant digits)."""
    S = series("global_step as printed in the bar (0-based: the step whose loss is shown)", "current step, 3 significant digits")
    p = os.path.join(d, "nemo_experiments", "custom", "2025-12-02_09-00-00")
    os.makedirs(p, exist_ok=True)
    bpe = res["bpe"]
    nep = math.ceil(cfg["steps"] / bpe)
    ev = {(e["step"], e["seg"]): e for e in res["evals"]}
    out = [f"[NeMo I 2025-12-02 09:00:00 exp_manager:396] Experiments will be logged at {p[len(d) + 1:]}",
           "[NeMo I 2025-12-02 09:00:00 exp_manager:842] TensorboardLogger has been set up", "",
           "  | Name  | Type   | Params", "---------------------------------", "0 | model | Module | 12.3 K", ""]
    cur, lastval, seg = "", None, 0
    for r in res["recs"]:
        s = r["step"]
        if r["seg"] != seg:
            seg = r["seg"]
            out.append(cur)
            cur = ""
            out.append(f"[NeMo I 2025-12-02 09:{int(r['wall']) // 60 % 60:02d}:{int(r['wall']) % 60:02d} nemo_model_checkpoint:226] "
                       f"Restoring states from the checkpoint path at nemo_experiments/custom/checkpoints/custom--step={s - 1}-last.ckpt")
        e, n = (s - 1) // bpe, (s - 1) % bpe + 1
        if s % cfg["every"] == 0 or n == bpe:
            el = r["wall"]
            post = (f"v_num=0, reduced_train_loss={pl_num(r['loss'])}, global_step={pl_num(float(s - 1))}, consumed_samples={pl_num(float(s * res['bs']))}, "
                    f"train_step_timing in s={pl_num(r['st'])}, lr={pl_num(r['lr'])}" + (f", val_loss={pl_num(lastval)}" if lastval is not None else ""))
            pct = int(100 * n / bpe)
            bar = "\u2588" * (pct // 10) + " " * (10 - pct // 10)
            cur += f"\rEpoch {e}: {pct:3d}%|{bar}| {n}/{bpe} [{int(el) // 60:02d}:{int(el) % 60:02d}<00:00, {1.0 / r['st']:.2f}it/s, {post}]"
            x = float(pl_num(float(s - 1)))
            add(S, "loss", x, float(pl_num(r["loss"])) if fin(r["loss"]) else r["loss"])
            add(S, "st", x, float(pl_num(r["st"])))
            add(S, "lr", x, float(pl_num(r["lr"])))
        v = ev.get((s, r["seg"]))
        if v:
            out.append(cur)
            cur = ""
            out.append(f"Validation DataLoader 0: 100%|\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588| 1/1 [00:00<00:00, 55.02it/s]")
            lastval = v["val"]
            add(S, "val", float(pl_num(float(s - 1))), float(pl_num(v["val"])) if fin(v["val"]) else v["val"])
        if n == bpe and cur:
            out.append(cur)
            cur = ""
    if cur:
        out.append(cur)
    out.append("`Trainer.fit` stopped: `max_steps=%d` reached." % cfg["steps"])
    open(os.path.join(p, "train_stdout.log"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- nanotron console
def _human(v):
    for u, k in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(v) >= k:
            return f"{v / k:.3g}{u}"
    return f"{v:.3g}"


def w_nanotron(d, res, cfg):
    """nanotron console tee'd to logs/train.log: '[default0]:12/02/2025 09:00:01 [INFO|DP=0|PP=0|TP=0]: iteration: N / M |
    consumed_tokens: | elapsed_time_per_iteration_ms: | tokens_per_sec: | tokens_per_sec_per_gpu: | global_batch_size: | lm_loss: |
    lr: | model_tflops_per_gpu: | hardware_tflops_per_gpu: | grad_norm:' every iteration_step_info_interval iterations; lm_loss
    and grad_norm of the logged iteration, elapsed time averaged over the interval; a resume prints the checkpoint lines."""
    S = series("iteration (1-based)", "loss of the logged iteration (4 decimals); elapsed time averaged over the interval (ms)")
    os.makedirs(os.path.join(d, "logs"), exist_ok=True)
    M, tok = cfg["steps"], res["bs"] * 32
    out = []
    seg = 0
    for w in windows(res["recs"], cfg["every"], "mean"):
        r, s = w["rec"], w["step"]
        t = time.strftime("%m/%d/%Y %H:%M:%S", time.gmtime(ts(r)))
        if w["seg"] != seg:
            seg = w["seg"]
            k0 = resumed_at(res)[seg]
            out.append(f"[default0]:{t} [INFO|DP=0|PP=0|TP=0]: Loading checkpoint from checkpoints/{k0} ...")
            out.append(f"[default0]:{t} [INFO|DP=0|PP=0|TP=0]: Resuming training from iteration {k0}")
        ms = w["st"] * 1000
        out.append(f"[default0]:{t} [INFO|DP=0|PP=0|TP=0]: iteration: {s} / {M} | consumed_tokens: {_human(s * tok)} | "
                   f"elapsed_time_per_iteration_ms: {ms:.1f} | tokens_per_sec: {_human(tok / w['st'])} | tokens_per_sec_per_gpu: {_human(tok / w['st'])} | "
                   f"global_batch_size: {res['bs']} | lm_loss: {fmt_g(r['loss'])} | lr: {r['lr']:.4e} | model_tflops_per_gpu: 0.00 | "
                   f"hardware_tflops_per_gpu: 0.00 | grad_norm: {fmt_g(r['gn'], 3)}")
        add(S, "loss", s, round(r["loss"], 4) if fin(r["loss"]) else r["loss"])
        add(S, "lr", s, float(f"{r['lr']:.4e}"))
        add(S, "gn", s, round(r["gn"], 3) if fin(r["gn"]) else r["gn"])
        add(S, "st", s, round(ms, 1) / 1000)
    open(os.path.join(d, "logs", "train.log"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- DeepSpeed per-rank logs
def w_dsranks(d, res, cfg):
    """DeepSpeed launched with --enable_each_rank_log=logs: logs/ds_train_node0_rank0.log and ..._rank1.log. Each rank prints the
    wall_clock_breakdown timers 'time (ms) | fwd_microstep: | bwd_microstep: | bwd_inner_microstep: | bwd_allreduce_microstep: |
    step_microstep:' (means over steps_per_print) and the engine's '[Rank R] step=N, skipped=0, lr=[...]'; the training script
    prints 'step N | loss X' (all-reduced loss, interval mean) on every rank, and eval lines on rank 0."""
    S = series("step (global_step)", "mean over steps_per_print (all-reduced loss)")
    os.makedirs(os.path.join(d, "logs"), exist_ok=True)
    rows = windows(res["recs"], cfg["every"], "mean")
    ev = {e["step"]: e for e in res["evals"]}
    for rk in (0, 1):
        L = [f"[{_iso(T0)}] [INFO] [comm.py:652:init_distributed] cdb=None", f"[{_iso(T0)}] [INFO] [config.py:1000:print] wall_clock_breakdown ......... True"]
        S["rank"][rk] = {"compute": [], "wait": []}
        for w in rows:
            s = w["step"]
            rr = w["ranks"][rk]
            fw, bw, wt = rr["fwd"] * 1000, rr["bwd"] * 1000, rr["wait"] * 1000
            t = _iso(ts(w["rec"]))
            L.append(f"[{t}] [INFO] [logging.py:128:log_dist] [Rank {rk}] step={s}, skipped=0, lr=[{w['lr']!r}], mom=[(0.9, 0.999)]")
            L.append(f"[{t}] [INFO] [logging.py:128:log_dist] [Rank {rk}] time (ms) | fwd_microstep: {fw:.2f} | bwd_microstep: {bw + wt:.2f} | "
                     f"bwd_inner_microstep: {bw:.2f} | bwd_allreduce_microstep: {wt:.2f} | step_microstep: {0.05 * (fw + bw):.2f}")
            L.append(f"step {s} | loss {fmt_g(w['loss'])} | lr {w['lr']:.4e}")
            S["rank"][rk]["compute"].append((s, (round(fw, 2) + round(bw, 2)) / 1000))
            S["rank"][rk]["wait"].append((s, round(wt, 2) / 1000))
            if rk == 0:
                add(S, "loss", s, round(w["loss"], 4))
                add(S, "lr", s, w["lr"])
                if s in ev:
                    L.append(f"eval step {s} | val_loss {fmt_g(ev[s]['val'])}")
                    add(S, "val", s, round(ev[s]["val"], 4))
        open(os.path.join(d, "logs", f"ds_train_node0_rank{rk}.log"), "w").write("\n".join(L) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- mlx-lm LoRA console
def w_mlxlm(d, res, cfg):
    """mlx_lm.lora console tee'd to lora_train.log: 'Iter N: Train loss X, Learning Rate Y, It/sec, Tokens/sec, Trained Tokens,
    Peak mem Z GB' every steps_per_report (loss averaged over the interval, 3 decimals; It/sec over the interval; peak memory so
    far, GB), 'Iter N: Val loss V, Val took Ts' at iteration 1 and every steps_per_eval, adapter-save lines."""
    S = series("Iter N (1-based)", "mean over steps_per_report (3 decimals); It/sec over the interval; Peak mem = running max, GB")
    tok = res["bs"] * 32
    out = ["Loading pretrained model", "Loading datasets", "Training", "Trainable parameters: 100.000% (0.012M/0.012M)",
           f"Starting training..., iters: {cfg['steps']}"]
    ev = {e["step"]: e for e in res["evals"]}
    peak, trained = 0.0, 0
    for w in windows(res["recs"], cfg["every"], "mean"):
        r, s = w["rec"], w["step"]
        peak = max(peak, r["rss"] / 1024)
        trained = s * tok
        out.append(f"Iter {s}: Train loss {fmt_g(w['loss'], 3)}, Learning Rate {w['lr']:.3e}, It/sec {1.0 / w['st']:.3f}, "
                   f"Tokens/sec {tok / w['st']:.3f}, Trained Tokens {trained}, Peak mem {peak:.3f} GB")
        add(S, "loss", s, round(w["loss"], 3) if fin(w["loss"]) else w["loss"])
        add(S, "lr", s, float(f"{w['lr']:.3e}"))
        add(S, "st", s, 1.0 / round(1.0 / w["st"], 3))
        add(S, "rss", s, round(peak, 3) * 1024)
        if s in ev:
            out.append(f"Iter {s}: Val loss {fmt_g(ev[s]['val'], 3)}, Val took 0.048s")
            add(S, "val", s, round(ev[s]["val"], 3) if fin(ev[s]["val"]) else ev[s]["val"])
        if s % 100 == 0:
            out.append(f"Iter {s}: Saved adapter weights to adapters/adapters.safetensors and adapters/{s:07d}_adapters.safetensors.")
    out.append("Saved final weights to adapters/adapters.safetensors.")
    open(os.path.join(d, "lora_train.log"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- nnU-Net v2 training log
def w_nnunet(d, res, cfg):
    """nnU-Net v2 nnUNet_results/<dataset>/<trainer>/fold_0/training_log_<date>.txt: per epoch 'Epoch e', 'Current learning rate:
    lr' (5 decimals), 'train_loss x', 'val_loss v' (4 decimals; epoch means), 'Pseudo dice [..]', 'Epoch time: t s'."""
    S = series("epoch (0-based, 'Epoch e')", "mean over the epoch (4 decimals)")
    p = os.path.join(d, "nnUNet_results", "Dataset999_Custom", "nnUNetTrainer__nnUNetPlans__2d", "fold_0")
    os.makedirs(p, exist_ok=True)
    ev = {e["step"]: e for e in res["evals"]}
    out = []

    def line(t, msg):
        out.append(time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + ".%06d: %s" % (int((t % 1) * 1e6), msg))
    t0 = T0
    for row in epochs(res["recs"], res["bpe"]):
        e = row["epoch"]
        first = [r for r in res["recs"] if (r["step"] - 1) // res["bpe"] == e][0]
        line(t0, "")
        line(t0, f"Epoch {e}")
        line(t0, f"Current learning rate: {round(first['lr'], 5)}")
        t1 = ts(row["rec"])
        line(t1, f"train_loss {fmt_g(row['loss'])}")
        add(S, "loss", e, round(row["loss"], 4) if fin(row["loss"]) else row["loss"])
        add(S, "lr", e, round(first["lr"], 5))
        v = ev.get(row["step"])
        if v:
            line(t1, f"val_loss {fmt_g(v['val'])}")
            line(t1, f"Pseudo dice [{float(v['acc'] or 0.0):.4f}]")
            add(S, "val", e, round(v["val"], 4) if fin(v["val"]) else v["val"])
        line(t1, f"Epoch time: {row['dur']:.2f} s")
        t0 = t1 + 0.01
    open(os.path.join(p, "training_log_2025_12_2_09_00_00.txt"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- SpeechBrain train_log.txt
def sb_num(v):
    if not fin(v):
        return "nan"
    return f"{v:.2f}" if 1.0 < v < 100.0 else f"{v:.2e}"


def w_speechbrain(d, res, cfg):
    """SpeechBrain FileTrainLogger results/<exp>/<seed>/train_log.txt: 'epoch: E, lr: L - train loss: X - valid loss: V, valid
    error: R' (epoch means; values between 1 and 100 with 2 decimals, others as 3-significant-digit scientific notation)."""
    S = series("epoch (1-based, 'epoch: E')", "mean over the epoch, written as .2f (1 < v < 100) or .2e")
    p = os.path.join(d, "results", "custom", str(cfg["seed"]))
    os.makedirs(p, exist_ok=True)
    ev = {e["step"]: e for e in res["evals"]}
    out = []
    for row in epochs(res["recs"], res["bpe"]):
        e = row["epoch"] + 1
        first = [r for r in res["recs"] if (r["step"] - 1) // res["bpe"] == row["epoch"]][0]
        msg = f"epoch: {e}, lr: {sb_num(first['lr'])} - train loss: {sb_num(row['loss'])}"
        add(S, "loss", e, float(sb_num(row["loss"])) if fin(row["loss"]) else row["loss"])
        add(S, "lr", e, float(sb_num(first["lr"])))
        v = ev.get(row["step"])
        if v:
            msg += f" - valid loss: {sb_num(v['val'])}, valid error: {sb_num(1 - float(v['acc'] or 0.0))}"
            add(S, "val", e, float(sb_num(v["val"])) if fin(v["val"]) else v["val"])
        out.append(msg)
    open(os.path.join(p, "train_log.txt"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- OpenCLIP out.log
def w_openclip(d, res, cfg):
    """open_clip logs/<name>/out.log: 'Train Epoch: E [n/N (p%)] Data (t): Batch (t): S/s, S/s/gpu LR: Logit Scale: <Loss>: v (avg)
    Loss: v (avg)' at the first batch, every log_every_n_steps and at the epoch end (v = current batch, avg = running epoch mean;
    Data/Batch (t) = means since the previous line, in s), 'Eval Epoch: E val_loss: ...' after each epoch."""
    lw = res["loss_word"]
    S = series("global step = E*N + batch_count (batch_count = samples shown / batch size)", "current batch (#.5g); running epoch mean in parentheses")
    p = os.path.join(d, "logs", "2025_12_02-09_00_00-model_custom-lr_%g-b_%d" % (cfg["lr"], res["bs"]))
    os.makedirs(p, exist_ok=True)
    bpe, bs = res["bpe"], res["bs"]
    ev = {e["step"]: e for e in res["evals"]}

    def pre(t):
        return time.strftime("%Y-%m-%d,%H:%M:%S", time.gmtime(t)) + " | INFO | "
    out = [pre(T0) + "Running with a single process. Device cpu.", pre(T0) + "Start epoch 0"]
    buf, lsum, lcnt = [], 0.0, 0
    for r in res["recs"]:
        s = r["step"]
        e, bc = (s - 1) // bpe, (s - 1) % bpe + 1
        if bc == 1:
            lsum, lcnt = 0.0, 0
        buf.append(r)
        lsum += r["loss"]
        lcnt += 1
        if bc == 1 or bc % cfg["every"] == 0 or bc == bpe:
            dt, bt = mean([b["dt"] for b in buf]), mean([b["st"] for b in buf])
            ns = bc * bs
            avg = lsum / lcnt
            lv = f"{r['loss']:#.5g}" if fin(r["loss"]) else "nan"
            av = f"{avg:#.5g}" if fin(avg) else "nan"
            out.append(pre(ts(r)) + f"Train Epoch: {e} [{ns:>{len(str(bpe * bs))}}/{bpe * bs} ({100 * bc / bpe:.0f}%)] Data (t): {dt:.3f} "
                       f"Batch (t): {bt:.3f}, {bs / bt:#g}/s, {bs / bt:#g}/s/gpu LR: {r['lr']:5f} Logit Scale: 14.286 "
                       f"{lw.capitalize()}: {lv} ({av}) Loss: {lv} ({av})")
            x = e * bpe + bc
            add(S, "loss", x, float(lv) if fin(r["loss"]) else r["loss"])
            add(S, "dt", x, round(dt, 3))
            add(S, "st", x, round(bt, 3))
            add(S, "lr", x, round(r["lr"], 6))
            buf = []
        if s in ev:
            v = ev[s]
            out.append(pre(ts(r) + 0.1) + f"Eval Epoch: {e + 1} val_loss: {round(v['val'], 4):.4f}\tepoch: {e + 1:.4f}\tnum_samples: 400.0000")
            add(S, "val", s, round(v["val"], 4) if fin(v["val"]) else v["val"])
        if bc == bpe and s < res["recs"][-1]["step"]:
            out.append(pre(ts(r) + 0.2) + f"Start epoch {e + 1}")
    open(os.path.join(p, "out.log"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- timm summary.csv
def w_timmcsv(d, res, cfg):
    """timm train.py output/train/<exp>/summary.csv: 'epoch,lr,train_loss,eval_loss,eval_top1,eval_top5' (train_loss = the
    epoch's running mean; lr = mean lr of the param groups at the epoch end), plus args.yaml."""
    S = series("epoch (0-based, the 'epoch' column)", "mean over the epoch (full precision)")
    p = os.path.join(d, "output", "train", "20251202-090000-custom-8")
    os.makedirs(p, exist_ok=True)
    ev = {e["step"]: e for e in res["evals"]}
    out = ["epoch,lr,train_loss,eval_loss,eval_top1,eval_top5"]
    for row in epochs(res["recs"], res["bpe"]):
        e = row["epoch"]
        v = ev.get(row["step"])
        acc = 100 * float(v["acc"] or 0.0) if v else 0.0
        out.append(f"{e},{row['lr']!r},{row['loss']!r},{(v['val'] if v else float('nan'))!r},{acc!r},{min(100.0, acc * 1.5)!r}")
        add(S, "loss", e, row["loss"])
        add(S, "lr", e, row["lr"])
        if v:
            add(S, "val", e, v["val"])
    open(os.path.join(p, "summary.csv"), "w").write("\n".join(out) + "\n")
    open(os.path.join(p, "args.yaml"), "w").write(f"lr: {cfg['lr']}\nbatch_size: {res['bs']}\nepochs: {math.ceil(cfg['steps'] / res['bpe'])}\nopt: {cfg.get('opt', 'adam')}\n")
    return S


# ---------------------------------------------------------------------------------------------------- Guild AI run output
def w_guild(d, res, cfg):
    """Guild AI run directory .guild/runs/<id>/ with the captured console .guild/output; Guild's default output-scalar pattern reads
    'key: value' lines and 'step: N' sets the step. Values are means over the logging interval (6 significant digits); times in s,
    memory in MB."""
    lw = res["loss_word"]
    S = series("step (the 'step: N' line before the values)", "mean over the logging interval (6 significant digits)")
    rid = "6c1f0e7a9b2d4e3f8a5b0c1d2e3f4a5b"
    p = os.path.join(d, ".guild", "runs", rid)
    os.makedirs(os.path.join(p, ".guild", "attrs"), exist_ok=True)
    open(os.path.join(p, ".guild", "opref"), "w").write("guildfile:/work/proj/guild.yml 0a1b2c3d train train\n")
    open(os.path.join(p, ".guild", "attrs", "flags"), "w").write(f"batch_size: {res['bs']}\nlr: {cfg['lr']}\nsteps: {cfg['steps']}\n")
    open(os.path.join(p, ".guild", "attrs", "started"), "w").write(str(int(T0 * 1e6)))
    ev = {(e["step"], e["seg"]): e for e in res["evals"]}
    out = ["Resolving data dependency", f"Training for {cfg['steps']} steps"]
    seg = 0
    for w in windows(res["recs"], cfg["every"], "mean"):
        s = w["step"]
        if w["seg"] != seg:
            seg = w["seg"]
            out.append(f"Restored checkpoint checkpoints/last.pt (step {resumed_at(res)[seg]})")
        out.append(f"step: {s}")
        for key, name, v, k in (("loss", f"train_{lw}", w["loss"], 1), ("lr", "lr", w["lr"], 1), ("gn", "grad_norm", w["gn"], 1),
                                ("st", "step_time", w["st"], 1), ("dt", "data_time", w["dt"], 1), ("rss", "rss_mb", w["rss"], 1),
                                ("scale", "loss_scale", w["scale"], 1), ("dead", "dead_fraction", w["dead"], 1), ("sat", "sat_fraction", w["sat"], 1),
                                ("gfirst", "grad_norm_first_layer", w["gfirst"] if cfg.get("layer_gn") else None, 1),
                                ("glast", "grad_norm_last_layer", w["glast"] if cfg.get("layer_gn") else None, 1)):
            if v is None:
                continue
            txt = f"{v:.6g}" if fin(v) else "nan"
            out.append(f"{name}: {txt}")
            add(S, key, s, float(txt))
        e = ev.get((s, w["seg"]))
        if e:
            out.append(f"val_{lw}: {e['val']:.6g}")
            add(S, "val", s, float(f"{e['val']:.6g}"))
    open(os.path.join(p, ".guild", "output"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- Comet metrics export
def w_comet(d, res, cfg):
    """Comet experiment metrics exported with the REST API (APIExperiment.get_metrics) to comet_export/<experiment>/metrics.csv:
    'metricName,metricValue,timestamp,step,epoch,runContext,offset' (train context prefixes 'train_', validation 'validate_'),
    current-batch values every N steps. Comet does not store non-finite values: the SDK prints a warning (kept in comet.log) and
    the point is missing from the export."""
    lw = res["loss_word"]
    S = series("step", "current batch")
    p = os.path.join(d, "comet_export", "custom-experiment-4f8e2c")
    os.makedirs(p, exist_ok=True)
    ev = {e["step"]: e for e in res["evals"]}
    rows = ["metricName,metricValue,timestamp,step,epoch,runContext,offset"]
    warn = []
    off = 0
    pending = False
    for r in res["recs"]:
        s = r["step"]
        if s % cfg["every"] != 0:
            continue
        if not fin(r["loss"]):
            pending = True
        t = int(ts(r) * 1000)
        ep = (s - 1) // res["bpe"]
        for name, v, key in ((f"train_{lw}", r["loss"], "loss"), ("train_lr", r["lr"], "lr"), ("train_grad_norm", r["gn"], "gn"),
                             ("train_batch_time_ms", r["st"] * 1000, "st"), ("sys.ram.used", r["rss"] * 2**20, "rss"),
                             ("train_dead_unit_fraction", r["dead"], "dead"), ("train_gate_saturation", r["sat"], "sat")):
            if v is None:
                continue
            if not fin(v):
                warn.append(f"COMET WARNING: Metric '{name}' value {v} at step {s} is not a finite number; it was not logged")
                continue
            off += 1
            rows.append(f"{name},{v!r},{t},{s},{ep},{'train' if name.startswith('train') else ''},{off}")
            add(S, key, s, v / 1000 if key == "st" else (v / 2**20 if key == "rss" else v))
            if key == "loss" and pending:
                S["hidden"].append(s)
                pending = False
        if s in ev:
            off += 1
            rows.append(f"validate_{lw},{ev[s]['val']!r},{t + 50},{s},{ep},validate,{off}")
            add(S, "val", s, ev[s]["val"])
    open(os.path.join(p, "metrics.csv"), "w").write("\n".join(rows) + "\n")
    open(os.path.join(d, "comet.log"), "w").write("COMET INFO: Experiment is live on comet.com https://www.comet.com/ws/custom/4f8e2c\n"
                                                 + "".join(w_ + "\n" for w_ in warn) + "COMET INFO: Uploading metrics, params, and assets to Comet before program termination\n")
    return S


WRITERS = {"tb": w_tb, "hf": w_hf, "mlflow": w_mlflow, "wandb": w_wandb, "nemo": w_nemo, "nanotron": w_nanotron,
           "dsranks": w_dsranks, "mlxlm": w_mlxlm, "nnunet": w_nnunet, "speechbrain": w_speechbrain, "openclip": w_openclip,
           "timmcsv": w_timmcsv, "guild": w_guild, "comet": w_comet}
