"""TensorBoard event files: both scalar encodings, corruption, truncation, missing extra."""

from __future__ import annotations

import builtins
import struct
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorboard")

from tensorboard.compat.proto import (  # noqa: E402
    event_pb2,
    summary_pb2,
    tensor_pb2,
    tensor_shape_pb2,
)
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import (  # noqa: E402
    masked_crc32c as tb_masked_crc32c,
)
from tensorboard.summary.writer.record_writer import RecordWriter  # noqa: E402

from trainmedic.errors import InputError, UnrecognizedInputError  # noqa: E402
from trainmedic.run.tbevents import masked_crc32c, read_tensorboard  # noqa: E402


def scalar_event(step: int, tag: str, value: float) -> bytes:
    return event_pb2.Event(wall_time=1.0 + step, step=step, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])).SerializeToString()


def tensor_event(step: int, tag: str, tensor: tensor_pb2.TensorProto) -> bytes:
    return event_pb2.Event(wall_time=1.0 + step, step=step, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=tag, tensor=tensor)])).SerializeToString()


def write_events(path: Path, records: list[bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        w = RecordWriter(f)
        w.write(event_pb2.Event(wall_time=0.0, file_version="brain.Event:2").SerializeToString())
        for r in records:
            w.write(r)
    return path


def record_offsets(data: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(data):
        out.append(pos)
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 16 + n
    return out


@pytest.fixture
def ten_steps(tmp_path):
    return write_events(tmp_path / "events.out.tfevents.1.host",
                        [scalar_event(s, "train/loss", 2.0 - 0.1 * s) for s in range(10)])


def test_crc_matches_tensorboard():
    for data in (b"", b"a", b"12345678", bytes(range(256)) * 3):
        assert masked_crc32c(data) == tb_masked_crc32c(data)


def test_simple_values(ten_steps):
    t = read_tensorboard(ten_steps)
    s = t.columns["train/loss"]
    assert s.steps.tolist() == list(range(10))
    np.testing.assert_allclose(s.values, [2.0 - 0.1 * i for i in range(10)], rtol=1e-6)
    assert t.notes == []


def test_tensor_encoded_scalars(tmp_path):
    scalar = tensor_shape_pb2.TensorShapeProto()
    recs = [
        tensor_event(1, "f32", tensor_pb2.TensorProto(dtype=1, tensor_shape=scalar,
                                                      float_val=[0.5])),
        tensor_event(1, "f64", tensor_pb2.TensorProto(
            dtype=2, tensor_shape=scalar, tensor_content=np.float64(1.25).tobytes())),
        tensor_event(1, "i64", tensor_pb2.TensorProto(dtype=9, tensor_shape=scalar,
                                                      int64_val=[7])),
        tensor_event(1, "f16", tensor_pb2.TensorProto(
            dtype=19, tensor_shape=scalar,
            half_val=[int(np.float16(0.75).view(np.uint16))])),
        tensor_event(1, "nan", tensor_pb2.TensorProto(dtype=1, tensor_shape=scalar,
                                                      float_val=[float("nan")])),
        # not scalars: a 2-element tensor and a string
        tensor_event(1, "vec", tensor_pb2.TensorProto(
            dtype=1, float_val=[1.0, 2.0], tensor_shape=tensor_shape_pb2.TensorShapeProto(
                dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=2)]))),
        tensor_event(1, "text", tensor_pb2.TensorProto(dtype=7, tensor_shape=scalar,
                                                       string_val=[b"hi"])),
    ]
    t = read_tensorboard(write_events(tmp_path / "events.out.tfevents.2.h", recs))
    vals = {k: v.values[0] for k, v in t.columns.items()}
    assert vals["f32"] == 0.5 and vals["f64"] == 1.25 and vals["i64"] == 7.0
    assert vals["f16"] == 0.75 and np.isnan(vals["nan"])
    assert "vec" not in vals and "text" not in vals


def test_corrupt_payload_skips_that_record(ten_steps):
    data = bytearray(ten_steps.read_bytes())
    off = record_offsets(bytes(data))[5]  # record 5 = step 4 (record 0 is file_version)
    data[off + 14] ^= 0xFF
    ten_steps.write_bytes(bytes(data))
    t = read_tensorboard(ten_steps)
    assert t.columns["train/loss"].steps.tolist() == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    assert any(n.kind == "corrupt_record" and "CRC" in n.detail for n in t.notes)


def test_corrupt_header_keeps_records_before(ten_steps):
    data = bytearray(ten_steps.read_bytes())
    off = record_offsets(bytes(data))[7]
    data[off] ^= 0x01  # length field no longer matches its CRC
    ten_steps.write_bytes(bytes(data))
    t = read_tensorboard(ten_steps)
    assert t.columns["train/loss"].steps.tolist() == [0, 1, 2, 3, 4, 5]
    assert any("corrupt record header" in n.detail for n in t.notes)


def test_truncated_last_record(ten_steps):
    data = ten_steps.read_bytes()
    ten_steps.write_bytes(data[:-7])
    t = read_tensorboard(ten_steps)
    assert t.columns["train/loss"].steps.tolist() == list(range(9))
    assert any("truncated" in n.detail for n in t.notes)


def test_nothing_readable_is_an_error(tmp_path):
    p = tmp_path / "events.out.tfevents.3.h"
    p.write_bytes(b"\x07" * 40)
    with pytest.raises(UnrecognizedInputError, match="no readable TensorBoard record"):
        read_tensorboard(p)
    p.write_bytes(b"")
    with pytest.raises(UnrecognizedInputError, match="empty"):
        read_tensorboard(p)


def test_restart_kept_in_log_order(tmp_path):
    start = event_pb2.Event(step=3, session_log=event_pb2.SessionLog(
        status=event_pb2.SessionLog.START)).SerializeToString()
    recs = [scalar_event(s, "loss", 1.0) for s in range(6)] + [start] + \
        [scalar_event(s, "loss", 0.9) for s in range(3, 8)]
    t = read_tensorboard(write_events(tmp_path / "events.out.tfevents.4.h", recs))
    assert t.columns["loss"].steps.tolist() == [0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7]
    assert t.meta["tb_session_starts"] == [3]


def test_tag_prefix(ten_steps):
    t = read_tensorboard(ten_steps, tag_prefix="validation")
    assert list(t.columns) == ["validation/train/loss"]


def test_missing_tensorboard_extra(ten_steps, monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("tensorboard"):
            raise ImportError("no tensorboard")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(InputError, match=r"pip install 'trainmedic\[tensorboard\]'"):
        read_tensorboard(ten_steps)
