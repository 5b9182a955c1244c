"""Log writers imitating real tools.  Each writer returns the canonical rows it
wrote (x = value on the file's own x-axis) so labels are derived from exactly
what the file shows."""
import datetime as dt
import json
import math
import os

BASE = dt.datetime(2024, 5, 1, 12, 0, 0)


def ts(row, seed):
    return BASE + dt.timedelta(minutes=7 * seed, seconds=row["time"])


def fin(v):
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


# ------------------------------------------------------------ sampling
def sample_steps(rec, every, agg="mean"):
    """One canonical row per logging event, in the order written."""
    out, buf = [], []
    rows = rec["rows"]
    for i, r in enumerate(rows):
        buf.append(r)
        seg_end = i + 1 == len(rows) or rows[i + 1].get("segment", 0) != r.get("segment", 0) \
            or rows[i + 1]["step"] <= r["step"]
        if r["step"] % every == 0 or (i + 1 == len(rows)):
            c = dict(r)
            c["x"] = r["step"]
            if agg == "mean":
                c["loss"] = sum(b["loss"] for b in buf) / len(buf)
                c["step_ms"] = sum(b["step_ms"] for b in buf) / len(buf)
                c["data_ms"] = sum(b["data_ms"] for b in buf) / len(buf)
                if "rank_ms" in r:
                    c["rank_ms"] = [sum(b["rank_ms"][k] for b in buf) / len(buf) for k in range(len(r["rank_ms"]))]
            c["window"] = (buf[0]["step"], r["step"])
            out.append(c)
            buf = []
        elif seg_end:
            buf = []  # partial window lost at a crash
    return out


def sample_evals(rec):
    out = []
    for e in rec["evals"]:
        c = dict(e)
        c["x"] = e["step"]
        out.append(c)
    return out


def epoch_rows(rec, ema=False):
    """Per-epoch aggregation (Keras / fastai); x = epoch index (0-based)."""
    spe, rows = rec["spe"], rec["rows"]
    out, sm, n = [], 0.0, 0
    for e0 in range(0, len(rows) // spe):
        chunk = rows[e0 * spe:(e0 + 1) * spe]
        for r in chunk:
            n += 1
            sm = 0.98 * sm + 0.02 * r["loss"]
        c = dict(chunk[-1])
        c["x"] = e0
        c["loss"] = (sm / (1 - 0.98 ** n)) if ema else sum(r["loss"] for r in chunk) / len(chunk)
        c["acc"] = sum(r.get("acc", 0) for r in chunk) / len(chunk) if "acc" in chunk[0] else None
        c["step_ms"] = sum(r["step_ms"] for r in chunk) / len(chunk)
        c["epoch_s"] = sum(r["step_ms"] for r in chunk) / 1000
        c["window"] = (chunk[0]["step"], chunk[-1]["step"])
        ev = [v for v in rec["evals"] if v["step"] == chunk[-1]["step"]]
        if ev:
            c["val_loss"], c["val_acc"] = ev[0]["val_loss"], ev[0].get("val_acc")
        out.append(c)
    return out


def mask(rows, mode, keys=("loss",)):
    """Logger that hides non-finite values: 'zero', 'prev' or 'skip'."""
    masked, prev = [], {}
    for r in rows:
        for k in keys:
            v = r.get(k)
            if v is None:
                continue
            if not math.isfinite(v):
                masked.append(r["x"])
                r[k] = 0.0 if mode == "zero" else prev.get(k) if mode == "prev" else None
            else:
                prev[k] = v
    return masked


def g(v, f="{:.4f}"):
    if v is None:
        return ""
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f.format(v)


def _w(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


# ------------------------------------------------------------ HF Trainer
def w_hf(rec, spec, d, rows, evs):
    hist = []
    ei = 0
    for r in rows:
        row = {"epoch": round(r["epoch"], 4)}
        if fin(r.get("grad_norm")) or (r.get("grad_norm") is not None):
            row["grad_norm"] = r["grad_norm"]
        row.update({"learning_rate": r["lr"], "loss": round(r["loss"], 4) if fin(r["loss"]) else r["loss"], "step": r["x"]})
        if r["loss"] is None:
            del row["loss"]
        hist.append(row)
        while ei < len(evs) and evs[ei]["x"] <= r["x"]:
            e = evs[ei]
            er = {"epoch": round(e["epoch"], 4), "eval_loss": e["val_loss"]}
            if "val_acc" in e:
                er["eval_accuracy"] = e["val_acc"]
            er.update({"eval_runtime": 0.21, "eval_samples_per_second": 2438.1, "eval_steps_per_second": 9.52, "step": e["x"]})
            hist.append(er)
            ei += 1
    last = rec["rows"][-1]
    hist.append({"epoch": round(last["epoch"], 4), "step": last["step"], "total_flos": 1.2e12,
                 "train_loss": sum(r["loss"] for r in rec["rows"]) / len(rec["rows"]),
                 "train_runtime": round(last["time"], 3), "train_samples_per_second": 812.4, "train_steps_per_second": 12.7})
    st = {"best_metric": None, "best_model_checkpoint": None, "epoch": round(last["epoch"], 4), "eval_steps": spec.get("eval_every"),
          "global_step": last["step"], "is_hyper_param_search": False, "is_local_process_zero": True,
          "is_world_process_zero": True, "log_history": hist, "logging_steps": spec["log_every"],
          "max_steps": spec["steps"], "num_input_tokens_seen": 0, "num_train_epochs": math.ceil(spec["steps"] / rec["spe"]),
          "save_steps": 500, "stateful_callbacks": {"TrainerControl": {"args": {"should_epoch_stop": False, "should_evaluate": False,
                                                    "should_log": False, "should_save": True, "should_training_stop": True}, "attributes": {}}},
          "total_flos": 1.2e12, "train_batch_size": spec["bs"], "trial_name": None, "trial_params": None}
    _w(f"{d}/trainer_state.json", json.dumps(st, indent=2))
    return "global step (log_history 'step')"


# ------------------------------------------------------------ Lightning CSVLogger
def w_lightning(rec, spec, d, rows, evs):
    opt = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "momentum": "SGD", "rmsprop": "RMSprop"}.get(spec["opt"], "Optimizer")
    recs = []
    for r in rows:
        recs.append({"epoch": int(r["epoch"] - 1e-9), "step": r["x"] - 1, f"lr-{opt}": r["lr"], "train_loss_step": r["loss"]})
    for e in evs:
        row = {"epoch": int(e["epoch"] - 1e-9), "step": e["x"] - 1, "val_loss": e["val_loss"]}
        if "val_acc" in e:
            row["val_acc"] = e["val_acc"]
        recs.append(row)
    recs.sort(key=lambda z: (z["step"], "val_loss" in z))
    cols = sorted({k for z in recs for k in z})
    lines = [",".join(cols)] + [",".join("" if z.get(c) is None else (str(z[c]) if isinstance(z[c], int) else repr(float(z[c])))
                                        for c in cols) for z in recs]
    _w(f"{d}/lightning_logs/version_0/metrics.csv", "\n".join(lines) + "\n")
    _w(f"{d}/lightning_logs/version_0/hparams.yaml", f"lr: {spec['lr']}\nbatch_size: {spec['bs']}\noptimizer: {spec['opt']}\n")
    for r in rows:
        r["x"] -= 1
    for e in evs:
        e["x"] -= 1
    return "Lightning 'step' column (= global step - 1, 0-based)"


# ------------------------------------------------------------ Keras
def w_keras_csv(rec, spec, d, rows, evs):
    cols = ["epoch"] + (["accuracy"] if rows[0].get("acc") is not None else []) + ["learning_rate", "loss"]
    if rows[0].get("val_loss") is not None:
        cols += (["val_accuracy"] if rows[0].get("val_acc") is not None else []) + ["val_loss"]
    keymap = {"accuracy": "acc", "learning_rate": "lr", "val_accuracy": "val_acc"}
    lines = [",".join(cols)]
    for r in rows:
        lines.append(",".join(str(r["x"]) if c == "epoch" else g(r.get(keymap.get(c, c)), "{:.16g}") for c in cols))
    _w(f"{d}/training.log", "\n".join(lines) + "\n")
    return "epoch (0-based, CSVLogger 'epoch' column)"


def w_keras_console(rec, spec, d, rows, evs):
    n, E = rec["spe"], len(rows)
    k3 = spec.get("variant") == "k3"
    out = []
    for r in rows:
        out.append(f"Epoch {r['x'] + 1}/{E}")
        ms = r["step_ms"]
        parts = []
        if k3:
            keys = [("accuracy", "acc"), ("loss", "loss"), ("val_accuracy", "val_acc"), ("val_loss", "val_loss")]
        else:
            keys = [("loss", "loss"), ("accuracy", "acc"), ("val_loss", "val_loss"), ("val_accuracy", "val_acc"), ("lr", "lr")]
        for name, k in keys:
            if r.get(k) is not None:
                parts.append(f"{name}: {g(r[k], '{:.4e}' if k == 'lr' else '{:.4f}')}")
        secs = round(r["epoch_s"])
        if k3:
            out.append(f"\x1b[1m{n}/{n}\x1b[0m \x1b[32m━━━━━━━━━━━━━━━━━━━━\x1b[0m\x1b[37m\x1b[0m \x1b[1m{secs}s\x1b[0m {ms:.0f}ms/step - " + " - ".join(parts))
        else:
            out.append(f"{n}/{n} [==============================] - {secs}s {ms:.0f}ms/step - " + " - ".join(parts))
    for r in rows:
        r["x"] += 1
    _w(f"{d}/console.txt", "\n".join(out) + "\n")
    return "epoch (1-based, as printed 'Epoch k/N')"


# ------------------------------------------------------------ fastai
def w_fastai(rec, spec, d, rows, evs):
    hdr = ["epoch", "train_loss", "valid_loss"] + (["accuracy"] if rows[0].get("val_acc") is not None else []) + ["time"]
    out = ["".join(h.ljust(12) for h in hdr)]
    for r in rows:
        t = int(r["epoch_s"])
        vals = [str(r["x"]), g(r["loss"], "{:.6f}"), g(r.get("val_loss"), "{:.6f}")]
        if "accuracy" in hdr:
            vals.append(g(r.get("val_acc"), "{:.6f}"))
        vals.append(f"{t // 60:02d}:{t % 60:02d}")
        out.append("".join(v.ljust(12) for v in vals))
    _w(f"{d}/fit_log.txt", "\n".join(out) + "\n")
    return "epoch (0-based fastai table)"


# ------------------------------------------------------------ TensorBoard
def w_tb(rec, spec, d, rows, evs):
    from torch.utils.tensorboard import SummaryWriter
    sw = SummaryWriter(log_dir=f"{d}/tb", filename_suffix=".indep2")
    t0 = BASE.timestamp() + 420 * spec["seed"]
    names = spec.get("keys", {})
    for r in rows:
        wt = t0 + r["time"]
        for k, tag in (("loss", names.get("loss", "train/loss")), ("lr", "train/lr"), ("grad_norm", "train/grad_norm"),
                       ("step_ms", "perf/step_time_ms"), ("rss_mb", "sys/rss_mb"), ("dead_frac", "act/dead_fraction"),
                       ("sat_frac", "act/saturated_fraction"), ("gn_first", "grad_norm/layer0"), ("gn_last", "grad_norm/head"),
                       ("loss_scale", "amp/loss_scale")):
            if r.get(k) is not None:
                sw.add_scalar(tag, r[k], r["x"], walltime=wt)
    for e in evs:
        sw.add_scalar("eval/loss", e["val_loss"], e["x"], walltime=t0 + 1)
        if "val_acc" in e:
            sw.add_scalar("eval/accuracy", e["val_acc"], e["x"], walltime=t0 + 1)
    sw.close()
    return "TensorBoard global_step"


# ------------------------------------------------------------ W&B offline
def w_wandb(rec, spec, d, rows, evs):
    rid = f"{spec['seed']:04d}ab{len(rows):03d}"
    base = f"{d}/wandb/offline-run-20240501_{120000 + spec['seed']:06d}-{rid}/files"
    evmap = {e["x"]: e for e in evs}
    t0 = BASE.timestamp() + 420 * spec["seed"]
    lines, summ = [], {}
    for r in rows:
        h = {"train/loss": r["loss"], "train/lr": r["lr"]}
        if r.get("grad_norm") is not None:
            h["train/grad_norm"] = r["grad_norm"]
        h.update({"perf/step_ms": round(r["step_ms"], 3), "perf/samples_per_sec": round(r["samples_per_s"], 1),
                  "sys/mem_gb": round(r["rss_mb"] / 1024, 4)})
        for k, nm in (("loss_scale", "amp/loss_scale"), ("dead_frac", "act/dead_frac"), ("sat_frac", "act/sat_frac"),
                      ("data_ms", "perf/data_ms")):
            if r.get(k) is not None:
                h[nm] = r[k]
        if h["train/loss"] is None:
            del h["train/loss"]
        e = evmap.pop(r["x"], None)
        if e:
            h["val/loss"] = e["val_loss"]
            if "val_acc" in e:
                h["val/acc"] = e["val_acc"]
        h.update({"trainer/global_step": r["x"], "_step": r["x"], "_runtime": round(r["time"], 3), "_timestamp": t0 + r["time"]})
        lines.append(json.dumps(h))
        summ.update(h)
    _w(f"{base}/wandb-history.jsonl", "\n".join(lines) + "\n")
    _w(f"{base}/wandb-summary.json", json.dumps(summ))
    _w(f"{base}/config.yaml", "wandb_version: 1\n" + "".join(f"{k}:\n  desc: null\n  value: {spec[k]}\n" for k in ("lr", "bs", "opt", "steps")))
    return "W&B _step (= trainer/global_step)"


# ------------------------------------------------------------ MLflow file store
def w_mlflow(rec, spec, d, rows, evs):
    rid = f"{spec['seed']:08x}" + "c0ffee" * 4
    root = f"{d}/mlruns/0/{rid}"
    t0 = int((BASE.timestamp() + 420 * spec["seed"]) * 1000)
    series = {"train_loss": [], "lr": [], "step_time_s": [], "memory_mb": []}
    for r in rows:
        t = t0 + int(r["time"] * 1000)
        if r["loss"] is not None:
            series["train_loss"].append(f"{t} {r['loss']!r} {r['x']}")
        series["lr"].append(f"{t} {r['lr']!r} {r['x']}")
        series["step_time_s"].append(f"{t} {r['step_ms'] / 1000!r} {r['x']}")
        series["memory_mb"].append(f"{t} {r['rss_mb']!r} {r['x']}")
        if r.get("grad_norm") is not None:
            series.setdefault("grad_norm", []).append(f"{t} {r['grad_norm']!r} {r['x']}")
    for e in evs:
        series.setdefault("val_loss", []).append(f"{t0 + 1000} {e['val_loss']!r} {e['x']}")
        if "val_acc" in e:
            series.setdefault("val_accuracy", []).append(f"{t0 + 1000} {e['val_acc']!r} {e['x']}")
    for k, v in series.items():
        _w(f"{root}/metrics/{k}", "\n".join(v) + "\n")
    for k in ("lr", "bs", "opt", "steps"):
        _w(f"{root}/params/{k}", str(spec[k]))
    _w(f"{root}/tags/mlflow.runName", spec["name"])
    _w(f"{root}/meta.yaml", f"artifact_uri: file:///mlruns/0/{rid}/artifacts\nend_time: {t0 + int(rows[-1]['time'] * 1000)}\n"
       f"experiment_id: '0'\nlifecycle_stage: active\nrun_id: {rid}\nrun_name: {spec['name']}\nstart_time: {t0}\nstatus: 3\n")
    _w(f"{d}/mlruns/0/meta.yaml", "artifact_location: file:///mlruns/0\nexperiment_id: '0'\nlifecycle_stage: active\nname: Default\n")
    return "MLflow metric step"


# ------------------------------------------------------------ JSON lines / CSV
PALETTES = [
    dict(x="step", loss="loss", lr="lr", gn="grad_norm", t="step_ms", mem="rss_mb", vl="val_loss", va="val_acc"),
    dict(x="iter", loss="objective", lr="learning_rate", gn="gnorm", t="dt_ms", mem="mem_mb", vl="eval_objective", va="eval_acc"),
    dict(x="global_step", loss="train/nll", lr="optim/lr", gn="optim/grad_l2", t="time/iter_s", mem="mem/rss_gb", vl="valid/nll", va="valid/acc"),
    dict(x="it", loss="total_loss", lr="lr", gn="grad_norm", t="batch_time", mem="max_mem_mb", vl="val_total_loss", va="val_top1"),
    dict(x="n_iter", loss="xent", lr="lr0", gn="gn", t="sec_per_iter", mem="mem_gb", vl="val_xent", va="val_accuracy"),
    dict(x="step", loss="mse", lr="lr", gn="grad_norm", t="ms_per_step", mem="rss_mb", vl="val_mse", va="val_acc"),
]


def _conv(key, v):
    if v is None:
        return None
    if key in ("time/iter_s", "sec_per_iter", "batch_time"):
        return v / 1000
    if key in ("mem/rss_gb", "mem_gb"):
        return v / 1024
    return v


def _flat(r, P, extra=True):
    o = {P["x"]: r["x"]}
    for ck, pk in (("loss", "loss"), ("lr", "lr"), ("grad_norm", "gn"), ("step_ms", "t"), ("rss_mb", "mem")):
        v = r.get(ck)
        if v is not None:
            o[P[pk]] = _conv(P[pk], v)
    if extra:
        for k in ("data_ms", "loss_scale", "dead_frac", "sat_frac", "gn_first", "gn_last", "wait_ms", "fwd_bwd_ms", "samples_per_s"):
            if r.get(k) is not None:
                o[k] = r[k]
    return o


def w_jsonl(rec, spec, d, rows, evs, fname="metrics.jsonl"):
    P = PALETTES[spec.get("palette", 0)]
    out = []
    allr = sorted([(i, 0, r) for i, r in enumerate(rows)] + [(_pos(rows, e) + 0.5, 1, e) for e in evs], key=lambda z: z[0])
    for _, kind, r in allr:
        if kind == 0:
            o = _flat(r, P)
        else:
            o = {P["x"]: r["x"], P["vl"]: r["val_loss"]}
            if "val_acc" in r:
                o[P["va"]] = r["val_acc"]
        o["time"] = round(r.get("time", 0), 3)
        out.append(json.dumps(o))
    _w(f"{d}/{fname}", "\n".join(out) + "\n")
    return f"'{P['x']}' field"


def _pos(rows, e):
    """index of the training row after which an eval was written (order kept as logged)."""
    for i, r in enumerate(rows):
        if r["x"] == e["x"] and r.get("segment", 0) == e.get("segment", 0):
            return i
    return len(rows)


def w_csv(rec, spec, d, rows, evs, fname="train_log.csv"):
    P = PALETTES[spec.get("palette", 0)]
    evmap = {(e["x"], e.get("segment", 0)): e for e in evs}
    recs = []
    for r in rows:
        o = _flat(r, P, extra=spec.get("csv_extra", True))
        e = evmap.get((r["x"], r.get("segment", 0)))
        o[P["vl"]] = e["val_loss"] if e else None
        recs.append(o)
    cols = list(dict.fromkeys(k for o in recs for k in o))
    lines = [",".join(cols)] + [",".join(g(o.get(c), "{:.6g}") if not isinstance(o.get(c), int) else str(o[c]) for c in cols) for o in recs]
    _w(f"{d}/{fname}", "\n".join(lines) + "\n")
    return f"'{P['x']}' column"
