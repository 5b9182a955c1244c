"""The demo: config validation, the shipped corpus, and every fault runs (few steps, fast).

Whether each fault is *recognized* at the default length is tested, with the detectors, in
tests/diagnose/test_trained_runs.py.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import trainmedic
from trainmedic.demo import DEFAULT_STEPS, FAULTS, DemoConfig, run_demo
from trainmedic.demo.corpus import CORPUS_FILE, generate_corpus, load_corpus
from trainmedic.errors import ConfigError
from trainmedic.run.store import RunStore, StoreLockedError, read_store

SRC = pathlib.Path(trainmedic.__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


@pytest.mark.parametrize(("field", "value"), [
    ("fault", "explode"), ("fault", ""), ("steps", 5), ("steps", 2.5), ("steps", True),
    ("seed", -1), ("batch_size", 0), ("context_len", 4), ("context_len", 4096),
    ("eval_every", 0), ("num_threads", 0), ("resume", 1), ("force", "yes"),
])
def test_bad_config_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        DemoConfig(**{field: value})  # type: ignore[arg-type]


def test_config_defaults_and_every_field_documented() -> None:
    cfg = DemoConfig()
    assert cfg.fault == "none" and cfg.steps == DEFAULT_STEPS
    assert cfg.run_dir == pathlib.Path("trainmedic-demo") / "none"
    assert DemoConfig(out_dir="x").run_dir == pathlib.Path("x")  # type: ignore[arg-type]
    assert FAULTS[0] == "none" and set(FAULTS) == {
        "none", "diverge", "spike", "flat", "overfit", "stall", "leak"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.steps = 3  # type: ignore[misc]
    source = (SRC / "trainmedic" / "demo" / "runner.py").read_text()
    for f in dataclasses.fields(DemoConfig):
        block = source.split(f"    {f.name}:", 1)[1].split("\n", 2)[1]
        assert block.strip().startswith('"""'), f"{f.name} has no docstring"


def test_shipped_corpus_is_the_generated_one() -> None:
    shipped = (SRC / "trainmedic" / "demo" / CORPUS_FILE).read_text(encoding="utf-8")
    assert shipped == generate_corpus()
    assert load_corpus() == shipped
    assert len(shipped.encode()) <= 200_000
    assert shipped.isascii()


@pytest.mark.parametrize("fault", FAULTS)
def test_every_fault_runs_and_records(fault: str, tmp_path: pathlib.Path) -> None:
    calls: list[tuple[int, int]] = []
    run_dir = run_demo(DemoConfig(fault=fault, steps=20, eval_every=5, out_dir=tmp_path / fault),
                       progress=lambda done, total: calls.append((done, total)))
    assert run_dir == tmp_path / fault
    assert calls[0] == (1, 20) and calls[-1] == (20, 20) and len(calls) == 20
    run = read_store(run_dir / "metrics.sqlite")
    for metric in ("loss", "lr", "grad_norm", "step_time_s", "data_time_s", "rss_mb"):
        s = run.get(metric)
        assert s is not None and s.steps.tolist() == list(range(20)), metric
    val = run.get("val_loss")
    assert val is not None and val.steps.tolist() == [4, 9, 14, 19]
    assert run.meta["demo_fault"] == fault
    assert np.isfinite(run.get("loss").values[0])  # type: ignore[union-attr]


def test_rerun_replaces_the_store_instead_of_appending(tmp_path: pathlib.Path) -> None:
    cfg = DemoConfig(steps=10, out_dir=tmp_path)
    run_demo(cfg)
    run_demo(cfg)
    loss = read_store(tmp_path / "metrics.sqlite").get("loss")
    assert loss is not None and loss.steps.tolist() == list(range(10))


def test_same_seed_same_losses(tmp_path: pathlib.Path) -> None:
    a = run_demo(DemoConfig(steps=12, seed=3, out_dir=tmp_path / "a"))
    b = run_demo(DemoConfig(steps=12, seed=3, out_dir=tmp_path / "b"))
    la = read_store(a / "metrics.sqlite").get("loss")
    lb = read_store(b / "metrics.sqlite").get("loss")
    assert la is not None and lb is not None
    np.testing.assert_allclose(la.values, lb.values, rtol=1e-5)


def test_threads_are_restored(tmp_path: pathlib.Path) -> None:
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    run_demo(DemoConfig(steps=10, out_dir=tmp_path, num_threads=1))
    assert torch.get_num_threads() == before


def test_importing_demo_does_not_import_torch() -> None:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    code = "import sys, trainmedic.demo\nassert 'torch' not in sys.modules\nprint('ok')"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


def test_a_demo_refuses_an_out_folder_another_demo_is_writing(tmp_path: pathlib.Path) -> None:
    from trainmedic.demo.runner import _clear_store

    store = RunStore(tmp_path)
    store.log(0, {"loss": 1.0})
    store.flush()
    with pytest.raises(StoreLockedError):
        _clear_store(tmp_path)
    assert read_store(store.path).get("loss") is not None
    store.close()
    _clear_store(tmp_path)
    assert not store.path.exists()
