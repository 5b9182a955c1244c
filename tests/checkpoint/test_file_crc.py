"""The pipelined file CRC: equal to an independent CRC-32 at every size around its chunk and
pipeline thresholds, and a read error reaches the caller."""

from __future__ import annotations

import binascii
import io
import os
import threading
from pathlib import Path

import pytest

from trainmedic.checkpoint.file_crc import (
    CHUNK_BYTES,
    PIPELINE_MIN_BYTES,
    _pipelined,
    crc32_of_file,
)


@pytest.mark.parametrize("size", [0, 5, PIPELINE_MIN_BYTES - 1, PIPELINE_MIN_BYTES,
                                  PIPELINE_MIN_BYTES + 3 * CHUNK_BYTES + 11])
def test_equals_binascii_crc32(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    p = tmp_path / "f.bin"
    p.write_bytes(data)
    assert crc32_of_file(p) == (size, binascii.crc32(data))


class _Failing(io.RawIOBase):
    """Gives two chunks, then fails as a disk would."""

    def __init__(self) -> None:
        self.calls = 0

    def readinto(self, buf):  # type: ignore[no-untyped-def, override]
        self.calls += 1
        if self.calls > 2:
            raise OSError(5, "Input/output error")
        buf[:] = b"x" * len(buf)
        return len(buf)


def test_a_read_error_reaches_the_caller_and_no_thread_is_left() -> None:
    def readers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "trainmedic-crc-reader"}

    before = readers()
    with pytest.raises(OSError, match="Input/output error"):
        _pipelined(_Failing())
    assert readers() <= before


def test_a_missing_file_is_an_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        crc32_of_file(tmp_path / "nope.bin")
