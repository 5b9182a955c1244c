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


def _iso(t, ms=True):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + (",%03d" % int((t % 1) * 1000) if ms else "")


# ---------------------------------------------------------------------------------------------------- llm.c
def w_llmc(d, res, cfg):
    """llm.c: log/main.log ("s:%d trl:%.4f lr:%.6f norm:%.2f" every step, 0-based s; "s:%d tel:%.4f" at validation)
    and the console (train.out): "step  i/N | train loss | norm | lr | (ms | tok/s)" with i = s + 1."""
    S = series("s (0-based step of log/main.log; the console prints s+1)", "current batch (4 decimals)")
    os.makedirs(os.path.join(d, "log"), exist_ok=True)
    lines, con = [], ["+-----------------------+----------------------------------------------------+",
                      "| Parameter             | Value                                              |",
                      f"| max_steps -x          | {cfg['steps']:<50d} |", f"| learning_rate -l      | {cfg['lr']:<50.4e} |",
                      f"| batch size B          | {res['bs']:<50d} |", "+-----------------------+----------------------------------------------------+"]
    evals = {(e["step"], e["seg"]): e for e in res["evals"]}
    seg = 0
    toks = res["bs"] * cfg.get("seq", 32)
    for r in res["recs"]:
        s0 = r["step"] - 1
        if r["seg"] != seg:
            seg = r["seg"]
            con.append("Segmentation fault (core dumped)")
            con.append(f"resuming from checkpoint log/model_{r['step'] - 1 + cfg.get('_shift_show', 0):08d}.bin")
        v = r["loss"]
        lines.append(f"s:{s0} trl:{v:.4f} lr:{r['lr']:.6f} norm:{r['gn']:.2f}")
        vv = round(v, 4) if fin(v) else v
        add(S, "loss", s0, vv)
        add(S, "lr", s0, round(r["lr"], 6))
        add(S, "gn", s0, round(r["gn"], 2) if fin(r["gn"]) else r["gn"])
        ms = r["st"] * 1000
        con.append(f"step {s0 + 1:4d}/{cfg['steps']} | train loss {v:.6f} | norm {r['gn']:.4f} | lr {r['lr']:.2e} | {ms:.2f} ms | -100.0% bf16 MFU | {toks / r['st']:.0f} tok/s")
        add(S, "st", s0, round(ms, 2) / 1000)
        e = evals.get((r["step"], r["seg"]))
        if e is not None:
            lines.append(f"s:{s0} tel:{e['val']:.4f}")
            con.append(f"val loss {e['val']:.6f}")
            add(S, "val", s0, round(e["val"], 4))
    open(os.path.join(d, "log", "main.log"), "w").write("\n".join(lines) + "\n")
    open(os.path.join(d, "train.out"), "w").write("\n".join(con) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- torchtitan
def w_torchtitan(d, res, cfg):
    """torchtitan console (tee'd to logs/train.log): "[rank0]:[titan] <time> - root - INFO - step: N  loss: X  grad_norm: G
    memory: M GiB(P%)  tps: T  tflops: F  mfu: U%"; loss is the current step's loss; no lr; step time only as tps."""
    S = series("step", "current step (4 decimals); step time = tokens per step / tps; memory in GiB (2 decimals)")
    os.makedirs(os.path.join(d, "logs"), exist_ok=True)
    seq = cfg.get("seq", 32)
    toks = res["bs"] * seq
    pre = "[rank0]:[titan] "
    out = [f"{pre}{_iso(T0)} - root - INFO - Starting job: {cfg['family']} training",
           f"{pre}{_iso(T0)} - root - INFO - Building {cfg['family']} with {{'dim': 32}}",
           f"{pre}{_iso(T0)} - root - INFO - Training starts at step 1, with local batch size {res['bs']}, global batch size {res['bs']}, sequence length {seq}, total steps {cfg['steps']} (warmup {cfg.get('warmup', 0)})"]
    evals = {(e["step"], e["seg"]): e for e in res["evals"]}
    seg = 0
    for r in res["recs"]:
        s = r["step"]
        if r["seg"] != seg:
            seg = r["seg"]
            t = ts(r)
            out.append(f"{pre}{_iso(t)} - root - INFO - Starting job: {cfg['family']} training")
            out.append(f"{pre}{_iso(t)} - root - INFO - Loading the checkpoint at step {s - 1}.")
            out.append(f"{pre}{_iso(t)} - root - INFO - Finished loading the checkpoint in 0.05 seconds.")
        if s % cfg["every"] == 0 or s == 1:
            gib = r["rss"] / 1024
            tps = int(round(toks / r["st"]))
            v = r["loss"]
            out.append(f"{pre}{_iso(ts(r))} - root - INFO - step: {s:2d}  loss: {v:7.4f}  grad_norm: {r['gn']:7.4f}  "
                       f"memory: {gib:5.2f}GiB({gib / 141 * 100:.2f}%)  tps: {tps:,}  tflops: 0.00  mfu: 0.00%")
            add(S, "loss", s, round(v, 4) if fin(v) else v)
            add(S, "gn", s, round(r["gn"], 4) if fin(r["gn"]) else r["gn"])
            add(S, "rss", s, round(gib, 2) * 1024)
            add(S, "st", s, toks / tps)
        e = evals.get((s, r["seg"]))
        if e is not None:
            out.append(f"{pre}{_iso(ts(r) + 0.001)} - root - INFO - validate step: {s:2d}  loss: {e['val']:7.4f}  memory: {r['rss'] / 1024:5.2f}GiB(0.00%)")
            add(S, "val", s, round(e["val"], 4))
    out.append(f"{pre}{_iso(ts(res['recs'][-1]) + 0.1)} - root - INFO - Training completed")
    open(os.path.join(d, "logs", "train.log"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- Marian NMT
def w_marian(d, res, cfg):
    """Marian train.log: "[date] Ep. E : Up. N : Sen. S : Cost C * W after T : Time t s : R words/s : gNorm G : L.r. lr"
    (Cost = mean over the --disp-freq updates) and "[valid] Ep. E : Up. N : ce-mean-words : V : new best|stalled k times"."""
    S = series("Up. (update count)", "window mean over --disp-freq updates (8 decimals); Time = seconds of the window")
    seq = cfg.get("seq", 32)
    wpb = res["bs"] * seq
    out = ["[2025-11-30 09:00:00] [marian] Marian v1.12.0 65bf82ff 2023-02-21 09:56:29 -0800",
           f"[2025-11-30 09:00:00] [config] disp-freq: {cfg['every']}", f"[2025-11-30 09:00:00] [config] learn-rate: {cfg['lr']}",
           f"[2025-11-30 09:00:00] [config] valid-freq: {cfg.get('eval_every', 50)}", "[2025-11-30 09:00:00] Training started"]
    evals = {(e["step"], e["seg"]): e for e in res["evals"]}
    best, stalled = None, 0
    seen = 0
    rows = windows(res["recs"], cfg["every"], "mean")
    by = {(w["step"], w["seg"]): w for w in rows}
    seg = 0
    for r in res["recs"]:
        s = r["step"]
        seen += res["bs"]
        st = time.strftime("[%Y-%m-%d %H:%M:%S]", time.gmtime(ts(r)))
        if r["seg"] != seg:
            seg = r["seg"]
            out.append(f"{st} [marian] Marian v1.12.0 65bf82ff 2023-02-21 09:56:29 -0800")
            out.append(f"{st} Loading model from model/model.npz")
            out.append(f"{st} [training] Model reloaded from model/model.npz")
            out.append(f"{st} Training started")
        w = by.get((s, r["seg"]))
        ep = (s - 1) // res["bpe"] + 1
        if w is not None:
            win_t = w["st"] * w["n"]
            out.append(f"{st} Ep. {ep} : Up. {s} : Sen. {seen:,} : Cost {fmt_g(w['loss'], 8)} * {wpb * w['n']:,} after {wpb * s:,} : "
                       f"Time {win_t:.2f}s : {wpb * w['n'] / win_t:.2f} words/s : gNorm {fmt_g(w['gn'], 4)} : L.r. {w['lr']:.4e}")
            add(S, "loss", s, float(fmt_g(w["loss"], 8)) if fin(w["loss"]) else w["loss"])
            add(S, "gn", s, float(fmt_g(w["gn"], 4)) if fin(w["gn"]) else w["gn"])
            add(S, "lr", s, float(f"{w['lr']:.4e}"))
            add(S, "st", s, float(f"{win_t:.2f}") / w["n"])
        e = evals.get((s, r["seg"]))
        if e is not None:
            v = e["val"]
            if fin(v) and (best is None or v < best):
                best, stalled, tail = v, 0, "new best"
            else:
                stalled += 1
                tail = f"stalled {stalled} times (last best: {best:.4f})" if best is not None else f"stalled {stalled} times"
            out.append(f"{st} [valid] Ep. {ep} : Up. {s} : ce-mean-words : {fmt_g(v, 4)} : {tail}")
            add(S, "val", s, float(fmt_g(v, 4)) if fin(v) else v)
    out.append(time.strftime("[%Y-%m-%d %H:%M:%S]", time.gmtime(ts(res["recs"][-1]))) + " Training finished")
    os.makedirs(os.path.join(d, "model"), exist_ok=True)
    open(os.path.join(d, "model", "train.log"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- flair
def w_flair(d, res, cfg):
    """flair ModelTrainer training.log: "epoch E - iter i/N - loss L - time (sec): t - samples/sec: s - lr: x - momentum: 0.0"
    every N//10 iterations, where L is the mean since the start of the epoch and t the seconds since the start of the epoch;
    "EPOCH E done: loss L - lr: x" and "DEV : loss V - f1-score (micro avg)  a - accuracy (micro avg)  a"; and loss.tsv."""
    S = series("global iteration = (E-1) x N + i", "running mean since the start of the epoch (8 decimals)")
    bpe = res["bpe"]
    mod = max(1, bpe // 10)
    dash = "-" * 100
    out = [f"{_iso(T0)} {dash}", f"{_iso(T0)} Model training base path: \"resources/taggers/{cfg['family']}\"", f"{_iso(T0)} {dash}",
           f"{_iso(T0)} Parameters:", f"{_iso(T0)}  - learning_rate: \"{cfg['lr']:f}\"", f"{_iso(T0)}  - mini_batch_size: \"{res['bs']}\"",
           f"{_iso(T0)}  - max_epochs: \"{math.ceil(cfg['steps'] / bpe)}\"", f"{_iso(T0)} {dash}"]
    tsv = ["EPOCH\tTIMESTAMP\tLEARNING_RATE\tTRAIN_LOSS\tDEV_LOSS\tDEV_PRECISION\tDEV_RECALL\tDEV_F1\tDEV_ACCURACY"]
    evals = {e["step"]: e for e in res["evals"]}
    tot, n, el = 0.0, 0, 0.0
    prev_t, prev_i = 0.0, 0
    for r in res["recs"]:
        s = r["step"]
        e, i = (s - 1) // bpe + 1, (s - 1) % bpe + 1
        if i == 1:
            tot, n, el, prev_t, prev_i = 0.0, 0, 0.0, 0.0, 0
            out.append(f"{_iso(ts(r))} {dash}")
        tot += r["loss"]
        n += 1
        el += r["st"]
        if i % mod == 0:
            L = tot / n
            out.append(f"{_iso(ts(r))} epoch {e} - iter {i}/{bpe} - loss {fmt_g(L, 8)} - time (sec): {el:.2f} - samples/sec: {i * res['bs'] / el:.2f} - lr: {r['lr']:.6f} - momentum: 0.000000")
            x = (e - 1) * bpe + i
            add(S, "loss", x, float(fmt_g(L, 8)) if fin(L) else L)
            add(S, "lr", x, float(f"{r['lr']:.6f}"))
            add(S, "st", x, (float(f"{el:.2f}") - prev_t) / (i - prev_i))
            prev_t, prev_i = float(f"{el:.2f}"), i
        if i == bpe:
            out.append(f"{_iso(ts(r))} {dash}")
            out.append(f"{_iso(ts(r))} EPOCH {e} done: loss {fmt_g(tot / n, 4)} - lr: {r['lr']:.6f}")
            v = evals.get(s)
            if v:
                acc = v.get("acc") or 0.0
                out.append(f"{_iso(ts(r) + 0.05)} DEV : loss {fmt_g(v['val'], 8)} - f1-score (micro avg)  {acc:.4f} - accuracy (micro avg)  {acc:.4f}")
                add(S, "val", (e - 1) * bpe + i, float(fmt_g(v["val"], 8)) if fin(v["val"]) else v["val"])
                tsv.append(f"{e}\t{time.strftime('%H:%M:%S', time.gmtime(ts(r)))}\t{r['lr']:.4f}\t{tot / n}\t{v['val']}\t{acc}\t{acc}\t{acc}\t{acc}")
            out.append(f"{_iso(ts(r) + 0.06)} {dash}")
    base = os.path.join(d, "resources", "taggers", cfg["family"])
    os.makedirs(base, exist_ok=True)
    open(os.path.join(base, "training.log"), "w").write("\n".join(out) + "\n")
    open(os.path.join(base, "loss.tsv"), "w").write("\n".join(tsv) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- spaCy
def w_spacy(d, res, cfg):
    """spaCy `spacy train` console table: "E  #  LOSS <COMPONENT>  <COMPONENT>_SCORE  SCORE", one row per evaluation;
    LOSS is the SUM of the batch losses since the previous row (spaCy resets it after each evaluation). The step-0 row
    spaCy prints before any update is not written. No validation loss (only scores)."""
    S = series("# (optimizer step of the row)", "sum of the batch losses since the previous row (2 decimals)")
    comp = cfg.get("component", "textcat").upper()
    hdr = f"E    #       LOSS {comp}  {comp}_SCORE  SCORE "
    out = ["\u2139 Saving to output directory: training", "\u2139 Using CPU", "",
           "=========================== Initializing pipeline ===========================", "\u2714 Initialized pipeline", "",
           "============================= Training pipeline =============================",
           f"\u2139 Pipeline: ['tok2vec', '{comp.lower()}']", f"\u2139 Initial learn rate: {cfg['lr']}", hdr,
           "---  ------  " + "-" * (len(comp) + 5) + "  " + "-" * (len(comp) + 6) + "  ------"]
    evals = {e["step"]: e for e in res["evals"]}
    acc_sum = 0.0
    for r in res["recs"]:
        s = r["step"]
        acc_sum += r["loss"]
        if s in evals:
            e = evals[s]
            sc = e.get("acc") or 0.0
            ep = (s - 1) // res["bpe"]
            out.append(f"{ep:>3d}  {s:>6d}  {acc_sum:>{len(comp) + 5}.2f}  {sc * 100:>{len(comp) + 6}.2f}  {sc:>6.2f}")
            add(S, "loss", s, round(acc_sum, 2) if fin(acc_sum) else acc_sum)
            acc_sum = 0.0
    out.append("\u2714 Saved pipeline to output directory")
    out.append("training/model-last")
    open(os.path.join(d, "train_output.txt"), "w").write("\n".join(out) + "\n")
    os.makedirs(os.path.join(d, "training", "model-last"), exist_ok=True)
    json.dump({"lang": "en", "name": "pipeline", "version": "0.0.0", "pipeline": ["tok2vec", comp.lower()],
               "performance": {f"{comp.lower()}_score": res["evals"][-1].get("acc") or 0.0}},
              open(os.path.join(d, "training", "model-last", "meta.json"), "w"), indent=2)
    return S


# ---------------------------------------------------------------------------------------------------- GluonTS
def w_gluonts(d, res, cfg):
    """GluonTS (MXNet) Trainer log: per epoch of num_batches_per_epoch=50 batches: "Epoch[e] Learning rate is x", a tqdm bar
    with avg_epoch_loss, "Epoch[e] Elapsed time", "Epoch[e] Evaluation metric 'epoch_loss'=L" and
    'validation_epoch_loss'; batches with a NaN loss are dropped from the mean with a warning."""
    S = series("epoch (0-based, Epoch[e])", "epoch mean over 50 batches; NaN batches ignored (warning line)")
    nb = 50
    out = ["INFO:gluonts.trainer:Start model training"]
    evals = {e["step"]: e for e in res["evals"]}
    best = None
    nep = math.ceil(len(res["recs"]) / nb)
    for e in range(nep):
        rs = res["recs"][e * nb:(e + 1) * nb]
        out.append(f"INFO:gluonts.trainer:Epoch[{e}] Learning rate is {rs[0]['lr']:g}")
        good = [r["loss"] for r in rs if fin(r["loss"])]
        for j, r in enumerate(rs):
            if not fin(r["loss"]):
                out.append(f"WARNING:gluonts.trainer:Batch [{j}] of Epoch[{e}] gave NaN loss and it will be ignored")
        L = mean(good) if good else float("nan")
        el = sum(r["st"] for r in rs)
        out.append(f"100%|\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588| {len(rs)}/{nb} [00:{int(el):02d}<00:00, {len(rs) / el:.2f}it/s, epoch={e + 1}/{nep}, avg_epoch_loss={L:.3g}]")
        out.append(f"INFO:gluonts.trainer:Epoch[{e}] Elapsed time {el:.3f} seconds")
        out.append(f"INFO:gluonts.trainer:Epoch[{e}] Evaluation metric 'epoch_loss'={L:f}")
        add(S, "loss", e, float(f"{L:f}") if fin(L) else L)
        add(S, "st", e, float(f"{el:.3f}") / len(rs))
        if good and len(good) < len(rs):
            S["hidden"].append(e)
        v = evals.get(rs[-1]["step"])
        if v:
            out.append(f"INFO:gluonts.trainer:Epoch[{e}] Evaluation metric 'validation_epoch_loss'={v['val']:f}")
            add(S, "val", e, float(f"{v['val']:f}") if fin(v["val"]) else v["val"])
            if fin(v["val"]) and (best is None or v["val"] < best[1]):
                best = (e, v["val"])
    if best:
        out.append(f"INFO:gluonts.trainer:Loading parameters from best epoch ({best[0]})")
        out.append(f"INFO:gluonts.trainer:Final loss: {best[1]} (occurred at epoch {best[0]})")
    out.append("INFO:gluonts.trainer:End model training")
    open(os.path.join(d, "train.log"), "w").write("\n".join(out) + "\n")
    return S


WRITERS = {"tb": w_tb, "tbranks": w_tbranks, "hf": w_hf, "wandb": w_wandb, "mlflow": w_mlflow, "mmjson": w_mmjson,
           "llmc": w_llmc, "torchtitan": w_torchtitan, "marian": w_marian, "flair": w_flair, "spacy": w_spacy, "gluonts": w_gluonts}
