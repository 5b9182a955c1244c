"""The words of a report: one place that turns a ``Diagnosis`` into sentences.

The terminal and HTML reports say the same things (DESIGN.md: findings carry evidence with its
basis, causes say whether they were checked, interventions say their displaced cost), so the
phrasing lives here once and both renderers only lay it out. Nothing here prints or imports
rich.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trainmedic.diagnose.finding import (
    SEVERITY_ORDER,
    Cause,
    CheckNotRun,
    Diagnosis,
    Evidence,
    Finding,
    Intervention,
)
from trainmedic.numbers import fmt_num
from trainmedic.run.names import CANONICAL
from trainmedic.run.series import ImportNote, Run

__all__ = [
    "BASIS_WORDS",
    "RunSummary",
    "fmt_num",
    "fmt_step",
    "fmt_span",
    "sorted_findings",
    "evidence_line",
    "cause_line",
    "intervention_lines",
    "checks_not_run_lines",
    "note_lines",
    "verdict",
    "summarize_run",
]

#: How each ``basis`` is written out: a number in a report never appears without one.
BASIS_WORDS: dict[str, str] = {
    "measured": "measured",
    "estimated": "estimated",
    "not_checked": "not checked",
}


def fmt_step(step: int | None) -> str:
    return "?" if step is None else f"{step:,}"


def fmt_span(finding: Finding) -> str:
    """``step 1,234`` or ``steps 1,234→1,260`` (the arrow reads as onset → end)."""
    if finding.onset_step is None and finding.end_step is None:
        return "whole run"
    if finding.end_step is None or finding.end_step == finding.onset_step:
        return f"step {fmt_step(finding.onset_step)}"
    return f"steps {fmt_step(finding.onset_step)}→{fmt_step(finding.end_step)}"


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Worst first: severity, then confidence, then the earliest onset."""
    return sorted(
        findings,
        key=lambda f: (-SEVERITY_ORDER[f.severity], -f.confidence,
                       f.onset_step if f.onset_step is not None else math.inf, f.symptom),
    )


#: Symptoms whose findings are repeated events of one kind: alike ones share a card.
REPEATED_EVENTS = frozenset({"loss_spike", "step_time_outliers", "exploding_gradients",
                             "nonfinite_grad"})


def card_groups(findings: Iterable[Finding]) -> list[list[Finding]]:
    """The findings, worst first, with alike repeated events (same symptom, severity, rank and
    metric: three recovered loss spikes) grouped so the report shows one card "x3"."""
    groups: list[list[Finding]] = []
    index: dict[tuple, int] = {}
    for f in sorted_findings(findings):
        key = (f.symptom, f.severity, f.rank, f.metric)
        if f.symptom in REPEATED_EVENTS and key in index:
            groups[index[key]].append(f)
            continue
        index.setdefault(key, len(groups))
        groups.append([f])
    return groups


def evidence_line(ev: Evidence) -> str:
    """``loss = 8.1 at step 1,234 vs reference 2.4 (measured: running median of ...)``."""
    basis = BASIS_WORDS.get(ev.basis, ev.basis)
    where = f" at step {fmt_step(ev.step)}" if ev.step is not None else ""
    if ev.value is None:
        text = f"{ev.metric}{where}: no value"
    else:
        text = f"{ev.metric} = {fmt_num(ev.value)}{where}"
    if ev.reference is not None:
        text += f" vs reference {fmt_num(ev.reference)}"
    detail = f"{basis}: {ev.note}" if ev.note else basis
    return f"{text} ({detail})"


def _metrics_named(text: str, metrics: Sequence[str]) -> list[str]:
    """The known metric names that ``text`` mentions as whole words, longest first."""
    found: list[str] = []
    for m in sorted(metrics, key=len, reverse=True):
        if re.search(rf"(?<![\w/]){re.escape(m)}(?![\w/])", text) and not any(
                m in f for f in found):
            found.append(m)
    return found


def cause_line(cause: Cause, metrics_seen: Sequence[str]) -> tuple[str, str]:
    """``(cause text, check phrase)``: the check phrase says what the cause was checked against
    (``checked against lr``) or that it was not (``not checked: log X to check``)."""
    named = list(cause.metrics) or _metrics_named(cause.note, metrics_seen)
    if cause.checked_against_data:
        against = ", ".join(named) if named else "the run's data"
        check = f"checked against {against}"
        if cause.note:
            check += f": {cause.note}"
    else:
        check = f"not checked: {cause.note}" if cause.note else "not checked against the data"
    return f"{cause.cause} ({cause.likelihood})", check


def intervention_lines(iv: Intervention) -> list[str]:
    """The action, then its displaced cost, then how to verify it."""
    cost = iv.displaced_cost or "not stated"
    if iv.changes_semantics:
        cost += " (changes optimization semantics)"
    return [iv.action, f"cost: {cost}", f"verify: {iv.verify or 'not stated'}"]


def checks_not_run_lines(checks: Sequence[CheckNotRun]) -> list[str]:
    """Compact: checks that need the same metrics are grouped into one line.

    The engine's reason already says which metrics are all needed and which are one-of
    ("log step_time_s and one of data_time_s, compute_time_s ..."), so group by it.
    """
    by_need: dict[str, list[str]] = {}
    reasons: list[str] = []
    for c in checks:
        if c.missing:
            need = c.reason.removesuffix(" to enable this check") if c.reason else (
                "log " + ", ".join(c.missing))
            by_need.setdefault(need, []).append(c.symptom)
        else:
            reasons.append(f"{c.symptom}: {c.reason or 'not run'}")
    lines = [f"{need} to check {', '.join(symptoms)}" for need, symptoms in by_need.items()]
    return lines + reasons


def note_lines(diagnosis: Diagnosis, run: Run | None, *, limit: int = 8) -> list[str]:
    """Import notes, de-duplicated: the diagnosis' own notes, then the run's that say more.

    A file with thousands of skipped lines must not flood the report: notes of one kind are
    counted and the first few shown.
    """
    lines = list(dict.fromkeys(diagnosis.notes))
    # The diagnose pipeline copies the importers' notes into ``diagnosis.notes``; the run's raw
    # notes are only the fallback, so that one fact is not said twice in two wordings.
    if run is not None and not lines:
        by_kind: dict[str, list[ImportNote]] = {}
        for n in run.notes:
            by_kind.setdefault(n.kind, []).append(n)
        for kind, notes in by_kind.items():
            shown = 0
            for n in notes:
                where = n.path + (f":{n.line}" if n.line is not None else "")
                text = f"{where}: {n.detail}" if where else n.detail
                if n.detail in diagnosis.notes or text in lines:
                    continue
                if shown < 3:
                    lines.append(text)
                shown += 1
            if shown > 3:
                lines.append(f"... and {shown - 3} more '{kind}' notes")
    if len(lines) > limit:
        lines = lines[:limit] + [f"... and {len(lines) - limit} more notes"]
    return lines


def verdict(diagnosis: Diagnosis) -> str:
    """One line: counts by severity and the worst finding, or that nothing was found."""
    counts = {s: 0 for s in SEVERITY_ORDER}
    for f in diagnosis.findings:
        counts[f.severity] += 1
    skipped = len(diagnosis.checks_not_run)
    tail = f"; {skipped} check{'s' if skipped != 1 else ''} not run" if skipped else ""
    if not diagnosis.loss_found:
        loud = counts["error"] + counts["warning"]
        seen = f"; {loud} finding(s) at warning or above on other series" if loud else ""
        return (f"Not judged: no training loss was recognised{seen}. "
                f"{map_hint(diagnosis)}")
    if counts["error"] == 0 and counts["warning"] == 0:
        info = f" ({counts['info']} info)" if counts["info"] else ""
        return f"No problems found at warning or above{info}{tail}."
    worst = sorted_findings(diagnosis.findings)[0]
    parts = [f"{n} {s}{'s' if n != 1 and s != 'info' else ''}" for s, n in
             sorted(counts.items(), key=lambda kv: -SEVERITY_ORDER[kv[0]]) if n]
    return (f"{', '.join(parts)}. Worst: {worst.symptom} ({fmt_span(worst)}){tail}.")


@dataclass(frozen=True)
class RunSummary:
    """What the report header says about the run."""

    source: str
    first_step: int | None
    last_step: int | None
    num_points: int | None
    metrics: list[str]
    ranks: list[int | None]

    def steps_text(self) -> str:
        if self.first_step is None or self.last_step is None:
            return "unknown"
        return f"{fmt_step(self.first_step)}–{fmt_step(self.last_step)}"

    def ranks_text(self) -> str:
        real = [r for r in self.ranks if r is not None]
        if not real:
            return "single process"
        if len(real) <= 8:
            return f"{len(real)} ({', '.join(str(r) for r in real)})"
        return f"{len(real)} ({real[0]}–{real[-1]})"


def summarize_run(diagnosis: Diagnosis, run: Run | None) -> RunSummary:
    """Header facts: from the run when given, else what the diagnosis says."""
    if run is None:
        ranks: list[int | None] = [
            *sorted({f.rank for f in diagnosis.findings if f.rank is not None})]
        return RunSummary(diagnosis.source, None, None, None, list(diagnosis.metrics_seen),
                          ranks)
    firsts = [int(s.steps.min()) for s in run.series.values() if len(s)]
    lasts = [int(s.steps.max()) for s in run.series.values() if len(s)]
    metrics = _canonical_first(list(diagnosis.metrics_seen) or run.metrics())
    return RunSummary(diagnosis.source or run.source, min(firsts) if firsts else None,
                      max(lasts) if lasts else None, run.num_points, metrics, run.ranks())


def _canonical_first(metrics: list[str]) -> list[str]:
    """Canonical metrics in DESIGN.md's order, then the rest as given: in a log with 150
    per-entity eval metrics, the header must still show loss and val_loss first."""
    rank = {m: i for i, m in enumerate(CANONICAL)}
    return sorted(metrics, key=lambda m: rank.get(m, len(rank)))  # stable: the rest keep order


#: Canonical metrics a column read by name cannot be the training loss under.
_NOT_A_LOSS = frozenset({
    "step_time_s", "data_time_s", "compute_time_s", "comm_time_s", "gc_time_s", "lr",
    "grad_norm", "loss_scale", "param_norm", "update_ratio", "tokens_per_s", "samples_per_s",
    "mem_alloc_mb", "mem_reserved_mb", "mem_peak_mb", "rss_mb", "epoch"})


def loss_candidates(diagnosis: Diagnosis, limit: int = 3) -> list[str]:
    """Columns that could be the training loss, best first: the ones diagnose read with their
    values (counters left out), else by name: names holding a loss word, then any other column
    that was read (not the step, and not one already read as a metric that cannot be a loss:
    a step time, an lr, a memory reading)."""
    if diagnosis.loss_candidates or not diagnosis.loss_found:
        return diagnosis.loss_candidates[:limit]
    cols = [m["column"] for m in diagnosis.mapping if not str(m.get("how", "")).startswith(
        ("step", "row index")) and m.get("canonical") not in _NOT_A_LOSS]
    if not diagnosis.mapping:
        cols = [m for m in diagnosis.metrics_seen if m not in ("epoch", "step")
                and m not in _NOT_A_LOSS]
    words = ("loss", "nll", "mse", "objective", "cost", "err")
    lossy = [c for c in cols if any(w in c.lower() for w in words)
             and not c.lower().startswith(("val", "eval", "test", "valid"))]
    rest = [c for c in cols if c not in lossy]
    return list(dict.fromkeys(lossy + rest))[:limit]


def map_hint(diagnosis: Diagnosis) -> str:
    """The ``--map loss=COLUMN`` to use when no loss was recognised."""
    cands = loss_candidates(diagnosis)
    if not cands:
        return "Pass --map loss=COLUMN naming the column that holds it."
    return f"Pass --map loss={cands[0]!r}" + (
        f" (or one of {', '.join(repr(c) for c in cands[1:])})" if len(cands) > 1 else "") + \
        " naming the column that holds it."


def mapping_lines(diagnosis: Diagnosis, *, limit: int = 24) -> list[str]:
    """How each column was read, one line each ("train/loss -> loss (alias)"); columns kept
    under their own name are grouped on one line."""
    mapped: list[str] = []
    kept: list[str] = []
    for m in diagnosis.mapping:
        col, canon, how = str(m.get("column")), m.get("canonical"), str(m.get("how", ""))
        if canon and canon != col:
            mapped.append(f"{col} -> {canon} ({how})")
        elif how.startswith(("step", "row index")):
            mapped.append(f"{col}: {how}")
        elif canon == col:
            mapped.append(f"{col} ({how})")
        else:
            kept.append(col)
    out = mapped[:limit]
    if len(mapped) > limit:
        out.append(f"... and {len(mapped) - limit} more mapped columns")
    if kept:
        shown = ", ".join(kept[:12]) + (f", ... (+{len(kept) - 12})" if len(kept) > 12 else "")
        out.append(f"kept under their own names (no canonical meaning): {shown}")
    return out
