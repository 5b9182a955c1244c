"""Log writers: each writes what the named framework / script style would write.

Every writer returns the *logged* series (after the framework's own
aggregation and rounding), which is what labels are computed from:
  {"train": [(step, v)], "val": [...], "gn", "lr", "step_time", "data_time",
   "mem", "scale": [...], "ranks": {r: {"train": [...], "step_time": [...]}},
   "unit": "..."}
"""
from __future__ import annotations

import csv
import datetime as dt
import glob
import io
import json
import math
import os
import zlib

NAN = float("nan")


def g6(x):
    if x is None:
        return None
    x = float(x)
    if not math.isfinite(x):
        return x
    return float(f"{x:.6g}")


def s6(x):
    """6-significant-digit text (as Python's repr of the rounded float)."""
    x = g6(x)
    if x is None:
        return ""
    return repr(x) if math.isfinite(x) else ("nan" if x != x else ("inf" if x > 0 else "-inf"))


def base_ts(name):
    return 1709251200 + zlib.crc32(name.encode()) % 20_000_000  # some time in 2024


def fin(x):
    return x is not None and math.isfinite(x)


def windows(steps, every, agg_loss="mean", nan_filter=False):
    """Group per-step records into logging windows ending at step % every == 0.

    Yields (rec_last, agg) with agg keys loss, step_time, data_time (means over
    the window unless 'last').  A crash drops the partially filled window.
    """
    buf = []
    for r in steps:
        buf.append(r)
        if r["step"] % every == 0:
            ls = [b["loss"] for b in buf]
            if nan_filter:
                ls = [x for x in ls if math.isfinite(x)]
            if agg_loss == "last":
                loss = buf[-1]["loss"]
            else:
                loss = sum(ls) / len(ls) if ls else NAN
            agg = dict(loss=loss, step_time=sum(b["step_time"] for b in buf) / len(buf),
                       data_time=sum(b["data_time"] for b in buf) / len(buf),
                       acc=(sum(b["acc"] for b in buf) / len(buf)) if buf[-1].get("acc") is not None else None,
                       n=len(buf))
            if r.get("rank_time"):
                agg["rank_time"] = [sum(b["rank_time"][k] for b in buf) / len(buf) for k in range(len(r["rank_time"]))]
                agg["rank_data"] = [sum(b["rank_data"][k] for b in buf) / len(buf) for k in range(len(r["rank_time"]))]
                agg["rank_loss"] = [sum(b["rank_loss"][k] for b in buf) / len(buf) for k in range(len(r["rank_time"]))]
            yield r, agg
            buf = []
        elif r.get("crash_after"):
            buf = []


def eval_at(trace, step):
    for e in trace["evals"]:
        if e["step"] == step:
            return e
    return None


def new_series(unit):
    return dict(train=[], val=[], gn=[], lr=[], step_time=[], data_time=[], mem=[], scale=[], ranks={}, unit=unit,
                acc=[], val_acc=[], layer_gn={})


def add(S, key, step, v):
    if v is not None:
        S[key].append((step, g6(v)))


# ----------------------------------------------------------------------------- HF Trainer
def w_hf(spec, tr, out):
    S = new_series("step (log_history 'step')")
    L = spec.get("log", set())
    every = spec.get("log_every", 10)
    hist = []
    steps = tr["steps"]
    lr_next = {r["step"]: steps[i + 1]["lr"] if i + 1 < len(steps) else r["lr"] for i, r in enumerate(steps)}
    # HF: logging_nan_inf_filter=True (default): a NaN/inf step adds the running mean instead
    buf_loss = 0.0
    last_logged = 0
    tot = 0.0
    for r in steps:
        x = r["loss"]
        if math.isfinite(x):
            buf_loss += x
        else:  # tr_loss += tr_loss / (1 + global_step - _globalstep_last_logged), global_step not yet incremented
            buf_loss += buf_loss / (1 + (r["step"] - 1) - last_logged)
        if r["step"] % every == 0 or (spec.get("first_step") and r["step"] == 1):
            loss = round(buf_loss / (r["step"] - last_logged), 4)
            tot += buf_loss
            row = {"epoch": r["step"] / tr["bpe"], "grad_norm": g6(r["gn"]), "learning_rate": g6(lr_next[r["step"]]),
                   "loss": loss, "step": r["step"]}
            if "gn" not in L:
                del row["grad_norm"]
            hist.append(row)
            S["train"].append((r["step"], loss))
            if "gn" in L:
                add(S, "gn", r["step"], r["gn"])
            add(S, "lr", r["step"], lr_next[r["step"]])
            buf_loss, last_logged = 0.0, r["step"]
        e = eval_at(tr, r["step"])
        if e:
            nva = spec.get("n_val", 500)
            rt = 0.05 + 0.0001 * nva
            row = {"epoch": r["step"] / tr["bpe"], "eval_loss": g6(e["val_loss"]), "eval_runtime": round(rt, 4),
                   "eval_samples_per_second": round(nva / rt, 3), "eval_steps_per_second": round(nva / 64 / rt, 3),
                   "step": r["step"]}
            if e.get("val_acc") is not None and "acc" in L:
                row["eval_accuracy"] = g6(e["val_acc"])
            hist.append(row)
            add(S, "val", r["step"], e["val_loss"])
    last = steps[-1]
    hist.append({"epoch": last["step"] / tr["bpe"], "step": last["step"], "total_flos": float(int(last["step"] * 3.1e9)),
                 "train_loss": tot / max(1, last["step"]), "train_runtime": round(tr["wall"], 4),
                 "train_samples_per_second": round(last["step"] * spec.get("bs", 64) / tr["wall"], 3),
                 "train_steps_per_second": round(last["step"] / tr["wall"], 3)})
    state = {"best_global_step": None, "best_metric": None, "best_model_checkpoint": None,
             "epoch": last["step"] / tr["bpe"], "eval_steps": spec.get("eval_every") if isinstance(spec.get("eval_every"), int) else 500,
             "global_step": last["step"], "is_hyper_param_search": False, "is_local_process_zero": True,
             "is_world_process_zero": True, "log_history": hist, "logging_steps": every, "max_steps": tr["total"],
             "num_input_tokens_seen": 0, "num_train_epochs": math.ceil(tr["total"] / tr["bpe"]), "save_steps": 500,
             "stateful_callbacks": {"TrainerControl": {"args": {"should_epoch_stop": False, "should_evaluate": False,
                                                                "should_log": False, "should_save": True,
                                                                "should_training_stop": True}, "attributes": {}}},
             "total_flos": float(int(last["step"] * 3.1e9)), "train_batch_size": spec.get("bs", 64),
             "trial_name": None, "trial_params": None}
    d = os.path.join(out, f"checkpoint-{last['step']}") if spec.get("var", 0) % 2 == 0 else out
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "trainer_state.json"), "w") as f:
        f.write(json.dumps(state, indent=2, sort_keys=True) + "\n")
    return S


# ----------------------------------------------------------------------------- Lightning CSVLogger
def w_lightning(spec, tr, out):
    S = new_series("step (metrics.csv 'step' column)")
    L = spec.get("log", set())
    every = spec.get("log_every", 50)
    rows = []
    optname = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "momentum": "SGD", "nesterov": "SGD",
               "rmsprop": "RMSprop", "adagrad": "Adagrad"}[spec.get("opt", "adam")]
    v = spec.get("var", 0)
    kl = ["train_loss", "loss", "train/loss"][v % 3]
    kv = ["val_loss", "val_loss", "val/loss"][v % 3]
    for r in tr["steps"]:
        s = r["step"] - 1
        if r["step"] % every == 0:
            if "lr" in L:
                rows.append({f"lr-{optname}": g6(r["lr"]), "step": s})
                add(S, "lr", s, r["lr"])
            row = {f"{kl}_step": g6(r["loss"]), "epoch": int((r["step"] - 1) // tr["bpe"]), "step": s}
            if r.get("lgn"):  # lightning.pytorch.utilities.grad_norm(self, norm_type=2) logged with log_dict
                for n, x in r["lgn"].items():
                    row[f"grad_2.0_norm/{n}"] = g6(x)
                    S["layer_gn"].setdefault(n, []).append((s, g6(x)))
                row["grad_2.0_norm_total"] = g6(r["gn"])
                add(S, "gn", s, r["gn"])
            if "acc" in L and r.get("acc") is not None:
                row["train_acc_step"] = g6(r["acc"])
            rows.append(row)
            add(S, "train", s, r["loss"])
        if r["step"] % tr["bpe"] == 0:
            ep = next(e for e in tr["epochs"] if e["step"] == r["step"])
            if ep["val_loss"] is not None:
                row = {kv: g6(ep["val_loss"]), "epoch": ep["epoch"], "step": s}
                if "acc" in L and ep["val_acc"] is not None:
                    row[kv.replace("loss", "acc")] = g6(ep["val_acc"])
                rows.append(row)
                add(S, "val", s, ep["val_loss"])
            row = {f"{kl}_epoch": g6(ep["loss"]), "epoch": ep["epoch"], "step": s}
            if "acc" in L and ep["acc"] is not None:
                row["train_acc_epoch"] = g6(ep["acc"])
            rows.append(row)
    keys = sorted(set().union(*rows))
    d = os.path.join(out, "lightning_logs", "version_0")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "metrics.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, keys, lineterminator="\n")
        w.writeheader()
        for row in rows:
            w.writerow({k: ("" if row.get(k) is None else (s6(row[k]) if isinstance(row[k], float) else row[k])) for k in keys})
    with open(os.path.join(d, "hparams.yaml"), "w") as f:
        f.write(f"lr: {spec['lr']}\nbatch_size: {spec.get('bs', 64)}\noptimizer: {optname}\nmax_steps: {tr['total']}\n")
    return S


# ----------------------------------------------------------------------------- Keras
def _keras_rows(spec, tr, S):
    L = spec.get("log", set())
    reg = tr["steps"][0].get("acc") is None
    rows = []
    for ep in tr["epochs"]:
        row = {"loss": ep["loss"]}
        if not reg and "acc" in L:
            row["accuracy"] = ep["acc"]
        if ep["val_loss"] is not None:
            row["val_loss"] = ep["val_loss"]
            if not reg and "acc" in L:
                row["val_accuracy"] = ep["val_acc"]
        if "lr" in L:
            row["learning_rate"] = ep["lr"]
        rows.append(row)
        add(S, "train", ep["epoch"], ep["loss"])
        add(S, "val", ep["epoch"], ep["val_loss"])
        if "lr" in L:
            add(S, "lr", ep["epoch"], ep["lr"])
    return rows


def w_keras_csv(spec, tr, out):
    S = new_series("epoch (0-based 'epoch' column)")
    rows = _keras_rows(spec, tr, S)
    keys = sorted(rows[0])
    with open(os.path.join(out, "training.log"), "w") as f:
        f.write(",".join(["epoch"] + keys) + "\n")
        for i, r in enumerate(rows):
            f.write(",".join([str(i)] + [s6(r.get(k)) for k in keys]) + "\n")
    return S


def w_keras_json(spec, tr, out):
    S = new_series("epoch (0-based list index)")
    rows = _keras_rows(spec, tr, S)
    order = [k for k in ("accuracy", "loss", "mae", "val_accuracy", "val_loss", "val_mae", "learning_rate") if k in rows[0]]
    hist = {k: [g6(r.get(k)) for r in rows] for k in order}
    with open(os.path.join(out, "history.json"), "w") as f:
        json.dump(hist, f)
    return S


# ----------------------------------------------------------------------------- W&B
WANDB_NAMES = [
    dict(loss="train/loss", lr="train/learning_rate", gn="train/grad_norm", val="eval/loss", acc="train/acc",
         val_acc="eval/accuracy", step_time="perf/step_time_ms", data_time="perf/data_time_ms", mem="sys/rss_mb",
         scale="train/loss_scale", extra=("train/global_step", "train/epoch")),
    dict(loss="loss/train", lr="optim/lr", gn="optim/grad_norm", val="loss/val", acc="acc/train", val_acc="acc/val",
         step_time="perf/iter_time_s", data_time="perf/data_wait_s", mem="system/mem_gb", scale="amp/scale",
         extra=("epoch",)),
    dict(loss="train/nll", lr="lr", gn="grad/global_norm", val="val/nll", acc="train/top1", val_acc="val/top1",
         step_time="timing/step_ms", data_time="timing/dataloader_ms", mem="memory/rss_mb", scale="scaler/scale",
         extra=()),
]


def w_wandb(spec, tr, out):
    S = new_series("_step")
    L = spec.get("log", set())
    names = WANDB_NAMES[spec.get("var", 0) % 3]
    every = spec.get("log_every", 10)
    bt = base_ts(spec["name"])
    rid = "%08x" % zlib.crc32(spec["name"].encode())
    stamp = dt.datetime.fromtimestamp(bt, dt.timezone.utc).strftime("%Y%m%d_%H%M%S")
    d = os.path.join(out, "wandb", f"run-{stamp}-{rid[:8]}", "files")
    os.makedirs(d, exist_ok=True)
    ms = "ms" in names["step_time"]
    gb = "gb" in names["mem"]
    lines = []
    last = {}
    for r, a in windows(tr["steps"], every, spec.get("agg", "mean")):
        s = r["step"]
        row = {names["loss"]: g6(a["loss"])}
        add(S, "train", s, a["loss"])
        if "lr" in L:
            row[names["lr"]] = g6(r["lr"]); add(S, "lr", s, r["lr"])
        if "gn" in L:
            row[names["gn"]] = g6(r["gn"]); add(S, "gn", s, r["gn"])
        if "acc" in L and a["acc"] is not None:
            row[names["acc"]] = g6(a["acc"])
        if "time" in L:
            v = a["step_time"] * (1000 if ms else 1); row[names["step_time"]] = g6(v); add(S, "step_time", s, v)
        if "data" in L:
            v = a["data_time"] * (1000 if ms else 1); row[names["data_time"]] = g6(v); add(S, "data_time", s, v)
        if "mem" in L:
            v = r["rss"] / (1024 if gb else 1); row[names["mem"]] = g6(v); add(S, "mem", s, v)
        if "scale" in L:
            row[names["scale"]] = g6(r["scale"]); add(S, "scale", s, r["scale"])
        for k in names["extra"]:
            row[k] = s if "step" in k else g6(r["epoch"])
        e = eval_at(tr, s)
        if e:
            row[names["val"]] = g6(e["val_loss"]); add(S, "val", s, e["val_loss"])
            if "acc" in L and e["val_acc"] is not None:
                row[names["val_acc"]] = g6(e["val_acc"])
        row["_step"] = s
        row["_runtime"] = g6(r["wall"] + 3.2)
        row["_timestamp"] = round(bt + r["wall"] + 3.2, 3)
        last.update(row)
        lines.append(json.dumps(row))
    with open(os.path.join(d, "wandb-history.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(d, "wandb-summary.json"), "w") as f:
        json.dump(last, f)
    with open(os.path.join(d, "config.yaml"), "w") as f:
        f.write("wandb_version: 1\n\n")
        for k in ("lr", "bs", "opt", "sched", "steps"):
            f.write(f"{k}:\n  desc: null\n  value: {spec.get(k)}\n")
    return S


# ----------------------------------------------------------------------------- TensorBoard
TB_NAMES = [
    dict(loss="Loss/train", val="Loss/val", lr="lr", gn="grad_norm", step_time="time/step_ms", data_time="time/data_ms",
         mem="memory/rss_mb", scale="amp/loss_scale", acc="Accuracy/train", val_acc="Accuracy/val"),
    dict(loss="loss/train", val="loss/val", lr="train/lr", gn="train/grad_norm", step_time="perf/sec_per_iter",
         data_time="perf/data_sec", mem="perf/mem_gb", scale="train/loss_scale", acc="acc/train", val_acc="acc/val"),
    dict(loss="train/objective", val="valid/objective", lr="optim/learning_rate", gn="optim/gradient_norm",
         step_time="speed/step_time_ms", data_time="speed/data_time_ms", mem="sys/rss_mb", scale="optim/scale",
         acc="train/acc", val_acc="valid/acc"),
]


def w_tb(spec, tr, out):
    from torch.utils.tensorboard import SummaryWriter

    S = new_series("global_step")
    L = spec.get("log", set())
    names = TB_NAMES[spec.get("var", 0) % 3]
    every = spec.get("log_every", 10)
    ms = "ms" in names["step_time"]
    gb = "gb" in names["mem"]
    bt = base_ts(spec["name"])
    ranks = tr["steps"][0].get("rank_time") is not None
    logdir = os.path.join(out, ["tb", "logs/exp", "runs/train"][spec.get("var", 0) % 3])
    writers = {}

    def W(sub=""):
        if sub not in writers:
            writers[sub] = SummaryWriter(os.path.join(logdir, sub) if sub else logdir)
        return writers[sub]

    seg = 0
    for r, a in windows(tr["steps"], every, spec.get("agg", "mean")):
        s = r["step"]
        wt = bt + r["wall"]
        sub = ""
        if ranks:
            for k in range(len(a["rank_time"])):
                w = W(f"rank_{k}")
                w.add_scalar(names["loss"], a["rank_loss"][k], s, walltime=wt)
                v = a["rank_time"][k] * (1000 if ms else 1)
                w.add_scalar(names["step_time"], v, s, walltime=wt)
                S["ranks"].setdefault(k, {"train": [], "step_time": []})
                S["ranks"][k]["train"].append((s, a["rank_loss"][k]))
                S["ranks"][k]["step_time"].append((s, v))
            add(S, "train", s, a["loss"])
            continue
        w = W(str(seg) if seg else "")
        w.add_scalar(names["loss"], a["loss"], s, walltime=wt); add(S, "train", s, a["loss"])
        if "lr" in L:
            w.add_scalar(names["lr"], r["lr"], s, walltime=wt); add(S, "lr", s, r["lr"])
        if "gn" in L:
            w.add_scalar(names["gn"], r["gn"], s, walltime=wt); add(S, "gn", s, r["gn"])
        if r.get("lgn"):
            for n, x in r["lgn"].items():
                w.add_scalar(f"grad_norm/{n}", x, s, walltime=wt)
                S["layer_gn"].setdefault(n, []).append((s, g6(x)))
        if "acc" in L and a["acc"] is not None:
            w.add_scalar(names["acc"], a["acc"], s, walltime=wt)
        if "time" in L:
            v = a["step_time"] * (1000 if ms else 1); w.add_scalar(names["step_time"], v, s, walltime=wt); add(S, "step_time", s, v)
        if "data" in L:
            v = a["data_time"] * (1000 if ms else 1); w.add_scalar(names["data_time"], v, s, walltime=wt); add(S, "data_time", s, v)
        if "mem" in L:
            v = r["rss"] / (1024 if gb else 1); w.add_scalar(names["mem"], v, s, walltime=wt); add(S, "mem", s, v)
        if "scale" in L:
            w.add_scalar(names["scale"], r["scale"], s, walltime=wt); add(S, "scale", s, r["scale"])
        e = eval_at(tr, s)
        if e:
            w.add_scalar(names["val"], e["val_loss"], s, walltime=wt); add(S, "val", s, e["val_loss"])
            if "acc" in L and e["val_acc"] is not None:
                w.add_scalar(names["val_acc"], e["val_acc"], s, walltime=wt)
        if r.get("crash_after"):
            # the relaunched job opens a new SummaryWriter on the same log dir -> second event file
            w.flush()
            writers.pop("").close() if "" in writers else None
            seg = 0
            writers[""] = SummaryWriter(logdir, filename_suffix=".resumed")
    for w in writers.values():
        w.close()
    # neutral host name in the event file names (SummaryWriter puts the machine's name there)
    for i, p in enumerate(sorted(glob.glob(os.path.join(logdir, "**", "events.out.tfevents.*"), recursive=True))):
        dn = os.path.dirname(p)
        suffix = ".resumed" if p.endswith(".resumed") else ""
        os.rename(p, os.path.join(dn, f"events.out.tfevents.{bt + i * 60}.trainhost.{4100 + i}.0{suffix}"))
    return S


# ----------------------------------------------------------------------------- MLflow file store
MLF_NAMES = [
    dict(loss="train_loss", val="val_loss", lr="learning_rate", gn="grad_norm", step_time="step_time_s",
         data_time="data_time_s", mem="system/system_memory_usage_megabytes", scale="loss_scale", acc="train_acc", val_acc="val_acc"),
    dict(loss="loss", val="val_loss", lr="lr", gn="gradient_norm", step_time="time_per_step_ms",
         data_time="data_loading_ms", mem="rss_gb", scale="fp16_scale", acc="accuracy", val_acc="val_accuracy"),
]


def w_mlflow(spec, tr, out):
    S = new_series("step (third field of mlruns metric lines)")
    L = spec.get("log", set())
    names = MLF_NAMES[spec.get("var", 0) % 2]
    every = spec.get("log_every", 10)
    ms = "ms" in names["step_time"]
    gb = "gb" in names["mem"]
    bt = base_ts(spec["name"])
    rid = "%08x" % zlib.crc32(spec["name"].encode()) + "%08x" % zlib.crc32(spec["name"][::-1].encode())
    rid = (rid * 2)[:32]
    root = os.path.join(out, "mlruns", "0")
    rd = os.path.join(root, rid)
    os.makedirs(os.path.join(rd, "metrics"), exist_ok=True)
    os.makedirs(os.path.join(rd, "params"), exist_ok=True)
    os.makedirs(os.path.join(rd, "tags"), exist_ok=True)
    lines = {}

    def put(key, s, v, wall):
        lines.setdefault(key, []).append(f"{int((bt + wall) * 1000)} {s6(v)} {s}")

    for r, a in windows(tr["steps"], every, spec.get("agg", "mean")):
        s = r["step"]
        put(names["loss"], s, a["loss"], r["wall"]); add(S, "train", s, a["loss"])
        if "lr" in L:
            put(names["lr"], s, r["lr"], r["wall"]); add(S, "lr", s, r["lr"])
        if "gn" in L:
            put(names["gn"], s, r["gn"], r["wall"]); add(S, "gn", s, r["gn"])
        if "acc" in L and a["acc"] is not None:
            put(names["acc"], s, a["acc"], r["wall"])
        if "time" in L:
            v = a["step_time"] * (1000 if ms else 1); put(names["step_time"], s, v, r["wall"]); add(S, "step_time", s, v)
        if "data" in L:
            v = a["data_time"] * (1000 if ms else 1); put(names["data_time"], s, v, r["wall"]); add(S, "data_time", s, v)
        if "mem" in L:
            v = r["rss"] / (1024 if gb else 1); put(names["mem"], s, v, r["wall"]); add(S, "mem", s, v)
        if "scale" in L:
            put(names["scale"], s, r["scale"], r["wall"]); add(S, "scale", s, r["scale"])
        e = eval_at(tr, s)
        if e:
            put(names["val"], s, e["val_loss"], e["wall"]); add(S, "val", s, e["val_loss"])
            if "acc" in L and e["val_acc"] is not None:
                put(names["val_acc"], s, e["val_acc"], e["wall"])
    for k, ls in lines.items():
        p = os.path.join(rd, "metrics", k)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write("\n".join(ls) + "\n")
    for k in ("lr", "bs", "opt", "sched", "steps"):
        with open(os.path.join(rd, "params", k), "w") as f:
            f.write(str(spec.get(k)))
    with open(os.path.join(rd, "tags", "mlflow.runName"), "w") as f:
        f.write(spec["name"])
    end = int((bt + tr["steps"][-1]["wall"]) * 1000)
    with open(os.path.join(rd, "meta.yaml"), "w") as f:
        f.write(f"artifact_uri: file:///experiments/mlruns/0/{rid}/artifacts\nend_time: {end}\nentry_point_name: ''\n"
                f"experiment_id: '0'\nlifecycle_stage: active\nrun_id: {rid}\nrun_name: {spec['name']}\n"
                f"run_uuid: {rid}\nsource_name: ''\nsource_type: 4\nsource_version: ''\nstart_time: {bt * 1000}\n"
                f"status: 3\ntags: []\nuser_id: researcher\n")
    with open(os.path.join(root, "meta.yaml"), "w") as f:
        f.write(f"artifact_location: file:///experiments/mlruns/0\ncreation_time: {bt * 1000}\nexperiment_id: '0'\n"
                f"last_update_time: {bt * 1000}\nlifecycle_stage: active\nname: Default\n")
    return S


# ----------------------------------------------------------------------------- plain CSV / JSONL
CSV_NAMES = [
    dict(step="iteration", loss="training_loss", val="validation_loss", lr="learning_rate", step_time="time_ms",
         mem="mem_gb", gn="grad_norm", data_time="data_ms", scale="scale", acc="train_acc", file="metrics.csv"),
    dict(step="it", loss="xent", val="val_xent", lr="lr", step_time="step_ms", data_time="data_ms", mem="rss_mb",
         gn="gnorm", scale="loss_scale", acc="acc", file="log.csv"),
    dict(step="global_step", loss="cost", val="val_cost", lr="lr", step_time="sec_per_step", data_time="sec_data",
         mem="ram_gb", gn="grad_l2", scale="amp_scale", acc="accuracy", file="train_log.csv"),
    dict(step="step", loss="objective", val="heldout_objective", lr="eta", step_time="wall_ms", data_time="io_ms",
         mem="host_mem_mb", gn="norm_grad", scale="scaler", acc="hit_rate", file="progress.csv"),
]


def w_csv(spec, tr, out):
    L = spec.get("log", set())
    N = CSV_NAMES[spec.get("var", 0) % 4]
    S = new_series(f"'{N['step']}' column")
    every = spec.get("log_every", 10)
    ms = "ms" in N["step_time"]
    gb = "gb" in N["mem"]
    ranks = tr["steps"][0].get("rank_time") is not None
    cols = [N["step"]] + (["rank"] if ranks else []) + [N["loss"]]
    if tr["evals"]:
        cols.append(N["val"])
    for k, flag in (("acc", "acc"), ("lr", "lr"), ("gn", "gn"), ("step_time", "time"), ("data_time", "data"), ("mem", "mem"), ("scale", "scale")):
        if flag in L:
            cols.append(N[k])
    rows = []
    for r, a in windows(tr["steps"], every, spec.get("agg", "mean")):
        s = r["step"]
        loss = a["loss"]
        if spec.get("fault") == "nan_filtered" and spec.get("mask") == "zero" and not math.isfinite(loss):
            loss = 0.0  # BUG: logger does torch.nan_to_num(loss) "so the CSV stays numeric"
        e = eval_at(tr, s)
        per_rank = range(len(a["rank_time"])) if ranks else [None]
        for k in per_rank:
            row = {N["step"]: s}
            if ranks:
                row["rank"] = k
                row[N["loss"]] = s6(a["rank_loss"][k])
            else:
                row[N["loss"]] = s6(loss)
                add(S, "train", s, loss)
            if tr["evals"]:
                row[N["val"]] = s6(e["val_loss"]) if e else ""
                if e and k in (None, 0):
                    add(S, "val", s, e["val_loss"])
            if "acc" in L:
                row[N["acc"]] = s6(a["acc"])
            if "lr" in L:
                row[N["lr"]] = s6(r["lr"])
                if k in (None, 0):
                    add(S, "lr", s, r["lr"])
            if "gn" in L:
                row[N["gn"]] = s6(r["gn"])
                if k in (None, 0):
                    add(S, "gn", s, r["gn"])
            if "time" in L:
                v = (a["rank_time"][k] if ranks else a["step_time"]) * (1000 if ms else 1)
                row[N["step_time"]] = s6(v)
                if ranks:
                    S["ranks"].setdefault(k, {"train": [], "step_time": []})
                    S["ranks"][k]["step_time"].append((s, g6(v)))
                    S["ranks"][k]["train"].append((s, g6(a["rank_loss"][k])))
                else:
                    add(S, "step_time", s, v)
            if "data" in L:
                v = (a["rank_data"][k] if ranks else a["data_time"]) * (1000 if "ms" in N["data_time"] else 1)
                row[N["data_time"]] = s6(v)
                if not ranks:
                    add(S, "data_time", s, v)
            if "mem" in L:
                v = r["rss"] / (1024 if gb else 1); row[N["mem"]] = s6(v)
                if k in (None, 0):
                    add(S, "mem", s, v)
            if "scale" in L:
                row[N["scale"]] = s6(r["scale"]); add(S, "scale", s, r["scale"])
            rows.append(row)
        if ranks:
            add(S, "train", s, a["loss"])
    with open(os.path.join(out, N["file"]), "w", newline="") as f:
        w = csv.DictWriter(f, cols, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return S


JSONL_NAMES = [
    dict(step="step", loss="loss", val="val_loss", lr="lr", gn="grad_norm", step_time="step_time_s", data_time="data_time_s",
         mem="rss_mb", scale="loss_scale", acc="acc", file="metrics.jsonl"),
    dict(step="iter", loss="train/nll", val="val/nll", lr="optim/lr", gn="optim/grad_norm", step_time="perf/step_ms",
         data_time="perf/data_ms", mem="perf/mem_gb", scale="amp/loss_scale", acc="train/acc", file="log.jsonl"),
    dict(step="global_step", loss="objective", val="eval_objective", lr="learning_rate", gn="gnorm",
         step_time="iter_time_ms", data_time="fetch_time_ms", mem="max_rss_mb", scale="scale", acc="accuracy",
         file="train_metrics.jsonl"),
]


def w_jsonl(spec, tr, out):
    L = spec.get("log", set())
    N = JSONL_NAMES[spec.get("var", 0) % 3]
    S = new_series(f"'{N['step']}' field")
    every = spec.get("log_every", 10)
    ms = "ms" in N["step_time"]
    gb = "gb" in N["mem"]
    bt = base_ts(spec["name"])
    ranks = tr["steps"][0].get("rank_time") is not None
    files = {}
    nan_filter = spec.get("fault") == "nan_filtered" and spec.get("mask") == "drop"
    for r, a in windows(tr["steps"], every, spec.get("agg", "mean")):
        s = r["step"]
        if nan_filter and not math.isfinite(a["loss"]):
            continue  # BUG: `if math.isfinite(loss): log(...)` hides every NaN step
        per_rank = range(len(a["rank_time"])) if ranks else [None]
        for k in per_rank:
            row = {N["step"]: s, "time": round(bt + r["wall"], 3)}
            if ranks:
                row["rank"] = k
                row[N["loss"]] = g6(a["rank_loss"][k])
            else:
                row[N["loss"]] = g6(a["loss"]); add(S, "train", s, a["loss"])
            if "acc" in L and a["acc"] is not None:
                row[N["acc"]] = g6(a["acc"])
            if "lr" in L:
                row[N["lr"]] = g6(r["lr"])
                if k in (None, 0):
                    add(S, "lr", s, r["lr"])
            if "gn" in L:
                row[N["gn"]] = g6(r["gn"])
                if k in (None, 0):
                    add(S, "gn", s, r["gn"])
            if "time" in L:
                v = (a["rank_time"][k] if ranks else a["step_time"]) * (1000 if ms else 1)
                row[N["step_time"]] = g6(v)
                if ranks:
                    S["ranks"].setdefault(k, {"train": [], "step_time": []})
                    S["ranks"][k]["step_time"].append((s, g6(v)))
                    S["ranks"][k]["train"].append((s, g6(a["rank_loss"][k])))
                else:
                    add(S, "step_time", s, v)
            if "data" in L:
                v = (a["rank_data"][k] if ranks else a["data_time"]) * (1000 if ms else 1)
                row[N["data_time"]] = g6(v)
                if not ranks:
                    add(S, "data_time", s, v)
            if "mem" in L:
                v = r["rss"] / (1024 if gb else 1); row[N["mem"]] = g6(v)
                if k in (None, 0):
                    add(S, "mem", s, v)
            if "scale" in L:
                row[N["scale"]] = g6(r["scale"]); add(S, "scale", s, r["scale"])
            e = eval_at(tr, s)
            if e and k in (None, 0):
                row[N["val"]] = g6(e["val_loss"]); add(S, "val", s, e["val_loss"])
            fn = N["file"] if not ranks else f"rank{k}/{N['file']}"
            files.setdefault(fn, []).append(json.dumps(row))
        if ranks:
            add(S, "train", s, a["loss"])
    for fn, ls in files.items():
        p = os.path.join(out, fn)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write("\n".join(ls) + "\n")
    return S


# ----------------------------------------------------------------------------- console styles
def _fmt_lr(x):
    return f"{x:.1e}" if x else "0.0e+00"


def w_con_epoch(spec, tr, out):
    """`Epoch 3/20 | step 150 | loss 0.4321 | lr 1.0e-03 | 12.3 ms/step`"""
    L = spec.get("log", set())
    S = new_series("'step N' field")
    every = spec.get("log_every", 10)
    n_ep = math.ceil(tr["total"] / tr["bpe"])
    lines = [f"Training {spec['family']} for {tr['total']} steps ({n_ep} epochs), batch size {spec.get('bs', 64)}"]
    for r, a in windows(tr["steps"], every, spec.get("agg", "mean")):
        s = r["step"]
        ep = min(n_ep, int((s - 1) // tr["bpe"]) + 1)
        parts = [f"Epoch {ep}/{n_ep}", f"step {s}", f"loss {a['loss']:.4f}"]
        add(S, "train", s, float(f"{a['loss']:.4f}"))
        if "lr" in L:
            parts.append(f"lr {_fmt_lr(r['lr'])}"); add(S, "lr", s, float(_fmt_lr(r["lr"])))
        if "gn" in L:
            parts.append(f"grad_norm {r['gn']:.3g}"); add(S, "gn", s, float(f"{r['gn']:.3g}"))
        if "time" in L:
            parts.append(f"{a['step_time'] * 1000:.1f} ms/step"); add(S, "step_time", s, round(a["step_time"] * 1000, 1))
        if "mem" in L:
            parts.append(f"mem {r['rss'] / 1024:.3f} GB"); add(S, "mem", s, round(r["rss"] / 1024, 3))
        if "scale" in L:
            parts.append(f"scale {r['scale']:g}"); add(S, "scale", s, r["scale"])
        lines.append(" | ".join(parts))
        e = eval_at(tr, s)
        if e:
            msg = f"Epoch {ep}/{n_ep} | step {s} | val_loss {e['val_loss']:.4f}"
            if e["val_acc"] is not None and "acc" in L:
                msg += f" | val_acc {e['val_acc']:.4f}"
            lines.append(msg); add(S, "val", s, float(f"{e['val_loss']:.4f}"))
        if r.get("crash_after"):
            lines.append("Traceback (most recent call last):")
            lines.append("RuntimeError: NCCL communicator was aborted on rank 0.")
            lines.append(f"Resuming from checkpoint ckpt/last.pt")
    with open(os.path.join(out, "train.log"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return S


def w_con_iter(spec, tr, out):
    """`[iter 200] train_loss=1.23 val_loss=1.45`"""
    L = spec.get("log", set())
    S = new_series("'iter N' field")
    every = spec.get("log_every", 10)
    lines = []
    for r, a in windows(tr["steps"], every, spec.get("agg", "last")):
        s = r["step"]
        parts = [f"[iter {s}]", f"train_loss={a['loss']:.4g}"]
        add(S, "train", s, float(f"{a['loss']:.4g}"))
        e = eval_at(tr, s)
        if e:
            parts.append(f"val_loss={e['val_loss']:.4g}"); add(S, "val", s, float(f"{e['val_loss']:.4g}"))
        if "lr" in L:
            parts.append(f"lr={r['lr']:.3g}"); add(S, "lr", s, float(f"{r['lr']:.3g}"))
        if "gn" in L:
            parts.append(f"gnorm={r['gn']:.3g}"); add(S, "gn", s, float(f"{r['gn']:.3g}"))
        if "time" in L:
            parts.append(f"dt={a['step_time'] * 1000:.1f}ms"); add(S, "step_time", s, round(a["step_time"] * 1000, 1))
        lines.append(" ".join(parts))
    with open(os.path.join(out, "stdout.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return S


def w_con_tqdm(spec, tr, out):
    """tqdm bar over all steps, one refresh per line (as captured by a batch scheduler)."""
    L = spec.get("log", set())
    S = new_series("bar position n in 'n/total'")
    every = spec.get("log_every", 10)
    total = tr["total"]
    lines = []
    t0 = 0.0
    for r, a in windows(tr["steps"], every, spec.get("agg", "last")):
        s = r["step"]
        frac = s / total
        filled = int(frac * 10)
        bar = "\u2588" * filled + (" " * (10 - filled))
        el = r["wall"]
        rate = s / el if el > 0 else 0.0
        rem = (total - s) / rate if rate > 0 else 0.0
        fmt_t = lambda x: f"{int(x // 60):02d}:{int(x % 60):02d}"
        post = f"loss={a['loss']:.3f}"
        add(S, "train", s, float(f"{a['loss']:.3f}"))
        if "lr" in L:
            post += f", lr={r['lr']:.2e}"; add(S, "lr", s, float(f"{r['lr']:.2e}"))
        lines.append(f"train: {int(frac * 100):3d}%|{bar}| {s}/{total} [{fmt_t(el)}<{fmt_t(rem)}, {rate:.2f}it/s, {post}]")
        e = eval_at(tr, s)
        if e:
            lines.append(f"validation: val_loss={e['val_loss']:.4f}"); add(S, "val", s, float(f"{e['val_loss']:.4f}"))
    with open(os.path.join(out, "train_stdout.log"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return S


def w_con_pytex(spec, tr, out):
    """PyTorch examples/mnist style: `Train Epoch: 2 [640/6000 (11%)]\tLoss: 0.510000`."""
    S = new_series("1-based global batch count = (epoch-1)*batches_per_epoch + batch_idx + 1, batch_idx = samples/batch_size")
    every = spec.get("log_every", 10)
    bs, bpe, n = spec.get("bs", 64), tr["bpe"], tr["n_train"]
    lines = []
    for r in tr["steps"]:
        s = r["step"]
        ep = (s - 1) // bpe + 1
        bi = (s - 1) % bpe
        if bi % every == 0:
            lines.append(f"Train Epoch: {ep} [{bi * bs}/{n} ({100. * bi / bpe:.0f}%)]\tLoss: {r['loss']:.6f}")
            add(S, "train", s, float(f"{r['loss']:.6f}"))
        if s % bpe == 0:
            epr = next(e for e in tr["epochs"] if e["step"] == s)
            if epr["val_loss"] is not None:
                nva = spec.get("n_val", 500)
                c = int(round((epr["val_acc"] or 0) * nva))
                lines.append("")
                lines.append(f"Test set: Average loss: {epr['val_loss']:.4f}, Accuracy: {c}/{nva} ({100. * c / nva:.0f}%)")
                lines.append("")
                add(S, "val", s, float(f"{epr['val_loss']:.4f}"))
    with open(os.path.join(out, "output.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return S


def w_con_mmengine(spec, tr, out):
    """mmengine-style: `... - mmengine - INFO - Iter(train) [ 50/1000]  lr: 1.0000e-03  eta: ...  time: 0.0123  data_time: ...`"""
    L = spec.get("log", set())
    S = new_series("'Iter(train) [N/total]' position")
    every = spec.get("log_every", 10)
    total = tr["total"]
    bt = base_ts(spec["name"])
    w = len(str(total))
    lines = []
    for r, a in windows(tr["steps"], every, spec.get("agg", "mean")):
        s = r["step"]
        stamp = dt.datetime.fromtimestamp(bt + r["wall"], dt.timezone.utc).strftime("%Y/%m/%d %H:%M:%S")
        eta = a["step_time"] * (total - s)
        eta_s = str(dt.timedelta(seconds=int(eta)))
        parts = [f"{stamp} - mmengine - INFO - Iter(train) [{s:>{w}d}/{total}]",
                 f"base_lr: {spec['lr']:.4e}", f"lr: {r['lr']:.4e}", f"eta: {eta_s}",
                 f"time: {a['step_time']:.4f}", f"data_time: {a['data_time']:.4f}"]
        add(S, "lr", s, float(f"{r['lr']:.4e}"))
        add(S, "step_time", s, float(f"{a['step_time']:.4f}"))
        add(S, "data_time", s, float(f"{a['data_time']:.4f}"))
        if "mem" in L:
            parts.append(f"memory: {int(r['rss'])}"); add(S, "mem", s, int(r["rss"]))
        if "gn" in L:
            parts.append(f"grad_norm: {r['gn']:.4f}"); add(S, "gn", s, float(f"{r['gn']:.4f}"))
        parts.append(f"loss: {a['loss']:.4f}"); add(S, "train", s, float(f"{a['loss']:.4f}"))
        if "scale" in L:
            parts.append(f"loss_scale: {r['scale']:.4f}"); add(S, "scale", s, float(f"{r['scale']:.4f}"))
        lines.append("  ".join(parts))
        e = eval_at(tr, s)
        if e:
            lines.append(f"{stamp} - mmengine - INFO - Iter(val) [{s:>{w}d}/{total}]  loss: {e['val_loss']:.4f}")
            add(S, "val", s, float(f"{e['val_loss']:.4f}"))
    d = os.path.join(out, "work_dirs", "20240301_120000")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "20240301_120000.log"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return S


def w_con_nanogpt(spec, tr, out):
    """nanoGPT style: `iter 100: loss 2.3456, time 12.34ms, mfu -100.00%` + `step 100: train loss ..., val loss ...`."""
    S = new_series("'iter N' / 'step N' number")
    every = spec.get("log_every", 10)
    lines = []
    recent = []
    for r in tr["steps"]:
        s = r["step"]
        recent = (recent + [r["loss"]])[-every:]
        if s % every == 0 or s == 1:
            lines.append(f"iter {s}: loss {r['loss']:.4f}, time {r['step_time'] * 1000:.2f}ms, mfu -100.00%")
            add(S, "train", s, float(f"{r['loss']:.4f}"))
            add(S, "step_time", s, round(r["step_time"] * 1000, 2))
        e = eval_at(tr, s)
        if e:
            lines.append(f"step {s}: train loss {sum(recent) / len(recent):.4f}, val loss {e['val_loss']:.4f}")
            add(S, "val", s, float(f"{e['val_loss']:.4f}"))
    with open(os.path.join(out, "train.out"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return S


def w_con_gan(spec, tr, out):
    """PyTorch-GAN style: `[Epoch 3/50] [Batch 10/64] [D loss: 0.693147] [G loss: 0.712345]`."""
    S = new_series("1-based global batch count = epoch*batches_per_epoch + batch + 1 (from the [Epoch e/N] [Batch b/M] fields)")
    S["g_train"] = []
    every = spec.get("log_every", 10)
    bpe = tr["bpe"]
    n_ep = math.ceil(tr["total"] / bpe)
    lines = []
    for r in tr["steps"]:
        s = r["step"]
        if s % every == 0:
            ep, b = (s - 1) // bpe, (s - 1) % bpe
            lines.append(f"[Epoch {ep}/{n_ep}] [Batch {b}/{bpe}] [D loss: {r['d_loss']:f}] [G loss: {r['g_loss']:f}]")
            add(S, "train", s, float(f"{r['d_loss']:f}"))
            S["g_train"].append((s, float(f"{r['g_loss']:f}")))
    with open(os.path.join(out, "gan_train.log"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return S


WRITERS = dict(hf=w_hf, lightning=w_lightning, keras_csv=w_keras_csv, keras_json=w_keras_json, wandb=w_wandb, tb=w_tb,
               mlflow=w_mlflow, csv=w_csv, jsonl=w_jsonl, con_epoch=w_con_epoch, con_iter=w_con_iter,
               con_tqdm=w_con_tqdm, con_pytex=w_con_pytex, con_mmengine=w_con_mmengine, con_nanogpt=w_con_nanogpt,
               con_gan=w_con_gan)
