"""``trainmedic.checkpoint.cadence``: Young's and Daly's intervals against values worked by
hand, Daly's against the minimum of his exact waste model, inputs validated by name, and
the figures read from a real demo run and from supervise incidents."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from trainmedic.checkpoint.cadence import (
    CadenceInputs,
    count_failures,
    daly_interval_s,
    measured_inputs,
    plan_cadence,
    young_interval_s,
)
from trainmedic.errors import ConfigError, InputError

pytestmark = pytest.mark.usefixtures("single_process")


def test_young_and_daly_against_hand_computed_values() -> None:
    # C = 60 s, M = 24 h: sqrt(2*60*86400) = sqrt(10 368 000) = 3219.94 s;
    # Daly: r = 60/172800 = 3.472e-4, 1 + sqrt(r)/3 + r/9 = 1.0062499; *3219.94 - 60 = 3180.06
    assert young_interval_s(60, 86_400) == pytest.approx(3219.94, abs=0.01)
    assert daly_interval_s(60, 86_400) == pytest.approx(3180.06, abs=0.01)
    # C = 600 s, M = 1 h: sqrt(4 320 000) = 2078.46; r = 1/12, factor 1.105484: 1697.71
    assert young_interval_s(600, 3600) == pytest.approx(2078.46, abs=0.01)
    assert daly_interval_s(600, 3600) == pytest.approx(1697.71, abs=0.01)
    # Saves costlier than two MTBFs: Daly says checkpoint every MTBF.
    assert daly_interval_s(800, 300) == 300


def _daly_exact_wall(t: float, c: float, m: float, r: float, work: float = 1.0) -> float:
    # Daly 2006, eq. (20): expected wall time per unit of work with exponential failures.
    return m * math.exp(r / m) * (math.exp((t + c) / m) - 1.0) * work / t


@pytest.mark.parametrize(("c", "m"), [(60.0, 86_400.0), (30.0, 3600.0), (300.0, 7200.0)])
def test_daly_interval_is_near_the_exact_models_minimum(c: float, m: float) -> None:
    grid = [c * 0.5 + k * (m / 2000.0) for k in range(1, 4000)]
    best = min(grid, key=lambda t: _daly_exact_wall(t, c, m, 0.0))
    t = daly_interval_s(c, m)
    # Within 1.5% of the grid argmin; Young's first-order one is further off for big C/M.
    assert abs(t - best) / best < 0.015
    assert _daly_exact_wall(t, c, m, 0.0) <= _daly_exact_wall(young_interval_s(c, m), c, m,
                                                              0.0) + 1e-12


def test_plan_figures() -> None:
    plan = plan_cadence(CadenceInputs(save_cost_s=600, mtbf_s=3600, restart_cost_s=120,
                                      step_time_s=2.0))
    t = 1697.7059780556401
    assert plan.daly_interval_s == pytest.approx(t)
    assert plan.interval_steps == round(t / 2.0) == 849
    assert plan.expected_loss_per_failure_s == pytest.approx((t + 600) / 2 + 120)
    assert plan.save_overhead_fraction == pytest.approx(600 / t)
    assert plan.expected_waste_fraction == pytest.approx(600 / t + ((t + 600) / 2 + 120) / 3600)
    doc = plan.to_dict()
    assert doc["inputs"]["save_cost_s"] == {"value": 600, "basis": "given"}
    assert doc["daly_interval_s"]["basis"] == "estimated"


@pytest.mark.parametrize(("field", "value"), [
    ("save_cost_s", 0), ("save_cost_s", -1.0), ("save_cost_s", float("nan")),
    ("mtbf_s", 0), ("mtbf_s", "1h"), ("restart_cost_s", -5), ("step_time_s", 0),
    ("save_cost_source", "guessed"), ("mtbf_source", ""),
])
def test_inputs_validated_by_name(field: str, value: object) -> None:
    kwargs: dict[str, object] = {"save_cost_s": 10.0, "mtbf_s": 3600.0}
    kwargs[field] = value
    with pytest.raises(ConfigError, match=field):
        CadenceInputs(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="mtbf_s"):
        young_interval_s(1.0, -1.0)


def test_measured_from_a_demo_run_and_supervise_incidents(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from trainmedic.demo import DemoConfig, run_demo
    from trainmedic.run.store import RunStore

    with pytest.raises(InputError):
        measured_inputs(tmp_path / "nothing")
    run_dir = run_demo(DemoConfig(steps=40, checkpoint_every=10, out_dir=tmp_path / "run",
                                  batch_size=4, context_len=16))
    figures = measured_inputs(run_dir)
    # Kept checkpoints 20, 30, 40 -> every 10; steps 10, 20, 30 logged after a save.
    assert figures.save_samples == 3
    assert figures.step_time_s is not None and figures.step_time_s > 0
    assert figures.mtbf_s is None and figures.incidents == 0
    assert any("MTBF not measured" in n for n in figures.notes)
    with RunStore(run_dir) as store:
        for k in range(3):
            store.event(10 * k, "supervise_incident",
                        {"attempt": k, "uptime_s": 50.0, "session": "s", "action": "restart",
                         "start_step": 10 * k, "steps_done": 10 * k + 7})
        # Neither lost training: the user's Ctrl-C, and a crash before the first step (no
        # heartbeat, no store rows, in a run that logs its steps).
        store.event(30, "supervise_incident", {"attempt": 3, "uptime_s": 1.0, "session": "s",
                                               "action": "restart", "start_step": 30,
                                               "steps_done": None})
        store.event(30, "supervise_incident", {"attempt": 4, "uptime_s": 9.0, "session": "s",
                                               "action": "stop", "start_step": 30,
                                               "steps_done": 36})
        store.event(40, "supervise_summary", {"wall_s": 360.0, "incidents": 5})
    figures = measured_inputs(run_dir)
    assert figures.incidents == 5 and figures.failures == 3
    assert figures.mtbf_s == pytest.approx(120.0)
    (left_out,) = [n for n in figures.notes if n.startswith("left out of the MTBF")]
    assert "1 stop(s)" in left_out and "1 attempt(s) that completed no step" in left_out


def test_count_failures_leaves_out_stops_and_attempts_without_a_step() -> None:
    def inc(session: str, action: str = "restart", start: int | None = 0,
            done: int | None = 5) -> dict[str, object]:
        return {"session": session, "action": action, "start_step": start, "steps_done": done}

    incidents = [
        inc("a"),                          # a failure after 5 steps
        inc("a", start=20, done=20),       # resumed at 20, died before step 21: no step
        inc("a", done=None),               # nothing recorded, but session a records: no step
        inc("a", action="stop"),           # Ctrl-C / scancel to supervise
        inc("b", done=None),               # session b never records progress: counted
        {"attempt": 0, "uptime_s": 3.0},   # an event from before start_step: counted
        inc("c", start=None, done=40),     # steps_done without start_step: counted
    ]
    t = count_failures(incidents, run_logs_steps=False)
    assert (t.failures, t.stops, t.no_step, t.unknown) == (4, 1, 2, 2)
    # When the run store holds the run's metrics, an attempt that added none did no step.
    t = count_failures(incidents, run_logs_steps=True)
    assert (t.failures, t.stops, t.no_step, t.unknown) == (2, 1, 4, 0)
    assert count_failures([inc("a", action="stop")], run_logs_steps=False).failures == 0
