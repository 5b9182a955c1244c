"""Per-layer health on a schedule: per-module gradient and weight norms and activation
statistics, taken on one step in ``every`` and kept on the device.

The watcher drives it (``watch(..., layer_every=N)``); it can also be driven by hand::

    lh = LayerHealth(model, every=50)
    if lh.scheduled(step):
        lh.arm()                       # forward hooks, for this step only
    loss = loss_fn(model(x), y)
    loss.backward()
    lh.on_grads()                      # after backward, before optimizer.step()
    optimizer.step()
    stats = lh.collect()               # {"layer/<module path>/<stat>": 0-d tensor on the device}
    meta = lh.pop_meta()               # the module order, when it changed: store.set_meta(**meta)

Stats (metric names ``layer/<module path>/<stat>``, DESIGN.md; the path is the module's name
in ``model.named_modules()``, ``(root)`` for the model itself):

``grad_norm``, ``weight_norm``
    L2 norm over the module's *own* trainable parameters (``parameters(recurse=False)``: a
    Linear's weight and bias, a LayerNorm's affine pair), of their ``.grad`` and of their
    values, taken in ``on_grads`` (after backward, after any clipping or ``unscale_``, before
    the update). A parameter shared by several modules (tied embedding and LM head) counts
    for the first module that owns it in ``named_modules()`` order. A module none of whose
    parameters got a gradient this step (an unused branch) has no ``grad_norm``.
``act_mean``, ``act_std``, ``act_absmax``
    Mean, population standard deviation and max |x| over every element of the module's
    output, in training forwards only (``torch.is_grad_enabled()``: evaluation under
    ``no_grad`` inside an armed step is skipped). Only floating tensor outputs count; a
    module returning a tuple (``nn.MultiheadAttention``, an RNN) gets none. A module called
    several times in the step (weight sharing, gradient accumulation, recomputation under
    activation checkpointing) is measured over all its calls together: means and variances
    pooled by element count, the max over calls.
``absmax_frac_of_dtype_max``
    ``act_absmax / torch.finfo(output dtype).max``: the headroom before overflow. It is what
    matters in fp16 (max 65504: a value of 0.1 means a 10x larger activation overflows);
    in fp32 and bf16 (max ~3.4e38) it is ~1e-36 and only a NaN/inf makes it large.
``dead_frac`` (``nn.ReLU``, ``nn.ReLU6`` outputs)
    Fraction of units whose output is <= 0 for every sample (and every position) of the
    step's batch. A unit is a feature of the last dimension for 2-D and 3-D (batch, time,
    features) outputs, and a channel (dim 1) for 4-D/5-D outputs (conv NCHW/NCDHW, also in
    channels_last memory format, which keeps the logical NCHW shape) and for a 3-D output
    whose producer was a channels-first module (Conv1d, BatchNorm1d, InstanceNorm1d,
    GroupNorm: the last parametrized module to run before it). Such a unit passes no
    gradient to anything below it for that batch; one that stays so is dead (Lu et al. 2019,
    "Dying ReLU and Initialization", arXiv:1903.06733).
    LeakyReLU, PReLU, RReLU, ELU, SELU, GELU and SiLU are *not* ReLU-family here: their
    gradient for negative inputs is not zero (LeakyReLU's slope, GELU's and SiLU's smooth
    negative lobe), so a unit with negative outputs still learns and cannot die this way.
    Per batch, a unit that fires on few inputs also reads as dead: with B samples a unit
    active on a fraction p of inputs is silent on all of them with probability (1-p)^B,
    so the fraction is an upper bound on the dead fraction over the whole data set; it is
    recorded only when each unit saw >= 16 values (``MIN_DEAD_SAMPLES``: batch x positions
    for a last-dim unit, batch x H x W for a channel), where a unit active on half the
    inputs is silent on all of them with p = 2^-16.
``saturated_frac`` (``nn.Tanh``, ``nn.Sigmoid`` outputs)
    Fraction of output elements with |tanh| > 0.99, or sigmoid < 0.01 or > 0.99: there
    the local derivative is < 0.02 (tanh: 1 - 0.99^2 = 0.0199, at most 1; sigmoid:
    0.99 x 0.01 = 0.0099, at most 0.25), so little gradient passes (Glorot & Bengio 2010;
    LeCun et al. 1998, "Efficient BackProp", sec. 4.4). The threshold is applied exactly in
    the output's dtype (0.99 itself rounds up in fp16).

What is not seen: activations applied functionally (``F.relu(x)``, ``torch.tanh(x)``,
``x.relu()``) are not modules and cannot be hooked; they get no ``dead_frac`` or
``saturated_frac`` (the module that produced their input still gets its act stats). Use the
``nn`` module form to have them measured.

Which modules: every module with trainable parameters of its own, plus every other leaf
(a module without children) that is not a pass-through (``Identity``, ``Dropout*``,
``Flatten``, ``Unflatten``: their output is their input, already measured). Containers
(``Sequential``, a transformer block) are not hooked: their output is their last child's,
or a sum the next module's input shows. Over ``max_modules`` modules, an evenly spaced
subset is kept that always includes the first and the last parametrized module (what
``vanishing_gradients`` compares); this is logged once at INFO.

Order: parameter registration order is not execution order, so ``module_order`` is the
order in which the modules' forward hooks first fired on armed steps (modules never seen
running follow, in ``named_modules()`` order). ``pop_meta()`` returns it, with each
module's class, for the watcher to store as run meta (``layer_order``, ``layer_types``).

Cost: nothing between armed steps (no hook is registered). On an armed step, a few
reductions per hooked module (on a GPU ``std_mean`` and ``aminmax``; on CPU a mean, a norm of
the deviations through a reused 1 MiB scratch buffer, a min and a max), one more for a
ReLU/Tanh/Sigmoid module, one ``_foreach_norm`` over every parameter and gradient, and a
handful of stacked ops at collect time; the results stay on the device (no ``.item()``, no
host-device sync: checked with ``torch.cuda.set_sync_debug_mode("error")``): the watcher
fetches them with its other values. Measured: the demo transformer on CPU (1 thread), an
armed step 1.17x a plain one (every 50 steps: +0.3%); on an H200 (bf16 autocast), 1.3-1.6x
for a d_model 1024 x 8-layer model and 1.7x for the demo's size, both launch-bound (every 50
steps: +0.6-1.5%). On a GPU the moments are rounded to the output's dtype (fp16 ~3e-4, bf16
~2e-3 relative); in fp32 on a GPU, and on CPU in every dtype, to float32 precision.
Forward hooks keep no reference to an activation. Registering and removing hooks on a
``torch.compile``'d module makes Dynamo recompile; per-layer health is for eager models.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainmedic.errors import ConfigError

if TYPE_CHECKING:
    import torch
    from torch import Tensor
    from torch.utils.hooks import RemovableHandle

__all__ = ["LayerHealth", "STATS", "ROOT_NAME", "TANH_SATURATION", "SIGMOID_SATURATION",
           "MIN_DEAD_SAMPLES"]

logger = logging.getLogger(__name__)

#: Every stat name LayerHealth records (the ``<stat>`` in ``layer/<module>/<stat>``).
STATS = ("grad_norm", "weight_norm", "act_mean", "act_std", "act_absmax",
         "absmax_frac_of_dtype_max", "dead_frac", "saturated_frac")
#: The module path used for the model itself (``named_modules()`` calls it "").
ROOT_NAME = "(root)"
#: |tanh(x)| above this is saturated: derivative 1 - 0.99^2 < 0.02.
TANH_SATURATION = 0.99
#: sigmoid(x) this close to 0 or 1 is saturated: derivative < 0.01 (peak 0.25).
SIGMOID_SATURATION = 0.01

_RELU, _TANH, _SIGMOID, _OTHER = 1, 2, 3, 0
#: ``dead_frac`` is recorded only when each unit saw at least this many values: a unit
#: active on half the inputs is then silent on all of them by chance with p = 2^-16.
MIN_DEAD_SAMPLES = 16
#: Elements of the CPU scratch buffer for deviations from the mean (1 MiB in float32).
_SCRATCH_NUMEL = 1 << 18


@dataclass
class _Acc:
    """What the hooks gathered for one module during one armed step (small tensors only)."""

    calls: int = 0
    numel: int = 0
    dtype_max: float = 0.0
    row: tuple[torch.Tensor, ...] = ()
    """(mean, std, min, max) of the first call's output, 0-d tensors."""
    extra_rows: list[tuple[int, tuple[torch.Tensor, ...]]] = field(default_factory=list)
    """(numel, row) of later calls, pooled in ``collect``."""
    unit_max: torch.Tensor | None = None
    """ReLU: per-unit max over the batch (max over calls)."""
    unit_samples: int = 0
    """ReLU: values each unit saw (samples x positions), over the calls."""
    dead_fracs: list[torch.Tensor] = field(default_factory=list)
    """ReLU calls whose unit count differed from the first: their own dead fraction."""
    sat_count: torch.Tensor | None = None
    """Tanh/Sigmoid: number of saturated elements over the calls."""


class LayerHealth:
    """Per-module health stats on scheduled steps (see the module docstring for the stats)."""

    def __init__(self, model: torch.nn.Module, *, every: int, max_modules: int = 256) -> None:
        import torch
        from torch import nn

        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ConfigError(f"layer health: every must be an int >= 1 (measure one step in "
                              f"every N), got {every!r}")
        if isinstance(max_modules, bool) or not isinstance(max_modules, int) or max_modules < 2:
            raise ConfigError(f"layer health: max_modules must be an int >= 2 (the first and "
                              f"last parametrized layers are always kept), got {max_modules!r}")
        if not isinstance(model, nn.Module):
            raise ConfigError(f"layer health: model must be a torch.nn.Module, got "
                              f"{type(model).__name__}")
        self._torch = torch
        self.every = every
        self.max_modules = max_modules
        passthrough: tuple[type, ...] = (nn.Identity, nn.modules.dropout._DropoutNd,
                                         nn.Flatten, nn.Unflatten)
        channels_first: tuple[type, ...] = (nn.modules.conv._ConvNd,
                                            nn.modules.batchnorm._BatchNorm,
                                            nn.modules.instancenorm._InstanceNorm,
                                            nn.GroupNorm)
        seen: set[int] = set()
        cands: list[tuple[str, nn.Module, list[nn.Parameter]]] = []
        for name, m in model.named_modules():
            own = [p for p in m.parameters(recurse=False)
                   if p.requires_grad and id(p) not in seen]
            seen.update(id(p) for p in own)
            leaf = next(iter(m.children()), None) is None
            if own or (leaf and not isinstance(m, passthrough)):
                cands.append((name or ROOT_NAME, m, own))
        cands = self._cap(cands)
        self._names = [n for n, _, _ in cands]
        self._modules = [m for _, m, _ in cands]
        self._types = {n: type(m).__name__ for n, m, _ in cands}
        self._keys = [{stat: f"layer/{n}/{stat}" for stat in STATS} for n in self._names]
        self._kind = [_RELU if isinstance(m, (nn.ReLU, nn.ReLU6)) else
                      _TANH if isinstance(m, nn.Tanh) else
                      _SIGMOID if isinstance(m, nn.Sigmoid) else _OTHER for m in self._modules]
        # None: a module without parameters (leaves the channels-first flag as it is).
        self._sets_cf: list[bool | None] = [
            (isinstance(m, channels_first) if own else None) for _, m, own in cands]
        self._params: list[nn.Parameter] = []
        self._owner: list[int] = []
        for i, (_, _, own) in enumerate(cands):
            self._params += own
            self._owner += [i] * len(own)
        self._handles: list[RemovableHandle] = []
        self._acc: dict[int, _Acc] = {}
        self._channels_first = False
        self._scratch: torch.Tensor | None = None
        self._thresholds: dict[tuple[Any, float], float] = {}
        self._order: list[int] = []
        self._in_order: set[int] = set()
        self._meta_dirty = True
        self._norms: torch.Tensor | None = None
        self._norm_rows: list[tuple[int, str]] = []
        self._index_cache: dict[tuple[Any, ...], torch.Tensor] = {}
        self._recip_cache: dict[tuple[Any, ...], torch.Tensor] = {}

    # -- module choice ------------------------------------------------------------------
    def _cap(self, cands: list[Any]) -> list[Any]:
        n = len(cands)
        if n <= self.max_modules:
            return cands
        with_params = [i for i, c in enumerate(cands) if c[2]]
        forced = {with_params[0], with_params[-1]} if with_params else set()
        rest = [i for i in range(n) if i not in forced]
        k = self.max_modules - len(forced)
        step = len(rest) / k
        keep = forced | {rest[int(j * step)] for j in range(k)}
        logger.info("trainmedic: per-layer health watches %d of the model's %d modules "
                    "(max_modules=%d): evenly spaced, first and last parametrized layers "
                    "included", len(keep), n, self.max_modules)
        return [cands[i] for i in sorted(keep)]

    # -- schedule and hooks ---------------------------------------------------------------
    def scheduled(self, step: int) -> bool:
        """True on the steps to measure: ``step % every == 0``."""
        return step % self.every == 0

    @property
    def armed(self) -> bool:
        return bool(self._handles)

    def arm(self) -> None:
        """Register the forward hooks for this step (before its forward). Idempotent."""
        if self._handles:
            return
        self._acc = {}
        self._norms = None
        self._handles = [m.register_forward_hook(self._hook_for(i))
                         for i, m in enumerate(self._modules)]

    def disarm(self) -> None:
        """Remove the hooks and drop what they gathered, without collecting. Idempotent."""
        for h in self._handles:
            h.remove()
        self._handles = []
        self._acc = {}
        self._norms = None

    def _hook_for(self, i: int) -> Any:
        torch = self._torch
        kind = self._kind[i]
        sets_cf = self._sets_cf[i]

        def hook(module: Any, inputs: Any, out: Any) -> None:
            if not torch.is_grad_enabled():
                return  # an evaluation forward inside the step
            if i not in self._in_order:
                self._in_order.add(i)
                self._order.append(i)
                self._meta_dirty = True
            channels_first = self._channels_first
            if sets_cf is not None:
                self._channels_first = sets_cf
            if not isinstance(out, torch.Tensor) or not out.is_floating_point():
                return
            n = out.numel()
            if n == 0:
                return
            self._measure(i, kind, out.detach(), n, channels_first)

        return hook

    def _measure(self, i: int, kind: int, x: torch.Tensor, n: int,
                 channels_first: bool) -> None:
        torch = self._torch
        if x.device.type == "cpu":
            mean, std = self._cpu_moments(x, n)
            lo, hi = x.amin(), x.amax()
        else:
            std, mean = torch.std_mean(x, correction=0)  # one fused kernel on a GPU
            lo, hi = torch.aminmax(x)
        # Four 0-d tensors, stacked with every module's in one kernel at collect time: on
        # a GPU a small model's step is launch-bound, and each op here is a launch.
        row = (mean, std, lo, hi)
        acc = self._acc.get(i)
        if acc is None:
            acc = self._acc[i] = _Acc(dtype_max=float(torch.finfo(x.dtype).max), row=row)
        else:
            acc.extra_rows.append((n, row))
        acc.calls += 1
        acc.numel += n
        if kind == _RELU:
            nd = x.dim()
            if nd <= 1:
                umax = x.clone()  # one sample: its units are its elements (no reference kept)
            elif nd == 2 or (nd == 3 and not channels_first):
                umax = x.amax(dim=tuple(range(nd - 1)))
            else:
                umax = x.amax(dim=(0, *range(2, nd)))
            acc.unit_samples += n // max(1, umax.numel())
            if acc.unit_max is None:
                acc.unit_max = umax
            elif acc.unit_max.shape == umax.shape:
                acc.unit_max = torch.maximum(acc.unit_max, umax)
            else:
                acc.dead_fracs.append((umax <= 0).float().mean())
        elif kind in (_TANH, _SIGMOID):
            cnt = self._saturated(x, n, kind)
            acc.sat_count = cnt if acc.sat_count is None else acc.sat_count + cnt

    def _saturated(self, x: torch.Tensor, n: int, kind: int) -> torch.Tensor:
        """How many elements are saturated: |x| > 0.99 (tanh), |x - 0.5| > 0.49 (sigmoid).

        ``gt_`` in place on a float buffer, then a float sum: a bool temporary and
        ``count_nonzero`` cost 3x more on CPU; on CPU the buffer is the reused scratch.
        """
        torch = self._torch
        shift = 0.0 if kind == _TANH else 0.5
        lim = self._threshold(x.dtype, TANH_SATURATION if kind == _TANH
                              else 0.5 - SIGMOID_SATURATION)
        if x.device.type != "cpu":
            return (x - shift).abs_().gt_(lim).sum(dtype=torch.float32)
        parts = [torch.sub(src, shift, out=buf).abs_().gt_(lim).sum(dtype=torch.float32)
                 for src, buf in self._chunks(x, n)]
        return parts[0] if len(parts) == 1 else torch.stack(parts).sum()

    def _threshold(self, dtype: torch.dtype, lim: float) -> float:
        """The largest value of ``dtype`` at or below ``lim``: ``x > it`` then counts exactly
        the values above ``lim`` (0.99 itself rounds *up* in fp16 and fp32, which would
        leave out the values on the first representable level above 0.99)."""
        key = (dtype, lim)
        t = self._thresholds.get(key)
        if t is None:
            torch = self._torch
            v = torch.tensor(lim, dtype=torch.float64).to(dtype)
            if float(v) > lim:
                v = torch.nextafter(v, torch.zeros((), dtype=dtype))
            t = self._thresholds[key] = float(v)
        return t

    def _chunks(self, x: torch.Tensor, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``x`` flattened, in pieces of at most ``_SCRATCH_NUMEL``, each with a slice of the
        scratch buffer to write into (float32, or float64 for a float64 ``x``)."""
        torch = self._torch
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        buf = self._scratch
        if buf is None or buf.dtype != dtype:
            buf = self._scratch = torch.empty(_SCRATCH_NUMEL, dtype=dtype)
        flat = x.reshape(-1)
        if n <= _SCRATCH_NUMEL:
            return [(flat, buf[:n])]
        return [(flat[k:k + _SCRATCH_NUMEL], buf[:min(_SCRATCH_NUMEL, n - k)])
                for k in range(0, n, _SCRATCH_NUMEL)]

    def _cpu_moments(self, x: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and population std by two passes, the deviations written chunk by chunk into
        one small scratch buffer kept for the watcher's life.

        CPU's ``std_mean`` (Welford, element by element) is ~10x slower than a sum; a sum
        of squares in float32 loses the variance when |mean| >> std (40% off at 1000x:
        a saturated sigmoid layer); casting to float64 copies the activation; and a fresh
        ``x - mean`` temporary the size of the activation costs ~5x the subtraction in page
        faults (allocating and freeing it). Two passes through a warm buffer cost about
        three cheap reductions.
        """
        torch = self._torch
        mean = x.mean() if x.dtype == torch.float64 else x.mean(dtype=torch.float32)
        parts = [torch.linalg.vector_norm(torch.sub(src, mean, out=buf))
                 for src, buf in self._chunks(x, n)]
        ss = parts[0] if len(parts) == 1 else torch.linalg.vector_norm(torch.stack(parts))
        return mean, ss.mul_(1.0 / math.sqrt(n))

    # -- gradients ------------------------------------------------------------------------
    def on_grads(self) -> None:
        """Per-module grad and weight norms, now (after backward, before the update)."""
        torch = self._torch
        if not self._params:
            return
        tensors: list[Tensor] = []
        rows: list[int] = []  # 2*module (+1 for the grad)
        for p, owner in zip(self._params, self._owner, strict=True):
            tensors.append(p.detach())
            rows.append(2 * owner)
            g = p.grad
            if g is not None and not g.is_sparse:
                tensors.append(g.detach())
                rows.append(2 * owner + 1)
        with torch.no_grad():
            try:
                norms = list(torch._foreach_norm(tensors, 2, dtype=torch.float64))
            except (AttributeError, RuntimeError, TypeError):
                norms = [torch.linalg.vector_norm(t, dtype=torch.float64) for t in tensors]
            dev = norms[0].device
            if any(t.device != dev for t in norms):
                norms = [t.to(dev) for t in norms]  # a model spread over devices
            sq = torch.stack(norms).square_()
            key = (dev, tuple(rows))
            index = self._index_cache.get(key)
            if index is None:
                index = torch.tensor(rows, dtype=torch.long).to(dev, non_blocking=True)
                self._index_cache = {key: index}  # one signature is the usual case
            present = sorted(set(rows))
            out = torch.zeros(2 * len(self._modules), dtype=torch.float64, device=dev)
            out.index_add_(0, index, sq).sqrt_()
        self._norms = out
        self._norm_rows = [(r, "grad_norm" if r % 2 else "weight_norm") for r in present]

    # -- collection -----------------------------------------------------------------------
    def collect(self) -> dict[str, torch.Tensor]:
        """Remove the hooks and return this step's stats (0-d tensors on the device),
        keyed ``layer/<module path>/<stat>``, in ``module_order``; then reset."""
        for h in self._handles:
            h.remove()
        self._handles = []
        acc, self._acc = self._acc, {}
        norms, self._norms = self._norms, None
        torch = self._torch
        per_module: dict[int, dict[str, Tensor]] = {}
        with torch.no_grad():
            if norms is not None:
                values = norms.unbind()
                for r, stat in self._norm_rows:
                    per_module.setdefault(r // 2, {})[stat] = values[r]
            if acc:
                self._collect_acts(acc, per_module)
        out: dict[str, Tensor] = {}
        for i in self._ordered():
            stats = per_module.get(i)
            if stats:
                keys = self._keys[i]
                for stat, v in stats.items():
                    out[keys[stat]] = v
        return out

    def _collect_acts(self, acc: dict[int, _Acc], per_module: dict[int, dict[str, Any]]
                      ) -> None:
        torch = self._torch
        idx = list(acc)
        rows: list[Tensor] = []
        for i in idx:
            a = acc[i]
            rows.extend(a.row if not a.extra_rows else self._pool(a).unbind())
        # (M, 4): mean, std, min, max; stack promotes mixed dtypes (autocast) in one kernel.
        mat = torch.stack(rows).float().view(-1, 4)
        absmax = torch.maximum(mat[:, 2].abs(), mat[:, 3].abs())  # abs: no -0.0
        recips = tuple(1.0 / acc[i].dtype_max for i in idx)
        key = (mat.device, recips)
        recip = self._recip_cache.get(key)
        if recip is None:
            recip = torch.tensor(recips, dtype=torch.float32).to(mat.device, non_blocking=True)
            self._recip_cache = {key: recip}
        res = torch.stack((mat[:, 0], mat[:, 1], absmax, absmax * recip), dim=1)
        flat = res.reshape(-1).unbind()
        for j, i in enumerate(idx):
            d = per_module.setdefault(i, {})
            d["act_mean"], d["act_std"], d["act_absmax"], d["absmax_frac_of_dtype_max"] = (
                flat[4 * j: 4 * j + 4])
            a = acc[i]
            if a.unit_max is not None and a.unit_samples >= MIN_DEAD_SAMPLES:
                dead = (a.unit_max <= 0).float().mean()
                if a.dead_fracs:  # calls with another unit count: average the fractions
                    dead = torch.stack([dead, *a.dead_fracs]).mean()
                d["dead_frac"] = dead
            if a.sat_count is not None:
                d["saturated_frac"] = a.sat_count.float() / a.numel

    def _pool(self, a: _Acc) -> torch.Tensor:
        """Mean, std, min, max over several calls: means weighted by element count, the
        variance by the law of total variance (no sum-of-squares cancellation)."""
        torch = self._torch
        counts = [a.numel - sum(n for n, _ in a.extra_rows), *(n for n, _ in a.extra_rows)]
        r = torch.stack([torch.stack(row).float()
                         for row in (a.row, *(row for _, row in a.extra_rows))])
        w = torch.tensor(counts, dtype=torch.float32).div_(a.numel).to(r.device,
                                                                         non_blocking=True)
        mean = (w * r[:, 0]).sum()
        var = (w * (r[:, 1].square() + (r[:, 0] - mean).square())).sum()
        return torch.stack((mean, var.sqrt(), r[:, 2].min(), r[:, 3].max()))

    # -- order and meta -------------------------------------------------------------------
    def _ordered(self) -> list[int]:
        rest = [i for i in range(len(self._names)) if i not in self._in_order]
        return self._order + rest

    @property
    def module_order(self) -> list[str]:
        """Watched module paths, in the order their forwards first ran on armed steps
        (modules not seen running yet follow, in ``named_modules()`` order)."""
        return [self._names[i] for i in self._ordered()]

    @property
    def meta(self) -> dict[str, Any]:
        """Run meta for the store: ``layer_order`` (``module_order``), ``layer_types``
        (path -> module class name) and ``layer_every``."""
        order = self.module_order
        return {"layer_order": order, "layer_types": {n: self._types[n] for n in order},
                "layer_every": self.every}

    def pop_meta(self) -> dict[str, Any] | None:
        """``meta`` when the order changed since the last call (always on the first), else
        None. The watcher calls it after ``collect()`` and passes it to ``store.set_meta``."""
        if not self._meta_dirty:
            return None
        self._meta_dirty = False
        return self.meta
