"""The manifest (JSON round trip, validation naming the field, its own checksum), the file hash
(checked against zlib/binascii over the whole bytes) and the config hash and differences."""

from __future__ import annotations

import binascii
import io
import json
import os
import zlib
from pathlib import Path

import pytest

from trainmedic.checkpoint.manifest import (
    CHUNK_BYTES,
    MANIFEST_NAME,
    PARALLEL_MIN_BYTES,
    SCHEMA,
    FileRecord,
    HashingWriter,
    Manifest,
    config_differences,
    config_hash,
    hash_file,
    manifest_to_json,
    read_manifest,
    write_manifest,
)
from trainmedic.errors import (
    ConfigError,
    InputError,
    UnreadableInputError,
    UnrecognizedInputError,
)


def _manifest(**over: object) -> Manifest:
    kw: dict[str, object] = dict(
        step=1200, world_size=2, format="torch",
        files=(FileRecord(path="model.pt", size_bytes=10, hash="crc32:0000000a", rank=0),
               FileRecord(path="train_state.rank1.pt", size_bytes=3, hash="crc32:ffffffff",
                          rank=1)),
        entries={"model": "model.pt"}, train_state=True, config_hash="sha256:ab",
        config={"lr": 1e-3, "nested": {"k": [1, 2]}}, created_utc="2026-11-30T00:00:00Z",
        torch_version="2.13.0", trainmedic_version="0.1.0")
    kw.update(over)
    return Manifest(**kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [0, 1, 4095, CHUNK_BYTES - 1, CHUNK_BYTES, CHUNK_BYTES + 7])
def test_hash_file_is_the_crc32_of_the_whole_content(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    p = tmp_path / "f.bin"
    p.write_bytes(data)
    got_size, digest = hash_file(p)
    assert got_size == size
    assert digest == f"crc32:{binascii.crc32(data):08x}"  # an independent CRC-32


def test_hashing_writer_matches_the_file_it_wrote(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    p = tmp_path / "x.pt"
    with open(p, "wb") as f:
        w = HashingWriter(f)
        torch.save({"a": torch.randn(1000), "b": [1, "x"]}, w)
    assert w.size_bytes == p.stat().st_size
    assert w.hash == f"crc32:{zlib.crc32(p.read_bytes()):08x}"
    assert torch.load(p, weights_only=True)["b"] == [1, "x"]


@pytest.mark.parametrize("parallel", [False, True])
def test_hashing_writer_parallel_hash_equals_an_independent_crc(tmp_path: Path,
                                                                parallel: bool) -> None:
    # Writes both above and below PARALLEL_MIN_BYTES, interleaved: the chained CRC must stay
    # in order whichever thread computes each piece.
    torch = pytest.importorskip("torch")
    state = {"big": torch.randn(3 * PARALLEL_MIN_BYTES // 4 + 7),
             "small": torch.arange(10), "big2": torch.randn(PARALLEL_MIN_BYTES // 2)}
    p = tmp_path / "x.pt"
    with open(p, "wb") as f, HashingWriter(f, parallel=parallel) as w:
        torch.save(state, w)
        f.flush()
    data = p.read_bytes()
    assert w.size_bytes == len(data)
    assert w.hash == f"crc32:{binascii.crc32(data):08x}"
    assert w._pool is None  # the helper is stopped on exit


def test_hashing_writer_parallel_keeps_the_os_error_and_stops_hashing() -> None:
    class Full(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, b: object) -> int:
            raise OSError(28, "No space left on device")

    with HashingWriter(Full(), parallel=True) as w:  # type: ignore[arg-type]
        with pytest.raises(OSError):
            w.write(bytes(PARALLEL_MIN_BYTES))
        assert w.error is not None and w.error.errno == 28
        assert w.size_bytes == 0


def test_hashing_writer_keeps_the_os_error() -> None:
    class Full(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, b: object) -> int:
            raise OSError(28, "No space left on device")

    w = HashingWriter(Full())  # type: ignore[arg-type]
    with pytest.raises(OSError):
        w.write(b"abc")
    assert w.error is not None and w.error.errno == 28


def test_round_trip(tmp_path: Path) -> None:
    m = _manifest()
    write_manifest(tmp_path, m)
    assert read_manifest(tmp_path) == m
    d = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert d["schema"] == SCHEMA and d["files"][1]["rank"] == 1
    assert m.size_bytes == 13 and m.file("model.pt") is m.files[0] and m.file("x") is None


def test_missing_and_not_json_are_unreadable(tmp_path: Path) -> None:
    with pytest.raises(UnreadableInputError, match="no manifest.json") as info:
        read_manifest(tmp_path)
    assert info.value.path == str(tmp_path / MANIFEST_NAME)
    (tmp_path / MANIFEST_NAME).write_text('{"schema": ')
    with pytest.raises(UnreadableInputError, match="not valid JSON"):
        read_manifest(tmp_path)
    (tmp_path / MANIFEST_NAME).write_bytes(b"\xff\xfe")
    with pytest.raises(UnreadableInputError):
        read_manifest(tmp_path)


@pytest.mark.parametrize("doc, match", [
    ({"name": "other tool"}, "no 'schema' key"),
    ({"schema": "other/1"}, "not a trainmedic checkpoint manifest"),
    ({"schema": "trainmedic.checkpoint/2"}, "upgrade trainmedic"),
])
def test_other_documents_are_unrecognized(tmp_path: Path, doc: dict[str, str],
                                          match: str) -> None:
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(doc))
    with pytest.raises(UnrecognizedInputError, match=match):
        read_manifest(tmp_path)


def _write_raw(folder: Path, d: dict[str, object]) -> None:
    """A manifest with the given content and a correct self-checksum (a buggy writer)."""
    from trainmedic.checkpoint.manifest import SELF_HASH_KEY

    d = {k: v for k, v in d.items() if k != SELF_HASH_KEY}
    text = json.dumps(d, sort_keys=True, separators=(",", ":"))
    d[SELF_HASH_KEY] = f"crc32:{zlib.crc32(text.encode()):08x}"
    (folder / MANIFEST_NAME).write_text(json.dumps(d))


@pytest.mark.parametrize("change, field", [
    ({"step": -1}, "'step'"),
    ({"step": "12"}, "'step'"),
    ({"world_size": 0}, "'world_size'"),
    ({"format": "zip"}, "'format'"),
    ({"files": [{"path": "../etc/passwd", "size_bytes": 1, "hash": "crc32:00000000",
                 "rank": 0}]}, "files[0] field 'path'"),
    ({"files": [{"path": "a.pt", "size_bytes": 1, "hash": "md5:00", "rank": 0}]},
     "files[0] field 'hash'"),
    ({"files": [{"path": "a.pt", "size_bytes": True, "hash": "crc32:00000000", "rank": 0}]},
     "files[0] field 'size_bytes'"),
    ({"files": "model.pt"}, "'files'"),
])
def test_bad_fields_are_named(tmp_path: Path, change: dict[str, object], field: str) -> None:
    d = json.loads(manifest_to_json(_manifest()))
    d.update(change)
    _write_raw(tmp_path, d)
    with pytest.raises(InputError, match="damaged manifest") as info:
        read_manifest(tmp_path)
    assert field in str(info.value)


def test_a_changed_value_breaks_the_self_checksum(tmp_path: Path) -> None:
    write_manifest(tmp_path, _manifest())
    p = tmp_path / MANIFEST_NAME
    text = p.read_text()
    assert '"2026-11-30T00:00:00Z"' in text
    p.write_text(text.replace("2026-11-30T00", "2026-11-31T00"))  # still valid JSON
    with pytest.raises(InputError, match="does not match its own checksum"):
        read_manifest(tmp_path)
    d = json.loads(text)
    del d["manifest_crc32"]
    p.write_text(json.dumps(d))
    with pytest.raises(InputError, match="'manifest_crc32' is missing"):
        read_manifest(tmp_path)


def test_nan_is_not_json(tmp_path: Path) -> None:
    (tmp_path / MANIFEST_NAME).write_text('{"schema": "trainmedic.checkpoint/1", "step": NaN}')
    with pytest.raises(UnreadableInputError, match="NaN"):
        read_manifest(tmp_path)


def test_config_hash() -> None:
    a = config_hash({"lr": 0.1, "opt": {"b1": 0.9, "b2": 0.99}})
    b = config_hash({"opt": {"b2": 0.99, "b1": 0.9}, "lr": 0.1})
    assert a == b and a.startswith("sha256:")
    assert config_hash({"lr": 0.1}) != config_hash({"lr": 0.2})
    assert config_hash({"k": (1, 2)}) == config_hash({"k": [1, 2]})
    with pytest.raises(ConfigError, match="config: must be JSON-able"):
        config_hash({"fn": object()})
    with pytest.raises(ConfigError, match="config"):
        config_hash({"lr": float("nan")})


def test_config_differences_name_the_keys() -> None:
    saved = {"lr": 0.1, "opt": {"b1": 0.9, "eps": 1e-8}, "seed": 1}
    now = {"lr": 0.2, "opt": {"b1": 0.9}, "batch": 4, "seed": 1}
    assert config_differences(saved, now) == [
        "batch: missing in the checkpoint, 4 now",
        "lr: 0.1 in the checkpoint, 0.2 now",
        "opt.eps: 1e-08 in the checkpoint, missing now",
    ]
    assert config_differences(saved, dict(saved)) == []
    assert config_differences(None, None) == []
    assert "without a config" in config_differences(None, now)[0]
