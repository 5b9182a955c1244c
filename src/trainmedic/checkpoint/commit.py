"""The commit protocol: how a checkpoint folder comes to exist only when it is complete.

A save writes into a fresh hidden folder ``ROOT/.tmp-step-%08d-<token>`` (``token``: 8 random
hex digits, so two writers never share a folder). The rename is the commit::

    1. mkdir .tmp-step-...-<token>; create .writer.lock in it, flock'ed for the writer's life
    2. write every state file (hashed while written, its write-back to disk started every
       64 MiB), fsync each once all are written
    3. write manifest.json (sizes and hashes of every file), fsync it, fsync the folder
    4. rename .tmp-step-... -> step-%08d            (atomic on POSIX file systems)
    5. fsync ROOT, so the rename itself survives a power cut

A process killed at any point leaves either a ``.tmp-*`` folder (never a candidate for
"latest", removed later by :func:`clean_stale`) or a complete ``step-*`` folder. Nothing
written before is touched until the new checkpoint is committed.

**Saving a step that already exists** (a run rolled back to an earlier checkpoint saves the
same step numbers again) **replaces it atomically**: the new folder is complete first, then the
two folders are swapped with ``renameat2(RENAME_EXCHANGE)`` (Linux >= 3.15; ext4, xfs, btrfs,
tmpfs) and the old one, now under the hidden name, is deleted. Where the exchange is not
supported the old folder is first renamed to ``.del-step-...`` and the new one renamed into
place: a process killed between those two renames leaves no ``step-N`` folder for that step
(both versions sit in hidden folders; every other checkpoint is untouched).

**Liveness of a ``.tmp-*`` folder.** The writer holds an exclusive ``flock`` on
``.writer.lock`` (a JSON line with pid, host, rank, start time) from step 1 until after the
rename; the kernel releases it when the process dies, even by SIGKILL. The lock file is
created under another name and renamed into place once locked, so a ``.writer.lock`` that can
be locked belongs to a dead writer. A folder without one is alive for :data:`GRACE_S` after its
last change (the instant between ``mkdir`` and the lock). On a file system without ``flock``
the pid is checked when the host matches, and the folder is otherwise presumed alive.

**Write failures** (disk full, file-size limit, read-only or missing root) raise
:class:`~trainmedic.errors.InputError` naming the root, the step and the file; the temporary
folder is removed when possible, and the process can go on training and save again.
"""

from __future__ import annotations

import ctypes
import errno
import json
import logging
import os
import re
import secrets
import shutil
import socket
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmedic.checkpoint.manifest import (
    FileRecord,
    HashingWriter,
    Manifest,
    hash_file,
    utc_now,
    write_manifest,
)
from trainmedic.errors import ConfigError, InputError

try:  # POSIX only; elsewhere liveness falls back to the pid and the grace period
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "LOCK_NAME",
    "GRACE_S",
    "CheckpointDir",
    "PendingCheckpoint",
    "step_dir_name",
    "tmp_dir_name",
    "parse_dir_name",
    "scan",
    "new_token",
    "writer_alive",
    "writer_info",
    "apply_retention",
    "clean_stale",
    "fsync_dir",
    "write_error",
]

log = logging.getLogger(__name__)

LOCK_NAME = ".writer.lock"
#: Seconds a ``.tmp-*`` folder without a lock file counts as alive after its last change.
GRACE_S = 60.0
_STEP_RE = re.compile(r"^step-(\d{8,})$")
_TMP_RE = re.compile(r"^\.tmp-step-(\d{8,})-([0-9a-f]{8,})$")
_DEL_RE = re.compile(r"^\.del-step-(\d{8,})-([0-9a-f]{8,})$")
#: torch.save's own per-record zip CRC-32 is switched off while trainmedic writes (see
#: PendingCheckpoint.write_torch); the switch is process-global, so writers take turns.
_TORCH_CRC_LOCK = threading.Lock()
_NO_SPACE = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


# ------------------------------------------------------------------------------------ names
def step_dir_name(step: int) -> str:
    """``step-00001200``: the committed folder of ``step`` (more digits past 99,999,999)."""
    return f"step-{step:08d}"


def tmp_dir_name(step: int, token: str) -> str:
    """``.tmp-step-00001200-<token>``: the folder a save writes into before the commit."""
    return f".tmp-step-{step:08d}-{token}"


def new_token() -> str:
    """8 random hex digits naming one save's temporary folder."""
    return secrets.token_hex(4)


def parse_dir_name(name: str) -> tuple[str, int] | None:
    """``("committed" | "tmp" | "deleting", step)`` for a checkpoint folder name, else None."""
    for kind, rx in (("committed", _STEP_RE), ("tmp", _TMP_RE), ("deleting", _DEL_RE)):
        m = rx.match(name)
        if m:
            return kind, int(m.group(1))
    return None


@dataclass(kw_only=True, frozen=True)
class CheckpointDir:
    """A folder under a checkpoint root whose name follows the scheme."""

    path: Path
    """The folder."""

    kind: str
    """``committed`` (``step-*``), ``tmp`` (``.tmp-step-*``) or ``deleting`` (``.del-step-*``)."""

    step: int
    """The step in its name."""


def scan(root: str | Path) -> list[CheckpointDir]:
    """Every checkpoint-named folder directly under ``root``, highest step first (committed
    before tmp at one step). Raises ``InputError`` when ``root`` is not a readable folder."""
    root = Path(root)
    try:
        names = os.listdir(root)
    except FileNotFoundError as exc:
        raise InputError(str(root), "no such folder; expected a checkpoint root holding "
                                    "step-* folders") from exc
    except NotADirectoryError as exc:
        raise InputError(str(root), "not a folder; expected a checkpoint root holding "
                                    "step-* folders") from exc
    except OSError as exc:
        raise InputError(str(root), f"cannot list the folder: {exc.strerror}") from exc
    out = []
    for name in names:
        parsed = parse_dir_name(name)
        if parsed is not None and (root / name).is_dir():
            out.append(CheckpointDir(path=root / name, kind=parsed[0], step=parsed[1]))
    order = {"committed": 0, "tmp": 1, "deleting": 2}
    out.sort(key=lambda d: (-d.step, order[d.kind], d.path.name))
    return out


# ---------------------------------------------------------------------------- durability
def fsync_dir(path: str | Path) -> None:
    """fsync a folder, so the names created, renamed or removed in it are durable. A file
    system that cannot fsync folders (EINVAL) is left as is."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def write_error(root: str | Path, step: int, what: str, exc: OSError) -> InputError:
    """A failed write as one line: where, what, why, and that nothing earlier was lost."""
    why = exc.strerror or str(exc)
    hint = ("free space (or lower keep_last) and save again" if exc.errno in _NO_SPACE
            else "make the folder writable or point the manager at another one")
    return InputError(str(root), f"cannot write checkpoint step {step} ({what}: {why}); the "
                                 f"previous checkpoints are intact; {hint}")


@contextmanager
def _torch_zip_crc_off() -> Iterator[None]:
    from torch.serialization import get_crc32_options, set_crc32_options

    with _TORCH_CRC_LOCK:
        before = get_crc32_options()
        set_crc32_options(False)
        try:
            yield
        finally:
            set_crc32_options(before)


def _sync_file_range() -> Any:
    """libc's ``sync_file_range`` (Linux), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_SYNC_FILE_RANGE = _sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2
#: Bytes written between two requests to start writing back (see _DurableWriter).
WRITEBACK_BYTES = 64 << 20


class _DurableWriter(HashingWriter):
    """A :class:`HashingWriter` that asks the kernel to start writing each 64 MiB back to disk
    as soon as it is written (``sync_file_range(SYNC_FILE_RANGE_WRITE)``: it starts the I/O
    and returns), so the disk works while the rest is serialized and the final ``fsync``
    waits only for the tail. Measured here writing 1.6 GB: fsync at the end 0.67-0.70 s at
    best, with early writeback 0.50-0.55 s. Linux only; elsewhere a plain HashingWriter."""

    def __init__(self, file: Any, *, writeback: bool = True) -> None:
        super().__init__(file, parallel=True)
        self._started = 0
        self._writeback = writeback and _SYNC_FILE_RANGE is not None

    def write(self, data: Any) -> int:
        n = super().write(data)
        if self._writeback and self.size_bytes - self._started >= WRITEBACK_BYTES:
            self._file.flush()
            _SYNC_FILE_RANGE(self._file.fileno(), self._started,
                             self.size_bytes - self._started, _SYNC_FILE_RANGE_WRITE)
            self._started = self.size_bytes
        return n


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths with ``renameat2(RENAME_EXCHANGE)``; False where the kernel,
    the C library or the file system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


# ---------------------------------------------------------------------------- one save
class PendingCheckpoint:
    """One save's temporary folder: files go in, :meth:`commit` turns it into ``step-N``.

    Rank 0 (the owner) makes it with :meth:`create`; other ranks :meth:`attach` to the same
    folder by token and only write their own files. Not thread-safe: one thread per save.

    ``sync_files=False`` skips every fsync (files, manifest, folders), as DCP's
    ``FileSystemWriter(sync_files=False)`` does: the rename is still atomic for every process
    on the machine (a killed save never shows), but after a power cut or a kernel crash a
    committed folder may hold files the disk never got. ``verify`` (sizes and CRC-32) then
    reports it damaged and ``latest`` skips it; the checkpoint itself is lost.
    """

    def __init__(self, root: Path, step: int, token: str, *, owner: bool,
                 sync_files: bool = True) -> None:
        self.root = root
        self.durable = sync_files
        self.step = step
        self.token = token
        self.owner = owner
        self.path = root / tmp_dir_name(step, token)
        self._unsynced: list[Path] = []
        self._lock_fd: int | None = None

    @classmethod
    def create(cls, root: str | Path, step: int, *, rank: int = 0,
               token: str | None = None, sync_files: bool = True) -> PendingCheckpoint:
        """mkdir the root (if needed) and a fresh temporary folder, and lock it."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ConfigError(f"step must be an integer >= 0, got {step!r}")
        self = cls(Path(root), step, token or new_token(), owner=True, sync_files=sync_files)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(str(self.root), f"cannot create the checkpoint folder "
                                             f"({exc.strerror}); make it writable or choose "
                                             f"another one") from exc
        if not self.root.is_dir():
            raise InputError(str(self.root), "not a folder; expected a checkpoint root")
        try:
            self.path.mkdir()
            self._lock(rank)
        except OSError as exc:
            self.abort()
            raise write_error(self.root, step, "the temporary folder", exc) from exc
        return self

    @classmethod
    def attach(cls, root: str | Path, step: int, token: str, *,
               sync_files: bool = True) -> PendingCheckpoint:
        """The folder rank 0 created, for another rank to write its files into."""
        return cls(Path(root), step, token, owner=False, sync_files=sync_files)

    def _lock(self, rank: int) -> None:
        staging = self.path / (LOCK_NAME + ".new")
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self._lock_fd = fd
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:  # no flock on this file system: the pid still tells
                log.debug("flock on %s failed: %s", staging, exc)
        info = {"pid": os.getpid(), "host": socket.gethostname(), "rank": rank,
                "started_utc": utc_now()}
        os.write(fd, (json.dumps(info) + "\n").encode())
        os.rename(staging, self.path / LOCK_NAME)

    def _release(self, folder: Path | None) -> None:
        if folder is not None:
            try:
                (folder / LOCK_NAME).unlink()
            except OSError:
                pass  # a stale lock file in a committed folder is ignored by verify
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- writing ---------------------------------------------------------------------------
    def write_torch(self, name: str, obj: Any, *, rank: int) -> FileRecord:
        """``torch.save(obj)`` to ``name`` in the folder, hashed while written; fsynced by
        :meth:`sync_files` (the writer calls it once all its files are written) or at the
        latest by :meth:`commit`.

        torch.save's own per-record zip CRC-32 is switched off for the call (saves ~40% of
        its time; ``torch.load`` never checks it): the whole-file CRC-32 in the manifest
        replaces it, and ``verify`` checks that one.
        """
        import torch

        path = self.path / name
        writer: HashingWriter | None = None
        try:
            with open(path, "wb") as f, _DurableWriter(f, writeback=self.durable) as writer:
                with _torch_zip_crc_off():
                    torch.save(obj, writer)  # type: ignore[arg-type]  # a file-like
                f.flush()
        except OSError as exc:
            raise write_error(self.root, self.step, name, exc) from exc
        except RuntimeError as exc:
            if writer is not None and writer.error is not None:
                raise write_error(self.root, self.step, name, writer.error) from exc
            raise
        # fsync later (sync_files): this file's tail goes to disk while the next is written.
        self._unsynced.append(path)
        return FileRecord(path=name, size_bytes=writer.size_bytes, hash=writer.hash, rank=rank)

    def sync_files(self) -> None:
        """fsync every file :meth:`write_torch` wrote and has not synced yet."""
        if not self.durable:
            self._unsynced.clear()
        while self._unsynced:
            path = self._unsynced[0]
            try:
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise write_error(self.root, self.step, path.name, exc) from exc
            self._unsynced.pop(0)

    def record(self, path: str | Path, *, rank: int) -> FileRecord:
        """Hash a file someone else wrote into the folder (DCP's), and fsync it."""
        path = Path(path)
        rel = path.relative_to(self.path).as_posix()
        try:
            if self.durable:
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            size, digest = hash_file(path)
        except OSError as exc:
            raise write_error(self.root, self.step, rel, exc) from exc
        return FileRecord(path=rel, size_bytes=size, hash=digest, rank=rank)

    # -- the commit ------------------------------------------------------------------------
    def commit(self, manifest: Manifest) -> Path:
        """Write the manifest and rename the folder to ``step-N`` (see the module doc).
        Returns the committed folder. On failure the temporary folder is removed."""
        if not self.owner:
            raise RuntimeError("only the rank that created the folder commits it")
        final = self.root / step_dir_name(self.step)
        self.sync_files()
        try:
            durable = self.durable
            if durable:
                for sub in sorted({p.parent for p in self.path.rglob("*") if p.is_file()}):
                    if sub != self.path:
                        fsync_dir(sub)
            write_manifest(self.path, manifest, sync=durable)
            if durable:
                fsync_dir(self.path)
            old = self._install(final)
            if durable:
                fsync_dir(self.root)
        except OSError as exc:
            self.abort()
            raise write_error(self.root, self.step, "manifest.json and the commit", exc
                              ) from exc
        self._release(final)
        if old is not None:
            _remove_tree(old)
        return final

    def _install(self, final: Path) -> Path | None:
        """Rename into place; returns the folder the replaced checkpoint now sits in."""
        try:
            os.rename(self.path, final)  # also replaces an *empty* folder of that name
            return None
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        log.warning("replacing the existing checkpoint %s (same step saved again)", final)
        if _exchange(self.path, final):
            return self.path
        aside = self.root / f".del-step-{self.step:08d}-{self.token}"
        os.rename(final, aside)
        try:
            os.rename(self.path, final)
        except OSError:
            os.rename(aside, final)  # put the old one back before reporting the failure
            raise
        return aside

    def abort(self) -> None:
        """Remove the temporary folder (best effort) and release the lock."""
        self._release(None)
        if self.owner:
            _remove_tree(self.path)


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# ------------------------------------------------------------------------------ liveness
def writer_info(folder: str | Path) -> dict[str, Any] | None:
    """The JSON of a folder's ``.writer.lock`` (pid, host, rank, started_utc), or None."""
    try:
        data = json.loads((Path(folder) / LOCK_NAME).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def writer_alive(folder: str | Path, *, grace_s: float = GRACE_S) -> bool:
    """True while a ``.tmp-*`` folder's writer may still be writing it (module doc)."""
    folder = Path(folder)
    try:
        fd = os.open(folder / LOCK_NAME, os.O_RDONLY)
    except FileNotFoundError:
        try:
            age_s = time.time() - folder.stat().st_mtime
        except OSError:
            return False
        return age_s < grace_s
    except OSError:
        return True
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            except OSError:
                pass  # no flock here: fall through to the pid
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
                return False
        info = writer_info(folder) or {}
        if info.get("host") == socket.gethostname():
            return _pid_alive(info.get("pid"))
        return True
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- retention
def clean_stale(root: str | Path, *, grace_s: float = GRACE_S) -> list[Path]:
    """Remove ``.tmp-*`` folders whose writer is dead and leftover ``.del-*`` folders.
    ``grace_s``: how long a folder without a lock yet counts as alive (0 when the caller knows
    every writer is gone). Returns what was removed."""
    removed = []
    for d in scan(root):
        if d.kind == "deleting" or (d.kind == "tmp"
                                    and not writer_alive(d.path, grace_s=grace_s)):
            _remove_tree(d.path)
            removed.append(d.path)
    return removed


def apply_retention(root: str | Path, keep_last: int | None, *,
                    protect: Iterable[Path] = ()) -> list[Path]:
    """Keep the ``keep_last`` committed checkpoints with the highest steps (and those in
    ``protect``: the one just saved), delete the other committed ones, and clean stale
    folders (:func:`clean_stale`). ``None`` keeps every committed checkpoint.

    A checkpoint is first renamed to ``.del-step-...`` and then deleted, so one half-deleted
    by a crash is never mistaken for a committed one. Returns the deleted folders.
    """
    if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int)
                                  or keep_last < 1):
        raise ConfigError(f"keep_last must be an integer >= 1 or None, got {keep_last!r}")
    root = Path(root)
    removed = clean_stale(root)
    if keep_last is None:
        return removed
    keep = {Path(p).resolve() for p in protect}
    committed = [d for d in scan(root) if d.kind == "committed"]
    for d in committed[keep_last:]:
        if d.path.resolve() in keep:
            continue
        aside = root / f".del-step-{d.step:08d}-{new_token()}"
        try:
            os.rename(d.path, aside)
        except OSError as exc:
            log.warning("retention could not remove %s: %s", d.path, exc)
            continue
        _remove_tree(aside)
        removed.append(d.path)
    return removed
