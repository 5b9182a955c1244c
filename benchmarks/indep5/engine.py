"""One training loop with bug hooks. Search `BUG` for each injected fault.

train(spec) -> dict(points=[per optimizer-step dict], evals=[(step, val_loss)], meta)
Each point: step (1-based global step as logged by the loop), epoch, loss, lr, grad_norm, step_time_s,
data_time_s, rss_mb, and where the run has them: loss_scale, dead, gn_first, gn_last, ranks.
"""
import copy
import io
import math
import os
import time

import torch
import torch.nn as nn

from models import FAMILIES


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


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
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd or 0.01)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, weight_decay=wd)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, weight_decay=wd)
    if name == "adamax":
        return torch.optim.Adamax(params, lr=lr, weight_decay=wd)
    if name == "nadam":
        return torch.optim.NAdam(params, lr=lr, weight_decay=wd)
    if name == "radam":
        return torch.optim.RAdam(params, lr=lr, weight_decay=wd)
    raise ValueError(name)


def lr_mult(spec, s, spe):
    """Multiplier of the base lr at optimizer step s (1-based). spe = steps per epoch."""
    S = spec["steps"]
    kind = spec.get("sched", "const")
    W = spec.get("warmup", 0)
    if spec.get("fault") == "warmup_restart_epoch":
        # BUG warmup_restart_epoch: the warm-up counter is the step inside the epoch, not the global step,
        # so the warm-up starts again at every epoch
        s_w = (s - 1) % spe + 1
    else:
        s_w = s
    if W and s_w <= W:
        return s_w / W
    if kind == "const" or kind == "warmup_const":
        return 1.0
    if kind == "step":      # planned drops
        return spec.get("gamma", 0.1) ** sum(s > m for m in spec["milestones"])
    if kind in ("cosine", "warmup_cosine"):
        t = (s - W) / max(1, S - W)
        return 0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))
    if kind == "sgdr":      # cosine with warm restarts
        P = spec["period"]
        t = ((s - 1) % P) / P
        return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * t))
    if kind == "linear":
        return max(0.02, 1 - (s - W) / max(1, S - W))
    if kind == "exp":
        return spec.get("gamma", 0.998) ** s
    if kind == "onecycle":
        p = 0.3 * S
        if s < p:
            return 0.04 + 0.96 * s / p
        return 0.002 + 0.998 * 0.5 * (1 + math.cos(math.pi * (s - p) / (S - p)))
    raise ValueError(kind)


def _index(batch_tensors, idx):
    return tuple(t[idx] for t in batch_tensors)


def _corrupt(batch, factor):
    out, done = [], False
    for t in batch:
        if not done and t.is_floating_point():
            t = t * factor
            done = True
        out.append(t)
    return tuple(out)


def _poison_nan(batch):
    out, done = [], False
    for t in batch:
        if not done and t.is_floating_point():
            t = t.clone()
            t.view(-1)[0] = float("nan")
            done = True
        out.append(t)
    return tuple(out)


def train(spec, want_ref=False):
    torch.set_num_threads(1)
    torch.manual_seed(spec["seed"])
    if want_ref:       # the same run without the bug (used only to judge a plateau)
        spec = dict(spec)
        spec.update(spec.get("ref_set", {}))
        for k in spec.get("ref_drop", []):
            spec.pop(k, None)
        spec["fault"] = "none"
    fault = spec.get("fault", "none")
    g = torch.Generator().manual_seed(spec["seed"] + 7)
    cfg = dict(spec)
    fam = FAMILIES[spec["family"]](cfg, g)
    model = fam["model"]
    train_t, val_t = fam["train"], fam["val"]
    n = len(train_t[0])
    if fault == "label_noise":
        # BUG label_noise: a fraction of the training labels replaced by random classes
        y = train_t[-1].clone()
        m = torch.rand(n, generator=g) < spec.get("noise", 0.5)
        y[m] = torch.randint(0, int(y.max()) + 1, (int(m.sum()),), generator=g)
        train_t = tuple(train_t[:-1]) + (y,)
    if fault == "val_misaligned":
        # BUG val_misaligned: the validation inputs were shuffled for a "random subset" but the labels were not
        p = torch.randperm(len(val_t[0]), generator=g)
        val_t = (val_t[0][p],) + tuple(val_t[1:])
    bs = spec["bs"]
    spe = n // bs
    S = spec["steps"]
    lr = spec["lr"]
    opt = make_opt(spec["opt"], model.parameters(), lr, spec.get("wd", 0.0))
    scaler = spec.get("scaler")          # simulated fp16 dynamic loss scaling
    scale = 65536.0 if scaler else None
    good = 0
    leak_list = []
    if fault == "hook_leak":
        # BUG hook_leak: a debugging forward hook keeps every output (with its graph) in a list
        first = [m for m in model.modules() if isinstance(m, nn.Linear)][0]
        first.register_forward_hook(lambda mod, i, o: leak_list.append(o))
    layer_gn = fam.get("layer_gn") if spec.get("log_layers") else None
    dead_fn = fam.get("dead") if spec.get("log_dead") else None
    two_rank = fault == "straggler" or spec.get("ranks")
    perm = None
    ckpts = {}
    points, evals = [], []
    dgen = torch.Generator().manual_seed(spec["seed"] + 11)
    epoch_perms = {}

    def batch_for(i):
        """The i-th batch of the run (0-based), deterministic in i (so a replay sees the same data)."""
        e, j = divmod(i, spe)
        if e not in epoch_perms:
            epoch_perms[e] = torch.randperm(n, generator=torch.Generator().manual_seed(spec["seed"] * 1000 + e))
        return _index(train_t, epoch_perms[e][j * bs:(j + 1) * bs])

    def evaluate():
        model.eval()
        with torch.no_grad():
            cfg["_step"] = s
            tot, cnt = 0.0, 0
            nv = len(val_t[0])
            for a in range(0, nv, 256):
                b = _index(val_t, slice(a, a + 256))
                l, _ = fam["loss"](model, b, False)
                tot += float(l) * len(b[0])
                cnt += len(b[0])
        model.train()
        return tot / cnt

    s = 0
    resumed = False
    wall_gap = 0.0
    while s < S:
        s += 1
        t0 = time.perf_counter()
        # ---------------- data
        td = time.perf_counter()
        bi = s - 1
        if fault == "dup_batches":
            # BUG dup_batches: 4 loader workers seeded identically; each yields the same stream, so every batch
            # arrives 4 times in a row
            bi = (s - 1) // spec.get("dup", 4)
        b = batch_for(bi)
        if fault == "slow_loader" and s >= spec.get("slow_from", 1):
            time.sleep(spec.get("slow_s", 0.012))       # BUG slow_loader: a synchronous decode in the fetch
        if fault in ("corrupt_batch",) and s in spec["bad_steps"]:
            b = _corrupt(b, spec.get("factor", 50.0))    # BUG corrupt_batch: a batch with unscaled raw values
        if fault in ("nan_midrun", "nan_masked") and s == spec["nan_at"]:
            b = _poison_nan(b)                           # BUG nan_*: a record with a NaN feature enters the data
        data_time = time.perf_counter() - td
        # ---------------- epoch-level hooks
        epoch = (s - 1) // spe
        if fault == "opt_reset_epoch" and s > 1 and (s - 1) % spe == 0:
            # BUG opt_reset_epoch: the optimizer is built inside the epoch loop, so Adam's moments restart
            opt = make_opt(spec["opt"], model.parameters(), lr, spec.get("wd", 0.0))
        m = lr_mult(spec, s, spe)
        for pg in opt.param_groups:
            pg["lr"] = lr * m
        cfg["_step"] = s
        # ---------------- forward / backward
        ranks = None
        if two_rank:
            half = len(b[0]) // 2
            opt.zero_grad(set_to_none=True)
            comp = []
            losses = []
            for r in range(2):
                tr0 = time.perf_counter()
                br = _index(b, slice(r * half, (r + 1) * half))
                l, extra = fam["loss"](model, br, True)
                (l / 2).backward()
                if fault == "straggler" and r == 1 and s >= spec.get("strag_from", 1):
                    time.sleep(spec.get("strag_s", 0.012))   # BUG straggler: rank 1 is on a throttled host
                comp.append(time.perf_counter() - tr0)
                losses.append(float(l.detach()))
            loss = torch.tensor(sum(losses) / 2)
            ranks = comp
        else:
            loss, extra = fam["loss"](model, b, True)
            if fault == "loss_scale_collapse" and s >= spec["lsc_from"]:
                # BUG loss_scale_collapse: a norm regulariser written as sqrt(sum(d^2)) at d = 0 -> NaN grads
                w = next(model.parameters())
                loss = loss + 1e-6 * torch.sqrt(((w - w.detach()) ** 2).sum())
            if fault == "loss_x_const":
                loss = loss * spec.get("const", 1e4)     # BUG loss_x_const: a "sum over tokens" scaling
            if fault != "zerograd_after_bwd":
                opt.zero_grad(set_to_none=True)
            back = loss
            if fault == "fp16_underflow":
                # BUG fp16_underflow: the loss is normalised a second time (by the number of elements) before
                # an fp16 backward, so small gradients flush to zero in half precision
                back = loss / spec.get("underflow_div", 4e5)
            if scaler:
                (back * scale).backward()
            else:
                back.backward()
            if fault == "zerograd_after_bwd":
                opt.zero_grad(set_to_none=False)        # BUG zerograd_after_bwd: wipes the grads just computed
        if fault == "fp16_underflow":
            for p in model.parameters():
                if p.grad is not None:
                    p.grad = p.grad.half().float() * spec.get("underflow_div", 4e5)
        # ---------------- scaler, clipping, grad norm
        skipped = False
        if scaler:
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            if fault == "clip_prescale":
                # BUG clip_prescale: clip_grad_norm_ on the still-scaled gradients (no unscale_ first)
                torch.nn.utils.clip_grad_norm_(model.parameters(), spec.get("clip", 1.0))
            gmax = max(float(gr.abs().max()) for gr in grads)
            overflow = not math.isfinite(gmax) or gmax > 65504.0
            for gr in grads:
                gr.div_(scale)
            if overflow:
                skipped = True
                scale = max(scale / 2, 2.0 ** -24)
                good = 0
            else:
                good += 1
                if good % scaler == 0:
                    scale *= 2
        gn = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in model.parameters() if p.grad is not None)) \
            if any(p.grad is not None for p in model.parameters()) else 0.0
        lg = layer_gn(model) if layer_gn else None
        if spec.get("clip") and fault != "clip_prescale":
            torch.nn.utils.clip_grad_norm_(model.parameters(), spec["clip"])
        if not skipped:
            opt.step()
        if fault == "hook_leak":
            pass
        if fault == "sync_save_stall" and s % spec["stall_every"] == 0:
            # BUG sync_save_stall: a synchronous full checkpoint (serialise + fsync + upload) inside the step
            buf = io.BytesIO()
            torch.save({"m": model.state_dict(), "o": opt.state_dict()}, buf)
            time.sleep(spec.get("stall_s", 0.25))
        step_time = time.perf_counter() - t0
        pt = dict(step=s, epoch=epoch, loss=float(loss.detach()), lr=lr * m, grad_norm=gn, step_time_s=step_time,
                  data_time_s=data_time, rss_mb=rss_mb(), wall=time.time() + wall_gap)
        if fault == "loss_x_const" and not math.isfinite(pt["loss"]):
            pass
        if scaler:
            pt["loss_scale"] = scale
            pt["skipped"] = skipped
        if lg:
            pt["gn_first"], pt["gn_last"] = lg
        if dead_fn:
            pt["dead"] = dead_fn(model)
        if ranks:
            pt["ranks"] = ranks
        for k, v in (extra or {}).items():
            pt[k] = v
        points.append(pt)
        if spec.get("eval_every") and (s % spec["eval_every"] == 0 or s == S):
            evals.append((s, evaluate()))
        # ---------------- checkpoints and resume
        ck = spec.get("ckpt_every")
        if ck and s % ck == 0:
            ckpts[s] = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()), scale)
        if spec.get("crash_at") and s == spec["crash_at"] and not resumed:
            resumed = True
            back_to = spec["resume_from"]
            # BUG resume_replay: the job restarts from an older checkpoint and keeps logging from there
            # (healthy resumes use resume_from == crash_at, so steps stay contiguous)
            sd, od, scale = ckpts[back_to]
            model.load_state_dict(sd)
            opt.load_state_dict(od)
            s = back_to
            wall_gap += spec.get("gap_s", 90.0)
            points[-1]["crash_after"] = True
    return dict(points=points, evals=evals, spe=spe, n_train=n)
