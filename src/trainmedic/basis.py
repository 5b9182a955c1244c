"""How a number in a report was obtained: every figure trainmedic prints says which.

A leaf module (like ``errors.py``): the findings of ``diagnose/`` and the memory ledger of
``memory/`` share the one definition, and ``report/`` words it.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["Basis", "BASES"]

Basis = Literal["measured", "estimated", "not_checked"]
"""``measured``: read from the run or the machine; ``estimated``: computed from a model (a
formula, a plan); ``not_checked``: what would settle it was not available."""

BASES: tuple[Basis, ...] = ("measured", "estimated", "not_checked")
