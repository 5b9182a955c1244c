"""The log-diagnosis tools compared side by side: how to call each, and its output normalized.

Three tools, each run as a subprocess on the same file:

- ``trainmedic diagnose FILE --json`` (this project; findings JSON per DESIGN.md),
- ``runmedic diagnose FILE --json`` (runmedic 0.1.1, PyPI),
- ``losslint check FILE --format json`` (losslint 0.4.1, PyPI).

The competitors live in their own venv (``.bench/venv``, see benchmarks/README.md) so they
never share packages with trainmedic. Each tool's findings are mapped onto trainmedic's symptom
codes (DESIGN.md) where the meaning matches, so a table can compare them; the tool's own check
name is kept next to it.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRAINMEDIC_BIN = REPO / ".venv" / "bin" / "trainmedic"
COMPETITOR_VENV = REPO / ".bench" / "venv"
FAST_LOSSLINT_VENV = REPO / ".bench" / "venv-fast"
"""Optional: losslint with its numpy extra (``losslint[fast]``), timed as a variant."""

SEVERITY_RANK = {"info": 1, "warning": 2, "error": 3}

# runmedic check name -> trainmedic symptom code (checks.py in runmedic 0.1.1).
_RUNMEDIC_SYMPTOM = {
    "non_finite": "nonfinite_loss",
    "divergence": "divergence",
    "loss_spikes": "loss_spike",
    "no_learning": "flat_loss",
    "overfitting": "overfitting",
    "grad_spikes": "exploding_gradients",
    "constant_lr_plateau": "plateau",
    "input_bound": "input_bound",
    "slow_steps": "step_time_outliers",
    "slowdown": "throughput_regression",
    "memory_growth": "memory_growth",
    "val_below_train": "(val_below_train)",
}
# losslint check name -> trainmedic symptom code (checks.py in losslint 0.4.1).
_LOSSLINT_SYMPTOM = {
    "nan_inf": "nonfinite_loss",
    "divergence": "divergence",
    "loss_spike": "loss_spike",
    "step_backtrack": "resume_discontinuity",
    "overfit_onset": "overfitting",
    "stagnation": "plateau",
    "parse": "(parse)",
}


@dataclass(kw_only=True)
class ToolFinding:
    """One finding of any tool, in common terms."""

    tool_check: str
    """The tool's own name for the check."""
    symptom: str
    """trainmedic symptom code with the same meaning; ``(name)`` where there is none."""
    severity: str
    """info / warning / error (runmedic's ``critical`` maps to error)."""
    step: float | None
    """The step the tool names as onset (or its single reported step)."""
    steps: list[float] = field(default_factory=list)
    """Every step the finding names (spike lists, NaN steps)."""
    metric: str | None = None
    """The metric the finding is about, where the tool says."""
    text: str = ""
    """The tool's headline, plus causes where it gives them."""
    detail: str = ""
    """Everything the finding says (evidence, causes, fixes), for checking its claims."""


@dataclass(kw_only=True)
class Tool:
    """A diagnosis tool: where it is, how to call it, how to read its output."""

    name: str
    """Display name."""
    executable: Path
    """Console script."""
    args: Callable[[str], list[str]]
    """Arguments after the executable for one input path."""
    parse: Callable[[str], list[ToolFinding]]
    """stdout -> findings; raises ValueError when stdout is not the tool's JSON."""
    package: str
    """Distribution name, for the version."""
    variant: bool = False
    """A speed variant of another tool (same findings): timed only where installed."""

    def available(self) -> bool:
        return self.executable.is_file()

    def argv(self, path: str) -> list[str]:
        return [str(self.executable), *self.args(path)]

    def version(self) -> str:
        """Installed distribution version, read by the tool's own interpreter."""
        python = self.executable.parent / "python"
        try:
            out = subprocess.run(
                [str(python), "-c",
                 f"import importlib.metadata as m; print(m.version({self.package!r}))"],
                capture_output=True, text=True, timeout=60, check=False)
        except OSError:
            return "?"
        return out.stdout.strip() or "?"


def _floats(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", text)]


def parse_trainmedic(stdout: str) -> list[ToolFinding]:
    doc = json.loads(stdout)
    if not isinstance(doc, dict) or "findings" not in doc:
        raise ValueError("not a trainmedic findings document")
    out = []
    for f in doc["findings"]:
        steps = [s for s in (f.get("onset_step"), f.get("end_step")) if s is not None]
        causes = "; ".join(c.get("cause", "") for c in f.get("causes", [])[:2])
        detail = " / ".join(
            [f.get("summary", "")]
            + [str(e.get("note", "")) for e in f.get("evidence", [])]
            + [c.get("cause", "") + ("" if c.get("checked_against_data") else " (unchecked)")
               for c in f.get("causes", [])]
            + [i.get("action", "") for i in f.get("interventions", [])])
        out.append(ToolFinding(
            tool_check=f.get("symptom", "?"), symptom=f.get("symptom", "?"),
            severity=f.get("severity", "?"), step=f.get("onset_step"), steps=steps,
            metric=(f.get("evidence") or [{}])[0].get("metric"),
            text=f.get("summary", "") + (f" | causes: {causes}" if causes else ""),
            detail=detail))
    return out


def parse_runmedic(stdout: str) -> list[ToolFinding]:
    doc = json.loads(stdout)
    if not isinstance(doc, list):
        raise ValueError("not a runmedic JSON report")
    out = []
    for run in doc:
        for f in run.get("findings", []):
            check = f.get("check", "?")
            symptom = _RUNMEDIC_SYMPTOM.get(check, f"({check})")
            metric = f.get("metric")
            if check == "non_finite" and metric and metric in run.get("roles", {}).get(
                    "grad_norm", []):
                symptom = "nonfinite_grad"
            steps: list[float] = []
            for ev in f.get("evidence", []):
                if ev.startswith("spike steps:"):
                    steps = _floats(ev.split(":", 1)[1])
            if f.get("step") is not None and f["step"] not in steps:
                steps.insert(0, f["step"])
            onset = min(steps) if steps and check in ("loss_spikes", "grad_spikes") else f.get(
                "step")
            causes = "; ".join(f.get("likely_causes", [])[:2])
            out.append(ToolFinding(
                tool_check=check, symptom=symptom,
                severity="error" if f.get("severity") == "critical" else f.get("severity", "?"),
                step=onset, steps=steps, metric=metric,
                text=f.get("title", "") + (f" | causes: {causes}" if causes else ""),
                detail=" / ".join([f.get("title", ""), *f.get("evidence", []),
                                   *f.get("likely_causes", []), *f.get("fixes", [])])))
    return out


def parse_losslint(stdout: str) -> list[ToolFinding]:
    doc = json.loads(stdout)
    if not isinstance(doc, dict) or "findings" not in doc:
        raise ValueError("not a losslint JSON report")
    out = []
    for f in doc["findings"]:
        check = f.get("check", "?")
        details = f.get("details", {})
        steps = [float(s) for s in details.get("steps", []) if isinstance(s, int | float)]
        if "since_step" in details:
            steps = [float(details["since_step"])]
        if "backtracks" in details:
            steps = [float(b[1]) for b in details["backtracks"]]
        symptom = _LOSSLINT_SYMPTOM.get(check, f"({check})")
        series = details.get("series")
        if check == "nan_inf" and isinstance(series, str) and "grad" in series.lower():
            symptom = "nonfinite_grad"
        out.append(ToolFinding(
            tool_check=check, symptom=symptom,
            severity=f.get("severity", "?"), step=steps[0] if steps else None, steps=steps,
            metric=series, text=f.get("message", ""), detail=f.get("message", "")))
    return out


def all_tools(*, variants: bool = False) -> list[Tool]:
    """trainmedic first: ratios are taken against it. ``variants`` adds losslint[fast]."""
    tools = [
        Tool(name="trainmedic", executable=TRAINMEDIC_BIN,
             args=lambda p: ["diagnose", p, "--json"], parse=parse_trainmedic,
             package="trainmedic"),
        Tool(name="runmedic", executable=COMPETITOR_VENV / "bin" / "runmedic",
             args=lambda p: ["diagnose", p, "--json"], parse=parse_runmedic, package="runmedic"),
        Tool(name="losslint", executable=COMPETITOR_VENV / "bin" / "losslint",
             args=lambda p: ["check", p, "--format", "json", "--color", "never"],
             parse=parse_losslint, package="losslint"),
    ]
    fast = Tool(name="losslint[fast]", executable=FAST_LOSSLINT_VENV / "bin" / "losslint",
                args=tools[-1].args, parse=parse_losslint, package="losslint", variant=True)
    if variants and fast.available():
        tools.append(fast)
    return tools


def names_window(findings: list[ToolFinding], symptom: str, lo: float, hi: float
                 ) -> ToolFinding | None:
    """The first finding of ``symptom`` that names a step within [lo, hi], if any."""
    for f in findings:
        if f.symptom != symptom:
            continue
        if any(lo <= s <= hi for s in ([f.step] if f.step is not None else []) + f.steps):
            return f
    return None
