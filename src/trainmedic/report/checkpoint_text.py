"""The words of the ``trainmedic ckpt`` reports: sizes, counts, what ``verify`` checked."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainmedic.checkpoint.verify import VerifyReport

__all__ = ["size_text", "plural", "finite_text"]


def size_text(nbytes: int) -> str:
    """``1.61 GB``: decimal units, two decimals."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} B"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def finite_text(report: VerifyReport) -> str:
    """``9 tensors finite (8 in 1 DCP shard file, 1 in .pt files)``: what the finiteness check
    covered, shards counted from the DCP metadata."""
    pt = report.tensors_checked
    if report.dcp_tensors is None or report.dcp_files is None:
        return f"{plural(pt, 'tensor')} finite"
    where = f"in {plural(report.dcp_files, 'DCP shard file')}"
    if pt:
        where = f"{report.dcp_tensors} {where}, {pt} in .pt files"
    return f"{plural(pt + report.dcp_tensors, 'tensor')} finite ({where})"
