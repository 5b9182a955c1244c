"""One writer per log format. Each writes the on-disk layout of the imitated tool and returns the series
exactly as logged: {"unit": x unit, "loss": [(x, v)], "val": [...], "lr", "gn", "st" (s), "dt" (s), "rss" (MB),
"scale", "dead", "sat", "gfirst", "glast", "rank": {r: {"compute": [...], "wait": [...]}}, "hidden": [x of
points where the logger hid a NaN], "agg": how the loss was aggregated}."""
import json
import math
import os
import random
import time

T0 = 1764493200.0  # 2025-11-30 09:00:00 UTC


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
                row["ranks"] = [{k: mean([b["ranks"][i][k] for b in buf]) for k in ("compute", "wait")} for i in range(len(r["ranks"]))]
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


def w_tbranks(d, res, cfg):
    from torch.utils.tensorboard import SummaryWriter
    S = series("global step", "current batch")
    lw = res["loss_word"]
    for rk in (0, 1):
        wr = SummaryWriter(os.path.join(d, "tb", f"rank{rk}"))
        S["rank"][rk] = {"compute": [], "wait": []}
        for r in res["recs"]:
            s = r["step"]
            if s % cfg["every"]:
                continue
            t = ts(r)
            if rk == 0:
                wr.add_scalar(f"train/{lw}", r["loss"], s, walltime=t)
                wr.add_scalar("optim/lr", r["lr"], s, walltime=t)
                add(S, "loss", s, r["loss"])
                add(S, "lr", s, r["lr"])
            c, w = r["ranks"][rk]["compute"] * 1000, r["ranks"][rk]["wait"] * 1000
            wr.add_scalar("perf/compute_ms", c, s, walltime=t)
            wr.add_scalar("perf/allreduce_wait_ms", w, s, walltime=t)
            wr.add_scalar("time/iter_ms", r["st"] * 1000, s, walltime=t)
            S["rank"][rk]["compute"].append((s, c / 1000))
            S["rank"][rk]["wait"].append((s, w / 1000))
            if rk == 0:
                add(S, "st", s, r["st"])
        if rk == 0:
            for e in res["evals"]:
                wr.add_scalar(f"eval/{lw}", e["val"], e["step"])
                add(S, "val", e["step"], e["val"])
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


# ---------------------------------------------------------------------------------------------------- wandb
def w_wandb(d, res, cfg):
    lw = res["loss_word"]
    S = series("_step", "window mean")
    rid = "k3x9q2vd"
    p = os.path.join(d, "wandb", f"offline-run-20251130_090000-{rid}", "files")
    os.makedirs(p, exist_ok=True)
    rows = windows(res["recs"], cfg["every"], "mean")
    evals = {e["step"]: e for e in res["evals"]}
    prev = None
    with open(os.path.join(p, "wandb-history.jsonl"), "w") as f:
        for w in rows:
            s = w["step"]
            r = w["rec"]
            v, hid = mask_value(w["loss"], cfg.get("mask"), prev)
            prev = v if not hid else prev
            row = {f"train/{lw}": v, "optim/lr": w["lr"], "optim/grad_norm": w["gn"], "perf/step_time_s": w["st"],
                   "perf/samples_per_sec": res["bs"] / w["st"], "sys/rss_gb": w["rss"] / 1024}
            add(S, "loss", s, v)
            if hid:
                S["hidden"].append(s)
            add(S, "lr", s, w["lr"])
            add(S, "gn", s, w["gn"])
            add(S, "st", s, w["st"])
            add(S, "rss", s, w["rss"])
            if w["scale"] is not None:
                row["amp/loss_scale"] = w["scale"]
                add(S, "scale", s, w["scale"])
            for k, key in (("act/dead_frac", "dead"), ("act/sat_frac", "sat")):
                if w[key] is not None:
                    row[k] = w[key]
                    add(S, key, s, w[key])
            if cfg.get("layer_gn"):
                row["grad/first_layer"], row["grad/last_layer"] = w["gfirst"], w["glast"]
                add(S, "gfirst", s, w["gfirst"])
                add(S, "glast", s, w["glast"])
            if s in evals:
                row[f"val/{lw}"] = evals[s]["val"]
                add(S, "val", s, evals[s]["val"])
            row.update({"_step": s, "_runtime": round(r["wall"], 3), "_timestamp": ts(r)})
            f.write(json.dumps(row) + "\n")
    last = rows[-1]
    json.dump({f"train/{lw}": last["loss"], "_step": last["step"], "_runtime": last["rec"]["wall"]}, open(os.path.join(p, "wandb-summary.json"), "w"))
    with open(os.path.join(p, "config.yaml"), "w") as f:
        f.write("wandb_version: 1\n\n")
        for k in ("lr", "opt", "steps", "bs"):
            if k in cfg:
                f.write(f"{k}:\n  desc: null\n  value: {cfg[k]}\n")
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
                           ("step_time_ms", w["st"] * 1000, "st"), ("system/system_memory_usage_megabytes", w["rss"], "rss"),
                           ("loss_scale", w["scale"], "scale"), ("dead_relu_fraction", w["dead"], "dead"), ("tanh_saturation", w["sat"], "sat")):
            if v is None:
                continue
            put(key, t, float(v), s)
            add(S, sk, s, v / 1000 if sk == "st" else v)
    for e in res["evals"]:
        put(f"val_{lw}", T0 + e["wall"], float(e["val"]), e["step"])
        add(S, "val", e["step"], e["val"])
    for key, lines in files.items():
        open(os.path.join(p, "metrics", key), "w").writelines(lines)
    return S


# ---------------------------------------------------------------------------------------------------- clearml
def w_clearml(d, res, cfg):
    S = series("iter", "current batch")
    tid = "9b1d2e7fa6c04d3f8e5a7b6c1d2e3f40"
    p = os.path.join(d, "clearml_offline", f"offline-{tid}")
    os.makedirs(p, exist_ok=True)
    json.dump({"id": tid, "name": "train", "project": "indep", "type": "training", "status": "in_progress",
               "hyperparams": {"General": {k: {"name": k, "section": "General", "value": str(cfg[k])} for k in ("lr", "opt", "bs") if k in cfg}}},
              open(os.path.join(p, "task.json"), "w"), indent=2)
    evals = {e["step"]: e for e in res["evals"]}
    with open(os.path.join(p, "metrics.jsonl"), "w") as f:
        for r in res["recs"]:
            s = r["step"]
            ev = []
            if s % cfg["every"] == 0:
                t = int(ts(r) * 1000)
                for m, v, val, key in (("loss", "train", r["loss"], "loss"), ("learning_rate", "lr", r["lr"], "lr"),
                                       ("grad_norm", "total", r["gn"], "gn"), ("timing", "iteration_time_ms", r["st"] * 1000, "st")):
                    ev.append({"timestamp": t, "type": "training_stats_scalar", "task": tid, "iter": s, "metric": m, "variant": v, "value": val})
                    add(S, key, s, val / 1000 if key == "st" else val)
            if s in evals:
                ev.append({"timestamp": int((T0 + evals[s]["wall"]) * 1000), "type": "training_stats_scalar", "task": tid, "iter": s,
                           "metric": "loss", "variant": "validation", "value": evals[s]["val"]})
                add(S, "val", s, evals[s]["val"])
            if ev:
                f.write(json.dumps(ev) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- accelerate (logging)
def _stamp(t):
    return time.strftime("%m/%d/%Y %H:%M:%S", time.gmtime(t))


def w_accelerate(d, res, cfg):
    S = series("step N", "window mean")
    lines = [f"{_stamp(T0)} - INFO - __main__ - ***** Running training *****",
             f"{_stamp(T0)} - INFO - __main__ -   Instantaneous batch size per device = {res['bs']}",
             f"{_stamp(T0)} - INFO - __main__ -   Total optimization steps = {cfg['steps']}"]
    evals = {(e["step"], e["seg"]): e for e in res["evals"]}
    prev = None
    seg = 0
    buf_rows = windows(res["recs"], cfg["every"], "mean")
    by_step = {}
    for w in buf_rows:
        by_step.setdefault((w["step"], w["seg"]), w)
    for r in res["recs"]:
        s = r["step"]
        if r["seg"] != seg:
            seg = r["seg"]
            t = ts(r)
            lines.append("Traceback (most recent call last):")
            lines.append('  File "train.py", line 211, in <module>')
            lines.append("RuntimeError: DataLoader worker (pid 41872) is killed by signal: Killed.")
            lines.append(f"{_stamp(t)} - INFO - __main__ - ***** Running training *****")
            lines.append(f"{_stamp(t)} - INFO - accelerate.accelerator - Loading states from checkpoints/step_{s - 1}")
            lines.append(f"{_stamp(t)} - INFO - __main__ - Resumed from checkpoint: checkpoints/step_{s - 1}")
        w = by_step.get((s, r["seg"]))
        if w is not None:
            v, hid = mask_value(w["loss"], cfg.get("mask"), prev)
            prev = v if not hid else prev
            parts = [f"step {s}/{cfg['steps']}: loss={fmt_g(v)}", f"lr={w['lr']:.3e}", f"grad_norm={fmt_g(w['gn'], 3)}",
                     f"step_time={w['st'] * 1000:.1f}ms", f"data_time={w['dt'] * 1000:.1f}ms", f"rss={w['rss']:.1f}MB"]
            add(S, "loss", s, v)
            if hid:
                S["hidden"].append(s)
            for key in ("lr", "gn", "st", "dt", "rss"):
                add(S, key, s, w[key])
            if w["dead"] is not None:
                parts.append(f"dead_frac={w['dead']:.3f}")
                add(S, "dead", s, w["dead"])
            if w["sat"] is not None:
                parts.append(f"sat_frac={w['sat']:.3f}")
                add(S, "sat", s, w["sat"])
            if cfg.get("layer_gn"):
                parts.append(f"gn_first={w['gfirst']:.3e} gn_last={w['glast']:.3e}")
                add(S, "gfirst", s, w["gfirst"])
                add(S, "glast", s, w["glast"])
            lines.append(f"{_stamp(ts(r))} - INFO - __main__ - " + " ".join(parts))
        e = evals.get((s, r["seg"]))
        if e is not None:
            lines.append(f"{_stamp(ts(r))} - INFO - __main__ - epoch {(s - 1) // res['bpe']} step {s}: eval_loss: {fmt_g(e['val'])}")
            add(S, "val", s, e["val"])
    with open(os.path.join(d, "train.log"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return S


def w_accelranks(d, res, cfg):
    S = series("step N", "window mean")
    os.makedirs(os.path.join(d, "logs"), exist_ok=True)
    rows = windows(res["recs"], cfg["every"], "mean")
    for rk in (0, 1):
        S["rank"][rk] = {"compute": [], "wait": []}
        lines = [f"{_stamp(T0)} - INFO - accelerate.state - Distributed environment: MULTI_CPU  Backend: gloo",
                 f"Num processes: 2\nProcess index: {rk}\nLocal process index: {rk}"]
        for w in rows:
            s = w["step"]
            c, wt = w["ranks"][rk]["compute"], w["ranks"][rk]["wait"]
            lines.append(f"{_stamp(ts(w['rec']))} - INFO - __main__ - [rank{rk}] step {s}: loss={fmt_g(w['loss'])} "
                         f"fwd_bwd_ms={c * 1000:.2f} allreduce_wait_ms={wt * 1000:.2f} step_ms={w['st'] * 1000:.2f}")
            S["rank"][rk]["compute"].append((s, c))
            S["rank"][rk]["wait"].append((s, wt))
            if rk == 0:
                add(S, "loss", s, w["loss"])
                add(S, "st", s, w["st"])
        if rk == 0:
            for e in res["evals"]:
                lines.append(f"{_stamp(T0 + e['wall'])} - INFO - __main__ - [rank0] step {e['step']}: eval_loss: {fmt_g(e['val'])}")
                add(S, "val", e["step"], e["val"])
        open(os.path.join(d, "logs", f"train_rank{rk}.log"), "w").write("\n".join(lines) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- Lightning progress bar
def _hms(sec):
    sec = int(sec)
    return f"{sec // 60:02d}:{sec % 60:02d}"


def _bar(n, tot, width=10):
    frac = n / tot
    full = int(frac * width)
    rest = int((frac * width - full) * 8)
    parts = " ▏▎▍▌▋▊▉"
    s = "█" * full + (parts[rest] if full < width else "")
    return s.ljust(width)


def w_plbar(d, res, cfg):
    S = series("global step = epoch x batches_per_epoch + n (n of the Epoch bar)", "current batch")
    bpe = res["bpe"]
    out = []
    evals = {e["step"]: e for e in res["evals"]}
    last_val = None
    ep_losses = []
    t_start = res["recs"][0]["wall"]
    for r in res["recs"]:
        s = r["step"]
        e, n = (s - 1) // bpe, (s - 1) % bpe + 1
        ep_losses.append(r["loss"])
        if n % cfg["every"] == 0 or n == bpe:
            el = r["wall"] - t_start
            rate = n / max(1e-6, el) if el > 0 else 0.0
            post = f"v_num=0, train_loss_step={r['loss']:.3f}"
            add(S, "loss", s, float(f"{r['loss']:.3f}"))
            if last_val is not None:
                post += f", val_loss={last_val:.3f}"
            if n == bpe and e > 0:
                pass
            if n == bpe:
                tle = mean(ep_losses)
                if s in evals:
                    last_val = evals[s]["val"]
                    add(S, "val", s, float(f"{last_val:.3f}"))
                    out.append("\r" + f"Validation: |          | 0/? [00:00<?, ?it/s]" + "\r" +
                               f"Validation DataLoader 0: 100%|██████████| 1/1 [00:00<00:00, 90.91it/s]")
                    post = f"v_num=0, train_loss_step={r['loss']:.3f}, val_loss={last_val:.3f}"
                post += f", train_loss_epoch={tle:.3f}"
                ep_losses = []
            out.append(f"\rEpoch {e}: {int(100 * n / bpe):3d}%|{_bar(n, bpe)}| {n}/{bpe} [{_hms(el)}<{_hms((bpe - n) / max(rate, 1e-6))}, {rate:.2f}it/s, {post}]")
            if n == bpe:
                out.append("\n")
                t_start = r["wall"]
    with open(os.path.join(d, "lightning_console.txt"), "w") as f:
        f.write("GPU available: False, used: False\nTPU available: False, using: 0 TPU cores\n\n"
                "  | Name  | Type | Params | Mode\n---------------------------------------\n0 | model | Net  | 12.3 K | train\n"
                "---------------------------------------\n")
        f.write("".join(out) + "`Trainer.fit` stopped: `max_steps=%d` reached.\n" % cfg["steps"])
    return S


# ---------------------------------------------------------------------------------------------------- PaddleDetection
def w_ppdet(d, res, cfg):
    S = series("global iter = epoch x iters_per_epoch + i (0-based)", "loss: median of the last 20 iterations; batch_cost/data_cost: window mean (s)")
    bpe = res["bpe"]
    lines = []
    hist = []
    every = cfg["every"]
    tot = cfg["steps"]
    buf = []
    for r in res["recs"]:
        s = r["step"]
        hist.append(r["loss"])
        buf.append(r)
        e, i = (s - 1) // bpe, (s - 1) % bpe
        if i % every == 0:
            med = median(hist[-20:])
            bc, dc = mean([b["st"] for b in buf]), mean([b["dt"] for b in buf])
            eta = int(bc * (tot - s))
            lines.append(f"[{time.strftime('%m/%d %H:%M:%S', time.gmtime(ts(r)))}] ppdet.engine INFO: Epoch: [{e}] [{i:>3d}/{bpe}] "
                         f"learning_rate: {r['lr']:.6f} loss: {fmt_g(med, 6)} eta: {eta // 3600}:{eta % 3600 // 60:02d}:{eta % 60:02d} "
                         f"batch_cost: {bc:.4f} data_cost: {dc:.4f} ips: {res['bs'] / bc:.4f} images/s")
            x = e * bpe + i
            add(S, "loss", x, med)
            add(S, "lr", x, r["lr"])
            add(S, "st", x, bc)
            add(S, "dt", x, dc)
            buf = []
    open(os.path.join(d, "train.log"), "w").write("\n".join(lines) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- MXNet Module / Speedometer
def w_mxnet(d, res, cfg):
    name = {"ce": "cross-entropy", "xent": "cross-entropy", "nll": "cross-entropy", "logloss": "log-loss"}.get(res["loss_word"], res["loss_word"])
    S = series("global batch = epoch x batches_per_epoch + count (right end of Batch [a-b])", "window mean (auto_reset)")
    bpe = res["bpe"]
    every = cfg["every"]
    lines = []
    buf = []
    ep_buf = []
    evals = {e["step"]: e for e in res["evals"]}
    for r in res["recs"]:
        s = r["step"]
        e, c = (s - 1) // bpe, (s - 1) % bpe + 1
        buf.append(r)
        ep_buf.append(r)
        if c % every == 0:
            sp = len(buf) * res["bs"] / sum(b["st"] for b in buf)
            m = mean([b["loss"] for b in buf])
            lines.append(f"INFO:root:Epoch[{e}] Batch [{c - every}-{c}]\tSpeed: {sp:.2f} samples/sec\t{name}={fmt_g(m, 6)}")
            add(S, "loss", e * bpe + c, m)
            add(S, "st", e * bpe + c, res["bs"] / sp)
            buf = []
        if c == bpe:
            lines.append(f"INFO:root:Epoch[{e}] Train-{name}={fmt_g(mean([b['loss'] for b in ep_buf]), 6)}")
            lines.append(f"INFO:root:Epoch[{e}] Time cost={sum(b['st'] for b in ep_buf):.3f}")
            if s in evals:
                lines.append(f"INFO:root:Epoch[{e}] Validation-{name}={fmt_g(evals[s]['val'], 6)}")
                add(S, "val", e * bpe + c, evals[s]["val"])
            ep_buf = []
            buf = []
    open(os.path.join(d, "train.log"), "w").write("\n".join(lines) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- ESPnet2 trainer
def w_espnet(d, res, cfg):
    S = series("global iteration = (epoch-1) x iters_per_epoch + b (right end of a-bbatch)", "window mean; train_time and iter_time in s")
    bpe = res["bpe"]
    every = cfg["every"]
    lines = []
    buf, ep_buf = [], []
    evals = {e["step"]: e for e in res["evals"]}
    host = "[gpu-node07]"
    for r in res["recs"]:
        s = r["step"]
        e, b = (s - 1) // bpe + 1, (s - 1) % bpe + 1
        buf.append(r)
        ep_buf.append(r)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts(r))) + ",%03d" % int((ts(r) % 1) * 1000)
        if b % every == 0:
            m = {k: mean([x[k] for x in buf]) for k in ("loss", "st", "dt", "gn")}
            fw = m["st"] * 0.45
            line = (f"{host} {stamp} (trainer:762) INFO: {e}epoch:train:{b - every + 1}-{b}batch: iter_time={m['dt']:.3e}, "
                    f"forward_time={fw:.3f}, loss={fmt_g(m['loss'], 3)}, backward_time={m['st'] * 0.4:.3f}, grad_norm={fmt_g(m['gn'], 3)}, "
                    f"clip=100.000, loss_scale=1.000, optim_step_time={m['st'] * 0.1:.3f}, optim0_lr0={r['lr']:.3e}, train_time={m['st']:.3f}")
            lines.append(line)
            x = (e - 1) * bpe + b
            add(S, "loss", x, float(fmt_g(m["loss"], 3)) if fin(m["loss"]) else m["loss"])
            add(S, "st", x, float(f"{m['st']:.3f}"))
            add(S, "dt", x, m["dt"])
            add(S, "gn", x, float(fmt_g(m["gn"], 3)) if fin(m["gn"]) else m["gn"])
            add(S, "lr", x, r["lr"])
            buf = []
        if b == bpe:
            v = evals.get(s)
            tail = f", [valid] loss={fmt_g(v['val'], 3)}, time=0.05 seconds, total_count={e * 4}" if v else ""
            if v:
                add(S, "val", (e - 1) * bpe + b, float(fmt_g(v["val"], 3)))
            lines.append(f"{host} {stamp} (trainer:338) INFO: {e}epoch results: [train] iter_time={mean([x['dt'] for x in ep_buf]):.3e}, "
                         f"loss={fmt_g(mean([x['loss'] for x in ep_buf]), 3)}, train_time={mean([x['st'] for x in ep_buf]):.3f}, "
                         f"time={sum(x['st'] for x in ep_buf):.2f} seconds, total_count={e * bpe}, gpu_max_cached_mem_GB=0.000{tail}")
            ep_buf = []
            buf = []
    os.makedirs(os.path.join(d, "exp", "asr_train", ), exist_ok=True)
    open(os.path.join(d, "exp", "asr_train", "train.log"), "w").write("\n".join(lines) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- AllenNLP
def w_allennlp(d, res, cfg):
    S = series("epoch (0-based, from metrics_epoch_N.json)", "epoch mean")
    p = os.path.join(d, "serialization")
    os.makedirs(p, exist_ok=True)
    evals = {e["step"]: e for e in res["evals"]}
    best, best_e = None, None
    rows = epochs(res["recs"], res["bpe"])
    for row in rows:
        e = row["epoch"]
        m = {"best_epoch": None, "peak_worker_0_memory_MB": round(max(r["rss"] for r in res["recs"] if (r["step"] - 1) // res["bpe"] <= e), 3),
             "training_duration": "0:00:%02d.%06d" % (int(row["dur"]), int((row["dur"] % 1) * 1e6)),
             "epoch": e, "training_loss": row["loss"], "training_worker_0_memory_MB": round(row["rss"], 3),
             "training_epochs": e}
        add(S, "loss", e, row["loss"])
        add(S, "rss", e, row["rss"])
        add(S, "st", e, row["dur"] / row["n"])
        v = evals.get(row["step"])
        if v:
            m["validation_loss"] = v["val"]
            add(S, "val", e, v["val"])
            if fin(v["val"]) and (best is None or v["val"] < best):
                best, best_e = v["val"], e
            m["best_validation_loss"] = best
        m["best_epoch"] = best_e
        json.dump(m, open(os.path.join(p, f"metrics_epoch_{e}.json"), "w"), indent=2)
    json.dump({"trainer": {"num_epochs": len(rows), "optimizer": {"type": cfg.get("opt", "adam"), "lr": cfg["lr"]}},
               "data_loader": {"batch_size": res["bs"], "shuffle": True}}, open(os.path.join(p, "config.json"), "w"), indent=2)
    return S


# ---------------------------------------------------------------------------------------------------- TF Estimator
def w_estimator(d, res, cfg):
    S = series("global step (0-based, as printed in step = N)", "current batch")
    every = cfg["every"]
    lines = ["INFO:tensorflow:Calling model_fn.", "INFO:tensorflow:Done calling model_fn.", "INFO:tensorflow:Create CheckpointSaverHook.",
             "INFO:tensorflow:Graph was finalized.", "INFO:tensorflow:Running local_init_op.", "INFO:tensorflow:Done running local_init_op.",
             "INFO:tensorflow:Saving checkpoints for 0 into /tmp/model/model.ckpt."]
    evals = {e["step"]: e for e in res["evals"]}
    last_t, last_s = None, None
    for r in res["recs"]:
        s0 = r["step"] - 1
        if s0 % every == 0:
            if last_t is None:
                lines.append(f"INFO:tensorflow:loss = {r['loss']:.7g}, step = {s0}")
            else:
                dtm = r["wall"] - last_t
                rate = (s0 - last_s) / dtm
                lines.append(f"INFO:tensorflow:global_step/sec: {rate:.5g}")
                lines.append(f"INFO:tensorflow:loss = {r['loss']:.7g}, step = {s0} ({dtm:.3f} sec)")
                add(S, "st", s0, 1.0 / rate)
            add(S, "loss", s0, float(f"{r['loss']:.7g}"))
            last_t, last_s = r["wall"], s0
        if r["step"] in evals:
            v = evals[r["step"]]["val"]
            lines += ["INFO:tensorflow:Calling model_fn.", f"INFO:tensorflow:Starting evaluation at 2025-11-30T09:{int(r['wall']) // 60:02d}:{int(r['wall']) % 60:02d}",
                      f"INFO:tensorflow:Saving dict for global step {r['step']}: global_step = {r['step']}, loss = {v:.7g}"]
            add(S, "val", r["step"], float(f"{v:.7g}"))
    lines.append(f"INFO:tensorflow:Loss for final step: {res['recs'][-1]['loss']:.7g}.")
    open(os.path.join(d, "train.log"), "w").write("\n".join(lines) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- OpenNMT-py
def w_onmt(d, res, cfg):
    S = series("Step N", "window mean (xent); validation read as ln(perplexity)")
    every = cfg["every"]
    rows = windows(res["recs"], every, "mean")
    evals = {e["step"]: e for e in res["evals"]}
    lines = []
    t0 = res["recs"][0]["wall"]

    def stamp(t):
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + ",%03d" % int((t % 1) * 1000)
    for w in rows:
        s, r = w["step"], w["rec"]
        xent = w["loss"]
        ppl = math.exp(min(xent, 700)) if fin(xent) else float("nan")
        toks = w["n"] * res["bs"] / sum([w["st"]] * w["n"])
        lines.append(f"[{stamp(ts(r))} INFO] Step {s}/{cfg['steps']:6d}; acc: {100 * (w['acc'] or 0):6.2f}; ppl: {ppl:8.2f}; xent: {xent:6.2f}; "
                     f"lr: {w['lr']:.5f}; sents: {w['n'] * res['bs']:7d}; bsz: {res['bs']:4d}/{res['bs']:4d}/ 1; {toks:.0f}/{toks:.0f} tok/s; {int(r['wall'] - t0):6d} sec")
        add(S, "loss", s, float(f"{xent:.2f}") if fin(xent) else xent)
        add(S, "lr", s, w["lr"])
        if s in evals:
            v = evals[s]
            vp = math.exp(min(v["val"], 700)) if fin(v["val"]) else float("nan")
            lines.append(f"[{stamp(ts(r) + 0.05)} INFO] valid stats calculation took: 0.051 s.")
            lines.append(f"[{stamp(ts(r) + 0.05)} INFO] Validation perplexity: {vp:.4f}")
            lines.append(f"[{stamp(ts(r) + 0.05)} INFO] Validation accuracy: {100 * (v['acc'] or 0):.4f}")
            add(S, "val", s, math.log(float(f"{vp:.4f}")) if fin(vp) and vp > 0 else vp)
    open(os.path.join(d, "train.log"), "w").write("\n".join(lines) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- torchvision references MetricLogger
def w_tvref(d, res, cfg):
    S = series("global iter = epoch x iters_per_epoch + i (0-based i of [i/N])", "loss: median of the last 20 iterations (global avg in brackets); time/data: mean of last 20 (s)")
    bpe = res["bpe"]
    every = cfg["every"]
    lines = []
    hist = []
    evals = {e["step"]: e for e in res["evals"]}
    for r in res["recs"]:
        s = r["step"]
        e, i = (s - 1) // bpe, (s - 1) % bpe
        if i == 0:
            hist_ep = []
        hist.append(r)
        hist_ep.append(r["loss"])
        if i % every == 0 or i == bpe - 1:
            w = hist[-20:]
            med = median([x["loss"] for x in w])
            ga = mean(hist_ep)
            tm, dm = mean([x["st"] for x in w]), mean([x["dt"] for x in w])
            eta = int(tm * (bpe - i))
            lines.append(f"Epoch: [{e}]  [{i:>{len(str(bpe))}}/{bpe}]  eta: 0:{eta // 60:02d}:{eta % 60:02d}  lr: {r['lr']}  "
                         f"img/s: {res['bs'] / r['st']:.1f}  loss: {fmt_g(med)} ({fmt_g(ga)})  time: {tm:.4f}  data: {dm:.4f}")
            x = e * bpe + i
            add(S, "loss", x, float(fmt_g(med)) if fin(med) else med)
            add(S, "lr", x, r["lr"])
            add(S, "st", x, tm)
            add(S, "dt", x, dm)
        if i == bpe - 1:
            lines.append(f"Epoch: [{e}] Total time: 0:00:{int(sum(h['st'] for h in hist[-bpe:])):02d}")
        if s in evals:
            v = evals[s]["val"]
            lines.append(f"Test:  [0/1]  eta: 0:00:00  loss: {fmt_g(v)} ({fmt_g(v)})  time: 0.0500  data: 0.0010")
            lines.append("Test:  Total time: 0:00:00")
            lines.append(f"Test:  Acc@1 {100 * (evals[s]['acc'] or 0):.3f}")
            add(S, "val", e * bpe + i, float(fmt_g(v)) if fin(v) else v)
    open(os.path.join(d, "log.txt"), "w").write("\n".join(lines) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- skorch
def w_skorch(d, res, cfg):
    S = series("epoch (1-based)", "epoch mean")
    rows = epochs(res["recs"], res["bpe"])
    evals = {e["step"]: e for e in res["evals"]}
    lines = ["  epoch    train_loss    valid_loss     dur", "-------  ------------  ------------  ------"]
    hist = []
    best_t = best_v = None
    for row in rows:
        e = row["epoch"] + 1
        v = evals.get(row["step"])
        vl = v["val"] if v else float("nan")
        lines.append(f"{e:>7d}  {fmt_g(row['loss']):>12}  {fmt_g(vl):>12}  {row['dur']:.4f}")
        add(S, "loss", e, float(fmt_g(row["loss"])) if fin(row["loss"]) else row["loss"])
        if v:
            add(S, "val", e, float(fmt_g(vl)) if fin(vl) else vl)
        add(S, "st", e, row["dur"] / row["n"])
        bt = fin(row["loss"]) and (best_t is None or row["loss"] < best_t)
        bv = fin(vl) and (best_v is None or vl < best_v)
        best_t = row["loss"] if bt else best_t
        best_v = vl if bv else best_v
        recs = [r for r in res["recs"] if (r["step"] - 1) // res["bpe"] == row["epoch"]]
        hist.append({"batches": [{"train_loss": r["loss"], "train_batch_size": res["bs"]} for r in recs], "epoch": e,
                     "train_batch_count": len(recs), "train_loss": row["loss"], "train_loss_best": bool(bt), "dur": row["dur"],
                     "valid_loss": vl, "valid_loss_best": bool(bv)})
    open(os.path.join(d, "train_output.txt"), "w").write("\n".join(lines) + "\n")
    json.dump(hist, open(os.path.join(d, "history.json"), "w"))
    return S


# ---------------------------------------------------------------------------------------------------- mmengine vis_data/scalars.json
def w_mmjson(d, res, cfg):
    S = series("step (= iter)", "window mean over the logging interval; time/data_time in s")
    p = os.path.join(d, "work_dirs", "exp", "20251130_090000", "vis_data")
    os.makedirs(p, exist_ok=True)
    evals = {e["step"]: e for e in res["evals"]}
    out = []
    for w in windows(res["recs"], cfg["every"], "mean"):
        s = w["step"]
        row = {"base_lr": cfg["lr"], "lr": w["lr"], "data_time": w["dt"], "grad_norm": w["gn"], "loss": w["loss"], "time": w["st"],
               "epoch": (s - 1) // res["bpe"] + 1, "iter": s, "memory": 0, "step": s}
        for k, key in (("lr", "lr"), ("data_time", "dt"), ("grad_norm", "gn"), ("loss", "loss"), ("time", "st")):
            add(S, key, s, row[k])
        if w["scale"] is not None:
            row["loss_scale"] = w["scale"]
            add(S, "scale", s, w["scale"])
        out.append(json.dumps(row))
        if s in evals:
            out.append(json.dumps({"val/loss": evals[s]["val"], "data_time": 0.0011, "time": 0.0123, "step": s}))
            add(S, "val", s, evals[s]["val"])
    open(os.path.join(p, "scalars.json"), "w").write("\n".join(out) + "\n")
    open(os.path.join(p, "20251130_090000.json"), "w").write("\n".join(out) + "\n")
    return S


WRITERS = {"tb": w_tb, "tbranks": w_tbranks, "hf": w_hf, "wandb": w_wandb, "mlflow": w_mlflow, "clearml": w_clearml,
           "accelerate": w_accelerate, "accelranks": w_accelranks, "plbar": w_plbar, "ppdet": w_ppdet, "mxnet": w_mxnet,
           "espnet": w_espnet, "allennlp": w_allennlp, "estimator": w_estimator, "onmt": w_onmt, "tvref": w_tvref,
           "skorch": w_skorch, "mmjson": w_mmjson}
