"""A stand-in checkpoint manager for the runner's tests: the manager's save/load/latest API,
each checkpoint one torch.save file read back with weights_only=True (so the training state
must be plain). The real CheckpointManager is tested in tests/checkpoint/."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass
class Loaded:
    path: Path
    step: int
    train: dict[str, Any]


class FileManager:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.saves: list[int] = []

    def save(self, step: int, state: Mapping[str, Any]) -> Path:
        import torch

        path = self.root / f"step-{step:08d}"
        path.mkdir(parents=True, exist_ok=True)
        blob = {k: (v if k == "train" else v.state_dict()) for k, v in state.items()}
        torch.save(blob, path / "state.pt")
        self.saves.append(step)
        return path

    def latest(self) -> Path | None:
        found = sorted(self.root.glob("step-*"))
        return found[-1] if found else None

    def load(self, state: Mapping[str, Any], *, path: str | Path | None = None,
             force: bool = False) -> Loaded:
        import torch

        where = Path(path) if path is not None else self.latest()
        assert where is not None
        blob = torch.load(where / "state.pt", weights_only=True)
        for k, obj in state.items():
            obj.load_state_dict(blob[k])
        return Loaded(where, int(where.name.split("-")[1]), blob["train"])


@pytest.fixture
def file_manager(tmp_path: Path) -> FileManager:
    return FileManager(tmp_path / "ckpt")


@pytest.fixture
def make_manager() -> type[FileManager]:
    return FileManager
