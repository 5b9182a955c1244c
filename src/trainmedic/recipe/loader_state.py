"""The data-loader position of a recipe's loop: which epoch, how far into it, and how to get
back there in a fresh process so that the next batch is the one the uninterrupted run drew.

Two kinds of loader:

- **stateful** (it has ``state_dict`` and ``load_state_dict``: torchdata's
  ``StatefulDataLoader``, or any loader that keeps its own position): its ``state_dict()`` is
  saved at each step boundary and loaded before the iterator is created again.
- **replayed** (a plain ``torch.utils.data.DataLoader``, a list, any re-iterable): when an
  epoch's iterator is created, the state of every global stream (python, numpy, torch CPU) and
  of the loader's own generators (``loader.generator``, ``loader.sampler.generator``,
  ``loader.batch_sampler.sampler.generator``) is recorded. To resume, they are set back, the
  iterator is created again -- drawing the same permutation (``RandomSampler``) and the same
  worker base seed, so workers seeded ``base_seed + worker_id`` draw the same augmentations --
  and the batches consumed are drawn again and dropped. Exact, at the cost of reading those
  batches once more; use a stateful loader when an epoch is long.

Before each epoch's iterator is created, ``set_epoch(epoch)`` is called on the sampler (and
the batch sampler's sampler) when it has one, as a ``DistributedSampler`` needs.

Not reproducible: ``persistent_workers=True`` with workers, past the first epoch of a
process (torch draws the worker base seed once per process and keeps the workers' RNG running
across epochs); a warning says so. Samplers that keep state outside their generator.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from trainmedic.checkpoint.training_state import LoopState, capture_rng, check_plain, restore_rng
from trainmedic.errors import ConfigError, InputError

__all__ = ["LoaderPosition"]

logger = logging.getLogger(__name__)


def _generators(data: Any) -> list[Any]:
    """The loader's own ``torch.Generator`` objects, each once, in a fixed order."""
    import torch

    found: list[Any] = []
    candidates = [getattr(data, "generator", None)]
    sampler = getattr(data, "sampler", None)
    candidates.append(getattr(sampler, "generator", None))
    batch_sampler = getattr(data, "batch_sampler", None)
    candidates.append(getattr(getattr(batch_sampler, "sampler", None), "generator", None))
    for g in candidates:
        if isinstance(g, torch.Generator) and not any(g is f for f in found):
            found.append(g)
    return found


def _set_epoch(data: Any, epoch: int) -> None:
    seen: list[Any] = []
    for s in (getattr(data, "sampler", None),
              getattr(getattr(data, "batch_sampler", None), "sampler", None),
              getattr(data, "batch_sampler", None)):
        if s is not None and callable(getattr(s, "set_epoch", None)) \
                and not any(s is x for x in seen):
            s.set_epoch(epoch)
            seen.append(s)


class LoaderPosition:
    """Draws a recipe's batches epoch after epoch, keeping ``loop.epoch`` and
    ``loop.batches_in_epoch`` up to date, and saves / restores where it stands."""

    def __init__(self, data: Iterable[Any], loop: LoopState) -> None:
        self.data = data
        self.loop = loop
        self.stateful = (callable(getattr(data, "state_dict", None))
                         and callable(getattr(data, "load_state_dict", None)))
        self._it: Iterator[Any] | None = None
        self._epoch_start: dict[str, Any] | None = None
        self._iterators_made = 0
        if getattr(data, "persistent_workers", False) and getattr(data, "num_workers", 0):
            logger.warning("persistent_workers=True: after a resume past the first epoch the "
                           "workers' random streams are not the uninterrupted run's; use "
                           "persistent_workers=False or a StatefulDataLoader for exact resume")

    # -- iterating ---------------------------------------------------------------------------
    def _start_epoch(self) -> None:
        if not self.stateful:
            self._epoch_start = {
                "rng": capture_rng(cuda=False),
                "generators": [g.get_state().clone() for g in _generators(self.data)],
            }
        _set_epoch(self.data, self.loop.epoch)
        self._it = iter(self.data)
        self._iterators_made += 1

    def next_batch(self) -> Any:
        """The next micro-batch, starting a new epoch when the current one is used up."""
        if self._it is None:
            self._start_epoch()
        assert self._it is not None
        try:
            batch = next(self._it)
        except StopIteration:
            if self.loop.batches_in_epoch == 0:
                raise ConfigError(f"data: epoch {self.loop.epoch} yielded no batches; the data "
                                  "loader must yield at least one batch per pass") from None
            self.loop.epoch += 1
            self.loop.batches_in_epoch = 0
            self._start_epoch()
            try:
                batch = next(self._it)
            except StopIteration:
                raise ConfigError(f"data: epoch {self.loop.epoch} yielded no batches; the "
                                  "data loader must yield at least one batch per pass") from None
        self.loop.batches_in_epoch += 1
        return batch

    # -- saving / restoring ------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Plain data: where the data stands at this step boundary."""
        out: dict[str, Any] = {"kind": "stateful" if self.stateful else "replay",
                               "epoch": self.loop.epoch, "batches": self.loop.batches_in_epoch,
                               "started": self._it is not None}
        if self.stateful:
            sd = self.data.state_dict()  # type: ignore[attr-defined]
            check_plain(sd, "data.state_dict()")
            out["loader"] = sd
        else:
            out["epoch_start"] = self._epoch_start
        return out

    def restart(self, epoch: int) -> None:
        """Start ``epoch`` over: its iterator is created at the next batch, from the streams as
        they are then."""
        self.loop.epoch = int(epoch)
        self.loop.batches_in_epoch = 0
        self._it = None
        self._epoch_start = None

    def resume(self, state: Mapping[str, Any], *, epoch_rng: bool = True,
               generators: bool = True) -> None:
        """Recreate the saved epoch's iterator at the saved batch (see the module doc).

        Leaves the global random streams wherever the replay left them: the caller restores the
        checkpoint's step-boundary states next. ``epoch_rng`` / ``generators`` False skip
        setting the global streams / the loader's generators to their epoch-start states
        (traps a resume test must catch).
        """
        kind = state.get("kind")
        want = "stateful" if self.stateful else "replay"
        if kind != want:
            raise InputError("train_state", f"the data position was saved from a {kind} loader "
                             f"but this recipe's loader is {want}; resume with the same loader")
        self.loop.epoch = int(state["epoch"])
        self.loop.batches_in_epoch = int(state["batches"])
        self._it = None
        self._epoch_start = None
        if self.stateful:
            self.data.load_state_dict(state["loader"])  # type: ignore[attr-defined]
            if state.get("started"):
                _set_epoch(self.data, self.loop.epoch)
                self._it = iter(self.data)
            return
        if not state.get("started"):
            return
        start = state["epoch_start"]
        gens = _generators(self.data)
        if len(gens) != len(start["generators"]):
            raise InputError("train_state", f"the data loader had {len(start['generators'])} "
                             f"generator(s) when saved, this recipe's has {len(gens)}; resume "
                             "with the same loader")
        if epoch_rng:
            restore_rng(start["rng"])
        for g, s in zip(gens, start["generators"], strict=True):
            if generators:
                g.set_state(s)
        batches = self.loop.batches_in_epoch
        self._start_epoch()
        assert self._it is not None
        for i in range(batches):
            try:
                next(self._it)
            except StopIteration:
                raise InputError("train_state", f"the data position says {batches} batches of "
                                 f"epoch {self.loop.epoch} were drawn, but the loader yields "
                                 f"only {i}; the data changed since the checkpoint") from None
        self.loop.batches_in_epoch = batches
