"""Fixtures shared by the checkpoint tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain process, whatever launched pytest: no torchrun rank, no SLURM job (the run
    store and supervise read them)."""
    for name in ("RANK", "WORLD_SIZE", "SLURM_JOB_ID"):
        monkeypatch.delenv(name, raising=False)
