"""Findings: what a detector reports, in the shape of the findings JSON (DESIGN.md).

Every number in a finding carries its ``basis``: ``measured`` (read from the run's data),
``estimated`` (computed by a model of the run) or ``not_checked``. A cause that names a metric
says whether it was checked against that metric's data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from trainmedic.basis import Basis

__all__ = [
    "Severity",
    "Basis",
    "Evidence",
    "Cause",
    "Intervention",
    "Finding",
    "CheckNotRun",
    "Related",
    "Diagnosis",
    "SEVERITY_ORDER",
    "SCHEMA",
]

SCHEMA = "trainmedic.findings/1"

Severity = Literal["info", "warning", "error"]
Likelihood = Literal["high", "medium", "low"]

SEVERITY_ORDER: dict[str, int] = {"info": 0, "warning": 1, "error": 2}


def _num(x: float | int | None) -> float | int | str | None:
    """JSON has no NaN/inf: non-finite values are written as the strings "nan", "inf", "-inf"."""
    if x is None or isinstance(x, int):
        return x
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(x)


@dataclass(frozen=True)
class Evidence:
    """One observed (or estimated) value, and what it was compared with."""

    metric: str
    step: int | None
    value: float | None
    reference: float | None = None
    basis: Basis = "measured"
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "step": self.step, "value": _num(self.value),
                "reference": _num(self.reference), "basis": self.basis, "note": self.note}


@dataclass(frozen=True)
class Cause:
    """A candidate cause, ranked by ``likelihood``.

    ``checked_against_data`` is True only when the metric the cause names was inspected and
    supports it; a cause that cannot be checked from the logs says so with False and a ``note``.
    """

    cause: str
    likelihood: Likelihood
    checked_against_data: bool
    note: str = ""
    metrics: tuple[str, ...] = ()
    """The metrics whose data was inspected to judge this cause (empty when unchecked)."""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"cause": self.cause, "likelihood": self.likelihood,
                             "checked_against_data": self.checked_against_data}
        if self.metrics:
            d["checked_metrics"] = list(self.metrics)
        if self.note:
            d["note"] = self.note
        return d


@dataclass(frozen=True)
class Intervention:
    """The smallest change to try, what it costs, and how to tell it worked."""

    action: str
    displaced_cost: str
    verify: str
    changes_semantics: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "displaced_cost": self.displaced_cost,
                "verify": self.verify, "changes_semantics": self.changes_semantics}


@dataclass(frozen=True)
class Related:
    """A symptom folded into a finding as part of the same incident (one incident, one
    finding): its own onset and evidence, kept as data rather than only inside the summary."""

    symptom: str
    onset_step: int | None
    severity: Severity
    summary: str
    evidence: tuple[Evidence, ...] = ()
    metric: str = ""
    rank: int | None = None

    @classmethod
    def of(cls, f: Finding, *, evidence: int = 3) -> Related:
        """``f`` folded into another finding, with its first ``evidence`` items."""
        return cls(symptom=f.symptom, onset_step=f.onset_step, severity=f.severity,
                   summary=f.summary, evidence=f.evidence[:evidence], metric=f.metric,
                   rank=f.rank)

    def to_dict(self) -> dict[str, Any]:
        return {"symptom": self.symptom, "onset_step": self.onset_step,
                "severity": self.severity, "metric": self.metric, "rank": self.rank,
                "summary": self.summary, "evidence": [e.to_dict() for e in self.evidence]}


@dataclass(frozen=True)
class Finding:
    """One symptom seen in a run, with its evidence; the router fills causes/interventions."""

    symptom: str
    severity: Severity
    confidence: float
    onset_step: int | None
    summary: str
    evidence: tuple[Evidence, ...] = ()
    end_step: int | None = None
    rank: int | None = None
    metric: str = ""
    """The metric series the symptom was seen in (e.g. ``loss`` or ``val_loss``)."""
    causes: tuple[Cause, ...] = ()
    interventions: tuple[Intervention, ...] = ()
    related: tuple[Related, ...] = ()
    """Symptoms folded into this finding as one incident (consequences of this root)."""
    localization: dict[str, Any] | None = None
    """Where a non-finite value first appeared, as the NaN guard's replay found it:
    ``module``, ``phase`` (forward/backward), and the abs-max of inputs, params, outputs."""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITY_ORDER:
            raise ValueError(
                f"severity must be one of {list(SEVERITY_ORDER)}, got {self.severity!r}")
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence must be in [0, 1], got {self.confidence}")

    def with_routing(self, causes: tuple[Cause, ...],
                     interventions: tuple[Intervention, ...]) -> Finding:
        return replace(self, causes=causes, interventions=interventions)

    @property
    def level(self) -> int:
        return SEVERITY_ORDER[self.severity]

    def to_dict(self) -> dict[str, Any]:
        return {
            "symptom": self.symptom,
            "severity": self.severity,
            "confidence": round(float(self.confidence), 3),
            "onset_step": self.onset_step,
            "end_step": self.end_step,
            "rank": self.rank,
            "metric": self.metric,
            "summary": self.summary,
            "evidence": [e.to_dict() for e in self.evidence],
            "causes": [c.to_dict() for c in self.causes],
            "interventions": [i.to_dict() for i in self.interventions],
            **({"related": [r.to_dict() for r in self.related]} if self.related else {}),
            **({"localization": {k: _num(v) if isinstance(v, float) else v
                                 for k, v in self.localization.items()}}
               if self.localization else {}),
        }


@dataclass(frozen=True)
class CheckNotRun:
    """A detector that could not run: the metrics to log, or why the run was too short."""

    symptom: str
    missing: tuple[str, ...] = ()
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"symptom": self.symptom, "missing": list(self.missing)}
        if self.reason:
            d["reason"] = self.reason
        return d


@dataclass
class Diagnosis:
    """Everything ``diagnose`` says about one run: the findings JSON as an object."""

    source: str
    metrics_seen: list[str]
    findings: list[Finding] = field(default_factory=list)
    checks_not_run: list[CheckNotRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the importers tolerated (skipped lines, NaN filter...), for the report."""
    mapping: list[dict[str, Any]] = field(default_factory=list)
    """How every column of the logs was read: ``{file, column, canonical, how}`` each."""
    loss_found: bool = True
    """False when no series was recognised as the training loss: the run is then never
    reported healthy (the CLI says so and asks for ``--map loss=COLUMN``)."""
    loss_candidates: list[str] = field(default_factory=list)
    """When the loss was not found: the columns that could hold it, best first, read with
    their values (``diagnose/loss_candidates.py``: counters and rates left out)."""

    def worst(self) -> int:
        """The highest severity level among the findings, or -1 when there are none."""
        return max((f.level for f in self.findings), default=-1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "source": self.source,
            "metrics_seen": list(self.metrics_seen),
            "checks_not_run": [c.to_dict() for c in self.checks_not_run],
            "findings": [f.to_dict() for f in self.findings],
            "notes": list(self.notes),
            "loss_found": self.loss_found,
            "mapping": [dict(m) for m in self.mapping],
            **({"loss_candidates": list(self.loss_candidates)} if not self.loss_found else {}),
        }

