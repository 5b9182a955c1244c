"""Model families and their seeded synthetic data (indep6). Search BUG for injected faults."""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


def gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


class Family:
    """A family owns its data, its model and its loss. Supervised families expose tensors
    (Xtr, Ytr, Xva, Yva); the engine's loader draws batches from them."""
    loss_word = "loss"
    floor = 0.0          # lower bound of the loss (labels measure loss - floor)
    custom = False       # GAN: its own two-optimizer step
    rl = False
    full_batch = False

    def __init__(self, seed, cfg):
        self.cfg = cfg
        self.seed = seed
        self.bugs = set(cfg.get("bugs", ()))
        self.g = gen(seed)
        torch.manual_seed(seed)
        self.data()
        torch.manual_seed(seed + 1)
        self.model = self.build()
        self.flip_from = None

    def first_last(self):
        ps = [p for p in self.model.parameters() if p.dim() > 1]
        return ps[0], ps[-1]

    def val_loss(self, on_train=False):
        self.model.eval()
        with torch.no_grad():
            if on_train:   # BUG eval_on_train: "validation" runs on the training set
                n = min(len(self.Xva), len(self.Xtr))
                l, _ = self.loss((self.Xtr[:n], self.Ytr[:n]), train=False)
            else:
                l, _ = self.loss((self.Xva, self.Yva), train=False)
        self.model.train()
        return float(l)


def blocks(i, h, o, depth=2, act=nn.ReLU, bn=False):
    layers, d = [], i
    for _ in range(depth):
        layers.append(nn.Linear(d, h))
        if bn:
            layers.append(nn.BatchNorm1d(h))
        layers.append(act())
        d = h
    layers.append(nn.Linear(d, o))
    return nn.Sequential(*layers)


# ---------------------------------------------------------------- segnet: tiny U-Net, BCE - dice
class TinyUNet(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.e1 = nn.Sequential(nn.Conv2d(1, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1), nn.ReLU())
        self.e2 = nn.Sequential(nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.d1 = nn.Sequential(nn.Conv2d(2 * c, c, 3, padding=1), nn.ReLU())
        self.out = nn.Conv2d(c, 1, 1)

    def forward(self, x):
        a = self.e1(x)
        b = self.e2(F.max_pool2d(a, 2))
        u = self.up(b)
        return self.out(self.d1(torch.cat([a, u], 1)))


class SegNet(Family):
    loss_word = "dice_bce"
    floor = -1.0

    def data(self):
        n = self.cfg.get("n_train", 384) + 96
        yy, xx = torch.meshgrid(torch.arange(16.), torch.arange(16.), indexing="ij")
        cx = torch.rand(n, 1, 1, generator=self.g) * 10 + 3
        cy = torch.rand(n, 1, 1, generator=self.g) * 10 + 3
        r = torch.rand(n, 1, 1, generator=self.g) * 3 + 2
        m = (((xx - cx) ** 2 + (yy - cy) ** 2) < r ** 2).float()
        sq = torch.rand(n, generator=self.g) < 0.5
        bx = (xx - cx).abs().lt(r) & (yy - cy).abs().lt(r * 0.6)
        m = torch.where(sq[:, None, None], bx.float(), m)
        x = m * 0.8 + 0.35 * torch.randn(n, 16, 16, generator=self.g)
        x, m = x[:, None], m[:, None]
        k = n - 96
        self.Xtr, self.Ytr, self.Xva, self.Yva = x[:k], m[:k], x[k:], m[k:]

    def build(self):
        return TinyUNet(self.cfg.get("width", 8))

    def loss(self, b, train=True):
        x, y = b
        z = self.model(x)
        if "sigmoid_bce" in self.bugs:   # BUG sigmoid_bce: sigmoid applied before BCEWithLogitsLoss
            z = torch.sigmoid(z)
        bce = F.binary_cross_entropy_with_logits(z, y)
        p = torch.sigmoid(z)
        dice = (2 * (p * y).sum((1, 2, 3)) + 1) / (p.sum((1, 2, 3)) + y.sum((1, 2, 3)) + 1)
        return bce - dice.mean(), {}


# ---------------------------------------------------------------- ddpm: denoising diffusion MLP
class EpsNet(nn.Module):
    def __init__(self, h=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2 + 16, h), nn.SiLU(), nn.Linear(h, h), nn.SiLU(), nn.Linear(h, 2))

    def forward(self, x, t):
        f = torch.arange(8.) + 1
        e = torch.cat([torch.sin(t[:, None] * f * 0.1), torch.cos(t[:, None] * f * 0.1)], 1)
        return self.net(torch.cat([x, e], 1))


class DDPM(Family):
    loss_word = "noise_mse"
    T = 50

    def data(self):
        n = self.cfg.get("n_train", 4096) + 512
        th = 1.5 * math.pi * (1 + 2 * torch.rand(n, generator=self.g))
        x = torch.stack([th * torch.cos(th), th * torch.sin(th)], 1) / 8 + 0.05 * torch.randn(n, 2, generator=self.g)
        k = n - 512
        self.Xtr, self.Xva = x[:k], x[k:]
        self.Ytr = torch.zeros(k)
        self.Yva = torch.zeros(512)
        beta = torch.linspace(1e-4, 0.2, self.T)
        self.abar = torch.cumprod(1 - beta, 0)
        gv = gen(self.seed + 99)
        self.tv = torch.randint(0, self.T, (512,), generator=gv)
        self.ev = torch.randn(512, 2, generator=gv)

    def build(self):
        return EpsNet(self.cfg.get("width", 64))

    def loss(self, b, train=True):
        x0, _ = b
        if train:
            t = torch.randint(0, self.T, (len(x0),))
            e = torch.randn_like(x0)
        else:
            t, e = self.tv[:len(x0)], self.ev[:len(x0)]
        a = self.abar[t][:, None]
        xt = a.sqrt() * x0 + (1 - a).sqrt() * e
        return F.mse_loss(self.model(xt, t.float()), e), {}


# ---------------------------------------------------------------- mlm: BERT-style masked LM
class Encoder(nn.Module):
    def __init__(self, V, d=32, L=16, tie=True):
        super().__init__()
        self.emb = nn.Embedding(V + 1, d)
        self.pos = nn.Parameter(torch.randn(L, d) * 0.02)
        self.layer = nn.TransformerEncoderLayer(d, 2, 64, dropout=0.0, batch_first=True)
        self.norm = nn.LayerNorm(d)
        nn.init.normal_(self.emb.weight, std=0.1)
        self.out = nn.Linear(d, V + 1, bias=False)
        if tie:
            self.out.weight = self.emb.weight
        else:   # BUG tie_broken: meant to tie, but the output matrix is a detached copy
            self.out.weight = nn.Parameter(self.emb.weight.detach().clone())

    def forward(self, x):
        return self.out(self.norm(self.layer(self.emb(x) + self.pos)))


class MLM(Family):
    loss_word = "mlm_loss"
    V, L = 40, 16

    def data(self):
        V, L = self.V, self.L
        n = self.cfg.get("n_train", 3000) + 300
        nxt = torch.randint(0, V, (V, 3), generator=self.g)
        seq = torch.zeros(n, L, dtype=torch.long)
        seq[:, 0] = torch.randint(0, V, (n,), generator=self.g)
        seq[:, 1] = torch.randint(0, V, (n,), generator=self.g)
        for t in range(2, L):
            c = torch.randint(0, 3, (n,), generator=self.g)
            seq[:, t] = nxt[seq[:, t - 1], c]
        k = n - 300
        self.Xtr, self.Xva = seq[:k], seq[k:]
        self.Ytr, self.Yva = seq[:k], seq[k:]
        gv = gen(self.seed + 7)
        self.mva = torch.rand(300, L, generator=gv) < 0.15

    def build(self):
        return Encoder(self.V, 32, self.L, tie="tie_broken" not in self.bugs)

    def loss(self, b, train=True):
        x, y = b
        m = torch.rand(x.shape) < 0.15 if train else self.mva[:len(x)]
        m[:, 0] |= ~m.any(1)
        inp = torch.where(m, torch.full_like(x, self.V), x)
        logits = self.model(inp)
        sel = m
        if train and "mask_inverted" in self.bugs:   # BUG mask_inverted: loss on the visible tokens
            sel = ~m
        return F.cross_entropy(logits[sel], y[sel]), {}


# ---------------------------------------------------------------- gat: graph attention net
class GATLayer(nn.Module):
    def __init__(self, i, o, heads):
        super().__init__()
        self.W = nn.Linear(i, o * heads, bias=False)
        self.a_src = nn.Parameter(torch.randn(heads, o) * 0.1)
        self.a_dst = nn.Parameter(torch.randn(heads, o) * 0.1)
        self.h, self.o = heads, o

    def forward(self, x, adj):
        h = self.W(x).view(-1, self.h, self.o)
        e = (h * self.a_src).sum(-1)[:, None, :] + (h * self.a_dst).sum(-1)[None, :, :]
        e = F.leaky_relu(e, 0.2).masked_fill(~adj[:, :, None], float("-inf"))
        a = torch.softmax(e, 1)
        return torch.einsum("ijh,jho->iho", a, h)


class GATNet(nn.Module):
    def __init__(self, f, c, hid=8, heads=4, p=0.3):
        super().__init__()
        self.l1 = GATLayer(f, hid, heads)
        self.l2 = GATLayer(hid * heads, c, 1)
        self.p = p

    def forward(self, x, adj):
        x = F.dropout(x, self.p, self.training)
        h = F.elu(self.l1(x, adj).flatten(1))
        h = F.dropout(h, self.p, self.training)
        return self.l2(h, adj).squeeze(1)


class GAT(Family):
    loss_word = "nll"
    full_batch = True

    def data(self):
        n, C = 240, 4
        y = torch.arange(n) % C
        pin, pout = 0.08, 0.012
        pr = torch.where(y[:, None] == y[None, :], pin, pout)
        adj = torch.rand(n, n, generator=self.g) < pr
        adj = adj | adj.T | torch.eye(n, dtype=torch.bool)
        feat = torch.randn(n, 24, generator=self.g)
        cent = torch.randn(C, 24, generator=self.g) * 0.5
        feat = feat + cent[y]
        perm = torch.randperm(n, generator=self.g)
        ntr = self.cfg.get("n_train", 80)
        self.tr, self.va = perm[:ntr], perm[ntr:ntr + 100]
        self.X, self.y, self.adj, self.C = feat, y, adj, C
        self.ytrain = y.clone()
        self.Xtr, self.Xva, self.Ytr, self.Yva = self.tr, self.va, self.y[self.tr], self.y[self.va]

    def build(self):
        return GATNet(24, self.C, p=self.cfg.get("dropout", 0.3))

    def loss(self, b, train=True):
        idx, _ = b
        out = F.log_softmax(self.model(self.X, self.adj), 1)
        y = self.ytrain[idx] if train else self.y[idx]
        if train and "label_offby1" in self.bugs:   # BUG label_offby1: 1-based labels shifted twice
            y = (y + 1) % self.C
        return F.nll_loss(out[idx], y), {}

    def flip(self, frac=0.6):   # BUG label_flip_midrun: a relabelling job rewrites most train labels
        g = gen(self.seed + 5)
        sel = torch.rand(len(self.y), generator=g) < frac
        self.ytrain = torch.where(sel, torch.randint(0, self.C, (len(self.y),), generator=g), self.ytrain)


# ---------------------------------------------------------------- infonce: Siamese encoder
class InfoNCE(Family):
    loss_word = "info_nce"

    def data(self):
        n = self.cfg.get("n_train", 2048) + 256
        cent = torch.randn(64, 32, generator=self.g)
        c = torch.randint(0, 64, (n,), generator=self.g)
        x = cent[c] + 0.6 * torch.randn(n, 32, generator=self.g)
        k = n - 256
        self.Xtr, self.Xva = x[:k], x[k:]
        self.Ytr, self.Yva = torch.zeros(k), torch.zeros(256)
        gv = gen(self.seed + 3)
        self.va_noise = (torch.randn(256, 32, generator=gv), torch.randn(256, 32, generator=gv))

    def build(self):
        return blocks(32, 64, 16, depth=2)

    def val_loss(self, on_train=False):
        self.model.eval()
        X = self.Xtr[:256] if on_train else self.Xva
        with torch.no_grad():
            ls = [float(self.loss((X[i:i + 32], None), train=False)[0]) for i in range(0, 256, 32)]
        self.model.train()
        return sum(ls) / len(ls)

    def view(self, x, noise=None):
        noise = torch.randn_like(x) if noise is None else noise
        return x + 0.4 * noise

    def loss(self, b, train=True):
        x, _ = b
        if train:
            a, p = self.view(x), self.view(x)
        else:
            a, p = self.view(x, torch.randn(x.shape, generator=gen(int(x[0, 0] * 1e4) % 9973))), self.view(x, torch.randn(x.shape, generator=gen(int(x[0, 1] * 1e4) % 9973)))
        za = F.normalize(self.model(a), dim=1)
        zp = F.normalize(self.model(p), dim=1)
        tau = self.cfg.get("tau", 0.2)   # BUG infonce_temp_tiny: tau=0.005 set in the config
        logits = za @ zp.T / tau
        return F.cross_entropy(logits, torch.arange(len(x))), {}


# ---------------------------------------------------------------- odenet: Euler-step residual MLP
class ODENet(nn.Module):
    def __init__(self, i, h, K, dt, act, residual, shared, gain, bias_init=None):
        super().__init__()
        self.inp = nn.Linear(i, h)
        n = 1 if shared else K
        self.f = nn.ModuleList([nn.Linear(h, h) for _ in range(n)])
        for l in self.f:
            nn.init.orthogonal_(l.weight, gain=gain)
            if bias_init is not None:   # BUG dead_relu: biases initialised far negative
                nn.init.constant_(l.bias, bias_init)
        self.head = nn.Linear(h, 1)
        self.K, self.dt, self.act, self.res, self.shared = K, dt, act, residual, shared
        self.probe = None

    def forward(self, x):
        h = self.inp(x)
        for k in range(self.K):
            l = self.f[0 if self.shared else k]
            a = self.act(l(h))
            if k == self.K // 2:
                self.probe = a
            h = h + self.dt * a if self.res else a
        return self.head(h).squeeze(1)


class ODE(Family):
    loss_word = "mse"

    def data(self):
        n = self.cfg.get("n_train", 2048) + 256
        x = torch.randn(n, 8, generator=self.g)
        w = torch.randn(8, 2, generator=self.g)
        y = torch.sin(x @ w[:, 0]) + 0.5 * torch.cos(1.5 * (x @ w[:, 1])) + 0.1 * torch.randn(n, generator=self.g)
        k = n - 256
        self.Xtr, self.Ytr, self.Xva, self.Yva = x[:k], y[:k], x[k:], y[k:]

    def build(self):
        c = self.cfg
        act = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu, "linear": lambda v: v}[c.get("act", "tanh")]
        return ODENet(8, c.get("width", 32), c.get("K", 6), c.get("dt", 0.3), act, c.get("residual", True),
                      c.get("shared", True), c.get("gain", 1.0), c.get("bias_init"))

    def first_last(self):
        return self.model.inp.weight, self.model.head.weight

    def loss(self, b, train=True):
        x, y = b
        return F.mse_loss(self.model(x), y), {}


# ---------------------------------------------------------------- hyper: hypernetwork for sine tasks
class HyperNet(nn.Module):
    def __init__(self, ntask, h=16):
        super().__init__()
        self.z = nn.Embedding(ntask, 8)
        self.gen = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 3 * h + 1))
        self.h = h

    def forward(self, task, x):
        w = self.gen(self.z(task))
        h = self.h
        w1, b1, w2, b2 = w[:, :h], w[:, h:2 * h], w[:, 2 * h:3 * h], w[:, 3 * h]
        a = torch.tanh(x[:, None] * w1 + b1)
        return (a * w2).sum(1) + b2


class Hyper(Family):
    loss_word = "task_mse"

    def data(self):
        nt = 48
        A = 0.5 + 1.5 * torch.rand(nt, generator=self.g)
        ph = 3.14 * torch.rand(nt, generator=self.g)
        n = self.cfg.get("n_train", 3000) + 400
        t = torch.randint(0, nt, (n,), generator=self.g)
        x = (torch.rand(n, generator=self.g) - 0.5) * 6
        y = A[t] * torch.sin(x + ph[t]) + 0.05 * torch.randn(n, generator=self.g)
        X = torch.stack([t.float(), x], 1)
        k = n - 400
        self.Xtr, self.Ytr, self.Xva, self.Yva = X[:k], y[:k], X[k:], y[k:]
        self.nt = nt

    def build(self):
        return HyperNet(self.nt)

    def loss(self, b, train=True):
        X, y = b
        return F.mse_loss(self.model(X[:, 0].long(), X[:, 1]), y), {}


# ---------------------------------------------------------------- ens: bagged MLP ensemble (tabular)
class Ensemble(nn.Module):
    def __init__(self, i, c, m=4, h=32, bias_init=None):
        super().__init__()
        self.members = nn.ModuleList([blocks(i, h, c, depth=2) for _ in range(m)])
        if bias_init is not None:
            for mem in self.members:
                nn.init.constant_(mem[0].bias, bias_init)   # BUG dead_relu
                nn.init.constant_(mem[2].bias, bias_init)
        self.probe = None

    def forward(self, x):
        h = self.members[0][1](self.members[0][0](x))
        self.probe = h
        return torch.stack([m(x) for m in self.members]).mean(0)


class Ens(Family):
    loss_word = "ce"

    def data(self):
        n = self.cfg.get("n_train", 2400) + 400
        C = 5
        W = torch.randn(12, C, generator=self.g) * 1.5
        x = torch.randn(n, 12, generator=self.g)
        z = x @ W + 0.8 * torch.tanh(x[:, :C] * x[:, C:2 * C]) * 2
        y = (z + 0.8 * torch.randn(n, C, generator=self.g)).argmax(1)
        k = n - 400
        self.Xtr, self.Ytr, self.Xva, self.Yva = x[:k], y[:k], x[k:], y[k:]
        self.C = C

    def build(self):
        return Ensemble(12, self.C, bias_init=self.cfg.get("bias_init"))

    def loss(self, b, train=True):
        x, y = b
        if train and "label_offby1" in self.bugs:   # BUG label_offby1: labels shifted by one class
            y = (y + 1) % self.C
        return F.cross_entropy(self.model(x), y), {}


# ---------------------------------------------------------------- a2c: actor-critic on a corridor
class ACNet(nn.Module):
    def __init__(self, s=10, h=32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(s, h), nn.Tanh())
        self.pi = nn.Linear(h, 2)
        self.v = nn.Linear(h, 1)

    def forward(self, s):
        h = self.body(s)
        return self.pi(h), self.v(h).squeeze(-1)


class A2C(Family):
    loss_word = "loss"
    rl = True
    floor = None  # RL loss has no lower bound

    def data(self):
        self.S, self.E, self.H = 10, 32, 16
        self.pos = torch.zeros(self.E, dtype=torch.long)
        self.ep_ret = torch.zeros(self.E)
        self.finished = []
        self.reward_mult = 1.0
        self.genv = gen(self.seed + 11)
        self.Xtr = self.Xva = None

    def build(self):
        return ACNet(self.S)

    def obs(self):
        o = F.one_hot(self.pos, self.S).float()
        return o + 0.1 * torch.randn(o.shape, generator=self.genv)

    def rollout(self):
        S, E, H = self.S, self.E, self.H
        obs, acts, rews, dones = [], [], [], []
        with torch.no_grad():
            for _ in range(H):
                o = self.obs()
                logits, _ = self.model(o)
                a = torch.multinomial(torch.softmax(logits, -1), 1, generator=self.genv).squeeze(1)
                self.pos = (self.pos + 2 * a - 1).clamp(0, S - 1)
                done = self.pos == S - 1
                r = torch.where(done, torch.tensor(1.0), torch.tensor(-0.02))
                self.ep_ret += r
                for e in torch.nonzero(done).flatten().tolist():
                    self.finished.append(float(self.ep_ret[e]))
                self.ep_ret[done] = 0
                self.pos[done] = 0
                obs.append(o); acts.append(a); rews.append(r * self.reward_mult); dones.append(done.float())
        with torch.no_grad():
            _, vlast = self.model(self.obs())
        ret, R = [], vlast
        for t in reversed(range(H)):
            R = rews[t] + 0.95 * R * (1 - dones[t])
            ret.append(R)
        ret.reverse()
        return torch.stack(obs), torch.stack(acts), torch.stack(ret)

    def loss(self, b, train=True):
        o, a, ret = b
        logits, v = self.model(o)
        logp = torch.log_softmax(logits, -1)
        lp = logp.gather(-1, a[..., None]).squeeze(-1)
        adv = (ret - v).detach()
        pl = -(lp * adv).mean()
        vl = F.mse_loss(v, ret)
        ent = -(logp.exp() * logp).sum(-1).mean()
        tot = pl + 0.5 * vl - 0.01 * ent
        fin = self.finished[-64:]
        ep = sum(fin) / len(fin) if fin else float("nan")
        self.finished = self.finished[-64:]
        return tot, {"policy_loss": float(pl), "value_loss": float(vl), "entropy": float(ent), "episodic_return": ep}


# ---------------------------------------------------------------- gan: 1-D mixture GAN
class GAN(Family):
    loss_word = "loss_G"
    custom = True
    floor = 0.0

    def data(self):
        self.Xtr = self.Xva = None

    def build(self):
        self.G = blocks(4, 32, 1, depth=2, act=nn.LeakyReLU)
        w = self.cfg.get('d_width', 32)
        self.D = blocks(1, w, 1, depth=2, act=nn.LeakyReLU)
        return nn.ModuleDict({"G": self.G, "D": self.D})

    def real(self, n):
        c = torch.randint(0, 3, (n,), generator=self.g)
        return (torch.tensor([-2.0, 0.0, 2.5])[c] + 0.3 * torch.randn(n, generator=self.g))[:, None]

    def first_last(self):
        return self.G[0].weight, self.G[-1].weight


FAMILIES = {"segnet": SegNet, "ddpm": DDPM, "mlm": MLM, "gat": GAT, "infonce": InfoNCE, "ode": ODE,
            "hyper": Hyper, "ens": Ens, "a2c": A2C, "gan": GAN}
