"""indep11: one writer per log format. Each writes the on-disk layout of the imitated tool and returns the series
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


# ---------------------------------------------------------------------------------------------------- MLflow, nested metric names
def w_mlflow(d, res, cfg):
    """MLflow file store mlruns/<exp>/<run>/metrics/<key> ("ts value step") with nested keys (slashes are folders):
    train/<loss word>, val/<loss word>, train/lr, train/grad_norm, perf/step_time_s, perf/data_time_s, system/memory/rss_mb,
    amp/loss_scale, activations/dead_fraction, activations/saturated_fraction, grad_norm/layers/first|last; window means."""
    lw = res["loss_word"]
    S = series("step (third field)", "window mean over log_every steps")
    rid = "8c1e0f5a2b3d4e6f9a7b1c2d3e4f5a6b"
    base = os.path.join(d, "mlruns", "417263958120334871")
    p = os.path.join(base, rid)
    for sub in ("metrics", "params", "tags", "artifacts"):
        os.makedirs(os.path.join(p, sub), exist_ok=True)
    with open(os.path.join(base, "meta.yaml"), "w") as f:
        f.write(f"artifact_location: file://{base}\ncreation_time: {int(T0 * 1000)}\nexperiment_id: '417263958120334871'\n"
                f"last_update_time: {int(T0 * 1000)}\nlifecycle_stage: active\nname: indep-train\n")
    with open(os.path.join(p, "meta.yaml"), "w") as f:
        f.write(f"artifact_uri: file://{p}/artifacts\nend_time: {int(ts(res['recs'][-1]) * 1000)}\nentry_point_name: ''\n"
                f"experiment_id: '417263958120334871'\nlifecycle_stage: active\nrun_id: {rid}\nrun_name: brave-owl-214\nsource_type: 4\n"
                f"start_time: {int(T0 * 1000)}\nstatus: 3\ntags: []\nuser_id: ml\n")
    for k in ("lr", "opt", "bs", "steps", "accum"):
        if k in cfg:
            open(os.path.join(p, "params", k), "w").write(str(cfg[k]))
    open(os.path.join(p, "tags", "mlflow.runName"), "w").write("brave-owl-214")
    files = {}

    def put(key, t, v, s):
        files.setdefault(key, []).append(f"{int(t * 1000)} {v!r} {s}\n")
    for w in windows(res["recs"], cfg["every"], "mean"):
        s, t = w["step"], ts(w["rec"])
        for key, v, sk in ((f"train/{lw}", w["loss"], "loss"), ("train/lr", w["lr"], "lr"), ("train/grad_norm", w["gn"], "gn"),
                           ("perf/step_time_s", w["st"], "st"), ("perf/data_time_s", w["dt"], "dt"), ("system/memory/rss_mb", w["rss"], "rss"),
                           ("amp/loss_scale", w["scale"], "scale"), ("activations/dead_fraction", w["dead"], "dead"),
                           ("activations/saturated_fraction", w["sat"], "sat"),
                           ("grad_norm/layers/first", w["gfirst"] if cfg.get("layer_gn") else None, "gfirst"),
                           ("grad_norm/layers/last", w["glast"] if cfg.get("layer_gn") else None, "glast")):
            if v is None:
                continue
            put(key, t, float(v), s)
            add(S, sk, s, v)
    for e in res["evals"]:
        put(f"val/{lw}", T0 + e["wall"], float(e["val"]), e["step"])
        add(S, "val", e["step"], e["val"])
    for key, lines in files.items():
        fp = os.path.join(p, "metrics", key)
        os.makedirs(os.path.dirname(fp), exist_ok=True)
        open(fp, "w").writelines(lines)
    return S


# ---------------------------------------------------------------------------------------------------- W&B UI CSV export
def w_wandbcsv(d, res, cfg):
    """CSV files downloaded from W&B line-plot panels ("Export panel -> CSV"): wandb_export_<timestamp>.csv, one per panel, columns
    "Step","<run> - <key>","<run> - <key>__MIN","<run> - <key>__MAX" (MIN/MAX equal when the panel is not bucketed), empty
    cells where the key has no value at that step. Values as logged by wandb.log every N steps (current batch)."""
    lw = res["loss_word"]
    run = "silver-thunder-7"
    S = series("Step (wandb _step = global step)", "current batch, every N steps")
    p = os.path.join(d, "wandb_exports")
    os.makedirs(p, exist_ok=True)
    panels = {f"train/{lw}": "loss", "train/lr": "lr", "train/grad_norm": "gn", "perf/step_time_ms": "st", "perf/data_time_ms": "dt",
              "perf/rss_mb": "rss"}
    rows = {k: [] for k in panels}
    extra = {}
    ev = ev_map(res)
    val = []
    for r in res["recs"]:
        s = r["step"]
        if s % cfg["every"] == 0:
            for k, key in panels.items():
                v = r[key] * (1000 if key in ("st", "dt") else 1)
                rows[k].append((s, v))
                add(S, key, s, v / 1000 if key in ("st", "dt") else v)
            for k, key in (("act/dead_fraction", "dead"), ("act/saturated_fraction", "sat"), ("amp/loss_scale", "scale")):
                if r[key] is not None:
                    extra.setdefault(k, []).append((s, r[key]))
                    add(S, key, s, r[key])
            if cfg.get("layer_gn"):
                for k, key in (("grad_norm/first_layer", "gfirst"), ("grad_norm/last_layer", "glast")):
                    extra.setdefault(k, []).append((s, r[key]))
                    add(S, key, s, r[key])
        e = ev.get((s, r["seg"]))
        if e:
            val.append((s, e["val"]))
            add(S, "val", s, e["val"])
    rows.update(extra)
    rows[f"val/{lw}"] = val
    for i, (k, pts) in enumerate(rows.items()):
        if not pts:
            continue
        c = f"{run} - {k}"
        lines = [f'"Step","{c}","{c}__MIN","{c}__MAX"']
        for s, v in pts:
            vs = "NaN" if not fin(v) else repr(float(v))
            lines.append(f"{s},{vs},{vs},{vs}")
        open(os.path.join(p, f"wandb_export_2025-12-02T10_{12 + i:02d}_0{i % 10}.{318 + i}+01_00.csv"), "w").write("\n".join(lines) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- Keras 2 console (progress bars)
def _kbar(n, N, w=30):
    if n >= N:
        return "[" + "=" * w + "]"
    k = int(w * n / N)
    return "[" + "=" * max(0, k - 1) + (">" if k > 0 else "") + "." * (w - k) + "]"


def w_keras2(d, res, cfg):
    """Keras 2 model.fit(verbose=1) console recorded from a terminal (keras_train.log): 'Epoch E/N', then Progbar updates that
    redraw with backspaces and '\\r' (running mean of the epoch so far), and the epoch line 'n/n [====] - 1s 5ms/step - loss: X -
    val_loss: V - lr: L' (4 decimals, Keras' own format)."""
    S = series("epoch (1-based, as printed 'Epoch E/N')", "epoch mean (Keras running mean at the end of the epoch), 4 decimals")
    bpe = res["bpe"]
    nep = math.ceil(cfg["steps"] / bpe)
    ev = {e["step"]: e for e in res["evals"]}
    out = []
    ep_rows = {}
    for r in res["recs"]:
        ep_rows.setdefault((r["step"] - 1) // bpe, []).append(r)
    for e, rs in sorted(ep_rows.items()):
        out.append(f"Epoch {e + 1}/{nep}\n")
        line, prev = "", 0
        acc = []
        N = len(rs)
        for i, r in enumerate(rs):
            acc.append(r["loss"])
            m = sum(acc) / len(acc)
            n = i + 1
            if n % max(1, N // 6) == 0 and n < N:
                txt = f"{n:>{len(str(N))}}/{N} {_kbar(n, N)} - ETA: 0s - loss: {fnum(m, '.4f')}"
                line += ("\b" * prev + "\r") + txt
                prev = len(txt)
        dur = sum(r["st"] for r in rs)
        m = sum(acc) / len(acc)
        last = rs[-1]
        txt = f"{N}/{N} {_kbar(N, N)} - {max(0, round(dur))}s {1000 * dur / N:.0f}ms/step - loss: {fnum(m, '.4f')}"
        ee = ev.get(last["step"])
        if ee:
            txt += f" - val_loss: {fnum(ee['val'], '.4f')}"
            add(S, "val", e + 1, rnd(ee["val"], 4))
        txt += f" - lr: {last['lr']:.4f}" if last["lr"] >= 1e-4 else f" - lr: {last['lr']:.4e}"
        line += ("\b" * prev + "\r") + txt
        out.append(line + "\n")
        add(S, "loss", e + 1, rnd(m, 4))
        add(S, "lr", e + 1, float(f"{last['lr']:.4f}") if last["lr"] >= 1e-4 else float(f"{last['lr']:.4e}"))
        add(S, "st", e + 1, round(1000 * dur / N) / 1000)
    open(os.path.join(d, "keras_train.log"), "w").write("".join(out))
    return S


# ---------------------------------------------------------------------------------------------------- Ultralytics classify console
def w_ultra(d, res, cfg):
    """Ultralytics `yolo classify train` console captured to train.log: the header, per-epoch bars
    '      Epoch    GPU_mem       loss  Instances       Size' / '       1/20         0G      1.234         32         64: 100%|...'
    with '\\r' updates (loss = running mean over the epoch, tqdm-rounded to 4 significant digits), and the validator's
    'classes top1_acc top5_acc' block."""
    S = series("epoch (1-based, 'E/N' in the Epoch column)", "running mean over the epoch at its last batch (Ultralytics tloss)")
    bpe = res["bpe"]
    nep = math.ceil(cfg["steps"] / bpe)
    ev = {e["step"]: e for e in res["evals"]}
    out = ["Ultralytics 8.3.40 \U0001F680 Python-3.11.9 torch-2.5.1 CPU (Intel Xeon Platinum 8375C 2.90GHz)",
           f"engine/trainer: task=classify, mode=train, model=custom-cls.yaml, data=synthetic, epochs={nep}, batch={res['bs']}, imgsz=64, "
           f"optimizer={cfg.get('opt', 'adam').capitalize()}, lr0={cfg['lr']}, workers=0, seed={cfg.get('seed', 0)}",
           "Starting training for %d epochs..." % nep]
    ep_rows = {}
    for r in res["recs"]:
        ep_rows.setdefault((r["step"] - 1) // bpe, []).append(r)
    for e, rs in sorted(ep_rows.items()):
        out.append("")
        out.append("      Epoch    GPU_mem       loss  Instances       Size")
        N = len(rs)
        line = ""
        tl = None
        for i, r in enumerate(rs):
            tl = r["loss"] if tl is None else (tl * i + r["loss"]) / (i + 1)
            if (i + 1) % max(1, N // 4) == 0 or i + 1 == N:
                pct = int(100 * (i + 1) / N)
                bar = "\u2588" * (pct // 10) + " " * (10 - pct // 10)
                el = sum(x["st"] for x in rs[:i + 1])
                line += f"\r{(str(e + 1) + '/' + str(nep)):>11}{'0G':>11}{fnum(tl, '.4g'):>11}{res['bs']:>11}{64:>11}: {pct:3d}%|{bar}| {i + 1}/{N} [00:{int(el):02d}<00:00, {(i + 1) / max(el, 1e-3):.2f}it/s]"
        out.append(line.lstrip("\r"))
        add(S, "loss", e + 1, float(f"{tl:.4g}") if fin(tl) else tl)
        ee = ev.get(rs[-1]["step"])
        acc = ee.get("acc") if ee else None
        out.append(f"{'classes':>22}{'top1_acc':>11}{'top5_acc':>11}: 100%|\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588| 2/2 [00:00<00:00, 61.48it/s]")
        out.append(f"{'all':>22}{(acc if acc is not None else 0.0):>11.3f}{1:>11}")
    out += ["", f"{nep} epochs completed in 0.010 hours.", "Optimizer stripped from runs/classify/train/weights/last.pt, 0.1MB"]
    os.makedirs(os.path.join(d, "runs", "classify", "train"), exist_ok=True)
    open(os.path.join(d, "runs", "classify", "train", "train.log"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- kohya sd-scripts console
def w_kohya(d, res, cfg):
    """kohya-ss/sd-scripts console (train_console.log): the bilingual header, 'epoch E/N' lines, one tqdm bar 'steps:' redrawn with
    '\\r' every step with postfix avr_loss (LossRecorder.moving_average: the mean of the last epoch's loss at each step position;
    in the first epoch the running mean), tqdm-formatted to 3 significant digits; 'saving checkpoint' lines."""
    S = series("steps n in n/total (1-based optimizer step)", "kohya avr_loss: moving average over one epoch of steps, 3 significant digits")
    bpe = res["bpe"]
    tot = cfg["steps"]
    nep = math.ceil(tot / bpe)
    out = ["running training / 学習開始", f"  num train images * repeats / 学習画像の数×繰り返し回数: {bpe * res['bs']}",
           f"  num batches per epoch / 1epochのバッチ数: {bpe}", f"  num epochs / epoch数: {nep}",
           f"  batch size per device / バッチサイズ: {res['bs']}", f"  gradient accumulation steps / 勾配を合計するステップ数 = {cfg.get('accum', 1)}",
           f"  total optimization steps / 学習ステップ数: {tot}", f"steps:   0%|          | 0/{tot} [00:00<?, ?it/s]"]
    loss_list, total = [], 0.0
    line = ""
    for r in res["recs"]:
        s = r["step"]
        e, k = (s - 1) // bpe, (s - 1) % bpe
        if k == 0:
            out.append(line)
            line = ""
            out.append(f"\nepoch {e + 1}/{nep}")
        if e == 0:
            loss_list.append(r["loss"])
        else:
            total -= loss_list[k]
            loss_list[k] = r["loss"]
        total += r["loss"]
        avr = total / len(loss_list)
        el = r["wall"]
        pct = int(100 * s / tot)
        bar = "\u2588" * (pct // 10) + " " * (10 - pct // 10)
        av = "nan" if not fin(avr) else f"{avr:.3g}"
        line += f"\rsteps: {pct:3d}%|{bar}| {s}/{tot} [{int(el) // 60:02d}:{int(el) % 60:02d}<00:00, {s / max(el, 1e-3):5.2f}it/s, avr_loss={av}]"
        add(S, "loss", s, float(av) if fin(avr) else avr)
        if k == bpe - 1 and (e + 1) % max(1, nep // 4) == 0:
            out.append(line)
            line = ""
            out.append(f"\nsaving checkpoint: output/last-{e + 1:06d}.safetensors")
    out.append(line)
    open(os.path.join(d, "train_console.log"), "w").write("\n".join(x for x in out if x is not None) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- Slurm .out with srun --label
def w_slurm(d, res, cfg):
    """Slurm batch output slurm-<jobid>.out (sbatch --open-mode=append --requeue; srun --label prefixes '0: '): the job prologue,
    '0: step N/M | loss X | lr Y | grad_norm G | T ms/it | data D ms | rss R MB' (loss and times are means over the print
    interval, 4 decimals), '0: [eval] step N | val_loss V', a preemption line from slurmstepd and the requeued job's lines."""
    S = series("step N in 'step N/M' (1-based)", "mean over the print interval (4 decimals)")
    every = cfg["every"]
    ev = ev_map(res)
    M = cfg["steps"]
    first = res["recs"][0]
    out = [f"+ srun --label --ntasks=1 python train.py --config configs/{cfg['family']}.yaml",
           f"0: [{_iso(ts(first))}] job 48213 on node017 | SLURM_RESTART_COUNT=0 | world_size=1"]
    if first["step"] > 1:
        out.append(f"0: [{_iso(ts(first))}] resuming from checkpoint ckpt/step_{first['step'] - 1:06d}.pt (step {first['step'] - 1})")
    seg = first["seg"]
    for w in windows(res["recs"], every, "mean"):
        r, s = w["rec"], w["step"]
        if w["seg"] != seg:
            seg = w["seg"]
            t = ts(r) - 60
            out.append(f"slurmstepd: error: *** JOB 48213 ON node017 CANCELLED AT {time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(t))} DUE TO PREEMPTION ***")
            out.append(f"+ srun --label --ntasks=1 python train.py --config configs/{cfg['family']}.yaml")
            out.append(f"0: [{_iso(t + 50)}] job 48213 on node023 | SLURM_RESTART_COUNT=1 | world_size=1")
            k0 = resumed_at(res)[seg]
            if k0 > 0:
                out.append(f"0: [{_iso(t + 50)}] resuming from checkpoint ckpt/step_{k0:06d}.pt (step {k0})")
            else:
                out.append(f"0: [{_iso(t + 50)}] no --resume given; initialising from scratch")
        out.append(f"0: step {s}/{M} | loss {fnum(w['loss'], '.4f')} | lr {w['lr']:.3e} | grad_norm {fnum(w['gn'], '.4f')} | "
                   f"{w['st'] * 1000:.2f} ms/it | data {w['dt'] * 1000:.2f} ms | rss {w['rss']:.1f} MB")
        add(S, "loss", s, rnd(w["loss"], 4))
        add(S, "lr", s, float(f"{w['lr']:.3e}"))
        add(S, "gn", s, rnd(w["gn"], 4))
        add(S, "st", s, round(w["st"] * 1000, 2) / 1000)
        add(S, "dt", s, round(w["dt"] * 1000, 2) / 1000)
        add(S, "rss", s, round(w["rss"], 1))
        e = ev.get((s, w["seg"]))
        if e:
            out.append(f"0: [eval] step {s} | val_loss {fnum(e['val'], '.4f')}")
            add(S, "val", s, rnd(e["val"], 4))
    out.append(f"0: [{_iso(ts(res['recs'][-1]) + 1)}] done; saved ckpt/final.pt")
    open(os.path.join(d, "slurm-48213.out"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- Hydra submitit per-task logs
def w_submitit(d, res, cfg):
    """hydra-submitit-launcher with 2 Slurm tasks: multirun/<date>/<time>/.submitit/<jobid>/<jobid>_<task>_log.out and _log.err;
    each task logs through Hydra's logging format '[<date> <time>,ms][__main__][INFO] - [rank R] it N | loss X | fwd_bwd T ms |
    allreduce_wait W ms | lr Y' (means over the print interval); rank 0 adds eval lines. Task t = rank t."""
    S = series("it N (1-based optimizer step)", "mean over the print interval (all-reduced loss, 4 decimals)")
    p = os.path.join(d, "multirun", "2025-12-02", "09-00-00", ".submitit", "48213")
    os.makedirs(p, exist_ok=True)
    os.makedirs(os.path.join(d, "multirun", "2025-12-02", "09-00-00", "0", ".hydra"), exist_ok=True)
    open(os.path.join(d, "multirun", "2025-12-02", "09-00-00", "0", ".hydra", "overrides.yaml"), "w").write(
        f"- model={cfg['family']}\n- optim.lr={cfg['lr']}\n- trainer.world_size=2\n")
    rows = windows(res["recs"], cfg["every"], "mean")
    ev = ev_map(res)
    for rk in (0, 1):
        L = [f"submitit INFO ({_iso(T0)}) - Starting with JobEnvironment(job_id=48213, hostname=node0{17 + rk}, local_rank=0({1}), node={rk}({2}), global_rank={rk}({2}))",
             f"submitit INFO ({_iso(T0)}) - Loading pickle: /home/ml/multirun/2025-12-02/09-00-00/.submitit/48213/48213_submitted.pkl"]
        S["rank"][rk] = {"compute": [], "wait": []}
        for w in rows:
            s = w["step"]
            rr = w["ranks"][rk]
            c, wt = rr["compute"] * 1000, rr["wait"] * 1000
            L.append(f"[{_iso(ts(w['rec']))}][__main__][INFO] - [rank {rk}] it {s} | loss {fnum(w['loss'], '.4f')} | fwd_bwd {c:.2f} ms | "
                     f"allreduce_wait {wt:.2f} ms | lr {w['lr']:.2e}")
            S["rank"][rk]["compute"].append((s, round(c, 2) / 1000))
            S["rank"][rk]["wait"].append((s, round(wt, 2) / 1000))
            if rk == 0:
                add(S, "loss", s, rnd(w["loss"], 4))
                add(S, "lr", s, float(f"{w['lr']:.2e}"))
                e = ev.get((s, w["seg"]))
                if e:
                    L.append(f"[{_iso(ts(w['rec']) + 0.05)}][__main__][INFO] - [rank 0] eval it {s} | val_loss {fnum(e['val'], '.4f')}")
                    add(S, "val", s, rnd(e["val"], 4))
        L.append(f"submitit INFO ({_iso(ts(res['recs'][-1]) + 1)}) - Job completed successfully")
        open(os.path.join(p, f"48213_{rk}_log.out"), "w").write("\n".join(L) + "\n")
        open(os.path.join(p, f"48213_{rk}_log.err"), "w").write(
            f"[{_iso(T0)}][torch.distributed.distributed_c10d][INFO] - Added key: store_based_barrier_key:1 to store for rank: {rk}\n")
    return S


# ---------------------------------------------------------------------------------------------------- fairseq-hydra console
def w_fshydra(d, res, cfg):
    """fairseq-hydra-train console outputs/<date>/<time>/hydra_train.log: '[<date> <time>,ms][train_inner][INFO] - {json}' every
    log_interval updates (strings: loss in base 2 = nats / ln 2, rounded to 3 decimals, mean over the interval; gnorm 3 decimals;
    lr '{:g}'; loss_scale under fp16), '[valid][INFO] - {"epoch":, "valid_loss":, "valid_num_updates":}', begin/end-of-epoch lines."""
    S = series("num_updates", "mean over log_interval, base 2 (nats / ln 2), 3 decimals")
    p = os.path.join(d, "outputs", "2025-12-02", "09-00-00")
    os.makedirs(p, exist_ok=True)
    bpe = res["bpe"]
    ln2 = math.log(2)
    ev = ev_map(res)
    out = [f"[{_iso(T0)}][fairseq_cli.train][INFO] - {{'_name': None, 'common': {{'fp16': {cfg.get('fp16', False)}, 'log_interval': {cfg['every']}, 'seed': {cfg.get('seed', 1)}}}}}",
           f"[{_iso(T0)}][fairseq_cli.train][INFO] - task: CustomTask, model: {cfg['family']}, criterion: {res['loss_word']}",
           f"[{_iso(T0)}][fairseq.trainer][INFO] - begin training epoch 1", f"[{_iso(T0)}][fairseq_cli.train][INFO] - Start iterating over samples"]
    t_wall = 0.0
    for w in windows(res["recs"], cfg["every"], "mean"):
        r, s = w["rec"], w["step"]
        e = (s - 1) // bpe + 1
        lb = w["loss"] / ln2 if fin(w["loss"]) else w["loss"]
        row = {"epoch": e, "update": f"{(s / bpe):.3f}", "loss": fnum(round(lb, 3), "g") if fin(lb) else "nan", "ntokens": str(res["bs"] * 24),
               "nsentences": str(res["bs"]), "wps": f"{res['bs'] * 24 / w['st']:.0f}", "ups": f"{1 / w['st']:.2f}", "wpb": str(res["bs"] * 24),
               "bsz": str(res["bs"]), "num_updates": str(s), "lr": f"{w['lr']:g}", "gnorm": fnum(round(w["gn"], 3), "g") if fin(w["gn"]) else "nan"}
        if w["scale"] is not None:
            row["loss_scale"] = f"{round(w['scale'], 4):g}"
        row.update({"train_wall": str(int(round(w["st"] * w["n"]))), "gb_free": "75.3", "wall": str(int(round(r["wall"])))})
        out.append(f"[{_iso(ts(r))}][train_inner][INFO] - " + json.dumps(row))
        add(S, "loss", s, round(lb, 3) if fin(lb) else lb)
        add(S, "lr", s, float(f"{w['lr']:g}"))
        add(S, "gn", s, round(w["gn"], 3) if fin(w["gn"]) else w["gn"])
        if w["scale"] is not None:
            add(S, "scale", s, w["scale"])
        ee = ev.get((s, w["seg"]))
        if ee:
            vb = ee["val"] / ln2
            out.append(f"[{_iso(ts(r) + 0.1)}][valid][INFO] - " + json.dumps({"epoch": e, "valid_loss": fnum(round(vb, 3), "g"),
                                                                          "valid_ntokens": "12288", "valid_nsentences": "512", "valid_num_updates": str(s)}))
            add(S, "val", s, round(vb, 3) if fin(vb) else vb)
        if s % bpe == 0:
            out.append(f"[{_iso(ts(r) + 0.2)}][fairseq_cli.train][INFO] - end of epoch {e} (average epoch stats below)")
            out.append(f"[{_iso(ts(r) + 0.3)}][fairseq.trainer][INFO] - begin training epoch {e + 1}")
    out.append(f"[{_iso(ts(res['recs'][-1]) + 1)}][fairseq_cli.train][INFO] - done training in {res['recs'][-1]['wall']:.1f} seconds")
    open(os.path.join(p, "hydra_train.log"), "w").write("\n".join(out) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- Polyaxon (traceml) events
def w_polyaxon(d, res, cfg):
    """Polyaxon v2 tracking (traceml) run outputs: .polyaxon/<uuid>/events/metric/<name>.plx, one JSON object per line
    {"timestamp", "step", "metric"}; names train_<loss word>, val_<loss word>, learning_rate, grad_norm, step_time_ms, data_time_ms,
    rss_gb (GiB), amp_loss_scale, dead_relu_fraction, saturated_fraction, grad_norm_first_layer/last_layer; current-batch values every N
    steps. A skipped (non-finite) batch is not reported at all."""
    lw = res["loss_word"]
    S = series("step", "current batch every N steps")
    p = os.path.join(d, ".polyaxon", "b1f4c7e2a9d04e3c8f5a6b7c8d9e0f12", "events", "metric")
    os.makedirs(p, exist_ok=True)
    open(os.path.join(d, ".polyaxon", "b1f4c7e2a9d04e3c8f5a6b7c8d9e0f12", "status.json"), "w").write(json.dumps({"status": "succeeded"}) + "\n")
    files = {}

    def put(name, t, s, v):
        files.setdefault(name, []).append(json.dumps({"timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06d+00:00" % int((t % 1) * 1e6),
                                                      "step": s, "metric": v}))
    ev = ev_map(res)
    for r in res["recs"]:
        s = r["step"]
        if s % cfg["every"] == 0:
            t = ts(r)
            for name, v, key, f in ((f"train_{lw}", r["loss"], "loss", 1), ("learning_rate", r["lr"], "lr", 1), ("grad_norm", r["gn"], "gn", 1),
                                    ("step_time_ms", r["st"] * 1000, "st", 1e-3), ("data_time_ms", r["dt"] * 1000, "dt", 1e-3),
                                    ("rss_gb", r["rss"] / 1024, "rss", 1024), ("amp_loss_scale", r["scale"], "scale", 1),
                                    ("dead_relu_fraction", r["dead"], "dead", 1), ("saturated_fraction", r["sat"], "sat", 1),
                                    ("grad_norm_first_layer", r["gfirst"] if cfg.get("layer_gn") else None, "gfirst", 1),
                                    ("grad_norm_last_layer", r["glast"] if cfg.get("layer_gn") else None, "glast", 1)):
                if v is None:
                    continue
                put(name, t, s, v)
                add(S, key, s, v * f)
        e = ev.get((s, r["seg"]))
        if e:
            put(f"val_{lw}", ts(r) + 0.05, s, e["val"])
            add(S, "val", s, e["val"])
    for name, lines in files.items():
        open(os.path.join(p, name + ".plx"), "w").write("\n".join(lines) + "\n")
    return S


# ---------------------------------------------------------------------------------------------------- Lightning RichProgressBar
def w_richpl(d, res, cfg):
    """Lightning RichProgressBar recorded from a terminal (train_console.log): per epoch one line redrawn with '\\r':
    'Epoch 3/19  ━━━━━━━━━━  12/40 0:00:00 • 0:00:01 45.20it/s v_num: 0 train_loss_step: 0.512' (metrics '.3f'), a
    'Validation' bar, and at the epoch end 'val_loss:' and 'train_loss_epoch:'. The x of a step value is the global step
    (epoch * batches + batch)."""
    S = series("global step = epoch * batches_per_epoch + batch n (1-based n in n/N)", "current batch (train_loss_step), 3 decimals")
    bpe = res["bpe"]
    nep = math.ceil(cfg["steps"] / bpe)
    ev = {e["step"]: e for e in res["evals"]}
    out = ["GPU available: False, used: False", "TPU available: False, using: 0 TPU cores",
           "┏━━━┳━━━━━━━┳━━━━━━━━━━┳━━━━━━━━┓", "┃   ┃ Name  ┃ Type     ┃ Params ┃", "┡━━━╇━━━━━━━╇━━━━━━━━━━╇━━━━━━━━┩",
           f"│ 0 │ model │ {cfg['family']:<8} │ 12.3 K │", "└───┴───────┴──────────┴────────┘"]
    ep_rows = {}
    for r in res["recs"]:
        ep_rows.setdefault((r["step"] - 1) // bpe, []).append(r)
    lastval = None
    for e, rs in sorted(ep_rows.items()):
        line = ""
        N = len(rs)
        for i, r in enumerate(rs):
            n = i + 1
            if n % cfg["every"] == 0 or n == N:
                k = int(40 * n / N)
                bar = "━" * k + " " * (40 - k)
                met = f"v_num: 0 train_loss_step: {fnum(r['loss'], '.3f')}" + (f" val_loss: {lastval:.3f}" if lastval is not None else "")
                line += f"\rEpoch {e}/{nep - 1} {bar} {n}/{N} 0:00:{int(r['wall']) % 60:02d} • 0:00:00 {1 / r['st']:.2f}it/s {met}"
                x = e * bpe + n
                add(S, "loss", x, rnd(r["loss"], 3))
        ee = ev.get(rs[-1]["step"])
        ep_loss = mean([r["loss"] for r in rs])
        if ee:
            line += f"\rValidation {'━' * 40} 1/1 0:00:00 • 0:00:00 61.02it/s"
            lastval = ee["val"] if fin(ee["val"]) else float("nan")
            add(S, "val", e * bpe + N, rnd(ee["val"], 3))
        line += (f"\rEpoch {e}/{nep - 1} {'━' * 40} {N}/{N} 0:00:{int(rs[-1]['wall']) % 60:02d} • 0:00:00 {1 / rs[-1]['st']:.2f}it/s v_num: 0 "
                 f"train_loss_step: {fnum(rs[-1]['loss'], '.3f')}" + (f" val_loss: {fnum(lastval, '.3f')}" if lastval is not None else "")
                 + f" train_loss_epoch: {fnum(ep_loss, '.3f')}")
        out.append(line.lstrip("\r"))
    out.append(f"`Trainer.fit` stopped: `max_steps={cfg['steps']}` reached.")
    open(os.path.join(d, "train_console.log"), "w").write("\n".join(out) + "\n")
    return S


WRITERS = {"tb": w_tb, "hf": w_hf, "mlflow": w_mlflow, "wandbcsv": w_wandbcsv, "keras2": w_keras2, "ultra": w_ultra, "kohya": w_kohya,
           "slurm": w_slurm, "submitit": w_submitit, "fshydra": w_fshydra, "polyaxon": w_polyaxon, "richpl": w_richpl}
