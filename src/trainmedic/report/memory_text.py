"""Plain-text rendering of memory ledgers, fit results and KV plans for the terminal.

Every figure carries its basis in the table (``est.`` or ``meas.``), as DESIGN.md asks. The text
is plain (no colour codes) so it reads the same piped into a file or a CI log. With a GPU the
verdict (fits, or not) is the first line: it is the answer the command was run for.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from trainmedic.memory.estimate import MeasuredEstimate, MemoryEstimate, PlanEstimate
from trainmedic.memory.gpus import format_bytes
from trainmedic.memory.ledger import CATEGORIES, Ledger

if TYPE_CHECKING:
    from trainmedic.memory.fit import FitResult
    from trainmedic.memory.kv import KvPlan
    from trainmedic.memory.oom import OomExplanation
    from trainmedic.memory.spec import ModelSpec

__all__ = ["estimate_lines", "ledger_lines", "module_lines", "fit_lines", "oom_lines",
           "kv_lines", "LEDGER_LABELS"]

LEDGER_LABELS: dict[str, str] = {
    "params": "parameters",
    "grads": "gradients",
    "optimizer": "optimizer state",
    "master_weights": "fp32 master weights",
    "activations": "activations",
    "temporaries": "temporaries",
    "buffers": "buffers",
    "comm_buckets": "communication buckets",
    "overhead": "CUDA context (overhead)",
}
_BASIS = {"measured": "meas.", "estimated": "est.", "not_checked": "not checked"}


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:5.1f}%" if whole else "    -"


def ledger_lines(ledger: Ledger, *, title: str) -> list[str]:
    """The ledger as an aligned table, every category in order (a zero row says the category
    was counted and is empty, not forgotten), then the peak."""
    peak = ledger.peak_bytes
    lines = [title, ""]
    lines.append(f"  {'category':<26} {'bytes':>12}  {'share':>6}  basis")
    for cat in CATEGORIES:
        value = int(ledger.categories[cat])
        lines.append(
            f"  {LEDGER_LABELS[cat]:<26} {format_bytes(value):>12}  {_share(value, peak)}  "
            f"{_BASIS[ledger.basis[cat]]}"
        )
    basis = {ledger.basis[c] for c in CATEGORIES}
    tag = _BASIS[basis.pop()] if len(basis) == 1 else "mixed"
    lines.append(f"  {'peak (' + ledger.peak_phase + ')':<26} {format_bytes(peak):>12}  "
                 f"{'':>6}  {tag}")
    if ledger.activations_total_bytes:
        saved = format_bytes(ledger.activations_total_bytes)
        lines.append(f"  activations saved by the forward: {saved} "
                     f"({_BASIS[ledger.basis['activations']]})")
    lines.append(f"  parameters: {ledger.num_params:,}")
    return lines


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _source_name(source: str) -> str:
    # A config file is named by its file name; a hub id or a factory as given.
    return PurePath(source).name if source.endswith(".json") else source


def _verdict_line(*, fits: bool, gpu_label: str, peak_bytes: int, gpu_bytes: int,
                  usable_bytes: int, margin: float, basis: str) -> str:
    verdict = "fits" if fits else "does NOT fit"
    relation = "of" if fits else "over the"
    return (f"{verdict} on {gpu_label}: peak {format_bytes(peak_bytes)} {relation} "
            f"{format_bytes(usable_bytes)} usable ({format_bytes(gpu_bytes)} less a "
            f"{margin:.0%} margin) ({basis})")


def estimate_lines(estimate: MemoryEstimate) -> list[str]:
    """``memory plan`` or ``memory measure`` output: the verdict first (with a GPU), then the
    ledger, its notes, and what fits or helps."""
    if isinstance(estimate, PlanEstimate):
        return _plan_lines(estimate)
    return _measured_lines(estimate)


def _plan_lines(estimate: PlanEstimate) -> list[str]:
    spec, cfg, ledger, result = estimate.spec, estimate.config, estimate.ledger, estimate.fit
    title = (f"{_source_name(estimate.source)}: {spec.family}, {spec.num_params / 1e9:.2f}B "
             f"params; micro-batch {cfg.batch_size} x {ledger.details.get('seq_len', cfg.seq_len)}"
             f" tokens, {cfg.precision}, {cfg.optimizer}, {cfg.strategy} on {_gpus(cfg.gpus)}"
             + (f", tp {cfg.tp}" if cfg.tp > 1 else "") + (f", pp {cfg.pp}" if cfg.pp > 1 else ""))
    lines: list[str] = []
    if result is not None and estimate.gpu is not None:
        lines.append(_verdict_line(
            fits=result.fits, gpu_label=estimate.gpu.label, peak_bytes=ledger.peak_bytes,
            gpu_bytes=result.gpu_bytes, usable_bytes=result.usable_bytes, margin=result.margin,
            basis="est."))
    lines += ledger_lines(ledger, title=title)
    lines += [f"  note: {n}" for n in ledger.notes]
    if result is not None:
        lines += fit_lines(result)
    return lines


def _measured_lines(estimate: MeasuredEstimate) -> list[str]:
    cfg, ledger = estimate.config, estimate.ledger
    lines: list[str] = []
    if estimate.gpu is not None and estimate.usable_bytes is not None:
        lines.append(_verdict_line(
            fits=bool(estimate.fits), gpu_label=estimate.gpu.label,
            peak_bytes=ledger.peak_bytes, gpu_bytes=estimate.gpu.memory_bytes,
            usable_bytes=estimate.usable_bytes, margin=estimate.margin,
            basis="meas. on CPU kernels; CUDA kernels differ: see `trainmedic memory plan "
                  "--device-profile`"))
    lines += ledger_lines(ledger, title=f"{estimate.source}: measured one training step "
                          f"x{cfg.steps} (micro-batch {cfg.batch_size} x {cfg.seq_len}, "
                          f"{cfg.precision}, {cfg.optimizer}, CPU kernels)")
    lines += module_lines(ledger)
    lines += [f"  note: {n}" for n in (*estimate.notes, *ledger.notes)]
    return lines


def module_lines(ledger: Ledger, *, top: int = 8) -> list[str]:
    """The ``top`` modules that saved the most activations, largest first (measure mode)."""
    largest = sorted((m for m in ledger.per_module if m.category == "activations"),
                     key=lambda m: -m.bytes)[:top]
    if not largest:
        return []
    return ["", "  activations by module (largest first):"] + [
        f"    {m.module or '<root>':<40} {format_bytes(m.bytes):>12}  meas." for m in largest]


def fit_lines(result: FitResult) -> list[str]:
    """The largest micro-batch that fits and the ranked interventions (the verdict itself
    heads the output)."""
    lines = [""]
    if result.max_micro_batch:
        lines.append(f"largest micro-batch that fits: {result.max_micro_batch} (est.)")
    else:
        lines.append("largest micro-batch that fits: none, not even 1 (est.)")
    if result.interventions:
        lines += ["", "smallest changes, ranked (memory saved and throughput cost are estimates):"]
        for i, iv in enumerate(result.interventions, 1):
            lines += _intervention_lines(i, iv.to_json())
    if result.combined:
        lines += ["", "together, cheapest first, until it fits:"]
        for i, iv in enumerate(result.combined, 1):
            lines.append(f"  {i}. {iv.action} -> peak {format_bytes(iv.peak_bytes)}")
    elif not result.fits:
        lines += ["", "no combination of the changes above fits this GPU: add GPUs "
                  "(sharding, tensor or pipeline parallelism) or use a larger one"]
    return lines


def _intervention_lines(n: int, iv: dict[str, Any]) -> list[str]:
    fits = "fits" if iv["fits"] else "not enough alone"
    cost = iv["throughput_cost"]
    cost_text = f"{cost:+.0%} step time" if cost else "no throughput cost"
    out = [
        f"  {n}. {iv['action']}",
        f"     saves {format_bytes(iv['saved_bytes'])} -> peak {format_bytes(iv['peak_bytes'])}"
        f" ({fits}); {cost_text}: {iv['cost_note']}",
    ]
    if iv["changes_semantics"]:
        out.append(f"     changes optimization: {iv['changes_semantics']}")
    return out


def oom_lines(explanation: OomExplanation, *, source: str) -> list[str]:
    """An OOM explanation: the verdict, the figures with their basis, the reasoning, the fixes."""
    lines = [f"{source}: {explanation.summary}", ""]
    for f in explanation.figures:
        note = f"  ({f.note})" if f.note else ""
        lines.append(f"  {f.name:<28} {format_bytes(f.bytes):>12}  {_BASIS[f.basis]}{note}")
    if explanation.reasons:
        lines += ["", "why:"] + [f"  - {r}" for r in explanation.reasons]
    if explanation.fixes:
        lines += ["", "what to change, most effective first:"]
        lines += [f"  {i}. {fix}" for i, fix in enumerate(explanation.fixes, 1)]
    lines += [f"note: {n}" for n in explanation.notes]
    return lines


def kv_lines(result: KvPlan, *, spec: ModelSpec, source: str, gpu_label: str) -> list[str]:
    """Inference sizing: whether it fits first (with a GPU), then weights, KV cache per token
    and in total, and the largest batch and context that fit."""
    lines: list[str] = []
    if result.gpu_memory_bytes is not None:
        verdict = "fits" if result.fits else "does NOT fit"
        lines.append(f"{verdict} on {gpu_label}: total {format_bytes(result.total_bytes)} on "
                     f"{format_bytes(result.gpu_memory_bytes)}, keeping "
                     f"{format_bytes(result.headroom_bytes or 0)} free (est.)")
    lines += [f"{_source_name(source)}: {spec.family}, {spec.num_params / 1e9:.2f}B params", ""]
    rows = [
        (f"weights ({result.weight_dtype})", result.weights_bytes),
        (f"KV cache ({result.kv_dtype}, {result.batch_size} x {result.context_len})",
         result.kv_bytes),
        ("KV cache per token", result.kv_bytes_per_token),
        ("total", result.total_bytes),
    ]
    lines += [f"  {label:<34} {format_bytes(v):>12}  est." for label, v in rows]
    if result.gpu_memory_bytes is not None:
        lines += ["", f"largest batch at {result.context_len} tokens: {result.max_batch_size}",
                  f"longest context at batch {result.batch_size}: {result.max_context_len}"]
    lines += [f"  note: {n}" for n in result.notes]
    return lines
