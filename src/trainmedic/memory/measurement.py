"""Measure mode: trace real training steps of any ``nn.Module`` without allocating its memory.

``measure(factory, config)`` builds the model under ``FakeTensorMode`` (tensors with shapes,
dtypes and devices but no data; on the meta device first when fake construction fails), then
runs ``config.steps`` training steps -- ``zero_grad``, forward, loss, ``backward``,
``optimizer.step`` -- under a :class:`~trainmedic.memory.tracker.StorageTracker`. Autograd, the
kernels' choice of what to save and the optimizer's own code all run for real; only the data is
missing. The ledger reports the highest live total over the steps (the second step runs with the
optimizer state present), the phase it happened in, and the bytes live at that instant by
category. Every figure's basis is ``measured``.

Inputs and loss, unless given:

* inputs: ``torch.randint(0, V, (batch_size, seq_len))`` token ids, with ``V`` the model's
  ``config.vocab_size`` (a model without one needs ``inputs``);
* loss: the output's ``loss`` when it is a tensor; else cross-entropy of ``(b, s, V)`` logits
  (the output, its ``logits``, or its first element) against the input ids, unshifted; else
  ``.sum()`` of the output tensor.

The step drops the model output and the batch after the loss (as the HF Trainer's
``compute_loss`` does), so only what autograd saved outlives the forward pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from trainmedic.errors import (
    ConfigError,
    FactoryError,
    InputError,
    UnreadableInputError,
)
from trainmedic.memory.ledger import CATEGORIES, Basis, Ledger, ModuleBytes

__all__ = [
    "PRECISIONS",
    "OPTIMIZERS",
    "DEVICE_PROFILES",
    "FactoryError",
    "MeasureConfig",
    "measure",
    "load_factory",
    "default_inputs",
    "default_loss",
]

logger = logging.getLogger(__name__)

PRECISIONS: tuple[str, ...] = ("fp32", "bf16-mixed", "fp16-mixed", "bf16")
OPTIMIZERS: tuple[str, ...] = ("sgd", "sgd-momentum", "adam", "adamw", "adafactor")
DEVICE_PROFILES: tuple[str, ...] = ("cpu", "cuda")
# Optimizers the analytic planner knows but measure mode cannot run: torch has no Lion, and
# bitsandbytes' 8-bit Adam keeps its state in CUDA kernels that fake tensors cannot trace.
_PLANNER_ONLY_OPTIMIZERS: tuple[str, ...] = ("lion", "adam-8bit")
# The CUDA caching allocator hands out blocks in multiples of 512 bytes.
_CUDA_BLOCK_BYTES = 512


@dataclass(kw_only=True, frozen=True)
class MeasureConfig:
    """What to trace: the batch shape, precision, optimizer and kernel profile."""

    batch_size: int
    """Micro-batch size (sequences per step); > 0."""
    seq_len: int
    """Tokens per sequence (passed to ``inputs``); > 0."""
    inputs: Callable[[Any, int, int], Any] | None = None
    """``inputs(model, batch_size, seq_len)`` -> the batch: a tensor (``model(batch)``), a tuple
    or list (``model(*batch)``) or a mapping (``model(**batch)``). It runs under fake mode, so
    ``torch.randint``/``torch.randn`` there allocate nothing. Default: token ids, see module
    docs."""
    loss: Callable[[Any, Any], Any] | None = None
    """``loss(output, batch)`` -> scalar tensor. Default: see module docs."""
    precision: str = "fp32"
    """``fp32``; ``bf16-mixed``/``fp16-mixed``: fp32 parameters with ``torch.autocast`` over the
    forward and the loss (PyTorch AMP; no GradScaler is traced); ``bf16``: parameters cast to
    bfloat16 (pure bf16)."""
    optimizer: str = "adamw"
    """``sgd`` (no momentum), ``sgd-momentum``, ``adam``, ``adamw`` or ``adafactor``
    (``lion`` and ``adam-8bit`` are covered by the analytic planner only)."""
    device_profile: str = "cpu"
    """Device whose kernels decide what is saved: ``cpu`` traces fake CPU tensors; ``cuda``
    needs a visible GPU (fake CUDA tensors cannot run autograd on a CPU-only torch)."""
    steps: int = 2
    """Training steps to trace (>= 1); from the second on, the optimizer state is present."""
    zero_grad_set_to_none: bool = True
    """``optimizer.zero_grad(set_to_none=...)``: False keeps the gradients allocated across
    steps."""

    def __post_init__(self) -> None:
        for name in ("batch_size", "seq_len", "steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"{name}: got {value!r}, expected a positive integer; pass e.g. {name}=1"
                )
        if self.precision not in PRECISIONS:
            raise ConfigError(
                f"precision: got {self.precision!r}, expected one of {', '.join(PRECISIONS)}"
            )
        if self.optimizer in _PLANNER_ONLY_OPTIMIZERS:
            raise ConfigError(
                f"optimizer: {self.optimizer!r} is not supported in measure mode (it cannot be "
                f"traced on fake tensors); use `trainmedic memory plan --optimizer "
                f"{self.optimizer}`, which covers it analytically, or one of "
                f"{', '.join(OPTIMIZERS)}"
            )
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(
                f"optimizer: got {self.optimizer!r}, expected one of {', '.join(OPTIMIZERS)}"
            )
        if self.device_profile not in DEVICE_PROFILES:
            raise ConfigError(
                f"device_profile: got {self.device_profile!r}, expected one of "
                f"{', '.join(DEVICE_PROFILES)}"
            )
        for name in ("inputs", "loss"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ConfigError(
                    f"{name}: got {type(value).__name__}, expected a callable or None"
                )


def factory_name(factory: Callable[..., Any]) -> str:
    """``module:qualname`` of a factory, for messages."""
    module = getattr(factory, "__module__", None) or "?"
    qualname = getattr(factory, "__qualname__", None) or type(factory).__name__
    return f"{module}:{qualname}"


def measure(model_factory: Callable[[], Any], config: MeasureConfig) -> Ledger:
    """Trace ``config.steps`` training steps of ``model_factory()`` and return its ledger.

    Raises ``ConfigError`` for settings this machine cannot trace (``cuda`` without a GPU) and
    for a model without ``config.vocab_size`` and no ``inputs``; ``FactoryError`` when the
    factory raises, returns something other than an ``nn.Module``, or its step cannot be
    traced.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from trainmedic.memory.tracker import StorageTracker, module_path_names

    name = factory_name(model_factory)
    device = config.device_profile
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "device_profile: 'cuda' measure mode needs a visible CUDA GPU (fake CUDA tensors "
            "cannot run autograd on this torch); use device_profile='cpu' here, or "
            "`trainmedic memory plan --device-profile cuda`, which is analytic"
        )
    fake_mode = FakeTensorMode()
    model, built_on = _build_model(model_factory, name, fake_mode, device)
    if config.precision == "bf16":
        with fake_mode:
            _replace_tensors(
                model,
                lambda t: t.detach().to(torch.bfloat16) if t.is_floating_point() else t.detach(),
            )
    model.train()
    with fake_mode:
        optimizer = _make_optimizer(model, config.optimizer, device)
    make_inputs = config.inputs or default_inputs
    loss_fn = config.loss or default_loss

    tracker = StorageTracker(
        module_names=module_path_names(model),
        granularity_bytes=_CUDA_BLOCK_BYTES if device == "cuda" else 1,
    )
    tracker.mark_module(model)
    forward_end: dict[int, tuple[int, int]] = {}
    phase = "forward"
    try:
        with fake_mode, torch.device(device), tracker.tracking():
            for step in range(config.steps):
                tracker.step = step
                phase = tracker.phase = "optimizer"
                optimizer.zero_grad(set_to_none=config.zero_grad_set_to_none)
                phase = tracker.phase = "forward"
                loss = _forward_and_loss(model, make_inputs, loss_fn, config, name)
                forward_end[step] = (
                    tracker.role_bytes_at(tracker.event, "activations"),
                    tracker.role_bytes_at(tracker.event, "param_casts"),
                )
                phase = tracker.phase = "backward"
                loss.backward()
                del loss
                phase = tracker.phase = "optimizer"
                optimizer.step()
                tracker.mark_optimizer(optimizer)
    except (ConfigError, FactoryError):
        raise
    except Exception as exc:
        raise FactoryError(_trace_failure(name, phase, exc)) from exc

    categories = {c: 0 for c in CATEGORIES}
    for cat, nbytes in tracker.categories_at(tracker.peak_event).items():
        categories[cat] += nbytes
    basis: dict[str, Basis] = {c: "measured" for c in CATEGORIES}
    activations_total = max(a for a, _ in forward_end.values())
    param_cast_bytes = max(p for _, p in forward_end.values())
    per_module = _per_module(model, tracker.saved_bytes_by_module(config.steps - 1))
    num_params = sum(p.numel() for p in _unique_params(model))
    notes = _notes(config, built_on, tracker.placeholder_reads)
    details: dict[str, Any] = {
        "factory": name,
        "batch_size": config.batch_size,
        "seq_len": config.seq_len,
        "precision": config.precision,
        "optimizer": config.optimizer,
        "device_profile": device,
        "steps": config.steps,
        "built_on": built_on,
        "peak_step": tracker.peak_step,
        "step_peaks": [
            {"step": p.step, "peak_bytes": p.peak_bytes, "phase": p.phase}
            for p in sorted(tracker.step_peaks.values(), key=lambda p: p.step)
        ],
        "param_cast_bytes": param_cast_bytes,
    }
    logger.debug("measured %s: peak %d bytes in %s", name, tracker.peak_bytes, tracker.peak_phase)
    return Ledger(
        peak_bytes=tracker.peak_bytes,
        peak_phase=tracker.peak_phase,  # type: ignore[arg-type]
        categories=categories,
        basis=basis,
        num_params=num_params,
        activations_total_bytes=activations_total,
        per_module=per_module,
        notes=notes,
        details=details,
    )


# -- the step -------------------------------------------------------------------------------


def _build_model(
    factory: Callable[[], Any], name: str, fake_mode: Any, device: str
) -> tuple[Any, str]:
    """The model on fake tensors, and how it was built (``fake`` or ``meta``)."""
    import torch
    from torch import nn

    try:
        with fake_mode, torch.device(device):
            model = factory()
        built_on = "fake"
    except Exception as fake_exc:
        # Some constructors do what fake tensors refuse (e.g. data-dependent init); build on
        # the meta device and give every tensor fake storage instead.
        try:
            with torch.device("meta"):
                model = factory()
            if isinstance(model, nn.Module):
                with fake_mode:
                    _replace_tensors(
                        model, lambda t: torch.empty(t.shape, dtype=t.dtype, device=device)
                    )
        except Exception:
            raise FactoryError(
                f"model factory {name} raised {type(fake_exc).__name__}: "
                f"{_one_line(fake_exc)}; fix the factory so it builds the model from a config "
                f"without loading weights"
            ) from fake_exc
        built_on = "meta"
    if not isinstance(model, nn.Module):
        raise FactoryError(
            f"model factory {name} returned {type(model).__name__}, expected a "
            f"torch.nn.Module; return the model itself"
        )
    from torch._subclasses.fake_tensor import FakeTensor

    real = [n for n, t in _named_tensors(model) if not isinstance(t, FakeTensor)]
    if real:
        raise FactoryError(
            f"model factory {name} made real tensors ({real[0]} and {len(real) - 1} more, "
            f"e.g. loaded weights or torch.from_numpy); measure mode needs a factory that "
            f"builds the model from its config"
        )
    return model, built_on


def _replace_tensors(model: Any, convert: Callable[[Any], Any]) -> None:
    """Replace every parameter and buffer by ``convert(tensor)`` (which must not track grad),
    keeping tied weights tied.

    ``Module.to``/``to_empty`` swap parameters in place, which FakeTensorMode's weak references
    forbid (and meta tensors cannot feed a fake op); new parameters are made instead.
    """
    from torch import nn

    new: dict[int, Any] = {}
    for module in model.modules():
        for key, param in list(module._parameters.items()):
            if param is not None:
                if id(param) not in new:
                    new[id(param)] = nn.Parameter(
                        convert(param), requires_grad=param.requires_grad
                    )
                module._parameters[key] = new[id(param)]
        for key, buf in list(module._buffers.items()):
            if buf is not None:
                if id(buf) not in new:
                    new[id(buf)] = convert(buf)
                module._buffers[key] = new[id(buf)]


def _named_tensors(model: Any) -> Iterator[tuple[str, Any]]:
    yield from model.named_parameters()
    yield from model.named_buffers()


def _unique_params(model: Any) -> list[Any]:
    seen: set[int] = set()
    out = []
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def _make_optimizer(model: Any, name: str, device: str) -> Any:
    """The optimizer as the device would run it by default (foreach on CUDA, per tensor on CPU)."""
    import torch

    params = [p for p in _unique_params(model) if p.requires_grad]
    # torch.optim defaults to foreach kernels on CUDA and to the per-tensor loop on CPU; fake
    # tensors are not plain Tensors, so the default check would pick the loop everywhere.
    foreach = device == "cuda"
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, foreach=foreach)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=foreach)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3, foreach=foreach)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, foreach=foreach)
    if name == "adafactor":
        if not hasattr(torch.optim, "Adafactor"):
            raise ConfigError(
                f"optimizer: 'adafactor' needs torch>=2.5 (torch.optim.Adafactor); this is "
                f"torch {torch.__version__}"
            )
        return torch.optim.Adafactor(params, lr=1e-2, foreach=foreach)
    raise ConfigError(f"optimizer: got {name!r}, expected one of {', '.join(OPTIMIZERS)}")


def _autocast(config: MeasureConfig) -> AbstractContextManager[Any]:
    import torch

    if config.precision == "bf16-mixed":
        return torch.autocast(config.device_profile, dtype=torch.bfloat16)
    if config.precision == "fp16-mixed":
        return torch.autocast(config.device_profile, dtype=torch.float16)
    return nullcontext()


def _forward_and_loss(
    model: Any,
    make_inputs: Callable[[Any, int, int], Any],
    loss_fn: Callable[[Any, Any], Any],
    config: MeasureConfig,
    name: str,
) -> Any:
    """One forward and loss; the output and the batch are dropped before returning."""
    import torch

    batch = make_inputs(model, config.batch_size, config.seq_len)
    with _autocast(config):
        if isinstance(batch, Mapping):
            out = model(**batch)
        elif isinstance(batch, (tuple, list)):
            out = model(*batch)
        else:
            out = model(batch)
        loss = loss_fn(out, batch)
    del out, batch
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise FactoryError(
            f"the loss of {name} is {shape}, expected a one-element tensor; pass loss= that "
            f"reduces the output to a scalar"
        )
    if not loss.requires_grad:
        raise FactoryError(
            f"the loss of {name} does not require grad (no trainable parameter reaches it); "
            f"check the model's parameters and the loss= function"
        )
    return loss


def _vocab_size(model: Any) -> int | None:
    """The token vocabulary: ``config.vocab_size``, else the first ``nn.Embedding``'s size."""
    import torch

    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if isinstance(vocab, int) and vocab > 0:
        return vocab
    for module in model.modules():
        if isinstance(module, torch.nn.Embedding):
            return int(module.num_embeddings)
    return None


def default_inputs(model: Any, batch_size: int, seq_len: int) -> Any:
    import torch

    vocab = _vocab_size(model)
    if vocab is None:
        raise ConfigError(
            f"inputs: {type(model).__name__} has no config.vocab_size and no nn.Embedding, so "
            f"measure mode cannot make token ids for it; pass inputs=callable(model, "
            f"batch_size, seq_len) returning the batch (on the CLI: have the factory return "
            f"{{'model': model, 'inputs': fn, 'loss': fn}})"
        )
    return torch.randint(0, vocab, (batch_size, seq_len))


def default_loss(out: Any, batch: Any) -> Any:
    import torch
    import torch.nn.functional as F

    loss = _field(out, "loss")
    if isinstance(loss, torch.Tensor):
        return loss
    logits = _field(out, "logits")
    if logits is None and isinstance(out, (tuple, list)) and out:
        logits = out[0]
    if logits is None and isinstance(out, torch.Tensor):
        logits = out
    if not isinstance(logits, torch.Tensor):
        raise ConfigError(
            f"loss: cannot make a loss from a model output of type {type(out).__name__}; pass "
            f"loss=callable(output, batch) returning a scalar tensor"
        )
    if (
        isinstance(batch, torch.Tensor)
        and logits.dim() == 3
        and tuple(logits.shape[:2]) == tuple(batch.shape)
        and not batch.dtype.is_floating_point
    ):
        return F.cross_entropy(logits.flatten(0, 1), batch.flatten())
    return logits.sum()


def _field(out: Any, key: str) -> Any:
    if isinstance(out, Mapping):
        return out.get(key)
    return getattr(out, key, None) if not isinstance(out, (tuple, list)) else None


# -- the result -----------------------------------------------------------------------------


def _per_module(model: Any, saved: Mapping[str, int]) -> tuple[ModuleBytes, ...]:
    """Activation bytes each module saved (innermost), then each module's own parameters."""
    rows = [ModuleBytes(module=m, category="activations", bytes=b) for m, b in saved.items()]
    seen: set[int] = set()
    for mod_name, module in model.named_modules():
        nbytes = 0
        for p in module.parameters(recurse=False):
            key = id(p.untyped_storage())
            if key not in seen:
                seen.add(key)
                nbytes += int(p.untyped_storage().nbytes())
        if nbytes:
            rows.append(ModuleBytes(module=mod_name, category="params", bytes=nbytes))
    return tuple(rows)


def _notes(config: MeasureConfig, built_on: str, placeholder_reads: int) -> tuple[str, ...]:
    device = config.device_profile
    notes = [
        f"measured: {config.steps} training step(s) traced on fake {device} tensors "
        f"(built on the {built_on} device; no model memory allocated); bytes of live storages "
        f"after every op, as torch.distributed._tools.MemTracker counts them",
        f"kernel profile {device}: the {device} kernels decide what backward keeps"
        + (
            " (dropout keeps its mask in the activation dtype; SDPA keeps its logsumexp)"
            if device == "cpu"
            else "; every block rounded up to 512 bytes as the caching allocator does"
        ),
        "workspace inside kernels, allocator fragmentation and the CUDA context are not "
        "traced (overhead 0)",
    ]
    if config.precision in ("bf16-mixed", "fp16-mixed"):
        notes.append(
            f"{config.precision}: fp32 parameters, torch.autocast over forward and loss; "
            f"autocast's weight copies count as temporaries (details.param_cast_bytes)"
        )
    elif config.precision == "bf16":
        notes.append("bf16: parameters, gradients and optimizer state in bfloat16")
    if config.inputs is None:
        notes.append("inputs: random token ids of shape (batch_size, seq_len)")
    if config.loss is None:
        notes.append("loss: output.loss, else cross-entropy of the logits, else output.sum()")
    if placeholder_reads:
        notes.append(
            f"{placeholder_reads} scalar read(s) of computed values (.item()) got a placeholder; "
            f"code that branches on them may have taken another path than a real run"
        )
    return tuple(notes)


def _trace_failure(name: str, phase: str, exc: BaseException) -> str:
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )

    if isinstance(exc, (DynamicOutputShapeException, DataDependentOutputException)):
        return (
            f"measure mode cannot trace {name}: in the {phase} phase an op's output depends on "
            f"tensor values ({_one_line(exc)}), e.g. MoE routing; use `trainmedic memory plan` "
            f"for this model"
        )
    return (
        f"tracing a training step of {name} failed in the {phase} phase: "
        f"{type(exc).__name__}: {_one_line(exc)}"
    )


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


# -- loading a factory ----------------------------------------------------------------------


def load_factory(spec: str) -> Callable[..., Any]:
    """Resolve ``"package.module:function"`` or ``"path/to/file.py:function"`` to a callable
    (through :func:`trainmedic.recipe.entry_point.load_callable`, the loader every command
    that takes user code shares); a missing file stays an ``UnreadableInputError``, every other
    failure becomes a :class:`FactoryError` with the same one-line message."""
    from trainmedic.recipe.entry_point import load_callable

    try:
        return load_callable(spec, what="model factory")
    except UnreadableInputError:
        raise
    except InputError as exc:
        raise FactoryError(f"factory {spec!r}: {exc.message}") from exc
