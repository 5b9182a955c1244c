"""The terminal report of ``trainmedic explain``: per log, the root failure first, then the
consequences, each with its evidence lines, facts and next step; then the job's root."""

from __future__ import annotations

import json
from typing import Any

from trainmedic.explain.incident import Incident
from trainmedic.explain.triage import Explanation, LogReport

__all__ = ["explain_lines", "explain_json"]

_MAX_FIELD = 160


def _value(v: Any) -> str:
    text = ", ".join(str(x) for x in v) if isinstance(v, list | tuple) else str(v)
    return text if len(text) <= _MAX_FIELD else text[:_MAX_FIELD - 3] + "..."


def _incident_lines(inc: Incident, *, heading: str) -> list[str]:
    rank = f" (rank {inc.rank})" if inc.rank is not None else ""
    out = [f"  {heading}: {inc.code}{rank}: {inc.summary}"]
    for ev in inc.evidence:
        out.append(f"    {inc.path}:{ev.line}: {ev.text[:200]}")
    if inc.fields:
        out.append("    read from the log (measured): " + "; ".join(
            f"{k}={_value(v)}" for k, v in inc.fields.items()))
    for c in inc.causes:
        out.append(f"    likely cause ({c.likelihood}, not checked): {c.cause}")
    for step in inc.next_steps:
        out.append(f"    next step: {step}")
    return out


def _log_lines(report: LogReport) -> list[str]:
    out = [f"{report.path} ({report.lines} lines)"]
    root = report.root_incident
    if root is None:
        out.append("  nothing recognised: no failure this tool knows of is in this log "
                   "(no guess is made)")
        return out
    out += _incident_lines(root, heading="root failure")
    rest = report.consequences
    if rest:
        note = ("most likely consequences of the root" if root.tier == "primary"
                else "also seen; none is known to be a root by itself")
        out.append(f"  {len(rest)} more ({note}):")
        for inc in rest:
            out += _incident_lines(inc, heading="then")
    return out


def explain_lines(explanation: Explanation) -> list[str]:
    """The report as lines of text."""
    out: list[str] = []
    for report in explanation.logs:
        out += _log_lines(report) + [""]
    if len(explanation.logs) > 1:
        if explanation.job_root is not None:
            k, i = explanation.job_root
            inc = explanation.logs[k].incidents[i]
            rank = f" on rank {inc.rank}" if inc.rank is not None else ""
            out.append(f"job root ({explanation.job_root_by}): {inc.code}{rank} in "
                       f"{inc.path}:{inc.line}: {inc.summary}")
        else:
            out.append("job root: not named")
    out += [f"note: {n}" for n in explanation.notes]
    if not explanation.recognised:
        out.append("nothing recognised in any log.")
    return out


def explain_json(explanation: Explanation) -> str:
    """The ``trainmedic.explain/1`` document, indented."""
    return json.dumps(explanation.to_json(), indent=2)
