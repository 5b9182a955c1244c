"""Checkpoints you can trust: complete, atomic, verified, resumable.

``CheckpointManager`` saves the training state into a fresh folder per step, committed by an
atomic rename with a manifest of every file's size and CRC-32; ``verify`` checks one folder,
``latest`` finds the newest one that verifies, ``list_checkpoints`` describes them all. The
on-disk format is in :mod:`trainmedic.checkpoint.manifest` and
:mod:`trainmedic.checkpoint.commit`.

Importing this package does not import torch: the functions that need it import it when
called.
"""

from __future__ import annotations

from trainmedic.checkpoint.config import CheckpointConfig
from trainmedic.checkpoint.manager import (
    CheckpointManager,
    ConfigMismatchError,
    DamagedCheckpointError,
    LoadedCheckpoint,
    NoCheckpointError,
)
from trainmedic.checkpoint.manifest import SCHEMA, Manifest, read_manifest
from trainmedic.checkpoint.verify import (
    CheckpointInfo,
    VerifyReport,
    latest,
    list_checkpoints,
    verify,
)

__all__ = [
    "CheckpointConfig",
    "CheckpointManager",
    "LoadedCheckpoint",
    "ConfigMismatchError",
    "DamagedCheckpointError",
    "NoCheckpointError",
    "Manifest",
    "SCHEMA",
    "read_manifest",
    "verify",
    "VerifyReport",
    "latest",
    "list_checkpoints",
    "CheckpointInfo",
]
