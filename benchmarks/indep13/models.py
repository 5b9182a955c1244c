"""indep13 model families and their seeded synthetic data. Bugs that live in a model, its loss or its data are marked BUG."""
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def bad_step(cfg):
    return cfg.get("_step", -1) in cfg.get("bad_steps", ())


def idx(t, sl):
    return tuple(a[sl] for a in t) if isinstance(t, tuple) else t[sl]


class Family:
    """A family gives data (train_batch(i), val batches), a model, and a loss(model, batch)."""
    loss_word = "loss"
    n_train = 2048
    n_val = 256

    def __init__(self, cfg, seed):
        self.cfg = cfg
        self.seed = seed
        g = gen(seed)
        self.Xtr, self.Ytr = self.make(self.cfg.get("n_train", self.n_train), g)
        self.key_tr = getattr(self, "_key", None)
        self.Xva, self.Yva = self.make(self.n_val, g)
        if cfg.get("bug") == "kfold_inverted":
            # BUG kfold_inverted: `train_idx, val_idx = folds[k]` unpacked from KFold.split() in the wrong order
            # (`val_idx, train_idx = ...`): the model trains on one fold of five (the held-out fifth)
            k = self.ntr() // 5
            self.Xtr, self.Ytr = idx(self.Xtr, slice(0, k)), self.Ytr[:k]
        self.bs = cfg.get("bs", 32)
        self.last_acc = None
        self.sat_now = None

    def ntr(self):
        return self.Ytr.shape[0]

    def batch_index(self, i):
        n = self.ntr()
        nb = max(1, n // self.bs)
        ep, k = divmod(i, nb)
        if self.cfg.get("bug") == "epoch_sorted_sampler":
            # BUG epoch_sorted_sampler: a "group by length" sampler whose mega-batch size defaults to the whole dataset, so every
            # epoch is served sorted by the grouping key (here the per-row noise level / scene complexity)
            o = torch.argsort(self.key_tr)
            return o[k * self.bs:(k + 1) * self.bs]
        perm = torch.randperm(n, generator=gen(self.seed * 1000 + ep))
        return perm[k * self.bs:(k + 1) * self.bs]

    def batches_per_epoch(self):
        return max(1, self.ntr() // self.bs)

    def train_batch(self, i):
        ix = self.batch_index(i)
        return idx(self.Xtr, ix), self.Ytr[ix]

    def val_batches(self):
        n = self.Yva.shape[0]
        return [(idx(self.Xva, slice(a, a + 128)), self.Yva[a:a + 128]) for a in range(0, n, 128)]

    def after_step(self, model, s):
        pass


# ---------------------------------------------------------------------------------------------------- Swin-lite
class WinAttn(nn.Module):
    def __init__(self, d, heads=2, ls=1e-4):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.n1 = nn.LayerNorm(d)
        self.n2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        # LayerScale (CaiT/Swin-v2 style); BUG layerscale_init_typo: `layer_scale_init: 1e4` in the config for 1e-4
        self.g1 = nn.Parameter(torch.full((d,), ls))
        self.g2 = nn.Parameter(torch.full((d,), ls))

    def attn(self, x):  # x: Bw, N, d
        B, N, d = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.h)
        o = (a.softmax(-1) @ v).transpose(1, 2).reshape(B, N, d)
        return self.proj(o)

    def forward(self, x, shift):  # x: B, H, W, d
        B, H, W, d = x.shape
        h = self.n1(x)
        if shift:
            h = torch.roll(h, (-1, -1), (1, 2))
        w = h.reshape(B, H // 2, 2, W // 2, 2, d).permute(0, 1, 3, 2, 4, 5).reshape(-1, 4, d)
        w = self.attn(w).reshape(B, H // 2, W // 2, 2, 2, d).permute(0, 1, 3, 2, 4, 5).reshape(B, H, W, d)
        if shift:
            w = torch.roll(w, (1, 1), (1, 2))
        x = x + self.g1 * w
        return x + self.g2 * self.mlp(self.n2(x))


class SwinLite(nn.Module):
    def __init__(self, d=32, ls=1e-4, detach_stem=False):
        super().__init__()
        self.embed = nn.Conv2d(1, d, 2, 2)
        self.b1 = WinAttn(d, ls=ls)
        self.b2 = WinAttn(d, ls=ls)
        self.merge = nn.Linear(4 * d, 2 * d)
        self.b3 = WinAttn(2 * d, ls=ls)
        self.norm = nn.LayerNorm(2 * d)
        self.head = nn.Linear(2 * d, 4)
        self.detach_stem = detach_stem

    def forward(self, x):
        h = self.embed(x).permute(0, 2, 3, 1)  # B,4,4,d ... for 16x16 input: B,8,8,d
        if self.detach_stem:
            # BUG stray_detach: `h = h.detach()` left after the patch embedding from a frozen-stem ablation
            h = h.detach()
        h = self.b2(self.b1(h, False), True)
        B, H, W, d = h.shape
        h = h.reshape(B, H // 2, 2, W // 2, 2, d).permute(0, 1, 3, 2, 4, 5).reshape(B, H // 2, W // 2, 4 * d)
        h = self.b3(self.merge(h), False)
        return self.head(self.norm(h.mean((1, 2))))


class Swin(Family):
    loss_word = "ce"

    def make(self, n, g, S=8):
        y = torch.randint(0, 4, (n,), generator=g)
        r = torch.arange(S).float()
        ph = torch.rand(n, generator=g) * 6.28
        fr = 0.8 + 0.6 * torch.rand(n, generator=g)
        X = torch.zeros(n, 1, S, S)
        yy, xx = torch.meshgrid(r, r, indexing="ij")
        for c in range(4):
            m = y == c
            arg = [yy, xx, yy + xx, yy - xx][c]
            X[m, 0] = torch.sin(fr[m, None, None] * arg[None] + ph[m, None, None])
        X = X + 0.9 * torch.randn(n, 1, S, S, generator=g)
        flip = torch.rand(n, generator=g) < 0.1
        y = torch.where(flip, torch.randint(0, 4, (n,), generator=g), y)
        return X * 0.5, y

    def model(self):
        return SwinLite(ls=1e4 if self.cfg.get("bug") == "layerscale_init_typo" else 1e-4,
                        detach_stem=self.cfg.get("bug") == "stray_detach")

    def train_batch(self, i):
        x, y = super().train_batch(i)
        if self.cfg.get("bug") == "unnormalized_shard" and bad_step(self.cfg):
            # BUG unnormalized_shard: one re-exported shard stores raw 0-255 intensities; the loader's `/ 255.` lives in the old
            # export script, not in the dataset class
            x = x * 255.0
        return x, y

    def loss(self, model, b, train=True):
        x, y = b
        out = model(x)
        self.last_acc = float((out.argmax(-1) == y).float().mean())
        return F.cross_entropy(out, y)

    def layers(self, model):
        return model.embed.weight, model.head.weight


# ---------------------------------------------------------------------------------------------------- PointTransformer-lite
class PTLayer(nn.Module):
    def __init__(self, d, k=4, ls=1e-4, unsafe_norm=False, where_sqrt=False, bias0=0.0):
        super().__init__()
        self.k, self.unsafe_norm, self.where_sqrt = k, unsafe_norm, where_sqrt
        self.q, self.kk, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.pos = nn.Sequential(nn.Linear(4, d), nn.ReLU(), nn.Linear(d, d))
        self.w = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d))
        self.out = nn.Linear(d, d)
        self.g = nn.Parameter(torch.full((d,), ls))

    def forward(self, h, p):  # h: B,N,d  p: B,N,2
        B, N, d = h.shape
        d2 = ((p[:, :, None] - p[:, None]) ** 2).sum(-1) + torch.eye(N) * 1e6
        nb = d2.topk(self.k, largest=False).indices  # B,N,k
        pj = torch.gather(p[:, None].expand(B, N, N, 2), 2, nb[..., None].expand(B, N, self.k, 2))
        rel = p[:, :, None] - pj
        dist = (d2.min(-1).values[..., None, None] + 1e-12).sqrt().expand(B, N, self.k, 1)
        hj0 = torch.gather(h[:, None].expand(B, N, N, d), 2, nb[..., None].expand(B, N, self.k, d))
        fd2 = ((h[:, :, None] - hj0) ** 2).sum(-1, keepdim=True)  # feature distance to each neighbour
        if self.where_sqrt:
            # BUG where_grad_nan: feature distance as torch.where(fd2 > 0, fd2.sqrt(), 0): the forward is finite when a point
            # is duplicated (its neighbour has identical features), but sqrt's backward at 0 is inf and where() turns inf * 0
            # into NaN gradients
            fdist = torch.where(fd2 > 0, fd2.sqrt(), torch.zeros_like(fd2))
        else:
            fdist = (fd2 + 1e-12).sqrt()
        if self.unsafe_norm:
            # BUG zero_norm_normalize: unit directions written as rel / rel.norm(dim=-1, keepdim=True) (no eps); a duplicated
            # point gives 0 / 0
            u = rel / rel.norm(dim=-1, keepdim=True)
        else:
            u = F.normalize(rel, dim=-1)
        pe = self.pos(torch.cat([u, dist, 0.1 * fdist], -1))
        hj = torch.gather(h[:, None].expand(B, N, N, d), 2, nb[..., None].expand(B, N, self.k, d))
        a = self.w(self.q(h)[:, :, None] - self.kk(hj) + pe).softmax(2)
        o = (a * (self.v(hj) + pe)).sum(2)
        return h + self.g * self.out(o)


class PTNet(nn.Module):
    def __init__(self, d=32, ls=1e-4, unsafe_norm=False, where_sqrt=False, bias0=0.0):
        super().__init__()
        self.inp = nn.Linear(2, d)
        self.act = nn.ReLU()
        self.l1 = PTLayer(d, ls=ls, unsafe_norm=unsafe_norm, where_sqrt=where_sqrt)
        self.l2 = PTLayer(d, ls=ls, unsafe_norm=unsafe_norm, where_sqrt=where_sqrt)
        self.mlp = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.head = nn.Linear(64, 4)
        if bias0:
            # BUG gate_bias_init_all: `init.constant_(m.bias, -4.0)` meant for the attention-gate logits, applied through
            # model.apply() to every nn.Linear, so the ReLU layers start (and stay) dead
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.constant_(m.bias, bias0)

    def forward(self, p):
        h = self.act(self.inp(p))
        h = self.l2(self.l1(h, p), p)
        return self.head(self.mlp(h).max(1).values)


class Ptx(Family):
    loss_word = "cls_loss"

    def make(self, n, g, N=16):
        y = torch.randint(0, 4, (n,), generator=g)
        t = torch.rand(n, N, generator=g) * 6.283
        u = torch.rand(n, N, generator=g) * 2 - 1
        P = torch.zeros(n, N, 2)
        circ = torch.stack([t.cos(), t.sin()], -1)
        side = torch.randint(0, 4, (n, N), generator=g)
        sq = torch.stack([torch.where(side < 2, u, torch.where(side == 2, 1.0, -1.0) * torch.ones_like(u)),
                          torch.where(side >= 2, u, torch.where(side == 0, 1.0, -1.0) * torch.ones_like(u))], -1)
        line = torch.stack([u, 0.15 * u], -1)
        cl = torch.where((torch.arange(N) % 2 == 0)[None, :, None], torch.tensor([0.6, 0.6]), torch.tensor([-0.6, -0.6])) + 0.2 * torch.randn(n, N, 2, generator=g)
        for c, s in enumerate([circ, sq, line, cl]):
            P[y == c] = s[y == c]
        ang = torch.rand(n, generator=g) * 6.283
        R = torch.stack([torch.stack([ang.cos(), -ang.sin()], -1), torch.stack([ang.sin(), ang.cos()], -1)], -2)
        P = torch.einsum("nij,npj->npi", R, P) * (0.7 + 0.6 * torch.rand(n, 1, 1, generator=g)) + 0.12 * torch.randn(n, N, 2, generator=g)
        return P, y

    def model(self):
        b = self.cfg.get("bug")
        return PTNet(ls=1e4 if b == "layerscale_init_typo" else 0.5, unsafe_norm=b == "zero_norm_normalize",
                     where_sqrt=b == "where_grad_nan", bias0=-4.0 if b == "gate_bias_init_all" else 0.0)

    def train_batch(self, i):
        x, y = super().train_batch(i)
        s = self.cfg.get("_step", -1)
        if self.cfg.get("bug") == "unnormalized_shard" and bad_step(self.cfg):
            # BUG unnormalized_shard: one re-exported shard stores coordinates in millimetres (x1000); the unit conversion
            # lives in the old export script
            return x * 1000.0, y
        if bad_step(self.cfg) or (self.cfg.get("dup_from") is not None and s >= self.cfg["dup_from"]):
            # a shard from a new export pipeline: a few clouds carry duplicated points (a point written twice)
            x = x.clone()
            x[:4, 1] = x[:4, 0]
        return x, y

    def loss(self, model, b, train=True):
        x, y = b
        out = model(x)
        self.last_acc = float((out.argmax(-1) == y).float().mean())
        return F.cross_entropy(out, y)

    def layers(self, model):
        return model.inp.weight, model.head.weight

    def probe_modules(self, model):
        return [model.mlp[1]]


# ---------------------------------------------------------------------------------------------------- Hopfield pooling
class HopNet(nn.Module):
    def __init__(self, fin=16, d=32, beta_div=None):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(fin, d), nn.GELU(), nn.Linear(d, d))
        self.queries = nn.Parameter(torch.randn(4, d) * 0.3)
        self.wk = nn.Linear(d, d)
        self.wv = nn.Linear(d, d)
        self.head = nn.Sequential(nn.Linear(4 * d, d), nn.GELU(), nn.Linear(d, 3))
        self.beta = 1.0 / math.sqrt(d)
        self.beta_div = beta_div
        self.last_attn = None

    def forward(self, x, bank=None):  # x: B,N,fin ; bank: M,d stored patterns shared by the batch
        h = self.enc(x)
        k, v = self.wk(h), self.wv(h)
        if bank is not None and bank.shape[0]:
            k = torch.cat([k, self.wk(bank)[None].expand(h.shape[0], -1, -1)], 1)
            v = torch.cat([v, self.wv(bank)[None].expand(h.shape[0], -1, -1)], 1)
        s = torch.einsum("qd,bnd->bqn", self.queries, k)
        if self.beta_div is not None:
            # BUG softmax_temperature_inverted: the Hopfield update softmax(beta * s) written as softmax(s / beta) with the
            # config's beta = 1/d (an inverse temperature used as a temperature)
            a = (s / self.beta_div).softmax(-1)
        else:
            a = (self.beta * s).softmax(-1)
        self.last_attn = a.detach()
        o = torch.einsum("bqn,bnd->bqd", a, v)
        return self.head(o.reshape(o.shape[0], -1)), h.detach()


class Hop(Family):
    loss_word = "xent"

    def make(self, n, g, N=10, fin=16):
        protos = torch.randn(3, fin, generator=gen(77)) * 1.2
        y = torch.randint(0, 3, (n,), generator=g)
        X = torch.randn(n, N, fin, generator=g)
        k = torch.randint(1, 4, (n,), generator=g)
        for i in range(3):
            X[:, i] += (i < k)[:, None].float() * protos[y]
        X[:, 3] += protos[(y + 1) % 3] * 0.7
        return X, y

    def __init__(self, cfg, seed):
        super().__init__(cfg, seed)
        self.bank = torch.zeros(0, 32)

    def model(self):
        return HopNet(beta_div=(1.0 / 32) if self.cfg.get("bug") == "softmax_temperature_inverted" else None)

    def loss(self, model, b, train=True):
        x, y = b
        out, h = model(x, self.bank)
        a = model.last_attn
        self.sat_now = float((a.max(-1).values > 0.99).float().mean())
        if train and self.cfg.get("bank"):
            # a memory bank of stored patterns from earlier batches (one mean pattern per bag); capped at bank_size
            new = h.mean(1)[:8]
            self.bank = torch.cat([self.bank, new], 0)
            if self.cfg.get("bug") != "unbounded_memory_bank":
                self.bank = self.bank[-self.cfg.get("bank_size", 64):]
            # BUG unbounded_memory_bank: the `self.bank = self.bank[-bank_size:]` eviction sits under `if self.training and
            # self.evict:` whose flag is never set; every step appends 8 patterns and attention cost grows
        self.last_acc = float((out.argmax(-1) == y).float().mean())
        return F.cross_entropy(out, y)

    def layers(self, model):
        return model.enc[0].weight, model.head[2].weight


# ---------------------------------------------------------------------------------------------------- DINO-lite
class DinoNet(nn.Module):
    def __init__(self, fin=16, d=64, K=32, stray_detach=False):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(fin, d), nn.GELU(), nn.Linear(d, d), nn.GELU(), nn.Linear(d, d))
        self.head = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, K))
        self.stray_detach = stray_detach

    def forward(self, x):
        h = self.backbone[1](self.backbone[0](x))
        if self.stray_detach:
            # BUG stray_detach: the stop-gradient of the teacher branch was copied into the shared forward (`h = h.detach()`
            # after the first block), so the student's first layer never gets a gradient
            h = h.detach()
        for m in list(self.backbone)[2:]:
            h = m(h)
        return self.head(h)


class Dino(Family):
    loss_word = "dino_loss"

    def make(self, n, g, fin=16):
        C = torch.randn(8, fin, generator=gen(91)) * 2
        y = torch.randint(0, 8, (n,), generator=g)
        return C[y] + torch.randn(n, fin, generator=g), y

    def __init__(self, cfg, seed):
        super().__init__(cfg, seed)
        self.center = torch.zeros(32)
        self.teacher = None
        self.g = gen(seed + 5)

    def model(self):
        m = DinoNet(stray_detach=self.cfg.get("bug") == "stray_detach")
        import copy
        self.teacher = copy.deepcopy(m)
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        return m

    def views(self, x, g):
        a = x + 0.5 * torch.randn(x.shape, generator=g)
        b = x * (torch.rand(x.shape, generator=g) > 0.25).float() + 0.3 * torch.randn(x.shape, generator=g)
        return a, b

    def loss(self, model, b, train=True):
        x, _ = b
        g = self.g if train else gen(4242)
        v1, v2 = self.views(x, g)
        s1, s2 = model(v1), model(v2)
        with torch.no_grad():
            t1, t2 = self.teacher(v1), self.teacher(v2)
            tp1 = ((t1 - self.center) / 0.04).softmax(-1)
            tp2 = ((t2 - self.center) / 0.04).softmax(-1)
            if train:
                self.center = 0.9 * self.center + 0.1 * torch.cat([t1, t2]).mean(0)
        l = -(tp1 * F.log_softmax(s2 / 0.1, -1)).sum(-1).mean() - (tp2 * F.log_softmax(s1 / 0.1, -1)).sum(-1).mean()
        return l / 2

    def after_step(self, model, s):
        m = self.cfg.get("ema_m", 0.99)
        with torch.no_grad():
            for pt, ps in zip(self.teacher.parameters(), model.parameters()):
                pt.mul_(m).add_(ps.detach(), alpha=1 - m)

    def layers(self, model):
        return model.backbone[0].weight, model.head[2].weight


# ---------------------------------------------------------------------------------------------------- NeRF-lite (2-D scene)
def posenc(x, L=6):
    fr = (2.0 ** torch.arange(L)) * math.pi
    a = x[..., None] * fr
    return torch.cat([x, a.sin().flatten(-2), a.cos().flatten(-2)], -1)


DISCS = torch.tensor([[0.3, 0.2, 0.25], [-0.4, -0.1, 0.2], [0.0, -0.5, 0.15], [-0.2, 0.45, 0.12]])
COLS = torch.tensor([[0.9, 0.2, 0.1], [0.1, 0.8, 0.3], [0.2, 0.3, 0.9], [0.9, 0.9, 0.2]])


def field(pts):
    d = ((pts[..., None, :] - DISCS[:, :2]) ** 2).sum(-1).sqrt()  # ...,4
    w = torch.sigmoid((DISCS[:, 2] - d) * 40)
    sig = 12 * w.sum(-1)
    rgb = (w[..., None] * COLS).sum(-2) / (w.sum(-1, keepdim=True) + 1e-3)
    return sig, rgb


def render(sig, rgb, delta):
    alpha = 1 - torch.exp(-sig * delta)
    T = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha[:, :-1] + 1e-10], 1), 1)
    w = alpha * T
    return (w[..., None] * rgb).sum(1) + (1 - w.sum(1, keepdim=True)) * 1.0


class NerfMLP(nn.Module):
    def __init__(self, H=64, use_pe=True, bias0=0.0):
        super().__init__()
        fin = 2 + 24 + 2
        self.l1 = nn.Linear(fin, H)
        self.l2 = nn.Linear(H, H)
        self.out = nn.Linear(H, 4)
        self.act = nn.ReLU()
        self.use_pe = use_pe
        if bias0:
            # BUG gate_bias_init_all: `init.constant_(m.bias, -4.0)` for the density-head bias applied to every nn.Linear
            for m in (self.l1, self.l2, self.out):
                nn.init.constant_(m.bias, bias0)

    def forward(self, pts, dirs):
        pe = posenc(pts)
        h = self.act(self.l2(self.act(self.l1(torch.cat([pe, dirs.expand_as(pts)], -1)))))
        o = self.out(h)
        return F.softplus(o[..., 0]), torch.sigmoid(o[..., 1:])


class Nerf(Family):
    loss_word = "mse"
    n_train = 4096

    def make(self, n, g, S=16):
        ang = torch.rand(n, generator=g) * 6.283
        o = torch.stack([ang.cos(), ang.sin()], -1) * 1.2
        look = -o / 1.2 + 0.35 * torch.randn(n, 2, generator=g)
        dirs = look / look.norm(dim=-1, keepdim=True)
        noise = torch.where(torch.rand(n, generator=g) < 0.5, 0.02, 0.3)
        self._key = noise
        t = torch.linspace(0.05, 2.4, S)
        pts = o[:, None] + t[None, :, None] * dirs[:, None]
        sig, rgb = field(pts)
        c = render(sig, rgb, 2.35 / S) + noise[:, None] * torch.randn(n, 3, generator=g)
        return (o, look), c

    def model(self):
        b = self.cfg.get("bug")
        return NerfMLP(bias0=-4.0 if b == "gate_bias_init_all" else 0.0)

    def train_batch(self, i):
        (o, look), c = super().train_batch(i)
        if self.cfg.get("bug") == "python_per_item_featurize":
            # BUG python_per_item_featurize: the Dataset's __getitem__ rebuilds every ray from camera intrinsics with per-ray,
            # per-sample Python arithmetic (no vectorisation), in the main process (num_workers=0)
            rows = []
            for r in range(o.shape[0]):
                ox, oy = float(o[r, 0]), float(o[r, 1])
                lx, ly = float(look[r, 0]), float(look[r, 1])
                for _ in range(500):
                    nrm = math.sqrt(lx * lx + ly * ly)
                    rows.append((ox + lx / nrm, oy + ly / nrm))
            o = o.clone()
        if bad_step(self.cfg):
            look = look.clone()
            look[0] = 0.0  # a camera whose look-at point equals its position (a corrupt pose record)
        return (o, look), c

    def loss(self, model, b, train=True, S=16):
        (o, look), c = b
        if self.cfg.get("bug") == "zero_norm_normalize":
            # BUG zero_norm_normalize: ray directions normalised as d / d.norm(dim=-1, keepdim=True) (no eps)
            dirs = look / look.norm(dim=-1, keepdim=True)
        else:
            dirs = F.normalize(look, dim=-1)
        t = torch.linspace(0.05, 2.4, S)
        pts = o[:, None] + t[None, :, None] * dirs[:, None]
        sig, rgb = model(pts, dirs[:, None])
        return F.mse_loss(render(sig, rgb, 2.35 / S), c)

    def layers(self, model):
        return model.l1.weight, model.out.weight

    def probe_modules(self, model):
        return [model.act]


# ---------------------------------------------------------------------------------------------------- GFlowNet (TB)
class GfnPolicy(nn.Module):
    def __init__(self, L=8, H=64, logz_param=True, temp=1.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2 * L, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU(), nn.Linear(H, 2))
        if logz_param:
            self.logZ = nn.Parameter(torch.zeros(1))
        else:
            # BUG logz_plain_tensor: `self.logZ = torch.zeros(1, requires_grad=True)` -- a plain tensor attribute is not a
            # registered parameter, so model.parameters() (and the optimizer) never see it; logZ stays 0
            self.logZ = torch.zeros(1, requires_grad=True)
        self.temp = temp

    def forward(self, st):
        return self.net(st) / self.temp


class Gfn(Family):
    loss_word = "tb_loss"
    L = 8

    def make(self, n, g):
        return torch.arange(n), torch.zeros(n)

    def __init__(self, cfg, seed):
        super().__init__(cfg, seed)
        self.modes = (torch.rand(4, self.L, generator=gen(55)) > 0.5).float()
        self.buffer = []

    def model(self):
        b = self.cfg.get("bug")
        return GfnPolicy(logz_param=b != "logz_plain_tensor")

    def logR(self, x):
        d = (x[:, None] - self.modes[None]).abs().sum(-1).min(-1).values
        return -1.2 * d

    def loss(self, model, b, train=True):
        seeds, _ = b
        g = gen(int(seeds[0]) * 7 + self.seed + (0 if train else 99991))
        B, L = seeds.shape[0], self.L
        x = torch.zeros(B, L)
        lp = torch.zeros(B)
        sat = []
        for t in range(L):
            st = torch.cat([torch.where(torch.arange(L) < t, 2 * x - 1, torch.zeros(L)), F.one_hot(torch.tensor(t), L).float().expand(B, L)], -1)
            logits = model(st)
            p = logits.log_softmax(-1)
            sat.append(float((p.exp().max(-1).values > 0.99).float().mean()))
            eps = 0.05 if train else 0.0
            probs = (1 - eps) * p.exp().detach() + eps * 0.5
            a = torch.multinomial(probs, 1, generator=g).squeeze(1)
            lp = lp + p.gather(1, a[:, None]).squeeze(1)
            x[:, t] = a.float()
        self.sat_now = sum(sat) / len(sat)
        if train and self.cfg.get("buffer"):
            # a replay buffer of unique terminal states (kept for evaluation of mode coverage)
            if self.cfg.get("bug") == "unbounded_memory_bank":
                # BUG unbounded_memory_bank (replay-buffer form): never evicted, and uniqueness checked with `if key not in self.buffer` on a Python list of tuples (O(n) per
                # insert, and each state re-encoded element by element): the check grows with the buffer
                for r in range(B):
                    key = tuple(int(v) for v in x[r].tolist()) + (int(seeds[r]),)
                    if key not in self.buffer:
                        self.buffer.append(key)
                    for old in self.buffer[-len(self.buffer):]:
                        if old == key:
                            break
            else:
                self.buffer = self.buffer[-512:]
        return ((model.logZ + lp - self.logR(x)) ** 2).mean()

    def layers(self, model):
        return model.net[0].weight, model.net[4].weight


# ---------------------------------------------------------------------------------------------------- TabNet-lite
def sparsemax(z):
    zs, _ = z.sort(-1, descending=True)
    k = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    cs = zs.cumsum(-1)
    sup = 1 + k * zs > cs
    kz = sup.sum(-1, keepdim=True)
    tau = (cs.gather(-1, kz - 1) - 1) / kz
    return (z - tau) * (z > tau).to(z.dtype)


class GLU(nn.Module):
    def __init__(self, fin, d):
        super().__init__()
        self.fc = nn.Linear(fin, 2 * d)

    def forward(self, x):
        a, b = self.fc(x).chunk(2, -1)
        return a * torch.sigmoid(b)


class TabNetLite(nn.Module):
    def __init__(self, fin=12, d=16, steps=3, gamma=1.3, where_log=False):
        super().__init__()
        self.bn = nn.BatchNorm1d(fin)
        self.shared = GLU(fin, 2 * d)
        self.ft = nn.ModuleList([GLU(2 * d, 2 * d) for _ in range(steps + 1)])
        self.att = nn.ModuleList([nn.Linear(d, fin) for _ in range(steps)])
        self.out = nn.Linear(d, 1)
        self.d, self.steps, self.gamma, self.where_log = d, steps, gamma, where_log
        self.m_loss = torch.zeros(())

    def forward(self, x):
        x = self.bn(x)
        h = self.ft[0](self.shared(x))
        a = h[:, self.d:]
        prior = torch.ones_like(x)
        out = 0
        ent = 0
        for s in range(self.steps):
            M = sparsemax(self.att[s](a) * prior)
            prior = prior * (self.gamma - M)
            if self.where_log:
                # BUG where_grad_nan: the sparsity (entropy) regulariser as torch.where(M > 0, M * M.log(), 0): finite forward, but
                # log's gradient at the exact zeros of sparsemax is inf, and where() turns inf * 0 into NaN
                ent = ent + torch.where(M > 0, M * M.log(), torch.zeros_like(M)).sum(-1).mean()
            else:
                ent = ent + (M * (M + 1e-10).log()).sum(-1).mean()
            h = self.ft[s + 1](self.shared(x * M))
            out = out + F.relu(h[:, :self.d])
            a = h[:, self.d:]
        self.m_loss = -ent / self.steps
        return self.out(out).squeeze(-1)


class Tabnet(Family):
    loss_word = "mse"

    def make(self, n, g, fin=12):
        X = torch.randn(n, fin, generator=g)
        y = 1.5 * X[:, 0] * X[:, 1] + torch.sin(2 * X[:, 2]) + 0.5 * X[:, 3].abs()
        grp = (torch.rand(n, generator=g) < 0.5).float()
        noise = 0.15 + 1.2 * grp
        self._key = noise
        return X, y + noise * torch.randn(n, generator=g)

    def model(self):
        return TabNetLite(where_log=self.cfg.get("bug") == "where_grad_nan")

    def train_batch(self, i):
        x, y = super().train_batch(i)
        if self.cfg.get("bug") == "python_per_item_featurize":
            # BUG python_per_item_featurize: rows are featurised cell by cell in Python (a dict lookup and float() per cell,
            # a quantile clip per value) in the main process
            rows = []
            for r in x.tolist():
                row = []
                for v in r:
                    for _ in range(60):
                        v2 = min(max(float(v), -4.0), 4.0)
                    row.append(v2)
                rows.append(row)
            x = torch.tensor(rows)
        if self.cfg.get("bug") == "unnormalized_shard" and bad_step(self.cfg):
            # BUG unnormalized_shard: one shard exported in cents (x100) before the unit fix; the StandardScaler was fitted once
            x = x.clone()
            x[:, :4] = x[:, :4] * 100.0
        return x, y

    def loss(self, model, b, train=True):
        x, y = b
        out = model(x)
        l = F.mse_loss(out, y)
        if train and self.cfg.get("lam_sparse") and self.cfg.get("_step", 0) >= self.cfg.get("reg_from", 0):
            self._data = float(l)
            return l + self.cfg["lam_sparse"] * model.m_loss
        return l

    def layers(self, model):
        return model.shared.fc.weight, model.out.weight


FAMILIES = {"swin": Swin, "ptx": Ptx, "hop": Hop, "dino": Dino, "nerf": Nerf, "gfn": Gfn, "tabnet": Tabnet}
