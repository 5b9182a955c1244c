"""indep13: one training loop with bug hooks (search BUG). Returns per-step and per-eval records."""
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
        if cfg.get("bug") == "warmup_restarts_per_epoch":
            # BUG warmup_restarts_per_epoch: the warm-up lambda is fed the batch index within the epoch (`i` of enumerate(loader))
            # instead of the global step, so the linear warm-up starts again at every epoch boundary
            return min(1.0, (s % cfg["bpe"] + 1) / w)
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
    if cfg.get("bug") == "maximize_str_flag":
        # BUG maximize_str_flag: `maximize=os.environ.get("OPT_MAXIMIZE", "false")` -- the string "false" is truthy, so the
        # optimizer ascends the loss
        mx = True
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
    if bug == "optimizer_before_reinit":
        # BUG optimizer_before_reinit: `model = build_model(cfg)` is called a second time (to apply a late config override)
        # after the optimizer was built; the optimizer keeps updating the orphaned first model while the loop trains the new one
        torch.manual_seed(seed + 2)
        model = fam.model()
        params = [p for p in model.parameters() if p.requires_grad]
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
            if bug == "resume_lexical_ckpt":
                # BUG resume_lexical_ckpt: the latest checkpoint is picked as sorted(glob("ckpt-*"))[-1]; string order puts
                # "ckpt-50" after "ckpt-250", so the restart resumes from step 50 and replays the steps since
                back = max(ckpts, key=lambda q: f"ckpt-{q}")
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
                ctimes[0] += time.perf_counter() - tc
                # BUG accum_rescale_twice: the logger multiplies by the accumulation count to "undo" the / k, but it reads the loss
                # before the division, so the logged train loss is k times the true value (the backward is correct)
                loss_sum += logged * (k if bug == "accum_rescale_twice" else 1) / k
            else:
                x, y = b
                half = y.shape[0] // 2
                for r in range(ranks):
                    sl = slice(r * half, (r + 1) * half)
                    xr, yr = idx(x, sl), y[sl]
                    tc = time.perf_counter()
                    if bug == "rank1_profiler_on" and r == 1 and s >= bstep:
                        # BUG rank1_profiler_on: PROFILE_RANKS=1 left in one host's launch script; that rank wraps every step in
                        # torch.profiler.profile(record_shapes=True, with_stack=True, profile_memory=True)
                        with torch.profiler.profile(record_shapes=True, with_stack=True, profile_memory=True):
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
            opt.step()
            if fp16:
                good += 1
                if good >= cfg.get("growth", 50):
                    scale *= 2
                    good = 0
        if bug == "gc_collect_in_loop" and (s + 1) % cfg.get("gc_every", 25) == 0:
            # BUG gc_collect_in_loop: `gc.collect()` (from a memory-debugging session) left in the training step every N steps
            import gc
            gc.collect()
            gc.collect()
        if bug == "swa_snapshots_kept":
            # BUG swa_snapshots_kept: `snapshots.append(copy.deepcopy({"model": model.state_dict(), "opt": opt.state_dict()}))`
            # meant to run once per SWA cycle sits in the step loop
            snaps.append(copy.deepcopy({"model": model.state_dict(), "opt": opt.state_dict()}))
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
