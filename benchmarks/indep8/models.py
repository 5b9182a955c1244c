"""indep8 model families and their seeded synthetic data. Bugs that live in a model or its data are marked BUG."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


class Family:
    """A family gives data (train_batch(i), val batches), a model, and a loss(model, batch)."""
    loss_word = "loss"
    n_train = 2000
    n_val = 400

    def __init__(self, cfg, seed):
        self.cfg = cfg
        self.seed = seed
        g = gen(seed)
        self.Xtr, self.Ytr = self.make(self.cfg.get("n_train", self.n_train), g)
        self.Xva, self.Yva = self.make(self.n_val, g)
        self.bs = cfg.get("bs", 32)

    def ntr(self):
        return self.Ytr.shape[0]

    def batch_index(self, i):
        n = self.ntr()
        nb = max(1, n // self.bs)
        ep, k = divmod(i, nb)
        perm = torch.randperm(n, generator=gen(self.seed * 1000 + ep))
        return perm[k * self.bs:(k + 1) * self.bs]

    def batches_per_epoch(self):
        return max(1, self.ntr() // self.bs)

    def train_batch(self, i):
        idx = self.batch_index(i)
        return self.Xtr[idx].clone(), self.Ytr[idx].clone()

    def val_batches(self):
        yield self.Xva, self.Yva


# ---------------------------------------------------------------- charcnn: character-level CNN text classifier
KEYWORDS = ["cat", "dog", "sun", "map"]
ALPHA = "abcdefghijklmnopqrstuvwxyz "  # index 1..27; 0 = padding; 28 = '~' (a rare character)


class CharCNN(nn.Module):
    def __init__(self, vocab=32, d=16, ch=32, ncls=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, d, padding_idx=0)
        self.c1 = nn.Conv1d(d, ch, 5, padding=2)
        self.c2 = nn.Conv1d(ch, ch, 3, padding=1)
        self.head = nn.Linear(ch, ncls)

    def forward(self, x):
        h = self.emb(x).transpose(1, 2)
        h = F.relu(self.c1(h))
        h = F.relu(self.c2(h))
        return self.head(h.max(2).values)


class Charcnn(Family):
    loss_word = "ce"

    def make(self, n, g):
        L = 40
        texts, ys = [], []
        for i in range(n):
            y = int(torch.randint(0, 4, (1,), generator=g))
            ln = int(torch.randint(24, L + 1, (1,), generator=g)) if not self.cfg.get("fixed_len") else L
            chars = [ALPHA[int(c)] for c in torch.randint(0, 27, (ln,), generator=g)]
            pos = int(torch.randint(0, ln - 3, (1,), generator=g))
            chars[pos:pos + 3] = list(KEYWORDS[y])
            if float(torch.rand(1, generator=g)) < 0.06:
                y = int(torch.randint(0, 4, (1,), generator=g))
            texts.append("".join(chars))
            ys.append(y)
        self.L = L
        if not hasattr(self, "texts"):
            self.texts = texts
        return self.encode(texts), torch.tensor(ys)

    def encode(self, texts, vocab=None):
        vocab = vocab or {c: i + 1 for i, c in enumerate(ALPHA)}
        vocab.setdefault("~", 28)
        X = torch.zeros(len(texts), self.L, dtype=torch.long)
        for i, t in enumerate(texts):
            X[i, :len(t)] = torch.tensor([vocab.get(c, 28) for c in t])
        return X

    def train_batch(self, i):
        idx = self.batch_index(i)
        if self.cfg.get("bug") == "vocab_rebuilt_per_batch":
            # BUG vocab_rebuilt_per_batch: the tokenizer re-scans the whole corpus to build its vocabulary on every batch
            chars = sorted(set("".join(self.texts)))
            vocab = {c: ALPHA.index(c) + 1 for c in chars}
            counts = {}
            for t in self.texts:
                for c in t:
                    counts[c] = counts.get(c, 0) + 1
            x = self.encode([self.texts[int(j)] for j in idx], vocab)
        else:
            x = self.Xtr[idx].clone()
        y = self.Ytr[idx].clone()
        if self.cfg.get("rare_from") is not None and i >= self.cfg["rare_from"] and i % 7 == 0:
            x[0, 1] = 28  # a new data source with a rare character is mixed in from this step
        return x, y

    def model(self):
        return CharCNN()

    def loss(self, model, b, train=True):
        x, y = b
        out = model(x)
        self.last_acc = float((out.argmax(1) == y).float().mean())
        return F.cross_entropy(out, y)

    def layers(self, model):
        return model.c1.weight, model.head.weight

    def probe_modules(self, model):
        return []


# ---------------------------------------------------------------- grud: GRU-D imputation of irregular multivariate series
class GRUD(nn.Module):
    def __init__(self, D=4, H=24):
        super().__init__()
        self.D, self.H = D, H
        self.gx = nn.Linear(D, D)
        self.gh = nn.Linear(D, H)
        self.inp = nn.Sequential(nn.Linear(3 * D, H), nn.Tanh())
        self.cell = nn.GRUCell(H, H)
        self.out = nn.Linear(H, D)
        self.register_buffer("xmean", torch.zeros(D))

    def forward(self, x, m, dl):
        B, T, D = x.shape
        h = x.new_zeros(B, self.H)
        xl = x.new_zeros(B, D)
        preds = []
        for t in range(T):
            preds.append(self.out(h))
            gx = torch.exp(-F.relu(self.gx(dl[:, t])))
            gh = torch.exp(-F.relu(self.gh(dl[:, t])))
            xt = m[:, t] * x[:, t] + (1 - m[:, t]) * (gx * xl + (1 - gx) * self.xmean)
            xl = torch.where(m[:, t] > 0, x[:, t], xl)
            h = gh * h
            h = self.cell(self.inp(torch.cat([xt, m[:, t], dl[:, t]], 1)), h)
        return torch.stack(preds, 1)


class Grud(Family):
    loss_word = "imp_mse"
    n_train = 1200

    def make(self, n, g):
        T, D = 20, 4
        t = torch.arange(T).float()
        f = 0.3 + 0.5 * torch.rand(n, 1, D, generator=g)
        ph = torch.rand(n, 1, D, generator=g) * 6.28
        x = torch.sin(f * t[None, :, None] + ph) + 0.5 * torch.sin(0.5 * f * t[None, :, None])
        x = x + 0.1 * torch.randn(x.shape, generator=g)
        m = (torch.rand(n, T, D, generator=g) > 0.4).float()
        dl = torch.zeros(n, T, D)
        for k in range(1, T):
            dl[:, k] = torch.where(m[:, k - 1] > 0, torch.ones(n, D), dl[:, k - 1] + 1)
        if self.cfg.get("bug") == "unscaled_inputs":
            x = x * 400.0 + 1000.0  # BUG unscaled_inputs: the standardisation step was skipped (raw sensor units)
        return (x * m, m, dl), x

    def ntr(self):
        return self.Ytr.shape[0]

    def train_batch(self, i):
        idx = self.batch_index(i)
        return tuple(t[idx].clone() for t in self.Xtr), self.Ytr[idx].clone()

    def model(self):
        return GRUD()

    def loss(self, model, b, train=True):
        (x, m, dl), y = b
        p = model(x, m, dl)
        mask = m  # predict each observed value before seeing it
        return (((p - y) ** 2) * mask).sum() / mask.sum().clamp_min(1)

    def layers(self, model):
        return model.inp[0].weight, model.out.weight

    def probe_modules(self, model):
        return [model.inp[1]]


# ---------------------------------------------------------------- sage: GraphSAGE node classification on a stochastic block model
class SAGELayer(nn.Module):
    def __init__(self, a, b, agg="mean"):
        super().__init__()
        self.s = nn.Linear(a, b)
        self.n = nn.Linear(a, b, bias=False)
        self.agg = agg

    def forward(self, h, A, deg):
        nb = A @ h
        if self.agg == "mean":
            nb = nb / deg
        # else: BUG sage_sum_agg: neighbour features summed, not averaged (the degree normalisation was dropped)
        return self.s(h) + self.n(nb)


class SAGE(nn.Module):
    def __init__(self, fin=16, hid=16, ncls=4, agg="mean"):
        super().__init__()
        self.l1 = SAGELayer(fin, hid, agg)
        self.l2 = SAGELayer(hid, hid, agg)
        self.head = nn.Linear(hid, ncls)

    def forward(self, X, A, deg):
        h = F.relu(self.l1(X, A, deg))
        h = F.relu(self.l2(h, A, deg))
        return self.head(h)


class Sage(Family):
    loss_word = "nll"

    def __init__(self, cfg, seed):
        self.cfg = cfg
        self.seed = seed
        g = gen(seed)
        N, C = 500, 4
        y = torch.arange(N) % C
        p_in, p_out = cfg.get("p_in", 0.06), cfg.get("p_out", 0.012)
        P = torch.where(y[:, None] == y[None, :], p_in, p_out)
        A = (torch.rand(N, N, generator=g) < P).float()
        A = torch.triu(A, 1)
        A = A + A.t()
        self.A = A
        self.deg = A.sum(1, keepdim=True).clamp_min(1)
        proto = torch.randn(C, 16, generator=g)
        self.X = proto[y] * 0.4 + 1.0 * torch.randn(N, 16, generator=g)
        flip = torch.rand(N, generator=g) < 0.05
        self.y = torch.where(flip, torch.randint(0, C, (N,), generator=g), y)
        perm = torch.randperm(N, generator=g)
        ntr = cfg.get("n_train", 300)
        self.tr, self.va = perm[:ntr], perm[300:]
        if cfg.get("bug") == "split_inverted":
            self.tr, self.va = perm[-40:], perm[:-40]  # BUG split_inverted: train/val index lists swapped (train on the small remainder)
            self.va = self.va[:200]
        self.Ytr = self.tr
        self.bs = cfg.get("bs", 32)

    def train_batch(self, i):
        idx = self.tr[self.batch_index(i)]
        return idx.clone(), self.y[idx].clone()

    def val_batches(self):
        yield self.va, self.y[self.va]

    def model(self):
        return SAGE(hid=self.cfg.get("hid", 16), agg="sum" if self.cfg.get("bug") == "sage_sum_agg" else "mean")

    def post_opt(self, model):
        if self.cfg.get("bug") == "opt_stale_params":
            # BUG opt_stale_params: the head is rebuilt for the class count read from the data AFTER the optimizer was made
            model.head = nn.Linear(model.head.in_features, int(self.y.max()) + 1)

    def loss(self, model, b, train=True):
        idx, y = b
        X = self.X
        if idx.is_floating_point():
            X = X * idx.abs().max()  # a corrupted batch scales the features
            idx = idx.long()
        out = model(X, self.A, self.deg)[idx]
        self.last_acc = float((out.argmax(1) == y).float().mean())
        return F.cross_entropy(out, y)

    def layers(self, model):
        return model.l1.s.weight, model.head.weight


# ---------------------------------------------------------------- cpc: contrastive predictive coding on 1-D signals
class CPCNet(nn.Module):
    def __init__(self, d=32, K=3):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv1d(1, d, 4, stride=4), nn.ReLU(), nn.Conv1d(d, d, 1))
        self.gru = nn.GRU(d, d, batch_first=True)
        self.W = nn.ModuleList([nn.Linear(d, d, bias=False) for _ in range(K)])
        self.K = K


class Cpc(Family):
    loss_word = "cpc_nce"

    def make(self, n, g):
        T = 96
        t = torch.arange(T).float()
        f = 0.1 + 0.6 * torch.rand(n, 1, generator=g)
        a = 0.5 + torch.rand(n, 1, generator=g)
        x = a * torch.sin(f * t[None] + 6.28 * torch.rand(n, 1, generator=g)) + 0.3 * torch.sin(2.1 * f * t[None])
        x = x + 0.3 * torch.randn(n, T, generator=g)
        return x[:, None, :], torch.zeros(n)

    def val_batches(self):
        for i in range(0, self.Xva.shape[0], self.bs):
            yield self.Xva[i:i + self.bs], self.Yva[i:i + self.bs]

    def model(self):
        self.bank = []
        return CPCNet()

    def loss(self, model, b, train=True):
        x, _ = b
        z = model.enc(x).transpose(1, 2)  # B, T', d
        c, _ = model.gru(z)
        B, T, d = z.shape
        t0 = T // 2
        tot = 0.0
        for k in range(1, model.K + 1):
            pred = model.W[k - 1](c[:, t0])  # B, d
            pos = z[:, t0 + k]
            cand = pos
            if self.cfg.get("bug") == "feature_cache_grows" and train:
                # BUG feature_cache_grows: a negative bank meant to keep the last 4096 entries; the truncation is applied
                # to a copy, so the bank (and the logits matrix) grows every step
                self.bank.append(pos.detach().clone())
                bank = torch.cat(self.bank)
                _ = bank[-4096:]
                cand = torch.cat([pos, bank])
            logits = pred @ cand.t()
            tgt = torch.arange(B)
            if self.cfg.get("bug") == "nce_labels_zero":
                tgt = torch.zeros(B, dtype=torch.long)  # BUG nce_labels_zero: positives assumed at column 0
            tot = tot + F.cross_entropy(logits, tgt)
        loss = tot / model.K
        if self.cfg.get("bug") == "identical_views_sqrt" and train and self.cfg.get("_step", 0) >= self.cfg.get("bug_step", 0):
            # BUG identical_views_sqrt: a view-consistency term ||z(view1) - z(view2)||; the augmentation was switched off,
            # the views are identical, and the gradient of the norm at 0 is NaN
            z2 = model.enc(x).transpose(1, 2)
            loss = loss + 1e-3 * torch.sqrt(((z - z2) ** 2).sum())
        return loss

    def layers(self, model):
        return model.enc[0].weight, model.W[0].weight


# ---------------------------------------------------------------- sorter: transformer encoder that sorts numbers
class Block(nn.Module):
    def __init__(self, d, residual=True):
        super().__init__()
        self.att = nn.MultiheadAttention(d, 4, batch_first=True)
        self.n1 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.Sigmoid() if not residual else nn.ReLU(), nn.Linear(2 * d, d))
        self.n2 = nn.LayerNorm(d)
        self.residual = residual

    def forward(self, x):
        a = self.att(self.n1(x), self.n1(x), self.n1(x), need_weights=False)[0]
        if self.residual:
            x = x + a
            return x + self.ff(self.n2(x))
        # BUG residual_dropped: a "simplified" block without skip connections (and the sigmoid of an old config)
        return torch.sigmoid(self.ff(self.n2(a)))


class SortNet(nn.Module):
    def __init__(self, V=32, L=10, d=32, depth=2, residual=True):
        super().__init__()
        self.emb = nn.Embedding(V, d)
        self.pos = nn.Parameter(torch.randn(1, L, d) * 0.1)
        self.blocks = nn.Sequential(*[Block(d, residual) for _ in range(depth)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, V)

    def forward(self, x):
        return self.head(self.norm(self.blocks(self.emb(x) + self.pos)))


class Sorter(Family):
    loss_word = "sort_xent"
    n_train = 3000

    def make(self, n, g):
        x = torch.randint(0, 32, (n, 10), generator=g)
        return x, x.sort(1).values

    def model(self):
        if self.cfg.get("bug") == "residual_dropped":
            return SortNet(depth=self.cfg.get("depth", 10), residual=False)
        return SortNet(depth=self.cfg.get("depth", 2))

    def loss(self, model, b, train=True):
        x, y = b
        if x.is_floating_point():
            x = x.abs().round().long().clamp(0, 31)
        out = model(x)
        self.last_acc = float((out.argmax(-1) == y).float().mean())
        return F.cross_entropy(out.reshape(-1, 32), y.reshape(-1))

    def layers(self, model):
        return model.emb.weight, model.head.weight


# ---------------------------------------------------------------- made: masked autoencoder for distribution estimation
class MaskedLinear(nn.Linear):
    def __init__(self, a, b, mask):
        super().__init__(a, b)
        self.register_buffer("mask", mask)

    def forward(self, x):
        return F.linear(x, self.weight * self.mask, self.bias)


class MADE(nn.Module):
    def __init__(self, D=12, H=64, neg_init=False):
        super().__init__()
        g = gen(7)
        deg_in = torch.arange(1, D + 1)
        d1 = torch.randint(1, D, (H,), generator=g)
        d2 = torch.randint(1, D, (H,), generator=g)
        self.l1 = MaskedLinear(D, H, (d1[:, None] >= deg_in[None]).float())
        self.l2 = MaskedLinear(H, H, (d2[:, None] >= d1[None]).float())
        self.l3 = MaskedLinear(H, D, (deg_in[:, None] > d2[None]).float())
        self.a1, self.a2 = nn.ReLU(), nn.ReLU()
        if neg_init:
            for lyr in (self.l1, self.l2):
                b = 1 / math.sqrt(lyr.in_features)
                nn.init.uniform_(lyr.weight, -b, -b / 10)  # BUG init_bounds_negative: the upper bound kept the minus sign
                nn.init.zeros_(lyr.bias)

    def forward(self, x):
        return self.l3(self.a2(self.l2(self.a1(self.l1(x)))))


class Made(Family):
    loss_word = "nll_nats"
    n_train = 3000

    def make(self, n, g):
        protos = (torch.rand(6, 12, generator=gen(99)) < 0.5).float()
        k = torch.randint(0, 6, (n,), generator=g)
        x = protos[k]
        flip = (torch.rand(n, 12, generator=g) < 0.08).float()
        x = (x + flip) % 2
        return x, torch.zeros(n)

    def model(self):
        return MADE(neg_init=self.cfg.get("bug") == "init_bounds_negative")

    def loss(self, model, b, train=True):
        x, _ = b
        xin = x
        logits = model(xin)
        loss = F.binary_cross_entropy_with_logits(logits, x.clamp(0, 1), reduction="none").sum(1).mean()
        return loss

    def layers(self, model):
        return model.l1.weight, model.l3.weight

    def probe_modules(self, model):
        return [model.a1]


# ---------------------------------------------------------------- deepar: autoregressive Gaussian LSTM forecaster
class DeepARNet(nn.Module):
    def __init__(self, H=32, relu_sigma=False):
        super().__init__()
        self.lstm = nn.LSTM(2, H, batch_first=True)
        self.mu = nn.Linear(H, 1)
        self.sig = nn.Linear(H, 1)
        self.relu_sigma = relu_sigma

    def forward(self, z_prev, cov):
        h, _ = self.lstm(torch.stack([z_prev, cov], -1))
        mu = self.mu(h).squeeze(-1)
        if self.relu_sigma:
            sig = F.relu(self.sig(h)).squeeze(-1)  # BUG sigma_relu: ReLU where softplus was meant; sigma can be exactly 0
        else:
            sig = F.softplus(self.sig(h)).squeeze(-1) + 1e-3
        return mu, sig


class Deepar(Family):
    loss_word = "nll"
    n_train = 1500

    def make(self, n, g):
        T = 36
        t = torch.arange(T).float()
        level = torch.exp(torch.rand(n, 1, generator=g) * 4.6)  # 1 .. 100
        ph = torch.rand(n, 1, generator=g) * 6.28
        lo, hi = self.cfg.get("noise", (0.3, 0.5))
        noise = torch.where(torch.rand(n, 1, generator=g) < 0.5, lo, hi)
        y = level * (1 + 0.4 * torch.sin(2 * math.pi * t[None] / 12 + ph)) * (1 + noise * torch.randn(n, T, generator=g))
        cf = self.cfg.get("const_frac", 0.0)
        if cf:
            const = torch.rand(n, 1, generator=g) < cf  # stock-out / capped series: a constant value over the window
            y = torch.where(const, level.expand(n, T), y)
        return y.clamp_min(0.01), torch.zeros(n)

    def model(self):
        return DeepARNet(relu_sigma=self.cfg.get("bug") == "sigma_relu")

    def loss(self, model, b, train=True):
        y, _ = b
        T = y.shape[1]
        cov = torch.sin(2 * math.pi * torch.arange(T).float() / 12)[None].expand(y.shape[0], T)
        scale = y[:, :12].mean(1, keepdim=True)
        if self.cfg.get("_unscaled"):
            scale = torch.ones_like(scale)  # BUG unscaled_shard: a shard written before the mean-scaling step was added
        z = y / scale
        zp = torch.cat([torch.zeros_like(z[:, :1]), z[:, :-1]], 1)
        mu, sig = model(zp, cov)
        nll = torch.log(sig) + 0.5 * ((z - mu) / sig) ** 2 + 0.5 * math.log(2 * math.pi)
        return nll.mean()

    def layers(self, model):
        return model.lstm.weight_ih_l0, model.mu.weight


FAMILIES = {"charcnn": Charcnn, "grud": Grud, "sage": Sage, "cpc": Cpc, "sorter": Sorter, "made": Made, "deepar": Deepar}
