"""Sharded checkpoints through ``torch.distributed.checkpoint`` (DCP): save, load with
resharding, and verify without a model.

These functions hold the model and the optimizer only; ``CheckpointManager`` calls them for
the ``dcp/`` folder of a checkpoint (format ``dcp`` in the manifest) and writes everything
else (scheduler, scaler, the per-rank ``train_state.rank{r}.pt``, the manifest, the commit).

**Completeness.** State goes through ``torch.distributed.checkpoint.state_dict``'s
``get_state_dict`` / ``set_state_dict``, so DDP (the ``module.`` prefix dropped), FSDP2
(``fully_shard``: DTensor shards) and a plain module share one key space and the optimizer
state is keyed by parameter name. DCP fills a load *target*: a checkpoint key the target lacks
is skipped without a word, which is how a fresh optimizer (no ``exp_avg``/``exp_avg_sq``/
``step`` tensors yet) "loads" while keeping zero moments. :func:`load_sharded` therefore
(1) creates the missing optimizer state first with one step of zero gradients at lr 0 that
touches only the parameters without state and restores their gradients after (the parameters
do not move: every update is scaled by lr), (2) drops target entries for parameters the
checkpoint holds no state for, so the optimizer ends up with exactly the saved state, and
(3) refuses, before any tensor is read, a checkpoint holding a key under ``model.`` or
``optimizer.`` that the target lacks, or a tensor whose global shape differs from the
target's, naming the keys (:class:`~trainmedic.errors.InputError`, raised on every rank: the
check runs inside DCP's planning step, whose failures DCP gathers from all ranks).
:func:`save_sharded` on an optimizer that has not stepped yet saves no state and leaves the
optimizer as it was (``get_state_dict`` alone would run that zero step on the live optimizer
and count it: Adam's bias correction would then be off by one step for the rest of the run).

**Resharding.** A checkpoint saved at one world size loads at any other, and into another
wrapping (FSDP2 <-> DDP <-> a plain module in one process without a process group): DCP
stores each tensor's global shape and its chunks, and every rank reads the parts of the chunks
its own shards cover. The model and the whole optimizer state follow a resize. What cannot
follow is per-rank state: each rank's RNG streams and its data-loader position (the sampler's
shard depends on the world size). That state lives in ``train_state.rank{r}.pt`` (the recipe's
``training_state``); this module neither saves nor restores it, and the policy on a resize is
the recipe's (``trainmedic.checkpoint.training_state``). ``load_sharded`` logs the saving and
loading world sizes when they differ, and returns ``None`` (the contract).

**Untrusted files.** DCP's ``.metadata`` is a Python pickle of
``torch.distributed.checkpoint.metadata.Metadata`` (dataclasses with ``torch.Size``, dtypes,
a ``pathlib`` path), and DCP's own reader opens it with an unrestricted ``pickle.load``; the
non-tensor values (optimizer hyper-parameters) are ``torch.save`` records that DCP's default
planner opens with ``torch.load`` with ``weights_only`` off. Here the ``.metadata`` is read by an
unpickler that resolves only the classes and functions listed in ``_METADATA_GLOBALS`` (data
classes, ``torch.Size``, dtypes, a layout lookup, paths): any other global, e.g.
``os.system``, is refused before it can be called; what remains possible is a crafted file
that builds large containers of those types (memory, not code). Tensors and every non-tensor
value are loaded with ``torch.load(weights_only=True)``.

**Verification.** Each DCP record is one ``torch.save`` zip archive whose members carry the
CRC-32 that ``torch.save`` computed (``torch.serialization.get_crc32_options()``, on by
default); ``torch.load`` does not check it, :func:`verify_sharded` does, so a flipped bit in a
shard's tensor bytes or pickle is found without the manifest's hashes. A flipped byte in the
zip bookkeeping (timestamps, padding, version fields) is not, but then the record loads
bitwise the same (tests/checkpoint/test_sharded.py flips every byte of a shard); the
manifest's whole-file hash catches those. A record written while torch's CRC-32 switch was
off holds CRC 0 and is checked for everything but the CRC.

FSDP2 runs on CPU with gloo in torch 2.13 (uneven shards included); the tests save FSDP2 and
DDP models on 2 ranks and load them on 1 (a plain module, no process group), 2 and 3 ranks.
"""

from __future__ import annotations

import functools
import importlib
import io
import logging
import math
import pickle
import warnings
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainmedic.errors import InputError, UnreadableInputError, UnrecognizedInputError

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["save_sharded", "load_sharded", "verify_sharded", "check_sharded", "ShardedCounts",
           "read_sharded_metadata"]

log = logging.getLogger(__name__)

#: DCP's metadata file name and data file suffix (torch.distributed.checkpoint.filesystem).
METADATA_NAME = ".metadata"
DATA_SUFFIX = ".distcp"
#: Top-level keys of the state this module saves.
MODEL_KEY = "model"
OPTIMIZER_KEY = "optimizer"

#: The globals a DCP ``.metadata`` pickle names (as torch 2.13 writes it); others are refused.
_METADATA_GLOBALS: dict[str, frozenset[str]] = {
    "torch.distributed.checkpoint.metadata": frozenset({
        "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
        "TensorProperties", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING"}),
    "torch.distributed.checkpoint.filesystem": frozenset({"_StorageInfo"}),
    "torch.serialization": frozenset({"_get_layout"}),
    "torch": frozenset({"Size"}),  # and every torch.dtype, checked in find_class
    "pathlib": frozenset({"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"}),
    "collections": frozenset({"OrderedDict"}),
}


class _MetadataUnpickler(pickle.Unpickler):
    """Resolves only the names in ``_METADATA_GLOBALS`` (and torch dtypes)."""

    def find_class(self, module: str, name: str) -> Any:
        allowed = _METADATA_GLOBALS.get(module)
        if allowed is not None and name in allowed:
            return getattr(importlib.import_module(module), name)
        if module == "torch":
            import torch

            obj = getattr(torch, name, None)
            if isinstance(obj, torch.dtype):
                return obj
        raise pickle.UnpicklingError(
            f"refers to {module}.{name}, which a DCP .metadata file never holds")


def read_sharded_metadata(directory: str | Path) -> Any:
    """The DCP ``Metadata`` of the checkpoint in ``directory``, read without running code.

    Raises :class:`~trainmedic.errors.UnrecognizedInputError` when there is no ``.metadata``
    (not a DCP checkpoint, or a save that never finished: DCP writes it last) and
    :class:`~trainmedic.errors.UnreadableInputError` when it cannot be decoded.
    """
    path = Path(directory) / METADATA_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UnrecognizedInputError(
            str(directory), f"no DCP {METADATA_NAME} file; expected a folder written by "
            "torch.distributed.checkpoint (it writes .metadata last, so a save that did not "
            "finish has none): pass the checkpoint's dcp/ folder") from None
    except OSError as exc:
        raise UnreadableInputError(str(path), f"cannot be read ({exc}); check the "
                                   "permissions and the disk") from exc
    try:
        metadata = _MetadataUnpickler(io.BytesIO(raw)).load()
    except Exception as exc:  # any decoding failure of a damaged or foreign file
        raise UnreadableInputError(str(path), f"is not a readable DCP metadata pickle ({exc}); "
                                   "the checkpoint is damaged: use an older one") from exc
    if not all(hasattr(metadata, a) for a in ("state_dict_metadata", "storage_data")):
        raise UnreadableInputError(str(path), f"decodes to {type(metadata).__name__}, not DCP "
                                   "Metadata; the checkpoint is damaged: use an older one")
    if metadata.storage_data is None:
        raise UnreadableInputError(str(path), "has no storage table (storage_data is None); "
                                   "the checkpoint is damaged: use an older one")
    return metadata


# ------------------------------------------------------------------------ DCP plumbing
@functools.cache
def _dcp_classes() -> tuple[type, type]:
    """The reader and planner subclasses, built on first use so that importing this module
    does not import torch."""
    from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
    from torch.distributed.checkpoint._traverse import set_element
    from torch.distributed.checkpoint.planner import ReadItem

    class SafeReader(FileSystemReader):
        """A FileSystemReader that hands out metadata already read by
        :func:`read_sharded_metadata` instead of unpickling ``.metadata`` again."""

        def __init__(self, path: str, metadata: Any) -> None:
            super().__init__(path)
            self._metadata = metadata

        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("rank") is not None:  # DCP's fallback to rank-local metadata
                raise FileNotFoundError("trainmedic never writes rank-local DCP metadata")
            if getattr(self._metadata, "storage_meta", None) is not None:
                self._metadata.storage_meta.load_id = self.load_id
            return self._metadata

    class CheckedPlanner(DefaultLoadPlanner):
        """DefaultLoadPlanner that (a) refuses a checkpoint holding keys under ``prefixes``
        that the target lacks, inside DCP's planning step so every rank raises together, and
        (b) loads non-tensor values with ``weights_only=True``."""

        def __init__(self, prefixes: tuple[str, ...]) -> None:
            super().__init__()
            self._prefixes = prefixes

        def set_up_planner(self, state_dict: Any, metadata: Any = None,
                           is_coordinator: bool = False) -> None:
            super().set_up_planner(state_dict, metadata, is_coordinator)
            sdm = metadata.state_dict_metadata
            saved = {k for k in sdm if k.startswith(self._prefixes)}
            lost = sorted(saved - set(self.state_dict))
            if lost:
                raise _TargetMismatch(
                    f"holds {len(lost)} entries the model/optimizer being loaded has no place "
                    f"for (DCP would skip them silently): {_few(lost)}; load into the same "
                    "model and optimizer (parameter names, optimizer type) that saved it")
            resized = sorted(f"{k} {list(sdm[k].size)} vs {list(v.size())}"
                             for k, v in self.state_dict.items()
                             if k in sdm and hasattr(sdm[k], "size") and hasattr(v, "size")
                             and tuple(sdm[k].size) != tuple(v.size()))
            if resized:
                raise _TargetMismatch(
                    f"holds {len(resized)} tensors whose shape differs from the model/"
                    f"optimizer being loaded (saved vs here): {_few(resized)}; build the "
                    "model with the configuration that saved it")

        def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
            import torch

            obj = torch.load(value, weights_only=True)
            fqn = read_item.dest_index.fqn
            if self.flatten_state_dict:
                set_element(self.original_state_dict, self.mappings[fqn], obj)
            else:
                self.state_dict[fqn] = obj

    return SafeReader, CheckedPlanner


class _TargetMismatch(ValueError):
    """Raised inside DCP's planning step (a plain one-argument exception: DCP pickles it to
    the other ranks); turned into an InputError by :func:`load_sharded`."""


def _few(keys: list[str], n: int = 5) -> str:
    return ", ".join(keys[:n]) + (f" and {len(keys) - n} more" if len(keys) > n else "")


def _distributed() -> tuple[bool, int, int]:
    """(initialized, rank, world size) of the default process group."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return True, dist.get_rank(), dist.get_world_size()
    return False, 0, 1


def _run_dcp(fn: Callable[..., Any], state: dict[str, Any], no_dist: bool,
             **kwargs: Any) -> Any:
    """Calls dcp.save / dcp.load; without a process group, silences DCP's "assuming a
    single process" warning (that is the intent here)."""
    with warnings.catch_warnings():
        if no_dist:
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        return fn(state, no_dist=no_dist, **kwargs)


def _saved_world_size(metadata: Any) -> int | None:
    """The number of ranks that wrote data files (``__{rank}_{i}.distcp``), a lower bound
    of the saving world size (a rank with nothing to write writes no file)."""
    ranks = set()
    for info in metadata.storage_data.values():
        name = str(info.relative_path)
        if name.startswith("__") and "_" in name[2:]:
            head = name[2:].split("_", 1)[0]
            if head.isdigit():
                ranks.add(int(head))
    return max(ranks) + 1 if ranks else None


# ------------------------------------------------------------------------ optimizer state
def _trainable(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]


def _create_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Gives every trainable parameter its optimizer state tensors (exp_avg, exp_avg_sq,
    step for Adam) by one step on zero gradients with lr 0, touching only the parameters
    that have none; their gradients are put back after. The values are overwritten by the
    load; a state the checkpoint lacks is dropped again before it."""
    import torch

    missing = [p for p in _trainable(optimizer) if not optimizer.state.get(p)]
    if not missing:
        return
    grads = {p: p.grad for g in optimizer.param_groups for p in g["params"]}
    lrs = [g.get("lr") for g in optimizer.param_groups]
    missing_ids = {id(p) for p in missing}
    try:
        for p in grads:
            p.grad = torch.zeros_like(p) if id(p) in missing_ids else None
        for g in optimizer.param_groups:
            if "lr" in g:  # every update is scaled by lr, so nothing moves (weight decay too)
                g["lr"] = torch.zeros_like(g["lr"]) if isinstance(g["lr"], torch.Tensor) else 0.0
        optimizer.step()
    finally:
        for g, lr in zip(optimizer.param_groups, lrs, strict=True):
            if lr is not None:
                g["lr"] = lr
        for p, grad in grads.items():
            p.grad = grad


def _drop_unsaved_state(osd: dict[str, Any], saved: set[str]) -> list[str]:
    """Removes from the optimizer target the parameters whose state the checkpoint does not
    hold at all (they had not stepped when it was saved); returns their names."""
    state = osd.get("state", {})
    dropped = []
    for fqn in list(state):
        keys = [f"{OPTIMIZER_KEY}.state.{fqn}.{k}" for k in state[fqn]]
        if keys and not any(k in saved for k in keys):
            del state[fqn]
            dropped.append(fqn)
    return dropped


# ------------------------------------------------------------------------ save / load
def save_sharded(directory: str | Path, model: nn.Module,
                 optimizer: torch.optim.Optimizer | None, *,
                 sync_files: bool = True) -> list[Path]:
    """Writes ``model`` (and ``optimizer``) with DCP under ``directory``; a collective: every
    rank of the default process group calls it (or one process without a group).

    ``directory`` is created; it should be empty (the checkpoint's fresh ``dcp/`` folder).
    Returns the files this rank wrote, as paths under ``directory``: its
    ``__{rank}_{i}.distcp`` data files, plus ``.metadata`` on rank 0 (the coordinator, which
    writes it last, after every rank's data). An optimizer that has not stepped is saved
    without state and left untouched (see the module docstring). ``sync_files`` is DCP's
    option of that name: fsync each file it writes.
    """
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    initialized, rank, _ = _distributed()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state: dict[str, Any]
    if optimizer is None:
        state = {MODEL_KEY: get_model_state_dict(model)}
    else:
        fresh = not optimizer.state
        msd, osd = get_state_dict(model, optimizer)
        if fresh and optimizer.state:  # get_state_dict stepped it at lr 0: undo that
            optimizer.state.clear()
            osd["state"] = {}
        state = {MODEL_KEY: msd, OPTIMIZER_KEY: osd}
    if not torch.serialization.get_crc32_options():
        log.warning("torch.serialization CRC-32 is off: verify_sharded cannot detect "
                    "flipped bits in %s (the manifest hashes still can)", directory)
    writer = FileSystemWriter(str(directory), single_file_per_rank=True,
                              sync_files=sync_files)
    _run_dcp(dcp.save, state, not initialized, storage_writer=writer)
    mine = sorted(directory.glob(f"__{rank}_*{DATA_SUFFIX}"))
    if rank == 0:
        mine.append(directory / METADATA_NAME)
    return mine


def load_sharded(directory: str | Path, model: nn.Module,
                 optimizer: torch.optim.Optimizer | None) -> None:
    """Loads a :func:`save_sharded` checkpoint into ``model`` (and ``optimizer``) in place,
    at any world size and wrapping (see the module docstring); a collective like the save.

    ``optimizer=None`` loads the model alone. Raises
    :class:`~trainmedic.errors.UnrecognizedInputError` (no ``.metadata``),
    :class:`~trainmedic.errors.UnreadableInputError` (damaged metadata or shards) or
    :class:`~trainmedic.errors.InputError` (the checkpoint does not fit the model/optimizer:
    it names the keys), on every rank alike. Per-rank state (RNG, data position) is not
    touched: it is the recipe's ``train_state.rank{r}.pt``.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    directory = Path(directory)
    metadata = read_sharded_metadata(directory)
    saved = set(metadata.state_dict_metadata)
    initialized, rank, world = _distributed()
    saved_world = _saved_world_size(metadata)
    if saved_world is not None and saved_world != world and rank == 0:
        log.info("loading %s (data files from %d ranks) on %d ranks: model and optimizer are "
                 "resharded; per-rank RNG and data position are the recipe's to map",
                 directory, saved_world, world)
    state: dict[str, Any]
    prefixes: tuple[str, ...] = (MODEL_KEY + ".",)
    if optimizer is None:
        state = {MODEL_KEY: get_model_state_dict(model)}
    else:
        if not any(k.startswith(OPTIMIZER_KEY + ".") for k in saved):
            raise InputError(str(directory), "holds no optimizer state (saved with "
                             "optimizer=None); pass optimizer=None to load the model alone")
        _create_optimizer_state(optimizer)
        msd, osd = get_state_dict(model, optimizer)
        dropped = _drop_unsaved_state(osd, saved)
        if dropped:
            log.debug("no optimizer state saved for %s: left without state", _few(dropped))
        state = {MODEL_KEY: msd, OPTIMIZER_KEY: osd}
        prefixes += (OPTIMIZER_KEY + ".",)
    reader_cls, planner_cls = _dcp_classes()
    try:
        _run_dcp(dcp.load, state, not initialized,
                 storage_reader=reader_cls(str(directory), metadata),
                 planner=planner_cls(prefixes))
    except CheckpointException as exc:
        failures = sorted(exc.failures.items())
        first = next((e for _, (e, _) in failures if isinstance(e, _TargetMismatch)),
                     failures[0][1][0] if failures else exc)
        cls = InputError if isinstance(first, _TargetMismatch) else UnreadableInputError
        raise cls(str(directory), f"{first}" if cls is InputError else
                  f"DCP could not load it ({type(first).__name__}: {first}); run "
                  "verify_sharded on it or use an older checkpoint") from exc
    if optimizer is None:
        set_model_state_dict(model, state[MODEL_KEY])
    else:
        set_state_dict(model, optimizer, model_state_dict=state[MODEL_KEY],
                       optim_state_dict=state[OPTIMIZER_KEY])


# ------------------------------------------------------------------------ verify
def _zip_crc_problem(record: bytes) -> str | None:
    """A CRC mismatch or a broken archive in one torch.save record, or None.

    ``zipfile`` reads the archive structure only (no pickle) and checks each member's CRC-32
    as it reads it. A member whose stored CRC is 0 (written with torch's CRC-32 off, or
    empty) is not checked."""
    try:
        with zipfile.ZipFile(io.BytesIO(record)) as zf:
            for info in zf.infolist():
                if not info.CRC:
                    continue
                try:
                    zf.read(info)
                except zipfile.BadZipFile as exc:
                    return f"{info.filename}: {exc}"
    except Exception as exc:  # BadZipFile, zlib/struct errors from a damaged header
        return f"broken torch.save archive ({type(exc).__name__}: {exc})"
    return None


def _check_record(record: bytes, fqn: str, md: Any, chunk: Any) -> list[str]:
    """Problems of one storage record: archive/CRC, loadability, shape, dtype, finiteness."""
    import torch

    if md is None:
        return [f"{fqn}: record not described in .metadata's state_dict_metadata"]
    crc = _zip_crc_problem(record)
    if crc is not None:
        return [f"{fqn}: {crc} (the bytes changed after they were written)"]
    try:
        obj = torch.load(io.BytesIO(record), map_location="cpu", weights_only=True)
    except Exception as exc:
        return [f"{fqn}: does not load with weights_only=True ({type(exc).__name__}: {exc})"]
    if not hasattr(md, "chunks"):  # BytesStorageMetadata: a plain value, loaded is enough
        return []
    if not isinstance(obj, torch.Tensor):
        return [f"{fqn}: holds {type(obj).__name__}, .metadata says a tensor"]
    where = f"{fqn} chunk at {list(chunk.offsets)}" if chunk is not None else fqn
    problems = []
    if chunk is not None and tuple(obj.shape) != tuple(chunk.sizes):
        problems.append(f"{where}: shape {list(obj.shape)}, .metadata says "
                        f"{list(chunk.sizes)}")
    dtype = getattr(md.properties, "dtype", None)
    if dtype is not None and obj.dtype != dtype:
        problems.append(f"{where}: dtype {obj.dtype}, .metadata says {dtype}")
    if obj.is_floating_point() or obj.is_complex():
        bad = int((~torch.isfinite(obj)).sum())
        if bad:
            problems.append(f"{where}: {bad} of {obj.numel()} values are NaN or infinite")
    return problems


def _coverage_problems(metadata: Any) -> list[str]:
    """Every tensor's chunks lie inside it, add up to it, and each has a storage record;
    every non-tensor value has a record."""
    stored = {(k.fqn, tuple(k.offset) if k.offset is not None else None)
              for k in metadata.storage_data}
    problems = []
    for fqn, md in metadata.state_dict_metadata.items():
        if not hasattr(md, "chunks"):
            if (fqn, None) not in stored:
                problems.append(f"{fqn}: no storage record for this value")
            continue
        size = tuple(md.size)
        covered = 0
        for c in md.chunks:
            off, sz = tuple(c.offsets), tuple(c.sizes)
            if len(off) != len(size) or any(o + s > n for o, s, n in zip(off, sz, size,
                                                                          strict=True)):
                problems.append(f"{fqn}: chunk at {list(off)} size {list(sz)} lies outside "
                                f"the tensor {list(size)}")
            if (fqn, off) not in stored:
                problems.append(f"{fqn}: no storage record for the chunk at {list(off)}")
            covered += math.prod(sz)
        if covered != math.prod(size):
            problems.append(f"{fqn}: chunks cover {covered} of {math.prod(size)} elements")
    return problems


def _chunk_of(md: Any, offset: Any) -> Any:
    if offset is None or not hasattr(md, "chunks"):
        return None
    want = tuple(offset)
    return next((c for c in md.chunks if tuple(c.offsets) == want), None)


@dataclass(kw_only=True, frozen=True)
class ShardedCounts:
    """What a DCP checkpoint holds, per its ``.metadata`` (all of it checked by
    :func:`check_sharded` when it reports no problem)."""

    files: int
    """Data files (``__{rank}_{i}.distcp``) the records lie in."""

    tensors: int
    """Tensors (each stored as one or more chunks, e.g. one per FSDP shard)."""

    chunks: int
    """Tensor chunks (storage records of tensors)."""

    values: int
    """Non-tensor values (optimizer hyper-parameters and the like)."""


def verify_sharded(directory: str | Path) -> list[str]:
    """The problems of :func:`check_sharded`."""
    return check_sharded(directory)[0]


def check_sharded(directory: str | Path) -> tuple[list[str], ShardedCounts | None]:
    """Problems of the DCP checkpoint in ``directory``, each a one-line message that starts
    with the file it is about (relative to ``directory``), empty when it is good; and what
    its ``.metadata`` says it holds (None when that cannot be read).

    Needs no model and no process group. Checks: ``.metadata`` decodes (restricted unpickler);
    every tensor's chunks tile it and have a record; every referenced file exists and has
    exactly the size the records add up to (a truncated or extended file shows here); every
    record is an intact ``torch.save`` archive (zip structure and CRC-32 of each member),
    loads with ``torch.load(weights_only=True)``, has the shape and dtype ``.metadata`` gives
    and holds only finite values. Records written through DCP stream transforms (compression
    extensions; trainmedic writes none) cannot be checked and are reported. Reads every
    byte once; holds one record in memory at a time.
    """
    directory = Path(directory)
    try:
        metadata = read_sharded_metadata(directory)
    except InputError as exc:
        return [f"{METADATA_NAME}: {exc.message}"], None
    problems = [f"{METADATA_NAME}: {p}" for p in _coverage_problems(metadata)]
    by_file: dict[str, list[tuple[Any, Any]]] = {}
    for index, info in metadata.storage_data.items():
        by_file.setdefault(str(info.relative_path), []).append((index, info))
    for name in sorted(by_file):
        problems += _verify_file(directory, name, by_file[name], metadata.state_dict_metadata)
    sdm = metadata.state_dict_metadata.values()
    tensors = [md for md in sdm if hasattr(md, "chunks")]
    counts = ShardedCounts(files=len(by_file), tensors=len(tensors),
                           chunks=sum(len(md.chunks) for md in tensors),
                           values=len(sdm) - len(tensors))
    return problems, counts


def _verify_file(directory: Path, name: str, items: Iterable[tuple[Any, Any]],
                 sdm: Mapping[str, Any]) -> list[str]:
    path = directory / name
    if Path(name).is_absolute() or ".." in Path(name).parts:
        return [f"{name}: .metadata points outside the checkpoint folder"]
    records = sorted(items, key=lambda it: int(it[1].offset))
    expected = max(int(info.offset) + int(info.length) for _, info in records)
    try:
        actual = path.stat().st_size
    except FileNotFoundError:
        return [f"{name}: missing ({len(records)} records, {expected} bytes expected)"]
    problems = []
    if actual != expected:
        how = "truncated" if actual < expected else "longer than written"
        problems.append(f"{name}: {actual} bytes, .metadata expects {expected} ({how})")
    try:
        with path.open("rb") as f:
            for index, info in records:
                offset, length = int(info.offset), int(info.length)
                if offset + length > actual:
                    continue  # covered by the size problem above
                if info.transform_descriptors:
                    problems.append(f"{name}: {index.fqn}: written through DCP stream "
                                    f"transforms {list(info.transform_descriptors)}, which "
                                    "verify cannot check")
                    continue
                f.seek(offset)
                record = f.read(length)
                problems += [f"{name}: {p}" for p in _check_record(
                    record, index.fqn, sdm.get(index.fqn), _chunk_of(sdm.get(index.fqn),
                                                                     index.offset))]
    except OSError as exc:
        problems.append(f"{name}: cannot be read ({exc})")
    return problems
