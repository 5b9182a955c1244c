"""Distributed health on torch.distributed: the rank bring-up check, the hang watchdog with
per-rank stacks and flight-recorder dumps, the desync report and cross-rank stragglers.

Nothing here imports torch at import time; each module imports it where it needs it."""

from __future__ import annotations

__all__: list[str] = []
