"""throughput_regression on per-step and per-epoch times, and one incident = one finding: a
drop that a data-wait rise or a rank that slowed explains is folded into that root finding.
Numbers (onset, drop, severity, folding) are asserted, not phrases."""

from __future__ import annotations

import numpy as np
import pytest

from trainmedic.diagnose import diagnose
from trainmedic.diagnose.detectors.timing import input_events, throughput_events
from trainmedic.diagnose.finding import Finding
from trainmedic.diagnose.registry import get_detector
from trainmedic.run.series import Run


def jitter(n: int, noise: float, seed: int) -> np.ndarray:
    return np.exp(noise * np.random.default_rng(seed).standard_normal(n))


def run_detector(symptom: str, run: Run) -> list[Finding]:
    res = get_detector(symptom).fn(run)
    assert isinstance(res, list), res
    return res


@pytest.mark.parametrize("n,at,rise", [(15, 9, 1.35), (30, 18, 1.25), (40, 20, 1.5),
                                       (120, 70, 1.3)])
def test_epoch_times_that_rise_and_stay(n: int, at: int, rise: float) -> None:
    v = 60.0 * jitter(n, 0.02, n)
    v[at:] *= rise
    run = Run("epochs")
    run.add("step_time_s", np.arange(1, n + 1), v)
    (e,) = throughput_events(run)[0]
    assert abs(e.onset - (at + 1)) <= max(1, n // 20)
    assert abs(e.change - (rise - 1)) < 0.05
    # a third of the throughput lost (time up >= 50%) is a warning; less is info (load on a
    # shared host moves healthy runs by 20-60%)
    assert e.severity == ("warning" if rise >= 1.5 else "info")


def test_per_epoch_samples_per_s_drop() -> None:
    v = 900.0 * jitter(20, 0.02, 1)
    v[12:] *= 0.6
    run = Run("epochs")
    run.add("samples_per_s", np.arange(20), v)
    (f,) = run_detector("throughput_regression", run)
    assert f.severity == "warning" and f.onset_step == 12 and f.metric == "samples_per_s"


def test_thirty_percent_slower_steps_are_info() -> None:
    # a co-located job takes part of the core for the second half: 30% slower, not a third of
    # the throughput lost
    v = 0.005 * jitter(400, 0.05, 3)
    v[200:] *= 1.3
    run = Run("shared")
    run.add("step_time_s", np.arange(400), v)
    (f,) = run_detector("throughput_regression", run)
    assert f.severity == "info"


def test_ten_percent_slower_epochs_are_info() -> None:
    v = 60.0 * jitter(40, 0.01, 2)
    v[25:] *= 1.12
    run = Run("epochs")
    run.add("step_time_s", np.arange(40), v)
    (f,) = run_detector("throughput_regression", run)
    assert f.severity == "info"


@pytest.mark.parametrize("n", [12, 15, 25, 40, 60, 200])
def test_healthy_noisy_epoch_times_are_quiet(n: int) -> None:
    for seed in range(10):
        run = Run("epochs")
        run.add("step_time_s", np.arange(n), 60.0 * jitter(n, 0.08, 50 + seed))
        assert [f for f in run_detector("throughput_regression", run)
                if f.severity != "info"] == [], (n, seed)


def test_a_slow_stretch_that_recovers_is_no_regression() -> None:
    v = 60.0 * jitter(40, 0.02, 3)
    v[15:28] *= 1.5
    run = Run("epochs")
    run.add("step_time_s", np.arange(40), v)
    assert run_detector("throughput_regression", run) == []


def input_stall_run(n: int = 1000, at: int = 600, extra: float = 0.05) -> Run:
    """A loader that slows at ``at``: the data wait rises and the step with it."""
    data = 0.002 * jitter(n, 0.3, 4)
    data[at:] += extra * jitter(n - at, 0.1, 5)
    step = 0.1 * jitter(n, 0.03, 6) + data
    run = Run("stall")
    steps = np.arange(n)
    run.add("loss", steps, np.linspace(3, 1, n) * jitter(n, 0.02, 7))
    run.add("data_time_s", steps, data)
    run.add("step_time_s", steps, step)
    run.add("samples_per_s", steps, 64 / step)
    return run


def test_data_wait_that_rises_midrun_is_input_bound_from_its_onset() -> None:
    run = input_stall_run()
    (e,) = input_events(run)[0]
    assert e.rise and abs(e.onset - 600) <= 30
    assert e.share_before is not None and e.share_before < 0.05
    assert abs(e.share - 0.05 / 0.152) < 0.05


def test_throughput_drop_from_an_input_stall_is_one_incident() -> None:
    run = input_stall_run()
    (root,) = run_detector("input_bound", run)
    assert root.severity == "warning" and abs((root.onset_step or 0) - 600) <= 30
    folded = [e for e in root.evidence if e.note.startswith("throughput_regression")]
    assert len(folded) == 1 and abs((folded[0].step or 0) - 600) <= 30
    (tp,) = run_detector("throughput_regression", run)
    assert tp.severity == "info"
    assert any("root: input_bound" in e.note and e.step == root.onset_step
               for e in tp.evidence)
    # Through the engine: one finding, the drop in its related entries.
    d = diagnose(run)
    assert [f.symptom for f in d.findings if f.symptom in ("input_bound",
                                                          "throughput_regression")] == \
        ["input_bound"]
    (ib,) = [f for f in d.findings if f.symptom == "input_bound"]
    assert [r.symptom for r in ib.related].count("throughput_regression") == 1


def test_throughput_drop_without_a_data_wait_rise_stays_its_own_finding() -> None:
    n = 1000
    step = 0.1 * jitter(n, 0.03, 8)
    step[500:] *= 1.6  # e.g. throttling: compute slows, the loader does not
    run = Run("slow")
    steps = np.arange(n)
    run.add("data_time_s", steps, 0.002 * jitter(n, 0.3, 9))
    run.add("step_time_s", steps, step)
    (tp,) = run_detector("throughput_regression", run)
    assert tp.severity == "warning" and abs((tp.onset_step or 0) - 500) <= 30
    assert run_detector("input_bound", run) == []


def test_throughput_drop_from_a_rank_that_slows_is_folded_into_the_straggler() -> None:
    n, at = 800, 400
    rng = np.random.default_rng(12)
    fwd = 0.03 * np.exp(0.05 * rng.standard_normal((4, n)))
    fwd[2, at:] *= 2.0
    step = fwd.max(axis=0) + 0.06 * np.exp(0.05 * rng.standard_normal(n))
    run = Run("ddp")
    for r in range(4):
        run.add("compute_time_s", np.arange(n), fwd[r], rank=r)
        run.add("data_time_s", np.arange(n), 0.0002 * np.ones(n), rank=r)
        run.add("step_time_s", np.arange(n), step, rank=r)
    (s,) = run_detector("straggler", run)
    assert s.rank == 2 and abs((s.onset_step or 0) - at) <= 40 and s.severity == "warning"
    assert any(e.note.startswith("throughput_regression") for e in s.evidence)
    tps = run_detector("throughput_regression", run)
    assert tps and all(f.severity == "info" for f in tps)
    assert all(any("root: straggler on rank 2" in e.note for e in f.evidence) for f in tps)


def test_slow_epochs_that_end_back_at_the_old_pace_are_no_regression() -> None:
    # a YOLO run's epoch times (from its cumulative time column): epochs 17-19 take 2-3x
    # (an I/O hiccup), epoch 20 is back at 23.5 s: outliers, not a regression to the end
    v = np.array([23.88, 23.26, 23.07, 22.97, 23.11, 23.11, 23.49, 23.74, 23.61, 24.25, 23.38,
                  25.55, 25.43, 25.23, 24.10, 71.74, 35.41, 51.23, 23.51])
    run = Run("epochs")
    run.add("step_time_s", np.arange(2, 21), v)
    assert throughput_events(run)[0] == []
    v[-1] = 50.0  # still slow at the end: it lasts
    run2 = Run("epochs")
    run2.add("step_time_s", np.arange(2, 21), v)
    assert len(throughput_events(run2)[0]) == 1


def test_a_one_millisecond_step_needs_to_double_for_a_warning() -> None:
    # host load moves a 0.9 ms CPU step by ~50%: info; doubled, a warning
    for rise, sev in ((1.55, "info"), (2.2, "warning")):
        v = 0.0009 * jitter(120, 0.05, 7)
        v[60:] *= rise
        run = Run("tiny")
        run.add("step_time_s", np.arange(5, 605, 5), v)
        (e,) = throughput_events(run)[0]
        assert e.severity == sev, (rise, e)
    # the same 55% rise on a 200 ms step is a warning
    v = 0.2 * jitter(120, 0.05, 7)
    v[60:] *= 1.55
    run = Run("big")
    run.add("step_time_s", np.arange(5, 605, 5), v)
    assert throughput_events(run)[0][0].severity == "warning"


def _stall_run(every: int, stall_s: float, n: int = 400, seed: int = 0) -> Run:
    """6 ms steps with a ~0.1 ms data wait, and a data stall of ``stall_s`` every ``every``
    steps (the step takes the stall too)."""
    rng = np.random.default_rng(seed)
    s = np.arange(1, n + 1)
    data = 1e-4 * np.exp(0.2 * rng.standard_normal(n))
    data[s % every == 0] += stall_s
    run = Run(source="t")
    run.add("data_time_s", s, data)
    run.add("step_time_s", s, 0.006 * np.exp(0.05 * rng.standard_normal(n)) + data)
    return run


def test_data_stalls_that_take_a_third_of_the_wall_time_are_input_bound() -> None:
    """Five stalls of 0.35 s in 400 steps of 6 ms: the median share is ~2%, but 41% of the
    logged time waits for data."""
    ev = input_events(_stall_run(75, 0.35))[0]
    assert len(ev) == 1 and ev[0].stalls == (75, 150, 225, 300, 375)
    assert ev[0].severity == "warning" and ev[0].time_share is not None
    assert 0.35 <= ev[0].time_share <= 0.5 and ev[0].share < 0.1


def test_small_or_rare_data_stalls_are_no_input_stall() -> None:
    assert not any(e.stalls for e in input_events(_stall_run(75, 0.02))[0])
    assert not any(e.stalls for e in input_events(_stall_run(200, 0.1))[0])


def test_a_worker_start_up_stall_at_each_logged_epoch_start_is_no_input_stall() -> None:
    """Logged every 50 batches of 391 (so batch 0 of each epoch is always logged): a 2 s
    start-up wait there, ~2 ms elsewhere, 50 ms steps. Read point by point that is 80% of
    the logged time; over the steps it is ~9%."""
    rng = np.random.default_rng(2)
    steps = np.array([e * 391 + b for e in range(6) for b in (*range(0, 391, 50), 390)])
    data = np.where(steps % 391 == 0, 2.0, 0.002) * np.exp(0.05 * rng.standard_normal(
        steps.size))
    run = Run(source="t")
    run.add("data_time_s", steps, data)
    run.add("step_time_s", steps, 0.05 + data)
    assert not [e for e in input_events(run)[0] if e.severity == "warning"]


def test_step_times_twice_their_running_average_are_a_slowdown() -> None:
    # pytorch/examples' AverageMeter: "Time 7.259 (3.692)" at iterations 85-91 of an epoch.
    def run_of(cur: list[float], avg: list[float]) -> Run:
        run = Run(source="t")
        steps = np.arange(85, 85 + len(cur))
        run.add("step_time_s", steps, np.asarray(cur))
        run.add("time_avg", steps, np.asarray(avg))
        run.meta["mapping"] = [{"file": "t", "column": "time", "canonical": "step_time_s",
                                "how": "alias"}]
        return run

    cur = [7.259, 7.593, 7.179, 7.576, 7.820, 7.744, 7.555]
    avg = [3.692, 3.737, 3.776, 3.818, 3.863, 3.905, 3.945]
    f = [x for x in diagnose(run_of(cur, avg)).findings
         if x.symptom == "throughput_regression"]
    assert len(f) == 1 and f[0].severity == "warning" and f[0].onset_step == 85
    # start-up: a slow first step keeps the average above the current steps
    slow_start = [x for x in diagnose(run_of([0.5] * 7, [3.0, 2.6, 2.3, 2.0, 1.8, 1.6, 1.5]))
                  .findings if x.symptom == "throughput_regression"]
    assert slow_start == []


def _short(values: list[float], metric: str = "step_time_s") -> list[Finding]:
    run = Run(source="t")
    run.add(metric, np.arange(1, len(values) + 1), np.array(values))
    res = get_detector("throughput_regression").fn(run)
    return [f for f in res if f.level >= 1] if isinstance(res, list) else []


def test_a_short_log_whose_epochs_keep_slowing_is_a_regression() -> None:
    # five epochs of the same 4000 batches: 1354 s, then ~2085 s, then ~2700 s
    f = _short([1354.0, 2083.0, 2090.0, 2644.0, 2746.0])
    assert len(f) == 1 and f[0].onset_step == 2 and f[0].severity == "warning"
    # the same slowdown read as a rate (it/s)
    f = _short([2.95, 1.92, 1.91, 1.51, 1.46], metric="samples_per_s")
    assert len(f) == 1 and f[0].onset_step == 2


def test_an_excerpt_whose_last_two_points_keep_slowing_is_a_regression() -> None:
    # MXNet Speedometer lines pasted as the job slowed: ~95 samples/s, then 46, then 23
    f = _short([95.7, 94.5, 94.3, 90.3, 89.8, 98.0, 46.5, 23.5], metric="samples_per_s")
    assert len(f) == 1 and f[0].onset_step == 7


@pytest.mark.parametrize("values", [
    [0.0004, 1.25, 1.09, 1.11],            # a timer read before any work, then steady
    [1.0, 1.1, 0.95, 1.05, 4.0, 4.1],      # two slow summary records at the end
    [1.0, 1.3, 0.9, 1.4, 1.2, 1.35, 1.1],  # noise on a shared host
    [3.0, 1.0, 1.1, 0.9, 1.0],             # a slow first epoch (start-up), then steady
])
def test_short_logs_without_a_lasting_slowdown_stay_quiet(values: list[float]) -> None:
    assert not _short(values)


def test_three_or_four_points_that_each_wait_most_of_the_step_are_input_bound() -> None:
    # PaddleOCR excerpt: reader_cost 5.34, 3.19, 2.22, 3.84 s of batch_cost 5.98, 3.77, 2.78,
    # 4.40 s
    run = Run(source="t")
    steps = np.array([11550, 11560, 11570, 11580])
    run.add("data_time_s", steps, np.array([5.34, 3.19, 2.22, 3.84]))
    run.add("step_time_s", steps, np.array([5.98, 3.77, 2.78, 4.40]))
    f = [f for f in run_detector("input_bound", run) if f.level >= 1]
    assert len(f) == 1 and f[0].onset_step == 11550 and f[0].severity == "warning"
    # one point under half its step, or only two points: not judged
    run2 = Run(source="t")
    run2.add("data_time_s", steps, np.array([5.34, 0.9, 2.22, 3.84]))
    run2.add("step_time_s", steps, np.array([5.98, 3.77, 2.78, 4.40]))
    res = get_detector("input_bound").fn(run2)
    assert not isinstance(res, list) or not [f for f in res if f.level >= 1]


def test_an_excerpt_from_a_later_epoch_has_no_warm_up_to_skip() -> None:
    # seq2seq-attn lines from epoch 10: 4 lines at ~2130 tokens/s, then ~1090 from epoch 11 on;
    # skipping 3 "warm-up" points left one fast point, and the drop read as a 17% creep
    s = np.arange(50, 800, 50)
    tps = np.r_[2135.0, 2122, 2127, 2130, 1316, 1189, 1148, 1132, 1088, 1083, 1090, 1089, 1089,
                1086, 1086]
    run = Run(source="t")
    run.add("tokens_per_s", s, tps)
    run.add("epoch", s, np.repeat([10, 11, 12, 13], [4, 4, 4, 3]))
    (f,) = run_detector("throughput_regression", run)
    assert f.severity == "warning" and f.onset_step == 250
