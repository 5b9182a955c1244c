"""Crash-log triage (``trainmedic explain LOG...``): what a failed job's log means, its root
failure, the consequences, and the smallest next step.

Rules (one per failure class, ``CLASSES``) are pure functions of a log's lines; the CUDA OOM
class reuses ``trainmedic memory oom``'s parser. Importing this package imports neither torch
nor numpy's heavy parts beyond what ``run`` needs.
"""

from __future__ import annotations

from trainmedic.explain.incident import Cause, Evidence, Incident
from trainmedic.explain.registry import CLASSES, register_rule, unregister_rule
from trainmedic.explain.triage import (
    SCHEMA,
    Explanation,
    LogReport,
    explain_log,
    explain_logs,
    explain_text,
)

__all__ = [
    "CLASSES",
    "Cause",
    "Evidence",
    "Explanation",
    "Incident",
    "LogReport",
    "SCHEMA",
    "explain_log",
    "explain_logs",
    "explain_text",
    "register_rule",
    "unregister_rule",
]
