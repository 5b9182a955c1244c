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
    if kind == "cyclic":
        T = cfg.get("period", 100)
        ph = (s % T) / T
        tri = 1 - abs(2 * ph - 1)
        return 1.0 + (cfg.get("max_mult", 4.0) - 1.0) * tri
    raise ValueError(kind)


def make_opt(cfg, params, lr):
    o = cfg.get("opt", "adam")
    wd = cfg.get("wd", 0.0)
    mx = cfg.get("bug") == "grad_ascent"  # BUG grad_ascent: maximize=True copied from an adversary's optimizer config
    if o == "adam":
        if cfg.get("bug") == "adam_eps_zero":
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
    torch.manual_seed(seed + 1)
    model = fam.model()
    bug = cfg.get("bug")
    bstep = cfg.get("bug_step", 0)
    total = cfg["steps"]
    ws = 8
    base_lr = cfg["lr"]
    if bug == "lr_ws_twice":
        base_lr = base_lr * ws  # the launcher already scaled lr by world size ...
        base_lr = base_lr * ws  # BUG lr_ws_twice: ... and the training script scales it again
    params = model.online() if hasattr(model, "online") else [p for p in model.parameters() if p.requires_grad]
    opt = make_opt(cfg, params, base_lr)
    if hasattr(fam, "post_opt"):
        fam.post_opt(model)
    k = cfg.get("accum", 1)
    clip = cfg.get("clip")
    fp16 = cfg.get("fp16", False)
    scale, good = 2.0 ** 16, 0
    ranks = cfg.get("ranks", 1)
    eval_every = cfg.get("eval_every", 50)
    probe = {}
    for j, m in enumerate(getattr(fam, "probe_modules", lambda _m: [])(model)):
        m.register_forward_hook(lambda mod, inp, out, j=j: probe.__setitem__(j, out.detach()))
    first_w, last_w = fam.layers(model)
    bpe = fam.batches_per_epoch()
    step_shift = 0
    recs, evals = [], []
    ckpts = {}
    hist, leak = [], []
    prof = None
    seg = 0
    sched_offset = 0
    crash = cfg.get("crash")  # (crash_step, resume_from_step)
    s = 0  # 0-based optimizer step about to run
    t_wall0 = time.time()
    while s < total:
        if crash and s % cfg.get("ckpt_every", 50) == 0 and seg == 0:
            ckpts[s] = {"model": copy.deepcopy(model.state_dict()), "opt": copy.deepcopy(opt.state_dict()),
                        "scale": scale, "good": good}
        if crash and s == crash[0] and seg == 0:
            seg = 1
            back = crash[1]
            st = ckpts[back]
            model.load_state_dict(st["model"])
            opt.load_state_dict(st["opt"])
            scale, good = st["scale"], st["good"]
            if bug == "step_counter_reset":
                step_shift = back  # BUG step_counter_reset: the resumed process restores the weights but starts its step counter at 0
            if bug == "sched_resume_reset":
                sched_offset = back  # BUG sched_resume_reset: scheduler rebuilt on resume, its state_dict never loaded
            s = back
            time.sleep(cfg.get("restart_gap", 0.02))
            continue
        if bug == "profiler_left_on" and s == bstep and prof is None:
            # BUG profiler_left_on: a debugging profiler started at this step and never stopped
            prof = torch.profiler.profile(record_shapes=True, profile_memory=True, with_stack=True)
            prof.__enter__()
        if bug == "anomaly_mode_on" and s == bstep:
            torch.autograd.set_detect_anomaly(True)  # BUG anomaly_mode_on: left on after a NaN hunt (enabled from this step)
        cfg["_step"] = s
        cfg["_unscaled"] = bug == "unscaled_shard" and s in cfg.get("bad_steps", ())
        if bug == "sched_step_per_microbatch":
            lr = base_lr * lr_at(cfg, s * k, total)  # BUG sched_step_per_microbatch: scheduler.step() inside the accumulation loop
        else:
            lr = base_lr * lr_at(cfg, s - sched_offset, total)
        for gpar in opt.param_groups:
            gpar["lr"] = lr
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        dtime = 0.0
        ctimes = [0.0] * ranks
        k_now = k if not (bug == "grad_accum_unnorm" and cfg.get("switch_at") and s < cfg["switch_at"]) else 1
        for j in range(k_now):
            td = time.perf_counter()
            bi = s * k_now + j if k_now == k else s * k + j
            b = fam.train_batch(bi)
            if bug == "epoch_start_stall" and bi % bpe == 0 and bi > 0:
                time.sleep(cfg.get("stall", 0.15))  # BUG epoch_start_stall: non-persistent loader workers re-open and re-index the shards each epoch
            if bug == "slow_loader" and s >= bstep:
                time.sleep(cfg.get("sleep", 0.006))  # BUG slow_loader: per-batch decode in the main process
            if bug == "corrupt_batch" and s in cfg.get("bad_steps", ()):
                b = perturb(b, lambda x: x * cfg.get("corrupt_mult", 40.0))  # BUG corrupt_batch: a shard written in raw units
            if bug == "nan_midrun" and s == bstep:
                def put_nan(x):
                    x = x.clone()
                    x.view(-1)[3] = float("nan")  # BUG nan_midrun: one record with a NaN feature reaches the model
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
                if bug == "loss_scale_collapse" and s >= bstep:
                    # BUG loss_scale_collapse: a norm penalty on a difference that is exactly 0 (sqrt at 0 -> NaN grads)
                    p0 = first_w
                    loss = loss + 1e-4 * torch.sqrt(((p0 - p0.detach()) ** 2).sum())
                if bug == "grad_accum_unnorm" and k_now > 1:
                    lb = loss  # BUG grad_accum_unnorm: micro-batch losses summed, not divided by the accumulation steps
                else:
                    lb = loss / k_now
                (lb * (scale if fp16 else 1.0)).backward()
                ctimes[0] += time.perf_counter() - tc
                loss_sum += float(lb.detach()) if bug == "grad_accum_unnorm" else float(loss) / k_now
            else:
                x, y = b
                half = x.shape[0] // 2 if not isinstance(x, tuple) else x[0].shape[0] // 2
                parts = []
                for r in range(ranks):
                    sl = slice(r * half, (r + 1) * half)
                    if bug == "uneven_shard":
                        q = half // 4
                        sl = slice(0, q) if r == 0 else slice(q, 2 * half)  # BUG uneven_shard: a hand-written shard split (rank 1 gets 7/8)
                    xr = tuple(t[sl] for t in x) if isinstance(x, tuple) else x[sl]
                    yr = y[sl] if y is not None else None
                    tc = time.perf_counter()
                    lr_ = fam.loss(model, (xr, yr)) / ranks
                    lr_.backward()
                    if bug == "straggler" and r == 1 and s >= bstep:
                        time.sleep(cfg.get("sleep", 0.008))  # BUG straggler: rank 1 runs on a throttled host
                    ctimes[r] += time.perf_counter() - tc
                    parts.append(float(lr_))
                loss_sum += sum(parts) / k_now
        # grads, clipping, scaler
        gs = [p.grad for p in params if p.grad is not None]
        if not gs:
            gs = [torch.zeros(1)]
        if fp16:
            for g_ in gs:
                g_.div_(scale)
        gn = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g_) for g_ in gs]))) if gs else 0.0
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
            if bug == "clip_value_tiny":
                torch.nn.utils.clip_grad_value_(params, 1e-4)  # BUG clip_value_tiny: clip by VALUE with the norm's config key (1e-4)
            elif clip and bug != "clip_after_step":
                torch.nn.utils.clip_grad_norm_(params, clip)
            opt.step()
            if bug == "clip_after_step" and clip:
                torch.nn.utils.clip_grad_norm_(params, clip)  # BUG clip_after_step: clipping after opt.step() clips nothing that matters
            if fp16:
                good += 1
                if good >= cfg.get("growth", 50):
                    scale *= 2
                    good = 0
        if hasattr(fam, "after_step"):
            fam.after_step(model, s)
        if bug == "mem_leak":
            xl, yl = b
            leak.append(fam.loss(model, (xl[:8], yl[:8])))  # BUG mem_leak: a monitoring forward outside no_grad, output kept (graph and activations alive)
        if bug == "step_creep":
            hist.extend(float(v) for v in torch.rand(256, generator=torch.Generator().manual_seed(s)))
            _ = sorted(hist)[len(hist) // 2]  # BUG step_creep: "running median" metric recomputed over all history each step
        if bug == "periodic_stall" and s > 0 and s % cfg.get("stall_every", 40) == 0:
            time.sleep(cfg.get("stall", 0.08))  # BUG periodic_stall: synchronous checkpoint upload
        if prof is not None:
            prof.step()
        st_ = time.perf_counter() - t0
        dead = sat = None
        if probe:
            a = probe[0]
            if cfg.get("probe") == "dead":
                dead = float((a.reshape(a.shape[0], -1) <= 0).all(0).float().mean())
            elif cfg.get("probe") == "sat":
                sat = float((a.abs() > 0.99).float().mean()) if isinstance(fam.probe_modules(model)[0], nn.Tanh) else float(((a < 0.01) | (a > 0.99)).float().mean())
        rec = {"step": s + 1 - step_shift, "loss": loss_sum, "lr": lr, "gn": gn, "st": st_, "dt": dtime, "rss": rss_mb(),
               "scale": scale if fp16 else None, "dead": dead, "sat": sat, "gfirst": gfirst, "glast": glast,
               "seg": seg, "wall": time.time() - t_wall0, "acc": getattr(fam, "last_acc", None)}
        if ranks > 1:
            mx_ = max(ctimes)
            rec["ranks"] = [{"compute": c, "wait": mx_ - c} for c in ctimes]
        recs.append(rec)
        s += 1
        if s % eval_every == 0 or s == total:
            model.eval()
            if hasattr(fam, "val_loss"):
                v = fam.val_loss(model)
            else:
                with torch.no_grad():
                    vs = [float(fam.loss(model, vb, train=False)) for vb in fam.val_batches()]
                v = sum(vs) / len(vs)
            model.train()
            evals.append({"step": s - step_shift, "val": v, "seg": seg, "acc": getattr(fam, "last_acc", None), "wall": time.time() - t_wall0})
    if prof is not None:
        prof.__exit__(None, None, None)
    torch.autograd.set_detect_anomaly(False)
    return {"recs": recs, "evals": evals, "bpe": fam.batches_per_epoch(), "loss_word": fam.loss_word,
            "bs": cfg.get("bs", 32)}
