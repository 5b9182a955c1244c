"""CPU staging for async saves: a copy of the state the training can no longer change.

An async save must write the state as it was when ``save()`` was called, while training goes
on. Copying everything before ``save()`` returns blocks the training for one memory copy of the
state: about a quarter of a sync save on a disk that writes 2 GB/s (measured). But most of the
state -- the parameters and the optimizer's moments -- changes only in ``optimizer.step()``.
So the stager copies the rest (buffers, which a forward in train mode updates in place; the
training state; anything on a GPU) before ``save()`` returns, and defers the copy of
parameters and optimizer state to the background thread, holding the next
``optimizer.step()`` (a step pre-hook) until that copy is done. The training is then blocked
only if its next forward and backward take less time than the copy.

The rule this rests on -- between ``save()`` and the next ``optimizer.step()``, parameters and
optimizer state change only through that step -- is checked, not assumed: every deferred
tensor's version counter (``Tensor._version``, bumped by every in-place write) is compared after
the copy, and a changed one fails the save (it is never written torn).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Stager", "StagedState"]


class StagedState:
    """What :meth:`Stager.stage` returns: the staged copy, and the copies still to be made."""

    def __init__(self, files: dict[str, Any], train: Any) -> None:
        self.files = files
        self.train = train
        self.pending: list[tuple[Any, Any, int, str]] = []  # (buffer, source, version, name)
        self.done = threading.Event()
        self.hook: Any = None

    def finish(self) -> str | None:
        """Make the deferred copies; then ``None``, or what changed while they were made."""
        try:
            for buf, src, _version, _name in self.pending:
                buf.copy_(src)
        finally:
            self.done.set()
        changed = [name for _buf, src, version, name in self.pending if src._version != version]
        if changed:
            return (f"{', '.join(changed[:3])}{' and more' if len(changed) > 3 else ''} changed "
                    "in place between save() and the next optimizer.step(); an async save "
                    "needs parameters and optimizer state to change only in optimizer.step() "
                    "(use a sync save)")
        return None

    def hold(self, *_: Any) -> None:
        """The optimizer's step pre-hook: wait for the deferred copy."""
        self.done.wait()

    def release(self) -> None:
        """Let the held ``optimizer.step()`` go (after the copy, or when the save is abandoned)."""
        self.done.set()
        if self.hook is not None:
            self.hook.remove()
            self.hook = None


class Stager:
    """Reusable CPU buffers for staged copies of state dicts (one per tensor position)."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[Any, ...], Any] = {}

    def clear(self) -> None:
        self._buffers.clear()

    def stage(self, files: dict[str, Any], train: Any, *,
              defer: Callable[[Any], bool] | None = None) -> StagedState:
        """Copy ``files`` (state dicts by name) and ``train`` into CPU buffers; tensors for
        which ``defer(tensor)`` is true get their buffer now and their copy later
        (:meth:`StagedState.finish`)."""
        import torch

        memo: dict[Any, Any] = {}
        pending: list[tuple[Any, Any, int, str]] = []
        out = {key: self._stage(obj, (key,), memo, pending, defer) for key, obj in files.items()}
        staged_train = (self._stage(train, ("train",), memo, pending, None)
                        if train is not None else None)
        if any(getattr(t, "is_pinned", lambda: False)() for t in memo.values()):
            torch.cuda.synchronize()  # the non_blocking device-to-host copies
        state = StagedState(out, staged_train)
        state.pending = pending
        if not pending:
            state.done.set()
        return state

    def _stage(self, obj: Any, path: tuple[Any, ...], memo: dict[Any, Any],
               pending: list[tuple[Any, Any, int, str]],
               defer: Callable[[Any], bool] | None) -> Any:
        import torch

        if isinstance(obj, torch.Tensor):
            src = obj.detach()
            if src.layout != torch.strided:
                return src.to("cpu", copy=True)
            # Tied weights (two keys, one storage) stay one tensor, as torch.save keeps them.
            key = (src.untyped_storage().data_ptr(), src.storage_offset(), tuple(src.shape),
                   tuple(src.stride()), src.dtype, str(src.device))
            if key in memo:
                return memo[key]
            pin = src.device.type == "cuda"
            buf = self._buffers.get(path)
            if buf is None or buf.shape != src.shape or buf.dtype != src.dtype:
                buf = torch.empty(src.shape, dtype=src.dtype, device="cpu", pin_memory=pin)
                self._buffers[path] = buf
            if defer is not None and not pin and defer(obj):
                pending.append((buf, obj, obj._version, ".".join(map(str, path))))
            else:
                buf.copy_(src, non_blocking=pin)
            memo[key] = buf
            return buf
        if isinstance(obj, dict):
            out = type(obj)()
            for k, v in obj.items():
                out[k] = self._stage(v, (*path, k), memo, pending, defer)
            meta = getattr(obj, "_metadata", None)  # module versions of a state_dict
            if meta is not None:
                out._metadata = copy.deepcopy(meta)  # type: ignore[attr-defined]
            return out
        if isinstance(obj, list):
            return [self._stage(v, (*path, i), memo, pending, defer) for i, v in enumerate(obj)]
        if isinstance(obj, tuple):
            return tuple(self._stage(v, (*path, i), memo, pending, defer)
                         for i, v in enumerate(obj))
        if isinstance(obj, (set, bytearray)):
            return copy.copy(obj)
        return obj
