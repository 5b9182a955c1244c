"""Diagnosis: the detector registry, detectors, the router and findings."""

from __future__ import annotations

from trainmedic.diagnose.finding import Diagnosis, Finding
from trainmedic.diagnose.registry import register_detector

__all__ = ["Diagnosis", "Finding", "register_detector"]
