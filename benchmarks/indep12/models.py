"""indep12 model families and their seeded synthetic data. Bugs that live in a model, its loss or its data are marked BUG."""
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
    n_val = 512

    def __init__(self, cfg, seed):
        self.cfg = cfg
        self.seed = seed
        g = gen(seed)
        self.Xtr, self.Ytr = self.make(self.cfg.get("n_train", self.n_train), g)
        self.Xva, self.Yva = self.make(self.n_val, g)
        if cfg.get("bug") == "glob_one_shard":
            # BUG glob_one_shard: the loader globs "train-0000*.pt" for shards named train-00000-of-00010 ... so only the first of
            # ten shards is read; the model trains on a tenth of the data
            k = self.ntr() // 10
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
        if self.cfg.get("bug") == "domain_blocks_noshuffle":
            # BUG domain_blocks_noshuffle: the shards were concatenated site by site and the sampler is SequentialSampler
            # (shuffle=False), so batches come in long single-site runs
            o = getattr(self, "site_order")
            return o[torch.arange(k * self.bs, (k + 1) * self.bs) % n]
        perm = torch.randperm(n, generator=gen(self.seed * 1000 + ep))
        return perm[k * self.bs:(k + 1) * self.bs]

    def batches_per_epoch(self):
        return max(1, self.ntr() // self.bs)

    def train_batch(self, i):
        ix = self.batch_index(i)
        return idx(self.Xtr, ix), self.Ytr[ix].clone()

    def val_batches(self):
        yield self.Xva, self.Yva

    def layers(self, model):
        ps = [p for p in model.parameters() if p.dim() > 1]
        return ps[0], ps[-1]

    def sweep(self, model):
        """an evaluation metric computed with Python loops (used by the metric_sweep_in_step bug)"""
        with torch.no_grad():
            tot = 0
            X, Y = self.Xva, self.Yva
            for q in range(Y.shape[0]):
                out = model(idx(X, slice(q, q + 1)))
                tot += int(out.reshape(-1)[0] > 0)
        return tot


# ---------------------------------------------------------------- txl: Transformer-XL-lite LM with segment-level memory
class XLLayer(nn.Module):
    def __init__(self, V=24, d=32, maxrel=48, scale_mul=False):
        super().__init__()
        self.scale_mul = scale_mul
        self.emb = nn.Embedding(V, d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.relb = nn.Parameter(torch.zeros(maxrel + 1))
        self.maxrel = maxrel
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, d))
        self.out = nn.Linear(d, V)

    def forward(self, x, mem=None):  # x: B,T
        h = self.emb(x)
        B, T, d = h.shape
        kv = h if mem is None else torch.cat([mem, h], 1)
        M = kv.shape[1] - T
        a = self.ln1(h)
        kvn = self.ln1(kv)
        if self.scale_mul:
            # BUG attn_scale_mul: scores multiplied by sqrt(d_head) where they must be divided by it; the softmax saturates
            att = self.q(a) @ self.k(kvn).transpose(1, 2) * math.sqrt(d)
        else:
            att = self.q(a) @ self.k(kvn).transpose(1, 2) / math.sqrt(d)
        qi = torch.arange(T)[:, None] + M
        ki = torch.arange(M + T)[None, :]
        rel = (qi - ki)
        att = att + self.relb[rel.clamp(0, self.maxrel)]
        att = att.masked_fill(rel < 0, float("-inf"))
        z = h + self.o(att.softmax(-1) @ self.v(kvn))
        z = z + self.ff(self.ln2(z))
        return self.out(z), z


class Txl(Family):
    loss_word = "nll"
    SEG = 16

    def make(self, n, g):
        # n streams' worth of tokens: order-1 Markov with a copy-from-16-back rule (needs the previous segment)
        V = 24
        L = 16 * 301
        S = 16
        P = torch.softmax(2.5 * torch.randn(V, V, generator=gen(77)), -1)
        x = torch.zeros(S, L, dtype=torch.long)
        x[:, :16] = torch.randint(0, V, (S, 16), generator=g)
        for t in range(16, L):
            cp = (x[:, t - 16] + 1) % V
            mk = torch.multinomial(P[x[:, t - 1]], 1, generator=g)[:, 0]
            use = torch.rand(S, generator=g) < 0.7
            x[:, t] = torch.where(use, cp, mk)
        return x, torch.zeros(S)

    def __init__(self, cfg, seed):
        super().__init__(cfg, seed)
        self.mem = None

    def ntr(self):
        return self.Xtr.shape[1] // self.SEG - 1

    def batches_per_epoch(self):
        return self.Xtr.shape[1] // self.SEG - 1

    def train_batch(self, i):
        j = i % self.batches_per_epoch()
        if j == 0:
            self.mem = None  # the streams restart at the top of each epoch
        s = j * self.SEG
        return self.Xtr[:, s:s + self.SEG].clone(), self.Xtr[:, s + 1:s + self.SEG + 1].clone()

    def val_batches(self):
        self.vmem = None
        for j in range(0, 12):
            s = j * self.SEG
            yield self.Xva[:8, s:s + self.SEG], self.Xva[:8, s + 1:s + self.SEG + 1]

    def model(self):
        return XLLayer(scale_mul=self.cfg.get("bug") == "attn_scale_mul")

    def loss(self, model, b, train=True):
        x, y = b
        if not train:
            logits, h = model(x, self.vmem)
            self.vmem = h[:, -32:] if self.vmem is None else torch.cat([self.vmem, h], 1)[:, -32:]
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        mem = self.mem if self.mem is not None and self.mem.shape[0] == x.shape[0] else None
        logits, h = model(x, mem)
        bug = self.cfg.get("bug")
        mem_len = 32
        if bug == "mems_not_carried":
            # BUG mems_not_carried: `logits, _ = model(x, mems)` -- the new memory returned by the model is discarded, so every
            # segment is trained with an empty memory
            pass
        elif bug == "mem_len_untruncated":
            # BUG mem_len_untruncated: `mems = torch.cat([mems, h.detach()], 1)` without the `[:, -mem_len:]` slice; the memory
            # (and the attention over it) grows every segment
            self.mem = h.detach() if mem is None else torch.cat([mem, h.detach()], 1)
        else:
            self.mem = (h.detach() if mem is None else torch.cat([mem, h.detach()], 1))[:, -mem_len:]
        self.last_acc = float((logits.argmax(-1) == y).float().mean())
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    def layers(self, model):
        return model.q.weight, model.out.weight

    def sweep(self, model):
        with torch.no_grad():
            tot = 0
            for s in range(0, 16 * 20, 1):
                out, _ = model(self.Xva[:1, s:s + 4])
                tot += int(out[0, -1].argmax())
        return tot


# ---------------------------------------------------------------- crf: BiGRU-CRF chunk tagger
class BiGRUCRF(nn.Module):
    def __init__(self, fin=12, H=24, K=5, probspace=False):
        super().__init__()
        self.inp = nn.Linear(fin, H)
        self.rnn = nn.GRU(H, H, batch_first=True, bidirectional=True)
        self.em = nn.Linear(2 * H, K)
        self.skip = nn.Linear(fin, K)
        self.trans = nn.Parameter(torch.zeros(K, K))
        self.probspace = probspace

    def emissions(self, x):
        h, _ = self.rnn(torch.relu(self.inp(x)))
        return self.em(h) + self.skip(x)

    def log_partition(self, e):  # e: B,T,K
        if self.probspace:
            # BUG crf_probspace_forward: forward algorithm in probability space (scaled alpha recursion) with exp() of the raw
            # emission scores and no max-shift; one very large emission overflows exp to inf
            B, T, K = e.shape
            P = torch.exp(self.trans)
            alpha = torch.exp(e[:, 0])
            logZ = torch.zeros(B)
            for t in range(1, T):
                c = alpha.sum(-1, keepdim=True)
                logZ = logZ + torch.log(c[:, 0])
                alpha = (alpha / c) @ P * torch.exp(e[:, t])
            return logZ + torch.log(alpha.sum(-1))
        a = e[:, 0]
        for t in range(1, e.shape[1]):
            a = torch.logsumexp(a[:, :, None] + self.trans[None], 1) + e[:, t]
        return torch.logsumexp(a, -1)

    def forward(self, x):
        return self.emissions(x)


class Crf(Family):
    loss_word = "crf_nll"
    n_train = 2048

    def make(self, n, g, T=12):
        # tokens carry 12-d feature vectors; two chunk types (B-X I-X, B-Y I-Y I-Y) start at trigger tokens
        tab = torch.randn(10, 12, generator=gen(99))
        tok = torch.randint(2, 10, (n, T), generator=g)
        tags = torch.zeros(n, T, dtype=torch.long)
        for i in range(n):
            t = 0
            while t < T:
                r = float(torch.rand(1, generator=g))
                if r < 0.15 and t + 2 <= T:
                    tok[i, t] = 0
                    tags[i, t], tags[i, t + 1] = 1, 2
                    t += 2
                elif r < 0.27 and t + 3 <= T:
                    tok[i, t] = 1
                    tags[i, t], tags[i, t + 1], tags[i, t + 2] = 3, 4, 4
                    t += 3
                else:
                    t += 1
        x = tab[tok] + 0.6 * torch.randn(n, T, 12, generator=g)
        return x, tags

    def model(self):
        return BiGRUCRF(probspace=self.cfg.get("bug") == "crf_probspace_forward")

    def train_batch(self, i):
        x, y = super().train_batch(i)
        if bad_step(self.cfg):
            # a shard exported before feature standardisation (raw counts, ~150x larger)
            x[:3] = x[:3] * 150.0
        return x, y

    def loss(self, model, b, train=True):
        x, y = b
        e = model.emissions(x)
        gold = e.gather(2, y[:, :, None])[:, :, 0].sum(1) + model.trans[y[:, :-1], y[:, 1:]].sum(1)
        self.last_acc = float((e.argmax(-1) == y).float().mean())
        return (model.log_partition(e) - gold).mean()

    def layers(self, model):
        return model.inp.weight, model.em.weight

    def probe_modules(self, model):
        return []

    def sweep(self, model):
        with torch.no_grad():
            tot = 0
            for q in range(120):
                e = model.emissions(self.Xva[q:q + 1])[0]
                for t in range(e.shape[0]):
                    tot += int(e[t].argmax()) == int(self.Yva[q, t])
        return tot


# ---------------------------------------------------------------- cnp: conditional neural process on random 1-D functions
class CNP(nn.Module):
    def __init__(self, H=48):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(2, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU(), nn.Linear(H, H))
        self.dec = nn.Sequential(nn.Linear(H + 1, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU(), nn.Linear(H, 2))

    def forward(self, xc, yc, xt):
        r = self.enc(torch.cat([xc, yc], -1)).mean(1, keepdim=True)  # mean over the context set
        o = self.dec(torch.cat([r.expand(-1, xt.shape[1], -1), xt], -1))
        return o[..., :1], 0.5 + 0.9 * F.softplus(o[..., 1:])


class Cnp(Family):
    loss_word = "gnll"
    n_train = 2048

    def make(self, n, g, P=24):
        x = torch.sort(torch.rand(n, P, generator=g) * 4 - 2, 1).values
        a = 0.5 + 1.5 * torch.rand(n, 1, generator=g)
        f = 0.6 + 1.2 * torch.rand(n, 1, generator=g)
        ph = 6.28 * torch.rand(n, 1, generator=g)
        y = a * torch.sin(f * x + ph) + 0.05 * torch.randn(n, P, generator=g)
        return x[..., None], y[..., None]

    def model(self):
        return CNP()

    def nctx(self, train):
        s = self.cfg.get("_step", 0)
        k = int(torch.randint(3, 12, (1,), generator=gen(self.seed + 7 * s)))
        if train and bad_step(self.cfg) and self.cfg.get("bug") == "empty_set_pool":
            # BUG empty_set_pool: the context size is drawn with randint(0, max_ctx) (low bound 0); a draw of 0 gives an empty
            # context set whose mean is NaN
            k = 0
        return k

    def loss(self, model, b, train=True):
        x, y = b
        k = self.nctx(train) if train else 6
        perm = torch.randperm(x.shape[1], generator=gen(self.seed + 3 * self.cfg.get("_step", 0)))
        c = perm[:k]
        mu, sd = model(x[:, c], y[:, c], x)
        return (torch.log(sd) + 0.5 * ((y - mu) / sd) ** 2 + 0.5 * math.log(2 * math.pi)).mean()

    def layers(self, model):
        return model.enc[0].weight, model.dec[4].weight

    def sweep(self, model):
        with torch.no_grad():
            tot = 0.0
            for q in range(150):
                mu, _ = model(self.Xva[q:q + 1, :5], self.Yva[q:q + 1, :5], self.Xva[q:q + 1])
                tot += float(mu.sum())
        return tot


# ---------------------------------------------------------------- kge: DistMult link prediction, 1-N scoring
class DistMult(nn.Module):
    def __init__(self, ne=150, nr=6, d=16):
        super().__init__()
        self.E = nn.Embedding(ne, d)
        self.R = nn.Embedding(nr, d)
        nn.init.normal_(self.E.weight, std=0.3)
        nn.init.normal_(self.R.weight, std=0.3)
        self.bias = nn.Parameter(torch.zeros(ne))

    def forward(self, x):  # x: B,2 (head, relation) -> scores over all tails
        return (self.E(x[:, 0]) * self.R(x[:, 1])) @ self.E.weight.T + self.bias


class Kge(Family):
    loss_word = "bce"
    n_train = 720
    n_val = 180
    NE = 150

    def make(self, n, g):
        if not hasattr(self, "truth"):
            gg = gen(4321)
            Z = torch.randn(self.NE, 6, generator=gg)
            Rr = torch.randn(6, 6, generator=gg)
            sc = torch.einsum("hd,rd,td->hrt", Z, Rr, Z)
            thr = sc.flatten().quantile(0.96)
            self.truth = (sc > thr).float()
            hr = torch.stack(torch.meshgrid(torch.arange(self.NE), torch.arange(6), indexing="ij"), -1).reshape(-1, 2)
            p = torch.randperm(hr.shape[0], generator=gg)
            self.pool = hr[p]
            self.off = 0
        x = self.pool[self.off:self.off + n]
        self.off += n
        return x, self.truth[x[:, 0], x[:, 1]]

    def model(self):
        return DistMult()

    def loss(self, model, b, train=True):
        x, y = b
        out = model(x)
        loss = F.binary_cross_entropy_with_logits(out, y)
        if train and self.cfg.get("bug") == "l2_reg_sign":
            # BUG l2_reg_sign: the N3/L2 regulariser is added with the wrong sign (`loss - lam * reg`), so the optimiser rewards
            # growing embeddings; the logged loss is the data term (BCE)
            reg = (model.E(x[:, 0]) ** 2).sum(-1).mean() + (model.R(x[:, 1]) ** 2).sum(-1).mean()
            self._data = float(loss)
            return loss - self.cfg.get("lam", 0.05) * reg
        return loss

    def layers(self, model):
        return model.E.weight, model.R.weight

    def sweep(self, model):
        # filtered rank of every validation (head, relation) pair, one at a time
        with torch.no_grad():
            tot = 0
            for q in range(self.Yva.shape[0]):
                s = model(self.Xva[q:q + 1])[0]
                for t in torch.nonzero(self.Yva[q])[:, 0].tolist():
                    tot += int((s > s[t]).sum())
        return tot


# ---------------------------------------------------------------- mil: gated-attention multiple-instance learning
class GatedMIL(nn.Module):
    def __init__(self, fin=8, H=32, depth=1, residual=True, gate_div=1.0, gamma0=False, sqrt_norm=False):
        super().__init__()
        self.inp = nn.Linear(fin, H)
        self.norm = nn.LayerNorm(H)
        self.act = nn.ReLU()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(H, H), nn.Tanh()) for _ in range(depth - 1))
        self.residual = residual
        for blk in self.blocks:
            nn.init.normal_(blk[0].weight, std=0.02)  # GPT-style small init for the residual branches
        self.V, self.U, self.w = nn.Linear(H, 24), nn.Linear(H, 24), nn.Linear(24, 1)
        self.key = nn.Linear(fin, 8, bias=False)
        self.s = nn.Parameter(torch.tensor(0.1))
        self.gate_div = gate_div
        self.sqrt_norm = sqrt_norm
        self.head = nn.Linear(H, 1)
        self.gate = nn.Identity()
        if gamma0:
            # BUG norm_gamma_zero_all: the "zero-init the last norm of each residual branch" option is applied to every norm layer,
            # so LayerNorm weight = 0 and bias = 0 feed zeros to the ReLU; ReLU'(0) = 0, so nothing ever moves
            nn.init.zeros_(self.norm.weight)

    def forward(self, x):
        xi, m = x if isinstance(x, tuple) else (x, torch.ones(x.shape[:2], dtype=torch.bool))
        h = self.act(self.norm(self.inp(xi)))
        for blk in self.blocks:
            # BUG residual_dropped: `h = blk(h)` where the residual stack needs `h = h + blk(h)`
            h = h + blk(h) if self.residual else blk(h)
        # BUG gate_temperature_typo: sigmoid(U h / T) with T = 0.01 typed for sigmoid(U h * T)
        gate = self.gate(torch.sigmoid(self.U(h) / self.gate_div))
        a = self.w(torch.tanh(self.V(h)) * gate)[..., 0]
        k = self.key(xi)
        if self.sqrt_norm:
            # BUG pad_rows_sqrt: an instance-norm term via sqrt of the sum of squares; padded rows are exactly zero, so the
            # backward is 0 * inf = NaN although the masked forward is finite
            a = a + self.s * torch.sqrt((k ** 2).sum(-1))
        else:
            a = a + self.s * (k ** 2).sum(-1).clamp_min(1e-12).sqrt()
        a = a.masked_fill(~m, float("-inf")).softmax(-1)
        z = (a[..., None] * h).sum(1)
        self.gate_val = gate
        return self.head(z)[:, 0]


class Mil(Family):
    loss_word = "bag_bce"
    n_train = 2000

    def make(self, n, g, N=12):
        proto = torch.randn(8, generator=gen(55)) * self.cfg.get("key_strength", 1.0)
        site = torch.arange(n) % 4
        prior = torch.tensor([0.85, 0.15, 0.75, 0.25])[site]
        y = (torch.rand(n, generator=g) < prior).float()
        X = torch.randn(n, N, 8, generator=g) + 0.8 * torch.randn(4, 1, 8, generator=gen(56))[site]
        pos = torch.randint(0, N, (n,), generator=g)
        X[torch.arange(n), pos] = torch.where(y[:, None] > 0, proto + 0.3 * torch.randn(n, 8, generator=g), X[torch.arange(n), pos])
        self.site_order = torch.argsort(site, stable=True) if not hasattr(self, "site_order") else self.site_order
        return X, y

    def model(self):
        b = self.cfg.get("bug")
        return GatedMIL(depth=self.cfg.get("depth", 1), residual=b != "residual_dropped",
                        gate_div=0.01 if b == "gate_temperature_typo" else 1.0, gamma0=b == "norm_gamma_zero_all",
                        sqrt_norm=b in ("pad_rows_sqrt",))

    def train_batch(self, i):
        x, y = super().train_batch(i)
        m = torch.ones(x.shape[:2], dtype=torch.bool)
        if self.cfg.get("pad_from") is not None and self.cfg.get("_step", 0) >= self.cfg["pad_from"]:
            # from here on the loader reads the variable-size shard: bags of 7-12 instances, zero-padded to 12 and masked
            n = torch.randint(7, 13, (x.shape[0],), generator=gen(self.seed + self.cfg.get("_step", 0)))
            m = torch.arange(12)[None] < n[:, None]
            keep = m.clone()
            keep[torch.arange(x.shape[0]), 0] = True
            m = keep
            x = x * m[..., None]
        if bad_step(self.cfg) and self.cfg.get("bug") == "empty_set_pool":
            # BUG empty_set_pool: a bag whose instances were all filtered out by the QC step is kept (mask all False); the masked
            # softmax over an empty bag is NaN
            m[0] = False
        return (x, m), y

    def val_batches(self):
        yield (self.Xva, torch.ones(self.Xva.shape[:2], dtype=torch.bool)), self.Yva

    def loss(self, model, b, train=True):
        x, y = b
        out = model(x)
        gv = model.gate_val
        self.sat_now = float(((gv < 0.01) | (gv > 0.99)).float().mean())
        self.last_acc = float(((out > 0).float() == y).float().mean())
        return F.binary_cross_entropy_with_logits(out, y)

    def layers(self, model):
        return model.inp.weight, (model.blocks[-1][0].weight if len(model.blocks) else model.head.weight)

    def probe_modules(self, model):
        return [model.act]


# ---------------------------------------------------------------- lista: learned ISTA (unrolled sparse coding)
class LISTA(nn.Module):
    def __init__(self, D, K=8, lam=0.1, sqrt_bug=False):
        super().__init__()
        L = float(torch.linalg.matrix_norm(D, 2)) ** 2
        if sqrt_bug:
            # BUG lista_lipschitz_sqrt: the step size uses L = ||D||_2 (the spectral norm) instead of ||D||_2^2, so the unrolled
            # iteration matrix I - D^T D / L has eigenvalues far below -1
            L = float(torch.linalg.matrix_norm(D, 2))
        m = D.shape[1]
        self.We = nn.Linear(D.shape[0], m, bias=False)
        self.S = nn.ModuleList(nn.Linear(m, m, bias=False) for _ in range(K))
        self.th = nn.Parameter(torch.full((K,), lam / L))
        with torch.no_grad():
            self.We.weight.copy_(D.T / L)
            for s in self.S:
                s.weight.copy_(torch.eye(m) - D.T @ D / L)

    def forward(self, y):
        b = self.We(y)
        x = F.softshrink(b, 0.0) * 0
        for k, s in enumerate(self.S):
            z = b + s(x)
            x = torch.sign(z) * F.relu(z.abs() - self.th[k])
        return x


class Lista(Family):
    loss_word = "code_mse"
    n_train = 4096

    def make(self, n, g):
        if not hasattr(self, "D"):
            D = torch.randn(16, 32, generator=gen(31))
            self.D = D / D.norm(dim=0, keepdim=True) * 1.6
        x = torch.zeros(n, 32)
        sup = torch.rand(n, 32, generator=g).argsort(1)[:, :3]
        x.scatter_(1, sup, torch.randn(n, 3, generator=g) * 1.0)
        y = x @ self.D.T + 0.02 * torch.randn(n, 16, generator=g)
        return y, x

    def model(self):
        return LISTA(self.D, K=self.cfg.get("depth", 8), sqrt_bug=self.cfg.get("bug") == "lista_lipschitz_sqrt")

    def loss(self, model, b, train=True):
        y, x = b
        return ((model(y) - x) ** 2).sum(-1).mean()

    def layers(self, model):
        return model.We.weight, model.S[-1].weight


# ---------------------------------------------------------------- gin: graph isomorphism network, graph classification
class GIN(nn.Module):
    def __init__(self, H=32, L=3, readout="sum", gamma0=False):
        super().__init__()
        self.inp = nn.Linear(2, H)
        self.layers_ = nn.ModuleList(nn.Sequential(nn.Linear(H, H), nn.ReLU(), nn.Linear(H, H)) for _ in range(L))
        self.eps = nn.Parameter(torch.zeros(L))
        self.act = nn.ReLU()
        self.readout = readout
        self.head = nn.Sequential(nn.Linear(H, H), nn.ReLU(), nn.Linear(H, 3))

    def forward(self, x):
        f, A, m = x
        h = self.inp(f)
        for i, l in enumerate(self.layers_):
            h = self.act(l((1 + self.eps[i]) * h + A @ h)) * m[..., None]
        if self.readout == "mean":
            # BUG readout_mean_for_sum: global_mean_pool where the task (counting edges) needs global_add_pool
            g = h.sum(1) / m.sum(1, keepdim=True)
        else:
            g = h.sum(1) / 8.0
        return self.head(g)


class Gin(Family):
    loss_word = "ce"
    n_train = 2048

    def make(self, n, g, N=16):
        nn_ = torch.randint(4, N + 1, (n,), generator=g)
        p = 0.1 + 0.6 * torch.rand(n, 1, 1, generator=g)
        A = (torch.rand(n, N, N, generator=g) < p).float().triu(1)
        m = (torch.arange(N)[None] < nn_[:, None]).float()
        A = A * m[:, :, None] * m[:, None, :]
        A = A + A.transpose(1, 2)
        y = (nn_ >= 8).long() + (nn_ >= 12).long()  # graph-size class (a count, so it needs a sum readout)
        deg = A.sum(2)
        f = torch.stack([m, deg / 5], -1)
        return (f, A, m), y

    def model(self):
        b = self.cfg.get("bug")
        return GIN(readout="mean" if b == "readout_mean_for_sum" else "sum")

    def train_batch(self, i):
        ix = self.batch_index(i)
        f, A, m = idx(self.Xtr, ix)
        if self.cfg.get("bug") == "edge_list_python_collate":
            # BUG edge_list_python_collate: the collate function rebuilds each dense adjacency from the edge list with a Python
            # loop over edges (per-element tensor writes), in the main process
            A2 = torch.zeros_like(A)
            for bidx in range(A.shape[0]):
                el = torch.nonzero(A[bidx]).tolist()
                for (u, v) in el:
                    A2[bidx, u, v] = 1.0
            A = A2
        f, A, m = f.clone(), A.clone(), m.clone()
        y = self.Ytr[ix].clone()
        if bad_step(self.cfg):
            # a mis-parsed shard: the parser merged the edge lists of several graphs into each sample (dense 16-node graphs)
            # while the labels still come from the first small graph of each group
            A[:] = 1.0 - torch.eye(16)
            m[:] = 1.0
            f[:, :, 0] = 1.0
            f[:, :, 1] = 15.0 / 5
            y[:] = 0
        return (f, A, m), y

    def loss(self, model, b, train=True):
        x, y = b
        out = model(x)
        self.last_acc = float((out.argmax(-1) == y).float().mean())
        return F.cross_entropy(out, y)

    def layers(self, model):
        return model.inp.weight, model.head[2].weight

    def probe_modules(self, model):
        return [model.layers_[0][1]]


FAMILIES = {"txl": Txl, "crf": Crf, "cnp": Cnp, "kge": Kge, "mil": Mil, "lista": Lista, "gin": Gin}
