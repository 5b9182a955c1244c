"""What exact resume needs beyond the model, optimizer, scheduler and grad scaler.

:func:`capture` turns the loop's counters, every global random stream and the data-loader
position into one plain dict (containers of ``str``/``int``/``float``/``bool``/``None`` and
tensors only), so ``torch.load(path, weights_only=True)`` reads it back without unpickling a
class. :class:`~trainmedic.checkpoint.manager.CheckpointManager` saves it per rank as
``train_state.rank{r}.pt``; :func:`restore` puts it back.

What is captured (per rank: each rank has its own streams and its own shard of the data)
  - counters: optimizer steps, epoch, batches consumed in the epoch, samples and tokens seen;
  - RNG: python ``random``, numpy's global ``RandomState``, torch CPU, and every visible CUDA
    device (when CUDA is initialized). Generators a recipe owns privately
    (``np.random.default_rng``, a ``torch.Generator`` in the loss) are not global state: hand
    them to the data loader, or they restart;
  - the data-loader position, by the recipe's :class:`~trainmedic.recipe.loader_state.
    LoaderPosition`: the epoch, the batches consumed in it, and the state of every global
    stream *and* of the loader's own generators at the moment the epoch's iterator was created
    -- so recreating it draws the same permutation and the same worker base seed, and the
    workers (seeded ``base_seed + worker_id`` by torch) reproduce their random augmentations.
    A loader with ``state_dict``/``load_state_dict`` (torchdata's ``StatefulDataLoader``) saves
    its own state instead;
  - the recipe config hash, and ``extra``: any plain dict the caller adds (the demo's own
    batch generator).

Restore order (the traps of issue 5): counters; then the data iterator is recreated from its
epoch-start states and the consumed batches are drawn again and dropped; only THEN the global
RNG states of the checkpoint's step boundary are put back. Restoring the RNG first lets the
recreated iterator draw from it (a different permutation or base seed when the loader has no
generator of its own) and leaves the global streams advanced past the saved point.

A change of world size. The per-rank RNG streams and the per-rank data position have no
counterpart on a different number of ranks (a ``DistributedSampler`` shards the epoch by
rank, so "batch 37 of rank 2" means other samples on 3 ranks than on 2). Policy
(``on_resize``): ``"refuse"`` (the default) raises :class:`ConfigError` naming both world
sizes; ``"restart_epoch"`` restores the counters, starts the saved epoch over on the new
sharding (the samples of its consumed part are seen again) and leaves every rank's RNG as
the recipe factory left it -- a resume that continues training, not an exact one. Model and
optimizer follow a resize through the sharded (DCP) format.

Not exact, by design: a sampler that keeps state outside its generator; the workers of a
``persistent_workers=True`` loader past a process's first epoch (see ``loader_state``).
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from trainmedic.errors import ConfigError, InputError

__all__ = ["FORMAT", "RESIZE_POLICIES", "LoopState", "DataPosition", "capture", "restore",
           "capture_rng", "restore_rng", "check_plain", "current_world"]

logger = logging.getLogger(__name__)

#: The ``format`` key of every captured dict; :func:`restore` refuses others.
FORMAT = "trainmedic.train_state/1"

#: What :func:`restore` does when the checkpoint's world size is not this run's.
RESIZE_POLICIES = ("refuse", "restart_epoch")

_PLAIN = (str, int, float, bool, type(None))


@dataclass(kw_only=True)
class LoopState:
    """The loop's counters: mutable, advanced by the runner, saved and restored with it."""

    step: int = 0
    """Optimizer steps done."""

    epoch: int = 0
    """The epoch being iterated (0-based)."""

    batches_in_epoch: int = 0
    """Micro-batches drawn from the current epoch's iterator."""

    samples_seen: int = 0
    """Samples in every micro-batch drawn so far (the leading size of the batch)."""

    tokens_seen: int = 0
    """Tokens drawn so far (elements of the batch's first integer tensor of >= 2 dims)."""


class DataPosition(Protocol):
    """Where the data stands: :class:`~trainmedic.recipe.loader_state.LoaderPosition`."""

    def state(self) -> dict[str, Any]: ...

    def resume(self, state: Mapping[str, Any], *, epoch_rng: bool = True,
               generators: bool = True) -> None: ...

    def restart(self, epoch: int) -> None: ...


def current_world() -> tuple[int, int]:
    """``(rank, world_size)`` from torch.distributed when initialized, else ``(0, 1)``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


# -- RNG -------------------------------------------------------------------------------------

def capture_rng(*, cuda: bool | None = None) -> dict[str, Any]:
    """Every global random stream of this process, as plain data.

    ``cuda`` None: the CUDA devices' states when CUDA is initialized (reading them would
    otherwise create a CUDA context in a process that never used one).
    """
    import numpy as np
    import torch

    version, words, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    out: dict[str, Any] = {
        "python": {"version": int(version), "state": torch.tensor(words, dtype=torch.int64),
                   "gauss_next": gauss},
        "numpy": {"kind": str(kind), "keys": torch.from_numpy(np.asarray(keys, np.int64)),
                  "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch_cpu": torch.get_rng_state().clone(),
        "cuda": [],
    }
    if cuda is None:
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    if cuda:
        out["cuda"] = [s.clone() for s in torch.cuda.get_rng_state_all()]
    return out


def restore_rng(state: Mapping[str, Any]) -> None:
    """Put back what :func:`capture_rng` captured."""
    import numpy as np
    import torch

    py = state["python"]
    random.setstate((int(py["version"]), tuple(int(w) for w in py["state"].tolist()),
                     py["gauss_next"]))
    nps = state["numpy"]
    np.random.set_state((nps["kind"], nps["keys"].numpy().astype(np.uint32), int(nps["pos"]),
                         int(nps["has_gauss"]), float(nps["cached_gaussian"])))
    torch.set_rng_state(state["torch_cpu"])
    cuda_states = list(state.get("cuda") or [])
    if not cuda_states:
        return
    if not torch.cuda.is_available():
        logger.warning("the checkpoint holds %d CUDA RNG states but CUDA is not available "
                       "here: they are not restored", len(cuda_states))
        return
    n = torch.cuda.device_count()
    if n != len(cuda_states):
        logger.warning("the checkpoint holds %d CUDA RNG states, this process sees %d devices: "
                       "restoring the first %d", len(cuda_states), n, min(n, len(cuda_states)))
    for i, s in enumerate(cuda_states[:n]):
        torch.cuda.set_rng_state(s, device=i)


# -- plain data ------------------------------------------------------------------------------

def check_plain(obj: Any, where: str = "train") -> None:
    """Raise :class:`ConfigError` naming the first value that ``torch.load(weights_only=True)``
    would refuse: anything but dict/list/tuple of str/int/float/bool/None and tensors."""
    import torch

    if isinstance(obj, _PLAIN) or isinstance(obj, torch.Tensor):
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, (str, int)):
                raise ConfigError(f"{where}: key {k!r} is a {type(k).__name__}; checkpoint state "
                                  "keys must be str or int")
            check_plain(v, f"{where}.{k}")
        return
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            check_plain(v, f"{where}[{i}]")
        return
    raise ConfigError(f"{where} is a {type(obj).__name__}; checkpoint state holds only "
                      "containers, numbers, strings and tensors (convert it, e.g. to a tensor "
                      "or a list)")


# -- capture / restore -----------------------------------------------------------------------

def capture(loop: LoopState, *, loader: DataPosition | None = None,
            config_hash: str | None = None,
            extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """This rank's training state at a step boundary, as plain data (see the module doc)."""
    rank, world_size = current_world()
    out: dict[str, Any] = {
        "format": FORMAT,
        "rank": rank,
        "world_size": world_size,
        "counters": dataclasses.asdict(loop),
        "rng": capture_rng(),
        "data": loader.state() if loader is not None else None,
        "config_hash": config_hash,
        "extra": dict(extra or {}),
    }
    check_plain(out)
    return out


def restore(train: Mapping[str, Any], loop: LoopState, *, loader: DataPosition | None = None,
            world_size: int | None = None, on_resize: str = "refuse",
            config_hash: str | None = None, force: bool = False,
            sabotage: str | None = None) -> None:
    """Put ``train`` (from :func:`capture`) back: counters, data position, then global RNG.

    ``world_size`` None: this process's (torch.distributed's, else 1). ``config_hash``: the
    running recipe's; a different saved one is refused unless ``force``. ``sabotage`` breaks
    the restore on purpose, to prove a resume test catches it: ``"rng"`` (the global RNG is not
    restored), ``"data"`` (the data position is dropped: the epoch starts over),
    ``"rng-before-data"`` (the RNG is restored first and the iterator draws from it),
    ``"generator"`` (the loader's own generators are left as the recipe built them).
    """
    if on_resize not in RESIZE_POLICIES:
        raise ConfigError(f"on_resize must be one of {', '.join(RESIZE_POLICIES)}, "
                          f"got {on_resize!r}")
    if sabotage not in (None, "rng", "data", "rng-before-data", "generator"):
        raise ConfigError(f"sabotage must be rng, data, rng-before-data or generator, got "
                          f"{sabotage!r}")
    if not isinstance(train, Mapping) or train.get("format") != FORMAT:
        got = train.get("format") if isinstance(train, Mapping) else type(train).__name__
        raise InputError("train_state", f"format {got!r} is not {FORMAT!r}; this training "
                         "state was not written by this version of trainmedic")
    saved_hash = train.get("config_hash")
    if config_hash is not None and saved_hash is not None and saved_hash != config_hash \
            and not force:
        raise ConfigError(f"config_hash: the checkpoint's recipe config hash {saved_hash} is "
                          f"not this run's {config_hash}; resume with the same config, or "
                          "force it")
    if world_size is None:
        world_size = current_world()[1]
    saved_ws = int(train.get("world_size", 1))
    resized = saved_ws != world_size
    if resized and on_resize == "refuse":
        raise ConfigError(
            f"world_size: the checkpoint was saved by {saved_ws} rank(s), this run has "
            f"{world_size}; the data-loader position and the per-rank RNG cannot follow a "
            "change of world size. Resume on the same number of ranks, or pass "
            "on_resize='restart_epoch' to start the saved epoch over on the new sharding")
    counters = train["counters"]
    for f in dataclasses.fields(LoopState):
        setattr(loop, f.name, int(counters.get(f.name, 0)))
    data = train.get("data")
    if resized:
        logger.warning("world size changed (%d -> %d): epoch %d starts over, the RNG is not "
                       "restored; this resume is not exact", saved_ws, world_size, loop.epoch)
        if loader is not None:
            loader.restart(loop.epoch)
        return
    if sabotage == "rng-before-data":
        restore_rng(train["rng"])
    if loader is not None:
        if data is None or sabotage == "data":
            loader.restart(loop.epoch)
        else:
            loader.resume(data, epoch_rng=sabotage != "rng-before-data",
                          generators=sabotage != "generator")
    if sabotage in (None, "generator"):
        restore_rng(train["rng"])

