"""Shared set-up for the watcher tests: every test starts as a single, seeded process."""

from __future__ import annotations

from collections.abc import Iterator

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


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """One intra-op thread for the test (timing- and order-sensitive reductions), restored."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
