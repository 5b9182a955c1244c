"""Levers: correctness preflight on a recipe (``trainmedic check``) and one-lever trials
(``trainmedic try``), each lever measured before and after, interleaved.

Importing this package does not import torch; the names below load their module on first
use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Check", "CheckResult", "PreflightConfig", "PreflightReport", "register_check",
           "run_checks", "Lever", "register_lever", "parse_lever", "TrialConfig",
           "TrialResult", "TryReport", "run_trial", "try_levers"]

_MODULE = {
    **dict.fromkeys(("Check", "CheckResult", "PreflightConfig", "PreflightReport",
                     "register_check", "run_checks"), "preflight"),
    **dict.fromkeys(("Lever", "register_lever", "parse_lever"), "lever_catalog"),
    **dict.fromkeys(("TrialConfig", "TrialResult", "TryReport", "run_trial", "try_levers"),
                    "trial"),
}


def __getattr__(name: str) -> Any:
    module = _MODULE.get(name)
    if module is None:
        raise AttributeError(f"module 'trainmedic.levers' has no attribute {name!r}")
    return getattr(importlib.import_module(f"trainmedic.levers.{module}"), name)
