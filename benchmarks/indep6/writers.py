"""One writer per log format (indep6). Each writes the tool's on-disk layout and returns the series
exactly as logged: {"x": unit, "loss": [(x, v)], "val": [...], "lr": [...], ...}."""
import json
import math
import os
import statistics

import numpy as np

T0 = 1768471200.0  # 2026-01-15 10:00:00 UTC


def nanmean(v):
    return float(sum(v) / len(v)) if v else float("nan")


def windows(recs, every):
    win = []
    last = None
    for r in recs:
        if last is not None and r["step"] <= last:
            win = []   # a restart: the logger's window starts again
        last = r["step"]
        win.append(r)
        if r["step"] % every == 0:
            yield r, win
            win = []


def wmean(win, k):
    v = [r[k] for r in win if k in r]
    return nanmean(v) if v else None


def wmed(win, k):
    v = [r[k] for r in win if k in r]
    return float(np.median(v)) if v else None


def new_log(unit):
    return {"x": unit, "loss": [], "val": [], "lr": [], "gn": [], "st": [], "dt": [], "rss": [], "scale": [],
            "dead": [], "gnf": [], "gnl": [], "masked": [], "loss_D": [], "ret": [], "value_loss": [], "c0": [], "c1": []}


def mask_value(v, style, prev):
    if v is None or math.isfinite(v) or style is None:
        return v, False
    if style == "zero":
        return 0.0, True
    if style == "prev":
        return (prev if prev is not None else 0.0), True
    return v, False


def fmt(v, p=4):
    if v is None:
        return ""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return f"{v:.{p}f}"


def ts(r):
    return T0 + r["t"]


def put(log, key, x, v):
    if v is not None:
        log[key].append((x, v))


# ------------------------------------------------------------------ HF trainer_state.json
def w_hf(d, recs, s):
    log = new_log("step (1-based global optimizer step; HF `step`)")
    hist, N = [], s["every"]
    steps = s["steps"]
    for r, win in windows(recs, N):
        ls = [w["loss"] for w in win]
        masked = False
        if s.get("mask") == "hf":   # logging_nan_inf_filter: a NaN step counts as the running mean of the window
            fin = [v for v in ls if math.isfinite(v)]
            if len(fin) < len(ls):
                masked = True
                ls = [v if math.isfinite(v) else (nanmean(fin) if fin else 0.0) for v in ls]
        loss = round(nanmean(ls), 4)
        e = {"epoch": round(r["step"] / s["per_epoch"], 4), "grad_norm": r["gn"], "learning_rate": r["lr"],
             "loss": loss, "step": r["step"]}
        hist.append(e)
        put(log, "loss", r["step"], loss); put(log, "gn", r["step"], r["gn"]); put(log, "lr", r["step"], r["lr"])
        if masked:
            log["masked"].append(r["step"])
        if "val" in r:
            hist.append({"epoch": round(r["step"] / s["per_epoch"], 4), "eval_loss": r["val"], "eval_runtime": 0.21,
                         "eval_samples_per_second": 1523.4, "eval_steps_per_second": 47.6, "step": r["step"]})
            put(log, "val", r["step"], r["val"])
    st = {"best_metric": None, "best_model_checkpoint": None, "epoch": round(steps / s["per_epoch"], 4),
          "eval_steps": s.get("eval_every"), "global_step": steps, "is_hyper_param_search": False,
          "is_local_process_zero": True, "is_world_process_zero": True, "log_history": hist,
          "logging_steps": N, "max_steps": steps, "num_input_tokens_seen": 0,
          "num_train_epochs": math.ceil(steps / s["per_epoch"]), "save_steps": steps, "total_flos": 0.0,
          "train_batch_size": s["bs"], "trial_name": None, "trial_params": None}
    p = os.path.join(d, f"checkpoint-{steps}")
    os.makedirs(p)
    json.dump(st, open(os.path.join(p, "trainer_state.json"), "w"), indent=2, sort_keys=True)
    return log


# ------------------------------------------------------------------ Keras History JSON
def epochs(recs, per_epoch):
    out = {}
    for r in recs:
        out.setdefault(r["epoch"], []).append(r)
    return sorted(out.items())


def w_keras(d, recs, s):
    log = new_log("epoch (0-based index into the History lists)")
    h = {"loss": [], "val_loss": [], "learning_rate": []}
    for i, (e, win) in enumerate(epochs(recs, s["per_epoch"])):
        l = wmean(win, "loss"); v = win[-1].get("val")
        h["loss"].append(l); h["val_loss"].append(v); h["learning_rate"].append(win[-1]["lr"])
        put(log, "loss", i, l); put(log, "val", i, v); put(log, "lr", i, win[-1]["lr"])
    json.dump(h, open(os.path.join(d, "history.json"), "w"))
    return log


# ------------------------------------------------------------------ MLflow file store
def w_mlflow(d, recs, s):
    log = new_log("step (third field of each MLflow metric line; global optimizer step)")
    rid = "3f9c2a71b8d54e0e9a1c6b2d7e4f8a10"
    base = os.path.join(d, "mlruns", "0", rid)
    os.makedirs(os.path.join(base, "metrics"))
    os.makedirs(os.path.join(base, "params")); os.makedirs(os.path.join(base, "tags"))
    w = s["word"]
    files = {}

    def out(key, r, v):
        if v is None:
            return
        p = os.path.join(base, "metrics", key)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        files.setdefault(key, open(p, "a")).write(f"{int(ts(r) * 1000)} {v!r} {r['step']}\n")

    for r, win in windows(recs, s["every"]):
        x = r["step"]
        l = wmean(win, "loss")
        out(f"train_{w}", r, l); put(log, "loss", x, l)
        if "loss_D" in r:
            ld = wmean(win, "loss_D"); out("train_loss_D", r, ld); put(log, "loss_D", x, ld)
        out("lr", r, r["lr"]); put(log, "lr", x, r["lr"])
        out("grad_norm", r, wmean(win, "gn")); put(log, "gn", x, wmean(win, "gn"))
        st = wmean(win, "st") * 1000
        out("step_time_ms", r, st); put(log, "st", x, st / 1000)
        out("system/system_memory_usage_megabytes", r, r["rss"]); put(log, "rss", x, r["rss"])
        if "val" in r:
            out(f"val_{w}", r, r["val"]); put(log, "val", x, r["val"])
    for f in files.values():
        f.close()
    open(os.path.join(base, "meta.yaml"), "w").write(
        f"artifact_uri: file:///mnt/exp/mlruns/0/{rid}/artifacts\nend_time: {int((T0 + recs[-1]['t']) * 1000)}\n"
        f"experiment_id: '0'\nlifecycle_stage: active\nrun_id: {rid}\nrun_name: {s['family']}-sweep-3\n"
        f"source_type: 4\nstart_time: {int(T0 * 1000)}\nstatus: 3\nuser_id: ml\n")
    for k in ("lr", "bs", "opt"):
        open(os.path.join(base, "params", k), "w").write(str(s["cfg"].get(k, s.get(k))))
    open(os.path.join(base, "tags", "mlflow.runName"), "w").write(f"{s['family']}-sweep-3")
    return log


# ------------------------------------------------------------------ TensorBoard
def w_tb(d, recs, s, sub="tb", rank=None):
    from torch.utils.tensorboard import SummaryWriter
    rl = s["family"] == "a2c"
    mult = 512 if rl else 1
    log = new_log("global_step = environment frames (512 per update)" if rl else "global step (1-based)")
    wr = SummaryWriter(os.path.join(d, sub))
    for r, win in windows(recs, s["every"]):
        x = r["step"] * mult
        if rl:
            tags = {"losses/loss": r["loss"], "losses/value_loss": r["value_loss"], "losses/policy_loss": r["policy_loss"],
                    "losses/entropy": r["entropy"], "charts/learning_rate": r["lr"], "charts/episodic_return": r["episodic_return"],
                    "charts/SPS": 512 / r["st"]}
            put(log, "value_loss", x, r["value_loss"]); put(log, "ret", x, r["episodic_return"])
        elif "loss_D" in r:
            tags = {"loss/G": r["loss"], "loss/D": r["loss_D"], "lr/G": r["lr"], "grad_norm/G": r["gn"]}
            put(log, "loss_D", x, r["loss_D"])
        else:
            tags = {"train/loss": r["loss"], "train/lr": r["lr"], "train/grad_norm": r["gn"],
                    "time/step_time_ms": r["st"] * 1000, "time/data_time_ms": r["dt"] * 1000, "sys/rss_mb": r["rss"]}
            for k, t in (("scale", "amp/loss_scale"), ("dead", "act/dead_fraction"), ("gnf", "grad_norm/first_layer"),
                         ("gnl", "grad_norm/last_layer")):
                if k in r and s.get("log_" + k):
                    tags[t] = r[k]; put(log, k, x, r[k])
            put(log, "st", x, r["st"]); put(log, "dt", x, r["dt"]); put(log, "rss", x, r["rss"])
            if rank is not None:
                c, w_ = (r["c0"], r["w0"]) if rank == 0 else (r["c1"], r["w1"])
                tags["perf/fwd_bwd_ms"] = c * 1000; tags["perf/comm_wait_ms"] = w_ * 1000
                put(log, "c%d" % rank, x, c)
        for t, v in tags.items():
            wr.add_scalar(t, v, x, walltime=ts(r))
        put(log, "loss", x, r["loss"]); put(log, "lr", x, r["lr"]); put(log, "gn", x, r.get("gn"))
        if "val" in r:
            wr.add_scalar("val/loss", r["val"], x, walltime=ts(r)); put(log, "val", x, r["val"])
    wr.close()
    return log


def w_tb_ranks(d, recs, s):
    a = w_tb(d, recs, s, "tb/rank0", 0)
    b = w_tb(d, recs, s, "tb/rank1", 1)
    a["c1"] = b["c1"]
    return a


# ------------------------------------------------------------------ W&B offline
def w_wandb(d, recs, s):
    log = new_log("_step (= global optimizer step)")
    base = os.path.join(d, "wandb", "offline-run-20260115_100000-k3x9q2za", "files")
    os.makedirs(base)
    w = s["word"]
    rows = []
    for r, win in windows(recs, s["every"]):
        x = r["step"]
        l = wmean(win, "loss")
        row = {"_step": x, "_runtime": round(r["t"], 3), "_timestamp": round(ts(r), 3), f"train/{w}": l,
               "train/lr": r["lr"], "train/grad_norm": wmean(win, "gn"),
               "perf/throughput_samples_per_sec": round(s["bs"] / wmean(win, "st"), 1),
               "sys/mem_gb": round(r["rss"] / 1024, 4), "train/epoch": r["epoch"]}
        put(log, "loss", x, l); put(log, "lr", x, r["lr"]); put(log, "gn", x, row["train/grad_norm"])
        put(log, "st", x, wmean(win, "st")); put(log, "rss", x, r["rss"])
        if "loss_D" in r:
            row["train/loss_D"] = wmean(win, "loss_D"); put(log, "loss_D", x, row["train/loss_D"])
        if "scale" in r and s.get("log_scale"):
            row["amp/loss_scale"] = r["scale"]; put(log, "scale", x, r["scale"])
        if "val" in r:
            row[f"val/{w}"] = r["val"]; put(log, "val", x, r["val"])
        rows.append(row)
    with open(os.path.join(base, "wandb-history.jsonl"), "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    json.dump(rows[-1], open(os.path.join(base, "wandb-summary.json"), "w"))
    open(os.path.join(base, "config.yaml"), "w").write(
        "".join(f"{k}:\n  value: {v}\n" for k, v in s["cfg"].items() if k in ("lr", "bs", "opt", "sched", "steps")))
    return log


# ------------------------------------------------------------------ Lightning CSVLogger
def w_lightning(d, recs, s):
    log = new_log("step column (0-based global step)")
    p = os.path.join(d, "lightning_logs", "version_0")
    os.makedirs(p)
    opt = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "momentum": "SGD", "nesterov": "SGD"}.get(s["cfg"].get("opt"), "Optimizer")
    cols = ["epoch", f"lr-{opt}", "step", "train_loss_epoch", "train_loss_step", "val_loss"]
    rows = []
    ep = {}
    for r in recs:
        ep.setdefault(r["epoch"], []).append(r)
        x = r["step"] - 1
        if r["step"] % s["every"] == 0:
            rows.append({"epoch": r["epoch"] - 1, "step": x, "train_loss_step": r["loss"]})
            rows.append({"epoch": r["epoch"] - 1, "step": x, f"lr-{opt}": r["lr"]})
            put(log, "loss", x, r["loss"]); put(log, "lr", x, r["lr"])
        last_of_epoch = r is recs[-1] or recs[recs.index(r) + 1]["epoch"] != r["epoch"] if False else None
        if "val" in r:
            rows.append({"epoch": r["epoch"] - 1, "step": x, "val_loss": r["val"]}); put(log, "val", x, r["val"])
    # epoch-end train_loss_epoch rows
    for e, win in sorted(ep.items()):
        rows.append({"epoch": e - 1, "step": win[-1]["step"] - 1, "train_loss_epoch": wmean(win, "loss")})
    rows.sort(key=lambda q: (q["step"], "train_loss_epoch" in q))
    with open(os.path.join(p, "metrics.csv"), "w") as f:
        f.write(",".join(cols) + "\n")
        for q in rows:
            f.write(",".join("" if q.get(c) is None else (str(q[c]) if isinstance(q[c], int) else repr(float(q[c]))) for c in cols) + "\n")
    open(os.path.join(p, "hparams.yaml"), "w").write("".join(f"{k}: {v}\n" for k, v in s["cfg"].items() if k in ("lr", "bs", "opt")))
    return log


# ------------------------------------------------------------------ nanoGPT console
def w_nanogpt(d, recs, s):
    log = new_log("iter (0-based; iter = optimizer step - 1)")
    L = []
    for r, win in windows(recs, s["every"]):
        x = r["step"] - 1
        if "val" in r:
            tl = wmean(win, "loss")
            L.append(f"step {x}: train loss {tl:.4f}, val loss {r['val']:.4f}")
            put(log, "val", x, r["val"])
        L.append(f"iter {x}: loss {r['loss']:.4f}, time {r['st'] * 1000:.2f}ms, mfu {0.8 + 0.0 * x:.2f}%")
        put(log, "loss", x, r["loss"]); put(log, "st", x, r["st"])
    open(os.path.join(d, "train.log"), "w").write(
        "tokens per iteration will be: 512\nInitializing a new model from scratch\nnumber of parameters: 0.01M\n"
        + "\n".join(L) + "\n")
    return log


# ------------------------------------------------------------------ fairseq (legacy pipe progress)
def w_fairseq(d, recs, s):
    log = new_log("num_updates (= global optimizer step); loss in base 2 (bits)")
    L = ["| distributed init (rank 0): None", f"| model masked_lm_tiny, criterion MaskedLmLoss",
         f"| num. model params: 10432 (num. trained: 10432)", "| training on 1 GPUs", f"| max tokens per GPU = None and max sentences per GPU = {s['bs']}"]
    ln2 = math.log(2)
    ep = {}
    for r, win in windows(recs, s["every"]):
        e = r["epoch"]
        ep.setdefault(e, [])
        i = (r["step"] - 1) % s["per_epoch"] + 1
        l = wmean(win, "loss") / ln2
        L.append(f"| epoch {e:03d}:    {i} / {s['per_epoch']} loss={l:.3f}, nll_loss={l:.3f}, ppl={2 ** min(l, 1000):.2f}, "
                 f"wps={int(16 * s['bs'] / wmean(win, 'st'))}, ups={1 / wmean(win, 'st'):.2f}, wpb={16 * s['bs']}, bsz={s['bs']}, "
                 f"num_updates={r['step']}, lr={r['lr']:.6g}, gnorm={wmean(win, 'gn'):.3f}, clip=0.000, oom=0.000, "
                 f"wall={int(r['t'])}, train_wall={int(r['t'] * 0.9)}")
        put(log, "loss", r["step"], l); put(log, "lr", r["step"], r["lr"]); put(log, "gn", r["step"], wmean(win, "gn"))
        if "val" in r:
            v = r["val"] / ln2
            L.append(f"| epoch {e:03d} | valid on 'valid' subset | loss {v:.3f} | nll_loss {v:.3f} | ppl {2 ** min(v, 1000):.2f} | num_updates {r['step']}")
            put(log, "val", r["step"], v)
    open(os.path.join(d, "train.log"), "w").write("\n".join(L) + "\n")
    return log


# ------------------------------------------------------------------ mmengine console
def w_mmengine(d, recs, s):
    log = new_log("(epoch-1)*iters_per_epoch + i from `Epoch(train) [e][i/N]` (= global step, 1-based)")
    N = s["per_epoch"]
    L = []
    for r, win in windows(recs, s["every"]):
        e, i = (r["step"] - 1) // N + 1, (r["step"] - 1) % N + 1
        tt = time_str(T0 + r["t"])
        extra = f"  loss_scale: {r['scale']:.4f}" if s.get("log_scale") and "scale" in r else ""
        l = wmean(win, "loss")
        L.append(f"{tt} - mmengine - INFO - Epoch(train) [{e}][{i:>4d}/{N}]  base_lr: {s['cfg']['lr']:.4e} lr: {r['lr']:.4e}  "
                 f"eta: 0:00:{max(0, int(s['steps'] - r['step'])) % 60:02d}  time: {wmean(win, 'st'):.4f}  data_time: {wmean(win, 'dt'):.4f}  "
                 f"memory: {int(r['rss'])}  grad_norm: {fmt(wmean(win, 'gn'))}  loss: {fmt(l)}  loss_{s['word']}: {fmt(l)}{extra}")
        x = r["step"]
        put(log, "loss", x, l); put(log, "lr", x, r["lr"]); put(log, "st", x, wmean(win, "st")); put(log, "dt", x, wmean(win, "dt"))
        put(log, "rss", x, r["rss"]); put(log, "gn", x, wmean(win, "gn"))
        if extra:
            put(log, "scale", x, r["scale"])
        if "val" in r:
            L.append(f"{tt} - mmengine - INFO - Epoch(val) [{e}][8/8]    loss: {r['val']:.4f}  data_time: 0.0011  time: 0.0043")
            put(log, "val", x, r["val"])
    open(os.path.join(d, "20260115_100000.log"), "w").write("\n".join(L) + "\n")
    return log


def time_str(t):
    import datetime
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y/%m/%d %H:%M:%S")


# ------------------------------------------------------------------ Detectron2 metrics.json
def w_detectron2(d, recs, s):
    log = new_log("iteration (0-based; = optimizer step - 1); total_loss is the median of the last 20 iterations")
    rows = []
    hist = []
    for r in recs:
        hist.append(r)
        hist = hist[-20:]
        x = r["step"] - 1
        if r["step"] % s["every"] == 0:
            tl = wmed(hist, "loss")
            rows.append({"data_time": wmed(hist, "dt"), "eta_seconds": round((s["steps"] - r["step"]) * wmed(hist, "st"), 2),
                         "iteration": x, f"loss_{s['word']}": tl, "lr": r["lr"], "rank_data_time": wmed(hist, "dt"),
                         "time": wmed(hist, "st"), "total_loss": tl})
            put(log, "loss", x, tl); put(log, "lr", x, r["lr"]); put(log, "st", x, wmed(hist, "st")); put(log, "dt", x, wmed(hist, "dt"))
        if "val" in r:
            rows.append({"iteration": x, "validation_loss": r["val"]}); put(log, "val", x, r["val"])
    with open(os.path.join(d, "metrics.json"), "w") as f:
        for q in rows:
            f.write(json.dumps(q) + "\n")
    return log


# ------------------------------------------------------------------ YOLO results.csv
def w_yolo(d, recs, s):
    log = new_log("epoch (1-based)")
    w = s["word"]
    cols = ["epoch", f"train/{w}", f"val/{w}", "lr/pg0", "lr/pg1", "lr/pg2"]
    L = [",".join(f"{c:>20s}" for c in cols)]
    for e, win in epochs(recs, s["per_epoch"]):
        l = wmean(win, "loss"); v = win[-1].get("val")
        L.append(",".join(f"{q:>20}" for q in [e, f"{l:.5g}", f"{v:.5g}" if v is not None else "", f"{win[-1]['lr']:.6g}",
                                               f"{win[-1]['lr']:.6g}", f"{win[-1]['lr']:.6g}"]))
        put(log, "loss", e, l); put(log, "val", e, v); put(log, "lr", e, win[-1]["lr"])
    open(os.path.join(d, "results.csv"), "w").write("\n".join(L) + "\n")
    return log


# ------------------------------------------------------------------ tqdm bars
def w_tqdm(d, recs, s):
    log = new_log("n in the bar's n/total (= global optimizer step)")
    total = s["steps"]
    out = []
    bar = []
    for r, win in windows(recs, s["every"]):
        n = r["step"]
        if bar and n <= bar[-1]:
            out.append("\n[rank0]: Traceback (most recent call last):\nRuntimeError: connection reset by peer\nresuming from checkpoint\n")
        bar.append(n)
        p = int(100 * n / total)
        filled = int(10 * n / total)
        rate = 1 / max(r["st"], 1e-6)
        out.append(f"\rtrain: {p:3d}%|{'█' * filled}{' ' * (10 - filled)}| {n}/{total} [00:{int(r['t']) % 60:02d}<00:00, {rate:.2f}it/s, loss={r['loss']:.4g}, lr={r['lr']:.2e}]")
        put(log, "loss", n, r["loss"]); put(log, "lr", n, r["lr"])
        if "val" in r:
            out.append(f"\neval @ step {n}: loss {r['val']:.4f}\n")
            put(log, "val", n, r["val"])
    open(os.path.join(d, "train_out.txt"), "w").write("".join(out) + "\n")
    return log


# ------------------------------------------------------------------ logging module, custom logger names
def w_pylog(d, recs, s, fname="train.log", rank=None):
    log = new_log("step N in `step N/total` (global optimizer step)")
    w = s["word"]
    L, prev = [], None
    for r, win in windows(recs, s["every"]):
        x = r["step"]
        l = wmean(win, "loss")
        lm, masked = mask_value(l, s.get("mask"), prev)
        if masked:
            log["masked"].append(x)
        prev = lm
        t = time_str(ts(r)).replace("/", "-") + f",{int((r['t'] % 1) * 1000):03d}"
        parts = [f"step {x}/{s['steps']}", f"{w} {fmt(lm)}", f"lr {r['lr']:.3e}", f"gnorm {fmt(wmean(win, 'gn'))}",
                 f"step_time_ms {wmean(win, 'st') * 1000:.2f}", f"data_ms {wmean(win, 'dt') * 1000:.2f}", f"rss_mb {r['rss']:.1f}"]
        if "loss_D" in r:
            parts.insert(2, f"loss_D {fmt(wmean(win, 'loss_D'))}"); put(log, "loss_D", x, wmean(win, "loss_D"))
        for k, name in (("scale", "loss_scale"), ("dead", "dead_frac"), ("gnf", "gn_first"), ("gnl", "gn_last")):
            if k in r and s.get("log_" + k):
                parts.append(f"{name} {r[k]:.6g}"); put(log, k, x, r[k])
        if rank is not None:
            c, wt = (wmean(win, "c0"), wmean(win, "w0")) if rank == 0 else (wmean(win, "c1"), wmean(win, "w1"))
            parts.append(f"fwd_bwd_ms {c * 1000:.2f}"); parts.append(f"comm_wait_ms {wt * 1000:.2f}")
            put(log, "c%d" % rank, x, c)
        L.append(f"{t} [INFO] lab.trainer.loop: " + " | ".join(parts))
        put(log, "loss", x, lm); put(log, "lr", x, r["lr"]); put(log, "gn", x, wmean(win, "gn"))
        put(log, "st", x, wmean(win, "st")); put(log, "dt", x, wmean(win, "dt")); put(log, "rss", x, r["rss"])
        if "val" in r:
            L.append(f"{t} [INFO] lab.trainer.eval: step {x} | val_{w} {r['val']:.4f}"); put(log, "val", x, r["val"])
    open(os.path.join(d, fname), "w").write("\n".join(L) + "\n")
    return log


def w_pylog_ranks(d, recs, s):
    os.makedirs(os.path.join(d, "logs"))
    a = w_pylog(d, recs, s, "logs/train.rank0.log", 0)
    b = w_pylog(d, recs, s, "logs/train.rank1.log", 1)
    a["c1"] = b["c1"]
    return a


# ------------------------------------------------------------------ Chinese print loop
def w_zh(d, recs, s):
    log = new_log("步数 N (global optimizer step, 1-based)")
    L = []
    for r, win in windows(recs, s["every"]):
        x = r["step"]
        line = f"第 {r['epoch']} 轮 | 步数 {x}/{s['steps']} | 损失 {fmt(r['loss'])} | 学习率 {r['lr']:.2e} | 梯度范数 {fmt(r.get('gn'), 3)} | 每步耗时 {r['st'] * 1000:.1f}ms | 数据耗时 {r['dt'] * 1000:.1f}ms | 内存 {r['rss']:.1f}MB"
        if "loss_D" in r:
            line = line.replace("| 损失", f"| 判别器损失 {fmt(r['loss_D'])} | 生成器损失").replace("生成器损失 ", "生成器损失 ")
            put(log, "loss_D", x, r["loss_D"])
        L.append(line)
        put(log, "loss", x, r["loss"]); put(log, "lr", x, r["lr"]); put(log, "gn", x, r.get("gn"))
        put(log, "st", x, r["st"]); put(log, "dt", x, r["dt"]); put(log, "rss", x, r["rss"])
        if "val" in r:
            L.append(f"验证 | 步数 {x} | 验证损失 {r['val']:.4f}"); put(log, "val", x, r["val"])
    open(os.path.join(d, "训练日志.txt"), "w").write("开始训练\n" + "\n".join(L) + "\n训练结束\n")
    return log


# ------------------------------------------------------------------ markdown table in a report
def w_md(d, recs, s):
    log = new_log("step column (global optimizer step)")
    w = s["word"]
    L = [f"# Experiment report: {s['family']} baseline", "", f"Optimizer {s['cfg'].get('opt')} at lr {s['cfg']['lr']}, batch {s['bs']}, "
         f"{s['steps']} steps. Metrics are averaged over each {s['every']}-step window.", "",
         f"| step | train {w} | val {w} | lr | grad norm | step time (ms) |", "|---:|---:|---:|---:|---:|---:|"]
    prev = None
    for r, win in windows(recs, s["every"]):
        x = r["step"]
        l = wmean(win, "loss")
        lm, masked = mask_value(l, s.get("mask"), prev)
        if masked:
            log["masked"].append(x)
        prev = lm
        v = r.get("val")
        L.append(f"| {x} | {fmt(lm)} | {fmt(v) if v is not None else ''} | {r['lr']:.2e} | {fmt(wmean(win, 'gn'), 3)} | {wmean(win, 'st') * 1000:.1f} |")
        put(log, "loss", x, lm); put(log, "val", x, v); put(log, "lr", x, r["lr"]); put(log, "gn", x, wmean(win, "gn"))
        put(log, "st", x, wmean(win, "st"))
    L += ["", "Loss curves are in the attached figure."]
    open(os.path.join(d, "report.md"), "w").write("\n".join(L) + "\n")
    return log


# ------------------------------------------------------------------ pandas-printed table
def w_pandas(d, recs, s):
    log = new_log("`step` column (global optimizer step); the left column is the DataFrame index")
    rows = []
    for r, win in windows(recs, s["every"]):
        rows.append([r["step"], wmean(win, "loss"), r.get("val"), r["lr"], wmean(win, "st")])
        x = r["step"]
        put(log, "loss", x, rows[-1][1]); put(log, "val", x, r.get("val")); put(log, "lr", x, r["lr"]); put(log, "st", x, rows[-1][4])
    cols = ["step", "loss", "val_loss", "lr", "step_time_s"]

    def cell(c, v):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "NaN"
        if c == "step":
            return str(v)
        if c == "lr":
            return f"{v:.6f}"
        return f"{v:.6f}"
    cells = [[cell(c, v) for c, v in zip(cols, row)] for row in rows]
    iw = len(str(len(rows) - 1))
    widths = [max(len(c), *(len(q[i]) for q in cells)) for i, c in enumerate(cols)]
    L = [" " * iw + "".join("  " + c.rjust(wd) for c, wd in zip(cols, widths))]
    for i, q in enumerate(cells):
        L.append(str(i).ljust(iw) + "".join("  " + v.rjust(wd) for v, wd in zip(q, widths)))
    open(os.path.join(d, "metrics.txt"), "w").write(">>> print(df)\n" + "\n".join(L) + f"\n\n[{len(rows)} rows x {len(cols)} columns]\n")
    return log


# ------------------------------------------------------------------ Stable-Baselines3 console
def w_sb3(d, recs, s):
    log = new_log("time/total_timesteps (environment frames; 512 per update)")
    out = []
    for r, win in windows(recs, s["every"]):
        x = r["step"] * 512
        ret = [q["episodic_return"] for q in win if math.isfinite(q["episodic_return"])]
        kv = [("rollout/", None), ("ep_len_mean", 12.3), ("ep_rew_mean", nanmean(ret) if ret else float("nan")),
              ("time/", None), ("fps", int(512 / wmean(win, "st"))), ("iterations", r["step"]), ("time_elapsed", int(r["t"])),
              ("total_timesteps", x), ("train/", None), ("entropy_loss", -wmean(win, "entropy")), ("explained_variance", 0.1),
              ("learning_rate", r["lr"]), ("loss", wmean(win, "loss")), ("n_updates", r["step"]),
              ("policy_gradient_loss", wmean(win, "policy_loss")), ("value_loss", wmean(win, "value_loss"))]
        out.append("-" * 38)
        for k, v in kv:
            if v is None:
                out.append(f"| {k:<22s}|{'':13s}|")
            else:
                vs = f"{v:.3g}" if isinstance(v, float) else str(v)
                out.append(f"|    {k:<19s}| {vs:<12s}|")
        out.append("-" * 38)
        put(log, "loss", x, wmean(win, "loss")); put(log, "lr", x, r["lr"]); put(log, "value_loss", x, wmean(win, "value_loss"))
        put(log, "ret", x, kv[2][1])
    open(os.path.join(d, "sb3_stdout.txt"), "w").write("Using cpu device\n" + "\n".join(out) + "\n")
    return log


WRITERS = {"hf": w_hf, "keras": w_keras, "mlflow": w_mlflow, "tb": w_tb, "tbranks": w_tb_ranks, "wandb": w_wandb,
           "lightning": w_lightning, "nanogpt": w_nanogpt, "fairseq": w_fairseq, "mmengine": w_mmengine,
           "detectron2": w_detectron2, "yolo": w_yolo, "tqdm": w_tqdm, "pylog": w_pylog, "pylogranks": w_pylog_ranks,
           "zh": w_zh, "md": w_md, "pandas": w_pandas, "sb3": w_sb3}
