"""GPU utilisation, clock, power, temperature and throttle reasons, sampled by NVML off the
training thread.

The step time says a step got slower; these say whether the GPU was idle (``gpu_util``), held
back by the driver (``gpu_throttle_reasons``: power cap, thermal, sync boost, ... as NVML's
bitmask), or running at a lower clock (``gpu_sm_clock_mhz``). They need ``pynvml`` (the
``nvidia-ml-py`` package, optional): without it nothing is sampled and nothing is said
missing beyond one info log line.

A daemon thread reads them every ``interval_s`` (1 s by default: NVML's utilisation is
itself an average over a sample period of 1/6 s to 1 s, depending on the product) and keeps
the latest; each step records the latest reading. NVML calls release the GIL; the thread
holds it only for a few bytecodes per reading.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = ["GpuSampler", "open_nvml"]

logger = logging.getLogger(__name__)


def open_nvml(device: Any) -> tuple[Any, Any] | None:
    """``(pynvml, handle)`` of torch's CUDA ``device``, found by its UUID where torch gives one
    (NVML counts every GPU on the host, torch only the visible ones), or ``None`` when pynvml
    or the device cannot be had."""
    try:
        import pynvml
    except ImportError:
        logger.info("no GPU telemetry: pynvml is not installed (pip install nvidia-ml-py)")
        return None
    device_index, uuid = _torch_ids(device)
    try:
        pynvml.nvmlInit()
        if uuid:
            name = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
            return pynvml, pynvml.nvmlDeviceGetHandleByUUID(name)
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(device_index)
    except Exception as exc:  # noqa: BLE001 - NVML raises its own error types, or OSError
        logger.info("no GPU telemetry: NVML could not open device %s (%s)", device_index, exc)
        return None


def _torch_ids(device: Any) -> tuple[int, str | None]:
    """(index, UUID) torch gives ``device`` (a ``torch.device`` or an int)."""
    index = device if isinstance(device, int) else getattr(device, "index", None)
    try:
        import torch

        if index is None:
            index = torch.cuda.current_device()
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    except Exception:  # noqa: BLE001 - no CUDA here (tests), or an old torch
        return int(index or 0), None
    return int(index), None if uuid is None else str(uuid)


class GpuSampler:
    """The latest NVML reading of one GPU, refreshed every ``interval_s`` on a daemon thread."""

    def __init__(self, nvml: Any, handle: Any, interval_s: float) -> None:
        self._nvml = nvml
        self._handle = handle
        self.interval_s = interval_s
        self.latest: dict[str, float | None] = {}
        self._read()
        self._gate = threading.Lock()
        self._gate.acquire()  # released by close(): the thread's timed wait then succeeds
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="trainmedic-gpu", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        nv, h = self._nvml, self._handle
        reading: dict[str, float | None] = {}
        for name, get in (
            ("gpu_util", lambda: float(nv.nvmlDeviceGetUtilizationRates(h).gpu)),
            ("gpu_sm_clock_mhz", lambda: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))),
            ("gpu_power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
            ("gpu_temp_c", lambda: float(nv.nvmlDeviceGetTemperature(
                h, nv.NVML_TEMPERATURE_GPU))),
            ("gpu_throttle_reasons", lambda: float(_throttle_reasons(nv, h))),
        ):
            try:
                reading[name] = get()
            except Exception:  # noqa: BLE001 - a field this GPU or driver does not report
                reading[name] = None
        self.latest = {k: v for k, v in reading.items() if v is not None}

    def _run(self) -> None:
        wait, interval = self._gate.acquire, self.interval_s
        while not wait(True, interval):
            self._read()

    def close(self) -> None:
        """Stop the thread (idempotent)."""
        if not self._closed:
            self._closed = True
            self._gate.release()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)


def _throttle_reasons(nv: Any, handle: Any) -> int:
    """NVML's bitmask of why the clocks are held down (0: none). Newer drivers name it
    ``ClocksEventReasons``, older ones ``ClocksThrottleReasons``."""
    get = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if get is None:
        get = nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(get(handle))
