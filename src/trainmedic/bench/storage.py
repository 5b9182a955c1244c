"""Storage throughput where checkpoints and data live: ``bench storage PATH``.

Into a temporary folder under PATH (always removed afterwards, on error and Ctrl-C too):

- **sequential write**: one file of ``size_bytes`` in ``block_bytes`` writes, then ``fsync``;
  the time includes the fsync, so the figure is what reached the device, not the page cache;
- **warm read**: the same file read straight back (from the page cache, where the write left it);
- **cold read**: after ``posix_fadvise(POSIX_FADV_DONTNEED)`` on the fsynced (so clean) file,
  which asks the kernel to drop its cached pages. Whether it really came from the device is
  checked with ``read_bytes`` of ``/proc/self/io`` (bytes this process caused to be fetched
  from storage, Documentation/filesystems/proc.rst): ``cold_verified`` says whether at least
  90% of the file was fetched. Where /proc/self/io is missing it stays None (not checked).
  On tmpfs and some network filesystems the pages cannot be dropped: the "cold" read is then
  a warm one, and is reported as not verified;
- **small files**: create + write ``small_file_bytes`` + fsync + close, ``small_files`` times
  (a sharded checkpoint or a dataset of many files pays this per file);
- **checkpoint estimates**: ``bytes / write rate`` for each size asked, labelled estimated
  (one sequential writer at the measured rate; parallel writers may do better, a full or
  throttled device worse).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainmedic.bench.machine import Machine, describe_machine
from trainmedic.errors import ConfigError, InputError

__all__ = ["StorageConfig", "StorageResult", "CheckpointEstimate", "bench_storage",
           "read_bytes_counter"]

logger = logging.getLogger(__name__)

_MIB = 2**20
#: Share of the file /proc/self/io must show fetched from storage for a cold read to count
#: as verified cold (readahead and metadata make the count differ from the size a little).
COLD_FETCHED_SHARE = 0.9
#: Free space kept beyond what the benchmark writes, so it never fills a volume.
FREE_MARGIN_BYTES = 64 * _MIB


def _positive_int(name: str, value: object, low: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{name}: got {value!r}, expected an integer >= {low}")


@dataclass(kw_only=True, frozen=True)
class StorageConfig:
    """What ``bench_storage`` writes and reads."""

    size_bytes: int = 256 * _MIB
    """Size of the sequential file (written once, read twice)."""
    block_bytes: int = 8 * _MIB
    """Size of each write and read call."""
    small_files: int = 100
    """Small files created for the small-file rate (0: skip it)."""
    small_file_bytes: int = 4096
    """Bytes written into each small file."""
    checkpoint_bytes: tuple[int, ...] = (10**10,)
    """Checkpoint sizes to estimate the write time of (default 10 GB)."""

    def __post_init__(self) -> None:
        _positive_int("size_bytes", self.size_bytes)
        _positive_int("block_bytes", self.block_bytes)
        _positive_int("small_files", self.small_files, 0)
        _positive_int("small_file_bytes", self.small_file_bytes)
        for b in self.checkpoint_bytes:
            _positive_int("checkpoint_bytes", b)

    @property
    def bytes_needed(self) -> int:
        """Bytes the benchmark writes at its peak (the big file and the small files)."""
        return self.size_bytes + self.small_files * max(self.small_file_bytes, 4096)


@dataclass(kw_only=True, frozen=True)
class CheckpointEstimate:
    """Estimated time to write one checkpoint of a size at the measured write rate."""

    checkpoint_bytes: int
    """Checkpoint size, bytes."""
    write_time_s: float
    """``checkpoint_bytes / write_bytes_per_s`` (estimated)."""


@dataclass(kw_only=True, frozen=True)
class StorageResult:
    """Measured storage figures of one folder, and estimates derived from them."""

    path: str
    """The folder benchmarked (the temporary files lived in a subfolder of it)."""
    bytes_written: int
    """Bytes of the sequential file (= ``size_bytes``)."""
    write_s: float
    """Seconds to write and fsync it (measured)."""
    write_bytes_per_s: float
    """Sequential write rate with fsync (measured)."""
    warm_read_bytes_per_s: float
    """Read rate of the file straight after writing it (measured; page cache)."""
    cold_read_bytes_per_s: float
    """Read rate after asking the kernel to drop the file's pages (measured)."""
    cold_evicted: bool
    """Whether ``posix_fadvise(DONTNEED)`` could be called at all."""
    cold_verified: bool | None
    """True: /proc/self/io shows the cold read fetched the file from storage; False: it did
    not (the figure is then a cached read); None: not checked (no /proc/self/io)."""
    cold_fetched_bytes: int | None
    """Bytes /proc/self/io counted fetched from storage during the cold read."""
    small_files: int
    """Small files created."""
    small_files_per_s: float | None
    """Create + write + fsync + close rate (measured; None when skipped)."""
    checkpoints: tuple[CheckpointEstimate, ...]
    """Estimated write times of checkpoints (estimated)."""
    notes: tuple[str, ...]
    """What the figures mean here (e.g. why the cold read was not verified)."""
    machine: Machine = field(repr=False)
    """Where it ran."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict with a ``basis`` for every figure."""
        d = asdict(self)
        d["machine"] = self.machine.to_dict()
        d["basis"] = {
            "write_bytes_per_s": "measured", "warm_read_bytes_per_s": "measured",
            "cold_read_bytes_per_s": "measured", "small_files_per_s": "measured",
            "checkpoints": "estimated",
        }
        return d


def read_bytes_counter() -> int | None:
    """``read_bytes`` of /proc/self/io: bytes this process caused to be fetched from the
    storage layer (None where the file or field is missing)."""
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    return None


def _check_folder(path: Path, config: StorageConfig) -> None:
    if not path.exists():
        raise InputError(str(path), "does not exist; expected a folder to benchmark (create "
                         "it, or name the folder your checkpoints will go to)")
    if not path.is_dir():
        raise InputError(str(path), "is a file, expected a folder to write test files into")
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputError(str(path), "is not writable by this user; expected a folder the "
                         "benchmark can create a temporary subfolder in")
    free = shutil.disk_usage(path).free
    need = config.bytes_needed + FREE_MARGIN_BYTES
    if free < need:
        raise InputError(str(path), f"has {free / _MIB:.0f} MiB free, the benchmark needs "
                         f"{need / _MIB:.0f} MiB (with a 64 MiB margin); pass a smaller "
                         "--size or free some space")


def _write(file: Path, size: int, block: int) -> float:
    # Random bytes so a compressing filesystem cannot shrink the write; the block's first
    # bytes carry its index so a deduplicating one cannot fold the blocks together.
    buf = bytearray(os.urandom(min(block, size)))
    t0 = time.perf_counter()
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        done = 0
        index = 0
        while done < size:
            n = min(len(buf), size - done)
            buf[:8] = index.to_bytes(8, "little")
            view = memoryview(buf)[:n]
            while view:
                written = os.write(fd, view)
                view = view[written:]
            done += n
            index += 1
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def _read(file: Path, block: int) -> tuple[float, int]:
    buf = bytearray(block)
    total = 0
    t0 = time.perf_counter()
    with open(file, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            total += n
    return time.perf_counter() - t0, total


def _evict(file: Path) -> bool:
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(file, os.O_RDONLY)
    try:
        os.fdatasync(fd)  # DONTNEED drops only clean pages
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except OSError as exc:
        logger.info("posix_fadvise(DONTNEED) failed on %s: %s", file, exc)
        return False
    finally:
        os.close(fd)


def _small_files(folder: Path, count: int, nbytes: int) -> float:
    payload = os.urandom(nbytes)
    t0 = time.perf_counter()
    for i in range(count):
        fd = os.open(folder / f"small-{i:06d}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, payload)
            os.fsync(fd)
        finally:
            os.close(fd)
    return time.perf_counter() - t0


def bench_storage(path: str | os.PathLike[str], config: StorageConfig | None = None, *,
                  on_progress: Callable[[int, int], None] | None = None) -> StorageResult:
    """Measure ``path`` (see the module docstring). A folder that does not exist, is not a
    folder, is not writable or lacks the space raises :class:`InputError`.
    ``on_progress(done, 4)`` follows the phases: write, warm read, cold read, small files."""
    config = config or StorageConfig()
    folder = Path(path)
    _check_folder(folder, config)
    try:
        work = Path(tempfile.mkdtemp(prefix=".trainmedic-bench-", dir=folder))
    except OSError as exc:
        raise InputError(str(folder), f"cannot create a temporary folder in it "
                         f"({exc.strerror}); expected a writable folder") from exc
    notes: list[str] = []

    def step(done: int) -> None:
        if on_progress is not None:
            on_progress(done, 4)

    try:
        big = work / "sequential.bin"
        write_s = _write(big, config.size_bytes, config.block_bytes)
        step(1)
        before = read_bytes_counter()
        warm_s, read_n = _read(big, config.block_bytes)
        after = read_bytes_counter()
        if before is not None and after is not None and after - before > config.size_bytes // 2:
            notes.append("the warm read fetched from storage: the page cache did not keep "
                         "the file (memory pressure?); warm and cold figures are alike")
        step(2)
        evicted = _evict(big)
        before = read_bytes_counter()
        cold_s, _ = _read(big, config.block_bytes)
        after = read_bytes_counter()
        fetched = after - before if before is not None and after is not None else None
        verified = None if fetched is None else fetched >= COLD_FETCHED_SHARE * read_n
        if not evicted:
            notes.append("posix_fadvise is unavailable here: the cold read is a cached read")
        if verified is False:
            notes.append(f"cold read not verified: /proc/self/io shows {fetched} of "
                         f"{read_n} bytes fetched from storage, so the kernel kept the pages "
                         "(tmpfs, or a filesystem that ignores DONTNEED); it is a cached read")
        elif verified is None:
            notes.append("cold read not checked (no /proc/self/io): it may be a cached read")
        step(3)
        small_rate = None
        if config.small_files:
            small_dir = work / "small"
            small_dir.mkdir()
            small_rate = config.small_files / _small_files(small_dir, config.small_files,
                                                           config.small_file_bytes)
        step(4)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_rate = config.size_bytes / write_s
    if config.size_bytes < 1024 * _MIB:
        notes.append("a file under 1 GiB can land in a device's write cache; a larger --size "
                     "gives a rate closer to a long checkpoint write")
    return StorageResult(
        path=str(folder), bytes_written=config.size_bytes, write_s=write_s,
        write_bytes_per_s=write_rate, warm_read_bytes_per_s=read_n / warm_s,
        cold_read_bytes_per_s=read_n / cold_s, cold_evicted=evicted, cold_verified=verified,
        cold_fetched_bytes=fetched, small_files=config.small_files,
        small_files_per_s=small_rate,
        checkpoints=tuple(CheckpointEstimate(checkpoint_bytes=b, write_time_s=b / write_rate)
                          for b in config.checkpoint_bytes),
        notes=tuple(notes), machine=describe_machine())
