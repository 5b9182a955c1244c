"""The recipe's data loader alone, without a model step: ``bench data RECIPE``.

For a recipe whose ``data`` is a ``torch.utils.data.DataLoader``, loaders are rebuilt over its
``.dataset`` with the same batch size, collate function, sampler kind (shuffled or not, or the
very sampler object when it is a custom one), ``drop_last`` and ``worker_init_fn``, across a
grid of ``num_workers`` x ``pin_memory`` x ``prefetch_factor``; any other iterable is measured
as is, in one row, with the reason. Each row times ``batches`` batches after the first one:
the first batch (worker start-up, first fetch) is reported apart as ``startup_s`` and left out
of the rates, which are what a long run sees.

``pin_memory`` copies batches into page-locked host memory so a later ``.to("cuda",
non_blocking=True)`` can overlap the step; without CUDA it does nothing useful (torch warns
and skips it), so the default grid varies it only when CUDA is present.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from trainmedic.bench.machine import Machine, describe_machine, usable_cores
from trainmedic.errors import ConfigError

__all__ = ["DataBenchConfig", "LoaderRow", "DataBench", "bench_data", "default_workers",
           "batch_samples"]

logger = logging.getLogger(__name__)


def default_workers(cores: int) -> tuple[int, ...]:
    """0, 1, 2, 4 workers, capped at the usable cores (0 always: the main process)."""
    return tuple(w for w in (0, 1, 2, 4) if w <= max(1, cores))


def _ints(name: str, values: tuple[int, ...] | None, low: int) -> None:
    if values is None:
        return
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < low
                         for v in values):
        raise ConfigError(f"{name}: got {values!r}, expected one or more integers >= {low}")


@dataclass(kw_only=True, frozen=True)
class DataBenchConfig:
    """The grid ``bench_data`` measures."""

    batches: int = 50
    """Batches timed per setting, after the first one."""
    workers: tuple[int, ...] | None = None
    """``num_workers`` values (None: 0, 1, 2, 4 capped at the usable cores)."""
    pin_memory: tuple[bool, ...] | None = None
    """``pin_memory`` values (None: both with CUDA, False alone without)."""
    prefetch_factors: tuple[int, ...] = (2, 4)
    """``prefetch_factor`` values, for settings with workers (torch's default is 2)."""

    def __post_init__(self) -> None:
        if isinstance(self.batches, bool) or not isinstance(self.batches, int) \
                or self.batches < 1:
            raise ConfigError(f"batches: got {self.batches!r}, expected an integer >= 1")
        _ints("workers", self.workers, 0)
        _ints("prefetch_factors", self.prefetch_factors, 1)
        if self.pin_memory is not None and (not self.pin_memory or any(
                not isinstance(p, bool) for p in self.pin_memory)):
            raise ConfigError(f"pin_memory: got {self.pin_memory!r}, expected True and/or "
                              "False")


@dataclass(kw_only=True, frozen=True)
class LoaderRow:
    """One loader setting and its measured throughput."""

    num_workers: int | None
    """Worker processes (None: not a DataLoader, measured as is)."""
    pin_memory: bool | None
    """Page-locked batches (None: not a DataLoader)."""
    prefetch_factor: int | None
    """Batches each worker loads ahead (None with 0 workers or not a DataLoader)."""
    batches: int
    """Batches timed (the first one excluded)."""
    samples: int
    """Samples in those batches."""
    startup_s: float
    """Seconds from ``iter()`` to the first batch: worker start-up and first fetch."""
    elapsed_s: float
    """Seconds for the timed batches."""
    batches_per_s: float
    """``batches / elapsed_s`` (measured)."""
    samples_per_s: float
    """``samples / elapsed_s`` (measured)."""
    recipe_setting: bool = False
    """This row has the recipe's own settings."""


@dataclass(kw_only=True, frozen=True)
class DataBench:
    """The loader grid of one recipe."""

    recipe: str
    """The recipe as given."""
    kind: str
    """Type name of ``recipe.data``."""
    rows: tuple[LoaderRow, ...]
    """One per setting, in the order run."""
    best: LoaderRow
    """The row with the most samples/s."""
    grid_run: bool
    """False: the data is not a DataLoader, one row measured as is."""
    notes: tuple[str, ...]
    """Why the grid was not run, pin_memory without CUDA, short epochs."""
    machine: Machine = field(repr=False)
    """Where it ran."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict; every figure is measured."""
        d = asdict(self)
        d["machine"] = self.machine.to_dict()
        d["basis"] = "measured"
        return d


def batch_samples(batch: Any, fallback: int) -> int:
    """Samples in a batch: the leading size of its first tensor (or array) leaf, looking into
    tuples, lists and dicts; ``fallback`` (the loader's batch size) when there is none."""
    seen = batch
    for _ in range(8):  # nested containers, not recursion without end
        shape = getattr(seen, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
        if isinstance(seen, dict) and seen:
            seen = next(iter(seen.values()))
        elif isinstance(seen, (list, tuple)) and seen:
            seen = seen[0]
        else:
            break
    return fallback


def time_iterable(data: Iterable[Any], batches: int,
                  batch_size: int) -> tuple[float, int, int, float]:
    """(startup_s, batches timed, samples, elapsed_s) over one pass of ``data``: the first
    batch is timed apart; up to ``batches`` more are timed together."""
    t0 = time.perf_counter()
    it = iter(data)
    try:
        next(it)
    except StopIteration:
        return time.perf_counter() - t0, 0, 0, 0.0
    startup = time.perf_counter() - t0
    n = samples = 0
    t1 = time.perf_counter()
    for batch in it:
        n += 1
        samples += batch_samples(batch, batch_size)
        if n >= batches:
            break
    elapsed = time.perf_counter() - t1
    del it  # shuts a DataLoader's workers down before the next setting starts its own
    return startup, n, samples, elapsed


def _row(data: Iterable[Any], config: DataBenchConfig, batch_size: int,
         **setting: Any) -> LoaderRow:
    startup, n, samples, elapsed = time_iterable(data, config.batches, batch_size)
    return LoaderRow(batches=n, samples=samples, startup_s=startup, elapsed_s=elapsed,
                     batches_per_s=n / elapsed if elapsed > 0 else 0.0,
                     samples_per_s=samples / elapsed if elapsed > 0 else 0.0, **setting)


def _grid(config: DataBenchConfig, cuda: bool) -> list[dict[str, Any]]:
    workers = config.workers if config.workers is not None else default_workers(
        usable_cores())
    pins = config.pin_memory if config.pin_memory is not None else ((False, True) if cuda
                                                                   else (False,))
    settings = []
    for w in workers:
        for pin in pins:
            for pf in (config.prefetch_factors if w > 0 else (None,)):
                settings.append({"num_workers": w, "pin_memory": pin, "prefetch_factor": pf})
    return settings


def bench_data(recipe: str, config: DataBenchConfig | None = None, *,
               overrides: dict[str, Any] | None = None,
               on_progress: Callable[[int, int], None] | None = None) -> DataBench:
    """Load ``recipe`` ("module:function" or "file.py:function", with ``overrides``) and
    time its data loader across the grid (see the module docstring)."""
    import torch
    from torch.utils.data import DataLoader

    from trainmedic.recipe import load_recipe
    from trainmedic.recipe.loader_rebuild import rebuild_loader

    config = config or DataBenchConfig()
    data = load_recipe(recipe, **(overrides or {})).data
    notes: list[str] = []
    cuda = torch.cuda.is_available()
    rows: list[LoaderRow] = []
    # The recipe's own settings (none to vary for another iterable).
    own = {"num_workers": data.num_workers, "pin_memory": data.pin_memory,
           "prefetch_factor": data.prefetch_factor if data.num_workers else None} \
        if isinstance(data, DataLoader) else dict.fromkeys(
            ("num_workers", "pin_memory", "prefetch_factor"))
    if not isinstance(data, DataLoader) or data.batch_size is None:
        notes.append(f"data is a {type(data).__name__}, not a torch DataLoader: there are no "
                     "worker, pinning or prefetch settings to vary, so it was measured as is"
                     if not isinstance(data, DataLoader) else
                     "the DataLoader uses a custom batch_sampler: rebuilding it with other "
                     "settings could change its batches, so it was measured as is")
        rows.append(_row(data, config, 1, recipe_setting=True, **own))
        if on_progress is not None:
            on_progress(1, 1)
    else:
        settings = _grid(config, cuda)
        if not cuda and (config.pin_memory is None or True in config.pin_memory):
            notes.append("pin_memory only helps copies to a CUDA device; there is none here, "
                         "so it was " + ("left off" if config.pin_memory is None else
                                         "measured but has nothing to speed up"))
        for i, setting in enumerate(settings):
            with warnings.catch_warnings():
                # torch warns that pin_memory is ignored without an accelerator: said above
                warnings.filterwarnings("ignore", message=".*pin_memory.*")
                loader = rebuild_loader(data, **setting)
                rows.append(_row(loader, config, data.batch_size,
                                 recipe_setting=setting == own, **setting))
            if on_progress is not None:
                on_progress(i + 1, len(settings))
    short = [r for r in rows if r.batches < config.batches]
    if short:
        notes.append(f"an epoch ended after {min(r.batches for r in short) + 1} batches: "
                     f"fewer than the {config.batches} + 1 asked were timed")
    if any(r.batches == 0 for r in rows):
        notes.append("a setting yielded one batch or none: no rate could be measured for it")
    best = max(rows, key=lambda r: r.samples_per_s)
    return DataBench(recipe=recipe, kind=type(data).__name__, rows=tuple(rows), best=best,
                     grid_run=isinstance(data, DataLoader) and data.batch_size is not None,
                     notes=tuple(notes), machine=describe_machine())
