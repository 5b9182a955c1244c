"""Diagnosis: the detector registry, detectors, the router and findings.

``diagnose(run)`` runs every registered detector on a ``Run`` and returns a ``Diagnosis``
(the findings JSON as an object). Add a detector with ``@register_detector(symptom, ...)``.
"""

from __future__ import annotations

from trainmedic.diagnose.engine import diagnose
from trainmedic.diagnose.finding import (
    CheckNotRun,
    Diagnosis,
    Evidence,
    Finding,
)
from trainmedic.diagnose.registry import (
    SYMPTOMS,
    NotRun,
    detectors,
    register_detector,
    unregister_detector,
)
from trainmedic.diagnose.router import route

__all__ = [
    "diagnose",
    "Diagnosis",
    "Finding",
    "Evidence",
    "CheckNotRun",
    "NotRun",
    "SYMPTOMS",
    "register_detector",
    "unregister_detector",
    "detectors",
    "route",
]
