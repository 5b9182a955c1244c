"""Checkpoint folders written by other tools, recognised so that ``trainmedic ckpt`` can say
what they are instead of "not a checkpoint".

Only Hugging Face's ``Trainer`` for now: it saves ``<output_dir>/checkpoint-<step>/`` holding
``trainer_state.json`` (its log history, which ``trainmedic diagnose`` reads), the weights
(``model.safetensors`` or ``pytorch_model.bin``, possibly sharded with an index),
``optimizer.pt``, ``scheduler.pt``, ``rng_state.pth`` and ``training_args.bin``. Detection
looks at file names only: nothing is opened.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["hf_trainer_state", "describe_foreign"]

TRAINER_STATE = "trainer_state.json"
#: Files besides trainer_state.json that mark a Trainer checkpoint folder.
_HF_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
             "pytorch_model.bin.index.json", "adapter_model.safetensors", "adapter_model.bin",
             "optimizer.pt", "scheduler.pt", "training_args.bin", "rng_state.pth")
_HF_DIR_RE = re.compile(r"^checkpoint-(\d+)$")


def _is_hf_checkpoint(folder: Path) -> bool:
    if not (folder / TRAINER_STATE).is_file() or (folder / "manifest.json").exists():
        return False
    return bool(_HF_DIR_RE.match(folder.name)) or any((folder / f).exists() for f in _HF_FILES)


def _hf_children(root: Path) -> list[tuple[int, Path]]:
    """The ``checkpoint-N`` Trainer folders directly under ``root``, highest step first."""
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    found = []
    for p in entries:
        m = _HF_DIR_RE.match(p.name)
        if m and p.is_dir() and _is_hf_checkpoint(p):
            found.append((int(m.group(1)), p))
    return sorted(found, reverse=True)


def hf_trainer_state(path: str | Path) -> Path | None:
    """The ``trainer_state.json`` of the Hugging Face Trainer checkpoint ``path`` is (or of
    the newest ``checkpoint-N/`` directly under ``path``, a Trainer ``output_dir``), else
    None (also for a folder holding a trainmedic ``manifest.json``)."""
    path = Path(path)
    if not path.is_dir():
        return None
    if _is_hf_checkpoint(path):
        return path / TRAINER_STATE
    children = _hf_children(path)
    return children[0][1] / TRAINER_STATE if children else None


def describe_foreign(path: str | Path) -> str | None:
    """One line saying what ``path`` is when another tool wrote it (a Hugging Face Trainer
    checkpoint, or an ``output_dir`` of them) and what to run instead; None otherwise."""
    path = Path(path)
    state = hf_trainer_state(path)
    if state is None:
        return None
    diagnose = f"for its training log, run `trainmedic diagnose {state}`"
    if state.parent == path:
        return (f"a Hugging Face Trainer checkpoint (it holds {TRAINER_STATE}), "
                f"not a trainmedic one: trainmedic ckpt reads step-* folders written by "
                f"trainmedic's CheckpointManager; {diagnose}")
    n = len(_hf_children(path))
    return (f"holds {n} Hugging Face Trainer checkpoint{'s' if n != 1 else ''} "
            f"(checkpoint-N/), not trainmedic ones: trainmedic ckpt reads step-* folders "
            f"written by trainmedic's CheckpointManager; for the newest one's training log "
            f"({state.parent.name}), run `trainmedic diagnose {state}`")
