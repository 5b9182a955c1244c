"""The levers that would shorten a step, ranked by what they can gain at most.

Each lever targets one component of the step. Removing a component whose share is ``s``
speeds the step up by at most ``1 / (1 - s)`` (Amdahl's law): that bound is the expected
gain a lever is ranked by, labelled *estimated*: a lever rarely removes all of its
component, and ``trainmedic try RECIPE --lever NAME`` measures what it really does. Each
lever also says what it displaces (memory, cores, compile time, numerics) and whether it
changes the optimization's semantics (then a before/after must compare the loss too).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmedic.profile.breakdown import Breakdown

__all__ = ["Lever", "rank_levers"]


@dataclass(frozen=True)
class Lever:
    """One intervention on one component of the step."""

    name: str
    """The lever, as ``trainmedic try --lever`` names it where it can run it."""

    action: str
    target: str
    """The component it shortens."""

    target_share: float
    max_speedup: float
    """``1 / (1 - share)``: the step's speed-up if the component vanished (estimated)."""

    displaced_cost: str
    changes_semantics: bool
    evidence: str


#: component -> (lever, action, displaced cost, changes semantics), most direct first.
_LEVERS: dict[str, tuple[tuple[str, str, str, bool], ...]] = {
    "data_wait": (
        ("num_workers", "load batches in worker processes (DataLoader num_workers > 0, "
         "persistent_workers=True)", "one CPU core and a copy of the dataset object per "
         "worker", False),
        ("prefetch", "prefetch more batches per worker (prefetch_factor) and pin host memory "
         "(pin_memory=True, .to(device, non_blocking=True))", "pinned host memory", False),
        ("offline_preprocessing", "move decoding and augmentation out of the loop (pre-tokenize, "
         "pre-resize, a faster storage format)", "disk space and a preprocessing job", False),
    ),
    "host_python": (
        ("compile", "torch.compile the model (fuses ops, removes per-op Python dispatch)",
         "compile time at start and after shape changes; graph breaks hide gains", False),
        ("micro_batch", "a larger micro-batch with fewer accumulation steps (same global "
         "batch): fixed Python cost per step spread over more samples", "activation memory",
         False),
        ("cuda_graphs", "capture the step in a CUDA graph (GPU only; static shapes)",
         "static shapes and memory held by the graph", False),
    ),
    "gc": (
        ("gc_freeze", "gc.freeze() after setup and a higher gc threshold (gc.set_threshold), "
         "or collect at a fixed step interval", "host memory held longer", False),
    ),
    "sync": (
        ("remove_syncs", "stop reading tensor values every step at the call sites listed "
         "(.item(), float(t), if t:); log every N steps or accumulate on the device",
         "less frequent logs", False),
    ),
    "exposed_comm": (
        ("grad_accum_no_sync", "accumulate gradients over micro-batches under DDP no_sync "
         "(one all-reduce per optimizer step)", "none at the same global batch", False),
        ("overlap", "let collectives overlap backward (DDP bucket_cap_mb, FSDP prefetch) and "
         "remove blocking collectives from the step (metrics all-reduced every N steps)",
         "memory for communication buckets", False),
        ("compression", "communicate in bf16 (DDP comm hook bf16_compress_hook)",
         "gradient precision", True),
    ),
    "optimizer_ops": (
        ("fused_optimizer", "a fused or foreach optimizer (AdamW(fused=True) on GPU, "
         "foreach=True)", "a little extra memory for foreach temporaries", False),
    ),
    "model_ops": (
        ("bf16", "autocast to bf16 (tensor cores on GPU; AMX/AVX512-BF16 on recent CPUs)",
         "numerics: check the loss matches fp32 within tolerance", True),
        ("compile", "torch.compile to fuse elementwise and normalization ops",
         "compile time", False),
        ("channels_last", "channels_last memory format for convolution models",
         "none for convs; a copy for other layers", False),
    ),
}


def rank_levers(b: Breakdown, *, min_share: float = 0.05,
                exclude: frozenset[str] = frozenset()) -> list[Lever]:
    """Levers for every component of at least ``min_share`` of the step, largest possible
    gain first; within a component, the most direct lever first. ``exclude``: levers that do
    not apply to this run (already on, or no such layer)."""
    shares: dict[str, tuple[float, str]] = {}
    for c in b.components:
        key = "model_ops" if c.name in ("forward_ops", "backward_ops", "device_wait") \
            else c.name
        prev, ev = shares.get(key, (0.0, ""))
        shares[key] = (prev + c.share, (ev + "; " if ev else "") +
                       f"{c.name} {c.share:.0%} ({c.seconds_per_step * 1e3:.1f} ms/step, "
                       f"{c.basis})")
    out: list[Lever] = []
    for key, (share, evidence) in shares.items():
        if share < min_share or key not in _LEVERS:
            continue
        if key == "model_ops" and b.matmul_share_of_ops is not None:
            evidence += f"; {b.matmul_share_of_ops:.0%} of op time in matmul-class ops"
        for name, action, cost, semantics in _LEVERS[key]:
            if name in exclude:
                continue
            out.append(Lever(name=name, action=action, target=key, target_share=share,
                             max_speedup=1.0 / max(1e-9, 1.0 - min(share, 0.999)),
                             displaced_cost=cost, changes_semantics=semantics,
                             evidence=evidence))
    out.sort(key=lambda lv: -lv.target_share)
    seen: set[str] = set()
    ranked = []
    for lv in out:  # a lever that serves two components is listed where it gains most
        if lv.name not in seen:
            seen.add(lv.name)
            ranked.append(lv)
    return ranked
