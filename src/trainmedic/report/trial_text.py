"""A ``trainmedic try`` report as text lines, or as its JSON document (``trainmedic.try/1``).

Each trial has the six parts of a lever report: observed constraint, evidence, intervention,
displaced cost, before/after (with the interval), remaining uncertainty; every figure says
whether it was measured, estimated or not performed. Pure: returns text; the CLI prints it.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainmedic.levers.trial import TrialResult, TryReport

__all__ = ["SCHEMA", "try_lines", "try_doc"]

SCHEMA = "trainmedic.try/1"

_VERDICT = {"faster": "faster", "slower": "SLOWER", "inconclusive": "no clear effect on speed"}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{seconds:.2f} s"


def _bytes(n: int) -> str:
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def _rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%"


def _x(v: float) -> str:
    return "inf" if not math.isfinite(v) else f"{v:.2f}x"


def _head(t: TrialResult) -> str:
    against = "the recipe as is" if not t.base else " + ".join(t.base)
    semantics = "CHANGES OPTIMIZATION SEMANTICS" if t.changes_semantics else \
        "same optimization within tolerance"
    return f"{t.lever} against {against}: {_VERDICT[t.effect.verdict]}; {semantics}"


def _part(name: str, lines: list[str]) -> list[str]:
    out = [f"  {name:<22}{lines[0]}"]
    out.extend(f"  {'':<22}{line}" for line in lines[1:])
    return out


def _trial_lines(t: TrialResult) -> list[str]:
    a, b, e, c = t.a, t.b, t.effect, t.loss
    counted = e.rounds
    out = [_head(t)]
    out += _part("observed constraint", [
        f"baseline step {_ms(a.step_time_s)} (measured: mean over {counted} rounds) "
        f"on {t.device}",
        f"the lever targets {t.targets or 'no stated constraint'}; the share of the step it "
        "takes: not performed here (trainmedic profile measures it)"])
    rows = [f"{'round':<10}" + "".join(f"{i + 1:>9}" for i in range(counted)),
            f"{'A ms':<10}" + "".join(f"{s * 1e3:>9.1f}" for s in a.round_step_s),
            f"{'B ms':<10}" + "".join(f"{s * 1e3:>9.1f}" for s in b.round_step_s),
            f"{'B/A':<10}" + "".join(f"{r:>9.3f}" for r in e.ratios)]
    out += _part("evidence", [
        f"mean step time per counted round, A = {a.label}, B = {b.label} (measured; "
        f"{t.steps_per_round} timed steps each, after {t.drain_steps} untimed):", *rows])
    contract = ", ".join(t.contract_changes) or "nothing"
    out += _part("intervention", [
        f"{t.lever}: {t.summary}",
        f"changes of the training contract: {contract} (declared); numerics "
        f"{'expected to change' if t.declared_numerics else 'expected unchanged'} (declared)"])
    if a.peak_bytes is not None and b.peak_bytes is not None:
        memory = (f"peak {_bytes(a.peak_bytes)} -> {_bytes(b.peak_bytes)} (measured: CUDA "
                  "allocator peak during the variant's rounds + its counted resident state)")
    else:
        memory = ("peak memory: not performed (on CPU both variants share one process, whose "
                  "high-water mark cannot be split between them)")
    loss = (f"numerics: mean loss {c.mean_a:.4g} -> {c.mean_b:.4g} over the same {c.steps} "
            f"steps, {c.rel_diff:.2%} apart, tolerance {c.tolerance:.2%} (measured): "
            if c.finite else f"numerics: a loss became non-finite in {c.steps} steps "
            "(measured): ")
    loss += "changes optimization semantics" if t.changes_semantics else "equivalent"
    if t.declared_numerics:
        loss += " (declared to change numerics)"
    out += _part("displaced cost", [
        memory,
        f"warm-up round {a.warmup_s:.2f} s -> {b.warmup_s:.2f} s, first step "
        f"{_ms(a.first_step_s)} -> {_ms(b.first_step_s)} (measured; compilation and worker "
        "start-up land here)",
        f"known cost: {t.declared_cost or 'none stated'} (declared, not measured)", loss])
    lo, hi = e.speedup_ci
    after = [f"step time {_ms(a.step_time_s)} -> {_ms(b.step_time_s)} (measured); paired "
             f"change {_pct(e.mean_ratio)}, 95% interval [{_pct(e.ci_low)}, "
             f"{_pct(e.ci_high)}] (measured)",
             f"speed-up {_x(e.speedup)} [{_x(lo)}, {_x(hi)}]; samples/s "
             f"{_rate(a.samples_per_s)} -> {_rate(b.samples_per_s)} (measured)"]
    if a.tokens_per_step or b.tokens_per_step:
        after[-1] += (f"; tokens/s {_rate(a.tokens_per_s)} -> {_rate(b.tokens_per_s)} "
                      "(measured)")
    out += _part("before / after", after)
    doubt = [f"{counted} counted rounds ({e.method}): the interval is "
             f"{(e.ci_high - e.ci_low) * 100:.1f} points wide"]
    if t.prefetch_depth:
        doubt.append(f"workers prefetch up to {t.prefetch_depth} batches while the other "
                     f"variant runs; {t.drain_steps} untimed steps per round drain them when "
                     "a step computes in under 2/3 of a batch's load time, otherwise a few "
                     "may still flatter the variant with more workers (estimated)")
    if e.verdict == "inconclusive":
        doubt.append("the interval includes no change: more rounds (--rounds) could settle "
                     "it")
    doubt.append(f"the loss was compared over {c.steps} steps only; effects that take longer "
                 "to show (late divergence, final quality) were not checked")
    out += _part("remaining uncertainty", doubt)
    return out


def try_lines(report: TryReport) -> list[str]:
    """The report as terminal lines: the machine, the setup, then each trial's six parts and
    the levers refused."""
    cfg = report.config
    sets = ", ".join(f"{k}={v}" for k, v in report.overrides.items())
    out = [report.machine.one_line(),
           f"trainmedic try {report.recipe}" + (f" ({sets})" if sets else "")
           + f": {cfg.rounds} rounds of A then B (the first one warm-up, not counted), "
           f"{cfg.steps_per_round} timed steps per variant per round"]
    for i, t in enumerate(report.trials):
        out.append("")
        lines = _trial_lines(t)
        out.append(f"[{i + 1}] {lines[0]}")
        out.extend(lines[1:])
    for r in report.refused:
        out.append("")
        out.append(f"refused: {r.lever}: {r.reason}")
    return out


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def _basis(t: TrialResult) -> dict[str, str]:
    return {"step_time_s": "measured", "effect": "measured", "samples_per_s": "measured",
            "tokens_per_s": "measured", "loss": "measured", "warmup_s": "measured",
            "peak_bytes": "measured" if t.a.peak_bytes is not None else "not_performed",
            "constraint_share": "not_performed", "declared_cost": "declared",
            "contract_changes": "declared"}


def try_doc(report: TryReport) -> str:
    """The report as one JSON document (schema ``trainmedic.try/1``); non-finite numbers are
    null."""
    doc = {"schema": SCHEMA, **report.to_dict()}
    for t, d in zip(report.trials, doc["trials"], strict=True):
        d["basis"] = _basis(t)
    return json.dumps(_clean(doc), indent=2, allow_nan=False)
