"""Training memory, before a GPU is touched: the per-GPU ledger, what fits, why a run OOMed.

``plan(spec, PlanConfig(...))`` is the analytic planner (every figure estimated);
``measure(factory, MeasureConfig(...))`` traces a real training step of any ``nn.Module`` on
fake tensors (every figure measured); both return a :class:`Ledger`.
``load_spec`` reads a Hugging Face ``config.json``; ``fit`` finds the largest micro-batch and
ranks the changes that make a plan fit; ``inference_plan`` sizes weights plus KV cache;
``parse_oom``/``explain_oom`` read a CUDA OOM message.

Importing this package does not import torch: measure mode imports it when called.
"""

from __future__ import annotations

from typing import Any

from trainmedic.memory.families import load_spec, spec_from_config
from trainmedic.memory.fit import FitResult, fit, max_micro_batch
from trainmedic.memory.kv import inference_plan, kv_cache_bytes
from trainmedic.memory.ledger import CATEGORIES, Ledger
from trainmedic.memory.oom import explain_oom, parse_oom
from trainmedic.memory.planner import PlanConfig, plan
from trainmedic.memory.spec import ModelSpec

__all__ = [
    "CATEGORIES",
    "FitResult",
    "Ledger",
    "MeasureConfig",
    "measure",
    "ModelSpec",
    "PlanConfig",
    "explain_oom",
    "fit",
    "inference_plan",
    "kv_cache_bytes",
    "load_spec",
    "max_micro_batch",
    "parse_oom",
    "plan",
    "spec_from_config",
]


def __getattr__(name: str) -> Any:
    # Lazy: measure mode needs torch. The module is ``measurement`` (a noun), so the function
    # ``trainmedic.memory.measure`` is not shadowed by a submodule of the same name.
    if name in ("MeasureConfig", "measure"):
        import importlib

        return getattr(importlib.import_module("trainmedic.memory.measurement"), name)
    raise AttributeError(f"module 'trainmedic.memory' has no attribute {name!r}")
