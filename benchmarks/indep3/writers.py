"""Write logged series in the formats real tools produce."""
import json, math, os, time, csv, random

T0 = 1764646800.0  # fixed wall-clock origin for timestamps


def _fmt(v, nd=4):
    if v is None: return ""
    if isinstance(v, float) and not math.isfinite(v): return "nan" if v != v else ("inf" if v > 0 else "-inf")
    return f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def _ts(rows):
    t, out = T0, []
    for r in rows:
        t += r["step_time"] * max(1, r.get("_gap", 1)); out.append(t)
    return out


def mask_rows(rows, mode):
    """Logger-side NaN handling bug: NaN losses written as 0, as the previous value, or dropped."""
    out, prev = [], None
    for r in rows:
        r = dict(r); v = r["loss"]
        if not math.isfinite(v):
            if mode == "zero": r["loss"] = 0.0
            elif mode == "prev": r["loss"] = prev if prev is not None else 0.0
            elif mode == "skip": r.pop("loss")
            for k in ("grad_norm",):
                if mode != "skip" and k in r and not math.isfinite(r[k]):
                    if mode == "zero": r[k] = 0.0
                    elif mode == "prev": r[k] = out[-1].get(k, 0.0) if out else 0.0
                    else: r.pop(k)
        else:
            prev = v
        out.append(r)
    return out


def per_epoch(rows, evals, spe):
    ep = {}
    for r in rows:
        e = int(math.ceil(r["step"] / spe)) - 1
        ep.setdefault(e, []).append(r)
    res = []
    for e in sorted(ep):
        rs = [r for r in ep[e] if "loss" in r]
        if (e + 1) * spe > rows[-1]["step"] and len(ep) > 1: break
        d = dict(epoch=e, loss=sum(r["loss"] for r in rs) / max(1, len(rs)), lr=rs[-1]["lr"] if rs else None,
                 time=sum(r["step_time"] for r in ep[e]))
        ev = [v for v in evals if abs(v["step"] - (e + 1) * spe) < spe / 2 + 1e-9]
        if ev: d["val_loss"] = ev[-1]["val_loss"]; d["val_acc"] = ev[-1]["val_acc"]
        res.append(d)
    return res


def w_hf(d, rows, evals, spe, o):
    hist = []
    for r in rows:
        e = {"epoch": r["epoch"], "grad_norm": r["grad_norm"], "learning_rate": r["lr"], "step": r["step"]}
        if "loss" in r: e["loss"] = round(r["loss"], 4)
        hist.append(e)
    for v in evals:
        hist.append({"epoch": v["epoch"], "eval_loss": v["val_loss"], "eval_runtime": 0.21, "step": v["step"]})
    hist.sort(key=lambda e: (e["step"], "eval_loss" in e))
    st = {"best_metric": None, "epoch": rows[-1]["epoch"], "global_step": rows[-1]["step"], "is_hyper_param_search": False,
          "log_history": hist, "logging_steps": o["log_every"], "max_steps": o["steps"], "num_train_epochs": math.ceil(o["steps"] / spe),
          "train_batch_size": o["bs"]}
    os.makedirs(f"{d}/checkpoint-{rows[-1]['step']}", exist_ok=True)
    with open(f"{d}/checkpoint-{rows[-1]['step']}/trainer_state.json", "w") as f: json.dump(st, f, indent=2)


def w_lightning(d, rows, evals, spe, o):
    p = f"{d}/lightning_logs/version_0"; os.makedirs(p, exist_ok=True)
    lrk = f"lr-{o['opt'].capitalize() if o['opt'] != 'adamw' else 'AdamW'}"
    cols = ["epoch", "step", lrk, "train_loss", "val_loss", "val_acc"]
    with open(f"{p}/metrics.csv", "w", newline="") as f:
        w = csv.writer(f); w.writerow(cols)
        items = [(r["step"], 0, r) for r in rows] + [(v["step"], 1, v) for v in evals]
        for s, kind, r in sorted(items, key=lambda t: (t[0], t[1])):
            e = int((s - 1) // spe)
            if kind == 0: w.writerow([e, s - 1, _fmt(r["lr"], 8), _fmt(r.get("loss"), 6), "", ""])
            else: w.writerow([e, s - 1, "", "", _fmt(r["val_loss"], 6), _fmt(r["val_acc"], 4)])
    with open(f"{p}/hparams.yaml", "w") as f: f.write(f"lr: {o['lr']}\nbatch_size: {o['bs']}\n")


def w_keras_csv(d, rows, evals, spe, o):
    eps = per_epoch(rows, evals, spe)
    with open(f"{d}/training.log", "w", newline="") as f:
        w = csv.writer(f); hv = any("val_loss" in e for e in eps)
        w.writerow(["epoch", "loss", "lr"] + (["val_loss"] if hv else []))
        for e in eps: w.writerow([e["epoch"], _fmt(e["loss"], 6), _fmt(e["lr"], 8)] + ([_fmt(e.get("val_loss"), 6)] if hv else []))


def w_keras_console(d, rows, evals, spe, o):
    eps = per_epoch(rows, evals, spe)
    with open(f"{d}/train_output.txt", "w") as f:
        for e in eps:
            f.write(f"Epoch {e['epoch'] + 1}/{len(eps)}\n")
            ms = e["time"] * 1000 / spe
            s = f"{spe}/{spe} [==============================] - {max(0, int(e['time']))}s {ms:.0f}ms/step - loss: {_fmt(e['loss'])}"
            if "val_loss" in e: s += f" - val_loss: {_fmt(e['val_loss'])}"
            f.write(s + f" - lr: {e['lr']:.4e}\n")


def w_tb(d, rows, evals, spe, o):
    from torch.utils.tensorboard import SummaryWriter
    w = SummaryWriter(log_dir=f"{d}/tb")
    for r, t in zip(rows, _ts(rows)):
        if "loss" in r: w.add_scalar("Loss/train", r["loss"], r["step"], walltime=t)
        w.add_scalar("LearningRate", r["lr"], r["step"], walltime=t)
        w.add_scalar("GradNorm", r["grad_norm"], r["step"], walltime=t)
        for k in ("loss_scale", "dead_frac", "grad_first"):
            if k in r: w.add_scalar(f"Debug/{k}", r[k], r["step"], walltime=t)
    for v in evals:
        w.add_scalar("Loss/val", v["val_loss"], v["step"], walltime=T0 + v["step"])
    w.close()


def w_wandb(d, rows, evals, spe, o):
    p = f"{d}/wandb/offline-run-20261202_034500-{o['name'][-8:]}/files"; os.makedirs(p, exist_ok=True)
    ev = {v["step"]: v for v in evals}
    with open(f"{p}/wandb-history.jsonl", "w") as f:
        for r, t in zip(rows, _ts(rows)):
            e = {"_step": r["step"], "_runtime": round(t - T0, 3), "_timestamp": t, "train/learning_rate": r["lr"],
                 "train/global_step": r["step"], "perf/step_time_ms": r["step_time"] * 1000, "perf/data_wait_ms": r["data_time"] * 1000,
                 "system/proc.memory.rssMB": r["rss_mb"], "train/grad_norm": r["grad_norm"]}
            if "loss" in r: e["train/loss"] = r["loss"]
            for k in ("loss_scale", "dead_frac", "grad_first"):
                if k in r: e[f"train/{k}"] = r[k]
            if r["step"] in ev: e["eval/loss"] = ev[r["step"]]["val_loss"]
            f.write(json.dumps(e) + "\n")


def w_mlflow(d, rows, evals, spe, o):
    rid = "%032x" % (abs(hash(o["name"])) % (1 << 120))
    p = f"{d}/mlruns/0/{rid}"; os.makedirs(f"{p}/metrics", exist_ok=True); os.makedirs(f"{p}/params", exist_ok=True)
    with open(f"{p}/meta.yaml", "w") as f: f.write(f"run_id: {rid}\nexperiment_id: '0'\nstatus: 3\nrun_name: {o['name']}\n")
    ts = _ts(rows); keys = {"train_loss": "loss", "learning_rate": "lr", "step_time_s": "step_time", "grad_norm": "grad_norm",
                            "mem_rss_mb": "rss_mb", "loss_scale": "loss_scale", "dead_fraction": "dead_frac"}
    for mk, rk in keys.items():
        lines = [f"{int(t * 1000)} {r[rk]} {r['step']}" for r, t in zip(rows, ts) if rk in r]
        if lines:
            with open(f"{p}/metrics/{mk}", "w") as f: f.write("\n".join(lines) + "\n")
    if evals:
        with open(f"{p}/metrics/val_loss", "w") as f:
            f.write("\n".join(f"{int((T0 + v['step']) * 1000)} {v['val_loss']} {v['step']}" for v in evals) + "\n")
    with open(f"{p}/params/lr", "w") as f: f.write(str(o["lr"]))


def w_jsonl(d, rows, evals, spe, o, fn="metrics.jsonl"):
    ev = {v["step"]: v for v in evals}
    with open(f"{d}/{fn}", "w") as f:
        for r, t in zip(rows, _ts(rows)):
            e = {"iter": r["step"], "time": round(t, 3), "lr": r["lr"], "gnorm": round(r["grad_norm"], 5) if math.isfinite(r["grad_norm"]) else r["grad_norm"],
                 "sec_per_iter": round(r["step_time"], 5), "data_sec": round(r["data_time"], 5), "max_mem_gb": round(r["rss_mb"] / 1024, 5)}
            if "loss" in r: e["loss"] = r["loss"]
            for k in ("loss_scale", "dead_frac", "grad_first"):
                if k in r: e[k] = r[k]
            if r["step"] in ev: e["valid_loss"] = ev[r["step"]]["val_loss"]
            f.write(json.dumps(e) + "\n")


def w_csv(d, rows, evals, spe, o):
    ev = {v["step"]: v for v in evals}
    extra = [k for k in ("loss_scale", "dead_frac", "grad_first") if k in rows[0]]
    with open(f"{d}/progress.csv", "w", newline="") as f:
        w = csv.writer(f); w.writerow(["global_step", "objective", "learning_rate", "gradient_norm", "wall_ms", "heap_MiB"] + extra + ["holdout_objective"])
        for r in rows:
            w.writerow([r["step"], _fmt(r.get("loss"), 6), _fmt(r["lr"], 8), _fmt(r["grad_norm"], 5), _fmt(r["step_time"] * 1000, 2),
                        _fmt(r["rss_mb"], 2)] + [_fmt(r[k], 6) for k in extra] + [_fmt(ev[r["step"]]["val_loss"], 6) if r["step"] in ev else ""])


def _extras(r):
    return "".join(f" {k}={_fmt(r[k], 6)}" for k in ("loss_scale", "dead_frac", "grad_first") if k in r)


def w_logging(d, rows, evals, spe, o, fn="train.log"):
    ev = {v["step"]: v for v in evals}
    with open(f"{d}/{fn}", "w") as f:
        for r, t in zip(rows, _ts(rows)):
            ts = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + ",%03d" % int((t % 1) * 1000)
            f.write(f"{ts} - trainer - INFO - step {r['step']}/{o['steps']} | loss {_fmt(r.get('loss'))} | lr {r['lr']:.3e} | "
                    f"grad_norm {_fmt(r['grad_norm'], 3)} | {r['step_time'] * 1000:.1f} ms/it | data {r['data_time'] * 1000:.1f} ms | rss {r['rss_mb']:.1f}MB{_extras(r)}\n")
            if r["step"] in ev: f.write(f"{ts} - trainer - INFO - eval step {r['step']} | val_loss {_fmt(ev[r['step']]['val_loss'])}\n")


def w_tqdm(d, rows, evals, spe, o):
    with open(f"{d}/stdout.txt", "w") as f:
        cur = None
        for r, t in zip(rows, _ts(rows)):
            e = int((r["step"] - 1) // spe); i = (r["step"] - 1) % spe + 1
            if cur is not None and e != cur: f.write("\n")
            cur = e; pct = int(100 * i / spe); bar = "█" * (pct // 10) + " " * (10 - pct // 10)
            it = 1 / max(r["step_time"], 1e-6)
            f.write(f"\rEpoch {e}: {pct:3d}%|{bar}| {i}/{spe} [00:0{min(9, int(i / it))}<00:00, {it:.2f}it/s, loss={_fmt(r.get('loss'), 3)}, lr={r['lr']:.2e}]")
        f.write("\n")


def w_bracket(d, rows, evals, spe, o):
    E = math.ceil(o["steps"] / spe); ev = {v["step"]: v for v in evals}
    with open(f"{d}/output.log", "w") as f:
        for r in rows:
            e = int((r["step"] - 1) // spe) + 1; i = (r["step"] - 1) % spe + 1
            f.write(f"Epoch [{e}/{E}] Step [{i}/{spe}] Loss: {_fmt(r.get('loss'))} LR: {r['lr']:.6f} Time: {r['step_time']:.3f}s{_extras(r)}\n")
            if r["step"] in ev: f.write(f"Epoch [{e}/{E}] Validation Loss: {_fmt(ev[r['step']]['val_loss'])}\n")


def w_kv(d, rows, evals, spe, o, fn="log.txt"):
    ev = {v["step"]: v for v in evals}
    with open(f"{d}/{fn}", "w") as f:
        for r in rows:
            s = f"step={r['step']} loss={_fmt(r.get('loss'), 5)} lr={r['lr']:.3e} gnorm={_fmt(r['grad_norm'], 4)} iter_time={r['step_time']:.4f} data_time={r['data_time']:.4f} mem_alloc_mb={r['rss_mb']:.1f}{_extras(r)}"
            if r["step"] in ev: s += f" val_loss={_fmt(ev[r['step']]['val_loss'], 5)}"
            f.write(s + "\n")


WRITERS = dict(hf=w_hf, lightning=w_lightning, keras_csv=w_keras_csv, keras_console=w_keras_console, tensorboard=w_tb,
               wandb=w_wandb, mlflow=w_mlflow, jsonl=w_jsonl, csv=w_csv, logging=w_logging, tqdm=w_tqdm, bracket=w_bracket, kv=w_kv)
EPOCH_FORMATS = ("keras_csv", "keras_console")
