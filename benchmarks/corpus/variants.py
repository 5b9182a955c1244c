"""The third batch of runs: every declared run again with another seed and, where the fault
does not depend on it, another log format; half of them form a second never-tuned split.

Why: the first holdout (53 runs) has been scored several times, and its misses are known by
class, so it is no longer a clean estimate. This batch draws a new sample of the same
distribution (new data draws, new inits, new naming habits) and splits it, stratified by
fault kind and by hash of the run name, into ``tune`` runs (more data to develop on) and
``holdout2`` runs that nobody opens: only their totals are reported.

Formats move only where the fault's evidence survives every format of the pool: runs on two
ranks stay per-rank CSVs, HF's NaN filter stays in HF, per-epoch (Keras) logs stay per-epoch,
timing and memory faults stay in formats that log step and data time and RSS, and the faults
whose evidence is in one writer's columns (loss scale, per-layer statistics, appended or
resumed runs, NaN evaluations, regression targets at tiny scales) keep their format.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable

SEED_OFFSET = 20
"""Variant seeds are the original's plus this (originals use 0-12)."""

STEP_FORMATS = ("tm_csv", "tm_jsonl", "units_csv", "ns_jsonl", "lightning", "wandb_csv",
                "wandb_jsonl", "hf", "tensorboard", "print_log", "mlflow")
TIMING_FORMATS = ("tm_csv", "tm_jsonl", "units_csv", "ns_jsonl", "wandb_csv", "wandb_jsonl")
EPOCH_FORMATS = ("keras_csv", "keras_json")
TIMING_FAULTS = {"slow_loader", "periodic_stall", "throughput_regression", "memory_growth"}
FIXED_FORMAT_FAULTS = {"nan_filtered", "loss_scale_collapse", "appended_runs", "resume_repeat",
                       "eval_nan", "straggler"}
#: Keys the writers or ``add`` derive from the format: not copied into the variant.
DERIVED = {"name", "format", "seed", "split"}


def _h(s: str) -> int:
    return int(hashlib.sha1(s.encode()).hexdigest(), 16)


def variant_format(sp: dict) -> str:
    """The variant's log format: another one from the pool the fault allows (by hash)."""
    fmt = sp["format"]
    if (sp.get("ranks") == 2 or sp["fault"] in FIXED_FORMAT_FAULTS or sp.get("layer_stats")
            or sp["family"] == "reg" or fmt == "fairseq"):
        return fmt
    pool = (EPOCH_FORMATS if fmt in EPOCH_FORMATS else
            TIMING_FORMATS if sp["fault"] in TIMING_FAULTS or sp.get("log_rss") else
            STEP_FORMATS)
    others = [f for f in pool if f != fmt] or [fmt]
    return others[_h(sp["name"]) % len(others)]


def extend(specs: list[dict], add: Callable[..., None], names: list[str]) -> None:
    """Append one variant of every spec now in ``specs`` (``add`` declares it, ``names``
    collects the new names) with its split drawn: within each fault kind (healthy runs: each
    family), ordered by hash of the variant's name, the first half go to ``holdout2``."""
    base = list(specs)
    drawn: dict[str, list[dict]] = defaultdict(list)
    for sp in base:
        kw = {k: v for k, v in sp.items() if k not in DERIVED and k not in ("family", "fault")}
        parts = sp["name"].split("-")   # family-fault-[tag-]format-sSEED
        tag = parts[2] if len(parts) > 4 else ""
        before = len(specs)
        add(sp["family"], sp["fault"], variant_format(sp), sp["seed"] + SEED_OFFSET, tag,
            **kw)
        assert len(specs) == before + 1
        new = specs[-1]
        names.append(new["name"])
        key = f"fault:{new['fault']}" if new["fault"] != "none" else f"healthy:{new['family']}"
        drawn[key].append(new)
    for _key, group in sorted(drawn.items()):
        group.sort(key=lambda s: hashlib.sha1(s["name"].encode()).hexdigest())
        k = len(group) // 2 if len(group) > 1 else _h(group[0]["name"]) % 2
        for i, s in enumerate(group):
            s["split"] = "holdout2" if i < k else "tune"
