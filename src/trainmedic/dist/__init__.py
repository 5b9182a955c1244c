"""Distributed health on torch.distributed: the rank bring-up check, the hang watchdog with
per-rank stacks and flight-recorder dumps, the desync report and cross-rank stragglers.

Nothing here imports torch at import time; each name loads its module on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["run_check", "CheckConfig", "CheckResult", "launch_from_env", "check_environment",
           "read_host_facts", "HangWatchdog", "HangWatchdogConfig", "diagnose_hang_dir"]

_HOME = {
    "run_check": "bringup", "CheckConfig": "bringup", "CheckResult": "bringup",
    "launch_from_env": "environment", "check_environment": "environment",
    "read_host_facts": "environment",
    "HangWatchdog": "watchdog", "HangWatchdogConfig": "watchdog",
    "diagnose_hang_dir": "hang_diagnosis",
}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(f"trainmedic.dist.{_HOME[name]}"), name)
    raise AttributeError(f"module 'trainmedic.dist' has no attribute {name!r}")
