"""An MLflow run read through mlflow's own client (the ``mlflow`` extra), by tracking URI.

A source written ``mlflow:<tracking uri>#<run id>`` names one run on any tracking backend
mlflow reaches: a server (``mlflow:http://host:5000#<run id>``), a database
(``mlflow:sqlite:///mlflow.db#<run id>``), a file store (``mlflow:file:///abs/mlruns#<run
id>``), or the default from ``MLFLOW_TRACKING_URI`` (``mlflow:#<run id>``). It is read with
``mlflow.tracking.MlflowClient``: ``get_run`` for the params, tags and metric keys, and
``get_metric_history`` for every value of each metric at its step. A file store on disk
(``mlruns/``, or a ``file:`` URI) needs no mlflow: ``mlflow_store`` reads it by hand. mlflow
3 refuses to open file stores unless ``MLFLOW_ALLOW_FILE_STORE=true`` is set (it keeps them
"in maintenance mode"); reading them by hand needs no such switch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np

from trainmedic.errors import InputError, MissingExtraError, UnreadableInputError
from trainmedic.run.series import Series
from trainmedic.run.table import LogTable

__all__ = ["SCHEME", "is_mlflow_uri", "parse_mlflow_uri", "read_mlflow_uri"]

SCHEME = "mlflow:"
"""The prefix of a source read through mlflow's client."""
_INSTALL = "pip install 'trainmedic[mlflow]'"


def is_mlflow_uri(source: object) -> bool:
    """Whether a source on the command line names a run through mlflow's client (a ``Path``
    never does: ``Path("mlflow:x")`` is a file of that name)."""
    return isinstance(source, str) and source.startswith(SCHEME)


def parse_mlflow_uri(source: str) -> tuple[str | None, str]:
    """``(tracking uri or None for mlflow's default, run id)`` of ``mlflow:<uri>#<run id>``.

    Raises InputError when the run id is missing.
    """
    body = source[len(SCHEME):]
    uri, sep, run_id = body.rpartition("#")
    run_id = run_id.strip()
    if not sep or not run_id or any(c in run_id for c in "/ "):
        raise InputError(source, "names no run; expected mlflow:<tracking uri>#<run id>, e.g. "
                         "mlflow:http://localhost:5000#1a2b3c (the run id is on the run's "
                         "page), or mlflow:#<run id> for MLFLOW_TRACKING_URI")
    return (uri or None), run_id


def _client_class() -> Any:
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as exc:
        raise MissingExtraError(f"reading an MLflow tracking URI needs the mlflow library, "
                                f"which is not installed; install it with {_INSTALL}, or pass "
                                f"the mlruns/ folder of a file store (read without it)") from exc
    return MlflowClient


def read_mlflow_uri(source: str) -> LogTable:
    """Every metric of the run named by ``source`` (``mlflow:<uri>#<run id>``) at its logged
    steps, in the order mlflow returns them; ``meta["config"]`` the params (strings, as mlflow
    keeps them), ``meta["tags"]`` the tags without mlflow's own ``mlflow.*`` ones."""
    uri, run_id = parse_mlflow_uri(source)
    store = _file_store(uri or os.environ.get("MLFLOW_TRACKING_URI"))
    if store is not None:
        from trainmedic.run.mlflow_store import find_run_by_id, read_mlflow_run

        run_dir = find_run_by_id(store, run_id)
        if run_dir is None:
            raise UnreadableInputError(source, f"the file store {store} holds no run {run_id}; "
                                       f"expected a folder <experiment id>/{run_id} with a "
                                       f"meta.yaml; check the run id")
        table = read_mlflow_run(run_dir)
        table.path = source
        return table
    client_class = _client_class()
    try:  # the client itself may refuse the URI (a scheme it does not know)
        client = client_class(tracking_uri=uri) if uri else client_class()
        run = client.get_run(run_id)
        keys = sorted(run.data.metrics)
        histories = {k: client.get_metric_history(run_id, k) for k in keys}
    except Exception as exc:  # MlflowException, a refused connection, a bad URI scheme
        raise UnreadableInputError(source, f"mlflow could not read run {run_id} "
                                   f"({type(exc).__name__}: {_first_line(exc)}); check the "
                                   f"tracking URI and the run id") from exc
    table = LogTable(path=source, format="mlflow")
    for key, hist in histories.items():
        points = [(int(m.step), float(m.value)) for m in hist]
        if not points:
            continue
        table.columns[key] = Series(np.asarray([s for s, _ in points], dtype=np.int64),
                                    np.asarray([v for _, v in points], dtype=np.float64))
    table.meta["tracker"] = "mlflow"
    table.meta["mlflow_run_id"] = run_id
    table.meta["config"] = dict(run.data.params)
    tags = dict(run.data.tags)
    name = getattr(run.info, "run_name", None) or tags.get("mlflow.runName")
    if name:
        table.meta["run_name"] = name
    table.meta["tags"] = {k: v for k, v in tags.items() if not k.startswith("mlflow.")}
    if not table.columns:
        raise UnreadableInputError(source, f"run {run_id} holds no metric values; expected "
                                   f"metrics logged with mlflow.log_metric")
    return table


def _file_store(uri: str | None) -> Path | None:
    """The folder of a file-store URI (``file:///abs/mlruns``, or a plain path to a folder
    that exists); None for servers and databases."""
    if not uri:
        return None
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if not parsed.scheme and Path(uri).is_dir():
        return Path(uri)
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else "no message"
