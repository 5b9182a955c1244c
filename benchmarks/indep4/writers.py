"""Log writers. Each writes a run folder in one real tool's layout and returns the points it
logged (after the tool's own aggregation and rounding), as dicts with 'x' in the file's own unit."""
import csv
import datetime as dt
import json
import math
import os
import statistics

T0 = dt.datetime(2026, 11, 20, 10, 0, 0)


def ts(rec):
    return T0 + dt.timedelta(seconds=rec.get("wall", 0.0))


def fin(v):
    return v is not None and isinstance(v, float) and math.isfinite(v)


def windows(recs, every):
    for i in range(0, len(recs), every):
        w = recs[i:i + every]
        if len(w) == every or i + len(w) == len(recs):
            yield w


def agg(w, mode, key="loss", mask=None):
    vals = [r[key] for r in w if key in r]
    if not vals:
        return None, False
    masked = False
    if mask == "hf":  # HF logging_nan_inf_filter: non-finite step losses replaced by the window's running mean
        out, acc = [], []
        for v in vals:
            if not math.isfinite(v):
                masked = True
                v = sum(acc) / len(acc) if acc else 0.0
            acc.append(v)
            out.append(v)
        vals = out
    if mode == "mean":
        v = sum(vals) / len(vals)
    elif mode == "median":
        v = statistics.median(vals) if all(math.isfinite(x) for x in vals) else float("nan")
    else:
        v = vals[-1]
    return v, masked


def point(w, every, mode="mean", mask=None, xfn=lambda r: r["step"]):
    last = w[-1]
    loss, masked = agg(w, mode, mask=mask)
    p = {"x": xfn(last), "loss": loss, "lr": last["lr"], "gnorm": last["gnorm"],
         "step_ms": sum(r["step_ms"] for r in w) / len(w), "data_ms": sum(r["data_ms"] for r in w) / len(w),
         "mem_mb": last["rss_mb"], "wall": last["wall"], "step": last["step"], "epoch": last["epoch"]}
    if masked:
        p["masked"] = True
    for k in ("scale", "dead", "sat", "g_first", "g_last", "acc", "aux", "loss_cls", "loss_reg", "ce", "kl"):
        if k in last:
            p[k] = last[k]
    for r in w:
        if "val_loss" in r:
            p["val_loss"] = r["val_loss"]
            if "val_acc" in r:
                p["val_acc"] = r["val_acc"]
    return p


def apply_logger_mask(p, how, state):
    """BUG hook for 'nan_masked' runs: the run's own logging code hides non-finite losses."""
    v = p["loss"]
    if how and v is not None and not math.isfinite(v):
        p["masked"] = True
        if how == "zero":
            p["loss"] = 0.0
        elif how == "prev":
            p["loss"] = state.get("prev", 0.0)
        elif how == "skip":
            return None
    if v is not None and math.isfinite(v):
        state["prev"] = v
    return p


def points(recs, spec, mode="mean", xfn=lambda r: r["step"], hfmask=False):
    every = spec.get("log_every", 10)
    st = {}
    out = []
    for w in windows(recs, every):
        p = point(w, every, mode, "hf" if hfmask else None, xfn)
        p = apply_logger_mask(p, spec.get("logger_mask"), st)
        if p is not None:
            out.append(p)
    return out


def epoch_points(recs, spec, x0=0):
    groups = {}
    for r in recs:
        groups.setdefault(int(r["epoch"]), []).append(r)
    out = []
    st = {}
    for e in sorted(groups):
        p = point(groups[e], len(groups[e]), "mean", None, lambda r: e + x0)
        if "val_loss" not in p:
            continue
        p = apply_logger_mask(p, spec.get("logger_mask"), st)
        if p is not None:
            out.append(p)
    return out


def g(v, n=6):
    if v is None:
        return ""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return f"{v:.{n}g}"


# ------------------------------------------------------------------ formats
def w_hf(d, recs, spec):
    pts = points(recs, spec, "mean", hfmask=True)
    hist = []
    for p in pts:
        hist.append({"epoch": round(p["epoch"], 4), "grad_norm": p["gnorm"], "learning_rate": p["lr"],
                     "loss": round(p["loss"], 4), "step": p["x"]})
        if "val_loss" in p:
            hist.append({"epoch": round(p["epoch"], 4), "eval_loss": p["val_loss"], "eval_runtime": 0.21,
                         "eval_samples_per_second": 1210.5, "eval_steps_per_second": 38.1, "step": p["x"]})
    last = recs[-1]["step"]
    st = {"best_metric": None, "best_model_checkpoint": None, "epoch": round(recs[-1]["epoch"], 4),
          "eval_steps": spec.get("eval_every"), "global_step": last, "is_hyper_param_search": False,
          "is_local_process_zero": True, "is_world_process_zero": True, "log_history": hist,
          "logging_steps": spec.get("log_every", 10), "max_steps": spec["steps"], "num_train_epochs": 1,
          "save_steps": last, "total_flos": 0.0, "train_batch_size": spec["bs"], "trial_name": None, "trial_params": None}
    os.makedirs(f"{d}/checkpoint-{last}", exist_ok=True)
    with open(f"{d}/checkpoint-{last}/trainer_state.json", "w") as f:
        json.dump(st, f, indent=2, sort_keys=True)
    return pts, "global step (1-based, `step` in log_history)"


def w_lightning(d, recs, spec):
    pts = points(recs, spec, "last", xfn=lambda r: r["step"] - 1)
    os.makedirs(f"{d}/lightning_logs/version_0", exist_ok=True)
    optname = {"adamw": "AdamW", "adam": "Adam", "sgd": "SGD", "nesterov": "SGD", "lion": "Lion"}.get(spec["opt"], "Optimizer")
    cols = ["epoch", f"lr-{optname}", "step", "train/loss_step", "val/loss", "val/acc"]
    with open(f"{d}/lightning_logs/version_0/metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for p in pts:
            w.writerow([int(p["epoch"]), "", p["x"], g(p["loss"]), "", ""])
            w.writerow([int(p["epoch"]), g(p["lr"]), p["x"], "", "", ""])
            if "val_loss" in p:
                w.writerow([int(p["epoch"]), "", p["x"], "", g(p["val_loss"]), g(p.get("val_acc"))])
    with open(f"{d}/lightning_logs/version_0/hparams.yaml", "w") as f:
        f.write(f"lr: {spec['lr']}\nbatch_size: {spec['bs']}\n")
    return pts, "0-based global step (`step` column)"


def w_keras_csv(d, recs, spec):
    pts = epoch_points(recs, spec, 0)
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/training.log", "w") as f:
        f.write("epoch,learning_rate,loss,val_loss\n")
        for p in pts:
            f.write(f"{p['x']},{g(p['lr'], 8)},{g(p['loss'], 17)},{g(p['val_loss'], 17)}\n")
    return pts, "0-based epoch (`epoch` column)"


def w_tb(d, recs, spec):
    from torch.utils.tensorboard import SummaryWriter
    pts = points(recs, spec, "last")
    sw = SummaryWriter(f"{d}/runs/exp1")
    for p in pts:
        sw.add_scalar("train/loss", p["loss"], p["x"])
        sw.add_scalar("train/grad_norm", p["gnorm"], p["x"])
        sw.add_scalar("train/lr", p["lr"], p["x"])
        sw.add_scalar("perf/step_time_ms", p["step_ms"], p["x"])
        for k in ("dead", "sat", "scale"):
            if k in p:
                sw.add_scalar({"dead": "act/dead_relu_frac", "sat": "act/saturated_frac", "scale": "amp/loss_scale"}[k], p[k], p["x"])
        if "g_first" in p:
            sw.add_scalar("grad_norm/layers.0", p["g_first"], p["x"])
            sw.add_scalar("grad_norm/layers.last", p["g_last"], p["x"])
        if "val_loss" in p:
            sw.add_scalar("val/loss", p["val_loss"], p["x"])
    sw.close()
    return pts, "global step (1-based, TensorBoard step)"


def w_wandb(d, recs, spec):
    pts = points(recs, spec, "mean")
    rd = f"{d}/wandb/offline-run-20261120_100000-k3x9q2ab/files"
    os.makedirs(rd, exist_ok=True)
    tokens = spec["bs"] * spec.get("accum", 1) * 15
    with open(f"{rd}/wandb-history.jsonl", "w") as f:
        for p in pts:
            row = {"_step": p["x"], "_runtime": round(p["wall"], 3), "_timestamp": ts(p).timestamp(),
                   "train/loss": p["loss"], "train/learning_rate": p["lr"], "train/grad_norm": p["gnorm"],
                   "perf/tokens/s": round(tokens / (p["step_ms"] / 1000), 1), "system/rss_mb": round(p["mem_mb"], 1)}
            for k in ("dead", "sat", "scale"):
                if k in p:
                    row["debug/" + k] = p[k]
            if "val_loss" in p:
                row["eval/loss"] = p["val_loss"]
            f.write(json.dumps(row) + "\n")
    with open(f"{rd}/wandb-summary.json", "w") as f:
        json.dump({"train/loss": pts[-1]["loss"], "_step": pts[-1]["x"]}, f)
    with open(f"{rd}/config.yaml", "w") as f:
        f.write(f"lr:\n  value: {spec['lr']}\nbatch_size:\n  value: {spec['bs']}\n")
    return pts, "global step (`_step`)"


def w_mlflow(d, recs, spec):
    pts = points(recs, spec, "mean")
    rid = "5f0c2e7b9d1a4c3e8b6a2f1d0e9c8b7a"
    md = f"{d}/mlruns/0/{rid}"
    os.makedirs(f"{md}/metrics", exist_ok=True)
    os.makedirs(f"{md}/params", exist_ok=True)
    with open(f"{d}/mlruns/0/meta.yaml", "w") as f:
        f.write("artifact_location: mlruns/0\nexperiment_id: '0'\nlifecycle_stage: active\nname: Default\n")
    with open(f"{md}/meta.yaml", "w") as f:
        f.write(f"run_id: {rid}\nexperiment_id: '0'\nstatus: 3\nlifecycle_stage: active\n")
    for k, v in (("lr", spec["lr"]), ("batch_size", spec["bs"])):
        open(f"{md}/params/{k}", "w").write(str(v))
    keys = {"loss": "loss_total", "lr": "learning_rate", "gnorm": "grad-norm", "step_ms": "step_time",
            "mem_mb": "system/system_memory_usage_megabytes", "val_loss": "val_loss_total", "scale": "loss_scale",
            "dead": "dead_fraction", "sat": "saturation"}
    files = {k: open(f"{md}/metrics/{v.replace('/', '_') if k != 'mem_mb' else 'system_memory_usage_megabytes'}", "w")
             for k, v in keys.items() if any(k in p for p in pts)}
    for p in pts:
        t = int(ts(p).timestamp() * 1000)
        for k, f in files.items():
            if k in p:
                v = p[k] / 1000 if k == "step_ms" else p[k]
                f.write(f"{t} {v!r} {p['x']}\n")
    for f in files.values():
        f.close()
    return pts, "global step (third field); step_time in seconds"


def w_nanogpt(d, recs, spec):
    pts = points(recs, spec, "last", xfn=lambda r: r["step"] - 1)
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/train.log", "w") as f:
        f.write(f"tokens per iteration will be: {spec['bs'] * spec.get('accum', 1) * 15:,}\n")
        f.write("Initializing a new model from scratch\nnumber of parameters: 0.03M\n")
        for p in pts:
            if "val_loss" in p:
                f.write(f"step {p['x']}: train loss {p['loss']:.4f}, val loss {p['val_loss']:.4f}\n")
            f.write(f"iter {p['x']}: loss {p['loss']:.4f}, time {p['step_ms']:.2f}ms, mfu {1.2 + (p['x'] % 7) * 0.01:.2f}%\n")
    return pts, "0-based iteration (`iter N`)"


def w_megatron(d, recs, spec):
    pts = points(recs, spec, "mean")
    os.makedirs(d, exist_ok=True)
    gbs = spec["bs"] * spec.get("accum", 1)
    with open(f"{d}/megatron_train.log", "w") as f:
        f.write("> building train, validation, and test datasets ...\n[after dataloaders are built] datetime: "
                f"{T0:%Y-%m-%d %H:%M:%S}\ntraining ...\n")
        skipped = 0
        prev_scale = None
        for p in pts:
            sc = p.get("scale", 1.0)
            if prev_scale is not None and sc < prev_scale:
                skipped = min(spec.get("log_every", 10), int(round(math.log2(prev_scale / sc))))
            else:
                skipped = 0
            prev_scale = sc
            f.write(f" [{ts(p):%Y-%m-%d %H:%M:%S}] iteration {p['x']:>8}/{spec['steps']:>8} | consumed samples: "
                    f"{p['x'] * gbs:>12} | elapsed time per iteration (ms): {p['step_ms']:.1f} | learning rate: "
                    f"{p['lr']:.6E} | global batch size: {gbs:>5} | lm loss: {p['loss']:.6E} | loss scale: {sc:.1f} | "
                    f"grad norm: {p['gnorm']:.3f} | number of skipped iterations: {skipped:>3} | number of nan iterations: "
                    f"{int(not math.isfinite(p['loss'])):>3} |\n")
            if "val_loss" in p:
                v = p["val_loss"]
                ppl = math.exp(min(v, 50)) if math.isfinite(v) else float("nan")
                f.write("-" * 100 + f"\n validation loss at iteration {p['x']} | lm loss value: {v:.6E} | lm loss PPL: "
                        f"{ppl:.6E} | \n" + "-" * 100 + "\n")
    return pts, "iteration (1-based)"


def w_timm(d, recs, spec):
    os.makedirs(d, exist_ok=True)
    every = spec.get("log_every", 10)
    spe = spec["_spe"]
    pts = []
    with open(f"{d}/train.log", "w") as f:
        ep_losses = []
        cur_ep = 0
        for i, r in enumerate(recs):
            e = int(r["epoch"])
            if e != cur_ep:
                ep_losses = []
                cur_ep = e
            ep_losses.append(r["loss"])
            bi = (r["step"] - 1) % spe
            last = bi == spe - 1
            if bi % every == 0 or last:
                avg = sum(ep_losses) / len(ep_losses)
                x = e * spe + bi + 1
                f.write(f"Train: {e} [{bi:>4}/{spe} ({100 * bi / max(1, spe - 1):>3.0f}%)]  Loss: {r['loss']:#.3g} ({avg:#.3g})  "
                        f"Time: {r['step_ms'] / 1000:.3f}s, {spec['bs'] / max(r['step_ms'], 1e-3) * 1000:>7.2f}/s  "
                        f"LR: {r['lr']:.3e}  Data: {r['data_ms'] / 1000:.3f} ({r['data_ms'] / 1000:.3f})\n")
                pts.append({"x": x, "loss": r["loss"], "lr": r["lr"], "step_ms": r["step_ms"], "data_ms": r["data_ms"],
                            "gnorm": r["gnorm"], "mem_mb": r["rss_mb"], "wall": r["wall"], "step": r["step"], "epoch": r["epoch"]})
            if "val_loss" in r:
                f.write(f"Test: [   7/7]  Time: 0.011 (0.015)  Loss:  {r['val_loss']:.4f} ({r['val_loss']:.4f})  "
                        f"Acc@1: {100 * r.get('val_acc', 0):.4f} ({100 * r.get('val_acc', 0):.4f})\n")
                if pts:
                    pts[-1]["val_loss"] = r["val_loss"]
    return pts, "1-based global step = epoch*steps_per_epoch + batch_idx + 1 (timm prints epoch and 0-based batch_idx)"


def w_mmengine(d, recs, spec):
    spe = spec["_spe"]
    pts = points(recs, spec, "mean", xfn=lambda r: r["step"])
    os.makedirs(d, exist_ok=True)
    total = spec["steps"]
    with open(f"{d}/20261120_100000.log", "w") as f:
        for p in pts:
            e = int(p["epoch"]) + 1
            i = (p["step"] - 1) % spe + 1
            eta = dt.timedelta(seconds=int((total - p["step"]) * p["step_ms"] / 1000))
            f.write(f"{ts(p):%Y/%m/%d %H:%M:%S} - mmengine - INFO - Epoch(train) [{e}][{i:>3}/{spe}]  "
                    f"lr: {p['lr']:.4e}  eta: {eta}  time: {p['step_ms'] / 1000:.4f}  data_time: {p['data_ms'] / 1000:.4f}  "
                    f"memory: {int(p['mem_mb'])}  grad_norm: {p['gnorm']:.4f}  loss: {p['loss']:.4f}\n")
            if "val_loss" in p:
                f.write(f"{ts(p):%Y/%m/%d %H:%M:%S} - mmengine - INFO - Epoch(val) [{e}][8/8]    loss: {p['val_loss']:.4f}"
                        f"  data_time: 0.0010  time: 0.0040\n")
    return pts, "1-based global iteration = (epoch-1)*iters_per_epoch + i (mmengine prints [epoch][i/N])"


def w_fairseq(d, recs, spec):
    pts = points(recs, spec, "mean")
    os.makedirs(d, exist_ok=True)
    ln2 = math.log(2)
    with open(f"{d}/train.log", "w") as f:
        f.write(f"{T0:%Y-%m-%d %H:%M:%S} | INFO | fairseq_cli.train | training on 1 devices (GPUs/TPUs)\n")
        for p in pts:
            lb = p["loss"] / ln2
            row = {"epoch": int(p["epoch"]) + 1, "update": f"{p['epoch'] + 1:.3f}", "loss": g(lb, 3) if math.isfinite(lb) else "nan",
                   "nll_loss": g(lb, 3) if math.isfinite(lb) else "nan", "ppl": g(2 ** min(lb, 60), 4) if math.isfinite(lb) else "nan",
                   "wps": f"{spec['bs'] * 15 / (p['step_ms'] / 1000):.0f}", "ups": f"{1000 / p['step_ms']:.2f}",
                   "wpb": str(spec["bs"] * 15), "bsz": str(spec["bs"]), "num_updates": str(p["x"]), "lr": g(p["lr"]),
                   "gnorm": g(p["gnorm"], 3), "loss_scale": g(p.get("scale", 128.0), 4), "train_wall": f"{p['wall']:.0f}",
                   "gb_free": "78.2", "wall": f"{p['wall']:.0f}"}
            f.write(f"{ts(p):%Y-%m-%d %H:%M:%S} | INFO | train_inner | {json.dumps(row)}\n")
            if "val_loss" in p:
                vb = p["val_loss"] / ln2
                row = {"epoch": int(p["epoch"]) + 1, "valid_loss": g(vb, 3), "valid_nll_loss": g(vb, 3),
                       "valid_ppl": g(2 ** min(vb, 60), 4) if math.isfinite(vb) else "nan", "valid_wps": "51234",
                       "valid_wpb": "480", "valid_bsz": "32", "valid_num_updates": str(p["x"])}
                f.write(f"{ts(p):%Y-%m-%d %H:%M:%S} | INFO | valid | {json.dumps(row)}\n")
    for p in pts:  # fairseq logs loss in bits (base 2)
        p["loss"] = p["loss"] / ln2
        if "val_loss" in p:
            p["val_loss"] = p["val_loss"] / ln2
    return pts, "num_updates (1-based); losses in base 2 (bits)"


def w_detectron2(d, recs, spec):
    pts = points(recs, spec, "median", xfn=lambda r: r["step"] - 1)
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/metrics.json", "w") as f:
        for p in pts:
            row = {"data_time": p["data_ms"] / 1000, "eta_seconds": (spec["steps"] - p["x"]) * p["step_ms"] / 1000,
                   "iteration": p["x"], "lr": p["lr"], "rank_data_time": p["data_ms"] / 1000, "time": p["step_ms"] / 1000,
                   "total_loss": p["loss"]}
            for k in ("loss_cls", "loss_reg", "ce", "kl", "aux"):
                if k in p:
                    row[{"ce": "loss_ce", "kl": "loss_kd", "aux": "loss_balance"}.get(k, k)] = p[k]
            f.write(json.dumps(row) + "\n")
            if "val_loss" in p:
                f.write(json.dumps({"iteration": p["x"], "validation_loss": p["val_loss"]}) + "\n")
    return pts, "0-based iteration (`iteration`); total_loss is the median over the 20-iteration window"


def w_yolo(d, recs, spec):
    pts = epoch_points(recs, spec, 1)
    os.makedirs(d, exist_ok=True)
    cols = ["epoch", "train/loss", "metrics/accuracy_top1", "val/loss", "lr/pg0", "lr/pg1", "lr/pg2"]
    with open(f"{d}/results.csv", "w") as f:
        f.write(",".join(f"{c:>25}" if i else f"{c:>14}" for i, c in enumerate(cols)) + "\n")
        for p in pts:
            vals = [p["x"], p["loss"], p.get("acc", 0.0), p["val_loss"], p["lr"], p["lr"], p["lr"]]
            f.write(",".join(f"{v:>14}" if i == 0 else f"{g(v, 5):>25}" for i, v in enumerate(vals)) + "\n")
    return pts, "1-based epoch (`epoch` column)"


def w_tqdm(d, recs, spec):
    pts = points(recs, spec, "last")
    os.makedirs(d, exist_ok=True)
    N = len(recs)
    with open(f"{d}/stdout.txt", "w") as f:
        for i, p in enumerate(pts):
            n = p["x"]
            frac = min(1.0, n / N)
            bar = "█" * int(frac * 20) + " " * (20 - int(frac * 20))
            el = int(p["wall"])
            f.write(f"\rtrain: {frac * 100:3.0f}%|{bar}| {n}/{N} [{el // 60:02d}:{el % 60:02d}<00:00, "
                    f"{1000 / p['step_ms']:.2f}it/s, loss={p['loss']:.4g}, lr={p['lr']:.2e}]")
        f.write("\n")
    return pts, "n in n/total (1-based step)"


def w_pylog(d, recs, spec):
    pts = points(recs, spec, "mean")
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/train.log", "w") as f:
        for p in pts:
            t = ts(p)
            f.write(f"{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d} - trainer - INFO - step {p['x']}/{spec['steps']} "
                    f"loss_total={g(p['loss'], 5)} lr={p['lr']:.3e} gnorm={g(p['gnorm'], 4)} iter_time_ms={p['step_ms']:.2f} "
                    f"data_time={p['data_ms'] / 1000:.4f} rss_mb={p['mem_mb']:.1f}"
                    + (f" loss_scale={p['scale']:.1f}" if "scale" in p else "")
                    + (f" dead_frac={p['dead']:.3f}" if "dead" in p else "") + "\n")
            if "val_loss" in p:
                f.write(f"{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d} - trainer - INFO - eval step {p['x']} "
                        f"val_loss={g(p['val_loss'], 5)}\n")
    return pts, "global step (1-based, `step N/M`)"


def w_csv(d, recs, spec):
    pts = points(recs, spec, "mean")
    os.makedirs(d, exist_ok=True)
    cols = ["global_step", "Loss", "val_Loss", "learning_rate", "gnorm", "iter_time_ms", "data_time", "mem_gb",
            "grad_norm_first", "grad_norm_last", "dead_frac", "sat_frac", "loss_scale"]
    use = [c for c in cols if any(_csv_val(p, c) not in ("", None) for p in pts)]
    with open(f"{d}/log.csv", "w") as f:
        f.write(",".join(use) + "\n")
        for p in pts:
            f.write(",".join(_csv_val(p, c) for c in use) + "\n")
    return pts, "global step (1-based, `global_step` column)"


def _csv_val(p, c):
    m = {"global_step": p["x"], "Loss": p["loss"], "val_Loss": p.get("val_loss"), "learning_rate": p["lr"],
         "gnorm": p["gnorm"], "iter_time_ms": p["step_ms"], "data_time": p["data_ms"] / 1000, "mem_gb": p["mem_mb"] / 1024,
         "grad_norm_first": p.get("g_first"), "grad_norm_last": p.get("g_last"), "dead_frac": p.get("dead"),
         "sat_frac": p.get("sat"), "loss_scale": p.get("scale")}
    v = m[c]
    if v is None:
        return ""
    return str(v) if isinstance(v, int) else g(float(v))


def w_jsonl(d, recs, spec):
    pts = points(recs, spec, "mean")
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/metrics.jsonl", "w") as f:
        for p in pts:
            row = {"it": p["x"], "lm loss": p["loss"], "lr": p["lr"], "grad-norm": p["gnorm"],
                   "samples_per_sec": round(spec["bs"] * spec.get("accum", 1) / (p["step_ms"] / 1000), 1),
                   "data_time": round(p["data_ms"] / 1000, 5), "mem_gb": round(p["mem_mb"] / 1024, 4)}
            for k in ("scale", "dead", "sat", "g_first", "g_last"):
                if k in p:
                    row[k] = p[k]
            if "val_loss" in p:
                row["val lm loss"] = p["val_loss"]
            f.write(json.dumps(row) + "\n")
    return pts, "iteration (`it`, 1-based)"


def w_ranks(d, recs, spec):
    """Two simulated ranks: each rank writes its own file (jsonl: rank<N>.jsonl, pylog: logs/rank<N>/train.log)."""
    every = spec.get("log_every", 10)
    style = spec.get("rank_style", "jsonl")
    all_pts = []
    for r in (0, 1):
        pts = []
        for w in windows(recs, every):
            p = point(w, every, "mean")
            p["rank"] = r
            p["fwd_ms"] = sum(x["fwd_ms"][r] for x in w) / len(w)
            p["wait_ms"] = sum(x["wait_ms"][r] for x in w) / len(w)
            pts.append(p)
        if style == "jsonl":
            os.makedirs(d, exist_ok=True)
            with open(f"{d}/train_rank{r}.jsonl", "w") as f:
                for p in pts:
                    f.write(json.dumps({"step": p["x"], "rank": r, "loss": p["loss"], "lr": p["lr"],
                                        "compute_ms": round(p["fwd_ms"], 3), "allreduce_wait_ms": round(p["wait_ms"], 3),
                                        "step_time": round(p["step_ms"] / 1000, 5)}) + "\n")
        else:
            os.makedirs(f"{d}/logs/rank{r}", exist_ok=True)
            with open(f"{d}/logs/rank{r}/train.log", "w") as f:
                for p in pts:
                    t = ts(p)
                    f.write(f"{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d} [rank{r}] INFO step={p['x']} loss={g(p['loss'], 5)} "
                            f"fwd_bwd_ms={p['fwd_ms']:.2f} comm_wait_ms={p['wait_ms']:.2f} step_ms={p['step_ms']:.2f}\n")
        all_pts += pts
    return all_pts, "global step (1-based), one file per rank"


WRITERS = {"hf": w_hf, "lightning": w_lightning, "keras_csv": w_keras_csv, "tb": w_tb, "wandb": w_wandb,
           "mlflow": w_mlflow, "nanogpt": w_nanogpt, "megatron": w_megatron, "timm": w_timm, "mmengine": w_mmengine,
           "fairseq": w_fairseq, "detectron2": w_detectron2, "yolo": w_yolo, "tqdm": w_tqdm, "pylog": w_pylog,
           "csv": w_csv, "jsonl": w_jsonl, "ranks": w_ranks}
