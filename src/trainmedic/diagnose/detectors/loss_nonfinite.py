"""Detectors for a loss that stopped being a number: NaN/inf values in a loss series, and
NaN losses a logger hid from its average.

The evidence rules are written out in docs/symptoms.md; keep the two in step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainmedic.diagnose.detectors.loss_gaps import loss_gaps
from trainmedic.diagnose.finding import SEVERITY_ORDER, Evidence, Finding, Severity
from trainmedic.diagnose.localization import (
    localized_evidence,
    localized_phrase,
    nonfinite_event,
)
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import median, robust_sigma, true_runs
from trainmedic.diagnose.trace import Trace, fmt, traces
from trainmedic.run.series import Run

__all__ = ["loss_like_metrics", "HF_FRAMEWORKS", "NonfiniteSeries", "nonfinite_series",
           "is_eval_metric", "nan_grads_under_tail", "identical_tail_start"]

#: ``run.meta["framework"]`` values of a log written by the Hugging Face Trainer.
HF_FRAMEWORKS = ("hf_trainer", "huggingface", "transformers", "hf")

#: Canonical metrics whose names contain "loss" but are not losses.
_NOT_LOSSES = {"loss_scale"}


def loss_like_metrics(run: Run) -> list[str]:
    """``loss`` first, then ``val_loss``, then any other metric with "loss" in its name
    (component losses an importer left under their own names, e.g. ``dynamics_loss_step``)."""
    names = run.metrics()
    out: list[str] = [m for m in ("loss", "val_loss") if m in names]
    out += [m for m in names if "loss" in m.lower() and m not in out and m not in _NOT_LOSSES
            and not m.startswith("layer/")]
    return out


# --------------------------------------------------------------------------- nonfinite_loss
#: First word of a metric name that marks an evaluation series (``val/box_loss``,
#: ``eval_loss``, ``test_loss``), besides ``val_loss`` and ``val_loss/<set>``.
_EVAL_WORDS = ("val", "valid", "validation", "eval", "test", "dev")
#: A training loss non-finite for this many logged points in a row is an error even when it
#: comes back (the updates in between were skipped or corrupted).
PERSIST_RUN = 3


def is_eval_metric(name: str) -> bool:
    """True for an evaluation loss: ``val_loss``, ``val_loss/<set>``, or a name whose first
    word is val/valid/validation/eval/test/dev."""
    if name == "val_loss" or name.startswith("val_loss/"):
        return True
    first = name.lower().replace("/", "_").replace("-", "_").replace(".", "_").split("_")[0]
    return first in _EVAL_WORDS


@dataclass(frozen=True)
class NonfiniteSeries:
    """The non-finite points of one loss series: the numbers behind a ``nonfinite_loss``."""

    metric: str
    rank: int | None
    is_eval: bool
    first_bad_step: int
    first_bad_value: float
    stretches: tuple[tuple[int, int, int], ...]
    """Each run of consecutive non-finite points: (first step, last step, points)."""
    n_bad: int
    n_points: int
    from_first: bool
    """The first logged point is non-finite."""
    through_end: bool
    """The last logged point is non-finite."""
    recovered_at: int | None
    """The first finite step after the last non-finite stretch (None when it never came
    back)."""
    longest: int
    ref_step: int | None
    ref_value: float | None
    """The last finite value before the first non-finite one."""
    severity: Severity

    @property
    def all_bad(self) -> bool:
        return self.n_bad == self.n_points


def _series_severity(is_eval: bool, from_first: bool, through_end: bool,
                     longest: int) -> Severity:
    """Error when it never came back (non-finite at the last logged point); for a training
    loss also when it was non-finite from the first logged point or >= 3 points in a row.
    An evaluation loss that is finite again afterwards is a warning however long it was
    out (training went on; the evaluations in between are lost), as is an isolated
    non-finite training loss."""
    if through_end:
        return "error"
    if not is_eval and (from_first or longest >= PERSIST_RUN):
        return "error"
    return "warning"


def nonfinite_series(run: Run, rank: int | None) -> list[NonfiniteSeries]:
    """Every loss-like series on ``rank`` with a non-finite point, training loss first, then
    by first non-finite step."""
    out: list[NonfiniteSeries] = []
    for m in loss_like_metrics(run):
        t = Trace.of(run, m, rank)
        if t is None:
            continue
        bad = ~np.isfinite(t.all_values)
        if not bad.any():
            continue
        steps = t.all_steps
        runs = true_runs(bad)
        i = runs[0][0]
        fin = np.flatnonzero(~bad[:i])
        ev = is_eval_metric(m)
        from_first, through_end = bool(bad[0]), bool(bad[-1])
        longest = max(b - a for a, b in runs)
        out.append(NonfiniteSeries(
            metric=m, rank=rank, is_eval=ev, first_bad_step=int(steps[i]),
            first_bad_value=float(t.all_values[i]),
            stretches=tuple((int(steps[a]), int(steps[b - 1]), b - a) for a, b in runs),
            n_bad=int(bad.sum()), n_points=int(bad.size), from_first=from_first,
            through_end=through_end,
            recovered_at=None if through_end else int(steps[runs[-1][1]]),
            longest=longest,
            ref_step=int(steps[fin[-1]]) if fin.size else None,
            ref_value=float(t.all_values[fin[-1]]) if fin.size else None,
            severity=_series_severity(ev, from_first, through_end, longest)))
    out.sort(key=lambda e: (e.metric != "loss", e.first_bad_step))
    return out


def _steps_txt(e: NonfiniteSeries, most: int = 4) -> str:
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b, _ in e.stretches[:most]]
    more = len(e.stretches) - most
    return ", ".join(parts) + (f" and {more} more stretches" if more > 0 else "")


def _series_phrase(e: NonfiniteSeries) -> str:
    unit = "evaluations" if e.is_eval else "logged points"
    if e.all_bad:
        return f"{e.metric} was non-finite at every one of its {e.n_points} {unit}"
    head = (f"{e.metric} was non-finite at step{'s' if e.n_bad > 1 else ''} {_steps_txt(e)} "
            f"({e.n_bad} of {e.n_points} {unit}")
    if e.from_first:
        head += ", from the first"
    if e.through_end:
        return head + ") and was still non-finite at the last logged point"
    return head + f") and was finite again from step {e.recovered_at}"


def _train_side(run: Run, rank: int | None) -> str:
    """What the training side says when only evaluation losses are non-finite: the NaN comes
    from the evaluation when the logged loss and grad_norm stayed finite; nothing is claimed
    when grad_norm went non-finite (a logger may have filtered the training NaNs)."""
    g = Trace.of(run, "grad_norm", rank)
    if g is None:
        return ("; the logged training loss stayed finite (grad_norm not logged to confirm "
                "that training did)")
    if bool(np.isfinite(g.all_values).all()):
        return "; the training loss and grad_norm stayed finite: the evaluation computes the NaN"
    return ""


def _nonfinite_finding(events: list[NonfiniteSeries], run: Run, rank: int | None) -> Finding:
    sev: Severity = max((e.severity for e in events), key=lambda s: SEVERITY_ORDER[s])
    # The training loss leads when it is affected; else the worst, earliest series.
    primary = next((e for e in events if e.metric == "loss"), None) or min(
        events, key=lambda e: (-SEVERITY_ORDER[e.severity], e.first_bad_step))
    onset = min(e.first_bad_step for e in events)
    persistent = sev == "error"
    end_step = primary.stretches[0][1]
    evidence = []
    for e in events[:4]:
        note = _series_phrase(e)
        note += ("; reference = last finite value" + (f", at step {e.ref_step}"
                 if e.ref_step is not None else "")) if e.ref_value is not None else \
            "; no finite value before it"
        evidence.append(Evidence(metric=e.metric, step=e.first_bad_step,
                                 value=e.first_bad_value, reference=e.ref_value, note=note))
    others = [e.metric for e in events if e is not primary]
    if primary.through_end and not primary.from_first:
        summary = (f"{primary.metric} became {fmt(primary.first_bad_value)} at step "
                   f"{primary.first_bad_step} and stayed non-finite "
                   f"({', '.join(e.metric for e in events[:4])})")
    else:
        summary = _series_phrase(primary)
        if others:
            summary += f" (also {', '.join(others[:5])}{' ...' if len(others) > 5 else ''})"
    if all(e.is_eval for e in events) and Trace.of(run, "loss", rank) is not None:
        summary += _train_side(run, rank)
    # The live watcher's NaN guard replayed the step: name where it broke.
    event = nonfinite_event(run, rank, onset, None if persistent else end_step)
    if event is not None:
        summary += f"; {localized_phrase(event)}"
        evidence[1:1] = localized_evidence(event)
    return Finding(
        symptom="nonfinite_loss", severity=sev, confidence=1.0, onset_step=onset,
        end_step=None if persistent else end_step, rank=rank, metric=primary.metric,
        summary=summary, evidence=tuple(evidence))


@register_detector("nonfinite_loss")
def detect_nonfinite_loss(run: Run) -> list[Finding] | NotRun:
    """Any NaN/inf in a loss series; one finding per rank over all of them. Severity per
    series (``_series_severity``), the finding takes the worst. When the NaN guard localized
    a step of the first non-finite stretch, the summary names the module and where it broke,
    and the localization is evidence."""
    if not loss_like_metrics(run):
        return NotRun("log loss to enable this check", missing=("loss",))
    findings: list[Finding] = []
    for rank in run.ranks():
        events = nonfinite_series(run, rank)
        if events:
            findings.append(_nonfinite_finding(events, run, rank))
    return findings


# --------------------------------------------------------------------------- nan_masked
def _filter_known(run: Run) -> bool:
    fw = str(run.meta.get("framework", "")).lower()
    return fw in HF_FRAMEWORKS or bool(run.meta.get("logging_nan_inf_filter"))


@register_detector("nan_masked_in_logs", requires=("loss",))
def detect_nan_masked(run: Run) -> list[Finding] | NotRun:
    """A logger dropped non-finite losses from its average (HF Trainer's
    ``logging_nan_inf_filter``, on by default). Two rules, from what the data shows:

    (a) under the HF Trainer only (others log the step's own loss, NaN included: there this
        is a backward NaN, nonfinite_grad's): grad_norm is NaN/inf at a logged step whose
        loss is finite. Isolated points with the
        loss on trend are what fp16 loss scaling skipping overflow steps looks like (info);
        >= 2 consecutive, a rising density, a loss reaction, or a last-point one is a warning
        (error when grad_norm stays non-finite to the end).
    (b) under the HF Trainer only: the logged loss drops to exactly 0.0 straight from a value
        >= 0.01 (the Trainer logs 0.0 when every step in the window was NaN), or the last
        >= 4 logged losses are bit-identical after the loss had varied - unless that value is
        at the logging resolution after losses already < 0.01 (a converged loss rounded to 4
        decimals), or grad_norm is finite at those steps.
    (c)-(e), any logger: isolated exact zeros, a fall to exactly 0 that stays, and a loss
        that stops being logged while the run's other per-step metrics go on (see the
        helpers; not for the watcher's own unfiltered store); (b') too when the grad norm
        is NaN under the bit-identical tail.
    """
    out: list[Finding] = []
    hf = _filter_known(run)
    # trainmedic's own watcher records every step's loss unfiltered: a finite loss beside a
    # NaN grad_norm there is a backward-only NaN (nonfinite_grad), not a masking logger.
    unfiltered = run.meta.get("format") == "trainmedic.store"
    for tr in traces(run, "loss"):
        if len(tr.all_values) < 2:
            continue
        g = Trace.of(run, "grad_norm", tr.rank)
        if g is not None and not unfiltered and hf and not bool(np.isfinite(g.all_values).all()):
            finite_loss_steps = tr.all_steps[np.isfinite(tr.all_values)]
            bad_g = ~np.isfinite(g.all_values)
            masked = bad_g & np.isin(g.all_steps, finite_loss_steps)
            scaler = _scaler_skips(run, tr.rank, g.all_steps)
            if masked.any() and bool(np.all(scaler[masked])):
                # every one at a drop of the logged loss scale: the dynamic loss scaler
                # skipped an overflow step, as it is built to; loss_scale_collapse judges
                # whether the scale itself collapsed
                continue
            if masked.any():
                idx = np.flatnonzero(masked)
                at_end = bool(bad_g[-1])
                why = _masked_grad_alarm(idx, bad_g, g.all_steps, tr)
                sev: Severity = "error" if at_end and idx.size >= 2 else (
                    "warning" if at_end or why else "info")
                onset = int(g.all_steps[idx[0]])
                lv = tr.value_at(onset)
                out.append(Finding(
                    symptom="nan_masked_in_logs", severity=sev,
                    confidence=0.9, onset_step=onset,
                    end_step=None if at_end else int(g.all_steps[idx[-1]]), rank=tr.rank,
                    metric="loss",
                    summary=(f"grad_norm was non-finite at {idx.size} logged step(s) from step "
                             f"{onset} while the logged loss stayed finite ({fmt(lv)}): the "
                             f"logger likely averaged only the finite losses"
                             + (f" ({why})" if why else
                                "" if at_end else
                                "; isolated points with the loss on trend, as fp16 loss "
                                "scaling skipping an overflow step looks")),
                    evidence=(
                        Evidence("grad_norm", onset, float(g.all_values[idx[0]]), None,
                                 note=f"{idx.size} of {len(g.all_values)} logged grad_norm "
                                      f"values are non-finite at steps with a finite loss"),
                        Evidence("loss", onset, lv, None,
                                 note="loss logged at the same step"),
                    )))
                continue
        if not hf and len(tr) >= 6:
            # (A bit-identical tail is not read as masking here: a full-batch or per-epoch
            # loss of weights that stopped changing repeats exactly too.)
            f = _isolated_zeros(tr) or _zeros_to_the_end(run, tr) or (
                None if unfiltered else _loss_dropped(run, tr) or loss_gaps(run, tr))
            if f is None and not unfiltered and (nan_grads_under_tail(tr, g) or
                                                 nan_grads_under_tail(tr, Trace.of(
                                                     run, "val_loss", tr.rank), 1)):
                # ... unless the grad norm logged over that tail is NaN/inf, or the validation
                # loss (NaN weights): then the logger repeats its last finite value.
                f = _repeated_tail(tr, None)
            if f is not None:
                out.append(f)
                continue
        if not hf or len(tr) < 6:
            continue
        v = tr.values
        zero_jump = np.flatnonzero((v[1:] == 0.0) & (v[:-1] >= 0.01))
        if zero_jump.size:
            i = int(zero_jump[0]) + 1
            out.append(Finding(
                symptom="nan_masked_in_logs", severity="warning", confidence=0.7,
                onset_step=int(tr.steps[i]), rank=tr.rank, metric="loss",
                summary=(f"logged loss fell from {fmt(float(v[i - 1]))} to exactly 0.0 at step "
                         f"{int(tr.steps[i])}: the HF Trainer logs 0.0 when every loss in the "
                         f"logging window was NaN/inf and was filtered"),
                evidence=(Evidence("loss", int(tr.steps[i]), 0.0, float(v[i - 1]),
                                   note="previous logged loss"),)))
            continue
        out.extend(f for f in [_repeated_tail(tr, g) or _loss_dropped(run, tr)] if f)
    return out


def identical_tail_start(v: np.ndarray) -> int:
    """Index of the first of the bit-identical values that end ``v`` (len - 1 when the last
    value differs from the one before)."""
    differ = np.flatnonzero(v[1:] != v[:-1])
    return int(differ[-1]) + 1 if differ.size else 0


def nan_grads_under_tail(tr: Trace, g: Trace | None, min_points: int = 3) -> bool:
    """Whether grad_norm (or another per-step witness ``g``: the validation loss, with
    ``min_points`` 1) is NaN/inf at >= 80% of its logged points over the >= 4 bit-identical
    logged losses that end ``tr`` (the logger repeats its last finite loss over NaN steps)."""
    if g is None or len(tr) < 5:
        return False
    i = identical_tail_start(tr.values)
    if len(tr) - i < 4:
        return False
    raw = g.all_values[g.all_steps >= int(tr.steps[i])]
    return raw.size >= min_points and float(np.mean(~np.isfinite(raw))) >= 0.8


def _repeated_tail(tr: Trace, g: Trace | None) -> Finding | None:
    """HF Trainer: the last >= 4 logged losses are bit-identical after >= 5 distinct ones
    (unless a converged loss at the logging resolution, or a finite grad_norm at those steps,
    explains it): the Trainer filtered NaN windows, or repeats its last value."""
    v = tr.values
    same = np.concatenate([[False], v[1:] == v[:-1]])
    tail = 0
    while tail < len(v) - 1 and same[len(v) - 1 - tail]:
        tail += 1
    distinct_before = np.unique(v[: len(v) - tail - 1]).size
    i = len(v) - tail - 1
    if tail < 3 or distinct_before < 5 or _converged_flatline(v, i, tr, g):
        return None
    return Finding(
        symptom="nan_masked_in_logs", severity="warning", confidence=0.5,
        onset_step=int(tr.steps[i]), rank=tr.rank, metric="loss",
        summary=(f"the last {tail + 1} logged losses are all exactly {fmt(float(v[-1]))} from "
                 f"step {int(tr.steps[i])}: a per-batch loss does not repeat to the last bit; "
                 f"the logger likely repeats its last finite value (or filters NaN losses)"),
        evidence=(Evidence("loss", int(tr.steps[i]), float(v[-1]), None,
                           note=f"{tail + 1} consecutive bit-identical logged values after "
                                f"{distinct_before} distinct ones"),))


#: Per-step training metrics whose logging going on shows the run went on (not evaluations).
_GOING_ON = ("lr", "grad_norm", "step_time_s", "samples_per_s", "tokens_per_s", "data_time_s")


def _loss_dropped(run: Run, tr: Trace) -> Finding | None:
    """Any logger: the loss stops being logged while the run's other per-step metrics (lr,
    grad_norm, step time, throughput) go on for >= 3 more loss intervals and >= 3 of their own
    points to the end of the log. A loss that turned NaN is dropped by a logger that skips
    non-finite values (an ``if math.isfinite(loss)`` guard); the run behind it kept going."""
    if len(tr) < 6:
        return None
    last = int(tr.all_steps[-1])
    interval = float(np.median(np.diff(tr.steps)))
    for m in _GOING_ON:
        o = Trace.of(run, m, tr.rank)
        if o is None or len(o.all_steps) < 6:
            continue
        after = o.all_steps[o.all_steps > last]
        if after.size >= 3 and float(after[-1] - last) >= 3 * interval and \
                int(o.all_steps[-1]) >= int(run.last_step() or 0):
            return Finding(
                symptom="nan_masked_in_logs", severity="warning", confidence=0.5,
                onset_step=int(after[0]), rank=tr.rank, metric="loss",
                summary=(f"the loss is no longer logged after step {last}, while {m} is logged "
                         f"{after.size} more times to step {int(after[-1])}: a logger that "
                         f"skips non-finite values drops a loss that went NaN"),
                evidence=(Evidence("loss", last, float(tr.all_values[-1]), None,
                                   note="the last logged loss"),
                          Evidence(m, int(after[-1]), None, None,
                                   note=f"{after.size} points of {m} after the last loss")))
    return None


def _isolated_zeros(tr: Trace) -> Finding | None:
    """Any logger: >= 2 stretches (<= 5 points) of logged losses of exactly 0.0, each between
    losses >= 0.01, in a log whose other losses never go below 0.01 (the loss drops to 0 and
    is back at the next point: ``torch.nan_to_num`` or a filtered average over a window of NaN
    steps; a loss that reaches near 0 on its own - a saturated softmax on class-sorted data -
    can touch 0.0 exactly). Where the log rounds to 4 decimals the bar is 0.1 (a batch that
    easy could round to 0.0000 beside 0.03)."""
    v = tr.values
    rounded = bool(np.all(np.abs(v * 1e4 - np.round(v * 1e4)) < 1e-6))
    floor = 0.1 if rounded else 0.01
    # stretches of <= 5 zeros with a loss >= floor on both sides
    at = [a for a, b in true_runs(v == 0.0)
          if 0 < a and b < len(v) and b - a <= 5 and v[a - 1] >= floor and v[b] >= floor]
    nonzero = v[v != 0.0]
    if len(at) < 2 or not nonzero.size or float(np.min(np.abs(nonzero))) < floor:
        return None  # a loss that reaches near 0 on its own (saturated softmax) can hit 0.0
    i = int(at[0])
    return Finding(
        symptom="nan_masked_in_logs", severity="warning", confidence=0.6,
        onset_step=int(tr.steps[i]), rank=tr.rank, metric="loss",
        summary=(f"the logged loss is exactly 0.0 at {len(at)} isolated stretches from step "
                 f"{int(tr.steps[i])}, each between losses >= {floor:g}: a loss does not touch 0 "
                 f"for one step; NaN losses were likely replaced by 0 (nan_to_num) or filtered "
                 f"out of the logged average"),
        evidence=(Evidence("loss", int(tr.steps[i]), 0.0, float(v[i - 1]),
                           note=f"previous logged loss; {len(at)} such stretches in "
                                f"{len(v)} logged points"),))


def _zeros_to_the_end(run: Run, tr: Trace) -> Finding | None:
    """Any logger: the logged loss drops straight from >= 0.01 (0.1 where the log rounds to 4
    decimals) to exactly 0.0 and stays exactly 0.0 for the >= 3 last points, in a log whose
    earlier losses never went below that bar. A loss does not fall 100x in one logging
    interval onto an exact 0 and stay there: the weights went NaN and the logger writes 0 for
    NaN (``nan_to_num``, a ``0 if isnan`` guard). A grad_norm logged as 0 or NaN over the same
    stretch is shown beside it. Error: the run is broken to its end."""
    v = tr.values
    rounded = bool(np.all(np.abs(v * 1e4 - np.round(v * 1e4)) < 1e-6))
    floor = 0.1 if rounded else 0.01
    nz = np.flatnonzero(v != 0.0)
    if not nz.size or len(v) - 1 - int(nz[-1]) < 3:
        return None
    i = int(nz[-1]) + 1
    if float(np.min(np.abs(v[:i]))) < floor:
        return None  # it was near 0 before: a loss that converged can round to 0.0
    at = int(tr.steps[i])
    val = Trace.of(run, "val_loss", tr.rank) or Trace.of(run, "val_loss", None)
    if val is not None and bool(np.any(val.values[val.steps >= at] > 0)):
        return None  # the evaluations stay above 0: a margin loss met (hinge), not a NaN
    ev = [Evidence("loss", at, 0.0, float(v[i - 1]),
                   note=f"previous logged loss; exactly 0.0 at all {len(v) - i} logged points "
                        f"from here to the end")]
    g = Trace.of(run, "grad_norm", tr.rank)
    if g is not None:
        gv = g.all_values[g.all_steps >= at]
        if gv.size and bool(np.all((gv == 0.0) | ~np.isfinite(gv))):
            ev.append(Evidence("grad_norm", at, float(gv[0]), None,
                               note=f"grad_norm is 0 or non-finite at all {gv.size} logged "
                                    f"points over the same steps: no gradient either"))
    return Finding(
        symptom="nan_masked_in_logs", severity="error", confidence=0.7, onset_step=at,
        rank=tr.rank, metric="loss",
        summary=(f"the logged loss fell straight from {fmt(float(v[i - 1]))} to exactly 0.0 at "
                 f"step {at} and stayed exactly 0.0 to the end ({len(v) - i} points): a loss "
                 f"does not land on 0 in one step; the weights likely went NaN and the logger "
                 f"writes NaN as 0"),
        evidence=tuple(ev))


def _scaler_skips(run: Run, rank: int | None, steps: np.ndarray) -> np.ndarray:
    """Which of ``steps`` a logged loss scale dropped at (at that step or the next logged
    one): where fp16's dynamic loss scaler met an overflow and skipped the step."""
    ls = Trace.of(run, "loss_scale", rank) or Trace.of(run, "loss_scale", None)
    if ls is None or len(ls) < 2:
        return np.zeros(steps.shape, dtype=bool)
    drops = ls.steps[1:][np.diff(ls.values) < 0]
    if drops.size == 0:
        return np.zeros(steps.shape, dtype=bool)
    # the first logged loss-scale step at or after each step: a drop there is this step's
    nxt = np.searchsorted(ls.steps, steps, side="left")
    at = ls.steps[np.minimum(nxt, len(ls) - 1)]
    after = ls.steps[np.minimum(nxt + 1, len(ls) - 1)]
    return np.isin(at, drops) | np.isin(after, drops)


#: HF Trainer rounds the logged loss to 4 decimals: a converged loss repeats 0.0 or 0.0001.
LOG_RESOLUTION = 5e-4


def _converged_flatline(v: np.ndarray, i: int, tr: Trace, g: Trace | None) -> bool:
    """True when bit-identical losses from index ``i`` on are explained without NaNs: the
    value is at the logging resolution (|v| <= 5e-4) after losses that were already below
    0.01 (a converged run fell there; a NaN-filtered window jumps there, which rule (b)'s
    zero-jump catches), or grad_norm is logged and finite at those steps (a NaN loss makes a
    NaN gradient)."""
    if abs(float(v[i])) <= LOG_RESOLUTION and bool(np.all(np.abs(v[max(0, i - 5):i]) < 0.01)):
        return True
    if g is None:
        return False
    tail_steps = tr.steps[i:]
    return bool(np.all(np.isin(tail_steps, g.steps)))


def _masked_grad_alarm(idx: np.ndarray, bad_g: np.ndarray, g_steps: np.ndarray,
                       tr: Trace) -> str:
    """Why non-finite grad_norm points at finite-loss steps are more than fp16 loss scaling
    skipping overflow steps (GradScaler skips the step and logs an inf/NaN norm at a few
    isolated steps, with the loss on trend): "" when nothing says so, else the reason.
    Reasons: >= 2 consecutive logged points; a rising density (>= 3 in the last quarter of
    the log, at >= 3x the rate before); or the loss reacting within 2 logged points (>= 1.2x
    or <= 1/1.2 the median of the 20 points before and beyond 4 of their robust sigmas, or
    exactly 0.0)."""
    if bool(np.any(bad_g[1:] & bad_g[:-1])):
        return ">= 2 consecutive logged points"
    n = bad_g.size
    q = (3 * n) // 4
    late = int(bad_g[q:].sum())
    early = int(bad_g[:q].sum())
    if late >= 3 and late / max(1, n - q) >= 3.0 * early / max(1, q):
        return "more and more often towards the end"
    for i in idx.tolist():
        j = int(np.searchsorted(tr.steps, g_steps[i], side="left"))
        if j < 5:
            continue
        before = tr.values[max(0, j - 20):j]
        near = tr.values[j:j + 3]
        if near.size == 0 or not bool(np.all(before > 0)):
            continue
        if bool(np.any(near <= 0.0)):
            return f"the loss reacted near step {int(g_steps[i])}"
        lb = np.log(before)
        # Beyond both 1.2x and the loss's own noise (4 robust sigmas of the 20 before).
        tol = max(math.log(1.2), 4.0 * robust_sigma(lb))
        if float(np.max(np.abs(np.log(near) - median(lb)))) >= tol:
            return f"the loss reacted near step {int(g_steps[i])}"
    return ""


#: A loss of exactly 0 judged against the gradient: at least this share of the grad norms
#: logged at the same steps must be NaN/inf or exactly 0.
ZERO_LOSS_DEAD_GRAD_SHARE = 0.8


def zero_loss_without_gradient(run: Run, tr: Trace) -> Finding | None:
    """A loss of exactly 0 at every logged point is normally a loss below the logger's rounding
    (HF writes 4 decimals): a converged model, nothing to judge. Not when the gradient norm
    logged at the same steps is NaN/inf or exactly 0 at >= 80% of them: a model at a tiny but
    real loss still has a finite, positive gradient. Then the 0 carries no signal (every
    label masked out, a NaN logged as 0, a loss detached from the model): flat_loss, error."""
    raw = run.series.get(("grad_norm", tr.rank)) or run.series.get(("grad_norm", None))
    if raw is None or len(raw.values) == 0:
        return None
    lo, hi = int(tr.steps[0]), int(tr.steps[-1])
    inside = (raw.steps >= lo) & (raw.steps <= hi)
    g = raw.values[inside]
    if g.size < 3:
        return None
    dead = ~np.isfinite(g) | (g == 0.0)
    share = float(np.mean(dead))
    if share < ZERO_LOSS_DEAD_GRAD_SHARE:
        return None
    what = "NaN/inf" if not bool(np.any(g[dead] == 0.0)) else (
        "0" if bool(np.all(g[dead] == 0.0)) else "NaN/inf or 0")
    return Finding(
        symptom="flat_loss", severity="error", confidence=0.8, onset_step=lo, end_step=hi,
        rank=tr.rank, metric="loss",
        summary=(f"the loss is exactly 0 at all {len(tr)} logged points (steps {lo}-{hi}) "
                 f"while grad_norm is {what} at {100 * share:.0f}% of them: not a converged "
                 f"model (whose gradient stays finite and positive) but a loss with no signal "
                 f"(every label masked out, a NaN logged as 0, a loss detached from the model)"),
        evidence=(Evidence("loss", hi, 0.0, None, note="every logged value is exactly 0"),
                  Evidence("grad_norm", int(raw.steps[inside][0]), None, None,
                           note=f"{int(dead.sum())} of {g.size} values at the same steps "
                                f"are {what}")))
