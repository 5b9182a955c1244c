"""``CheckpointManager``: a resumed run continues exactly as the uninterrupted one (the oracle:
the same objects trained on), async saves snapshot the state at ``save()``, errors surface,
damaged checkpoints are skipped on load, configs are compared, and two gloo ranks save and load
together (rank 0 writes the model, every rank its training state)."""

from __future__ import annotations

import copy
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from trainmedic.checkpoint import (
    CheckpointManager,
    ConfigMismatchError,
    DamagedCheckpointError,
    NoCheckpointError,
    read_manifest,
    verify,
)
from trainmedic.checkpoint import commit as commit_mod
from trainmedic.diagnose.onset import divergence_onset
from trainmedic.errors import ConfigError, InputError

torch = pytest.importorskip("torch")


def _batches(n: int = 12) -> list[tuple[Any, Any]]:
    g = torch.Generator().manual_seed(1234)
    return [(torch.randn(8, 6, generator=g), torch.randn(8, 1, generator=g)) for _ in range(n)]


BATCHES = _batches()


def _objects(seed: int = 0) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16),
                                torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
    return {"model": model, "optimizer": opt, "scheduler": sched, "scaler": scaler}


def _train(objs: dict[str, Any], steps: range) -> list[float]:
    model, opt, sched, scaler = (objs[k] for k in ("model", "optimizer", "scheduler", "scaler"))
    losses = []
    for i in steps:
        x, y = BATCHES[i]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        losses.append(loss.item())
    return losses


def _same_state(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(
            _same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_state(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_resume_continues_exactly(tmp_path: Path, async_save: bool) -> None:
    objs = _objects()
    _train(objs, range(0, 4))
    mgr = CheckpointManager(tmp_path, async_save=async_save, config={"lr": 1e-2})
    path = mgr.save(4, {**objs, "train": {"step": 4, "rng": torch.get_rng_state()}})
    mgr.wait()
    assert path == tmp_path / "step-00000004" and verify(path).ok
    straight = _train(objs, range(4, 10))  # the uninterrupted run: the oracle

    fresh = _objects(seed=99)  # other weights, empty optimizer state
    loaded = mgr.load(fresh)
    assert loaded.path == path and loaded.step == 4 and loaded.train_rank == 0
    assert loaded.train["step"] == 4
    resumed = _train(fresh, range(4, 10))
    assert resumed == straight  # bitwise
    for key in ("model", "optimizer", "scheduler", "scaler"):
        assert _same_state(fresh[key].state_dict(), objs[key].state_dict()), key


def test_manifest_records_the_save(tmp_path: Path) -> None:
    objs = _objects()
    mgr = CheckpointManager(tmp_path, config={"lr": 0.01, "opt": {"betas": (0.9, 0.99)}})
    path = mgr.save(12, {**objs, "train": {"step": 12}})
    m = read_manifest(path)
    assert (m.step, m.world_size, m.format, m.train_state) == (12, 1, "torch", True)
    assert m.entries == {k: f"{k}.pt" for k in ("model", "optimizer", "scheduler", "scaler")}
    assert sorted(f.path for f in m.files) == sorted(
        ["model.pt", "optimizer.pt", "scheduler.pt", "scaler.pt", "train_state.rank0.pt"])
    assert m.config == {"lr": 0.01, "opt": {"betas": [0.9, 0.99]}}
    assert m.torch_version == torch.__version__
    assert m.config_hash is not None and m.config_hash.startswith("sha256:")
    # Every file loads with weights_only=True: plain containers and tensors only.
    for f in m.files:
        torch.load(path / f.path, weights_only=True)


def _hold_background_copy(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Make async saves wait for the returned event before copying the deferred tensors."""
    from trainmedic.checkpoint import staging

    gate = threading.Event()
    real_finish = staging.StagedState.finish

    def held(self: Any) -> Any:
        gate.wait(timeout=30)
        return real_finish(self)

    monkeypatch.setattr(staging.StagedState, "finish", held)
    return gate


def test_async_save_snapshots_the_state_at_save(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    objs = _objects()
    _train(objs, range(0, 2))
    model, opt = objs["model"], objs["optimizer"]
    want_model = copy.deepcopy(model.state_dict())
    want_opt = copy.deepcopy(opt.state_dict())
    mgr = CheckpointManager(tmp_path, async_save=True, keep_last=None, defer_copy=True)
    gate = _hold_background_copy(monkeypatch)
    first = mgr.save(2, {"model": model, "optimizer": opt})
    # Training goes on at once (the forward updates BatchNorm's buffers, staged already); the
    # next optimizer.step() waits until the parameters and moments have been copied.
    opened_at: list[float] = []

    def open_gate() -> None:
        opened_at.append(time.perf_counter())
        gate.set()

    threading.Timer(0.3, open_gate).start()
    _train(objs, range(2, 4))
    done_at = time.perf_counter()
    mgr.wait()
    assert opened_at and done_at >= opened_at[0]  # the step waited for the copy
    assert _same_state(torch.load(first / "model.pt", weights_only=True), want_model)
    assert _same_state(torch.load(first / "optimizer.pt", weights_only=True), want_opt)
    # The staging buffers are reused: the next save holds the new values, the first is intact.
    monkeypatch.undo()
    mgr.defer_copy = False  # and the default, eager copy gives the same files
    now = copy.deepcopy(model.state_dict())
    second = mgr.save(3, {"model": model, "optimizer": opt})
    mgr.wait()
    assert _same_state(torch.load(second / "model.pt", weights_only=True), now)
    assert verify(first).ok and verify(second).ok
    assert _same_state(torch.load(first / "model.pt", weights_only=True), want_model)


def test_default_async_save_copies_everything_before_returning(tmp_path: Path) -> None:
    objs = _objects()
    _train(objs, range(0, 2))
    model, opt = objs["model"], objs["optimizer"]
    want_model = copy.deepcopy(model.state_dict())
    want_opt = copy.deepcopy(opt.state_dict())
    mgr = CheckpointManager(tmp_path, async_save=True, keep_last=None)
    path = mgr.save(2, {"model": model, "optimizer": opt})
    with torch.no_grad():  # anything may change once save() has returned
        for p in model.parameters():
            p.add_(1.0)
        for st in opt.state.values():
            st["exp_avg"].mul_(-3.0)
    mgr.wait()
    assert _same_state(torch.load(path / "model.pt", weights_only=True), want_model)
    assert _same_state(torch.load(path / "optimizer.pt", weights_only=True), want_opt)


def test_async_save_refuses_parameters_changed_outside_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objs = _objects()
    _train(objs, range(0, 2))
    model, opt = objs["model"], objs["optimizer"]
    mgr = CheckpointManager(tmp_path, async_save=True, keep_last=None, defer_copy=True)
    gate = _hold_background_copy(monkeypatch)
    mgr.save(2, {"model": model, "optimizer": opt})
    with torch.no_grad():  # a weight edit outside optimizer.step(): the copy could be torn
        next(model.parameters()).add_(1.0)
    gate.set()
    with pytest.raises(InputError, match="changed in place between save"):
        mgr.wait()
    assert mgr.latest() is None  # nothing torn was committed
    # Training and saving go on.
    _train(objs, range(2, 3))
    path = mgr.save(3, {"model": model, "optimizer": opt})
    mgr.wait()
    assert verify(path).ok


def test_tied_weights_stay_tied(tmp_path: Path) -> None:
    emb = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    mgr = CheckpointManager(tmp_path, async_save=True)
    path = mgr.save(1, {"model": model})
    mgr.wait()
    sd = torch.load(path / "model.pt", weights_only=True)
    assert sd["emb.weight"].data_ptr() == sd["head.weight"].data_ptr()


def test_async_errors_surface_on_wait_and_on_the_next_save(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objs = _objects()
    real = commit_mod.PendingCheckpoint.write_torch

    def broken(self: Any, name: str, obj: Any, *, rank: int) -> Any:
        raise commit_mod.write_error(self.root, self.step, name, OSError(28, "No space left"))

    mgr = CheckpointManager(tmp_path, async_save=True)
    monkeypatch.setattr(commit_mod.PendingCheckpoint, "write_torch", broken)
    mgr.save(1, {"model": objs["model"]})
    with pytest.raises(InputError, match="cannot write checkpoint step 1"):
        mgr.wait()
    mgr.wait()  # reported once
    mgr.save(2, {"model": objs["model"]})
    with pytest.raises(InputError, match="cannot write checkpoint step 2"):
        mgr.save(3, {"model": objs["model"]})  # the earlier failure, before starting step 3
    monkeypatch.setattr(commit_mod.PendingCheckpoint, "write_torch", real)
    path = mgr.save(4, {"model": objs["model"]})
    mgr.wait()
    assert verify(path).ok
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000004"]


def test_load_skips_a_damaged_newest_checkpoint(tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    objs = _objects()
    mgr = CheckpointManager(tmp_path, keep_last=None)
    mgr.save(1, objs)
    want = copy.deepcopy(objs["model"].state_dict())
    _train(objs, range(0, 1))
    bad = mgr.save(2, objs)
    f = bad / "optimizer.pt"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    fresh = _objects(seed=5)
    with caplog.at_level(logging.WARNING):
        loaded = mgr.load(fresh)
    assert loaded.step == 1 and _same_state(fresh["model"].state_dict(), want)
    assert "step-00000002" in caplog.text and "optimizer.pt" in caplog.text
    with pytest.raises(DamagedCheckpointError, match="optimizer.pt: content hash") as info:
        mgr.load(_objects(), path=bad)
    assert info.value.path == str(bad)


def test_nothing_to_load(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path / "none")
    assert mgr.latest() is None
    with pytest.raises(NoCheckpointError, match="no such folder"):
        mgr.load(_objects())
    (tmp_path / "none").mkdir()
    with pytest.raises(NoCheckpointError, match="no committed checkpoint"):
        mgr.load(_objects())


def test_another_config_is_refused_with_the_keys_named(tmp_path: Path) -> None:
    objs = _objects()
    CheckpointManager(tmp_path, config={"lr": 0.01, "data": {"seq": 128}, "seed": 1}).save(
        1, objs)
    other = CheckpointManager(tmp_path, config={"lr": 0.02, "data": {"seq": 256}, "seed": 1})
    with pytest.raises(ConfigMismatchError) as info:
        other.load(_objects())
    assert info.value.differences == ["data.seq: 128 in the checkpoint, 256 now",
                                      "lr: 0.01 in the checkpoint, 0.02 now"]
    assert "force=True" in str(info.value)
    assert other.load(_objects(), force=True).step == 1
    assert CheckpointManager(tmp_path).load(_objects()).step == 1  # no config: no comparison


def test_state_that_cannot_be_saved_is_refused(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    objs = _objects()
    mgr = CheckpointManager(tmp_path)
    with pytest.raises(ConfigError, match=r"state\['train'\]\['rng'\]\[1\]: a numpy.ndarray"):
        mgr.save(1, {"model": objs["model"], "train": {"rng": ("MT", np.zeros(3))}})
    with pytest.raises(ConfigError, match=r"state\['thing'\]: a list has no state_dict"):
        mgr.save(1, {"thing": [1, 2]})
    with pytest.raises(ConfigError, match="state key '../x'"):
        mgr.save(1, {"../x": objs["model"]})
    with pytest.raises(ConfigError, match="step must be an integer"):
        mgr.save(-1, objs)
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_load_needs_what_was_saved_and_a_fitting_model(tmp_path: Path) -> None:
    objs = _objects()
    mgr = CheckpointManager(tmp_path)
    mgr.save(1, {"model": objs["model"], "optimizer": objs["optimizer"]})
    with pytest.raises(InputError, match="holds no scheduler"):
        mgr.load(_objects())
    wrong = torch.nn.Linear(3, 3)
    with pytest.raises(InputError, match=r"does not fit state\['model'\]") as info:
        mgr.load({"model": wrong})
    assert info.value.path.endswith("model.pt")


def test_retention_and_a_rolled_back_save(tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    objs = _objects()
    mgr = CheckpointManager(tmp_path, keep_last=2)
    for s in (1, 2, 3, 4):
        mgr.save(s, {"model": objs["model"]})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000003", "step-00000004"]
    mgr1 = CheckpointManager(tmp_path, keep_last=1)
    with caplog.at_level(logging.WARNING):
        mgr1.save(2, {"model": objs["model"]})  # a run rolled back to step 2
    assert "step 4 already exists" in caplog.text
    # keep_last=1 keeps the highest step and never deletes the one just saved
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000002", "step-00000004"]


def test_bad_arguments() -> None:
    for kw, field in (({"keep_last": 0}, "keep_last"), ({"async_save": 1}, "async_save"),
                      ({"sharded": "yes"}, "sharded"), ({"config": [1]}, "config"),
                      ({"config": {"f": object()}}, "config")):
        with pytest.raises(ConfigError, match=field):
            CheckpointManager("x", **kw)


def test_sharded_format_single_process(tmp_path: Path) -> None:
    pytest.importorskip("trainmedic.checkpoint.sharded")
    objs = _objects()
    _train(objs, range(0, 2))
    mgr = CheckpointManager(tmp_path, sharded=True)
    path = mgr.save(2, {**objs, "train": {"step": 2}})
    m = read_manifest(path)
    assert m.format == "dcp" and m.entries["model"] == "dcp" and m.entries["optimizer"] == "dcp"
    assert any(f.path.startswith("dcp/") for f in m.files)
    assert verify(path).ok, verify(path).problems
    straight = _train(objs, range(2, 6))
    fresh = _objects(seed=3)
    assert mgr.load(fresh).step == 2
    assert _train(fresh, range(2, 6)) == straight


# --------------------------------------------------------------------------- two ranks
def _rank_case(rank: int, root: Path, case: str) -> dict[str, Any]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(),
                                    torch.nn.Linear(8, 1)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def steps(n: int) -> None:
        for i in range(n):
            x, y = BATCHES[(2 * i + rank) % len(BATCHES)]
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x[:, :6]), y).backward()
            opt.step()

    steps(3)
    mgr = CheckpointManager(root, keep_last=None, sharded=False, async_save=case == "async")
    out: dict[str, Any] = {}
    if case == "fail" and rank == 1:
        def broken(self: Any, name: str, obj: Any, *, rank: int) -> Any:
            raise commit_mod.write_error(self.root, self.step, name, OSError(28, "disk full"))
        commit_mod.PendingCheckpoint.write_torch = broken  # type: ignore[method-assign]
    try:
        out["path"] = str(mgr.save(3, {"model": model, "optimizer": opt,
                                       "train": {"rank": rank, "rng": torch.get_rng_state()}}))
        mgr.wait()
    except InputError as exc:
        out["error"] = str(exc)
        return out
    want = copy.deepcopy(model.state_dict())
    steps(2)
    loaded = mgr.load({"model": model, "optimizer": opt})
    out.update(step=loaded.step, train_rank=loaded.train_rank, train=loaded.train["rank"],
               equal=_same_state(model.state_dict(), want))
    return out


def _rank_worker(rank: int, world: int, init: str, base: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    try:
        results = {case: _rank_case(rank, Path(base) / case, case)
                   for case in ("sync", "async", "fail")}
        Path(base, f"rank{rank}.json").write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()
    # Done: leave without the exit-time destructors, where gloo's threads once aborted a rank
    # on a 2-core CI machine (see sharded_worker.py).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[Any]]]:
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this torch build has no gloo backend")
    import torch.multiprocessing as mp

    base = tmp_path_factory.mktemp("ranks")
    mp.spawn(_rank_worker, args=(2, f"file://{base / 'store'}", str(base)), nprocs=2,
             join=True)
    yield base, [json.loads((base / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow
@pytest.mark.parametrize("case", ["sync", "async"])
def test_two_ranks_save_and_load_together(two_ranks: tuple[Path, list[Any]], case: str) -> None:
    base, results = two_ranks
    path = base / case / "step-00000003"
    for rank, res in enumerate(results):
        assert res[case]["path"] == str(path), res
        assert res[case]["step"] == 3 and res[case]["equal"]
        assert res[case]["train_rank"] == rank and res[case]["train"] == rank
    m = read_manifest(path)
    assert m.world_size == 2 and m.format == "torch" and m.train_state
    assert {(f.path, f.rank) for f in m.files} == {
        ("model.pt", 0), ("optimizer.pt", 0), ("train_state.rank0.pt", 0),
        ("train_state.rank1.pt", 1)}
    assert verify(path).ok
    assert sorted(p.name for p in (base / case).iterdir()) == ["step-00000003"]


@pytest.mark.slow
def test_a_failing_rank_fails_the_save_on_every_rank(two_ranks: tuple[Path, list[Any]]) -> None:
    base, results = two_ranks
    assert "cannot write checkpoint step 3 (train_state.rank1.pt: disk full)" in \
        results[1]["fail"]["error"]
    assert "checkpoint step 3 was not saved: rank 1 failed" in results[0]["fail"]["error"]
    assert list((base / "fail").iterdir()) == []  # the temporary folder was removed


def test_retention_keeps_the_newest_finite_checkpoint(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    objs = _objects()
    with CheckpointManager(tmp_path, keep_last=2) as mgr:
        for step in (10, 20):
            mgr.save(step, objs)
        assert read_manifest(tmp_path / "step-00000020").finite is True
        with torch.no_grad():
            objs["model"][0].weight.fill_(float("nan"))  # the run went NaN and kept saving
        with caplog.at_level(logging.WARNING, logger="trainmedic.checkpoint"):
            for step in (30, 40, 50):
                mgr.save(step, objs)
        assert "NaN/inf" in caplog.text and "model.0.weight" in caplog.text
        assert read_manifest(tmp_path / "step-00000050").finite is False
        kept = sorted(p.name for p in tmp_path.iterdir())
        # the two newest, and step 20: the newest one whose state was finite
        assert kept == ["step-00000020", "step-00000040", "step-00000050"]
        assert mgr.latest() == tmp_path / "step-00000020"


def test_with_the_run_latest_and_retention_respect_the_divergence(tmp_path: Path) -> None:
    from trainmedic.run.store import RunStore

    run_dir = tmp_path / "run"
    with RunStore(run_dir) as store:  # the loss went non-finite at step 25
        for s in range(60):
            store.log(s, {"loss": 2.0 - 0.01 * s if s < 25 else float("nan")})
    objs = _objects()
    root = tmp_path / "ckpt"
    onset = lambda: divergence_onset(run_dir)  # noqa: E731 - what a caller passes
    with CheckpointManager(root, keep_last=2, trusted_before=onset) as mgr:
        for step in (10, 20, 30, 40, 50):
            mgr.save(step, objs)  # finite weights (a NaN guard skipped the bad updates)
        kept = sorted(p.name for p in root.iterdir())
        assert kept == ["step-00000020", "step-00000040", "step-00000050"]
        assert mgr.latest() == root / "step-00000020"
    assert CheckpointManager(root).latest() == root / "step-00000050"  # without the run


def test_with_the_run_load_resumes_from_before_the_divergence(tmp_path: Path) -> None:
    from trainmedic.run.store import RunStore

    run_dir = tmp_path / "run"
    with RunStore(run_dir) as store:
        for s in range(60):
            store.log(s, {"loss": 2.0 - 0.01 * s if s < 25 else float("inf")})
    root = tmp_path / "ckpt"
    objs = _objects()
    with CheckpointManager(root, keep_last=None) as mgr:
        for step in (10, 20, 30):
            mgr.save(step, objs)
    loaded = CheckpointManager(root, trusted_before=lambda: divergence_onset(run_dir)).load(
        _objects(seed=1))
    assert loaded.step == 20
    assert CheckpointManager(root).load(_objects(seed=1)).step == 30


def test_a_run_dir_with_no_run_yet_is_no_divergence(tmp_path: Path) -> None:
    from trainmedic.run.store import RunStore

    root = tmp_path / "ckpt"
    with CheckpointManager(root, keep_last=None) as mgr:
        mgr.save(10, _objects())
    missing = CheckpointManager(  # a fresh run: its store does not exist yet
        root, trusted_before=lambda: divergence_onset(tmp_path / "not-yet"))
    assert missing.latest() == root / "step-00000010"
    assert missing.load(_objects(seed=1)).step == 10
    with RunStore(tmp_path / "empty"):
        pass  # a store that has no rows yet
    empty = CheckpointManager(root, trusted_before=lambda: divergence_onset(tmp_path / "empty"))
    assert empty.latest() == root / "step-00000010"


def test_trusted_before_must_be_callable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="trusted_before"):
        CheckpointManager(tmp_path / "ckpt", trusted_before=120)  # type: ignore[arg-type]


@pytest.mark.parametrize("kw,field", [({"keep_last": 0}, "keep_last"),
                                      ({"async_save": "yes"}, "async_save"),
                                      ({"sync_files": 1}, "sync_files"),
                                      ({"sharded": "dcp"}, "sharded"),
                                      ({"recipe_config": [1]}, "config"),
                                      ({"trusted_before": 3}, "trusted_before")])
def test_checkpoint_config_names_the_field(kw: dict, field: str) -> None:
    from trainmedic.checkpoint import CheckpointConfig

    with pytest.raises(ConfigError, match=field):
        CheckpointConfig(**kw)


def test_a_manager_from_a_frozen_config(tmp_path: Path) -> None:
    from dataclasses import FrozenInstanceError

    from trainmedic.checkpoint import CheckpointConfig

    recipe_cfg = {"lr": 1e-3}
    cfg = CheckpointConfig(keep_last=1, recipe_config=recipe_cfg)
    recipe_cfg["lr"] = 1.0  # the config holds a snapshot
    with pytest.raises(FrozenInstanceError):
        cfg.keep_last = 2  # type: ignore[misc]
    objs = _objects()
    with CheckpointManager.from_config(tmp_path / "ckpt", cfg) as mgr:
        assert mgr.cfg == cfg and mgr.cfg.recipe_config == {"lr": 1e-3}
        for step in (1, 2):
            mgr.save(step, objs)
    assert [p.name for p in sorted((tmp_path / "ckpt").glob("step-*"))] == ["step-00000002"]
