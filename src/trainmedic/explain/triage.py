"""Crash-log triage: run every rule over each log, fold a traceback into the failure it ends
in, order what is left, and name the root.

The root of one log is its first ``primary`` incident by position (a CUDA error, an OOM, a
Python exception, a SLURM cancellation), or its first incident when all are ``secondary``
(NCCL timeouts, a lost peer, torchrun's summary: usually consequences of a failure elsewhere).
Across several logs (the ranks of one job), the job's root is the earliest root by time stamp
when every root carries one; otherwise each log keeps its own root and no job root is named.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from trainmedic.explain.incident import Incident
from trainmedic.explain.log_text import LogText, read_log
from trainmedic.explain.registry import rules

__all__ = ["SCHEMA", "LogReport", "Explanation", "explain_text", "explain_log", "explain_logs"]

SCHEMA = "trainmedic.explain/1"
logger = logging.getLogger(__name__)


@dataclass(kw_only=True, frozen=True)
class LogReport:
    """What one log shows: its incidents in log order, the root first-class."""

    path: str
    lines: int
    """How many lines the log has."""
    incidents: tuple[Incident, ...]
    """Every recognised failure, in log order."""
    root: int | None
    """Index into ``incidents`` of the root failure; None when nothing was recognised."""

    @property
    def root_incident(self) -> Incident | None:
        return self.incidents[self.root] if self.root is not None else None

    @property
    def consequences(self) -> tuple[Incident, ...]:
        return tuple(i for k, i in enumerate(self.incidents) if k != self.root)

    def to_json(self) -> dict[str, Any]:
        root = self.root_incident
        return {"path": self.path, "lines": self.lines, "recognised": bool(self.incidents),
                "root": root.to_json() if root else None,
                "consequences": [i.to_json() for i in self.consequences]}


@dataclass(kw_only=True, frozen=True)
class Explanation:
    """The triage of one or more logs of one job."""

    logs: tuple[LogReport, ...]
    job_root: tuple[int, int] | None
    """(log index, incident index) of the job's root across logs, when time stamps order the
    logs' roots (or when one log alone has a root)."""
    job_root_by: str | None
    """How the job root was chosen: ``only root``, ``earliest time stamp``; None if not."""
    notes: tuple[str, ...] = ()

    @property
    def recognised(self) -> bool:
        return any(r.incidents for r in self.logs)

    def to_json(self) -> dict[str, Any]:
        job_root = None
        if self.job_root is not None:
            log_i, inc_i = self.job_root
            inc = self.logs[log_i].incidents[inc_i]
            job_root = {"path": inc.path, "line": inc.line, "class": inc.code,
                        "rank": inc.rank, "chosen_by": self.job_root_by}
        return {"schema": SCHEMA, "recognised": self.recognised, "job_root": job_root,
                "logs": [r.to_json() for r in self.logs], "notes": list(self.notes)}


def _fold_tracebacks(incidents: list[Incident]) -> list[Incident]:
    """A traceback that ends in a line another rule matched (``RuntimeError: CUDA error: an
    illegal memory access``) is that failure, not a second one: its innermost user frame is
    added to the other incident as ``raised_at``."""
    others = [i for i in incidents if i.code != "python_exception"]
    out = [i for i in others]
    for inc in incidents:
        if inc.code != "python_exception":
            continue
        host = next((k for k, o in enumerate(out)
                     if inc.matched_lines & o.matched_lines
                     and (o.rank == inc.rank or o.rank is None or inc.rank is None)), None)
        if host is None:
            out.append(inc)
            continue
        target = out[host]
        fields = dict(target.fields)
        if "raised_at" in inc.fields and "raised_at" not in fields:
            fields["raised_at"] = inc.fields["raised_at"]
        evidence = tuple(sorted(set(target.evidence) | set(inc.evidence), key=lambda e: e.line))
        out[host] = replace(target, fields=fields, evidence=evidence,
                            line=min(target.line, inc.line),
                            rank=target.rank if target.rank is not None else inc.rank,
                            matched_lines=target.matched_lines | inc.matched_lines)
    return sorted(out, key=lambda i: (i.line, i.code))


def _root(incidents: Sequence[Incident]) -> int | None:
    if not incidents:
        return None
    for k, inc in enumerate(incidents):
        if inc.tier == "primary":
            return k
    return 0


def explain_text(log: LogText) -> LogReport:
    """Triage one log already read (pure: no I/O)."""
    found: list[Incident] = []
    for rule in rules():
        for inc in rule.fn(log):
            found.append(inc)
    incidents = _fold_tracebacks(found)
    return LogReport(path=log.path, lines=len(log.lines), incidents=tuple(incidents),
                     root=_root(incidents))


def explain_log(path: str | Path) -> LogReport:
    """Read and triage one log. Raises an InputError for a missing, binary or unreadable file."""
    return explain_text(read_log(path))


def explain_logs(paths: Sequence[str | Path]) -> Explanation:
    """Triage the logs of one job (one per rank, or one shared): each log's root and
    consequences, and the job's root across them when the time stamps allow."""
    reports = tuple(explain_log(p) for p in paths)
    roots = [(k, r.root) for k, r in enumerate(reports) if r.root is not None]
    notes: list[str] = []
    job_root: tuple[int, int] | None = None
    by: str | None = None
    if len(roots) == 1:
        job_root, by = roots[0], "only root"
    elif len(roots) > 1:
        primaries = [(k, i) for k, i in roots if reports[k].incidents[i].tier == "primary"]
        pool = primaries or roots
        stamped = [(s, k, i) for k, i in pool if (s := reports[k].incidents[i].stamp)]
        if len(stamped) == len(pool):
            best = stamped[0]
            for cand in stamped[1:]:
                if cand[0].before(best[0]):
                    best = cand
            job_root, by = (best[1], best[2]), "earliest time stamp"
        elif len(pool) == 1:
            job_root, by = pool[0], "only primary failure"
        else:
            notes.append("the logs' roots carry no comparable time stamps: each log's root is "
                         "named, not the job's")
    logger.debug("explained %d logs; job root %s", len(reports), job_root)
    return Explanation(logs=reports, job_root=job_root, job_root_by=by, notes=tuple(notes))
