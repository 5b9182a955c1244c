"""The minimal watcher records every metric of a tiny real training loop into the run store."""

from __future__ import annotations

import math
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

import trainmedic
from trainmedic.errors import ConfigError
from trainmedic.live import host_memory, watch
from trainmedic.run.store import read_store

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


def test_records_every_metric_of_a_real_loop(tmp_path: pathlib.Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    expected_norms = []
    expected_losses = []
    with watch(model, opt, run_dir=tmp_path) as w:
        for _ in range(30):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            expected_norms.append(float(torch.linalg.vector_norm(
                torch.stack([p.grad.norm() for p in model.parameters()]))))
            expected_losses.append(float(loss.detach()))
            opt.step()
            opt.zero_grad(set_to_none=True)  # grads gone before w.step: the hook saw them
            w.step(loss, batch_size=64)
        w.log({"val_loss": 0.5})
    run = read_store(tmp_path / "metrics.sqlite")
    for metric in ("loss", "lr", "grad_norm", "step_time_s", "data_time_s", "rss_mb",
                   "samples_per_s"):
        s = run.get(metric)
        assert s is not None, metric
        assert s.steps.tolist() == list(range(30)), metric
    np.testing.assert_allclose(run.get("loss").values, expected_losses, rtol=1e-6)  # type: ignore[union-attr]
    np.testing.assert_allclose(run.get("grad_norm").values, expected_norms, rtol=1e-5)  # type: ignore[union-attr]
    assert np.all(run.get("lr").values == 0.05)  # type: ignore[union-attr]
    assert np.all(run.get("rss_mb").values > 10)  # type: ignore[union-attr]
    assert np.all(run.get("step_time_s").values > 0)  # type: ignore[union-attr]
    val = run.get("val_loss")
    assert val is not None and val.steps.tolist() == [29] and val.values.tolist() == [0.5]
    assert not run.has("mem_alloc_mb")  # CPU: no CUDA memory series


def test_data_wait_is_timed(tmp_path: pathlib.Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def slow_loader():  # type: ignore[no-untyped-def]
        for _ in range(8):
            time.sleep(0.03)
            yield torch.randn(4, 8), torch.randn(4, 1)

    with watch(model, opt, run_dir=tmp_path) as w:
        loader = w.wrap_loader(slow_loader())
        for x, y in loader:
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            w.step(loss)
    run = read_store(tmp_path / "metrics.sqlite")
    data = run.get("data_time_s").values  # type: ignore[union-attr]
    step = run.get("step_time_s").values  # type: ignore[union-attr]
    assert len(data) == 8
    assert np.all(data >= 0.028) and np.all(data < 0.5)
    assert np.all(data <= step + 1e-9)  # the wait is part of the step
    assert np.median(data / step) > 0.5


def test_wrap_loader_keeps_len(tmp_path: pathlib.Path) -> None:
    with watch(_model(), None, run_dir=tmp_path) as w:
        assert len(w.wrap_loader([1, 2, 3])) == 3
        assert list(w.wrap_loader([1, 2, 3])) == [1, 2, 3]


def test_explicit_step_start_step_and_extras(tmp_path: pathlib.Path) -> None:
    model = _model()
    with watch(model, None, run_dir=tmp_path, start_step=100) as w:
        assert w.current_step == 100
        w.step(1.0)
        w.step(torch.tensor(2.0), step=50, grad_norm=3.0, tokens_per_s=10.0)
        w.step(4.0)
    run = read_store(tmp_path / "metrics.sqlite")
    assert run.get("loss").steps.tolist() == [100, 50, 51]  # type: ignore[union-attr]
    assert run.get("grad_norm").values.tolist() == [3.0]  # type: ignore[union-attr]
    assert run.get("tokens_per_s").steps.tolist() == [50]  # type: ignore[union-attr]
    assert not run.has("lr")  # no optimizer given


def test_device_values_are_fetched_in_batches(tmp_path: pathlib.Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    with watch(model, opt, run_dir=tmp_path, fetch_every=4) as w:
        for i in range(6):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            w.step(loss)
            assert len(w._rec.pending) == (i + 1) % 4
            assert all(not v.requires_grad for _, d in w._rec.pending for v in d.values())
        w.store.flush()
        assert len(read_store(tmp_path / "metrics.sqlite").get("loss")) == 4  # type: ignore[arg-type]
    assert len(read_store(tmp_path / "metrics.sqlite").get("loss")) == 6  # type: ignore[arg-type]


def test_nonfinite_values_are_recorded(tmp_path: pathlib.Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with watch(model, opt, run_dir=tmp_path) as w:
        opt.zero_grad()
        loss = model(torch.full((2, 8), float("nan"))).sum()
        loss.backward()
        opt.step()
        w.step(loss)
    run = read_store(tmp_path / "metrics.sqlite")
    assert math.isnan(run.get("loss").values[0])  # type: ignore[union-attr]
    assert math.isnan(run.get("grad_norm").values[0])  # type: ignore[union-attr]


def test_loss_scale_from_a_grad_scaler(tmp_path: pathlib.Path) -> None:
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with watch(model, opt, run_dir=tmp_path, scaler=scaler) as w:
        for _ in range(3):
            opt.zero_grad()
            loss = F.mse_loss(model(torch.randn(4, 8)), torch.randn(4, 1))
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            w.step(loss)
    scale = read_store(tmp_path / "metrics.sqlite").get("loss_scale")
    assert scale is not None and scale.values.tolist() == [1024.0] * 3


def test_bad_arguments(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match="start_step"):
        watch(_model(), None, run_dir=tmp_path, start_step=-1)
    with pytest.raises(ConfigError, match="fetch_every"):
        watch(_model(), None, run_dir=tmp_path, fetch_every=0)


def test_unwritable_run_dir_does_not_stop_training(tmp_path: pathlib.Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    model = _model()
    with watch(model, None, run_dir=blocker / "run") as w:
        w.step(1.0)
    assert not w.store.enabled


def test_rss_reader_and_its_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    now = host_memory.rss_mb()
    assert now is not None and now > 10
    monkeypatch.setattr(host_memory, "_HAS_STATM", False)
    peak = host_memory.rss_mb()
    assert peak is not None and peak >= now * 0.5


def test_rss_is_read_again_only_after_the_interval() -> None:
    from trainmedic.live.step_probe import StepProbe

    probe = StepProbe(0.5)
    try:
        t0 = time.perf_counter()
        before = probe.rss(t0)
        assert before is not None and before > 10
        block = np.ones(200 * 2**20 // 8)  # 200 MiB, every page touched
        assert probe.rss(t0 + 0.1) == before  # within the interval: the last reading
        seen = probe.rss(t0 + 1.0)  # past it: read again
        assert seen is not None and seen >= before + 150, (before, seen)
        del block
        every = StepProbe(None)
        assert every.rss(t0) is not None
        every.close()
    finally:
        probe.close()
    probe.close()  # idempotent


def test_gc_pauses_are_timed_and_taken_once() -> None:
    import gc

    from trainmedic.live.step_probe import StepProbe

    probe = StepProbe(0.05)
    try:
        junk = [[i] for i in range(300_000)]  # tracked objects: a full collection walks them
        probe.gc_s()  # (making them ran collections of their own: not this test's)
        t = time.perf_counter()
        gc.collect()
        took = time.perf_counter() - t
        del junk
        got = probe.gc_s()
        assert 0 < got <= took
        assert probe.gc_s() == 0.0  # taken: the next step starts from zero
    finally:
        probe.close()
    assert probe._gc._on_gc not in gc.callbacks


@pytest.mark.parametrize("rss_interval_s", [None, 0.05])
def test_rss_and_gc_time_are_recorded_every_step_without_a_thread(
        tmp_path: pathlib.Path, rss_interval_s: float | None) -> None:
    import gc
    import threading

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    threads = {t.name for t in threading.enumerate()}
    with watch(model, opt, run_dir=tmp_path, rss_interval_s=rss_interval_s,
               alert_every=None) as w:
        assert not any(t.name == "trainmedic-rss" for t in threading.enumerate())
        for i in range(5):
            opt.zero_grad()
            F.mse_loss(model(torch.randn(4, 8)), torch.randn(4, 1)).backward()
            opt.step()
            if i == 3:
                gc.collect()
            w.step(1.0)
    assert {t.name for t in threading.enumerate()} <= threads | {"MainThread"}
    run = read_store(tmp_path / "metrics.sqlite")
    rss, gc_time = run.get("rss_mb"), run.get("gc_time_s")
    assert rss is not None and rss.steps.tolist() == list(range(5))
    assert np.all(rss.values > 10)
    assert gc_time is not None and gc_time.steps.tolist() == list(range(5))
    assert gc_time.values[3] > 0 and gc_time.values[3] == gc_time.values.max()


def test_rows_are_batched_but_stored_in_step_order(tmp_path: pathlib.Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(8, 8), torch.randn(8, 1)
    losses = []
    with watch(model, opt, run_dir=tmp_path, alert_every=10, alert_window=20,
               param_every=None) as w:
        for i in range(45):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if i == 20:
                w.step(loss, extra_metric=float(i))  # the general path, between batched rows
            else:
                w.step(loss, batch_size=8)
            if i == 30:
                w.log({"val_loss": 1.5})
            if i % 10 == 9:  # a live-alert pass is handed the window at this step: every
                assert w._rec.rows == []  # row up to here was fed to it first
        w.flush()
        run = read_store(tmp_path / "metrics.sqlite")
        assert run.get("loss").steps.tolist() == list(range(45))  # type: ignore[union-attr]
    run = read_store(tmp_path / "metrics.sqlite")
    loss = run.get("loss")
    assert loss is not None and loss.steps.tolist() == list(range(45))
    np.testing.assert_allclose(loss.values, losses, rtol=1e-6)
    for metric in ("lr", "grad_norm", "step_time_s", "data_time_s", "rss_mb"):
        assert run.get(metric).steps.tolist() == list(range(45)), metric  # type: ignore[union-attr]
    rates = run.get("samples_per_s")
    assert rates is not None and 20 not in rates.steps.tolist() and len(rates) == 44
    np.testing.assert_allclose(rates.values, 8 / run.get("step_time_s").values[  # type: ignore[union-attr]
        [i for i in range(45) if i != 20]], rtol=1e-9)
    assert run.get("extra_metric").steps.tolist() == [20]  # type: ignore[union-attr]
    assert run.get("val_loss").steps.tolist() == [30]  # type: ignore[union-attr]


def test_importing_watch_does_not_import_torch() -> None:
    src = str(pathlib.Path(trainmedic.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=src)
    code = "import sys, trainmedic.live\nassert 'torch' not in sys.modules\nprint('ok')"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_step_does_not_sync(tmp_path: pathlib.Path) -> None:
    """On a GPU, w.step() must not force a host-device sync (values are fetched in batches)."""
    dev = torch.device("cuda")
    model = _model().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 8, device=dev), torch.randn(64, 1, device=dev)
    with watch(model, opt, run_dir=tmp_path, fetch_every=10, param_every=5,
               layer_every=5) as w:
        for i in range(25):
            if i >= 1 and i % 10 != 9:  # the batch fetch itself is the one allowed sync
                torch.cuda.set_sync_debug_mode("error")
            try:  # the whole step: forward hooks, optimizer hooks and w.step()
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                w.step(loss, batch_size=64)
            finally:
                torch.cuda.set_sync_debug_mode("default")
    run = read_store(tmp_path / "metrics.sqlite")
    for metric in ("loss", "grad_norm", "mem_alloc_mb", "mem_peak_mb", "mem_reserved_mb",
                   "compute_time_s"):
        assert len(run.get(metric)) == 25, metric  # type: ignore[arg-type]
    assert len(run.get("step_time_s")) == 24  # type: ignore[arg-type]  # CUDA events: pairs
    assert len(run.get("update_ratio")) == 5  # type: ignore[arg-type]
    assert any(m.startswith("layer/") for m in run.metrics())


def test_lr_is_the_one_the_step_used_when_the_scheduler_moves_first(
        tmp_path: pathlib.Path) -> None:
    # optimizer.step(); scheduler.step(); w.step(loss): the lr in the optimizer is already
    # the next step's by the time w.step runs; the step's own is recorded
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.1 * (s + 1))
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    used = []
    with watch(model, opt, run_dir=tmp_path) as w:
        for _ in range(5):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            used.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
            w.step(loss, batch_size=16)
    lr = read_store(tmp_path / "metrics.sqlite").get("lr")
    assert lr is not None
    np.testing.assert_allclose(lr.values, used)


def test_mfu_is_the_given_flops_over_each_step_time_over_the_peak(
    tmp_path: pathlib.Path,
) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    flops, hardware, peak = 3.0e6, 4.0e6, 2.0e9
    with watch(model, opt, run_dir=tmp_path, flops_per_step=flops,
               hardware_flops_per_step=hardware, peak_flops_per_s=peak) as w:
        for i in range(12):
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if i == 6:
                time.sleep(0.05)  # a slow step: its MFU falls in proportion
            w.step(loss, batch_size=64)
    run = read_store(tmp_path / "metrics.sqlite")
    mfu, step = run.get("mfu"), run.get("step_time_s")
    assert mfu is not None and step is not None
    np.testing.assert_allclose(mfu.values, flops / step.values / peak, rtol=1e-9)
    assert mfu.values[6] < 0.5 * np.median(mfu.values)
    hfu = run.get("hfu")  # the same steps with the recompute's FLOPs counted
    assert hfu is not None
    np.testing.assert_allclose(hfu.values, hardware / step.values / peak, rtol=1e-9)


def test_mfu_needs_both_flops_and_peak(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match="flops_per_step was given alone"):
        watch(_model(), None, run_dir=tmp_path, flops_per_step=1e9)
    with pytest.raises(ConfigError, match="hardware_flops_per_step was given alone"):
        watch(_model(), None, run_dir=tmp_path, hardware_flops_per_step=1e9)
    with pytest.raises(ConfigError, match="peak_flops_per_s was given alone"):
        watch(_model(), None, run_dir=tmp_path, peak_flops_per_s=1e9)
    with pytest.raises(ConfigError, match="peak_flops_per_s must be"):
        watch(_model(), None, run_dir=tmp_path, flops_per_step=1e9, peak_flops_per_s=-1.0)
