"""``trainmedic profile``: the report as terminal lines and as a JSON document.

Every figure carries its basis: *measured* (timed or counted here), *estimated* (a profiled
share applied to a timed part; an upper bound for a lever) or *not checked*.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainmedic.profile.config_flops import ConfigFlops
    from trainmedic.profile.session import ProfileReport

__all__ = ["profile_lines", "profile_doc", "config_flops_lines", "config_flops_doc",
           "SCHEMA"]

SCHEMA = "trainmedic.profile/1"


def _flops(x: float | None) -> str:
    if x is None:
        return "not checked"
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} FLOP"


def _ms(s: float) -> str:
    return f"{s * 1e3:.2f} ms"


def profile_lines(report: ProfileReport) -> list[str]:
    """The terminal report of one rank, then, on rank 0 of a distributed run, the ranks side
    by side."""
    r, b = report, report.breakdown
    head = f"profile: {r.recipe or 'recipe'} on {r.device}, {r.precision}"
    if r.world_size > 1:
        head += f", rank {r.rank} of {r.world_size}"
    lines = [head, f"  {r.torch_threads} torch threads; {b.steps} timed steps, "
             f"{b.profiled_steps} profiled"]
    lines.append(f"step time: {_ms(b.step_time_s)} median (measured; min {_ms(b.step_time_min_s)},"
                 f" max {_ms(b.step_time_max_s)})")
    lines.append(f"bottleneck: {b.bottleneck} - {b.bottleneck_evidence}")
    lines.append("")
    lines.append("where the step goes:")
    for c in b.components:
        if c.seconds_per_step <= 0 and c.name not in ("data_wait",):
            continue
        lines.append(f"  {c.name:<14} {_ms(c.seconds_per_step):>10} {c.share:>6.1%}  "
                     f"{c.basis:<9} {c.note}")
    if b.overlapped_comm_s:
        lines.append(f"  (collectives hidden behind compute: {_ms(b.overlapped_comm_s)} per "
                     "step, estimated from the profiled steps, not in the sum)")
    if b.device_busy_share is not None:
        lines.append(f"  accelerator busy {b.device_busy_share:.0%} of the profiled step "
                     "(measured)")
    if r.causes:
        lines.append("")
        lines.append("causes:")
        for cause in r.causes:
            lines.append(f"  - [{cause.kind}] {cause.summary} ({cause.basis})")
    lines.append("")
    lines.append("FLOPs and MFU:")
    added = (f"; {_flops(r.flops.added_by_formula)} of it attention added by formula "
             "(CPU kernel torch's counter does not know)"
             if r.flops is not None and r.flops.added_by_formula else "")
    if r.hardware_flops_per_step is None:
        lines.append("  FLOPs per step: not checked")
    elif r.flops_per_step is None:
        lines.append(f"  FLOPs per step: {_flops(r.hardware_flops_per_step)} hardware (measured:"
                     f" FlopCounterMode on the first micro-batch x grad_accum{added}); model "
                     "FLOPs not checked: a backward that builds a graph cannot be told from "
                     "activation recompute")
    else:
        lines.append(f"  FLOPs per step: {_flops(r.flops_per_step)} (measured: "
                     f"FlopCounterMode on the first micro-batch x grad_accum{added})")
        if r.hardware_flops_per_step != r.flops_per_step:
            lines.append(f"  with recompute: {_flops(r.hardware_flops_per_step)} hardware FLOPs"
                         " (measured: forward ops activation checkpointing ran again)")
        lines.append(f"  achieved: {_flops(r.achieved_flops_per_s)}/s (measured)")
    peak = _flops(r.peak_flops_per_s) + "/s" if r.peak_flops_per_s else "not checked"
    lines.append(f"  peak: {peak} ({r.peak_basis}{': ' + r.peak_detail if r.peak_detail else ''})")
    if r.datasheet_flops_per_s:
        lines.append(f"  datasheet peak: {_flops(r.datasheet_flops_per_s)}/s (datasheet)")
    lines.append(f"  MFU: {r.mfu:.1%} of the measured peak" if r.mfu is not None
                 else "  MFU: not checked (needs FLOPs and a peak)")
    if r.mfu_datasheet is not None:
        lines.append(f"  MFU: {r.mfu_datasheet:.1%} of the datasheet peak")
    if r.hfu is not None:
        lines.append(f"  HFU: {r.hfu:.1%} of the measured peak (recompute included)")
    if r.top_ops:
        lines.append("")
        lines.append("top ops (self time per step, profiled):")
        for op, t, calls in r.top_ops[:8]:
            lines.append(f"  {op:<48} {_ms(t):>10}  x{calls}")
    if r.levers:
        lines.append("")
        lines.append("levers, by the most they could gain (estimated upper bound; measure with "
                     "`trainmedic try`):")
        for lv in r.levers[:8]:
            sem = "; changes optimization semantics" if lv.changes_semantics else ""
            lines.append(f"  - {lv.name}: up to {lv.max_speedup:.2f}x - {lv.action}")
            lines.append(f"      displaced cost: {lv.displaced_cost}{sem}")
    for note in r.notes:
        lines.append(f"note: {note}")
    if r.ranks:
        lines.append("")
        lines.append("ranks (measured):")
        med = sorted(x.breakdown.step_time_s for x in r.ranks)[len(r.ranks) // 2]
        for x in r.ranks:
            xb = x.breakdown
            lines.append(f"  rank {x.rank}: step {_ms(xb.step_time_s)} ({xb.step_time_s / med:.2f}x"
                         f" the median rank), {xb.bottleneck}; data {xb.share('data_wait'):.0%}"
                         f", comm {xb.share('exposed_comm'):.0%}, host "
                         f"{xb.share('host_python'):.0%}")
    return lines


def _lever(lv: Any) -> dict[str, Any]:
    return {"name": lv.name, "action": lv.action, "target": lv.target,
            "target_share": lv.target_share, "max_speedup": lv.max_speedup,
            "basis": "estimated", "displaced_cost": lv.displaced_cost,
            "changes_semantics": lv.changes_semantics, "evidence": lv.evidence}


def _one(r: ProfileReport) -> dict[str, Any]:
    b = r.breakdown
    return {
        "recipe": r.recipe, "device": r.device, "precision": r.precision, "rank": r.rank,
        "world_size": r.world_size, "torch_threads": r.torch_threads,
        "step_time_s": {"median": b.step_time_s, "min": b.step_time_min_s,
                        "max": b.step_time_max_s, "steps": b.steps,
                        "outlier_steps": b.outlier_steps, "basis": "measured"},
        "profiled_step_time_s": b.profiled_step_time_s,
        "bottleneck": {"class": b.bottleneck, "evidence": b.bottleneck_evidence},
        "components": [{"name": c.name, "seconds_per_step": c.seconds_per_step,
                        "share": c.share, "basis": c.basis, "note": c.note}
                       for c in b.components],
        "host_by_phase_s": b.host_by_phase,
        "overlapped_comm_s": b.overlapped_comm_s,
        "matmul_share_of_ops": b.matmul_share_of_ops,
        "device_busy_share": b.device_busy_share,
        "causes": [{"kind": c.kind, "share": c.share, "seconds_per_step": c.seconds_per_step,
                    "basis": c.basis, "summary": c.summary} for c in r.causes],
        "sync_sites": r.sync_sites, "sync_device_reads": r.sync_device_reads,
        "top_ops": [{"op": op, "self_s_per_step": t, "calls_per_step": n}
                    for op, t, n in r.top_ops],
        "flops": {"per_step": r.flops_per_step,
                  "hardware_per_step": r.hardware_flops_per_step,
                  "recompute_per_step": (None if r.hardware_flops_per_step is None
                                         or r.flops_per_step is None
                                         else r.hardware_flops_per_step - r.flops_per_step),
                  "added_by_formula": r.flops.added_by_formula if r.flops else None,
                  "by_op": dict(r.flops.by_op) if r.flops else {},
                  "basis": "measured" if r.hardware_flops_per_step is not None else "not_checked"},
        "achieved_flops_per_s": r.achieved_flops_per_s,
        "peak": {"flops_per_s": r.peak_flops_per_s, "basis": r.peak_basis,
                 "detail": r.peak_detail, "datasheet_flops_per_s": r.datasheet_flops_per_s},
        "mfu": r.mfu, "mfu_datasheet": r.mfu_datasheet, "hfu": r.hfu,
        "levers": [_lever(lv) for lv in r.levers],
        "notes": list(r.notes),
    }


def profile_doc(report: ProfileReport) -> str:
    """The JSON document (``schema`` ``trainmedic.profile/1``); ``ranks`` holds every rank's
    report on rank 0 of a distributed run."""
    doc = {"schema": SCHEMA, **_one(report), "ranks": [_one(x) for x in report.ranks]}
    return json.dumps(doc, indent=2, allow_nan=False, default=float)


def config_flops_lines(source: str, flops: ConfigFlops, gpu: str | None,
                       peak_flops_per_s: float | None) -> list[str]:
    """``profile --config``: the estimated FLOPs of a step and what to give the watcher."""
    lines = [f"FLOPs of a training step of {source} (estimated from the config: 6·N·tokens "
             "plus attention, PaLM appendix B; no recompute):",
             f"  matmul weights N: {flops.matmul_params:,}",
             f"  per token: {_flops(flops.flops_per_token)}",
             f"  tokens per step: {flops.tokens_per_step:,}",
             f"  per step: {_flops(flops.flops_per_step)}"]
    if gpu and peak_flops_per_s:
        lines.append(f"  {gpu} bf16 dense peak: {_flops(peak_flops_per_s)}/s (datasheet; "
                     "`trainmedic bench matmul` there measures the achievable one)")
    elif gpu:
        lines.append(f"  {gpu}: no bf16 dense peak in the datasheet table (not checked)")
    peak = f"{peak_flops_per_s:.4g}" if peak_flops_per_s else "<from trainmedic bench matmul>"
    lines.append(f"watch(model, optimizer, flops_per_step={flops.flops_per_step:.4g}, "
                 f"peak_flops_per_s={peak}) logs mfu each step")
    return lines


def config_flops_doc(source: str, flops: ConfigFlops, gpu: str | None,
                     peak_flops_per_s: float | None) -> str:
    """``profile --config --json``: schema ``trainmedic.flops/1``."""
    return json.dumps({
        "schema": "trainmedic.flops/1", "source": source, "basis": flops.basis,
        "matmul_params": flops.matmul_params, "flops_per_token": flops.flops_per_token,
        "tokens_per_step": flops.tokens_per_step, "flops_per_step": flops.flops_per_step,
        "gpu": gpu, "datasheet_peak_flops_per_s": peak_flops_per_s}, indent=2)
