"""CSV files written where the comma is the decimal mark: a spreadsheet's export in those
locales puts ';' between the cells and writes 2,345 for 2.345. They are read through a copy
whose commas are points (a numeric log has no other comma once ';' separates its cells).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING

from trainmedic.errors import UnreadableInputError, UnrecognizedInputError

if TYPE_CHECKING:
    from trainmedic.run.table import LogTable

__all__ = ["decimal_commas", "read_decimal_commas"]

#: A cell written with a decimal comma ("2,345", "-1,5e-03"): a spreadsheet's CSV export in
#: locales where the comma is the decimal mark, with ';' between the cells.
_DECIMAL_COMMA = re.compile(rb"(?:^|;)\s*-?\d+,\d+(?:[eE][-+]?\d+)?\s*(?=;|\r?$)", re.M)


def decimal_commas(sample: bytes) -> bool:
    """Whether most of the sample's data lines hold a decimal-comma number."""
    lines = [ln for ln in sample.split(b"\n")[:200] if ln.strip()]
    hits = sum(1 for ln in lines if _DECIMAL_COMMA.search(ln))
    return bool(lines) and hits >= 0.5 * len(lines)


def read_decimal_commas(path: Path) -> LogTable:
    """Read a ';'-separated CSV with decimal commas: its commas become points in a copy."""
    import tempfile

    from trainmedic.run.csvlog import read_csv

    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UnreadableInputError(str(path), f"cannot open the file ({exc.strerror}); "
                                   "expected a readable CSV log") from exc
    with tempfile.TemporaryDirectory(prefix="trainmedic-csv-") as tmp:
        copy = Path(tmp) / path.name
        copy.write_bytes(raw.replace(b",", b"."))
        try:
            table = read_csv(copy)
        except UnrecognizedInputError as exc:  # named after the user's file, not the copy
            raise UnrecognizedInputError(str(path), exc.message) from None
    table.path = str(path)
    table.notes = [dataclasses.replace(n, path=str(path)) for n in table.notes]
    table.note("decimal_comma", "';'-separated cells with decimal commas ('2,345'): read as "
               "decimal points")
    return table
