"""``CheckpointManager``: save the complete training state atomically, load the latest good one.

Usage::

    manager = CheckpointManager("ckpt", keep_last=3, config=recipe_config)
    state = {"model": model, "optimizer": opt, "scheduler": sched, "scaler": scaler,
             "train": training_state.capture(loop)}
    manager.save(step, state)             # -> ckpt/step-00001200 (committed)
    loaded = manager.load(state)          # the newest checkpoint that verifies, in place
    loaded.step, loaded.train             # this rank's training state (RNG, data position)

**State.** ``model``, ``optimizer``, ``scheduler``, ``scaler`` (and any other key whose value
has ``state_dict`` / ``load_state_dict``) are saved as ``<key>.pt`` by rank 0 (the unsharded
``torch`` format); ``train`` is each rank's plain dict, saved by every rank as
``train_state.rank{r}.pt``. ``None`` values are skipped. Everything saved must be tensors and
plain Python values (dict, list, tuple, set, str, bytes, int, float, complex, bool, None,
``torch.Size``/``dtype``/``device``) so that it loads with ``torch.load(weights_only=True)``;
anything else is refused at save time with the key path named (``ConfigError``).

**Ranks.** Rank and world size come from ``torch.distributed`` when it is initialized at
construction (else 0 and 1); construct the manager on every rank, after
``init_process_group``, and call ``save`` and ``load`` on every rank alike: it
creates a gloo group of its own for its collectives. A save on N
ranks: rank 0 creates the temporary folder and broadcasts its token; every rank writes its
files (rank 0 the model and optimizer in the ``torch`` format, DCP on every rank in the
``dcp`` format); the file records (sizes, hashes) and any failure are gathered to rank 0,
which writes the manifest and commits (``trainmedic.checkpoint.commit``), or removes the
folder when any rank failed; the outcome is broadcast and every rank returns the committed
path or raises. The unsharded format assumes every rank sees the same file system.
``sharded=None`` picks ``dcp`` when the world size is > 1 or the model holds DTensors (FSDP2),
calling ``trainmedic.checkpoint.sharded``; DDP runs that want the plain files pass
``sharded=False``.

**Loading** (``load``) checks what it reads in the same pass: the manifest, the size and the
CRC-32 of every file this rank reads, that every ``.pt`` loads with ``weights_only=True`` and
that its floating tensors are finite; only then is anything loaded into the objects. With
``path=None`` a checkpoint that fails is skipped (logged) for the next older one; all ranks
agree on the one they load. Files are read through ``torch.load(mmap=True)``: the model
copies its tensors out at once; the optimizer keeps CPU state tensors of matching dtype as they
come, so they stay copy-on-write views of the checkpoint file until the first step rewrites
them (the files are never modified in place; retention unlinks them, which Linux allows under
a mapping). A recipe config that differs from the saved one is refused,
naming the keys (:class:`ConfigMismatchError`), unless ``force=True``; when the manager has
no config nothing is compared. A rank without its own ``train_state.rank{r}.pt`` (the world
grew) gets rank 0's, with ``LoadedCheckpoint.train_rank`` saying so: the recipe's
``training_state.restore`` decides what a resize means.

**Async save** (``async_save=True``, ``torch`` format): ``save`` copies every tensor into CPU
staging buffers (pinned for CUDA tensors; reused by later saves, so the steady state allocates
nothing) and returns; a background thread then writes and commits. With ``defer_copy=True``
``save`` copies only what a forward could change (module buffers, the training state, anything
on a GPU) and the thread copies the parameters and optimizer state -- which only
``optimizer.step()`` changes -- holding the next ``optimizer.step()`` until that copy is done
(see ``staging``; a parameter changed in place before that step fails the save instead of
writing it torn). That hides the copy behind the next forward and backward when a core is
free for it; on a machine whose cores the training already uses, the copy competes with the
forward and the total delay grows (measured: ``benchmarks/ckpt_speed.py``), hence off by
default. The next ``save``, ``load``, ``latest`` or ``wait()`` first joins the thread and
raises its error, if any (the new save is then not started). The thread is not a daemon: a
process that ends normally finishes its last save first; with several ranks call ``wait()``
before ``destroy_process_group()`` (the thread's collectives need the group). The cost: one
extra CPU copy of the state, held between saves (``close()`` frees it). ``dcp`` saves are
always synchronous (DCP's collectives run on the training thread).

**Retention** (``keep_last``): after each commit, rank 0 deletes the committed checkpoints
beyond the newest ``keep_last`` by step, never the one just saved nor the newest one that is
trusted (finite at save and, with ``trusted_before``, saved before a divergence: ``health``),
and removes temporary folders whose writer is dead (see ``commit``). Saving a step lower than
an existing one (a run rolled back) is logged: ``latest()`` still returns the highest step.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmedic.checkpoint.commit import (
    PendingCheckpoint,
    apply_retention,
    parse_dir_name,
    scan,
    step_dir_name,
)
from trainmedic.checkpoint.config import CheckpointConfig
from trainmedic.checkpoint.health import newest_trusted, onset_of, state_finite
from trainmedic.checkpoint.manifest import (
    MANIFEST_NAME,
    FileRecord,
    Manifest,
    check_loadable,
    config_differences,
    config_hash,
    read_manifest,
    train_state_name,
    utc_now,
)
from trainmedic.checkpoint.process_group import ProcessGroupComm
from trainmedic.checkpoint.staging import StagedState, Stager
from trainmedic.checkpoint.verify import Problem, check_file, latest, load_pt, owned_copy
from trainmedic.errors import (
    ConfigError,
    ConfigMismatchError,
    DamagedCheckpointError,
    InputError,
    NoCheckpointError,
)

__all__ = [
    "CheckpointManager",
    "LoadedCheckpoint",
    "ConfigMismatchError",
    "DamagedCheckpointError",
    "NoCheckpointError",
]

log = logging.getLogger(__name__)

TRAIN_KEY = "train"
_DCP_KEYS = ("model", "optimizer")
_KEY_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


@dataclass(kw_only=True, frozen=True)
class LoadedCheckpoint:
    """What :meth:`CheckpointManager.load` loaded."""

    path: Path
    """The checkpoint folder."""

    step: int
    """Its step."""

    manifest: Manifest
    """Its manifest (world size, format, config, files)."""

    train: dict[str, Any] = field(default_factory=dict)
    """This rank's training-state dict (``{}`` when the save had none)."""

    train_rank: int | None = None
    """The rank whose ``train_state`` file ``train`` came from: this rank's, or 0 when the
    checkpoint has none for this rank (saved by fewer ranks); None when there was none."""


@dataclass
class _Read:
    """One candidate checkpoint read and checked by this rank, not yet applied."""

    path: Path
    manifest: Manifest | None = None
    loaded: dict[str, Any] = field(default_factory=dict)
    train: Any = None
    train_rank: int | None = None
    problems: list[Problem] = field(default_factory=list)


def _deferrable(objs: Mapping[str, Any]) -> Any:
    """Which tensors an async save may copy after ``save()`` returns: the model's parameters
    and the optimizer's state, which only ``optimizer.step()`` changes (staging.py). None
    (copy everything now) without an optimizer to hold."""
    optimizer = objs.get("optimizer")
    if optimizer is None or not hasattr(optimizer, "register_step_pre_hook"):
        return None
    ptrs: set[int] = set()
    model = objs.get("model")
    if model is not None and hasattr(model, "parameters"):
        ptrs.update(p.untyped_storage().data_ptr() for p in model.parameters())
    for state in getattr(optimizer, "state", {}).values():
        for v in state.values():
            if hasattr(v, "untyped_storage"):
                ptrs.add(v.untyped_storage().data_ptr())
    return lambda t: t.untyped_storage().data_ptr() in ptrs


def _describe(exc: BaseException) -> str:
    if isinstance(exc, InputError):
        return str(exc)
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


class CheckpointManager:
    """Atomic, verified checkpoints under one root folder (see the module doc).

    The keywords are the fields of :class:`~trainmedic.checkpoint.config.CheckpointConfig`
    (each documented there; ``config`` is its ``recipe_config``: the recipe's JSON-able
    config, recorded and compared on load); :meth:`from_config` takes one directly.
    """

    def __init__(self, root: str | Path, *, keep_last: int | None = 3,
                 async_save: bool = False, config: Mapping[str, Any] | None = None,
                 sharded: bool | None = None, defer_copy: bool = False,
                 sync_files: bool = True,
                 trusted_before: Callable[[], int | None] | None = None) -> None:
        self.cfg = CheckpointConfig(keep_last=keep_last, async_save=async_save,
                                    recipe_config=config, sharded=sharded,
                                    defer_copy=defer_copy, sync_files=sync_files,
                                    trusted_before=trusted_before)
        self.root = Path(root)
        self.keep_last, self.async_save = self.cfg.keep_last, self.cfg.async_save
        self.defer_copy, self.sync_files = self.cfg.defer_copy, self.cfg.sync_files
        self.trusted_before, self.sharded = self.cfg.trusted_before, self.cfg.sharded
        self._config = self.cfg.recipe_config
        self._config_hash = config_hash(self._config) if self._config is not None else None
        self._comm = ProcessGroupComm()
        self.rank, self.world_size = self._comm.rank, self._comm.world
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._stager = Stager()
        self._staged: StagedState | None = None
        self._warned_async_dcp = False

    @classmethod
    def from_config(cls, root: str | Path, cfg: CheckpointConfig) -> CheckpointManager:
        """A manager for ``root`` as ``cfg`` says."""
        return cls(root, keep_last=cfg.keep_last, async_save=cfg.async_save,
                   config=cfg.recipe_config, sharded=cfg.sharded, defer_copy=cfg.defer_copy,
                   sync_files=cfg.sync_files, trusted_before=cfg.trusted_before)

    # -- save ----------------------------------------------------------------------------
    def save(self, step: int, state: Mapping[str, Any]) -> Path:
        """Save ``state`` as checkpoint ``step``; returns ``ROOT/step-%08d``, committed when
        this returns (async: committed once :meth:`wait` returns). Raises ``ConfigError``
        for state that cannot be saved and ``InputError`` when the write fails (the previous
        checkpoints are intact and training can go on)."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ConfigError(f"step must be an integer >= 0, got {step!r}")
        self.wait()
        objs, train = self._split(state, saving=True)
        dcp = self._use_dcp(objs)
        dcp_objs = None
        if dcp:
            if "model" not in objs:
                raise ConfigError("state['model']: a sharded (dcp) save needs the model")
            dcp_objs = (objs.pop("model"), objs.pop("optimizer", None))
        files: dict[str, Any] = {}
        if self.rank == 0:
            for key, obj in objs.items():
                sd = obj.state_dict()
                check_loadable(sd, f"state[{key!r}].state_dict()")
                files[key] = sd
        if train is not None:
            check_loadable(train, f"state[{TRAIN_KEY!r}]")
        entries = {key: f"{key}.pt" for key in objs}
        if dcp_objs is not None:
            entries.update({k: "dcp" for k, v in zip(_DCP_KEYS, dcp_objs, strict=True)
                            if v is not None})
        fmt = "dcp" if dcp else "torch"
        if self.async_save and not dcp:
            staged = self._stager.stage(
                files, train, defer=_deferrable(objs) if self.defer_copy else None)
            if staged.pending:
                # Hold the next optimizer.step() until the deferred copy is done (staging.py).
                staged.hook = objs["optimizer"].register_step_pre_hook(staged.hold)
            self._staged = staged
            self._thread = threading.Thread(
                target=self._background, args=(step, staged, entries),
                name=f"trainmedic-ckpt-save-{step}", daemon=False)
            self._thread.start()
            return self.root / step_dir_name(step)
        if self.async_save and not self._warned_async_dcp:
            log.info("async_save applies to the torch format; dcp saves run synchronously")
            self._warned_async_dcp = True
        return self._save_now(step, files, train, entries, dcp_objs, fmt)

    def _split(self, state: Mapping[str, Any], *, saving: bool,
               ) -> tuple[dict[str, Any], Any]:
        if not isinstance(state, Mapping):
            raise ConfigError(f"state must be a mapping of names to objects, got "
                              f"{type(state).__name__}")
        objs: dict[str, Any] = {}
        for key, value in state.items():
            if value is None or key == TRAIN_KEY:
                continue
            if not isinstance(key, str) or not _KEY_RE.match(key) or key.startswith(
                    "train_state") or key == "manifest":
                raise ConfigError(f"state key {key!r}: expected a name of letters, digits, "
                                  f"'_' or '-' (it names the file <key>.pt)")
            method = "state_dict" if saving else "load_state_dict"
            if not callable(getattr(value, method, None)):
                raise ConfigError(f"state[{key!r}]: a {type(value).__name__} has no {method}(); "
                                  f"pass objects with state_dict/load_state_dict (put plain "
                                  f"values in state[{TRAIN_KEY!r}])")
            objs[key] = value
        train = state.get(TRAIN_KEY)
        if saving and train is not None and not isinstance(train, Mapping):
            raise ConfigError(f"state[{TRAIN_KEY!r}]: expected a dict of plain values, got "
                              f"{type(train).__name__}")
        return objs, train

    def _use_dcp(self, objs: Mapping[str, Any]) -> bool:
        if self.sharded is not None:
            return self.sharded
        if self.world_size > 1:
            return True
        model = objs.get("model")
        if model is None or not hasattr(model, "parameters"):
            return False
        try:
            from torch.distributed.tensor import DTensor
        except ImportError:  # pragma: no cover - old torch
            return False
        return any(isinstance(p, DTensor) for p in model.parameters())

    def _save_now(self, step: int, files: dict[str, Any], train: Any,
                  entries: dict[str, str], dcp_objs: tuple[Any, Any] | None,
                  fmt: str) -> Path:
        comm = self._comm
        pending: PendingCheckpoint | None = None
        head: Any = None
        if self.rank == 0:
            try:
                pending = PendingCheckpoint.create(self.root, step, rank=0,
                                                   sync_files=self.sync_files)
                head = ("ok", pending.token)
            except InputError as exc:
                head = ("error", exc.path, exc.message)
        head = comm.broadcast(head)
        if head[0] == "error":
            raise InputError(head[1], head[2])
        if pending is None:
            pending = PendingCheckpoint.attach(self.root, step, head[1],
                                               sync_files=self.sync_files)
        records: list[FileRecord] = []
        mine: BaseException | None = None
        finite: bool | None = None
        try:
            # dcp: the model and optimizer are shards in dcp/, not checked here (None:
            # unknown). Inside the try: whatever it raises reaches the other ranks' gather.
            if self.rank == 0 and dcp_objs is None:
                finite = state_finite(files, step, self.root)
            if dcp_objs is not None:
                from trainmedic.checkpoint.sharded import save_sharded

                for f in save_sharded(pending.path / "dcp", dcp_objs[0], dcp_objs[1],
                                      sync_files=self.sync_files):
                    records.append(pending.record(f, rank=self.rank))
            for key, obj in files.items():
                records.append(pending.write_torch(entries[key], obj, rank=self.rank))
            if train is not None:
                records.append(pending.write_torch(train_state_name(self.rank), train,
                                                   rank=self.rank))
            pending.sync_files()  # every rank's files are durable before rank 0 commits
        except BaseException as exc:  # noqa: BLE001 - reported to rank 0, re-raised below
            mine = exc
        gathered = comm.gather((records, train is not None,
                                None if mine is None else _describe(mine)))
        outcome: Any = None
        if self.rank == 0:
            failed = [(r, g[2]) for r, g in enumerate(gathered) if g[2] is not None]
            if failed:
                pending.abort()
                outcome = ("error", failed)
            else:
                try:
                    manifest = self._manifest(step, fmt, entries, gathered, finite)
                    self._warn_rollback(step)
                    outcome = ("ok", str(pending.commit(manifest)))
                except BaseException as exc:  # noqa: BLE001 - every rank must hear of it
                    pending.abort()
                    mine = exc
                    outcome = ("error", [(0, _describe(exc))])
        outcome = comm.broadcast(outcome)
        if mine is not None:
            raise mine
        if outcome[0] == "error":
            rank, why = outcome[1][0]
            raise InputError(str(self.root), f"checkpoint step {step} was not saved: rank "
                                             f"{rank} failed ({why})")
        final = Path(outcome[1])
        if self.rank == 0 and self.keep_last is not None:
            try:
                trusted = newest_trusted(self.root, onset_of(self.trusted_before))
                apply_retention(self.root, self.keep_last,
                                protect=[final, *([trusted] if trusted is not None else [])])
            except (OSError, InputError) as exc:
                log.warning("retention under %s failed: %s", self.root, exc)
        return final

    def _manifest(self, step: int, fmt: str, entries: dict[str, str],
                  gathered: list[Any], finite: bool | None) -> Manifest:
        import torch

        from trainmedic._version import __version__

        files = tuple(sorted((rec for g in gathered for rec in g[0]), key=lambda r: r.path))
        return Manifest(step=step, world_size=self.world_size, format=fmt, files=files,
                        entries=entries, train_state=all(g[1] for g in gathered),
                        config_hash=self._config_hash, config=self._config,
                        created_utc=utc_now(), torch_version=str(torch.__version__),
                        trainmedic_version=__version__, finite=finite)

    def _warn_rollback(self, step: int) -> None:
        try:
            newer = [d.step for d in scan(self.root) if d.kind == "committed" and d.step > step]
        except InputError:
            return
        if newer:
            log.warning("saving step %d under %s where step %d already exists (a rolled-back "
                        "run?): latest() returns the highest step; move the abandoned "
                        "checkpoints away", step, self.root, max(newer))

    # -- async ----------------------------------------------------------------------------
    def _background(self, step: int, staged: StagedState, entries: dict[str, str]) -> None:
        try:
            changed = staged.finish()
            staged.release()
            if changed is not None:
                raise InputError(str(self.root), f"async checkpoint step {step} was not "
                                 f"saved: {changed}")
            self._save_now(step, staged.files, staged.train, entries, None, "torch")
        except BaseException as exc:  # noqa: BLE001 - surfaces on wait() / the next save
            staged.release()
            self._error = exc

    def wait(self) -> None:
        """Join a background save; raise its error, if it had one."""
        thread = self._thread
        if thread is not None:
            thread.join()
            self._thread = None
        if self._staged is not None:
            self._staged.release()  # the step pre-hook
            self._staged = None
        err, self._error = self._error, None
        if err is not None:
            raise err

    def close(self) -> None:
        """:meth:`wait`, then free the staging buffers of async saves."""
        try:
            self.wait()
        finally:
            self._stager.clear()

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- load ----------------------------------------------------------------------------
    def latest(self) -> Path | None:
        """The newest committed checkpoint under the root that fully verifies (and, with
        ``trusted_before``, was saved before the loss diverged), or None (also when the root
        does not exist yet). Joins a background save first."""
        self.wait()
        if not self.root.is_dir():
            return None
        return latest(self.root, onset=onset_of(self.trusted_before))

    def load(self, state: Mapping[str, Any], *, path: str | Path | None = None,
             force: bool = False) -> LoadedCheckpoint:
        """Load a checkpoint into the objects of ``state`` in place (module doc).

        ``path`` None: the newest committed checkpoint that verifies (with
        ``trusted_before``, of those saved before the loss diverged). Raises
        :class:`ConfigMismatchError`, :class:`DamagedCheckpointError` (an explicit path),
        :class:`NoCheckpointError` (none verifies) or ``InputError`` (the checkpoint lacks a
        key of ``state``, or does not fit the objects).
        """
        self.wait()
        objs, _ = self._split(state, saving=False)
        comm = self._comm
        if path is not None:
            candidates = [Path(path)]
        else:
            names: Any = None
            if self.rank == 0:
                try:
                    onset = onset_of(self.trusted_before)  # None without it
                    names = [str(d.path) for d in scan(self.root) if d.kind == "committed"
                             and (onset is None or d.step < onset)]
                except InputError as exc:
                    names = ("error", exc.path, exc.message)
            names = comm.broadcast(names)
            if isinstance(names, tuple):
                raise NoCheckpointError(names[1], names[2])
            candidates = [Path(n) for n in names]
        skipped: list[str] = []
        for cand in candidates:
            read = self._read(cand, objs, force)
            oks = comm.all_gather(not read.problems)
            if all(oks):
                return self._apply(read, objs)
            problems = read.problems or [Problem(file="", what="another rank found it damaged")]
            if path is not None:
                raise DamagedCheckpointError(str(cand), problems)
            log.warning("skipping checkpoint %s: %s", cand, problems[0])
            skipped.append(f"{cand.name} ({problems[0]})")
        if skipped:
            raise NoCheckpointError(str(self.root), f"no checkpoint verifies; skipped "
                                                    f"{'; '.join(skipped[:3])}")
        raise NoCheckpointError(str(self.root), "no committed checkpoint (step-*) here yet")

    def _read(self, cand: Path, objs: Mapping[str, Any], force: bool) -> _Read:
        read = _Read(path=cand)
        try:
            manifest = read_manifest(cand)
        except InputError as exc:
            read.problems.append(Problem(file=MANIFEST_NAME, what=exc.message))
            return read
        read.manifest = manifest
        parsed = parse_dir_name(cand.name)
        if parsed is not None and parsed[0] != "committed":
            read.problems.append(Problem(file="", what="not committed (a .tmp-* folder)"))
            return read
        if self._config_hash is not None and manifest.config_hash != self._config_hash:
            differences = config_differences(manifest.config, self._config)
            if not force:
                raise ConfigMismatchError(str(cand), differences)
            log.warning("%s: saved with another recipe config (%s); loaded anyway "
                        "(force=True)", cand, "; ".join(differences))
        missing = [k for k in objs if k not in manifest.entries]
        if missing:
            raise InputError(str(cand), f"holds no {', '.join(missing)} (it holds: "
                                        f"{', '.join(manifest.entries) or 'training state only'}"
                                        f"); leave them out of the state to load the rest")
        for key in objs:
            target = manifest.entries[key]
            if target == "dcp":
                continue
            data, probs = self._read_file(cand, manifest, target)
            read.problems += probs
            read.loaded[key] = data
        if manifest.format == "dcp" and any(manifest.entries.get(k) == "dcp" for k in objs):
            dcp_files = [r for r in manifest.files if r.path.startswith("dcp/")]
            if not dcp_files:
                read.problems.append(Problem(file="dcp", what="no DCP files in the manifest"))
            for i, rec in enumerate(dcp_files):  # each rank hashes its share
                if i % self.world_size == self.rank:
                    read.problems += check_file(cand, rec)
        mine = train_state_name(self.rank)
        if manifest.file(mine) is not None:
            read.train_rank = self.rank
        elif manifest.train_state and manifest.file(train_state_name(0)) is not None:
            read.train_rank = 0
            log.warning("%s was saved by %d rank(s): rank %d gets rank 0's training state",
                        cand, manifest.world_size, self.rank)
        if read.train_rank is not None:
            data, probs = self._read_file(cand, manifest, train_state_name(read.train_rank))
            read.problems += probs
            read.train = data
        return read

    @staticmethod
    def _read_file(cand: Path, manifest: Manifest, name: str) -> tuple[Any, list[Problem]]:
        rec = manifest.file(name)
        if rec is None:
            return None, [Problem(file=name, what="not in the manifest")]
        problems = check_file(cand, rec)
        if problems:
            return None, problems
        data, probs, _ = load_pt(cand / name, name)
        return data, probs

    def _apply(self, read: _Read, objs: Mapping[str, Any]) -> LoadedCheckpoint:
        manifest = read.manifest
        assert manifest is not None
        for key, data in read.loaded.items():
            try:
                objs[key].load_state_dict(data)
            except (RuntimeError, KeyError, ValueError, TypeError) as exc:
                first = " ".join(str(exc).split())[:300]
                raise InputError(str(read.path / manifest.entries[key]),
                                 f"does not fit state[{key!r}]: {type(exc).__name__}: {first}"
                                 ) from exc
        dcp_keys = [k for k in _DCP_KEYS if k in objs and manifest.entries.get(k) == "dcp"]
        if dcp_keys:
            from trainmedic.checkpoint.sharded import load_sharded

            if "model" not in dcp_keys:
                raise ConfigError("state['model']: a sharded (dcp) checkpoint loads the "
                                  "optimizer together with its model; pass both")
            load_sharded(read.path / "dcp", objs["model"],
                         objs.get("optimizer") if "optimizer" in dcp_keys else None)
        train = owned_copy(read.train) if read.train is not None else {}
        log.info("loaded checkpoint %s (step %d)", read.path, manifest.step)
        return LoadedCheckpoint(path=read.path, step=manifest.step, manifest=manifest,
                                train=dict(train), train_rank=read.train_rank)
