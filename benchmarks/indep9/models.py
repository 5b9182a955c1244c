"""indep9 model families and their seeded synthetic data. Bugs that live in a model, its loss or its data are marked BUG."""
import math
import random

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
        y = self.Ytr[idx].clone()
        if self.cfg.get("bug") == "label_perm_desync":
            # BUG label_perm_desync: the loader's shuffle was rewritten to draw inputs and labels with two separate permutations
            y = self.Ytr[self.batch_index(i, salt=777)].clone()
        x = self.Xtr[idx].clone()
        if self.cfg.get("bug") == "python_per_sample_aug":
            # BUG python_per_sample_aug: per-sample jitter written as a Python loop over elements in the main process
            rows = []
            for row in x.reshape(x.shape[0], -1).tolist():
                for _ in range(self.cfg.get("aug_passes", 6)):
                    row = [v + 0.0 * math.sin(v) for v in row]
                rows.append(row)
            x = torch.tensor(rows, dtype=x.dtype).reshape(x.shape)
        return x, y

    def val_batches(self):
        yield self.Xva, self.Yva

    def acc(self, logits, y):
        self.last_acc = float((logits.argmax(-1) == y).float().mean())


# ---------------------------------------------------------------- capsnet: capsule network with dynamic routing
def squash(s, dim=-1):
    n2 = (s ** 2).sum(dim, keepdim=True)
    return n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-8)


class CapsNet(nn.Module):
    def __init__(self, routing_dim=2, iters=3):
        super().__init__()
        self.conv = nn.Conv2d(1, 16, 3, padding=1)
        self.relu = nn.ReLU()
        self.prim = nn.Conv2d(16, 8 * 4, 3, stride=2)  # 8 capsule types x dim 4 on a 3x3 grid -> 72 capsules
        self.W = nn.Parameter(0.1 * torch.randn(72, 4, 8, 4))
        self.routing_dim = routing_dim
        self.iters = iters

    def forward(self, x):
        h = self.relu(self.conv(x))
        p = self.prim(h)  # B, 32, 3, 3
        B = p.shape[0]
        u = p.view(B, 8, 4, 9).permute(0, 1, 3, 2).reshape(B, 72, 4)
        u = squash(u)
        uh = torch.einsum("ijdk,bik->bijd", self.W, u)  # B, 72, 4, 8
        b = torch.zeros(B, 72, 4)
        for it in range(self.iters):
            c = F.softmax(b, dim=self.routing_dim)  # BUG routing_wrong_dim: dim=1 normalises over input capsules instead of output capsules
            v = squash((c.unsqueeze(-1) * uh).sum(1))  # B, 4, 8
            if it < self.iters - 1:
                b = b + (uh * v.unsqueeze(1)).sum(-1)
        return v.norm(dim=-1)


def make_images(n, g, noise=0.35):
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
    X = X + noise * torch.randn(X.shape, generator=g)
    return X, y


class Capsnet(Family):
    loss_word = "margin_loss"

    def make(self, n, g):
        return make_images(n, g, self.cfg.get("noise", 0.9))

    def model(self):
        return CapsNet(routing_dim=1 if self.cfg.get("bug") == "routing_wrong_dim" else 2)

    def loss(self, model, b, train=True):
        x, y = b
        L = model(x)
        self.acc(L, y)
        T = F.one_hot(y, 4).float()
        l = T * F.relu(0.9 - L) ** 2 + 0.5 * (1 - T) * F.relu(L - 0.1) ** 2
        return l.sum(1).mean()

    def layers(self, model):
        return model.conv.weight, model.W

    def probe_modules(self, model):
        return [model.relu]


# ---------------------------------------------------------------- wavenet: gated dilated causal conv, 16-level mu-law output
def mulaw(x, mu=15):
    return torch.sign(x) * torch.log1p(mu * x.abs()) / math.log1p(mu)


class WaveNet(nn.Module):
    def __init__(self, ch=16, dil=(1, 2, 4, 8), Q=16):
        super().__init__()
        self.inp = nn.Conv1d(1, ch, 2)
        self.tanh = nn.Tanh()
        self.filt = nn.ModuleList([nn.Conv1d(ch, ch, 2, dilation=d) for d in dil])
        self.gate = nn.ModuleList([nn.Conv1d(ch, ch, 2, dilation=d) for d in dil])
        self.res = nn.ModuleList([nn.Conv1d(ch, ch, 1) for _ in dil])
        self.out1 = nn.Conv1d(ch, ch, 1)
        self.out2 = nn.Conv1d(ch, Q, 1)
        self.dil = dil

    def forward(self, x):  # x: B, 1, T  -> logits B, Q, T (position t predicts sample t+1)
        h = self.tanh(self.inp(F.pad(x, (1, 0))))
        skip = 0
        for d, f, gt, r in zip(self.dil, self.filt, self.gate, self.res):
            hp = F.pad(h, (d, 0))
            z = torch.tanh(f(hp)) * torch.sigmoid(gt(hp))
            skip = skip + z
            h = h + r(z)
        return self.out2(F.relu(self.out1(F.relu(skip))))


class Wavenet(Family):
    loss_word = "wav_xent"

    def make(self, n, g):
        T = 65
        t = torch.arange(T).float()
        f1 = 0.05 + 0.25 * torch.rand(n, 1, generator=g)
        f2 = 0.05 + 0.25 * torch.rand(n, 1, generator=g)
        a = 0.3 + 0.5 * torch.rand(n, 1, generator=g)
        x = a * torch.sin(f1 * t) + 0.3 * torch.sin(f2 * t + 1.0) + 0.03 * torch.randn(n, T, generator=g)
        x = x.clamp(-1, 1)
        q = ((mulaw(x) + 1) / 2 * 15).round().long().clamp(0, 15)
        return x, q

    def model(self):
        return WaveNet()

    def loss(self, model, b, train=True):
        x, q = b
        inp = mulaw(x[:, :-1]) if self.cfg.get("bug") != "no_mulaw_input" else x[:, :-1] * 32767.0  # BUG no_mulaw_input: raw 16-bit PCM, no companding
        logits = model(inp.unsqueeze(1))
        l = F.cross_entropy(logits, q[:, 1:])
        if train and self.cfg.get("bug") in ("where_nan_grad",) and self.cfg.get("_step", 0) >= self.cfg.get("bug_step", 0):
            # BUG where_nan_grad: a "confidence" entropy bonus on a sharpened softmax guarded with torch.where; once a
            # probability underflows to exactly 0 the unused branch's gradient (0 * log 0) is NaN
            p = F.softmax(logits / 0.01, dim=1)
            ent = torch.where(p > 0, p * torch.log(p), torch.zeros_like(p)).sum(1).mean()
            l = l - 1e-3 * ent
        self.last_acc = float((logits.argmax(1) == q[:, 1:]).float().mean())
        return l

    def layers(self, model):
        return model.inp.weight, model.out2.weight

    def probe_modules(self, model):
        return [model.tanh]


# ---------------------------------------------------------------- performer: FAVOR+ linear attention classifier
class FavorAttn(nn.Module):
    def __init__(self, d=32, m=32, seed=0):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.register_buffer("Wr", torch.randn(m, d, generator=gen(seed)))
        self.d = d

    def feat(self, x):
        # positive random features (FAVOR+): exp(w.x - |x|^2/2) with x scaled by d^-1/4, stabilised by a max shift
        x = x / self.d ** 0.25
        proj = x @ self.Wr.T
        return torch.exp(proj - (x ** 2).sum(-1, keepdim=True) / 2 - proj.max().detach()) + 1e-6

    def forward(self, x):
        q, k, v = self.feat(self.q(x)), self.feat(self.k(x)), self.v(x)
        kv = torch.einsum("bnm,bnd->bmd", k, v)
        z = 1.0 / (torch.einsum("bnm,bm->bn", q, k.sum(1)) + 1e-6)
        return self.o(torch.einsum("bnm,bmd,bn->bnd", q, kv, z))


class PerformerNet(nn.Module):
    def __init__(self, V=16, L=32, d=32, ncls=4):
        super().__init__()
        self.emb = nn.Embedding(V, d)
        self.pos = nn.Parameter(0.1 * torch.randn(L, d))
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = FavorAttn(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, ncls)

    def forward(self, x):
        h = self.emb(x) + self.pos
        h = h + self.attn(self.ln1(h))
        h = h + self.ff(self.ln2(h))
        return self.head(h.mean(1))


class Performer(Family):
    loss_word = "xent"

    def make(self, n, g):
        x = torch.randint(5, 16, (n, 32), generator=g)
        y = torch.randint(0, 4, (n,), generator=g)
        for i in range(n):
            pos = torch.randperm(32, generator=g)[:10]
            x[i, pos[:5]] = 1 + int(y[i])
            other = torch.randint(1, 5, (5,), generator=g)
            x[i, pos[5:]] = other
        flip = torch.rand(n, generator=g) < 0.05
        y[flip] = torch.randint(0, 4, (int(flip.sum()),), generator=g)
        return x, y

    def model(self):
        return PerformerNet()

    def loss(self, model, b, train=True):
        x, y = b
        lo = model(x)
        self.acc(lo, y)
        ls = 1.0 if (train and self.cfg.get("bug") == "label_smooth_one") else 0.0  # BUG label_smooth_one: label_smoothing=1.0 (meant 0.1)
        return F.cross_entropy(lo, y, label_smoothing=ls)

    def layers(self, model):
        return model.emb.weight, model.head.weight


# ---------------------------------------------------------------- nbeats: generic N-BEATS forecaster
class NBeatsBlock(nn.Module):
    def __init__(self, Lb=24, Lf=8, H=64, depth=3, act="relu"):
        super().__init__()
        layers = []
        a = Lb
        for _ in range(depth):
            layers += [nn.Linear(a, H), nn.ReLU() if act == "relu" else nn.Sigmoid()]
            a = H
        self.fc = nn.Sequential(*layers)
        self.back = nn.Linear(H, Lb)
        self.fore = nn.Linear(H, Lf)

    def forward(self, x):
        h = self.fc(x)
        return self.back(h), self.fore(h)


class NBeats(nn.Module):
    def __init__(self, nblocks=3, depth=3, act="relu", chain=False):
        super().__init__()
        self.blocks = nn.ModuleList([NBeatsBlock(depth=depth, act=act) for _ in range(nblocks)])
        self.chain = chain

    def forward(self, x):
        f = 0
        for blk in self.blocks:
            b, fc = blk(x)
            if self.chain:
                x, f = b, fc  # BUG plain_chain_sigmoid: blocks chained on the backcast, forecast from the last block only
            else:
                x, f = x - b, f + fc
        return f


class Nbeats(Family):
    loss_word = "forecast_mse"

    def make(self, n, g):
        T = 32
        t = torch.arange(T).float()
        per = torch.randint(4, 12, (n, 1), generator=g).float()
        ph = 6.28 * torch.rand(n, 1, generator=g)
        tr = 0.03 * torch.randn(n, 1, generator=g)
        lvl = 0.5 * torch.randn(n, 1, generator=g)
        s = lvl + torch.sin(6.283 * t / per + ph) + tr * t + 0.1 * torch.randn(n, T, generator=g)
        return s[:, :24], s[:, 24:]

    def model(self):
        bug = self.cfg.get("bug")
        if bug == "plain_chain_sigmoid":
            m = NBeats(nblocks=6, depth=4, act="sigmoid", chain=True)
        else:
            m = NBeats(nblocks=3, depth=3)
        if bug == "init_gain_x5":
            with torch.no_grad():
                for mod in m.modules():
                    if isinstance(mod, nn.Linear):
                        mod.weight.mul_(self.cfg.get("gain", 5.0))  # BUG init_gain_x5: gain applied to every layer (meant for the last)
        if bug == "gate_bias_init_all":
            with torch.no_grad():
                for mod in m.modules():
                    if isinstance(mod, nn.Linear):
                        nn.init.constant_(mod.bias, -3.0)  # BUG gate_bias_init_all: a highway-gate bias init (-3) applied to every Linear
        return m

    def loss(self, model, b, train=True):
        x, y = b
        return F.mse_loss(model(x), y)

    def layers(self, model):
        return model.blocks[0].fc[0].weight, model.blocks[-1].fore.weight

    def probe_modules(self, model):
        return [model.blocks[0].fc[1]]


# ---------------------------------------------------------------- dqn: deep Q-learning on a chain MDP with replay
class QNet(nn.Module):
    def __init__(self, S=10, H=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(S, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU(), nn.Linear(H, 2))

    def forward(self, x):
        return self.net(x)


class Dqn(Family):
    loss_word = "td_loss"
    NS = 10

    def __init__(self, cfg, seed):
        self.cfg, self.seed = cfg, seed
        self.bs = cfg.get("bs", 64)
        self.g = gen(seed)
        self.rng = random.Random(seed)
        self.envs = 32
        self.state = torch.zeros(self.envs, dtype=torch.long)
        self.buf = []
        self.prio = []
        self.cap = 20000
        self.gamma = 0.95
        self.target = None
        self.last_acc = None
        # validation: a fixed set of transitions (all states x actions), exact environment
        s = torch.arange(self.NS - 1).repeat_interleave(2)
        a = torch.arange(2).repeat(self.NS - 1)
        self.val = self.transitions(s, a)

    def transitions(self, s, a):
        s2 = (s + (2 * a - 1)).clamp(0, self.NS - 1)
        done = s2 == self.NS - 1
        r = torch.where(done, torch.ones_like(s2, dtype=torch.float), torch.full_like(s2, -0.01, dtype=torch.float))
        return s, a, r, s2, done

    def onehot(self, s):
        return F.one_hot(s, self.NS).float()

    def batches_per_epoch(self):
        return 50

    def model(self):
        m = QNet(self.NS, self.cfg.get("hid", 64))
        import copy
        self.target = copy.deepcopy(m)
        return m

    def act(self, model):
        with torch.no_grad():
            q = model(self.onehot(self.state))
        greedy = q.argmax(1)
        rnd = torch.randint(0, 2, (self.envs,), generator=self.g)
        eps = torch.rand(self.envs, generator=self.g) < 0.3
        a = torch.where(eps, rnd, greedy)
        s, a, r, s2, done = self.transitions(self.state, a)
        for i in range(self.envs):
            self.buf.append((int(s[i]), int(a[i]), float(r[i]), int(s2[i]), bool(done[i])))
            self.prio.append(1.0)
        if len(self.buf) > self.cap:
            del self.buf[:len(self.buf) - self.cap]
            del self.prio[:len(self.prio) - self.cap]
        self.state = torch.where(done, torch.zeros_like(s2), s2)

    def train_batch(self, i):
        return (None, i)

    def td(self, model, s, a, r, s2, done):
        q = model(self.onehot(s)).gather(1, a.view(-1, 1)).squeeze(1)
        with torch.no_grad():
            nq = self.target(self.onehot(s2)).max(1).values
            tgt = r + self.gamma * nq * (~done).float()
        return F.smooth_l1_loss(q, tgt, reduction="none")

    def loss(self, model, b, train=True):
        if not train:
            return self.td(model, *self.val).mean()
        self.model_ref = model
        self.act(model)
        idx = [self.rng.randrange(len(self.buf)) for _ in range(self.bs)]
        tr = [self.buf[j] for j in idx]
        s = torch.tensor([t[0] for t in tr])
        a = torch.tensor([t[1] for t in tr])
        r = torch.tensor([t[2] for t in tr])
        s2 = torch.tensor([t[3] for t in tr])
        done = torch.tensor([t[4] for t in tr])
        l = self.td(model, s, a, r, s2, done)
        if self.cfg.get("bug") == "priority_keeps_graph":
            for j, v in zip(idx, l):
                self.prio[j] = v + 1e-3  # BUG priority_keeps_graph: priorities stored as tensors without .detach() (each keeps its batch graph)
        else:
            for j, v in zip(idx, l.detach().tolist()):
                self.prio[j] = v + 1e-3
        return l.mean()

    def val_batches(self):
        yield (None, None)

    def after_step(self, model, s):
        if (s + 1) % self.cfg.get("sync_every", 50) == 0:
            self.target.load_state_dict(model.state_dict())
        if self.cfg.get("bug") == "per_full_resort" and (s + 1) % self.cfg.get("resort_every", 40) == 0:
            # BUG per_full_resort: the prioritized-replay "tree" is a Python list re-sorted in full (several passes) every N steps
            for _ in range(self.cfg.get("resort_passes", 12)):
                order = sorted(range(len(self.prio)), key=lambda j: float(self.prio[j]) + 1e-9 * j)
            self._order = order

    def layers(self, model):
        return model.net[0].weight, model.net[4].weight

    def probe_modules(self, model):
        return [model.net[1]]


# ---------------------------------------------------------------- kan: FastKAN (Gaussian RBF basis + SiLU base) regressor
class KANLayer(nn.Module):
    def __init__(self, a, b, grid=8):
        super().__init__()
        self.register_buffer("centers", torch.linspace(-2, 2, grid))
        self.ln = nn.LayerNorm(a)
        self.spline = nn.Linear(a * grid, b)
        self.base = nn.Linear(a, b)

    def forward(self, x):
        h = self.ln(x)
        phi = torch.exp(-((h.unsqueeze(-1) - self.centers) / 0.5) ** 2)
        return self.spline(phi.flatten(1)) + self.base(F.silu(x))


class KAN(nn.Module):
    def __init__(self, H=16, grid=8):
        super().__init__()
        self.l1 = KANLayer(2, H, grid)
        self.l2 = KANLayer(H, H, grid)
        self.l3 = nn.Linear(H, 2)

    def forward(self, x):
        return self.l3(self.l2(self.l1(x)))


class Kan(Family):
    loss_word = "kan_mse"

    def make(self, n, g):
        x = 2 * torch.rand(n, 2, generator=g) - 1
        y = torch.sin(math.pi * x[:, 0]) * torch.cos(math.pi * x[:, 1]) + 0.5 * x[:, 0] ** 2 + 0.05 * torch.randn(n, generator=g)
        return x, y

    def model(self):
        return KAN(self.cfg.get("hid", 16), self.cfg.get("grid", 8))

    def __init__(self, cfg, seed):
        super().__init__(cfg, seed)
        if cfg.get("gauss"):
            self.loss_word = "gauss_nll"

    def loss(self, model, b, train=True):
        x, y = b
        o = model(x)
        if self.cfg.get("gauss"):  # heteroscedastic Gaussian NLL (goes negative once sigma < ~0.6)
            return 0.5 * (o[:, 1] + (y - o[:, 0]) ** 2 * torch.exp(-o[:, 1])).mean()
        return F.mse_loss(o[:, 0], y)

    def layers(self, model):
        return model.l1.spline.weight, model.l3.weight


# ---------------------------------------------------------------- pixelcnn: masked-conv inpainting model on 8x8 binary images
class MaskedConv(nn.Conv2d):
    def __init__(self, a, b, k, kind):
        super().__init__(a, b, k, padding=k // 2)
        m = torch.ones_like(self.weight)
        c = k // 2
        m[:, :, c, c + (1 if kind == "B" else 0):] = 0
        m[:, :, c + 1:] = 0
        self.register_buffer("mask", m)

    def forward(self, x):
        return F.conv2d(x, self.weight * self.mask, self.bias, padding=self.padding)


class PixelCNN(nn.Module):
    def __init__(self, ch=24):
        super().__init__()
        self.a = MaskedConv(1, ch, 5, "A")
        self.b1 = MaskedConv(ch, ch, 3, "B")
        self.b2 = MaskedConv(ch, ch, 3, "B")
        self.out = nn.Conv2d(ch, 1, 1)

    def forward(self, x):
        h = F.relu(self.a(x))
        h = h + F.relu(self.b1(h))
        h = h + F.relu(self.b2(h))
        return self.out(h)


class Pixelcnn(Family):
    loss_word = "bce"

    def make(self, n, g):
        X = torch.zeros(n, 1, 8, 8)
        for i in range(n):
            k = int(torch.randint(0, 3, (1,), generator=g))
            p = int(torch.randint(1, 7, (1,), generator=g))
            if k == 0:
                X[i, 0, p, :] = 1
                X[i, 0, :, p] = 1
            elif k == 1:
                X[i, 0, p - 1:p + 2, 1:7] = 1
            else:
                X[i, 0] = torch.eye(8).roll(p - 3, 1)
        X[:, :, 0, :] = 1  # a frame line that is always on (certain pixels)
        flip = torch.rand(X.shape, generator=g) < 0.03
        X[flip] = 1 - X[flip]
        X[:, :, 0, :] = 1
        # inpainting mask: only pixels in the lower part are scored
        M = torch.zeros_like(X)
        M[:, :, 2:, :] = 1
        M[:, :, 0, :] = 1
        return X, M

    def model(self):
        return PixelCNN()

    def loss(self, model, b, train=True):
        x, m = b
        if train and self.cfg.get("bug") == "empty_target_batch" and self.cfg.get("_step") in self.cfg.get("bad_steps", ()):
            m = torch.zeros_like(m)  # BUG empty_target_batch: a shard whose inpainting masks are all empty (crop of zero area)
        lo = model(x)
        if self.cfg.get("bug") == "hand_bce_log0":
            p = torch.sigmoid(lo)
            l = -(x * torch.log(p) + (1 - x) * torch.log(1 - p))  # BUG hand_bce_log0: hand-written BCE, log(0) once p rounds to 1.0
        else:
            l = F.binary_cross_entropy_with_logits(lo, x, reduction="none")
        return (l * m).sum() / m.sum()  # mean over scored pixels (0/0 for an empty mask)

    def layers(self, model):
        return model.a.weight, model.out.weight


FAMILIES = {"capsnet": Capsnet, "wavenet": Wavenet, "performer": Performer, "nbeats": Nbeats, "dqn": Dqn, "kan": Kan,
            "pixelcnn": Pixelcnn}
