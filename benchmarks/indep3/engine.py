"""Training loop with injectable bugs. Returns logged rows (global-step x-axis) and event info."""
import math, time, os
import torch
import torch.nn as nn
from families import build, forward_loss


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def make_opt(name, params, lr, wd):
    if name == "sgd": return torch.optim.SGD(params, lr=lr, weight_decay=wd)
    if name == "momentum": return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=wd)
    if name == "adam": return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    if name == "adamw": return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    if name == "rmsprop": return torch.optim.RMSprop(params, lr=lr, weight_decay=wd)
    if name == "adagrad": return torch.optim.Adagrad(params, lr=lr, weight_decay=wd)
    raise ValueError(name)


def make_sched(name, opt, steps, spe, warm=0, bug=None):
    S = torch.optim.lr_scheduler
    if name == "constant": return S.LambdaLR(opt, lambda s: 1.0)
    if name == "step": return S.StepLR(opt, step_size=max(1, steps // 3), gamma=0.3)
    if name == "cosine": return S.CosineAnnealingLR(opt, T_max=steps)
    if name == "linear": return S.LambdaLR(opt, lambda s: max(0.02, 1 - s / steps))
    if name == "exp": return S.ExponentialLR(opt, gamma=0.01 ** (1 / steps))
    if name == "onecycle": return S.OneCycleLR(opt, max_lr=opt.param_groups[0]["lr"], total_steps=steps + 5,
                                                     cycle_momentum=("betas" in opt.param_groups[0]) or opt.param_groups[0].get("momentum", 0) > 0)
    if name == "warmup": return S.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) if s < warm else
                                           0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm))))
    if name == "epoch_step":  # meant to be stepped per epoch
        return S.StepLR(opt, step_size=3, gamma=0.5)
    if name == "rising":  # sign error: growth instead of decay
        return S.LambdaLR(opt, lambda s: min(1e4, 1.0 + s * 0.05) ** 1.5)
    raise ValueError(name)


def grad_norm(model):
    t = [p.grad.detach().norm() for p in model.parameters() if p.grad is not None]
    return float(torch.norm(torch.stack(t))) if t else 0.0


def first_layer_grad(model):
    for p in model.parameters():
        if p.grad is not None and p.dim() > 1:
            return float(p.grad.norm())
    return 0.0


def evaluate(fam, model, lf, data, cls, n=400):
    was = model.training; model.eval()
    with torch.no_grad():
        vx, vy = data["vx"][:n], data["vy"][:n]
        loss = float(forward_loss(fam, model, lf, vx, vy))
        acc = None
        if cls and fam not in ("gru_seq2seq", "lstm_lm"):
            acc = float((model(vx).argmax(-1) == vy).float().mean())
    model.train(was)
    return loss, acc


def train(c):
    torch.set_num_threads(1)
    fam, bug, bp = c["family"], c.get("bug", "none"), c.get("bp", {})
    opts = dict(c.get("fopts", {}))
    if bug == "summed_loss": opts["reduction"] = "sum"
    model, data, lf, cls = build(fam, c["seed"], opts)
    g = torch.Generator().manual_seed(c["seed"] + 1)
    tx, ty = data["tx"], data["ty"]
    if bug == "shuffled_labels":
        ty = ty[torch.randperm(len(ty), generator=g)]
    if bug == "tiny_train":
        tx, ty = tx[:bp.get("n", 48)], ty[:bp.get("n", 48)]
    if bug == "sorted":
        o = torch.argsort(ty if ty.dim() == 1 else ty.reshape(len(ty), -1)[:, 0], stable=True); tx, ty = tx[o], ty[o]
    if bug == "leak":
        data = dict(data, vx=tx[:400], vy=ty[:400])
    if bug == "frozen":
        for n_, p in model.named_parameters():
            if not n_.startswith("head"): p.requires_grad_(False)
    bs, steps = c["bs"], c["steps"]
    spe = max(1, len(tx) // bs)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_opt(c["opt"], params, c["lr"], c.get("wd", 0.0))
    sched = make_sched(c.get("sched", "constant"), opt, steps, spe, c.get("warm", 0))
    clip = c.get("clip")
    rows, evals, ev = [], [], {}
    keep = []
    scale = 65536.0; good = 0
    perm = torch.randperm(len(tx), generator=g)
    pos = 0; prev_t = time.perf_counter()
    hooks_dead = []
    if c.get("log_act"):
        acts = [m for m in model.modules() if isinstance(m, (nn.ReLU, nn.Tanh, nn.Sigmoid))]
        for m in acts:
            m.register_forward_hook(lambda mod, i, o: hooks_dead.append(o.detach()))
    ckpts = {}
    step = 0; resumed = False
    while step < steps:
        t0 = time.perf_counter()
        if pos + bs > len(tx):
            pos = 0
            if bug != "sorted": perm = torch.randperm(len(tx), generator=g)
            if c.get("sched") == "epoch_step" and bug != "sched_per_batch": sched.step()
        idx = perm[pos:pos + bs] if bug != "sorted" else torch.arange(pos, pos + bs); pos += bs
        xb, yb = tx[idx], ty[idx]
        if bug == "slow_loader": time.sleep(bp.get("sleep", 0.012))
        if bug in ("poison",) and step in bp["at"]:
            xb = xb * 40.0 if xb.dtype.is_floating_point else yb.flip(0) if False else xb
            if not xb.dtype.is_floating_point:
                yb = (yb + 1) % (int(yb.max()) + 1)
        if bug in ("div0", "nan_masked") and step >= bp["at"] and "nan_from" not in ev:
            if fam == "widedeep":
                xb = torch.cat([xb[:, :1], xb[:, 1:] / (xb[:, 1:] * 0).std()], 1)
            elif xb.dtype.is_floating_point:
                xb = xb / (xb * 0).float().std()
            if not xb.dtype.is_floating_point:
                for p in params: p.data.add_(float("nan"))
            ev["nan_from"] = step
        t_data = time.perf_counter() - t0
        model.train()
        hooks_dead.clear()
        loss = forward_loss(fam, model, lf, xb, yb, double_softmax=(bug == "double_softmax"))
        if bug != "missing_zero_grad": opt.zero_grad(set_to_none=False)
        if bug == "loss_scale":
            (loss * scale).backward()
            overflow = step >= bp["at"]
            if not overflow:
                for p in params:
                    if p.grad is not None and not torch.isfinite(p.grad).all(): overflow = True
            if overflow:
                scale /= 2; good = 0; gn = float("inf")
            else:
                for p in params:
                    if p.grad is not None: p.grad.div_(scale)
                gn = grad_norm(model); opt.step(); good += 1
                if good >= 100: scale *= 2; good = 0
        else:
            loss.backward()
            gn = grad_norm(model); gfirst = first_layer_grad(model)
            if clip: torch.nn.utils.clip_grad_norm_(params, clip)
            opt.step()
        if bug == "mem_leak": keep.append(loss); keep.append([a for a in hooks_dead] if hooks_dead else torch.randn(20000))
        lr_now = opt.param_groups[0]["lr"]
        if c.get("sched") != "epoch_step" or bug == "sched_per_batch": sched.step()
        extra = 0.0
        if bug == "creep": extra = bp.get("base", 0.002) + bp.get("rate", 4e-5) * step
        if bug == "outliers" and step in bp["at"]: extra = bp.get("spike", 0.08)
        if bug == "slow_rank": extra = bp.get("sleep", 0.01)
        if extra: time.sleep(extra)
        st = time.perf_counter() - t0
        step += 1
        if c.get("ckpt_every") and step % c["ckpt_every"] == 0:
            ckpts[step] = ({k: v.clone() for k, v in model.state_dict().items()},
                           {k: v for k, v in opt.state_dict().items()})
        if step % c["log_every"] == 0 or step == 1:
            r = dict(step=step, epoch=round(step / spe, 4), loss=float(loss.detach()),
                     lr=lr_now, grad_norm=gn, step_time=st, data_time=t_data, rss_mb=rss_mb())
            if bug == "vanishing" or c.get("log_first_grad"): r["grad_first"] = gfirst
            if bug == "loss_scale" or c.get("log_scale"): r["loss_scale"] = scale
            if c.get("log_act") and hooks_dead:
                a = hooks_dead[0]
                r["dead_frac"] = float((a <= 0).float().mean()) if c.get("act_kind", "relu") == "relu" else \
                    float((a.abs() > 0.97).float().mean() if c["act_kind"] == "tanh" else ((a < 0.03) | (a > 0.97)).float().mean())
            rows.append(r)
        if c.get("eval_every") and (step % c["eval_every"] == 0 or step == steps):
            vl, va = evaluate(fam, model, lf, data, cls)
            evals.append(dict(step=step, epoch=round(step / spe, 4), val_loss=vl, val_acc=va))
        if bug == "resume_old" and not resumed and step == bp["crash"]:
            sd, od = ckpts[bp["from"]]
            model.load_state_dict(sd); resumed = True; ev["resume_at"] = step
            # bug: step counter not rewound, optimizer state reinitialised
            opt = make_opt(c["opt"], params, c["lr"], c.get("wd", 0.0))
            sched = make_sched(c.get("sched", "constant"), opt, steps, spe, c.get("warm", 0))
            for _ in range(step): sched.step()
    ev["spe"] = spe
    return rows, evals, ev
