"""How trainmedic writes a number for people: the one formatter every report, finding summary
and console line uses.

A leaf module (like ``errors.py`` and ``basis.py``): ``diagnose/`` writes numbers into finding
summaries, ``live/`` into its console lines and NaN reports, ``report/`` into evidence lines;
all of them write them the same way.
"""

from __future__ import annotations

import math

__all__ = ["fmt_num", "fmt_size"]


def fmt_num(x: float | int | None) -> str:
    """A number for humans: ``n/a`` for None, ``NaN``/``inf`` spelled out, integers whole
    (with thousands separators from 10,000), floats to 4 significant digits, with an exponent
    when the magnitude is outside [1e-3, 1e5) (3 digits of mantissa: ``4.15e+05``,
    ``1.150e-6``) and one decimal from 1000 to 1e5 (1999.5 must not read as 2000)."""
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}" if abs(x) >= 10_000 else str(x)
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    ax = abs(x)
    if ax >= 1e5 or ax < 1e-3:
        return f"{x:.3g}" if ax >= 1e5 else f"{x:.3e}".replace("e-0", "e-")
    if ax >= 1e3:
        return f"{x:.1f}".removesuffix(".0")
    return f"{x:.4g}"


def fmt_size(nbytes: float) -> str:
    """A size in binary units, as few digits as it needs: ``64 MiB``, ``1.5 GiB``, ``512 B``."""
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{int(nbytes)} B"
