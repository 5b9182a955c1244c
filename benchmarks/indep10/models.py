"""indep10 model families and their seeded synthetic data. Bugs that live in a model, its loss or its data are marked BUG."""
import hashlib
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
    ncls = None

    def __init__(self, cfg, seed):
        self.cfg = cfg
        self.seed = seed
        g = gen(seed)
        self.Xtr, self.Ytr = self.make(self.cfg.get("n_train", self.n_train), g)
        self.Xva, self.Yva = self.make(self.n_val, g)
        if cfg.get("bug") == "coarse_dedupe":
            # BUG coarse_dedupe: a "near-duplicate" filter keys rows on (label, sign of the first 3 features); only the first row
            # of each key survives, so the train set shrinks to a few dozen rows
            seen, keep = set(), []
            flat = self.Xtr.reshape(self.Xtr.shape[0], -1).float()
            for i in range(flat.shape[0]):
                k = (int(self.Ytr[i]) if self.Ytr.dim() == 1 and not self.Ytr.is_floating_point() else round(float(self.Ytr.reshape(-1)[i]), 0),
                     tuple((flat[i, :3] > flat[:, :3].mean(0)).tolist()))
                if k not in seen:
                    seen.add(k)
                    keep.append(i)
            keep = torch.tensor(keep)
            self.Xtr, self.Ytr = self.Xtr[keep], self.Ytr[keep]
        self.bs = cfg.get("bs", 32)
        self.last_acc = None

    def ntr(self):
        return self.Ytr.shape[0]

    def batch_index(self, i, salt=0):
        n = self.ntr()
        nb = max(1, n // self.bs)
        ep, k = divmod(i, nb)
        perm = torch.randperm(n, generator=gen(self.seed * 1000 + ep + salt))
        return perm[k * self.bs:(k + 1) * self.bs] if n >= self.bs else perm

    def batches_per_epoch(self):
        return max(1, self.ntr() // self.bs)

    def train_batch(self, i):
        idx = self.batch_index(i)
        x, y = self.Xtr[idx].clone(), self.Ytr[idx].clone()
        if self.cfg.get("bug") == "label_map_per_epoch" and self.ncls:
            # BUG label_map_per_epoch: the label encoder is re-fitted on every epoch's shuffled shard (classes numbered by first
            # appearance), so the class -> index mapping changes at every epoch boundary
            ep = i // self.batches_per_epoch()
            first = []
            for c in self.Ytr[torch.randperm(self.ntr(), generator=gen(self.seed * 1000 + ep))].tolist():
                if c not in first:
                    first.append(c)
            mp = torch.tensor([first.index(c) for c in range(self.ncls)])
            y = mp[y]
        return x, y

    def val_batches(self):
        yield self.Xva, self.Yva

    def acc(self, logits, y):
        self.last_acc = float((logits.argmax(-1) == y).float().mean())

    def layers(self, model):
        ps = [p for p in model.parameters() if p.dim() > 1]
        return ps[0], ps[-1]


def make_images(n, g, noise=0.8):
    y = torch.randint(0, 4, (n,), generator=g)
    X = torch.zeros(n, 1, 8, 8)
    ii, jj = torch.meshgrid(torch.arange(8), torch.arange(8), indexing="ij")
    for i in range(n):
        ph = int(torch.randint(0, 2, (1,), generator=g))
        c = int(y[i])
        if c == 0:
            m = ((ii + ph) % 2 == 0)
        elif c == 1:
            m = ((jj + ph) % 2 == 0)
        elif c == 2:
            m = ((ii + jj + ph) % 3 == 0)
        else:
            m = (((ii // 2) + (jj // 2) + ph) % 2 == 0)
        X[i, 0] = m.float()
    return X + noise * torch.randn(X.shape, generator=g), y


# ---------------------------------------------------------------- convnext: ConvNeXt-tiny-ish
class LN2d(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln = nn.LayerNorm(c)

    def forward(self, x):
        return self.ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class CNBlock(nn.Module):
    def __init__(self, c, ls_init):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.ln = nn.LayerNorm(c)
        self.pw1 = nn.Linear(c, 4 * c)
        self.act = nn.GELU()
        self.pw2 = nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(ls_init * torch.ones(c))

    def forward(self, x):
        h = self.dw(x).permute(0, 2, 3, 1)
        h = self.pw2(self.act(self.pw1(self.ln(h))))
        return x + (self.gamma * h).permute(0, 3, 1, 2)


class ConvNeXtTiny(nn.Module):
    def __init__(self, c=32, ls_init=1e-6, ncls=4, nblocks=2):
        super().__init__()
        self.stem = nn.Conv2d(1, c, 2, stride=2)
        self.stem_ln = LN2d(c)
        self.blocks = nn.Sequential(*[CNBlock(c, ls_init) for _ in range(nblocks)])
        self.head_ln = nn.LayerNorm(c)
        self.head = nn.Linear(c, ncls)

    def forward(self, x):
        h = self.blocks(self.stem_ln(self.stem(x)))
        return self.head(self.head_ln(h.mean((2, 3))))


class Convnext(Family):
    loss_word = "ce"
    ncls = 4

    def make(self, n, g):
        return make_images(n, g, self.cfg.get("noise", 0.8))

    def model(self):
        # layer-scale init 1e-6 as in ConvNeXt; BUG layerscale_init_typo: typed 1e6
        ls = 1e6 if self.cfg.get("bug") == "layerscale_init_typo" else self.cfg.get("ls_init", 0.1)
        return ConvNeXtTiny(c=self.cfg.get("width", 32), ls_init=ls)

    def loss(self, model, b, train=True):
        x, y = b
        L = model(x)
        self.acc(L, y)
        return F.cross_entropy(L, y)

    def layers(self, model):
        return model.stem.weight, model.head.weight


# ---------------------------------------------------------------- fm: factorization machine (CTR)
class FM(nn.Module):
    def __init__(self, nf=6, vocab=30, nnum=3, k=8, registered=True, detach_pairs=False):
        super().__init__()
        self.nf, self.vocab = nf, vocab
        self.w = nn.Embedding(nf * vocab, 1)
        self.wn = nn.Linear(nnum, 1)
        v = nn.Parameter(0.05 * torch.randn(nf * vocab, k))
        if registered:
            self.v = v
        else:
            self._v = [v]  # BUG param_not_registered: factor matrix kept in a Python list, so model.parameters() never sees it
        self.detach_pairs = detach_pairs
        nn.init.zeros_(self.w.weight)

    def V(self):
        return self.v if hasattr(self, "v") and isinstance(getattr(self, "v", None), nn.Parameter) else self._v[0]

    def forward(self, x):
        cat = x[:, :self.nf].long() + torch.arange(self.nf) * self.vocab
        num = x[:, self.nf:]
        e = F.embedding(cat, self.V())  # B, nf, k
        if self.detach_pairs:
            e = e.detach()  # BUG fm_pair_detached: pairwise embeddings taken from a .detach()ed copy (meant for a logging norm)
        pair = 0.5 * ((e.sum(1) ** 2) - (e ** 2).sum(1)).sum(1)
        return self.w(cat).sum((1, 2)) + self.wn(num).squeeze(1) + pair


class Fm(Family):
    loss_word = "logloss"
    NF, VOC = 6, 30

    def make(self, n, g):
        cat = torch.randint(0, self.VOC, (n, self.NF), generator=g)
        num = torch.randn(n, 3, generator=g) * torch.tensor([1.0, 3.0, 0.5]) + torch.tensor([0.0, 10.0, -2.0])
        if not hasattr(self, "Vt"):
            gg = gen(4242)
            self.Vt = torch.randn(self.NF * self.VOC, 4, generator=gg) * 0.9
            self.wt = torch.randn(self.NF * self.VOC, generator=gg) * 0.3
        idx = cat + torch.arange(self.NF) * self.VOC
        e = self.Vt[idx]
        pair = 0.5 * ((e.sum(1) ** 2) - (e ** 2).sum(1)).sum(1)
        z = self.wt[idx].sum(1) + 0.5 * (num[:, 0]) + pair - 0.3
        y = (torch.rand(n, generator=g) < torch.sigmoid(z)).float()
        return torch.cat([cat.float(), num], 1), y

    def train_batch(self, i):
        x, y = super().train_batch(i)
        bug = self.cfg.get("bug")
        if bug == "hash_per_row_python":
            # BUG hash_per_row_python: the hashing trick computed per row and per field with hashlib in the main process
            rows = x[:, :self.NF].long().tolist()
            for r in rows:
                for q in range(self.cfg.get("hash_passes", 8)):
                    for j, v in enumerate(r):
                        hashlib.md5(f"f{j}={v}|salt{q}".encode()).hexdigest()
        if bug == "batch_std_zero" and self.cfg.get("_step") in self.cfg.get("bad_steps", ()):
            x = x.clone()
            x[:, self.NF + 2] = -2.0  # a shard written with the third numeric column filled by its default value (constant)
        if bug == "outlier_rows_unclipped" and self.cfg.get("_step") in self.cfg.get("bad_steps", ()):
            x = x.clone()
            x[:4, self.NF] *= self.cfg.get("glitch", 1000.0)  # sensor glitch rows, never clipped
        return self.norm(x), y

    def norm(self, x):
        num = x[:, self.NF:]
        if self.cfg.get("bug") == "batch_std_zero":
            # BUG batch_std_zero: numeric columns standardised with per-batch statistics and no epsilon (0/0 on a constant column)
            num = (num - num.mean(0)) / num.std(0)
        else:
            num = (num - torch.tensor([0.0, 10.0, -2.0])) / torch.tensor([1.0, 3.0, 0.5])
        return torch.cat([x[:, :self.NF], num], 1)

    def val_batches(self):
        x = self.Xva
        num = (x[:, self.NF:] - torch.tensor([0.0, 10.0, -2.0])) / torch.tensor([1.0, 3.0, 0.5])
        yield torch.cat([x[:, :self.NF], num], 1), self.Yva

    def model(self):
        bug = self.cfg.get("bug")
        return FM(self.NF, self.VOC, 3, 8, registered=bug != "param_not_registered", detach_pairs=bug == "fm_pair_detached")

    def loss(self, model, b, train=True):
        x, y = b
        z = model(x)
        self.last_acc = float(((z > 0).float() == y).float().mean())
        return F.binary_cross_entropy_with_logits(z, y)

    def layers(self, model):
        return model.w.weight, model.wn.weight


# ---------------------------------------------------------------- indrnn: independently recurrent network on the adding problem
class IndRNNLayer(nn.Module):
    def __init__(self, a, h, act="relu", u_lo=0.0, u_hi=1.0):
        super().__init__()
        self.W = nn.Linear(a, h)
        self.u = nn.Parameter(torch.empty(h).uniform_(u_lo, u_hi))
        self.act = {"relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}[act]

    def forward(self, x):  # B, T, a
        z = self.W(x)
        h = torch.zeros(x.shape[0], z.shape[2])
        out = []
        for t in range(x.shape[1]):
            h = self.act(z[:, t] + self.u * h)
            out.append(h)
        return torch.stack(out, 1)


class IndRNN(nn.Module):
    def __init__(self, H=32, depth=2, act="relu", u_lo=0.0, u_hi=1.0):
        super().__init__()
        self.layers_ = nn.ModuleList([IndRNNLayer(2 if i == 0 else H, H, act, u_lo, u_hi) for i in range(depth)])
        self.out = nn.Linear(H, 1)

    def forward(self, x):
        for l in self.layers_:
            x = l(x)
        return self.out(x[:, -1]).squeeze(1)


class Indrnn(Family):
    loss_word = "add_mse"
    T = 20

    def make(self, n, g):
        v = torch.rand(n, self.T, generator=g)
        m = torch.zeros(n, self.T)
        for i in range(n):
            a, b = torch.randperm(self.T, generator=g)[:2]
            m[i, a] = 1
            m[i, b] = 1
        y = (v * m).sum(1) + 0.05 * torch.randn(n, generator=g)
        return torch.stack([v, m], 2), y

    def model(self):
        bug = self.cfg.get("bug")
        if bug == "indrnn_sigmoid_stack":
            # BUG indrnn_sigmoid_stack: sigmoid in a 6-layer IndRNN stack (the ReLU of the reference replaced "for bounded states")
            return IndRNN(32, 6, "sigmoid")
        if bug == "indrnn_uncapped":
            # BUG indrnn_uncapped: recurrent weights initialised in [0.9, 1.15] and the |u| <= 1 clamp after each step missing
            return IndRNN(32, 2, "relu", 0.9, 1.15)
        return IndRNN(32, 2, "relu", 0.0, 1.0)

    def loss(self, model, b, train=True):
        x, y = b
        return F.mse_loss(model(x), y)

    def after_step(self, model, s):
        if self.cfg.get("bug") not in ("indrnn_uncapped",):
            with torch.no_grad():
                for l in model.layers_:
                    l.u.clamp_(-1.0, 1.0)

    def layers(self, model):
        return model.layers_[0].W.weight, model.out.weight


# ---------------------------------------------------------------- kernelnet: deep-kernel RBF network (GP-ish)
class KernelNet(nn.Module):
    def __init__(self, C=48, H=64, registered=True):
        super().__init__()
        self.feat = nn.Sequential(nn.Linear(2, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU(), nn.Linear(H, 4))
        c = nn.Parameter(torch.randn(C, 4))
        ls = nn.Parameter(torch.zeros(4))
        if registered:
            self.centers, self.log_ls = c, ls
        else:
            self._extra = [c, ls]  # BUG param_not_registered: centres and length-scales in a plain list (never optimised)
        self.out = nn.Linear(C, 1)

    def cl(self):
        return (self.centers, self.log_ls) if hasattr(self, "centers") else tuple(self._extra)

    def forward(self, x):
        f = self.feat(x)
        c, ls = self.cl()
        d2 = (((f[:, None, :] - c[None]) / ls.exp()) ** 2).sum(-1)
        return self.out(torch.exp(-0.5 * d2)).squeeze(1)


class Kernelnet(Family):
    loss_word = "rbf_mse"

    def make(self, n, g):
        x = torch.rand(n, 2, generator=g) * 4 - 2
        y = torch.sin(2 * x[:, 0]) * torch.cos(1.5 * x[:, 1]) + 0.3 * x[:, 0] ** 2 + 0.1 * torch.randn(n, generator=g)
        return x, y

    def model(self):
        m = KernelNet(registered=self.cfg.get("bug") != "param_not_registered")
        if self.cfg.get("bug") == "zero_init_all":
            for mod in m.modules():
                if isinstance(mod, nn.Linear):
                    nn.init.zeros_(mod.weight)
        return m

    def train_batch(self, i):
        x, y = super().train_batch(i)
        if self.cfg.get("bug") == "outlier_rows_unclipped" and self.cfg.get("_step") in self.cfg.get("bad_steps", ()):
            y = y.clone()
            y[:3] *= self.cfg.get("glitch", 200.0)  # BUG outlier_rows_unclipped: glitched target rows, never clipped
        return x, y

    def loss(self, model, b, train=True):
        x, y = b
        return F.mse_loss(model(x), y)

    def layers(self, model):
        return model.feat[0].weight, model.out.weight

    def probe_modules(self, model):
        return [model.feat[3]]


# ---------------------------------------------------------------- sdt: soft decision tree (Frosst & Hinton style)
class SDT(nn.Module):
    def __init__(self, d_in=16, depth=4, ncls=4, temp=1.0):
        super().__init__()
        self.depth = depth
        self.inner = nn.Linear(d_in, 2 ** depth - 1)
        self.leaf = nn.Parameter(0.1 * torch.randn(2 ** depth, ncls))
        self.temp = temp

    def forward(self, x):
        g = torch.sigmoid(self.inner(x) / self.temp)  # B, nodes
        self.gates = g
        B = x.shape[0]
        mu = torch.ones(B, 1)
        paths = []
        k = 0
        for d in range(self.depth):
            n = 2 ** d
            gd = g[:, k:k + n]
            paths.append(mu)
            mu = torch.stack([mu * gd, mu * (1 - gd)], 2).reshape(B, 2 * n)
            k += n
        self.paths = paths
        return mu @ self.leaf


class Sdt(Family):
    loss_word = "tree_nll"
    ncls = 4

    def make(self, n, g):
        if not hasattr(self, "C"):
            self.C = torch.randn(4, 16, generator=gen(77)) * 1.2
        y = torch.randint(0, 4, (n,), generator=g)
        x = self.C[y] + torch.randn(n, 16, generator=g)
        return x, y

    def model(self):
        # temperature: BUG gate_temp_inverted: an inverse temperature of 0.01 used as the temperature (logits / 0.01)
        return SDT(16, 4, 4, 0.01 if self.cfg.get("bug") == "gate_temp_inverted" else 1.0)

    def train_batch(self, i):
        x, y = super().train_batch(i)
        if self.cfg.get("_step") in self.cfg.get("bad_steps", ()):
            x = x * self.cfg.get("corrupt_mult", 60.0)  # a shard exported in raw units (x60)
        return x, y

    def loss(self, model, b, train=True):
        x, y = b
        L = model(x)
        self.acc(L, y)
        g = model.gates.detach()
        self.sat_now = float(((g > 0.99) | (g < 0.01)).float().mean())
        ce = F.cross_entropy(L, y)
        # tree balance penalty: alpha = sum(P * p) / sum(P) per inner node, penalty -0.5 (log a + log(1-a))
        pen, k = 0.0, 0
        for d, P in enumerate(model.paths):
            n = P.shape[1]
            gd = model.gates[:, k:k + n]
            if self.cfg.get("bug") == "sdt_penalty_noeps":
                a = (P * gd).sum(0) / P.sum(0)  # BUG sdt_penalty_noeps: no epsilon; a node nobody reaches gives 0/0
            else:
                a = (P * gd).sum(0) / (P.sum(0) + 1e-6)
            a = a.clamp(1e-4, 1 - 1e-4) if self.cfg.get("bug") != "sdt_penalty_noeps" else a
            pen = pen + (-0.5 * (torch.log(a) + torch.log(1 - a))).mean() * 2.0 ** (-d)
            k += n
        w = self.cfg.get("pen_w", 0.05)
        if self.cfg.get("bug") == "aux_weight_ramp_typo":
            w = w * 1.025 ** self.cfg.get("_step", 0)  # BUG aux_weight_ramp_typo: ramp written 1.025**step (meant min(1, step/100))
        if not train:
            return ce
        return ce + w * pen

    def layers(self, model):
        return model.inner.weight, model.leaf


# ---------------------------------------------------------------- barlow: Barlow Twins on two noisy views
class Enc(nn.Module):
    def __init__(self, d=24, H=128, P=64):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(d, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU())
        self.proj = nn.Sequential(nn.Linear(H, H), nn.BatchNorm1d(H), nn.ReLU(), nn.Linear(H, P))

    def forward(self, x):
        return self.proj(self.enc(x))


class Barlow(Family):
    loss_word = "bt_loss"

    def make(self, n, g):
        if not hasattr(self, "C"):
            self.C = torch.randn(8, 24, generator=gen(91)) * 1.5
        y = torch.randint(0, 8, (n,), generator=g)
        return self.C[y] + 0.7 * torch.randn(n, 24, generator=g), y

    def views(self, x, g=None):
        n1 = torch.randn(x.shape, generator=g) * 0.5
        n2 = torch.randn(x.shape, generator=g) * 0.5
        m1 = (torch.rand(x.shape, generator=g) > 0.2).float()
        m2 = (torch.rand(x.shape, generator=g) > 0.2).float()
        return (x + n1) * m1, (x + n2) * m2

    def train_batch(self, i):
        x, y = super().train_batch(i)
        return self.views(x, gen(self.seed * 7 + i)), y

    def val_batches(self):
        yield self.views(self.Xva, gen(5)), self.Yva

    def model(self):
        return Enc()

    def loss(self, model, b, train=True):
        (x1, x2), _ = b
        z1, z2 = model(x1), model(x2)
        bug = self.cfg.get("bug")
        if bug in ("whiten_eigh_guard", "whiten_eigh_scaler") and self.cfg.get("_step", 0) >= self.cfg.get("bug_step", 0) and train:
            # BUG whiten_eigh_*: a W-MSE-style whitening term added at bug_step; the embedding is zero-padded to a multiple of 8
            # ("for tensor cores") before torch.linalg.eigh, so the covariance has repeated zero eigenvalues and eigh's backward
            # divides by (lambda_i - lambda_j) = 0: the gradient is NaN while the loss stays finite
            zp = torch.cat([z1, torch.zeros(z1.shape[0], 8)], 1)
            zc = zp - zp.mean(0)
            cov = zc.T @ zc / zp.shape[0]
            ev, V = torch.linalg.eigh(cov)
            W = V @ torch.diag(1.0 / torch.sqrt(ev.clamp_min(0) + 1e-3)) @ V.T
            w1 = zc @ W
            extra = 0.01 * w1[:, :z1.shape[1]].pow(2).mean()
        else:
            extra = 0.0
        n = z1.shape[0]
        a = (z1 - z1.mean(0)) / (z1.std(0) + 1e-5)
        b_ = (z2 - z2.mean(0)) / (z2.std(0) + 1e-5)
        c = a.T @ b_ / n
        on = (torch.diagonal(c) - 1).pow(2).sum()
        off = (c - torch.diag(torch.diagonal(c))).pow(2).sum()
        lam = self.cfg.get("lam", 0.005)
        if bug == "aux_weight_ramp_typo":
            lam = lam * 1.025 ** self.cfg.get("_step", 0)  # BUG aux_weight_ramp_typo: ramp 1.025**step (meant min(1, step/100))
        if not train:
            lam = self.cfg.get("lam", 0.005)
        return on + lam * off + extra

    def layers(self, model):
        return model.enc[0].weight, model.proj[3].weight


# ---------------------------------------------------------------- pg: REINFORCE with a learned baseline on a contextual bandit
class Policy(nn.Module):
    def __init__(self, d=8, H=64, A=4):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU())
        self.pi = nn.Linear(H, A)
        self.v = nn.Linear(H, 1)

    def forward(self, x):
        h = self.body(x)
        return self.pi(h), self.v(h).squeeze(1)


class Pg(Family):
    loss_word = "pg_loss"

    def make(self, n, g):
        if not hasattr(self, "R"):
            self.R = torch.rand(8, 4, generator=gen(313))  # mean reward per (context, arm)
        y = torch.randint(0, 8, (n,), generator=g)
        return F.one_hot(y, 8).float() + 0.1 * torch.randn(n, 8, generator=g), y

    def model(self):
        return Policy()

    def loss(self, model, b, train=True):
        x, ctx = b
        logits, v = model(x)
        g = gen(self.seed * 31 + self.cfg.get("_step", 0) + (0 if train else 99991))
        if self.cfg.get("bug") == "log_of_softmax":
            p = torch.softmax(logits, 1)
            logp_all = torch.log(p)  # BUG log_of_softmax: log(softmax(.)) instead of log_softmax; -inf once a probability underflows
        else:
            logp_all = F.log_softmax(logits, 1)
            p = logp_all.exp()
        a = torch.multinomial(p.detach().nan_to_num(0.25).clamp_min(0) + 1e-12, 1, generator=g).squeeze(1)
        r = (torch.rand(a.shape, generator=g) < self.R[ctx, a]).float()
        adv = r - v.detach()
        ent = -(p * logp_all).sum(1)
        if not train:
            # validation: expected regret of the greedy policy, all contexts
            self.last_acc = float((self.R[ctx, logits.argmax(1)]).mean())
            return (self.R[ctx].max(1).values - (p * self.R[ctx]).sum(1)).mean()
        return (-(logp_all.gather(1, a[:, None]).squeeze(1) * adv)).mean() + 0.5 * F.mse_loss(v, r) - self.cfg.get("ent", 0.01) * ent.mean()

    def layers(self, model):
        return model.body[0].weight, model.pi.weight

    def probe_modules(self, model):
        return [model.body[3]]


FAMILIES = {"convnext": Convnext, "fm": Fm, "indrnn": Indrnn, "kernelnet": Kernelnet, "sdt": Sdt, "barlow": Barlow, "pg": Pg}
