"""The fit search: a smaller micro-batch is only suggested when it keeps the global batch."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from trainmedic.memory.families import load_spec
from trainmedic.memory.fit import Intervention, fit, max_micro_batch
from trainmedic.memory.planner import PlanConfig, plan
from trainmedic.memory.spec import ModelSpec

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model-configs"


@pytest.fixture(scope="module")
def spec() -> ModelSpec:
    return load_spec(CONFIGS / "llama-3.2-1b.json")


def _gpu_for_micro_batch(spec: ModelSpec, cfg: PlanConfig, largest: int) -> int:
    """A GPU size (with no margin) on which at most ``largest`` samples fit per micro-batch
    when gradients are accumulated (which keeps them alive through the later forwards)."""
    accumulating = replace(cfg, batch_size=1, grad_accum=max(cfg.grad_accum, 2))
    gpu_bytes = plan(spec, replace(accumulating, batch_size=largest)).peak_bytes + 1
    assert max_micro_batch(spec, accumulating, gpu_bytes) == largest
    return gpu_bytes


def _micro_batch_change(interventions: tuple[Intervention, ...]) -> Intervention:
    found = [i for i in interventions if i.action.startswith("micro-batch ")]
    assert len(found) == 1, [i.action for i in interventions]
    return found[0]


@pytest.mark.parametrize(("batch", "accum", "largest", "micro", "new_accum"), [
    (6, 1, 4, 3, 2),   # 4 fits, but 4 x 2 = 8 samples would change the batch: 3 x 2 keeps 6
    (7, 1, 4, 1, 7),   # a prime batch: only micro-batch 1 keeps 7 samples per step
    (6, 2, 4, 3, 4),   # accumulation already in use multiplies: 12 samples, 3 x 4
    (8, 1, 5, 4, 2),
])
def test_micro_batch_change_keeps_the_global_batch(
    spec: ModelSpec, batch: int, accum: int, largest: int, micro: int, new_accum: int
) -> None:
    cfg = PlanConfig(batch_size=batch, seq_len=1024, precision="fp32", grad_accum=accum)
    gpu_bytes = _gpu_for_micro_batch(spec, cfg, largest)
    result = fit(spec, cfg, gpu_bytes=gpu_bytes, margin=0.0)
    assert result.fits is False
    change = _micro_batch_change(result.interventions)
    assert (change.config.batch_size, change.config.grad_accum) == (micro, new_accum)
    assert change.config.batch_size * change.config.grad_accum == batch * accum
    assert change.action == (f"micro-batch {micro} with gradient accumulation x{new_accum} "
                             f"(same {batch * accum} samples per optimizer step)")
    # The suggestion fits as suggested: its search had the accumulation's gradients on.
    assert change.fits is True and change.changes_semantics is None
    for step in result.combined:
        assert step.config.batch_size * step.config.grad_accum == batch * accum


def test_no_micro_batch_change_when_nothing_fits(spec: ModelSpec) -> None:
    cfg = PlanConfig(batch_size=4, seq_len=1024, precision="fp32")
    one = plan(spec, replace(cfg, batch_size=1)).peak_bytes
    result = fit(spec, cfg, gpu_bytes=one - 1, margin=0.0)
    assert result.max_micro_batch == 0
    assert not any(i.action.startswith("micro-batch ") for i in result.interventions)


def _more_gpus_change(interventions: tuple[Intervention, ...]) -> Intervention:
    found = [i for i in interventions if i.action.startswith("shard over ")]
    assert len(found) == 1, [i.action for i in interventions]
    return found[0]


def test_more_gpus_keep_the_global_batch_when_it_splits(spec: ModelSpec) -> None:
    cfg = PlanConfig(batch_size=4, seq_len=1024, precision="fp32", grad_accum=2)
    # Too small for one sample, large enough for a shard of it over 2 GPUs.
    one = plan(spec, replace(cfg, batch_size=1)).peak_bytes
    result = fit(spec, cfg, gpu_bytes=one - 1, margin=0.0)
    change = _more_gpus_change(result.interventions)
    n = change.config.gpus
    assert change.config.batch_size * change.config.grad_accum * n == 8
    assert change.action == (f"shard over {n} GPUs with FSDP (FULL_SHARD) or ZeRO-3, "
                             f"micro-batch {change.config.batch_size} with gradient accumulation "
                             f"x{change.config.grad_accum} (same 8 samples per optimizer step)")
    assert change.changes_semantics is None


def test_more_gpus_say_when_the_global_batch_grows(spec: ModelSpec) -> None:
    # One sample per optimizer step cannot be split: more GPUs mean a larger batch, said as such
    # (not "lower the accumulation", which is already 1).
    cfg = PlanConfig(batch_size=1, seq_len=1024, precision="fp32")
    result = fit(spec, cfg, gpu_bytes=plan(spec, cfg).peak_bytes - 1, margin=0.0)
    change = _more_gpus_change(result.interventions)
    n = change.config.gpus
    assert change.action == f"shard over {n} GPUs with FSDP (FULL_SHARD) or ZeRO-3"
    assert change.changes_semantics == (
        f"{n} GPUs take {n} samples per optimizer step, not 1 (fewer than {n} samples per step "
        f"cannot be split over {n} GPUs): retune the learning rate for the larger batch")
