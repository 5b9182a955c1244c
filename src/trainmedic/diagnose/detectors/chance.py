"""Loss levels that say what a classifier is doing, whatever the curve's shape.

Cross-entropy over k classes has landmarks fixed by arithmetic, not by the run:
- ln k, the loss of predicting uniformly (an untrained or label-blind model);
- ln(1 + (k - 1)/e), the lowest loss a model can reach when a softmax is applied twice (the
  head ends in a softmax and ``F.cross_entropy``/``CrossEntropyLoss`` applies log-softmax on
  top: the "logits" are probabilities in [0, 1], so the best the second softmax can give the
  right class is e / (e + k - 1)).

A level near a landmark is evidence only with a second, independent fact, because ln k is
dense (ln 8 and ln 9 are 0.12 apart): the curve must also never cross the landmark (a floor
cannot be crossed; a healthy model passes through ln k on its way down). A rule on "training
and validation both at the same ln k" was tried and dropped: a healthy character-level
fine-tune sat at ln 5 on both (a converged model's two curves are close, not independent).
Pure numbers in, small dataclasses out; the detectors in loss_progress.py turn them into
findings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding
from trainmedic.diagnose.stats import blocks, diff_sigma, median, theil_sen_z
from trainmedic.diagnose.trace import Trace, fmt
from trainmedic.run.series import Run
from trainmedic.run.vocabulary import GAN_DISC_HINTS, GAN_GEN_HINTS, is_top1_accuracy

__all__ = ["ChanceEvent", "chance_finding", "never_beats_chance", "collapsed_to_chance",
           "collapsed_to_mean",
           "double_softmax_floor", "accuracy_at_chance", "accuracy_learning", "pinned_at_chance",
           "near_chance_start", "start_classes", "START_TOL", "FLOOR_TOL"]

#: A from-scratch classifier's first loss is within this share of ln k (small random logits).
START_TOL = 0.015
#: ... and a model that never beats chance cannot get below ln k by more than this share ...
BELOW_TOL = 0.01
#: ... while its training loss fell by less than this share (it is not learning either).
TRAIN_FALL_MAX = 0.10
#: A plateau at a double-softmax floor is at most this share below ln(1 + (k-1)/e) ...
FLOOR_TOL = 0.004
#: ... and at most this share above it: the floor is reached only as the first softmax's
#: outputs saturate to one-hot, which the optimizer approaches slowly, so a plateau sits
#: just above it (measured: 0.5-1.8% above on the trained double-softmax runs).
FLOOR_ABOVE_TOL = 0.02
#: Class counts past MAX_START_K that a short pinned log is matched to: CIFAR-100 and
#: ImageNet-1k (a classifier stuck at ln 1000 = 6.9078 is the classic "loss stuck at 6.9").
DATASET_CLASSES = (100, 1000)
#: Largest class count considered.
MAX_K = 1000
#: Largest class count read from a run's first loss (the first losses are noisy).
MAX_START_K = 30
#: Largest class count matched from a level alone (a run that fell to ln k from far above).
MAX_FLOOR_K = 10
#: A collapse to chance: the late training and validation medians within this share of ln k ...
COLLAPSE_TOL = 0.005
#: ... and this share of the late training points within 2% of it ...
COLLAPSE_TIGHT_SHARE = 0.9
#: ... after the training loss had been at least this share below ln k (it had learned).
COLLAPSE_LEARNED = 0.05
#: Without a validation loss, this many late training values spanning at most this share of
#: ln k (batch noise all but gone) stand in for it.
COLLAPSE_QUIET_POINTS = 7
COLLAPSE_QUIET_SPREAD = 0.01


@dataclass(frozen=True)
class ChanceEvent:
    """A curve that never got below a landmark: ``kind`` is ``chance`` or ``double_softmax``."""

    kind: str
    metric: str
    k: int
    landmark: float
    level: float
    """Median of the curve over its second half (or the plateau)."""
    lowest: float
    """Lowest block median of the whole curve."""
    onset_step: int


def start_classes(tr: Trace) -> int | None:
    """k when the first loss (or the median of the first 3) is within 1.5% of ln k,
    2 <= k <= 1000: a classifier trained from scratch starts at chance."""
    if len(tr) < 3:
        return None
    # The first point alone (a per-epoch log's first row already averages a falling epoch)
    # or the median of the first three (a noisy per-step log).
    for first in (float(tr.values[0]), median(tr.values[:3])):
        if not math.isfinite(first) or not math.log(2) * (1 - START_TOL) <= first < 7.0:
            continue
        k = max(2, round(math.exp(first)))
        if k > MAX_START_K:
            continue
        # The tolerance is capped at a quarter of the gap to the next ln k: past ~10 classes
        # 1.5% of ln k spans several k, and any start would "match" one.
        gap = min(math.log(k + 1) - math.log(k), math.log(k) - math.log(max(1, k - 1)))
        if abs(first - math.log(k)) <= min(START_TOL * math.log(k), 0.25 * gap):
            return k
    return None


def _lowest(tr: Trace) -> tuple[float, float]:
    """(lowest block median, block noise sigma) of a trace."""
    bl = blocks(tr.steps, tr.values, max_blocks=min(50, max(3, len(tr) // 3)))
    return float(bl.median.min()), diff_sigma(bl.median) if len(bl.median) > 2 else 0.0


def never_beats_chance(run: Run, train: Trace) -> ChanceEvent | None:
    """The run never beat chance: the training loss started within 1.5% of ln k (a
    from-scratch classifier) and fell < 10% over the run, and the validation loss (>= 5
    evaluations; else the training loss) never had a block median 1% below ln k. Or, from a
    start above chance (a bad init), the training loss's second half sits within 0.3% of ln k
    and never went 1% below it. A healthy classifier leaves ln k far behind in its first
    epochs; a fine-tune that starts near some ln k by coincidence falls > 10% or goes below."""
    k = start_classes(train)
    val = Trace.of(run, "val_loss", train.rank) or Trace.of(run, "val_loss", None)
    if val is not None and len(val) < 5:
        val = None
    if k is not None:
        q = max(2, len(train) // 10)
        head, tail = median(train.values[:q]), median(train.values[-q:])
        if not head > 0 or (head - tail) / head >= TRAIN_FALL_MAX:
            return None
        judged = val if val is not None else train
        ln_k = math.log(k)
        level = median(judged.values[len(judged) // 2:])
        lowest, _ = _lowest(judged)
        if lowest < ln_k * (1 - BELOW_TOL) or abs(level - ln_k) > 0.03 * ln_k:
            return None  # it beat chance, or it left ln k upwards (a divergence, not chance)
        return ChanceEvent(kind="chance", metric=judged.metric, k=k, landmark=ln_k, level=level,
                           lowest=lowest, onset_step=int(train.steps[0]))
    # A start above chance (a bad init, an overflow) that fell to ln k and stayed there: the
    # second half within 0.3% of ln k, and neither curve ever 1% below it.
    if len(train) < 10:
        return None
    level = median(train.values[len(train) // 2:])
    if not 0.6 < level < math.log(MAX_K):
        return None
    kk = max(2, round(math.exp(level)))
    ln_k = math.log(kk)
    # Only few classes (ln k sparse enough that a 0.3% match is not a coincidence), and only
    # from a start far above chance (an overflow, a bad init), which is what this path is for.
    if kk > MAX_FLOOR_K or abs(level - ln_k) > 0.003 * ln_k or \
            not float(train.values[0]) >= 2.0 * ln_k:
        return None
    for tr in (train, val):
        if tr is not None and _lowest(tr)[0] < ln_k * (1 - BELOW_TOL):
            return None
    return ChanceEvent(kind="chance", metric="loss", k=kk, landmark=ln_k, level=level,
                       lowest=_lowest(train)[0], onset_step=int(train.steps[0]))


def collapsed_to_chance(run: Run, train: Trace) -> ChanceEvent | None:
    """The model learned, then fell back to predicting uniformly: the training loss got >= 5%
    below ln k, and then the medians of its last quarter and of the last third of the
    validation loss (>= 4 evaluations) both sit within 0.5% of the same ln k (k <= 30), with
    >= 90% of those late training points within 2% of it. Without a validation loss, >= 7
    late training points spanning <= 1% of ln k (the batch noise all but gone) stand in for
    the second curve.

    Two independent curves at one landmark, plus the landmark's own signature: a model that
    predicts uniformly has almost no batch-to-batch noise (every sample's loss is ln k), which
    a model that still knows something does not have. Weight decay that shrinks every weight
    to zero, units that all died, an lr that wiped the net do this; the rise back to ln k is
    the collapse, not a divergence (a divergence climbs past chance, to where the model is
    confidently wrong)."""
    n = len(train)
    if n < 12:
        return None
    late = train.values[-max(5, n // 4):]
    level = median(late)
    if not math.isfinite(level) or not 0.6 < level < math.log(MAX_START_K + 0.5):
        return None
    k = max(2, round(math.exp(level)))
    ln_k = math.log(k)
    if abs(level - ln_k) > COLLAPSE_TOL * ln_k or \
            float(np.mean(np.abs(late - ln_k) <= 0.02 * ln_k)) < COLLAPSE_TIGHT_SHARE:
        return None
    val = Trace.of(run, "val_loss", train.rank) or Trace.of(run, "val_loss", None)
    if val is not None and len(val) >= 4:
        if abs(median(val.values[-max(3, len(val) // 3):]) - ln_k) > COLLAPSE_TOL * ln_k:
            return None
    elif len(late) < COLLAPSE_QUIET_POINTS or \
            float(np.max(late) - np.min(late)) > COLLAPSE_QUIET_SPREAD * ln_k:
        # No validation curve to agree: the late training values must then be all but
        # noiseless, a uniform predictor's signature (every sample's loss is ln k: no batch
        # noise), which a model that still knows something does not have
        return None
    bl = blocks(train.steps, train.values, max_blocks=min(50, max(3, len(train) // 3)))
    lowest = float(bl.median.min())
    if lowest > ln_k * (1 - COLLAPSE_LEARNED):
        return None
    # Onset: the first block from which every block median stays within 1% of ln k.
    off = np.abs(bl.median - ln_k) > 0.01 * ln_k
    start = int(np.flatnonzero(off)[-1]) + 1 if off.any() else 0
    onset = int(bl.first_step[min(start, len(bl.median) - 1)])
    return ChanceEvent(kind="collapse", metric="loss", k=k, landmark=ln_k, level=level,
                       lowest=lowest, onset_step=onset)


#: The mean-squared error of a model that outputs 0.5 for every input, on 0/1 targets: a
#: sigmoid regressor that gave up on the inputs. Every sample's loss is then exactly 0.25,
#: so the batch loss has no noise at all (an output that follows the targets' mean over a
#: batch varies with each batch's mix), which is the signature checked with the level.
MEAN_PREDICTOR_MSE = 0.25
#: The late level within this share of it, and its points spanning at most MEAN_QUIET_SPREAD.
MEAN_TOL = 0.002
MEAN_QUIET_SPREAD = 0.01


def collapsed_to_mean(run: Run, train: Trace) -> ChanceEvent | None:
    """A loss that settled at 0.25 (to 0.2%), the MSE of predicting 0.5 on 0/1 targets, with
    no batch noise (the last quarter, >= 7 points, spans <= 1% of it) and never below it (no
    block median 1% under): the model outputs the same 0.5 whatever the input. A healthy
    regressor at a loss of 0.25 by coincidence still has batch-to-batch noise."""
    n = len(train)
    late = train.values[-max(7, n // 4):]
    if n < 12 or late.size < 7 or _per_epoch(run, train):
        return None  # (an epoch's mean is quiet to under 1% whatever the model does)
    level = median(late)
    if abs(level - MEAN_PREDICTOR_MSE) > MEAN_TOL * MEAN_PREDICTOR_MSE or \
            float(late.max() - late.min()) > MEAN_QUIET_SPREAD * MEAN_PREDICTOR_MSE:
        return None
    lowest, _ = _lowest(train)
    if lowest < MEAN_PREDICTOR_MSE * (1 - BELOW_TOL):
        return None
    off = np.abs(train.values - MEAN_PREDICTOR_MSE) > 0.01 * MEAN_PREDICTOR_MSE
    start = int(np.flatnonzero(off)[-1]) + 1 if off.any() else 0
    return ChanceEvent(kind="mean", metric="loss", k=2, landmark=MEAN_PREDICTOR_MSE,
                       level=level, lowest=lowest,
                       onset_step=int(train.steps[min(start, n - 1)]))


def _per_epoch(run: Run, tr: Trace) -> bool:
    """Whether ``tr`` is logged once per epoch: the importer took the epoch for the step, or
    an ``epoch`` series equals the steps."""
    if any(n.kind == "step_is_epoch" for n in run.notes):
        return True
    ep = Trace.of(run, "epoch", tr.rank) or Trace.of(run, "epoch", None)
    if ep is None or len(ep) < 2:
        return False
    common, i, j = np.intersect1d(ep.steps, tr.steps, return_indices=True)
    return common.size >= 2 and bool(np.all(ep.values[i] == common))


def _floor_classes(tr: Trace, level: float) -> int | None:
    """k (<= 10) whose double-softmax floor is nearest ``level``, for a log whose first point
    comes after the loss already left ln k (logged every N steps, or a per-epoch mean): the
    first logged loss must lie between that floor and ln k, where such a run can only be."""
    k = min(range(2, MAX_FLOOR_K + 1), key=lambda c: abs(math.log(1 + (c - 1) / math.e) - level))
    first = float(tr.values[0])
    floor = math.log(1 + (k - 1) / math.e)
    if not floor < first <= math.log(k) * (1 + START_TOL):
        return None
    return k


def double_softmax_floor(tr: Trace, onset: int) -> ChanceEvent | None:
    """A plateau at ln(1 + (k-1)/e) (from 0.4% below to 2% above, over the plateau and over its
    last quarter) that the loss never crossed
    (lowest block median not below it by more than 3 block sigmas), in a run whose first
    losses sat at ln k for the same k (or, k <= 10, whose first logged loss lies between the
    floor and ln k): the loss a softmax applied twice cannot get under."""
    i = int(np.searchsorted(tr.steps, onset))
    if len(tr) - i < 5:
        return None
    level = median(tr.values[i:])
    if not math.isfinite(level) or not 0 < level < 7.0:
        return None
    # The class count comes from the start (a from-scratch classifier starts at ln k, through
    # two softmaxes as through one); the plateau must then sit at that k's floor.
    k = start_classes(tr) or _floor_classes(tr, level)
    if k is None:
        return None
    floor = math.log(1 + (k - 1) / math.e)
    tail = median(tr.values[-max(3, (len(tr) - i) // 4):])
    if not all(-FLOOR_TOL * floor <= x - floor <= FLOOR_ABOVE_TOL * floor for x in (level, tail)):
        return None  # (the last quarter too: a floor is where the run ends, not a pass-by)
    lowest, sig = _lowest(tr)
    if lowest < floor - max(3 * sig, FLOOR_TOL * floor):
        return None
    return ChanceEvent(kind="double_softmax", metric=tr.metric, k=k, landmark=floor,
                       level=level, lowest=lowest, onset_step=onset)



#: A logged accuracy at chance: the median of its second half within this share of 1/k ...
ACC_CHANCE_TOL = 0.2
#: ... and no point of its second half more than this share above 1/k.
ACC_CHANCE_MAX = 0.35
#: Largest class count read from an accuracy (1/k is dense past it: 1/30 vs 1/31) ...
MAX_ACC_K = 20
#: ... whose second-half median must then be within this share of 1/k.
ACC_K_TOL = 0.1
#: The loss's second half sits between ln k and this many times it (a model at chance that
#: predicts one class confidently is above ln k; far above, the loss is not that k's CE).
ACC_LOSS_MAX = 1.5
#: Name fragments of a GAN: a discriminator at 50% accuracy is at equilibrium, not broken.
_GAN_HINTS = GAN_GEN_HINTS + GAN_DISC_HINTS


def _accuracies(run: Run, rank: int | None) -> list[tuple[str, np.ndarray]]:
    """(name, values as fractions) of every top-1 accuracy logged on ``rank`` with >= 5
    finite points in [0, 1] (or in [0, 100]: a percentage)."""
    out = []
    for m in run.metrics():
        if not is_top1_accuracy(m):
            continue  # (top-5: its chance is 5/k, not 1/k)
        t = Trace.of(run, m, rank) or Trace.of(run, m, None)
        if t is None or len(t) < 5:
            continue
        v = t.values / 100.0 if float(t.values.max()) > 1.0 else t.values
        if float(v.min()) >= 0.0 and float(v.max()) <= 1.0:
            out.append((m, v))
    return out


def accuracy_at_chance(run: Run, train: Trace) -> ChanceEvent | None:
    """Every logged top-1 accuracy sat at chance, 1/k, for the whole second half of the run:
    its median within 20% of 1/k and no point more than 35% above it, k from the loss's start
    (within 1.5% of ln k) or, k <= 20, from the accuracy itself (its median within 10% of
    1/k), not climbing to it from well below (a point of its first quarter under 0.8/k); the loss's
    second half between ln k and 1.5 ln k. A second, independent fact
    is required: a second accuracy curve at the same 1/k (training and validation), or a loss
    that never got below ln k. A model at chance accuracy predicts one class or guesses,
    whatever its loss does (an lr so high the net blew up and never recovered: the loss comes
    down from 60 to 1.6 while the accuracy stays at 0.25 over 4 classes). Not for a GAN (a
    discriminator at 50% is at equilibrium)."""
    names = " ".join(m.lower() for m in run.metrics())
    if any(h in names for h in _GAN_HINTS):
        return None
    accs = _accuracies(run, train.rank)
    if not accs:
        return None
    level = median(accs[0][1][len(accs[0][1]) // 2:])
    from_acc = round(1.0 / level) if level > 0 else 0
    if not 2 <= from_acc <= MAX_ACC_K or abs(level * from_acc - 1.0) > ACC_K_TOL:
        from_acc = 0
    for k in dict.fromkeys(c for c in (start_classes(train), from_acc) if c):
        ev = _at_chance(train, accs, k)
        if ev is not None:
            return ev
    return None


def _at_chance(train: Trace, accs: list[tuple[str, np.ndarray]], k: int) -> ChanceEvent | None:
    chance = 1.0 / k
    for _, v in accs:
        half = v[len(v) // 2:]
        if abs(median(half) - chance) > ACC_CHANCE_TOL * chance or \
                float(half.max()) > chance * (1 + ACC_CHANCE_MAX):
            return None
        if float(v[:max(1, len(v) // 4)].min()) < chance * (1 - ACC_CHANCE_TOL):
            # it climbed to 1/k from well below: a k-way guess cannot start under 1/k, so
            # there are more classes and the model is learning (34% -> 54% over 4 classes)
            return None
    ln_k = math.log(k)
    lowest = _lowest(train)[0]
    late = median(train.values[len(train) // 2:])
    if not ln_k * (1 - BELOW_TOL) <= late <= ACC_LOSS_MAX * ln_k:
        return None  # not the cross-entropy of a k-class model at chance
    if len(accs) < 2 and lowest < ln_k * (1 - BELOW_TOL):
        return None
    return ChanceEvent(kind="accuracy", metric=accs[0][0], k=k, landmark=chance,
                       level=median(accs[0][1][len(accs[0][1]) // 2:]), lowest=lowest,
                       onset_step=int(train.steps[0]))


#: A short log pinned at chance: its last >= 3 training losses each within this share of
#: ln k (k <= 30) ...
PINNED_TOL = 0.001
#: ... and the last validation loss, when logged, within this share (often 3 decimals).
PINNED_VAL_TOL = 0.005
#: The share is this many times wider when the last >= 5 losses are identical.
PINNED_FROZEN_WIDER = 2.0


def pinned_at_chance(run: Run, train: Trace) -> ChanceEvent | None:
    """For a log too short for the level rules (< 8 points, e.g. 4 epochs): the last three
    or more training losses all within 0.1% of the same ln k (k <= 30, or 100 or 1000; 0.2%
    when the last >= 5 are identical), and
    the last validation loss, if any, within 0.5% of it. A loss that does not move by 0.1% from one
    epoch to the next while sitting exactly at a chance level is a model that predicts
    uniformly (labels the model cannot see, an lr that killed it); a learning model's losses
    move more than that between epochs. The onset is the first point of that stretch."""
    v = train.values
    if not 3 <= len(train) < 8 or any(h in m.lower() for m in run.metrics() for h in _GAN_HINTS):
        return None  # (a discriminator's BCE at equilibrium is 2 ln 2 = ln 4)
    level = median(v[-3:])
    # Five or more identical last values (a step loss frozen to the printed digits) are a
    # model whose output no longer moves: there a near-uniform one (a learned class prior a
    # hair under ln k: "train_loss=4.600" at ln 100 = 4.605) counts as at chance.
    tol = PINNED_TOL * (PINNED_FROZEN_WIDER if len(v) >= 5 and np.ptp(v[-5:]) == 0 else 1.0)
    k = round(math.exp(level)) if 0.6 < level < math.log(MAX_START_K + 0.5) else next(
        (c for c in DATASET_CLASSES if abs(level - math.log(c)) <= tol * math.log(c)), 0)
    if not 2 <= k <= MAX_START_K and k not in DATASET_CLASSES:
        return None
    ln_k = math.log(k)
    near = np.abs(v - ln_k) <= tol * ln_k
    start = len(v)
    while start > 0 and near[start - 1]:
        start -= 1
    if len(v) - start < 3:
        return None
    val = Trace.of(run, "val_loss", train.rank) or Trace.of(run, "val_loss", None)
    if val is not None and len(val) and \
            abs(float(val.values[-1]) - ln_k) > PINNED_VAL_TOL * ln_k:
        return None
    return ChanceEvent(kind="pinned", metric="loss", k=k, landmark=ln_k,
                       level=median(v[start:]), lowest=float(v.min()),
                       onset_step=int(train.steps[start]))


def near_chance_start(tr: Trace) -> bool:
    """The run started at chance (ln k, see ``start_classes``) and its batch noise is <= 1% of
    ln k: a model still near the uniform predictor, whose every sample's loss is ~ln k (a
    language model whose loss happens to start near some ln k is far noisier)."""
    k = start_classes(tr)
    return k is not None and diff_sigma(tr.values) <= 0.01 * math.log(k)


def accuracy_learning(run: Run, rank: int | None, k: int | None) -> str:
    """Why a logged top-1 accuracy says the model learns ("" when none does): it rose by >= 10%
    of its level on a significant robust trend (>= 3 standard errors), or, for a chance level
    ln k the loss seems to sit at, its median is >= 3x 1/k (a 1000-class model at 5% top-1
    is far from chance, whatever its loss level matches)."""
    for m, v in _accuracies(run, rank):
        lvl = median(v)
        if k is not None and lvl >= 3.0 / k:
            return f"{m} sits at {lvl:.3g}, {lvl * k:.3g}x chance (1/{k}): it learns"
        if v.size >= 5:
            slope, z = theil_sen_z(v)
            rise = slope * (v.size - 1)
            if z >= 3.0 and lvl > 0 and rise >= 0.1 * lvl:
                return f"{m} rose {v[0]:.3g} -> {v[-1]:.3g} over the same steps: it learns"
    return ""


def chance_finding(ev: ChanceEvent, tr: Trace) -> Finding:
    """The flat_loss finding of a chance event, by its kind."""
    build = {"chance": _chance_finding, "accuracy": _accuracy_finding,
             "pinned": _pinned_finding, "mean": _mean_finding}.get(ev.kind, _collapse_finding)
    return build(ev, tr)


def _mean_finding(ev: ChanceEvent, tr: Trace) -> Finding:
    """A regressor on 0/1 targets that outputs 0.5 for everything."""
    return Finding(
        symptom="flat_loss", severity="error", confidence=0.75, onset_step=int(tr.steps[0]),
        end_step=int(tr.steps[-1]), rank=tr.rank, metric="loss",
        summary=(f"the loss settled at {fmt(ev.level)}, the mean-squared error of predicting "
                 f"0.5 for every input on 0/1 targets (within 1% of it from step "
                 f"{ev.onset_step}), without any batch-to-batch noise, and never went below "
                 f"it: the model ignores its inputs (a saturated or dead output layer, inputs "
                 f"that do not reach it, or targets it cannot see)"),
        evidence=(Evidence("loss", int(tr.steps[-1]), ev.level, ev.landmark,
                           note="median of the last quarter vs 0.25; those points span "
                                f"<= {100 * MEAN_QUIET_SPREAD:.0f}% of it (no batch noise)"),
                  Evidence("loss", None, ev.lowest, ev.landmark,
                           note="lowest block median: never below the landmark")))


def _collapse_finding(ev: ChanceEvent, tr: Trace) -> Finding:
    """A classifier that learned and then fell back to predicting uniformly."""
    return Finding(
        symptom="flat_loss", severity="error", confidence=0.8, onset_step=ev.onset_step,
        end_step=int(tr.steps[-1]), rank=tr.rank, metric="loss",
        summary=(f"the model fell back to chance: the loss got down to {fmt(ev.lowest)}, then "
                 f"returned to ln({ev.k}) = {ev.landmark:.4f} from step {ev.onset_step} and "
                 f"stayed there, on training and validation loss alike: it predicts uniformly "
                 f"(weights decayed to zero, every unit dead, or an update that wiped the "
                 f"net)"),
        evidence=(Evidence("loss", ev.onset_step, ev.level, ev.landmark,
                           note=f"median of the last quarter vs ln({ev.k}), the loss of "
                                f"predicting uniformly over {ev.k} classes; >= 90% of those "
                                f"points within 2% of it (almost no batch noise)"),
                  Evidence("val_loss", None, None, ev.landmark,
                           note="median of the last third of the evaluations: at the same "
                                "ln k"),
                  Evidence("loss", None, ev.lowest, ev.landmark,
                           note="lowest block median: the model had learned before")))


def _pinned_finding(ev: ChanceEvent, tr: Trace) -> Finding:
    """A short log whose loss sits still at exactly ln k: a uniform predictor."""
    n = int(np.sum(tr.steps >= ev.onset_step))
    share = max(abs(float(v) - ev.landmark) for v in tr.values[-n:]) / ev.landmark
    within = f"{100 * max(share, 1e-4):.2g}%"
    return Finding(
        symptom="flat_loss", severity="error", confidence=0.7, onset_step=ev.onset_step,
        end_step=int(tr.steps[-1]), rank=tr.rank, metric="loss",
        summary=(f"the loss sat at ln({ev.k}) = {ev.landmark:.4f}, to {within}, at its last {n} "
                 f"logged points (from step {ev.onset_step}): the loss of predicting uniformly "
                 f"over {ev.k} classes, and it does not move: the model is not learning "
                 f"(labels it cannot see, an lr that killed it, or a broken loss)"),
        evidence=(Evidence("loss", int(tr.steps[-1]), ev.level, ev.landmark,
                           note=f"median of the last {n} points, each within {within} of "
                                f"ln({ev.k}); the last validation loss, if logged, within "
                                f"0.5%"),))


def _accuracy_finding(ev: ChanceEvent, tr: Trace) -> Finding:
    """A classifier whose logged accuracy never left chance, whatever its loss did."""
    return Finding(
        symptom="flat_loss", severity="error", confidence=0.75, onset_step=ev.onset_step,
        end_step=int(tr.steps[-1]), rank=tr.rank, metric=ev.metric,
        summary=(f"{ev.metric} stayed at chance, 1/{ev.k} = {ev.landmark:.3g} (second-half "
                 f"median {ev.level:.3g}), for the whole run: the model predicts one class or "
                 f"guesses, although the loss went {fmt(float(tr.values[0]))} -> "
                 f"{fmt(float(tr.values[-1]))} (an lr that blew the net up, labels detached "
                 f"from the inputs, or a broken loss)"),
        evidence=(Evidence(ev.metric, int(tr.steps[-1]), ev.level, ev.landmark,
                           note=f"median of the second half vs 1/{ev.k}; every logged top-1 "
                                f"accuracy is within 20% of it, none 35% above"),
                  Evidence("loss", None, ev.lowest, math.log(ev.k),
                           note=f"lowest block median of the loss vs ln({ev.k})")))


def _chance_finding(ev: ChanceEvent, tr: Trace) -> Finding:
    """A classifier that never beat chance: flat in what matters, whatever the curve did."""
    where = "the validation loss" if ev.metric == "val_loss" else "the loss"
    return Finding(
        symptom="flat_loss", severity="error", confidence=0.8, onset_step=ev.onset_step,
        end_step=int(tr.steps[-1]), rank=tr.rank, metric=ev.metric,
        summary=(f"{where} never got below chance level ln({ev.k}) = {ev.landmark:.4f} (lowest "
                 f"block {fmt(ev.lowest)}, second half {fmt(ev.level)}): the model never "
                 f"learned anything that generalizes (labels shuffled or detached from the "
                 f"inputs, an lr that cannot train, or a broken loss)"),
        evidence=(Evidence(ev.metric, ev.onset_step, ev.level, ev.landmark,
                           note=f"median of the second half vs ln({ev.k}), the loss of "
                                f"predicting uniformly over {ev.k} classes"),
                  Evidence(ev.metric, None, ev.lowest, ev.landmark,
                           note="lowest block median of the whole curve: never below chance"),
                  Evidence("loss", int(tr.steps[0]), float(np.median(tr.values[:3])),
                           ev.landmark, note="first training losses: a from-scratch "
                                             "classifier starts at ln k")))
