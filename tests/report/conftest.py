"""Fixtures for the report tests: hand-built runs and diagnoses (no detectors involved)."""

from __future__ import annotations

import pytest
from report_samples import sample_diagnosis, sample_run

from trainmedic.diagnose.finding import Diagnosis
from trainmedic.run.series import Run


@pytest.fixture
def run() -> Run:
    return sample_run()


@pytest.fixture
def diagnosis() -> Diagnosis:
    return sample_diagnosis()
