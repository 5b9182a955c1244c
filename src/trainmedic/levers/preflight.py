"""Preflight correctness checks on a recipe, before it burns compute (``trainmedic check``).

Each check runs one short experiment on the recipe's own model, loss and first batches and
says ``pass``, ``fail`` or ``skip`` (always with a reason), with the numbers it compared, the
tolerance, the parameter or module names involved, and under a failure the smallest fix.
Checks that step an optimizer do it on deep copies; after every check the model's
parameters, buffers, gradients and train/eval flags, the RNG streams (python, numpy, torch
CPU and CUDA) and the data loader's generators are put back as they were, so ``check``
leaves the recipe exactly as it found it.

The checks live in a registry (:func:`register_check`; a name registered twice is a
``RegistryError``), in the order they run: the built-in ones
(:mod:`trainmedic.levers.preflight_checks`) first, cheap ones before the overfit run.
This module does not import torch.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainmedic.errors import ConfigError, RegistryError

if TYPE_CHECKING:
    from trainmedic.levers.preflight_state import Subject
    from trainmedic.recipe.recipe import Recipe

__all__ = ["STATUSES", "Evidence", "CheckResult", "PreflightReport", "PreflightConfig",
           "Check", "register_check", "get_check", "check_names", "run_checks",
           "passed", "failed", "skipped", "SCHEMA"]

logger = logging.getLogger(__name__)

#: A check's outcome.
STATUSES = ("pass", "fail", "skip")
#: ``PreflightReport.to_dict()["schema"]``.
SCHEMA = "trainmedic.preflight/1"
#: What an evidence figure is (DESIGN.md: never mix them): observed in this run, or derived
#: from a formula rather than observed.
BASES = ("measured", "estimated")


@dataclass(kw_only=True, frozen=True)
class Evidence:
    """One thing a check compared: a figure (or the names involved) and what it was held to."""

    label: str
    """What the value is, e.g. "relative L2 error of the gradient, 2 x 4 vs 1 x 8"."""

    value: float | int | str | tuple[str, ...]
    """The figure, a word, or the parameter / module names involved."""

    reference: float | None = None
    """What the value was compared with (e.g. ln C for the loss at init); ``None``: none."""

    tolerance: str | None = None
    """The rule the value was held to, in words (e.g. "<= 1e-4"); ``None``: none."""

    basis: str = "measured"
    """``measured`` (observed in this run) or ``estimated`` (from a formula)."""

    def __post_init__(self) -> None:
        if not self.label:
            raise ConfigError("label: evidence needs a label saying what the value is")
        if self.basis not in BASES:
            raise ConfigError(f"basis must be one of {', '.join(BASES)}, got {self.basis!r}")

    def to_dict(self) -> dict[str, Any]:
        value: Any = list(self.value) if isinstance(self.value, tuple) else self.value
        if isinstance(value, float) and not math.isfinite(value):
            value = str(value)  # JSON has no NaN / inf
        return {"label": self.label, "value": value, "reference": self.reference,
                "tolerance": self.tolerance, "basis": self.basis}


@dataclass(kw_only=True, frozen=True)
class CheckResult:
    """What one check found."""

    name: str
    """The check's registered name, e.g. ``microbatch_equivalence``."""

    status: str
    """One of ``STATUSES``: ``pass``, ``fail`` or ``skip``."""

    summary: str
    """One line: what was compared and how it came out (for a skip: why it did not run)."""

    evidence: tuple[Evidence, ...] = ()
    """The figures and names behind the summary."""

    fix: str | None = None
    """The smallest change that would make a failing check pass; ``None`` unless failed."""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ConfigError(f"status must be one of {', '.join(STATUSES)}, got "
                              f"{self.status!r}")
        if not self.summary:
            raise ConfigError("summary: a check result needs a one-line summary (a skip says "
                              "why it did not run)")
        if self.status == "fail" and not self.fix:
            raise ConfigError(f"fix: the failing check {self.name!r} must say how to fix it")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "summary": self.summary,
                "evidence": [e.to_dict() for e in self.evidence], "fix": self.fix}


@dataclass(kw_only=True, frozen=True)
class PreflightReport:
    """Every check's result, in the order they ran."""

    results: tuple[CheckResult, ...]
    """One per check run."""

    passed: bool
    """True when no check failed (skips do not fail the report)."""

    def __post_init__(self) -> None:
        if self.passed != all(r.status != "fail" for r in self.results):
            raise ConfigError("passed must be True exactly when no result failed")

    def result(self, name: str) -> CheckResult:
        """The result of the check ``name``; ``RegistryError`` when it did not run."""
        for r in self.results:
            if r.name == name:
                return r
        raise RegistryError(f"check {name!r} did not run; it ran "
                            f"{', '.join(r.name for r in self.results) or 'no check'}")

    @property
    def counts(self) -> dict[str, int]:
        """How many checks ended in each status (``STATUSES``)."""
        return {s: sum(1 for r in self.results if r.status == s) for s in STATUSES}

    def to_dict(self, *, source: str | None = None) -> dict[str, Any]:
        """The stable JSON document (``SCHEMA``)."""
        return {"schema": SCHEMA, "source": source, "passed": self.passed,
                "counts": self.counts,
                "checks": [r.to_dict() for r in self.results]}


@dataclass(kw_only=True, frozen=True)
class PreflightConfig:
    """How hard the checks look. The defaults are argued in docs/check.md."""

    seed: int = 0
    """Seed of every RNG before each pass that must see the same randomness."""

    batches: int = 4
    """Batches drawn from ``recipe.data`` (at least ``grad_accum``): label_range reads them
    all, determinism steps on the first ``grad_accum``, the rest use the first."""

    microbatch_tolerance: float = 1e-4
    """Largest relative L2 error between the gradient of k micro-batches and of one batch:
    fp32 reordering noise is ~1e-6, a loss normalization error worth catching is >= 1e-3."""

    init_loss_excess_nats: float = 1.0
    """How far above ln C the loss at init may be (nats); 1 nat is logits with a standard
    deviation of ~1.4 at init (E[CE] ~ ln C + s^2 / 2 for small Gaussian logits)."""

    init_loss_deficit_nats: float = 0.5
    """How far below the label entropy of the batch the loss at init may be (nats): no
    input-independent prediction scores below it (Gibbs' inequality)."""

    overfit_steps: int = 100
    """Most optimizer steps on one fixed batch."""

    overfit_factor: float = 0.5
    """The overfit check passes once the loss is at most this fraction of its first value."""

    overfit_budget_s: float = 120.0
    """Wall-clock bound of the overfit run; running out skips it (not a failure)."""

    determinism_tolerance: float = 1e-5
    """Largest relative L2 difference of the update between two runs of one step from the
    same state and seed (CPU kernels are bitwise; CUDA atomics leave ~1e-7)."""

    precisions: tuple[str, ...] | None = None
    """Mixed precisions to compare with fp32 (``bf16-mixed``, ``fp16-mixed``); ``None``: the
    recipe's own (none for an fp32 recipe, which skips the check)."""

    def __post_init__(self) -> None:
        _int_at_least("seed", self.seed, 0)
        _int_at_least("batches", self.batches, 1)
        _int_at_least("overfit_steps", self.overfit_steps, 1)
        for name in ("microbatch_tolerance", "init_loss_excess_nats", "init_loss_deficit_nats",
                     "overfit_budget_s", "determinism_tolerance"):
            _positive(name, getattr(self, name))
        f = self.overfit_factor
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f < 1:
            raise ConfigError(f"overfit_factor must be a number in (0, 1), got {f!r}")
        if self.precisions is not None:
            bad = [p for p in self.precisions if p not in ("bf16-mixed", "fp16-mixed")]
            if bad or not isinstance(self.precisions, tuple):
                raise ConfigError(f"precisions must be a tuple of 'bf16-mixed' / 'fp16-mixed', "
                                  f"got {self.precisions!r}")


def _int_at_least(name: str, value: Any, lo: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ConfigError(f"{name} must be an integer >= {lo}, got {value!r}")


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")


# -- results --------------------------------------------------------------------------------

def passed(name: str, summary: str, *evidence: Evidence) -> CheckResult:
    return CheckResult(name=name, status="pass", summary=summary, evidence=evidence)


def failed(name: str, summary: str, fix: str, *evidence: Evidence) -> CheckResult:
    return CheckResult(name=name, status="fail", summary=summary, evidence=evidence, fix=fix)


def skipped(name: str, reason: str, *evidence: Evidence) -> CheckResult:
    return CheckResult(name=name, status="skip", summary=reason, evidence=evidence)


# -- the registry ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Check:
    """One registered check: ``run(subject)`` returns its result."""

    name: str
    """The name ``--only`` and the report use, e.g. ``init_loss``."""

    what: str
    """One line: what it compares."""

    run: Callable[[Subject], CheckResult] = field(repr=False)
    """The experiment; raising ``preflight_state.Problem`` (or any error from the recipe's
    code) makes it a ``fail``."""


_REGISTRY: dict[str, Check] = {}


def register_check(check: Check) -> Check:
    """Add ``check`` to the registry (it runs after those already there); a name registered
    twice is a ``RegistryError``."""
    if check.name in _REGISTRY:
        raise RegistryError(f"preflight check {check.name!r} is already registered; pick "
                            "another name")
    _REGISTRY[check.name] = check
    return check


def _builtin() -> dict[str, Check]:
    # The built-in checks import torch; they register on first use, not when this loads.
    import trainmedic.levers.preflight_checks  # noqa: F401

    return _REGISTRY


def check_names() -> tuple[str, ...]:
    """Every registered check, in the order they run."""
    return tuple(_builtin())


def get_check(name: str) -> Check:
    """The registered check ``name``; an unknown one is a ``RegistryError`` listing them."""
    registry = _builtin()
    try:
        return registry[name]
    except KeyError:
        raise RegistryError(f"no preflight check {name!r}; expected one of "
                            f"{', '.join(registry)}") from None


def run_checks(recipe: Recipe, *, only: Sequence[str] | None = None,
               config: PreflightConfig | None = None,
               progress: Callable[[str], None] | None = None) -> PreflightReport:
    """Run the registered checks (``only``: these, in registry order) on ``recipe`` and
    return the report. The recipe's model, optimizer, RNG streams and loader generators are
    as they were when it returns. ``progress`` is called with each check's name as it
    starts."""
    from trainmedic.levers.preflight_state import Subject
    from trainmedic.recipe.recipe import Recipe

    if not isinstance(recipe, Recipe):
        raise ConfigError(f"recipe must be a trainmedic.Recipe, got {type(recipe).__name__}")
    if isinstance(only, str):
        raise ConfigError(f"only must be a list of check names, got the string {only!r}")
    wanted = [get_check(n) for n in only] if only else list(_builtin().values())
    wanted_names = {c.name for c in wanted}
    checks = [c for c in _builtin().values() if c.name in wanted_names]
    subject = Subject(recipe, config or PreflightConfig())
    results: list[CheckResult] = []
    with subject.guard():
        for check in checks:
            if progress is not None:
                progress(check.name)
            results.append(subject.run(check))
    return PreflightReport(results=tuple(results),
                           passed=all(r.status != "fail" for r in results))
