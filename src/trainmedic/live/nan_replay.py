"""The NaN guard's replay engine: re-run one step with hooks on every module, record where a
NaN/inf first appeared, and put the model back as it was.

:func:`trainmedic.live.nan_guard.localize_nonfinite` is the entry point and says what the
verdicts mean; this module is how they are found.

Why tensor hooks on per-module input *aliases* and not ``register_full_backward_hook``: that
hook wraps a module's inputs and outputs in an autograd function whose outputs may not be
modified in place, so ``nn.ReLU(inplace=True)`` after a hooked module or ``x += ...`` in a
forward raises - a localizer that crashes on ResNets is no use. Here a forward pre-hook passes
each module ``x.view_as(x)`` instead of ``x``: a view shares storage, so in-place ops behave as
before, and a hook on the view sees only *this* module's share of the input gradient (a hook
on ``x`` sees the sum over all of ``x``'s consumers, e.g. a residual branch, and would blame
the wrong one). Outputs and parameters get tensor hooks too. Inputs are read in the pre-hook
(before a module can modify them in place); every statistic stays on the device until one
transfer per device.

:class:`Replay` is a context manager: entering snapshots each ``.grad``, every module buffer
and the CPU/CUDA RNG states; leaving removes the hooks and restores them all.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainmedic.live.nan_guard import MAX_PARAM_NAMES, Localization, RngState
from trainmedic.numbers import fmt_num

if TYPE_CHECKING:
    import torch

__all__ = ["Replay"]


def _set_rng_state(state: RngState | tuple[Any, Any]) -> None:
    """Set a captured state; a ``(cpu_state, cuda_state_or_None)`` pair is read as an
    RngState of the current CUDA device."""
    import torch

    if isinstance(state, tuple):
        cpu, cuda = state
        state = RngState(cpu, cuda, torch.cuda.current_device() if cuda is not None else None)
    torch.set_rng_state(state.cpu)
    if state.cuda is not None and state.cuda_device is not None:
        torch.cuda.set_rng_state(state.cuda, state.cuda_device)


def _tensors(obj: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    """The floating-point tensors in a nested structure of tuples, lists and dicts (HF model
    outputs are dicts)."""
    import torch

    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() or obj.is_complex():
            yield obj
    elif depth < 6 and isinstance(obj, (tuple, list)):
        for o in obj:
            yield from _tensors(o, depth + 1)
    elif depth < 6 and isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o, depth + 1)


def _show(name: str) -> str:
    return "the root module" if name == "" else f"`{name}`"


def _kind(nan: float, bad: float) -> str:
    inf = bad - nan
    if nan and inf:
        return "NaN and inf"
    return "NaN" if nan else "inf"


@dataclass
class _Stat:
    """Ids of per-tensor statistic vectors ``[n_nonfinite, absmax, n_nan]`` (on the device)."""

    ids: list[int] = field(default_factory=list)
    numel: int = 0
    dtype: str | None = None


@dataclass
class _Call:
    """One module call in the replay."""

    index: int
    name: str
    parent: int | None
    inp: _Stat = field(default_factory=_Stat)
    out: _Stat = field(default_factory=_Stat)
    exit_order: int | None = None
    in_grads: list[int] = field(default_factory=list)   # indices into Replay.grads
    out_grads: list[int] = field(default_factory=list)


@dataclass
class _Grad:
    """A gradient seen by a tensor hook, ``seq`` its position in backward order."""

    seq: int
    vec: int
    numel: int
    what: str  # "input", "output" or "parameter <name>"


class Replay:
    """One localization: snapshots state on enter, restores it on exit."""

    def __init__(self, model: torch.nn.Module, step: int) -> None:
        import torch

        self.torch = torch
        self.model = model
        self.step = step
        self.inner = _unwrap(model)
        self.names = {id(m): n for n, m in self.inner.named_modules()}
        self.modules = {n: m for n, m in self.inner.named_modules()}
        self.params = list(self.inner.named_parameters())
        self.vecs: list[torch.Tensor] = []
        self.values: list[list[float]] = []
        self.calls: list[_Call] = []
        self.stack: list[int] = []
        self.grads: list[_Grad] = []
        self.param_grads: dict[str, int] = {}
        self.handles: list[Any] = []
        self.saved_buffers: list[tuple[torch.nn.Module, str, torch.Tensor, torch.Tensor]] = []
        self.seq = itertools.count()
        self.exits = itertools.count()
        self.recording = False

    # -- state ---------------------------------------------------------------------------
    def __enter__(self) -> Replay:
        torch = self.torch
        devices = {p.device for _, p in self.params} | {
            b.device for b in self.model.buffers()}
        self.cuda = sorted({d.index if d.index is not None else torch.cuda.current_device()
                            for d in devices if d.type == "cuda"})
        self.rng_cpu = torch.get_rng_state()
        self.rng_cuda = [torch.cuda.get_rng_state(i) for i in self.cuda]
        self.saved_grads = [(p, p.grad) for _, p in self.params]
        seen: set[int] = set()
        with torch.no_grad():
            for m in self.model.modules():
                for key, b in m._buffers.items():
                    if b is not None and id(b) not in seen:
                        seen.add(id(b))
                        self.saved_buffers.append((m, key, b, b.detach().clone()))
        for _, p in self.params:
            p.grad = None
        return self

    def __exit__(self, *exc: object) -> None:
        torch = self.torch
        self.recording = False
        for h in self.handles:
            h.remove()
        self.handles.clear()
        for p, g in self.saved_grads:
            p.grad = g
        with torch.no_grad():
            for m, key, b, saved in self.saved_buffers:
                if m._buffers.get(key) is not b:
                    m._buffers[key] = b  # the forward re-bound it: put the original back
                b.copy_(saved)
        torch.set_rng_state(self.rng_cpu)
        for i, s in zip(self.cuda, self.rng_cuda, strict=True):
            torch.cuda.set_rng_state(s, i)

    # -- statistics ----------------------------------------------------------------------
    def _stat(self, st: _Stat, tensors: Iterator[torch.Tensor]) -> None:
        torch = self.torch
        with torch.no_grad():
            for t in tensors:
                if t.numel() == 0 or t.layout != torch.strided:
                    continue
                t = t.detach()
                # NaN ignored (-1 marks it; |x| >= 0), so an inf shows as inf.
                absmax = torch.nan_to_num(t.abs(), nan=-1.0, posinf=math.inf).amax()
                vec = torch.stack([(~torch.isfinite(t)).sum().to(torch.float64),
                                   absmax.to(torch.float64),
                                   torch.isnan(t).sum().to(torch.float64)])
                st.ids.append(len(self.vecs))
                self.vecs.append(vec)
                st.numel += t.numel()
                if st.dtype is None:
                    st.dtype = str(t.dtype)

    def _fetch(self) -> None:
        """Bring every pending statistic to the host: one transfer per device."""
        pending = self.vecs[len(self.values):]
        by_dev: dict[Any, list[int]] = {}
        for i, v in enumerate(pending):
            by_dev.setdefault(v.device, []).append(i)
        rows: dict[int, list[float]] = {}
        for idx in by_dev.values():
            fetched = self.torch.stack([pending[i] for i in idx]).tolist()
            rows.update(zip(idx, fetched, strict=True))
        self.values.extend(rows[i] for i in range(len(pending)))

    def _summary(self, st: _Stat) -> tuple[float, float | None, float]:
        """(n_nonfinite, absmax or None, n_nan) over a _Stat's tensors."""
        rows = [self.values[i] for i in st.ids]
        if not rows:
            return 0.0, None, 0.0
        top = max(r[1] for r in rows)
        return (sum(r[0] for r in rows), math.nan if top < 0 else top, sum(r[2] for r in rows))

    # -- hooks ---------------------------------------------------------------------------
    def _pre(self, module: torch.nn.Module, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]] | None:
        if not self.recording:
            return None
        call = _Call(len(self.calls), self.names.get(id(module), "?"),
                     self.stack[-1] if self.stack else None)
        self.calls.append(call)
        self.stack.append(call.index)
        self._stat(call.inp, itertools.chain(_tensors(args), _tensors(kwargs)))
        changed = [False]
        new_args = tuple(self._alias(a, call, changed) for a in args)
        new_kwargs = {k: self._alias(v, call, changed) for k, v in kwargs.items()}
        return (new_args, new_kwargs) if changed[0] else None

    def _alias(self, obj: Any, call: _Call, changed: list[bool], depth: int = 0) -> Any:
        """``obj`` with each grad-requiring float tensor replaced by a view of itself that
        carries a hook: the gradient this module sends back to that input."""
        torch = self.torch
        if isinstance(obj, torch.Tensor):
            if (obj.requires_grad and (obj.is_floating_point() or obj.is_complex())
                    and obj.layout == torch.strided and not isinstance(obj, torch.nn.Parameter)):
                view = obj.view_as(obj)
                self._grad_hook(view, "input", call.in_grads)
                changed[0] = True
                return view
            return obj
        if depth < 6 and type(obj) in (tuple, list):
            return type(obj)(self._alias(o, call, changed, depth + 1) for o in obj)
        if depth < 6 and type(obj) is dict:
            return {k: self._alias(v, call, changed, depth + 1) for k, v in obj.items()}
        return obj

    def _grad_hook(self, t: torch.Tensor, what: str, into: list[int] | None = None) -> None:
        """Record the gradient of ``t`` (a call's input alias or output, or a parameter)."""
        def hook(g: torch.Tensor) -> None:
            st = _Stat()
            self._stat(st, iter((g,)))
            if st.ids:
                if into is None:
                    self.param_grads[what.removeprefix("parameter ")] = len(self.grads)
                else:
                    into.append(len(self.grads))
                self.grads.append(_Grad(next(self.seq), st.ids[0], st.numel, what))

        self.handles.append(t.register_hook(hook))

    def _post(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
              output: Any) -> None:
        if not self.recording or not self.stack:
            return
        call = self.calls[self.stack.pop()]
        call.exit_order = next(self.exits)
        outs = list(_tensors(output))
        self._stat(call.out, iter(outs))
        seen: set[int] = set()
        for t in outs:
            if t.requires_grad and id(t) not in seen:
                seen.add(id(t))
                self._grad_hook(t, "output", call.out_grads)

    # -- the replay ------------------------------------------------------------------------
    def localize(self, replay: Callable[[], torch.Tensor],
                 rng_state: RngState | tuple[Any, Any] | None,
                 loss_scale: float | torch.Tensor | None) -> Localization:
        torch = self.torch
        bad_params = self._nonfinite_params()
        if bad_params:
            return self._state_corrupted(bad_params)
        for m in self.modules.values():
            self.handles.append(m.register_forward_pre_hook(self._pre, with_kwargs=True))
            self.handles.append(m.register_forward_hook(self._post, with_kwargs=True,
                                                        always_call=True))
        for name, p in self.params:
            if p.requires_grad:
                self._grad_hook(p, f"parameter {name}")
        if rng_state is not None:
            _set_rng_state(rng_state)
        sync = getattr(self.model, "no_sync", None)
        ctx = sync() if callable(sync) else contextlib.nullcontext()
        with ctx, torch.enable_grad():
            self.recording = True
            loss = replay()
            self.recording = False
            self._fetch()
            found = self._forward_culprit()
            if found is not None:
                return found
            if not isinstance(loss, torch.Tensor):
                return self._not_reproduced(
                    f"the replay closure returned {type(loss).__name__}, not the loss tensor")
            loss_v = loss.detach().double().sum().item()
            if not math.isfinite(loss_v):
                return self._loss_nonfinite(loss_v)
            if not loss.requires_grad:
                return self._not_reproduced(
                    f"the replayed loss {loss_v:.4g} is finite and does not require grad, so "
                    "its backward cannot be replayed")
            target = loss.sum() if loss.numel() != 1 else loss.reshape(())
            if loss_scale is not None:
                target = target * loss_scale
            # Module hooks stay off in backward (activation checkpointing re-runs forwards
            # there); the tensor hooks registered in the forward record the gradients.
            target.backward()
            del target, loss
        self._fetch()
        return self._backward_culprit(loss_v)

    def _nonfinite_params(self) -> list[str]:
        stats = []
        for name, p in self.params:
            stats.append((name, _Stat()))
            self._stat(stats[-1][1], _tensors(p))
        self._fetch()
        return [name for name, st in stats if self._summary(st)[0] > 0]

    def _owner(self, param: str) -> str:
        return param.rpartition(".")[0]

    def _param_absmax(self, module: str | None) -> float | None:
        if module is None or module not in self.modules:
            return None
        st = _Stat()
        self._stat(st, _tensors(list(self.modules[module].parameters())))
        self._fetch()
        return self._summary(st)[1]

    def _cls(self, name: str) -> str:
        m = self.modules.get(name)
        return type(m).__name__ if m is not None else "?"

    # -- verdicts --------------------------------------------------------------------------
    def _state_corrupted(self, bad: list[str]) -> Localization:
        module = self._owner(bad[0])
        pmax = self._param_absmax(module)
        more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
        return Localization(
            module, "input", self.step,
            f"{len(bad)} parameter(s) were already non-finite before step {self.step} was "
            f"replayed ({bad[0]}{more}, in {_show(module)} ({self._cls(module)})): an earlier "
            "update corrupted the weights, so the step was not replayed",
            param_absmax=pmax, param_nonfinite=bad[:MAX_PARAM_NAMES])

    def _forward_culprit(self) -> Localization | None:
        """The first call (in exit order, so innermost first) with finite inputs and a
        non-finite output; else a non-finite value that entered from outside the modules."""
        exited = sorted((c for c in self.calls if c.exit_order is not None),
                        key=lambda c: c.exit_order or 0)
        for c in exited:
            in_bad, in_max, _ = self._summary(c.inp)
            out_bad, out_max, out_nan = self._summary(c.out)
            if in_bad == 0 and out_bad > 0:
                return self._forward_verdict(c, in_max, out_max, out_bad, out_nan)
        for c in self.calls:  # entry order
            in_bad, in_max, in_nan = self._summary(c.inp)
            if in_bad > 0:
                return Localization(
                    c.name, "input", self.step,
                    f"the input of {_show(c.name)} ({self._cls(c.name)}) already held "
                    f"{int(in_bad)} {_kind(in_nan, in_bad)} value(s) of {c.inp.numel} when the "
                    "forward reached it and no module before it made them: the batch (or a "
                    "tensor built outside the modules) is non-finite",
                    input_absmax=in_max, param_absmax=self._param_absmax(c.name),
                    output_absmax=self._summary(c.out)[1], dtype=c.inp.dtype)
        return None

    def _forward_verdict(self, c: _Call, in_max: float | None, out_max: float | None,
                         out_bad: float, out_nan: float) -> Localization:
        pmax = self._param_absmax(c.name)
        where_txt = ""
        kids = [k for k in self.calls if self._descends(k, c)]
        if kids:
            first_bad = next((k for k in kids if self._summary(k.inp)[0] > 0), None)
            if first_bad is not None:
                where_txt = (f"; it arose in the code of {_show(c.name)} itself, between its "
                             f"submodules: {_show(first_bad.name)} was the first to receive "
                             "it")
            else:
                where_txt = (f"; it arose in the code of {_show(c.name)} itself, after its "
                             "submodules returned finite values")
        return Localization(
            c.name, "forward", self.step,
            f"output of {_show(c.name)} ({self._cls(c.name)}) became {_kind(out_nan, out_bad)} "
            f"({int(out_bad)} of {c.out.numel} values; first in forward order) while its "
            f"inputs were finite (input abs-max {fmt_num(in_max)}, parameter abs-max "
            f"{fmt_num(pmax)}){where_txt}",
            input_absmax=in_max, param_absmax=pmax, output_absmax=out_max, dtype=c.out.dtype)

    def _descends(self, k: _Call, c: _Call) -> bool:
        p = k.parent
        while p is not None:
            if p == c.index:
                return True
            p = self.calls[p].parent
        return False

    def _root_calls(self) -> list[_Call]:
        return [c for c in self.calls if c.parent is None]

    def _loss_nonfinite(self, loss_v: float) -> Localization:
        roots = self._root_calls()
        out_max = max((m for c in roots if (m := self._summary(c.out)[1]) is not None),
                      default=None)
        seen = (f"the model's output was finite (abs-max {fmt_num(out_max)})" if roots else
                "no module of the model ran in the replay")
        return Localization(
            None, "loss", self.step,
            f"{seen} but the loss computed from it was {loss_v}: the loss function itself "
            "produced it (a log of 0, a division by 0, a NaN label)",
            input_absmax=out_max)

    def _not_reproduced(self, why: str) -> Localization:
        return Localization(None, "not_reproduced", self.step, why)

    def _backward_culprit(self, loss_v: float) -> Localization:
        def bad(i: int) -> bool:
            return self.values[self.grads[i].vec][0] > 0

        owners: dict[str, list[str]] = {}
        for name, _ in self.params:
            owners.setdefault(self._owner(name), []).append(name)
        best: tuple[int, int, _Call, _Grad] | None = None
        for c in self.calls:
            if not c.out_grads or any(bad(i) for i in c.out_grads):
                continue
            ins = [self.grads[i] for i in c.in_grads if bad(i)]
            ins += [self.grads[self.param_grads[p]] for p in owners.get(c.name, ())
                    if p in self.param_grads and bad(self.param_grads[p])]
            if not ins:
                continue
            g = min(ins, key=lambda g: g.seq)
            key = (g.seq, -c.name.count(".") - (c.name != ""))
            if best is None or key < best[:2]:
                best = (key[0], key[1], c, g)
        if best is not None:
            return self._backward_verdict(best[2], best[3])
        roots = self._root_calls()
        if any(bad(i) for c in roots for i in c.out_grads):
            return Localization(
                None, "loss", self.step,
                f"the loss ({loss_v:.4g}) was finite but its gradient with respect to the "
                "model's output was not: the loss function's backward produced it (a sqrt or "
                "norm of 0, a division by a tiny value)")
        bad_p = sorted((self.grads[i] for i in self.param_grads.values() if bad(i)),
                       key=lambda g: g.seq)
        if bad_p:
            pname = bad_p[0].what.removeprefix("parameter ")
            module = self._owner(pname)
            return Localization(
                module, "backward", self.step,
                f"the gradient of parameter {pname} was non-finite, but no module call "
                "produced it: the parameter is used outside its module's forward (e.g. in the "
                "loss)", param_absmax=self._param_absmax(module))
        return self._not_reproduced(
            f"replaying step {self.step} from the same parameters, buffers and RNG state gave "
            f"a finite loss ({loss_v:.4g}) and finite gradients: the non-finite value did not "
            "come from this batch and state (a non-deterministic kernel, the loss scale, a "
            "gradient all-reduced from another rank, or a closure that does not recompute the "
            "step)")

    def _backward_verdict(self, c: _Call, g: _Grad) -> Localization:
        row = self.values[g.vec]
        out_g = max((self.values[self.grads[i].vec][1] for i in c.out_grads), default=None)
        _, in_max, _ = self._summary(c.inp)
        _, out_max, _ = self._summary(c.out)
        pmax = self._param_absmax(c.name)
        target = "input" if g.what == "input" else g.what
        return Localization(
            c.name, "backward", self.step,
            f"{_show(c.name)} ({self._cls(c.name)}) received a finite gradient for its output "
            f"(abs-max {fmt_num(out_g)}) and produced a non-finite gradient for its {target} "
            f"({int(row[0])} {_kind(row[2], row[0])} of {g.numel} values; first in backward "
            "order); forward "
            f"input abs-max {fmt_num(in_max)}, output abs-max {fmt_num(out_max)}",
            input_absmax=in_max, param_absmax=pmax, output_absmax=out_max,
            dtype=c.out.dtype)


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module inside DDP/DataParallel or ``torch.compile``, so module names match
    ``model.named_modules()`` of the model the user wrote."""
    import torch

    inner = model
    for _ in range(4):
        wrapped = (inner.module if isinstance(inner, (torch.nn.parallel.DistributedDataParallel,
                                                      torch.nn.DataParallel))
                   else getattr(inner, "_orig_mod", None))  # torch.compile's OptimizedModule
        if not isinstance(wrapped, torch.nn.Module):
            break
        inner = wrapped
    return inner
