"""What ``trainmedic memory plan`` and ``measure`` found: a ledger, and whether it fits a GPU.

:func:`estimate_plan` plans a config analytically. When the planner has no family for the
config's ``model_type`` and the run is a plain single-GPU one, it measures the model
transformers builds from the config instead (measure mode traces one process, so it has
nothing to say about sharding or parallelism). :func:`estimate_measured` measures a factory.
Both check the ledger against the GPU when one is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from trainmedic.errors import UnsupportedModelError
from trainmedic.memory.config_source import resolve_config
from trainmedic.memory.families import load_spec, spec_with_layers
from trainmedic.memory.fit import DEFAULT_MARGIN, FitResult, fit, usable_bytes
from trainmedic.memory.gpus import GpuTarget
from trainmedic.memory.ledger import Ledger
from trainmedic.memory.planner import PlanConfig, plan
from trainmedic.memory.spec import ModelSpec

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from trainmedic.memory.measurement import MeasureConfig

__all__ = ["MemoryEstimate", "PlanEstimate", "MeasuredEstimate", "estimate_plan",
           "estimate_measured"]

#: Training steps traced when ``plan`` falls back to measure mode: the second one runs with
#: the optimizer state allocated, as every later step does.
FALLBACK_STEPS = 2


@dataclass(kw_only=True, frozen=True)
class PlanEstimate:
    """An analytic plan of a model config, checked against a GPU when one was given."""

    source: str
    """The config as the user named it (a path or a hub id)."""
    spec: ModelSpec
    """The model, as parsed from the config (with ``--layers`` applied)."""
    config: PlanConfig
    """The training step that was planned."""
    ledger: Ledger
    """The planned per-GPU memory (every figure estimated)."""
    gpu: GpuTarget | None
    """The GPU it was checked against; None when none was given."""
    fit: FitResult | None
    """Whether it fits, the largest micro-batch and what helps; None without a GPU."""
    kind: Literal["plan"] = "plan"
    """Tells the estimate kinds apart (and names it in the JSON)."""

    @property
    def fits(self) -> bool | None:
        """Whether the plan fits the GPU (None without a GPU)."""
        return None if self.fit is None else self.fit.fits


@dataclass(kw_only=True, frozen=True)
class MeasuredEstimate:
    """A measured training step (measure mode, CPU kernels), checked against a GPU."""

    source: str
    """The factory (``module:function``) or config the model came from, as given."""
    config: MeasureConfig
    """What was traced: batch, sequence, precision, optimizer, steps."""
    ledger: Ledger
    """The measured memory (every figure measured)."""
    gpu: GpuTarget | None
    """The GPU it was checked against; None when none was given."""
    margin: float = DEFAULT_MARGIN
    """Share of the GPU kept free for allocator fragmentation."""
    notes: tuple[str, ...] = ()
    """Why it was measured rather than planned, shown before the ledger's own notes."""
    kind: Literal["measure"] = "measure"
    """Tells the estimate kinds apart (and names it in the JSON)."""

    @property
    def usable_bytes(self) -> int | None:
        """Bytes the step may peak at on the GPU after the margin (None without a GPU)."""
        return None if self.gpu is None else usable_bytes(self.gpu.memory_bytes, self.margin)

    @property
    def fits(self) -> bool | None:
        """Whether the measured peak fits the GPU (None without a GPU)."""
        limit = self.usable_bytes
        return None if limit is None else self.ledger.peak_bytes <= limit


MemoryEstimate = PlanEstimate | MeasuredEstimate


def estimate_plan(source: str, cfg: PlanConfig, *, layers: int | None = None,
                  gpu: GpuTarget | None = None, margin: float = DEFAULT_MARGIN,
                  ) -> MemoryEstimate:
    """Plan the config ``source`` (a path, a model folder or a cached hub id) for ``cfg``.

    Falls back to measuring the model transformers builds when the planner has no family for
    the config and ``cfg`` is one GPU without sharding or parallelism; otherwise the
    :class:`UnsupportedModelError` (which points to measure mode) propagates.
    """
    path = resolve_config(source)
    try:
        spec = load_spec(path)
    except UnsupportedModelError as exc:
        if (cfg.strategy, cfg.gpus, cfg.tp, cfg.pp) != ("single", 1, 1, 1):
            raise
        from trainmedic.memory.factories import auto_factory
        from trainmedic.memory.measurement import MeasureConfig

        traced = MeasureConfig(batch_size=cfg.batch_size, seq_len=cfg.seq_len,
                               precision=cfg.precision, optimizer=cfg.optimizer,
                               steps=FALLBACK_STEPS)
        note = (f"model_type {exc.model_type!r} has no analytic family: measured instead "
                f"(measure mode, CPU kernels, one GPU)")
        return estimate_measured(source, auto_factory(path, layers, cfg.attention), traced,
                                 gpu=gpu, margin=margin, notes=(note,))
    if layers is not None:
        spec = spec_with_layers(spec, layers)
    result = fit(spec, cfg, gpu_bytes=gpu.memory_bytes, margin=margin) if gpu else None
    return PlanEstimate(source=str(source), spec=spec, config=cfg,
                        ledger=result.ledger if result else plan(spec, cfg), gpu=gpu,
                        fit=result)


def estimate_measured(source: str | Path, factory: Callable[[], Any], config: MeasureConfig,
                      *, gpu: GpuTarget | None = None, margin: float = DEFAULT_MARGIN,
                      notes: tuple[str, ...] = ()) -> MeasuredEstimate:
    """Measure a training step of the model ``factory`` builds, and check it against ``gpu``."""
    from trainmedic.memory.measurement import measure

    if gpu is not None:
        usable_bytes(gpu.memory_bytes, margin)  # a bad margin fails before minutes of tracing
    return MeasuredEstimate(source=str(source), config=config, ledger=measure(factory, config),
                            gpu=gpu, margin=margin, notes=notes)
