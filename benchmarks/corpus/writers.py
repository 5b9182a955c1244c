"""Write one trained run's measurements in the exact shape a framework would have logged them.

Each writer takes the result of ``train.train`` and a run folder, writes its files and returns
a *view*: ``{metric: [(x, value), ...]}`` of what the file holds, on the file's own step axis
(HF counts optimizer steps from 1, Keras counts epochs, fairseq counts updates, ...). Labels are
computed from that view, so an onset is always a step as the file tells it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path

T0 = 1764590400.0   # 2025-12-01 12:00 UTC: fixed so the committed files are reproducible in shape


def g6(v):
    """Round to 6 significant digits (compact logs); keep NaN/inf as they are."""
    if v is None:
        return None
    if isinstance(v, float):
        if not math.isfinite(v):
            return v
        return float(f"{v:.6g}")
    return v


def fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return f"{v:.6g}"
    return str(v)


def _csv(path: Path, cols: list[str], rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.write(",".join(cols) + "\n")
        for r in rows:
            f.write(",".join(fmt(r.get(c)) for c in cols) + "\n")


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps({k: (float(v) if k == "_timestamp" else g6(v))
                                for k, v in r.items() if v is not None}) + "\n")


def _evals_by_step(res) -> dict[tuple, dict]:
    """Eval rows keyed by (part, step): appended runs repeat their steps."""
    return {(e.get("part", 0), e["step"]): e for e in res["evals"]}


def _layer_keys(res) -> list[str]:
    """Per-layer metrics (``layer/<module path>/<stat>``) the run recorded."""
    return sorted({k for k in res["steps"][0] if k.startswith("layer/")})


def _k(r) -> tuple:
    return (r.get("part", 0), r["step"])


def _view(res, x_of=lambda s: s, loss_key="loss") -> dict:
    v = {"loss": [(x_of(r["step"]), r[loss_key]) for r in res["steps"]],
         "val_loss": [(x_of(e["step"]), e["val_loss"]) for e in res["evals"]],
         "grad_norm": [(x_of(r["step"]), r["grad_norm"]) for r in res["steps"]],
         "lr": [(x_of(r["step"]), r["lr"]) for r in res["steps"]],
         "step_time_s": [(x_of(r["step"]), r["step_time_s"]) for r in res["steps"]]}
    if any("rss_mb" in r for r in res["steps"]):
        v["rss_mb"] = [(x_of(r["step"]), r["rss_mb"]) for r in res["steps"]]
    return v


# ----------------------------------------------------------------------------- own / generic
def tm_csv(res, d: Path, sp) -> dict:
    """trainmedic's canonical names, one CSV."""
    ev = _evals_by_step(res)
    rows = []
    for r in res["steps"]:
        row = {k: r.get(k) for k in ("step", "loss", "grad_norm", "lr", "step_time_s",
                                     "data_time_s", "rss_mb")}
        if _k(r) in ev:
            row["val_loss"] = ev[_k(r)]["val_loss"]
        rows.append(row)
    cols = ["step", "loss", "grad_norm", "lr", "step_time_s", "data_time_s"]
    if any("rss_mb" in r for r in res["steps"]):
        cols.append("rss_mb")
    if any("loss_scale" in r for r in res["steps"]):
        cols.append("loss_scale")
    layer = _layer_keys(res)
    for row, r in zip(rows, res["steps"], strict=True):
        row.update({k: r[k] for k in layer})
        if "loss_scale" in r:
            row["loss_scale"] = r["loss_scale"]
    _csv(d / "metrics.csv", cols + layer + ["val_loss"], rows)
    return _view(res)


def tm_jsonl(res, d: Path, sp) -> dict:
    """JSON Lines of our own: a row per step, eval rows of their own."""
    ev = _evals_by_step(res)
    rows = []
    for r in res["steps"]:
        rows.append({"step": r["step"], "epoch": r["epoch"], "loss": r["loss"],
                     "grad_norm": r["grad_norm"], "lr": r["lr"],
                     "step_time_s": r["step_time_s"], "data_time_s": r["data_time_s"],
                     "rss_mb": r.get("rss_mb")})
        if _k(r) in ev:
            e = ev[_k(r)]
            rows.append({"step": r["step"], "epoch": r["epoch"], "val_loss": e["val_loss"],
                         "val_acc": e["val_acc"]})
    _jsonl(d / "metrics.jsonl", rows)
    return _view(res)


def units_csv(res, d: Path, sp) -> dict:
    """Hand-written logger with units in the names (ms, GB) and the HF word for lr."""
    ev = _evals_by_step(res)
    rows = []
    for r in res["steps"]:
        row = {"step": r["step"], "train_loss": r["loss"], "grad_norm": r["grad_norm"],
               "learning_rate": r["lr"], "step_time_ms": r["step_time_s"] * 1e3,
               "data_time_ms": r["data_time_s"] * 1e3}
        if "rss_mb" in r:
            row["mem_gb"] = r["rss_mb"] / 1024
        if _k(r) in ev:
            row["val_loss"] = ev[_k(r)]["val_loss"]
        rows.append(row)
    cols = ["step", "train_loss", "grad_norm", "learning_rate", "step_time_ms", "data_time_ms"]
    if any("rss_mb" in r for r in res["steps"]):
        cols.append("mem_gb")
    _csv(d / "train_log.csv", cols + ["val_loss"], rows)
    return _view(res)


def ns_jsonl(res, d: Path, sp) -> dict:
    """Namespaced names (``train/``, ``optim/``, ``time/``, ``sys/``, ``eval/``)."""
    ev = _evals_by_step(res)
    rows = []
    for r in res["steps"]:
        row = {"step": r["step"], "train/loss": r["loss"], "optim/lr": r["lr"],
               "optim/grad_norm": r["grad_norm"], "time/step_time_s": r["step_time_s"],
               "time/data_time_s": r["data_time_s"]}
        if "rss_mb" in r:
            row["sys/rss_mb"] = r["rss_mb"]
        row.update({k: r[k] for k in _layer_keys(res)})
        if _k(r) in ev:
            row["eval/loss"] = ev[_k(r)]["val_loss"]
            row["eval/acc"] = ev[_k(r)]["val_acc"]
        rows.append(row)
    _jsonl(d / "log.jsonl", rows)
    return _view(res)


def rank_csv(res, d: Path, sp) -> dict:
    """Per-rank CSVs, ``metrics.rank0.csv`` and ``metrics.rank1.csv`` (canonical names)."""
    cols = ["step", "loss", "grad_norm", "lr", "step_time_s", "data_time_s", "compute_time_s",
            "comm_time_s"]
    _csv(d / "metrics.rank0.csv", cols, res["steps"])
    _csv(d / "metrics.rank1.csv", cols, res["ranks"][1])
    return _view(res)


# ----------------------------------------------------------------------------- Lightning
def lightning(res, d: Path, sp) -> dict:
    """Lightning CSVLogger: ``lightning_logs/version_0/metrics.csv``; every log call is its own
    row (LearningRateMonitor's ``lr-<Optimizer>`` rows apart from the training rows), columns
    sorted, epoch-end rows for ``train_loss_epoch`` and validation."""
    every = sp.get("log_every", 10)
    opt = {"sgd": "SGD", "sgd_plain": "SGD", "adam": "Adam", "adamw": "AdamW",
           "rmsprop": "RMSprop"}[sp.get("opt", "adam")]
    lr_key = f"lr-{opt}"
    ev = _evals_by_step(res)
    rows = []
    spe = res["steps_per_epoch"]
    ep_losses: list[float] = []
    view = {"loss": [], "val_loss": [], "lr": [], "grad_norm": []}
    for r in res["steps"]:
        s = r["step"]
        ep_losses.append(r["loss"])
        if (s + 1) % every == 0:
            rows.append({lr_key: r["lr"], "step": s})
            row = {"epoch": r["epoch"], "step": s, "train_loss_step": r["loss"],
                   "grad_2.0_norm_total": r["grad_norm"]}
            if "acc" in r:
                row["train_acc_step"] = r["acc"]
            rows.append(row)
            view["loss"].append((s, r["loss"]))
            view["lr"].append((s, r["lr"]))
            view["grad_norm"].append((s, r["grad_norm"]))
        if _k(r) in ev:
            e = ev[_k(r)]
            row = {"epoch": r["epoch"], "step": s, "val_loss": e["val_loss"]}
            if e["val_acc"] is not None:
                row["val_acc"] = e["val_acc"]
            rows.append(row)
            view["val_loss"].append((s, e["val_loss"]))
        if (s + 1) % spe == 0 or s == res["steps"][-1]["step"]:
            if ep_losses:
                rows.append({"epoch": r["epoch"], "step": s,
                             "train_loss_epoch": sum(ep_losses) / len(ep_losses)})
            ep_losses = []
    cols = sorted({k for row in rows for k in row})
    out = d / "lightning_logs" / "version_0"
    _csv(out / "metrics.csv", cols, rows)
    (out / "hparams.yaml").write_text(
        f"lr: {sp.get('lr', 1e-3)}\nbatch_size: {sp.get('batch', 64)}\n"
        f"optimizer: {opt}\nseed: {sp['seed']}\n")
    return view


# ----------------------------------------------------------------------------- W&B
def _wandb_rows(res, sp):
    ev = _evals_by_step(res)
    rows = []
    for r in res["steps"]:
        row = {"_step": r["step"], "_runtime": r["wall_s"],
               "_timestamp": f"{T0 + r['wall_s']:.3f}",
               "train/loss": r["loss"], "train/grad_norm": r["grad_norm"], "train/lr": r["lr"],
               "perf/step_time_ms": r["step_time_s"] * 1e3,
               "perf/data_time_ms": r["data_time_s"] * 1e3, "epoch": r["epoch"]}
        if "rss_mb" in r:
            row["sys/rss_mb"] = r["rss_mb"]
        if "loss_scale" in r:
            row["train/loss_scale"] = r["loss_scale"]
        if _k(r) in ev:
            row["val/loss"] = ev[_k(r)]["val_loss"]
            if ev[_k(r)]["val_acc"] is not None:
                row["val/acc"] = ev[_k(r)]["val_acc"]
        rows.append(row)
    return rows


def wandb_csv(res, d: Path, sp) -> dict:
    """``run.history()`` exported to CSV (``_step``, ``_runtime``, ``_timestamp``, keys)."""
    rows = _wandb_rows(res, sp)
    keys = sorted({k for r in rows for k in r} - {"_step", "_runtime", "_timestamp"})
    _csv(d / "wandb_export.csv", ["_step", "_runtime", "_timestamp"] + keys, rows)
    return _view(res)


def wandb_jsonl(res, d: Path, sp) -> dict:
    """A W&B run folder's ``files/wandb-history.jsonl``."""
    _jsonl(d / "files" / "wandb-history.jsonl", _wandb_rows(res, sp))
    (d / "files" / "wandb-summary.json").write_text(json.dumps(
        {"_step": res["steps"][-1]["step"], "train/loss": g6(res["steps"][-1]["loss"])}))
    return _view(res)


# ----------------------------------------------------------------------------- HF Trainer
def hf_state(res, d: Path, sp) -> dict:
    """HF ``trainer_state.json`` as the Trainer writes it: ``log_history`` every
    ``logging_steps`` with the mean loss since the last log rounded to 4 decimals, the
    pre-clip ``grad_norm`` of the logging step, ``learning_rate`` after the scheduler step,
    NaN/inf losses left out of the mean (``logging_nan_inf_filter=True``), eval rows and the
    closing summary row. Steps count from 1."""
    every = sp.get("log_every", 5)
    spe = res["steps_per_epoch"]
    ev = _evals_by_step(res)
    hist = []
    tr_loss, last = 0.0, 0
    view = {"loss": [], "val_loss": [], "lr": [], "grad_norm": []}
    total_loss = 0.0
    nan_filter = sp.get("nan_filter", True)
    for r in res["steps"]:
        gs = r["step"] + 1
        lv = r["loss"]
        if nan_filter and not math.isfinite(lv):
            tr_loss = tr_loss + tr_loss / (1 + gs - 1 - last)   # the Trainer's own rule
        else:
            tr_loss += lv
        if gs % every == 0:
            loss = round(tr_loss / (gs - last), 4)
            ep = round(gs / spe, 4)
            gn = r["grad_norm"]
            hist.append({"epoch": ep, "grad_norm": g6(gn), "learning_rate": g6(r["lr"]),
                         "loss": loss, "step": gs})
            view["loss"].append((gs, loss))
            view["lr"].append((gs, r["lr"]))
            view["grad_norm"].append((gs, gn))
            total_loss += tr_loss if math.isfinite(tr_loss) else 0.0
            tr_loss, last = 0.0, gs
        if _k(r) in ev:
            e = ev[_k(r)]
            row = {"epoch": round(gs / spe, 4), "eval_loss": g6(e["val_loss"]),
                   "eval_runtime": 0.0412, "eval_samples_per_second": 14563.1,
                   "eval_steps_per_second": 121.4, "step": gs}
            if e["val_acc"] is not None:
                row["eval_accuracy"] = g6(e["val_acc"])
            hist.append(row)
            view["val_loss"].append((gs, e["val_loss"]))
    n = res["steps"][-1]["step"] + 1
    wall = res["steps"][-1]["wall_s"]
    hist.append({"epoch": round(n / spe, 4), "step": n, "total_flos": 123456789.0,
                 "train_loss": g6(total_loss / n), "train_runtime": round(wall, 4),
                 "train_samples_per_second": round(n * sp.get("batch", 64) / wall, 3),
                 "train_steps_per_second": round(n / wall, 3)})
    best = min((e for e in res["evals"] if math.isfinite(e["val_loss"])),
               key=lambda e: e["val_loss"], default=None)
    state = {
        "best_global_step": best["step"] + 1 if best else None,
        "best_metric": g6(best["val_loss"]) if best else None,
        "best_model_checkpoint": f"out/checkpoint-{best['step'] + 1}" if best else None,
        "epoch": round(n / spe, 4), "eval_steps": sp.get("eval_every", 25), "global_step": n,
        "is_hyper_param_search": False, "is_local_process_zero": True,
        "is_world_process_zero": True, "log_history": hist, "logging_steps": every,
        "max_steps": n, "num_input_tokens_seen": 0, "num_train_epochs": math.ceil(n / spe),
        "save_steps": 500, "stateful_callbacks": {"TrainerControl": {"args": {
            "should_epoch_stop": False, "should_evaluate": False, "should_log": False,
            "should_save": True, "should_training_stop": True}, "attributes": {}}},
        "total_flos": 123456789.0, "train_batch_size": sp.get("batch", 64), "trial_name": None,
        "trial_params": None}
    out = d / f"checkpoint-{n}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "trainer_state.json").write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    return view


# ----------------------------------------------------------------------------- TensorBoard
def tensorboard(res, d: Path, sp) -> dict:
    """``torch.utils.tensorboard.SummaryWriter`` event file; two tag habits."""
    from torch.utils.tensorboard import SummaryWriter

    style = sp.get("tb_style", "A")
    tags = ({"loss": "Loss/train", "val": "Loss/val", "lr": "lr", "gn": "grad_norm",
             "t": "time/step_s"} if style == "A" else
            {"loss": "train/loss", "val": "eval/loss", "lr": "train/learning_rate",
             "gn": "train/grad_norm", "t": "perf/step_time_ms"})
    out = d / "tb"
    out.mkdir(parents=True, exist_ok=True)
    w = SummaryWriter(log_dir=str(out), flush_secs=3600)
    ev = _evals_by_step(res)
    for r in res["steps"]:
        s, wt = r["step"], T0 + r["wall_s"]
        w.add_scalar(tags["loss"], r["loss"], s, walltime=wt)
        w.add_scalar(tags["lr"], r["lr"], s, walltime=wt)
        w.add_scalar(tags["gn"], r["grad_norm"], s, walltime=wt)
        st = r["step_time_s"] * (1e3 if style == "B" else 1.0)
        w.add_scalar(tags["t"], st, s, walltime=wt)
        if _k(r) in ev:
            w.add_scalar(tags["val"], ev[_k(r)]["val_loss"], s, walltime=wt)
    w.close()
    for p in out.iterdir():   # a reproducible name (SummaryWriter puts host and time in it)
        if "tfevents" in p.name:
            p.rename(out / "events.out.tfevents.1764590400.trainhost.1234.0")
    return _view(res)


# ----------------------------------------------------------------------------- Keras
def _epochs(res, sp):
    """Per-epoch rows as Keras' ``fit`` reports them: the mean training loss (and accuracy)
    over the epoch's batches, validation at the epoch's end."""
    ev = {(e.get("part", 0), e["epoch"]): e for e in res["evals"]}
    out = []
    groups: list[list] = []
    for r in res["steps"]:
        if not groups or (groups[-1][0].get("part", 0), groups[-1][0]["epoch"]) != \
                (r.get("part", 0), r["epoch"]):
            groups.append([])
        groups[-1].append(r)
    for rs in groups:
        ep = rs[0]["epoch"]
        key = (rs[0].get("part", 0), ep)
        row = {"epoch": ep, "loss": sum(r["loss"] for r in rs) / len(rs),
               "learning_rate": rs[-1]["lr"]}
        if "acc" in rs[0]:
            row["accuracy"] = sum(r["acc"] for r in rs) / len(rs)
        if key in ev:
            row["val_loss"] = ev[key]["val_loss"]
            if ev[key]["val_acc"] is not None:
                row["val_accuracy"] = ev[key]["val_acc"]
        out.append(row)
    return out


def _epoch_view(rows):
    return {"loss": [(r["epoch"], r["loss"]) for r in rows],
            "val_loss": [(r["epoch"], r["val_loss"]) for r in rows if "val_loss" in r],
            "lr": [(r["epoch"], r["learning_rate"]) for r in rows]}


def keras_csv(res, d: Path, sp) -> dict:
    """``keras.callbacks.CSVLogger``: ``epoch`` then the sorted keys."""
    rows = _epochs(res, sp)
    if not sp.get("keras_lr", True):
        for r in rows:
            r.pop("learning_rate")
    keys = sorted({k for r in rows for k in r} - {"epoch"})
    _csv(d / "training.log" if sp.get("keras_name") == "log" else d / "history.csv",
         ["epoch"] + keys, rows)
    return _epoch_view([{**r, "learning_rate": r.get("learning_rate", 0)} for r in rows])


def keras_json(res, d: Path, sp) -> dict:
    """``json.dump(model.fit(...).history)``: an object of lists, one entry per epoch."""
    rows = _epochs(res, sp)
    keys = sorted({k for r in rows for k in r} - {"epoch"})
    hist = {k: [g6(r.get(k)) for r in rows] for k in keys}
    (d / "history.json").write_text(json.dumps(hist))
    return _epoch_view(rows)


# ----------------------------------------------------------------------------- fairseq
def fairseq(res, d: Path, sp) -> dict:
    """fairseq-train's log (hydra era): ``train_inner`` lines every ``log_interval`` updates,
    then per-epoch ``valid`` and ``train`` summaries in the ``| key value |`` shape. Losses are
    in base 2, as fairseq reports them."""
    every = sp.get("log_every", 10)
    spe = res["steps_per_epoch"]
    n_ep = math.ceil(len(res["steps"]) / spe)
    ev = _evals_by_step(res)
    ln2 = math.log(2)
    lines = (["| [en] dictionary: 64 types",
              "| model transformer_lm, criterion CrossEntropyCriterion",
              "| num. model params: 41889 (num. trained: 41889)"]
             if sp.get("fairseq_style") == "old" else
             ["2025-12-01 12:00:00 | INFO | fairseq_cli.train | task: LanguageModelingTask",
              "2025-12-01 12:00:00 | INFO | fairseq_cli.train | num. shared model params: "
              "41,889 (num. trained: 41,889)"])
    view = {"loss": [], "val_loss": [], "lr": [], "grad_norm": []}
    acc, ep_acc = [], []

    def ts(r):
        import time as _t
        return _t.strftime("%Y-%m-%d %H:%M:%S", _t.gmtime(T0 + r["wall_s"]))

    def f(v, nd=3):
        return "nan" if not math.isfinite(v) else f"{v:.{nd}f}"

    old = sp.get("fairseq_style") == "old"   # fairseq <= 0.9: no timestamps, "| " prefixes

    def pre(r, kind):
        return "|" if old else f"{ts(r)} | INFO | {kind} |"

    for r in res["steps"]:
        u = r["step"] + 1
        acc.append(r)
        ep_acc.append(r)
        ep = r["epoch"] + 1
        if u % every == 0:
            loss = sum(x["loss"] for x in acc) / len(acc) / ln2
            t = sum(x["step_time_s"] for x in acc)
            wps = 512 * len(acc) / t
            lines.append(
                f"{pre(r, 'train_inner')} epoch {ep:03d}:{(u - 1) % spe + 1:>7d} / {spe}"
                f" loss={f(loss)}, nll_loss={f(loss)}, ppl={f(2 ** min(loss, 1000), 2)}, "
                f"wps={wps:.1f}, ups={len(acc) / t:.2f}, wpb=512, bsz=16, num_updates={u}, "
                f"lr={r['lr']:.6g}, gnorm={f(r['grad_norm'])}, train_wall={t:.0f}, gb_free=0, "
                f"wall={r['wall_s']:.0f}")
            view["loss"].append((u, loss))
            view["lr"].append((u, r["lr"]))
            view["grad_norm"].append((u, r["grad_norm"]))
            acc = []
        if _k(r) in ev:
            vl = ev[_k(r)]["val_loss"] / ln2
            lines.append(
                f"{pre(r, 'valid')} epoch {ep:03d} | valid on 'valid' subset | loss "
                f"{f(vl)} | nll_loss {f(vl)} | ppl {f(2 ** min(vl, 1000), 2)} | wps 31250.4 | "
                f"wpb 512 | bsz 16 | num_updates {u}")
            view["val_loss"].append((u, vl))
        if u % spe == 0 or r is res["steps"][-1]:
            loss = sum(x["loss"] for x in ep_acc) / len(ep_acc) / ln2
            lines.append(
                f"{pre(r, 'train')} epoch {ep:03d} | loss {f(loss)} | nll_loss {f(loss)} |"
                f" ppl {f(2 ** min(loss, 1000), 2)} | wps 25000.1 | ups 48.83 | wpb 512 | bsz 16 |"
                f" num_updates {u} | lr {r['lr']:.6g} | gnorm {f(r['grad_norm'])} | train_wall "
                f"{sum(x['step_time_s'] for x in ep_acc):.0f} | gb_free 0 | wall {r['wall_s']:.0f}")
            if not old:
                lines.append(f"{ts(r)} | INFO | fairseq_cli.train | end of epoch {ep} "
                             f"(average epoch stats below)")
            ep_acc = []
    lines.append(f"| done training in {res['steps'][-1]['wall_s']:.1f} seconds" if old else
                 f"2025-12-01 12:05:00 | INFO | fairseq_cli.train | done training in "
                 f"{res['steps'][-1]['wall_s']:.1f} seconds")
    del n_ep
    (d / "train.log").write_text("\n".join(lines) + "\n")
    return view


# ----------------------------------------------------------------------------- print() logs
def print_log(res, d: Path, sp) -> dict:
    """The PyTorch-tutorial habit: ``print(f"Epoch [{e}/{E}] Step [{i}/{N}] Loss: ...")``
    redirected to a file, with an eval line per evaluation."""
    every = sp.get("log_every", 5)
    n = len(res["steps"])
    spe = res["steps_per_epoch"]
    E = math.ceil(n / spe)
    ev = _evals_by_step(res)
    lines = ["Using device: cpu", f"Training for {E} epochs ({n} steps)"]
    view = {"loss": [], "val_loss": [], "lr": []}
    for r in res["steps"]:
        s = r["step"] + 1
        if s % every == 0:
            lines.append(f"Epoch [{r['epoch'] + 1}/{E}] Step [{s}/{n}] Loss: {r['loss']:.4f} "
                         f"LR: {r['lr']:.6f} Time: {r['step_time_s']:.3f}s")
            view["loss"].append((s, float(f"{r['loss']:.4f}")))
            view["lr"].append((s, r["lr"]))
        if _k(r) in ev:
            e = ev[_k(r)]
            acc = f" Val Acc: {e['val_acc']:.4f}" if e["val_acc"] is not None else ""
            lines.append(f"Epoch [{r['epoch'] + 1}/{E}] Val Loss: {e['val_loss']:.4f}{acc}")
            view["val_loss"].append((s, e["val_loss"]))
    lines.append("Finished Training")
    (d / "train.log").write_text("\n".join(lines) + "\n")
    return view


# ----------------------------------------------------------------------------- MLflow
def mlflow(res, d: Path, sp) -> dict:
    """An MLflow file store: ``mlruns/0/<run id>/metrics/<key>`` lines ``timestamp value step``."""
    run = d / "mlruns" / "0" / "3f2a9c1d0b7e4e2f9a1c5d6e7f8a9b0c"
    m = run / "metrics"
    m.mkdir(parents=True, exist_ok=True)
    keys = {"train_loss": "loss", "grad_norm": "grad_norm", "lr": "lr"}
    for key, src in keys.items():
        with open(m / key, "w") as f:
            for r in res["steps"]:
                f.write(f"{int((T0 + r['wall_s']) * 1000)} {fmt(r[src])} {r['step']}\n")
    with open(m / "val_loss", "w") as f:
        for e in res["evals"]:
            f.write(f"{int(T0 * 1000 + e['step'])} {fmt(e['val_loss'])} {e['step']}\n")
    (run / "meta.yaml").write_text(
        "artifact_uri: file:///tmp/mlruns/0/3f2a9c1d0b7e4e2f9a1c5d6e7f8a9b0c/artifacts\n"
        "end_time: 1764590460000\nentry_point_name: ''\nexperiment_id: '0'\n"
        "lifecycle_stage: active\nrun_id: 3f2a9c1d0b7e4e2f9a1c5d6e7f8a9b0c\nrun_name: corpus\n"
        "source_name: ''\nsource_type: 4\nsource_version: ''\nstart_time: 1764590400000\n"
        "status: 3\ntags: []\nuser_id: trainer\n")
    (run / "params").mkdir(exist_ok=True)
    (run / "params" / "lr").write_text(str(sp.get("lr", 1e-3)))
    (d / "mlruns" / "0" / "meta.yaml").write_text(
        "artifact_location: file:///tmp/mlruns/0\nexperiment_id: '0'\n"
        "lifecycle_stage: active\nname: Default\n")
    return _view(res)


WRITERS: dict[str, Callable] = {
    "tm_csv": tm_csv, "tm_jsonl": tm_jsonl, "units_csv": units_csv, "ns_jsonl": ns_jsonl,
    "rank_csv": rank_csv, "lightning": lightning, "wandb_csv": wandb_csv,
    "wandb_jsonl": wandb_jsonl, "hf": hf_state, "tensorboard": tensorboard,
    "keras_csv": keras_csv, "keras_json": keras_json, "fairseq": fairseq,
    "print_log": print_log, "mlflow": mlflow,
}

STEP_LEVEL = {"tm_csv", "tm_jsonl", "units_csv", "ns_jsonl", "rank_csv", "wandb_csv",
              "wandb_jsonl", "tensorboard", "mlflow"}
"""Formats that keep every step (events and timings survive); the others subsample or
average (HF, Lightning, fairseq, print logs) or keep one row per epoch (Keras)."""

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
