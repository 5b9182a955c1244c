"""Synthetic data sets and small models for the indep2 corpus (seeded, CPU)."""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


def _g(seed):
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------- data
def make_data(family, seed, n_train=2048, n_val=512, opts=None):
    """Return dict with Xtr, Ytr, Xva, Yva and task.  opts may carry bug knobs."""
    o = opts or {}
    g = _g(1000 + seed)
    n = n_train + n_val
    if family in ("mlp_reg", "deep_mlp", "fp16_mlp", "leaky_mlp"):
        d = 16
        X = torch.randn(n, d, generator=g)
        w1, w2 = torch.randn(d, generator=g), torch.randn(d, generator=g)
        Y = torch.sin(X @ w1 / 3) + 0.3 * (X @ w2 / 4) ** 2 + 0.1 * torch.randn(n, generator=g)
        Y = ((Y - Y.mean()) / Y.std()).unsqueeze(1)
        task = "reg"
    elif family in ("mlp_bin", "ddp2"):
        d = 16
        X = torch.randn(n, d, generator=g)
        w, v = torch.randn(d, generator=g), torch.randn(d, generator=g)
        s = X @ w + 1.5 * torch.sin(X @ v) + 0.3 * torch.randn(n, generator=g)
        Y = (s > 0).float().unsqueeze(1)
        task = "bin"
    elif family in ("cnn_bn", "resnet"):
        C, S = 4, 12
        tmpl = F.avg_pool2d(torch.randn(C, 1, S + 4, S + 4, generator=g), 3, 1)  # smooth
        Y = torch.randint(0, C, (n,), generator=g)
        sh = torch.randint(0, 3, (n, 2), generator=g)
        X = torch.stack([tmpl[Y[i], :, sh[i, 0]:sh[i, 0] + S, sh[i, 1]:sh[i, 1] + S] for i in range(n)])
        X = 2.0 * X / tmpl.std() + 0.9 * torch.randn(n, 1, S, S, generator=g)
        task = "cls"
    elif family in ("gru_cls", "lstm_cls", "rnn_cls"):
        C, T, d = 4, o.get("seq_len", 24), 6
        motifs = torch.randn(C, 4, d, generator=g) * 1.5
        Y = torch.randint(0, C, (n,), generator=g)
        X = torch.randn(n, T, d, generator=g)
        pos = torch.randint(0, T - 4, (n,), generator=g)
        for i in range(n):
            X[i, pos[i]:pos[i] + 4] += motifs[Y[i]]
        task = "cls"
    elif family == "conv1d":
        C, L = 3, 64
        Y = torch.randint(0, C, (n,), generator=g)
        freqs = torch.tensor([2.0, 5.0, 9.0])
        ph = torch.rand(n, generator=g) * 2 * math.pi
        t = torch.arange(L).float() / L
        X = torch.sin(2 * math.pi * freqs[Y].unsqueeze(1) * t + ph.unsqueeze(1))
        X = (X + 0.8 * torch.randn(n, L, generator=g)).unsqueeze(1)
        task = "cls"
    elif family in ("autoenc", "vae"):
        A = torch.randn(4, 32, generator=g)
        Z = torch.randn(n, 4, generator=g)
        X = torch.tanh(Z @ A / 2) + 0.05 * torch.randn(n, 32, generator=g)
        Y = X
        task = "ae"
    elif family == "tiny_lm":
        V, T = 16, 32
        P = torch.softmax(3.0 * torch.randn(V, V, V, generator=g), -1)  # order-2 Markov
        L = n * 8 + T + 1
        seq = torch.zeros(L, dtype=torch.long)
        seq[0], seq[1] = 1, 2
        u = torch.rand(L, generator=g)
        cdf = P.cumsum(-1)
        for i in range(2, L):
            seq[i] = min(int(torch.searchsorted(cdf[seq[i - 2], seq[i - 1]], u[i])), V - 1)
        starts = torch.randint(0, L - T - 1, (n,), generator=g)
        W = torch.stack([seq[s:s + T + 1] for s in starts])
        X, Y = W[:, :-1], W[:, 1:]
        task = "lm"
    elif family == "recsys":
        U, I, k = 200, 300, 4
        n = max(n, 12000)
        n_train = n - n_val
        Pu, Qi = torch.randn(U, k, generator=g), torch.randn(I, k, generator=g)
        bu, bi = 0.5 * torch.randn(U, generator=g), 0.5 * torch.randn(I, generator=g)
        u = torch.randint(0, U, (n,), generator=g)
        i = torch.randint(0, I, (n,), generator=g)
        r = (Pu[u] * Qi[i]).sum(1) / 2 + bu[u] + bi[i] + 0.3 * torch.randn(n, generator=g)
        X = torch.stack([u, i], 1)
        Y = r.unsqueeze(1)
        task = "rec"
    elif family == "siamese":
        K, d = 8, 16
        cent = torch.randn(K, d, generator=g) * 2
        ca = torch.randint(0, K, (n,), generator=g)
        same = torch.rand(n, generator=g) < 0.5
        cb = torch.where(same, ca, (ca + torch.randint(1, K, (n,), generator=g)) % K)
        a = cent[ca] + torch.randn(n, d, generator=g)
        b = cent[cb] + torch.randn(n, d, generator=g)
        dup = o.get("dup_every", 0)
        if dup:  # duplicated rows: the pair is the same sample twice
            idx = torch.arange(0, n_train, dup)
            b[idx] = a[idx]
            same[idx] = True
        X = torch.stack([a, b], 1)
        Y = same.float().unsqueeze(1)
        task = "pair"
    else:
        raise ValueError(family)
    if o.get("shuffle_labels"):
        Y = Y[torch.randperm(len(Y), generator=g)]
    Xtr, Ytr, Xva, Yva = X[:n_train], Y[:n_train], X[n_train:], Y[n_train:]
    if o.get("tiny_train"):
        Xtr, Ytr = Xtr[:o["tiny_train"]], Ytr[:o["tiny_train"]]
    if o.get("val_leak"):
        Xva, Yva = Xtr[:n_val], Ytr[:n_val]
    if o.get("val_shift") and task in ("cls", "reg", "bin", "ae"):
        Xva = Xva * o["val_shift"] + 0.5 * o["val_shift"]
    return dict(Xtr=Xtr, Ytr=Ytr, Xva=Xva, Yva=Yva, task=task)


# ----------------------------------------------------------------- models
class MLP(nn.Module):
    def __init__(self, din, dout, hidden=64, depth=2, act="relu", dropout=0.0, init_std=None, bias_init=None):
        super().__init__()
        acts = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": nn.GELU}
        layers, d = [], din
        for _ in range(depth):
            lin = nn.Linear(d, hidden)
            if init_std is not None:
                nn.init.normal_(lin.weight, 0, init_std)
            if bias_init is not None:
                nn.init.constant_(lin.bias, bias_init)
            layers += [lin, acts[act]()]
            if dropout:
                layers.append(nn.Dropout(dropout))
            d = hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(d, dout)

    def forward(self, x):
        return self.head(self.body(x))


class CNN(nn.Module):
    def __init__(self, C=4, width=16):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2))
        self.head = nn.Linear(2 * width, C)

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
    def __init__(self, C=4, c=12, blocks=3):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
                                  *[Block(c) for _ in range(blocks)], nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(c, C)

    def forward(self, x):
        return self.head(self.body(x))


class RNNCls(nn.Module):
    def __init__(self, kind="gru", din=6, hidden=32, C=4, rec_gain=None, nonlin="tanh"):
        super().__init__()
        cls = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn": nn.RNN}[kind]
        kw = dict(nonlinearity=nonlin) if kind == "rnn" else {}
        self.body = cls(din, hidden, batch_first=True, **kw)
        if rec_gain is not None:
            for name, p in self.body.named_parameters():
                if "weight_hh" in name:
                    nn.init.normal_(p, 0, rec_gain / math.sqrt(hidden))
        self.head = nn.Linear(hidden, C)

    def forward(self, x):
        out, _ = self.body(x)
        return self.head(out[:, -1])


class Conv1dNet(nn.Module):
    def __init__(self, C=3):
        super().__init__()
        self.body = nn.Sequential(nn.Conv1d(1, 16, 7, padding=3), nn.ReLU(), nn.MaxPool1d(2),
                                  nn.Conv1d(16, 32, 5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten())
        self.head = nn.Linear(32, C)

    def forward(self, x):
        return self.head(self.body(x))


class AE(nn.Module):
    def __init__(self, d=32, z=4, vae=False):
        super().__init__()
        self.vae = vae
        self.body = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, 2 * z if vae else z))
        self.head = nn.Sequential(nn.Linear(z, 64), nn.ReLU(), nn.Linear(64, d))

    def forward(self, x):
        h = self.body(x)
        if not self.vae:
            return self.head(h), None
        mu, logv = h.chunk(2, -1)
        zz = mu + torch.randn_like(mu) * torch.exp(0.5 * logv) if self.training else mu
        return self.head(zz), (mu, logv)


class TinyLM(nn.Module):
    def __init__(self, V=16, T=32, d=32, layers=2, dropout=0.0):
        super().__init__()
        self.emb, self.pos = nn.Embedding(V, d), nn.Parameter(torch.zeros(T, d))
        lay = nn.TransformerEncoderLayer(d, 2, 64, dropout=dropout, batch_first=True)
        self.body = nn.TransformerEncoder(lay, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, V)
        self.register_buffer("mask", torch.triu(torch.full((T, T), float("-inf")), 1))

    def forward(self, x):
        h = self.emb(x) + self.pos[: x.shape[1]]
        return self.head(self.body(h, mask=self.mask[: x.shape[1], : x.shape[1]], is_causal=True))


class Rec(nn.Module):
    def __init__(self, U=200, I=300, k=8):
        super().__init__()
        self.body = nn.ModuleDict(dict(u=nn.Embedding(U, k), i=nn.Embedding(I, k)))
        for e in self.body.values():
            nn.init.normal_(e.weight, 0, 0.1)
        self.head = nn.ModuleDict(dict(bu=nn.Embedding(U, 1), bi=nn.Embedding(I, 1)))
        for e in self.head.values():
            nn.init.zeros_(e.weight)
        self.mu = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        u, i = x[:, 0], x[:, 1]
        dot = (self.body["u"](u) * self.body["i"](i)).sum(1, keepdim=True)
        return dot + self.head["bu"](u) + self.head["bi"](i) + self.mu


class Siamese(nn.Module):
    def __init__(self, d=16, z=8):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, z)

    def embed(self, x):
        return self.head(self.body(x))

    def forward(self, x):
        return self.embed(x[:, 0]), self.embed(x[:, 1])


def make_model(family, mo=None):
    mo = mo or {}
    if family in ("mlp_reg", "fp16_mlp", "leaky_mlp"):
        return MLP(16, 1, mo.get("hidden", 64), mo.get("depth", 2), mo.get("act", "relu"),
                   mo.get("dropout", 0.0), mo.get("init_std"), mo.get("bias_init"))
    if family == "deep_mlp":
        return MLP(16, 1, 32, mo.get("depth", 12), mo.get("act", "sigmoid"))
    if family in ("mlp_bin", "ddp2"):
        return MLP(16, 1, mo.get("hidden", 64), mo.get("depth", 2), mo.get("act", "relu"), mo.get("dropout", 0.0))
    if family == "cnn_bn":
        return CNN()
    if family == "resnet":
        return ResNet()
    if family in ("gru_cls", "lstm_cls", "rnn_cls"):
        return RNNCls(family.split("_")[0], rec_gain=mo.get("rec_gain"), hidden=mo.get("hidden", 32),
                      nonlin=mo.get("nonlin", "tanh"))
    if family == "conv1d":
        return Conv1dNet()
    if family == "autoenc":
        return AE()
    if family == "vae":
        return AE(vae=True)
    if family == "tiny_lm":
        return TinyLM(dropout=mo.get("dropout", 0.0))
    if family == "recsys":
        return Rec()
    if family == "siamese":
        return Siamese()
    raise ValueError(family)
