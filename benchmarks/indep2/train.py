"""Generic small training loop with injectable bugs.  train(spec) -> record dict.

The record holds every optimizer step (rows) and every evaluation (evals); the
log writers subsample it the way the imitated tool would."""
import copy
import math
import os
import time
import torch
import torch.nn as nn
import torch.nn.functional as F
from models import make_data, make_model

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2 ** 20


class Lion(torch.optim.Optimizer):
    """Sign-momentum optimizer written by hand (Chen et al. 2023)."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for gr in self.param_groups:
            b1, b2 = gr["betas"]
            for p in gr["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if "m" not in st:
                    st["m"] = torch.zeros_like(p)
                m = st["m"]
                p.mul_(1 - gr["lr"] * gr["weight_decay"])
                p.add_(torch.sign(b1 * m + (1 - b1) * p.grad), alpha=-gr["lr"])
                m.mul_(b2).add_(p.grad, alpha=1 - b2)


def make_opt(name, params, lr, wd=0.0):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=wd)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=wd)
    if name == "nesterov":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=wd)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, weight_decay=wd)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, weight_decay=wd)
    if name == "lion":
        return Lion(params, lr=lr, weight_decay=wd)
    raise ValueError(name)


def lr_lambda(kind, T, a):
    """Multiplicative factor as a function of the scheduler counter t."""
    w = a.get("warmup", 0)
    if kind == "constant":
        return lambda t: 1.0
    if kind == "step":
        return lambda t: a.get("gamma", 0.1) ** (t // a["step_size"])
    if kind == "exp":
        return lambda t: a["gamma"] ** t
    if kind == "cosine":
        return lambda t: (t + 1) / w if t < w else 0.5 * (1 + math.cos(math.pi * min(1.0, (t - w) / max(1, T - w))))
    if kind == "linear":
        return lambda t: (t + 1) / w if t < w else max(0.0, 1 - (t - w) / max(1, T - w))
    if kind == "warmup_const":
        return lambda t: (t + 1) / w if t < w else 1.0
    raise ValueError(kind)


def compute_loss(task, model, xb, yb, lb, fam):
    """Returns (loss, per-sample loss, metric dict)."""
    m = {}
    if task in ("reg", "rec"):
        out = model(xb)
        ps = ((out - yb) ** 2).mean(1)
    elif task == "bin":
        z = model(xb)
        if lb == "sigmoid_bce":
            ps = F.binary_cross_entropy_with_logits(torch.sigmoid(z), yb, reduction="none").mean(1)
        elif lb == "log_zero":
            p = torch.sigmoid(z)
            ps = -(yb * torch.log(p) + (1 - yb) * torch.log(1 - p)).mean(1)
        else:
            ps = F.binary_cross_entropy_with_logits(z, yb, reduction="none").mean(1)
        m["acc"] = ((z > 0).float() == yb).float().mean().item()
    elif task in ("cls", "lm"):
        z = model(xb)
        zz = torch.softmax(z, -1) if lb == "double_softmax" else z
        if task == "lm":
            ps = F.cross_entropy(zz.reshape(-1, zz.shape[-1]), yb.reshape(-1), reduction="none").view(yb.shape).mean(1)
        else:
            ps = F.cross_entropy(zz, yb, reduction="none")
        m["acc"] = (z.argmax(-1) == yb).float().mean().item()
    elif task == "ae":
        out, aux = model(xb)
        ps = ((out - yb) ** 2).mean(1)
        if fam == "vae":
            mu, logv = aux
            ps = ((out - yb) ** 2).sum(1) - 0.5 * (1 + logv - mu ** 2 - logv.exp()).sum(1)
    elif task == "pair":
        ea, eb = model(xb)
        eps = 0.0 if lb == "sqrt_nan" else 1e-9
        d = torch.sqrt(((ea - eb) ** 2).sum(1) + eps)
        s = yb[:, 0]
        ps = s * d ** 2 + (1 - s) * F.relu(2.0 - d) ** 2
        m["acc"] = ((d < 1.0).float() == s).float().mean().item()
    else:
        raise ValueError(task)
    loss = ps.sum() if lb == "loss_sum" else ps.mean()
    return loss, ps, m


def evaluate(task, model, data, lb, fam, l2norm):
    X, Y = data["Xva"], data["Yva"]
    tot, acc, n = 0.0, 0.0, 0
    with torch.no_grad():
        for i in range(0, len(X), 256):
            xb, yb = X[i:i + 256], Y[i:i + 256]
            if l2norm:
                xb = xb / xb.norm(dim=-1, keepdim=True).clamp_min(1e-12)
            _, ps, m = compute_loss(task, model, xb, yb, lb, fam)
            tot += ps.sum().item()
            acc += m.get("acc", 0.0) * len(xb)
            n += len(xb)
    out = {"val_loss": tot / n}
    if task in ("cls", "bin", "lm", "pair"):
        out["val_acc"] = acc / n
    return out


def _grad_norm(params):
    gs = [p.grad.detach().flatten() for p in params if p.grad is not None]
    return torch.cat(gs).norm().item() if gs else 0.0


def train(spec, _seed_off=0):
    torch.set_num_threads(1)
    seed = spec["seed"] + _seed_off
    torch.manual_seed(seed)
    fam, ba, lb = spec["family"], spec.get("ba", {}), spec.get("loss_bug")
    data = make_data(fam, spec["seed"], spec.get("n_train", 2048), 512, spec.get("data_opts"))
    task = data["task"]
    model = make_model(fam, spec.get("model_opts"))
    if ba.get("freeze_body"):
        for p in model.body.parameters():
            p.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_opt(spec["opt"], params, spec["lr"], spec.get("wd", 0.0))
    total, bs = spec["steps"], spec["bs"]
    Xtr, Ytr = data["Xtr"], data["Ytr"]
    spe = max(1, len(Xtr) // bs)
    sk, sa = spec.get("sched", "constant"), spec.get("sched_args", {})
    plateau = None
    if sk == "onecycle":
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=spec["lr"], total_steps=total + 5)
    elif sk == "plateau":
        sched = None
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=sa.get("patience", 2))
    else:
        T = total if sa.get("unit", "batch") == "batch" else math.ceil(total / spe)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(sk, T, sa))
    per_batch_sched = sa.get("unit", "batch") == "batch" or ba.get("sched_per_batch")
    # activation probes
    probe = {}
    acts = [mod for mod in model.modules() if isinstance(mod, (nn.ReLU, nn.Tanh))]
    if spec.get("probe_acts") and acts:
        acts[0].register_forward_hook(lambda mod, i, o: probe.__setitem__("a", o.detach()))
    if ba.get("leak_from"):  # features cached for an epoch-end metric, graph and all
        model.body.register_forward_hook(lambda mod, i, o: probe.__setitem__("feat", o))
    lins = [mod for mod in model.modules() if isinstance(mod, nn.Linear)]
    l2norm = spec.get("input_l2norm", False)
    ranks = spec.get("ranks", 1)
    fp16 = spec.get("fp16", False)
    scale, good = 2.0 ** 16, 0
    rows, evals, hist, ckpts = [], [], [], {}
    step, crashed = 0, False
    t_start = time.perf_counter()
    perm_cache = {}

    def perm_for(ep):
        if ep not in perm_cache:
            if ba.get("class_sorted"):
                key = Ytr[:, 0] if Ytr.dim() > 1 else Ytr
                perm_cache[ep] = torch.argsort(key, stable=True)
            else:
                perm_cache[ep] = torch.randperm(len(Xtr), generator=torch.Generator().manual_seed(seed * 7919 + ep))
        return perm_cache[ep]

    while step < total:
        t0 = time.perf_counter()
        ep, k = divmod(step, spe)
        idx = perm_for(ep)[k * bs:(k + 1) * bs]
        xb, yb = Xtr[idx].clone(), Ytr[idx].clone()
        s1 = step + 1
        if s1 in ba.get("poison_steps", ()):
            if xb.is_floating_point():
                xb = xb * ba.get("poison_scale", 20.0)
            else:
                yb = yb * ba.get("poison_scale", 20.0)
        if ba.get("inf_at") == s1:
            xb[0] = float("inf")
        if ba.get("zero_rows_from") and s1 >= ba["zero_rows_from"]:
            xb[:: ba.get("zero_rows_every", 16)] = 0.0
        if ba.get("dup_from") and s1 >= ba["dup_from"]:
            xb[0, 1] = xb[0, 0]  # a duplicated pair slips into every batch
        if ba.get("unnorm_from") and s1 >= ba["unnorm_from"]:
            xb = xb * ba.get("unnorm_scale", 3e4)
        if l2norm:
            nrm = xb.norm(dim=-1, keepdim=True)
            xb = xb / (nrm if ba.get("no_eps") else nrm.clamp_min(1e-12))
        if ba.get("sleep_ms") and s1 >= ba.get("sleep_from", 0):
            time.sleep(ba["sleep_ms"] / 1000)
        if ba.get("stall_every") and s1 % ba["stall_every"] == 0 and s1 >= ba.get("stall_from", 0):
            time.sleep(ba["stall_ms"] / 1000)
        t_data = time.perf_counter()
        model.train(not ba.get("forgot_train") or not evals)
        if not ba.get("no_zero_grad") or step == 0:
            opt.zero_grad(set_to_none=False)
        accum = ba.get("accum", 1) if s1 >= ba.get("accum_from", 0) else 1
        logged_loss, metr, rank_ms, rank_loss = 0.0, {}, [], []
        shards = [(xb, yb)] if ranks == 1 else list(zip(xb.chunk(ranks), yb.chunk(ranks)))
        for r, (xs, ys) in enumerate(shards):
            tr0 = time.perf_counter()
            if r == 1 and ba.get("rank_sleep_ms") and s1 >= ba.get("rank_sleep_from", 0):
                time.sleep(ba["rank_sleep_ms"] / 1000)
            rl = 0.0
            for xm, ym in zip(xs.chunk(accum), ys.chunk(accum)):
                loss, ps, metr = compute_loss(task, model, xm, ym, lb, fam)
                if accum > 1 and not ba.get("accum_undivided"):
                    loss = loss / accum
                (loss * (scale if fp16 else 1.0) / ranks).backward()
                rl += loss.item()
                if ba.get("leak_from") and s1 >= ba["leak_from"]:
                    hist.append(probe["feat"])  # never detached: the list grows every step
            rank_ms.append((time.perf_counter() - tr0) * 1000)
            rank_loss.append(rl)
        logged_loss = sum(rank_loss) / ranks
        if ba.get("creep"):
            hist.append(ps.detach())
            allp = torch.cat(hist)
            metr["running_median"] = torch.sort(allp)[0][len(allp) // 2].item()
        gfinite = all(torch.isfinite(p.grad).all() for p in params if p.grad is not None)
        skipped = False
        if fp16:
            gmax = max(p.grad.abs().max().item() for p in params if p.grad is not None) if gfinite else float("inf")
            if not gfinite or gmax > 65504:
                scale, good, skipped = scale / 2, 0, True
                gn = None
            else:
                for p in params:
                    p.grad.div_(scale)
                good += 1
                if good % spec.get("growth_interval", 200) == 0:
                    scale *= 2
        if not skipped:
            if spec.get("clip"):
                gn = float(torch.nn.utils.clip_grad_norm_(params, spec["clip"]))
            else:
                gn = _grad_norm(params)
            if ba.get("skip_nonfinite") and not math.isfinite(gn):
                skipped = True
        extra = {}
        if spec.get("layer_gn"):
            extra["gn_first"] = lins[0].weight.grad.norm().item()
            extra["gn_last"] = lins[-1].weight.grad.norm().item()
        if not skipped:
            opt.step()
        lr_now = opt.param_groups[0]["lr"]
        if sched is not None and (per_batch_sched or (s1 % spe == 0)):
            sched.step()
        t_end = time.perf_counter()
        if "a" in probe:
            a = probe["a"]
            if isinstance(acts[0], nn.ReLU):
                extra["dead_frac"] = (a.reshape(-1, a.shape[-1]) <= 0).all(0).float().mean().item()
            else:
                extra["sat_frac"] = (a.abs() > 0.99).float().mean().item()
        row = dict(step=s1, epoch=s1 / spe, loss=logged_loss, lr=lr_now, grad_norm=gn,
                   step_ms=(t_end - t0) * 1000, data_ms=(t_data - t0) * 1000, rss_mb=rss_mb(),
                   samples_per_s=bs / max(1e-9, t_end - t0), time=t_end - t_start, **metr, **extra)
        if fp16:
            row["loss_scale"] = scale
        if ranks > 1:
            row["rank_ms"], row["rank_loss"] = rank_ms, rank_loss
        if crashed:
            row["segment"] = 1
        rows.append(row)
        step = s1
        if spec.get("eval_every") and (s1 % spec["eval_every"] == 0 or s1 == total):
            if not ba.get("no_eval_mode"):
                model.eval()
            ev = evaluate(task, model, data, lb, fam, l2norm)
            ev.update(step=s1, epoch=s1 / spe, segment=1 if crashed else 0)
            evals.append(ev)
            if plateau is not None:
                plateau.step(ev["val_loss"] if math.isfinite(ev["val_loss"]) else 1e9)
            model.train(not ba.get("forgot_train"))
        if ba.get("ckpt_every") and s1 % ba["ckpt_every"] == 0:
            ckpts[s1] = copy.deepcopy((model.state_dict(), opt.state_dict(),
                                       sched.state_dict() if sched else None, scale, good))
        if ba.get("crash_at") == s1 and not crashed:
            crashed = True
            src = ba["resume_from"]
            msd, osd, ssd, scale, good = copy.deepcopy(ckpts[src])
            model.load_state_dict(msd)
            opt.load_state_dict(osd)
            if sched is not None:
                sched.load_state_dict(ssd)
            step = src
            time.sleep(0.2)  # restart gap
    rec = dict(rows=rows, evals=evals, spe=spe, task=task, n_train=len(Xtr), wall_s=time.perf_counter() - t_start)
    if ba.get("append_steps") and not _seed_off:
        sub = dict(spec, steps=ba["append_steps"], ba={})
        rec2 = train(sub, _seed_off=1)
        for r in rec2["rows"]:
            r["segment"] = 1
            r["time"] += rows[-1]["time"] + 30.0
        for e in rec2["evals"]:
            e["segment"] = 1
        rec["rows"] += rec2["rows"]
        rec["evals"] += rec2["evals"]
        rec["wall_s"] += rec2["wall_s"]
    return rec
