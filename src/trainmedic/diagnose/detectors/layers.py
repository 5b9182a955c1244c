"""Detectors on per-layer health stats (``layer/<module path>/<stat>``, recorded every N steps
by ``trainmedic.live.layer_health.LayerHealth`` or logged by the user), and the helpers that
read those series in module order.

Module order is not in the metric names. It comes from the run's meta ``layer_order`` (the
watcher stores the order in which the modules' forwards ran); without it, the order in which
the series first appear in the run (the run store keeps first-logged order, which is module
order when a step's stats are logged as one dict, as LayerHealth's are).

``dead_units``: a ReLU unit whose output is <= 0 for every input passes no gradient to its
weights and never recovers on its own (Lu et al. 2019, "Dying ReLU and Initialization",
arXiv:1903.06733). Stanford's CS231n notes report that "as much as 40% of your network can be
dead" with a too-high learning rate; at He initialization with zero bias a unit is active on
about half the inputs, so a healthy layer measured on >= 16 values per unit has ~0 dead.
Thresholds: a layer's recent level (median of the last third of its measurements, >= 3 of
them) >= 50% is a warning (half the layer's capacity gone), >= 99% an error (the whole layer
outputs 0: nothing below it gets a gradient through it); >= 25% and >= 10 points above its
early level is info (units are dying as training goes).

``saturated_activations``: tanh/sigmoid outputs at |tanh| > 0.99 (sigmoid < 0.01 or > 0.99)
pass < 2% of the gradient (Glorot & Bengio 2010 saw sigmoid top layers saturate at 0 early
in training with the then-standard init; LeCun et al. 1998, "Efficient BackProp", sec. 4.4,
keep tanh units in their linear range by init and input scaling). At Xavier init with
normalized inputs < 1% of outputs are there. Recent level >= 50%: warning; >= 25%: info.
The model's last module (a sigmoid/tanh output that a converged classifier or a bounded
regressor drives to its limits on purpose) is reported at info only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainmedic.diagnose.finding import Evidence, Finding, Severity
from trainmedic.diagnose.registry import NotRun, register_detector
from trainmedic.diagnose.stats import median
from trainmedic.diagnose.trace import Trace
from trainmedic.run.series import Run

__all__ = [
    "LAYER_PREFIX",
    "LayerTrace",
    "layer_traces",
    "layer_ranks",
    "early_level",
    "layer_modules",
    "layer_types",
    "recent_level",
    "sustained_onset",
    "DEAD_INFO_FRAC",
    "DEAD_WARN_FRAC",
    "DEAD_ERROR_FRAC",
    "DEAD_RISE",
    "SATURATED_INFO_FRAC",
    "SATURATED_WARN_FRAC",
    "MIN_LAYER_POINTS",
]

LAYER_PREFIX = "layer/"
#: A layer needs this many measurements before its level is judged.
MIN_LAYER_POINTS = 3
#: dead_frac levels (fractions of a layer's units): info when rising to it, warning, error.
DEAD_INFO_FRAC = 0.25
DEAD_WARN_FRAC = 0.5
DEAD_ERROR_FRAC = 0.99
#: ... and "rising": the recent level at least this far above the early level.
DEAD_RISE = 0.10
#: saturated_frac levels (fractions of a layer's outputs): info, warning.
SATURATED_INFO_FRAC = 0.25
SATURATED_WARN_FRAC = 0.5
#: At most this many layers are named in a summary (all flagged ones are counted).
_NAMED_LAYERS = 5


@dataclass(frozen=True)
class LayerTrace:
    """One per-layer stat of one module on one rank."""

    module: str
    trace: Trace

    @property
    def metric(self) -> str:
        return self.trace.metric


def _split(metric: str, stat: str) -> str | None:
    suffix = "/" + stat
    if metric.startswith(LAYER_PREFIX) and metric.endswith(suffix):
        module = metric[len(LAYER_PREFIX):-len(suffix)]
        return module or None
    return None


def layer_modules(run: Run, stat: str) -> list[str]:
    """The modules that have ``layer/<module>/<stat>`` on some rank, in module order:
    ``run.meta["layer_order"]`` first, then any others in the order their series appear."""
    seen: dict[str, None] = {}
    for metric, _ in run.series:
        m = _split(metric, stat)
        if m is not None:
            seen.setdefault(m, None)
    order = run.meta.get("layer_order")
    if not isinstance(order, list):
        return list(seen)
    ranked = [m for m in order if isinstance(m, str) and m in seen]
    return ranked + [m for m in seen if m not in set(ranked)]


def layer_types(run: Run) -> dict[str, str]:
    """``run.meta["layer_types"]`` (module path -> class name) when the watcher stored it."""
    types = run.meta.get("layer_types")
    if not isinstance(types, dict):
        return {}
    return {str(k): str(v) for k, v in types.items()}


def layer_traces(run: Run, stat: str, rank: int | None, *,
                 min_points: int = MIN_LAYER_POINTS) -> list[LayerTrace]:
    """``layer/<m>/<stat>`` on ``rank`` for every module with >= ``min_points`` finite
    points, in module order."""
    out = []
    for m in layer_modules(run, stat):
        t = Trace.of(run, f"{LAYER_PREFIX}{m}/{stat}", rank)
        if t is not None and len(t) >= min_points:
            out.append(LayerTrace(m, t))
    return out


def layer_ranks(run: Run, stat: str) -> list[int | None]:
    """The ranks on which some ``layer/<m>/<stat>`` is logged."""
    return [r for r in run.ranks()
            if any(_split(metric, stat) is not None for metric, rr in run.series if rr == r)]


def recent_level(values: np.ndarray) -> tuple[float, int]:
    """Median of the last third of the points (at least 3) and how many that is."""
    k = min(len(values), max(MIN_LAYER_POINTS, math.ceil(len(values) / 3)))
    return median(values[-k:]), k


def early_level(values: np.ndarray) -> float:
    """Median of the first fifth of the points (at least 1)."""
    return median(values[:max(1, len(values) // 5)])


def sustained_onset(steps: np.ndarray, values: np.ndarray, threshold: float) -> int:
    """The first step from which the series sits at or above ``threshold``: the earliest
    point at the threshold after which at least 75% of the points are too (else the point
    at the threshold with the largest such share, the earliest of equals)."""
    above = values >= threshold
    if not above.any():
        return int(steps[-1])
    suffix = np.cumsum(above[::-1])[::-1]
    frac = np.where(above, suffix / np.arange(len(values), 0, -1), -1.0)
    cand = np.flatnonzero(frac >= 0.75)
    i = int(cand[0]) if cand.size else int(np.argmax(frac))
    return int(steps[i])


def _not_logged(run: Run, stat: str, modules_hint: str) -> NotRun:
    if any(_split(m, "act_mean") is not None for m, _ in run.series):
        return NotRun(f"per-layer stats are logged but no {modules_hint} module is watched "
                      f"(functional activations such as F.relu cannot be hooked)")
    return NotRun("log per-layer health (trainmedic.watch(..., layer_every=N)) to enable "
                  "this check", missing=(f"layer/<module>/{stat}",))


def _layer_list(flagged: list[tuple[str, float]]) -> str:
    shown = ", ".join(f"'{m}' ({100 * v:.0f}%)" for m, v in flagged[:_NAMED_LAYERS])
    more = len(flagged) - _NAMED_LAYERS
    return shown + (f" and {more} more" if more > 0 else "")


@register_detector("dead_units")
def detect_dead_units(run: Run) -> list[Finding] | NotRun:
    """Per ReLU/ReLU6 layer, the recent ``dead_frac`` level (median of the last third of its
    measurements, >= 3): >= 99% error, >= 50% warning, >= 25% and >= 10 points above its
    early level (first fifth) info. One finding per rank naming the layers."""
    ranks = layer_ranks(run, "dead_frac")
    if not ranks:
        return _not_logged(run, "dead_frac", "nn.ReLU/nn.ReLU6")
    out: list[Finding] = []
    ran = False
    for rank in ranks:
        hits: list[tuple[Severity, str, float, float, int, LayerTrace, int]] = []
        for lt in layer_traces(run, "dead_frac", rank):
            ran = True
            v = lt.trace.values
            late, k = recent_level(v)
            early = early_level(v)
            sev: Severity | None = None
            thr = DEAD_INFO_FRAC
            if late >= DEAD_ERROR_FRAC:
                sev, thr = "error", DEAD_ERROR_FRAC
            elif late >= DEAD_WARN_FRAC:
                sev, thr = "warning", DEAD_WARN_FRAC
            elif late >= DEAD_INFO_FRAC and late - early >= DEAD_RISE:
                sev = "info"
            if sev is None:
                continue
            onset = sustained_onset(lt.trace.steps, v, thr)
            hits.append((sev, lt.module, late, early, k, lt, onset))
        if not hits:
            continue
        out.append(_layers_finding("dead_units", rank, hits, what="of units dead",
                                   unit="units <= 0 on every input of the batch"))
    if not ran:
        return NotRun(f"needs >= {MIN_LAYER_POINTS} dead_frac measurements per layer")
    return out


@register_detector("saturated_activations")
def detect_saturated_activations(run: Run) -> list[Finding] | NotRun:
    """Per Tanh/Sigmoid layer, the recent ``saturated_frac`` level (median of the last third
    of its measurements, >= 3): >= 50% warning, >= 25% info; the model's last module (an
    output layer) at info only. One finding per rank naming the layers."""
    ranks = layer_ranks(run, "saturated_frac")
    if not ranks:
        return _not_logged(run, "saturated_frac", "nn.Tanh/nn.Sigmoid")
    order = run.meta.get("layer_order")
    last_module = order[-1] if isinstance(order, list) and order else None
    out: list[Finding] = []
    ran = False
    for rank in ranks:
        hits: list[tuple[Severity, str, float, float, int, LayerTrace, int]] = []
        for lt in layer_traces(run, "saturated_frac", rank):
            ran = True
            v = lt.trace.values
            late, k = recent_level(v)
            if late < SATURATED_INFO_FRAC:
                continue
            sev: Severity = "warning" if late >= SATURATED_WARN_FRAC else "info"
            if lt.module == last_module:
                sev = "info"
            thr = SATURATED_WARN_FRAC if late >= SATURATED_WARN_FRAC else SATURATED_INFO_FRAC
            onset = sustained_onset(lt.trace.steps, v, thr)
            hits.append((sev, lt.module, late, early_level(v), k, lt, onset))
        if not hits:
            continue
        f = _layers_finding("saturated_activations", rank, hits, what="of outputs saturated",
                            unit="|tanh| > 0.99 or sigmoid outside [0.01, 0.99]")
        if last_module is not None and any(h[1] == last_module for h in hits):
            f = _with_summary(f, f"; '{last_module}' is the model's last module: an output "
                                 f"layer saturates when it predicts confidently (info)")
        out.append(f)
    if not ran:
        return NotRun(f"needs >= {MIN_LAYER_POINTS} saturated_frac measurements per layer")
    return out


_SEV_RANK = {"info": 0, "warning": 1, "error": 2}


def _layers_finding(symptom: str, rank: int | None,
                    hits: list[tuple[Severity, str, float, float, int, LayerTrace, int]], *,
                    what: str, unit: str) -> Finding:
    hits.sort(key=lambda h: (-_SEV_RANK[h[0]], -h[2]))
    sev = hits[0][0]
    top = [h for h in hits if h[0] == sev]
    onset = min(h[6] for h in top)
    flagged = [(h[1], h[2]) for h in hits]
    first_seen = min(int(h[5].trace.steps[0]) for h in top)
    since = ("from the first measurement" if onset <= first_seen
             else f"from step {onset}")
    summary = (f"{len(hits)} layer(s) with a large share {what} ({unit}), {since}: "
               f"{_layer_list(flagged)}")
    ev = tuple(Evidence(h[5].metric, int(h[5].trace.steps[-1]), h[2], h[3],
                        note=f"median of the last {h[4]} measurements vs the first "
                             f"{max(1, len(h[5].trace) // 5)}")
               for h in hits[:_NAMED_LAYERS])
    conf = 0.9 if sev != "info" else 0.6
    return Finding(symptom=symptom, severity=sev, confidence=conf, onset_step=onset,
                   rank=rank, metric=hits[0][5].metric, summary=summary, evidence=ev)


def _with_summary(f: Finding, extra: str) -> Finding:
    from dataclasses import replace

    return replace(f, summary=f.summary + extra)
