"""Resume discontinuity: the logged step went back (or repeated).

``Series`` keeps log order (run/series.py), so a step that goes back is visible: after a
resume from a checkpoint, the steps since that checkpoint are logged again. A single repeated
line at the very start (Detectron2 writes its first iteration twice when a hook flushes early)
is a quirk of the logger, not a resume, and stays at info.
"""

from __future__ import annotations

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.run.series import Run, Series

__all__ = ["step_regressions", "fresh_starts", "appended"]


def step_regressions(s: Series) -> list[tuple[int, int, int]]:
    """``[(index, from_step, to_step)]`` where the step did not increase in log order."""
    if len(s) < 2:
        return []
    d = np.diff(s.steps)
    idx = np.flatnonzero(d <= 0) + 1
    return [(int(i), int(s.steps[i - 1]), int(s.steps[i])) for i in idx]


def _epoch_like(metric: str) -> bool:
    """An epoch counter (``epoch``, ``train/epoch``): logged on every row, including the
    validation and epoch-end rows that Lightning writes at the same step as the last training
    row, so its steps repeat by design."""
    last = metric.strip().lower().rsplit("/", 1)[-1]
    return last in ("epoch", "epochs", "cur_epoch", "current_epoch")


def _pick_series(run: Run) -> list[tuple[str, int | None, Series]]:
    """The loss on each rank, or else the longest series on each rank that is not an epoch
    counter (see ``_epoch_like``)."""
    out = []
    for rank in run.ranks():
        s = run.get("loss", rank)
        name = "loss"
        if s is None or len(s) == 0:
            cands = [(m, x) for (m, r), x in run.series.items()
                     if r == rank and len(x) and not _epoch_like(m)]
            if not cands:
                continue
            name, s = max(cands, key=lambda c: (len(c[1]), c[0]))
        out.append((name, rank, s))
    return out


def fresh_starts(s: Series, regs: list[tuple[int, int, int]]) -> int:
    """How many step restarts begin a new training from scratch: the loss right after the
    restart is >= 1.3x the loss right before it and closer (in log space) to the log's first
    value than to that pre-restart value. A per-epoch step counter restarts with the loss
    carrying on; an appended run restarts with the loss back near its initial level."""
    v = s.values
    if len(s) < 4 or not bool(np.all(np.isfinite(v))) or not bool(np.all(v > 0)):
        return 0
    lv = np.log(v)
    first = float(np.median(lv[: min(2, len(lv))]))
    n = 0
    for i, _, _ in regs:
        before = float(np.median(lv[max(0, i - 2): i]))
        after = float(np.median(lv[i: i + 2]))
        if after - before >= np.log(1.3) and abs(after - first) < abs(after - before):
            n += 1
    return n


def appended(fresh: int, restarts: int) -> bool:
    """Several runs appended into one log: at least half of the step restarts (and one) are
    fresh starts (see ``fresh_starts``)."""
    return restarts > 0 and fresh >= max(1, (restarts + 1) // 2)


@register_detector("resume_discontinuity")
def detect_resume(run: Run) -> list[Finding] | NotRun:
    """Info when only one logged point is replayed and it is within the first 3 lines (a
    duplicated first record) or the only replay in the run; warning when a jump back replays
    >= 2 logged points (the run resumed from an earlier checkpoint and re-ran those steps),
    noting whether the replayed values matched the originals. A step column that restarts at
    its first value >= 3 times is a per-epoch counter (info), not a resume. Restarts where the
    loss returns near its first value (at least half of them) are appended runs (warning)."""
    picked = _pick_series(run)
    if not picked:
        return NotRun("no series with points")
    out: list[Finding] = []
    for name, rank, s in picked:
        regs = step_regressions(s)
        if not regs:
            continue
        replays = []
        for i, _frm, to in regs:
            prev = s.steps[:i]
            replays.append(int(np.sum(prev >= to)))
        i0, frm0, to0 = regs[0]
        total = sum(replays)
        worst = int(np.argmax(replays))
        early = i0 <= 2
        single = max(replays) <= 1
        # The same step written twice, each time only once (a logger's epoch-summary line at
        # the step of the last progress line, fairseq's 'end of epoch'), is a duplicated
        # record, not a resume: nothing went back.
        repeats_only = single and all(to == frm for _, frm, to in regs)
        sev: Severity = "info" if single and (early or len(regs) == 1 or repeats_only) \
            else "warning"
        # A counter that restarts at its first value again and again (>= 3 times) is a
        # per-epoch step column, not a resume: say so, at info.
        first = int(s.steps[0])
        fresh = fresh_starts(s, regs) if name == "loss" else 0
        if appended(fresh, len(regs)):
            out.append(Finding(
                symptom="resume_discontinuity", severity="warning", confidence=0.8,
                onset_step=to0, end_step=frm0, rank=rank, metric=name,
                summary=(f"{len(regs) + 1} runs appended into one log: the step restarts "
                         f"{len(regs)} time(s) (first after step {frm0}) and {fresh} of those "
                         f"restarts begin with the loss back near its initial level (new "
                         f"trainings, not a resume or a per-epoch counter); later steps "
                         f"overwrite earlier ones in the other checks, so split the log per "
                         f"run"),
                evidence=(Evidence(name, to0, float(s.values[i0]), float(s.values[i0 - 1]),
                                   note=f"log line {i0 + 1}: step {to0} after step {frm0}; "
                                        f"value = loss after the restart, reference = just "
                                        f"before"),
                          Evidence(name, int(s.steps[0]), float(s.values[0]), None,
                                   note="the log's first loss, which the restarts return "
                                        "to"))))
            continue
        epoch_counter = len(regs) >= 3 and all(to <= first for _, _, to in regs)
        if epoch_counter:
            out.append(Finding(
                symptom="resume_discontinuity", severity="info", confidence=0.5,
                onset_step=to0, end_step=frm0, rank=rank, metric=name,
                summary=(f"the step column restarts at {first} {len(regs)} times: it looks "
                         f"like a per-epoch counter, not a global step (map a global step "
                         f"column, e.g. --map, for the other checks to see the right order)"),
                evidence=(Evidence(name, to0, float(s.values[i0]), None,
                                   note=f"{len(regs)} restarts to step <= {first}"),)))
            continue
        # Did the replayed steps reproduce the original values?
        i, frm, to = regs[worst]
        orig = {int(st): float(v) for st, v in zip(s.steps[:i], s.values[:i], strict=True)
                if st >= to}
        later = [(int(st), float(v)) for st, v in zip(s.steps[i:], s.values[i:], strict=True)
                 if int(st) in orig][: max(1, replays[worst])]
        diffs = [abs(v - orig[st]) / max(abs(orig[st]), 1e-12) for st, v in later
                 if np.isfinite(v) and np.isfinite(orig[st])]
        match_txt = ""
        if diffs:
            same = max(diffs) <= 1e-6
            if sev == "info":
                match_txt = ("; the two records are identical" if same else
                             f"; the two records differ by {100 * max(diffs):.2g}% (a "
                             f"duplicated log record, not a resume)")
            else:
                match_txt = ("; replayed values match the originals" if same else
                             f"; replayed values differ from the originals by up to "
                             f"{100 * max(diffs):.2g}% (not a bit-exact resume)")
        where = "at the start of the log" if early and single else f"after step {frm0}"
        out.append(Finding(
            symptom="resume_discontinuity", severity=sev,
            confidence=0.6 if sev == "info" else 0.9, onset_step=to0, end_step=frm0,
            rank=rank, metric=name,
            summary=(f"the logged step went back {len(regs)} time(s) ({where}: {frm0} -> "
                     f"{to0}); {total} logged point(s) replayed{match_txt}"),
            evidence=(Evidence(name, to0, float(s.values[i0]), float(s.values[i0 - 1]),
                               note=f"log line {i0 + 1} has step {to0} after step {frm0}; "
                                    f"reference = value logged just before"),)))
    return out
