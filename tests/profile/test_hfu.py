"""Profile under activation checkpointing: MFU on model FLOPs, HFU on every FLOP that ran."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from trainmedic.profile.session import ProfileConfig, profile_recipe
from trainmedic.report.profile_text import profile_doc, profile_lines

sys.path.insert(0, str(Path(__file__).parent))
import injected  # noqa: E402


class _Recomputed(nn.Module):
    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.block, x, use_reentrant=False)


def test_profile_reports_hfu_beside_mfu_under_activation_checkpointing() -> None:
    width, layers, batch = 64, 3, 16
    recipe = injected.recipe(width=width, layers=layers, batch_size=batch)
    model = recipe.model
    assert isinstance(model, nn.Sequential)
    for i in range(len(model)):
        model[i] = _Recomputed(model[i])
    config = ProfileConfig(steps=3, warmup=1, flops=True, measure_peak=False,
                           peak_flops_per_s=1e10)
    report = profile_recipe(recipe, config)
    assert report.flops_per_step is not None and report.hardware_flops_per_step is not None
    # each layer's Linear runs again in the backward (ReLU's saved output needs it)
    recompute = layers * 2 * width * width * batch
    assert report.hardware_flops_per_step - report.flops_per_step == recompute
    # the model FLOPs are those of the same model without checkpointing (see test_flops)
    assert report.flops_per_step == 6 * layers * width * width * batch - 2 * width * width * batch
    assert report.hfu is not None and report.mfu is not None
    assert report.hfu / report.mfu == pytest.approx(
        report.hardware_flops_per_step / report.flops_per_step)
    text = "\n".join(profile_lines(report))
    assert "HFU:" in text and "with recompute:" in text
    doc = json.loads(profile_doc(report))
    assert doc["flops"]["recompute_per_step"] == recompute
    assert doc["hfu"] == pytest.approx(report.hfu)
