"""Shared set-up for the watcher tests: every test starts as a single, seeded process."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # A RANK/WORLD_SIZE left in the environment (a torchrun shell) would make every store a
    # per-rank file; the tests that want ranks set them themselves.
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    try:
        import torch
    except ImportError:  # the torch-free tests still run
        return
    torch.manual_seed(0)
