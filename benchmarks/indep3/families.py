"""Small model families on seeded synthetic data. Each build() returns (model, data, lossfn, head_names)."""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


def _blobs(g, n, d, k, sep=2.0):
    cent = torch.randn(k, d, generator=g) * sep
    y = torch.randint(0, k, (n,), generator=g)
    x = cent[y] + torch.randn(n, d, generator=g)
    return x, y


def _split(x, y, nval):
    return dict(tx=x[nval:], ty=y[nval:], vx=x[:nval], vy=y[:nval])


class Linear(nn.Module):
    def __init__(s, d, k):
        super().__init__(); s.head = nn.Linear(d, k)
    def forward(s, x): return s.head(x)


class CNN(nn.Module):
    def __init__(s, k, act=nn.ReLU):
        super().__init__()
        s.body = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), act(), nn.MaxPool2d(2),
                               nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), act(), nn.AdaptiveAvgPool2d(2),
                               nn.Flatten(), nn.Dropout(0.2))
        s.head = nn.Linear(64, k)
    def forward(s, x): return s.head(s.body(x))


class UNet(nn.Module):
    def __init__(s):
        super().__init__()
        s.enc = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU())
        s.down = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        s.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        s.head = nn.Conv2d(16, 1, 1)
    def forward(s, x):
        e = s.enc(x); u = s.up(s.down(e))
        return s.head(torch.cat([e, u], 1)).squeeze(1)


class TinyTransformer(nn.Module):
    def __init__(s, vocab, k, L):
        super().__init__()
        s.emb = nn.Embedding(vocab, 32); s.pos = nn.Parameter(torch.randn(L, 32) * 0.1)
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True)
        s.body = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        s.head = nn.Linear(32, k)
    def forward(s, x): return s.head(s.body(s.emb(x) + s.pos).mean(1))


class Seq2Seq(nn.Module):
    def __init__(s, vocab, hid=32, hh_scale=1.0):
        super().__init__()
        s.emb = nn.Embedding(vocab + 1, 16); s.enc = nn.GRU(16, hid, batch_first=True)
        s.dec = nn.GRU(16, hid, batch_first=True); s.head = nn.Linear(hid, vocab); s.vocab = vocab
        if hh_scale != 1.0:
            with torch.no_grad():
                for m in (s.enc, s.dec):
                    m.weight_hh_l0.mul_(hh_scale)
    def forward(s, x):
        _, h = s.enc(s.emb(x))
        start = torch.full((x.shape[0], 1), s.vocab, dtype=torch.long)
        tgt_in = torch.cat([start, x.flip(1)[:, :-1]], 1)
        o, _ = s.dec(s.emb(tgt_in), h)
        return s.head(o)


class PointMLP(nn.Module):
    def __init__(s, k):
        super().__init__()
        s.body = nn.Sequential(nn.Linear(3, 32), nn.ReLU(), nn.Linear(32, 64), nn.ReLU())
        s.head = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, k))
    def forward(s, x): return s.head(s.body(x).max(1).values)


class WideDeep(nn.Module):
    def __init__(s, ncat, nnum):
        super().__init__()
        s.emb = nn.Embedding(ncat, 8); s.wide = nn.Linear(nnum + ncat, 1)
        s.body = nn.Sequential(nn.Linear(8 + nnum, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU())
        s.head = nn.Linear(16, 1); s.ncat = ncat
    def forward(s, x):
        c = x[:, 0].long(); num = x[:, 1:]
        deep = s.head(s.body(torch.cat([s.emb(c), num], 1)))
        wide = s.wide(torch.cat([num, F.one_hot(c, s.ncat).float()], 1))
        return (deep + wide).squeeze(1)


class VAE(nn.Module):
    def __init__(s, d=16, z=4):
        super().__init__()
        s.body = nn.Sequential(nn.Linear(d, 32), nn.ReLU()); s.mu = nn.Linear(32, z); s.lv = nn.Linear(32, z)
        s.head = nn.Sequential(nn.Linear(z, 32), nn.ReLU(), nn.Linear(32, d))
    def forward(s, x):
        h = s.body(x); mu, lv = s.mu(h), s.lv(h)
        zz = mu + torch.randn_like(mu) * torch.exp(0.5 * lv)
        return s.head(zz), mu, lv


class Enc(nn.Module):
    def __init__(s, d=16):
        super().__init__()
        s.body = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU()); s.head = nn.Linear(32, 16)
    def forward(s, x): return s.head(s.body(x))


class Denoiser(nn.Module):
    def __init__(s):
        super().__init__()
        s.body = nn.Sequential(nn.Linear(3, 64), nn.SiLU(), nn.Linear(64, 64), nn.SiLU()); s.head = nn.Linear(64, 2)
    def forward(s, x): return s.head(s.body(x))


class LSTMLM(nn.Module):
    def __init__(s, vocab, hh_scale=1.0):
        super().__init__()
        s.emb = nn.Embedding(vocab, 16); s.body = nn.LSTM(16, 48, batch_first=True); s.head = nn.Linear(48, vocab)
        if hh_scale != 1.0:
            with torch.no_grad(): s.body.weight_hh_l0.mul_(hh_scale)
    def forward(s, x): return s.head(s.body(s.emb(x))[0])


class DeepMLP(nn.Module):
    def __init__(s, d, k, depth, act, width=32, bias_init=None, w_scale=1.0):
        super().__init__()
        layers, prev = [], d
        for _ in range(depth):
            lin = nn.Linear(prev, width)
            if bias_init is not None: nn.init.constant_(lin.bias, bias_init)
            if w_scale != 1.0:
                with torch.no_grad(): lin.weight.mul_(w_scale)
            layers += [lin, act()]; prev = width
        s.body = nn.Sequential(*layers); s.head = nn.Linear(width, k)
    def forward(s, x): return s.head(s.body(x))


def ce(reduction):
    return lambda out, y: F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), reduction=reduction)


def build(fam, seed, opts):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    red = opts.get("reduction", "mean")
    cls = True
    if fam == "linear":
        x, y = _blobs(g, 3000, 20, 10, 0.6); model = Linear(20, 10); lf = ce(red)
    elif fam == "cnn_bn":
        tmpl = torch.randn(6, 1, 12, 12, generator=g)
        y = torch.randint(0, 6, (2400,), generator=g)
        x = tmpl[y] * 0.6 + torch.randn(2400, 1, 12, 12, generator=g)
        model = CNN(6); lf = ce(red)
    elif fam == "unet":
        n = 1200; yy, xx = torch.meshgrid(torch.arange(16.), torch.arange(16.), indexing="ij")
        c = torch.rand(n, 2, generator=g) * 12 + 2; r = torch.rand(n, generator=g) * 3 + 2
        m = (((yy - c[:, 0, None, None]) ** 2 + (xx - c[:, 1, None, None]) ** 2) < r[:, None, None] ** 2).float()
        x = (m + 0.7 * torch.randn(n, 16, 16, generator=g)).unsqueeze(1); y = m
        model = UNet(); cls = False
        lf = lambda out, t: F.binary_cross_entropy_with_logits(out, t, reduction=red)
    elif fam == "transformer":
        x = torch.randint(0, 12, (2000, 10), generator=g)
        y = ((x == 3).sum(1) > (x == 5).sum(1)).long() + ((x == 7).sum(1) > 1).long() * 2
        model = TinyTransformer(12, 4, 10); lf = ce(red)
    elif fam == "gru_seq2seq":
        x = torch.randint(0, 8, (2000, 6), generator=g); y = x.flip(1)
        model = Seq2Seq(8, hh_scale=opts.get("hh_scale", 1.0)); lf = ce(red)
    elif fam == "pointmlp":
        n = 1500; y = torch.randint(0, 3, (n,), generator=g); p = torch.randn(n, 32, 3, generator=g)
        sph = p / p.norm(dim=2, keepdim=True); cube = torch.rand(n, 32, 3, generator=g) * 2 - 1
        plane = cube.clone(); plane[..., 2] = 0.05 * plane[..., 2]
        x = torch.where(y[:, None, None] == 0, sph, torch.where(y[:, None, None] == 1, cube, plane))
        x = x + 0.05 * torch.randn(n, 32, 3, generator=g)
        model = PointMLP(3); lf = ce(red)
    elif fam == "widedeep":
        n = 3000; cat = torch.randint(0, 10, (n,), generator=g); num = torch.randn(n, 6, generator=g)
        logit = num[:, 0] * 1.5 - num[:, 1] + (cat % 3 == 0).float() * 2 - 1 + num[:, 2] * num[:, 3]
        y = (logit + 0.3 * torch.randn(n, generator=g) > 0).float()
        x = torch.cat([cat[:, None].float(), num], 1); model = WideDeep(10, 6); cls = False
        lf = lambda out, t: F.binary_cross_entropy_with_logits(out, t, reduction=red)
    elif fam == "vae":
        z = torch.randn(3000, 3, generator=g); W = torch.randn(3, 16, generator=g)
        x = torch.tanh(z @ W) + 0.1 * torch.randn(3000, 16, generator=g); y = torch.zeros(3000)
        model = VAE(); cls = False
        def lf(out, t, _red=red):
            rec, mu, lv = out
            r = F.mse_loss(rec, lf.x, reduction="none").sum(1)
            kl = -0.5 * (1 + lv - mu ** 2 - lv.exp()).sum(1)
            v = r + kl
            return v.sum() if _red == "sum" else v.mean()
    elif fam == "simclr":
        base = torch.randn(40, 16, generator=g); idx = torch.randint(0, 40, (3000,), generator=g)
        x = base[idx] + 0.3 * torch.randn(3000, 16, generator=g); y = idx
        model = Enc(); cls = False
        def lf(out, t, _red=red):
            z1, z2 = out; B = z1.shape[0]
            z = F.normalize(torch.cat([z1, z2]), dim=1); sim = z @ z.t() / 0.2
            sim = sim - 1e9 * torch.eye(2 * B)
            tgt = torch.cat([torch.arange(B, 2 * B), torch.arange(0, B)])
            return F.cross_entropy(sim, tgt, reduction=_red)
    elif fam == "diffusion":
        n = 3000; th = torch.rand(n, generator=g) * 6.28
        x = torch.stack([torch.cos(th) * 2, torch.sin(2 * th)], 1) + 0.05 * torch.randn(n, 2, generator=g)
        y = torch.zeros(n); model = Denoiser(); cls = False
        def lf(out, t, _red=red):
            return F.mse_loss(out, lf.noise, reduction=_red)
    elif fam == "lstm_lm":
        # synthetic grammar text: repeating words with random choice
        words = ["ab", "cde", "fa", "bcd", "eef", "dab"]; V = 8
        seqs = []
        for _ in range(1500):
            s, prev = [], 0
            while len(s) < 17:
                w = words[(prev * 2 + int(torch.randint(0, 2, (1,), generator=g))) % 6]
                s += [ord(ch) - 97 for ch in w] + [7]; prev += 1
            seqs.append(s[:17])
        t = torch.tensor(seqs); x, y = t[:, :-1], t[:, 1:]
        model = LSTMLM(V, hh_scale=opts.get("hh_scale", 1.0)); lf = ce(red)
    elif fam == "deep_mlp":
        x, y = _blobs(g, 3000, 16, 5, 0.8)
        act = {"sigmoid": nn.Sigmoid, "relu": nn.ReLU, "tanh": nn.Tanh}[opts.get("act", "relu")]
        model = DeepMLP(16, 5, opts.get("depth", 4), act, bias_init=opts.get("bias_init"),
                        w_scale=opts.get("w_scale", 1.0)); lf = ce(red)
    else:
        raise ValueError(fam)
    nval = max(200, len(x) // 6)
    data = _split(x, y, nval)
    return model, data, lf, cls


def forward_loss(fam, model, lf, xb, yb, double_softmax=False):
    if fam == "vae":
        lf.x = xb; return lf(model(xb), yb)
    if fam == "simclr":
        v1 = xb + 0.2 * torch.randn_like(xb); v2 = xb * (1 + 0.1 * torch.randn_like(xb))
        return lf((model(v1), model(v2)), yb)
    if fam == "diffusion":
        t = torch.rand(xb.shape[0], 1); noise = torch.randn_like(xb)
        a = torch.cos(t * math.pi / 2)
        lf.noise = noise
        return lf(model(torch.cat([a * xb + (1 - a ** 2).sqrt() * noise, t], 1)), yb)
    out = model(xb)
    if double_softmax:
        out = F.softmax(out, -1)
    return lf(out, yb)
