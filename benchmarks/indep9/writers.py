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
                           ("loss_scale", w["scale"], "scale"), ("dead_relu_fraction", w["dead"], "dead"), ("tanh_saturation", w["sat"], "sat"),
                           ("grad_norm/first_layer", w["gfirst"] if cfg.get("layer_gn") else None, "gfirst"),
                           ("grad_norm/last_layer", w["glast"] if cfg.get("layer_gn") else None, "glast")):
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


# ---------------------------------------------------------------------------------------------------- litgpt
def w_litgpt(d, res, cfg):
    """LitGPT pretrain console tee'd to out/pretrain/train.log: "Epoch E | iter I step S | loss train: X, val: V|n/a |
    iter time: T ms (step) remaining time: h:mm:ss"; "iter I: val loss V, val time: T ms"; "Resuming training from ..."."""
    S = series("step (= iter; accumulation 1)", "loss train = mean over the last log_interval iterations; iter time of the logged iteration")
    every = cfg["every"]
    p = os.path.join(d, "out", "pretrain")
    os.makedirs(p, exist_ok=True)
    L = ["Seed set to 1337", f"Time to instantiate model: 0.02 seconds.", f"Total parameters: 12,{cfg['seed'] % 1000:03d}", ""]
    evals = list(res["evals"])
    lastval = None
    seg = 0
    for w in windows(res["recs"], every, "mean"):
        r, s = w["rec"], w["step"]
        if w["seg"] != seg:
            seg = w["seg"]
            L.append(f"Resuming training from out/pretrain/step-{s - every:08d}/lit_model.pth")
            lastval = None
        ep = (s - 1) // res["bpe"] + 1
        rem = int((cfg["steps"] - s) * r["st"])
        vs = f"{lastval:.3f}" if lastval is not None else "n/a"
        L.append(f"Epoch {ep} | iter {s} step {s} | loss train: {fmt_g(w['loss'], 3)}, val: {vs} | iter time: {r['st'] * 1000:.2f} ms (step) "
                 f"remaining time: {rem // 3600}:{rem % 3600 // 60:02d}:{rem % 60:02d}")
        add(S, "loss", s, round(w["loss"], 3) if fin(w["loss"]) else w["loss"])
        add(S, "st", s, round(r["st"] * 1000, 2) / 1000)
        for e in [e for e in evals if e["step"] == s and e["seg"] == w["seg"]]:
            L.append("Validating ...")
            L.append(f"iter {s}: val loss {fmt_g(e['val'])}, val time: {12.3 + (s % 7):.2f} ms")
            add(S, "val", s, round(e["val"], 4) if fin(e["val"]) else e["val"])
            lastval = e["val"] if fin(e["val"]) else None
            evals.remove(e)
    tot = res["recs"][-1]["wall"]
    L += [f"Training time: {tot:.2f}s", f"Memory used: {max(r['rss'] for r in res['recs']) / 1024:.02f} GB"]
    open(os.path.join(p, "train.log"), "w").write("\n".join(L) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- keras console
def w_keras(d, res, cfg):
    """Keras 3 fit(verbose=2) console saved as training_console.txt: "Epoch e/N" then
    "B/B - 1s - 12ms/step - loss: x - val_loss: v - learning_rate: lr" (epoch means)."""
    S = series("epoch (1-based, as printed in 'Epoch e/N')", "mean over the epoch's batches")
    bpe = res["bpe"]
    rows = epochs(res["recs"], bpe)
    ev = {e["step"]: e for e in res["evals"]}
    N = len(rows)
    L = []
    for row in rows:
        e = row["epoch"] + 1
        v = ev.get(row["step"])
        L.append(f"Epoch {e}/{N}")
        secs = int(round(row["dur"]))
        line = f"{row['n']}/{row['n']} - {secs}s - {row['st'] * 1000:.0f}ms/step - loss: {fmt_g(row['loss'])}"
        if v:
            line += f" - val_loss: {fmt_g(v['val'])}"
            add(S, "val", e, round(v["val"], 4) if fin(v["val"]) else v["val"])
        line += f" - learning_rate: {row['lr']:.4e}"
        L.append(line)
        add(S, "loss", e, round(row["loss"], 4) if fin(row["loss"]) else row["loss"])
        add(S, "lr", e, float(f"{row['lr']:.4e}"))
        add(S, "st", e, round(row["st"] * 1000) / 1000)
    open(os.path.join(d, "training_console.txt"), "w").write("\n".join(L) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- fastai
def w_fastai(d, res, cfg):
    """fastai Learner with CSVLogger: history.csv "epoch,train_loss,valid_loss,accuracy,time" (train_loss is the
    Recorder's smoothed loss, an exponential moving average with beta 0.98 and debiasing, read at the epoch's end),
    plus the console table in train_output.txt."""
    S = series("epoch (0-based, the 'epoch' column)", "exponential moving average (beta 0.98, debiased) at the end of each epoch")
    bpe = res["bpe"]
    ev = {e["step"]: e for e in res["evals"]}
    avg, cnt = 0.0, 0
    rows = []
    dur = 0.0
    for r in res["recs"]:
        cnt += 1
        avg = 0.98 * avg + 0.02 * r["loss"]
        dur += r["st"]
        if r["step"] % bpe == 0:
            sm = avg / (1 - 0.98 ** cnt)
            e = r["step"] // bpe - 1
            v = ev.get(r["step"])
            rows.append((e, sm, v["val"] if v else None, v["acc"] if v else None, dur))
            dur = 0.0
    has_acc = any(a is not None for *_, a, _ in rows)
    hdr = ["epoch", "train_loss", "valid_loss"] + (["accuracy"] if has_acc else []) + ["time"]
    csv = [",".join(hdr)]
    con = ["  ".join(hdr)]
    for e, sm, v, a, du in rows:
        tm = "%02d:%02d" % (int(du) // 60, int(du) % 60)
        cells = [str(e), fmt_g(sm, 6), fmt_g(v, 6) if v is not None else ""] + ([fmt_g(a, 6) if a is not None else ""] if has_acc else []) + [tm]
        csv.append(",".join(cells))
        con.append("  ".join(cells))
        add(S, "loss", e, round(sm, 6) if fin(sm) else sm)
        if v is not None:
            add(S, "val", e, round(v, 6) if fin(v) else v)
    open(os.path.join(d, "history.csv"), "w").write("\n".join(csv) + "\n")
    open(os.path.join(d, "train_output.txt"), "w").write("\n".join(con) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- CLU (Flax) LoggingWriter
def w_clu(d, res, cfg):
    """clu.metric_writers.LoggingWriter through absl: "I1130 09:00:01.123456 140213 logging_writer.py:48] [100] key=value, ..."
    (keys sorted; train metrics averaged over the interval, learning_rate and loss_scale current); eval rows "[100] eval_loss=...";
    a restart prints the checkpoint restore lines."""
    S = series("step (the [N] prefix)", "mean over the logging interval")
    every = cfg["every"]
    os.makedirs(os.path.join(d, "workdir"), exist_ok=True)
    L = [f"{absl(T0, 'train.py:88')} Starting training loop at step 0."]
    ev = {(e["step"], e["seg"]): e for e in res["evals"]}
    seg, prev_t = 0, None
    for w in windows(res["recs"], every, "mean"):
        r, s = w["rec"], w["step"]
        t = ts(r)
        if w["seg"] != seg:
            seg = w["seg"]
            L.append(f"{absl(t - 1.0, 'checkpoint.py:431')} Restoring checkpoint from workdir/checkpoints/ckpt-{s - every}")
            L.append(f"{absl(t - 0.9, 'train.py:88')} Starting training loop at step {s - every}.")
        kv = {"train_loss": w["loss"], "learning_rate": w["lr"], "grad_norm": w["gn"], "steps_per_sec": 1.0 / w["st"],
              "uptime": r["wall"]}
        add(S, "loss", s, w["loss"])
        add(S, "lr", s, w["lr"])
        add(S, "gn", s, w["gn"])
        add(S, "st", s, w["st"])
        if w["scale"] is not None:
            kv["loss_scale"] = w["scale"]
            add(S, "scale", s, w["scale"])
        for k, key in (("activations/dead_fraction", "dead"), ("activations/saturated_fraction", "sat")):
            if w[key] is not None:
                kv[k] = w[key]
                add(S, key, s, w[key])
        if cfg.get("layer_gn"):
            kv["grad_norm/first_layer"], kv["grad_norm/last_layer"] = w["gfirst"], w["glast"]
            add(S, "gfirst", s, w["gfirst"])
            add(S, "glast", s, w["glast"])
        L.append(f"{absl(t, 'logging_writer.py:48')} [{s}] " + ", ".join(f"{k}={float(v)!r}" for k, v in sorted(kv.items())))
        e = ev.get((s, w["seg"]))
        if e:
            L.append(f"{absl(t + 0.05, 'logging_writer.py:48')} [{s}] eval_accuracy={float(e['acc'] or 0.0)!r}, eval_loss={float(e['val'])!r}")
            add(S, "val", s, e["val"])
    open(os.path.join(d, "workdir", "train.log"), "w").write("\n".join(L) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- PyTorch-Ignite console
def w_ignite(d, res, cfg):
    """PyTorch-Ignite example handlers: "Epoch[e] Iteration[i/N] Loss: x" every log_interval iterations (i is the global
    iteration, N the batches per epoch; the current batch's output), "Training Results - Epoch[e] Avg loss:" and
    "Validation Results - Epoch[e]  Avg accuracy: a Avg loss: v" at each epoch end."""
    S = series("global iteration (the i in Iteration[i/N]); validation lines give epochs, placed at iteration e*N", "current batch (4 decimals)")
    every = cfg["every"]
    bpe = res["bpe"]
    ev = {e["step"]: e for e in res["evals"]}
    L = []
    acc_ep = []
    for r in res["recs"]:
        s = r["step"]
        e = (s - 1) // bpe + 1
        acc_ep.append(r["loss"])
        if s % every == 0:
            L.append(f"Epoch[{e}] Iteration[{s}/{bpe}] Loss: {fmt_g(r['loss'])}")
            add(S, "loss", s, round(r["loss"], 4) if fin(r["loss"]) else r["loss"])
        if s % bpe == 0:
            L.append(f"Training Results - Epoch[{e}]  Avg loss: {fmt_g(mean(acc_ep))}")
            acc_ep = []
            v = ev.get(s)
            if v:
                L.append(f"Validation Results - Epoch[{e}]  Avg accuracy: {float(v['acc'] or 0.0):.4f} Avg loss: {fmt_g(v['val'])}")
                add(S, "val", s, round(v["val"], 4) if fin(v["val"]) else v["val"])
    open(os.path.join(d, "ignite_train.log"), "w").write("\n".join(L) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- per-rank stdout files
def w_ranks(d, res, cfg):
    """torchrun --tee 3 style per-rank files logs/stdout_rank0.log and logs/stdout_rank1.log:
    "[rank0]:[2025-11-30 09:00:01] step=120 loss=... lr=... fwd_bwd_ms=... allreduce_wait_ms=... step_ms=..." (window means; the loss is the all-reduced one, the same on both ranks; fwd_bwd_ms is the rank's own compute)."""
    S = series("step (step=N)", "mean over the logging interval (all-reduced loss)")
    os.makedirs(os.path.join(d, "logs"), exist_ok=True)
    rows = windows(res["recs"], cfg["every"], "mean")
    ev = {e["step"]: e for e in res["evals"]}
    for rk in (0, 1):
        L = [f"[rank{rk}]:[{_iso(T0, False)}] world_size=2 backend=gloo local_rank={rk}"]
        S["rank"][rk] = {"compute": [], "wait": []}
        for w in rows:
            s = w["step"]
            c, wt = w["ranks"][rk]["compute"] * 1000, w["ranks"][rk]["wait"] * 1000
            L.append(f"[rank{rk}]:[{_iso(ts(w['rec']), False)}] step={s} loss={fmt_g(w['loss'])} lr={w['lr']:.3e} fwd_bwd_ms={c:.2f} "
                     f"allreduce_wait_ms={wt:.2f} step_ms={w['st'] * 1000:.2f}")
            S["rank"][rk]["compute"].append((s, round(c, 2) / 1000))
            S["rank"][rk]["wait"].append((s, round(wt, 2) / 1000))
            if rk == 0:
                add(S, "loss", s, round(w["loss"], 4))
                add(S, "lr", s, w["lr"])
                add(S, "st", s, w["st"])
                if s in ev:
                    L.append(f"[rank0]:[{_iso(ts(w['rec']), False)}] eval step={s} val_loss={fmt_g(ev[s]['val'])}")
                    add(S, "val", s, round(ev[s]["val"], 4))
        open(os.path.join(d, "logs", f"stdout_rank{rk}.log"), "w").write("\n".join(L) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- PaddleNLP workerlog
def w_paddle(d, res, cfg):
    """paddle.distributed.launch log/workerlog.0 with PaddleNLP example lines: "[date] [    INFO] - global step N, epoch: e,
    batch: b, loss: x, avg_reader_cost: r sec, avg_batch_cost: c sec, speed: s step/s, learning rate: lr"
    (loss of the current batch; costs averaged over the interval) and "eval loss: v, accuracy: a"."""
    S = series("global step", "current batch loss; reader/batch cost averaged over the logging interval (s)")
    os.makedirs(os.path.join(d, "log"), exist_ok=True)
    bpe = res["bpe"]
    ev = {e["step"]: e for e in res["evals"]}
    L = [f"[{_iso(T0)}] [    INFO] - The global seed is set to {cfg['seed']}, local seed is set to {cfg['seed'] + 1} and random seed is set to 42."]
    for w in windows(res["recs"], cfg["every"], "mean"):
        r, s = w["rec"], w["step"]
        ep, b = (s - 1) // bpe, (s - 1) % bpe
        L.append(f"[{_iso(ts(r))}] [    INFO] - global step {s}, epoch: {ep}, batch: {b}, loss: {fmt_g(r['loss'], 6)}, "
                 f"avg_reader_cost: {w['dt']:.5f} sec, avg_batch_cost: {w['st']:.5f} sec, speed: {1.0 / w['st']:.2f} step/s, learning rate: {w['lr']:.5e}")
        add(S, "loss", s, round(r["loss"], 6) if fin(r["loss"]) else r["loss"])
        add(S, "dt", s, round(w["dt"], 5))
        add(S, "st", s, round(w["st"], 5))
        add(S, "lr", s, float(f"{w['lr']:.5e}"))
        if s in ev:
            L.append(f"[{_iso(ts(r) + 0.05)}] [    INFO] - eval loss: {fmt_g(ev[s]['val'], 5)}, accuracy: {float(ev[s]['acc'] or 0.0):.5f}")
            add(S, "val", s, round(ev[s]["val"], 5))
    open(os.path.join(d, "log", "workerlog.0"), "w").write("\n".join(L) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- TF Model Garden / Orbit
def w_orbit(d, res, cfg):
    """TF Model Garden (Orbit controller) absl log: "train | step:    100 | steps/sec:   85.3 | output: {'learning_rate': ...,
    'training_loss': ...}" (loss averaged over the interval; steps/sec over the interval) and "eval | step: ... | eval time: ... |
    output: {'validation_loss': ...}"; a restart logs the checkpoint restore."""
    S = series("step", "mean over the steps_per_loop interval; steps/sec over the interval")
    every = cfg["every"]
    ev = {(e["step"], e["seg"]): e for e in res["evals"]}
    L = [f"{absl(T0, 'controller.py:248')} restoring or initializing model...", f"{absl(T0, 'controller.py:254')} initialized model."]
    seg = 0
    for w in windows(res["recs"], every, "mean"):
        r, s = w["rec"], w["step"]
        t = ts(r)
        if w["seg"] != seg:
            seg = w["seg"]
            L.append(f"{absl(t - 1, 'controller.py:248')} restoring or initializing model...")
            L.append(f"{absl(t - 1, 'controller.py:252')} restored model from model_dir/ckpt-{s - every}.")
        L.append(f"{absl(t, 'controller.py:457')} train | step: {s:6d} | steps/sec: {1.0 / w['st']:6.1f} | output: "
                 f"{{'learning_rate': {w['lr']!r}, 'training_loss': {w['loss']!r}}}")
        add(S, "loss", s, w["loss"])
        add(S, "lr", s, w["lr"])
        add(S, "st", s, 1.0 / round(1.0 / w["st"], 1))
        e = ev.get((s, w["seg"]))
        if e:
            L.append(f"{absl(t + 0.1, 'controller.py:282')} eval | step: {s:6d} | running 1 steps of evaluation...")
            L.append(f"{absl(t + 0.2, 'controller.py:302')} eval | step: {s:6d} | eval time:    0.1 sec | output: {{'validation_loss': {e['val']!r}}}")
            add(S, "val", s, e["val"])
    open(os.path.join(d, "train.log"), "w").write("\n".join(L) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- ms-swift logging.jsonl
def w_swift(d, res, cfg):
    """ms-swift output/v0-<date>/logging.jsonl: train rows {"loss", "grad_norm", "learning_rate", "memory(GiB)",
    "train_speed(iter/s)", "epoch", "global_step/max_steps", "percentage", "elapsed_time", "remaining_time"} (HF Trainer window
    mean with the NaN filter; grad_norm of the logged step; memory = process RSS in GiB, 2 decimals; train speed = steps /
    elapsed, a cumulative average) and eval rows {"eval_loss", ...}."""
    S = series("the N of 'global_step/max_steps' (\"N/M\")", "window mean (4 decimals), HF logging_nan_inf_filter")
    p = os.path.join(d, "output", "v0-20251130-090000")
    os.makedirs(p, exist_ok=True)
    ev = {e["step"]: e for e in res["evals"]}
    bpe, M = res["bpe"], cfg["steps"]
    out = []
    for row in hf_rows(res, cfg["every"]):
        r, s = row["rec"], row["step"]
        el = r["wall"]
        o = {"loss": row["loss"], "grad_norm": round(r["gn"], 6) if fin(r["gn"]) else r["gn"], "learning_rate": r["lr"],
             "memory(GiB)": round(r["rss"] / 1024, 2), "train_speed(iter/s)": round(s / el, 6), "epoch": round(s / bpe, 2),
             "global_step/max_steps": f"{s}/{M}", "percentage": f"{100 * s / M:.2f}%", "elapsed_time": f"{int(el)}s",
             "remaining_time": f"{int(el / s * (M - s))}s"}
        out.append(json.dumps(o))
        add(S, "loss", s, row["loss"])
        if row["hidden"]:
            S["hidden"].append(s)
        add(S, "gn", s, o["grad_norm"])
        add(S, "lr", s, r["lr"])
        add(S, "rss", s, o["memory(GiB)"] * 1024)
        if s in ev:
            out.append(json.dumps({"eval_loss": round(ev[s]["val"], 8), "eval_runtime": 0.0413, "eval_samples_per_second": 9685.2,
                                   "eval_steps_per_second": 24.2, "epoch": round(s / bpe, 2), "global_step/max_steps": f"{s}/{M}"}))
            add(S, "val", s, round(ev[s]["val"], 8))
    open(os.path.join(p, "logging.jsonl"), "w").write("\n".join(out) + "\n")
    json.dump({"model_type": "custom", "learning_rate": cfg["lr"], "max_steps": M, "logging_steps": cfg["every"]},
              open(os.path.join(p, "args.json"), "w"), indent=2)
    return S


# ---------------------------------------------------------------------------------------------------- LLaMA-Factory trainer_log.jsonl
def w_llamafactory(d, res, cfg):
    """LLaMA-Factory saves/<model>/<method>/train_<date>/trainer_log.jsonl: {"current_steps", "total_steps", "loss", "lr",
    "epoch", "percentage", "elapsed_time", "remaining_time"} (HF window mean with the NaN filter) and eval rows with "eval_loss"."""
    S = series("current_steps", "window mean (4 decimals), HF logging_nan_inf_filter")
    p = os.path.join(d, "saves", "custom", "full", "train_2025-11-30-09-00-00")
    os.makedirs(p, exist_ok=True)
    ev = {e["step"]: e for e in res["evals"]}
    bpe, M = res["bpe"], cfg["steps"]
    out = []

    def hms(x):
        x = int(x)
        return f"{x // 3600}:{x % 3600 // 60:02d}:{x % 60:02d}"
    for row in hf_rows(res, cfg["every"]):
        r, s = row["rec"], row["step"]
        el = r["wall"]
        out.append(json.dumps({"current_steps": s, "total_steps": M, "loss": row["loss"], "lr": r["lr"], "epoch": round(s / bpe, 2),
                               "percentage": round(100 * s / M, 2), "elapsed_time": hms(el), "remaining_time": hms(el / s * (M - s))}))
        add(S, "loss", s, row["loss"])
        if row["hidden"]:
            S["hidden"].append(s)
        add(S, "lr", s, r["lr"])
        if s in ev:
            out.append(json.dumps({"current_steps": s, "total_steps": M, "eval_loss": round(ev[s]["val"], 4), "epoch": round(s / bpe, 2),
                                   "percentage": round(100 * s / M, 2), "elapsed_time": hms(el), "remaining_time": hms(el / s * (M - s))}))
            add(S, "val", s, round(ev[s]["val"], 4))
    open(os.path.join(p, "trainer_log.jsonl"), "w").write("\n".join(out) + "\n")
    return S


WRITERS = {"tb": w_tb, "hf": w_hf, "mlflow": w_mlflow, "litgpt": w_litgpt, "keras": w_keras, "fastai": w_fastai, "clu": w_clu,
           "ignite": w_ignite, "ranks": w_ranks, "paddle": w_paddle, "orbit": w_orbit, "swift": w_swift, "llamafactory": w_llamafactory}
