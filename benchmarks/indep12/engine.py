"""indep12: one training loop with bug hooks (search BUG). Returns per-step and per-eval records."""
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
    if kind == "cos_tmax":
        # CosineAnnealingLR(T_max) stepped every batch; BUG cosine_tmax_epochs_per_batch: T_max is the number of epochs while
        # scheduler.step() runs every batch, so the closed form cos(pi * t / T_max) goes to 0 and back every 2 * T_max steps
        return 0.5 * (1 + math.cos(math.pi * s / cfg.get("tmax", total)))
    if kind == "linear_warmup":
        # LinearLR(start_factor=0.01, total_iters=W); BUG warmup_iters_times_bpe: W was given in iterations and multiplied by
        # the batches per epoch again, so the warm-up never ends
        W = cfg.get("warmup", 20)
        return 0.01 + 0.99 * min(1.0, s / W)
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
    if o == "sgdm99":
        # BUG momentum_099: SGD(momentum=0.99) where the recipe says 0.9 (a copied config for a much smaller lr)
        return torch.optim.SGD(params, lr=lr, momentum=0.99, weight_decay=wd, maximize=mx)
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
    if cfg.get("pretrain"):
        # a fine-tune: the model was pretrained (no logging) on the same task before the logged run starts
        popt = torch.optim.Adam(model.parameters(), lr=cfg.get("pre_lr", 3e-3))
        for q in range(cfg["pretrain"]):
            cfg["_step"] = q
            popt.zero_grad()
            fam.loss(model, fam.train_batch(10_000 + q)).backward()
            popt.step()
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
            if bug == "step_not_restored":
                # BUG step_not_restored: the restarted worker loads model and optimizer state, but reads the step counter from
                # ckpt.get("global_step", 0) while the checkpoint saved it under "step"; training restarts its count (and its
                # schedule and data order) at step 0
                model.load_state_dict(st["model"])
                opt.load_state_dict(st["opt"])
                total = total + (crash[0] - 0)
                cfg["_shift"] = 0
                s = 0
                time.sleep(cfg.get("restart_gap", 0.02))
                continue
            model.load_state_dict(st["model"])
            opt.load_state_dict(st["opt"])
            scale, good = st["scale"], st["good"]
            s = back
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
                logged = fam._data if getattr(fam, "_data", None) is not None else float(loss)
                if cfg.get("nan_guard") and not math.isfinite(float(loss)):
                    loss_sum += float("nan")
                    ctimes[0] += time.perf_counter() - tc
                    continue  # the guard skips a non-finite batch (no backward, no step)
                    loss = loss.detach().requires_grad_()
                lb = loss / k
                (lb * (scale if fp16 else 1.0)).backward()
                if bug == "loss_tensor_history":
                    # BUG loss_tensor_history: `history.append(loss)` (the tensor, not loss.item()) for an end-of-run plot; every
                    # step's autograd graph and saved activations stay referenced
                    hist_keep.append(loss)
                ctimes[0] += time.perf_counter() - tc
                # BUG accum_log_sum: the logging accumulator adds loss.item() of every micro-batch and is never divided by the
                # accumulation count (the backward is correctly scaled; only the logged train loss is k times too large)
                loss_sum += logged / (1 if bug == "accum_log_sum" else k)
            else:
                x, y = b
                half = y.shape[0] // 2
                for r in range(ranks):
                    sl = slice(r * half, (r + 1) * half)
                    xr, yr = idx(x, sl), y[sl]
                    tc = time.perf_counter()
                    if bug == "rank1_detect_anomaly" and r == 1 and s >= bstep:
                        # BUG rank1_detect_anomaly: TORCH_DETECT_ANOMALY=1 left in one node's environment file; the training
                        # script turns on torch.autograd.set_detect_anomaly(True) when it is set, so rank 1 runs every forward and
                        # backward in anomaly mode
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
        if bug == "metric_sweep_in_step" and (s + 1) % cfg.get("sweep_every", 30) == 0:
            # BUG metric_sweep_in_step: a "quick" validation metric (per-sample Python loop) sits inside the training step, every
            # N steps, instead of in the evaluation loop
            fam.sweep(model)
        if not skip:
            if bug == "clip_value_typo":
                # BUG clip_value_typo: clip_grad_value_(params, cfg.optim.eps) -- the eps field (1e-5) passed where clip_grad_norm_
                # with max_norm=1.0 was meant, so every gradient entry is clipped to +-1e-5
                torch.nn.utils.clip_grad_value_(params, cfg.get("clip_value", 1e-5))
            if clip:
                torch.nn.utils.clip_grad_norm_(params, clip)
            opt.step()
            if fp16:
                good += 1
                if good >= cfg.get("growth", 50):
                    scale *= 2
                    good = 0
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
                sat = float((a.abs() > 0.99).float().mean())
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
                # ReduceLROnPlateau(factor=0.1, patience=2) on the validation loss; BUG rop_mode_max: mode="max" (copied from an
                # accuracy monitor), so every improvement of the loss counts as "no improvement"
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
