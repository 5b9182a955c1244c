"""What the runs were told to do, and which of it differs.

A run's configuration is gathered, flattened to dotted keys, from:

- ``meta``: what the run itself recorded (the run store's meta and what the user passed to
  ``watch(meta=...)``; an HF trainer_state.json's ``max_steps``, ``train_batch_size``, ...;
  whatever a tracker importer put there) minus the bookkeeping keys below;
- ``hparams.yaml`` (Lightning's loggers save the module's ``save_hyperparameters()`` there);
- W&B's ``config.yaml`` (``files/config.yaml`` of a run folder: ``{key: {value: ...}}``);
- MLflow's ``params/<key>`` files of a file-store run;
- a Hugging Face ``config.json`` (the model's config, beside the trainer_state.json).

YAML is read with ``yaml.safe_load`` (PyYAML, which Lightning and W&B install); without it
those files are skipped with a note. Only keys whose values differ between runs are shown.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmedic.run.series import Run

__all__ = ["ConfigDiff", "DiffRow", "run_config", "diff_configs", "BOOKKEEPING"]

logger = logging.getLogger(__name__)

BOOKKEEPING = frozenset({
    # the run store's own records: differ between any two runs
    "store_format", "started_at", "started_at_unix", "pid", "host", "sessions",
    "trainmedic_version", "format", "rank", "world_size_env",
    # how the importers read the files
    "sources", "mapping", "aliases", "derived", "ignored_columns", "line_endings",
    "text_step_key", "tb_session_starts", "layer_order", "layer_types",
    "optimizer_params_checked",
    # where a run wrote its files: differs between any two runs by construction
    "out_dir", "output_dir", "logging_dir", "run_dir", "_wandb", "wandb_version",
    # trackers: a run's final values and ids, not its settings
    "summary", "wandb_run_id", "mlflow_run_id", "tracker", "run_name",
})
"""Meta keys (at any depth) that say how or where a run was recorded, not how it trained."""

#: Files looked for under a run's path, and how deep.
_MAX_DEPTH = 4
_MAX_FILES = 2000


@dataclass(frozen=True)
class DiffRow:
    """One key whose values differ; ``values[i]`` is run i's (None: the run does not set it)."""

    key: str
    values: tuple[Any, ...]
    source: str
    """Where the key came from: ``meta``, ``hparams.yaml``, ``wandb config``, ``mlflow params``,
    ``config.json``."""


@dataclass(frozen=True)
class ConfigDiff:
    rows: tuple[DiffRow, ...]
    same: int
    """Keys present in every run with equal values (not shown)."""
    notes: tuple[str, ...] = ()


def _flatten(obj: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in obj.items():
        if str(k) in BOOKKEEPING:
            continue
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        elif isinstance(v, (list, tuple)) and len(v) > 16:
            out[key] = f"<{len(v)} items>"
        else:
            out[key] = v
    return out


def _yaml(path: Path, notes: list[str]) -> Any:
    try:
        import yaml
    except ImportError:
        notes.append(f"{path}: not read (PyYAML is not installed: pip install pyyaml)")
        return None
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, yaml.YAMLError) as exc:
        notes.append(f"{path}: not read ({type(exc).__name__})")
        return None


def _files(root: Path) -> list[Path]:
    if root.is_file():
        return [p for p in root.parent.iterdir() if p.is_file()]
    out: list[Path] = []
    for depth in range(_MAX_DEPTH + 1):
        pattern = "/".join(["*"] * (depth + 1))
        out.extend(p for p in sorted(root.glob(pattern)) if p.is_file())
        if len(out) > _MAX_FILES:
            break
    return out[:_MAX_FILES]


def _from_files(root: Path, notes: list[str], tracker: str | None = None
                ) -> dict[str, tuple[Any, str]]:
    """Config keys from the files under ``root``; a tracker's own config files are skipped
    when its reader already put that config in the run's meta (``tracker``), so one key is
    not shown twice under two names."""
    found: dict[str, tuple[Any, str]] = {}

    def put(values: Mapping[str, Any], prefix: str, source: str) -> None:
        for k, v in _flatten(values, prefix).items():
            found.setdefault(k, (v, source))

    for p in _files(root):
        if p.name == "hparams.yaml":
            doc = _yaml(p, notes)
            if isinstance(doc, Mapping):
                put(doc, "hparams.", "hparams.yaml")
        elif p.name == "config.yaml" and p.parent.name == "files" and tracker != "wandb":
            doc = _yaml(p, notes)
            if isinstance(doc, Mapping):  # W&B: {key: {"desc": ..., "value": ...}}
                put({k: v.get("value") if isinstance(v, Mapping) else v
                     for k, v in doc.items()}, "wandb.", "wandb config")
        elif (p.parent.name == "params" and (p.parent.parent / "meta.yaml").is_file()
              and tracker != "mlflow"):
            found.setdefault(f"mlflow.{p.name}", (p.read_text(errors="replace").strip(),
                                                 "mlflow params"))
        elif p.name == "config.json" and (
                p.parent == root or (p.parent / "trainer_state.json").is_file()):
            try:
                doc = json.loads(p.read_text(encoding="utf-8", errors="replace"))
            except (OSError, ValueError):
                continue
            if isinstance(doc, Mapping) and ("model_type" in doc or "architectures" in doc):
                put(doc, "model.", "config.json")
    return found


def run_config(run: Run, path: str | None = None, notes: list[str] | None = None
               ) -> dict[str, tuple[Any, str]]:
    """``{dotted key: (value, source)}`` for one run (meta, then the config files under
    ``path``)."""
    notes = notes if notes is not None else []
    out: dict[str, tuple[Any, str]] = {k: (v, "meta") for k, v in _flatten(run.meta).items()}
    if path:
        root = Path(path)
        if root.exists():
            tracker = run.meta.get("tracker") if "config" in run.meta else None
            for k, vs in _from_files(root, notes, tracker).items():
                out.setdefault(k, vs)
    return out


def _norm(v: Any) -> Any:
    """Compare ``3e-3`` and ``"0.003"`` as equal (stores and trackers keep strings)."""
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v.strip()
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float)):
        return float(v)
    return json.dumps(v, sort_keys=True, default=str)


def diff_configs(configs: Sequence[Mapping[str, tuple[Any, str]]],
                 notes: Sequence[str] = ()) -> ConfigDiff:
    """The keys whose values differ between the runs (a key one run lacks counts as differing
    when another run sets it)."""
    keys = sorted(set().union(*[set(c) for c in configs])) if configs else []
    rows: list[DiffRow] = []
    same = 0
    for k in keys:
        vals = tuple(c[k][0] if k in c else None for c in configs)
        normed = {repr(_norm(v)) for v in vals}
        if len(normed) == 1:
            same += 1
            continue
        source = next(c[k][1] for c in configs if k in c)
        rows.append(DiffRow(k, vals, source))
    return ConfigDiff(tuple(rows), same, tuple(notes))
