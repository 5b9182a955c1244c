"""One training loop with bug hooks (search BUG). Returns per-step and per-eval records."""
import copy
import math
import os
import time

import torch
import torch.nn as nn

from models import FAMILIES

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
    if kind == "steplr":
        return cfg.get("gamma", 0.1) ** (s // cfg.get("step_size", 30))
    if kind == "warmup_epochs_as_steps":
        # BUG warmup_wrong_units: the warm-up length is in optimizer steps but the scheduler is stepped once per epoch
        return min(1.0, (s // cfg["bpe"] + 1) / w)
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
        if False:
            return torch.optim.Adam(params, lr=lr, eps=0.0)  # BUG adam_eps_zero: eps=0 (copied from a "numerically exact" config)
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
    first_w, last_w = fam.layers(model)
    if bug == "freeze_left_on":
        # BUG freeze_left_on: the backbone freeze of a linear-probe phase (requires_grad_(False)) is never undone
        keep = {id(last_w)}
        for m_ in model.modules():
            if any(p is last_w for p in m_.parameters(recurse=False)):
                keep |= {id(p) for p in m_.parameters(recurse=False)}
        for p in model.parameters():
            p.requires_grad_(id(p) in keep)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_opt(cfg, params, base_lr)
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
    ckpts = {}
    running = 0.0
    ema = None
    seg = 0
    crash = cfg.get("crash")  # (crash_step, resume_from_step)
    s = 0  # 0-based optimizer step about to run
    t_wall0 = time.time()
    while s < total:
        if crash and s % cfg.get("ckpt_every", 50) == 0 and seg == 0 and s > 0:
            ckpts[s] = {"model": copy.deepcopy(model.state_dict()), "opt": copy.deepcopy(opt.state_dict()),
                        "scale": scale, "good": good}
        if crash and s == crash[0] and seg == 0:
            seg = 1
            back = crash[1]
            if bug == "ckpt_lexsort":
                # BUG ckpt_lexsort: "latest" checkpoint chosen by max() over the file names ckpt_50 .. ckpt_250 (string order)
                back = int(max(f"ckpt_{q}" for q in ckpts).split("_")[1])
            st = ckpts[back]
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
        for j in range(k):
            td = time.perf_counter()
            bi = s * k + j
            b = fam.train_batch(bi)
            if bug == "cache_evict_periodic" and (s + 1) % cfg.get("evict_every", 30) == 0:
                # BUG cache_evict_periodic: the decoded-sample cache is sized below the data set; every N steps it is evicted
                # and the shard is decoded again (real re-generation of the data) plus a simulated 80 ms disk read
                fam.make(cfg.get("n_train", fam.n_train) if hasattr(fam, "make") else 0, torch.Generator().manual_seed(s))
                time.sleep(cfg.get("stall", 0.08))
            if bug == "int16_shard" and s in cfg.get("bad_steps", ()):
                b = perturb(b, lambda x: x * cfg.get("corrupt_mult", 300.0))  # BUG int16_shard: a shard stored as int16 PCM, not scaled to [-1, 1]
            if bug == "nan_record" and s == bstep:
                def put_nan(x):
                    x = x.clone()
                    x.view(-1)[3] = float("nan")  # BUG nan_record: one record with a NaN value reaches the model
                    return x
                b = perturb(b, put_nan)
            dtime += time.perf_counter() - td
            if ranks == 1:
                tc = time.perf_counter()
                loss = fam.loss(model, b)
                if cfg.get("nan_guard") and not math.isfinite(float(loss)):
                    loss_sum += float("nan")
                    ctimes[0] += time.perf_counter() - tc
                    continue  # the guard skips a non-finite batch (no backward, no step)
                if bug == "reduction_sum_accum":
                    loss = loss * (cfg.get("bs", 32))  # BUG reduction_sum_accum: reduction="sum" in the criterion, still divided by the accumulation steps only
                lb = loss / k
                if bug == "loss_accum_graph" and s >= bstep:
                    running = running + loss  # BUG loss_accum_graph: running total kept as a tensor (no .item()), every step's graph stays alive
                (lb * (scale if fp16 else 1.0)).backward()
                ctimes[0] += time.perf_counter() - tc
                loss_sum += float(loss) / k
            else:
                x, y = b
                half = x.shape[0] // 2
                for r in range(ranks):
                    sl = slice(r * half, (r + 1) * half)
                    xr, yr = x[sl], y[sl]
                    tc = time.perf_counter()
                    lr_ = fam.loss(model, (xr, yr)) / ranks
                    lr_.backward()
                    if bug == "rank1_debug_hook" and r == 1 and s >= bstep:
                        # BUG rank1_debug_hook: a debugging activation-statistics hook registered only on rank 1 re-runs its forward
                        with torch.no_grad():
                            for _ in range(cfg.get("extra_fwd", 3)):
                                fam.loss(model, (xr, yr), train=False)
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
            amax = max(float(g_.abs().max()) for g_ in gs) * scale
            if not math.isfinite(amax) or amax > 65504.0:
                skip = True
                scale /= 2
                good = 0
        if not skip:
            if clip:
                torch.nn.utils.clip_grad_norm_(params, clip)
            opt.step()
            if bug == "decay_sign_flip":
                with torch.no_grad():
                    for p in params:
                        if p.dim() > 1:
                            p.add_(p, alpha=lr * cfg.get("wd_flip", 3.0))  # BUG decay_sign_flip: hand-written decoupled weight decay p -= lr*wd*p typed as p += lr*wd*p
            if fp16:
                good += 1
                if good >= cfg.get("growth", 50):
                    scale *= 2
                    good = 0
        if bug == "aux_metric_tensor_accum" and s >= bstep:
            # BUG aux_metric_tensor_accum: a logged-only consistency metric on a flipped view is computed with grad enabled and
            # summed into a running tensor (no .item(), never backwarded), so every step's graph and activations stay alive
            xa, ya = b
            running = running + fam.loss(model, (xa.flip(-1), ya))
        if hasattr(fam, "after_step"):
            fam.after_step(model, s)
        if cfg.get("ema"):
            if bug == "ema_deepcopy" and s >= bstep:
                # BUG ema_deepcopy: the EMA copy is rebuilt with copy.deepcopy(model) every step before the lerp
                for _ in range(cfg.get("copies", 1)):
                    ema_new = copy.deepcopy(model)
                with torch.no_grad():
                    for pe, pn in zip(ema.parameters(), ema_new.parameters()):
                        pn.mul_(0.01).add_(pe, alpha=0.99)
                ema = ema_new
            else:
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
        rec = {"step": s + 1, "loss": loss_sum, "lr": lr, "gn": gn, "st": st_, "dt": dtime, "rss": rss_mb(),
               "scale": scale if fp16 else None, "dead": dead, "sat": sat, "gfirst": gfirst, "glast": glast,
               "seg": seg, "wall": time.time() - t_wall0, "acc": getattr(fam, "last_acc", None)}
        if ranks > 1:
            mx_ = max(ctimes)
            rec["ranks"] = [{"compute": c, "wait": mx_ - c} for c in ctimes]
        recs.append(rec)
        s += 1
        if s % eval_every == 0 or s == total:
            model.eval()
            with torch.no_grad():
                vs = [float(fam.loss(model, vb, train=False)) for vb in fam.val_batches()]
            v = sum(vs) / len(vs)
            model.train()
            evals.append({"step": s, "val": v, "seg": seg, "acc": getattr(fam, "last_acc", None), "wall": time.time() - t_wall0})
    return {"recs": recs, "evals": evals, "bpe": fam.batches_per_epoch(), "loss_word": fam.loss_word,
            "bs": cfg.get("bs", 32)}
