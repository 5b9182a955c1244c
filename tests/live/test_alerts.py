"""Live alerts: detectors on the recent window, off the training thread, alerted once."""

from __future__ import annotations

import logging
import math
import pathlib
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest

import trainmedic.diagnose.engine as engine
from trainmedic.diagnose.finding import Finding
from trainmedic.errors import ConfigError
from trainmedic.live import alerts as alerts_mod
from trainmedic.live.alerts import LiveAlerts

EVERY = 100


def _loss_curve(n: int, *, seed: int = 0, spikes: tuple[int, ...] = (),
                diverge_at: int | None = None, rise_per_step: float = 1 / 100) -> np.ndarray:
    """A decaying loss with 3% multiplicative noise; ``spikes`` are one-point 6x jumps;
    from ``diverge_at`` on the loss grows exponentially at ``rise_per_step`` (log units)."""
    rng = np.random.default_rng(seed)
    s = np.arange(n)
    y = (2.0 * np.exp(-s / 300) + 0.5) * np.exp(0.03 * rng.standard_normal(n))
    for k in spikes:
        y[k] *= 6.0
    if diverge_at is not None:
        y[diverge_at:] *= np.exp((s[diverge_at:] - diverge_at) * rise_per_step)
    return y


def _drive(alerts: LiveAlerts, rows: Callable[[int], Mapping[str, Any]], n: int, *,
           start: int = 0, close: bool = True) -> LiveAlerts:
    """The watcher's calls for ``n`` steps; waits for each pass so the rounds are the same
    on every run (the no-blocking behaviour has its own test)."""
    for s in range(start, start + n):
        alerts.feed(s, rows(s))
        alerts.after_step(s)
        if (s + 1) % alerts.every == 0:
            assert alerts.wait_idle(10.0)
    if close:
        alerts.close()
    return alerts


def _la(**kwargs: Any) -> LiveAlerts:
    """LiveAlerts with a pass every ``every`` steps: test loops take microseconds per step,
    so the default busy-fraction cap would skip most rounds (it has its own test)."""
    return LiveAlerts(max_busy_fraction=None, **kwargs)


def _losses(y: np.ndarray) -> Callable[[int], Mapping[str, Any]]:
    return lambda s: {"loss": float(y[s])}


def _alert_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "trainmedic-alerts"]


# --------------------------------------------------------------------------- alerting
def test_spike_alerted_once_with_its_onset_via_callback_log_and_event(
        caplog: pytest.LogCaptureFixture) -> None:
    got: list[Finding] = []
    events: list[tuple[int, str, dict[str, Any]]] = []
    y = _loss_curve(3000, spikes=(700,))
    a = _la(every=EVERY, window=2000, on_finding=got.append,
                   record_event=lambda s, k, d: events.append((s, k, d)))
    with caplog.at_level(logging.WARNING, logger="trainmedic.live.alerts"):
        _drive(a, _losses(y), len(y))
    spikes = [f for f in got if f.symptom == "loss_spike"]
    assert len(spikes) == 1, [f.summary for f in got]
    assert spikes[0].onset_step == 700
    assert a.findings == got
    logged = [r for r in caplog.records if "loss_spike" in r.getMessage()]
    assert len(logged) == 1 and logged[0].levelno == logging.WARNING
    assert "step 700" in logged[0].getMessage()
    (step, kind, data), = [e for e in events if e[2]["symptom"] == "loss_spike"]
    # The first pass that saw it: the round after the steps 700..799 were recorded.
    assert (step, kind) == (799, "finding")
    assert data["onset_step"] == 700 and data["severity"] == "warning"
    assert data["summary"] == spikes[0].summary
    assert a.stop_reason is None


def test_divergence_sets_stop_reason_only_when_asked() -> None:
    y = _loss_curve(2400, diverge_at=2000)
    asked = _drive(_la(every=EVERY, window=2000,
                              stop_on={"divergence", "nonfinite_loss"}), _losses(y), len(y))
    div = [f for f in asked.findings if f.symptom == "divergence"]
    assert len(div) == 1
    assert abs(int(div[0].onset_step or 0) - 2000) <= 20
    assert asked.stop_reason is not None
    # Detected by a pass soon after the rise began (one of the rounds at steps 2099, 2199).
    assert re.match(r"divergence detected at step 2[01]99: ", asked.stop_reason)
    assert div[0].summary in asked.stop_reason

    not_asked = _drive(_la(every=EVERY, window=2000, stop_on={"loss_spike"}),
                       _losses(y), len(y))
    assert [f.symptom for f in not_asked.findings] == ["divergence"]
    assert not_asked.stop_reason is None


def _seeded(y: np.ndarray, resumed_at: int) -> LiveAlerts:
    a = _la(every=EVERY, window=2000)
    a.seed(((s, {"loss": float(y[s])}) for s in range(resumed_at)), resumed_at=resumed_at)
    return _drive(a, _losses(y), len(y) - resumed_at, start=resumed_at)


def test_a_resumed_run_is_not_alerted_again_for_what_ended_before_it() -> None:
    y = _loss_curve(1200, spikes=(700,))
    assert [f.onset_step for f in _seeded(y, 900).findings] == []
    # the same rows fed as this process's own: the spike is alerted
    assert [f.onset_step for f in _seeded(y, 0).findings] == [700]


def test_a_resumed_run_judges_its_first_steps_with_the_rows_before_the_resume() -> None:
    # The loss began to rise 150 steps before the resume and is still rising: the first
    # pass after the resume sees it from its start (alone, its window would begin at 1000).
    y = _loss_curve(1200, diverge_at=850)
    div = [f for f in _seeded(y, 1000).findings if f.symptom == "divergence"]
    assert len(div) == 1 and abs(int(div[0].onset_step or 0) - 850) <= 20, div


def test_stop_on_matches_a_symptom_the_engine_folded_into_a_nan_loss() -> None:
    # The loss rises from 1085 and is inf from 1100: one pass sees both, and the engine
    # reports one nonfinite_loss finding with the divergence folded into it (a climb that
    # began less than an incident window before the NaN is not a phase of its own).
    y = _loss_curve(1200, diverge_at=1085, rise_per_step=1 / 5)
    y[1100:] = math.inf
    a = _drive(_la(every=200, window=2000, stop_on={"divergence"}), _losses(y), 1200)
    assert [f.symptom for f in a.findings] == ["nonfinite_loss"]
    assert "same incident: divergence" in a.findings[0].summary
    assert a.stop_reason is not None
    assert a.stop_reason.startswith("divergence detected at step 1199: loss became inf")


def test_stop_file_is_checked_every_k_steps_only(tmp_path: pathlib.Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    flag = tmp_path / "STOP"
    checks: list[str] = []
    real_exists = alerts_mod.os.path.exists

    def counting_exists(p: Any) -> bool:
        checks.append(str(p))
        return real_exists(p)

    monkeypatch.setattr(alerts_mod.os.path, "exists", counting_exists)
    y = _loss_curve(400)
    a = _la(every=EVERY, window=2000, stop_file=flag)
    _drive(a, _losses(y), 150, close=False)
    assert a.stop_reason is None
    flag.touch()
    _drive(a, _losses(y), 250, start=150)
    assert a.stop_reason == f"stop file {flag} found at step 199"
    # Once per round until it was found (steps 99 and 199), never per step.
    assert checks.count(str(flag)) == 2


def test_second_spike_much_later_and_shortly_after_are_new_alerts() -> None:
    y = _loss_curve(6500, spikes=(700, 1000, 5700))
    a = _drive(_la(every=EVERY, window=2000), _losses(y), len(y))
    assert [(f.symptom, f.onset_step) for f in a.findings] == [
        ("loss_spike", 700), ("loss_spike", 1000), ("loss_spike", 5700)]


def test_persisting_condition_is_alerted_once_while_the_window_slides_past_its_onset() -> None:
    # A slow linear rise from 2000 that lasts 7000 steps: the window (2000) loses its onset
    # at step 4000, and later passes see a divergence "starting" near the window's start.
    rng = np.random.default_rng(1)

    def rows(s: int) -> Mapping[str, float]:
        y = (2.0 * math.exp(-s / 300) + 0.5) * math.exp(0.03 * rng.standard_normal())
        return {"loss": y * (1 + max(0, s - 2000) / 500)}

    a = _drive(_la(every=EVERY, window=2000), rows, 9000)
    assert a.passes == 91  # 90 rounds, none skipped, and the final pass
    assert [f.symptom for f in a.findings] == ["divergence"]


def test_memory_leak_alerted_once_over_a_long_run() -> None:
    rng = np.random.default_rng(2)

    def rows(s: int) -> Mapping[str, float]:
        return {"loss": (2.0 * math.exp(-s / 300) + 0.5) * math.exp(0.03 * rng.standard_normal()),
                "rss_mb": 1000.0 + 0.2 * s + rng.standard_normal()}

    a = _drive(_la(every=EVERY, window=2000), rows, 8000)
    assert [f.symptom for f in a.findings] == ["memory_growth"]
    assert a.findings[0].metric == "rss_mb"


def test_healthy_run_raises_nothing() -> None:
    rng = np.random.default_rng(3)

    def rows(s: int) -> Mapping[str, float]:
        n = rng.standard_normal(4)
        row = {"loss": (2.0 * math.exp(-s / 3000) + 0.5) * math.exp(0.05 * n[0]),
               "grad_norm": math.exp(0.2 * n[1]), "step_time_s": 0.05 * math.exp(0.05 * n[2]),
               "data_time_s": 0.001, "rss_mb": 1000.0 + n[3], "lr": 1e-3 * min(1.0, s / 500)}
        if s % 500 == 499:
            row["val_loss"] = 2.0 * math.exp(-s / 3000) + 0.55
        return row

    a = _drive(_la(every=EVERY, window=2000), rows, 6000)
    assert a.findings == []


def test_late_out_of_order_rows_keep_the_onset() -> None:
    # As under a batched device fetch: host values at once, the loss 50 steps late.
    y = _loss_curve(1500, spikes=(700,))
    a = _la(every=EVERY, window=2000)
    for s in range(1500):
        a.feed(s, {"step_time_s": 0.05})
        if s % 50 == 49:
            for t in range(s - 49, s + 1):
                a.feed(t, {"loss": float(y[t])})
        a.after_step(s)
        if (s + 1) % EVERY == 0:
            a.wait_idle()
    a.close()
    assert [(f.symptom, f.onset_step) for f in a.findings] == [("loss_spike", 700)]


def test_onset_cut_by_the_window_says_so() -> None:
    # The alerts see the run only at close(): the window holds steps 1000..2999 of a rise
    # that began at 500.
    rng = np.random.default_rng(4)
    a = _la(every=EVERY, window=2000)
    for s in range(3000):
        a.feed(s, {"loss": (1.0 + max(0, s - 500) / 300) * math.exp(0.02 * rng.standard_normal())})
    a.close(final_step=2999)
    (f,) = a.findings
    assert f.symptom == "divergence"
    assert "may have begun earlier" in f.summary
    # A condition seen with its start inside the window is not flagged so.
    b = _drive(_la(every=EVERY, window=2000), _losses(_loss_curve(2400, diverge_at=2000)),
               2400)
    assert "may have begun earlier" not in b.findings[0].summary


def test_close_runs_the_final_pass_and_is_idempotent() -> None:
    # The last round is at step 699; the spike at 720 is seen only by close().
    y = _loss_curve(750, spikes=(720,))
    a = _drive(_la(every=EVERY, window=2000), _losses(y), 750, close=False)
    assert a.findings == []
    a.close(final_step=749)
    assert [(f.symptom, f.onset_step) for f in a.findings] == [("loss_spike", 720)]
    passes = a.passes
    a.close()
    a.feed(800, {"loss": 1.0})
    a.after_step(800)
    assert a.passes == passes and not _alert_threads()


def test_rank_is_carried_to_findings_and_log(caplog: pytest.LogCaptureFixture) -> None:
    y = _loss_curve(900, spikes=(700,))
    with caplog.at_level(logging.WARNING, logger="trainmedic.live.alerts"):
        a = _drive(_la(every=EVERY, window=2000, rank=3), _losses(y), 900)
    assert [f.rank for f in a.findings] == [3]
    assert any("loss_spike (rank 3)" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- robustness
def test_a_raising_callback_is_logged_and_alerts_go_on(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[Finding] = []

    def bad(f: Finding) -> None:
        calls.append(f)
        raise RuntimeError("user callback bug")

    def bad_event(step: int, kind: str, data: dict[str, Any]) -> None:
        raise OSError("disk full")

    y = _loss_curve(4000, spikes=(700, 3000))
    with caplog.at_level(logging.WARNING, logger="trainmedic.live.alerts"):
        _drive(_la(every=EVERY, window=2000, on_finding=bad, record_event=bad_event),
               _losses(y), 4000)
    assert [f.onset_step for f in calls] == [700, 3000]
    raised = [r for r in caplog.records if "on_finding callback raised" in r.getMessage()]
    assert len(raised) == 2 and raised[0].exc_info is not None
    assert sum("recording the finding event failed" in r.getMessage()
               for r in caplog.records) == 2


def test_close_from_inside_the_callback_ends_the_thread() -> None:
    holder: list[LiveAlerts] = []
    a = _la(every=EVERY, window=2000, on_finding=lambda f: holder[0].close())
    holder.append(a)
    _drive(a, _losses(_loss_curve(1000, spikes=(700,))), 1000, close=False)
    assert [f.onset_step for f in a.findings] == [700]
    deadline = time.monotonic() + 5.0
    while _alert_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alert_threads()
    a.close()  # idempotent


def test_a_failing_pass_is_logged_and_the_worker_survives(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    real = engine.diagnose
    n = {"calls": 0}

    def flaky(run: Any, **kw: Any) -> Any:
        n["calls"] += 1
        if n["calls"] == 1:
            raise ValueError("boom")
        return real(run, **kw)

    monkeypatch.setattr(engine, "diagnose", flaky)
    y = _loss_curve(900, spikes=(700,))
    with caplog.at_level(logging.ERROR, logger="trainmedic.live.alerts"):
        a = _drive(_la(every=EVERY, window=2000), _losses(y), 900)
    assert any("pass at step 99 failed" in r.getMessage() for r in caplog.records)
    assert [f.onset_step for f in a.findings] == [700]


def test_no_thread_left_after_close() -> None:
    before = len(_alert_threads())
    a = _la(every=10, window=20)
    for s in range(50):
        a.feed(s, {"loss": 1.0})
        a.after_step(s)
    assert len(_alert_threads()) == before + 1
    a.close()
    assert len(_alert_threads()) == before
    # Never stepped: no thread is started at all, and close still runs the pass.
    b = _la(every=10, window=20)
    b.feed(0, {"loss": 1.0})
    b.close()
    assert len(_alert_threads()) == before and b.passes == 1


def test_after_step_never_blocks_on_a_slow_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    release, entered = threading.Event(), threading.Event()
    real = engine.diagnose

    def slow(run: Any, **kw: Any) -> Any:
        entered.set()
        release.wait(60.0)
        return real(run, **kw)

    monkeypatch.setattr(engine, "diagnose", slow)
    a = _la(every=10, window=100)
    worst = 0.0
    for s in range(300):
        t0 = time.perf_counter()
        a.feed(s, {"loss": 1.0, "step_time_s": 0.01})
        a.after_step(s)
        worst = max(worst, time.perf_counter() - t0)
        if s == 9:
            assert entered.wait(5.0)  # the first pass is in diagnose, and stays there
    # 30 rounds: the first one is stuck in diagnose, the other 29 were skipped at once.
    assert a.skipped == 29
    # A blocking after_step would wait for the stuck pass: a minute. 5 s leaves room for a
    # stall of the shared VM and still cannot pass that.
    assert worst < 5.0, worst
    release.set()
    a.close()
    assert a.passes == 2  # the stuck round, then the final pass with every row
    assert not _alert_threads()


def test_busy_fraction_cap_throttles_rounds_on_fast_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    real = engine.diagnose

    def slow(run: Any, **kw: Any) -> Any:
        time.sleep(0.02)
        return real(run, **kw)

    monkeypatch.setattr(engine, "diagnose", slow)
    rows = _losses(np.ones(300))
    # A 20 ms pass at 2% of the wall time: the next round no sooner than 1 s later, and the
    # 300 steps below take a few tens of milliseconds.
    capped = _drive(LiveAlerts(every=10, window=100, max_busy_fraction=0.02), rows, 300,
                    close=False)
    assert (capped.passes, capped.throttled, capped.skipped) == (1, 29, 0)
    capped.close()
    uncapped = _drive(_la(every=10, window=100), rows, 300, close=False)
    assert (uncapped.passes, uncapped.throttled) == (30, 0)
    uncapped.close()


# --------------------------------------------------------------------------- arguments
@pytest.mark.parametrize(("kwargs", "field"), [
    ({"every": 0}, "every"),
    ({"every": True}, "every"),
    ({"every": 100, "window": 150}, "window"),
    ({"on_finding": "print"}, "on_finding"),
    ({"record_event": 3}, "record_event"),
    ({"stop_on": "divergence"}, "stop_on"),
    ({"stop_on": {"diverge"}}, "stop_on"),
    ({"stop_file": 3}, "stop_file"),
    ({"rank": -1}, "rank"),
    ({"min_severity": "fatal"}, "min_severity"),
    ({"max_busy_fraction": 0}, "max_busy_fraction"),
    ({"max_busy_fraction": 1.5}, "max_busy_fraction"),
])
def test_bad_arguments_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        LiveAlerts(**kwargs)


def test_unknown_stop_symptom_lists_the_valid_codes() -> None:
    with pytest.raises(ConfigError) as e:
        LiveAlerts(stop_on={"divergence", "explosion"})
    msg = str(e.value)
    assert "'explosion'" in msg and "nonfinite_loss" in msg and "loss_spike" in msg


# --------------------------------------------------------------------------- through watch()
def test_watch_stops_a_diverging_model(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                       request: pytest.FixtureRequest) -> None:
    torch = pytest.importorskip("torch")
    from trainmedic.live import watch
    from trainmedic.run.store import read_store

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    request.addfinalizer(lambda: torch.set_num_threads(threads))
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    found: list[Finding] = []
    saved: list[str] = []
    lr = 0.01
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    with watch(model, opt, run_dir=tmp_path, alert_every=20, alert_window=400,
               on_finding=found.append, stop_on={"divergence", "nonfinite_loss"},
               on_stop=saved.append) as w:
        # Bounded by time, not steps: the default cap keeps the passes under 0.5% of the wall
        # time, so one pass stretched by a stall of the shared VM (100 ms) puts the next one
        # 20 s later; a run that stops as it should takes about a second.
        deadline = time.monotonic() + 120.0
        for step in range(10**7):
            if step == 300:
                for g in opt.param_groups:  # healthy first, then a learning rate far too high
                    g["lr"] = 50.0
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            w.step(loss, batch_size=64)
            if w.should_stop or time.monotonic() > deadline:
                break
        stopped_at = step
    assert w.should_stop, [f.summary for f in found]
    assert 300 < stopped_at
    assert w.stop_reason is not None and w.stop_reason.split()[0] in (
        "divergence", "nonfinite_loss")
    assert saved == [w.stop_reason]  # the user's save ran once, with the reason
    hits = [f for f in found if f.symptom in ("divergence", "nonfinite_loss")]
    assert hits and all(int(f.onset_step or 0) >= 300 for f in hits)
    assert not _alert_threads()
    run = read_store(tmp_path / "metrics.sqlite")
    assert {e.data["symptom"] for e in run.events_of("finding")} >= {hits[0].symptom}
