"""The router: for each finding, the ranked causes (each checked against the metric it names)
and the interventions they suggest.

The rule: a cause that names a metric is checked against that metric's data *before* it is
said. When the metric is logged, the check either supports the cause (kept, marked
``checked_against_data=True``, ranked first) or does not (dropped: the data contradicts or
fails to show it - e.g. "lr too high at the onset" when lr had decayed to a tenth of its peak).
When the metric is not logged, the cause is kept as unchecked, with a note saying what to log.
Causes that no logged metric could check are kept, unchecked, at their prior rank.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Literal

import numpy as np

from trainmedic.diagnose.detectors.loss_nonfinite import HF_FRAMEWORKS, is_eval_metric
from trainmedic.diagnose.finding import Cause, Finding, Intervention, Likelihood
from trainmedic.diagnose.localization import finding_event, localized_kind, module_label
from trainmedic.diagnose.rules import (
    CAUSES,
    FROZEN_PREDICTION_CAUSES,
    INFO_INTERVENTIONS,
    INTERVENTIONS,
    LOCALIZED_CAUSES,
    LOCALIZED_SYMPTOMS,
    CauseRule,
)
from trainmedic.diagnose.stats import median
from trainmedic.diagnose.trace import Trace, fmt
from trainmedic.run.series import Run

__all__ = ["route", "CHECKS", "Verdict"]

log = logging.getLogger(__name__)

Verdict = Literal["supports", "contradicts"]


class _NoData(Exception):
    """The metric is logged but has no finite point where the check needs one."""


CheckFn = Callable[[Finding, Run], "tuple[Verdict, str]"]

_MAX_INTERVENTIONS = 4
_LIKELY = {"high": 0, "medium": 1, "low": 2}


def _trace(run: Run, metric: str, rank: int | None) -> Trace | None:
    t = Trace.of(run, metric, rank)
    if t is None or len(t) == 0:
        t = Trace.of(run, metric, None)
    if t is None or len(t) == 0:
        for r in run.ranks():
            t = Trace.of(run, metric, r)
            if t is not None and len(t):
                return t
        return None
    return t


def _need(run: Run, metric: str, rank: int | None) -> Trace:
    """The metric's trace for a check; ``_NoData`` (cause kept unchecked) when it has none."""
    t = _trace(run, metric, rank)
    if t is None:
        raise _NoData()
    return t


def _onset(f: Finding, run: Run) -> int:
    if f.onset_step is not None:
        return f.onset_step
    return run.last_step() or 0


# --------------------------------------------------------------------------- lr checks
def _lr_high_at_onset(f: Finding, run: Run) -> tuple[Verdict, str]:
    lr = _need(run, "lr", f.rank)
    s = _onset(f, run)
    now = lr.value_at(s)
    upto = lr.values[lr.steps <= s]
    if now is None or upto.size == 0:
        return "contradicts", "lr was not logged before the onset"
    peak = float(upto.max())
    back = max(lr.interval * 5, 0.1 * max(1, s - int(lr.steps[0])))
    before = lr.value_at(int(s - back))
    rising = before is not None and now > 1.05 * before
    if peak > 0 and (now >= 0.8 * peak or rising):
        how = "rising into the onset" if rising else "at or near its peak"
        return "supports", (f"lr was {fmt(now)} at step {s}, {how} (peak so far "
                            f"{fmt(peak)})")
    return "contradicts", f"lr at step {s} was {fmt(now)}, well below its peak {fmt(peak)}"


def _lr_high_after_start(f: Finding, run: Run) -> tuple[Verdict, str]:
    # A layer finding whose onset is its first measurement (units born dead or saturated
    # at init) cannot be blamed on an update: every lr is "at its peak so far" at step 0.
    t = _trace(run, f.metric, f.rank) if f.metric else None
    if t is not None and len(t) and f.onset_step is not None \
            and f.onset_step <= int(t.steps[0]):
        return "contradicts", "affected from the first measurement (init, not an update)"
    return _lr_high_at_onset(f, run)


def _lr_starts_at_peak(f: Finding, run: Run) -> tuple[Verdict, str]:
    lr = _need(run, "lr", f.rank)
    first, peak = float(lr.values[0]), float(lr.values.max())
    if peak > 0 and first >= 0.9 * peak:
        return "supports", f"lr started at {fmt(first)}, already {100 * first / peak:.0f}% " \
                           f"of its peak {fmt(peak)}: no warm-up"
    return "contradicts", f"lr started at {fmt(first)} and warmed up to {fmt(peak)}"


def _lr_rising_at_end(f: Finding, run: Run) -> tuple[Verdict, str]:
    lr = _need(run, "lr", f.rank)
    last = float(lr.values[-1])
    earlier = lr.value_at(int(lr.steps[-1] - max(lr.interval * 3, 0.1 * max(1, lr.span))))
    if earlier is not None and last > 1.01 * earlier:
        return "supports", f"lr rose from {fmt(earlier)} to {fmt(last)} over the last steps"
    return "contradicts", f"lr was not rising at the end ({fmt(earlier)} -> {fmt(last)})"


def _lr_collapsed(f: Finding, run: Run) -> tuple[Verdict, str]:
    lr = _need(run, "lr", f.rank)
    peak, last = float(lr.values.max()), float(lr.values[-1])
    if peak > 0 and last <= 1e-3 * peak:
        return "supports", f"lr ended at {fmt(last)}, {last / peak:.1e} of its peak {fmt(peak)}"
    return "contradicts", f"lr ended at {fmt(last)} (peak {fmt(peak)}): no collapse"


def _lr_zero(f: Finding, run: Run) -> tuple[Verdict, str]:
    lr = _need(run, "lr", f.rank)
    if bool(np.all(np.abs(lr.values) <= 1e-12)):
        return "supports", "every logged lr is 0"
    return "contradicts", f"lr is non-zero (max {fmt(float(lr.values.max()))})"


def _lr_zero_from_onset(f: Finding, run: Run) -> tuple[Verdict, str]:
    lr = _need(run, "lr", f.rank)
    tail = lr.values[lr.steps >= (f.onset_step or 0)]
    if tail.size and bool(np.all(tail == 0)):
        return "supports", f"all {tail.size} lr values logged from step {f.onset_step} are 0"
    if not tail.size:
        return "contradicts", "no lr logged after the onset"
    return "contradicts", f"lr is non-zero after step {f.onset_step} " \
                          f"(max {fmt(float(tail.max()))})"


def _lr_tiny(f: Finding, run: Run) -> tuple[Verdict, str]:
    lr = _need(run, "lr", f.rank)
    peak = float(np.abs(lr.values).max())
    if 0 < peak <= 1e-6:
        return "supports", f"peak lr is only {fmt(peak)}"
    return "contradicts", f"peak lr {fmt(peak)} is not unusually small"


def _lr_annealed(f: Finding, run: Run) -> tuple[Verdict, str]:
    lr = _need(run, "lr", f.rank)
    peak = float(lr.values.max())
    s = _onset(f, run)
    at = lr.value_at(s)
    end = float(lr.values[-1])
    lo = min(end, at if at is not None else end)
    if peak > 0 and lo <= 0.3 * peak:
        return "supports", (f"lr had decayed to {fmt(lo)} ({100 * lo / peak:.0f}% of its "
                            f"peak {fmt(peak)})")
    return "contradicts", f"lr stayed at {fmt(end)} ({fmt(100 * end / peak if peak else 0)}% " \
                          f"of its peak)"


def _lr_not_decayed(f: Finding, run: Run) -> tuple[Verdict, str]:
    v, why = _lr_annealed(f, run)
    if v == "supports":
        return "contradicts", why
    return "supports", why


def _lr_end_near_zero(f: Finding, run: Run) -> tuple[Verdict, str]:
    lr = _need(run, "lr", f.rank)
    peak, end = float(lr.values.max()), float(lr.values[-1])
    if peak > 0 and end <= 0.01 * peak:
        return "supports", f"lr ended at {fmt(end)}, under 1% of its peak {fmt(peak)}"
    return "contradicts", f"lr ended at {fmt(end)} (peak {fmt(peak)})"


# --------------------------------------------------------------------------- loss checks
def _spike_recovered(f: Finding, run: Run) -> tuple[Verdict, str]:
    if f.end_step is not None:
        return "supports", f"the loss came back to its running median by step {f.end_step}"
    return "contradicts", "the loss did not come back after the spike"


#: A training loss this many times the validation loss at the same steps is on another scale:
#: summed over the batch, or micro-batch losses added without dividing by their count (a
#: healthy run's train/val ratio stays within ~0.5-2x, dropout and augmentation included).
SUMMED_LOSS_RATIO = 3.0


def _train_loss_summed(f: Finding, run: Run) -> tuple[Verdict, str]:
    loss, val = _need(run, "loss", f.rank), _need(run, "val_loss", f.rank)
    s = _onset(f, run)
    steps = [int(x) for x, v in zip(val.steps, val.values, strict=True)
             if x <= s and math.isfinite(v) and v > 0]
    where = f"before step {s}"
    if not steps:  # an onset at the start: the first evaluations
        steps = [int(x) for x, v in zip(val.steps[:3], val.values[:3], strict=True)
                 if math.isfinite(v) and v > 0]
        where = "from the start"
    ratios = [t / v for x in steps
              if (t := loss.value_at(x)) is not None and math.isfinite(t) and t > 0
              and (v := val.value_at(x)) is not None and v > 0]
    if not ratios:
        raise _NoData()
    r = float(np.median(ratios))
    where = f"at {len(ratios)} evaluation step(s) {where}"
    if r >= SUMMED_LOSS_RATIO:
        return "supports", (f"the training loss was {r:.3g}x the validation loss {where}: a "
                            "sum, not a mean, each step that much larger")
    return "contradicts", f"the training loss was {r:.2g}x the validation loss {where}"


def _loss_rising_before_onset(f: Finding, run: Run) -> tuple[Verdict, str]:
    lt = _need(run, "loss", f.rank)
    s = _onset(f, run)
    before = lt.values[lt.steps < s]
    if before.size < 6:
        return "contradicts", "too few finite losses before the onset to tell"
    k = max(2, before.size // 10)
    recent = median(before[-k:])
    best = float(np.min(before[:-k])) if before.size > k else recent
    if best > 0 and recent >= 1.5 * best:
        return "supports", (f"the loss had risen to {fmt(recent)} (last {k} finite points) "
                            f"from a best of {fmt(best)} before going non-finite")
    return "contradicts", f"the loss was at {fmt(recent)} just before, near its best {fmt(best)}"


def _at_chance(f: Finding, run: Run) -> tuple[Verdict, str]:
    for e in f.evidence:
        if "ln(" in e.note and e.reference is not None:
            k = round(math.exp(e.reference))
            return "supports", f"{e.metric} {fmt(e.value)} ~ ln({k}) = {e.reference:.4f}"
    return "contradicts", "the loss level is not ln(k) for a small integer k"


def _train_loss_falling(f: Finding, run: Run) -> tuple[Verdict, str]:
    for e in f.evidence:
        if e.metric == "loss" and e.value is not None and e.reference is not None:
            if e.value < e.reference:
                return "supports", (f"training loss fell {fmt(e.reference)} -> {fmt(e.value)} "
                                    f"over the same steps")
            return "contradicts", "training loss did not fall after the best step"
    return "contradicts", "no training loss near the validation steps"


def _loss_fell(f: Finding, run: Run) -> tuple[Verdict, str]:
    if f.severity == "info":
        return "supports", "the loss fell by more than half over the same steps"
    return "contradicts", "the loss did not fall while the gradients shrank"


# --------------------------------------------------------------------------- other checks
def _grad_spike_at_onset(f: Finding, run: Run) -> tuple[Verdict, str]:
    g = _need(run, "grad_norm", f.rank)
    s = _onset(f, run)
    w = 2 * g.interval
    near = g.values[(g.steps >= s - w) & (g.steps <= s + w)]
    med = median(g.values) if len(g) else 0.0
    if near.size and med > 0 and float(near.max()) >= 3 * med:
        return "supports", f"grad_norm reached {fmt(float(near.max()))} at the onset vs " \
                           f"median {fmt(med)}"
    return "contradicts", "grad_norm stayed near its median at the onset"


def _grad_spikes_isolated(f: Finding, run: Run) -> tuple[Verdict, str]:
    if "spike" in f.summary:
        return "supports", "isolated spikes, with normal grad_norm between them"
    return "contradicts", "a sustained rise, not isolated spikes"


def _grad_or_update_zero(f: Finding, run: Run) -> tuple[Verdict, str]:
    for metric in ("update_ratio", "grad_norm"):
        t = _trace(run, metric, f.rank)
        if t is not None and len(t):
            med = median(np.abs(t.values))
            if med <= 1e-10:
                return "supports", f"{metric} is ~0 (median {fmt(med)})"
            return "contradicts", f"{metric} is non-zero (median {fmt(med)})"
    return "contradicts", "no gradient metric"


def _optimizer_params_foreign(f: Finding, run: Run) -> tuple[Verdict, str]:
    # The watcher compares the optimizer's parameters with the model's at start and records
    # an event when some are not the model's; meta says the comparison ran.
    events = run.events_of("optimizer_params_not_in_model")
    if events:
        d = events[0].data
        return "supports", (f"the watcher found {d.get('foreign')} of the optimizer's "
                            f"{d.get('optimizer_params')} parameters outside the model")
    return "contradicts", "the watcher found every optimizer parameter in the model"


def _param_norm_constant(f: Finding, run: Run) -> tuple[Verdict, str]:
    p = _need(run, "param_norm", f.rank)
    lo, hi = float(p.values.min()), float(p.values.max())
    if hi - lo <= 1e-9 * max(abs(hi), 1.0):
        return "supports", f"param_norm never changed ({fmt(hi)})"
    return "contradicts", f"param_norm changed ({fmt(lo)} .. {fmt(hi)})"


def _loss_scale_logged(f: Finding, run: Run) -> tuple[Verdict, str]:
    ls = _need(run, "loss_scale", f.rank)
    return "supports", f"a loss scale is logged (fp16 with GradScaler; last " \
                       f"{fmt(float(ls.all_values[-1]))})"


def _hf_trainer_run(f: Finding, run: Run) -> tuple[Verdict, str]:
    fw = str(run.meta.get("framework", ""))
    if fw in HF_FRAMEWORKS or run.meta.get("logging_nan_inf_filter"):
        return "supports", "the log is an HF Trainer trainer_state.json"
    return "supports", "the pattern matches a NaN filter (framework not recorded)"


def _nan_guard_localized(f: Finding, run: Run) -> tuple[Verdict, str]:
    ev = finding_event(f, run)
    if ev is None:
        return "contradicts", "the NaN guard localized no step of this incident"
    return "supports", f"NaN guard replay of step {ev.step}: {ev.data.get('detail', '')}"


def _finding_metric_is(f: Finding, run: Run, rule: CauseRule) -> tuple[Verdict, str]:
    if rule.metric == f.metric:
        return "supports", f"the symptom was measured on {f.metric}"
    return "contradicts", f"the symptom is on {f.metric}, not {rule.metric}"


def _kept_tensors_show(f: Finding, run: Run) -> tuple[Verdict, str]:
    """Tensors kept across steps live in device memory on GPU and in host memory on CPU."""
    if f.metric in ("mem_alloc_mb", "mem_peak_mb"):
        return "supports", f"allocated tensor memory itself grows ({f.metric})"
    if f.metric == "rss_mb" and not run.has("mem_alloc_mb"):
        return "supports", ("host RSS grows and no device memory is logged (a CPU run): kept "
                            "tensors live in host memory")
    return "contradicts", f"the growth is in {f.metric}, not in allocated tensor memory"


def _outliers_periodic(f: Finding, run: Run) -> tuple[Verdict, str]:
    if "recurring every" in f.summary:
        return "supports", "the slow steps recur at a fixed interval"
    return "contradicts", "the slow steps do not recur at a fixed interval"


def _data_time_high_at_outliers(f: Finding, run: Run) -> tuple[Verdict, str]:
    d = _need(run, "data_time_s", f.rank)
    e = f.evidence[0] if f.evidence else None
    if e is None or e.step is None or e.value is None:
        return "contradicts", "no outlier step to compare"
    at = d.value_at(e.step)
    med = median(d.values)
    if at is not None and at >= 0.5 * (e.value - (e.reference or 0)):
        return "supports", f"data_time_s was {fmt(at)} s at step {e.step} (median {fmt(med)})"
    return "contradicts", f"data_time_s was {fmt(at)} s at the slowest step (median {fmt(med)})"


def _gc_time_high_at_outliers(f: Finding, run: Run) -> tuple[Verdict, str]:
    g = _need(run, "gc_time_s", f.rank)
    e = f.evidence[0] if f.evidence else None
    if e is None or e.step is None or e.value is None:
        return "contradicts", "no outlier step to compare"
    at = g.value_at(e.step) or 0.0  # the watcher records 0 on a step without a collection
    if at >= 0.5 * (e.value - (e.reference or 0)):
        return "supports", f"gc_time_s was {fmt(at)} s at step {e.step}"
    return "contradicts", f"gc_time_s was {fmt(at)} s at the slowest step"


def _data_time_rose(f: Finding, run: Run) -> tuple[Verdict, str]:
    d = _need(run, "data_time_s", f.rank)
    s = _onset(f, run)
    a = d.level(int(d.steps[0]), s)
    b = d.level(s, int(d.steps[-1]))
    if a is not None and b is not None and b >= 1.5 * a and b - a > 1e-3:
        return "supports", f"data_time_s rose {fmt(a)} -> {fmt(b)} s at the onset"
    return "contradicts", f"data_time_s did not rise ({fmt(a)} -> {fmt(b)} s)"


def _appended_runs(f: Finding, run: Run) -> tuple[Verdict, str]:
    from trainmedic.diagnose.detectors.continuity import appended, fresh_starts, step_regressions

    s = run.get("loss", f.rank) or run.get("loss", None)
    if s is None or not (regs := step_regressions(s)):
        raise _NoData()
    fresh = fresh_starts(s, regs)
    if appended(fresh, len(regs)):
        return "supports", (f"{fresh} of {len(regs)} step restarts begin with the loss back near "
                            f"its first value")
    return "contradicts", "the loss carries on across the step restarts"


_REPLAY_WHY = {"appended": "the restarts begin new trainings, not a resume",
               "many": "several logged steps were replayed",
               "one": "only one record was repeated"}


def _replay_kind(f: Finding, run: Run) -> str:
    """What the step going back was: ``appended`` runs, ``many`` steps replayed, or ``one``
    record repeated."""
    try:
        if _appended_runs(f, run)[0] == "supports":
            return "appended"
    except _NoData:
        pass
    return "one" if f.severity == "info" else "many"


def _replayed_many(f: Finding, run: Run) -> tuple[Verdict, str]:
    kind = _replay_kind(f, run)
    return ("supports" if kind == "many" else "contradicts"), _REPLAY_WHY[kind]


def _replayed_one(f: Finding, run: Run) -> tuple[Verdict, str]:
    kind = _replay_kind(f, run)
    return ("supports" if kind == "one" else "contradicts"), _REPLAY_WHY[kind]


CHECKS: dict[str, CheckFn] = {
    "lr_high_at_onset": _lr_high_at_onset,
    "lr_starts_at_peak": _lr_starts_at_peak,
    "lr_high_after_start": _lr_high_after_start,
    "lr_rising_at_end": _lr_rising_at_end,
    "lr_collapsed": _lr_collapsed,
    "lr_zero": _lr_zero,
    "lr_zero_from_onset": _lr_zero_from_onset,
    "lr_tiny": _lr_tiny,
    "lr_annealed": _lr_annealed,
    "lr_not_decayed": _lr_not_decayed,
    "lr_end_near_zero": _lr_end_near_zero,
    "spike_recovered": _spike_recovered,
    "loss_rising_before_onset": _loss_rising_before_onset,
    "train_loss_summed": _train_loss_summed,
    "at_chance": _at_chance,
    "train_loss_falling": _train_loss_falling,
    "loss_fell": _loss_fell,
    "grad_spike_at_onset": _grad_spike_at_onset,
    "grad_spikes_isolated": _grad_spikes_isolated,
    "grad_or_update_zero": _grad_or_update_zero,
    "param_norm_constant": _param_norm_constant,
    "optimizer_params_foreign": _optimizer_params_foreign,
    "loss_scale_logged": _loss_scale_logged,
    "hf_trainer_run": _hf_trainer_run,
    "kept_tensors_show": _kept_tensors_show,
    "outliers_periodic": _outliers_periodic,
    "data_time_high_at_outliers": _data_time_high_at_outliers,
    "gc_time_high_at_outliers": _gc_time_high_at_outliers,
    "data_time_rose": _data_time_rose,
    "replayed_many": _replayed_many,
    "appended_runs": _appended_runs,
    "replayed_one": _replayed_one,
    "nan_guard_localized": _nan_guard_localized,
}


#: Checks that judge a cause by what the run recorded besides its metrics (store events,
#: import meta), so their rules name no metric.
FACT_CHECKS = frozenset({"hf_trainer_run", "optimizer_params_foreign", "nan_guard_localized"})


def _metric_present(run: Run, rule: CauseRule) -> bool:
    if rule.check == "grad_or_update_zero":
        return run.has("grad_norm") or run.has("update_ratio")
    if rule.check == "optimizer_params_foreign":
        return bool(run.meta.get("optimizer_params_checked"))
    if rule.check == "kept_tensors_show":
        return run.has("mem_alloc_mb") or run.has("mem_peak_mb") or run.has("rss_mb")
    return rule.metric is None or run.has(rule.metric)


def _judge(f: Finding, run: Run, rule: CauseRule) -> Cause | None:
    """The cause as said for this finding, or None when the data rules it out."""
    text = rule.cause.replace("{k}", _chance_k(f))
    if rule.check is None:
        return Cause(text, _cap(rule.likelihood), False,
                     rule.to_check or "cannot be checked from the logged metrics")
    if not _metric_present(run, rule):
        return Cause(text, _cap(rule.likelihood), False,
                     rule.to_check or f"log {rule.metric} to check this")
    try:
        if rule.check == "finding_metric_is":
            verdict, why = _finding_metric_is(f, run, rule)
        else:
            verdict, why = CHECKS[rule.check](f, run)
    except _NoData:
        return Cause(text, _cap(rule.likelihood), False,
                     f"{rule.metric or 'the metric'} has no finite values to check this against")
    if verdict == "contradicts":
        log.debug("dropped cause %r for %s: %s", rule.cause, f.symptom, why)
        return None
    checked = f.metric if rule.check in _CHECKS_ON_FINDING_METRIC else rule.metric
    return Cause(text, rule.likelihood, True, why, metrics=(checked,) if checked else ())


#: Checks that judge the cause by the finding's own series rather than by ``rule.metric``.
_CHECKS_ON_FINDING_METRIC = frozenset({"finding_metric_is", "kept_tensors_show"})


def _cap(lk: Likelihood) -> Likelihood:
    """An unchecked cause is never ranked 'high'."""
    return "medium" if lk == "high" else lk


def _chance_k(f: Finding) -> str:
    for e in f.evidence:
        if "ln(" in e.note and e.reference is not None:
            return str(round(math.exp(e.reference)))
    return "k"


def _context(f: Finding, run: Run) -> dict[str, str]:
    onset = f.onset_step if f.onset_step is not None else 0
    end = f.end_step if f.end_step is not None else onset
    lt = _trace(run, f.metric or "loss", f.rank)
    interval = int(lt.interval) if lt is not None else 1
    ev = finding_event(f, run) if f.symptom in LOCALIZED_SYMPTOMS else None
    return {"onset": str(onset), "end": str(end), "best": str(onset),
            "skip_from": str(max(0, onset - interval)), "skip_to": str(end),
            "k": _chance_k(f), "module": module_label(ev.data if ev else {})}


def _rules(finding: Finding, run: Run) -> tuple[CauseRule, ...]:
    """The symptom's cause rules; for a non-finite finding the NaN guard localized, the rules
    for the kind of break it saw (rules.LOCALIZED_CAUSES)."""
    if finding.symptom in LOCALIZED_SYMPTOMS:
        ev = finding_event(finding, run)
        kind = localized_kind(ev.data) if ev is not None else None
        if kind is not None:
            return LOCALIZED_CAUSES[kind]
    rules = CAUSES.get(finding.symptom, ())
    if finding.symptom == "plateau" and finding.metric not in (None, "loss", "val_loss"):
        return FROZEN_PREDICTION_CAUSES  # frozen predictions, not a loss that levelled off
    if finding.symptom == "nonfinite_loss" and is_eval_metric(finding.metric or "loss"):
        # A non-finite evaluation is computed by the eval: the training-side causes (an lr
        # too high, a training loss that rose into the NaN) do not apply to it.
        rules = tuple(r for r in rules if r.metric not in ("lr", "loss"))
    return rules


def _at_first_step(f: Finding, run: Run) -> bool:
    """Whether the finding starts at the first logged step of its series: there is no
    checkpoint "before" it to resume from."""
    s = run.clean(f.metric or "loss", f.rank) or run.clean(f.metric or "loss", None)
    return f.onset_step is not None and s is not None and len(s) > 0 and \
        f.onset_step <= int(s.steps[0])


def route(finding: Finding, run: Run) -> Finding:
    """The finding with its ranked causes and interventions filled in (never raises)."""
    rules = _rules(finding, run)
    kept: list[tuple[Cause, CauseRule, int]] = []
    for order, rule in enumerate(rules):
        try:
            c = _judge(finding, run, rule)
        except Exception:  # a check must never take the diagnosis down
            log.exception("cause check %r failed on %s", rule.check, finding.symptom)
            c = Cause(rule.cause, _cap(rule.likelihood), False,
                      "the data check failed; see the log")
        if c is not None:
            kept.append((c, rule, order))
    kept.sort(key=lambda x: (not x[0].checked_against_data, _LIKELY[x[0].likelihood], x[2]))
    ctx = _context(finding, run)
    inter: list[Intervention] = []
    seen: set[str] = set()
    keys: list[str] = []
    if finding.severity == "info":
        keys += INFO_INTERVENTIONS.get(finding.symptom, ())
    for _, rule, _ in kept:
        keys += rule.interventions
    first = _at_first_step(finding, run)
    for key in keys:
        if key in seen or len(inter) >= _MAX_INTERVENTIONS:
            continue
        seen.add(key)
        ir = INTERVENTIONS[key]
        action = ir.action
        if first and ir.from_start is not None:
            # Broken from the first logged step: there is no checkpoint before it.
            if not ir.from_start:
                continue
            action = ir.from_start
        inter.append(Intervention(
            action=action.format(**ctx), displaced_cost=ir.displaced_cost.format(**ctx),
            verify=ir.verify.format(**ctx), changes_semantics=ir.changes_semantics))
    return finding.with_routing(tuple(c for c, _, _ in kept), tuple(inter))
