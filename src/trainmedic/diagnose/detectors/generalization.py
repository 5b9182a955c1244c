"""Overfitting: validation loss turned up from its minimum while training loss kept falling.

Numbers and words are apart: ``overfit_event`` measures one validation series into an
``OverfitEvent`` (onset, levels, noise, the thresholds it crossed, its severity);
``_finding`` turns the events of every evaluation set on a rank into one ``Finding``.
The evidence rules are written out in docs/symptoms.md; keep the two in step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from trainmedic.diagnose.detectors.gap import gap_event, gap_finding
from trainmedic.diagnose.finding import SEVERITY_ORDER, Evidence, Finding, Severity
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import (
    blocks,
    log_if_positive,
    median,
    robust_sigma,
    theil_sen_z,
)
from trainmedic.diagnose.trace import Trace, fmt
from trainmedic.run.series import Run

__all__ = [
    "OVERFIT_MIN_RISE",
    "OVERFIT_WARN_RISE",
    "OVERFIT_LONG_WARN_RISE",
    "OverfitEvent",
    "overfit_event",
    "overfit_events",
    "rank_events",
    "appended_segments",
    "val_loss_metrics",
]

#: Below this relative rise of the late validation level over the lowest evaluation, nothing
#: is reported (and it must beat OVERFIT_MIN_SIGMAS noise sigmas).
OVERFIT_MIN_RISE = 0.01
OVERFIT_MIN_SIGMAS = 2.5
#: Warning (cost): the late level is >= 10% above the smoothed best level ...
OVERFIT_WARN_RISE = 0.10
#: ... or >= 5% when it is held for at least half the run over >= 7 evaluations (the late
#: level is then a median of >= 4 of them; a public
#: YOLO fine-tune whose validation loss sat 5% above its epoch-2 best for 100 epochs is a
#: problem case; healthy RMSprop runs drift 10-12% up too, and that is overfitting as well).
OVERFIT_LONG_WARN_RISE = 0.05
OVERFIT_LONG_SHARE = 0.5
OVERFIT_LONG_MIN_AFTER = 7
#: ... or >= 2% when held like that and it gave back >= 25% of the validation progress made
#: before the best (start level -> best level, itself >= 4 sigmas): a validation loss that
#: lives in a narrow band (a loss on softmax outputs, a fine-tune that starts near its best)
#: loses its quality in a few percent.
OVERFIT_PROGRESS_RISE = 0.02
OVERFIT_PROGRESS_SHARE = 0.25
#: ... and in every case the rise beats this many per-evaluation noise sigmas. The best level
#: is a running median, whose minimum over n noisy evaluations of a flat curve still sits
#: ~1-1.5 sigmas below the curve; 4 sigmas leaves room for that and for the late median's own
#: error; 3 when the rise is held (its late level is then a median of >= 4 points).
OVERFIT_WARN_SIGMAS = 4.0
OVERFIT_LONG_WARN_SIGMAS = 3.0
#: ... and 2.5 when that late median covers >= 15 evaluations (its own error is then
#: <= 0.33 sigma, and the running-median minimum's bias under 1 sigma).
OVERFIT_MANY_WARN_SIGMAS = 2.5
OVERFIT_MANY_LATE = 15
#: Two evaluations after the best are thin evidence: they must rise this much for a warning.
OVERFIT_TWO_AFTER_RISE = 0.15
#: ... over at least a quarter of the run (an uptick at the last two of 20 evaluations is not).
OVERFIT_TWO_AFTER_SHARE = 0.25
#: With only three evaluations (HF's default 3-epoch fine-tune, one eval per epoch): the
#: first must be the lowest, the next two rise monotonically, and the last is this much higher.
OVERFIT_THREE_EVAL_RISE = 0.15
#: A training loss that fell this many times over from the best evaluation to the end is
#: memorizing: it corroborates a validation rise of >= 10% at >= OVERFIT_MIN_SIGMAS.
OVERFIT_MEMORIZED_FALL = 3.0
#: A robust trend through the evaluations after the best, at this many standard errors, shows
#: a rise that per-evaluation noise hides from the level test.
OVERFIT_TREND_Z = 3.0
#: The training loss may rise by at most this much (relative) over the same interval.
TRAIN_TOLERANCE = 0.02
#: A validation loss that jumps >= 2x between two evaluations and stays there, with no
#: training loss logged to show memorization, looks more like a divergence than overfitting:
#: at most info here (the divergence detector owns it).
ABRUPT_JUMP = 2.0
#: The late level still has to be above the minimum at the very end by max(1 sigma, 0.5%).
END_HOLD = 0.005


def val_loss_metrics(run: Run) -> list[str]:
    """Every evaluation set's loss: ``val_loss`` first, then ``val_loss/<set>`` by name."""
    names = run.metrics()
    out = ["val_loss"] if "val_loss" in names else []
    return out + sorted(m for m in names if m.startswith("val_loss/"))


@dataclass(frozen=True)
class OverfitEvent:
    """What one validation series shows: the numbers behind an overfitting finding."""

    metric: str
    rank: int | None
    n_evals: int
    best_step: int
    """Onset: the lowest evaluation inside the basin of the smoothed curve's minimum."""
    best_value: float
    best_level: float
    """The smoothed (running-median) validation level at its minimum."""
    end_step: int
    end_level: float
    """Median of the later half (>= min(3, n_after)) of the evaluations after the best."""
    n_late: int
    n_after: int
    rise: float
    """Relative rise of end_level over best_level (the cost)."""
    rise_raw: float
    """Relative rise of end_level over the single lowest evaluation."""
    noise: float
    """Per-evaluation noise sigma (log space for positive losses), from first differences."""
    sigmas: float
    """The smoothed rise in noise sigmas (inf when the curve has no measurable noise)."""
    share_after: float
    """Share of the run's steps that come after the best step."""
    given_back: float
    """The rise as a share of the validation progress made before the best (start level ->
    best level); 0.0 when that progress is under 4 noise sigmas."""
    abrupt_jump: float
    """Largest ratio between consecutive evaluations after the best that the later levels
    held (1.0 when none)."""
    train_at_best: float | None
    train_at_end: float | None
    train_ok: bool
    three_evals: bool
    severity: Severity
    at_first_eval: bool = False
    """The best is the first evaluation: the validation loss rose from the start."""
    block: int = 1
    """Evaluations per point: a series longer than MAX_EVALS is read as block medians."""
    rising_tail: float = 0.0
    """When every evaluation after the best is at least the one before it (>= 3 of them):
    the last one's relative rise over the best; 0.0 otherwise."""
    trend_z: float = 0.0
    """z-score of a robust (Theil-Sen) line through the evaluations after the best (>= 7 of
    them; 0.0 with fewer): a rise shown by its trend, whatever the point-to-point noise."""
    segment: int | None = None
    """In a log of several runs appended one after another (the step restarts): which run,
    from 1 (None for an ordinary log)."""
    n_segments: int = 1

    @property
    def train_logged(self) -> bool:
        return self.train_at_best is not None


def _smooth(t: np.ndarray) -> tuple[np.ndarray, int]:
    """Running median (half-width 1 under 24 points, 2 under 60, else 3) with shrinking
    windows near the ends, whose end points follow Tukey's end-point rule
    (median of y0, s1 and 3*s1 - 2*s2): a monotone start is kept, a lone low first or last
    evaluation is not."""
    n = t.size
    h = 1 if n < 24 else 2 if n < 60 else 3
    s = np.empty(n)
    for i in range(n):
        k = min(h, i, n - 1 - i)
        s[i] = median(t[i - k:i + k + 1])
    if n >= 3:
        s[0] = median(np.array([t[0], s[1], 3 * s[1] - 2 * s[2]]))
        s[-1] = median(np.array([t[-1], s[-2], 3 * s[-2] - 2 * s[-3]]))
    return s, h


#: The cautious noise estimate averages the lowest 80% of the absolute second differences.
_TRIM = 0.8


def _trimmed_abs_mean(q: float) -> float:
    """E|Z| over the lowest share ``q`` of |Z| for a standard normal Z (0.5583 at q = 0.8,
    sqrt(2/pi) at q = 1): turns a trimmed mean absolute value into a sigma."""
    c = NormalDist().inv_cdf((1.0 + q) / 2.0) if q < 1.0 else math.inf
    return math.sqrt(2.0 / math.pi) * (1.0 - math.exp(-0.5 * c * c)) / q


def _diff_noise(t: np.ndarray, turn: int | None = None, *, cautious: bool = True) -> float:
    """Per-evaluation noise of a smooth curve, from the second differences of successive
    evaluations (a linear trend cancels; white noise of sigma s gives second differences of
    sigma s*sqrt(6)), leaving out the (up to 3) differences that touch index ``turn``.

    ``cautious``: the larger of their robust sigma (MAD) and their mean absolute value over the
    lowest 80% (scaled to a sigma). The MAD of a handful of differences is often far too low
    (6 of them gave a quarter of the true sigma); the trimmed mean is steadier, and only a
    bending curve makes it larger - which only makes the rule more cautious."""
    if t.size < 4:
        return 0.0
    d = np.diff(t, n=2)
    if turn is not None:
        keep = np.ones(d.size, dtype=bool)
        keep[max(0, turn - 2):turn + 1] = False
        if int(keep.sum()) >= 3:
            d = d[keep]
    mad_sigma = robust_sigma(d)
    if not cautious:
        return mad_sigma / math.sqrt(6.0)
    kept = max(1, math.ceil(_TRIM * d.size))
    a = np.sort(np.abs(d))[:kept]
    return max(mad_sigma, float(np.mean(a)) / _trimmed_abs_mean(kept / d.size)) / math.sqrt(6.0)


def _rel(d: float, base: float, is_log: bool) -> float:
    """A difference ``d`` over ``base`` as a relative change (log space: exp(d) - 1)."""
    if is_log:
        return math.exp(d) - 1.0
    return d / abs(base) if base != 0 else (math.inf if d > 0 else 0.0)


def _train_levels(run: Run, vt: Trace, best_step: int) -> tuple[float | None, float | None]:
    """Training loss near ``best_step`` and near the last evaluation (medians of nearby
    points); (None, None) when it is not logged there."""
    last_step = int(vt.steps[-1])
    tr = Trace.of(run, "loss", vt.rank) or Trace.of(run, "loss", None)
    if tr is None or len(tr) < 2:
        return None, None
    win = max(tr.interval, 0.05 * max(1, last_step - best_step))
    at_best = tr.level(int(best_step - win), int(best_step + win))
    at_end = tr.level(int(last_step - 2 * win), last_step + int(win))
    if at_best is None or at_end is None:
        return None, None
    return at_best, at_end


def _train_fell(at_best: float | None, at_end: float | None) -> bool:
    if at_best is None or at_end is None:
        return True
    return at_end <= at_best + TRAIN_TOLERANCE * abs(at_best)


def _abrupt_jump(t: np.ndarray, m: int, is_log: bool) -> float:
    """The largest jump between consecutive evaluations after index ``m`` whose later level
    held (median of everything after it >= the jump's own size above the median before it),
    as a ratio (1.0 when none, or for series that are not all positive)."""
    if not is_log or t.size - m < 3:
        return 1.0
    best = 1.0
    for i in range(m, t.size - 1):
        d = float(t[i + 1] - t[i])
        if d <= 0:
            continue
        held = median(t[i + 1:]) - median(t[m:i + 1])
        best = max(best, math.exp(min(d, held)))
    return best


def _run_span(run: Run, vt: Trace) -> tuple[int, int]:
    """First and last step of the run as far as the training and this validation series go."""
    first = int(vt.steps[0])
    tr = Trace.of(run, "loss", vt.rank) or Trace.of(run, "loss", None)
    if tr is not None and len(tr):
        first = min(first, int(tr.steps[0]))
    return first, int(vt.steps[-1])


#: A validation series longer than this is read as this many block medians (an evaluation
#: every step or so): the smoothing, noise and onset then work at a 0.5% resolution of the run.
MAX_EVALS = 200


def _reduced(vt: Trace) -> tuple[Trace, int]:
    """``vt`` as at most MAX_EVALS block medians (each at its block's middle step)."""
    if len(vt) <= MAX_EVALS:
        return vt, 1
    b = blocks(vt.steps, vt.values, max_blocks=MAX_EVALS)
    st = (b.first_step + b.last_step) // 2
    return Trace(vt.metric, vt.rank, st, b.median, st, b.median), b.size


def overfit_event(run: Run, vt: Trace) -> OverfitEvent | None:
    """Measure one validation series; None when it shows no overfitting at all."""
    n_raw = len(vt)
    vt, block = _reduced(vt)
    n = len(vt)
    if n < 3:
        return None
    t, is_log = log_if_positive(vt.values)
    if n == 3:
        return _three_evals(run, vt, t, is_log)
    s, h = _smooth(t)
    ms = int(np.argmin(s))
    # Onset: the lowest evaluation inside the smoothed minimum's window (the basin), not a
    # lone noisy dip elsewhere.
    lo, hi = max(0, ms - h), min(n, ms + h + 1)
    m = lo + int(np.argmin(t[lo:hi]))
    after = t[m + 1:]
    if after.size < 2:
        return None
    k = max(min(3, after.size), math.ceil(after.size / 2))
    end_level = median(after[-k:])
    best_level = min(float(s[ms]), float(np.min(s[m:])))
    local = t[max(0, m - 3):]
    src, turn = (local, m - max(0, m - 3)) if local.size >= 8 else (t, m)
    sig = _diff_noise(src, turn)
    # Whether to report at all (info) uses the plain robust sigma; the warning the cautious one.
    # (With and without the best evaluation's own second differences, the lower: a sharp
    # minimum inflates the MAD of a handful of differences, and so does a curve still bending
    # near its first points; whichever the event is, it should not count as noise.)
    sig_mad = min(_diff_noise(src, turn, cautious=False), _diff_noise(src, cautious=False))
    rise_raw_d = end_level - float(t[m])
    rise_raw = _rel(rise_raw_d, float(t[m]), is_log)
    if rise_raw < OVERFIT_MIN_RISE or rise_raw_d < OVERFIT_MIN_SIGMAS * sig_mad:
        return None
    if median(after) <= float(t[m]):
        return None
    hold = END_HOLD if is_log else END_HOLD * abs(float(t[m]))
    if median(after[-min(3, after.size):]) - float(t[m]) < max(sig_mad, hold):
        return None
    best_step = int(vt.steps[m])
    at_best, at_end = _train_levels(run, vt, best_step)
    train_ok = _train_fell(at_best, at_end)
    if not train_ok:
        return None
    rise_d = end_level - best_level
    rise = _rel(rise_d, best_level, is_log)
    sigmas = rise_d / sig if sig > 0 else math.inf
    first, last = _run_span(run, vt)
    share = (last - best_step) / max(1, last - first)
    jump = _abrupt_jump(t, m, is_log)
    progress = float(s[0]) - best_level
    given_back = rise_d / progress if progress >= OVERFIT_WARN_SIGMAS * sig and progress > 0 \
        else 0.0
    tail = t[m:]
    rising_tail = _rel(float(tail[-1] - tail[0]), float(tail[0]), is_log) \
        if tail.size >= 4 and bool(np.all(np.diff(tail) >= 0)) else 0.0
    trend_z = theil_sen_z(after)[1] if after.size >= OVERFIT_LONG_MIN_AFTER else 0.0
    ev = OverfitEvent(
        metric=vt.metric, rank=vt.rank, n_evals=n_raw, best_step=best_step,
        rising_tail=rising_tail, trend_z=trend_z,
        best_value=float(vt.values[m]), block=block,
        best_level=math.exp(best_level) if is_log else best_level,
        end_step=int(vt.steps[-1]), end_level=math.exp(end_level) if is_log else end_level,
        n_late=k, n_after=int(after.size), rise=rise, rise_raw=rise_raw, noise=sig,
        sigmas=sigmas, share_after=share, given_back=given_back, abrupt_jump=jump,
        train_at_best=at_best, train_at_end=at_end, train_ok=train_ok, three_evals=False,
        severity="info", at_first_eval=m == 0)
    return _with_severity(ev)


def _with_severity(ev: OverfitEvent) -> OverfitEvent:
    """Warning from cost: the late validation level is >= 10% above the smoothed best and
    >= 4 noise sigmas; or, held over >= half the run and >= 7 evaluations, >= 3 sigmas (2.5
    when the late level is a median of >= 15 evaluations) and either >= 5% or (>= 2% and
    >= 25% of the validation progress given back). Two evaluations after the best must rise
    >= 15% over >= a quarter of the run, and an abrupt >= 2x jump that stayed, in a log without a
    training loss, stays info (a divergence, not memorization)."""
    long_rise = (ev.share_after >= OVERFIT_LONG_SHARE
                 and ev.n_after >= OVERFIT_LONG_MIN_AFTER)
    strong = ev.rise >= OVERFIT_WARN_RISE and ev.sigmas >= OVERFIT_WARN_SIGMAS
    need = OVERFIT_MANY_WARN_SIGMAS if ev.n_late >= OVERFIT_MANY_LATE \
        else OVERFIT_LONG_WARN_SIGMAS
    if long_rise and ev.sigmas >= need:
        strong = strong or ev.rise >= OVERFIT_LONG_WARN_RISE or (
            ev.rise >= OVERFIT_PROGRESS_RISE and ev.given_back >= OVERFIT_PROGRESS_SHARE)
    # Memorization corroborates a rise the noise alone leaves at 2.5-4 sigmas: the training
    # loss fell >= 3x over the same steps while the validation loss rose >= 10% for >= a
    # quarter of the run (>= 3 evaluations after the best).
    memorized = (ev.train_at_best is not None and ev.train_at_end is not None
                 and ev.train_at_end > 0 and ev.train_at_best >= OVERFIT_MEMORIZED_FALL *
                 ev.train_at_end)
    if memorized and ev.rise >= OVERFIT_WARN_RISE and ev.sigmas >= OVERFIT_MIN_SIGMAS and \
            ev.n_after >= 3 and ev.share_after >= OVERFIT_TWO_AFTER_SHARE:
        strong = True
    # A noisy evaluation (a tiny validation set) hides a rise from the level test, not from
    # a trend: memorized, held over half the run, >= 10%, and a robust line through the >= 7
    # evaluations after the best climbs at >= 3 standard errors.
    if memorized and long_rise and ev.rise >= OVERFIT_WARN_RISE and \
            ev.trend_z >= OVERFIT_TREND_Z:
        strong = True
    if ev.n_after < 3 and (ev.rise < OVERFIT_TWO_AFTER_RISE
                           or ev.share_after < OVERFIT_TWO_AFTER_SHARE):
        strong = False
    # A short eval series read by its shape, as three evaluations are: every evaluation after
    # the best rose (>= 3 of them, over >= a quarter of the run), the last >= 15% above the
    # best, while the training loss fell (a 5-epoch fine-tune: 0.50, 0.53, 0.58, 0.64). The
    # medians above need more points than that to see a rise.
    if ev.rising_tail >= OVERFIT_THREE_EVAL_RISE and ev.share_after >= OVERFIT_TWO_AFTER_SHARE \
            and ev.train_at_best is not None and ev.train_at_end is not None \
            and ev.train_at_end < ev.train_at_best:
        strong = True
    if not ev.train_logged and ev.abrupt_jump >= ABRUPT_JUMP:
        strong = False
    if ev.train_at_best == 0.0 and ev.train_at_end == 0.0:
        # A training loss logged as exactly 0 is below the logger's rounding (HF's 4
        # decimals): it shows neither memorization nor its absence, and a validation loss
        # that small drifts at the precision's edge. At most info.
        strong = False
    sev: Severity = "warning" if strong else "info"
    return OverfitEvent(**{**ev.__dict__, "severity": sev})


def _three_evals(run: Run, vt: Trace, t: np.ndarray, is_log: bool) -> OverfitEvent | None:
    """Three evaluations are too few for a noise estimate, so the rule is shape-only: the
    first is the minimum, the other two rise monotonically, the last is >= 15% above the
    first, and the training loss fell over the same steps (a warning; otherwise nothing)."""
    v = vt.values
    if not (t[0] < t[1] < t[2]):
        return None
    rel = _rel(float(t[2] - t[0]), float(t[0]), is_log)
    if rel < OVERFIT_THREE_EVAL_RISE:
        return None
    best_step = int(vt.steps[0])
    at_best, at_end = _train_levels(run, vt, best_step)
    if at_best is None or at_end is None or not at_end < at_best:
        return None
    first, last = _run_span(run, vt)
    return OverfitEvent(
        metric=vt.metric, rank=vt.rank, n_evals=3, best_step=best_step,
        best_value=float(v[0]), best_level=float(v[0]), end_step=int(vt.steps[-1]),
        end_level=float(v[2]), n_late=1, n_after=2, rise=rel, rise_raw=rel, noise=0.0,
        sigmas=math.inf, share_after=(last - best_step) / max(1, last - first), given_back=0.0,
        abrupt_jump=1.0, train_at_best=at_best, train_at_end=at_end, train_ok=True,
        three_evals=True, severity="warning", at_first_eval=True)


def overfit_events(run: Run, rank: int | None) -> list[OverfitEvent]:
    """The events of every evaluation set on ``rank``."""
    out = []
    for name in val_loss_metrics(run):
        vt = Trace.of(run, name, rank)
        if vt is None or len(vt) < 3:
            continue
        ev = overfit_event(run, vt)
        if ev is not None:
            out.append(ev)
    return out


#: Appended runs: at a step restart the training loss must come back to at least this many
#: times its value just before, and nearer (in log space) to the log's first value.
FRESH_START_RATIO = 1.3


def _restarts(steps: np.ndarray) -> np.ndarray:
    """Indices (log order) where the step goes back."""
    return np.flatnonzero(np.diff(steps) < 0) + 1


def appended_segments(run: Run, rank: int | None) -> list[Run] | None:
    """The runs of a log into which several trainings were appended (the step column restarts
    and at every restart the training loss starts again: >= 1.3x its value before, nearer to
    the log's first value), one ``Run`` each with ``loss`` and the evaluation sets that restart
    at the same points in log order; None for an ordinary log. Each training is judged on its
    own: the clean series of such a log (last value wins per step) mixes them."""
    tr = run.get("loss", rank)
    if tr is None or len(tr) < 4:
        return None
    cuts = _restarts(tr.steps)
    if cuts.size == 0:
        return None
    v = tr.values
    if not bool(np.all(np.isfinite(v))) or not bool(np.all(v > 0)):
        return None
    lv = np.log(v)
    first = float(lv[0])
    for i in cuts.tolist():
        before, after = float(lv[i - 1]), float(lv[i])
        if not (after - before >= math.log(FRESH_START_RATIO)
                and abs(after - first) < abs(after - before)):
            return None
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {
        "loss": [(a, b) for a, b in zip(np.split(tr.steps, cuts), np.split(v, cuts),
                                        strict=True)]}
    for name in val_loss_metrics(run):
        vs = run.get(name, rank)
        if vs is None:
            continue
        vc = _restarts(vs.steps)
        if vc.size != cuts.size:
            continue
        parts[name] = list(zip(np.split(vs.steps, vc), np.split(vs.values, vc), strict=True))
    if "val_loss" not in parts:
        return None
    out = []
    for j in range(cuts.size + 1):
        sub = Run(f"{run.source}#{j + 1}")
        for name, segs in parts.items():
            sub.add(name, segs[j][0], segs[j][1], rank)
        out.append(sub)
    return out


def rank_events(run: Run, rank: int | None) -> list[OverfitEvent]:
    """The events of every evaluation set on ``rank``; for appended runs, of every run in
    the log, each marked with its ``segment``."""
    segs = appended_segments(run, rank)
    if segs is None:
        return overfit_events(run, rank)
    out = []
    for j, sub in enumerate(segs):
        for e in overfit_events(sub, rank):
            out.append(OverfitEvent(**{**e.__dict__, "segment": j + 1,
                                       "n_segments": len(segs)}))
    return out


# --------------------------------------------------------------------------- words
def _set_name(metric: str) -> str:
    return "validation" if metric == "val_loss" else f"eval set {metric.split('/', 1)[1]}"


def _finding(events: list[OverfitEvent]) -> Finding:
    """One finding for all evaluation sets on a rank: the worst severity; the onset is the
    earliest best step among the sets at that severity; every set that shows it is evidence."""
    sev: Severity = max((e.severity for e in events), key=lambda s: SEVERITY_ORDER[s])
    top = sorted((e for e in events if e.severity == sev),
                 key=lambda e: (e.segment or 0, e.best_step))
    lead = top[0]
    others = [e for e in events if e is not lead]
    ev: list[Evidence] = []
    shown = [lead, *others][:8]
    for e in shown:
        seg = f" (run {e.segment} of {e.n_segments})" if e.segment is not None else ""
        ev.append(Evidence(e.metric, e.best_step, e.best_value, None,
                           note=f"lowest {e.metric} of {e.n_evals} evaluations (best step)"
                                + (f", as medians of blocks of {e.block}" if e.block > 1
                                   else "")
                                + f"{seg}; smoothed level there {fmt(e.best_level)}"))
        ev.append(Evidence(e.metric, e.end_step, e.end_level, e.best_level,
                           note=f"median of the last {e.n_late} of {e.n_after} evaluations "
                                f"after the best vs the smoothed best level: "
                                f"{100 * e.rise:+.1f}%, "
                                + ("shape only (3 evaluations)" if e.three_evals else
                                   f"{e.sigmas:.1f} noise sigmas")
                                + f"; {100 * e.share_after:.0f}% of the run after the best"))
    if lead.train_logged:
        ev.append(Evidence("loss", lead.end_step, lead.train_at_end, lead.train_at_best,
                           note="training loss near the end vs near the best validation "
                                "step (medians of nearby points)"))
        train_txt = f"training loss {fmt(lead.train_at_best)} -> {fmt(lead.train_at_end)}"
    else:
        train_txt = "the training loss was not logged, so memorization is not checked"
    sets = list(dict.fromkeys(e.metric for e in [lead, *others]))
    sets_txt = "" if sets == ["val_loss"] else f" (sets: {', '.join(sets)})"
    where = (f"at the first evaluation, step {lead.best_step}" if lead.at_first_eval
             else f"at step {lead.best_step}")
    seg_txt = ""
    if lead.segment is not None:
        where += f" of run {lead.segment}"
        hit = {e.segment for e in events}
        loud = {e.segment for e in events if e.severity == sev}
        seg_txt = (f"; this log holds {lead.n_segments} runs appended one after another "
                   f"(the step restarts), each judged on its own: {len(loud)} show it at "
                   f"{sev}, {len(hit)} in all")
    summary = (f"{_set_name(lead.metric)} loss was lowest {where} ({fmt(lead.best_value)}) "
               f"and its last {lead.n_late} evaluations sit {100 * lead.rise:.1f}% above "
               f"the best level, over {100 * lead.share_after:.0f}% of the run "
               f"({train_txt}){sets_txt}; best step {lead.best_step}{seg_txt}")
    if lead.abrupt_jump >= ABRUPT_JUMP:
        summary += (f"; it jumped {fmt(lead.abrupt_jump)}x between two evaluations and "
                    f"stayed, more like a divergence of the evaluation than memorization")
    conf = float(min(1.0, 0.45 + 0.05 * lead.n_after + min(0.3, lead.rise)))
    if lead.three_evals:
        conf = 0.6
    if not lead.train_logged:
        conf = min(conf, 0.6)
    return Finding(
        symptom="overfitting", severity=sev, confidence=conf, onset_step=lead.best_step,
        end_step=lead.end_step, rank=lead.rank, metric=lead.metric, summary=summary,
        evidence=tuple(ev))


@register_detector("overfitting", requires=("val_loss",))
def detect_overfitting(run: Run) -> list[Finding] | NotRun:
    """Needs >= 3 finite points in ``val_loss`` (or a ``val_loss/<set>``); one finding per
    rank over every evaluation set. The rule is in ``overfit_event`` / ``_with_severity`` and
    docs/symptoms.md."""
    out: list[Finding] = []
    seen = False
    for rank in run.ranks():
        for name in val_loss_metrics(run):
            vt = Trace.of(run, name, rank)
            seen = seen or (vt is not None and len(vt) >= 3)
        events = rank_events(run, rank)
        if events:
            out.append(_finding(events))
        elif (gap := gap_event(run, rank)) is not None:
            out.append(gap_finding(gap, rank))
    if not seen:
        return NotRun("needs at least 3 finite val_loss points")
    return out
