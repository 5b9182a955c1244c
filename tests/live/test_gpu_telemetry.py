"""GPU telemetry through a stand-in for pynvml (no GPU in CI): what each NVML call is turned
into, a field the driver does not report, the sampling thread, and the probe's wiring."""

from __future__ import annotations

import sys
import threading
import time
import types
from typing import Any

import pytest

from trainmedic.live.gpu_telemetry import GpuSampler, open_nvml
from trainmedic.live.step_probe import StepProbe


def _fake_nvml(*, throttle_name: str = "nvmlDeviceGetCurrentClocksEventReasons",
               no_power: bool = False) -> types.ModuleType:
    nv = types.ModuleType("pynvml")
    nv.NVML_CLOCK_SM = 1  # type: ignore[attr-defined]
    nv.NVML_TEMPERATURE_GPU = 0  # type: ignore[attr-defined]
    state = {"util": 37, "reads": 0, "opened": None}
    nv.state = state  # type: ignore[attr-defined]

    def util(h: Any) -> Any:
        state["reads"] += 1
        return types.SimpleNamespace(gpu=state["util"], memory=12)

    def power(h: Any) -> int:
        if no_power:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return 312_500  # mW

    def by_uuid(name: str) -> str:
        state["opened"] = name
        return "handle"

    nv.nvmlInit = lambda: None  # type: ignore[attr-defined]
    nv.nvmlDeviceGetHandleByUUID = by_uuid  # type: ignore[attr-defined]
    nv.nvmlDeviceGetHandleByIndex = lambda i: f"handle{i}"  # type: ignore[attr-defined]
    nv.nvmlDeviceGetUtilizationRates = util  # type: ignore[attr-defined]
    nv.nvmlDeviceGetClockInfo = lambda h, kind: 1755 if kind == 1 else 0  # type: ignore[attr-defined]
    nv.nvmlDeviceGetPowerUsage = power  # type: ignore[attr-defined]
    nv.nvmlDeviceGetTemperature = lambda h, kind: 64  # type: ignore[attr-defined]
    setattr(nv, throttle_name, lambda h: 0x4)  # SW power cap
    return nv


def test_a_reading_has_every_field_in_its_unit() -> None:
    nv = _fake_nvml()
    sampler = GpuSampler(nv, "handle", 60.0)
    try:
        assert sampler.latest == {"gpu_util": 37.0, "gpu_sm_clock_mhz": 1755.0,
                                  "gpu_power_w": 312.5, "gpu_temp_c": 64.0,
                                  "gpu_throttle_reasons": 4.0}
    finally:
        sampler.close()
    assert not sampler._thread.is_alive()
    sampler.close()  # idempotent


def test_older_drivers_and_unreported_fields() -> None:
    nv = _fake_nvml(throttle_name="nvmlDeviceGetCurrentClocksThrottleReasons", no_power=True)
    sampler = GpuSampler(nv, "handle", 60.0)
    sampler.close()
    assert "gpu_power_w" not in sampler.latest  # not reported: left out, not zero
    assert sampler.latest["gpu_throttle_reasons"] == 4.0


def test_the_thread_refreshes_the_reading() -> None:
    nv = _fake_nvml()
    sampler = GpuSampler(nv, "handle", 0.01)
    try:
        nv.state["util"] = 99  # type: ignore[attr-defined]
        deadline = time.monotonic() + 5
        while sampler.latest.get("gpu_util") != 99.0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sampler.latest["gpu_util"] == 99.0
        assert any(t.name == "trainmedic-gpu" for t in threading.enumerate())
    finally:
        sampler.close()
    assert not any(t.name == "trainmedic-gpu" for t in threading.enumerate())


def test_without_pynvml_nothing_is_sampled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert open_nvml(0) is None
    probe = StepProbe(0.05, device=0, gpu_sample_s=1.0)
    try:
        assert set(probe.extras()) == {"gc_time_s"}
    finally:
        probe.close()


def test_the_probe_records_the_latest_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    nv = _fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    probe = StepProbe(0.05, device=0, gpu_sample_s=60.0)
    try:
        got = probe.extras()
        assert got["gpu_util"] == 37.0 and got["gpu_sm_clock_mhz"] == 1755.0
    finally:
        probe.close()
    assert not any(t.name == "trainmedic-gpu" for t in threading.enumerate())
    # not sampled unless asked (the watcher asks only on CUDA)
    quiet = StepProbe(0.05, device=0)
    assert "gpu_util" not in quiet.extras()
    quiet.close()
