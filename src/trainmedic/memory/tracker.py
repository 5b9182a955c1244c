"""A timeline of tensor storages: when each was allocated and freed, and what it was for.

``StorageTracker`` is a ``TorchDispatchMode``. It sees the output of every aten op run under it,
records each new storage (its ``nbytes``, counted once however many tensors view it) and, through
a weak reference, the moment the storage dies. The running total of live bytes gives the peak
and the instant it happened. It works the same over real tensors and over fake ones
(``FakeTensorMode``), which is how measure mode traces a step without allocating.

What a storage *was for* is decided by roles marked on it, whatever the time they are learnt:
a parameter or buffer is marked before the step, a ``.grad`` when autograd accumulates it, an
optimizer state after ``optimizer.step()``, an activation when autograd saves it for backward
(a ``saved_tensors_hooks`` pack hook), and a parameter cast when an op copies a parameter to
another dtype (autocast). A storage's category is its highest-priority role (``ROLE_PRIORITY``);
a storage with no role is a temporary. Because roles are facts about the storage, not about the
instant, a storage counts in its category from its allocation on: the Adam moments count as
optimizer state from their creation in the first step, a saved activation from its op.

The design follows ``torch.distributed._tools.mem_tracker.MemTracker`` (weak references to
storages, the peak checked after every op), which the tests use as the independent oracle.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = [
    "ROLE_PRIORITY",
    "ROLE_CATEGORY",
    "StorageRecord",
    "StepPeak",
    "StorageTracker",
    "module_path_names",
]

logger = logging.getLogger(__name__)

#: Roles a storage can hold, highest priority first. A storage's category is that of its first
#: role in this order; a parameter cast outranks "activations" so an autocast weight copy saved
#: for backward still counts as a temporary.
ROLE_PRIORITY: tuple[str, ...] = (
    "params",
    "grads",
    "optimizer",
    "buffers",
    "param_casts",
    "activations",
)

#: The ledger category of each role; a storage with no role is a temporary.
ROLE_CATEGORY: Mapping[str, str] = {
    "params": "params",
    "grads": "grads",
    "optimizer": "optimizer",
    "buffers": "buffers",
    "param_casts": "temporaries",
    "activations": "activations",
}

_ROOT_MODULE = ""

# Ops that copy a tensor into another dtype; the dispatch mode sees ``aten._to_copy`` for
# ``Tensor.to`` and for autocast's casts, since ``to`` is a composite op decomposed above it.
_CAST_OPS = frozenset({torch.ops.aten._to_copy.default})


@dataclass(slots=True)
class StorageRecord:
    """One storage's life: its size, when it was born and died (event indices), its roles."""

    nbytes: int
    """Bytes of the untyped storage (rounded up to the tracker's granularity)."""
    born: int
    """Event index of its allocation (or of its registration, for storages made before)."""
    step: int
    """Training step current at its allocation."""
    phase: str
    """Phase current at its allocation."""
    died: int | None = None
    """Event index of its release; ``None`` while alive."""
    roles: set[str] = field(default_factory=set)
    """Roles learnt so far (see ``ROLE_PRIORITY``)."""
    saved_by: str | None = None
    """Module whose forward was innermost when autograd first saved it (``""``: none)."""

    @property
    def category(self) -> str:
        """The ledger category: the category of the highest-priority role, else temporaries."""
        for role in ROLE_PRIORITY:
            if role in self.roles:
                return ROLE_CATEGORY[role]
        return "temporaries"

    def live_at(self, event: int) -> bool:
        """Whether the storage was allocated at ``event`` (born at or before, died after)."""
        return self.born <= event and (self.died is None or self.died > event)


@dataclass(kw_only=True, frozen=True)
class StepPeak:
    """The highest live total of one training step."""

    step: int
    """Step index (0-based)."""
    peak_bytes: int
    """Highest live bytes seen during the step."""
    phase: str
    """Phase current at that peak."""
    event: int
    """Event index of the peak."""


class StorageTracker(TorchDispatchMode):
    """Records every storage created under it, its size, roles and lifetime.

    Use ``with tracker.tracking(): ...`` (the dispatch mode, the saved-tensor hooks and the
    module stack together); set ``phase`` and ``step`` as the step advances; mark parameters,
    buffers and optimizer states with :meth:`mark`; read the result with :meth:`categories_at`,
    ``peak_bytes`` and ``step_peaks``.
    """

    def __init__(
        self,
        *,
        module_names: Mapping[int, str] | None = None,
        granularity_bytes: int = 1,
    ) -> None:
        """``module_names`` maps ``id(module)`` to its dotted path for per-module attribution;
        ``granularity_bytes`` rounds every storage up (512 mimics the CUDA caching allocator)."""
        super().__init__()
        if granularity_bytes < 1:
            raise ValueError(f"granularity_bytes: got {granularity_bytes}, expected >= 1")
        self.granularity_bytes = granularity_bytes
        self.module_names: Mapping[int, str] = module_names or {}
        self.records: list[StorageRecord] = []
        self.phase = "forward"
        self.step = 0
        self.event = 0
        self.live_bytes = 0
        self.peak_bytes = 0
        self.peak_event = 0
        self.peak_phase = "forward"
        self.peak_step = 0
        self.step_peaks: dict[int, StepPeak] = {}
        self.placeholder_reads = 0
        """How many ``.item()``-style reads of a fake tensor got a placeholder value."""
        self._live: dict[int, tuple[StorageRecord, weakref.ref[Any]]] = {}
        self._param_storages: set[int] = set()
        self._module_stack: list[str] = []
        self._grad_hooks: list[Any] = []

    # -- storages ---------------------------------------------------------------------------

    def _storage_bytes(self, storage: Any) -> int:
        nbytes = int(storage.nbytes())
        g = self.granularity_bytes
        return -(-nbytes // g) * g

    def _on_death(self, key: int, _ref: Any) -> None:
        entry = self._live.pop(key, None)
        if entry is None:
            return
        record = entry[0]
        self.event += 1
        record.died = self.event
        self.live_bytes -= record.nbytes

    def _record(self, tensor: torch.Tensor) -> StorageRecord | None:
        """The record of ``tensor``'s storage, created (as an allocation) if unseen."""
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse, nested, opaque subclasses
            return None
        key = id(storage)
        entry = self._live.get(key)
        if entry is not None:
            return entry[0]
        nbytes = self._storage_bytes(storage)
        self.event += 1
        record = StorageRecord(nbytes=nbytes, born=self.event, step=self.step, phase=self.phase)
        ref = weakref.ref(storage, partial(self._on_death, key))
        self._live[key] = (record, ref)
        self.records.append(record)
        self.live_bytes += nbytes
        return record

    def _check_peak(self) -> None:
        current = self.step_peaks.get(self.step)
        if current is None or self.live_bytes > current.peak_bytes:
            self.step_peaks[self.step] = StepPeak(
                step=self.step, peak_bytes=self.live_bytes, phase=self.phase, event=self.event
            )
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self.peak_event = self.event
            self.peak_phase = self.phase
            self.peak_step = self.step

    def mark(self, obj: Any, role: str) -> None:
        """Give ``role`` to the storages of every tensor in ``obj`` (a tensor or a pytree)."""
        if role not in ROLE_CATEGORY:
            raise ValueError(f"role: got {role!r}, expected one of {list(ROLE_CATEGORY)}")
        for leaf in tree_flatten(obj)[0]:
            if isinstance(leaf, torch.Tensor):
                record = self._record(leaf)
                if record is None:
                    continue
                record.roles.add(role)
                if role == "params":
                    self._param_storages.add(id(leaf.untyped_storage()))
        self._check_peak()

    def mark_module(self, module: nn.Module) -> None:
        """Mark a module's parameters (``params``) and buffers (``buffers``) and watch its
        parameters' gradients, which become ``grads`` as autograd accumulates them (until the
        ``tracking()`` context ends)."""
        params = list(module.parameters())
        self.mark(params, "params")
        self.mark(list(module.buffers()), "buffers")
        for param in params:
            if param.requires_grad:
                handle = param.register_post_accumulate_grad_hook(self._on_grad_accumulated)
                self._grad_hooks.append(handle)

    def _on_grad_accumulated(self, param: torch.Tensor) -> None:
        if param.grad is not None:
            self.mark(param.grad, "grads")

    def mark_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Mark every tensor in ``optimizer.state`` as ``optimizer``."""
        self.mark([list(s.values()) for s in optimizer.state.values()], "optimizer")

    # -- queries ----------------------------------------------------------------------------

    def categories_at(self, event: int) -> dict[str, int]:
        """Bytes per ledger category of the storages live at ``event``."""
        out: dict[str, int] = {}
        for record in self.records:
            if record.live_at(event):
                cat = record.category
                out[cat] = out.get(cat, 0) + record.nbytes
        return out

    def role_bytes_at(self, event: int, role: str) -> int:
        """Bytes live at ``event`` whose category comes from ``role`` (their top role)."""
        total = 0
        for record in self.records:
            if record.live_at(event) and _top_role(record) == role:
                total += record.nbytes
        return total

    def saved_bytes_by_module(self, step: int) -> dict[str, int]:
        """Activation bytes that modules saved for backward in ``step``, by innermost module."""
        out: dict[str, int] = {}
        for record in self.records:
            if record.step == step and record.saved_by is not None:
                if record.category == "activations":
                    out[record.saved_by] = out.get(record.saved_by, 0) + record.nbytes
        return out

    # -- hooks ------------------------------------------------------------------------------

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        record = self._record(tensor)
        if record is not None:
            record.roles.add("activations")
            if record.saved_by is None and self.phase == "forward":
                record.saved_by = self._module_stack[-1] if self._module_stack else _ROOT_MODULE
        # A detached alias, not the tensor itself: returning the input would make a reference
        # cycle through its grad_fn (torch.autograd.graph.saved_tensors_hooks docs).
        return tensor.detach()

    @staticmethod
    def _unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def _push_module(self, module: nn.Module, _args: Any) -> None:
        self._module_stack.append(self.module_names.get(id(module), type(module).__name__))

    def _pop_module(self, _module: nn.Module, _args: Any, _out: Any) -> None:
        if self._module_stack:
            self._module_stack.pop()

    @contextmanager
    def tracking(self) -> Iterator[StorageTracker]:
        """Run the dispatch mode with the saved-tensor hooks and the module stack."""
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        with ExitStack() as stack:
            stack.callback(self._remove_grad_hooks)
            pre = register_module_forward_pre_hook(self._push_module)
            stack.callback(pre.remove)
            post = register_module_forward_hook(self._pop_module, always_call=True)
            stack.callback(post.remove)
            stack.enter_context(torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack))
            stack.enter_context(self)
            yield self

    def _remove_grad_hooks(self) -> None:
        for handle in self._grad_hooks:
            handle.remove()
        self._grad_hooks.clear()

    # -- dispatch ---------------------------------------------------------------------------

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default:
            return self._read_scalar(func, args, kwargs)
        out = func(*args, **kwargs)
        before = len(self.records)
        for leaf in tree_flatten(out)[0]:
            if isinstance(leaf, torch.Tensor):
                self._record(leaf)
        new_records = self.records[before:]
        if new_records and func in _CAST_OPS and self._is_param(args[0]):
            for record in new_records:
                record.roles.add("param_casts")
        if new_records:
            self._check_peak()
        return out

    def _is_param(self, tensor: Any) -> bool:
        if not isinstance(tensor, torch.Tensor):
            return False
        try:
            return id(tensor.untyped_storage()) in self._param_storages
        except (RuntimeError, NotImplementedError):
            return False

    def _read_scalar(self, func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """``.item()`` and friends: real value where there is one, else a placeholder.

        A fake tensor has no data; where FakeTensorMode cannot answer (a value computed by
        ops, e.g. Adafactor's step count) the read returns 1 (``False`` for booleans), so
        code that only uses the value for arithmetic keeps running.
        """
        from torch._subclasses.fake_tensor import DataDependentOutputException

        try:
            return func(*args, **kwargs)
        except DataDependentOutputException:
            self.placeholder_reads += 1
            tensor = args[0]
            if tensor.dtype == torch.bool:
                return False
            if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
                return 1.0
            return 1


def _top_role(record: StorageRecord) -> str | None:
    for role in ROLE_PRIORITY:
        if role in record.roles:
            return role
    return None


def module_path_names(model: nn.Module) -> dict[int, str]:
    """``id(module)`` to its dotted path (``""`` for the root), first path for shared modules."""
    return {id(m): name for name, m in model.named_modules()}
