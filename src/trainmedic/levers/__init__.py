"""Levers: correctness preflight on a recipe (``trainmedic check``).

Importing this package does not import torch; the names below load their module on first
use (PEP 562).
"""

from __future__ import annotations

from typing import Any

__all__ = ["Check", "CheckResult", "PreflightConfig", "PreflightReport", "register_check",
           "run_checks"]

_PREFLIGHT = ("Check", "CheckResult", "PreflightConfig", "PreflightReport", "register_check",
              "run_checks")


def __getattr__(name: str) -> Any:
    if name in _PREFLIGHT:
        from trainmedic.levers import preflight

        return getattr(preflight, name)
    raise AttributeError(f"module 'trainmedic.levers' has no attribute {name!r}")
