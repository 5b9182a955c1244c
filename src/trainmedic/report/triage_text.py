"""The terminal report and JSON of ``trainmedic triage``: the symptoms the answers name, the
router's causes ranked by the answers (each *not checked against data*, with what to log to
check it), the interventions, and what the answers ruled out."""

from __future__ import annotations

import json

from trainmedic.diagnose.registry import SYMPTOMS
from trainmedic.diagnose.triage import Triage

__all__ = ["triage_lines", "triage_json"]

_MAX_CAUSES = 8


def triage_lines(t: Triage) -> list[str]:
    """The report as lines of text."""
    given = t.answers.given()
    out = ["triage from answers (no logs read; nothing here was measured or checked against "
           "data)"]
    out.append("  answers: " + (", ".join(f"{k.replace('_', '-')}={v}" for k, v in given.items())
                                or "none"))
    if t.symptoms:
        out.append("symptoms these answers describe:")
        out += [f"  {s}: {SYMPTOMS.get(s, '')}" for s in t.symptoms]
    if t.causes:
        out.append("likely causes, best first (router's causes; not checked against data):")
        for i, c in enumerate(t.causes[:_MAX_CAUSES], 1):
            out.append(f"  {i}. [{c.symptom}] {c.cause} (score {c.score}, estimated from "
                       "answers)")
            if c.why:
                out.append("     answers: " + "; ".join(c.why))
            metrics = f" (metrics: {', '.join(c.metrics)})" if c.metrics else ""
            out.append(f"     to check: {c.to_check}{metrics}")
        if len(t.causes) > _MAX_CAUSES:
            out.append(f"  ... and {len(t.causes) - _MAX_CAUSES} more (--json lists all)")
    if t.interventions:
        out.append("try, in order (smallest change first):")
        for i, iv in enumerate(t.interventions, 1):
            sem = " [changes the experiment]" if iv.changes_semantics else ""
            out.append(f"  {i}. {iv.action}{sem}")
            out.append(f"     cost: {iv.displaced_cost}")
            out.append(f"     verify: {iv.verify}")
    if t.ruled_out:
        out.append("ruled out by the answers:")
        out += [f"  [{s}] {c} ({b})" for s, c, b in t.ruled_out]
    out += [f"note: {n}" for n in t.notes]
    return out


def triage_json(t: Triage) -> str:
    """The ``trainmedic.triage/1`` document, indented."""
    return json.dumps(t.to_json(), indent=2)
