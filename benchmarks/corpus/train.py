"""Tiny model families, their data and one training loop with real fault injection.

Used by ``build.py``. Every run really trains (CPU, one thread, a few seconds) and returns what
it measured step by step; nothing here writes files or decides labels.

``train(spec)`` returns a dict::

    {"steps": [{"step", "epoch", "loss", "grad_norm", "lr", "step_time_s", "data_time_s",
                "compute_time_s", "rss_mb", "acc", "loss_scale"?}...],
     "evals": [{"step", "epoch", "val_loss", "val_acc"}...],
     "ranks": {1: [...]}  # only for two-rank runs: rank 1's step rows (rank 0 is "steps")
     "steps_per_epoch": int, "kind": "ce"|"mse", "n_classes": int}
"""

from __future__ import annotations

import copy
import math
import os
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
TEXT = HERE.parents[1] / "src" / "trainmedic" / "demo" / "corpus.txt"
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE / 2**20
    except OSError:
        return float("nan")


# ----------------------------------------------------------------------------- data
def blobs(seed: int, n: int, dim: int = 20, classes: int = 5, spread: float = 1.0):
    g = np.random.default_rng(1000 + seed)
    centers = g.normal(0, spread, (classes, dim))
    y = g.integers(0, classes, n)
    x = centers[y] + g.normal(0, 1.0, (n, dim))
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y)


def images(seed: int, n: int, size: int = 16):
    """Four classes of 16x16 patterns (horizontal / vertical / diagonal stripes, a blob) with
    random phase, frequency, contrast and noise; values about in [0, 1]."""
    g = np.random.default_rng(2000 + seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    y = g.integers(0, 4, n)
    out = np.empty((n, 1, size, size), np.float32)
    for i in range(n):
        f = g.uniform(0.5, 1.2)
        ph = g.uniform(0, 2 * np.pi)
        c = y[i]
        if c == 0:
            p = np.sin(f * yy + ph)
        elif c == 1:
            p = np.sin(f * xx + ph)
        elif c == 2:
            p = np.sin(f * 0.7 * (xx + yy) + ph)
        else:
            cy, cx = g.uniform(4, 12, 2)
            p = 2 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / g.uniform(4, 12)) - 1
        out[i, 0] = 0.5 + 0.5 * g.uniform(0.3, 1.0) * p + g.normal(0, 0.35, (size, size))
    return torch.tensor(out.clip(0, 1)), torch.tensor(y)


def sine_seqs(seed: int, n: int, length: int = 24):
    g = np.random.default_rng(3000 + seed)
    y = g.integers(0, 4, n)
    freqs = np.array([0.25, 0.4, 0.55, 0.7])
    t = np.arange(length, dtype=np.float32)
    ph = g.uniform(0, 2 * np.pi, n)
    x = np.sin(freqs[y][:, None] * t[None, :] + ph[:, None]) + g.normal(0, 0.6, (n, length))
    return torch.tensor(x[..., None], dtype=torch.float32), torch.tensor(y)


_TEXT_CACHE: dict = {}


def text_data():
    if not _TEXT_CACHE:
        s = TEXT.read_text(encoding="utf-8")[:60000]
        vocab = sorted(set(s))
        idx = torch.tensor([vocab.index(ch) for ch in s])
        cut = int(len(idx) * 0.9)
        _TEXT_CACHE.update(train=idx[:cut], val=idx[cut:], vocab=len(vocab))
    return _TEXT_CACHE


class Data:
    """Arrays plus how to draw a batch. ``kind`` is ce (classification) or mse."""

    def __init__(self, family: str, sp: dict):
        seed = sp["seed"]
        self.family = family
        self.kind = "ce"
        self.text = False
        n_tr = sp.get("n_train", 3000)
        if family in ("mlp", "mlp_deep"):   # train and val drawn around the same centres
            x, y = blobs(seed, n_tr + 800, spread=sp.get("spread", 1.0))
            self.xtr, self.ytr, self.xva, self.yva = x[:n_tr], y[:n_tr], x[n_tr:], y[n_tr:]
            self.C = 5
        elif family in ("cnn", "resnet", "vit"):
            self.xtr, self.ytr = images(seed, n_tr)
            self.xva, self.yva = images(seed + 500, 600)
            self.C = 4
            if family in ("cnn", "resnet"):   # raw pixel scale, normalised by BatchNorm
                self.xtr, self.xva = self.xtr * 255, self.xva * 255
            else:
                self.xtr, self.xva = (self.xtr - 0.5) / 0.3, (self.xva - 0.5) / 0.3
        elif family == "ae":
            x, _ = images(seed, n_tr + 600)
            x = x.flatten(1)
            self.xtr, self.ytr, self.xva, self.yva = x[:n_tr], x[:n_tr], x[n_tr:], x[n_tr:]
            self.kind, self.C = "mse", 0
        elif family == "reg":
            g = np.random.default_rng(4000 + seed)
            w = g.normal(0, 1, 16)
            x = g.normal(0, 1, (n_tr + 600, 16))
            # targets in metres, noise 1 mm (``target_scale``: other units, other scales)
            y = (x @ w + g.normal(0, 1, len(x))) * sp.get("target_scale", 1e-3)
            x = torch.tensor(x, dtype=torch.float32)
            y = torch.tensor(y, dtype=torch.float32)[:, None]
            self.xtr, self.ytr, self.xva, self.yva = x[:n_tr], y[:n_tr], x[n_tr:], y[n_tr:]
            self.kind, self.C = "mse", 0
        elif family in ("gru", "lstm", "rnn"):
            self.xtr, self.ytr = sine_seqs(seed, n_tr)
            self.xva, self.yva = sine_seqs(seed + 500, 600)
            self.C = 4
        elif family == "chartf":
            td = text_data()
            self.text = True
            self.tr, self.va, self.C = td["train"], td["val"], td["vocab"]
            if sp.get("text_chars"):       # a tiny training text (overfits)
                self.tr = self.tr[: sp["text_chars"]]
        else:
            raise ValueError(family)

    def n(self) -> int:
        return len(self.tr) if self.text else len(self.xtr)


# ----------------------------------------------------------------------------- models
class MLP(nn.Module):
    def __init__(self, din=20, h=64, dout=5, depth=2, act=nn.ReLU):
        super().__init__()
        layers, d = [], din
        for _ in range(depth):
            layers += [nn.Linear(d, h), act()]
            d = h
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(d, dout)

    def forward(self, x):
        return self.head(self.body(x))


class CNN(nn.Module):
    def __init__(self, C=4, w=8):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(w, 2 * w, 3, padding=1), nn.BatchNorm2d(2 * w), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(2 * w, C)

    def forward(self, x):
        return self.head(self.body(x))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


class ResNet(nn.Module):
    def __init__(self, C=4):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 12, 3, padding=1, bias=False), nn.BatchNorm2d(12),
                                  nn.ReLU(), nn.MaxPool2d(2), Block(12), Block(12),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(12, C)

    def forward(self, x):
        return self.head(self.body(x))


class ViT(nn.Module):
    def __init__(self, C=4, d=32, patch=4):
        super().__init__()
        self.patch = patch
        self.embed = nn.Linear(patch * patch, d)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, 17, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, 2, 64, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.body = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, C)

    def forward(self, x):
        b, p = x.shape[0], self.patch
        t = x.unfold(2, p, p).unfold(3, p, p).reshape(b, -1, p * p)
        t = torch.cat([self.cls.expand(b, -1, -1), self.embed(t)], 1) + self.pos
        return self.head(self.norm(self.body(t)[:, 0]))


class CharTF(nn.Module):
    def __init__(self, V, d=32, T=32):
        super().__init__()
        self.emb = nn.Embedding(V, d)
        self.pos = nn.Parameter(torch.randn(1, T, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, 2, 96, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.body = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, V)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(T))

    def forward(self, x):
        T = x.shape[1]
        h = self.emb(x) + self.pos[:, :T]
        return self.head(self.body(h, mask=self.mask[:T, :T], is_causal=True))


class RNNClf(nn.Module):
    def __init__(self, kind="gru", h=32, C=4):
        super().__init__()
        cls = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn": nn.RNN}[kind]
        self.rnn = cls(1, h, batch_first=True)
        self.head = nn.Linear(h, C)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


class AE(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 16), nn.ReLU(),
                                  nn.Linear(16, 64), nn.ReLU())
        self.head = nn.Linear(64, 256)

    def forward(self, x):
        return self.head(self.body(x))


def make_model(family: str, sp: dict, data: Data) -> nn.Module:
    if family == "mlp":
        return MLP(h=sp.get("hidden", 64), dout=data.C)
    if family == "mlp_deep":
        return MLP(h=32, dout=data.C, depth=sp.get("depth", 16), act=nn.Sigmoid)
    if family == "cnn":
        return CNN(data.C, sp.get("width", 8))
    if family == "resnet":
        return ResNet(data.C)
    if family == "vit":
        return ViT(data.C)
    if family == "chartf":
        return CharTF(data.C)
    if family in ("gru", "lstm", "rnn"):
        return RNNClf(family, h=sp.get("rnn_hidden", 32), C=data.C)
    if family == "ae":
        return AE()
    if family == "reg":     # linear regression from zero
        m = nn.Linear(16, 1)
        nn.init.zeros_(m.weight)
        nn.init.zeros_(m.bias)
        return m
    raise ValueError(family)


# ----------------------------------------------------------------------------- schedule
def lr_factor(sched: str, step: int, total: int, warm: int) -> float:
    if sched == "const":
        return 1.0
    if sched == "warmup_const":
        return min(1.0, (step + 1) / max(1, warm))
    if sched == "cosine":      # linear warm-up then cosine to 0
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))
    if sched == "linear":
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (total - step) / max(1, total - warm))
    if sched == "step":        # x0.1 at 60% and 85%
        return 0.1 ** ((step >= 0.6 * total) + (step >= 0.85 * total))
    if sched == "never_ending_warmup":   # warm-up length set to 10x the run by mistake
        return (step + 1) / (10 * total)
    if sched == "rising":                # gamma > 1: an exponential schedule that grows
        return 1.02 ** step
    raise ValueError(sched)


def make_opt(name: str, params, lr: float, wd: float):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=wd)
    if name == "sgd_plain":
        return torch.optim.SGD(params, lr=lr, weight_decay=wd)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, weight_decay=wd)
    raise ValueError(name)


# ----------------------------------------------------------------------------- loop
def _batch(data: Data, rng: np.random.Generator, bs: int, order, pos: int, T: int = 32):
    if data.text:
        starts = rng.integers(0, len(data.tr) - T - 1, bs)
        x = torch.stack([data.tr[s:s + T] for s in starts])
        y = torch.stack([data.tr[s + 1:s + T + 1] for s in starts])
        return x, y
    idx = order[pos:pos + bs]
    return data.xtr[idx], data.ytr[idx]


def _loss(out, y, kind, fault, reduction="mean"):
    if kind == "mse":
        return F.mse_loss(out, y, reduction=reduction)
    if out.dim() == 3:
        out, y = out.reshape(-1, out.shape[-1]), y.reshape(-1)
    if fault == "double_softmax":   # softmax in the model's head, then cross_entropy again
        return F.nll_loss(F.log_softmax(F.softmax(out, -1), -1), y, reduction=reduction)
    return F.cross_entropy(out, y, reduction=reduction)


@torch.no_grad()
def evaluate(model, data: Data, kind, fault, rng, n_eval: int | None, poison=False):
    was = model.training
    model.eval()
    if data.text:
        n = n_eval or 64
        starts = rng.integers(0, len(data.va) - 33, n) if n_eval else np.arange(0, 64 * 40, 40)
        x = torch.stack([data.va[s:s + 32] for s in starts])
        y = torch.stack([data.va[s + 1:s + 33] for s in starts])
    else:
        idx = rng.choice(len(data.xva), n_eval, replace=False) if n_eval else slice(None)
        x, y = data.xva[idx], data.yva[idx]
    if poison:
        x = x.clone()
        x.view(-1)[0] = float("nan") if x.dtype.is_floating_point else x.view(-1)[0]
    out = model(x)
    loss = _loss(out, y, kind, fault).item()
    if poison and data.text:
        loss = float("nan")
    acc = None
    if kind == "ce":
        pred = out.argmax(-1)
        acc = (pred == y).float().mean().item()
    model.train(was)
    return loss, acc


def _pretrain(model, data: Data, sp: dict, n: int) -> None:
    """``n`` unlogged Adam steps (lr 2e-3) on the training data: a "pretrained" start."""
    prng = np.random.default_rng(sp["seed"] + 991)
    popt = torch.optim.Adam(model.parameters(), lr=sp.get("pretrain_lr", 2e-3))
    bs = sp.get("batch", 64)
    nn_ = data.n()
    for i in range(n):
        order = prng.permutation(nn_) if not data.text else None
        x, y = _batch(data, prng, bs, order, 0)
        popt.zero_grad(set_to_none=True)
        _loss(model(x), y, data.kind, "none").backward()
        popt.step()
        del i


def train(sp: dict) -> dict:
    """Train one spec; the fault named in ``sp['fault']`` is injected into this loop."""
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="Full backward hook")
    torch.manual_seed(sp["seed"])
    rng = np.random.default_rng(sp["seed"])
    fault = sp.get("fault", "none")
    family = sp["family"]
    data = Data(family, sp)
    model = make_model(family, sp, data)
    kind = data.kind
    steps, bs = sp.get("steps", 300), sp.get("batch", 64)
    n_ranks = sp.get("ranks", 1)
    if fault == "shuffled_labels":
        data.ytr = data.ytr[torch.randperm(len(data.ytr))]
    if fault == "leakage":       # the val split was drawn from the training rows
        data.xva, data.yva = data.xtr[:600], data.ytr[:600]
    if fault == "bad_init":     # init scaled x100 (a custom init that forgot 1/sqrt(fan_in))
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() > 1:
                    p.mul_(sp.get("init_scale", 100.0))
    if fault == "dead_relu":     # bias init far negative: every ReLU of the first layer is dead
        with torch.no_grad():
            model.body[0].bias.fill_(-100.0)
    if fault == "frozen":        # "freeze the embeddings" loop froze everything but the head
        for name, p in model.named_parameters():
            if not name.startswith("head"):
                p.requires_grad_(False)
    if sp.get("pretrain_steps"):
        # a fine-tune: the model starts from a checkpoint trained (unlogged) on the same task
        _pretrain(model, data, sp, sp["pretrain_steps"])
    params = [p for p in model.parameters() if p.requires_grad]
    opt_model = model
    if fault == "optimizer_copy":   # optimizer built on a deepcopy: the trained model never moves
        opt_model = copy.deepcopy(model)
        params = list(opt_model.parameters())
    lr0 = sp.get("lr", 1e-3)
    opt = make_opt(sp.get("opt", "adam"), params, lr0, sp.get("wd", 0.0))
    sched = sp.get("sched", "const")
    warm = sp.get("warmup", max(1, steps // 10))
    per_batch_decay = None
    if fault == "sched_per_batch":  # StepLR(step_size=epochs) stepped every batch
        if sp.get("per_batch_kind") == "cosine":   # CosineAnnealingLR(T_max=epochs)
            per_batch_decay = torch.optim.lr_scheduler.CosineAnnealingLR(
                opt, T_max=sp.get("sched_every", 8))
        elif sp.get("per_batch_kind") == "exp":    # ExponentialLR(gamma) meant per epoch
            per_batch_decay = torch.optim.lr_scheduler.ExponentialLR(
                opt, gamma=sp.get("gamma", 0.9))
        else:
            per_batch_decay = torch.optim.lr_scheduler.StepLR(
                opt, step_size=sp.get("sched_every", 8), gamma=sp.get("gamma", 0.5))
    else:
        sch = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: lr_factor(sched, s, steps, warm))
    n_items = data.n()
    spe = max(1, n_items // bs) if not data.text else sp.get("steps_per_epoch", 25)
    if fault == "class_sorted":
        base_order = np.argsort(data.ytr.numpy(), kind="stable")
    order = None
    accum = sp.get("accum", 1)
    clip = sp.get("clip")
    kept = []
    hooks = []
    if fault == "fp16_no_scaler":   # activation gradients pass through fp16 in backward
        def to_half(mod, gout):
            return tuple(None if g is None else g.half().float() for g in gout)
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                hooks.append(m.register_full_backward_pre_hook(to_half))
    scaler = None
    anchor = None
    if fault == "loss_scale_collapse":
        # fp16 autocast with a GradScaler, and from `anchor_at` an L2-to-anchor regulariser
        # sqrt(sum((w - w_anchor)^2)) whose gradient is NaN while w == w_anchor: every step is
        # skipped, so w never moves off the anchor, and the scaler halves the scale each step
        scaler = torch.amp.GradScaler("cpu")
    dead = {}
    if sp.get("layer_stats") and isinstance(getattr(model, "body", [None])[1], nn.ReLU):
        def dead_hook(mod, inp, out):
            dead["v"] = (out.detach().amax(0) <= 0).float().mean().item()
        hooks.append(model.body[1].register_forward_hook(dead_hook))
    stall_every = sp.get("stall_every", 50)
    rows, evals, rank1 = [], [], []
    spike_steps = set(sp.get("spike_steps", []))
    eval_every = sp.get("eval_every", 25)
    nan_evals = set(sp.get("nan_evals", []))
    t_start = time.perf_counter()
    model.train()
    if fault == "bn_eval":
        model.eval()            # model.eval() before the loop, model.train() never called
    eval_i = 0
    saved = None
    slow_ref = None
    resumed = False
    step = -1
    while step < steps - 1:
        step += 1
        if fault == "resume_repeat" and step == sp.get("ckpt_at", 150):
            if saved is None:
                saved = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()),
                         copy.deepcopy(sch.state_dict()))
        if fault == "resume_repeat" and step == sp.get("crash_at", 200) and not resumed:
            # the job died at crash_at; it restarted from the checkpoint of ckpt_at and
            # logged steps ckpt_at..crash_at a second time into the same file
            model.load_state_dict(saved[0])
            opt.load_state_dict(saved[1])
            sch.load_state_dict(saved[2])
            rng = np.random.default_rng(sp["seed"] + 77)
            step = sp.get("ckpt_at", 150)
            resumed = True
        epoch = step // spe
        pos = (step % spe) * bs
        if step % spe == 0 and not data.text:
            order = base_order if fault == "class_sorted" else rng.permutation(n_items)
        t0 = time.perf_counter()
        # ---- data
        micro = []
        for k in range(accum):
            if accum > 1:
                p2 = ((step * accum + k) % spe) * bs if not data.text else 0
                if not data.text and (step * accum + k) % spe == 0:
                    order = rng.permutation(n_items)
                micro.append(_batch(data, rng, bs, order, p2))
            else:
                micro.append(_batch(data, rng, bs, order, pos))
        if fault == "slow_loader":
            time.sleep(sp.get("load_sleep", 0.006))   # decoding on the main thread
        if fault == "poisoned_batches" and step in spike_steps:
            x, y = micro[0]
            if data.text:   # a binary blob in the text: targets a rare symbol
                y = torch.full_like(y, data.C - 1)
            elif kind == "mse":
                x = x * 8.0 if family != "reg" else x
                y = y + sp.get("poison_shift", 3.0) if family != "ae" else y * 8.0
            else:
                x = x * 6.0
                y = torch.randint(0, data.C, y.shape)
            micro[0] = (x, y)
        if fault == "tiny_loss_jump" and step in spike_steps:
            x, y = micro[0]
            micro[0] = (x, y + 0.5)          # a batch in metres among millimetres
        t1 = time.perf_counter()
        # ---- compute
        if fault not in ("no_zero_grad",):
            opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        correct = 0.0
        for x, y in micro:
            with torch.autocast("cpu", dtype=torch.float16, enabled=scaler is not None):
                out = model(x)
            red = "sum" if fault == "summed_loss" else "mean"
            loss = _loss(out.float(), y, kind, fault, red)
            if scaler is not None and step >= sp.get("anchor_at", steps // 3):
                if anchor is None:
                    anchor = [p.detach().clone() for p in model.parameters()]
                loss = loss + 0.01 * torch.sqrt(sum(((p - a) ** 2).sum() for p, a in
                                                    zip(model.parameters(), anchor, strict=True)))
            if fault == "memory_growth":
                # backward(retain_graph=True) (added to silence an error) and the loss kept in
                # a history list: every step's graph and its saved activations stay alive
                kept.append(loss)
            scaled = loss / (accum if fault != "accum_not_divided" else 1)
            if scaler is not None:
                scaled = scaler.scale(scaled)
            scaled.backward(retain_graph=fault == "memory_growth")
            lv = loss.item()
            loss_sum += lv
            if kind == "ce" and not data.text:
                correct += (out.argmax(-1) == y).float().mean().item()
        lv = loss_sum / accum
        # (optimizer_copy: the gradients land on the live model; the copy the optimizer holds
        # has none, so step() moves nothing)
        layer_gn = {}
        if sp.get("layer_stats"):
            for lname, mod in (("body.0", model.body[0]), ("head", model.head)):
                g = mod.weight.grad
                layer_gn[f"layer/{lname}/grad_norm"] = g.norm().item() if g is not None else 0.0
        if scaler is not None:
            scaler.unscale_(opt)
        gparams = [p for p in model.parameters() if p.grad is not None]
        if gparams:
            gn = torch.nn.utils.clip_grad_norm_(gparams, clip if clip else float("inf")).item()
        else:
            gn = 0.0
        scale_used = None
        if scaler is not None:
            scale_used = scaler.get_scale()
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        if per_batch_decay is not None:
            per_batch_decay.step()
        else:
            sch.step()
        if fault == "periodic_stall" and step > 0 and step % stall_every == 0:
            # a synchronous checkpoint every N steps: ~20x the recent median step
            recent = sorted(r["step_time_s"] for r in rows[-20:])
            time.sleep(sp.get("stall_s") or sp.get("stall_x", 20) * recent[len(recent) // 2])
        if fault == "throughput_regression" and step >= sp.get("straggle_at", steps // 2):
            # a neighbour process takes the core: each step now also waits ~1.5x the median
            # step of the first half
            if slow_ref is None:
                first = sorted(r["step_time_s"] for r in rows)
                slow_ref = first[len(first) // 2]
            time.sleep(sp.get("slow_x", 1.5) * slow_ref)
        t2 = time.perf_counter()
        lr_now = opt.param_groups[0]["lr"]
        row = {"step": step, "epoch": epoch, "loss": lv, "grad_norm": gn, "lr": lr_now,
               "step_time_s": t2 - t0, "data_time_s": t1 - t0, "compute_time_s": t2 - t1,
               "wall_s": t2 - t_start}
        row.update(layer_gn)
        if "v" in dead:
            row["layer/body.1/dead_frac"] = dead["v"]
        if scale_used is not None:
            row["loss_scale"] = scale_used
        if kind == "ce" and not data.text:
            row["acc"] = correct / accum
        if fault == "memory_growth" or sp.get("log_rss"):
            row["rss_mb"] = rss_mb()
        if n_ranks == 2:
            # a second rank on the same data-parallel step: its own compute time is measured
            # by running its shard's forward/backward here; after the straggle point rank 1
            # also sleeps (a throttled host). Both ranks then wait for the slower one (the
            # all-reduce), which is their step time.
            r0c = t2 - t1
            t3 = time.perf_counter()
            with torch.no_grad():
                model(micro[0][0])
            t4 = time.perf_counter()
            if fault == "straggler" and step >= sp.get("straggle_at", steps // 2):
                time.sleep(sp.get("straggle_s", 0.01))
            r1c = 3 * (t4 - t3) + (time.perf_counter() - t4)   # fwd+bwd ~ 3x a forward
            slow = max(r0c, r1c)
            row["compute_time_s"] = r0c
            row["comm_time_s"] = slow - r0c + 0.0004
            row["step_time_s"] = (t1 - t0) + slow + 0.0004
            r1 = dict(row)
            r1.update(compute_time_s=r1c, comm_time_s=slow - r1c + 0.0004,
                      loss=lv * (1 + 0.02 * rng.normal()), data_time_s=(t1 - t0) * 1.05)
            rank1.append(r1)
        rows.append(row)
        if (step + 1) % eval_every == 0 or step == steps - 1:
            poison = eval_i in nan_evals
            vl, va = evaluate(model, data, kind, fault, rng, sp.get("n_eval"), poison)
            evals.append({"step": step, "epoch": epoch, "val_loss": vl, "val_acc": va})
            eval_i += 1
            if fault == "bn_eval":
                model.eval()
    for h in hooks:
        h.remove()
    return {"steps": rows, "evals": evals, "ranks": {1: rank1} if rank1 else {},
            "steps_per_epoch": spe, "kind": kind, "n_classes": data.C}
