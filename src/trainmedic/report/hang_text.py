"""``trainmedic dist diagnose``: the hang diagnosis as text lines and as JSON
(schema ``trainmedic.dist.hang/1``). Every time is measured (from the ranks' clocks and
heartbeats); a straggler score is computed from measured step times."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainmedic.dist.hang_diagnosis import HangDiagnosis, RankState

__all__ = ["HANG_SCHEMA", "hang_doc", "hang_json", "hang_lines"]

HANG_SCHEMA = "trainmedic.dist.hang/1"


def _rank_doc(s: RankState) -> dict[str, Any]:
    loc = s.location
    frame = loc.user_frame if loc is not None else None
    return {
        "rank": s.rank, "status": s.status, "source": s.source, "reason": s.reason,
        "where": None if loc is None else {
            "kind": loc.kind, "op": loc.op,
            "file": frame.file if frame else None, "line": frame.line if frame else None,
            "function": frame.func if frame else None, "code": loc.source},
        "collective": None if s.op is None else {
            "op": s.op, "seq": s.collective.seq if s.collective else None,
            "group": s.collective.group if s.collective else None,
            "input_sizes": s.collective.input_sizes if s.collective else None,
            "in_flight": s.collective.in_flight if s.collective else None,
            "seq_basis": s.seq_basis},
        "last_completed_seq": s.collective.last_completed_seq if s.collective else None,
        "step": s.step, "phase": s.phase,
        "heartbeat_age_s": None if s.heartbeat_age_s is None else round(s.heartbeat_age_s, 3),
        "exception": s.exception,
        "children": [{"pid": pid, "kind": c.kind,
                      "file": c.user_frame.file if c.user_frame else None,
                      "line": c.user_frame.line if c.user_frame else None}
                     for pid, c in s.children],
    }


def hang_doc(d: HangDiagnosis) -> dict[str, Any]:
    return {
        "schema": HANG_SCHEMA, "source": d.path, "world_size": d.world_size, "hung": d.hung,
        "summary": d.summary, "ranks": [_rank_doc(s) for s in d.ranks],
        "mismatches": [{"group": m.group, "seq": m.seq, "kind": m.kind,
                        "calls": {str(r): {"op": op, "input_sizes": sizes}
                                  for r, (op, sizes) in m.calls.items()}}
                       for m in d.mismatches],
        "torch_analyzer": d.torch_notes,
        "stragglers": [{"rank": s.rank, "median_step_time_s": s.median_step_time_s,
                        "steps": s.steps, "relative_score": round(s.relative_score, 4),
                        "ratio_to_median": round(s.ratio_to_median, 4),
                        "straggler": s.straggler, "basis": "measured"}
                       for s in d.stragglers],
        "notes": d.notes,
    }


def hang_json(d: HangDiagnosis) -> str:
    return json.dumps(hang_doc(d), indent=2, default=str)


def hang_lines(d: HangDiagnosis) -> list[str]:
    head = "HANG" if d.hung else "no hang"
    lines = [f"{head}: {d.path} ({d.world_size} ranks)"]
    lines += [f"  {s}" for s in d.summary]
    lines.append("per rank (times measured on the ranks' clocks):")
    for s in d.ranks:
        loc = s.location
        where = "" if loc is None else f" at {loc.where()} ({loc.kind}"
        where += "" if loc is None else (f": {loc.source})" if loc.source else ")")
        coll = ""
        if s.op is not None:
            seq = f"#{s.collective.seq}" if s.collective else "#?"
            coll = f"; in {s.op} {seq} [{s.seq_basis}]"
        age = ("" if s.heartbeat_age_s is None
               else f"; last heartbeat {s.heartbeat_age_s:.1f} s before the first dump")
        lines.append(f"  rank {s.rank}: {s.status}{where}{coll}; step {s.step}"
                     f"{'; phase ' + s.phase if s.phase else ''}{age}")
        for pid, c in s.children:
            lines.append(f"    worker pid {pid}: at {c.where()} ({c.kind})")
    if d.torch_notes:
        lines.append("torch's flight-recorder analyzer:")
        lines += [f"  {n}" for n in d.torch_notes]
    if d.stragglers:
        lines.append("straggler scores (measured step-time medians; relative score = fastest "
                     "median / this rank's, < 0.75 a straggler, as nvidia-resiliency-ext):")
        for sc in d.stragglers:
            flag = "  STRAGGLER" if sc.straggler else ""
            lines.append(f"  rank {sc.rank}: median {sc.median_step_time_s * 1e3:.2f} ms over "
                         f"{sc.steps} steps, score {sc.relative_score:.2f}, "
                         f"{sc.ratio_to_median:.2f}x the median rank{flag}")
    lines += [f"note: {n}" for n in d.notes]
    return lines
