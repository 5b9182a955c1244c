"""What fits: the largest micro-batch, and the smallest changes that make a plan fit.

The search is analytic: the planner is monotone in the micro-batch, so a binary search over the
plan (microseconds per evaluation) finds the largest micro-batch under the usable memory, where
accelerate's ``find_executable_batch_size`` retries real steps at 0.9× per OOM.

Interventions are tried one at a time from the user's configuration; each reports the memory it
saves, whether the plan then fits, its throughput cost (an estimate with its source) and whether
it changes what is optimized (the recipe's contract: same model, data, objective, optimizer,
precision and batch semantics).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from trainmedic.errors import ConfigError
from trainmedic.memory.ledger import Ledger
from trainmedic.memory.planner import PlanConfig, plan
from trainmedic.memory.spec import ModelSpec

__all__ = [
    "DEFAULT_MARGIN",
    "Intervention",
    "FitResult",
    "usable_bytes",
    "max_micro_batch",
    "fit",
]

#: Share of the GPU kept free for the caching allocator's fragmentation and for what the plan
#: does not model (an estimate; PyTorch's allocator typically reserves a few percent above the
#: allocated peak, more with many odd-sized tensors).
DEFAULT_MARGIN = 0.10
_MAX_BATCH = 1 << 20


def usable_bytes(gpu_bytes: int, margin: float = DEFAULT_MARGIN) -> int:
    """Bytes a plan may peak at on a GPU of ``gpu_bytes`` with the safety ``margin``."""
    if gpu_bytes <= 0:
        raise ConfigError(f"gpu_memory: got {gpu_bytes} bytes, expected a positive size")
    if not 0 <= margin < 1:
        raise ConfigError(f"margin: got {margin}, expected a fraction in [0, 1)")
    return int(gpu_bytes * (1 - margin))


def max_micro_batch(spec: ModelSpec, cfg: PlanConfig, limit_bytes: int) -> int:
    """Largest micro-batch whose planned peak is at most ``limit_bytes`` (0 if none fits)."""

    def peak(b: int) -> int:
        return plan(spec, replace(cfg, batch_size=b)).peak_bytes

    if peak(1) > limit_bytes:
        return 0
    lo, hi = 1, 2
    while hi <= _MAX_BATCH and peak(hi) <= limit_bytes:
        lo, hi = hi, hi * 2
    hi = min(hi, _MAX_BATCH + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if peak(mid) <= limit_bytes:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(kw_only=True, frozen=True)
class Intervention:
    """One change to the configuration, with what it saves and what it costs."""

    action: str
    """What to change, as a user would do it."""
    config: PlanConfig
    """The configuration after the change."""
    peak_bytes: int
    """Planned peak after the change (estimated)."""
    saved_bytes: int
    """Peak before minus peak after (estimated)."""
    fits: bool | None
    """Whether the changed plan fits the GPU (None without a GPU size)."""
    throughput_cost: float
    """Estimated fractional slowdown of a step (0.05 = 5% slower; negative = faster)."""
    cost_note: str
    """Where the cost estimate comes from."""
    changes_semantics: str | None
    """What the change does to optimization (None: same updates up to rounding)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "peak_bytes": self.peak_bytes,
            "saved_bytes": self.saved_bytes,
            "fits": self.fits,
            "throughput_cost": self.throughput_cost,
            "throughput_cost_basis": "estimated",
            "cost_note": self.cost_note,
            "changes_semantics": self.changes_semantics,
        }


@dataclass(kw_only=True, frozen=True)
class FitResult:
    """The plan against a GPU size: does it fit, how large a micro-batch would, and what helps."""

    ledger: Ledger
    gpu_bytes: int
    usable_bytes: int
    margin: float
    fits: bool
    max_micro_batch: int
    interventions: tuple[Intervention, ...]
    combined: tuple[Intervention, ...]
    """Cheapest interventions applied cumulatively until the plan fits (empty if it already
    does, or if even all of them together do not)."""


_Candidate = tuple[str, Callable[[PlanConfig], PlanConfig | None], float, str, str | None]


def _candidates(spec: ModelSpec, cfg: PlanConfig) -> list[_Candidate]:
    out: list[_Candidate] = []

    def when(cond: bool, change: dict[str, Any]) -> Callable[[PlanConfig], PlanConfig | None]:
        return lambda c: replace(c, **change) if cond else None

    out.append((
        "use SDPA/flash attention instead of eager (attn_implementation='sdpa')",
        when(cfg.attention == "eager", {"attention": "sdpa"}), -0.05,
        "fused attention does not store the s² scores and is usually faster (Dao et al. 2022)",
        None))
    out.append((
        "recompute the attention core (selective activation recomputation)",
        when(cfg.recompute == "none" and cfg.attention == "eager", {"recompute": "selective"}),
        0.03, "Korthikanti et al. 2022 report 2-4% extra compute for selective recomputation",
        None))
    out.append((
        "train in bf16 mixed precision (torch.autocast)",
        when(cfg.precision == "fp32", {"precision": "bf16-mixed"}), -0.3,
        "tensor-core matmuls; usually faster, not slower",
        "numerics: matmuls in bf16 (8-bit mantissa); loss curves typically match fp32"))
    out.append((
        "use 8-bit Adam (bitsandbytes AdamW8bit)",
        when(cfg.optimizer in ("adam", "adamw"), {"optimizer": "adam-8bit"}), 0.01,
        "block-wise quantized states; step time nearly unchanged (Dettmers et al. 2022)",
        "optimizer: moments stored in 8 bits (block-wise quantized)"))
    zero_next = {"single": None, "ddp": "zero1", "zero1": "zero2", "zero2": "zero3"}
    nxt = zero_next.get(cfg.strategy)
    if nxt is not None and cfg.gpus // (cfg.tp * cfg.pp) > 1:
        cost = 0.1 if nxt == "zero3" else 0.0
        out.append((
            f"shard with {nxt.upper().replace('ZERO', 'ZeRO-')} (DeepSpeed) or the FSDP "
            f"equivalent", when(True, {"strategy": nxt}), cost,
            "ZeRO-1/2 move the same bytes as DDP; ZeRO-3 moves 1.5x (Rajbhandari et al. 2020 §7)",
            None))
    if cfg.strategy in ("zero3", "fsdp", "fsdp-hybrid") and cfg.offload == "none":
        out.append((
            "offload optimizer states to CPU (ZeRO-Offload)",
            when(True, {"offload": "optimizer"}), 0.3,
            "the optimizer step runs on the CPU over PCIe (Ren et al. 2021); cost varies widely",
            None))
    elif cfg.strategy.startswith("zero") and cfg.offload == "none":
        out.append((
            "offload optimizer states to CPU (ZeRO-Offload)",
            when(True, {"offload": "optimizer"}), 0.3,
            "the optimizer step runs on the CPU over PCIe (Ren et al. 2021); cost varies widely",
            None))
    out.append((
        "use the fused optimizer (torch.optim.AdamW(..., fused=True))",
        when(cfg.optimizer in ("adam", "adamw") and cfg.optimizer_impl in ("default", "foreach")
             and cfg.device_profile == "cuda", {"optimizer_impl": "fused"}), -0.02,
        "one kernel per step without the foreach implementation's full-size sqrt scratch",
        None))
    out.append((
        "recompute every layer in backward (full activation checkpointing)",
        when(cfg.recompute != "full", {"recompute": "full"}), 0.33,
        "one extra forward per step: about a third more compute (Korthikanti et al. 2022 §5)",
        None))
    if cfg.gpus > 1 and cfg.tp == 1 and cfg.gpus % 2 == 0 and spec.num_heads % 2 == 0:
        out.append((
            "tensor parallel over 2 GPUs of a node (with sequence parallelism)",
            when(True, {"tp": 2, "sequence_parallel": True}), 0.1,
            "two all-gathers and two reduce-scatters per layer; NVLink keeps them to ~5-15%",
            None))
    return out


def _more_gpus_intervention(
    spec: ModelSpec, cfg: PlanConfig, limit: int, before: int
) -> Intervention | None:
    """The fewest GPUs (a power of two, up to 1024) over which FSDP/ZeRO-3 sharding fits."""
    if cfg.gpus != 1 or cfg.tp != 1 or cfg.pp != 1:
        return None
    samples = cfg.batch_size * cfg.grad_accum
    n = 2
    while n <= 1024:
        new = _spread(replace(cfg, gpus=n, strategy="fsdp"), samples)
        after = plan(spec, new).peak_bytes
        if after <= limit:
            kept = new.batch_size * new.grad_accum * n == samples
            return Intervention(
                action=f"shard over {n} GPUs with FSDP (FULL_SHARD) or ZeRO-3"
                + (f", micro-batch {new.batch_size} with gradient accumulation "
                   f"x{new.grad_accum} (same {samples} samples per optimizer step)"
                   if kept else ""),
                config=new, peak_bytes=after, saved_bytes=before - after, fits=True,
                throughput_cost=0.1,
                cost_note="ZeRO-3/FSDP move 1.5x the bytes of DDP (Rajbhandari et al. 2020 §7);"
                " mostly overlapped with compute",
                changes_semantics=None if kept else
                f"{n} GPUs take {n * samples} samples per optimizer step, not {samples} (fewer "
                f"than {n} samples per step cannot be split over {n} GPUs): retune the "
                f"learning rate for the larger batch",
            )
        n *= 2
    return None


def _spread(cfg: PlanConfig, samples: int) -> PlanConfig:
    """``cfg`` over its data-parallel GPUs with ``samples`` per optimizer step: the largest
    micro-batch (at most the current one, with at most the current accumulation) that keeps
    them; unchanged when none does."""
    for b in range(cfg.batch_size, 0, -1):
        if samples % (cfg.gpus * b) == 0 and samples // (cfg.gpus * b) <= cfg.grad_accum:
            return replace(cfg, batch_size=b, grad_accum=samples // (cfg.gpus * b))
    return cfg


def _micro_batch_intervention(
    spec: ModelSpec, cfg: PlanConfig, limit: int, before: int
) -> Intervention | None:
    """A smaller micro-batch with more accumulation and the same samples per optimizer step.

    The micro-batch is the largest *divisor* of the current one that fits, so the global batch
    stays exactly what it was: rounding it up would change the optimization (and the learning
    rate it was tuned for), which a memory fix must not do silently.
    """
    if cfg.batch_size <= 1:
        return None
    # Searched with accumulation on: it keeps the gradients alive through the later forwards.
    accumulating = replace(cfg, batch_size=1, grad_accum=max(cfg.grad_accum, 2))
    largest = max_micro_batch(spec, accumulating, limit)
    b = max((d for d in range(1, min(largest, cfg.batch_size - 1) + 1)
             if cfg.batch_size % d == 0), default=0)
    if b == 0:
        return None
    accum = cfg.batch_size // b * cfg.grad_accum
    new = replace(cfg, batch_size=b, grad_accum=accum)
    after = plan(spec, new).peak_bytes
    return Intervention(
        action=f"micro-batch {b} with gradient accumulation x{accum} "
        f"(same {cfg.batch_size * cfg.grad_accum} samples per optimizer step)",
        config=new, peak_bytes=after, saved_bytes=before - after, fits=after <= limit,
        throughput_cost=0.05,
        cost_note="smaller matmuls use the GPU less fully; a few percent at moderate sizes",
        changes_semantics=None,
    )


def fit(
    spec: ModelSpec,
    cfg: PlanConfig,
    *,
    gpu_bytes: int,
    margin: float = DEFAULT_MARGIN,
) -> FitResult:
    """Plan ``cfg`` against a GPU of ``gpu_bytes`` and rank the interventions if it does not fit."""
    limit = usable_bytes(gpu_bytes, margin)
    ledger = plan(spec, cfg)
    fits = ledger.peak_bytes <= limit
    best = max_micro_batch(spec, cfg, limit)
    interventions: list[Intervention] = []
    if not fits:
        for extra in (_micro_batch_intervention(spec, cfg, limit, ledger.peak_bytes),
                      _more_gpus_intervention(spec, cfg, limit, ledger.peak_bytes)):
            if extra is not None:
                interventions.append(extra)
        for action, change, cost, note, semantics in _candidates(spec, cfg):
            new = change(cfg)
            if new is None:
                continue
            after = plan(spec, new).peak_bytes
            if after >= ledger.peak_bytes:
                continue
            interventions.append(Intervention(
                action=action, config=new, peak_bytes=after,
                saved_bytes=ledger.peak_bytes - after, fits=after <= limit,
                throughput_cost=cost, cost_note=note, changes_semantics=semantics))
        # Those that fit alone first, cheapest first; then the rest by bytes saved.
        interventions.sort(key=lambda i: (not i.fits, i.throughput_cost if i.fits else 0,
                                          -i.saved_bytes))
    combined = _combine(spec, cfg, limit, ledger.peak_bytes) if not fits else ()
    return FitResult(
        ledger=ledger, gpu_bytes=gpu_bytes, usable_bytes=limit, margin=margin, fits=fits,
        max_micro_batch=best, interventions=tuple(interventions), combined=combined,
    )


def _combine(spec: ModelSpec, cfg: PlanConfig, limit: int, before: int) -> tuple[
    Intervention, ...
]:
    """Apply the cheapest memory-saving changes one after another until the plan fits.

    Two passes over the changes, cheapest first: a change that did not apply at first (a smaller
    micro-batch when not even one sample fit) may apply once others have made room. A change
    that leaves the peak where it is but frees activations is kept too: the peak may be the
    optimizer step now, and the activations once the states are sharded.
    """
    steps: list[Intervention] = []
    current, peak = cfg, before
    for _ in range(2):
        for option in _options(spec, current):
            if peak <= limit:
                return tuple(steps)
            step = option(current, peak, limit)
            if step is None or step.peak_bytes > peak:
                continue
            if step.peak_bytes == peak and not _frees_activations(spec, current, step.config):
                continue
            steps.append(step)
            current, peak = step.config, step.peak_bytes
    return tuple(steps) if peak <= limit else ()


def _frees_activations(spec: ModelSpec, before: PlanConfig, after: PlanConfig) -> bool:
    return (plan(spec, after).activations_total_bytes
            < plan(spec, before).activations_total_bytes)


_Option = Callable[[PlanConfig, int, int], Intervention | None]


def _options(spec: ModelSpec, cfg: PlanConfig) -> list[_Option]:
    """Every change as a function of the configuration it applies to, cheapest first."""

    def from_candidate(c: _Candidate) -> _Option:
        action, change, cost, note, semantics = c

        def apply(current: PlanConfig, peak: int, limit: int) -> Intervention | None:
            # Re-derive the candidate for the current configuration (its conditions may differ).
            for a2, ch2, *_ in _candidates(spec, current):
                if a2 == action:
                    new = ch2(current)
                    break
            else:
                return None
            if new is None:
                return None
            after = plan(spec, new).peak_bytes
            return Intervention(action=action, config=new, peak_bytes=after,
                                saved_bytes=peak - after, fits=after <= limit,
                                throughput_cost=cost, cost_note=note,
                                changes_semantics=semantics)
        return apply

    options: list[tuple[float, _Option]] = [(c[2], from_candidate(c))
                                            for c in _candidates(spec, cfg)]
    options.append((0.05, lambda c, p, lim: _micro_batch_intervention(spec, c, lim, p)))
    options.append((0.1, lambda c, p, lim: _more_gpus_intervention(spec, c, lim, p)))
    options.sort(key=lambda o: o[0])
    return [o for _, o in options]
