"""The engine: run every registered detector on a run, fold duplicate findings of one incident
into a root finding, route each finding to causes and interventions, and sort.

It never raises on a weird run: a detector that crashes is logged and reported as a check not
run ("internal error: ..."), so one bad rule cannot hide what the others found.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from trainmedic.diagnose.detectors.loss_nonfinite import is_eval_metric
from trainmedic.diagnose.finding import (
    SEVERITY_ORDER,
    CheckNotRun,
    Diagnosis,
    Evidence,
    Finding,
    Related,
)
from trainmedic.diagnose.localization import finding_event, localization_data, localized_phrase
from trainmedic.diagnose.loss_candidates import loss_candidates
from trainmedic.diagnose.registry import Detector, NotRun, detectors
from trainmedic.diagnose.router import route
from trainmedic.diagnose.rules import LOCALIZED_SYMPTOMS
from trainmedic.diagnose.stats import theil_sen_z
from trainmedic.diagnose.trace import Trace
from trainmedic.run.series import Run

__all__ = ["diagnose", "INCIDENT_ROOTS"]

log = logging.getLogger(__name__)

#: Symptoms that describe one incident on the loss/gradient path, most fundamental first.
#: When several overlap in time on one rank, the first in this order is the root finding and
#: the others are folded into its evidence (a NaN loss is not also a divergence and a spike).
#: A divergence (warning or worse, beginning before them) outranks non-finite gradients under
#: a finite loss: a loss that climbed a million-fold and stays there is what the run did; its
#: gradients overflowing (and a NaN guard skipping every update from then on, which keeps the
#: loss finite) is how it ended. Otherwise ``nonfinite_grad`` comes first.
INCIDENT_ROOTS: tuple[str, ...] = (
    "nonfinite_loss",
    "nan_masked_in_logs",
    "divergence",
    "nonfinite_grad",
    "loss_spike",
    "exploding_gradients",
)

_NONFINITE = frozenset(LOCALIZED_SYMPTOMS)

#: Roots whose folded onset is the earliest onset in the incident (not their own).
_EARLIEST_ONSET_ROOTS = frozenset({"divergence", "loss_spike", "exploding_gradients"})


def diagnose(run: Run, *, only: set[str] | None = None) -> Diagnosis:
    """Run the registered detectors (or only the symptoms in ``only``) on ``run``."""
    findings: list[Finding] = []
    not_run: list[CheckNotRun] = []
    for det in detectors():
        if only is not None and det.symptom not in only:
            continue
        res = _run_one(det, run)
        if isinstance(res, CheckNotRun):
            if _could_apply(res, run):
                not_run.append(res)
        else:
            findings.extend(res)
    findings = [_localize(f, run) for f in findings]
    findings = _fold_incidents(findings, run)
    findings = _fold_consequences(findings, run)
    findings = _drop_shapes_of_masked_losses(findings)
    findings = _fold_ranks(findings, run)
    routed = []
    for f in findings:
        try:
            routed.append(route(f, run))
        except Exception:
            log.exception("routing failed for %s", f.symptom)
            routed.append(f)
    routed.sort(key=lambda f: (-SEVERITY_ORDER[f.severity],
                               f.onset_step if f.onset_step is not None else 2 ** 62,
                               f.symptom))
    notes = [n.detail for n in run.notes]
    found = run.has("loss")
    return Diagnosis(source=run.source, metrics_seen=run.metrics(), findings=routed,
                     checks_not_run=not_run, notes=notes,
                     mapping=[dict(m) for m in run.meta.get("mapping", ())],
                     loss_found=found, loss_candidates=[] if found else loss_candidates(run))


#: Root symptom -> symptoms that, on the same rank and from about the root's onset on, are
#: its consequences and not separate problems: the loss that stopped improving after the lr
#: collapsed, the "plateau" of a loss that diverged, the throughput a stalled input lost.
CONSEQUENCES: dict[str, frozenset[str]] = {
    "lr_schedule_anomaly": frozenset({"plateau", "flat_loss"}),
    # A validation loss that rises after the training loss diverged is the divergence seen on
    # the evaluations, not memorization.
    "divergence": frozenset({"plateau", "oscillation", "overfitting"}),
    "nonfinite_loss": frozenset({"plateau", "oscillation", "flat_loss"}),
    "input_bound": frozenset({"throughput_regression", "step_time_outliers"}),
    "straggler": frozenset({"throughput_regression"}),
    # A training loss that changed scale (the validation loss did not follow) is not a
    # divergence or a spike of the model.
    "grad_accum_misnormalization": frozenset({"divergence", "loss_spike"}),
    # A collapsed fp16 loss scale skips every update: the gradients the scaler found
    # non-finite, a logger that averaged only finite losses, and the frozen weights' plateau
    # are how the collapse shows.
    "loss_scale_collapse": frozenset({"nonfinite_grad", "nan_masked_in_logs", "plateau",
                                      "flat_loss"}),
    # A validation loss that jumped and never came back while the model memorizes is the
    # overfitting itself, seen as a step (a tracker repeating its last evaluation).
    "overfitting": frozenset({"loss_spike"}),
    # Steps skipped for a non-finite gradient change what the logged loss averages: a loss
    # that "changed scale" right where the NaN gradients begin is the NaN incident, not a
    # micro-batch normalization switched on there.
    "nonfinite_grad": frozenset({"grad_accum_misnormalization"}),
}

#: Roots whose consequences are only some findings of a kind (the rest are their own).
CONSEQUENCE_FILTERS: dict[str, Callable[[Finding, Finding], bool]] = {
    # only a validation spike that never came back is part of the overfitting
    "overfitting": lambda root, f: f.metric != "loss" and f.end_step is None,
    # A validation loss that went non-finite while the training loss stayed finite does not
    # stop training: a flat or stalled *training* loss beside it is its own incident.
    "nonfinite_loss": lambda root, f: not (root.metric == "val_loss" and f.metric == "loss"),
    # only a change of scale that starts with the NaN gradients (not after them)
    "nonfinite_grad": lambda root, f: f.onset_step is not None and root.onset_step is not None
    and f.onset_step <= root.onset_step,
}


def _any(root: Finding, f: Finding) -> bool:
    return True


def _loud_from(f: Finding) -> int | None:
    """The step from which a finding is what it is: its onset, except for a plateau made loud
    by frozen evaluations, which is loud from the first identical evaluation (the loss may
    have levelled off earlier by converging)."""
    if f.symptom == "plateau" and f.level >= SEVERITY_ORDER["warning"]:
        frozen = [e.step for e in f.evidence if e.metric == "val_loss" and e.step is not None]
        if frozen and f.onset_step is not None:
            return max(f.onset_step, min(frozen))
    return f.onset_step


def _fold_consequences(findings: list[Finding], run: Run) -> list[Finding]:
    """Fold each consequence into its root (one incident, one finding). The root must be a
    warning or worse; a consequence is folded when it is not worse than the root and starts
    no earlier than max(one incident window, 5% of the run) before it (or has no onset): a
    consequence seen on evaluations is only as precise as their interval."""
    w = max(_window(run), int(0.05 * (run.last_step() or 0)))

    def near(f: Finding, root: Finding) -> bool:
        loud = _loud_from(f)
        if root.symptom == "grad_accum_misnormalization" and root.onset_step is not None and \
                loud is not None and loud <= root.onset_step and \
                (f.end_step is None or f.end_step >= root.onset_step):
            return True  # a rise whose foot is earlier but that spans the scale step
        return loud is None or root.onset_step is None or loud >= root.onset_step - w

    taken: set[int] = set()
    folded: dict[int, list[Finding]] = {}
    for root_sym, kinds in CONSEQUENCES.items():
        for root in findings:
            if root.symptom != root_sym or root.level < SEVERITY_ORDER["warning"]:
                continue
            got = [f for f in findings if f.symptom in kinds and id(f) not in taken
                   and _same_rank(root, f) and f.level <= root.level and near(f, root)
                   and CONSEQUENCE_FILTERS.get(root_sym, _any)(root, f)]
            if got:
                folded.setdefault(id(root), []).extend(got)
                taken.update(id(f) for f in got)
    out = []
    for f in findings:
        if id(f) in taken:
            continue
        cons = folded.get(id(f))
        if cons:
            also = "; ".join(f"{g.symptom} from step {g.onset_step}" for g in cons)
            f = replace(f, related=(*f.related, *(Related.of(g, evidence=2) for g in cons)),
                        summary=f"{f.summary} (consequences: {also})")
        out.append(f)
    return out


def _is_fp16(run: Run) -> bool:
    """Whether anything in the run says it trained with a loss scale: fp16 (not bf16, which
    needs none) in its precision meta, or a loss-scale series."""
    prec = " ".join(str(run.meta.get(k, "")) for k in ("precision", "dtype", "amp", "fp16"))
    prec = prec.lower().replace("bfloat16", "").replace("bf16", "")
    return any(w in prec for w in ("16", "half")) or any("scale" in m for m in run.metrics())


def _could_apply(check: CheckNotRun, run: Run) -> bool:
    """Only checks that could apply to this run are listed as not run: no loss scale is asked
    of a run with no sign of fp16 (the straggler detector itself says nothing of one process)."""
    return not (check.symptom == "loss_scale_collapse" and check.missing and not _is_fp16(run))


def _localize(f: Finding, run: Run) -> Finding:
    """A non-finite finding the NaN guard localized carries the module and phase as data."""
    if f.symptom not in _NONFINITE or f.localization is not None:
        return f
    event = finding_event(f, run)
    return f if event is None else replace(f, localization=localization_data(event))


#: Findings about the *shape* of the loss curve, meaningless once the logged loss stopped
#: being the real loss (NaN, or a logger's stand-in for NaN).
_CURVE_SHAPES = frozenset({"plateau", "flat_loss", "oscillation"})
_LOSS_GONE = frozenset({"nonfinite_loss", "nan_masked_in_logs"})


def _drop_shapes_of_masked_losses(findings: list[Finding]) -> list[Finding]:
    """Drop plateau/flat/oscillation findings that start at or after the loss went non-finite
    (or was masked by a NaN filter) on the same rank: they describe values that are not a
    loss, e.g. HF's 0.0 stand-ins, and would send the user after the wrong problem."""
    gone: dict[int | None, int] = {}
    for f in findings:
        if f.symptom in _LOSS_GONE and f.metric in ("", "loss") and f.onset_step is not None:
            gone[f.rank] = min(f.onset_step, gone.get(f.rank, f.onset_step))
    if not gone:
        return findings
    def masked(f: Finding) -> bool:
        if f.symptom not in _CURVE_SHAPES or f.rank not in gone or f.onset_step is None:
            return False
        if f.onset_step >= gone[f.rank]:
            return True
        # A shape that began before the mask but lies mostly over it (a "flat" loss made of
        # the logger's stand-ins) describes the stand-ins too.
        end = f.end_step
        return end is not None and end > f.onset_step and \
            (end - gone[f.rank]) >= 0.5 * (end - f.onset_step)

    return [f for f in findings if not masked(f)]


def _run_one(det: Detector, run: Run) -> list[Finding] | CheckNotRun:
    missing = det.missing(run)
    if missing:
        need_all = [m for m in det.requires if m in missing]
        parts = []
        if need_all:
            parts.append(" and ".join(need_all))
        if det.requires_any and any(m in missing for m in det.requires_any):
            parts.append("one of " + ", ".join(det.requires_any))
        return CheckNotRun(det.symptom, missing,
                           f"log {' and '.join(parts)} to enable this check")
    try:
        res = det.fn(run)
    except Exception as e:
        log.exception("detector %s crashed", det.symptom)
        return CheckNotRun(det.symptom, (), f"internal error: {type(e).__name__}: {e}")
    if isinstance(res, NotRun):
        return CheckNotRun(det.symptom, tuple(res.missing), res.reason)
    if not isinstance(res, list) or not all(isinstance(f, Finding) for f in res):
        log.error("detector %s returned %r, not a list of findings", det.symptom, type(res))
        return CheckNotRun(det.symptom, (), "internal error: detector returned a bad value")
    return res


def _window(run: Run) -> int:
    """How close in steps two findings must be to count as one incident."""
    t = Trace.of(run, "loss") or next(
        (Trace.of(run, "loss", r) for r in run.ranks() if Trace.of(run, "loss", r)), None)
    last = run.last_step() or 0
    if t is None:
        return max(1, int(0.02 * last))
    return int(max(3 * t.interval, 0.02 * max(1, t.span)))


def _extent(f: Finding, run: Run) -> tuple[int, int]:
    """The steps a finding covers for incident matching."""
    s = f.onset_step if f.onset_step is not None else 0
    if f.symptom == "divergence":
        return s, run.last_step() or s
    return s, s


def _same_rank(a: Finding, b: Finding) -> bool:
    return a.rank == b.rank or a.rank is None or b.rank is None


#: A spike that came back and then a loss that climbed again to this many times the level it
#: came back to: the incident is the climb (a divergence), not the spike.
ROSE_AGAIN_RATIO = 3.0
ROSE_AGAIN_Z = 3.0


def _rose_again(run: Run, spike: Finding) -> bool:
    """After the recovered spike, the loss's last tenth sits >= 3x the level it came back to
    (median of the 3 points from its recovery step) ..."""
    s = run.get(spike.metric or "loss", spike.rank)
    if s is None or spike.end_step is None:
        return False
    v, st = s.values, s.steps
    after = np.flatnonzero(st >= spike.end_step)
    if after.size < 10 or not bool(np.all(np.isfinite(v[after]))) or \
            not bool(np.all(v[after] > 0)):
        return False
    back = float(np.median(v[after[:3]]))
    end = float(np.median(v[after[-max(3, after.size // 10):]]))
    # ... on a significant upward trend (a robust slope >= 3 standard errors), not a loss
    # knocked up again by later spikes that it keeps decaying from
    return end >= ROSE_AGAIN_RATIO * back and \
        theil_sen_z(np.log(v[after]))[1] >= ROSE_AGAIN_Z


def _fold_incidents(findings: list[Finding], run: Run) -> list[Finding]:
    w = _window(run)
    prio: dict[str, float] = {s: i for i, s in enumerate(INCIDENT_ROOTS)}
    nan_grads = [f for f in findings if f.symptom == "nonfinite_grad"]
    # training-loss NaNs the log shows (looked up once, not per pair of findings)
    nan_losses = [g for g in findings if g.symptom == "nonfinite_loss"
                  and not is_eval_metric(g.metric or "loss")]
    recovered = [f for f in findings if f.symptom == "loss_spike" and f.end_step is not None
                 and f.level >= SEVERITY_ORDER["warning"] and f.onset_step is not None]

    def rank(f: Finding) -> float:
        # A divergence outranks the NaN gradients only when it is a real one (warning or
        # worse) that began before them; a mild or expected rise (info) does not swallow a
        # NaN-gradient bug.
        first = min((g.onset_step or 0 for g in nan_grads if _same_rank(f, g)), default=None)
        if f.symptom == "divergence" and first is not None and not (
                f.level >= SEVERITY_ORDER["warning"] and (f.onset_step or 0) < first):
            return prio["nonfinite_grad"] + 0.5
        if f.symptom == "divergence" and f.onset_step is not None and any(
                _same_rank(f, g) and abs((g.onset_step or 0) - f.onset_step) <= w
                and not _rose_again(run, g) for g in recovered):
            # A spike that came back, at the divergence's onset: the loss did not stay up
            # from there; repeated spikes that keep it elevated are the incident.
            return prio["loss_spike"] + 0.5
        if f.symptom == "nonfinite_loss" and is_eval_metric(f.metric or "loss"):
            # A NaN evaluation ranks under the training-side findings: when one of them is in
            # the same window, it is the incident's root and the eval NaN how it showed.
            return prio["loss_spike"] + 0.5
        return prio[f.symptom]

    chain = sorted((f for f in findings if f.symptom in prio),
                   key=lambda f: (rank(f), f.onset_step or 0))
    rest = [f for f in findings if f.symptom not in prio]
    roots: list[tuple[Finding, list[Finding]]] = []
    for f in chain:
        lo, hi = _extent(f, run)
        for i, (root, folded) in enumerate(roots):
            if root.symptom == f.symptom or not _same_rank(root, f):
                continue
            # A divergence folded under a later NaN still spans the incident: a spike inside
            # it is the same incident. Point findings do not widen it (no chaining).
            spans = [_extent(g, run) for g in (root, *folded)
                     if g is root or g.symptom == "divergence"]
            rlo, rhi = min(a for a, _ in spans), max(b for _, b in spans)
            # Sustained gradient growth leads the loss it drives: an explosion that starts
            # up to 3 windows before a divergence is the same incident.
            lead = 3 * w if (f.symptom == "exploding_gradients" and f.end_step is None
                             and any(g.symptom == "divergence" for g in (root, *folded))) \
                else w
            if _own_phase(root, f, w, any(_same_rank(g, f) for g in nan_losses)):
                continue
            if lo <= rhi + w and hi >= rlo - lead:
                folded.append(f)
                roots[i] = (root, folded)
                break
        else:
            roots.append((f, []))
    out = rest
    for root, folded in roots:
        out.append(_fold_into(root, folded, run) if folded else root)
    return out


def _own_phase(root: Finding, f: Finding, w: int, nan_loss_seen: bool = False) -> bool:
    """A real divergence (warning or worse) that began at least an incident window before the
    first non-finite loss is a phase of its own (the loss visibly climbed for a while before
    it broke): both are reported, each at its own onset, instead of the climb folded into the
    NaN. (Public logs are labelled the NaN; injected lr faults the divergence.) So is an
    exploding_gradients finding (warning or worse) that began before the NaN: the explosion
    has its own fix (clipping), the NaN is its consequence. A NaN gradient norm beside a
    loss the logger masked is not folded either, unless the log shows a non-finite training
    loss (``nan_loss_seen``): then the NaN is seen directly, and the gradient's is part of it."""
    pair = {root.symptom, f.symptom}
    if pair == {"nan_masked_in_logs", "nonfinite_grad"}:
        # Two readings of two metrics: the loss's NaN hidden by the logger is inferred, the
        # grad norm's NaN measured - the one direct sight of the NaN, unless the log shows a
        # non-finite training loss too. Then both are reported (public logs are labelled the
        # NaN gradient, injected logger filters the masked loss).
        return not nan_loss_seen
    if pair == {"nonfinite_loss", "exploding_gradients"}:
        nan, ex = (root, f) if root.symptom == "nonfinite_loss" else (f, root)
        return (not is_eval_metric(nan.metric or "loss")
                and ex.level >= SEVERITY_ORDER["warning"] and nan.onset_step is not None
                and ex.onset_step is not None and ex.onset_step < nan.onset_step)
    if pair != {"nonfinite_loss", "divergence"}:
        return False
    nan, div = (root, f) if root.symptom == "nonfinite_loss" else (f, root)
    if is_eval_metric(nan.metric or "loss") or div.level < SEVERITY_ORDER["warning"]:
        return False
    if nan.onset_step is None or div.onset_step is None:
        return False
    return div.onset_step <= nan.onset_step - w


def _where_it_broke(f: Finding, run: Run) -> str:
    """", where <the NaN guard's answer>" for a folded non-finite finding it localized: the
    module stays in the incident's one-line summary when a divergence is the root."""
    if f.symptom not in _NONFINITE:
        return ""
    event = finding_event(f, run)
    return "" if event is None else f", where {localized_phrase(event)}"


def _fold_into(root: Finding, folded: list[Finding], run: Run) -> Finding:
    related = list(root.related)
    for f in folded:
        related.append(Related.of(f))
        related.extend(f.related)
    root = replace(root, related=tuple(related),
                   localization=root.localization or next(
                       (g.localization for g in folded if g.localization), None))
    ev = list(root.evidence)
    sev = root.severity
    conf = root.confidence
    also = []
    for f in folded:
        ev.append(Evidence(f.metric or "loss", f.onset_step, None, None, basis="measured",
                           note=f"folded into this finding: {f.symptom} - {f.summary}"))
        # Not twice the same measurement (both findings cite the NaN guard's replay).
        shown = {(e.metric, e.step, repr(e.value), repr(e.reference)) for e in ev}
        ev.extend(e for e in f.evidence[:2]
                  if (e.metric, e.step, repr(e.value), repr(e.reference)) not in shown)
        if SEVERITY_ORDER[f.severity] > SEVERITY_ORDER[sev]:
            sev = f.severity
        conf = max(conf, f.confidence)
        where = "" if root.symptom in _NONFINITE else _where_it_broke(f, run)
        also.append(f"{f.symptom} from step {f.onset_step}{where}")
    summary = f"{root.summary} (same incident: {'; '.join(also)})"
    # The incident starts at its earliest sign: a grad norm that explodes at 10000 before the
    # loss follows from 10500 is one incident from 10000. A non-finite root keeps its own
    # step: the first NaN is the unambiguous moment the run broke.
    onset = root.onset_step
    if root.symptom in _EARLIEST_ONSET_ROOTS:
        onsets = [g.onset_step for g in (root, *folded)
                  if g.onset_step is not None and g.level >= SEVERITY_ORDER["warning"]]
        onset = min([*onsets, root.onset_step]) if root.onset_step is not None else None
    if onset is not None and root.onset_step is not None and onset < root.onset_step:
        summary += f"; earliest sign at step {onset}"
    return replace(root, evidence=tuple(ev), severity=sev, confidence=conf, summary=summary,
                   onset_step=onset)


def _fold_ranks(findings: list[Finding], run: Run) -> list[Finding]:
    """The same symptom at about the same onset on several ranks: one finding, ranks noted."""
    ranks = [r for r in run.ranks() if r is not None]
    if len(ranks) < 2:
        return findings
    w = _window(run)
    out: list[Finding] = []
    merged: dict[int, list[int]] = {}
    for f in findings:
        if f.rank is None or f.symptom == "straggler":
            out.append(f)
            continue
        for i, g in enumerate(out):
            if (g.symptom == f.symptom and g.rank is not None and f.onset_step is not None
                    and g.onset_step is not None and abs(g.onset_step - f.onset_step) <= w):
                merged.setdefault(i, [g.rank]).append(f.rank)
                if f.onset_step < g.onset_step or SEVERITY_ORDER[f.severity] > g.level:
                    sev = max(f.severity, g.severity, key=lambda s: SEVERITY_ORDER[s])
                    out[i] = replace(f, severity=sev)
                break
        else:
            out.append(f)
    for i, rs in merged.items():
        f = out[i]
        note = Evidence(f.metric or f.symptom, f.onset_step, None, None,
                        note=f"seen on ranks {', '.join(str(r) for r in sorted(set(rs)))}")
        out[i] = replace(f, evidence=(*f.evidence, note),
                         summary=f"{f.summary} (on ranks {', '.join(map(str, sorted(set(rs))))})")
    return out
