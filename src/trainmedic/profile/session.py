"""``profile_recipe``: one profiling session of a recipe, from the window to the ranked levers.

It counts the FLOPs of one step (:mod:`.flops`), captures a window (:mod:`.window`), splits
the step (:mod:`.breakdown`), ranks the levers (:mod:`.remedies`) and, with a peak, gives the
MFU. The peak is the **measured** achievable matmul rate on this device and dtype (a short
``trainmedic bench matmul`` sweep), with the datasheet figure beside it on a known GPU. Under
torch.distributed every rank profiles its own step and the reports are gathered, so rank 0
holds all of them (``ProfileReport.ranks``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainmedic.errors import ConfigError
from trainmedic.profile.breakdown import Breakdown, break_down
from trainmedic.profile.flops import FlopCount, count_flops, mfu
from trainmedic.profile.remedies import Lever, rank_levers
from trainmedic.profile.window import WindowConfig, capture

if TYPE_CHECKING:
    from trainmedic.recipe.recipe import Recipe

__all__ = ["ProfileConfig", "ProfileReport", "Cause", "profile_recipe", "PEAK_DTYPES"]

#: The matmul dtype whose peak a recipe's precision is measured against.
PEAK_DTYPES = {"fp32": "float32", "bf16-mixed": "bfloat16", "fp16-mixed": "float16"}


@dataclass(kw_only=True, frozen=True)
class ProfileConfig:
    """What to profile and against which peak."""

    steps: int = 8
    """Timed steps, and as many profiled steps alternating with them (>= 2)."""

    warmup: int = 3
    """Unprofiled steps first (>= 0)."""

    flops: bool = True
    """Count the FLOPs of one step (FlopCounterMode; one extra forward and backward)."""

    measure_peak: bool = True
    """Measure the achievable matmul FLOP/s here (a short sweep, a few seconds) for MFU."""

    peak_flops_per_s: float | None = None
    """Use this peak instead of measuring one (e.g. from ``trainmedic bench matmul``)."""

    min_share: float = 0.05
    """Causes and levers below this share of the step are not listed."""

    trace_path: str | None = None
    """Also write the profiler's Chrome trace here."""

    def __post_init__(self) -> None:
        for name, lo in (("steps", 2), ("warmup", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ConfigError(f"{name} must be an integer >= {lo}, got {v!r}")
        p = self.peak_flops_per_s
        if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float))
                              or not p > 0):
            raise ConfigError(f"peak_flops_per_s must be a number > 0, got {p!r}")
        if not 0 <= self.min_share < 1:
            raise ConfigError(f"min_share must be in [0, 1), got {self.min_share!r}")


@dataclass(frozen=True)
class Cause:
    """One named reason the step takes the time it does."""

    kind: str
    """``input``, ``communication``, ``sync``, ``host``, ``gc`` or ``value_reads``."""

    share: float
    seconds_per_step: float
    basis: str
    summary: str


@dataclass(kw_only=True)
class ProfileReport:
    """One rank's profile (and, on rank 0 of a distributed run, every rank's)."""

    recipe: str
    device: str
    precision: str
    rank: int = 0
    world_size: int = 1
    torch_threads: int = 1
    breakdown: Breakdown
    causes: list[Cause] = field(default_factory=list)
    sync_sites: dict[str, int] = field(default_factory=dict)
    """Tensor values read on the host per step, by call site."""

    sync_device_reads: int = 0
    top_ops: list[tuple[str, float, int]] = field(default_factory=list)
    """(op, self seconds per step, calls per step), largest first."""

    flops: FlopCount | None = None
    flops_per_step: float | None = None
    """Model FLOPs of one optimizer step on this rank: counted on the first micro-batch,
    times grad_accum (batches of other shapes are not counted), without the forward ops that
    activation checkpointing runs again in the backward. ``None`` when the recompute could
    not be told apart (then only ``hardware_flops_per_step`` is known)."""

    hardware_flops_per_step: float | None = None
    """Every FLOP the step ran, recompute included (HFU's numerator)."""

    achieved_flops_per_s: float | None = None
    peak_flops_per_s: float | None = None
    peak_basis: str = "not_checked"
    """``measured`` (a matmul sweep here), ``given`` (by the caller) or ``not_checked``."""

    peak_detail: str = ""
    datasheet_flops_per_s: float | None = None
    mfu: float | None = None
    """Model FLOPs over (step time x measured peak)."""

    mfu_datasheet: float | None = None
    hfu: float | None = None
    """Hardware FLOPs (recompute included) over (step time x measured peak); set when they
    differ from the model FLOPs or when the recompute could not be told apart."""

    levers: list[Lever] = field(default_factory=list)
    ranks: list[ProfileReport] = field(default_factory=list)
    """Every rank's report, on rank 0 of a distributed run (empty otherwise)."""

    notes: list[str] = field(default_factory=list)


def profile_recipe(recipe: Recipe, config: ProfileConfig | None = None, *,
                   name: str = "") -> ProfileReport:
    """Profile ``recipe`` and return the report. It trains the recipe's model for
    ``warmup + 3·steps + 1`` steps (and one more forward and backward to count FLOPs):
    profile a fresh recipe, not one you go on training."""
    import torch

    cfg = config or ProfileConfig()
    flop_count = _count_step_flops(recipe) if cfg.flops else None
    window = capture(recipe, WindowConfig(steps=cfg.steps, warmup=cfg.warmup,
                                          trace_path=cfg.trace_path))
    b = break_down(window)
    n_prof = max(1, len(window.steps))
    report = ProfileReport(
        recipe=name, device=window.device, precision=recipe.precision, rank=window.rank,
        world_size=window.world_size, torch_threads=window.torch_threads, breakdown=b,
        sync_sites=window.sync_sites, sync_device_reads=window.sync_device_reads,
        top_ops=[(op, t / n_prof, c // n_prof) for op, t, c in window.top_ops],
        flops=flop_count)
    if b.outlier_steps:
        report.notes.append(f"{b.outlier_steps} of {b.steps} timed steps were outside "
                            "0.5-1.5x the median step and left out of the split")
    if b.profiled_step_time_s:
        report.notes.append(f"under the profiler a step took {b.profiled_step_time_s * 1e3:.1f}"
                            f" ms (vs {b.step_time_s * 1e3:.1f} ms timed): its own cost, "
                            "not counted in the split")
    if flop_count is not None:
        report.hardware_flops_per_step = float(flop_count.total) * recipe.grad_accum
        if flop_count.model_flops is not None:
            report.flops_per_step = float(flop_count.model_flops) * recipe.grad_accum
            report.achieved_flops_per_s = report.flops_per_step / b.step_time_s
    _peak(report, cfg, window.device, recipe.precision, torch)
    report.causes = _causes(report, cfg.min_share)
    report.levers = rank_levers(b, min_share=cfg.min_share,
                                exclude=_not_applicable(recipe, window.device))
    return _gather(report)


def _not_applicable(recipe: Recipe, device: str) -> frozenset[str]:
    """Levers that cannot help this run: already on, or nothing for them to act on."""
    import torch

    out = set()
    if not any(isinstance(m, (torch.nn.Conv2d, torch.nn.Conv3d)) for m in recipe.model.modules()):
        out.add("channels_last")
    if recipe.precision != "fp32":
        out.add("bf16")
    if device != "cuda":
        out.add("cuda_graphs")
    defaults = recipe.optimizer.defaults
    if defaults.get("fused") or defaults.get("foreach"):
        out.add("fused_optimizer")
    if recipe.grad_accum == 1:
        out.add("micro_batch")
    return frozenset(out)


def _count_step_flops(recipe: Recipe) -> FlopCount | None:
    """FLOPs of one micro-batch's forward and backward, under the recipe's autocast."""
    from trainmedic.recipe.runner import autocast, device_type

    model = recipe.model
    try:
        batch = next(iter(recipe.data))
    except StopIteration:
        return None

    def one() -> None:
        with autocast(recipe.precision, device_type(model)):
            loss = recipe.loss_fn(model, batch)
        loss.backward()

    model.train()
    try:
        return count_flops(one)
    finally:
        recipe.optimizer.zero_grad(set_to_none=True)


def _peak(report: ProfileReport, cfg: ProfileConfig, device: str, precision: str,
          torch: Any) -> None:
    dtype = PEAK_DTYPES.get(precision, "float32")
    if cfg.peak_flops_per_s is not None:
        report.peak_flops_per_s = float(cfg.peak_flops_per_s)
        report.peak_basis = "given"
        report.peak_detail = "given with --peak"
    elif cfg.measure_peak:
        from trainmedic.bench.matmul import default_shapes, sweep_matmul

        # A quick sweep: seconds, not mamf-finder's minutes; `trainmedic bench matmul` runs
        # the full one, and its figure can be passed back as peak_flops_per_s.
        sweep = sweep_matmul(device=device, dtype=dtype,
                             shapes=default_shapes("cpu" if device == "cpu" else "cuda",
                                                   quick=True),
                             device_warmup_s=0.0 if device == "cpu" else 2.0)
        report.peak_flops_per_s = float(sweep.peak_flops_per_s)
        report.peak_basis = "measured"
        m, n, k = sweep.best_shape
        report.peak_detail = (f"achievable {dtype} matmul on {device}, best of a sweep "
                              f"(at {m}x{n}x{k}), {torch.get_num_threads()} threads")
    if device == "cuda":
        report.datasheet_flops_per_s = _datasheet(torch, dtype)
    steps = report.flops_per_step
    if steps and report.peak_flops_per_s:
        report.mfu = mfu(steps, report.breakdown.step_time_s, report.peak_flops_per_s)
    if steps and report.datasheet_flops_per_s:
        report.mfu_datasheet = mfu(steps, report.breakdown.step_time_s,
                                   report.datasheet_flops_per_s)
    hardware = report.hardware_flops_per_step
    if hardware and report.peak_flops_per_s and hardware != steps:
        report.hfu = mfu(hardware, report.breakdown.step_time_s, report.peak_flops_per_s)


def _datasheet(torch: Any, dtype: str) -> float | None:
    from trainmedic.errors import TrainmedicError
    from trainmedic.memory.gpus import lookup_gpu

    try:
        spec = lookup_gpu(torch.cuda.get_device_name())
    except TrainmedicError:
        return None
    tflops = spec.dense_tflops(dtype)
    return None if tflops is None else float(tflops) * 1e12


def _causes(report: ProfileReport, min_share: float) -> list[Cause]:
    b = report.breakdown
    out: list[Cause] = []
    texts = {
        "data_wait": ("input", "waiting for the next batch"),
        "exposed_comm": ("communication", "waiting in collectives"),
        "sync": ("sync", "waiting for the accelerator to hand back values"),
        "host_python": ("host", "Python between torch ops"),
        "gc": ("gc", "garbage-collection pauses"),
    }
    for c in b.components:
        if c.name not in texts or c.share < min_share:
            continue
        kind, what = texts[c.name]
        where = ""
        if c.name == "host_python" and b.host_by_phase:
            phase, secs = max(b.host_by_phase.items(), key=lambda kv: kv[1])
            where = f", most of it in {phase} ({secs * 1e3:.1f} ms/step)"
        out.append(Cause(kind, c.share, c.seconds_per_step, c.basis,
                         f"{c.share:.0%} of the step ({c.seconds_per_step * 1e3:.1f} ms) is "
                         f"{what}{where}"))
    if report.sync_sites:
        reads = sum(report.sync_sites.values())
        sites = ", ".join(f"{s} (x{k})" for s, k in list(report.sync_sites.items())[:3])
        cost = (f"{report.sync_device_reads} of them from the accelerator: host-device syncs"
                if report.sync_device_reads else
                "free on CPU, but each one is a host-device sync on a GPU")
        out.append(Cause("value_reads", b.share("sync"), b.share("sync") * b.step_time_s,
                         "estimated", f"{reads} tensor values read on the host per step at "
                         f"{sites}; {cost}"))
    out.sort(key=lambda c: -c.share)
    return out


def _gather(report: ProfileReport) -> ProfileReport:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return report
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, report)
    report.ranks = sorted(everyone, key=lambda r: r.rank)
    return report
