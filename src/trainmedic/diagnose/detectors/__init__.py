"""The built-in detectors: importing this package registers one detector per symptom code.

Each module groups the detectors that read the same metrics; the evidence rule of every
detector is written in docs/symptoms.md.
"""

from __future__ import annotations

from trainmedic.diagnose.detectors import (  # noqa: F401  (imported to register)
    accumulation,
    continuity,
    divergence,
    generalization,
    gradients,
    layers,
    loss_events,
    loss_nonfinite,
    loss_progress,
    loss_scale,
    memory,
    oscillation,
    outliers,
    schedule,
    stragglers,
    timing,
)
