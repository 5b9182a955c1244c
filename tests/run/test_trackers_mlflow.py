"""MLflow runs read through mlflow's client by tracking URI (``mlflow:<uri>#<run id>``).

The first tests run the reader against a small stand-in for ``mlflow.tracking.MlflowClient``
(the calls and fields the reader uses: ``get_run(run_id).data.params/.tags/.metrics``,
``.info.run_name``, ``get_metric_history(run_id, key)`` -> ``Metric(key, value, timestamp,
step)``), so the error paths are tested without a server. The rest write runs with the real
mlflow (the dev extra's mlflow-skinny) to a file store and to a SQLite database, and read them
back; they are skipped where mlflow is not installed.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trainmedic.errors import InputError, MissingExtraError, UnreadableInputError
from trainmedic.run import load_run
from trainmedic.run.mlflow_client import parse_mlflow_uri


@dataclass
class _Metric:
    key: str
    value: float
    timestamp: int
    step: int


@dataclass
class _Run:
    info: Any
    data: Any


@dataclass
class _Store:
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    uris: list[str | None] = field(default_factory=list)


def _stand_in(store: _Store) -> types.ModuleType:
    class MlflowClient:
        def __init__(self, tracking_uri: str | None = None) -> None:
            store.uris.append(tracking_uri)

        def get_run(self, run_id: str) -> _Run:
            if run_id not in store.runs:
                raise RuntimeError(f"RESOURCE_DOES_NOT_EXIST: Run '{run_id}' not found")
            r = store.runs[run_id]
            last = {k: v[-1][1] for k, v in r["metrics"].items()}
            return _Run(info=types.SimpleNamespace(run_id=run_id, run_name=r["name"]),
                        data=types.SimpleNamespace(params=r["params"], tags=r["tags"],
                                                   metrics=last))

        def get_metric_history(self, run_id: str, key: str) -> list[_Metric]:
            return [_Metric(key, v, 1700000000000 + s, s)
                    for s, v in store.runs[run_id]["metrics"][key]]

    mod = types.ModuleType("mlflow.tracking")
    mod.MlflowClient = MlflowClient  # type: ignore[attr-defined]
    return mod


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> _Store:
    st = _Store()
    st.runs["a1b2"] = {
        "name": "baseline",
        "params": {"lr": "0.0003", "batch_size": "32"},
        "tags": {"mlflow.user": "me", "team": "nlp"},
        "metrics": {"train/loss": [(s, 3.0 - s / 100) for s in range(0, 200, 10)],
                    "val_loss": [(s, 3.1 - s / 100) for s in (50, 100, 150)],
                    "learning_rate": [(s, 1e-4) for s in range(0, 200, 10)]},
    }
    root = types.ModuleType("mlflow")
    tracking = _stand_in(st)
    root.tracking = tracking  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mlflow", root)
    monkeypatch.setitem(sys.modules, "mlflow.tracking", tracking)
    return st


def test_a_run_by_uri_reads_every_metric_at_its_steps(store: _Store) -> None:
    run = load_run("mlflow:http://localhost:5000#a1b2")
    assert store.uris == ["http://localhost:5000"]
    loss = run.get("loss")
    assert loss.steps.tolist() == list(range(0, 200, 10))
    assert loss.values.tolist() == [3.0 - s / 100 for s in range(0, 200, 10)]
    assert run.get("val_loss").steps.tolist() == [50, 100, 150]
    assert run.has("lr")
    assert run.meta["config"] == {"lr": "0.0003", "batch_size": "32"}
    assert run.meta["tags"] == {"team": "nlp"}
    assert run.meta["run_name"] == "baseline" and run.meta["mlflow_run_id"] == "a1b2"


def test_an_empty_uri_uses_mlflows_default(store: _Store) -> None:
    load_run("mlflow:#a1b2")
    assert store.uris == [None]


def test_an_unknown_run_is_one_line_naming_the_run(store: _Store) -> None:
    with pytest.raises(UnreadableInputError, match=r"could not read run zzz .*RESOURCE"):
        load_run("mlflow:http://localhost:5000#zzz")


def test_a_uri_without_a_run_id_is_bad_input() -> None:
    with pytest.raises(InputError, match=r"expected mlflow:<tracking uri>#<run id>"):
        parse_mlflow_uri("mlflow:http://localhost:5000")
    assert parse_mlflow_uri("mlflow:sqlite:///x.db#r1") == ("sqlite:///x.db", "r1")


def test_without_mlflow_a_uri_is_a_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'trainmedic\[mlflow\]'"):
        load_run("mlflow:http://localhost:5000#a1b2")


# The real mlflow (mlflow-skinny is in the dev extra): what it writes reads back equal.

_STEPS = list(range(0, 60, 5))


def _log_real_run(mlflow: Any, uri: str, name: str, lr: float) -> str:
    """One run logged through mlflow's fluent API at ``uri``: params, a tag, two metrics at
    their own steps, a NaN and a value logged twice at one step; returns the run id."""
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("trainmedic-test")
    with mlflow.start_run(run_name=name) as active:
        mlflow.log_params({"lr": lr, "batch_size": 32, "optimizer": "adamw"})
        mlflow.set_tag("team", "nlp")
        for s in _STEPS:
            mlflow.log_metric("train/loss", 2.0 - s / 100 + lr, step=s)
            if s % 10 == 0:
                mlflow.log_metric("val/loss", 2.1 - s / 100 + lr, step=s)
        mlflow.log_metric("train/loss", float("nan"), step=60)
        mlflow.log_metric("learning_rate", lr, step=0)
    return str(active.info.run_id)


def _expect_logged(run: Any, lr: float, run_id: str, name: str) -> None:
    loss = run.get("loss")
    assert loss.steps.tolist() == _STEPS + [60]
    assert loss.values[:-1].tolist() == [2.0 - s / 100 + lr for s in _STEPS]  # bitwise
    assert np.isnan(loss.values[-1])
    val = run.get("val_loss")
    assert val.steps.tolist() == _STEPS[::2]
    assert val.values.tolist() == [2.1 - s / 100 + lr for s in _STEPS[::2]]
    assert run.get("lr").values.tolist() == [lr]
    assert run.meta["config"] == {"lr": str(lr), "batch_size": "32", "optimizer": "adamw"}
    assert run.meta["tags"] == {"team": "nlp"}
    assert run.meta["mlflow_run_id"] == run_id and run.meta["run_name"] == name


@pytest.fixture
def real_mlflow(monkeypatch: pytest.MonkeyPatch) -> Any:
    mlflow = pytest.importorskip("mlflow")
    # mlflow 3 keeps file stores "in maintenance mode" and refuses them without this switch
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    yield mlflow
    mlflow.set_tracking_uri(None)


def test_a_file_store_written_by_real_mlflow_reads_back_equal(real_mlflow: Any,
                                                               tmp_path: Path) -> None:
    uri = (tmp_path / "mlruns").as_uri()
    run_id = _log_real_run(real_mlflow, uri, "real", 3e-4)
    by_folder = load_run(str(tmp_path / "mlruns"))
    by_uri = load_run(f"mlflow:{uri}#{run_id}")  # a file: URI is read by hand too
    client = real_mlflow.tracking.MlflowClient(uri)  # and mlflow's own client agrees
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "val/loss")] == \
        list(zip(by_folder.get("val_loss").steps.tolist(),
                 by_folder.get("val_loss").values.tolist(), strict=True))
    for run in (by_folder, by_uri):
        _expect_logged(run, 3e-4, run_id, "real")


def test_a_database_store_is_read_through_mlflows_client(real_mlflow: Any,
                                                          tmp_path: Path) -> None:
    pytest.importorskip("sqlalchemy")
    pytest.importorskip("alembic")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = _log_real_run(real_mlflow, uri, "db", 1e-3)
    _expect_logged(load_run(f"mlflow:{uri}#{run_id}"), 1e-3, run_id, "db")


def test_a_store_with_two_real_runs_reads_the_newest_and_compare_tells_them_apart(
        real_mlflow: Any, tmp_path: Path) -> None:
    from trainmedic.compare import compare_paths

    uri = (tmp_path / "mlruns").as_uri()
    first = _log_real_run(real_mlflow, uri, "a", 3e-4)
    second = _log_real_run(real_mlflow, uri, "b", 3e-3)
    run = load_run(str(tmp_path / "mlruns"))
    assert run.meta["mlflow_run_id"] == second  # never the two merged
    assert any(n.kind == "other_runs" and first in n.detail for n in run.notes)
    paths = [str(next((tmp_path / "mlruns").glob(f"*/{rid}"))) for rid in (first, second)]
    result = compare_paths(paths)
    assert result.labels == ("a", "b")  # the runs' names, not their 32-digit ids
    rows = {r.key: r for r in result.config.rows}
    assert set(rows) == {"config.lr"}  # the params once, not again as mlflow.lr
    assert rows["config.lr"].values == (str(3e-4), str(3e-3))


def test_a_deleted_run_is_not_read(real_mlflow: Any, tmp_path: Path) -> None:
    uri = (tmp_path / "mlruns").as_uri()
    kept = _log_real_run(real_mlflow, uri, "kept", 3e-4)
    gone = _log_real_run(real_mlflow, uri, "gone", 3e-3)
    real_mlflow.tracking.MlflowClient(uri).delete_run(gone)
    run = load_run(str(tmp_path / "mlruns"))
    assert run.meta["mlflow_run_id"] == kept
    assert any("1 deleted MLflow run" in n.detail for n in run.notes)


def test_a_newer_run_without_metrics_does_not_hide_the_one_that_logged(
        real_mlflow: Any, tmp_path: Path) -> None:
    uri = (tmp_path / "mlruns").as_uri()
    good = _log_real_run(real_mlflow, uri, "good", 3e-4)
    with real_mlflow.start_run(run_name="crashed-at-start"):
        real_mlflow.log_params({"lr": 1.0})  # a run that died before its first metric
    run = load_run(str(tmp_path / "mlruns"))
    assert run.meta["mlflow_run_id"] == good
    assert any("1 MLflow run(s) without a logged metric not read" in n.detail
               for n in run.notes)


def test_a_long_quoted_run_name_reads_as_logged(real_mlflow: Any, tmp_path: Path) -> None:
    """PyYAML folds a long name in meta.yaml and doubles its quotes; the name reads whole."""
    name = ("sweep lr=0.001 batch=32 warmup=2000 weight_decay=0.1 seed=1234 it's a 'quoted' "
            "#name with extra words here")
    uri = (tmp_path / "mlruns").as_uri()
    run_id = _log_real_run(real_mlflow, uri, name, 3e-4)
    run_dir = next((tmp_path / "mlruns").glob(f"*/{run_id}"))
    (run_dir / "tags" / "mlflow.runName").unlink()  # only meta.yaml's copy left
    assert load_run(str(run_dir)).meta["run_name"] == name


def test_an_empty_uri_with_a_file_tracking_uri_reads_by_hand(
        real_mlflow: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = (tmp_path / "mlruns").as_uri()
    run_id = _log_real_run(real_mlflow, uri, "env", 3e-4)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")  # mlflow's client would refuse the store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    _expect_logged(load_run(f"mlflow:#{run_id}"), 3e-4, run_id, "env")


def test_a_uri_mlflows_client_refuses_is_one_line(real_mlflow: Any) -> None:
    with pytest.raises(UnreadableInputError, match=r"mlflow could not read run abc"):
        load_run("mlflow:nosuchscheme://x#abc")


def test_a_file_uri_naming_no_run_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "mlruns" / "0").mkdir(parents=True)
    with pytest.raises(UnreadableInputError, match=r"holds no run abc"):
        load_run(f"mlflow:{(tmp_path / 'mlruns').as_uri()}#abc")
