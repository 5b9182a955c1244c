"""From one ``LogTable`` to a ``Run``: names mapped, units converted, clocks differentiated,
and a record of how every column was read (``run.meta["mapping"]``).

The record is a list of ``{"file", "column", "canonical", "how"}`` dicts, one per column of the
file, where ``how`` is ``canonical``, ``alias``, ``namespace``, ``unit <from>-><to>``,
``derived: <how>``, ``user --map``, ``step``, ``row index (no step column)``, ``kept as raw``
or ``ignored: <why>``. Reports render it, and the message for a log without a recognised loss
lists its columns from it.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from trainmedic.run import names as names_mod
from trainmedic.run.series import Run, Series
from trainmedic.run.table import LogTable
from trainmedic.run.vocabulary import CUMULATIVE_TIME, EPOCH_TIME, split_camel, time_unit_of

__all__ = ["table_to_run", "MAX_RAW_ENTRIES", "entry"]

MAX_RAW_ENTRIES = 60
"""Columns kept under their raw name listed one by one per file; the rest are counted."""

_CLOCK_ORDER = ("time", "elapsed_time", "elapsed", "time_elapsed", "wall_time", "walltime",
                "wall", "wall_clock", "wallclock", "total_time", "time_total", "train_wall",
                "runtime", "train_runtime")
_TIMESTAMP_MIN = 1e8
"""A clock that reads more than ~3 years in seconds is a timestamp, not time since start."""


def entry(file: str, column: str, canonical: str | None, how: str) -> dict[str, Any]:
    """One mapping record."""
    return {"file": file, "column": column, "canonical": canonical, "how": how}


#: Lightning's ``grad_norm(module, norm_type)`` keys: ``grad_2.0_norm/<parameter name>``.
_PARAM_GRAD_NORM = re.compile(r"grad_(?:\d+(?:\.\d+)?|inf)_norm[/_](?P<module>.+)\.weight")


#: A whole-model activation stat a hand-written logger computes over all its ReLU (tanh,
#: sigmoid) units ("dead_frac", "tanh_saturation", "sat_ratio"): read as one layer named
#: "model" (``layer/model/dead_frac``), so the per-layer detectors judge it.
_MODEL_STAT = re.compile(r"(?:.*/|act_|acts_|activations?_)?"
                         r"(?:(?P<dead>dead_frac(?:tion)?|frac(?:tion)?_dead|dead_units?_"
                         r"frac|dead_relu_frac(?:tion)?|dead_neurons?_frac(?:tion)?|dead(?:_relus?|_units?|"
                         r"_neurons?)?(?:_ratio|_share)?)|(?P<sat>(?:tanh|sigmoid|act(?:ivation)?)"
                         r"_sat(?:urated|uration)?(?:_frac(?:tion)?|_ratio|_share)?|"
                         r"sat(?:urated|uration)?_(?:frac(?:tion)?|ratio|share)|"
                         r"frac(?:tion)?_saturated))", re.I)


#: The first layer's gradient norm, logged beside the whole model's by someone watching for
#: vanishing gradients ("grad_first", "gn_first", "first_layer_grad_norm",
#: "grad_norm/first_layer", "layer_grad_norm/first"): read as the per-layer norm of a module
#: named FIRST_LAYER, which the vanishing rule compares with the whole model's grad_norm.
_FIRST_GRAD = re.compile(r"(?:.*/)?(?:(?:(?:layer_)?grad(?:ient)?(?:_norm)?|g_?norm|gn)[_/]first"
                         r"(?:_layer)?|"
                         r"first(?:_layer)?[_/](?:grad(?:ient)?(?:_norm)?|g_?norm|gn))", re.I)
FIRST_LAYER = "first_layer"


def _per_layer_name(raw: str) -> tuple[str, str] | None:
    """(per-layer name, how it was read) of a whole-model activation stat or a first layer's
    grad norm; None for any other column."""
    if raw.lower().startswith("layer/"):
        return None
    words = split_camel(raw)  # "Act/DeadFraction", "GradNorm/first_layer" (TensorBoard tags)
    if _FIRST_GRAD.fullmatch(words):
        return f"layer/{FIRST_LAYER}/grad_norm", "per-layer (the first layer's grad norm)"
    m = _MODEL_STAT.fullmatch(words)
    if m is None:
        return None
    return ("layer/model/" + ("dead_frac" if m.group("dead") else "saturated_frac"),
            "per-layer (the whole model's units)")


def table_to_run(table: LogTable, mapping: dict[str, str] | None = None) -> Run:
    """Map a table's raw names to canonical ones (aliases, derivations, user mapping)."""
    run = Run(source=table.path)
    exclude = [table.step_column] if table.step_column else []
    res = names_mod.resolve_names(table.columns, mapping, exclude=exclude)
    rename = res.rename()
    targets = set(rename.values()) | set(res.derived)
    records: dict[str, dict[str, Any]] = {}
    for raw, s in table.columns.items():
        name = rename.get(raw)
        pm = _PARAM_GRAD_NORM.fullmatch(raw) if name is None else None
        if pm is not None and f"layer/{pm.group('module')}/grad_norm" not in targets:
            # Lightning's grad_norm() utility: one norm per parameter; a module's weight
            # stands for the module, as trainmedic.watch's per-layer stats do
            name = f"layer/{pm.group('module')}/grad_norm"
            records[raw] = entry(table.path, raw, name, "per-layer (the module's weight)")
        elif name is None and (pl := _per_layer_name(raw)) is not None and \
                pl[0] not in targets:
            name = pl[0]
            records[raw] = entry(table.path, raw, name, pl[1])
        elif name is None:
            # An unmapped column whose raw name is a canonical name taken by another source
            # (the user mapped "loss" elsewhere) stays, as "raw/<name>".
            name = f"raw/{raw}" if raw in targets else raw
            records[raw] = entry(table.path, raw, None, "kept as raw")
        else:
            if name in res.scales:
                s = Series(s.steps, s.values * res.scales[name])
            records[raw] = entry(table.path, raw, name, res.how.get(name, "alias"))
        run.series[(name, table.rank)] = s
    derived_meta: dict[str, str] = {}
    for canonical, parts in res.derived.items():
        total = _sum_components([table.columns[p] for p in parts])
        if total is None:
            table.note("not_derived", f"'{canonical}' not derived: its components "
                       f"({', '.join(parts)}) were not logged at the same steps")
            continue
        run.series[(canonical, table.rank)] = total
        derived_meta[canonical] = "sum of " + " + ".join(parts)
        for p in parts:
            records[p] = entry(table.path, p, canonical,
                               f"derived: {canonical} = sum of " + " + ".join(parts))
    if "step_time_s" not in res.aliases:
        _step_time(table, res, run, records, derived_meta)
    _loss_from_perplexity(table, res, run, records, derived_meta)
    run.meta["aliases"] = dict(res.aliases)
    if derived_meta:
        run.meta["derived"] = derived_meta
    run.meta.update(res.meta)
    run.meta.update({k: v for k, v in table.meta.items()
                     if k not in run.meta and k != "ignored_columns"})
    run.meta["sources"] = [{
        "path": table.path, "format": table.format, "rank": table.rank,
        "step_column": table.step_column, "aliases": dict(res.aliases),
        "families": dict(res.families),
    }]
    run.meta["mapping"] = _records(table, records)
    run.notes.extend(table.notes)
    return run


def _records(table: LogTable, records: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if table.step_column:
        how = "step"
        if table.step_column.lower() in names_mod.FALLBACK_STEP_COLUMNS:
            how = "step (epoch: no step column)"
        out.append(entry(table.path, table.step_column, None, how))
    elif any(n.kind == "step_from_row_index" for n in table.notes):
        out.append(entry(table.path, "(row)", None, "row index (no step column)"))
    raw_left = 0
    for rec in records.values():
        if rec["how"] == "kept as raw":
            raw_left += 1
            if raw_left > MAX_RAW_ENTRIES:
                continue
        out.append(rec)
    if raw_left > MAX_RAW_ENTRIES:
        out.append(entry(table.path, f"(+{raw_left - MAX_RAW_ENTRIES} more columns)", None,
                         "kept as raw"))
    for col, why in dict(table.meta.get("ignored_columns", {})).items():
        out.append(entry(table.path, str(col), None, f"ignored: {why}"))
    return out


#: Perplexity columns by side: a log that reports only ppl reports exp(cross-entropy).
_PPL_TRAIN = ("ppl", "perplexity", "train_ppl", "train_perplexity", "train/ppl",
              "train/perplexity", "ppl/train", "perplexity/train")
_PPL_VAL = ("val_ppl", "valid_ppl", "val_perplexity", "valid_perplexity", "eval_ppl",
            "eval_perplexity", "val/ppl", "val/perplexity", "eval/ppl", "eval/perplexity",
            "ppl/val", "ppl/valid", "perplexity/val", "validation_perplexity", "validation_ppl")


def _loss_from_perplexity(table: LogTable, res: names_mod.NameResolution, run: Run,
                          records: dict[str, dict[str, Any]],
                          derived_meta: dict[str, str]) -> None:
    """A log with a perplexity but no loss (language-model scripts often print only ppl):
    ``loss = ln(ppl)`` (and ``val_loss`` from a validation perplexity), since a perplexity is
    exp of the per-token cross-entropy. Never when a loss was mapped."""
    present = {c.strip().lower(): c for c in table.columns}
    for canonical, names in (("loss", _PPL_TRAIN), ("val_loss", _PPL_VAL)):
        if canonical in res.aliases or canonical in res.derived or \
                (canonical, table.rank) in run.series:
            continue
        col = next((present[n] for n in names if n in present), None)
        if col is None:
            continue
        s = table.columns[col]
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.where(s.values > 0, np.log(np.where(s.values > 0, s.values, 1.0)), np.nan)
        run.series[(canonical, table.rank)] = Series(s.steps, v)
        derived_meta[canonical] = f"ln({col})"
        records[col] = entry(table.path, col, canonical, f"derived: {canonical} = ln({col})")


def _sum_components(parts: list[Series]) -> Series | None:
    first = parts[0]
    if all(len(p) == len(first) and np.array_equal(p.steps, first.steps) for p in parts):
        return Series(first.steps, np.sum([p.values for p in parts], axis=0))
    return None


def _step_time(table: LogTable, res: names_mod.NameResolution, run: Run,
               records: dict[str, dict[str, Any]], derived_meta: dict[str, str]) -> None:
    """A step time from a clock (cumulative seconds), a per-epoch time or an it/s rate, when
    the log has no direct step time."""
    by_epoch = (table.step_column or "").lower() in names_mod.FALLBACK_STEP_COLUMNS
    clocks: list[tuple[int, str, float]] = []
    per_epoch: list[tuple[str, float]] = []
    for raw in table.columns:
        if raw in res.aliases.values():
            continue
        got = time_unit_of(raw)
        if got is None:
            continue
        base, factor, unit = got
        if base in CUMULATIVE_TIME:
            rank = _CLOCK_ORDER.index(base) if base in _CLOCK_ORDER else len(_CLOCK_ORDER)
            clocks.append((rank, raw, factor))
        elif base in EPOCH_TIME and (base != "epoch" or unit):
            per_epoch.append((raw, factor))
    for _, raw, factor in sorted(clocks):
        s = table.columns[raw]
        dt = _differentiate(s)
        if dt is not None:
            _put(run, table, "step_time_s", Series(dt.steps, dt.values * factor))
            how = (f"derived: per-step time from cumulative '{raw}' (difference between rows / "
                   "steps between rows)")
            records[raw] = entry(table.path, raw, "step_time_s", how)
            derived_meta["step_time_s"] = how[len("derived: "):]
            table.note("derived_step_time", f"step_time_s derived from the cumulative clock "
                       f"'{raw}'")
            return
        if by_epoch and not _increasing(s):
            per_epoch.append((raw, factor))
        elif not by_epoch and _per_row_time(s):
            # timm's "Time: 0.345s (0.350s)", the ImageNet example's "Time  0.345 ( 0.567)":
            # a "time" that goes up and down between logged steps is each step's own time
            _put(run, table, "step_time_s", Series(s.steps, s.values * factor))
            how = f"derived: '{raw}' goes up and down, so it is each logged step's own time"
            records[raw] = entry(table.path, raw, "step_time_s", how)
            derived_meta["step_time_s"] = how[len("derived: "):]
            return
    if per_epoch:
        raw, factor = per_epoch[0]
        s = table.columns[raw]
        _put(run, table, "step_time_s", Series(s.steps, s.values * factor))
        how = f"derived: time per epoch from '{raw}' (one value per logged epoch)"
        records[raw] = entry(table.path, raw, "step_time_s", how)
        derived_meta["step_time_s"] = how[len("derived: "):]
        run.meta.setdefault("step_time_basis", "per_epoch")
        return
    inv = res.inverted.get("step_time_s")
    if inv is not None and inv in table.columns:
        s = table.columns[inv]
        with np.errstate(divide="ignore", invalid="ignore"):
            vals = np.where(s.values > 0, 1.0 / s.values, np.nan)
        _put(run, table, "step_time_s", Series(s.steps, vals))
        how = f"derived: 1 / '{inv}' (iterations per second)"
        records[inv] = entry(table.path, inv, "step_time_s", how)
        derived_meta["step_time_s"] = how[len("derived: "):]


def _put(run: Run, table: LogTable, name: str, s: Series) -> None:
    run.series[(name, table.rank)] = s


def _per_row_time(s: Series) -> bool:
    """A clock-named column that is a duration per row: positive, finite, going down at least
    once in a quarter of the rows (a clock only goes down at a restart), under an hour."""
    v = s.values[np.isfinite(s.values)]
    if len(v) < 4 or not bool(np.all(v > 0)) or float(v.max()) >= 3600.0:
        return False
    return float(np.mean(np.diff(v) < 0)) >= 0.25


def _increasing(s: Series) -> bool:
    v = s.values[np.isfinite(s.values)]
    return len(v) >= 2 and bool(np.all(np.diff(v) >= 0)) and v[-1] > v[0]


def _differentiate(s: Series) -> Series | None:
    """Per-step time from a cumulative clock, or None when ``s`` is not one.

    In log order, each row's time is (clock - previous clock) / (step - previous step). A row
    where both the step and the clock go back starts another run appended to the file and has
    no time; a clock that goes back while the step moves on is not cumulative.
    """
    ok = np.isfinite(s.values)
    steps, v = s.steps[ok], s.values[ok]
    # A row at the same step whose clock went back is a row of another kind (an evaluation
    # logged with its own "time": 0), not a reading of the training clock.
    other = np.concatenate([[False], (np.diff(steps) == 0) & (np.diff(v) < 0)])
    steps, v = steps[~other], v[~other]
    if len(v) < 3 or float(np.nanmax(np.abs(v))) >= _TIMESTAMP_MIN:
        return None
    dv = np.diff(v)
    ds = np.diff(steps)
    fwd = ds > 0
    restart = (dv < 0) & (ds <= 0)
    bad = (dv < 0) & fwd
    if int(bad.sum()) > max(0, int(0.02 * len(dv))) or int(fwd.sum()) < 2:
        return None
    if not bool((dv[fwd] > 0).any()):
        return None
    keep = fwd & ~bad & ~restart
    out_steps = steps[1:][keep]
    out_vals = dv[keep] / ds[keep]
    return Series(out_steps, out_vals)
