"""Detectors for a loss that stopped being a number: NaN/inf values in a loss series, and
NaN losses a logger hid from its average.

The evidence rules are written out in docs/symptoms.md; keep the two in step.
"""

from __future__ import annotations

import math

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.localization import (
    localized_evidence,
    localized_phrase,
    nonfinite_event,
)
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import median, robust_sigma, true_runs
from trainmedic.diagnose.trace import Trace, fmt, traces
from trainmedic.run.series import Run

__all__ = ["loss_like_metrics", "HF_FRAMEWORKS"]

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
@register_detector("nonfinite_loss")
def detect_nonfinite_loss(run: Run) -> list[Finding] | NotRun:
    """Any NaN/inf in a loss series. Persistent (to the last point, or >= 3 in a row) is an
    error; an isolated non-finite value followed by finite ones is a warning. When the NaN
    guard localized a step of the first non-finite stretch, the summary names the module and
    where it broke, and the localization is evidence."""
    names = loss_like_metrics(run)
    if not names:
        return NotRun("log loss to enable this check", missing=("loss",))
    findings: list[Finding] = []
    for rank in run.ranks():
        hits: list[tuple[int, str, Trace, int]] = []  # (first bad step, metric, trace, index)
        for m in names:
            t = Trace.of(run, m, rank)
            if t is None:
                continue
            bad = ~np.isfinite(t.all_values)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                hits.append((int(t.all_steps[i]), m, t, i))
        if not hits:
            continue
        # Train loss leads when it is affected; else the earliest affected series.
        hits.sort(key=lambda h: (h[0], h[1] != "loss"))
        primary = next((h for h in hits if h[1] == "loss"), hits[0])
        onset = min(h[0] for h in hits)
        evidence = []
        persistent_any = False
        end_step = primary[0]
        for step, m, t, i in hits[:4]:
            bad = ~np.isfinite(t.all_values)
            runs = true_runs(bad)
            first_run = runs[0]
            longest = max(b - a for a, b in runs)
            persistent = bool(bad[-1]) or longest >= 3
            persistent_any = persistent_any or persistent
            if m == primary[1]:
                end_step = int(t.all_steps[first_run[1] - 1])
            prev = t.all_values[:i][np.isfinite(t.all_values[:i])]
            ref = float(prev[-1]) if prev.size else None
            fin_steps = t.all_steps[:i][np.isfinite(t.all_values[:i])]
            ref_step = int(fin_steps[-1]) if prev.size else None
            n_bad = int(bad.sum())
            tail = " through the last logged point" if bool(bad[-1]) else ""
            evidence.append(Evidence(
                metric=m, step=step, value=float(t.all_values[i]), reference=ref,
                note=(f"first non-finite {m}; {n_bad} of {len(t.all_values)} logged points "
                      f"are non-finite{tail}; reference = last finite value"
                      + (f", at step {ref_step}" if ref_step is not None else ""))))
        severity: Severity = "error" if persistent_any else "warning"
        what = "stayed non-finite" if persistent_any else "recovered afterwards"
        metrics_txt = ", ".join(h[1] for h in hits[:4])
        summary = (f"{primary[1]} became {fmt(float(primary[2].all_values[primary[3]]))} at "
                   f"step {onset} and {what} ({metrics_txt})")
        # The live watcher's NaN guard replayed the step: name where it broke.
        event = nonfinite_event(run, rank, onset, None if persistent_any else end_step)
        if event is not None:
            summary += f"; {localized_phrase(event)}"
            evidence[1:1] = localized_evidence(event)
        findings.append(Finding(
            symptom="nonfinite_loss", severity=severity, confidence=1.0, onset_step=onset,
            end_step=None if persistent_any else end_step, rank=rank, metric=primary[1],
            summary=summary, evidence=tuple(evidence)))
    return findings


# --------------------------------------------------------------------------- nan_masked
def _filter_known(run: Run) -> bool:
    fw = str(run.meta.get("framework", "")).lower()
    return fw in HF_FRAMEWORKS or bool(run.meta.get("logging_nan_inf_filter"))


@register_detector("nan_masked_in_logs", requires=("loss",))
def detect_nan_masked(run: Run) -> list[Finding] | NotRun:
    """A logger dropped non-finite losses from its average (HF Trainer's
    ``logging_nan_inf_filter``, on by default). Two rules, from what the data shows:

    (a) grad_norm is NaN/inf at a logged step whose loss is finite. Isolated points with the
        loss on trend are what fp16 loss scaling skipping overflow steps looks like (info);
        >= 2 consecutive, a rising density, a loss reaction, or a last-point one is a warning
        (error when grad_norm stays non-finite to the end).
    (b) under the HF Trainer only: the logged loss drops to exactly 0.0 straight from a value
        >= 0.01 (the Trainer logs 0.0 when every step in the window was NaN), or the last
        >= 4 logged losses are bit-identical after the loss had varied - unless that value is
        at the logging resolution after losses already < 0.01 (a converged loss rounded to 4
        decimals), or grad_norm is finite at those steps.
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
        if g is not None and not unfiltered and not bool(np.isfinite(g.all_values).all()):
            finite_loss_steps = tr.all_steps[np.isfinite(tr.all_values)]
            bad_g = ~np.isfinite(g.all_values)
            masked = bad_g & np.isin(g.all_steps, finite_loss_steps)
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
                    confidence=0.9 if hf else 0.6, onset_step=onset,
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
        same = np.concatenate([[False], v[1:] == v[:-1]])
        tail = 0
        while tail < len(v) - 1 and same[len(v) - 1 - tail]:
            tail += 1
        distinct_before = np.unique(v[: len(v) - tail - 1]).size
        i = len(v) - tail - 1
        if tail >= 3 and distinct_before >= 5 and not _converged_flatline(v, i, tr, g):
            out.append(Finding(
                symptom="nan_masked_in_logs", severity="warning", confidence=0.5,
                onset_step=int(tr.steps[i]), rank=tr.rank, metric="loss",
                summary=(f"the last {tail + 1} logged losses are all exactly "
                         f"{fmt(float(v[-1]))} from step {int(tr.steps[i])}: a flatline this "
                         f"exact suggests NaN losses were filtered from the log"),
                evidence=(Evidence("loss", int(tr.steps[i]), float(v[-1]), None,
                                   note=f"{tail + 1} consecutive bit-identical logged values "
                                        f"after {distinct_before} distinct ones"),)))
    return out


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
