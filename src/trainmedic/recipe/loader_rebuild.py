"""A DataLoader rebuilt with other settings, everything else kept.

Levers (``trainmedic try``) and the loader benchmark (``trainmedic bench data``) change a
recipe's loader settings (workers, pinning, prefetch, batch size) and must keep the rest: the
very sampler object and the loader's generator (so a trial's baseline and lever see the
samples in the same order, and workers are seeded from the same generator), the collate
function, drop_last, worker_init_fn.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["rebuild_loader"]


def rebuild_loader(loader: Any, **changes: Any) -> Any:
    """A DataLoader like ``loader`` with ``changes`` (num_workers, pin_memory,
    prefetch_factor, batch_size).

    The very sampler object and the loader's generator are kept (see the module docstring).
    """
    from torch.utils.data import DataLoader, IterableDataset

    kwargs: dict[str, Any] = {
        "batch_size": loader.batch_size, "collate_fn": loader.collate_fn,
        "drop_last": loader.drop_last, "num_workers": loader.num_workers,
        "pin_memory": loader.pin_memory, "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn, "generator": loader.generator,
        "multiprocessing_context": loader.multiprocessing_context,
        "prefetch_factor": loader.prefetch_factor,
        "persistent_workers": loader.persistent_workers,
    }
    if getattr(loader, "pin_memory_device", ""):
        kwargs["pin_memory_device"] = loader.pin_memory_device
    if hasattr(loader, "in_order"):
        kwargs["in_order"] = loader.in_order
    if not isinstance(loader.dataset, IterableDataset):
        kwargs["sampler"] = loader.sampler
    kwargs.update(changes)
    if kwargs["num_workers"] == 0:
        # torch refuses these without workers
        kwargs["prefetch_factor"] = None
        kwargs["persistent_workers"] = False
        kwargs["multiprocessing_context"] = None
    elif kwargs["prefetch_factor"] is None:
        kwargs["prefetch_factor"] = 2  # torch's default with workers
    with warnings.catch_warnings():
        # torch warns that pin_memory does nothing without an accelerator: the lever's
        # declared cost says so, and the trial measures it
        warnings.filterwarnings("ignore", message=".*pin_memory.*")
        return DataLoader(loader.dataset, **kwargs)
