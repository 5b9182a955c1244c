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


SEVERITY_SEED_OFFSET = 40
"""Severity variants' seeds are the original's plus this."""


def _severity(sp: dict) -> dict | None:
    """Overrides that change how hard the fault hits (milder or harsher than the original),
    or None to leave the fault out of this batch. A detector tuned to one severity misses
    the next; these runs are where that shows."""
    f, lr = sp["fault"], sp.get("lr", 1e-3)
    steps = sp.get("steps", 200)
    harsh = _h(sp["name"]) % 2 == 0   # half the runs harsher, half milder
    shift = max(5, steps // 12)
    table: dict[str, dict] = {
        "lr_high": dict(lr=lr * (3.0 if harsh else 0.3)),
        "lr_low": dict(lr=3e-7 if harsh else 2e-6),
        "no_zero_grad": dict(lr=lr * (2.0 if harsh else 0.5)),
        "double_softmax": dict(lr=lr * (3.0 if harsh else 0.5)),
        "shuffled_labels": dict(lr=lr * (3.0 if harsh else 0.5)),
        "wd_high": dict(wd=100.0 if harsh else 10.0),
        "bn_eval": dict(lr=lr * (2.0 if harsh else 0.5)),
        "class_sorted": dict(lr=lr * (2.0 if harsh else 0.5)),
        "accum_not_divided": dict(accum=16 if harsh else 4),
        "summed_loss": dict(lr=lr * (2.0 if harsh else 0.3)),
        "frozen": dict(lr=lr * (3.0 if harsh else 0.5)),
        "bad_init": dict(init_scale=sp.get("init_scale", 100.0) * (3.0 if harsh else 0.3)),
        "vanishing": dict(depth=sp.get("depth", 16) + (6 if harsh else -4)),
        "lr_rising": dict(lr=lr * (2.0 if harsh else 0.5)),
        "warmup_diverge": dict(lr=lr * (2.0 if harsh else 0.6),
                               warmup=int(sp.get("warmup", 150) * 0.7)),
        "poisoned_batches": dict(spike_steps=[s + shift for s in sp.get("spike_steps", [])
                                              if s + shift < steps]),
        "slow_loader": dict(load_sleep=sp.get("load_sleep", 0.006) * (2.0 if harsh else 0.5)),
        "periodic_stall": dict(stall_s=(sp.get("stall_s") or 0.2) * (2.0 if harsh else 0.4)),
        "straggler": dict(straggle_s=sp.get("straggle_s", 0.01) * (2.0 if harsh else 0.5),
                          straggle_at=int(sp.get("straggle_at", steps // 2) * 0.7)),
        "throughput_regression": dict(straggle_at=int(sp.get("straggle_at", steps // 2) *
                                                      (1.3 if harsh else 0.6))),
        "memory_growth": dict(batch=max(16, sp.get("batch", 64) // 2)),
        "overfitting": dict(n_train=sp.get("n_train", 64) * (1 if harsh else 2),
                            steps=int(steps * (1.5 if harsh else 1.0))),
        "eval_nan": dict(nan_evals=[e + 2 for e in sp.get("nan_evals", [])]),
        "tiny_loss_jump": dict(spike_steps=[s + shift for s in sp.get("spike_steps", [])
                                            if s + shift < steps]),
        "appended_runs": dict(steps=int(steps * 0.7)),
        "resume_repeat": dict(crash_at=sp.get("crash_at", 200) - shift),
        "optimizer_copy": dict(steps=int(steps * 1.5)),
        "nan_filtered": dict(lr=lr * 0.5),
        "loss_scale_collapse": dict(anchor_at=sp.get("anchor_at", 60) + shift),
        "dead_relu": dict(opt="sgd" if sp.get("opt") != "sgd" else "adam",
                          lr=0.05 if sp.get("opt") != "sgd" else 1e-3),
        "sched_per_batch": dict(lr=lr * (2.0 if harsh else 0.5)),
    }
    return table.get(f)


def extend_severity(specs: list[dict], add: Callable[..., None], names: list[str]) -> None:
    """Append, for every fault run now in ``specs`` that is not itself a variant, one run with
    the fault's severity changed (``_severity``), seed + 40 and the variant's format rule: all
    in ``tune``."""
    base = [sp for sp in specs if sp["fault"] != "none" and sp["seed"] < SEED_OFFSET]
    for sp in base:
        over = _severity(sp)
        if over is None:
            continue
        kw = {k: v for k, v in sp.items() if k not in DERIVED and k not in ("family", "fault")}
        kw.update(over)
        kw["story"] = f"{sp.get('story', '')} [severity variant: {over}]"
        kw["split"] = "tune"
        parts = sp["name"].split("-")
        tag = "sev" + (parts[2] if len(parts) > 4 else "")
        add(sp["family"], sp["fault"], variant_format(sp), sp["seed"] + SEVERITY_SEED_OFFSET,
            tag, **kw)
        names.append(specs[-1]["name"])


HEALTHY_SEED_OFFSETS = (60, 80, 100, 120)
"""Seeds of the extra healthy runs: the original's plus each of these."""


def extend_healthy(specs: list[dict], add: Callable[..., None], names: list[str]) -> None:
    """Append, for every original healthy run, one more run per offset in
    HEALTHY_SEED_OFFSETS (new seed, a format drawn as ``variant_format`` does but keyed by the
    offset too): all in ``tune``. No healthy run may be flagged, and a handful per family is
    too few to show what a detector mistakes for a fault."""
    base = [sp for sp in specs if sp["fault"] == "none" and sp["seed"] < SEED_OFFSET]
    for off in HEALTHY_SEED_OFFSETS:
        for sp in base:
            kw = {k: v for k, v in sp.items()
                  if k not in DERIVED and k not in ("family", "fault")}
            kw["split"] = "tune"
            parts = sp["name"].split("-")
            tag = f"{parts[2] if len(parts) > 4 else ''}h{off}"
            fmt = variant_format({**sp, "name": f"{sp['name']}#{off}"})
            add(sp["family"], "none", fmt, sp["seed"] + off, tag, **kw)
            names.append(specs[-1]["name"])
