"""Score diagnoses against labels with the rule of ``shared/dev-logs/expected.json``.

The rule (its ``_rule``): a finding at warning or above *hits* a fault when the symptom is
equal and, where the fault has an ``onset_step``, the finding's onset is within
``max(20 steps, 10% of the run)`` of ``onset_step``, of any ``event_steps`` entry, or inside
``onset_range`` widened by that tolerance. Any other finding at warning or above that no
``tolerated`` entry covers is a false positive. A healthy run has ``faults: []``.

Recall counts faults hit; precision counts loud findings that hit a fault or are tolerated
(a tolerated finding is neither a hit nor a false positive: it is left out of precision).
A healthy run is *flagged* when it gets any false positive.

Pure data in, numbers out: ``score_run(label, findings, run_steps)`` where findings are
``(symptom, severity, onset_step)`` triples. No trainmedic import here, so the scorer is
independent of the tool it scores.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

LOUD = {"warning", "error"}


@dataclass(kw_only=True)
class RunScore:
    name: str
    faults: int = 0
    hits: int = 0
    loud: int = 0
    false_pos: int = 0
    tolerated: int = 0
    healthy: bool = False
    missed: list[str] = field(default_factory=list)
    false: list[str] = field(default_factory=list)
    hit_symptoms: list[str] = field(default_factory=list)
    miss_symptoms: list[str] = field(default_factory=list)

    @property
    def flagged(self) -> bool:
        return self.healthy and self.false_pos > 0


def tolerance(run_steps: float | None) -> float:
    """``max(20 steps, 10% of the run)``; ``run_steps`` is the run's step span."""
    return max(20.0, 0.1 * float(run_steps or 0))


def _covers(entry: Mapping, onset: float | None, tol: float) -> bool:
    """Whether a labelled entry (fault or tolerated) covers a finding with this onset."""
    ref = entry.get("onset_step")
    events = entry.get("event_steps") or []
    rng = entry.get("onset_range")
    if ref is None and not events and not rng:
        return True
    if onset is None:
        return False
    if ref is not None and abs(onset - ref) <= tol:
        return True
    if any(abs(onset - e) <= tol for e in events):
        return True
    if rng and rng[0] - tol <= onset <= rng[1] + tol:
        return True
    return False


def score_run(name: str, label: Mapping, findings: Iterable[tuple[str, str, float | None]],
              run_steps: float | None) -> RunScore:
    tol = tolerance(run_steps)
    faults = list(label.get("faults", []))
    tolerated = list(label.get("tolerated", []))
    rs = RunScore(name=name, faults=len(faults), healthy=not faults)
    hit = [False] * len(faults)
    for sym, sev, onset in findings:
        if sev not in LOUD:
            continue
        rs.loud += 1
        matched = False
        for i, f in enumerate(faults):
            if f["symptom"] == sym and _covers(f, onset, tol):
                hit[i] = True
                matched = True
        if matched:
            continue
        if any(t["symptom"] == sym and _covers(t, onset, tol) for t in tolerated):
            rs.tolerated += 1
            continue
        rs.false_pos += 1
        rs.false.append(f"{sym}@{onset}")
    rs.hits = sum(hit)
    for f, h in zip(faults, hit, strict=True):
        (rs.hit_symptoms if h else rs.miss_symptoms).append(f["symptom"])
        if not h:
            rs.missed.append(f"{f['symptom']}@{f.get('onset_step')}")
    return rs


@dataclass(kw_only=True)
class Totals:
    faults: int = 0
    hits: int = 0
    true_loud: int = 0
    false_pos: int = 0
    healthy: int = 0
    healthy_flagged: int = 0
    per_symptom: dict[str, list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0, 0]))
    """symptom -> [faults, hits, false positives]"""

    @property
    def recall(self) -> float:
        return self.hits / self.faults if self.faults else 1.0

    @property
    def precision(self) -> float:
        n = self.true_loud + self.false_pos
        return self.true_loud / n if n else 1.0


def total(scores: Iterable[RunScore]) -> Totals:
    t = Totals()
    for s in scores:
        t.faults += s.faults
        t.hits += s.hits
        t.false_pos += s.false_pos
        t.true_loud += s.loud - s.false_pos - s.tolerated
        t.healthy += s.healthy
        t.healthy_flagged += s.flagged
        for sym in s.hit_symptoms:
            t.per_symptom[sym][0] += 1
            t.per_symptom[sym][1] += 1
        for sym in s.miss_symptoms:
            t.per_symptom[sym][0] += 1
        for fp in s.false:
            t.per_symptom[fp.split("@")[0]][2] += 1
    return t


def format_totals(t: Totals, title: str) -> str:
    lines = [f"{title}: recall {t.recall:.2f} ({t.hits}/{t.faults}), precision {t.precision:.2f}"
             f" ({t.true_loud} true / {t.false_pos} false at warning+), healthy flagged"
             f" {t.healthy_flagged} of {t.healthy}",
             f"  {'symptom':28s} faults  hits  false+"]
    for sym in sorted(t.per_symptom):
        f, h, fp = t.per_symptom[sym]
        lines.append(f"  {sym:28s} {f:6d} {h:5d} {fp:7d}")
    return "\n".join(lines)


def load_labels(path: Path) -> dict[str, dict]:
    data = json.loads(Path(path).read_text())
    return data.get("runs", data)
