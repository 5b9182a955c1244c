"""Hugging Face Trainer ``trainer_state.json`` (the file the Trainer saves in every checkpoint).

Its ``log_history`` is a list of dicts in log order, of four kinds
(transformers/trainer.py, ``Trainer.log`` / ``_maybe_log_save_evaluate``):

- train rows: ``loss``, ``grad_norm``, ``learning_rate``, ``epoch``, ``step``;
- eval rows: ``eval_loss`` and every ``eval_*`` metric, ``epoch``, ``step``;
- rows without ``step`` (``predict_*`` from a custom callback): not series, noted;
- the final summary row (``train_runtime``, ``train_loss`` = mean over the run, ...): facts
  about the run, kept in ``run.meta["hf_train_summary"]``, never a series.

The file is found by content (a JSON object with ``log_history``), whatever its name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainmedic.errors import UnrecognizedInputError
from trainmedic.run.jsonlog import as_number, rows_to_table
from trainmedic.run.table import LogTable

__all__ = ["read_hf_state", "is_hf_state", "META_KEYS"]

META_KEYS = ("max_steps", "global_step", "logging_steps", "eval_steps", "save_steps",
             "num_train_epochs", "train_batch_size", "epoch", "best_metric",
             "best_model_checkpoint")
"""Top-level keys copied into ``run.meta`` when present."""

_SUMMARY_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second",
                 "total_flos")


def is_hf_state(doc: Any) -> bool:
    """True for a parsed JSON document shaped like a trainer_state.json."""
    return isinstance(doc, dict) and isinstance(doc.get("log_history"), list)


def read_hf_state(path: Path, doc: dict[str, Any]) -> LogTable:
    """Read a parsed trainer_state.json document into a ``LogTable``."""
    table = LogTable(path=str(path), format="hf_trainer_state")
    for k in META_KEYS:
        if k in doc and doc[k] is not None:
            table.meta[k] = doc[k]
    table.meta["framework"] = "huggingface"
    history = doc["log_history"]
    rows: list[tuple[int | None, dict[str, Any]]] = []
    no_step = 0
    no_step_keys: set[str] = set()
    for entry in history:
        if not isinstance(entry, dict):
            continue
        if any(k in entry for k in _SUMMARY_KEYS):
            table.meta["hf_train_summary"] = {k: v for k, v in entry.items()
                                              if as_number(v) is not None}
            continue
        if as_number(entry.get("step")) is None:
            no_step += 1
            no_step_keys.update(list(entry)[:4])
            continue
        rows.append((None, entry))
    if no_step:
        table.note("rows_without_step",
                   f"{no_step} log_history rows have no 'step' (keys such as "
                   f"{', '.join(sorted(no_step_keys)[:4])}); they are not series")
    if not rows:
        raise UnrecognizedInputError(str(path), "is a trainer_state.json whose log_history has "
                                     "no rows with a 'step'; expected logged train/eval rows")
    return rows_to_table(table, rows)
