"""The forked half of the CSV reader: a child process parses the second half of a large body
into shared memory while the caller parses the first (csvlog.py says when this is safe; numpy's
parser holds the GIL, so a second process is the way to use a second core without pyarrow).
"""

from __future__ import annotations

import json
import logging
import mmap
import os
from pathlib import Path
from typing import BinaryIO

import numpy as np

from trainmedic.run.csvlog import _CHILD_ROOM, _Body, _Columns
from trainmedic.run.table import LogTable

__all__ = ["read_halves"]

log = logging.getLogger(__name__)


def read_halves(path: Path, f: BinaryIO, body: bytes, split: int, delim: bytes,
                 names: list[str], keep: list[int], first_line: int, est_rows: int,
                 table: LogTable) -> _Body:
    """Parse the body's first half here and its second half in a forked child that writes
    into shared memory; returns the parser holding all rows. Any failure of the child (an
    exception, a crash, more rows than its buffer holds) only means the parent reads that half
    itself."""
    ncols = len(keep)
    size = path.stat().st_size
    body_start = f.tell() - len(body)
    share = (size - split) / max(1, size - body_start)
    cap = int(est_rows * share * _CHILD_ROOM) + 4096
    data_mm = mmap.mmap(-1, ncols * cap * 8)
    mask_mm = mmap.mmap(-1, ncols * cap)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: parse [split, end), report through the pipe, never return
        status = 1
        msg: dict = {"ok": False}
        try:
            os.close(r)
            child = _Body(delim, names, keep, _Columns(ncols, cap, (data_mm, mask_mm)), 0)
            with path.open("rb") as g:
                g.seek(split)
                child.stream(g, b"", None)
            msg = {"ok": True, "n": child.cols.n, "missing": child.cols.missing is not None,
                   "crlf": child.crlf, "lines": child.line_no, "truncated": child.truncated_at,
                   "counters": {k: [c.count, c.first] for k, c in child.counters.items()}}
            status = 0
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which recovers
            msg = {"ok": False, "error": repr(exc)[:300]}
        finally:
            try:
                payload = json.dumps(msg).encode()
                while payload:
                    payload = payload[os.write(w, payload):]
                os.close(w)
            finally:
                os._exit(status)
    os.close(w)
    try:
        parser = _Body(delim, names, keep, _Columns(ncols, est_rows), first_line)
        parser.stream(f, body, split)
    finally:
        chunks = []
        while True:
            got = os.read(r, 1 << 16)
            if not got:
                break
            chunks.append(got)
        os.close(r)
        os.waitpid(pid, 0)
    try:
        msg = json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        msg = {}
    if msg.get("ok"):
        n = int(msg["n"])
        data = np.frombuffer(data_mm, dtype=np.float64, count=ncols * cap).reshape(ncols, cap)
        miss = (np.frombuffer(mask_mm, dtype=bool, count=ncols * cap).reshape(ncols, cap)[:, :n]
                if msg["missing"] else None)
        parser.cols.append(data[:, :n].T, None if miss is None else miss.T)
        offset = parser.line_no
        for k, (count, first) in msg["counters"].items():
            parser.counters[k].merge(count, first, offset)
        parser.crlf = parser.crlf or bool(msg["crlf"])
        if msg["truncated"] is not None:
            parser.truncated_at = offset + int(msg["truncated"])
        parser.line_no = offset + int(msg["lines"])
        del data, miss
    else:
        log.debug("second CSV reader failed (%s); reading %s serially", msg.get("error"), path)
        parser.stream(f, b"", None)
    parser.flush(table)
    for mm in (data_mm, mask_mm):
        try:
            mm.close()
        except BufferError:  # a view is still alive somewhere: the GC will unmap it
            pass
    return parser
