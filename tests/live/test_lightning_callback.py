"""The Lightning callback, run with the real Lightning Trainer on a tiny model on CPU."""

from __future__ import annotations

import importlib
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning.pytorch")

from trainmedic.diagnose.engine import diagnose  # noqa: E402
from trainmedic.errors import ConfigError  # noqa: E402
from trainmedic.live.lightning_callback import TrainmedicCallback, val_row  # noqa: E402
from trainmedic.live.norms import GradNorm  # noqa: E402
from trainmedic.run.loader import load_paths  # noqa: E402


@pytest.fixture(autouse=True)
def _few_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class _Net(L.LightningModule):
    """A small MLP regressor that records, for the test, what it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                       torch.nn.Linear(16, 1))
        self.raw_losses: list[float] = []
        self.pre_clip_norms: list[float] = []
        self.lrs: list[float] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.raw_losses.append(loss.item())
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))
        self.log("val_mae", (self.net(x) - y).abs().mean())

    def on_before_optimizer_step(self, optimizer):
        # Lightning calls this after the callbacks' hook and before it clips.
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        self.pre_clip_norms.append(torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(g) for g in grads])).item())
        self.lrs.append(optimizer.param_groups[0]["lr"])

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def _loader(n, seed, batch_size=8, shuffle=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = x[:, :1] * 2.0 - x[:, 1:2] + 0.1 * torch.randn(n, 1, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                       batch_size=batch_size, shuffle=shuffle, generator=g)


def _fit(tmp_path, *, accum, clip, steps=20, val_every=None, more_callbacks=(),
         **watch_kwargs):
    torch.manual_seed(0)
    module = _Net()
    cb = TrainmedicCallback(run_dir=tmp_path / "run", **watch_kwargs)
    trainer = L.Trainer(
        max_steps=steps, accelerator="cpu", devices=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        accumulate_grad_batches=accum, gradient_clip_val=clip,
        val_check_interval=val_every, limit_val_batches=2 if val_every else 0,
        num_sanity_val_steps=2 if val_every else 0, callbacks=[cb, *more_callbacks],
    )
    trainer.fit(module, _loader(640, 1),
                _loader(32, 2, shuffle=False) if val_every else None)
    assert cb.watcher is None  # closed at on_train_end
    return load_paths([str(tmp_path / "run")]), module


def _series(run, name):
    s = run.get(name, None)
    return dict(zip(s.steps.tolist(), s.values.tolist(), strict=True))


def test_accumulated_clipped_run_records_every_optimizer_step(tmp_path, monkeypatch):
    steps, accum, clip = 20, 2, 0.05
    passes = []  # how often the gradients are read for a norm: once per step
    norm_of_grads = GradNorm.__call__
    monkeypatch.setattr(GradNorm, "__call__",
                        lambda self: passes.append(1) or norm_of_grads(self))
    run, module = _fit(tmp_path, accum=accum, clip=clip, steps=steps, val_every=10)
    assert len(passes) == steps
    want = list(range(1, steps + 1))  # trainer.global_step after each optimizer step
    for name in ("loss", "lr", "grad_norm", "step_time_s", "data_time_s", "samples_per_s"):
        got = _series(run, name)
        assert sorted(got) == want, name
        assert all(np.isfinite(v) for v in got.values()), name
    loss, gn, lr = _series(run, "loss"), _series(run, "grad_norm"), _series(run, "lr")
    raw = module.raw_losses  # one per micro-batch; the sanity check runs no training_step
    assert len(raw) == steps * accum
    for s in want:
        assert loss[s] == pytest.approx(np.mean(raw[(s - 1) * accum:s * accum]), rel=1e-5)
    assert gn == pytest.approx(dict(zip(want, module.pre_clip_norms, strict=True)), rel=1e-4)
    assert min(gn.values()) > clip * 1.5  # the clipped norm would be `clip`
    assert lr == pytest.approx(dict(zip(want, module.lrs, strict=True)), rel=1e-6)
    assert lr[1] == pytest.approx(0.1) and lr[steps] < lr[1]  # the step schedule, per step
    samples, times = _series(run, "samples_per_s"), _series(run, "step_time_s")
    assert samples[3] == pytest.approx(8 * accum / times[3], rel=1e-6)

    # val_check_interval counts batches: 10 batches = 5 optimizer steps; the sanity check
    # (before step 1) is not recorded.
    val = _series(run, "val_loss")
    assert sorted(val) == [5, 10, 15, 20]
    assert sorted(_series(run, "val_mae")) == [5, 10, 15, 20]
    assert run.meta.get("accumulate_grad_batches") == accum

    diag = diagnose(run)
    assert isinstance(diag.findings, list)
    for f in diag.findings:
        assert f.symptom not in {"nonfinite_loss", "exploding_gradients"}, f.summary


def test_without_clipping_the_watchers_norm_is_the_pre_step_norm(tmp_path):
    run, module = _fit(tmp_path, accum=1, clip=None, steps=6)
    loss, gn = _series(run, "loss"), _series(run, "grad_norm")
    assert loss == pytest.approx(dict(zip(range(1, 7), module.raw_losses, strict=True)),
                                 rel=1e-5)
    assert gn == pytest.approx(dict(zip(range(1, 7), module.pre_clip_norms, strict=True)),
                               rel=1e-4)
    assert "val_loss" not in run.metrics()


def test_the_stop_file_stops_the_trainer(tmp_path):
    class _Touch(L.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 3:
                (tmp_path / "run" / "STOP").touch()

    run, _ = _fit(tmp_path, accum=1, clip=None, steps=20, more_callbacks=[_Touch()],
                  alert_every=2, alert_window=4)
    steps = sorted(_series(run, "loss"))
    assert 4 <= steps[-1] < 20


def test_a_nonfinite_loss_is_recorded_and_the_guard_never_drops_updates(tmp_path):
    class _Poison(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.global_step == 2:  # the batch of step 3
                batch[0][0, 0] = float("nan")

    run, _ = _fit(tmp_path, accum=1, clip=None, steps=4, more_callbacks=[_Poison()])
    loss = _series(run, "loss")
    assert [np.isfinite(loss[s]) for s in (1, 2, 3)] == [True, True, False]
    events = run.events_of("nonfinite")
    assert events and events[0].step == 3
    assert events[0].data["policy"] == "record"
    assert events[0].data["update_skipped"] is False


def test_a_dropping_nan_policy_is_refused_under_automatic_optimization(tmp_path):
    with pytest.raises(ConfigError, match="nan_policy='skip'.*record"):
        _fit(tmp_path, accum=1, clip=None, steps=2, nan_policy="skip")


class _ManualNet(_Net):
    """Manual optimization: the loop's own backward and step; NaN inputs at step 3."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.trainer.global_step == 2:
            x = x.clone()
            x[0, 0] = float("nan")
        opt = self.optimizers()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.manual_backward(loss)
        opt.step()
        return loss

    def on_before_optimizer_step(self, optimizer):
        pass

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_under_manual_optimization_the_guard_drops_a_nonfinite_update(tmp_path, monkeypatch):
    passes = []
    norm_of_grads = GradNorm.__call__
    monkeypatch.setattr(GradNorm, "__call__",
                        lambda self: passes.append(1) or norm_of_grads(self))
    torch.manual_seed(0)
    module = _ManualNet()
    trainer = L.Trainer(
        max_steps=5, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
        callbacks=[TrainmedicCallback(run_dir=tmp_path / "run", nan_policy="skip")])
    trainer.fit(module, _loader(640, 1))
    assert all(torch.isfinite(p).all() for p in module.parameters())  # the NaN step dropped
    assert len(passes) == 5  # the norm read once per step, by the pre-step hook
    run = load_paths([str(tmp_path / "run")])
    gn = _series(run, "grad_norm")
    assert sorted(gn) == [1, 2, 3, 4, 5] and not np.isfinite(gn[3])
    assert all(np.isfinite(gn[s]) for s in (1, 2, 4, 5))
    events = run.events_of("nonfinite")
    assert events and events[0].step == 3 and events[0].data["update_skipped"] is True


def test_val_row_keeps_validation_metrics_only():
    row = val_row({"val_loss": 1.0, "loss": 2.0, "train_loss": 2.0, "val_acc": 0.5})
    assert row == {"val_loss": 1.0, "val_acc": 0.5}
    assert val_row({"val/loss": 1.0}) == {"val_loss": 1.0}


def test_bad_watcher_arguments_are_refused_when_the_callback_is_made(tmp_path):
    with pytest.raises(ConfigError, match="fetch_evry"):
        TrainmedicCallback(run_dir=tmp_path, fetch_evry=5)
    with pytest.raises(ConfigError, match="optimizer.*set by the callback"):
        TrainmedicCallback(run_dir=tmp_path, optimizer=None)


def _hide(monkeypatch, *packages):
    for name in list(sys.modules):
        if name.split(".")[0] in packages:
            monkeypatch.setitem(sys.modules, name, None)
    for p in packages:
        monkeypatch.setitem(sys.modules, p, None)
    monkeypatch.delitem(sys.modules, "trainmedic.live.lightning_callback")


def test_pytorch_lightning_alone_is_used_when_lightning_is_absent(monkeypatch):
    pl = pytest.importorskip("pytorch_lightning")
    _hide(monkeypatch, "lightning")
    mod = importlib.import_module("trainmedic.live.lightning_callback")
    assert issubclass(mod.TrainmedicCallback, pl.Callback)


def test_a_missing_extra_names_the_install_command(monkeypatch):
    _hide(monkeypatch, "lightning", "pytorch_lightning")
    with pytest.raises(ImportError, match=r"pip install 'trainmedic\[lightning\]'"):
        importlib.import_module("trainmedic.live.lightning_callback")


def test_importing_the_live_package_does_not_import_lightning():
    code = ("import sys, trainmedic.live; sys.exit(any(m.split('.')[0] in "
            "('lightning', 'pytorch_lightning') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
