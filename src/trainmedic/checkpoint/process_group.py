"""The checkpoint manager's collectives: object broadcast/gather on a gloo group of its own.

A group of its own means a background (async) save never interleaves its collectives with the
training's, and it works beside an NCCL default group. Without torch.distributed initialized it
is a single rank and every call returns at once.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ProcessGroupComm"]


class ProcessGroupComm:
    """The manager's collectives, on a gloo group of its own (so a background save never
    interleaves with the training's collectives, and NCCL default groups work too)."""

    def __init__(self) -> None:
        self.rank, self.world = 0, 1
        self.group: Any = None
        try:
            import torch.distributed as dist
        except ImportError:  # pragma: no cover - torch without distributed
            return
        if dist.is_available() and dist.is_initialized():
            self.rank, self.world = dist.get_rank(), dist.get_world_size()
            if self.world > 1:
                self.group = dist.new_group(backend="gloo")

    def broadcast(self, obj: Any) -> Any:
        if self.world == 1:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` on rank 0 (``[]`` elsewhere)."""
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out: list[Any] | None = [None] * self.world if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0, group=self.group)
        return out or []

    def all_gather(self, obj: Any) -> list[Any]:
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj, group=self.group)
        return out
