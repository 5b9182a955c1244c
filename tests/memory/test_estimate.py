"""What plan and measure found: the analytic plan, the fallback to measure mode, the fit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainmedic.errors import ConfigError, UnsupportedModelError
from trainmedic.memory import estimate as estimate_module
from trainmedic.memory.estimate import MeasuredEstimate, PlanEstimate, estimate_plan
from trainmedic.memory.families import load_spec, spec_with_layers
from trainmedic.memory.fit import fit
from trainmedic.memory.gpus import GpuTarget
from trainmedic.memory.ledger import CATEGORIES, Ledger
from trainmedic.memory.planner import PlanConfig, plan

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model-configs"
LLAMA = CONFIGS / "llama-3.2-1b.json"
H100 = GpuTarget(memory_bytes=80 * 10**9, label="80GB")


def test_plan_without_a_gpu_has_no_verdict() -> None:
    cfg = PlanConfig(batch_size=2, seq_len=512)
    got = estimate_plan(str(LLAMA), cfg)
    assert isinstance(got, PlanEstimate) and got.fit is None and got.fits is None
    assert got.ledger == plan(load_spec(LLAMA), cfg)


def test_plan_with_a_gpu_is_the_fit_and_layers_apply() -> None:
    cfg = PlanConfig(batch_size=2, seq_len=512)
    got = estimate_plan(str(LLAMA), cfg, layers=2, gpu=H100, margin=0.2)
    spec = spec_with_layers(load_spec(LLAMA), 2)
    assert isinstance(got, PlanEstimate) and got.spec == spec
    assert got.fit == fit(spec, cfg, gpu_bytes=H100.memory_bytes, margin=0.2)
    assert got.fits is True and got.ledger == got.fit.ledger


def _unknown(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "not_a_model", "hidden_size": 64}))
    return path


@pytest.mark.parametrize("change", [{"gpus": 2}, {"strategy": "ddp"}, {"gpus": 2, "tp": 2}])
def test_no_fallback_to_measure_mode_for_a_parallel_run(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    # Measure mode traces one process: it cannot answer for sharding or parallelism.
    with pytest.raises(UnsupportedModelError, match="measure"):
        estimate_plan(str(_unknown(tmp_path)), PlanConfig(**change))


def test_fallback_measures_one_plain_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []

    def fake_measured(source: str, factory: Any, config: Any, **kwargs: Any) -> str:
        calls.append({"source": source, "factory": factory, "config": config, **kwargs})
        return "measured"

    monkeypatch.setattr(estimate_module, "estimate_measured", fake_measured)
    path = _unknown(tmp_path)
    got = estimate_plan(str(path), PlanConfig(batch_size=3, seq_len=64, precision="fp32",
                                              attention="flash"), layers=2, gpu=H100)
    assert got == "measured" and len(calls) == 1
    call = calls[0]
    assert call["source"] == str(path) and call["gpu"] == H100
    assert (call["config"].batch_size, call["config"].seq_len, call["config"].steps) == (3, 64, 2)
    assert call["notes"] == ("model_type 'not_a_model' has no analytic family: measured "
                             "instead (measure mode, CPU kernels, one GPU)",)
    # transformers' builder gets the depth and an attention kernel it builds on CPU.
    assert call["factory"].keywords == {"num_layers": 2, "attn_implementation": "sdpa"}


def _ledger(peak_bytes: int) -> Ledger:
    categories = dict.fromkeys(CATEGORIES, 0) | {"params": peak_bytes}
    return Ledger(peak_bytes=peak_bytes, peak_phase="backward", categories=categories,
                  basis=dict.fromkeys(CATEGORIES, "measured"), num_params=1)


@pytest.mark.parametrize(("peak", "fits"), [(900, True), (901, False)])
def test_a_measured_ledger_fits_within_the_margin(peak: int, fits: bool) -> None:
    got = MeasuredEstimate(source="m:f", config=None,  # type: ignore[arg-type]
                           ledger=_ledger(peak), gpu=GpuTarget(memory_bytes=1000, label="x"),
                           margin=0.1)
    assert got.usable_bytes == 900 and got.fits is fits
    bare = MeasuredEstimate(source="m:f", config=None,  # type: ignore[arg-type]
                            ledger=_ledger(peak), gpu=None)
    assert bare.usable_bytes is None and bare.fits is None


def test_a_bad_margin_fails_before_measuring() -> None:
    def never() -> Any:
        raise AssertionError("measured although the margin was refused")

    with pytest.raises(ConfigError, match="^margin: got 1.5"):
        estimate_module.estimate_measured("m:f", never, None,  # type: ignore[arg-type]
                                          gpu=H100, margin=1.5)
