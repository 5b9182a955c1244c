"""Triage without logs: the router's questions, answered by the user, routed to the router's own
causes and interventions (``rules.CAUSES``, ``interventions.INTERVENTIONS``), every cause
marked *not checked against data* and saying what to log to check it.

The answers pick the symptoms (what the loss does, whether steps are slow, whether memory
grows); each symptom brings its cause rules from the router's table, in the table's prior
order. The other answers (optimizer, lr, precision, clipping, warm-up, what changed, whether a
smaller lr helps) raise, lower or rule out a cause by the *name of the data check* the router
would run on it (``CauseRule.check``) or the interventions it suggests: the same identifiers
diagnose uses, so a cause text is never copied here. Nothing is measured: the ranking is a
guess from answers, and the report says so.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainmedic.diagnose.finding import Intervention
from trainmedic.diagnose.interventions import INTERVENTIONS
from trainmedic.diagnose.registry import SYMPTOMS
from trainmedic.diagnose.rules import CAUSES, CauseRule
from trainmedic.errors import ConfigError

__all__ = ["TriageAnswers", "TriageCause", "Triage", "triage", "LOSS_CHOICES", "SINCE_CHOICES",
           "PRECISION_CHOICES", "CHANGED_CHOICES", "HELPS_CHOICES", "OPTIMIZER_CHOICES",
           "STEPS_CHOICES", "MEMORY_CHOICES", "SCHEMA", "generic_intervention"]

SCHEMA = "trainmedic.triage/1"

LOSS_CHOICES = ("nan", "spikes", "diverges", "plateau", "flat", "oscillates", "slow", "ok")
SINCE_CHOICES = ("start", "after-N-steps", "after-change")
PRECISION_CHOICES = ("fp32", "bf16", "fp16")
CHANGED_CHOICES = ("data", "lr", "batch", "precision", "code", "hardware", "nothing")
HELPS_CHOICES = ("yes", "no", "untried")
OPTIMIZER_CHOICES = ("adamw", "adam", "sgd", "other")
STEPS_CHOICES = ("ok", "slow", "erratic", "slower-than-before")
MEMORY_CHOICES = ("ok", "grows")

#: What the loss does -> the symptom codes whose causes apply (DESIGN.md codes). "plateau from
#: the start" is a loss that never descended, i.e. flat_loss too (see ``_symptoms``); "slow"
#: (falls, but slowly) has the causes of a flat loss that still moves, and of a plateau.
_LOSS_SYMPTOMS: dict[str, tuple[str, ...]] = {
    "nan": ("nonfinite_loss",), "spikes": ("loss_spike", "exploding_gradients"),
    "diverges": ("divergence",), "plateau": ("plateau",), "flat": ("flat_loss",),
    "oscillates": ("oscillation",), "slow": ("flat_loss", "plateau"), "ok": (),
}
_STEPS_SYMPTOMS = {"slow": ("input_bound",), "erratic": ("step_time_outliers",),
                   "slower-than-before": ("throughput_regression", "input_bound"), "ok": ()}
_MEMORY_SYMPTOMS = {"grows": ("memory_growth",), "ok": ()}

#: Learning rates past which a value is "high" / at or below which it is "tiny", per optimizer
#: family. Adam(W): GPT-3's peak lrs run from 6e-4 (125M params) down to 6e-5 (175B) (Brown et
#: al. 2020, Table 2.1) and small models tolerate a few 1e-3; above 3e-3 is high for all but
#: toy models. SGD(+momentum): 0.1 is the ResNet base at batch 256 (Goyal et al. 2017), so >= 1
#: is high. "Tiny" mirrors the router's ``lr_tiny`` check (peak lr <= 1e-6) for Adam, and is a
#: decade lower than that relative to SGD's scale. Heuristics, said as such in the report.
_LR_HIGH = {"adam": 3e-3, "sgd": 1.0}
_LR_TINY = {"adam": 1e-6, "sgd": 1e-4}
#: A per-device micro-batch this small gives noisy gradients (a heuristic: the batch-noise
#: argument of McCandlish et al. 2018 depends on the task, so this only raises a cause).
_SMALL_BATCH = 8

DROP = "drop"


@dataclass(kw_only=True, frozen=True)
class TriageAnswers:
    """The answers to the router's questions; ``None`` means not answered."""

    loss: str | None = None
    """What the training loss does: one of ``LOSS_CHOICES``."""
    since: str | None = None
    """From when: ``start``, ``after-N-steps`` (``after-1200-steps`` names N) or
    ``after-change``."""
    optimizer: str | None = None
    """The optimizer family: one of ``OPTIMIZER_CHOICES``."""
    lr: float | None = None
    """The peak learning rate (>= 0)."""
    batch: int | None = None
    """Samples per micro-batch per device (>= 1)."""
    precision: str | None = None
    """fp32, bf16 or fp16 (autocast or pure)."""
    grad_clip: float | None = None
    """The gradient-norm clip (0: no clipping)."""
    warmup: int | None = None
    """Warm-up steps (0: none)."""
    changed: str | None = None
    """What changed before the problem started: one of ``CHANGED_CHOICES``."""
    smaller_lr_helps: str | None = None
    """Whether a smaller lr makes it go away: yes, no or untried."""
    steps: str | None = None
    """How the step time behaves: one of ``STEPS_CHOICES``."""
    memory: str | None = None
    """How memory behaves over steps: ok or grows."""

    def __post_init__(self) -> None:
        for name, choices in (("loss", LOSS_CHOICES), ("optimizer", OPTIMIZER_CHOICES),
                              ("precision", PRECISION_CHOICES), ("changed", CHANGED_CHOICES),
                              ("smaller_lr_helps", HELPS_CHOICES), ("steps", STEPS_CHOICES),
                              ("memory", MEMORY_CHOICES)):
            v = getattr(self, name)
            if v is not None and v not in choices:
                raise ConfigError(f"{name}: got {v!r}, expected one of {', '.join(choices)}")
        if self.since is not None and self.since not in SINCE_CHOICES \
                and since_step(self.since) is None:
            raise ConfigError(f"since: got {self.since!r}, expected start, after-change or "
                              "after-N-steps with N a number (after-1200-steps)")
        for name in ("lr", "grad_clip"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)
                                  or not math.isfinite(v) or v < 0):
                raise ConfigError(f"{name}: got {v!r}, expected a finite number >= 0")
        if self.batch is not None and (isinstance(self.batch, bool)
                                       or not isinstance(self.batch, int) or self.batch < 1):
            raise ConfigError(f"batch: got {self.batch!r}, expected an integer >= 1")
        if self.warmup is not None and (isinstance(self.warmup, bool)
                                        or not isinstance(self.warmup, int) or self.warmup < 0):
            raise ConfigError(f"warmup: got {self.warmup!r}, expected an integer >= 0 (steps)")

    def given(self) -> dict[str, Any]:
        """The answered fields, by name."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


def since_step(since: str | None) -> int | None:
    """N of ``after-N-steps`` (None for another answer, or for the literal ``after-N-steps``)."""
    m = re.fullmatch(r"after-(\d+)-steps?", since or "")
    if m:
        return int(m.group(1))
    return None


def _is_after_steps(since: str | None) -> bool:
    return since == "after-N-steps" or since_step(since) is not None


@dataclass(frozen=True)
class TriageCause:
    """One cause from the router's table, ranked by the answers, never checked against data."""

    symptom: str
    cause: str
    score: int
    """Prior (high 3, medium 2, low 1) plus what the answers added: an order, not a
    probability."""
    to_check: str
    """What to log (or do) to check it against data."""
    metrics: tuple[str, ...]
    """The metrics the router's check on this cause reads (empty: no metric can check it)."""
    why: tuple[str, ...] = ()
    """The answers that raised or lowered it."""
    interventions: tuple[str, ...] = ()
    """Keys into the router's INTERVENTIONS."""

    def to_dict(self) -> dict[str, Any]:
        return {"symptom": self.symptom, "cause": self.cause, "score": self.score,
                "basis": "not_checked", "checked_against_data": False,
                "to_check": self.to_check, "metrics": list(self.metrics),
                "why": list(self.why), "interventions": list(self.interventions)}


@dataclass(frozen=True)
class Triage:
    """The routed answers: symptoms, ranked causes, interventions, and what was ruled out."""

    answers: TriageAnswers
    symptoms: tuple[str, ...]
    causes: tuple[TriageCause, ...]
    interventions: tuple[Intervention, ...]
    ruled_out: tuple[tuple[str, str, str], ...] = ()
    """(symptom, cause, the answer that contradicts it)."""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "basis": "not_checked", "answers": self.answers.given(),
                "symptoms": [{"symptom": s, "meaning": SYMPTOMS.get(s, "")}
                             for s in self.symptoms],
                "causes": [c.to_dict() for c in self.causes],
                "interventions": [i.to_dict() for i in self.interventions],
                "ruled_out": [{"symptom": s, "cause": c, "because": b}
                              for s, c, b in self.ruled_out],
                "notes": list(self.notes)}


# --------------------------------------------------------------------------- signals
Signal = Callable[[TriageAnswers, CauseRule], "int | str | None"]
"""An answer's effect on one cause: a score change, ``DROP``, or None (no effect)."""

_LR_CHECKS = frozenset({"lr_high_at_onset", "lr_high_after_start", "lr_not_decayed"})
_FP16_CHECK = "loss_scale_logged"


def _family(a: TriageAnswers) -> str:
    return "sgd" if a.optimizer == "sgd" else "adam"


def _lr_level(a: TriageAnswers) -> str | None:
    if a.lr is None:
        return None
    if a.lr == 0:
        return "zero"
    fam = _family(a)
    if a.lr >= _LR_HIGH[fam]:
        return "high"
    if a.lr <= _LR_TINY[fam]:
        return "tiny"
    return "usual"


def _lr_high_cause(r: CauseRule) -> bool:
    return r.check in _LR_CHECKS or (r.metric == "lr" and "lower_lr" in r.interventions)


def _sig_lr(a: TriageAnswers, r: CauseRule) -> int | str | None:
    lvl = _lr_level(a)
    if lvl is None:
        return None
    if r.check == "lr_zero":
        return 5 if lvl == "zero" else DROP
    low: dict[str, int | str] = {"tiny": 4, "zero": DROP, "high": DROP, "usual": -1}
    high: dict[str, int | str] = {"high": 3, "zero": DROP, "tiny": DROP, "usual": 0}
    if r.check == "lr_tiny" or "raise_lr" in r.interventions:
        return low[lvl]
    if _lr_high_cause(r):
        return high[lvl]
    return None


def _sig_smaller_lr(a: TriageAnswers, r: CauseRule) -> int | None:
    if a.smaller_lr_helps in (None, "untried"):
        return None
    lr_cause = _lr_high_cause(r) or r.check == "lr_starts_at_peak"
    if a.smaller_lr_helps == "yes":
        return 3 if lr_cause else None
    return -2 if lr_cause else 1


def _sig_precision(a: TriageAnswers, r: CauseRule) -> int | str | None:
    if a.precision is None or r.check != _FP16_CHECK:
        return None
    return 4 if a.precision == "fp16" else DROP


def _sig_clip(a: TriageAnswers, r: CauseRule) -> int | None:
    if a.grad_clip is None:
        return None
    if r.check in ("grad_spike_at_onset", "grad_spikes_isolated"):
        # Clipping at <= 1 caps the update, so a spike "that clipping did not cap" is less
        # likely; no clipping leaves every spike through (Pascanu et al. 2013).
        return 3 if a.grad_clip == 0 else -1
    return None


def _sig_warmup(a: TriageAnswers, r: CauseRule) -> int | str | None:
    if a.warmup is None:
        return None
    if r.check == "lr_starts_at_peak" or "longer_warmup" in r.interventions[:1]:
        return (3 if a.optimizer in (None, "adam", "adamw") else 2) if a.warmup == 0 else DROP
    if r.check == "lr_rising_at_end":  # "still in its warm-up": impossible without one
        return DROP if a.warmup == 0 else None
    return None


def _sig_optimizer(a: TriageAnswers, r: CauseRule) -> int | str | None:
    if a.optimizer is None:
        return None
    if "Adam" in r.cause and "second-moment" in r.cause:  # an Adam-only mechanism
        return DROP if a.optimizer == "sgd" else None
    return None


def _sig_batch(a: TriageAnswers, r: CauseRule) -> int | None:
    if a.batch is None or "bigger_batch" not in r.interventions:
        return None
    return 3 if a.batch <= _SMALL_BATCH else -1


#: What changed -> the causes it makes likelier (by check name or intervention key).
_CHANGE_HITS: dict[str, tuple[frozenset[str], int]] = {
    "data": (frozenset({"spike_recovered", "skip_batch", "check_data", "check_labels",
                        "shuffle", "more_workers", "faster_storage", "cache_preprocess"}), 3),
    "lr": (_LR_CHECKS | {"lr_starts_at_peak", "lr_tiny", "lr_zero", "lower_lr", "raise_lr",
                         "fix_zero_lr"}, 3),
    "batch": (frozenset({"train_loss_summed", "mean_loss", "lower_lr", "bigger_batch",
                         "lr_high_at_onset", "divide_accumulated_loss"}), 2),
    "precision": (frozenset({_FP16_CHECK, "bf16"}), 3),
    "code": (frozenset({"train_loss_summed", "check_loss_math", "optimizer_params_foreign",
                        "grad_or_update_zero", "param_norm_constant", "find_leak",
                        "kept_tensors_show"}), 2),
    "hardware": (frozenset({"check_node", "check_throttling", "faster_storage",
                            "more_workers", "bf16"}), 2),
}


def _keys(r: CauseRule) -> set[str]:
    return {r.check or "", *r.interventions} - {""}


def _sig_changed(a: TriageAnswers, r: CauseRule) -> int | None:
    if a.changed in (None, "nothing"):
        return None
    hits, gain = _CHANGE_HITS[a.changed]
    return gain if _keys(r) & hits else None


def _sig_since(a: TriageAnswers, r: CauseRule) -> int | None:
    if a.since is None:
        return None
    if a.since == "start":
        # Broken from step 0: warm-up, init, optimizer wiring and loss math, not a batch met
        # later or a schedule that decayed.
        if r.check in ("lr_starts_at_peak", "optimizer_params_foreign", "grad_or_update_zero",
                       "lr_zero", "lr_tiny", "at_chance", "train_loss_summed") \
                or "fix_init_or_arch" in r.interventions:
            return 2
        if r.check in ("spike_recovered", "lr_annealed", "loss_fell"):
            return -2
        return None
    if _is_after_steps(a.since):
        if r.check in ("spike_recovered", "lr_high_at_onset", "lr_annealed",
                       "loss_rising_before_onset"):
            return 1
        if r.check in ("lr_starts_at_peak", "lr_zero", "at_chance"):
            return -1
        return None
    return 1 if a.changed not in (None, "nothing") and _sig_changed(a, r) else None


#: (answer field, its signal), in the order their reasons are listed.
SIGNALS: tuple[tuple[str, Signal], ...] = (
    ("precision", _sig_precision), ("lr", _sig_lr), ("smaller_lr_helps", _sig_smaller_lr),
    ("grad_clip", _sig_clip), ("warmup", _sig_warmup), ("optimizer", _sig_optimizer),
    ("batch", _sig_batch), ("changed", _sig_changed), ("since", _sig_since),
)

_PRIOR = {"high": 3, "medium": 2, "low": 1}
_MAX_INTERVENTIONS = 5

#: Metrics the router's checks read beyond ``CauseRule.metric`` (router._metric_present).
_CHECK_METRICS = {"grad_or_update_zero": ("grad_norm", "update_ratio"),
                  "kept_tensors_show": ("mem_alloc_mb", "mem_peak_mb", "rss_mb")}


def _symptoms(a: TriageAnswers) -> tuple[str, ...]:
    out: list[str] = list(_LOSS_SYMPTOMS.get(a.loss or "", ()))
    if a.loss == "plateau" and a.since == "start":
        out.insert(0, "flat_loss")  # never descended: a flat loss, not a plateau after descent
    if a.loss == "nan" and a.precision == "fp16":
        out.append("loss_scale_collapse")
    out += _STEPS_SYMPTOMS.get(a.steps or "", ())
    out += _MEMORY_SYMPTOMS.get(a.memory or "", ())
    return tuple(dict.fromkeys(out))


def _describe(field_name: str, a: TriageAnswers, delta: int | str) -> str:
    value = getattr(a, field_name)
    if field_name == "lr":
        value = f"{value:g} ({_lr_level(a)} for {_family(a)})"
    elif field_name == "grad_clip" and value == 0:
        value = "0 (no clipping)"
    elif field_name == "warmup" and value == 0:
        value = "0 (none)"
    effect = "rules it out" if delta == DROP else f"{int(delta):+d}"
    return f"--{field_name.replace('_', '-')} {value}: {effect}"


def _to_check(r: CauseRule) -> str:
    # The router's own wording for an unchecked cause (router._judge).
    if r.check is None:
        return r.to_check or "cannot be checked from the logged metrics"
    return r.to_check or f"log {r.metric} to check this"


def _rank(a: TriageAnswers, symptom: str, r: CauseRule
          ) -> tuple[TriageCause | None, tuple[str, str, str] | None]:
    text = r.cause.replace("{k}", "k")
    score, why = _PRIOR[r.likelihood], []
    for name, sig in SIGNALS:
        d = sig(a, r)
        if d is None or d == 0:
            continue
        why.append(_describe(name, a, d))
        if d == DROP:
            return None, (symptom, text, why[-1])
        score += int(d)
    metrics = _CHECK_METRICS.get(r.check or "", (r.metric,) if r.metric else ())
    return TriageCause(symptom, text, score, _to_check(r), metrics, tuple(why),
                       r.interventions), None


def generic_intervention(key: str, *, onset: int | None = None,
                         from_start: bool = False) -> Intervention | None:
    """The router's intervention ``key`` worded without a run: step placeholders say "the
    onset" unless ``onset`` is known; ``from_start`` uses its from-the-start wording (None
    where the router drops it: there is no checkpoint before step 0)."""
    ir = INTERVENTIONS[key]
    action = ir.action
    if from_start and ir.from_start is not None:
        if not ir.from_start:
            return None
        action = ir.from_start
    # Without a run there is no onset step: N names it (the step the problem started, M the
    # one it ended), as the report's note says.
    at = str(onset) if onset is not None else "N"
    ctx = {"onset": at, "end": "M", "best": at, "skip_from": at, "skip_to": "M", "k": "k",
           "module": "the module the NaN guard names"}
    return Intervention(action=action.format(**ctx),
                        displaced_cost=ir.displaced_cost.format(**ctx),
                        verify=ir.verify.format(**ctx), changes_semantics=ir.changes_semantics)


def triage(answers: TriageAnswers) -> Triage:
    """Route the answers to the router's causes and interventions (pure; never measures)."""
    symptoms = _symptoms(answers)
    notes: list[str] = []
    if not symptoms:
        notes.append("no symptom in the answers (--loss ok and nothing about steps or "
                     "memory): nothing to route; run trainmedic diagnose on logs when you "
                     "have them")
    kept: list[tuple[TriageCause, int]] = []
    ruled: list[tuple[str, str, str]] = []
    order = 0
    seen: set[str] = set()
    for s in symptoms:
        for r in CAUSES.get(s, ()):
            order += 1
            c, out = _rank(answers, s, r)
            if out is not None:
                ruled.append(out)
            elif c is not None and c.cause not in seen:
                seen.add(c.cause)
                kept.append((c, order))
    kept.sort(key=lambda x: (-x[0].score, x[1]))
    causes = tuple(c for c, _ in kept)
    inter: list[Intervention] = []
    used: set[str] = set()
    start = answers.since == "start"
    for c in causes:
        for key in c.interventions:
            if key in used or len(inter) >= _MAX_INTERVENTIONS:
                continue
            used.add(key)
            iv = generic_intervention(key, onset=since_step(answers.since), from_start=start)
            if iv is not None:
                inter.append(iv)
    if answers.lr is not None:
        notes.append(f"lr {answers.lr:g} read as {_lr_level(answers)} for "
                     f"{_family(answers)}-family optimizers (a heuristic threshold, not a "
                     "measurement)")
    if since_step(answers.since) is None and any(
            re.search(r"\b[NM]\b", iv.action + iv.verify) for iv in inter):
        notes.append("N in an intervention is the step the problem started (M: the step it "
                     "ended); pass --since after-N-steps to fill it in")
    notes.append("every cause here is not checked against data: log the metrics named "
                 "under each and run trainmedic diagnose to check them")
    return Triage(answers=answers, symptoms=symptoms, causes=causes,
                  interventions=tuple(inter), ruled_out=tuple(ruled), notes=tuple(notes))
