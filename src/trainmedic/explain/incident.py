"""What explain reports: an ``Incident`` (one recognised failure of a log) with its evidence,
the facts read from the log, the likely causes and the smallest next step.

Every fact in ``fields`` and every evidence line is read from the log (basis ``measured``); the
causes are not checked against anything (basis ``not_checked``): they are what usually produces
such a message, ranked by how often (``likelihood``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from trainmedic.explain.timestamps import Stamp

__all__ = ["Evidence", "Cause", "Incident", "Tier", "Likelihood"]

Likelihood = Literal["high", "medium", "low"]
Tier = Literal["primary", "secondary"]
"""``secondary``: a failure that is usually the consequence of another one (an NCCL timeout, a
peer that went away, torchrun's summary of a dead worker); ``primary``: one that usually is
its own root (a CUDA error, an OOM, a Python exception, a SLURM cancellation)."""


@dataclass(kw_only=True, frozen=True)
class Evidence:
    """One line of the log, as it reads there."""

    line: int
    """1-based line number in the log."""
    text: str
    """The line, trailing whitespace removed, cut at 400 characters."""

    def to_json(self, path: str) -> dict[str, Any]:
        return {"path": path, "line": self.line, "text": self.text, "basis": "measured"}


@dataclass(kw_only=True, frozen=True)
class Cause:
    """A likely cause of an incident; never checked against data (explain reads one log)."""

    cause: str
    """What usually produces this failure, in one sentence."""
    likelihood: Likelihood
    """How often this is the cause when the message appears (judgement, not measured)."""

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "likelihood": self.likelihood,
                "basis": "not_checked", "checked_against_data": False}


@dataclass(kw_only=True, frozen=True)
class Incident:
    """One recognised failure in one log."""

    code: str
    """The class: a registered rule's code (``nccl_timeout``, ``cuda_oom``, ...)."""
    summary: str
    """One line saying what the log shows, facts only."""
    path: str
    """The log it was read from."""
    line: int
    """1-based line where the incident first shows: its position decides the root."""
    evidence: tuple[Evidence, ...]
    """The lines that show it, in log order (a few, not every repeat)."""
    fields: Mapping[str, Any] = field(default_factory=dict)
    """Facts read from the log (``measured``): op, sequence number, rank, exit code, ..."""
    causes: tuple[Cause, ...] = ()
    """Likely causes, most likely first (``not_checked``)."""
    next_steps: tuple[str, ...] = ()
    """The smallest next step: one or two concrete actions."""
    tier: Tier = "primary"
    """Whether this kind of failure is usually a root or a consequence of another one."""
    rank: int | None = None
    """The rank the failing lines name (a ``[rank3]:`` prefix, ``[Rank 3]``), when they do."""
    stamp: Stamp | None = None
    """The time stamp of the first evidence line, when it carries one."""
    matched_lines: frozenset[int] = frozenset()
    """Every line the rule matched (for folding a traceback into the incident it ends in)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "class": self.code, "summary": self.summary, "path": self.path, "line": self.line,
            "rank": self.rank, "time": self.stamp.text if self.stamp else None,
            "tier": self.tier,
            "fields": {k: v for k, v in self.fields.items()}, "fields_basis": "measured",
            "evidence": [e.to_json(self.path) for e in self.evidence],
            "causes": [c.to_json() for c in self.causes],
            "next_steps": list(self.next_steps),
        }
