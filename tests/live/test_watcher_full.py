"""The full watcher's per-step additions, policies and bad input, on tiny real loops."""

from __future__ import annotations

import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from trainmedic.errors import ConfigError
from trainmedic.live import WatchConfig, watch
from trainmedic.run.loader import load_paths
from trainmedic.run.store import StoreLockedError, read_store

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


def _train(w, model, opt, steps: int, *, nan_at: int | None = None, replay: bool = False):
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    for i in range(steps):
        xx = x.clone()
        if i == nan_at:
            xx[0, 0] = float("nan")
        opt.zero_grad()
        loss = F.mse_loss(model(xx), y)
        loss.backward()
        opt.step()
        w.step(loss, batch_size=32, tokens=320,
               replay=(lambda xx=xx: F.mse_loss(model(xx), y)) if replay else None)


def test_param_norm_and_update_ratio_match_an_oracle(tmp_path: pathlib.Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    expected: dict[int, tuple[float, float]] = {}
    with watch(model, opt, run_dir=tmp_path, param_every=3, alert_every=None) as w:
        for i in range(7):
            before = [p.detach().clone() for p in model.parameters()]
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            after = [p.detach() for p in model.parameters()]
            pn = math.sqrt(sum(float((a ** 2).sum()) for a in after))
            un = math.sqrt(sum(float(((a - b) ** 2).sum())
                               for a, b in zip(after, before, strict=True)))
            expected[i] = (pn, un / pn)
            w.step(loss)
    run = read_store(tmp_path / "metrics.sqlite")
    pn, ur = run.get("param_norm"), run.get("update_ratio")
    assert pn is not None and ur is not None
    assert pn.steps.tolist() == [0, 3, 6] == ur.steps.tolist()
    np.testing.assert_allclose(pn.values, [expected[s][0] for s in (0, 3, 6)], rtol=1e-5)
    np.testing.assert_allclose(ur.values, [expected[s][1] for s in (0, 3, 6)], rtol=1e-4)


def test_one_process_records_no_compute_time_unless_asked(tmp_path: pathlib.Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with watch(model, opt, run_dir=tmp_path, alert_every=None) as w:
        assert w._forward is not None and not w._forward.timed  # the guard's RNG hook only
        _train(w, model, opt, 3)
    run = read_store(tmp_path / "metrics.sqlite")
    assert run.get("compute_time_s") is None and run.get("step_time_s") is not None
    with watch(model, opt, run_dir=tmp_path / "record", alert_every=None,
               nan_policy="record") as w:
        assert w._forward is None and not model._forward_pre_hooks  # nothing on the model
        _train(w, model, opt, 2)


def test_rates_compute_time_and_defaults(tmp_path: pathlib.Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with watch(model, opt, run_dir=tmp_path, alert_every=None, forward_clock=True) as w:
        assert w.nan_policy == "skip" and w.fetch_every == 1  # CPU defaults
        _train(w, model, opt, 5)
        with torch.no_grad():
            model(torch.randn(4, 8))  # evaluation forwards are not compute time
    run = read_store(tmp_path / "metrics.sqlite")
    for metric in ("tokens_per_s", "samples_per_s", "compute_time_s", "step_time_s"):
        s = run.get(metric)
        assert s is not None and s.steps.tolist() == list(range(5)), metric
    ratio = run.get("tokens_per_s").values / run.get("samples_per_s").values  # type: ignore[union-attr]
    np.testing.assert_allclose(ratio, 10.0)
    ct, st = run.get("compute_time_s").values, run.get("step_time_s").values  # type: ignore[union-attr]
    assert (ct > 0).all() and (ct <= st).all()


def test_config_validation_names_the_field(tmp_path: pathlib.Path) -> None:
    for kwargs, field in (({"param_every": 0}, "param_every"),
                          ({"layer_every": -5}, "layer_every"),
                          ({"nan_policy": "ignore"}, "nan_policy"),
                          ({"stop_on": "divergence"}, "stop_on"),
                          ({"stop_on": {"diverging"}}, "stop_on"),
                          ({"alert_every": 100, "alert_window": 150}, "alert_window"),
                          ({"on_stop": 3}, "on_stop"),
                          ({"forward_clock": "yes"}, "forward_clock"),
                          ({"rss_interval_s": 0}, "rss_interval_s"),
                          ({"rss_interval_s": "fast"}, "rss_interval_s"),
                          ({"gpu_sample_s": 0}, "gpu_sample_s"),
                          ({"gpu_sample_s": True}, "gpu_sample_s"),
                          ({"flops_per_step": 1e9}, "flops_per_step")):
        with pytest.raises(ConfigError, match=field):
            WatchConfig(**kwargs)
    with pytest.raises(ConfigError, match="no_such_option"):
        watch(_model(), None, run_dir=tmp_path, no_such_option=1)
    with pytest.raises(ConfigError, match="either config= or"):
        watch(_model(), None, run_dir=tmp_path, config=WatchConfig(), param_every=3)


def test_loss_that_is_not_a_scalar_is_refused(tmp_path: pathlib.Path) -> None:
    model = _model()
    with watch(model, None, run_dir=tmp_path, alert_every=None) as w:
        with pytest.raises(ConfigError, match=r"scalar tensor, got shape \(4, 1\)"):
            w.step(model(torch.randn(4, 8)))
        with pytest.raises(ConfigError, match="got str"):
            w.step("0.5")
        w.step(torch.tensor([0.5]))  # one element is a scalar
    assert read_store(tmp_path / "metrics.sqlite").get("loss").values.tolist() == [0.5]  # type: ignore[union-attr]


def test_model_with_no_trainable_parameters_is_refused(tmp_path: pathlib.Path) -> None:
    model = _model().requires_grad_(False)
    with pytest.raises(ConfigError, match="no trainable parameters"):
        watch(model, None, run_dir=tmp_path)
    with pytest.raises(ConfigError, match="torch.nn.Module"):
        watch("model", None, run_dir=tmp_path)  # type: ignore[arg-type]


def test_optimizer_over_a_copy_of_the_model_is_recorded(tmp_path: pathlib.Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    import copy

    model = _model()
    opt = torch.optim.SGD(copy.deepcopy(model).parameters(), lr=0.1)
    with watch(model, opt, run_dir=tmp_path, alert_every=None) as w:
        _train(w, model, opt, 3)
    assert "not parameters of the watched model" in caplog.text
    run = load_paths([tmp_path])
    ev = run.events_of("optimizer_params_not_in_model")
    assert len(ev) == 1 and ev[0].data["foreign"] == 4


def test_skip_policy_drops_the_update_and_keeps_the_state(tmp_path: pathlib.Path) -> None:
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    with watch(model, opt, run_dir=tmp_path, alert_every=None, nan_policy="skip") as w:
        _train(w, model, opt, 3)
        state_before = {k: v.clone() for k, v in model.state_dict().items()}
        steps_before = [int(opt.state[p]["step"]) for p in model.parameters()]
        _train(w, model, opt, 1, nan_at=0)
        for k, v in model.state_dict().items():
            assert torch.equal(v, state_before[k]), k  # bitwise: no update ran
        assert [int(opt.state[p]["step"]) for p in model.parameters()] == steps_before
        _train(w, model, opt, 2)  # training goes on
    assert all(torch.isfinite(p).all() for p in model.parameters())
    run = load_paths([tmp_path])
    (ev,) = run.events_of("nonfinite")
    assert ev.step == 3 and ev.data["update_skipped"] is True
    assert set(ev.data["metrics"]) == {"loss", "grad_norm"}
    assert math.isnan(run.get("loss").values[3])  # type: ignore[union-attr]


def test_record_policy_lets_the_update_run(tmp_path: pathlib.Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with watch(model, opt, run_dir=tmp_path, alert_every=None, nan_policy="record") as w:
        _train(w, model, opt, 2, nan_at=1)
    assert not all(torch.isfinite(p).all() for p in model.parameters())
    (ev,) = load_paths([tmp_path]).events_of("nonfinite")
    assert ev.step == 1 and ev.data["update_skipped"] is False and ev.data["module"] is None


def test_a_failed_start_leaves_nothing_behind(tmp_path: pathlib.Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from trainmedic.live import watcher as watcher_mod

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    # Fails after the store, the optimizer hooks and the forward clock are set up.
    monkeypatch.setattr(watcher_mod, "stop_file_path", broken)
    with pytest.raises(RuntimeError, match="boom"):
        watch(model, opt, run_dir=tmp_path)
    monkeypatch.undo()
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks
    with watch(model, opt, run_dir=tmp_path, alert_every=None) as w:  # the lock was released
        w.step(1.0)


def test_two_watchers_on_one_run_dir_are_refused(tmp_path: pathlib.Path) -> None:
    with watch(_model(), None, run_dir=tmp_path, alert_every=None) as w:
        w.step(1.0)
        with pytest.raises(StoreLockedError, match="another writer"):
            watch(_model(), None, run_dir=tmp_path, alert_every=None)
        w.step(2.0)
    with watch(_model(), None, run_dir=tmp_path, alert_every=None, rank=1,
               world_size=2) as other:  # another rank: its own file, side by side
        other.step(5.0)
    assert read_store(tmp_path / "metrics.sqlite").get("loss").values.tolist() == [1.0, 2.0]  # type: ignore[union-attr]


def test_a_crash_mid_run_keeps_what_was_flushed(tmp_path: pathlib.Path) -> None:
    code = f"""
import os, torch
from trainmedic.live import watch
m = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
w = watch(m, opt, run_dir={str(tmp_path)!r}, flush_interval_s=0.05, alert_every=None)
for i in range(40):
    opt.zero_grad(); loss = m(torch.randn(8, 4)).pow(2).mean(); loss.backward(); opt.step()
    w.step(loss)
    if i == 29:
        w.flush()
        os._exit(9)   # no close(), no atexit: a kill
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 9, proc.stderr
    run = load_paths([tmp_path])
    assert run.get("loss").steps.tolist() == list(range(30))  # type: ignore[union-attr]


def test_unwritable_run_dir_warns_and_training_goes_on(
        tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with watch(model, opt, run_dir=blocker / "run", alert_every=None) as w:
        _train(w, model, opt, 3)
    assert "training goes on without recording" in caplog.text
    assert not w.store.enabled


def test_stop_file_without_live_alerts_and_on_stop(tmp_path: pathlib.Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    reasons: list[str] = []
    with watch(model, opt, run_dir=tmp_path, alert_every=None, on_stop=reasons.append) as w:
        _train(w, model, opt, 150)
        assert not w.should_stop
        (tmp_path / "STOP").touch()
        steps = 0
        while not w.should_stop:
            _train(w, model, opt, 1)
            steps += 1
        assert steps == 51 and w.current_step == 201  # looked for every 100 steps: at 200
    assert len(reasons) == 1 and "STOP" in reasons[0] and w.stop_reason == reasons[0]
    (ev,) = load_paths([tmp_path]).events_of("stop_requested")
    assert ev.step == 200


def test_backward_only_nan_is_not_called_a_masking_logger(tmp_path: pathlib.Path) -> None:
    from trainmedic.diagnose.engine import diagnose

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 8), torch.randn(32, 1)

    def loss_of(bad: bool) -> torch.Tensor:
        out = F.mse_loss(model(x), y)
        if bad:  # sqrt at 0: a finite forward whose gradient is inf * 0 = NaN
            out = out + torch.sqrt((model(x) - model(x).detach()).pow(2)).mean()
        return out

    with watch(model, opt, run_dir=tmp_path, alert_every=None) as w:
        for i in range(40):
            opt.zero_grad()
            loss = loss_of(i in (25, 26))
            loss.backward()
            opt.step()
            w.step(loss, replay=lambda i=i: loss_of(i in (25, 26)))
    run = load_paths([tmp_path])
    assert math.isfinite(run.get("loss").values[25])  # type: ignore[union-attr]
    assert math.isnan(run.get("grad_norm").values[25])  # type: ignore[union-attr]
    events = run.events_of("nonfinite")
    assert [e.step for e in events] == [25, 26]
    assert events[0].data["where"] == "backward"
    symptoms = {f.symptom for f in diagnose(run).findings}
    assert "nan_masked_in_logs" not in symptoms
    assert "nonfinite_grad" in symptoms


def test_raise_policy_names_the_module_and_keeps_the_record(tmp_path: pathlib.Path) -> None:
    from trainmedic.live import NonFiniteError

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    w = watch(model, opt, run_dir=tmp_path, alert_every=None, nan_policy="raise")
    with pytest.raises(NonFiniteError, match="step 2: non-finite loss") as info:
        _train(w, model, opt, 3, nan_at=2, replay=True)
    w.close()
    assert info.value.localization is not None
    assert info.value.localization.where == "input"  # the NaN came in with the batch
    assert all(torch.isfinite(p).all() for p in model.parameters())  # update dropped
    run = load_paths([tmp_path])
    assert run.get("loss").steps.tolist() == [0, 1, 2]  # type: ignore[union-attr]
    (ev,) = run.events_of("nonfinite")
    assert ev.step == 2 and ev.data["where"] == "input"


def test_disk_full_stops_telemetry_not_training(tmp_path: pathlib.Path) -> None:
    """A real write failure: the process's file-size limit (RLIMIT_FSIZE) stands in for a
    full disk. Training runs to the end, a warning says telemetry stopped, and every row
    committed before the failure reads back."""
    pytest.importorskip("resource")
    code = f"""
import resource, signal, torch
from trainmedic.live import watch
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a failed write returns EFBIG instead
m = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
w = watch(m, opt, run_dir={str(tmp_path)!r}, flush_interval_s=0.02, alert_every=None)
resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))
for i in range(3000):
    opt.zero_grad(); loss = m(torch.randn(8, 4)).pow(2).mean(); loss.backward(); opt.step()
    w.step(loss, **{{f"extra_{{k}}": float(i) for k in range(20)}})
    if i % 200 == 0:
        w.flush()
w.close()
print("trained", i + 1, w.store.enabled)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["trained", "3000", "False"]
    assert "stopped recording" in proc.stderr
    loss = load_paths([tmp_path]).get("loss")
    assert loss is not None and 200 <= len(loss) < 3000
    assert loss.steps.tolist() == list(range(len(loss)))  # a clean prefix, nothing torn


def test_through_the_wrapped_loader_the_rng_is_read_as_each_batch_arrives(
        tmp_path: pathlib.Path) -> None:
    model = torch.nn.Sequential(torch.nn.Dropout(0.5), torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.ones(2, 4), torch.zeros(2, 1)
    batches = [(x, y)] * 6

    def noisy_batches():  # a loader that draws from the global RNG, as augmentations do
        for b in batches:
            torch.rand(3)
            yield b

    with watch(model, opt, run_dir=tmp_path, alert_every=None) as w:
        loader = w.wrap_loader(noisy_batches())
        assert w._forward is None and not model._forward_pre_hooks  # the hook came off
        for xb, yb in loader:
            at_forward = torch.get_rng_state()
            opt.zero_grad()
            F.mse_loss(model(xb), yb).backward()
            opt.step()
            w.step(0.0)
            assert torch.equal(w._guard.rng_state.cpu, at_forward)
        # Steps whose batches do not come through the wrapped loader: the hook is back.
        for _ in range(3):
            opt.zero_grad()
            at_forward = torch.get_rng_state()
            F.mse_loss(model(x), y).backward()
            opt.step()
            w.step(0.0)
        assert w._forward is not None and not w._forward.timed
        assert torch.equal(w._guard.rng_state.cpu, at_forward)


def test_the_replay_draws_the_dropout_masks_of_the_step(tmp_path: pathlib.Path) -> None:
    class FirstLog(torch.nn.Module):  # -inf exactly when dropout zeroed the first input
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.log(x[:, :1])

    model = torch.nn.Sequential(torch.nn.Dropout(0.5), FirstLog(), torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.ones(1, 20), torch.zeros(1, 1)
    rng_at_forward = []
    with watch(model, opt, run_dir=tmp_path, alert_every=None) as w:
        for _ in range(40):
            opt.zero_grad()
            rng_at_forward.append(torch.get_rng_state())
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            w.step(loss, replay=lambda: F.mse_loss(model(x), y))
            assert torch.equal(w._guard.rng_state.cpu, rng_at_forward[-1])
    events = load_paths([tmp_path]).events_of("nonfinite")
    assert len(events) > 3  # about half the steps
    # Each replay had to draw the step's own mask to see the -inf again (a different draw
    # misses it half the time): the first three, replayed, all name the module.
    for e in events[:3]:
        assert (e.data["where"], e.data["module"]) == ("forward", "1"), e.data


@pytest.mark.parametrize("foreach", [None, False])
def test_clip_through_the_watcher_records_the_pre_clip_norm_once(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, foreach: bool | None) -> None:
    from trainmedic.live.norms import GradNorm

    calls = []
    norm_of_grads = GradNorm.__call__
    monkeypatch.setattr(GradNorm, "__call__",
                        lambda self: calls.append(1) or norm_of_grads(self))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    twin = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    twin.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=1e-3)
    x, y = torch.randn(32, 8) * 50, torch.randn(32, 1)
    pre_clip = []
    with watch(model, opt, run_dir=tmp_path, alert_every=None) as w:
        for _ in range(5):
            for m, o in ((model, opt), (twin, twin_opt)):
                o.zero_grad()
                F.mse_loss(m(x), y).backward()
            total = w.clip_grad_norm_(1.0, foreach=foreach)
            pre_clip.append(float(torch.nn.utils.clip_grad_norm_(twin.parameters(), 1.0)))
            assert float(total) == pytest.approx(pre_clip[-1], rel=1e-6)
            assert pre_clip[-1] > 1.0  # the clip did clip
            for a, b in zip(model.parameters(), twin.parameters(), strict=True):
                # torch's clipping; the norm may differ in its last bit (combined in float64)
                torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=0)
            opt.step()
            twin_opt.step()
            w.step(F.mse_loss(model(x), y))
        assert len(calls) == 5  # one pass over the gradients per step, not two
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9)
    run = read_store(tmp_path / "metrics.sqlite")
    np.testing.assert_allclose(run.get("grad_norm").values, pre_clip, rtol=1e-6)  # type: ignore[union-attr]
    assert run.meta.get("grad_norm_basis") == "pre_clip"


def test_clipping_a_finite_norm_past_float32s_range(tmp_path: pathlib.Path) -> None:
    # 4M gradients of 1e37: a finite norm of 2e40, beyond float32. The coefficient is taken
    # in float64, so the gradients are scaled down, not zeroed.
    model = torch.nn.Linear(2048, 2048, bias=False)
    p = model.weight
    with watch(model, None, run_dir=tmp_path, alert_every=None) as w:
        p.grad = torch.full_like(p, 1e37)
        total = w.clip_grad_norm_(1.0)
        assert float(total) == pytest.approx(1e37 * 2048, rel=1e-6)
        assert p.grad.norm().item() == pytest.approx(1.0, rel=1e-4)
        w.step(1.0)
    gn = read_store(tmp_path / "metrics.sqlite").get("grad_norm")
    assert gn is not None and gn.values[0] == pytest.approx(1e37 * 2048, rel=1e-6)


def test_clip_norm_is_used_when_the_optimizer_step_is_skipped(tmp_path: pathlib.Path) -> None:
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with watch(model, opt, run_dir=tmp_path, alert_every=None) as w:
        model(torch.ones(2, 4) * 10).sum().backward()
        total = float(w.clip_grad_norm_(0.5))
        w.step(1.0)  # no optimizer.step(): e.g. a GradScaler that found an inf
        model.zero_grad()
        w.step(2.0)  # no gradients and no clip: no norm
        with pytest.raises(ConfigError, match="max_norm"):
            w.clip_grad_norm_(0.0)
        assert float(w.clip_grad_norm_(1.0)) == 0.0  # no gradients: 0, as torch returns
    run = read_store(tmp_path / "metrics.sqlite")
    gn = run.get("grad_norm")
    assert gn is not None and gn.steps.tolist() == [0]
    assert gn.values[0] == pytest.approx(total) and total > 0.5


def test_a_new_run_from_step_0_on_a_used_run_dir_is_refused(tmp_path: pathlib.Path) -> None:
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with watch(model, opt, run_dir=tmp_path, alert_every=None, meta={"cfg": "A"}) as w:
        for s in range(5):
            w.step(float(s))
    with pytest.raises(ConfigError, match=r"already holds a run's record \(steps up to 4\)"
                       r".*if_exists="):
        watch(model, opt, run_dir=tmp_path, meta={"cfg": "B"})
    # the refused run left the earlier run's record as it was
    earlier = read_store(tmp_path / "metrics.sqlite").meta
    assert earlier["cfg"] == "A" and earlier["sessions"] == 1
    # a resume continues the record (the store is not left locked by the refusal)
    with watch(model, opt, run_dir=tmp_path, alert_every=None, start_step=3) as w:
        w.step(30.0)
    run = read_store(tmp_path / "metrics.sqlite")
    assert run.get("loss").steps.tolist() == [0, 1, 2, 3, 4, 3]  # type: ignore[union-attr]


def test_a_grad_scaler_overflow_is_recorded_without_a_warning(
        tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
    with caplog.at_level(logging.INFO, logger="trainmedic"), \
            watch(model, opt, run_dir=tmp_path, alert_every=None, scaler=scaler,
                  nan_policy="record") as w:
        for i in range(12):
            opt.zero_grad()
            loss = model(torch.randn(8, 4)).pow(2).mean()
            if i == 6:  # finite loss, gradients that overflow once scaled (as in fp16)
                loss = loss * 0 + 1e35 * model.weight.sum()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            w.step(loss)
    events = load_paths([tmp_path]).events_of("nonfinite")
    assert [(e.step, e.data.get("scaler_skipped")) for e in events] == [(6, True)]
    assert "GradScaler skipped the update" in events[0].data["detail"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("GradScaler skipped" in r.getMessage() for r in caplog.records)


def test_a_nan_the_grad_scaler_cannot_fix_is_warned_once_its_scale_falls_below_1(
        tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)  # 8 -> 4 -> 2 -> 1 -> 0.5 -> 0.25
    with caplog.at_level(logging.INFO, logger="trainmedic"), \
            watch(model, opt, run_dir=tmp_path, alert_every=None, scaler=scaler,
                  nan_policy="record") as w:
        for i in range(7):
            if i == 1:  # from here a finite loss whose gradient is NaN at every step (a bug)
                model.weight.register_hook(lambda g: g * float("nan"))
            opt.zero_grad()
            loss = model(torch.randn(8, 4)).pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            w.step(loss)
    events = load_paths([tmp_path]).events_of("nonfinite")
    assert events and all(e.data.get("scaler_skipped") for e in events)
    fell = [e for e in events if "fell to" in e.data["detail"]]
    assert fell and fell[0].step == 4  # the step whose update took the scale to 0.5
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and "stay non-finite even scaled down" in warned[0].getMessage()


def test_a_resumed_watch_alerts_with_the_rows_before_the_resume(tmp_path: pathlib.Path) -> None:
    """The live alerts of a resumed run start from the store's rows of the last window: a
    rise that began before the resume is dated from its start, not from the resume."""
    rng = np.random.default_rng(0)
    s = np.arange(160)
    y = (2.0 * np.exp(-s / 300) + 0.5) * np.exp(0.03 * rng.standard_normal(160))
    y[60:] *= np.exp((s[60:] - 60) / 40)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with watch(model, opt, run_dir=tmp_path, alert_every=None) as w:
        for step in range(100):
            w.step(float(y[step]))
    found: list = []  # type: ignore[type-arg]
    with watch(model, opt, run_dir=tmp_path, alert_every=20, alert_window=400,
               on_finding=found.append, start_step=100) as w:
        for step in range(100, 160):
            w.step(float(y[step]))
    div = [f for f in found if f.symptom == "divergence"]
    assert len(div) == 1 and 50 <= int(div[0].onset_step or 0) < 100, \
        [(f.symptom, f.onset_step, f.summary) for f in found]
