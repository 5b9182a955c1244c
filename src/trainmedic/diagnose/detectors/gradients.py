"""Detectors on the gradient norm and the mixed-precision loss scale.

Severity follows consequence, not size: a gradient-norm spike the loss never noticed (the
logged norm is usually *before* clipping, e.g. HF Trainer's ``max_grad_norm=1.0``, and Adam
normalizes the step anyway) is info; the same spike with a loss reaction is a warning.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from trainmedic.diagnose.detectors.layers import (
    MIN_LAYER_POINTS,
    LayerTrace,
    layer_ranks,
    layer_traces,
    layer_types,
    recent_level,
    sustained_onset,
)
from trainmedic.diagnose.detectors.loss_reaction import (
    RECOVERY_POINTS,
    loss_fall,
    loss_fell_since,
    loss_reacted,
    loss_recovered,
)
from trainmedic.diagnose.detectors.short_log import SHORT_MIN_POINTS, jumped_tail
from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.localization import localized_evidence, localized_phrase, nonfinite_event
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import (
    blocks,
    median,
    theil_sen,
    thin,
    trailing_reference,
    true_runs,
)
from trainmedic.diagnose.trace import Trace, fmt, traces
from trainmedic.run.mapping import FIRST_LAYER
from trainmedic.run.series import Run

__all__ = ["GRAD_SPIKE_RATIO", "GRAD_GROWTH_RATIO", "VANISH_RATIO", "VANISH_DEPTH_RATIO",
           "VANISH_DEPTH_INFO_RATIO", "GRAD_LEVEL_HIGH", "GRAD_LEVEL_LOW"]

#: A grad_norm point this many times its trailing median (and z >= 8) is a spike.
GRAD_SPIKE_RATIO = 10.0
#: The grad_norm level grew this many times over its early level: sustained explosion.
GRAD_GROWTH_RATIO = 10.0
#: The grad_norm level fell this many times below its early level: vanishing.
VANISH_RATIO = 1000.0
def _flank_start(first_step: np.ndarray, level: np.ndarray, j: int, early: float) -> int:
    """Where a rising log-level flank left the early level.

    Exponential growth (the usual explosion) doubles slowly at first, so the first block 2x
    above the early level comes well after growth began. The Theil-Sen line through the flank
    (blocks ``j`` .. the first block at the flank's top) is extrapolated back to the early
    level; the result is kept between the last block at or below the early level and block
    ``j`` (a step jump gives a steep line and stays at ``j``).
    """
    top = int(j + np.argmax(level[j:]))
    hi = int(first_step[j])
    below = np.flatnonzero(level[:j] <= early)
    lo = int(first_step[below[-1]]) if below.size else int(first_step[0])
    if top - j < 2:
        return hi
    x = first_step[j:top + 1].astype(np.float64)
    y = level[j:top + 1]
    slope = theil_sen(x, y)
    if slope <= 0:
        return hi
    x0 = float(median(x - (y - early) / slope))
    return int(min(hi, max(lo, round(x0))))


#: Level rules (a run broken from its first step has no rise to detect). A pre-clip global
#: grad norm whose median over the first fifth of the run is >= this is exploding from the
#: start: healthy networks with a mean-reduced loss sit at O(0.1-100) (init schemes keep
#: per-layer gradients O(1): Glorot & Bengio 2010, He et al. 2015).
GRAD_LEVEL_HIGH = 1e4
#: ... and one whose median over the whole run is <= this, with a loss that does not fall,
#: has vanished from the start (float32 round-off of O(1) weights is ~1e-7).
GRAD_LEVEL_LOW = 1e-6


#: Sustained grad-norm growth is info when the loss fell by this share over the same steps: a
#: model leaving a plateau (a GRU at chance that starts to learn) grows its gradients tenfold
#: while the loss falls a quarter (measured on a trained run: 31%), which is learning.
GROWTH_LEARNING_FALL = 0.2


def _exploding_level(run: Run, g: Trace) -> Finding | None:
    q = max(3, len(g) // 5)
    lvl = median(np.abs(thin(g.values[:q])))  # a strided 100k points: a median, not a sort
    if not lvl >= GRAD_LEVEL_HIGH:
        return None
    _, loss0 = loss_fall(run, g.rank)
    huge_loss = loss0 is not None and abs(loss0) >= 1e3
    sev: Severity = "error" if huge_loss else "warning"
    loss_txt = f" with a loss of {fmt(loss0)} (init scale)" if huge_loss else ""
    ev = [Evidence("grad_norm", int(g.steps[0]), lvl, GRAD_LEVEL_HIGH,
                   note=f"median of the first {q} logged grad norms; reference = the level no "
                        f"healthy pre-clip norm of a mean-reduced loss reaches")]
    if huge_loss:
        ev.append(Evidence("loss", int(g.steps[0]), loss0, None,
                           note="median of the first tenth of the logged losses"))
    return Finding(symptom="exploding_gradients", severity=sev, confidence=0.75,
                   onset_step=int(g.steps[0]), end_step=None, rank=g.rank, metric="grad_norm",
                   summary=(f"grad_norm was {fmt(lvl)} from the first logged step{loss_txt}: "
                            f"exploding from initialization (weight scale, an unnormalized "
                            f"input or target, or a summed loss), not after a rise"),
                   evidence=tuple(ev))


def _vanishing_level(run: Run, g: Trace) -> Finding | None:
    lvl = median(np.abs(thin(g.values)))
    if not (0 < lvl <= GRAD_LEVEL_LOW):
        return None
    fall, loss0 = loss_fall(run, g.rank)
    if fall is None or fall >= 0.1 or (loss0 is not None and abs(loss0) < 1e-3):
        return None  # the loss fell, or sits at ~0: tiny gradients are convergence
    return Finding(symptom="vanishing_gradients", severity="warning", confidence=0.75,
                   onset_step=int(g.steps[0]), end_step=int(g.steps[-1]), rank=g.rank,
                   metric="grad_norm",
                   summary=(f"grad_norm stayed at {fmt(lvl)} from the first logged step while "
                            f"the loss fell only {100 * fall:.1f}%: the gradients vanished "
                            f"from the start (saturating activations, depth without "
                            f"residuals or normalization, or an underflowing precision)"),
                   evidence=(Evidence("grad_norm", int(g.steps[0]), lvl, GRAD_LEVEL_LOW,
                                      note="median of every logged grad norm"),
                             Evidence("loss", int(g.steps[-1]), fall, None,
                                      note="relative fall of the loss from its first to its "
                                           "last tenth (value)")))


#: Grad-norm spikes this many logged points or fewer before the loss or the grad norm first
#: went non-finite are the explosion that overflowed, whatever the loss did in between.
BROKE_AFTER_POINTS = 10


def _broke_after(run: Run, g: Trace, last_spike: int) -> int | None:
    """The first step after ``last_spike`` where the loss or the grad norm is NaN/inf, when it
    comes within BROKE_AFTER_POINTS logged grad-norm intervals of it."""
    first: int | None = None
    for name in ("loss", "grad_norm"):
        s = run.get(name, g.rank)
        if s is None:
            continue
        nonfinite = ~np.isfinite(s.values)
        # a lasting stretch (>= 2 logged points, or the last one): fp16's scaler skipping one
        # overflowing step logs a lone inf grad norm, routinely
        lasting = nonfinite & (np.r_[nonfinite[1:], True])
        bad = s.steps[lasting & (s.steps > last_spike)]
        if bad.size and (first is None or int(bad[0]) < first):
            first = int(bad[0])
    if first is None or first - last_spike > BROKE_AFTER_POINTS * max(1.0, g.interval):
        return None
    return first


def _short_jump(run: Run, g: Trace) -> Finding | None:
    """grad_norm that jumped >= 10x above every earlier point of a short log (5-9 points) and
    stayed there to its end (+inf counts): warning, info when the loss fell >= 20% over the
    same steps (a model leaving its flat start), as for sustained growth."""
    keep = ~np.isnan(g.all_values)  # +inf stays: an overflowed norm is high
    v, st = g.all_values[keep], g.all_steps[keep]
    k = jumped_tail(v, GRAD_GROWTH_RATIO)
    if k < 2:
        return None
    before = float(v[:-k].max())
    onset = int(st[len(v) - k])
    learning = loss_fell_since(run, g.rank, onset)
    sev: Severity = "info" if learning is not None and learning >= GROWTH_LEARNING_FALL \
        else "warning"
    high = float(np.median(v[len(v) - k:]))
    return Finding(
        symptom="exploding_gradients", severity=sev, confidence=0.6, onset_step=onset,
        rank=g.rank, metric="grad_norm",
        summary=(f"grad_norm jumped "
                 f"{f'{high / before:.3g}x' if math.isfinite(high) else 'to inf'} at step "
                 f"{onset} ({fmt(before)} -> "
                 f"{fmt(high)}) and stayed there for the last {k} of {len(v)} logged points"),
        evidence=(Evidence("grad_norm", int(st[-1]), high, before,
                           note=f"median of the last {k} points vs the highest before them "
                                f"(a log of {len(v)} points: judged by its shape)"),))


#: The first logged grad norm at least this many times *every* later one: the first steps
#: blew up and the run carried on (clipping, Adam's normalization) from wherever that left the
#: weights. Initialization can make the first norms several times the later ones (measured on
#: every analysed healthy run: at most 7.5x the largest later one); this is 100x all of them.
FIRST_BLOWUP_RATIO = 100.0


def _first_step_blowup(run: Run, g: Trace) -> Finding | None:
    v = g.values
    later = v[1:][np.isfinite(v[1:])]
    if later.size < 5 or not float(v[0]) > 0:
        return None
    top, first = float(np.max(np.abs(later))), int(g.steps[0])
    if not float(v[0]) >= FIRST_BLOWUP_RATIO * top:
        return None
    _, loss0 = loss_fall(run, g.rank)
    return Finding(
        symptom="exploding_gradients", severity="warning", confidence=0.6, onset_step=first,
        end_step=first, rank=g.rank, metric="grad_norm",
        summary=(f"grad_norm was {fmt(float(v[0]))} at the first logged step, "
                 f"{float(v[0]) / top:.3g}x the largest of the {later.size} later ones "
                 f"({fmt(top)}): the first steps exploded (an init scale, an lr with no warm-up, "
                 f"an unnormalized input) and the run went on from where that left the weights"),
        evidence=(Evidence("grad_norm", first, float(v[0]), top,
                           note="first logged grad norm vs the largest later one"),) + ((
            Evidence("loss", first, loss0, None,
                     note="median of the first tenth of the logged losses"),)
            if loss0 is not None else ()))


@register_detector("exploding_gradients", requires=("grad_norm",))
def detect_exploding(run: Run) -> list[Finding] | NotRun:
    """(a) sustained: the block-median grad_norm in the last 20% of the run is >= 10x its
    level over 10-30% of the run and still rising - warning (error if the loss rose too);
    (b) spikes: points >= 10x the median of the previous 50 logged points and robust z >= 8 -
    warning when the loss reacted within two logging intervals, else info."""
    out: list[Finding] = []
    ran = False
    for g in traces(run, "grad_norm"):
        pos = g.values[g.values > 0]
        if len(g) < 10 or pos.size < 10:
            # a norm already >= 1e4 at its few finite points before it overflowed (inf, then
            # NaN for the rest of the run): exploding from the first step
            level = _exploding_level(run, g) if len(g) and float(g.values[0]) >= \
                GRAD_LEVEL_HIGH and not bool(np.all(np.isfinite(g.all_values))) else None
            if level is not None:
                ran = True
                out.append(level)
                continue
            short = _short_jump(run, g) if len(g.all_values) >= SHORT_MIN_POINTS else None
            if short is not None:
                ran = True
                out.append(short)
            continue
        ran = True
        level = _exploding_level(run, g) or _first_step_blowup(run, g)
        if level is not None:
            out.append(level)
            continue
        steps = g.steps[g.values > 0]
        lg = np.log(pos)
        # (a) sustained growth
        bl = blocks(steps, lg, max_blocks=min(100, max(5, pos.size // 3)))
        nb = len(bl)
        if nb >= 5:
            early = median(bl.median[int(0.1 * nb): max(int(0.3 * nb), int(0.1 * nb) + 1)])
            late = median(bl.median[-max(1, int(0.2 * nb)):])
            slope = theil_sen(bl.first_step[-max(3, nb // 3):].astype(np.float64),
                              bl.median[-max(3, nb // 3):])
            # still rising; in a short log (< 10 blocks: a slope through three blocks is
            # noise), or held >= 10x over the last three blocks (a level that stays up)
            held = nb < 10 and bool(np.all(bl.median[-3:] - early >= math.log(GRAD_GROWTH_RATIO)))
            if late - early >= math.log(GRAD_GROWTH_RATIO) and (slope >= 0 or held):
                # Onset: the start of the final stretch of blocks above the early level
                # (by half the growth threshold, in log), walked back along its rising flank.
                high = bl.median >= early + math.log(GRAD_GROWTH_RATIO) / 2
                j = nb - 1
                while j > 0 and high[j - 1]:
                    j -= 1
                while j > 0 and bl.median[j - 1] > early + math.log(2.0):
                    j -= 1
                onset = _flank_start(bl.first_step, bl.median, j, early)
                reacted, why = loss_reacted(run, g.rank, onset, int(steps[-1] - onset))
                sev: Severity = "error" if reacted else "warning"
                learning = loss_fell_since(run, g.rank, onset)
                if learning is not None and learning >= GROWTH_LEARNING_FALL:
                    # Gradients that grow while the loss falls by a third or more are the
                    # model starting to learn (a recurrent net leaving its flat start), not
                    # an explosion that costs anything; a loss jump on the way (a bad batch)
                    # is loss_spike's to report.
                    sev = "info"
                    why += (f"; the loss fell {100 * learning:.0f}% over the same steps: the "
                            f"model is learning")
                ratio = math.exp(late - early)
                out.append(Finding(
                    symptom="exploding_gradients", severity=sev, confidence=0.8,
                    onset_step=onset, rank=g.rank, metric="grad_norm",
                    summary=(f"grad_norm level grew {ratio:.3g}x ({fmt(math.exp(early))} -> "
                             f"{fmt(math.exp(late))}) from step {onset}; {why}"),
                    evidence=(Evidence("grad_norm", int(steps[-1]), math.exp(late),
                                       math.exp(early),
                                       note="median of the last 20% of blocks vs blocks over "
                                            "10-30% of the run"),)))
                continue
        # (b) isolated spikes
        ref, sig = trailing_reference(lg, 50)
        scale = np.fmax(np.nan_to_num(sig, nan=0.0), 0.05)
        jump = lg - ref
        with np.errstate(invalid="ignore"):
            cand = (jump >= math.log(GRAD_SPIKE_RATIO)) & (jump / scale >= 8.0)
        cand &= np.isfinite(ref)
        if not cand.any():
            continue
        idx = np.flatnonzero(cand)
        order = idx[np.argsort(-jump[idx])]
        horizon = int(2 * g.interval)
        reactions = [(int(i), *loss_reacted(run, g.rank, int(steps[i]), horizon))
                     for i in order[:10]]
        any_react = any(r for _, r, _ in reactions)
        # A reaction the loss shook off within a few logged points (a clipped step on a
        # recurrent net leaving a plateau) did no lasting harm: info, like a loss spike that
        # came straight back.
        lasting = [int(i) for i, r, _ in reactions
                   if r and not loss_recovered(run, g.rank, int(steps[i]), horizon)]
        med_all = median(pos)
        broke = _broke_after(run, g, int(steps[idx[-1]]))
        sev = "warning" if lasting or broke is not None else "info"
        listed = ", ".join(f"{fmt(float(pos[i]))} at step {int(steps[i])}" for i in order[:3])
        react_txt = ("the loss reacted" if lasting else
                     f"the run went non-finite at step {broke}, {BROKE_AFTER_POINTS} logged "
                     f"points or fewer later: the explosion led to the overflow"
                     if broke is not None else
                     f"the loss reacted mildly and was back within {RECOVERY_POINTS} logged "
                     f"points (info: no lasting harm)" if any_react else
                     "the loss did not react (info: a clipped or Adam-normalized step)")
        ev = [Evidence("grad_norm", int(steps[i]), float(pos[i]), float(math.exp(ref[i])),
                       note="median of the previous 50 logged points; " + why)
              for i, _, why in reactions[:3]]
        out.append(Finding(
            symptom="exploding_gradients", severity=sev,
            confidence=0.85 if any_react else 0.6,
            onset_step=int(steps[idx[0]]), end_step=int(steps[idx[-1]]), rank=g.rank,
            metric="grad_norm",
            summary=(f"{idx.size} grad_norm spike(s) >= {GRAD_SPIKE_RATIO:.0f}x the running "
                     f"median (run median {fmt(med_all)}): {listed}; {react_txt}"),
            evidence=tuple(ev)))
    if not ran:
        return NotRun("needs at least 10 positive grad_norm points")
    return [_with_layer_growth(run, f) for f in out]


def _with_layer_growth(run: Run, f: Finding) -> Finding:
    """Name the layer whose grad norm grew most over the finding's stretch, when per-layer
    grad norms were logged there: for spikes, the largest layer value measured within the
    spike(s) (layer stats are taken every N steps, so a one-step spike is seen only when it
    falls on a measured step); for sustained growth, the median after the onset; each over
    the median of that layer's measurements before the onset."""
    if f.onset_step is None:
        return f
    onset = f.onset_step
    spikes = f.end_step is not None
    hi = f.end_step if spikes else (run.last_step() or onset)
    best: tuple[float, LayerTrace, int, float, float, int] | None = None
    counted = 0
    for lt in layer_traces(run, "grad_norm", f.rank, min_points=2):
        st, v = lt.trace.steps, lt.trace.values
        before = v[st < onset]
        during = (st >= onset) & (st <= (hi if hi is not None else onset))
        if before.size == 0 or not during.any():
            continue
        ref = median(before)
        if not ref > 0:
            continue
        counted += 1
        vals, at = v[during], st[during]
        if spikes:
            j = int(np.argmax(vals))
            now, step = float(vals[j]), int(at[j])
        else:
            now, step = median(vals), int(at[-1])
        growth = now / ref
        if best is None or growth > best[0]:
            best = (growth, lt, step, now, ref, int(before.size))
    if best is None or not best[0] > 1.0:
        return f
    growth, lt, step, now, ref, nb = best
    how = "largest value within the spike(s)" if spikes else "median after the onset"
    ev = Evidence(lt.metric, step, now, ref,
                  note=f"grew most of {counted} layer(s) measured around the onset "
                       f"({growth:.3g}x): {how} vs the median of its {nb} measurement(s) "
                       f"before step {onset}")
    return replace(f, summary=f"{f.summary}; layer '{lt.module}' grew most ({growth:.3g}x)",
                   evidence=(*f.evidence, ev))


@register_detector("vanishing_gradients")
def detect_vanishing(run: Run) -> list[Finding] | NotRun:
    """(a) Over time: the grad_norm level in the last 20% of points is <= 1/1000 of its level
    over the first 20% (after the first point), or grad_norm is exactly 0 on >= 3
    consecutive logged points. Warning when the loss did not fall over the same stretch (or
    is not logged); info when it did (tiny gradients at a tiny loss are convergence).
    (b) Through depth, from per-layer grad norms: the first weight layer's
    ``layer/<m>/grad_norm`` over the last's, per measurement, has a recent level (median of
    the last third, >= 3 measurements) <= 1e-4 - warning whatever the loss does (the early
    layers do not learn even while the head fits); <= 1e-3 info. When both fire on a rank,
    (b) is added to (a)'s evidence."""
    out: list[Finding] = []
    trs = traces(run, "grad_norm", min_points=10)
    for g in trs:
        level = _vanishing_level(run, g)
        if level is not None:
            out.append(level)
            continue
        n = len(g)
        v = g.values
        q = max(2, n // 5)
        early = median(np.abs(v[1:1 + q]))
        late = median(np.abs(v[-q:]))
        zero_runs = [r for r in true_runs(v == 0.0) if r[1] - r[0] >= 3]
        vanished = early > 0 and late <= early / VANISH_RATIO
        if not (vanished or zero_runs):
            continue
        if zero_runs:
            onset_i = zero_runs[0][0]
        else:
            # Onset: the first point an order of magnitude below the early level.
            below = np.flatnonzero(np.abs(v) <= early / 10.0)
            onset_i = int(below[0]) if below.size else n - q
        onset = int(g.steps[onset_i])
        lt = Trace.of(run, "loss", g.rank) or Trace.of(run, "loss", None)
        loss_fell = False
        loss_txt = "loss not logged"
        if lt is not None and len(lt) >= 4:
            a = lt.level(int(g.steps[0]), onset)
            b = lt.level(int(g.steps[-q]), int(g.steps[-1]))
            if a is not None and b is not None:
                loss_fell = b < 0.5 * a if a > 0 else b < a
                loss_txt = f"loss {fmt(a)} -> {fmt(b)} over the same steps"
        sev: Severity = "info" if loss_fell else "warning"
        what = (f"grad_norm was exactly 0 on {zero_runs[0][1] - zero_runs[0][0]} consecutive "
                f"logged points from step {onset}" if zero_runs else
                f"grad_norm fell {early / max(late, 1e-300):.3g}x "
                f"({fmt(early)} -> {fmt(late)}) from step {onset}")
        out.append(Finding(
            symptom="vanishing_gradients", severity=sev, confidence=0.7, onset_step=onset,
            rank=g.rank, metric="grad_norm", summary=f"{what}; {loss_txt}",
            evidence=(Evidence("grad_norm", int(g.steps[-1]), late, early,
                               note=f"median of the last {q} points vs the first {q} "
                                    f"(after the first)"),)))
    depth_ran = False
    for rank in layer_ranks(run, "grad_norm"):
        depth = _depth_vanishing(run, rank)
        if depth is None:
            continue
        depth_ran = True
        if isinstance(depth, Finding):
            out = _merge_depth(out, depth)
    if not trs and not depth_ran:
        if not run.has("grad_norm") and not layer_ranks(run, "grad_norm"):
            return NotRun("log grad_norm (or per-layer layer/<module>/grad_norm) to enable "
                          "this check", missing=("grad_norm",))
        return NotRun("needs at least 10 finite grad_norm points, or per-layer grad norms "
                      "of >= 2 layers at >= 3 common steps")
    return out


#: The first weight layer's grad norm at or below this fraction of the last's: vanishing
#: through depth (warning); at or below ``VANISH_DEPTH_INFO_RATIO``: info. Healthy inits keep
#: per-layer gradient norms within about an order of magnitude across depth (Glorot & Bengio
#: 2010, fig. 7: normalized init keeps the back-propagated gradient variance about constant;
#: a pre-LN transformer, the demo's, measures 1-7; an 8-layer tanh MLP with PyTorch's default
#: init ~0.5), while a too-small or saturating setup shrinks them by a factor per layer (the
#: same tanh MLP at N(0, 0.01): ~1e-8; a 10-layer sigmoid MLP at the default init: ~5e-9).
#: Plain deep MLPs at PyTorch's default init sit near 1e-3 (10 ReLU layers: ~1e-3; 3 sigmoid
#: layers: ~2e-3, measured on random labels with SGD): worth knowing, not an alarm.
VANISH_DEPTH_RATIO = 1e-4
VANISH_DEPTH_INFO_RATIO = 1e-3


def _weight_layers(run: Run, rank: int | None) -> list[LayerTrace]:
    """Per-layer grad-norm traces in module order, normalization layers left out when the
    module classes are known (a LayerNorm's affine pair is not a layer of the depth whose
    gradient flow is in question, and its gradient is small by construction)."""
    lts = layer_traces(run, "grad_norm", rank)
    types = layer_types(run)
    if types:
        dense = [lt for lt in lts if "Norm" not in types.get(lt.module, "")]
        if len(dense) >= 2:
            return dense
    return lts


def _depth_vanishing(run: Run, rank: int | None) -> Finding | bool | None:
    """The per-layer rule on one rank: a Finding, False (judged: no vanishing) or None
    (too few layers or common measurements to judge)."""
    lts = _weight_layers(run, rank)
    whole = Trace.of(run, "grad_norm", rank)
    if len(lts) == 1 and lts[0].module == FIRST_LAYER and whole is not None:
        # Only the first layer's norm beside the whole model's: the whole is at least the
        # largest layer's, so a first layer at <= 1e-4 of it is at <= 1e-4 x sqrt(#layers) of
        # the layer the gradient reaches most.
        lts = [lts[0], LayerTrace("the whole model (grad_norm)", whole)]
    if len(lts) < 2:
        return None
    first, last = lts[0], lts[-1]
    steps, i, j = np.intersect1d(first.trace.steps, last.trace.steps, return_indices=True)
    a, b = first.trace.values[i], last.trace.values[j]
    ok = b > 0
    steps, a, b = steps[ok], a[ok], b[ok]
    if steps.size < MIN_LAYER_POINTS:
        return None
    ratio = a / b
    level, k = recent_level(ratio)
    if not level <= VANISH_DEPTH_INFO_RATIO:
        return False
    sev: Severity = "warning" if level <= VANISH_DEPTH_RATIO else "info"
    thr = VANISH_DEPTH_RATIO if sev == "warning" else VANISH_DEPTH_INFO_RATIO
    onset = sustained_onset(steps, -ratio, -thr)
    fa, fb = median(a[-k:]), median(b[-k:])
    since = "from the first measurement" if onset <= int(steps[0]) else f"from step {onset}"
    whole_ref = last.metric == "grad_norm"
    ref = "the whole model" if whole_ref else f"the last layer '{last.module}'"
    ref_what = "the whole model's norm" if whole_ref else "the last layer in module order"
    return Finding(
        symptom="vanishing_gradients", severity=sev, confidence=0.8 if sev == "warning" else 0.5,
        onset_step=onset,
        rank=rank, metric=first.metric,
        summary=(f"gradients vanish through depth {since}: the first layer '{first.module}' "
                 f"gets {fmt(level)}x the gradient norm of {ref} "
                 f"({fmt(fa)} vs {fmt(fb)}, median of the last {k} measurements)"),
        evidence=(Evidence(first.metric, int(steps[-1]), fa, fb,
                           note=f"median of the last {k} per-layer measurements; reference: "
                                f"{last.metric} ({ref_what}) over the same steps; ratio "
                                f"{fmt(level)}"),))


def _merge_depth(out: list[Finding], depth: Finding) -> list[Finding]:
    """Add the per-layer finding to an over-time finding on the same rank, or append it."""
    for n, f in enumerate(out):
        if f.rank == depth.rank and f.metric == "grad_norm":
            sev = f.severity if f.level >= depth.level else depth.severity
            out[n] = replace(f, severity=sev, summary=f"{f.summary}; and {depth.summary}",
                             evidence=f.evidence + depth.evidence)
            return out
    return [*out, depth]




@register_detector("nonfinite_grad", requires=("grad_norm",))
def detect_nonfinite_grad(run: Run) -> list[Finding] | NotRun:
    """grad_norm NaN/inf. Persistent (>= 3 in a row or at the last point): error. Isolated:
    warning, or info when a logged loss_scale fell at the same time (fp16 GradScaler skipped
    the step and halved the scale, which is how it is meant to work)."""
    out: list[Finding] = []
    for g in traces(run, "grad_norm"):
        bad = ~np.isfinite(g.all_values)
        if not bad.any():
            continue
        runs = true_runs(bad)
        persistent = bool(bad[-1]) or max(b - a for a, b in runs) >= 3
        first = int(g.all_steps[runs[0][0]])
        ls = Trace.of(run, "loss_scale", g.rank) or Trace.of(run, "loss_scale", None)
        scaler_handled = False
        if ls is not None and len(ls) >= 2 and not persistent:
            i = ls.index_at(first)
            before = ls.values[max(0, i - 1)]
            after = ls.values[min(len(ls) - 1, i + 1)]
            scaler_handled = bool(after < before or ls.values[i] < before)
        sev: Severity = "error" if persistent else ("info" if scaler_handled else "warning")
        n_bad = int(bad.sum())
        extra = (" (the fp16 loss scale dropped at the same time: GradScaler skipped the step)"
                 if scaler_handled else "")
        end = None if persistent else int(g.all_steps[runs[-1][1] - 1])
        summary = f"grad_norm was non-finite at {n_bad} logged point(s) from step {first}{extra}"
        evidence = [Evidence("grad_norm", first, float(g.all_values[runs[0][0]]), None,
                             note=f"{n_bad} of {len(bad)} logged values are NaN/inf")]
        # The NaN guard's replay, when the watcher recorded one (same window as the router).
        event = nonfinite_event(run, g.rank, first, end)
        if event is not None:
            summary += f"; {localized_phrase(event)}"
            evidence += localized_evidence(event)
        out.append(Finding(
            symptom="nonfinite_grad", severity=sev, confidence=1.0, onset_step=first,
            end_step=end, rank=g.rank, metric="grad_norm", summary=summary,
            evidence=tuple(evidence)))
    return out
