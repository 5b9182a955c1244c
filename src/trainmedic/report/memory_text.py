"""Plain-text rendering of memory ledgers, fit results and KV plans for the terminal.

Every figure carries its basis in the table (``est.`` or ``meas.``), as DESIGN.md asks. The text
is plain (no colour codes) so it reads the same piped into a file or a CI log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainmedic.memory.gpus import format_bytes
from trainmedic.memory.ledger import CATEGORIES, Ledger

if TYPE_CHECKING:
    from trainmedic.memory.fit import FitResult
    from trainmedic.memory.kv import KvPlan
    from trainmedic.memory.oom import OomExplanation

__all__ = ["ledger_lines", "fit_lines", "oom_lines", "kv_lines", "LEDGER_LABELS"]

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
    """The ledger as an aligned table, peak first, zero rows left out."""
    peak = ledger.peak_bytes
    lines = [title, ""]
    lines.append(f"  {'category':<26} {'bytes':>12}  {'share':>6}  basis")
    for cat in CATEGORIES:
        value = int(ledger.categories[cat])
        if value == 0:
            continue
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


def fit_lines(result: FitResult, *, gpu_label: str) -> list[str]:
    """Whether the plan fits, the largest micro-batch, and the ranked interventions."""
    lines = [""]
    verdict = "fits" if result.fits else "does NOT fit"
    lines.append(
        f"GPU {gpu_label}: {format_bytes(result.gpu_bytes)}, usable "
        f"{format_bytes(result.usable_bytes)} after a {result.margin:.0%} margin -> {verdict} "
        f"(est.)"
    )
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


def kv_lines(result: KvPlan, *, title: str, gpu_label: str) -> list[str]:
    """Inference sizing: weights, KV cache per token and in total, and what fits."""
    lines = [title, ""]
    rows = [
        (f"weights ({result.weight_dtype})", result.weights_bytes),
        (f"KV cache ({result.kv_dtype}, {result.batch_size} x {result.context_len})",
         result.kv_bytes),
        ("KV cache per token", result.kv_bytes_per_token),
        ("total", result.total_bytes),
    ]
    lines += [f"  {label:<34} {format_bytes(v):>12}  est." for label, v in rows]
    if result.gpu_memory_bytes is not None:
        verdict = "fits" if result.fits else "does NOT fit"
        lines += ["", f"GPU {gpu_label}: {format_bytes(result.gpu_memory_bytes)}, keeping "
                  f"{format_bytes(result.headroom_bytes or 0)} free -> {verdict} (est.)"]
        lines.append(f"  largest batch at {result.context_len} tokens: {result.max_batch_size}")
        lines.append(f"  longest context at batch {result.batch_size}: {result.max_context_len}")
    lines += [f"  note: {n}" for n in result.notes]
    return lines
