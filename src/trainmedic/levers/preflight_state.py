"""The recipe under preflight: its first batches, what its model outputs, copies to step, and
the snapshot that puts everything back after each check.

A check sees a :class:`Subject`. It may run forwards and backwards on the recipe's model (the
snapshot restores parameters, buffers, gradients, train/eval flags, RNG streams and loader
generators afterwards); anything that steps an optimizer runs on :meth:`Subject.copies`,
never on the recipe's own optimizer.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch

from trainmedic.errors import ConfigError, TrainmedicError
from trainmedic.levers.preflight import CheckResult, PreflightConfig, failed
from trainmedic.recipe.recipe import Recipe
from trainmedic.recipe.runner import autocast

if TYPE_CHECKING:
    from trainmedic.levers.preflight import Check

__all__ = ["Subject", "Problem", "IGNORE_INDEX", "path_text", "Probe", "Copies", "split_batch",
           "leading_size", "output_tensor", "integer_leaves", "leaf_at", "autocast", "scalar_loss",
           "flat_grad", "flat_params", "autocast_support", "names_of", "rel_l2"]

logger = logging.getLogger(__name__)

#: Dict keys that name the targets of a batch, preferred over position.
TARGET_KEYS = ("labels", "label", "targets", "target", "y")
#: The target value cross-entropy skips (torch's and Hugging Face's default).
IGNORE_INDEX = -100


class Problem(Exception):
    """Raised inside a check when the recipe's own code fails it: becomes a ``fail`` result."""

    def __init__(self, summary: str, fix: str) -> None:
        super().__init__(summary)
        self.summary = summary
        self.fix = fix


class _StopForward(BaseException):
    """Stops a forward at a hook, carrying what the hook saw. A BaseException, so that a
    loss_fn's own ``except Exception`` does not swallow it."""

    def __init__(self, seen: Any) -> None:
        super().__init__()
        self.seen = seen


# -- batches --------------------------------------------------------------------------------

def _leaves(x: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(x, torch.Tensor):
        yield path, x
    elif isinstance(x, Mapping):
        for k, v in x.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from _leaves(v, path + (i,))


def path_text(path: tuple[Any, ...]) -> str:
    return "batch" + "".join(f"[{k!r}]" for k in path)


def leading_size(batch: Any) -> int | None:
    """Dim 0 of the first tensor of dim >= 1 in the batch; ``None`` when it holds none."""
    for _, t in _leaves(batch):
        if t.dim() >= 1:
            return int(t.shape[0])
    return None


def split_batch(batch: Any, k: int) -> list[Any]:
    """The batch as ``k`` equal micro-batches along dim 0 of every tensor (nested tuples,
    lists, dicts; named tuples keep their type). Non-tensor leaves and 0-dim tensors are
    shared by every part. ``Problem`` when a tensor's dim 0 is not the batch size."""
    n = leading_size(batch)
    if n is None or n % k:
        raise ConfigError(f"k: cannot split a batch of {n} into {k} equal parts")

    def split(x: Any, path: tuple[Any, ...]) -> list[Any]:
        if isinstance(x, torch.Tensor):
            if x.dim() == 0:
                return [x] * k
            if x.shape[0] != n:
                raise Problem(f"{path_text(path)} has {x.shape[0]} rows, not the batch size "
                              f"{n}", "")
            return list(x.tensor_split(k))
        if isinstance(x, Mapping):
            parts = {key: split(v, path + (key,)) for key, v in x.items()}
            out = []
            for i in range(k):
                d = {key: p[i] for key, p in parts.items()}
                try:
                    out.append(cast(Any, type(x))(d))
                except TypeError:
                    out.append(d)
            return out
        if isinstance(x, (list, tuple)):
            cols = [split(v, path + (j,)) for j, v in enumerate(x)]
            rows = [[c[i] for c in cols] for i in range(k)]
            if hasattr(x, "_fields"):  # a named tuple
                return [type(x)(*r) for r in rows]
            return [type(x)(r) for r in rows]
        return [x] * k

    return split(batch, ())


def integer_leaves(batch: Any) -> list[tuple[tuple[Any, ...], torch.Tensor]]:
    """Integer (not bool) tensors of the batch with their paths, dict target keys first,
    then the rest last to first (``(inputs, targets)`` is the common order)."""
    found = [(p, t) for p, t in _leaves(batch)
             if not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool]
    named = [(p, t) for p, t in found if p and p[-1] in TARGET_KEYS]
    return named + [x for x in reversed(found) if x not in named]


def leaf_at(batch: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        batch = batch[key]
    return batch


# -- model output ---------------------------------------------------------------------------

def output_tensor(out: Any) -> torch.Tensor | None:
    """The main floating tensor of a model output: itself, ``logits`` of a mapping or object
    (Hugging Face outputs), else the first floating tensor inside."""
    if isinstance(out, torch.Tensor):
        return out if out.is_floating_point() else None
    logits = out.get("logits") if isinstance(out, Mapping) else getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    for _, t in _leaves(out):
        if t.is_floating_point():
            return t
    return None


@dataclass(frozen=True)
class Probe:
    """What one eval forward of batch 0 showed."""

    output_shape: tuple[int, ...] | None
    """Shape of the model's main output tensor; ``None`` when the loss never called it."""

    classes: int | None
    """C, the output's last dim, when the batch holds integer targets with one label per
    output row; ``None`` otherwise (not a classifier)."""

    target_path: tuple[Any, ...] | None
    """Where the targets are in a batch."""

    reason: str
    """Why it is not a classifier (empty when it is)."""


# -- numbers --------------------------------------------------------------------------------

def autocast_support(precision: str, device_type: str) -> str | None:
    """Why ``precision`` cannot run on this device, or ``None`` when it can."""
    dtype = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
    if device_type == "cuda":
        if precision == "bf16-mixed" and not torch.cuda.is_bf16_supported():
            return "no bf16 on this CUDA device"
        return None
    if not torch.amp.is_autocast_available(device_type):
        return f"no autocast on {device_type}"
    try:
        with torch.autocast(device_type=device_type, dtype=dtype):
            a = torch.ones(2, 2, device=device_type)
            ok = (a @ a).dtype == dtype
    except (RuntimeError, ValueError, TypeError) as exc:
        return f"no {dtype} autocast on this {device_type.upper()} ({type(exc).__name__})"
    return None if ok else f"no {dtype} autocast on this {device_type.upper()}"


def scalar_loss(loss: Any, *, need_graph: bool = True) -> torch.Tensor:
    """The loss, checked: a one-element tensor, attached to autograd when ``need_graph``."""
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else ""
        raise Problem(f"loss_fn returned {type(loss).__name__}{shape}, not a scalar tensor",
                      "return the scalar loss of the micro-batch (its mean), e.g. "
                      "F.cross_entropy(logits, targets)")
    if need_graph and not loss.requires_grad:
        raise Problem("the loss has no autograd graph (a .detach(), .item() or no_grad "
                      "between the model's output and the loss): nothing can learn",
                      "compute the loss from the model's output without .detach(), .item(), "
                      "torch.no_grad() or a numpy round trip")
    return loss.reshape(())


def flat_grad(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """Every gradient as one fp32 vector on the CPU (a missing one counts as zeros)."""
    parts = [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().float()
             .reshape(-1).cpu() for p in params]
    return torch.cat(parts) if parts else torch.zeros(0)


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    """Every parameter as one fp32 vector on the CPU."""
    return torch.cat([p.detach().float().reshape(-1).cpu() for p in model.parameters()])


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| (``inf`` when b is zero and a is not; 0 when both are)."""
    num = float((a.double() - b.double()).norm())
    den = float(b.double().norm())
    if den == 0:
        return 0.0 if num == 0 else float("inf")
    return num / den


def names_of(names: list[str], limit: int = 8) -> tuple[str, ...]:
    """Parameter names grouped by module path: ``fc2 (weight, bias)``; at most ``limit``."""
    groups: dict[str, list[str]] = {}
    for n in names:
        mod, _, leaf = n.rpartition(".")
        groups.setdefault(mod or "(model)", []).append(leaf)
    out = [f"{m} ({', '.join(leaves)})" for m, leaves in groups.items()]
    return tuple(out[:limit]) + ((f"and {len(out) - limit} more modules",)
                                 if len(out) > limit else ())


# -- copies ---------------------------------------------------------------------------------

@dataclass
class Copies:
    """An independent copy of the recipe's model, optimizer (state included) and scaler."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: Any | None


def _rebuild_optimizer(opt: torch.optim.Optimizer, memo: dict[int, Any]) -> Any:
    groups = [{**{k: v for k, v in g.items() if k != "params"},
               "params": [memo[id(p)] for p in g["params"]]} for g in opt.param_groups]
    cls = cast(Any, type(opt))
    try:
        new = cls(groups)
    except TypeError:
        try:
            new = cls(groups, **opt.defaults)
        except TypeError:
            new = None
    if new is not None:
        # load_state_dict keeps the very state tensors it is given (`.to` of a tensor already
        # on the right device and dtype is the tensor itself): copy them, or stepping the copy
        # would move the recipe's own optimizer state.
        new.load_state_dict(copy.deepcopy(opt.state_dict()))
        return new
    # A constructor with required arguments: deep-copy it through the model's memo, so its
    # parameters are the copy's. An LR scheduler patches `step` on the instance with a wrapper
    # that steps the ORIGINAL optimizer (torch.optim.lr_scheduler): drop it.
    new = copy.deepcopy(opt, memo)
    if getattr(new.__dict__.get("step"), "_wrapped_by_lr_sched", False):
        del new.__dict__["step"]
    return new


# -- the snapshot ---------------------------------------------------------------------------

def _loader_generators(data: Any) -> list[torch.Generator]:
    found: list[torch.Generator] = []
    for obj in (data, getattr(data, "sampler", None), getattr(data, "batch_sampler", None),
                getattr(getattr(data, "batch_sampler", None), "sampler", None)):
        g = getattr(obj, "generator", None)
        if isinstance(g, torch.Generator) and all(g is not f for f in found):
            found.append(g)
    return found


class _Snapshot:
    """Everything a check may disturb, copied now, put back by :meth:`restore`."""

    def __init__(self, recipe: Recipe) -> None:
        from trainmedic.checkpoint.training_state import capture_rng

        model = recipe.model
        self.params = [(p, p.detach().clone(), p.requires_grad,
                        None if p.grad is None else p.grad.detach().clone())
                       for p in model.parameters()]
        self.buffers = [(b, b.detach().clone()) for b in model.buffers()]
        self.flags = [(m, m.training) for m in model.modules()]
        self.rng = capture_rng()
        self.generators = [(g, g.get_state()) for g in _loader_generators(recipe.data)]
        self.tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)

    def restore(self) -> None:
        from trainmedic.checkpoint.training_state import restore_rng

        with torch.no_grad():
            for p, value, requires_grad, grad in self.params:
                p.copy_(value)
                p.requires_grad_(requires_grad)
                p.grad = None if grad is None else grad.clone()
            for b, value in self.buffers:
                b.copy_(value)
        for m, training in self.flags:
            m.training = training
        restore_rng(self.rng)
        for g, state in self.generators:
            g.set_state(state)
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.tf32


class Subject:
    """The recipe under check, with the batches drawn once and facts found once."""

    def __init__(self, recipe: Recipe, config: PreflightConfig) -> None:
        self.recipe = recipe
        self.config = config
        self.device_type = next((p.device.type for p in recipe.model.parameters()), "cpu")
        self._batches: list[Any] | None = None
        self._probe: Probe | None = None
        self._snapshot: _Snapshot | None = None

    # -- state ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        self._snapshot = _Snapshot(self.recipe)
        try:
            yield
        finally:
            self._snapshot.restore()
            self._snapshot = None

    def run(self, check: Check) -> CheckResult:
        """Run one check, turn the recipe's own failures into a ``fail`` and put back the
        state. The library's usage errors (an empty loader) propagate."""
        try:
            return check.run(self)
        except TrainmedicError:
            raise
        except Problem as exc:
            return failed(check.name, exc.summary, exc.fix or "see the summary")
        except Exception as exc:  # noqa: BLE001 - the recipe's code failed the check
            logger.debug("check %s raised", check.name, exc_info=True)
            msg = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            return failed(check.name, f"the recipe's code raised {msg}",
                          "make loss_fn(model, batch) run on one batch of recipe.data "
                          "(TRAINMEDIC_DEBUG=1 shows the traceback)")
        finally:
            if self._snapshot is not None:
                self._snapshot.restore()

    def seed(self) -> None:
        """Seed python, numpy and torch (CPU and CUDA) with ``config.seed``."""
        import numpy as np

        random.seed(self.config.seed)
        np.random.seed(self.config.seed)
        torch.manual_seed(self.config.seed)

    # -- data ----------------------------------------------------------------------------
    @property
    def batches(self) -> list[Any]:
        """The first ``max(config.batches, grad_accum)`` batches of ``recipe.data`` (fewer
        when an epoch is shorter); ``ConfigError`` when it yields none."""
        if self._batches is None:
            want = max(self.config.batches, self.recipe.grad_accum)
            it = iter(self.recipe.data)
            out: list[Any] = []
            try:
                for batch in it:
                    out.append(batch)
                    if len(out) >= want:
                        break
            finally:
                shutdown = getattr(it, "_shutdown_workers", None)
                if callable(shutdown):
                    shutdown()
            if not out:
                raise ConfigError("data: recipe.data yielded no batch; give the recipe data "
                                  "to check")
            self._batches = out
        return self._batches

    # -- the model -----------------------------------------------------------------------
    def forward_output(self, model: torch.nn.Module, batch: Any) -> Any:
        """The model's raw output for ``batch`` as ``loss_fn`` calls it (the forward stops
        there: the loss itself is not computed); ``None`` when the loss never calls it."""

        def hook(_m: Any, _args: Any, out: Any) -> None:
            raise _StopForward(out)

        return self._first_call(model.register_forward_hook(hook), model, batch)

    def forward_inputs(self, model: torch.nn.Module, batch: Any) -> tuple[Any, Any] | None:
        """The ``(args, kwargs)`` ``loss_fn`` calls the model with for ``batch`` (computed
        under no_grad; the forward itself does not run); ``None`` when it never calls it."""

        def hook(_m: Any, args: Any, kwargs: Any) -> None:
            raise _StopForward((args, kwargs))

        handle = model.register_forward_pre_hook(hook, with_kwargs=True)
        return self._first_call(handle, model, batch)

    def _first_call(self, handle: Any, model: torch.nn.Module, batch: Any) -> Any:
        """Run ``loss_fn`` under no_grad until ``handle``'s hook stops it with what it saw;
        ``None`` when the loss never calls the model."""
        try:
            with torch.no_grad():
                self.recipe.loss_fn(model, batch)
        except _StopForward as stop:
            return stop.seen
        finally:
            handle.remove()
        return None

    @property
    def probe(self) -> Probe:
        """Output shape, classes and target path, from one eval forward of batch 0."""
        if self._probe is None:
            self._probe = self._find_probe()
        return self._probe

    def _find_probe(self) -> Probe:
        model = self.recipe.model
        model.eval()
        batch = self.batches[0]
        out = output_tensor(self.forward_output(model, batch))
        if out is None:
            return Probe(None, None, None, "the loss never called the recipe's model, or its "
                         "output holds no floating tensor")
        shape = tuple(int(s) for s in out.shape)
        if out.dim() < 2 or shape[-1] < 2:
            return Probe(shape, None, None, f"not a classifier: the model's output "
                         f"{list(shape)} has no class dimension > 1")
        classes = shape[-1]
        rows = out.numel() // classes
        ints = integer_leaves(batch)
        if not ints:
            return Probe(shape, None, None, "not a classifier: the batch holds no integer "
                         "targets")
        for path, t in ints:
            if t.numel() == rows:
                return Probe(shape, classes, path, "")
        return Probe(shape, None, None, f"not a classifier: no integer tensor in the batch "
                     f"has one label per output row ({rows} rows of {classes})")

    def trainable(self) -> list[tuple[str, torch.nn.Parameter]]:
        return [(n, p) for n, p in self.recipe.model.named_parameters() if p.requires_grad]

    def copies(self) -> Copies:
        """Deep copies of model, optimizer (with its state) and scaler: stepping them leaves
        the recipe's own untouched."""
        memo: dict[int, Any] = {}
        model = copy.deepcopy(self.recipe.model, memo)
        optimizer = _rebuild_optimizer(self.recipe.optimizer, memo)
        scaler = copy.deepcopy(self.recipe.scaler) if self.recipe.scaler is not None else None
        return Copies(model=model, optimizer=optimizer, scaler=scaler)

    def step(self, c: Copies, batches: list[Any]) -> float:
        """One optimizer step of the copies, as the runner takes it: the micro-batches'
        losses over ``len(batches)`` under autocast, backward (through the scaler), unscale,
        clip to ``max_grad_norm``, step, update; returns the mean loss. The scheduler is not
        stepped."""
        r = self.recipe
        c.model.train()
        c.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for batch in batches:
            with autocast(r.precision, self.device_type):
                loss = scalar_loss(r.loss_fn(c.model, batch))
            scaled = loss / len(batches)
            (c.scaler.scale(scaled) if c.scaler is not None else scaled).backward()
            total += float(loss.detach().float())
        if r.max_grad_norm is not None:
            if c.scaler is not None:
                c.scaler.unscale_(c.optimizer)
            torch.nn.utils.clip_grad_norm_(c.model.parameters(), r.max_grad_norm)
        if c.scaler is not None:
            c.scaler.step(c.optimizer)
            c.scaler.update()
        else:
            c.optimizer.step()
        c.optimizer.zero_grad(set_to_none=True)
        return total / len(batches)

    # -- labels ----------------------------------------------------------------------------
    def labels(self, *, first_only: bool = False) -> torch.Tensor | None:
        """Every target of the drawn batches (``first_only``: of batch 0), flattened (int64,
        CPU); ``None`` when the recipe is not a classifier."""
        probe = self.probe
        if probe.classes is None or probe.target_path is None:
            return None
        parts = []
        for batch in self.batches[:1] if first_only else self.batches:
            t = leaf_at(batch, probe.target_path)
            if isinstance(t, torch.Tensor):
                parts.append(t.detach().reshape(-1).to("cpu", torch.int64))
        return torch.cat(parts)

    def label_problem(self) -> str | None:
        """Why the loss cannot be computed (labels out of range), or ``None``: checks that
        compute the loss skip rather than trip an index error (a device-side assert on CUDA,
        which would end the process)."""
        labels = self.labels()
        if labels is None or self.probe.classes is None:
            return None
        valid = labels[labels != IGNORE_INDEX]
        if valid.numel() and (int(valid.min()) < 0 or int(valid.max()) >= self.probe.classes):
            return "labels out of range (see label_range): the loss cannot be computed"
        return None
