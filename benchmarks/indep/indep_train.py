"""Tiny real PyTorch trainings with injected faults (independent corpus).

Every fault is a bug in *this* training code (data prep, model, loss, loop,
optimizer, scheduler, logging, timing); nothing is faked afterwards.  The
trainer returns a Trace (per-step records, eval records, epoch records) that
the format writers turn into log files.
"""
from __future__ import annotations

import copy
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

TEXT = (
    "the river ran low that summer, and the old mill by the bridge stood quiet for the first time in "
    "living memory. children walked along the dry stones and found things the water had hidden for "
    "years: a cart wheel, a kettle with no lid, a row of bottles green with moss. the miller said the "
    "rain would come back in the autumn, as it always had, and that there was no sense in worrying "
    "about a river. his daughter did not believe him. she measured the water every morning with a "
    "painted stick and wrote the numbers in a small book, and the numbers went down and down. in the "
    "evenings she read the book to her brother, who was too young to understand numbers but liked the "
    "sound of them. one morning a man came from the town with a map and a long chain. he walked the "
    "banks from the bridge to the bend and back again, and he asked the miller many questions about "
    "the weir, the sluice, the old channel that ran behind the orchard. the miller answered some of "
    "them. the man wrote everything down and went away, and for a week nothing happened. then the "
    "rain came, not in the autumn but in the middle of a hot afternoon, heavy and warm, and the "
    "river rose a hand's width before supper. the daughter ran out with her stick and stood in the "
    "shallows until her mother called her in. the next morning the numbers went up. she wrote them "
    "down very carefully, and underlined them twice, and showed the book to everyone who came to the "
    "mill that day. the wheel turned again by the end of the month. the man with the map never came "
    "back, but a letter arrived in the winter saying that a new weir would be built further up the "
    "valley, and that the mill would have water in every season from then on. the miller folded the "
    "letter and put it behind the clock. his daughter kept measuring the river anyway, every morning, "
    "for eleven more years, and when she left for the city she gave the painted stick to her brother, "
    "who by then understood numbers very well, and who measured the river for the rest of his life. "
    "people in the valley still talk about the summer the river ran low, though most of them were not "
    "born when it happened. they say the stones were white as bread, and that you could walk from one "
    "bank to the other without wetting your feet, and that the mill was so quiet you could hear the "
    "bees in the orchard from the bridge. some of it is true. the book with the numbers is still in "
    "the mill, on the shelf above the door, and anyone who asks may read it."
)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


# ----------------------------------------------------------------------------- data
class Data:
    def __init__(self, kind, Xtr, Ytr, Xva, Yva, din=None, C=None, vocab=None):
        self.kind, self.Xtr, self.Ytr, self.Xva, self.Yva = kind, Xtr, Ytr, Xva, Yva
        self.din, self.C, self.vocab = din, C, vocab


def _images(n, C, rng, noise=0.35, blank=0.0, style="normal"):
    yy, xx = np.mgrid[0:16, 0:16].astype(np.float32)
    X = np.empty((n, 1, 16, 16), np.float32)
    Y = rng.integers(0, C, n)
    for i in range(n):
        c = Y[i]
        f = rng.uniform(0.6, 1.3) if style != "shift" else rng.uniform(1.6, 2.4)
        ph = rng.uniform(0, 2 * np.pi)
        if c == 0:
            img = np.sin(f * yy + ph)
        elif c == 1:
            img = np.sin(f * xx + ph)
        elif c == 2:
            img = np.sin(f * (xx + yy) / 1.4 + ph)
        elif c == 3:
            cy, cx = rng.uniform(4, 12, 2)
            img = 2.0 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 8.0) - 0.5
        elif c == 4:
            img = np.sign(np.sin(f * xx + ph) * np.sin(f * yy + ph))
        else:
            cy, cx = rng.uniform(5, 11, 2)
            img = np.cos(np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2) * f * 1.3)
        img = img * rng.uniform(0.7, 1.3) + rng.normal(0, noise, (16, 16))
        if style == "shift":
            img = -img + 0.8
        X[i, 0] = img
    if blank > 0:
        k = int(n * blank)
        X[rng.choice(n, k, replace=False)] = 0.0
    return X, Y


def _blobs(n, C, d, rng, sep, centers=None, shift=0.0):
    if centers is None:
        centers = rng.normal(0, sep, (C, d))
    Y = rng.integers(0, C, n)
    X = centers[Y] + rng.normal(0, 1, (n, d)) + shift
    return X.astype(np.float32), Y, centers


def _waves(n, C, L, rng, noise=0.3, flat=0.0, kind="shape"):
    t = np.arange(L, dtype=np.float32)
    X = np.empty((n, L), np.float32)
    Y = rng.integers(0, C, n)
    for i in range(n):
        c = Y[i]
        if kind == "freq":
            w = [0.15, 0.3, 0.5, 0.8, 1.1][c] * rng.uniform(0.9, 1.1)
            s = np.sin(w * t + rng.uniform(0, 6.3))
        else:
            w = rng.uniform(0.15, 0.4)
            ph = w * t + rng.uniform(0, 6.3)
            if c == 0:
                s = np.sin(ph)
            elif c == 1:
                s = np.sign(np.sin(ph))
            elif c == 2:
                s = 2 / np.pi * np.arcsin(np.sin(ph))
            elif c == 3:
                s = 2 * ((ph / (2 * np.pi)) % 1.0) - 1
            else:
                s = np.sin(ph) * np.sin(0.05 * t)
        X[i] = s * rng.uniform(0.6, 1.4) + rng.normal(0, noise, L)
    if flat > 0:
        k = int(n * flat)
        X[rng.choice(n, k, replace=False)] = 0.25  # dead sensor: constant signal
    return X, Y


def make_data(spec, rng) -> Data:
    fam = spec["family"]
    fault = spec.get("fault")
    ntr, nva = spec.get("n_train", 2000), spec.get("n_val", 500)
    T = lambda a: torch.tensor(a)
    if fam in ("mlp", "logreg", "mlp_reg"):
        C = spec.get("C", 5) if fam == "mlp" else 2
        d = spec.get("d", 20)
        Xtr, Ytr, cen = _blobs(ntr, C, d, rng, spec.get("sep", 1.0))
        shift = 2.5 if fault == "val_shift" else 0.0
        Xva, Yva, _ = _blobs(nva, C, d, rng, 0, centers=cen * (0.3 if fault == "val_shift" else 1.0), shift=shift)
        if spec.get("label_noise"):
            m = rng.random(ntr) < spec["label_noise"]
            Ytr[m] = rng.integers(0, C, m.sum())
        if spec.get("zero_rows"):
            Xtr[rng.choice(ntr, spec["zero_rows"], replace=False)] = 0.0  # missing features filled with 0
        if spec.get("x_scale"):
            Xtr, Xva = Xtr * spec["x_scale"], Xva * spec["x_scale"]
        if fam == "logreg":
            return Data("bin", T(Xtr), T(Ytr.astype(np.float32)), T(Xva), T(Yva.astype(np.float32)), din=d)
        return Data("cls", T(Xtr), T(Ytr), T(Xva), T(Yva), din=d, C=C)
    if fam == "linreg":
        d = spec.get("d", 16)
        w = rng.normal(0, 1, d)
        scale = np.exp(rng.uniform(0, np.log(spec.get("feat_range", 1.0)), d)) if spec.get("feat_range") else np.ones(d)
        X = (rng.normal(0, 1, (ntr + nva, d)) * scale).astype(np.float32)
        y = (X @ (w / scale) + 0.3 * rng.normal(0, 1, ntr + nva) + spec.get("y_offset", 0.0)).astype(np.float32)
        return Data("reg", T(X[:ntr]), T(y[:ntr, None]), T(X[ntr:]), T(y[ntr:, None]), din=d)
    if fam in ("cnn", "resnet", "vit", "ae"):
        C = spec.get("C", 5)
        Xtr, Ytr = _images(ntr, C, rng, spec.get("noise", 0.35), blank=spec.get("blank", 0.0))
        style = "shift" if fault == "val_shift" else "normal"
        Xva, Yva = _images(nva, C, rng, spec.get("noise", 0.35), style=style)
        if spec.get("raw_pixels"):  # 8-bit pixel values, "BatchNorm will normalise them"
            Xtr = np.clip((Xtr + 1.5) * 85, 0, 255).round()
            Xva = np.clip((Xva + 1.5) * 85, 0, 255).round()
        if fam == "ae":
            Xtr, Xva = Xtr.reshape(ntr, -1), Xva.reshape(nva, -1)
            return Data("reg", T(Xtr), T(Xtr), T(Xva), T(Xva), din=256)
        if spec.get("label_noise"):
            m = rng.random(ntr) < spec["label_noise"]
            Ytr[m] = rng.integers(0, C, m.sum())
        return Data("cls", T(Xtr), T(Ytr), T(Xva), T(Yva), C=C)
    if fam in ("gru", "rnn", "conv1d"):
        C = spec.get("C", 4)
        L = spec.get("L", 48 if fam != "conv1d" else 64)
        kind = "freq" if fam in ("gru", "rnn") else "shape"
        Xtr, Ytr = _waves(ntr, C, L, rng, spec.get("noise", 0.3), flat=spec.get("flat", 0.0), kind=kind)
        Xva, Yva = _waves(nva, C, L, rng, spec.get("noise", 0.3) * (3.0 if fault == "val_shift" else 1.0), kind=kind)
        if fam != "conv1d":
            Xtr, Xva = Xtr[..., None], Xva[..., None]
        else:
            Xtr, Xva = Xtr[:, None, :], Xva[:, None, :]
        if spec.get("x_scale"):
            Xtr, Xva = Xtr * spec["x_scale"], Xva * spec["x_scale"]
        return Data("cls", T(Xtr), T(Ytr), T(Xva), T(Yva), C=C)
    if fam == "lstm":
        L = spec.get("L", 40)
        n = ntr + nva
        t = np.arange(L + 1, dtype=np.float32)
        w = rng.uniform(0.1, 0.5, (n, 1))
        S = np.sin(w * t + rng.uniform(0, 6.3, (n, 1))) * rng.uniform(0.5, 1.5, (n, 1))
        S = S + rng.normal(0, spec.get("noise", 0.1), S.shape)
        S = (S * spec.get("y_scale", 1.0)).astype(np.float32)
        X, Y = S[:, :-1, None], S[:, 1:, None]
        return Data("reg", T(X[:ntr]), T(Y[:ntr]), T(X[ntr:]), T(Y[ntr:]))
    if fam == "tfm":
        chars = sorted(set(TEXT))
        stoi = {c: i for i, c in enumerate(chars)}
        ids = torch.tensor([stoi[c] for c in TEXT])
        ctx = spec.get("ctx", 32)
        cut = int(len(ids) * 0.85)
        tr, va = ids[:cut], ids[cut:]
        if spec.get("train_chars"):
            tr = tr[: spec["train_chars"]]
        wtr = tr.unfold(0, ctx + 1, 1)
        wva = va.unfold(0, ctx + 1, 4)
        return Data("lm", wtr[:, :-1].contiguous(), wtr[:, 1:].contiguous(), wva[:, :-1].contiguous(),
                    wva[:, 1:].contiguous(), vocab=len(chars))
    raise ValueError(fam)


# ----------------------------------------------------------------------------- models
ACT = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh, "gelu": nn.GELU}


class MLP(nn.Module):
    def __init__(self, din, h, dout, depth=2, act="relu", l2norm=False):
        super().__init__()
        layers, d = [], din
        for _ in range(depth):
            layers += [nn.Linear(d, h), ACT[act]()]
            d = h
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(d, dout)
        self.l2norm = l2norm

    def forward(self, x):
        x = x.flatten(1)
        if self.l2norm:
            x = x / x.norm(dim=1, keepdim=True)  # BUG (when data has zero rows): no eps
        return self.head(self.body(x))


class AE(nn.Module):
    def __init__(self, din=256, h=64, z=16, act="relu", depth=1, l2norm=False):
        super().__init__()
        A = ACT[act]
        enc, d = [], din
        for _ in range(depth):
            enc += [nn.Linear(d, h), A()]
            d = h
        self.enc = nn.Sequential(*enc, nn.Linear(h, z))
        dec, d = [A()], z
        for _ in range(depth):
            dec += [nn.Linear(d, h), A()]
            d = h
        self.dec = nn.Sequential(*dec)
        self.head = nn.Linear(h, din)
        self.l2norm = l2norm

    def forward(self, x):
        if self.l2norm:
            x = x / x.norm(dim=1, keepdim=True) * 16.0  # BUG: blank images have zero norm
        return self.head(self.dec(self.enc(x)))


class CNN(nn.Module):
    def __init__(self, C, ch=8, inch=1, bn=True):
        super().__init__()
        N = (lambda c: nn.BatchNorm2d(c)) if bn else (lambda c: nn.Identity())
        self.body = nn.Sequential(
            nn.Conv2d(inch, ch, 3, padding=1), N(ch), nn.ReLU(),
            nn.Conv2d(ch, 2 * ch, 3, stride=2, padding=1), N(2 * ch), nn.ReLU(),
            nn.Conv2d(2 * ch, 2 * ch, 3, stride=2, padding=1), N(2 * ch), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(2 * ch, C)

    def forward(self, x):
        return self.head(self.body(x))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.sc = nn.Sequential()
        if stride != 1 or cin != cout:
            self.sc = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        o = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(o)) + self.sc(x))


class ResNet(nn.Module):
    def __init__(self, C, w=8):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU())
        self.body = nn.Sequential(Block(w, w, 1), Block(w, 2 * w, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(2 * w, C)

    def forward(self, x):
        return self.head(self.body(self.stem(x)))


class ViT(nn.Module):
    def __init__(self, C, d=32, layers=2, heads=4, patch=4):
        super().__init__()
        self.patch = nn.Conv2d(1, d, patch, patch)
        n = (16 // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        el = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(el, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, C)

    def forward(self, x):
        p = self.patch(x).flatten(2).transpose(1, 2)
        p = torch.cat([self.cls.expand(len(p), -1, -1), p], 1) + self.pos
        return self.head(self.norm(self.body(p))[:, 0])


class CharLM(nn.Module):
    def __init__(self, V, d=48, layers=2, heads=4, ctx=32):
        super().__init__()
        self.emb = nn.Embedding(V, d)
        self.pos = nn.Embedding(ctx, d)
        el = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(el, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, V)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(ctx), persistent=False)

    def forward(self, x):
        T_ = x.shape[1]
        h = self.emb(x) + self.pos(torch.arange(T_))
        h = self.body(h, mask=self.mask[:T_, :T_], is_causal=True)
        return self.head(self.norm(h))


class SeqReg(nn.Module):  # LSTM next-value regression
    def __init__(self, h=32):
        super().__init__()
        self.rnn = nn.LSTM(1, h, batch_first=True)
        self.head = nn.Linear(h, 1)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


class SeqCls(nn.Module):
    def __init__(self, C, h=32, cell="gru", hh_gain=None):
        super().__init__()
        if cell == "gru":
            self.rnn = nn.GRU(1, h, batch_first=True)
        else:
            self.rnn = nn.RNN(1, h, batch_first=True, nonlinearity="relu")
            if hh_gain:
                nn.init.orthogonal_(self.rnn.weight_hh_l0, gain=hh_gain)
        self.head = nn.Linear(h, C)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


class Conv1dNet(nn.Module):
    def __init__(self, C, ch=16, standardize=False):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv1d(1, ch, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(ch, 2 * ch, 5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten())
        self.head = nn.Linear(2 * ch, C)
        self.standardize = standardize

    def forward(self, x):
        if self.standardize:  # per-signal standardisation, BUG: no eps (flat signal -> 0/0)
            x = (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)
        return self.head(self.body(x))


def make_model(spec, data):
    fam = spec["family"]
    fault = spec.get("fault")
    if fam == "mlp":
        return MLP(data.din, spec.get("width", 64), data.C, spec.get("depth", 2), spec.get("act", "relu"),
                   l2norm=spec.get("l2norm", False))
    if fam == "logreg" or fam == "linreg":
        return nn.Linear(data.din, 1)
    if fam == "ae":
        return AE(256, spec.get("width", 64), 16, spec.get("act", "relu"), spec.get("depth", 1), l2norm=spec.get("l2norm", False))
    if fam == "cnn":
        return CNN(data.C, spec.get("width", 8), bn=spec.get("bn", True))
    if fam == "resnet":
        return ResNet(data.C, spec.get("width", 8))
    if fam == "vit":
        return ViT(data.C, spec.get("width", 32))
    if fam == "tfm":
        return CharLM(data.vocab, spec.get("width", 48), spec.get("layers", 2), ctx=spec.get("ctx", 32))
    if fam == "lstm":
        return SeqReg(spec.get("width", 32))
    if fam == "gru":
        return SeqCls(data.C, spec.get("width", 32), "gru")
    if fam == "rnn":
        return SeqCls(data.C, spec.get("width", 32), "rnn", hh_gain=spec.get("hh_gain"))
    if fam == "conv1d":
        return Conv1dNet(data.C, spec.get("width", 16), standardize=spec.get("standardize", False))
    raise ValueError(fam)


# ----------------------------------------------------------------------------- optim
def make_opt(params, spec):
    name, lr, wd = spec.get("opt", "adam"), spec["lr"], spec.get("wd", 0.0)
    if name == "sgd":
        return torch.optim.SGD(params, lr, weight_decay=wd)
    if name == "momentum":
        return torch.optim.SGD(params, lr, momentum=0.9, weight_decay=wd)
    if name == "nesterov":
        return torch.optim.SGD(params, lr, momentum=0.9, nesterov=True, weight_decay=wd)
    if name == "adam":
        return torch.optim.Adam(params, lr, weight_decay=wd)
    if name == "adamw":
        return torch.optim.AdamW(params, lr, weight_decay=spec.get("wd", 0.01))
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr, weight_decay=wd)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr, weight_decay=wd)
    raise ValueError(name)


def make_sched(opt, spec, total, bpe):
    """Returns (scheduler, when) with when in {'batch', 'epoch', 'plateau', None}."""
    kind = spec.get("sched", "constant")
    fault = spec.get("fault")
    L = torch.optim.lr_scheduler
    wu = spec.get("warmup", 0)
    if kind == "constant":
        return None, None
    if kind == "step":  # per-epoch StepLR
        s = L.StepLR(opt, step_size=spec.get("step_epochs", 3), gamma=spec.get("gamma", 0.3))
        return s, ("batch" if fault == "sched_per_batch" else "epoch")
    if kind == "exp":
        s = L.ExponentialLR(opt, gamma=spec.get("gamma", 0.9))
        return s, ("batch" if fault == "sched_per_batch" else "epoch")
    if kind == "plateau":
        return L.ReduceLROnPlateau(opt, factor=0.5, patience=spec.get("patience", 1)), "plateau"
    if kind == "cosine":
        return L.CosineAnnealingLR(opt, T_max=total, eta_min=spec.get("eta_min", 0.0)), "batch"
    if kind == "onecycle":
        return L.OneCycleLR(opt, max_lr=spec["lr"], total_steps=total, pct_start=spec.get("pct_start", 0.3)), "batch"
    if kind == "linear":
        return L.LinearLR(opt, 1.0, spec.get("end_factor", 0.02), total_iters=total), "batch"
    if kind == "warmup_cosine":
        def f(t):
            if t < wu:
                return (t + 1) / wu
            return 0.5 * (1 + math.cos(math.pi * min(1.0, (t - wu) / max(1, total - wu))))
        return L.LambdaLR(opt, f), "batch"
    if kind == "warmup_const":
        return L.LambdaLR(opt, lambda t: min(1.0, (t + 1) / wu)), "batch"
    if kind == "warmup_linear":
        return L.LambdaLR(opt, lambda t: (t + 1) / wu if t < wu else max(0.0, (total - t) / (total - wu))), "batch"
    # ---- buggy schedules (fault sched_increasing)
    if kind == "linear_decay_signbug":  # meant 1 - t/T
        return L.LambdaLR(opt, lambda t: 1 + 2 * t / total), "batch"
    if kind == "cosine_signbug":  # meant 0.5*(1+cos); rises 0 -> 1 over the whole run
        return L.LambdaLR(opt, lambda t: 0.02 + 0.5 * (1 - math.cos(math.pi * t / total))), "batch"
    if kind == "warmup_in_samples":  # warm-up length given in samples, used as steps
        wus = spec["warmup_samples"]
        return L.LambdaLR(opt, lambda t: min(1.0, (t + 1) / wus) if t < wus else 1.0), "batch"
    raise ValueError(kind)


class Loader:
    """Index loader with epochs; fault 'unshuffled_sorted' walks the data sorted by class."""

    def __init__(self, N, bs, seed, shuffle=True, order=None, drop_last=True):
        self.N, self.bs, self.shuffle, self.order = N, bs, shuffle, order
        self.rng = np.random.default_rng(seed)
        self.epoch, self.pos = 0, 0
        self.bpe = N // bs if drop_last else math.ceil(N / bs)
        self._new_perm()

    def _new_perm(self):
        if self.order is not None:
            self.perm = self.order
        elif self.shuffle:
            self.perm = self.rng.permutation(self.N)
        else:
            self.perm = np.arange(self.N)

    def next(self):
        if self.pos >= self.bpe:
            self.epoch += 1
            self.pos = 0
            self._new_perm()
        idx = self.perm[self.pos * self.bs:(self.pos + 1) * self.bs]
        self.pos += 1
        return torch.from_numpy(np.asarray(idx))

    def state(self):
        return (self.epoch, self.pos, np.array(self.perm), copy.deepcopy(self.rng.bit_generator.state))

    def load(self, st):
        self.epoch, self.pos, self.perm, s = st
        self.rng.bit_generator.state = copy.deepcopy(s)


def loss_and_acc(model, data, xb, yb, spec):
    fault = spec.get("fault")
    kind = data.kind
    out = model(xb)
    if kind in ("cls", "lm"):
        logits = out.reshape(-1, out.shape[-1])
        y = yb.reshape(-1)
        if fault == "softmax_before_ce":
            logits = logits.softmax(-1)  # BUG: CrossEntropyLoss applies log_softmax itself
        if spec.get("manual_ce"):  # hand-written CE: log(softmax) without log-sum-exp
            p = logits.softmax(-1).gather(1, y[:, None])
            loss = -torch.log(p).mean()
        else:
            loss = F.cross_entropy(logits, y)
        with torch.no_grad():
            acc = (logits.argmax(-1) == y).float().mean().item()
        return loss, acc
    if kind == "bin":
        z = out.squeeze(-1)
        if spec.get("manual_bce"):  # hand-written BCE on sigmoid probabilities, no clamp
            p = torch.sigmoid(z)
            loss = -(yb * torch.log(p) + (1 - yb) * torch.log(1 - p)).mean()
        else:
            loss = F.binary_cross_entropy_with_logits(z, yb)
        with torch.no_grad():
            acc = ((z > 0).float() == yb).float().mean().item()
        return loss, acc
    return F.mse_loss(out, yb), None


@torch.no_grad()
def evaluate(model, data, spec, restore_train=True):
    model.eval()
    tot, acc_tot, n = 0.0, 0.0, 0
    for i in range(0, len(data.Xva), 512):
        xb, yb = data.Xva[i:i + 512], data.Yva[i:i + 512]
        l, a = loss_and_acc(model, data, xb, yb, spec)
        tot += l.item() * len(xb)
        acc_tot += (a or 0.0) * len(xb)
        n += len(xb)
    if restore_train:
        model.train()
    return tot / n, (acc_tot / n if data.kind in ("cls", "lm", "bin") else None)


# ----------------------------------------------------------------------------- training loop
def train(spec):
    torch.manual_seed(spec["seed"])
    torch.set_num_threads(1)
    rng = np.random.default_rng(spec["seed"])
    if spec["family"] == "gan":
        return train_gan(spec)
    fault = spec.get("fault")
    data = make_data(spec, rng)
    if fault == "random_labels":  # BUG: labels shuffled independently of the inputs
        data.Ytr = data.Ytr[torch.from_numpy(rng.permutation(len(data.Ytr)))]
    if fault == "val_leak":  # BUG: "validation" split carved out of the training set
        k = len(data.Xva)
        data.Xva, data.Yva = data.Xtr[:k].clone(), data.Ytr[:k].clone()
    model = make_model(spec, data)
    if spec.get("pretrain_steps"):  # fine-tune-like: start from a model trained earlier (not logged)
        popt = torch.optim.Adam(model.parameters(), 3e-3)
        g = np.random.default_rng(spec["seed"] + 1)
        for _ in range(spec["pretrain_steps"]):
            idx = torch.from_numpy(g.integers(0, len(data.Xtr), 64))
            l, _ = loss_and_acc(model, data, data.Xtr[idx], data.Ytr[idx], spec)
            popt.zero_grad()
            l.backward()
            popt.step()
    if fault == "dead_relu":  # BUG: hidden biases initialised to a large negative constant
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Conv1d)) and m is not getattr(model, "head", None):
                nn.init.constant_(m.bias, spec.get("dead_bias", -6.0))
    if fault == "frozen":  # BUG: freeze-everything for warm-up, only the head is ever unfrozen
        for p in model.parameters():
            p.requires_grad_(False)
        for p in model.head.parameters():
            p.requires_grad_(True)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_opt(params, spec)
    bs = spec.get("bs", 64)
    accum = spec.get("accum", 1)
    ranks = spec.get("ranks", 1)
    order = None
    if fault == "unshuffled_sorted":  # BUG: shuffle=False on a dataset stored class by class
        order = np.argsort(data.Ytr.numpy(), kind="stable")
    loaders = [Loader(len(data.Xtr), bs, spec["seed"] + 17 * r, order=order) for r in range(ranks)]
    bpe = loaders[0].bpe // (accum * 1)
    total = spec["steps"]
    sched, when = make_sched(opt, spec, total, bpe)
    amp = spec.get("amp")
    scale, good = float(amp.get("init", 2.0 ** 16)) if amp else None, 0
    fp = spec.get("fp", {})
    clip = spec.get("clip")
    eval_every = spec.get("eval_every")
    model.train()
    if fault == "bn_eval":  # BUG: sanity evaluation before training calls model.eval(), never undone
        evaluate(model, data, spec, restore_train=False)
    res = spec.get("resume")
    ckpt = None
    steps, evals, epochs = [], [], []
    ep_losses, ep_accs = [], []
    leak_sum = None
    monitor = None
    if fault == "memory_leak":
        g = np.random.default_rng(spec["seed"] + 5)
        mi = torch.from_numpy(g.integers(0, len(data.Xtr), fp.get("monitor_bs", 256)))
        monitor = (data.Xtr[mi], data.Ytr[mi])
    t_start = time.perf_counter()
    offset = 0.0
    crashed = False
    step = 0
    rss0 = rss_mb()
    while step < total:
        step += 1
        t0 = time.perf_counter()
        lr_now = opt.param_groups[0]["lr"]
        if fault != "no_zero_grad":
            opt.zero_grad(set_to_none=True)
        # BUG (no_zero_grad): gradients of every previous step keep accumulating in .grad
        rank_t, rank_d, rank_l = [], [], []
        loss_sum, acc_sum, nmb = 0.0, 0.0, 0
        data_time = 0.0
        nonfinite = False
        for r in range(ranks):
            tr0 = time.perf_counter()
            dt_r = 0.0
            lsum_r = 0.0
            for k in range(accum):
                td = time.perf_counter()
                idx = loaders[r].next()
                xb, yb = data.Xtr[idx], data.Ytr[idx]
                if fault == "poisoned_batch" and step in fp["steps"] and k == 0:
                    if fp.get("what") == "inputs":
                        xb = xb * fp.get("factor", 1000.0)  # corrupted shard: wrong units
                    elif fp.get("what") == "targets":
                        yb = yb * fp.get("factor", 1000.0)
                    elif fp.get("what") == "tokens":
                        g = torch.Generator().manual_seed(step)
                        yb = torch.randint(0, data.vocab, yb.shape, generator=g)
                    elif fp.get("what") == "labels":
                        g = torch.Generator().manual_seed(step)
                        yb = torch.randint(0, data.C, yb.shape, generator=g)
                if fault == "nan_filtered" and step in fp["steps"] and k == 0:
                    xb = xb.clone()
                    xb[0] = float("nan")  # a corrupt record with NaN features
                if spec.get("aug_py"):  # per-sample python augmentation in the main process
                    xb = xb.clone()
                    for j in range(len(xb)):
                        a = xb[j].numpy()
                        for _ in range(spec["aug_py"]):
                            a = np.roll(a, 1, axis=-1) * 0.999 + np.flip(a, axis=-1) * 0.001
                        xb[j] = torch.from_numpy(a.copy())
                if fault == "slow_loader" and step >= fp["onset"]:
                    time.sleep(fp["sleep"])  # loader workers starved (remote storage throttled)
                if fault == "input_bound":
                    time.sleep(fp["sleep"])
                if fault == "periodic_stall" and step % fp["period"] == 0:
                    time.sleep(fp["stall"])  # synchronous checkpoint upload blocks the loop
                if r == 1 and fault == "straggler":
                    time.sleep(fp["sleep"])  # rank 1 on a throttled host
                dt_r += time.perf_counter() - td
                loss, acc = loss_and_acc(model, data, xb, yb, spec)
                lval = loss.item()
                if not math.isfinite(lval):
                    nonfinite = True
                div = accum * ranks
                if fault == "accum_undivided":
                    div = ranks  # BUG: micro-step losses summed, never divided by accum
                if spec.get("nan_guard") and not math.isfinite(lval):
                    pass  # skip the backward of a bad micro-batch
                else:
                    (loss / div).backward()
                lsum_r += lval if fault == "accum_undivided" else lval / accum
                acc_sum += (acc or 0.0)
                nmb += 1
            rank_t.append(time.perf_counter() - tr0)
            rank_d.append(dt_r)
            rank_l.append(lsum_r)
            loss_sum += lsum_r
            data_time += dt_r
        loss_val = loss_sum / ranks
        # grad norm (pre-clip), like clip_grad_norm_ returns
        gn = torch.nn.utils.clip_grad_norm_(params, clip if clip else float("inf")).item()
        lgn = None
        if "layer_gn" in spec.get("log", ()):
            lgn = {n: p.grad.norm().item() for n, p in model.named_parameters()
                   if p.grad is not None and n.endswith("weight")}
        skipped = False
        if amp:
            maxg = max((p.grad.abs().max().item() for p in params if p.grad is not None), default=0.0)
            overflow = (not math.isfinite(maxg)) or maxg * scale > 65504.0
            if overflow:
                skipped = True
                scale *= amp.get("backoff", 0.5)
                good = 0
            else:
                good += 1
                if good >= amp.get("interval", 100):
                    scale *= 2.0
                    good = 0
        if spec.get("nan_guard") and (nonfinite or not math.isfinite(gn)):
            skipped = True
        if not skipped:
            opt.step()
        if sched is not None and when == "batch":
            sched.step()
        if fault == "memory_leak":
            # BUG: running monitor loss accumulated as a tensor with grad enabled -> every graph kept
            ml, _ = loss_and_acc(model, data, monitor[0], monitor[1], spec)
            leak_sum = ml if leak_sum is None else leak_sum + ml
        t1 = time.perf_counter()
        rec = dict(step=step, epoch=step / bpe, loss=loss_val, acc=acc_sum / max(1, nmb) if data.kind != "reg" else None,
                   gn=gn, lr=lr_now, data_time=data_time, step_time=t1 - t0, rss=rss_mb(), scale=scale,
                   wall=t1 - t_start + offset, skipped=skipped, nonfinite=nonfinite, lgn=lgn)
        if ranks > 1:
            rec["rank_time"], rec["rank_data"], rec["rank_loss"] = rank_t, rank_d, rank_l
        steps.append(rec)
        ep_losses.append(loss_val)
        if rec["acc"] is not None:
            ep_accs.append(rec["acc"])
        if eval_every and eval_every != "epoch" and step % eval_every == 0:
            vl, va = evaluate(model, data, spec, restore_train=fault != "bn_eval")
            evals.append(dict(step=step, epoch=step / bpe, val_loss=vl, val_acc=va, wall=time.perf_counter() - t_start + offset))
        if step % bpe == 0:
            ep = step // bpe - 1
            vl = va = None
            if eval_every == "epoch" or when == "plateau":
                vl, va = evaluate(model, data, spec, restore_train=fault != "bn_eval")
                if eval_every == "epoch":
                    evals.append(dict(step=step, epoch=float(ep + 1), val_loss=vl, val_acc=va, wall=time.perf_counter() - t_start + offset))
            fin = [x for x in ep_losses if math.isfinite(x)]
            epochs.append(dict(epoch=ep, step=step, loss=float(np.mean(ep_losses)), loss_finite=float(np.mean(fin)) if fin else float("nan"),
                               acc=float(np.mean(ep_accs)) if ep_accs else None, val_loss=vl, val_acc=va,
                               lr=opt.param_groups[0]["lr"], wall=time.perf_counter() - t_start + offset))
            ep_losses, ep_accs = [], []
            if sched is not None and when == "epoch":
                sched.step()
            if sched is not None and when == "plateau":
                sched.step(vl if vl is not None and math.isfinite(vl) else epochs[-1]["loss"])
        if res:
            if step % res["ckpt_every"] == 0:
                ckpt = dict(step=step, model=copy.deepcopy(model.state_dict()), opt=copy.deepcopy(opt.state_dict()),
                            sched=copy.deepcopy(sched.state_dict()) if sched else None,
                            loaders=[l.state() for l in loaders], rng=torch.get_rng_state(), scale=scale, good=good,
                            n_ep=len(epochs), n_ev=len(evals))
            if not crashed and step == res["crash_at"]:
                crashed = True  # job preempted; relaunched from the last checkpoint
                step = ckpt["step"]
                model.load_state_dict(ckpt["model"])
                opt.load_state_dict(ckpt["opt"])
                if sched:
                    sched.load_state_dict(ckpt["sched"])
                for l, s in zip(loaders, ckpt["loaders"]):
                    l.load(s)
                torch.set_rng_state(ckpt["rng"])
                scale, good = ckpt["scale"], ckpt["good"]
                offset += res.get("gap_s", 40.0)
                steps[-1]["crash_after"] = True
    return dict(steps=steps, evals=evals, epochs=epochs, bpe=bpe, total=total, n_train=len(data.Xtr),
                wall=time.perf_counter() - t_start, rss0=rss0)


# ----------------------------------------------------------------------------- GAN
def train_gan(spec):
    rng = np.random.default_rng(spec["seed"])
    n = spec.get("n_train", 4096)
    ang = rng.integers(0, 8, n) * (2 * np.pi / 8)
    X = np.stack([np.cos(ang), np.sin(ang)], 1) * 2.0 + rng.normal(0, 0.05, (n, 2))
    X = torch.tensor(X, dtype=torch.float32)
    zd = 8
    G = nn.Sequential(nn.Linear(zd, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
    D = nn.Sequential(nn.Linear(2, 64), nn.LeakyReLU(0.2), nn.Linear(64, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))
    lr = spec["lr"]
    oG = torch.optim.Adam(G.parameters(), lr, betas=(0.5, 0.999))
    oD = torch.optim.Adam(D.parameters(), spec.get("lr_d", lr), betas=(0.5, 0.999))
    bs = spec.get("bs", 64)
    loader = Loader(n, bs, spec["seed"])
    bpe = loader.bpe
    steps = []
    t_start = time.perf_counter()
    bce = nn.BCEWithLogitsLoss()
    for step in range(1, spec["steps"] + 1):
        t0 = time.perf_counter()
        real = X[loader.next()]
        z = torch.randn(bs, zd)
        fake = G(z)
        oD.zero_grad()
        dl = bce(D(real), torch.ones(bs, 1)) + bce(D(fake.detach()), torch.zeros(bs, 1))
        if spec.get("manual_bce"):  # hand-written BCE on sigmoid outputs
            pr, pf = torch.sigmoid(D(real)), torch.sigmoid(D(fake.detach()))
            dl = -(torch.log(pr).mean() + torch.log(1 - pf).mean())
        dl.backward()
        oD.step()
        oG.zero_grad()
        gl = bce(D(fake), torch.ones(bs, 1))
        if spec.get("manual_bce"):
            gl = -torch.log(torch.sigmoid(D(fake))).mean()
        gl.backward()
        oG.step()
        t1 = time.perf_counter()
        steps.append(dict(step=step, epoch=step / bpe, loss=dl.item(), d_loss=dl.item(), g_loss=gl.item(), gn=None,
                          lr=lr, data_time=0.0, step_time=t1 - t0, rss=rss_mb(), scale=None, wall=t1 - t_start,
                          acc=None, skipped=False, nonfinite=not math.isfinite(dl.item())))
    return dict(steps=steps, evals=[], epochs=[], bpe=bpe, total=spec["steps"], n_train=n, wall=time.perf_counter() - t_start)
