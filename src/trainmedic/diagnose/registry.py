"""The detector registry: one detector per symptom code, registered by decorator.

A detector is a pure function ``(run) -> list[Finding] | NotRun``. The registry checks the
metrics a detector ``requires`` before calling it, so a detector never sees a run that lacks
them; the missing ones go to ``checks_not_run`` with what to log. Registering the same symptom
twice is an error, as in ``torch.utils.flop_counter.register_flop_formula``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from trainmedic.diagnose.finding import Finding
from trainmedic.errors import RegistryError
from trainmedic.run.series import Run

__all__ = ["NotRun", "Detector", "register_detector", "detectors", "get_detector",
           "SYMPTOMS", "USER_SYMPTOMS", "meaning"]

#: Every symptom code with a one-line meaning. The codes keep their meaning (DESIGN.md); a new
#: code is added here, with its evidence rule in docs/symptoms.md, before a detector emits it.
SYMPTOMS: dict[str, str] = {
    "nonfinite_loss": "the training loss became NaN or inf",
    "loss_spike": "the loss jumped far above its recent level, then came back",
    "divergence": "the loss rose and stayed up (or blew up) instead of falling",
    "flat_loss": "the loss did not move from its start: the model is not learning",
    "plateau": "the loss stopped improving after an initial descent",
    "oscillation": "the loss swings up and down around its trend far more than noise",
    "overfitting": "validation loss rose from its minimum while training loss kept falling",
    "exploding_gradients": "the gradient norm grew far beyond its typical level",
    "vanishing_gradients": "the gradient norm fell towards zero",
    "input_bound": "a large share of the step was spent waiting for data",
    "step_time_outliers": "some steps took far longer than the typical step",
    "memory_growth": "memory grew steadily over steps (a leak)",
    "straggler": "one rank was consistently slower than the others",
    "nonfinite_grad": "the gradient norm became NaN or inf",
    "nan_masked_in_logs": "the logger filtered NaN/inf losses, hiding them from the curve",
    "loss_scale_collapse": "the fp16 loss scale kept falling: overflows on most steps",
    "grad_accum_misnormalization": "loss or gradients scale with the accumulation count",
    "resume_discontinuity": "the step went back or repeated: a resume that replays steps",
    "dead_units": "a large fraction of ReLU-family units never activate",
    "saturated_activations": "tanh/sigmoid units stuck at their limits",
    "throughput_regression": "throughput dropped and stayed down",
    "lr_schedule_anomaly": "the learning-rate schedule does something unexpected",
}


@dataclass(frozen=True)
class NotRun:
    """Returned by a detector that cannot judge this run (e.g. too few points)."""

    reason: str
    missing: tuple[str, ...] = ()


DetectFn = Callable[[Run], "list[Finding] | NotRun"]


@dataclass(frozen=True)
class Detector:
    symptom: str
    requires: tuple[str, ...]
    """All of these metrics must be present (after alias mapping)."""
    requires_any: tuple[str, ...]
    """At least one of these must be present (empty: no such condition)."""
    fn: DetectFn

    def missing(self, run: Run) -> tuple[str, ...]:
        miss = tuple(m for m in self.requires if not run.has(m))
        if self.requires_any and not any(run.has(m) for m in self.requires_any):
            miss = miss + self.requires_any
        return miss


_REGISTRY: dict[str, Detector] = {}


#: Codes registered by users (``<namespace>.<code>``) with their one-line meaning.
USER_SYMPTOMS: dict[str, str] = {}

#: A user code: a namespace and a code, lower-case words joined by ``_``, split by one dot
#: (``acme.token_drop``). Built-in codes have no dot, so a user code never shadows one.
_USER_CODE = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")


def meaning(symptom: str) -> str | None:
    """The one-line meaning of a built-in or user-registered symptom code (None if unknown)."""
    return SYMPTOMS.get(symptom) or USER_SYMPTOMS.get(symptom)


def register_detector(symptom: str, *, requires: tuple[str, ...] = (),
                      requires_any: tuple[str, ...] = (),
                      doc: str | None = None) -> Callable[[DetectFn], DetectFn]:
    """Register ``fn`` as the detector for ``symptom``.

    ``symptom`` is a built-in code (``SYMPTOMS``) or your own, namespaced as
    ``<namespace>.<code>`` (``acme.token_drop``) with ``doc``, its one-line meaning::

        @register_detector("acme.token_drop", requires=("tokens_per_s",),
                           doc="tokens per second fell below the cluster's floor")
        def token_drop(run: Run) -> list[Finding] | NotRun: ...

    Raises ``RegistryError`` if a built-in-looking code is unknown (built-in codes are added
    to ``SYMPTOMS`` and docs/symptoms.md first), if a user code is malformed or has no
    ``doc``, or if a detector for the code is already registered.
    """

    def deco(fn: DetectFn) -> DetectFn:
        if symptom not in SYMPTOMS:
            if not _USER_CODE.match(symptom):
                raise RegistryError(
                    f"unknown symptom code {symptom!r}: your own codes are namespaced, "
                    f"'<namespace>.<code>' in lower case (e.g. 'acme.token_drop'); a built-in "
                    f"code is added to SYMPTOMS and docs/symptoms.md with its evidence rule "
                    f"first"
                )
            if not (doc and doc.strip()):
                raise RegistryError(
                    f"user symptom code {symptom!r} needs doc=, its one-line meaning (shown "
                    f"in reports), e.g. doc='tokens per second fell below the floor'"
                )
        if symptom in _REGISTRY:
            old = _REGISTRY[symptom].fn
            raise RegistryError(
                f"a detector for {symptom!r} is already registered "
                f"({old.__module__}.{old.__qualname__}); unregister it or pick another code"
            )
        _REGISTRY[symptom] = Detector(symptom, tuple(requires), tuple(requires_any), fn)
        if symptom not in SYMPTOMS and doc:
            USER_SYMPTOMS[symptom] = " ".join(doc.split())
        return fn

    return deco


def unregister_detector(symptom: str) -> None:
    """Remove a registered detector (for tests and for users replacing a built-in)."""
    _REGISTRY.pop(symptom, None)
    USER_SYMPTOMS.pop(symptom, None)


def detectors() -> list[Detector]:
    """Every registered detector, built-ins first loaded."""
    import trainmedic.diagnose.detectors  # noqa: F401  (registers the built-ins)

    return list(_REGISTRY.values())


def get_detector(symptom: str) -> Detector:
    detectors()
    try:
        return _REGISTRY[symptom]
    except KeyError:
        raise RegistryError(
            f"no detector registered for {symptom!r}; known: {sorted(_REGISTRY)}"
        ) from None
