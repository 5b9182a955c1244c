"""indep14: 7 model families and their seeded synthetic data. Data-, model- and loss-side bugs are marked BUG."""
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def idx(t, sl):
    return tuple(u[sl] for u in t) if isinstance(t, tuple) else t[sl]


class Family:
    loss_word = "loss"
    n_train, n_val = 1024, 256
    task = "cls"

    def __init__(self, cfg, seed):
        self.cfg = cfg
        self.bs = cfg.get("bs", 32)
        g = gen(seed)
        ntr = cfg.get("n_train", self.n_train)
        X, Y = self.make(ntr + self.n_val, g)
        self.X, self.Y = X[:ntr], Y[:ntr]
        self.VX, self.VY = X[ntr:], Y[ntr:]
        self.g = gen(seed + 7)
        self.perm_cache = {}
        self.preds = []
        if cfg.get("bug") == "shuffle_false_sorted":
            # BUG shuffle_false_sorted: the dataset file is stored sorted by target (class id / target value) and the loader
            # is built with shuffle=False (copied from the eval loader), so every epoch walks the targets in order
            o = torch.argsort(self.Y if self.Y.dim() == 1 else self.Y.reshape(len(self.Y), -1).mean(1), stable=True)
            self.X, self.Y = self.X[o], self.Y[o]

    def batches_per_epoch(self):
        return len(self.Y) // self.bs

    def batch_index(self, i):
        bpe = self.batches_per_epoch()
        e, j = divmod(i, bpe)
        if self.cfg.get("bug") == "shuffle_false_sorted":
            return torch.arange(j * self.bs, (j + 1) * self.bs)
        if e not in self.perm_cache:
            self.perm_cache = {e: torch.randperm(len(self.Y), generator=gen(1000 + e + self.cfg.get("seed", 0)))}
        return self.perm_cache[e][j * self.bs:(j + 1) * self.bs]

    def train_batch(self, i):
        ix = self.batch_index(i)
        x, y = self.X[ix].clone(), self.Y[ix].clone()
        cfg = self.cfg
        bug = cfg.get("bug")
        s = cfg.get("_step", 0)
        if bug == "per_item_json_decode":
            # BUG per_item_json_decode: the Dataset keeps every row as a JSON string and __getitem__ decodes it and rebuilds
            # the features in Python, in the main process (num_workers=0)
            rows = [json.dumps(r) for r in x.reshape(len(x), -1).tolist()]
            out = []
            for r in rows:
                v = json.loads(r)
                for _ in range(cfg.get("featurize_reps", 6)):
                    v = [float(f"{a:.6f}") for a in v]
                out.append(v)
            x = torch.tensor(out).reshape(x.shape)
        if bug in ("std_no_eps", "std_no_eps_guarded"):
            if s in cfg.get("bad_steps", ()):
                # a shard where one input channel is stuck at a constant (a dead sensor / an all-padding column)
                flat = x.reshape(len(x), -1)
                flat[:, 0] = 0.5
                x = flat.reshape(x.shape)
            # BUG std_no_eps: per-batch standardisation `(x - x.mean(0)) / x.std(0)` without an eps: a constant column is 0/0
            flat = x.reshape(len(x), -1)
            x = ((flat - flat.mean(0)) / flat.std(0)).reshape(x.shape)
        if bug == "target_shard_scrambled" and s in cfg.get("bad_steps", ()):
            # BUG target_shard_scrambled: a re-exported shard whose label column was re-sorted independently of the rows
            y = y[torch.randperm(len(y), generator=gen(s))]
            if self.task == "reg":
                y = y * 3.0
        if bug == "raw_units_into_gate":
            # BUG raw_units_into_gate: the scaler fitted on the train split is never applied (`scaler.fit(X)` without
            # `transform`): raw units, about 40x the standardised range, go straight into the sigmoid/tanh gates
            x = x * 40.0
        return x, y

    def val_batches(self):
        out = []
        for j in range(0, len(self.VY), 128):
            x = self.VX[j:j + 128]
            if self.cfg.get("bug") in ("std_no_eps", "std_no_eps_guarded"):
                flat = x.reshape(len(x), -1)
                x = ((flat - flat.mean(0)) / (flat.std(0) + 1e-6)).reshape(x.shape)
            if self.cfg.get("bug") == "raw_units_into_gate":
                x = x * 40.0
            out.append((x, self.VY[j:j + 128]))
        return out

    def crit(self, out, y):
        return F.cross_entropy(out, y) if self.task == "cls" else F.mse_loss(out, y)

    def loss(self, model, b, train=True):
        x, y = b
        out = model(x)
        self.last_out = out
        if train and self.cfg.get("bug") == "preds_kept_with_graph":
            # BUG preds_kept_with_graph: `self.preds.append(out)` (not `out.detach()`) for an epoch-end metric that is only
            # computed at the end of training: every step's autograd graph and saved activations stay alive
            self.preds.append(out)
        if self.task == "cls":
            self.last_acc = float((out.argmax(-1) == y).float().mean())
        return self.crit(out, y)

    def layers(self, model):
        return model.first.weight, model.last.weight

    def probe_modules(self, model):
        return [model.probe] if hasattr(model, "probe") else []

    def embed(self, model, x):
        return model(x)


class Probe(nn.Module):
    def forward(self, x):
        return x


# ------------------------------------------------------------------ film: FiLM-conditioned MLP classifier
class FilmNet(nn.Module):
    def __init__(self, fin=12, fc=4, d=64, C=6):
        super().__init__()
        self.first = nn.Linear(fin, d)
        self.gen = nn.Linear(fc, 2 * d)
        self.h2 = nn.Linear(d, d)
        self.last = nn.Linear(d, C)
        self.probe = Probe()
        self.fin = fin

    def forward(self, x):
        a, c = x[:, :self.fin], x[:, self.fin:]
        gb = self.gen(c)
        gamma = self.probe(torch.sigmoid(gb[:, :64]))
        h = F.relu(self.first(a)) * 2 * gamma + gb[:, 64:]
        h = F.relu(self.h2(h))
        return self.last(h)


class Film(Family):
    loss_word = "ce"

    def make(self, n, g):
        C = 6
        y = torch.randint(0, C, (n,), generator=g)
        cond = torch.randint(0, 4, (n,), generator=g)
        protos = torch.randn(4, C, 12, generator=g) * 1.2
        x = protos[cond, y] + torch.randn(n, 12, generator=g)
        c = F.one_hot(cond, 4).float()
        flip = torch.rand(n, generator=g) < 0.08
        y = torch.where(flip, torch.randint(0, C, (n,), generator=g), y)
        return torch.cat([x, c], 1), y

    def model(self):
        return FilmNet()


# ------------------------------------------------------------------ maxout: maxout MLP classifier
class Maxout(nn.Module):
    def __init__(self, fin, d, k=3):
        super().__init__()
        self.lin = nn.Linear(fin, d * k)
        self.d, self.k = d, k

    def forward(self, x):
        return self.lin(x).view(*x.shape[:-1], self.d, self.k).max(-1).values


class MaxoutNet(nn.Module):
    def __init__(self, fin=16, d=48, C=5):
        super().__init__()
        self.m1 = Maxout(fin, d)
        self.m2 = Maxout(d, d)
        self.first = self.m1.lin
        self.last = nn.Linear(d, C)

    def forward(self, x):
        return self.last(self.m2(self.m1(x)))


class MaxoutFam(Family):
    loss_word = "nll"

    def make(self, n, g):
        C = 5
        y = torch.randint(0, C, (n,), generator=g)
        r = 1.0 + y.float() * 0.6
        z = torch.randn(n, 16, generator=g)
        z = z / z.norm(dim=1, keepdim=True) * r[:, None] + 0.25 * torch.randn(n, 16, generator=g)
        return z, y

    def model(self):
        return MaxoutNet()


# ------------------------------------------------------------------ nam: neural additive model (regression)
class NAM(nn.Module):
    def __init__(self, fin=8, h=32):
        super().__init__()
        self.first = nn.Linear(1, h * fin)  # feature nets as one grouped layer (weights per feature block)
        self.fin, self.h = fin, h
        self.w2 = nn.Parameter(torch.randn(fin, h, h) / math.sqrt(h))
        self.b2 = nn.Parameter(torch.zeros(fin, h))
        self.last = nn.Linear(fin * h, 1)
        self.probe = Probe()

    def forward(self, x):
        B = x.shape[0]
        w1 = self.first.weight.view(self.fin, self.h)
        b1 = self.first.bias.view(self.fin, self.h)
        h1 = self.probe(F.relu(x[:, :, None] * w1[None] + b1[None]))
        h2 = F.relu(torch.einsum("bfh,fhk->bfk", h1, self.w2) + self.b2)
        return self.last(h2.reshape(B, -1)).squeeze(-1)


class Nam(Family):
    loss_word = "mse"
    task = "reg"

    def make(self, n, g):
        x = torch.randn(n, 8, generator=g)
        y = torch.sin(2 * x[:, 0]) + 0.5 * x[:, 1] ** 2 - 0.7 * x[:, 2].abs() + 0.4 * torch.tanh(3 * x[:, 3]) + 0.2 * torch.randn(n, generator=g)
        return x, y

    def model(self):
        return NAM()


# ------------------------------------------------------------------ srcnn: super-resolution CNN (4x4 -> 8x8)
class SRCNN(nn.Module):
    def __init__(self, c=24):
        super().__init__()
        self.first = nn.Conv2d(1, c, 3, padding=1)
        self.mid = nn.Conv2d(c, c, 3, padding=1)
        self.last = nn.Conv2d(c, 1, 3, padding=1)
        self.probe = Probe()

    def forward(self, x):
        up = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        h = self.probe(F.relu(self.first(up)))
        h = F.relu(self.mid(h))
        return up + self.last(h)


class Srcnn(Family):
    loss_word = "l2"
    task = "reg"

    def make(self, n, g):
        u = torch.linspace(0, 1, 8)
        yy, xx = torch.meshgrid(u, u, indexing="ij")
        f = 2 + 4 * torch.rand(n, 1, 1, generator=g)
        th = math.pi * torch.rand(n, 1, 1, generator=g)
        ph = 6.28 * torch.rand(n, 1, 1, generator=g)
        hr = torch.sin(f * (xx * torch.cos(th) + yy * torch.sin(th)) * 3.14 + ph)[:, None]
        lr = F.avg_pool2d(hr, 2) + 0.05 * torch.randn(n, 1, 4, 4, generator=g)
        return lr, hr

    def model(self):
        return SRCNN()


# ------------------------------------------------------------------ transe: TransE knowledge-graph embedding
class TransE(nn.Module):
    def __init__(self, ne=120, nr=5, d=24):
        super().__init__()
        self.first = nn.Embedding(ne, d)
        self.last = nn.Embedding(nr, d)

    def score(self, h, r, t):
        return (self.first(h) + self.last(r) - self.first(t)).norm(p=2, dim=-1)

    def forward(self, x):
        return self.score(x[:, 0], x[:, 1], x[:, 2])


class Transe(Family):
    loss_word = "margin_loss"
    task = "kg"
    n_train = 1536

    def make(self, n, g):
        ne, nr = 120, 5
        # relations are hidden permutations over entity clusters
        perms = [torch.randperm(ne, generator=g) for _ in range(nr)]
        h = torch.randint(0, ne, (n,), generator=g)
        r = torch.randint(0, nr, (n,), generator=g)
        t = torch.stack([perms[int(rr)][int(hh)] for hh, rr in zip(h, r)])
        noise = torch.rand(n, generator=g) < 0.05
        t = torch.where(noise, torch.randint(0, ne, (n,), generator=g), t)
        return torch.stack([h, r, t], 1), torch.zeros(n)

    def model(self):
        return TransE()

    def loss(self, model, b, train=True):
        x, _ = b
        g = gen(int(x[:, 0].sum()))
        neg = x.clone()
        neg[:, 2] = torch.randint(0, 120, (len(x),), generator=g)
        pos_s = model(x)
        neg_s = model(neg)
        if train and self.cfg.get("bug") == "preds_kept_with_graph":
            self.preds.append(pos_s)  # BUG preds_kept_with_graph (see Family.loss)
        self.last_out = model.first(x[:, 0])
        return F.relu(1.0 + pos_s - neg_s).mean()

    def embed(self, model, x):
        return model.first(x[:, 0])


# ------------------------------------------------------------------ mbnet: MobileNetV2-lite classifier on 8x8 images
class InvRes(nn.Module):
    def __init__(self, c, e=4):
        super().__init__()
        self.exp = nn.Conv2d(c, c * e, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c * e)
        self.dw = nn.Conv2d(c * e, c * e, 3, padding=1, groups=c * e, bias=False)
        self.bn2 = nn.BatchNorm2d(c * e)
        self.proj = nn.Conv2d(c * e, c, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c)

    def forward(self, x):
        h = F.relu6(self.bn1(self.exp(x)))
        h = F.relu6(self.bn2(self.dw(h)))
        return x + self.bn3(self.proj(h))


class MbNet(nn.Module):
    def __init__(self, c=12, C=4):
        super().__init__()
        self.first = nn.Conv2d(1, c, 3, padding=1)
        self.probe = Probe()
        self.b1 = InvRes(c)
        self.b2 = InvRes(c)
        self.last = nn.Linear(c, C)

    def forward(self, x):
        h = self.probe(F.relu(self.first(x)))
        h = self.b2(self.b1(h))
        return self.last(h.mean((2, 3)))


class Mbnet(Family):
    loss_word = "cls_loss"

    def make(self, n, g):
        u = torch.linspace(-1, 1, 8)
        yy, xx = torch.meshgrid(u, u, indexing="ij")
        y = torch.randint(0, 4, (n,), generator=g)
        cx = 0.5 * torch.randn(n, 1, 1, generator=g)
        cy = 0.5 * torch.randn(n, 1, 1, generator=g)
        r2 = (xx - cx) ** 2 + (yy - cy) ** 2
        shapes = torch.stack([torch.exp(-r2 / 0.1), (r2 < 0.3).float(), ((xx - cx).abs() < 0.2).float(), ((yy - cy).abs() < 0.2).float()], 1)
        img = shapes[torch.arange(n), y] + 0.35 * torch.randn(n, 8, 8, generator=g)
        return img[:, None], y

    def model(self):
        return MbNet()


# ------------------------------------------------------------------ nalu: neural arithmetic logic unit regression
class NALU(nn.Module):
    def __init__(self, fin, fout):
        super().__init__()
        self.W_hat = nn.Parameter(torch.randn(fout, fin) * 0.3)
        self.M_hat = nn.Parameter(torch.randn(fout, fin) * 0.3)
        self.G = nn.Linear(fin, fout)
        self.probe = Probe()

    def forward(self, x):
        W = torch.tanh(self.W_hat) * torch.sigmoid(self.M_hat)
        a = x @ W.t()
        m = torch.exp(torch.log(x.abs() + 1e-3).clamp(max=6) @ W.t()).clamp(max=1e4)
        g = self.probe(torch.sigmoid(self.G(x)))
        return g * a + (1 - g) * m


class NaluNet(nn.Module):
    def __init__(self, fin=6, h=8):
        super().__init__()
        self.n1 = NALU(fin, h)
        self.n2 = NALU(h, 1)
        self.first = self.n1.G
        self.last = self.n2.G
        self.probe = self.n1.probe

    def forward(self, x):
        return self.n2(self.n1(x)).squeeze(-1)


class Nalu(Family):
    loss_word = "mse"
    task = "reg"

    def make(self, n, g):
        x = 0.5 + torch.rand(n, 6, generator=g) * 1.5
        y = x[:, 0] + x[:, 1] + 0.5 * x[:, 2] * x[:, 3] + 0.05 * torch.randn(n, generator=g)
        return x, y

    def model(self):
        return NaluNet()


FAMILIES = {"film": Film, "maxout": MaxoutFam, "nam": Nam, "srcnn": Srcnn, "transe": Transe, "mbnet": Mbnet, "nalu": Nalu}
