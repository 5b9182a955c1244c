"""One writer per log format. Each writes files in the on-disk layout of the imitated tool and returns the
series exactly as logged (after the tool's aggregation, rounding, unit conversion and NaN handling):
dict(x, loss, val_x, val, lr, grad_norm, step_time, data_time, mem, scale, dead, gn_first, gn_last, ranks,
masked_x, unit)."""
import datetime
import json
import math
import os

LOSS_WORD = {"convmixer": "ce", "tab": None, "sgns": "neg_sampling_loss", "bpr": "bpr", "vqvae": "total_loss",
             "flow": "nll", "ssm": "lm_loss", "s2s": "xent", "mdn": "nll"}


def loss_word(spec):
    if spec["family"] == "tab":
        return "mse" if spec.get("task", "reg") == "reg" else "ce"
    return LOSS_WORD[spec["family"]]


def g6(v):
    if v is None:
        return ""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    return f"{v:.6g}"


def _mean(v):
    v = [a for a in v if a is not None]
    return sum(v) / len(v) if v else None


def windows(rec, every, mode):
    """Group the per-step points into logging windows. mode 'mean' (window mean of the loss) or 'last'
    (the current batch). A window closes at steps divisible by `every`, at a crash, and at the end."""
    out, cur = [], []
    pts = rec["points"]
    for i, p in enumerate(pts):
        cur.append(p)
        if p["step"] % every == 0 or p.get("crash_after") or i == len(pts) - 1:
            last = cur[-1]
            w = dict(step=last["step"], epoch=last["epoch"], lr=last["lr"], wall=last["wall"], rss_mb=last["rss_mb"],
                     n=len(cur))
            w["loss"] = _mean([c["loss"] for c in cur]) if mode == "mean" else last["loss"]
            w["grad_norm"] = _mean([c["grad_norm"] for c in cur]) if mode == "mean" else last["grad_norm"]
            w["step_time_s"] = _mean([c["step_time_s"] for c in cur])
            w["data_time_s"] = _mean([c["data_time_s"] for c in cur])
            for k in ("loss_scale", "dead", "gn_first", "gn_last", "recon", "vq"):
                if k in last:
                    w[k] = last[k]
            w["skipped"] = sum(1 for c in cur if c.get("skipped"))
            w["pts"] = cur
            if "ranks" in last:
                w["ranks"] = [_mean([c["ranks"][r] for c in cur]) for r in (0, 1)]
            out.append(w)
            cur = []
    return out


class Logged:
    def __init__(self, unit):
        self.d = dict(x=[], loss=[], val_x=[], val=[], lr=[], grad_norm=[], step_time=[], data_time=[], mem=[],
                      scale=[], dead=[], gn_first=[], gn_last=[], ranks={0: [], 1: []}, masked_x=[], unit=unit,
                      xs={})

    def add(self, key, x, v):
        if v is None:
            return
        self.d[key].append(v)
        self.d["xs"].setdefault(key, []).append(x)
        if key == "loss":
            self.d["x"].append(x)
        if key == "val":
            self.d["val_x"].append(x)


def mask_loss(spec, v, state):
    """NaN handling of the logger. Returns (value_to_write or None to drop the line, masked?)."""
    if v is not None and not math.isfinite(v) and spec.get("mask"):
        m = spec["mask"]
        if m == "prev":
            return state.get("prev", 0.0), True       # BUG nan_masked: the logger repeats the last finite value
        if m == "zero":
            return 0.0, True                          # BUG nan_masked: the logger writes 0 for NaN
        if m == "skip":
            return None, True                         # BUG nan_masked: `if math.isfinite(loss): log(...)`
    if v is not None and math.isfinite(v):
        state["prev"] = v
    return v, False


def _ts(w):
    return datetime.datetime.fromtimestamp(w, datetime.timezone.utc)


def _evals_by_step(rec):
    return dict(rec["evals"])


# ---------------------------------------------------------------------------------------------- TensorBoard
def w_tb(d, spec, rec):
    from torch.utils.tensorboard import SummaryWriter
    L = Logged("global step (TensorBoard event step)")
    sw = SummaryWriter(log_dir=os.path.join(d, "tb_logs", "version_0"))
    ev = _evals_by_step(rec)
    st = {}
    for w in windows(rec, spec["log_every"], "last"):
        s = w["step"]
        v, masked = mask_loss(spec, w["loss"], st)
        if masked:
            L.d["masked_x"].append(s)
        if v is not None:
            sw.add_scalar("Loss/train", v, s, walltime=w["wall"])
            L.add("loss", s, v)
        sw.add_scalar("LR/group0", w["lr"], s, walltime=w["wall"]); L.add("lr", s, w["lr"])
        sw.add_scalar("Grad/global_norm", w["grad_norm"], s, walltime=w["wall"]); L.add("grad_norm", s, w["grad_norm"])
        if spec.get("log_time"):
            sw.add_scalar("Perf/step_time_ms", w["step_time_s"] * 1e3, s, walltime=w["wall"])
            sw.add_scalar("Perf/data_time_ms", w["data_time_s"] * 1e3, s, walltime=w["wall"])
            L.add("step_time", s, w["step_time_s"]); L.add("data_time", s, w["data_time_s"])
        if spec.get("log_mem"):
            sw.add_scalar("System/rss_mb", w["rss_mb"], s, walltime=w["wall"]); L.add("mem", s, w["rss_mb"])
        if "loss_scale" in w:
            sw.add_scalar("AMP/loss_scale", w["loss_scale"], s, walltime=w["wall"]); L.add("scale", s, w["loss_scale"])
        if "dead" in w:
            sw.add_scalar("Activations/dead_relu_frac", w["dead"], s, walltime=w["wall"]); L.add("dead", s, w["dead"])
        if "gn_first" in w:
            sw.add_scalar("Grad/layer_first", w["gn_first"], s, walltime=w["wall"])
            sw.add_scalar("Grad/layer_last", w["gn_last"], s, walltime=w["wall"])
            L.add("gn_first", s, w["gn_first"]); L.add("gn_last", s, w["gn_last"])
        for p in w["pts"]:
            if p["step"] in ev:
                sw.add_scalar("Loss/val", ev[p["step"]], p["step"], walltime=p["wall"]); L.add("val", p["step"], ev[p["step"]])
    sw.close()
    return L.d


# ---------------------------------------------------------------------------------------------- DVCLive
def w_dvclive(d, spec, rec):
    L = Logged("step (DVCLive `step` column; = global optimizer step)")
    base = os.path.join(d, "dvclive", "plots", "metrics")
    word = loss_word(spec)
    files = {}

    def put(name, s, v, wall):
        p = os.path.join(base, name + ".tsv")
        if p not in files:
            os.makedirs(os.path.dirname(p), exist_ok=True)
            files[p] = open(p, "w")
            files[p].write(f"timestamp\tstep\t{os.path.basename(name)}\n")
        files[p].write(f"{int(wall * 1000)}\t{s}\t{g6(v)}\n")
    ev = _evals_by_step(rec)
    st = {}
    last = {}
    for w in windows(rec, spec["log_every"], "mean"):
        s = w["step"]
        v, masked = mask_loss(spec, w["loss"], st)
        if masked:
            L.d["masked_x"].append(s)
        if v is not None:
            put(f"train/{word}", s, v, w["wall"]); L.add("loss", s, float(g6(v)))
            last[f"train/{word}"] = v
        put("lr", s, w["lr"], w["wall"]); L.add("lr", s, w["lr"])
        if spec.get("log_time"):
            put("perf/step_time_ms", s, w["step_time_s"] * 1e3, w["wall"]); L.add("step_time", s, w["step_time_s"])
            put("perf/data_time_ms", s, w["data_time_s"] * 1e3, w["wall"]); L.add("data_time", s, w["data_time_s"])
        if spec.get("log_gn"):
            put("train/grad_norm", s, w["grad_norm"], w["wall"]); L.add("grad_norm", s, w["grad_norm"])
        if spec.get("log_mem"):
            put("system/mem_gb", s, w["rss_mb"] / 1024, w["wall"]); L.add("mem", s, round(w["rss_mb"] / 1024, 6) * 1024)
        for p in w["pts"]:
            if p["step"] in ev:
                put(f"eval/{word}", p["step"], ev[p["step"]], p["wall"]); L.add("val", p["step"], ev[p["step"]])
                last[f"eval/{word}"] = ev[p["step"]]
    for f in files.values():
        f.close()
    with open(os.path.join(d, "dvclive", "metrics.json"), "w") as f:
        json.dump({"step": rec["points"][-1]["step"], **{k: (v if math.isfinite(v) else None) for k, v in last.items()}}, f, indent=4)
    with open(os.path.join(d, "dvclive", "params.yaml"), "w") as f:
        f.write(f"lr: {spec['lr']}\noptimizer: {spec['opt']}\nbatch_size: {spec['bs']}\nsteps: {spec['steps']}\n")
    return L.d


# ---------------------------------------------------------------------------------------------- Ray Tune
def w_raytune(d, spec, rec):
    L = Logged("training_iteration (1 report = %d optimizer steps)" % spec["log_every"])
    ev = _evals_by_step(rec)
    t0 = rec["points"][0]["wall"] - rec["points"][0]["step_time_s"]
    rows = []
    st = {}
    last_val = None
    for it, w in enumerate(windows(rec, spec["log_every"], "mean"), 1):
        v, masked = mask_loss(spec, w["loss"], st)
        if masked:
            L.d["masked_x"].append(it)
        for p in w["pts"]:
            if p["step"] in ev:
                last_val = ev[p["step"]]
                L.add("val", it, last_val)
        r = {"train_loss": v, "val_loss": last_val, "lr": w["lr"],
             "time_this_iter_s": sum(p["step_time_s"] for p in w["pts"]),
             "done": False, "training_iteration": it, "trial_id": "a1b2c_00000", "date": _ts(w["wall"]).strftime("%Y-%m-%d_%H-%M-%S"),
             "timestamp": int(w["wall"]), "time_total_s": w["wall"] - t0, "pid": 4242, "hostname": "node-0",
             "node_ip": "10.0.0.2", "time_since_restore": w["wall"] - t0, "iterations_since_restore": it}
        if spec.get("log_time"):
            r["data_time_s"] = w["data_time_s"]
            L.add("data_time", it, w["data_time_s"]); L.add("step_time", it, w["step_time_s"])
        rows.append(r)
        if v is not None:
            L.add("loss", it, v)
        L.add("lr", it, w["lr"])
    rows[-1]["done"] = True
    cols = list(rows[0].keys())
    with open(os.path.join(d, "progress.csv"), "w") as f:
        f.write(",".join(cols) + "\n")
        for r in rows:
            f.write(",".join("" if r[c] is None else (g6(r[c]) if isinstance(r[c], float) else str(r[c])) for c in cols) + "\n")
    with open(os.path.join(d, "result.json"), "w") as f:
        cfgd = {"lr": spec["lr"], "optimizer": spec["opt"], "batch_size": spec["bs"]}
        for r in rows:
            rr = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
            rr["config"] = cfgd
            f.write(json.dumps(rr) + "\n")
    with open(os.path.join(d, "params.json"), "w") as f:
        json.dump({"lr": spec["lr"], "optimizer": spec["opt"], "batch_size": spec["bs"]}, f, indent=2)
    return L.d


# ---------------------------------------------------------------------------------------------- Sacred
def w_sacred(d, spec, rec):
    L = Logged("step (Sacred `steps`; = global optimizer step)")
    word = loss_word(spec)
    M = {}

    def put(name, s, v, wall):
        m = M.setdefault(name, {"steps": [], "timestamps": [], "values": []})
        m["steps"].append(s)
        m["timestamps"].append(_ts(wall).strftime("%Y-%m-%dT%H:%M:%S.%f"))
        m["values"].append(v if math.isfinite(v) else None if not spec.get("nan_as_str") else str(v))
    ev = _evals_by_step(rec)
    st = {}
    for w in windows(rec, spec["log_every"], "mean"):
        s = w["step"]
        v, masked = mask_loss(spec, w["loss"], st)
        if masked:
            L.d["masked_x"].append(s)
        if v is not None:
            put(f"training.{word}", s, v, w["wall"]); L.add("loss", s, v)
        put("lr", s, w["lr"], w["wall"]); L.add("lr", s, w["lr"])
        if spec.get("log_gn"):
            put("grad_norm", s, w["grad_norm"], w["wall"]); L.add("grad_norm", s, w["grad_norm"])
        if spec.get("log_time"):
            put("time.step_s", s, w["step_time_s"], w["wall"]); L.add("step_time", s, w["step_time_s"])
            put("time.data_s", s, w["data_time_s"], w["wall"]); L.add("data_time", s, w["data_time_s"])
        if "loss_scale" in w:
            put("amp.loss_scale", s, w["loss_scale"], w["wall"]); L.add("scale", s, w["loss_scale"])
        for p in w["pts"]:
            if p["step"] in ev:
                put(f"validation.{word}", p["step"], ev[p["step"]], p["wall"]); L.add("val", p["step"], ev[p["step"]])
    os.makedirs(os.path.join(d, "sacred", "1"), exist_ok=True)
    with open(os.path.join(d, "sacred", "1", "metrics.json"), "w") as f:
        json.dump(M, f, indent=2)
    with open(os.path.join(d, "sacred", "1", "config.json"), "w") as f:
        json.dump({"lr": spec["lr"], "optimizer": spec["opt"], "batch_size": spec["bs"], "steps": spec["steps"], "seed": spec["seed"]}, f, indent=2)
    with open(os.path.join(d, "sacred", "1", "run.json"), "w") as f:
        json.dump({"status": "COMPLETED", "experiment": {"name": spec["family"]}, "command": "main",
                   "start_time": _ts(rec["points"][0]["wall"]).isoformat(), "stop_time": _ts(rec["points"][-1]["wall"]).isoformat()}, f, indent=2)
    return L.d


# ---------------------------------------------------------------------------------------------- Composer console
def w_composer(d, spec, rec):
    L = Logged("global batch N in `[batch=N/total]` (1-based)")
    ev = _evals_by_step(rec)
    st = {}
    S = spec["steps"]
    lines = []
    opt_name = {"adamw": "DecoupledAdamW", "sgd": "DecoupledSGDW", "momentum": "DecoupledSGDW"}.get(spec["opt"], spec["opt"].capitalize())
    for w in windows(rec, spec["log_every"], "last"):
        s = w["step"]
        v, masked = mask_loss(spec, w["loss"], st)
        if masked:
            L.d["masked_x"].append(s)
        lines.append(f"[epoch={w['epoch'] + 1}][batch={s}/{S}]:")
        lines.append(f"\t Train time/epoch: {w['epoch']}")
        lines.append(f"\t Train time/batch: {s - 1}")
        lines.append(f"\t Train time/sample: {(s - 1) * spec['bs']}")
        if v is not None:
            lines.append(f"\t Train loss/train/total: {v:.4f}"); L.add("loss", s, round(v, 4) if math.isfinite(v) else v)
        lines.append(f"\t Train lr-{opt_name}/group0: {w['lr']:.4e}"); L.add("lr", s, float(f"{w['lr']:.4e}"))
        if spec.get("log_gn"):
            lines.append(f"\t Train l2_norm/grad/model: {w['grad_norm']:.4f}"); L.add("grad_norm", s, w["grad_norm"])
        if spec.get("log_time"):
            lines.append(f"\t Train throughput/batches_per_sec: {1 / w['step_time_s']:.4f}")
            L.add("step_time", s, w["step_time_s"])
        for p in w["pts"]:
            if p["step"] in ev:
                lines.append(f"[Eval batch=4/4] Eval on eval data")
                lines.append(f"[epoch={w['epoch'] + 1}][batch={p['step']}/{S}]:")
                lines.append(f"\t Eval metrics/eval/CrossEntropy: {ev[p['step']]:.4f}")
                L.add("val", p["step"], ev[p["step"]])
    with open(os.path.join(d, "composer_stdout.txt"), "w") as f:
        f.write("******************************\nConfig:\nnum_nodes: 1\nrank_zero_seed: %d\n******************************\n" % spec["seed"])
        f.write("\n".join(lines) + "\n")
    return L.d


# ---------------------------------------------------------------------------------------------- torchtune
def w_torchtune(d, spec, rec):
    L = Logged("Step N (1-based optimizer step)")
    st = {}
    lines = []
    for w in windows(rec, spec["log_every"], "last"):
        s = w["step"]
        v, masked = mask_loss(spec, w["loss"], st)
        if masked:
            L.d["masked_x"].append(s)
        parts = []
        if v is not None:
            parts.append(f"loss:{v}"); L.add("loss", s, v)
        parts.append(f"lr:{w['lr']}"); L.add("lr", s, w["lr"])
        tps = spec["bs"] * 32 / w["step_time_s"]
        parts.append(f"tokens_per_second_per_gpu:{tps}")
        if spec.get("log_time"):
            L.add("step_time", s, w["step_time_s"])
        if spec.get("log_gn"):
            parts.append(f"grad_norm:{w['grad_norm']}"); L.add("grad_norm", s, w["grad_norm"])
        lines.append(f"Step {s} | " + " ".join(parts))
    os.makedirs(os.path.join(d, "logs"), exist_ok=True)
    with open(os.path.join(d, "logs", "log_%d.txt" % int(rec["points"][0]["wall"])), "w") as f:
        f.write("\n".join(lines) + "\n")
    return L.d


# ---------------------------------------------------------------------------------------------- HF console (tqdm + dicts)
def w_hfconsole(d, spec, rec):
    L = Logged("step n from the progress bar `n/total` before each dict line")
    ev = _evals_by_step(rec)
    S = spec["steps"]
    out = []
    spe = rec["spe"]
    st = {}
    for w in windows(rec, spec["log_every"], "mean"):
        s = w["step"]
        pct = int(100 * s / S)
        out.append(f"\r {pct:3d}%|{'█' * (pct // 10):10s}| {s}/{S} [00:{s // 60:02d}<00:00, {1 / max(w['step_time_s'], 1e-6):.2f}it/s]")
        v = w["loss"]
        masked = False
        if v is not None and not math.isfinite(v):
            # HF's logging_nan_inf_filter: a NaN/inf step is replaced by the mean of the finite ones
            fin = [p["loss"] for p in w["pts"] if math.isfinite(p["loss"])]
            if spec.get("mask"):
                v = sum(fin) / len(fin) if fin else 0.0
                masked = True
        if masked:
            L.d["masked_x"].append(s)
        ep = round(s / spe, 2)
        out.append("\n" + str({"loss": round(v, 4) if math.isfinite(v) else float("nan"), "grad_norm": round(w["grad_norm"], 4) if math.isfinite(w["grad_norm"]) else float("nan"),
                               "learning_rate": w["lr"], "epoch": ep}) + "\n")
        L.add("loss", s, round(v, 4) if math.isfinite(v) else v); L.add("lr", s, w["lr"]); L.add("grad_norm", s, w["grad_norm"])
        for p in w["pts"]:
            if p["step"] in ev:
                out.append("\n" + str({"eval_loss": ev[p["step"]], "eval_runtime": 0.21, "eval_samples_per_second": 2400.0,
                                       "eval_steps_per_second": 9.5, "epoch": round(p["step"] / spe, 2)}) + "\n")
                L.add("val", p["step"], ev[p["step"]])
    out.append("\n{'train_runtime': %.2f, 'train_samples_per_second': 1000.0, 'train_steps_per_second': 30.0, 'train_loss': %s, 'epoch': %.2f}\n"
               % (rec["points"][-1]["wall"] - rec["points"][0]["wall"], g6(_mean([p["loss"] for p in rec["points"]])), S / spe))
    with open(os.path.join(d, "train.log"), "w") as f:
        f.write("".join(out))
    return L.d


# ---------------------------------------------------------------------------------------------- Catalyst (per epoch)
def w_catalyst(d, spec, rec):
    L = Logged("epoch (1-based, `train (E/N)`)")
    ev = _evals_by_step(rec)
    spe = rec["spe"]
    E = math.ceil(spec["steps"] / spe)
    lines = []
    st = {}
    for w in windows(dict(points=rec["points"]), spe, "mean"):
        e = w["epoch"] + 1
        v, masked = mask_loss(spec, w["loss"], st)
        if masked:
            L.d["masked_x"].append(e)
        lines.append(f"{e}/{E} * Epoch ({e}) train: 100% {w['n']}/{w['n']} [00:0{int(w['n'] * w['step_time_s']) % 10}<00:00, {1 / w['step_time_s']:.2f}it/s, loss={g6(w['pts'][-1]['loss'])}]")
        parts = [f"loss: {g6(v)}" if v is not None else None, f"lr: {w['lr']:.6g}", f"momentum: 0.9",
                 f"_timer/_fps: {spec['bs'] / w['step_time_s']:.4f}", f"_timer/batch_time: {w['step_time_s']:.6f}",
                 f"_timer/data_time: {w['data_time_s']:.6f}", f"_timer/model_time: {w['step_time_s'] - w['data_time_s']:.6f}"]
        lines.append(f"train ({e}/{E}) " + " | ".join(p for p in parts if p))
        if v is not None:
            L.add("loss", e, float(g6(v)))
        L.add("lr", e, w["lr"]); L.add("step_time", e, w["step_time_s"]); L.add("data_time", e, w["data_time_s"])
        vs = [ev[p["step"]] for p in w["pts"] if p["step"] in ev]
        if vs:
            lines.append(f"{e}/{E} * Epoch ({e}) valid: 100% 2/2 [00:00<00:00, 80.00it/s, loss={g6(vs[-1])}]")
            lines.append(f"valid ({e}/{E}) loss: {g6(vs[-1])} | _timer/_fps: 9000.0 | _timer/batch_time: 0.001")
            L.add("val", e, float(g6(vs[-1])))
        lines.append(f"* Epoch ({e}/{E}) ")
    with open(os.path.join(d, "catalyst_train.log"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return L.d


# ---------------------------------------------------------------------------------------------- DeepSpeed console
def w_deepspeed(d, spec, rec):
    L = Logged("step / global_step (1-based optimizer step)")
    lines = []
    st = {}
    t0 = rec["points"][0]["wall"]
    mom = "[(0.9, 0.999)]" if "adam" in spec["opt"] else "[0.9]"
    skipped_tot = 0
    prev_scale = 65536.0
    for w in windows(rec, spec["log_every"], "last"):
        s = w["step"]
        ts = _ts(w["wall"]).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
        for p in w["pts"]:
            if p.get("skipped"):
                skipped_tot += 1
                pts_ = _ts(p["wall"]).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
                lines.append(f"[{pts_}] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. "
                             f"Attempted loss scale: {int(prev_scale) if prev_scale >= 1 else prev_scale}, reducing to {int(p['loss_scale']) if p['loss_scale'] >= 1 else p['loss_scale']}")
            if "loss_scale" in p:
                prev_scale = p["loss_scale"]
        v, masked = mask_loss(spec, w["loss"], st)
        if masked:
            L.d["masked_x"].append(s)
        lines.append(f"[{ts}] [INFO] [logging.py:96:log_dist] [Rank 0] step={s}, skipped={skipped_tot}, lr=[{w['lr']:.6g}], mom={mom}")
        sps = spec["bs"] / w["step_time_s"]
        lines.append(f"[{ts}] [INFO] [timer.py:264:stop] epoch={w['epoch']}/micro_step={s}/global_step={s}, "
                     f"RunningAvgSamplesPerSec={sps:.4f}, CurrSamplesPerSec={sps:.4f}, MemAllocated=0.0GB, MaxMemAllocated=0.0GB")
        if v is not None:
            lines.append(f"steps: {s} loss: {v:.4f} iter time (s): {w['step_time_s']:.3f} samples/sec: {sps:.3f}")
            L.add("loss", s, round(v, 4) if math.isfinite(v) else v)
        L.add("lr", s, w["lr"]); L.add("step_time", s, w["step_time_s"])
        if "loss_scale" in w:
            L.add("scale", s, w["loss_scale"])
    with open(os.path.join(d, "ds_train.log"), "w") as f:
        f.write(f"[{_ts(t0).strftime('%Y-%m-%d %H:%M:%S,%f')[:-3]}] [INFO] [config.py:1000:print] DeepSpeedEngine configuration:\n")
        f.write(f"[{_ts(t0).strftime('%Y-%m-%d %H:%M:%S,%f')[:-3]}] [INFO] [config.py:1004:print]   fp16_enabled ................. {bool(spec.get('scaler'))}\n")
        f.write("\n".join(lines) + "\n")
    return L.d


# ---------------------------------------------------------------------------------------------- CSV, cumulative time
def w_csvcum(d, spec, rec):
    L = Logged("it (1-based optimizer step); elapsed_s is cumulative wall time")
    ev = _evals_by_step(rec)
    word = loss_word(spec)
    t0 = rec["points"][0]["wall"] - rec["points"][0]["step_time_s"]
    st = {}
    rows = [f"it,epoch,{word},val_{word},lr,grad_norm,elapsed_s,rss_gb"]
    for w in windows(rec, spec["log_every"], "mean"):
        s = w["step"]
        v, masked = mask_loss(spec, w["loss"], st)
        if masked:
            L.d["masked_x"].append(s)
        if v is None:
            continue
        vals = [ev[p["step"]] for p in w["pts"] if p["step"] in ev]
        rows.append(",".join([str(s), str(w["epoch"]), g6(v), g6(vals[-1]) if vals else "", g6(w["lr"]), g6(w["grad_norm"]),
                              f"{w['wall'] - t0:.3f}", f"{w['rss_mb'] / 1024:.4f}"]))
        L.add("loss", s, float(g6(v))); L.add("lr", s, w["lr"]); L.add("grad_norm", s, w["grad_norm"])
        L.add("step_time", s, w["step_time_s"]); L.add("mem", s, w["rss_mb"])
        if vals:
            L.add("val", s, vals[-1])
    with open(os.path.join(d, "train_log.csv"), "w") as f:
        f.write("\n".join(rows) + "\n")
    return L.d


# ---------------------------------------------------------------------------------------------- logging module, custom names
def w_pylog(d, spec, rec):
    L = Logged("it=N (1-based optimizer step)")
    ev = _evals_by_step(rec)
    word = loss_word(spec)
    st = {}
    lines = []
    lg = spec.get("logger_name", "proj.engine.trainer")
    for w in windows(rec, spec["log_every"], "mean"):
        s = w["step"]
        v, masked = mask_loss(spec, w["loss"], st)
        if masked:
            L.d["masked_x"].append(s)
        ts = _ts(w["wall"]).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
        if v is not None:
            parts = [f"it={s}", f"ep={w['epoch']}", f"{word}={v:.5f}", f"lr={w['lr']:.3e}", f"gnorm={w['grad_norm']:.4g}"]
            L.add("loss", s, float(f"{v:.5f}")); L.add("lr", s, w["lr"]); L.add("grad_norm", s, w["grad_norm"])
            if spec.get("log_time"):
                parts += [f"step_ms={w['step_time_s'] * 1e3:.2f}", f"data_ms={w['data_time_s'] * 1e3:.2f}"]
                L.add("step_time", s, w["step_time_s"]); L.add("data_time", s, w["data_time_s"])
            if spec.get("log_mem"):
                parts.append(f"mem_mb={w['rss_mb']:.1f}"); L.add("mem", s, w["rss_mb"])
            if "dead" in w:
                parts.append(f"dead_frac={w['dead']:.3f}"); L.add("dead", s, w["dead"])
            if "gn_first" in w:
                parts.append(f"gn_first={w['gn_first']:.3e} gn_last={w['gn_last']:.3e}")
                L.add("gn_first", s, w["gn_first"]); L.add("gn_last", s, w["gn_last"])
            if "loss_scale" in w:
                parts.append(f"loss_scale={w['loss_scale']:g}"); L.add("scale", s, w["loss_scale"])
            lines.append(f"{ts} | INFO | {lg} | " + " ".join(parts))
        for p in w["pts"]:
            if p["step"] in ev:
                lines.append(f"{ts} | INFO | {lg}.eval | it={p['step']} val_{word}={ev[p['step']]:.5f}")
                L.add("val", p["step"], ev[p["step"]])
    with open(os.path.join(d, "train.log"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return L.d


# ---------------------------------------------------------------------------------------------- plain print lines
def w_print(d, spec, rec):
    L = Logged("it N in `it N/total` (1-based optimizer step; current batch loss)")
    ev = _evals_by_step(rec)
    word = loss_word(spec)
    S = spec["steps"]
    st = {}
    lines = [f"training {spec['family']} for {S} iterations, lr={spec['lr']} opt={spec['opt']}"]
    for w in windows(rec, spec["log_every"], "last"):
        s = w["step"]
        v, masked = mask_loss(spec, w["loss"], st)
        if masked:
            L.d["masked_x"].append(s)
        if v is not None:
            extra = f" | {w['step_time_s'] * 1e3:.1f}ms" if spec.get("log_time") else ""
            if spec.get("log_time"):
                L.add("step_time", s, w["step_time_s"])
            lines.append(f"ep {w['epoch']} it {s}/{S} | {word} {v:.4f} | lr {w['lr']:.2e}{extra}")
            L.add("loss", s, round(v, 4) if math.isfinite(v) else v); L.add("lr", s, w["lr"])
        for p in w["pts"]:
            if p["step"] in ev:
                lines.append(f"ep {w['epoch']} it {p['step']}/{S} | val {word} {ev[p['step']]:.4f}")
                L.add("val", p["step"], round(ev[p["step"]], 4))
    lines.append("done.")
    with open(os.path.join(d, "stdout.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return L.d


# ---------------------------------------------------------------------------------------------- Lightning CSVLogger
def w_lightning(d, spec, rec):
    L = Logged("`step` column (0-based: global step - 1)")
    ev = _evals_by_step(rec)
    rows = []
    st = {}
    opt = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "momentum": "SGD", "nesterov": "SGD", "rmsprop": "RMSprop",
           "adagrad": "Adagrad", "adamax": "Adamax", "nadam": "NAdam", "radam": "RAdam"}[spec["opt"]]
    for w in windows(rec, spec["log_every"], "last"):
        s = w["step"] - 1
        v, masked = mask_loss(spec, w["loss"], st)
        if masked:
            L.d["masked_x"].append(s)
        rows.append({"step": s, f"lr-{opt}": w["lr"]}); L.add("lr", s, w["lr"])
        if v is not None:
            rows.append({"epoch": w["epoch"], "step": s, "train_loss_step": v}); L.add("loss", s, v)
        for p in w["pts"]:
            if p["step"] in ev:
                rows.append({"epoch": p["epoch"], "step": p["step"] - 1, "val_loss": ev[p["step"]]})
                L.add("val", p["step"] - 1, ev[p["step"]])
    cols = sorted({k for r in rows for k in r})
    os.makedirs(os.path.join(d, "lightning_logs", "version_0"), exist_ok=True)
    with open(os.path.join(d, "lightning_logs", "version_0", "metrics.csv"), "w") as f:
        f.write(",".join(cols) + "\n")
        for r in rows:
            f.write(",".join(g6(r[c]) if isinstance(r.get(c), float) else str(r.get(c, "")) for c in cols) + "\n")
    with open(os.path.join(d, "lightning_logs", "version_0", "hparams.yaml"), "w") as f:
        f.write(f"lr: {spec['lr']}\nbatch_size: {spec['bs']}\n")
    return L.d


# ---------------------------------------------------------------------------------------------- W&B offline
def w_wandb(d, spec, rec):
    L = Logged("`_step` (= global optimizer step)")
    ev = _evals_by_step(rec)
    word = loss_word(spec)
    t0 = rec["points"][0]["wall"]
    rid = "offline-run-20261202_101500-%s" % ("k%07d" % spec["seed"])
    fd = os.path.join(d, "wandb", rid, "files")
    os.makedirs(fd, exist_ok=True)
    st = {}
    out = []
    last = {}
    for w in windows(rec, spec["log_every"], "mean"):
        s = w["step"]
        v, masked = mask_loss(spec, w["loss"], st)
        if masked:
            L.d["masked_x"].append(s)
        r = {"_step": s, "_runtime": round(w["wall"] - t0, 3), "_timestamp": round(w["wall"], 3)}
        if v is not None:
            r[f"charts/{word}"] = v if math.isfinite(v) else str(v).replace("nan", "NaN")
            L.add("loss", s, v)
        r["charts/learning_rate"] = w["lr"]; L.add("lr", s, w["lr"])
        if spec.get("log_gn"):
            r["charts/grad_norm"] = w["grad_norm"]; L.add("grad_norm", s, w["grad_norm"])
        if spec.get("log_time"):
            r["perf/step_time_ms"] = w["step_time_s"] * 1e3; L.add("step_time", s, w["step_time_s"])
            r["perf/data_time_ms"] = w["data_time_s"] * 1e3; L.add("data_time", s, w["data_time_s"])
        if spec.get("log_mem"):
            r["sys/mem_gb"] = w["rss_mb"] / 1024; L.add("mem", s, w["rss_mb"])
        if "loss_scale" in w:
            r["amp/loss_scale"] = w["loss_scale"]; L.add("scale", s, w["loss_scale"])
        vals = [ev[p["step"]] for p in w["pts"] if p["step"] in ev]
        if vals:
            r[f"eval/{word}"] = vals[-1]; L.add("val", s, vals[-1])
        out.append(json.dumps(r))
        last.update(r)
    with open(os.path.join(fd, "wandb-history.jsonl"), "w") as f:
        f.write("\n".join(out) + "\n")
    with open(os.path.join(fd, "wandb-summary.json"), "w") as f:
        json.dump(last, f)
    with open(os.path.join(fd, "config.yaml"), "w") as f:
        f.write(f"wandb_version: 1\nlr:\n  value: {spec['lr']}\nbatch_size:\n  value: {spec['bs']}\n")
    return L.d


# ---------------------------------------------------------------------------------------------- per-rank CSV
def w_ranks(d, spec, rec):
    L = Logged("step (1-based optimizer step), one file per rank: metrics.rank<N>.csv")
    st = {}
    fs = [open(os.path.join(d, f"metrics.rank{r}.csv"), "w") for r in (0, 1)]
    for f in fs:
        f.write("step,loss,lr,fwd_bwd_ms,comm_wait_ms,step_time_ms\n")
    for w in windows(rec, spec["log_every"], "mean"):
        s = w["step"]
        v, _ = mask_loss(spec, w["loss"], st)
        c = w["ranks"]
        tmax = max(c)
        for r in (0, 1):
            fs[r].write(f"{s},{g6(v)},{g6(w['lr'])},{c[r] * 1e3:.3f},{(tmax - c[r]) * 1e3:.3f},{w['step_time_s'] * 1e3:.3f}\n")
            L.d["ranks"][r].append(c[r])
        L.add("loss", s, float(g6(v))); L.add("lr", s, w["lr"]); L.add("step_time", s, w["step_time_s"])
    for f in fs:
        f.close()
    return L.d


WRITERS = {"tb": w_tb, "dvclive": w_dvclive, "raytune": w_raytune, "sacred": w_sacred, "composer": w_composer,
           "torchtune": w_torchtune, "hfconsole": w_hfconsole, "catalyst": w_catalyst, "deepspeed": w_deepspeed,
           "csvcum": w_csvcum, "pylog": w_pylog, "print": w_print, "lightning": w_lightning, "wandb": w_wandb,
           "ranks": w_ranks}
