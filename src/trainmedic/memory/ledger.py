"""The per-GPU memory ledger: bytes by category at the peak, with the peak's phase.

A ledger is what both the analytic planner (``plan``) and measure mode (``measure``) return,
so the two can be compared category by category. Every category carries its ``basis``
(``measured`` when traced from a real step, ``estimated`` when computed from formulas), as
DESIGN.md asks of every number a report prints.

Category bytes are the bytes of that category *live at the peak instant*: their sum (plus
``overhead``) is ``peak_bytes``. Activations at a backward-phase peak are therefore the ones
not yet freed at that instant, not the forward total; ``activations_total_bytes`` keeps the
total saved by the forward pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from trainmedic.basis import Basis

__all__ = [
    "CATEGORIES",
    "PHASES",
    "Basis",
    "Phase",
    "ModuleBytes",
    "Ledger",
    "SCHEMA",
]

#: Schema id of every ``trainmedic memory ... --json`` document (as ``finding.SCHEMA`` is of
#: the findings JSON); a change that breaks a reader bumps the number.
SCHEMA = "trainmedic.memory/1"

#: The ledger's categories, in report order. ``comm_buckets`` are the gradient buckets a data-
#: parallel wrapper allocates for its collectives (DDP's reducer, ZeRO's reduce buckets);
#: ``overhead`` is the CUDA context and workspace; both are zero for CPU measurements.
CATEGORIES: tuple[str, ...] = (
    "params",
    "grads",
    "optimizer",
    "master_weights",
    "activations",
    "temporaries",
    "buffers",
    "comm_buckets",
    "overhead",
)

PHASES: tuple[str, ...] = ("forward", "backward", "optimizer")

Phase = Literal["forward", "backward", "optimizer"]


@dataclass(kw_only=True, frozen=True)
class ModuleBytes:
    """Bytes one module accounts for in one category (activations it saved, its params...)."""

    module: str
    """Dotted module path as in ``named_modules()`` (``""`` for the root)."""
    category: str
    """One of :data:`CATEGORIES`."""
    bytes: int
    """Bytes attributed to the module in that category."""


@dataclass(kw_only=True, frozen=True)
class Ledger:
    """Memory of one GPU (or the CPU process) for one training step, at its peak."""

    peak_bytes: int
    """Highest total of live bytes during the step, including ``overhead``."""
    peak_phase: Phase
    """The phase the peak happened in."""
    categories: Mapping[str, int]
    """Bytes per category live at the peak; keys are exactly :data:`CATEGORIES`."""
    basis: Mapping[str, Basis]
    """Whether each category's figure was measured or estimated; keys as ``categories``."""
    num_params: int
    """Parameters of the whole model (not of one shard)."""
    activations_total_bytes: int = 0
    """Bytes the forward pass saved for backward in total (the activations' own peak)."""
    per_module: tuple[ModuleBytes, ...] = ()
    """Attribution of bytes to modules, where known (measure mode; per-layer activations)."""
    notes: tuple[str, ...] = ()
    """Assumptions the figures rest on (kernel profile, precision semantics, strategy)."""
    details: Mapping[str, Any] = field(default_factory=dict)
    """Free-form extra facts for the JSON (inputs echoed, per-layer figures)."""

    def __post_init__(self) -> None:
        missing = [c for c in CATEGORIES if c not in self.categories]
        extra = [c for c in self.categories if c not in CATEGORIES]
        if missing or extra:
            raise ValueError(
                f"Ledger.categories: got keys {sorted(self.categories)}, expected exactly "
                f"{list(CATEGORIES)} (missing {missing}, unknown {extra})"
            )
        if self.peak_phase not in PHASES:
            raise ValueError(
                f"Ledger.peak_phase: got {self.peak_phase!r}, expected one of {PHASES}"
            )

    @property
    def total_bytes(self) -> int:
        """Sum of the categories (equals ``peak_bytes`` for a consistent ledger)."""
        return sum(int(v) for v in self.categories.values())

    def to_json(self) -> dict[str, Any]:
        """The ledger as the stable JSON object of ``trainmedic memory ... --json``."""
        return {
            "peak_bytes": int(self.peak_bytes),
            "peak_phase": self.peak_phase,
            "ledger": {c: int(self.categories[c]) for c in CATEGORIES},
            "basis": {c: self.basis[c] for c in CATEGORIES},
            "num_params": int(self.num_params),
            "activations_total_bytes": int(self.activations_total_bytes),
            "per_module": [
                {"module": m.module, "category": m.category, "bytes": int(m.bytes)}
                for m in self.per_module
            ],
            "notes": list(self.notes),
            **({"details": dict(self.details)} if self.details else {}),
        }
