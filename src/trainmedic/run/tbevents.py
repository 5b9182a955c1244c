"""TensorBoard event files (``events.out.tfevents.*``), read with TensorBoard's own protos.

An event file is a TFRecord stream: per record a little-endian u64 length, the masked CRC-32C
of those 8 bytes, the payload (a serialized ``tensorboard.compat.proto.event_pb2.Event``) and
the masked CRC-32C of the payload (tensorflow/core/lib/io/record_writer.cc). TensorBoard's
pure-Python fallback reader (``tensorboard.compat.tensorflow_stub.pywrap_tensorflow``, used
when TensorFlow is not installed) checks each CRC byte by byte in Python, which is what makes
``EventAccumulator`` slow on a million events. Here the framing is walked once, every CRC is
checked with numpy across all records of one length at a time (same polynomial, same mask),
and each payload is decoded by TensorBoard's ``Event`` protobuf class. Records longer than
``_CRC_CHECKED_MAX_BYTES`` (images, graphs, histograms; never a scalar) have only their length
checked.

Scalars come from both encodings: ``simple_value`` (TF1 / torch.utils.tensorboard) and a
0-d numeric tensor (TF2 and tensorboard.summary.v2 write scalars as tensors).

Log order is kept: when a writer restarts and re-logs steps, the steps go back in the series,
which is how the ``resume_discontinuity`` detector sees a resume. (TensorBoard instead purges
the orphaned points.)
"""

from __future__ import annotations

import logging
import struct
from array import array
from pathlib import Path
from typing import Any

import numpy as np

from trainmedic.errors import UnreadableInputError, UnrecognizedInputError
from trainmedic.run.series import Series
from trainmedic.run.table import LogTable

__all__ = ["read_tensorboard", "looks_like_tfrecord", "masked_crc32c"]

log = logging.getLogger(__name__)

_CRC_CHECKED_MAX_BYTES = 4096
_GROUP_ROWS = 1 << 16
_HEADER = struct.Struct("<Q")
_INSTALL_HINT = "pip install 'trainmedic[tensorboard]'"


def _crc32c_table() -> np.ndarray:
    # Castagnoli polynomial, reflected (RFC 3720, B.4), as TFRecord uses.
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & 1, (t >> 1) ^ np.uint32(0x82F63B78), t >> 1).astype(np.uint32)
    return t


_TABLE = _crc32c_table()


def _masked_crc_rows(rows: np.ndarray) -> np.ndarray:
    """Masked CRC-32C of each row of a (n, L) uint8 array, as uint32."""
    crc = np.full(rows.shape[0], 0xFFFFFFFF, dtype=np.uint32)
    for j in range(rows.shape[1]):
        crc = _TABLE[(crc ^ rows[:, j]) & 0xFF] ^ (crc >> 8)
    crc ^= np.uint32(0xFFFFFFFF)
    rot = (crc >> np.uint32(15)) | (crc << np.uint32(17))
    return (rot + np.uint32(0xA282EAD8)).astype(np.uint32)


def masked_crc32c(data: bytes) -> int:
    """The masked CRC-32C of ``data`` (for one small buffer)."""
    return int(_masked_crc_rows(np.frombuffer(data, dtype=np.uint8)[None, :])[0])


def looks_like_tfrecord(head: bytes) -> bool:
    """True when ``head`` starts with a TFRecord header whose length CRC checks out."""
    return len(head) >= 12 and masked_crc32c(head[:8]) == struct.unpack_from("<I", head, 8)[0]


def _u32_at(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    b = [buf[pos + k].astype(np.uint32) for k in range(4)]
    return b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24)


def _frame(data: bytes) -> tuple[np.ndarray, np.ndarray, str | None]:
    """Record starts and payload lengths, and why reading stopped early (None at a clean end)."""
    n = len(data)
    # array('q') rather than lists: a million records must not become a million int objects.
    starts = array("q")
    lens = array("q")
    unpack = _HEADER.unpack_from
    pos = 0
    stop: str | None = None
    while pos + 12 <= n:
        (length,) = unpack(data, pos)
        end = pos + 16 + length
        if end > n:
            if masked_crc32c(data[pos:pos + 8]) != struct.unpack_from("<I", data, pos + 8)[0]:
                stop = f"corrupt record header at byte {pos}"
            else:
                stop = f"last record truncated at byte {pos} (the writer was interrupted)"
            break
        starts.append(pos)
        lens.append(length)
        pos = end
    else:
        if pos != n:
            stop = f"{n - pos} stray bytes at the end (byte {pos})"
    st = np.frombuffer(starts, dtype=np.int64) if starts else np.zeros(0, np.int64)
    ln = np.frombuffer(lens, dtype=np.int64) if lens else np.zeros(0, np.int64)
    if len(st):
        buf = np.frombuffer(data, dtype=np.uint8)
        bad_idx = []
        for lo in range(0, len(st), _GROUP_ROWS):
            s = st[lo:lo + _GROUP_ROWS]
            hdr = buf[s[:, None] + np.arange(8)]
            bad = np.flatnonzero(_masked_crc_rows(hdr) != _u32_at(buf, s + 8))
            if len(bad):
                bad_idx.append(lo + int(bad[0]))
                break
        if bad_idx:
            k = bad_idx[0]
            stop = f"corrupt record header at byte {int(st[k])}"
            st, ln = st[:k], ln[:k]
    return st, ln, stop


def _payload_crc_ok(data: bytes, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Per record: payload CRC matches (records over _CRC_CHECKED_MAX_BYTES count as ok)."""
    ok = np.ones(len(starts), dtype=bool)
    if not len(starts):
        return ok
    buf = np.frombuffer(data, dtype=np.uint8)
    small = lens <= _CRC_CHECKED_MAX_BYTES
    for length in np.unique(lens[small]):
        idx = np.flatnonzero(lens == length)
        length = int(length)
        for lo in range(0, len(idx), _GROUP_ROWS):
            part = idx[lo:lo + _GROUP_ROWS]
            s = starts[part] + 12
            if length:
                view = np.lib.stride_tricks.sliding_window_view(buf, length)
                rows = view[s]
            else:
                rows = np.empty((len(s), 0), dtype=np.uint8)
            ok[part] = _masked_crc_rows(rows) == _u32_at(buf, s + length)
    return ok


# tensorflow/core/framework/types.proto
_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_UINT8, _DT_INT16, _DT_INT8 = 1, 2, 3, 4, 5, 6
_DT_INT64, _DT_BFLOAT16, _DT_HALF = 9, 14, 19
_CONTENT_DTYPE = {_DT_FLOAT: "<f4", _DT_DOUBLE: "<f8", _DT_INT32: "<i4", _DT_UINT8: "u1",
                  _DT_INT16: "<i2", _DT_INT8: "i1", _DT_INT64: "<i8", _DT_HALF: "<f2"}


def _tensor_scalar(t: Any) -> float | None:
    """The value of a 0-d (or single-element) numeric TensorProto, else None."""
    dims = t.tensor_shape.dim
    if dims and any(d.size != 1 for d in dims):
        return None
    dt = t.dtype
    content = t.tensor_content
    if dt == _DT_BFLOAT16:
        bits = (np.frombuffer(content, "<u2")[:1].astype(np.uint32) if content
                else np.asarray(list(t.half_val)[:1], dtype=np.uint32))
        return float((bits << 16).view(np.float32)[0]) if len(bits) else None
    if dt not in _CONTENT_DTYPE:
        return None
    if content:
        arr = np.frombuffer(content, _CONTENT_DTYPE[dt])
        return float(arr[0]) if arr.size == 1 else None
    if dt == _DT_FLOAT:
        vals: Any = t.float_val
    elif dt == _DT_DOUBLE:
        vals = t.double_val
    elif dt == _DT_INT64:
        vals = t.int64_val
    elif dt == _DT_HALF:
        return (float(np.asarray(t.half_val[0], dtype=np.uint16).view(np.float16))
                if len(t.half_val) == 1 else None)
    else:
        vals = t.int_val
    return float(vals[0]) if len(vals) == 1 else None


def read_tensorboard(path: Path, tag_prefix: str = "") -> LogTable:
    """Read the scalar series of one event file into a ``LogTable`` keyed by tag.

    ``tag_prefix`` is prepended to tags that do not already carry it (the loader passes the
    run sub-folder for Keras-style ``train/`` and ``validation/`` folders).
    """
    try:
        from tensorboard.compat.proto import event_pb2
    except ImportError as exc:
        raise UnreadableInputError(str(path), "is a TensorBoard event file, and reading it needs "
                                   f"TensorBoard, which is not installed: {_INSTALL_HINT}"
                                   ) from exc
    from google.protobuf.message import DecodeError

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UnreadableInputError(str(path), f"cannot open the file ({exc.strerror}); expected "
                                   "a readable TensorBoard event file") from exc
    table = LogTable(path=str(path), format="tensorboard")
    if not data:
        raise UnrecognizedInputError(str(path), "is empty; expected a TensorBoard event file")
    starts, lens, stop = _frame(data)
    if not len(starts):
        raise UnrecognizedInputError(str(path), "holds no readable TensorBoard record "
                                     f"({stop or 'no records'}); expected a TFRecord event file")
    ok = _payload_crc_ok(data, starts, lens)
    n_bad_crc = int((~ok).sum())

    by_tag: dict[str, tuple[array, array]] = {}
    restarts: list[int] = []
    undecodable = 0
    from_event = event_pb2.Event.FromString
    mv = memoryview(data)
    ok_starts = starts[ok] + 12
    ok_ends = ok_starts + lens[ok]
    for lo in range(0, len(ok_starts), _GROUP_ROWS):
        for s, e in zip(ok_starts[lo:lo + _GROUP_ROWS].tolist(),
                        ok_ends[lo:lo + _GROUP_ROWS].tolist(), strict=True):
            try:
                ev = from_event(mv[s:e])
            except DecodeError:
                undecodable += 1
                continue
            what = ev.WhichOneof("what")
            if what != "summary":
                if what == "session_log" and ev.session_log.status == 1:  # SessionLog.START
                    restarts.append(int(ev.step))
                continue
            step = ev.step
            for v in ev.summary.value:
                kind = v.WhichOneof("value")
                if kind == "simple_value":
                    x = v.simple_value
                elif kind == "tensor":
                    tx = _tensor_scalar(v.tensor)
                    if tx is None:
                        continue
                    x = tx
                else:
                    continue
                acc = by_tag.get(v.tag)
                if acc is None:
                    acc = by_tag[v.tag] = (array("q"), array("d"))
                acc[0].append(step)
                acc[1].append(x)

    if stop:
        table.note("corrupt_record", f"stopped at a {stop}; kept the {len(starts)} records "
                   "before it")
    if n_bad_crc:
        table.note("corrupt_record", f"{n_bad_crc} records failed their CRC check and were "
                   "skipped")
    if undecodable:
        table.note("corrupt_record", f"{undecodable} records could not be decoded as events "
                   "and were skipped")
    if restarts:
        table.meta["tb_session_starts"] = restarts
    prefix = tag_prefix.rstrip("/") + "/" if tag_prefix else ""
    for tag, (st, vals) in by_tag.items():
        name = tag if not prefix or tag.startswith(prefix) else prefix + tag
        table.columns[name] = Series(np.frombuffer(st, dtype=np.int64),
                                     np.frombuffer(vals, dtype=np.float64))
    table.meta["framework"] = "tensorboard"
    return table
