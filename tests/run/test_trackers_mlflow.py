"""MLflow runs read through mlflow's client by tracking URI (``mlflow:<uri>#<run id>``).

mlflow is not installable offline here: these tests run the reader against a small stand-in
for ``mlflow.tracking.MlflowClient`` (the calls and fields the reader uses, as mlflow 2.x
documents them: ``get_run(run_id).data.params/.tags/.metrics``, ``.info.run_name``,
``get_metric_history(run_id, key)`` -> ``Metric(key, value, timestamp, step)``). The last test
writes a store with the real mlflow and is skipped without it.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


def test_a_file_store_written_by_real_mlflow_reads_back_equal(tmp_path: Path) -> None:
    mlflow = pytest.importorskip("mlflow")
    uri = (tmp_path / "mlruns").as_uri()
    mlflow.set_tracking_uri(uri)
    with mlflow.start_run(run_name="real") as active:
        mlflow.log_params({"lr": 3e-4, "batch_size": 32})
        for s in range(0, 50, 5):
            mlflow.log_metric("train/loss", 2.0 - s / 100, step=s)
            if s % 10 == 0:
                mlflow.log_metric("val/loss", 2.1 - s / 100, step=s)
    run_id = active.info.run_id
    for run in (load_run(str(tmp_path / "mlruns")), load_run(f"mlflow:{uri}#{run_id}")):
        assert run.get("loss").steps.tolist() == list(range(0, 50, 5))
        assert run.get("loss").values.tolist() == [2.0 - s / 100 for s in range(0, 50, 5)]
        assert run.get("val_loss").steps.tolist() == list(range(0, 50, 10))
    assert load_run(f"mlflow:{uri}#{run_id}").meta["config"] == {"lr": "0.0003",
                                                                   "batch_size": "32"}
