"""indep14: one training loop with bug hooks (search BUG). Returns per-step and per-eval records."""
import copy
import warnings

warnings.filterwarnings("ignore")
import math
import os
import time

import torch
import torch.nn as nn

from models import FAMILIES, idx

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


def lr_at(cfg, s, total):
    """lr multiplier at 0-based optimizer step s."""
    kind = cfg.get("sched", "const")
    w = cfg.get("warmup", 0)
    if kind == "const":
        return 1.0
    if cfg.get("bug") == "sched_step_per_microbatch":
        # BUG sched_step_per_microbatch: scheduler.step() sits inside the micro-batch loop (accumulation k), so the cosine
        # schedule built for `total` optimizer steps advances k times per update and runs past its period
        s = s * cfg.get("accum", 1)
    if kind == "warmup_const":
        return min(1.0, (s + 1) / w)
    if kind == "warmup_cos":
        if s < w:
            return (s + 1) / w
        return 0.5 * (1 + math.cos(math.pi * (s - w) / max(1, total - w))) * 0.98 + 0.02
    if kind == "warmup_linear":
        if s < w:
            return (s + 1) / w
        return max(0.02, 1 - (s - w) / max(1, total - w))
    if kind == "cos0":
        return 0.5 * (1 + math.cos(math.pi * s / total))
    if kind == "cos0_plain":
        return 0.5 * (1 + math.cos(math.pi * min(s, total) / total))
    if kind == "cos":
        return 0.5 * (1 + math.cos(math.pi * s / total)) * 0.98 + 0.02
    if kind == "cos_restart":
        T = cfg.get("period", total // 3)
        return 0.5 * (1 + math.cos(math.pi * (s % T) / T)) * 0.95 + 0.05
    if kind == "step_drop":
        return 0.1 if s >= cfg.get("drop_at", total // 2) else 1.0
    if kind == "onecycle":
        up = int(0.3 * total)
        if s < up:
            return 0.04 + 0.96 * s / up
        return 0.5 * (1 + math.cos(math.pi * (s - up) / (total - up))) * 0.999 + 0.001
    if kind == "exp":
        return cfg.get("gamma", 0.995) ** s
    if kind == "steplr":
        return cfg.get("gamma", 0.1) ** (s // cfg.get("step_size", 30))
    if kind == "rop":
        return cfg.get("_rop_mult", 1.0)
    if kind == "cyclic":
        T = cfg.get("period", 100)
        ph = (s % T) / T
        tri = 1 - abs(2 * ph - 1)
        return 1.0 + (cfg.get("max_mult", 4.0) - 1.0) * tri
    raise ValueError(kind)


def make_opt(cfg, params, lr):
    o = cfg.get("opt", "adam")
    wd = cfg.get("wd", 0.0)
    mx = False
    if o == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd, maximize=mx)
    if o == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd or 0.01, maximize=mx)
    if o == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=wd, maximize=mx)
    if o == "sgdm":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=wd, maximize=mx)
    if o == "nesterov":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=wd, maximize=mx)
    if o == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, weight_decay=wd, maximize=mx)
    if o == "radam":
        return torch.optim.RAdam(params, lr=lr, weight_decay=wd, maximize=mx)
    if o == "nadam":
        return torch.optim.NAdam(params, lr=lr, weight_decay=wd, maximize=mx)
    raise ValueError(o)


def perturb(b, fn):
    x, y = b
    if isinstance(x, tuple):
        return tuple(fn(t) if t.is_floating_point() else t for t in x), y
    return fn(x), y


def train(cfg):
    torch.set_num_threads(1)
    seed = cfg.get("seed", 0)
    torch.manual_seed(seed)
    fam = FAMILIES[cfg["family"]](cfg, seed)
    cfg["bpe"] = fam.batches_per_epoch()
    torch.manual_seed(seed + 1)
    model = fam.model()
    bug = cfg.get("bug")
    bstep = cfg.get("bug_step", 0)
    total = cfg["steps"]
    base_lr = cfg["lr"]
    if bug == "lr_scaled_twice":
        # BUG lr_scaled_twice: the linear scaling rule lr * global_batch / 256 is applied in the launch script and again
        # in the training script (global batch 32 x 8 ranks x 8 accum declared), so the lr is far too large
        base_lr = base_lr * cfg.get("lr_mult", 16.0)
    if cfg.get("pretrain"):
        # a fine-tune: the model was pretrained (no logging) on the same task before the logged run starts
        popt = torch.optim.Adam(model.parameters(), lr=cfg.get("pre_lr", 3e-3))
        for q in range(cfg["pretrain"]):
            cfg["_step"] = q
            popt.zero_grad()
            fam.loss(model, fam.train_batch(10_000 + q)).backward()
            popt.step()
    if bug == "init_gain_typo":
        # BUG init_gain_typo: `nn.init.xavier_uniform_(m.weight, gain=nn.init.calculate_gain("relu") * gain)` with a `gain` of 12 or 30 left
        # from an experiment with a deeper model scales every weight matrix up
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                nn.init.xavier_uniform_(m.weight, gain=math.sqrt(2) * cfg.get("gain", 4.0))
    if bug == "focal_prior_bias_all":
        # BUG focal_prior_bias_all: the focal-loss prior init `nn.init.constant_(bias, -log((1 - 0.01) / 0.01))` meant for the
        # classifier's output layer is applied in a loop over every nn.Linear / nn.Conv2d, hidden ReLU layers included
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)) and m.bias is not None:
                nn.init.constant_(m.bias, -math.log(0.99 / 0.01))
    if bug == "unfreeze_head_only":
        # BUG unfreeze_head_only: after a linear-probe warm start every parameter is frozen, and the "unfreeze" loop
        # `for p in model.last.parameters(): p.requires_grad = True` is meant to be `model.parameters()`
        for p in model.parameters():
            p.requires_grad = False
        for p in model.last.parameters():
            p.requires_grad = True
    if bug == "encoder_under_no_grad":
        # BUG encoder_under_no_grad: the stem's forward is wrapped in `with torch.no_grad():` (copied from the feature
        # extraction script); its output carries no gradient, so the stem never trains
        first_mod = [m for m in model.modules() if getattr(m, "weight", None) is model.first.weight][0]
        first_mod.register_forward_hook(lambda mod, inp, out: out.detach())
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_opt(cfg, params, base_lr)
    rop = {"best": None, "bad": 0}
    cfg["_rop_mult"] = 1.0
    first_w, last_w = fam.layers(model)
    hooks_kept, snaps = [], []
    k = cfg.get("accum", 1)
    clip = cfg.get("clip")
    fp16 = cfg.get("fp16", False)
    scale, good = 2.0 ** 16, 0
    ranks = cfg.get("ranks", 1)
    eval_every = cfg.get("eval_every", 50)
    probe = {}
    for j, m in enumerate(getattr(fam, "probe_modules", lambda _m: [])(model)):
        m.register_forward_hook(lambda mod, inp, out, j=j: probe.__setitem__(j, out.detach()))
    recs, evals = [], []
    hist_keep = []
    ckpts = {}
    running = 0.0
    ema = None
    seg = 0
    crash = cfg.get("crash")  # (crash_step, resume_from_step)
    s = 0  # 0-based optimizer step about to run
    t_wall0 = time.time()
    cfg["_shift"] = 0
    while s < total:
        if crash and s % cfg.get("ckpt_every", 50) == 0 and seg == 0 and s > 0:
            ckpts[s] = {"model": copy.deepcopy(model.state_dict()), "opt": copy.deepcopy(opt.state_dict()),
                        "scale": scale, "good": good}
        if crash and s == crash[0] and seg == 0:
            seg = 1
            back = crash[1]
            st = ckpts[back]
            model.load_state_dict(st["model"])
            opt.load_state_dict(st["opt"])
            scale, good = st["scale"], st["good"]
            s = back
            if bug == "resume_step_from_epoch":
                # BUG resume_step_from_epoch: the restart restores the weights from the step-N checkpoint but rebuilds the
                # step counter as `ckpt["epoch"] * len(loader)` (the epoch it was in), so the step counter and the data
                # order go back to the start of that epoch
                s = (back // cfg["bpe"]) * cfg["bpe"]
            time.sleep(cfg.get("restart_gap", 0.02))
            continue
        cfg["_step"] = s
        lr = base_lr * lr_at(cfg, s, total)
        for gpar in opt.param_groups:
            gpar["lr"] = lr
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        dtime = 0.0
        ctimes = [0.0] * ranks
        ftimes = [0.0] * ranks
        for j in range(k):
            td = time.perf_counter()
            bi = s * k + j
            b = fam.train_batch(bi)
            dtime += time.perf_counter() - td
            if ranks == 1:
                tc = time.perf_counter()
                fam._data = None
                loss = fam.loss(model, b)
                if bug == "pairdist_sqrt_reg" and s >= cfg.get("reg_from", 0):
                    # BUG pairdist_sqrt_reg: a diversity regulariser switched on mid-run, the mean pairwise distance of the
                    # batch embeddings as `((e[:, None] - e[None]) ** 2).sum(-1).sqrt()`: the diagonal is sqrt(0), finite
                    # forward, inf * 0 = NaN backward
                    e = fam.last_out if fam.last_out.dim() == 2 else fam.last_out.reshape(len(fam.last_out), -1)
                    if e.dim() == 1:
                        e = e[:, None]
                    loss = loss - cfg.get("lam", 1e-3) * ((e[:, None] - e[None]) ** 2).sum(-1).sqrt().mean()
                logged = fam._data if getattr(fam, "_data", None) is not None else float(loss)
                if cfg.get("nan_guard") and not math.isfinite(float(loss)):
                    loss_sum += float("nan")
                    ctimes[0] += time.perf_counter() - tc
                    continue  # the guard skips a non-finite batch (no backward, no step)
                    loss = loss.detach().requires_grad_()
                lb = loss / k
                # (preds_kept_with_graph) `loss.backward(retain_graph=True)` left from a two-loss experiment: the graph's
                # saved activations are not freed, and the kept outputs hold on to every step's graph
                (lb * (scale if fp16 else 1.0)).backward(retain_graph=(bug == "preds_kept_with_graph"))
                ctimes[0] += time.perf_counter() - tc
                # BUG accum_log_sum: `tr_loss += loss.item()` over the k micro-batches, logged per update without the / k,
                # so the logged train loss is the sum of k micro-batch means (the backward, on loss / k, is correct)
                loss_sum += logged * (k if bug == "accum_log_sum" else 1) / k
            else:
                x, y = b
                half = y.shape[0] // 2
                for r in range(ranks):
                    sl = slice(r * half, (r + 1) * half)
                    xr, yr = idx(x, sl), y[sl]
                    tc = time.perf_counter()
                    if bug == "rank1_detect_anomaly" and r == 1 and s >= bstep:
                        # BUG rank1_detect_anomaly: TORCH_DETECT_ANOMALY=1 exported in one host's ~/.bashrc during a NaN hunt;
                        # the script reads it and that rank runs every step under torch.autograd.detect_anomaly()
                        with torch.autograd.detect_anomaly(check_nan=True):
                            lr_ = fam.loss(model, (xr, yr)) / ranks
                            tf = time.perf_counter()
                            lr_.backward()
                    else:
                        lr_ = fam.loss(model, (xr, yr)) / ranks
                        tf = time.perf_counter()
                        lr_.backward()
                    ftimes[r] += tf - tc
                    ctimes[r] += time.perf_counter() - tc
                    loss_sum += float(lr_) / k
        gs = [p.grad for p in params if p.grad is not None]
        if not gs:
            gs = [torch.zeros(1)]
        if fp16:
            for g_ in gs:
                g_.div_(scale)
        gn = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g_) for g_ in gs])))
        gfirst = float(first_w.grad.norm()) if first_w.grad is not None else 0.0
        glast = float(last_w.grad.norm()) if last_w.grad is not None else 0.0
        skip = False
        if cfg.get("grad_guard") and not math.isfinite(gn):
            skip = True  # the loop skips optimizer steps whose gradient norm is not finite (no scaler involved)
        if fp16:
            amax = float(torch.stack([g_.abs().max() for g_ in gs]).max()) * scale
            if not math.isfinite(amax) or amax > 65504.0:
                skip = True
                scale /= 2
                good = 0
        if not skip:
            if clip:
                torch.nn.utils.clip_grad_norm_(params, clip)
            if bug == "zero_grad_after_backward":
                # BUG zero_grad_after_backward: a refactor moved `optimizer.zero_grad()` from the top of the loop to just
                # after the grad-norm logging, i.e. between backward() and step(): every step applies a zero gradient
                opt.zero_grad(set_to_none=False)
            opt.step()
            if fp16:
                good += 1
                if good >= cfg.get("growth", 50):
                    scale *= 2
                    good = 0
        if bug == "ckpt_with_dataset" and (s + 1) % cfg.get("ckpt_every_bug", 25) == 0:
            # BUG ckpt_with_dataset: the periodic checkpoint dict includes `"dataset": train_set.tensors` (added to make a
            # resume "self-contained"), so every save writes the full training set (plus a padded cache) and fsyncs it
            import tempfile
            with tempfile.NamedTemporaryFile(dir="/tmp", delete=True) as fh:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "dataset": fam.X,
                            "cache": torch.zeros(cfg.get("ckpt_pad", 6_000_000))}, fh)
                fh.flush()
                os.fsync(fh.fileno())
        if bug == "auroc_over_history":
            # BUG auroc_over_history: a running "epoch AUROC" recomputed at every step over all predictions seen so far,
            # with a pure-Python rank computation
            hist_keep.extend(fam.last_out.detach().reshape(-1)[:cfg.get("hist_per_step", 48)].tolist())
            srt = sorted(range(len(hist_keep)), key=hist_keep.__getitem__)
            _ = sum(i * (j % 2) for i, j in enumerate(srt))
        if hasattr(fam, "after_step"):
            fam.after_step(model, s)
        if cfg.get("ema"):
            if True:
                if ema is None:
                    ema = copy.deepcopy(model)
                with torch.no_grad():
                    for pe, pm in zip(ema.parameters(), model.parameters()):
                        pe.mul_(0.99).add_(pm, alpha=0.01)
        st_ = time.perf_counter() - t0
        dead = sat = None
        if probe:
            a = probe[0]
            if cfg.get("probe") == "dead":
                dead = float((a.reshape(a.shape[0], -1) <= 0).all(0).float().mean())
            elif cfg.get("probe") == "sat":
                sat = float(((a > 0.99) | (a < 0.01)).float().mean())
        if cfg.get("probe") == "sat" and hasattr(fam, "sat_now"):
            sat = fam.sat_now
        rec = {"step": s + 1 - cfg["_shift"], "loss": loss_sum, "lr": lr, "gn": gn, "st": st_, "dt": dtime, "rss": rss_mb(),
               "scale": scale if fp16 else None, "dead": dead, "sat": sat, "gfirst": gfirst, "glast": glast,
               "seg": seg, "wall": time.time() - t_wall0, "acc": getattr(fam, "last_acc", None)}
        if ranks > 1:
            mx_ = max(ctimes)
            rec["ranks"] = [{"compute": c, "fwd": f_, "bwd": c - f_, "wait": mx_ - c} for c, f_ in zip(ctimes, ftimes)]
        recs.append(rec)
        s += 1
        if s % eval_every == 0 or s == total:
            model.eval()
            with torch.no_grad():
                vs = [float(fam.loss(model, vb, train=False)) for vb in fam.val_batches()]
            v = sum(vs) / len(vs)
            model.train()
            if cfg.get("sched") == "rop":
                # ReduceLROnPlateau(factor=0.1, patience=2) on the validation loss; rop_mode="max" would be an accuracy monitor's mode (not used here)
                better = (rop["best"] is None or (v > rop["best"] if cfg.get("rop_mode") == "max" else v < rop["best"] * 0.999))
                if better:
                    rop["best"], rop["bad"] = v, 0
                else:
                    rop["bad"] += 1
                    if rop["bad"] > cfg.get("patience", 2):
                        cfg["_rop_mult"] *= 0.1
                        rop["bad"] = 0
            evals.append({"step": s - cfg["_shift"], "val": v, "seg": seg, "acc": getattr(fam, "last_acc", None), "wall": time.time() - t_wall0})
    return {"recs": recs, "evals": evals, "bpe": fam.batches_per_epoch(), "loss_word": fam.loss_word,
            "bs": cfg.get("bs", 32)}
