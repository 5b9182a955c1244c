"""The checkpoint manifest (``manifest.json``, schema ``trainmedic.checkpoint/1``) and the
content hash of checkpoint files.

A checkpoint folder holds the state files and one ``manifest.json``, written last: the step,
the world size, the format (``torch``: plain ``torch.save`` files; ``dcp``: a
``torch.distributed.checkpoint`` folder ``dcp/``), the torch and trainmedic versions, the
creation time, the recipe config and its hash, which state key went to which file, and every
file with its size, content hash and the rank that wrote it.

**The hash: CRC-32 (``zlib.crc32``) of the whole file, written ``"crc32:<8 hex digits>"``.**
It is computed while the file is written (:class:`HashingWriter`), so a save reads nothing
back, and in one sequential read when verified (:func:`hash_file`). Measured on the 2-core AMD
EPYC VM this was written on (``benchmarks/ckpt_speed.py``), 8 MiB chunks from memory:
crc32 6.8-7.0 GB/s, adler32 ~4 GB/s (and weaker: it misses many short bursts), sha1/sha256
~2.1 GB/s, blake2b 1.4 GB/s, md5 0.9 GB/s; one ``zlib.crc32`` call on a 256 MiB buffer ran at
only 3.5 GB/s, hence the chunks. CRC-32 detects every error burst of up to 32 bits (any
flipped or rewritten byte) and all but ~2^-32 of the others: it guards against storage and
transfer corruption, not against tampering (anyone who can rewrite a file can rewrite the
manifest next to it). ``zlib.crc32`` releases the GIL on large buffers, so hashing does not
stall a training thread.

The JSON layout (stable within schema ``/1``; readers ignore keys they do not know)::

    {"schema": "trainmedic.checkpoint/1", "step": 1200, "world_size": 2, "format": "torch",
     "created_utc": "2026-11-30T12:00:00Z", "torch_version": "2.13.0",
     "trainmedic_version": "0.1.0", "hash_algorithm": "crc32",
     "config_hash": "sha256:...", "config": {...},
     "entries": {"model": "model.pt", "optimizer": "optimizer.pt"},
     "train_state": true,
     "files": [{"path": "model.pt", "size_bytes": 1234, "hash": "crc32:0a1b2c3d", "rank": 0}],
     "manifest_crc32": "crc32:..."}

``manifest_crc32`` is the CRC-32 of all the other keys as canonical JSON (sorted keys, no
spaces): a changed value in the manifest itself is caught even where the JSON still parses.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zlib
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

from trainmedic.checkpoint.file_crc import CHUNK_BYTES, crc32_of_file
from trainmedic.errors import (
    ConfigError,
    InputError,
    UnreadableInputError,
    UnrecognizedInputError,
)

__all__ = [
    "SCHEMA",
    "MANIFEST_NAME",
    "SELF_HASH_KEY",
    "HASH_ALGORITHM",
    "FORMATS",
    "FileRecord",
    "Manifest",
    "read_manifest",
    "write_manifest",
    "manifest_to_json",
    "manifest_from_dict",
    "hash_file",
    "hash_chunks",
    "HashingWriter",
    "config_hash",
    "config_differences",
    "check_loadable",
    "train_state_name",
    "utc_now",
]

SCHEMA = "trainmedic.checkpoint/1"
MANIFEST_NAME = "manifest.json"
HASH_ALGORITHM = "crc32"
FORMATS = ("torch", "dcp")
#: A write at least this large is hashed beside the write (``HashingWriter(parallel=True)``);
#: below it the thread hand-off costs more than the overlap gains.
PARALLEL_MIN_BYTES = 1 << 20
_HASH_RE = re.compile(r"^crc32:[0-9a-f]{8}$")
#: The manifest's own checksum: CRC-32 of its other keys as canonical JSON (sorted keys, no
#: spaces), so any changed value is caught even where the JSON still parses.
SELF_HASH_KEY = "manifest_crc32"


def train_state_name(rank: int) -> str:
    """The file of one rank's training state (RNG, data position, counters)."""
    return f"train_state.rank{rank}.pt"


def utc_now() -> str:
    """The current time as ISO 8601 UTC with a ``Z``, to the second."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------- hashing
def _format_crc(crc: int) -> str:
    return f"{HASH_ALGORITHM}:{crc & 0xFFFFFFFF:08x}"


def hash_chunks(data: Any, crc: int = 0) -> int:
    """Continue a CRC-32 over a bytes-like object, in :data:`CHUNK_BYTES` pieces."""
    view = memoryview(data).cast("B")
    for start in range(0, len(view), CHUNK_BYTES):
        crc = zlib.crc32(view[start:start + CHUNK_BYTES], crc)
    return crc


def hash_file(path: str | Path) -> tuple[int, str]:
    """``(size_bytes, "crc32:...")`` of a file, in one sequential read, the reading overlapped
    with the hashing (:mod:`trainmedic.checkpoint.file_crc`). Raises ``OSError`` as ``open``
    does."""
    size, crc = crc32_of_file(path)
    return size, _format_crc(crc)


class HashingWriter:
    """A binary file wrapper that hashes (CRC-32) and counts every byte written through it.

    ``torch.save(obj, HashingWriter(f))`` streams the archive through :meth:`write`: the
    hash costs one pass over the bytes already in memory, and nothing is read back.

    With ``parallel=True`` a large write (a tensor's storage, at least
    :data:`PARALLEL_MIN_BYTES`) is hashed on a helper thread while this thread copies the
    same bytes into the file: ``zlib.crc32`` and the ``write`` system call both release the
    GIL, so with two cores the pair takes the longer of the two instead of their sum
    (measured here for 1.6 GB: CRC-32 ~0.29 s, the write into the page cache ~0.6 s).
    Each write still returns only once both are done, so the caller's buffer is never read
    after it is handed back. Call :meth:`close` (or use the writer as a context manager) to
    stop the helper.
    """

    def __init__(self, file: BinaryIO, *, parallel: bool = False) -> None:
        self._file = file
        self._crc = 0
        self.size_bytes = 0
        #: The ``OSError`` of a failed write: ``torch.save`` reports it as a ``RuntimeError``
        #: ("unexpected pos ..."), so the caller reads the real cause (ENOSPC, EFBIG) here.
        self.error: OSError | None = None
        self._pool: Any = None
        if parallel and (os.cpu_count() or 1) > 1:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1,
                                            thread_name_prefix="trainmedic-crc")

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        pending = None
        if self._pool is not None and len(view) >= PARALLEL_MIN_BYTES:
            pending = self._pool.submit(hash_chunks, view, self._crc)
        else:
            self._crc = hash_chunks(view, self._crc)
        # A BufferedWriter writes everything or raises (OSError: ENOSPC, EFBIG, EIO).
        try:
            self._file.write(view)
        except OSError as exc:
            self.error = exc
            raise
        finally:
            if pending is not None:  # also on failure: the helper must be off the buffer
                self._crc = pending.result()
        self.size_bytes += len(view)
        return len(view)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        """Stop the hashing helper (the file itself is the caller's to close)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> HashingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def hash(self) -> str:
        """``"crc32:<8 hex>"`` of the bytes written so far."""
        return _format_crc(self._crc)


# --------------------------------------------------------------------------- file contents
_PLAIN_SCALARS = (str, bytes, bytearray, int, float, complex, bool, type(None))
_PLAIN_CONTAINERS = (dict, OrderedDict, Counter, list, tuple, set)


def check_loadable(obj: Any, where: str) -> None:
    """Raise ``ConfigError`` naming ``where`` (the key path) for anything in ``obj`` that
    ``torch.load(weights_only=True)`` would refuse to load: every checkpoint file holds only
    tensors and plain Python values."""
    import torch

    if type(obj) in _PLAIN_SCALARS or isinstance(obj, (torch.dtype, torch.device, torch.Size)):
        return
    if isinstance(obj, torch.Tensor):
        if type(obj) in (torch.Tensor, torch.nn.Parameter):
            return
        what = f"a {type(obj).__name__} (a tensor subclass)"
    elif type(obj) in _PLAIN_CONTAINERS:
        if isinstance(obj, dict):
            for k, v in obj.items():
                check_loadable(k, f"{where} (a key)")
                check_loadable(v, f"{where}[{k!r}]")
        elif not isinstance(obj, set):
            for i, v in enumerate(obj):
                check_loadable(v, f"{where}[{i}]")
        return
    else:
        what = f"a {type(obj).__module__}.{type(obj).__qualname__}"
    raise ConfigError(
        f"{where}: {what} cannot go into a checkpoint file: files hold only tensors and plain "
        f"Python values (dict, list, tuple, str, int, float, bool, None) so that they load "
        f"with torch.load(weights_only=True); convert it first (a numpy array: "
        f"torch.from_numpy(x) or x.tolist())")


# ---------------------------------------------------------------------------------- config
def _canonical_json(config: Any) -> str:
    try:
        return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"config: must be JSON-able (dicts with string keys, lists, strings, finite "
            f"numbers, booleans, None): {exc}; convert other values to strings first") from exc


def config_hash(config: Mapping[str, Any]) -> str:
    """``"sha256:<hex>"`` of the config as canonical JSON (sorted keys, no spaces).

    Raises ``ConfigError`` when the config is not JSON-able. (sha256, not CRC-32: configs are
    small, and two different configs must not share a hash by chance.)
    """
    return "sha256:" + hashlib.sha256(_canonical_json(config).encode()).hexdigest()


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    else:
        out[prefix or "(the whole config)"] = value


def config_differences(saved: Mapping[str, Any] | None, current: Mapping[str, Any] | None,
                       ) -> list[str]:
    """Human lines naming each key (dotted for nested dicts) whose value differs.

    ``["optimizer.lr: 0.001 in the checkpoint, 0.002 now", "seed: missing now"]``; empty
    when the two are equal as JSON (tuples and lists compare equal).
    """
    if saved is None and current is None:
        return []
    if saved is None:
        return ["the checkpoint was saved without a config; this run has one"]
    if current is None:
        return ["the checkpoint was saved with a config; this run has none"]
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    _flatten(json.loads(_canonical_json(saved)), "", a)
    _flatten(json.loads(_canonical_json(current)), "", b)
    lines = []
    for key in sorted(set(a) | set(b)):
        if key not in b:
            lines.append(f"{key}: {a[key]!r} in the checkpoint, missing now")
        elif key not in a:
            lines.append(f"{key}: missing in the checkpoint, {b[key]!r} now")
        elif a[key] != b[key]:
            lines.append(f"{key}: {a[key]!r} in the checkpoint, {b[key]!r} now")
    return lines


# -------------------------------------------------------------------------------- manifest
@dataclass(kw_only=True, frozen=True)
class FileRecord:
    """One file of a checkpoint, as the manifest lists it."""

    path: str
    """Relative to the checkpoint folder, with ``/`` separators (``dcp/__0_0.distcp``)."""

    size_bytes: int
    """Its size when it was written."""

    hash: str
    """``"crc32:<8 hex digits>"`` of its content."""

    rank: int
    """The rank that wrote it."""

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size_bytes": self.size_bytes, "hash": self.hash,
                "rank": self.rank}


@dataclass(kw_only=True, frozen=True)
class Manifest:
    """What a committed checkpoint holds; ``manifest.json`` is its JSON form."""

    step: int
    """The optimizer step count the state was saved at (the folder is ``step-%08d``)."""

    world_size: int
    """The number of ranks of the run that saved it."""

    format: str
    """``torch`` (plain ``torch.save`` files) or ``dcp`` (a ``dcp/`` DCP folder for the model
    and optimizer, plain files for the rest)."""

    files: tuple[FileRecord, ...]
    """Every file of the checkpoint but the manifest itself."""

    entries: Mapping[str, str] = field(default_factory=dict)
    """State key -> the file (``model.pt``) or folder (``dcp``) that holds it."""

    train_state: bool = False
    """True when every rank wrote its ``train_state.rank{r}.pt``."""

    config_hash: str | None = None
    """:func:`config_hash` of the recipe config, or None when saved without one."""

    config: Any = None
    """The recipe config itself (JSON), so a refusal can name the keys that differ."""

    created_utc: str = ""
    """When the save began, ISO 8601 UTC."""

    torch_version: str = ""
    """``torch.__version__`` of the saving process."""

    trainmedic_version: str = ""
    """``trainmedic.__version__`` of the saving process."""

    finite: bool | None = None
    """Whether every floating tensor of the plain state files (model, optimizer, scheduler:
    rank 0's) was finite at save; None when not checked (a ``dcp`` model and optimizer, or a
    manifest written before this field). Retention keeps the newest checkpoint that is not
    known non-finite."""

    schema: str = SCHEMA
    """Always :data:`SCHEMA` for this layout."""

    hash_algorithm: str = HASH_ALGORITHM
    """Always ``crc32`` in schema ``/1``."""

    def file(self, path: str) -> FileRecord | None:
        """The record of ``path`` (relative), or None."""
        for rec in self.files:
            if rec.path == path:
                return rec
        return None

    @property
    def size_bytes(self) -> int:
        """The total size of the listed files."""
        return sum(rec.size_bytes for rec in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema, "step": self.step, "world_size": self.world_size,
            "format": self.format, "created_utc": self.created_utc,
            "torch_version": self.torch_version, "trainmedic_version": self.trainmedic_version,
            "hash_algorithm": self.hash_algorithm, "config_hash": self.config_hash,
            "config": self.config, "entries": dict(self.entries),
            "train_state": self.train_state, "files": [rec.to_dict() for rec in self.files],
            "finite": self.finite,
        }


def _self_crc(d: Mapping[str, Any]) -> str:
    body = {k: v for k, v in d.items() if k != SELF_HASH_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return _format_crc(zlib.crc32(text.encode()))


def manifest_to_json(manifest: Manifest) -> str:
    """The manifest as the JSON text written to ``manifest.json``, with its own CRC-32
    (``manifest_crc32``: of the other keys as canonical JSON), so that a changed byte in the
    manifest itself is caught too."""
    d = manifest.to_dict()
    d[SELF_HASH_KEY] = _self_crc(d)
    return json.dumps(d, indent=1, allow_nan=False) + "\n"


def write_manifest(directory: str | Path, manifest: Manifest, *, sync: bool = True) -> Path:
    """Write ``directory/manifest.json`` and (``sync``) fsync it. Raises ``OSError`` on a
    failed write (the commit turns it into a trainmedic error)."""
    path = Path(directory) / MANIFEST_NAME
    data = manifest_to_json(manifest).encode()
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    return path


def _field(where: str, name: str, what: str, got: Any) -> str:
    shown = repr(got)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{where}field {name!r}: expected {what}, got {shown}"


def _int(d: Mapping[str, Any], key: str, where: str, problems: list[str], *,
         minimum: int = 0) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        problems.append(_field(where, key, f"an integer >= {minimum}", v))
        return minimum
    return v


def _str(d: Mapping[str, Any], key: str, where: str, problems: list[str]) -> str:
    v = d.get(key, "")
    if not isinstance(v, str):
        problems.append(_field(where, key, "a string", v))
        return ""
    return v


def _safe_relpath(p: str) -> bool:
    parts = p.split("/")
    return bool(p) and not p.startswith("/") and "\\" not in p and all(
        part not in ("", ".", "..") for part in parts)


def _files(raw: Any, problems: list[str]) -> tuple[FileRecord, ...]:
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
        problems.append(_field("", "files", "a list", raw))
        return ()
    out: list[FileRecord] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        where = f"files[{i}] "
        if not isinstance(item, Mapping):
            problems.append(_field("", f"files[{i}]", "an object", item))
            continue
        path = _str(item, "path", where, problems)
        if path and not _safe_relpath(path):
            problems.append(_field(where, "path", "a relative path inside the checkpoint",
                                   path))
        if path == MANIFEST_NAME or path in seen:
            problems.append(_field(where, "path", "a file listed once (not the manifest)",
                                   path))
        seen.add(path)
        h = _str(item, "hash", where, problems)
        if not _HASH_RE.match(h):
            problems.append(_field(where, "hash", "'crc32:' and 8 hex digits", h))
        out.append(FileRecord(path=path, size_bytes=_int(item, "size_bytes", where, problems),
                              hash=h, rank=_int(item, "rank", where, problems)))
    return tuple(out)


def manifest_from_dict(d: Any, source: str) -> Manifest:
    """Validate a decoded ``manifest.json``. Raises ``UnrecognizedInputError`` when it is not
    a trainmedic checkpoint manifest at all and ``InputError`` naming the first bad field(s)
    when it is one but damaged."""
    if not isinstance(d, Mapping) or "schema" not in d:
        raise UnrecognizedInputError(
            source, f"not a trainmedic checkpoint manifest (no 'schema' key; expected "
                    f"{SCHEMA!r})")
    schema = d["schema"]
    if schema != SCHEMA:
        if isinstance(schema, str) and schema.startswith("trainmedic.checkpoint/"):
            raise UnrecognizedInputError(
                source, f"manifest schema {schema!r} is newer than this trainmedic reads "
                        f"({SCHEMA!r}); upgrade trainmedic")
        raise UnrecognizedInputError(
            source, f"not a trainmedic checkpoint manifest (schema {schema!r}, expected "
                    f"{SCHEMA!r})")
    own = d.get(SELF_HASH_KEY)
    if own is None:
        raise InputError(source, f"damaged manifest: field {SELF_HASH_KEY!r} is missing")
    try:
        expected = _self_crc(d)
    except (TypeError, ValueError) as exc:
        raise InputError(source, f"damaged manifest: {exc}") from exc
    if own != expected:
        raise InputError(source, f"damaged manifest: its content does not match its own "
                                 f"checksum ({SELF_HASH_KEY} {own!r}, content {expected}): it "
                                 f"changed after the save")
    problems: list[str] = []
    step = _int(d, "step", "", problems)
    world = _int(d, "world_size", "", problems, minimum=1)
    fmt = d.get("format")
    if fmt not in FORMATS:
        problems.append(_field("", "format", f"one of {FORMATS}", fmt))
    algo = d.get("hash_algorithm", HASH_ALGORITHM)
    if algo != HASH_ALGORITHM:
        problems.append(_field("", "hash_algorithm", repr(HASH_ALGORITHM), algo))
    files = _files(d.get("files"), problems)
    entries = d.get("entries", {})
    if not isinstance(entries, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in entries.items()):
        problems.append(_field("", "entries", "an object of strings", entries))
        entries = {}
    train_state = d.get("train_state", False)
    if not isinstance(train_state, bool):
        problems.append(_field("", "train_state", "true or false", train_state))
        train_state = False
    chash = d.get("config_hash")
    if chash is not None and not isinstance(chash, str):
        problems.append(_field("", "config_hash", "a string or null", chash))
        chash = None
    finite = d.get("finite")
    if finite is not None and not isinstance(finite, bool):
        problems.append(_field("", "finite", "true, false or null", finite))
        finite = None
    if problems:
        more = f" (and {len(problems) - 2} more)" if len(problems) > 2 else ""
        raise InputError(source, "damaged manifest: " + "; ".join(problems[:2]) + more)
    return Manifest(
        step=step, world_size=world, format=str(fmt), files=files, entries=dict(entries),
        train_state=train_state, config_hash=chash, config=d.get("config"),
        created_utc=str(d.get("created_utc", "")), torch_version=str(d.get("torch_version", "")),
        trainmedic_version=str(d.get("trainmedic_version", "")), finite=finite,
    )


def read_manifest(directory: str | Path) -> Manifest:
    """Read and validate ``directory/manifest.json``.

    Raises ``UnreadableInputError`` (missing, unreadable, not JSON: a damaged checkpoint),
    ``UnrecognizedInputError`` (JSON but not this schema) or ``InputError`` (a field is
    wrong), each naming the manifest file.
    """
    path = Path(directory) / MANIFEST_NAME
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError as exc:
        raise UnreadableInputError(str(path), "no manifest.json: the save did not complete "
                                              "(or this is not a checkpoint)") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise UnreadableInputError(str(path), f"cannot read the manifest: {exc}") from exc
    try:
        data = json.loads(text, parse_constant=_no_constants)
    except ValueError as exc:
        raise UnreadableInputError(str(path), f"damaged manifest: not valid JSON ({exc})"
                                   ) from exc
    return manifest_from_dict(data, str(path))


def _no_constants(name: str) -> float:
    # NaN / Infinity are not JSON; a manifest holding them was not written by trainmedic.
    raise ValueError(f"{name} is not valid JSON")
