"""A watcher phase opened by one framework hook and closed by another.

Frameworks say when evaluation starts and ends in two callbacks (Lightning's
``on_validation_start`` / ``on_validation_end``; HF's first ``on_prediction_step`` and
``on_evaluate``), not in one ``with`` block: this holds the watcher's ``phase("eval")`` open
between them, so the hang watchdog gives evaluation its own, longer limit instead of taking a
long eval for a hang.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PhaseSpan"]


class PhaseSpan:
    """``open(watcher, "eval")`` enters ``watcher.phase("eval")`` (once); ``close()`` leaves it."""

    def __init__(self) -> None:
        self._cm: Any = None

    def open(self, watcher: Any, name: str) -> None:
        if self._cm is None and watcher is not None:
            cm = watcher.phase(name)
            cm.__enter__()
            self._cm = cm

    def close(self) -> None:
        cm, self._cm = self._cm, None
        if cm is not None:
            cm.__exit__(None, None, None)
