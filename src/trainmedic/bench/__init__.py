"""Benchmarks of what a training run can get from this machine: achievable matmul FLOP/s
(MAMF), storage write/read throughput, the data loader alone, and collectives (algbw/busbw).

Importing this package does not import torch; each name loads its module on first use
(``sweep_matmul`` and ``bench_data`` import torch when called).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["sweep_matmul", "MatmulSweep", "ShapeResult", "bench_storage", "StorageConfig",
           "StorageResult", "bench_data", "DataBenchConfig", "DataBench", "LoaderRow",
           "describe_machine", "Machine", "run_collectives", "CollectivesConfig",
           "CollectivesResult"]

_HOME = {
    "sweep_matmul": "matmul", "MatmulSweep": "matmul", "ShapeResult": "matmul",
    "bench_storage": "storage", "StorageConfig": "storage", "StorageResult": "storage",
    "bench_data": "data", "DataBenchConfig": "data", "DataBench": "data", "LoaderRow": "data",
    "describe_machine": "machine", "Machine": "machine",
    "run_collectives": "collectives", "CollectivesConfig": "collectives",
    "CollectivesResult": "collectives",
}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(f"trainmedic.bench.{_HOME[name]}"), name)
    raise AttributeError(f"module 'trainmedic.bench' has no attribute {name!r}")
