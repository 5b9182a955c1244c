"""One training loop with bug hooks (search for BUG). Returns one record per optimizer step."""
import copy
import math
import time

import psutil
import torch

from models import FAMILIES, gen


# ------------------------------------------------------------------ optimizers
class Lion(torch.optim.Optimizer):
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
                if not st:
                    st["m"] = torch.zeros_like(p)
                m = st["m"]
                p.mul_(1 - gr["lr"] * gr["weight_decay"])
                p.add_(torch.sign(m * b1 + p.grad * (1 - b1)), alpha=-gr["lr"])
                m.mul_(b2).add_(p.grad, alpha=1 - b2)


class AdafactorLite(torch.optim.Optimizer):
    """Factored second moments for matrices (row/col), no momentum, update clipping d=1."""

    def __init__(self, params, lr=1e-2, beta2=0.99, eps=1e-30):
        super().__init__(params, dict(lr=lr, beta2=beta2, eps=eps))

    @torch.no_grad()
    def step(self):
        for gr in self.param_groups:
            for p in gr["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                st = self.state[p]
                g2 = g * g + gr["eps"]
                if g.dim() == 2:
                    if not st:
                        st["r"] = torch.zeros(g.shape[0])
                        st["c"] = torch.zeros(g.shape[1])
                    st["r"].mul_(gr["beta2"]).add_(g2.mean(1), alpha=1 - gr["beta2"])
                    st["c"].mul_(gr["beta2"]).add_(g2.mean(0), alpha=1 - gr["beta2"])
                    v = st["r"].unsqueeze(1) * st["c"].unsqueeze(0) / st["r"].mean()
                else:
                    if not st:
                        st["v"] = torch.zeros_like(g)
                    st["v"].mul_(gr["beta2"]).add_(g2, alpha=1 - gr["beta2"])
                    v = st["v"]
                u = g / v.sqrt()
                u = u / max(1.0, (u.pow(2).mean().sqrt()).item())
                p.add_(u, alpha=-gr["lr"])


def make_opt(name, params, lr, wd):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=wd)
    if name == "nesterov":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=wd)
    if name == "plain_sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=wd)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd or 0.01)
    if name == "lion":
        return Lion(params, lr=lr, weight_decay=wd)
    if name == "adafactor":
        return AdafactorLite(params, lr=lr)
    raise ValueError(name)


# ------------------------------------------------------------------ schedules (lr multiplier)
def sched_mult(s, step, total, spe):
    kind = s.get("kind", "const")
    w = s.get("warmup", 0)
    if kind == "const":
        return min(1.0, step / w) if w else 1.0
    if kind == "warmup_linear":
        if step < w:
            return step / w
        return max(0.0, (total - step) / max(1, total - w))
    if kind == "cosine_restarts":
        T = s["T0"]
        t = (step - 1) % T
        return 0.5 * (1 + math.cos(math.pi * t / T)) * 0.98 + 0.02
    if kind == "inv_sqrt":
        w = max(w, 1)
        return min(step / w, math.sqrt(w / step))
    if kind == "poly":
        tot = s.get("total", total)
        return max(0.0, 1 - step / tot) ** s.get("power", 2.0)
    if kind == "step_epochs":
        return s.get("gamma", 0.5) ** (step // (s["every_epochs"] * spe))
    if kind == "plateau":
        return 1.0
    raise ValueError(kind)


def rss_mb():
    return psutil.Process().memory_info().rss / 2**20


def grad_norm(params):
    gs = [p.grad.detach().norm() for p in params if p.grad is not None]
    if not gs:
        return 0.0
    return float(torch.norm(torch.stack(gs)))


def evaluate(fam, model, train_mode=False):
    was = model.training
    model.train(train_mode)
    with torch.no_grad():
        idx = torch.arange(min(fam.n_val, 256))
        loss, ex = fam.loss(model, fam.batch(idx, "val"))
    model.train(was)
    return float(loss), ex


# ------------------------------------------------------------------ training
def train(spec):
    torch.set_num_threads(1)
    torch.manual_seed(spec["seed"])
    bug = spec.get("bug", {})
    b = bug.get("kind", "none")
    cfg = dict(spec.get("cfg", {}))
    fam = FAMILIES[spec["family"]](cfg, spec["seed"])
    model = fam.model(cfg)
    if b == "init_too_large":  # BUG: custom init multiplies every weight matrix
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() > 1:
                    p.mul_(bug["factor"])
    if b == "frozen_layer":  # BUG: a freeze meant for the warm-up phase is never lifted
        for n, p in model.named_parameters():
            if any(n.startswith(k) for k in bug["prefixes"]):
                p.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_opt(spec["opt"], params, spec["lr"], spec.get("wd", 0.0))
    if b == "stale_optimizer":  # BUG: module re-created after the optimizer was built
        for attr in bug["replace"]:
            old = getattr(model, attr)
            new = copy.deepcopy(old)
            for m in new.modules():
                if hasattr(m, "reset_parameters"):
                    m.reset_parameters()
            setattr(model, attr, new)
    all_params = list(model.parameters())
    accum = spec.get("accum", 1)
    bs = spec["bs"]
    total = spec["steps"]
    per_step = bs * accum
    spe = max(1, fam.n_train // per_step)
    if b == "tiny_train":
        spe = max(1, bug["n"] // per_step)
    sched = dict(spec.get("sched", {"kind": "const"}))
    g = gen(spec["seed"] + 1)
    order = []
    scale = 2.0 ** 16 if spec.get("amp") else None
    good = 0
    plateau_best, plateau_bad, plateau_mult = float("inf"), 0, 1.0
    eval_every = spec.get("eval_every", spe)
    recs = []
    hist = []
    leak = []
    ranks = spec.get("ranks", 1)
    ckpt = None
    step = 0
    logical = 0      # logged step (differs from `step` after a buggy resume)
    data_pos = 0
    n_train = fam.n_train if b != "tiny_train" else bug["n"]
    t_start = time.perf_counter()
    model.train()
    if b == "eval_mode":  # BUG: an initial sanity eval calls model.eval() and it is never undone
        evaluate(fam, model)
        model.eval()
    while step < total:
        step += 1
        logical += 1
        t0 = time.perf_counter()
        # ---- lr
        sstep = logical
        if b == "sched_in_micro":  # BUG: scheduler.step() inside the micro-batch loop
            sstep = logical * accum
        if b == "lr_zero_resume" and step >= bug["at"]:  # BUG: resumed counter in samples, not steps
            sstep = logical * per_step
        if b == "warmup_never":  # BUG: warm-up given in samples but counted in steps
            sched = dict(sched, warmup=sched["warmup"] * per_step)
            b = "warmup_never_done"
        if b == "poly_per_batch":  # BUG: epoch-based poly schedule stepped per batch
            sched = dict(sched, total=sched["total_epochs"])
            b = "poly_per_batch_done"
        mult = sched_mult(sched, sstep, total, spe) * plateau_mult
        lr = spec["lr"] * mult
        for gr in opt.param_groups:
            gr["lr"] = lr
        opt.zero_grad(set_to_none=True)
        tr_loss = 0.0
        extras = {}
        data_ms = 0.0
        fwd = [0.0] * ranks
        for micro in range(accum):
            td = time.perf_counter()
            if data_pos + bs > n_train or not order:
                order = torch.randperm(n_train, generator=g).tolist()
                data_pos = 0
            idx = torch.tensor(order[data_pos:data_pos + bs])
            data_pos += bs
            batch = list(fam.batch(idx))
            if b == "slow_loader" and step >= bug.get("from", 1):  # BUG: decode/augment in the main process
                time.sleep(bug["sleep"])
            if b == "corrupt_batch" and step in bug["steps"]:  # BUG: a shard with corrupted values
                batch[0] = batch[0] * bug["factor"] if batch[0].is_floating_point() else batch[0]
            if b == "ctc_inf" and step in bug["steps"]:  # BUG: truncated utterance: input shorter than labels
                batch[2] = batch[2].clone()
                batch[2][0] = 1
            if b == "log0" and step in bug["steps"]:  # BUG: a sensor drop-out writes 0 into one target window
                batch[1] = batch[1].clone()
                batch[1][0] = 0.0
            data_ms += (time.perf_counter() - td) * 1000
            for r in range(ranks):
                tf = time.perf_counter()
                if ranks > 1:
                    h = len(idx) // ranks
                    rb = [t[r * h:(r + 1) * h] for t in batch]
                else:
                    rb = batch
                loss, ex = fam.loss(model, rb)
                if b == "loss_weight_blowup" and step >= bug["at"]:  # BUG: aux weight schedule overflows fp16
                    loss = loss * bug["factor"]
                if b == "accum_sum" and step >= bug.get("from", 1):  # BUG: micro-step loss not divided by k
                    (loss / ranks).backward()
                    tr_loss += loss.item() / ranks
                else:
                    (loss / accum / ranks).backward()
                    tr_loss += loss.item() / accum / ranks
                if b == "memory_leak":  # BUG: keeps the loss tensor (and its graph) for an epoch-end report
                    leak.append(loss)
                    leak.append(ex)
                if b == "straggler" and r == 1 and step >= bug.get("from", 1):
                    time.sleep(bug["sleep"])  # BUG (sim): rank 1 on a throttled host
                fwd[r] += (time.perf_counter() - tf) * 1000
                for k_, v in ex.items():
                    extras[k_] = extras.get(k_, 0.0) + v / accum / ranks
            if b == "step_every_micro" and micro < accum - 1:  # BUG: optimizer.step() in the micro loop
                opt.step()
                opt.zero_grad(set_to_none=True)
        if b == "loss_weight_blowup" and step >= bug["at"]:
            tr_loss = tr_loss / bug["factor"]
        gn = grad_norm(all_params)
        rec = {"step": logical, "epoch": (step - 1) / spe + 1e-9, "lr": lr, "loss": tr_loss, "gnorm": gn}
        if hasattr(model, "layers"):
            rec["g_first"] = float(model.layers[0].weight.grad.norm()) if model.layers[0].weight.grad is not None else 0.0
            rec["g_last"] = float(model.layers[-1].weight.grad.norm()) if model.layers[-1].weight.grad is not None else 0.0
        rec.update(extras)
        skip = False
        if scale is not None:
            gmax = max(float(p.grad.abs().max()) for p in all_params if p.grad is not None)
            if b == "loss_weight_blowup" and step >= bug["at"]:
                gmax = gmax * bug["factor"]
            if not math.isfinite(gmax) or gmax * scale > 65504.0:
                scale /= 2
                good = 0
                skip = True
            else:
                good += 1
                if good % spec.get("growth", 100) == 0:
                    scale *= 2
            rec["scale"] = scale
        if spec.get("skip_nonfinite") and not math.isfinite(gn):
            skip = True
        if spec.get("clip") and math.isfinite(gn):
            torch.nn.utils.clip_grad_norm_(all_params, spec["clip"])
        if not skip:
            opt.step()
        if b == "periodic_stall" and step % bug["every"] == 0:  # BUG: synchronous checkpoint upload
            time.sleep(bug["sleep"])
        if b == "step_creep":  # BUG: running metric recomputed over the whole history each step
            hist.extend([tr_loss] * bug["per_step"])
            _ = sum(x * x for x in hist) / len(hist)
        if ranks > 1:
            slow = max(fwd)
            rec["fwd_ms"] = fwd
            rec["wait_ms"] = [slow - f for f in fwd]
        rec["data_ms"] = data_ms
        rec["step_ms"] = (time.perf_counter() - t0) * 1000
        rec["rss_mb"] = rss_mb()
        rec["wall"] = time.perf_counter() - t_start
        if eval_every and step % eval_every == 0:
            vl, vex = evaluate(fam, model, train_mode=(b == "eval_train_mode"))
            rec["val_loss"] = vl
            if "acc" in vex:
                rec["val_acc"] = vex["acc"]
            if sched.get("kind") == "plateau":
                if vl < plateau_best * 0.995:
                    plateau_best, plateau_bad = vl, 0
                else:
                    plateau_bad += 1
                    if plateau_bad > sched.get("patience", 2):
                        plateau_mult *= 0.5
                        plateau_bad = 0
        recs.append(rec)
        # ---- resume bugs
        if b in ("resume_replay", "resume_reset") and ckpt is None and step == bug["save"]:
            ckpt = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()), logical, data_pos, list(order),
                    g.get_state())
        if b in ("resume_replay", "resume_reset") and step == bug["crash"]:
            if b == "resume_replay":  # BUG: restart from the older checkpoint; logged steps repeat
                model.load_state_dict(ckpt[0])
                opt.load_state_dict(ckpt[1])
                logical, data_pos, order = ckpt[2], ckpt[3], list(ckpt[4])
                g.set_state(ckpt[5])
            else:  # BUG: weights restored but the global step (and the schedule) restart at 0
                logical = 0
            b = b + "_done"
    return recs
