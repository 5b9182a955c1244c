"""One training loop with bug hooks (indep6). Search BUG for every injected fault.

train(cfg) returns a list of per-step records (what a perfect logger would see every step);
writers.py then logs them the way each tool does (window means, current batch, per epoch...)."""
import copy
import math
import os
import time

import torch
import torch.nn.functional as F

from models import FAMILIES


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def make_opt(name, params, lr, cfg):
    wd = cfg.get("wd", 0.0)
    if name == "sgd":
        return torch.optim.SGD(params, lr, weight_decay=wd)
    if name == "momentum":   # BUG sgd_mom_999: momentum 0.999 comes from the config
        return torch.optim.SGD(params, lr, momentum=cfg.get("momentum", 0.9), weight_decay=wd)
    if name == "nesterov":
        return torch.optim.SGD(params, lr, momentum=0.9, nesterov=True, weight_decay=wd)
    if name == "adam":   # BUG adam_eps_1: eps=1.0 comes from the config
        return torch.optim.Adam(params, lr, eps=cfg.get("eps", 1e-8), weight_decay=wd)
    if name == "adamw":
        return torch.optim.AdamW(params, lr, eps=cfg.get("eps", 1e-8), weight_decay=wd or 0.01)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr, weight_decay=wd)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr)
    if name == "radam":
        return torch.optim.RAdam(params, lr)
    if name == "nadam":
        return torch.optim.NAdam(params, lr)
    raise ValueError(name)


def make_sched(opt, cfg, steps):
    s = cfg.get("sched", "const")
    w = cfg.get("warmup", 0)
    L = torch.optim.lr_scheduler
    if s == "const":
        return L.LambdaLR(opt, lambda i: 1.0)
    if s == "warmup_const":
        return L.LambdaLR(opt, lambda i: min(1.0, (i + 1) / w))
    if s == "warmup_overshoot":   # BUG warmup_overshoot: the min(1, .) cap of the warm-up was dropped
        return L.LambdaLR(opt, lambda i: (i + 1) / w)
    if s == "warmup_cos":
        return L.LambdaLR(opt, lambda i: (i + 1) / w if i < w else
                          0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, (i - w) / max(1, steps - w)))))
    if s == "warmup_lin":
        return L.LambdaLR(opt, lambda i: (i + 1) / w if i < w else max(0.02, 1 - (i - w) / max(1, steps - w)))
    if s == "cos":
        return L.CosineAnnealingLR(opt, T_max=steps)
    if s == "cos_restart":
        return L.CosineAnnealingWarmRestarts(opt, T_0=cfg["T0"])
    if s == "step_drop":
        return L.MultiStepLR(opt, milestones=cfg["milestones"], gamma=0.1)
    if s == "onecycle":
        return L.OneCycleLR(opt, max_lr=cfg["lr"], total_steps=steps + 2)
    if s == "exp":
        return L.ExponentialLR(opt, gamma=cfg["gamma"])
    raise ValueError(s)


class Loader:
    """Epoch-shuffled mini-batches over index range [0, n)."""

    def __init__(self, n, bs, seed, bugs):
        self.n, self.bs, self.bugs = n, bs, bugs
        self.g = torch.Generator()
        self.g.manual_seed(seed + 1000)
        self.per_epoch = max(1, n // bs)
        self.epoch, self.i = 0, 0
        self.perm = torch.randperm(n, generator=self.g)
        self.first = []

    def next(self):
        if "loader_repeat_subset" in self.bugs and len(self.first) >= 6:
            # BUG loader_repeat_subset: a cached iterator keeps replaying the first 6 batches
            b = self.first[self.i % 6]
            self.i += 1
            if self.i % self.per_epoch == 0:
                self.epoch += 1
            return b
        if self.i >= self.per_epoch:
            self.epoch += 1
            self.i = 0
            self.perm = torch.randperm(self.n, generator=self.g)
        b = self.perm[self.i * self.bs:(self.i + 1) * self.bs]
        self.i += 1
        if len(self.first) < 6:
            self.first.append(b)
        return b

    def state(self):
        return (self.g.get_state(), self.epoch, self.i, self.perm.clone())

    def load(self, s):
        self.g.set_state(s[0]); self.epoch, self.i, self.perm = s[1], s[2], s[3].clone()


def grad_norm(params):
    gs = [p.grad.detach().flatten() for p in params if p.grad is not None]
    if not gs:
        return 0.0
    return float(torch.cat(gs).norm())


def train(cfg):
    torch.set_num_threads(1)
    seed = cfg.get("seed", 0)
    torch.manual_seed(seed)
    bugs = set(cfg.get("bugs", ()))
    fam = FAMILIES[cfg["family"]](seed, cfg)
    model = fam.model
    steps, bs, lr = cfg["steps"], cfg.get("bs", 32), cfg["lr"]
    allp = list(model.parameters())

    if fam.custom:
        optG = make_opt(cfg.get("opt", "adam"), fam.G.parameters(), lr * cfg.get("g_lr_mult", 1.0), cfg)  # BUG gan_d_overpower: TTUR ratio inverted (g_lr_mult 0.01)
        optD = make_opt(cfg.get("opt", "adam"), fam.D.parameters(), lr * cfg.get("d_lr_mult", 1.0), cfg)
        opt = optG
    else:
        params = allp
        if "wrong_param_group" in bugs:
            # BUG wrong_param_group: the optimizer is built from one sub-module's parameters only
            params = [p for n, p in model.named_parameters() if n.startswith(cfg["opt_subset"])]
        opt = make_opt(cfg.get("opt", "adam"), params, lr, cfg)
    sched = make_sched(opt, cfg, steps)

    if fam.rl or fam.full_batch or fam.custom:
        loader = None
    else:
        loader = Loader(len(fam.Xtr), bs, seed, bugs)
    per_epoch = loader.per_epoch if loader else cfg.get("per_epoch", 1)

    scale, good = (2.0 ** 16, 0) if cfg.get("amp") else (None, 0)
    k_acc = cfg.get("accum", 1)
    recs, ckpts = [], {}
    t_start = time.perf_counter()
    t_offset = 0.0
    hist = []
    running = None
    first_p, last_p = fam.first_last()
    snapshot0 = None
    step = 0
    resumed = set()
    while step < steps:
        step += 1
        rec = {"step": step}
        t0 = time.perf_counter()
        # ---------------- data
        if fam.rl:
            batch = fam.rollout()
            if "reward_scale_explode" in bugs and step >= cfg["bug_at"]:
                fam.reward_mult = 1000.0   # BUG reward_scale_explode: reward normaliser divides by a ~0 running std
        elif fam.full_batch:
            batch = (fam.tr, None)
        elif fam.custom:
            batch = None
        else:
            idx = loader.next()
            batch = (fam.Xtr[idx], fam.Ytr[idx])
            if "corrupt_batch" in bugs and step in cfg["bug_steps"]:
                if cfg.get("corrupt_target"):   # BUG corrupt_batch: a shard written in the wrong unit (targets)
                    batch = (batch[0], batch[1] * cfg.get("corrupt_mult", 40.0))
                else:
                    batch = (batch[0] * cfg.get("corrupt_mult", 40.0), batch[1])   # BUG corrupt_batch
            if ("nan_midrun" in bugs or "nan_masked" in bugs) and step == cfg["bug_at"]:
                x = batch[0].clone().float() if batch[0].dtype.is_floating_point else None
                if x is not None:
                    x.view(len(x), -1)[0, -1] = float("nan")   # BUG nan_midrun: a record with a NaN field
                    batch = (x, batch[1])
        if "slow_loader" in bugs and step >= cfg.get("bug_at", 1):
            time.sleep(cfg.get("loader_sleep", 0.012))   # BUG slow_loader: decode/augment in the main process
        rec["dt"] = time.perf_counter() - t0
        rec["epoch"] = (loader.epoch + 1) if loader else ((step - 1) // per_epoch + 1)
        if fam.full_batch and "label_flip_midrun" in bugs and step == cfg["bug_at"]:
            fam.flip()
        if not fam.full_batch and loader is not None and "label_flip_midrun" in bugs and step == cfg["bug_at"]:
            g = torch.Generator(); g.manual_seed(seed + 5)
            sel = torch.rand(len(fam.Ytr), generator=g) < 0.6
            fam.Ytr = torch.where(sel, torch.randint(0, int(fam.Ytr.max()) + 1, fam.Ytr.shape, generator=g), fam.Ytr)
        rec["lr"] = opt.param_groups[0]["lr"]
        tc = time.perf_counter()
        # ---------------- compute
        if fam.custom:
            z = torch.randn(bs, 4)
            real = fam.real(bs)
            for _ in range(cfg.get("d_steps", 1)):
                optD.zero_grad()
                lD = F.binary_cross_entropy_with_logits(fam.D(real), torch.ones(bs, 1)) + \
                    F.binary_cross_entropy_with_logits(fam.D(fam.G(z).detach()), torch.zeros(bs, 1))
                lD.backward()
                optD.step()
            optG.zero_grad()
            lG = F.binary_cross_entropy_with_logits(fam.D(fam.G(z)), torch.ones(bs, 1))
            lG.backward()
            rec["gn"] = grad_norm(fam.G.parameters())
            optG.step()
            for gq in optD.param_groups:
                gq["lr"] = opt.param_groups[0]["lr"] / cfg.get("g_lr_mult", 1.0) * cfg.get("d_lr_mult", 1.0)
            lv = float(lG.detach())
            rec["loss_D"] = float(lD.detach())
            rec["gnf"] = float(first_p.grad.norm()); rec["gnl"] = float(last_p.grad.norm())
        else:
            opt.zero_grad()
            two = cfg.get("ranks", 1) == 2
            chunks = k_acc * (2 if two else 1)
            if fam.rl or fam.full_batch:
                parts_b = [batch]
            else:
                parts_b = [(batch[0][j::chunks], batch[1][j::chunks]) for j in range(chunks)]
            lv, parts = 0.0, {}
            ctimes = [0.0, 0.0]
            for j, b in enumerate(parts_b):
                tj = time.perf_counter()
                l, parts = fam.loss(b)
                if "loss_scale_collapse" in bugs and step >= cfg["bug_at"]:
                    w = first_p
                    # BUG loss_scale_collapse: an L2-distance regulariser sqrt(sum (w - w_ref)^2) at 0 -> NaN grads
                    l = l + 1e-3 * torch.sqrt(((w - w.detach()) ** 2).sum())
                if "grad_accum_unnorm" in bugs and step >= cfg.get("bug_at", 1):
                    lb = l   # BUG grad_accum_unnorm: micro-batch losses are summed, not averaged
                else:
                    lb = l / len(parts_b)
                if "mem_leak" in bugs:
                    running = lb if running is None else running + lb   # BUG mem_leak: loss tensor (not .item()) accumulated
                lb.backward(retain_graph="mem_leak" in bugs)
                lv += float(lb.detach())
                if two:
                    if j % 2 == 1 and "straggler" in bugs and step >= cfg.get("bug_at", 1):
                        time.sleep(cfg.get("straggle_s", 0.01))   # BUG straggler: rank 1 is on a slower host
                    ctimes[j % 2] += time.perf_counter() - tj
            if two:
                rec["c0"], rec["c1"] = ctimes
            rec.update({k: v for k, v in parts.items()})
            rec["gn"] = grad_norm(allp)
            rec["gnf"] = float(first_p.grad.norm()) if first_p.grad is not None else 0.0
            rec["gnl"] = float(last_p.grad.norm()) if last_p.grad is not None else 0.0
            do_step = True
            if scale is not None:
                gmax = max((float(p.grad.abs().max()) for p in allp if p.grad is not None), default=0.0)
                if not math.isfinite(gmax) or gmax * scale > 65504:
                    do_step = False
                    scale /= 2
                    good = 0
                else:
                    good += 1
                    if good >= cfg.get("growth", 100):
                        scale *= 2
                        good = 0
                rec["scale"] = scale
            if cfg.get("clip") is not None or "clip_zero" in bugs:
                # BUG clip_zero: max_norm read from an unset config key that defaults to 0
                torch.nn.utils.clip_grad_norm_(allp, 0.0 if "clip_zero" in bugs else cfg["clip"])
            if do_step:
                opt.step()
        sched.step()
        if "sched_double_step" in bugs:
            sched.step()   # BUG sched_double_step: scheduler also stepped by a callback
        rec["loss"] = lv
        if getattr(model, "probe", None) is not None:
            rec["dead"] = float((model.probe <= 0).all(0).float().mean())
        if not fam.custom and cfg.get('ranks', 1) == 2:
            rec["ct"] = time.perf_counter() - tc
        # ---------------- bookkeeping that costs time
        if "step_creep" in bugs:
            hist.extend([lv] * 48)   # BUG step_creep: a running percentile recomputed over all history
            sorted(hist)
        if "periodic_stall" in bugs and step % cfg["stall_every"] == 0:
            time.sleep(cfg.get("stall_s", 0.3))   # BUG periodic_stall: synchronous checkpoint upload
        rec["st"] = time.perf_counter() - t0
        if "c0" in rec:
            m = max(rec["c0"], rec["c1"])
            rec["w0"], rec["w1"] = m - rec["c0"] + 0.0004, m - rec["c1"] + 0.0004
        rec["rss"] = rss_mb()
        if scale is not None:
            rec["scale"] = scale
        # ---------------- eval
        ev = cfg.get("eval_every")
        if ev and (step % ev == 0 or step == steps) and not fam.rl and not fam.custom:
            rec["val"] = fam.val_loss(on_train="eval_on_train" in bugs)
        rec["t"] = time.perf_counter() - t_start + t_offset
        recs.append(rec)
        # ---------------- checkpoints, reloads, crashes
        if step == cfg.get("stale_snapshot", 0):
            snapshot0 = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()))
        if "stale_reload" in bugs and step == cfg["bug_at"]:
            # BUG stale_reload: an "auto-recover" hook reloads an early checkpoint but keeps counting
            model.load_state_dict(snapshot0[0]); opt.load_state_dict(snapshot0[1])
        ce = cfg.get("ckpt_every")
        if ce and step % ce == 0 and not fam.custom:
            ckpts[step] = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()),
                           copy.deepcopy(sched.state_dict()), loader.state() if loader else None, scale)
        if cfg.get("crash_at") == step and step not in resumed:
            resumed.add(step)
            back = cfg.get("resume_from", step)   # BUG resume_replay: restart from an older checkpoint than the last
            s = ckpts[back]
            model.load_state_dict(s[0]); opt.load_state_dict(s[1]); sched.load_state_dict(s[2])
            if loader:
                loader.load(s[3])
            scale = s[4]
            step = back
            t_offset += 75.0   # the job waited in the queue before the restart
    return recs
