"""Synthetic data sets and small models for the indep4 corpus (all seeded, CPU).

Each family is a class with:
  n_train, n_val            sizes
  batch(idx, split)         -> tuple of tensors for those example indices
  model(cfg)                -> nn.Module
  loss(model, b)            -> (loss tensor, extras dict of floats)
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


class Family:
    name = "?"
    kind = "cls"

    def __init__(self, cfg, seed):
        self.cfg = cfg
        self.seed = seed
        self.make(gen(seed))

    def batch(self, idx, split="train"):
        d = self.train if split == "train" else self.val
        return tuple(t[idx] for t in d)

    @property
    def n_train(self):
        return self.train[0].shape[0]

    @property
    def n_val(self):
        return self.val[0].shape[0]


# ---------------------------------------------------------------- tiny GPT
class TinyGPTNet(nn.Module):
    def __init__(self, V, L, d=32, layers=2, drop=0.1):
        super().__init__()
        self.emb = nn.Embedding(V, d)
        self.pos = nn.Parameter(torch.zeros(1, L, d))
        self.blocks = nn.ModuleList([nn.TransformerEncoderLayer(d, 2, 64, drop, batch_first=True, norm_first=True)
                                     for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, V)
        self.register_buffer("mask", torch.triu(torch.full((L, L), float("-inf")), 1))

    def forward(self, x):
        L = x.shape[1]
        h = self.emb(x) + self.pos[:, :L]
        for b in self.blocks:
            h = b(h, src_mask=self.mask[:L, :L])
        return self.head(self.ln(h))


class GPT(Family):
    name = "gpt"
    V, L = 24, 16

    def make(self, g):
        V = self.V
        trans = torch.zeros(V, V)
        for a in range(V):
            nxt = torch.randperm(V, generator=g)[:3]
            trans[a, nxt] = torch.tensor([0.6, 0.3, 0.1])

        def seqs(n):
            out = torch.zeros(n, self.L + 1, dtype=torch.long)
            out[:, 0] = torch.randint(0, V, (n,), generator=g)
            for t in range(1, self.L + 1):
                out[:, t] = torch.multinomial(trans[out[:, t - 1]], 1, generator=g).squeeze(1)
            return out
        self.train = (seqs(self.cfg.get("n_train", 2000)),)
        self.val = (seqs(256),)

    def model(self, cfg):
        return TinyGPTNet(self.V, self.L, drop=cfg.get("dropout", 0.1))

    def loss(self, m, b):
        (s,) = b
        if self.cfg.get("target_shift_bug"):
            x, y = s[:, :-1], s[:, :-1]   # BUG: targets not shifted (predict the input token)
            y = torch.roll(y, 2, dims=1)  # ...then an off-by-two "fix" -> targets from the past
        else:
            x, y = s[:, :-1], s[:, 1:]
        out = m(x)
        return F.cross_entropy(out.reshape(-1, self.V), y.reshape(-1)), {}


# ---------------------------------------------------------------- graph conv net
class GCNNet(nn.Module):
    def __init__(self, fin, hid, C, layers=2, drop=0.2, normalize=True):
        super().__init__()
        dims = [fin] + [hid] * (layers - 1) + [C]
        self.lins = nn.ModuleList([nn.Linear(dims[i], dims[i + 1]) for i in range(layers)])
        self.drop = nn.Dropout(drop)
        self.normalize = normalize

    def forward(self, x, A):
        Ah = A + torch.eye(A.shape[-1])
        if self.normalize:
            d = Ah.sum(-1).rsqrt()
            Ah = d.unsqueeze(-1) * Ah * d.unsqueeze(-2)
        h = x
        for i, lin in enumerate(self.lins):
            h = Ah @ lin(h)
            if i < len(self.lins) - 1:
                h = self.drop(F.relu(h))
        return h


class GCN(Family):
    name = "gcn"
    N, Fin, C = 16, 8, 3

    def make(self, g):
        def graphs(n):
            comm = torch.randint(0, self.C, (n, self.N), generator=g)
            same = comm.unsqueeze(2) == comm.unsqueeze(1)
            p = torch.where(same, torch.tensor(0.45), torch.tensor(0.04))
            A = (torch.rand(n, self.N, self.N, generator=g) < p).float()
            A = torch.triu(A, 1)
            A = A + A.transpose(1, 2)
            x = torch.randn(n, self.N, self.Fin, generator=g)
            x[:, :, :self.C] += 1.0 * F.one_hot(comm, self.C).float()
            return x, A, comm
        self.train = graphs(self.cfg.get("n_train", 1200))
        self.val = graphs(200)

    def model(self, cfg):
        return GCNNet(self.Fin, 32, self.C, cfg.get("layers", 2), normalize=not cfg.get("no_adj_norm"))

    def loss(self, m, b):
        x, A, y = b
        if self.cfg.get("input_scale"):
            x = x * self.cfg["input_scale"]
        out = m(x, A)
        loss = F.cross_entropy(out.reshape(-1, self.C), y.reshape(-1))
        acc = (out.argmax(-1) == y).float().mean().item()
        return loss, {"acc": acc}


# ---------------------------------------------------------------- temporal CNN forecaster
class TCNNet(nn.Module):
    def __init__(self, ch=16, horizon=8, drop=0.0):
        super().__init__()
        self.convs = nn.ModuleList()
        cin = 1
        for dil in (1, 2, 4, 8):
            self.convs.append(nn.Conv1d(cin, ch, 3, dilation=dil))
            cin = ch
        self.out = nn.Linear(ch, horizon)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        h = x.unsqueeze(1)
        for c in self.convs:
            y = self.drop(F.relu(c(F.pad(h, (c.dilation[0] * 2, 0)))))
            h = y + (h if h.shape[1] == c.out_channels else 0)
        return self.out(h[:, :, -1])


class TCN(Family):
    name = "tcn"
    kind = "reg"
    W, Hz = 48, 8

    def make(self, g):
        def series(n, shift=0.0):
            t = torch.arange(self.W + self.Hz).float()
            f = 0.05 + 0.25 * torch.rand(n, 2, 1, generator=g)
            ph = 6.28 * torch.rand(n, 2, 1, generator=g)
            a = 0.5 + torch.rand(n, 2, 1, generator=g)
            s = (a * torch.sin(f * t + ph)).sum(1) + 0.1 * torch.randn(n, self.W + self.Hz, generator=g) + shift
            if self.cfg.get("log_target"):
                s = s + 4.0
            return s[:, :self.W], s[:, self.W:]
        self.train = series(self.cfg.get("n_train", 2000))
        self.val = series(300, self.cfg.get("val_shift", 0.0))

    def model(self, cfg):
        return TCNNet(drop=cfg.get("dropout", 0.0))

    def loss(self, m, b):
        x, y = b
        if self.cfg.get("input_scale"):
            x = x * self.cfg["input_scale"]
        if self.cfg.get("log_target"):
            # forecasting in log space: the series is strictly positive (offset 4), y -> log(y)
            return F.mse_loss(m(x), torch.log(y)), {}
        return F.mse_loss(m(x), y), {}


# ---------------------------------------------------------------- mixture of experts
class MoENet(nn.Module):
    def __init__(self, d=20, E=4, hid=32, C=6, bias_init=None):
        super().__init__()
        self.router = nn.Linear(d, E)
        self.experts = nn.ModuleList([nn.Sequential(nn.Linear(d, hid), nn.ReLU(), nn.Linear(hid, C)) for _ in range(E)])
        if bias_init is not None:
            for e in self.experts:
                nn.init.constant_(e[0].bias, bias_init)
        self.last_gate = None

    def forward(self, x):
        gate = torch.softmax(self.router(x), -1)
        outs = torch.stack([e(x) for e in self.experts], 1)
        self.last_gate = gate
        self.last_hidden = self.experts[0][1](self.experts[0][0](x))
        return (gate.unsqueeze(-1) * outs).sum(1)


class MoE(Family):
    name = "moe"
    D, C = 20, 6

    def make(self, g):
        W = torch.randn(4, self.D, self.C, generator=g)
        R = torch.randn(self.D, 4, generator=g)

        def data(n):
            x = torch.randn(n, self.D, generator=g)
            reg = (x @ R).argmax(-1)
            logits = torch.einsum("nd,ndc->nc", x, W[reg])
            return x, logits.argmax(-1)
        self.train = data(self.cfg.get("n_train", 3000))
        self.val = data(500)

    def model(self, cfg):
        return MoENet(self.D, C=self.C, bias_init=cfg.get("bias_init"))

    def loss(self, m, b):
        x, y = b
        if self.cfg.get("input_scale"):
            x = x * self.cfg["input_scale"]
        out = m(x)
        ce = F.cross_entropy(out, y)
        load = m.last_gate.mean(0)
        aux = 4 * (load * load).sum()
        dead = (m.last_hidden <= 0).all(0).float().mean().item()
        return ce + 0.01 * aux, {"aux": aux.item(), "dead": dead}


# ---------------------------------------------------------------- triplet metric learner
class Triplet(Family):
    name = "triplet"
    D, K = 16, 12

    def make(self, g):
        centers = 0.55 * torch.randn(self.K, self.D, generator=g)

        def data(n):
            y = torch.randint(0, self.K, (n,), generator=g)
            x = centers[y] + torch.randn(n, self.D, generator=g)
            return x, y
        self.train = data(self.cfg.get("n_train", 2400))
        self.val = data(400)
        self.g = g

    def batch(self, idx, split="train"):
        x, y = self.train if split == "train" else self.val
        ya = y[idx]
        gg = gen(int(idx[0]) * 7919 + len(idx) + (0 if split == "train" else 1))
        order = torch.argsort(y, stable=True)
        counts = torch.bincount(y, minlength=self.K)
        starts = torch.cumsum(counts, 0) - counts
        pos = order[starts[ya] + (torch.rand(len(idx), generator=gg) * counts[ya]).long()]
        if split == "train" and not self.cfg.get("allow_self"):
            clash = pos == idx  # positive must differ from the anchor: take the next member of the class
            k = (order.argsort()[idx] - starts[ya] + 1) % counts[ya]
            pos = torch.where(clash, order[starts[ya] + k], pos)
        neg = torch.randint(0, len(y), (len(idx),), generator=gg)
        bad = y[neg] == ya
        neg = torch.where(bad, order[(starts[(ya + 1 + torch.randint(0, self.K - 1, (len(idx),), generator=gg)) % self.K])], neg)
        return x[idx], x[pos], x[neg]

    def model(self, cfg):
        return nn.Sequential(nn.Linear(self.D, 64), nn.ReLU(), nn.Linear(64, 16))

    def loss(self, m, b):
        a, p, n = (F.normalize(m(t), dim=-1) for t in b)
        if self.cfg.get("sqrt_bug"):
            # BUG: distance from the expanded form without a clamp: 2 - 2cos can be slightly negative
            dp = torch.sqrt((a * a).sum(-1) + (p * p).sum(-1) - 2 * (a * p).sum(-1))
            dn = torch.sqrt((a * a).sum(-1) + (n * n).sum(-1) - 2 * (a * n).sum(-1))
        else:
            dp = (a - p).pow(2).sum(-1).add(1e-12).sqrt()
            dn = (a - n).pow(2).sum(-1).add(1e-12).sqrt()
        loss = F.relu(dp - dn + 0.4).mean()
        return loss, {"frac_active": (dp - dn + 0.4 > 0).float().mean().item()}


# ---------------------------------------------------------------- CTC sequence labeller
class CTCNet(nn.Module):
    def __init__(self, fin=10, hid=32, C=6):
        super().__init__()
        self.rnn = nn.GRU(fin, hid, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hid, C)

    def forward(self, x):
        return self.out(self.rnn(x)[0]).log_softmax(-1)


class CTC(Family):
    name = "ctc"
    T, S, Fin = 20, 4, 10

    def make(self, g):
        proto = 1.5 * torch.randn(6, self.Fin, generator=g)
        proto[0] = 0

        def data(n):
            X = torch.zeros(n, self.T, self.Fin)
            Y = torch.zeros(n, self.S, dtype=torch.long)
            YL = torch.zeros(n, dtype=torch.long)
            XL = torch.full((n,), self.T, dtype=torch.long)
            for i in range(n):
                k = int(torch.randint(2, self.S + 1, (1,), generator=g))
                lab = torch.randint(1, 6, (k,), generator=g)
                t = int(torch.randint(0, 3, (1,), generator=g))
                for s in lab.tolist():
                    r = int(torch.randint(2, 4, (1,), generator=g))
                    X[i, t:t + r] = proto[s]
                    t += r + 1
                Y[i, :k] = lab
                YL[i] = k
            X += 0.6 * torch.randn(n, self.T, self.Fin, generator=g)
            return X, Y, XL, YL
        self.train = data(self.cfg.get("n_train", 1200))
        self.val = data(200)

    def model(self, cfg):
        return CTCNet(self.Fin)

    def loss(self, m, b):
        x, y, xl, yl = b
        lp = m(x).transpose(0, 1)
        loss = F.ctc_loss(lp, y, xl, yl, blank=0, reduction="mean", zero_infinity=False)
        return loss, {}


# ---------------------------------------------------------------- multi-task (two heads)
class MTNet(nn.Module):
    def __init__(self, d=16, C=4, drop=0.2):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(d, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(drop),
                                   nn.Linear(64, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(drop))
        self.cls = nn.Linear(64, C)
        self.reg = nn.Linear(64, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.cls(h), self.reg(h).squeeze(-1)


class MultiTask(Family):
    name = "multitask"
    D, C = 16, 4

    def make(self, g):
        W = torch.randn(self.D, self.C, generator=g)
        w = torch.randn(self.D, generator=g) / 4

        def data(n, scale=1.0):
            x = torch.randn(n, self.D, generator=g)
            yc = (x @ W + 0.5 * torch.randn(n, self.C, generator=g)).argmax(-1)
            yr = torch.sin(x @ w * 2) + 0.1 * torch.randn(n, generator=g)
            return x * scale, yc, yr
        self.train = data(self.cfg.get("n_train", 2400))
        self.val = data(400, self.cfg.get("val_scale", 1.0))
        if self.cfg.get("label_shift"):
            # BUG: labels re-aligned after a filter -> every label belongs to the next example
            x, yc, yr = self.train
            self.train = (x, torch.roll(yc, 1), torch.roll(yr, 1))

    def model(self, cfg):
        return MTNet(self.D, self.C, cfg.get("dropout", 0.2))

    def loss(self, m, b):
        x, yc, yr = b
        if self.cfg.get("input_scale"):
            x = x * self.cfg["input_scale"]
        oc, orr = m(x)
        lc = F.cross_entropy(oc, yc)
        lr_ = F.mse_loss(orr, yr)
        return lc + lr_, {"loss_cls": lc.item(), "loss_reg": lr_.item()}


# ---------------------------------------------------------------- knowledge distillation student
class KD(Family):
    name = "kd"
    D, C, T = 20, 10, 2.0

    def make(self, g):
        W1 = torch.randn(self.D, 128, generator=g) / math.sqrt(self.D)
        W2 = torch.randn(128, self.C, generator=g) / math.sqrt(128) * 4

        def data(n):
            x = torch.randn(n, self.D, generator=g)
            tl = torch.tanh(x @ W1) @ W2
            return x, tl, tl.argmax(-1)
        self.train = data(self.cfg.get("n_train", 3000))
        self.val = data(500)
        if self.cfg.get("label_shift"):
            x, tl, y = self.train
            self.train = (x, torch.roll(tl, 1, 0), torch.roll(y, 1))

    def model(self, cfg):
        return nn.Sequential(nn.Linear(self.D, 48), nn.ReLU(), nn.Dropout(cfg.get("dropout", 0.1)), nn.Linear(48, self.C))

    def loss(self, m, b):
        x, tl, y = b
        if self.cfg.get("input_scale"):
            x = x * self.cfg["input_scale"]
        out = m(x)
        ce = F.cross_entropy(out, y)
        T = self.T
        kl = F.kl_div(F.log_softmax(out / T, -1), F.log_softmax(tl / T, -1), log_target=True, reduction="batchmean")
        return 0.5 * ce + 0.5 * T * T * kl, {"ce": ce.item(), "kl": kl.item()}


# ---------------------------------------------------------------- deep plain MLP
class DeepNet(nn.Module):
    def __init__(self, d=16, width=32, depth=10, C=5, act="relu", gain=1.0, bias=0.0):
        super().__init__()
        self.layers = nn.ModuleList()
        dims = [d] + [width] * depth
        for i in range(depth):
            lin = nn.Linear(dims[i], dims[i + 1])
            if act == "relu":
                nn.init.kaiming_normal_(lin.weight, nonlinearity="relu")
            else:
                nn.init.xavier_normal_(lin.weight, gain=gain)
            nn.init.constant_(lin.bias, bias)
            if gain != 1.0 and act == "relu":
                lin.weight.data *= gain
            self.layers.append(lin)
        self.head = nn.Linear(width, C)
        self.act = {"relu": F.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}[act]
        self.act_name = act
        self.stats = {}

    def forward(self, x):
        h = x
        mid = len(self.layers) // 2
        for i, l in enumerate(self.layers):
            h = self.act(l(h))
            if i == mid:
                if self.act_name == "relu":
                    self.stats["dead"] = (h <= 0).all(0).float().mean().item()
                elif self.act_name == "tanh":
                    self.stats["sat"] = (h.abs() > 0.99).float().mean().item()
                else:
                    self.stats["sat"] = ((h < 0.01) | (h > 0.99)).float().mean().item()
        return self.head(h)


class Deep(Family):
    name = "deepnet"
    D, C = 16, 5

    def make(self, g):
        W = torch.randn(self.D, 24, generator=g)
        V = torch.randn(24, self.C, generator=g)

        def data(n):
            x = torch.randn(n, self.D, generator=g)
            return x, (torch.tanh(x @ W / 2) @ V).argmax(-1)
        self.train = data(self.cfg.get("n_train", 3000))
        self.val = data(500)

    def model(self, cfg):
        return DeepNet(self.D, depth=cfg.get("depth", 8), C=self.C, act=cfg.get("act", "relu"),
                       gain=cfg.get("gain", 1.0), bias=cfg.get("bias", 0.0))

    def loss(self, m, b):
        x, y = b
        if self.cfg.get("input_scale"):
            x = x * self.cfg["input_scale"]
        out = m(x)
        if self.cfg.get("log0_tau"):
            # BUG: hand-written one-vs-rest BCE on sigmoid probabilities: once sigmoid(z) rounds to exactly 1.0
            # for the true class, (1 - y) * log(1 - p) = 0 * log(0) = 0 * -inf = NaN
            Y = F.one_hot(y, self.C).float()
            p = torch.sigmoid(out / self.cfg["log0_tau"])
            loss = -(Y * torch.log(p) + (1 - Y) * torch.log(1 - p)).sum(-1).mean()
            return loss, dict(m.stats)
        return F.cross_entropy(out, y), dict(m.stats)


FAMILIES = {c.name: c for c in (GPT, GCN, TCN, MoE, Triplet, CTC, MultiTask, KD, Deep)}
