"""indep7 model families and their seeded synthetic data. Bugs that live in a model are marked BUG."""
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def zero_all(model):
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.zeros_(m.weight)  # BUG zero_init: an "init all weights to zero" helper applied to the whole net
            if m.bias is not None:
                nn.init.zeros_(m.bias)


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

    def batch_index(self, i):
        n = self.Ytr.shape[0] if not isinstance(self.Ytr, tuple) else self.Ytr[0].shape[0]
        nb = max(1, n // self.bs)
        ep, k = divmod(i, nb)
        perm = torch.randperm(n, generator=gen(self.seed * 1000 + ep))
        return perm[k * self.bs:(k + 1) * self.bs]

    def batches_per_epoch(self):
        n = self.Ytr.shape[0] if not isinstance(self.Ytr, tuple) else self.Ytr[0].shape[0]
        return max(1, n // self.bs)

    def train_batch(self, i):
        idx = self.batch_index(i)
        return self.Xtr[idx].clone(), self.Ytr[idx].clone()

    def val_batches(self):
        yield self.Xva, self.Yva


# ---------------------------------------------------------------- mixer: MLP-Mixer image classifier
class MixerBlock(nn.Module):
    def __init__(self, ntok, d):
        super().__init__()
        self.n1 = nn.LayerNorm(d)
        self.tok = nn.Sequential(nn.Linear(ntok, 2 * ntok), nn.GELU(), nn.Linear(2 * ntok, ntok))
        self.n2 = nn.LayerNorm(d)
        self.ch = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        x = x + self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.n2(x))


class MixerNet(nn.Module):
    def __init__(self, d=32, depth=2, ncls=4, detach_stem=False):
        super().__init__()
        self.stem = nn.Conv2d(1, d, 2, stride=2)
        self.blocks = nn.Sequential(*[MixerBlock(16, d) for _ in range(depth)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, ncls)
        self.detach_stem = detach_stem

    def forward(self, x):
        h = self.stem(x).flatten(2).transpose(1, 2)
        h = self.blocks(h)
        h = self.norm(h).mean(1)
        if self.detach_stem:
            h = h.detach()  # BUG detach_encoder: features detached before the head, the trunk never trains
        return self.head(h)


def ce_handwritten_half(logits, y):
    # BUG half_overflow: a "memory-saving" softmax in float16 without max subtraction; exp overflows past ~11
    z = logits.half()
    p = torch.exp(z)
    p = p / p.sum(1, keepdim=True)
    return -torch.log(p.float().gather(1, y[:, None]).squeeze(1)).mean()


class Mixer(Family):
    loss_word = "ce"

    def make(self, n, g):
        y = torch.randint(0, 4, (n,), generator=g)
        xs = torch.arange(8).float()
        X = torch.zeros(n, 1, 8, 8)
        ph = torch.rand(n, generator=g) * 6.28
        for c in range(4):
            m = y == c
            k = int(m.sum())
            if c == 0:
                img = torch.sin(xs[None, :, None] * 1.5 + ph[m][:, None, None]).expand(k, 8, 8)
            elif c == 1:
                img = torch.sin(xs[None, None, :] * 1.5 + ph[m][:, None, None]).expand(k, 8, 8)
            elif c == 2:
                img = torch.sin(xs[None, :, None] * 1.5 + ph[m][:, None, None]) * torch.sin(xs[None, None, :] * 1.5)
            else:
                cx = torch.rand(k, generator=g) * 5 + 1.5
                img = torch.exp(-((xs[None, :, None] - cx[:, None, None]) ** 2 + (xs[None, None, :] - 3.5) ** 2) / 4) * 2 - 0.5
            X[m, 0] = img
        X = X + self.cfg.get("noise", 0.9) * torch.randn(X.shape, generator=g)
        return X, y

    def model(self):
        m = MixerNet(detach_stem=self.cfg.get("bug") == "detach_encoder")
        if self.cfg.get("bug") == "zero_init":
            zero_all(m)
        return m

    def loss(self, model, b, train=True):
        x, y = b
        out = model(x)
        self.last_acc = float((out.argmax(1) == y).float().mean())
        out = out * self.cfg.get("logit_scale", 1.0)
        if self.cfg.get("bug") == "half_overflow":
            return ce_handwritten_half(out, y)
        return F.cross_entropy(out, y, label_smoothing=self.cfg.get("smooth", 0.0))

    def layers(self, model):
        return model.stem.weight, model.head.weight


# ---------------------------------------------------------------- ftt: FT-Transformer for tabular data
class FTT(nn.Module):
    def __init__(self, nfeat=8, d=24, ncls=3):
        super().__init__()
        self.w = nn.Parameter(torch.randn(nfeat, d) * 0.3)
        self.b = nn.Parameter(torch.zeros(nfeat, d))
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.3)
        self.enc = nn.TransformerEncoderLayer(d, 4, 48, dropout=0.0, batch_first=True)
        self.head = nn.Sequential(nn.LayerNorm(d), nn.ReLU(), nn.Linear(d, ncls))

    def forward(self, x):
        t = x[:, :, None] * self.w[None] + self.b[None]
        t = torch.cat([self.cls.expand(x.shape[0], 1, -1), t], 1)
        return self.head(self.enc(t)[:, 0])


class Ftt(Family):
    loss_word = "xent"

    def make(self, n, g):
        X = torch.randn(n, 8, generator=g)
        s1 = X[:, 0] * X[:, 1] + torch.sin(2 * X[:, 2])
        s2 = X[:, 3] ** 2 - X[:, 4] + 0.5 * X[:, 5]
        y = torch.where(s1 > 0.5, 0, torch.where(s2 > 0.7, 1, 2))
        flip = torch.rand(n, generator=g) < 0.08
        y = torch.where(flip, torch.randint(0, 3, (n,), generator=g), y)
        return X, y

    def model(self):
        return FTT()

    def loss(self, model, b, train=True):
        x, y = b
        out = model(x)
        self.last_acc = float((out.argmax(1) == y).float().mean())
        out = out * self.cfg.get("logit_scale", 1.0)
        if self.cfg.get("bug") == "half_overflow":
            return ce_handwritten_half(out, y)
        return F.cross_entropy(out, y, label_smoothing=self.cfg.get("smooth", 0.0))

    def layers(self, model):
        return model.w, model.head[2].weight


# ---------------------------------------------------------------- byol: BYOL with an EMA target network
def mlp(a, b, c, act=nn.ReLU):
    return nn.Sequential(nn.Linear(a, b), act(), nn.Linear(b, c))


class ByolNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = mlp(16, 64, 32)
        self.proj = mlp(32, 32, 16)
        self.pred = mlp(16, 32, 16)
        self.t_enc = copy.deepcopy(self.enc)
        self.t_proj = copy.deepcopy(self.proj)
        for p in list(self.t_enc.parameters()) + list(self.t_proj.parameters()):
            p.requires_grad_(False)

    def online(self):
        return list(self.enc.parameters()) + list(self.proj.parameters()) + list(self.pred.parameters())

    @torch.no_grad()
    def ema(self, tau):
        for o, t in zip(list(self.enc.parameters()) + list(self.proj.parameters()),
                        list(self.t_enc.parameters()) + list(self.t_proj.parameters())):
            t.mul_(tau).add_(o.detach(), alpha=1 - tau)


class Byol(Family):
    loss_word = "byol_loss"

    def make(self, n, g):
        centers = torch.randn(10, 16, generator=gen(self.seed + 7)) * 2
        c = torch.randint(0, 10, (n,), generator=g)
        return centers[c] + 0.5 * torch.randn(n, 16, generator=g), c

    def views(self, x, g):
        v1 = x * (torch.rand(x.shape, generator=g) > 0.2) + 0.4 * torch.randn(x.shape, generator=g)
        v2 = x * (torch.rand(x.shape, generator=g) > 0.2) + 0.4 * torch.randn(x.shape, generator=g)
        return v1, v2

    def train_batch(self, i):
        idx = self.batch_index(i)
        x = self.Xtr[idx]
        return self.views(x, gen(self.seed * 7919 + i))

    def val_batches(self):
        yield self.views(self.Xva, gen(self.seed + 99))

    def model(self):
        return ByolNet()

    def loss(self, model, b, train=True):
        v1, v2 = b

        def one(a, c):
            p = F.normalize(model.pred(model.proj(model.enc(a))), dim=1)
            with torch.no_grad():
                z = F.normalize(model.t_proj(model.t_enc(c)), dim=1)
            return (2 - 2 * (p * z).sum(1)).mean()
        return one(v1, v2) + one(v2, v1)

    def after_step(self, model, step):
        # BUG ema_frozen: momentum written as 1.0 (the "final" value of the cosine tau schedule) from the start
        model.ema(1.0 if self.cfg.get("bug") == "ema_frozen" else self.cfg.get("tau", 0.98))

    def layers(self, model):
        return model.enc[0].weight, model.pred[2].weight


# ---------------------------------------------------------------- siren: Fourier-feature coordinate MLP fitting an image
class FourierMLP(nn.Module):
    def __init__(self, scale, g):
        super().__init__()
        self.register_buffer("B", torch.randn(2, 48, generator=g) * scale)
        self.net = nn.Sequential(nn.Linear(96, 96), nn.ReLU(), nn.Linear(96, 96), nn.ReLU(), nn.Linear(96, 1))

    def forward(self, x):
        p = 2 * math.pi * x @ self.B
        return self.net(torch.cat([torch.sin(p), torch.cos(p)], 1)).squeeze(1)


class Siren(Family):
    loss_word = "recon_mse"

    def __init__(self, cfg, seed):
        self.cfg, self.seed = cfg, seed
        g = gen(seed)
        n = 32
        u = torch.linspace(0, 1, n)
        U, V = torch.meshgrid(u, u, indexing="ij")
        img = torch.sin(6 * U + 2 * V) + 0.6 * torch.cos(9 * V - 3 * U * V) + (((U - .5) ** 2 + (V - .4) ** 2) < .06).float()
        img = img + 0.1 * torch.randn(img.shape, generator=g)
        C = torch.stack([U.flatten(), V.flatten()], 1)
        Y = img.flatten()
        perm = torch.randperm(n * n, generator=g)
        ntr = cfg.get("n_train", 600)
        self.Xtr, self.Ytr = C[perm[:ntr]], Y[perm[:ntr]]
        self.Xva, self.Yva = C[perm[ntr:]], Y[perm[ntr:]]
        self.bs = cfg.get("bs", 64)

    def model(self):
        # BUG ff_scale_huge: Fourier feature scale (std of B) set 6-10x the intended 1.0
        return FourierMLP(self.cfg.get("ff_scale", 1.0), gen(self.seed + 5))

    def val_batches(self):
        x = self.Xva
        if self.cfg.get("bug") == "aug_on_val":
            # BUG aug_on_val: the training-time coordinate jitter is also applied to validation
            x = x + 0.08 * torch.randn(x.shape, generator=gen(self.seed + 3))
        yield x, self.Yva

    def train_batch(self, i):
        idx = self.batch_index(i)
        x = self.Xtr[idx] + 0.002 * torch.randn(len(idx), 2, generator=gen(i))
        return x, self.Ytr[idx].clone()

    def loss(self, model, b, train=True):
        return F.mse_loss(model(b[0]), b[1])

    def layers(self, model):
        return model.net[0].weight, model.net[4].weight


# ---------------------------------------------------------------- pinn: physics-informed net for u'' = f on [0,1]
class Pinn(Family):
    loss_word = "pde_loss"

    def __init__(self, cfg, seed):
        self.cfg, self.seed = cfg, seed
        self.bs = cfg.get("bs", 64)
        self.Xva = torch.linspace(0, 1, 101)[:, None]
        self.Yva = torch.sin(2 * math.pi * self.Xva) + 0.5 * self.Xva

    def batches_per_epoch(self):
        return 20

    def train_batch(self, i):
        return torch.rand(self.bs, 1, generator=gen(self.seed * 31 + i)), None

    def model(self):
        depth = self.cfg.get("depth", 3)
        act = nn.Sigmoid if self.cfg.get("act") == "sigmoid" else nn.Tanh
        layers, w = [], 32
        d_in = 1
        for _ in range(depth):
            layers += [nn.Linear(d_in, w), act()]
            d_in = w
        layers.append(nn.Linear(w, 1))
        net = nn.Sequential(*layers)
        gain = self.cfg.get("init_gain")
        if gain:
            torch.manual_seed(self.seed)
            for m in net:
                if isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, std=gain / math.sqrt(m.in_features))
        return net

    def residual(self, model, x):
        x = x.clone().requires_grad_(True)
        u = model(x)
        cg = self.cfg.get("bug") != "pinn_no_create_graph"
        # BUG pinn_no_create_graph: derivatives taken with create_graph=False, so the PDE residual carries no gradient
        du = torch.autograd.grad(u.sum(), x, create_graph=True)[0]
        d2u = torch.autograd.grad(du.sum(), x, create_graph=cg)[0]
        f = -(2 * math.pi) ** 2 * torch.sin(2 * math.pi * x)
        return (d2u - f.detach()) / (2 * math.pi) ** 2

    def loss(self, model, b, train=True):
        x = b[0]
        r = self.residual(model, x)
        xb = torch.tensor([[0.0], [1.0]])
        ub = torch.tensor([[0.0], [0.5]])
        return (r ** 2).mean() + 10 * ((model(xb) - ub) ** 2).mean()

    def val_batches(self):
        yield self.Xva, self.Yva

    def val_loss(self, model):
        with torch.no_grad():
            return float(((model(self.Xva) - self.Yva) ** 2).mean())

    def layers(self, model):
        lin = [m for m in model if isinstance(m, nn.Linear)]
        return lin[0].weight, lin[-1].weight

    def probe_modules(self, model):
        return [m for m in model if isinstance(m, (nn.Tanh, nn.Sigmoid))][-1:]


# ---------------------------------------------------------------- settf: Set-Transformer-lite with attention pooling
class SetNet(nn.Module):
    def __init__(self, d=32, bug=None):
        super().__init__()
        self.emb = nn.Linear(2, d)
        self.att = nn.MultiheadAttention(d, 4, batch_first=True)
        self.seed = nn.Parameter(torch.randn(1, 1, d) * 0.3)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.out = mlp(d, 32, 1)
        self.bug = bug

    def forward(self, x, mask):
        h = F.relu(self.emb(x))
        kpm = ~mask
        if self.bug == "pad_mask_inverted":
            kpm = mask  # BUG pad_mask_inverted: key_padding_mask given the "valid" mask, so attention sees padding only
        h = h + self.att(h, h, h, key_padding_mask=kpm)[0]
        s = (self.q(self.seed) * self.k(h)).sum(-1) / math.sqrt(h.shape[-1])
        s = s.masked_fill(kpm, -1e9)
        w = torch.softmax(s, dim=0 if self.bug == "softmax_wrong_dim" else 1)  # BUG softmax_wrong_dim: dim=0 pools over the batch
        return self.out((w[..., None] * h).sum(1)).squeeze(1)


class Settf(Family):
    loss_word = "set_mse"

    def make(self, n, g):
        L = 12
        lens = torch.randint(3, L, (n,), generator=g)
        X = torch.randn(n, L, 2, generator=g) * 1.2
        M = torch.arange(L)[None] < lens[:, None]
        X = X * M[..., None]
        r = X.norm(dim=-1)
        y = ((r < 1.0) & M).float().sum(1) * 0.5 + (r * M).max(1).values
        return (X, M), y

    def train_batch(self, i):
        n = self.Ytr.shape[0]
        nb = n // self.bs
        ep, k = divmod(i, nb)
        idx = torch.randperm(n, generator=gen(self.seed * 1000 + ep))[k * self.bs:(k + 1) * self.bs]
        return (self.Xtr[0][idx], self.Xtr[1][idx]), self.Ytr[idx]

    def batches_per_epoch(self):
        return self.Ytr.shape[0] // self.bs

    def model(self):
        return SetNet(bug=self.cfg.get("bug"))

    def loss(self, model, b, train=True):
        (x, m), y = b
        return F.mse_loss(model(x, m), y)

    def layers(self, model):
        return model.emb.weight, model.out[2].weight


# ---------------------------------------------------------------- dcn: Deep & Cross network for click-through prediction
class DCN(nn.Module):
    def __init__(self, bn=False, bias_init=None, zero=False):
        super().__init__()
        self.emb = nn.ModuleList([nn.Embedding(20, 6) for _ in range(6)])
        d0 = 36 + 4
        self.cross_w = nn.ParameterList([nn.Parameter(torch.randn(d0) * 0.05) for _ in range(2)])
        self.cross_b = nn.ParameterList([nn.Parameter(torch.zeros(d0)) for _ in range(2)])
        layers = [nn.Linear(d0, 64)]
        if bn:
            layers.append(nn.BatchNorm1d(64))
        layers += [nn.ReLU(), nn.Linear(64, 32), nn.ReLU()]
        self.deep = nn.Sequential(*layers)
        self.final = nn.Linear(d0 + 32, 1)
        if bias_init is not None:
            for m in self.deep:
                if isinstance(m, nn.Linear):
                    nn.init.constant_(m.bias, bias_init)  # BUG dead_relu: hidden biases initialised far negative
        if zero:
            for m in list(self.deep) + [self.final]:
                if isinstance(m, nn.Linear):
                    nn.init.zeros_(m.weight)  # BUG zero_init: "init all weights to zero" helper applied to the whole net
                    nn.init.zeros_(m.bias)
            for e in self.emb:
                nn.init.zeros_(e.weight)

    def forward(self, xc, xn):
        x0 = torch.cat([e(xc[:, i]) for i, e in enumerate(self.emb)] + [xn], 1)
        x = x0
        for w, b in zip(self.cross_w, self.cross_b):
            x = x0 * (x @ w)[:, None] + b + x
        return self.final(torch.cat([x, self.deep(x0)], 1)).squeeze(1)


class Dcn(Family):
    loss_word = "logloss"
    n_train = 12000

    def make(self, n, g):
        gw = gen(self.seed + 11)
        tab = torch.randn(6, 20, generator=gw) * 0.8
        xc = torch.randint(0, 20, (n, 6), generator=g)
        xn = torch.randn(n, 4, generator=g)
        logit = sum(tab[i][xc[:, i]] for i in range(6)) * 0.7 + xn[:, 0] * xn[:, 1] + 0.5 * xn[:, 2] - 0.5
        logit = logit + tab[0][xc[:, 1]] * tab[1][xc[:, 2]]
        y = (torch.rand(n, generator=g) < torch.sigmoid(logit)).float()
        return (xc, xn), y

    train_batch = Settf.train_batch
    batches_per_epoch = Settf.batches_per_epoch

    def model(self):
        return DCN(bn=self.cfg.get("bn", False), bias_init=self.cfg.get("bias_init"), zero=self.cfg.get("bug") == "zero_init")

    def loss(self, model, b, train=True):
        (xc, xn), y = b
        out = model(xc, xn)
        loss = F.binary_cross_entropy_with_logits(out, y)
        return loss

    def layers(self, model):
        return model.deep[0].weight, model.final.weight

    def probe_modules(self, model):
        return [m for m in model.deep if isinstance(m, nn.ReLU)][:1]


# ---------------------------------------------------------------- ranknet: ListNet learning to rank
class Ranknet(Family):
    loss_word = "listnet_loss"

    def make(self, n, g):
        w = torch.randn(12, generator=gen(self.seed + 13))
        X = torch.randn(n, 10, 12, generator=g)
        s = X @ w + 0.8 * torch.sin(2 * X[..., 0]) * X[..., 1] + 0.5 * torch.randn(n, 10, generator=g)
        rel = torch.bucketize(s, torch.tensor([-2.0, -0.5, 0.8, 2.2])).float()
        return X, rel

    def model(self):
        m = mlp(12, 48, 1)
        if self.cfg.get("bug") == "zero_init":
            zero_all(m)
        return m

    def loss(self, model, b, train=True):
        x, rel = b
        sc = model(x).squeeze(-1)
        dim = 0 if self.cfg.get("bug") == "softmax_wrong_dim" else 1  # BUG softmax_wrong_dim: softmax over queries, not documents
        return -(torch.softmax(rel, dim=dim) * torch.log_softmax(sc, dim=dim)).sum(dim).mean()

    def layers(self, model):
        return model[0].weight, model[2].weight


# ---------------------------------------------------------------- perceiver: latent cross-attention sequence classifier
class PerceiverNet(nn.Module):
    def __init__(self, d=32, nlat=8, detach=False):
        super().__init__()
        self.tok = nn.Embedding(16, d)
        self.pos = nn.Parameter(torch.randn(1, 32, d) * 0.1)
        self.lat = nn.Parameter(torch.randn(1, nlat, d) * 0.3)
        self.cross = nn.MultiheadAttention(d, 4, batch_first=True)
        self.self_att = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(d, 4)
        self.detach = detach

    def forward(self, x):
        e = self.tok(x) + self.pos
        z = self.lat.expand(x.shape[0], -1, -1)
        z = z + self.cross(z, e, e)[0]
        if self.detach:
            z = z.detach()  # BUG detach_encoder: cross-attention output detached (meant for a logging copy)
        return self.head(self.self_att(z).mean(1))


class Perceiver(Family):
    loss_word = "nll"

    def make(self, n, g):
        y = torch.randint(0, 4, (n,), generator=g)
        X = torch.randint(0, 16, (n, 32), generator=g)
        motifs = torch.tensor([[1, 2, 3], [3, 2, 1], [5, 5, 7], [7, 9, 5]])
        pos = torch.randint(0, 29, (n,), generator=g)
        for j in range(3):
            X[torch.arange(n), pos + j] = motifs[y, j]
        return X, y

    def model(self):
        return PerceiverNet(detach=self.cfg.get("bug") == "detach_encoder")

    def loss(self, model, b, train=True):
        x, y = b
        out = model(x)
        self.last_acc = float((out.argmax(1) == y).float().mean())
        return F.cross_entropy(out, y, label_smoothing=self.cfg.get("smooth", 0.0))

    def layers(self, model):
        return model.tok.weight, model.head.weight


FAMILIES = {"mixer": Mixer, "ftt": Ftt, "byol": Byol, "siren": Siren, "pinn": Pinn, "settf": Settf,
            "dcn": Dcn, "ranknet": Ranknet, "perceiver": Perceiver}
