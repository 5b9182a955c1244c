"""The JSON documents of ``trainmedic memory ... --json`` (schema ``trainmedic.memory/1``).

Every document has ``schema``, ``kind`` (``plan``, ``measure``, ``kv``, ``oom-message`` or
``oom-snapshot``) and ``source``; the rest is the ledger's, the fit's or the explanation's own
JSON. docs/memory.md lists the fields.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from trainmedic.memory.estimate import MeasuredEstimate, MemoryEstimate, PlanEstimate
from trainmedic.memory.ledger import SCHEMA

if TYPE_CHECKING:
    from trainmedic.memory.kv import KvPlan
    from trainmedic.memory.oom import OomExplanation, OomSource
    from trainmedic.memory.spec import ModelSpec

__all__ = ["estimate_doc", "kv_doc", "oom_doc", "model_doc", "dumps"]


def dumps(doc: dict[str, Any]) -> str:
    """The document as printed: indented, keys in the order they were built."""
    return json.dumps(doc, indent=2, sort_keys=False)


def model_doc(spec: ModelSpec) -> dict[str, Any]:
    """The model's shape, as the plan and kv documents carry it."""
    return {"family": spec.family, "arch": spec.arch, "num_params": spec.num_params,
            "hidden_size": spec.hidden_size, "num_layers": spec.num_layers,
            "num_heads": spec.num_heads, "num_kv_heads": spec.num_kv_heads,
            "vocab_size": spec.vocab_size}


def estimate_doc(estimate: MemoryEstimate) -> dict[str, Any]:
    """The document of ``memory plan`` or ``memory measure``, by the estimate's kind."""
    if isinstance(estimate, PlanEstimate):
        return _plan_doc(estimate)
    return _measured_doc(estimate)


def _plan_doc(estimate: PlanEstimate) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema": SCHEMA, "kind": "plan", "source": estimate.source,
                           "model": model_doc(estimate.spec), "config": asdict(estimate.config)}
    doc.update(estimate.ledger.to_json())
    result = estimate.fit
    if result is not None:
        doc.update({
            "gpu_memory_bytes": result.gpu_bytes, "usable_bytes": result.usable_bytes,
            "margin": result.margin, "fits": result.fits,
            "max_micro_batch": result.max_micro_batch,
            "interventions": [i.to_json() for i in result.interventions],
            "combined": [i.to_json() for i in result.combined],
        })
    return doc


def _measured_doc(estimate: MeasuredEstimate) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema": SCHEMA, "kind": "measure", "source": estimate.source,
                           **estimate.ledger.to_json()}
    doc["notes"] = [*estimate.notes, *doc["notes"]]
    if estimate.gpu is not None:
        doc.update({"gpu_memory_bytes": estimate.gpu.memory_bytes,
                    "usable_bytes": estimate.usable_bytes, "margin": estimate.margin,
                    "fits": estimate.fits})
    return doc


def kv_doc(result: KvPlan, *, spec: ModelSpec, source: str) -> dict[str, Any]:
    """The document of ``memory kv``."""
    return {"schema": SCHEMA, "kind": "kv", "source": source, "model": model_doc(spec),
            **result.to_json()}


def oom_doc(explanation: OomExplanation, *, kind: OomSource, source: str) -> dict[str, Any]:
    """The document of ``memory oom``; ``kind`` says whether a message or a snapshot was read."""
    return {"schema": SCHEMA, "kind": f"oom-{kind}", "source": source, **explanation.to_json()}
