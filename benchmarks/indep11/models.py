"""indep11 model families and their seeded synthetic data. Bugs that live in a model, its loss or its data are marked BUG."""
import json
import math
import time

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
    n_train = 2048
    n_val = 512
    ncls = None

    def __init__(self, cfg, seed):
        self.cfg = cfg
        self.seed = seed
        g = gen(seed)
        self.Xtr, self.Ytr = self.make(self.cfg.get("n_train", self.n_train), g)
        self.Xva, self.Yva = self.make(self.n_val, g)
        if cfg.get("bug") == "subset_size_swapped":
            # BUG subset_size_swapped: `train, val = data[:n_val_small], data[n_val_small:]` -- the two split sizes were swapped in
            # the config, so the model trains on the small slice (64 rows) meant for a quick sanity validation
            k = cfg.get("n_small", 64)
            self.Xtr, self.Ytr = self.Xtr[:k], self.Ytr[:k]
        if cfg.get("bug") == "sorted_by_label_noshuffle":
            # BUG sorted_by_label_noshuffle: the shard writer sorted rows by label and the loader has shuffle=False, so batches come
            # in long single-class runs
            o = torch.argsort(self.Ytr if self.Ytr.dim() == 1 else self.Ytr[:, 0], stable=True)
            self.Xtr, self.Ytr = self.Xtr[o], self.Ytr[o]
        self.bs = cfg.get("bs", 32)
        self.last_acc = None

    def ntr(self):
        return self.Ytr.shape[0]

    def batch_index(self, i, salt=0):
        n = self.ntr()
        nb = max(1, n // self.bs)
        ep, k = divmod(i, nb)
        if self.cfg.get("bug") == "sorted_by_label_noshuffle":
            return torch.arange(k * self.bs, (k + 1) * self.bs) % n
        perm = torch.randperm(n, generator=gen(self.seed * 1000 + ep + salt))
        return perm[k * self.bs:(k + 1) * self.bs] if n >= self.bs else perm

    def batches_per_epoch(self):
        return max(1, self.ntr() // self.bs)

    def train_batch(self, i):
        idx = self.batch_index(i)
        return self.Xtr[idx].clone(), self.Ytr[idx].clone()

    def val_batches(self):
        yield self.Xva, self.Yva

    def acc(self, logits, y):
        self.last_acc = float((logits.argmax(-1) == y).float().mean())

    def layers(self, model):
        ps = [p for p in model.parameters() if p.dim() > 1]
        return ps[0], ps[-1]


def bad_step(cfg):
    return cfg.get("_step", -1) in cfg.get("bad_steps", ())


# ---------------------------------------------------------------- pointnet: PointNet-lite point-cloud classifier
def make_clouds(n, g, P=64):
    y = torch.randint(0, 4, (n,), generator=g)
    u = torch.rand(n, P, 2, generator=g)
    th, ph = 2 * math.pi * u[..., 0], torch.acos(1 - 2 * u[..., 1])
    X = torch.zeros(n, P, 3)
    sph = torch.stack([torch.sin(ph) * torch.cos(th), torch.sin(ph) * torch.sin(th), torch.cos(ph)], -1)
    cube = (torch.rand(n, P, 3, generator=g) * 2 - 1)
    face = torch.randint(0, 3, (n, P), generator=g)
    sgn = torch.randint(0, 2, (n, P), generator=g).float() * 2 - 1
    cube.scatter_(2, face[..., None], sgn[..., None])
    cyl = torch.stack([torch.cos(th), torch.sin(th), 2 * u[..., 1] - 1], -1)
    plane = torch.stack([2 * u[..., 0] - 1, 2 * u[..., 1] - 1, 0.05 * torch.randn(n, P, generator=g)], -1)
    for c, S in enumerate((sph, cube, cyl, plane)):
        X[y == c] = S[y == c]
    a = 2 * math.pi * torch.rand(n, generator=g)
    R = torch.zeros(n, 3, 3)
    R[:, 0, 0], R[:, 0, 1], R[:, 1, 0], R[:, 1, 1], R[:, 2, 2] = torch.cos(a), -torch.sin(a), torch.sin(a), torch.cos(a), 1
    X = X @ R
    X = X * (0.6 + 0.8 * torch.rand(n, 1, 1, generator=g)) + 0.5 * torch.randn(n, 1, 3, generator=g)
    return X + 0.04 * torch.randn(X.shape, generator=g), y


class PointNet(nn.Module):
    def __init__(self, depth=2, act="relu", pool_dim=1, C=64):
        super().__init__()
        dims = [3] + [32] * (depth - 1) + [C]
        self.mlp = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.act = nn.Sigmoid() if act == "sigmoid" else nn.ReLU()
        self.acts = nn.ModuleList(nn.Sigmoid() if act == "sigmoid" else nn.ReLU() for _ in self.mlp)
        self.pool_dim = pool_dim
        self.head = nn.Sequential(nn.Linear(C, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x):  # B, P, 3
        h = x
        for l, a in zip(self.mlp, self.acts):
            h = a(l(h))
        # max over points (dim 1). BUG pool_wrong_dim: max over dim 2 (channels); with P == C == 64 the shapes still match
        g = h.max(dim=self.pool_dim).values
        return self.head(g)


class Pointnet(Family):
    loss_word = "ce"
    ncls = 4

    def make(self, n, g):
        return make_clouds(n, g)

    def normalize(self, x):
        c = x - x.mean(1, keepdim=True)
        r = c.norm(dim=2).max(1).values[:, None, None]
        if self.cfg.get("bug") in ("unit_sphere_noeps",):
            # BUG unit_sphere_noeps: unit-sphere normalisation without a floor on the radius: a degenerate cloud (all points equal)
            # gives 0/0
            return c / r
        return c / r.clamp_min(1e-6)

    def train_batch(self, i):
        x, y = super().train_batch(i)
        if bad_step(self.cfg):
            x[:2] = 0.0  # a sensor-dropout shard: two clouds whose points are all at the origin
        return x, y

    def model(self):
        b = self.cfg.get("bug")
        m = PointNet(depth=10 if b == "act_swap_sigmoid" else 2, act="sigmoid" if b == "act_swap_sigmoid" else "relu",
                     pool_dim=2 if b == "pool_wrong_dim" else 1)
        if b == "bias_fill_sign":
            for l in m.mlp:
                nn.init.constant_(l.bias, -2.0)  # BUG bias_fill_sign: init helper fills biases with -init_range (2.0) meant for +0.0..
        return m

    def loss(self, model, b, train=True):
        x, y = b
        out = model(self.normalize(x))
        self.acc(out, y)
        return F.cross_entropy(out, y)

    def layers(self, model):
        return model.mlp[0].weight, model.head[2].weight

    def probe_modules(self, model):
        return [model.acts[0]]


# ---------------------------------------------------------------- ncf: Neural matrix factorisation (GMF + MLP), implicit feedback
class NeuMF(nn.Module):
    def __init__(self, nu=200, ni=300, k=8, frozen=False, bias_fill=None):
        super().__init__()
        if frozen:
            # BUG embed_from_pretrained_frozen: item tables built with nn.Embedding.from_pretrained(random init), whose default is
            # freeze=True, so the item embeddings never train
            self.ig = nn.Embedding.from_pretrained(0.3 * torch.randn(ni, k))
            self.im = nn.Embedding.from_pretrained(0.3 * torch.randn(ni, 2 * k))
        else:
            self.ig = nn.Embedding(ni, k)
            self.im = nn.Embedding(ni, 2 * k)
            nn.init.normal_(self.ig.weight, std=0.3)
            nn.init.normal_(self.im.weight, std=0.3)
        self.ug = nn.Embedding(nu, k)
        self.um = nn.Embedding(nu, 2 * k)
        nn.init.normal_(self.ug.weight, std=0.3)
        nn.init.normal_(self.um.weight, std=0.3)
        self.mlp = nn.Sequential(nn.Linear(4 * k, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU())
        if bias_fill is not None:
            nn.init.constant_(self.mlp[0].bias, bias_fill)  # BUG bias_fill_sign: the init helper fills biases with -init_range
            nn.init.constant_(self.mlp[2].bias, bias_fill)
        self.out = nn.Linear(k + 16, 1)

    def forward(self, x):
        u, i = x[:, 0], x[:, 1]
        g = self.ug(u) * self.ig(i)
        m = self.mlp(torch.cat([self.um(u), self.im(i)], 1))
        return self.out(torch.cat([g, m], 1)).squeeze(1)


class Ncf(Family):
    loss_word = "bce"
    n_train = 40000
    n_val = 1500

    def make(self, n, g):
        if not hasattr(self, "U"):
            gg = gen(4242)
            self.U, self.I = torch.randn(200, 6, generator=gg), torch.randn(300, 6, generator=gg)
            self.P = torch.sigmoid(5.0 * (self.U @ self.I.T) / math.sqrt(6) - 0.5)
        u = torch.randint(0, 200, (n,), generator=g)
        i = torch.randint(0, 300, (n,), generator=g)
        y = (torch.rand(n, generator=g) < self.P[u, i]).float()
        return torch.stack([u, i], 1), y

    def model(self):
        b = self.cfg.get("bug")
        return NeuMF(frozen=(b == "embed_from_pretrained_frozen"), bias_fill=(-2.0 if b == "bias_fill_sign" else None))

    def loss(self, model, b, train=True):
        x, y = b
        if train and self.cfg.get("bug") == "seen_list_linear_scan":
            # BUG seen_list_linear_scan: the negative sampler keeps every (user, item) seen so far in a Python list and rejects a
            # candidate with `in` (a linear scan); the list grows every step, and so does the step time
            if not hasattr(self, "seen"):
                self.seen = []
            g = gen(self.seed + self.cfg.get("_step", 0))
            cand = torch.randint(0, 300 * 200, (48,), generator=g).tolist()
            _ = [c for c in cand if c not in self.seen]
            self.seen.extend((x[:, 0] * 300 + x[:, 1]).tolist())
        if train and self.cfg.get("bug") == "hard_neg_refresh" and (self.cfg.get("_step", 0) + 1) % self.cfg.get("refresh_every", 25) == 0:
            # BUG hard_neg_refresh: "hard negative" mining re-scores every item for every user one user at a time, inside the
            # training step, every N steps
            with torch.no_grad():
                items = torch.arange(300)
                for u in range(200):
                    model(torch.stack([torch.full((300,), u), items], 1))
        out = model(x)
        self.last_acc = float(((out > 0).float() == y).float().mean())
        return F.binary_cross_entropy_with_logits(out, y)

    def layers(self, model):
        return model.mlp[0].weight, model.out.weight

    def probe_modules(self, model):
        return [model.mlp[1]]


# ---------------------------------------------------------------- resmlp: ResMLP image classifier (ReLU variant)
def make_images(n, g, noise=0.8):
    y = torch.randint(0, 4, (n,), generator=g)
    ii, jj = torch.meshgrid(torch.arange(8), torch.arange(8), indexing="ij")
    ph = torch.randint(0, 2, (n,), generator=g)
    masks = []
    for c in range(4):
        for p in range(2):
            if c == 0:
                m = ((ii + p) % 2 == 0)
            elif c == 1:
                m = ((jj + p) % 2 == 0)
            elif c == 2:
                m = ((ii + jj + p) % 3 == 0)
            else:
                m = (((ii // 2) + (jj // 2) + p) % 2 == 0)
            masks.append(m.float())
    M = torch.stack(masks)
    X = M[y * 2 + ph][:, None]
    return X + noise * torch.randn(X.shape, generator=g), y


class Aff(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.a = nn.Parameter(torch.ones(d))
        self.b = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return self.a * x + self.b


class ResMLPBlock(nn.Module):
    def __init__(self, d=32, npatch=16, ls=0.1):
        super().__init__()
        self.n1, self.n2 = Aff(d), Aff(d)
        self.tok = nn.Linear(npatch, npatch)
        self.fc1, self.fc2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        self.act = nn.ReLU()
        self.g1 = nn.Parameter(ls * torch.ones(d))
        self.g2 = nn.Parameter(ls * torch.ones(d))

    def forward(self, x):  # B, N, d
        x = x + self.g1 * self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.g2 * self.fc2(self.act(self.fc1(self.n2(x))))


class ResMLP(nn.Module):
    def __init__(self, d=32, depth=2, ls=0.1):
        super().__init__()
        self.embed = nn.Linear(4, d)
        self.blocks = nn.ModuleList(ResMLPBlock(d, 16, ls) for _ in range(depth))
        self.norm = Aff(d)
        self.head = nn.Linear(d, 4)

    def forward(self, x):  # B,1,8,8 -> 16 patches of 2x2
        p = x.unfold(2, 2, 2).unfold(3, 2, 2).reshape(x.shape[0], 16, 4)
        h = self.embed(p)
        for b in self.blocks:
            h = b(h)
        return self.head(self.norm(h).mean(1))


class Resmlp(Family):
    loss_word = "ce"
    ncls = 4

    def make(self, n, g):
        return make_images(n, g)

    def model(self):
        b = self.cfg.get("bug")
        if b == "act_swap_sigmoid":
            m = ResMLP(depth=1)
            # BUG act_swap_sigmoid (ResMLP variant): the patch embedding is followed by a 10-layer sigmoid "stem" from a config
            # key meant for the head
            m.stem = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Sigmoid()) for _ in range(10)])
            old = m.forward

            def fwd(x, m=m):
                p = x.unfold(2, 2, 2).unfold(3, 2, 2).reshape(x.shape[0], 16, 4)
                h = m.stem(m.embed(p))
                for bl in m.blocks:
                    h = bl(h)
                return m.head(m.norm(h).mean(1))
            m.forward = fwd
            return m
        m = ResMLP(depth=self.cfg.get("depth", 2), ls=1.0 if b == "init_std_one" else 0.1)
        if b == "init_std_one":
            for mod in m.modules():
                if isinstance(mod, nn.Linear):
                    nn.init.normal_(mod.weight, std=1.0)  # BUG init_std_one: trunc_normal_(std=.02) written as normal_(w, 1.0)
        if b == "bias_fill_sign":
            for bl in m.blocks:
                nn.init.constant_(bl.fc1.bias, -3.0)  # BUG bias_fill_sign: biases filled with -init_range
        return m

    def loss(self, model, b, train=True):
        x, y = b
        out = model(x)
        self.acc(out, y)
        return F.cross_entropy(out, y)

    def layers(self, model):
        if hasattr(model, "stem"):
            return model.stem[0][0].weight, model.head.weight
        return model.embed.weight, model.head.weight

    def probe_modules(self, model):
        return [model.blocks[0].act]


# ---------------------------------------------------------------- vae: beta-VAE with KL warm-up on bar images
class VAE(nn.Module):
    def __init__(self, z=4):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2 * z))
        self.dec = nn.Sequential(nn.Linear(z, 64), nn.ReLU(), nn.Linear(64, 64))

    def forward(self, x, g):
        mu, lv = self.enc(x).chunk(2, 1)
        z = mu + torch.randn(mu.shape, generator=g) * (0.5 * lv).exp()
        return self.dec(z), mu, lv


class Vae(Family):
    loss_word = "neg_elbo"

    def make(self, n, g):
        r = torch.rand(n, 2, 8, generator=g) < 0.25
        X = (r[:, 0, :, None] | r[:, 1, None, :]).float().reshape(n, 64)
        flip = torch.rand(n, 64, generator=g) < 0.03
        X = torch.where(flip, 1 - X, X)
        return X, torch.zeros(n, dtype=torch.long)

    def model(self):
        return VAE()

    def beta(self):
        s = self.cfg.get("_step", 0)
        W = self.cfg.get("kl_warmup", 0)
        if not W:
            return 1.0
        if self.cfg.get("bug") == "beta_ramp_uncapped":
            return (s + 1) / W  # BUG beta_ramp_uncapped: KL weight ramp s / W without its min(1, .) cap
        return min(1.0, (s + 1) / W)

    def loss(self, model, b, train=True):
        x, _ = b
        g = gen(self.seed * 17 + self.cfg.get("_step", 0) + (0 if train else 7777))
        logits, mu, lv = model(x, g)
        rec = F.binary_cross_entropy_with_logits(logits, x, reduction="none").sum(1)
        kl = -0.5 * (1 + lv - mu ** 2 - lv.exp()).sum(1)
        beta = self.beta() if train else 1.0
        return (rec + beta * kl).mean()

    def layers(self, model):
        return model.enc[0].weight, model.dec[2].weight


# ---------------------------------------------------------------- cfc: closed-form continuous-time RNN on irregular series
class CfCCell(nn.Module):
    def __init__(self, a, h, bb=32, act="tanh"):
        super().__init__()
        self.bb = nn.Linear(a + h, bb)
        self.act = nn.Sigmoid() if act == "sigmoid" else nn.Tanh()
        self.ff1, self.ff2 = nn.Linear(bb, h), nn.Linear(bb, h)
        self.ta, self.tb = nn.Linear(bb, h), nn.Linear(bb, h)

    def forward(self, x, h, dt):
        z = self.act(self.bb(torch.cat([x, h], 1)))
        ti = torch.sigmoid(-self.ta(z) * dt[:, None] + self.tb(z))
        self.last_ti = ti
        return torch.tanh(self.ff1(z)) * (1 - ti) + ti * torch.tanh(self.ff2(z))


class CfC(nn.Module):
    def __init__(self, H=24, layers=1, act="tanh"):
        super().__init__()
        self.pre = nn.ModuleList(nn.Sequential(nn.Linear(2 if i == 0 else H, H), nn.Sigmoid() if act == "sigmoid" else nn.Tanh()) for i in range(layers))
        self.cell = CfCCell(H, H)
        self.out = nn.Linear(H, 1)

    def forward(self, x, dt):  # x: B,T,2 (value, mask) ; dt: B,T
        B, T, _ = x.shape
        u = x
        for p in self.pre:
            u = p(u)
        h = torch.zeros(B, self.cell.ff1.out_features)
        tis = []
        for t in range(T):
            h = self.cell(u[:, t], h, dt[:, t])
            tis.append(self.cell.last_ti)
        self.ti = torch.stack(tis, 1)
        return self.out(h).squeeze(1)


class Cfc(Family):
    loss_word = "mse"

    def make(self, n, g, T=20):
        dt = 0.02 - torch.log(torch.rand(n, T, generator=g)) / 12.0  # irregular sampling, mean gap ~0.1 s
        t = dt.cumsum(1)
        w = 2 + 6 * torch.rand(n, 1, generator=g)
        ph = 2 * math.pi * torch.rand(n, 1, generator=g)
        A = 0.4 + 1.2 * torch.rand(n, 1, generator=g)
        v = A * torch.sin(w * t + ph) * torch.exp(-0.3 * t) + 0.05 * torch.randn(n, T, generator=g)
        y = (A.squeeze(1) - 1.0) * 2.5 + 0.3 * ((w.squeeze(1) - 5) / 3.0)
        X = torch.stack([v, dt], -1)
        return X, y

    def model(self):
        b = self.cfg.get("bug")
        return CfC(layers=8 if b == "act_swap_sigmoid" else 1, act="sigmoid" if b == "act_swap_sigmoid" else "tanh")

    def loss(self, model, b, train=True):
        x, y = b
        dt = x[..., 1]
        if self.cfg.get("bug") == "ts_in_ms":
            dt = dt * 1000.0  # BUG ts_in_ms: the loader's timestamps are in ms; the time-gap feature is never converted to seconds
        v = torch.stack([x[..., 0], torch.ones_like(x[..., 0])], -1)
        out = model(v, dt)
        ti = model.ti.detach()
        self.sat_now = float(((ti < 0.01) | (ti > 0.99)).float().mean())
        return F.mse_loss(out, y)

    def layers(self, model):
        return model.pre[0][0].weight, model.out.weight


# ---------------------------------------------------------------- tft: temporal-fusion-lite quantile forecaster
class GRN(nn.Module):
    def __init__(self, a, h, o):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(a, h), nn.Linear(h, 2 * o)
        self.skip = nn.Linear(a, o) if a != o else nn.Identity()
        self.ln = nn.LayerNorm(o)

    def forward(self, x):
        return self.ln(self.skip(x) + F.glu(self.fc2(F.elu(self.fc1(x))), -1))


class TFT(nn.Module):
    def __init__(self, nv=4, H=16):
        super().__init__()
        self.var = nn.ModuleList(GRN(1, H, H) for _ in range(nv))
        self.sel = GRN(nv, H, nv)
        self.lstm = nn.LSTM(H, H, batch_first=True)
        self.att = nn.MultiheadAttention(H, 1, batch_first=True)
        self.post = GRN(H, H, H)
        self.out = nn.Linear(H, 3)
        self.cache = None

    def forward(self, x):  # B,T,nv
        w = torch.softmax(self.sel(x), -1)  # variable selection weights
        e = torch.stack([g(x[..., j:j + 1]) for j, g in enumerate(self.var)], -1)  # B,T,H,nv
        h = (e * w[:, :, None, :]).sum(-1)
        o, _ = self.lstm(h)
        a, attw = self.att(o[:, -1:], o, o)
        if self.cache is not None:
            # BUG attn_maps_cached: attention outputs, selection weights and encoder states kept every step for interpretability
            # plots, with their graph (never detached, never cleared)
            self.cache.append((a, attw, w, e, o))
        return self.out(self.post(a[:, 0] + o[:, -1]))


QS = torch.tensor([0.1, 0.5, 0.9])


class Tft(Family):
    loss_word = "quantile_loss"
    n_train = 2048

    def make(self, n, g, T=24):
        t0 = torch.randint(0, 500, (n, 1), generator=g).float()
        t = t0 + torch.arange(T + 1).float()
        temp = torch.sin(2 * math.pi * t / 24 + 0.3 * torch.randn(n, 1, generator=g))
        price = torch.randn(n, T + 1, generator=g).cumsum(1) * 0.05
        dow = torch.sin(2 * math.pi * t / 168)
        load = 1.0 + 0.6 * temp + 0.3 * dow - 0.2 * price + 0.15 * torch.randn(n, T + 1, generator=g)
        X = torch.stack([load[:, :T], temp[:, :T], price[:, :T], dow[:, :T]], -1)
        y = load[:, T]
        if self.cfg.get("bug") == "json_decode_per_sample" and not hasattr(self, "rec"):
            # BUG json_decode_per_sample: the cached shard stores each sample as a JSON record with ISO timestamps; the training
            # loop decodes them in the main process (json.loads + strptime per time point)
            self.rec = [json.dumps({k: [time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(3600 * float(tt) + off)) for tt in t[i, :T]]
                                    for k, off in (("ts", 0), ("ts_local", 3600), ("ts_ingest", 7200))} | {
                                    "x": X[i].tolist(), "y": float(y[i])}) for i in range(n)]
        return X, y

    def train_batch(self, i):
        idx = self.batch_index(i)
        if self.cfg.get("bug") == "json_decode_per_sample":
            xs, ys = [], []
            for j in idx.tolist():
                r = json.loads(self.rec[j])
                _ = [time.strptime(s, "%Y-%m-%dT%H:%M:%S") for k in ("ts", "ts_local", "ts_ingest") for s in r[k]]
                xs.append(torch.tensor(r["x"]))
                ys.append(r["y"])
            return torch.stack(xs), torch.tensor(ys)
        x, y = self.Xtr[idx].clone(), self.Ytr[idx].clone()
        if bad_step(self.cfg):
            # a shard exported in W instead of kW (x1000) reaches the loader (BUG unit_mixup_shard: no unit check, no clipping)
            x[:, :, 0] *= 1000.0
            y *= 1000.0
        return x, y

    def model(self):
        m = TFT()
        if self.cfg.get("bug") == "attn_maps_cached":
            m.cache = []
        return m

    def loss(self, model, b, train=True):
        x, y = b
        if not train and model.cache is not None:
            c, model.cache = model.cache, None
            q = model(x)
            model.cache = c
        else:
            q = model(x)
        e = y[:, None] - q
        return torch.max(QS * e, (QS - 1) * e).mean() * 3

    def layers(self, model):
        return model.var[0].fc1.weight, model.out.weight


# ---------------------------------------------------------------- pairrank: RankNet pairwise logistic loss
class Scorer(nn.Module):
    def __init__(self, d=10, H=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU(), nn.Linear(H, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)


class Pairrank(Family):
    loss_word = "pairwise_logistic"
    n_train = 1024
    n_val = 256

    def make(self, n, g, D=12):
        if not hasattr(self, "w"):
            self.w = torch.randn(10, generator=gen(99))
        X = torch.randn(n, D, 10, generator=g)
        sc = X @ self.w / math.sqrt(10) + 0.5 * torch.sin(2 * X[..., 0]) + 0.3 * torch.randn(n, D, generator=g)
        rel = torch.bucketize(sc, torch.tensor([-0.5, 0.5, 1.2])).float()
        return X, rel

    def train_batch(self, i):
        x, y = super().train_batch(i)
        if self.cfg.get("dup_from") is not None and self.cfg.get("_step", 0) >= self.cfg["dup_from"]:
            # a re-crawled shard: every query lists its first document twice (exact duplicates, hence exact score ties)
            x[:, 1] = x[:, 0]
            y[:, 1] = y[:, 0]
        return x, y

    def model(self):
        return Scorer()

    def loss(self, model, b, train=True):
        x, rel = b
        s = model(x)
        if self.cfg.get("bug") == "pair_diff_typo":
            d = s[:, :, None] - s[:, :, None]  # BUG pair_diff_typo: s_i - s_i (meant s[:, :, None] - s[:, None, :])
        else:
            d = s[:, :, None] - s[:, None, :]
        m = (rel[:, :, None] > rel[:, None, :]).float()
        loss = (F.softplus(-d) * m).sum() / m.sum().clamp_min(1)
        if train and self.cfg.get("bug") == "abs_via_sqrt_ties":
            # BUG abs_via_sqrt_ties: a score-spread regulariser writes |s_i - s_j| as sqrt((s_i - s_j)**2); at an exact tie the
            # forward is 0 but the backward is 0 * inf = NaN
            dd = s[:, :, None] - s[:, None, :]
            off = ~torch.eye(s.shape[1], dtype=torch.bool)
            loss = loss + 0.01 * torch.relu(0.5 - ((dd[:, off] ** 2).sqrt())).mean()
        with torch.no_grad():
            top = s.argmax(1)
            self.last_acc = float(rel.gather(1, top[:, None]).mean())
        return loss

    def layers(self, model):
        return model.net[0].weight, model.net[4].weight

    def probe_modules(self, model):
        return [model.net[1]]


FAMILIES = {"pointnet": Pointnet, "ncf": Ncf, "resmlp": Resmlp, "vae": Vae, "cfc": Cfc, "tft": Tft, "pairrank": Pairrank}
