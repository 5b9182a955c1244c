"""A ``Comparison`` as terminal text and as JSON (schema ``trainmedic.compare/1``).

Every figure says how it was obtained: values read from the runs and their differences are
*measured*; bootstrap intervals, noise bands and parting steps are *estimated*.
"""

from __future__ import annotations

import math
from typing import Any

from trainmedic.compare.comparison import Comparison, MetricDelta, PairComparison
from trainmedic.compare.deltas import Interval
from trainmedic.compare.verdict import Verdict, low_overlap

__all__ = ["SCHEMA", "to_json", "render_text", "verdict_line", "fmt_value"]

SCHEMA = "trainmedic.compare/1"

_AXIS_UNIT = {"step": "step", "tokens": "tokens", "time": "s"}


def fmt_value(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.4g}"


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _interval_json(iv: Interval | None) -> dict[str, Any] | None:
    if iv is None:
        return None
    return {"lo": iv.lo, "hi": iv.hi, "level": iv.level, "block": iv.block,
            "resamples": iv.resamples, "method": iv.method, "phi": _num(iv.phi),
            "n_eff": _num(iv.n_eff)}


def verdict_line(v: Verdict, level: float) -> str:
    """The verdict in one sentence, with its basis."""
    if v.reason == "no_common_metric":
        return (f"{v.b} vs {v.a}: cannot tell which is better: they share neither val_loss nor "
                "loss at common points")
    if v.reason == "too_few_points":
        return (f"{v.b} vs {v.a}: cannot tell which is better: only {v.points} common points of "
                f"{v.metric} (at least 3 needed)")
    iv = v.interval
    where = f"steps {v.steps[0]}-{v.steps[1]} of {v.a}" if v.steps else "the end"
    ci = (f"{level:.0%} interval [{fmt_value(iv.lo)}, {fmt_value(iv.hi)}] (estimated)" if iv
          else "no interval")
    head = (f"{v.b} vs {v.a} on {v.metric} over the last {v.points} aligned points ({where}): "
            f"{fmt_value(v.a_end)} -> {fmt_value(v.b_end)}, difference {v.delta:+.4g} "
            f"({v.relative:+.1%}, measured); {ci}")
    if v.sure:
        tail = (f": {v.better} is lower beyond this run's own noise (the interval excludes 0; "
                "one run per side, so seed-to-seed spread is not measured: repeat each with "
                "another seed before calling it better)")
    elif v.reason == "few_end_points":
        tail = (f": not judged, only {v.points} end points (at least 10 needed to estimate "
                "the noise)")
    else:
        tail = ": no difference beyond this run's own noise (the interval includes 0)"
    if low_overlap(v):
        tail += f"; the runs overlap over only {v.overlap:.0%} of one run's range"
    return head + tail


def _metric_line(m: MetricDelta, level: float) -> str:
    iv = m.delta_interval
    ci = f"[{fmt_value(iv.lo)}, {fmt_value(iv.hi)}]" if iv else "n/a (under 3 points)"
    ratio = f"  x{m.ratio:.3g}" if m.ratio is not None else ""
    sig = "  significant" if m.significant else ""
    part = (f"  parts at step {m.parting_step} (estimated)" if m.parting_step is not None
            else "")
    return (f"  {m.metric:<15} {fmt_value(m.a_mean):>10} {fmt_value(m.b_mean):>10} "
            f"{m.delta:>+11.4g}"
            f"{ratio}  {level:.0%} CI {ci}{sig}{part}  [{m.points} pts]")


def _pair_lines(p: PairComparison, c: Comparison) -> list[str]:
    lines = [f"{p.b} vs {p.a} (B - A), aligned by {c.axis}:",
             f"  {'metric':<15} {'A mean':>10} {'B mean':>10} {'B - A':>11}   "
             "(means and differences measured; intervals and parting estimated)"]
    group = None
    for m in p.metrics:
        if m.group != group:
            group = m.group
            lines.append(f" {group}:")
        lines.append(_metric_line(m, c.level))
        if m.group == "memory":
            lines.append(f"  {'':<15} peak {fmt_value(m.a_max)} -> {fmt_value(m.b_max)} MB "
                         "(measured)")
    lines.append("Verdict: " + verdict_line(p.verdict, c.level))
    return lines


def render_text(c: Comparison) -> str:
    """The comparison for a terminal."""
    lines = [f"trainmedic compare: {len(c.labels)} runs, aligned by {c.axis}; baseline "
             f"A = {c.labels[0]}"]
    for label, src, run in zip(c.labels, c.sources, c.runs, strict=True):
        last = run.last_step()
        lines.append(f"  {label}: {src} (last step {last if last is not None else 'n/a'})")
    lines.append("")
    if c.config.rows:
        differ = len(c.config.rows)
        lines.append(f"Config: {differ} {'key differs' if differ == 1 else 'keys differ'} "
                     f"({c.config.same} the same):")
        for row in c.config.rows:
            vals = "  |  ".join(f"{lab}={v!r}" for lab, v in zip(c.labels, row.values,
                                                                  strict=True))
            lines.append(f"  {row.key} ({row.source}): {vals}")
    else:
        lines.append(f"Config: no recorded key differs ({c.config.same} keys the same)")
    lines.extend(f"  note: {n}" for n in c.config.notes)
    for p in c.pairs:
        lines.append("")
        lines.extend(_pair_lines(p, c))
    for n in c.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines) + "\n"


def _metric_json(m: MetricDelta) -> dict[str, Any]:
    al = m.aligned
    return {
        "metric": m.metric, "group": m.group, "points": m.points,
        "window": {"start": _num(float(al.x[0])), "end": _num(float(al.x[-1])),
                   "first_step_a": int(al.steps_a[0]), "last_step_a": int(al.steps_a[-1])},
        "measured": {"a_mean": _num(m.a_mean), "b_mean": _num(m.b_mean),
                     "a_median": _num(m.a_median), "b_median": _num(m.b_median),
                     "a_max": _num(m.a_max), "b_max": _num(m.b_max),
                     "delta": _num(m.delta), "ratio": _num(m.ratio)},
        "estimated": {"delta_interval": _interval_json(m.delta_interval),
                      "ratio_interval": _interval_json(m.ratio_interval),
                      "parting_step": m.parting_step, "noise_band": _num(m.noise_band)},
        "significant": m.significant,
    }


def _verdict_json(v: Verdict, level: float) -> dict[str, Any]:
    return {"metric": v.metric, "better": v.better, "sure": v.sure, "reason": v.reason,
            "points": v.points, "steps": list(v.steps) if v.steps else None,
            "measured": {"a_end": _num(v.a_end), "b_end": _num(v.b_end),
                         "delta": _num(v.delta), "relative": _num(v.relative)},
            "estimated": {"delta_interval": _interval_json(v.interval)},
            "runs_per_side": v.runs_per_side, "seed_spread_measured": v.seed_spread_measured,
            "overlap": _num(v.overlap), "summary": verdict_line(v, level)}


def to_json(c: Comparison) -> dict[str, Any]:
    """The comparison as a JSON-ready dict (schema ``trainmedic.compare/1``)."""
    return {
        "schema": SCHEMA, "by": c.axis, "level": c.level,
        "runs": [{"label": lab, "source": src, "last_step": run.last_step(),
                  "metrics": [m for m in run.metrics() if not m.startswith("layer/")]}
                 for lab, src, run in zip(c.labels, c.sources, c.runs, strict=True)],
        "config_diff": {"same": c.config.same, "notes": list(c.config.notes),
                        "differs": [{"key": r.key, "source": r.source,
                                     "values": dict(zip(c.labels, r.values, strict=True))}
                                    for r in c.config.rows]},
        "pairs": [{"a": p.a, "b": p.b, "metrics": [_metric_json(m) for m in p.metrics],
                   "verdict": _verdict_json(p.verdict, c.level)} for p in c.pairs],
        "notes": list(c.notes),
    }
