"""The terminal report and JSON of ``trainmedic advise``: the default stack against the run's
settings, the lr heuristic with its formula, the batch and what to measure, the settings that
contradict the stack, and the first lever per symptom. Every recommendation is a default
(estimated), never a measurement."""

from __future__ import annotations

import json

from trainmedic.levers.advice import Advice

__all__ = ["advice_lines", "advice_json"]

_MARK = {"matches": "ok", "differs": "differs", "unknown": "?"}


def advice_lines(a: Advice, *, levers: bool = True) -> list[str]:
    """The report as lines of text (``levers=False`` leaves out the per-symptom table)."""
    s = a.settings
    size = f"{s.num_params:,} parameters (counted)" if s.num_params else "size unknown"
    out = [f"advice for {s.source}: {size}",
           "every recommendation below is a default to start from (estimated), not a "
           "measurement"]
    out.append("the boring default stack:")
    for i in a.stack:
        out.append(f"  [{_MARK[i.status]}] {i.topic}: {i.recommendation} (default, estimated)"
                   f"; yours: {i.yours}")
        out.append(f"      why: {i.reason}")
        out.append(f"      source: {i.citation}")
    lr = a.lr
    shown = f"{lr.lr:.2g} (estimated)" if lr.lr is not None else "no number"
    out.append(f"learning rate: {shown}")
    out.append(f"  formula: {lr.formula}")
    out.append(f"  {lr.note}")
    out.append(f"batch: {a.batch}")
    if a.contradictions:
        out.append("settings that contradict the stack:")
        for c in a.contradictions:
            out.append(f"  {c.severity}: {c.code}: {c.setting}")
            out.append(f"      why: {c.why}")
            out.append(f"      fix: {c.fix}")
            out.append(f"      source: {c.citation}")
    elif s.optimizer is not None:
        out.append("settings that contradict the stack: none found")
    if levers and a.first_levers:
        out.append("first lever to change when a symptom appears (router's top cause and "
                   "its first intervention):")
        for f in a.first_levers:
            out.append(f"  {f.symptom}: {f.lever}")
            out.append(f"      because the likeliest cause is: {f.because}")
    return out


def advice_json(a: Advice) -> str:
    """The ``trainmedic.advice/1`` document, indented."""
    return json.dumps(a.to_json(), indent=2)
