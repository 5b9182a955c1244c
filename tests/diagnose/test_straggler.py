"""The straggler rule on synthetic per-rank timings, shaped as DDP produces them: the step time
equal on every rank (the gradient all-reduce makes the fast ranks wait), the slow rank
visible only in the work before the sync (its data wait or its forward). Magnitudes, rank
counts and noise vary; equal ranks must stay quiet however noisy they are."""

from __future__ import annotations

import numpy as np
import pytest

from trainmedic.diagnose import diagnose
from trainmedic.diagnose.detectors.stragglers import straggler_events
from trainmedic.diagnose.finding import Finding
from trainmedic.diagnose.registry import get_detector
from trainmedic.run.series import Run


def stragglers(run: Run) -> list[Finding]:
    res = get_detector("straggler").fn(run)
    assert isinstance(res, list), res
    return res


def ddp_run(*, ranks: int, n: int = 400, fwd_s: float = 0.03, rest_s: float = 0.06,
            noise: float = 0.05, seed: int = 0, slow_rank: int | None = None,
            extra_data_s: float = 0.0, compute_factor: float = 1.0,
            log: tuple[str, ...] = ("step_time_s", "data_time_s", "compute_time_s"),
            heavy: bool = False, onset: int = 0, until: int | None = None) -> Run:
    """Per-rank timings of a synchronous data-parallel run. Each rank's data wait and
    forward are its own; the step is the slowest rank's pre-sync work plus the rest
    (backward, all-reduce, optimizer), the same on every rank. ``noise`` is the log-normal
    sigma per step (Student-t with 3 dof when ``heavy``: occasional long stalls). The slow
    rank is slow from step ``onset`` to ``until`` (exclusive; None: to the end)."""
    rng = np.random.default_rng(seed)
    steps = np.arange(n)

    def jitter(size: int | tuple[int, int]) -> np.ndarray:
        z = rng.standard_t(3, size) if heavy else rng.standard_normal(size)
        return np.exp(noise * np.clip(z, -8, 8))

    data = 0.0002 * jitter((ranks, n))  # a prefetching loader: ~0.2 ms
    fwd = fwd_s * jitter((ranks, n))
    if slow_rank is not None:
        on = (steps >= onset) & (steps < (n if until is None else until))
        data[slow_rank] += np.where(on, extra_data_s * jitter(n), 0.0)
        fwd[slow_rank] *= np.where(on, compute_factor, 1.0)
    pre = data + fwd
    step = pre.max(axis=0) + rest_s * jitter(n)
    run = Run("ddp")
    for r in range(ranks):
        cols = {"step_time_s": step * (1 + 0.002 * rng.standard_normal(n)),
                "data_time_s": data[r], "compute_time_s": fwd[r]}
        for m in log:
            run.add(m, steps, cols[m], rank=r)
    return run


# ------------------------------------------------------------------------ must fire
@pytest.mark.parametrize("ranks,slow", [(2, 1), (4, 0), (8, 5)])
@pytest.mark.parametrize("extra_s,severity", [(0.05, "warning"), (0.013, "info")])
def test_slow_input_on_one_rank(ranks: int, slow: int, extra_s: float, severity: str) -> None:
    """An extra 50 ms (~35% of the step) or 13 ms (~13%) of data wait on one rank."""
    for seed in range(3):
        run = ddp_run(ranks=ranks, slow_rank=slow, extra_data_s=extra_s, noise=0.15,
                      seed=seed)
        found = stragglers(run)
        assert [(f.rank, f.metric, f.severity) for f in found] == [
            (slow, "data_time_s", severity)], [f.summary for f in found]
        assert "input pipeline" in found[0].summary


@pytest.mark.parametrize("ranks,slow", [(2, 0), (4, 3), (16, 7)])
@pytest.mark.parametrize("factor,severity", [(1.5, "warning"), (1.14, "info")])
def test_slow_compute_on_one_rank(ranks: int, slow: int, factor: float,
                                  severity: str) -> None:
    for seed in range(3):
        run = ddp_run(ranks=ranks, slow_rank=slow, compute_factor=factor, noise=0.05,
                      seed=seed)
        found = stragglers(run)
        assert [(f.rank, f.metric, f.severity) for f in found] == [
            (slow, "compute_time_s", severity)], [f.summary for f in found]


def test_slow_input_without_step_time_uses_data_plus_compute() -> None:
    run = ddp_run(ranks=4, slow_rank=2, extra_data_s=0.03, log=("data_time_s",
                                                                 "compute_time_s"))
    found = stragglers(run)
    assert [(f.rank, f.metric) for f in found] == [(2, "data_time_s")]


def test_rank_slow_in_both_gets_one_finding_named_by_the_larger() -> None:
    run = ddp_run(ranks=4, slow_rank=1, extra_data_s=0.02, compute_factor=2.0)
    found = stragglers(run)
    assert [(f.rank, f.metric) for f in found] == [(1, "compute_time_s")]
    assert any(e.metric == "data_time_s" for e in found[0].evidence)


def test_two_stragglers_on_two_ranks_are_both_named() -> None:
    """Rank 1 waits 20 ms more for data; rank 3 computes 60 ms more: more than a wait for
    rank 1 could explain, so both are reported."""
    run = ddp_run(ranks=4, slow_rank=1, extra_data_s=0.02)
    fwd3 = run.series[("compute_time_s", 3)]
    run.series[("compute_time_s", 3)] = type(fwd3)(fwd3.steps, fwd3.values * 3.0)
    found = stragglers(run)
    assert sorted((f.rank, f.metric) for f in found) == [(1, "data_time_s"),
                                                         (3, "compute_time_s")]


@pytest.mark.parametrize("ranks", [2, 4])
def test_forward_that_waits_for_the_data_straggler_is_not_blamed(ranks: int) -> None:
    """A collective inside the timed forward (DDP broadcast_buffers, FSDP all-gather): the
    fast ranks' forwards absorb the slow rank's extra data wait. With two ranks the fast
    one's forward is then the slower forward by about that wait."""
    slow = ranks - 1
    run = ddp_run(ranks=ranks, slow_rank=slow, extra_data_s=0.03)
    d = run.series[("data_time_s", slow)].values
    for r in range(ranks - 1):
        s = run.series[("compute_time_s", r)]
        run.series[("compute_time_s", r)] = type(s)(s.steps, s.values + d)
    found = stragglers(run)
    assert [(f.rank, f.metric) for f in found] == [(slow, "data_time_s")]
    if ranks == 2:
        assert any("collective inside the timed forward" in e.note
                   for e in found[0].evidence)


def test_step_time_alone_is_used_when_nothing_else_is_logged() -> None:
    """Without DDP (ranks not synchronized each step) a slow rank shows in its step time;
    it is the weaker evidence, said with lower confidence and a hint to log the split."""
    rng = np.random.default_rng(3)
    run = Run("async")
    for r in range(4):
        st = 0.2 * np.exp(0.05 * rng.standard_normal(300)) * (1.3 if r == 0 else 1.0)
        run.add("step_time_s", np.arange(300), st, rank=r)
    found = stragglers(run)
    assert [(f.rank, f.metric, f.severity) for f in found] == [(0, "step_time_s", "warning")]
    assert found[0].confidence < 0.85 and "data_time_s" in found[0].summary


# ------------------------------------------------------------------------ must not fire
@pytest.mark.parametrize("ranks", [2, 3, 8])
@pytest.mark.parametrize("noise,heavy", [(0.05, False), (0.3, False), (0.3, True)])
@pytest.mark.parametrize("fwd_s,n", [(0.03, 400), (0.0003, 40), (0.5, 60)])
def test_equal_ranks_stay_quiet(ranks: int, noise: float, heavy: bool, fwd_s: float,
                                n: int) -> None:
    """Equal ranks, from a 2 ms CPU step to a 1.5 s step, Gaussian or heavy-tailed noise."""
    for seed in range(5):
        run = ddp_run(ranks=ranks, n=n, fwd_s=fwd_s, rest_s=2 * fwd_s, noise=noise,
                      heavy=heavy, seed=seed)
        assert stragglers(run) == [], [f.summary for f in stragglers(run)]


def test_equal_ranks_with_a_consistent_sub_millisecond_offset_stay_quiet() -> None:
    """Tiny CPU steps: one rank consistently 0.1 ms slower (core placement, a logging call):
    a big share of a 0.3 ms forward, nothing the job would notice."""
    run = ddp_run(ranks=2, n=200, fwd_s=0.0003, rest_s=0.002, noise=0.05)
    s = run.series[("compute_time_s", 1)]
    run.series[("compute_time_s", 1)] = type(s)(s.steps, s.values + 0.0001)
    assert stragglers(run) == []


def test_ranks_taking_turns_being_slow_is_no_straggler() -> None:
    """Contention that moves between hosts: each rank is the slow one half of the time."""
    run = ddp_run(ranks=2, n=400, noise=0.05)
    for r in (0, 1):
        s = run.series[("compute_time_s", r)]
        slow = (np.arange(400) // 50) % 2 == r
        run.series[("compute_time_s", r)] = type(s)(s.steps, s.values * np.where(slow, 1.5,
                                                                                 1.0))
    assert stragglers(run) == []


def test_slow_only_during_warm_up_is_no_straggler() -> None:
    """Rank 0 compiles / builds its caches for the first steps, then matches the others."""
    run = ddp_run(ranks=4, n=300)
    s = run.series[("compute_time_s", 0)]
    v = s.values.copy()
    v[:6] += 2.0
    run.series[("compute_time_s", 0)] = type(s)(s.steps, v)
    assert stragglers(run) == []


def test_synchronized_step_times_with_bimodal_medians_stay_quiet() -> None:
    """Only step_time_s logged, equal step by step on both ranks, but bimodal (17 / 20 ms):
    the medians can land on different modes (measured on two gloo ranks: 18.5 vs 17.1 ms)."""
    rng = np.random.default_rng(1)
    base = np.where(rng.random(200) < 0.5, 0.017, 0.020)
    run = Run("ddp")
    for r in (0, 1):
        run.add("step_time_s", np.arange(200), base + 0.0001 * rng.standard_normal(200),
                rank=r)
    assert stragglers(run) == []


def test_one_rank_has_nothing_to_compare_and_is_not_listed() -> None:
    """A single-process run (one rank, or no rank files) cannot have a straggler: no finding,
    and no "check not run" asking for per-rank timings it could never have."""
    assert stragglers(ddp_run(ranks=1)) == []
    single = Run("single")
    single.add("step_time_s", np.arange(100), np.full(100, 0.1))
    assert stragglers(single) == []
    d = diagnose(single)
    assert "straggler" not in {c.symptom for c in d.checks_not_run}


def test_several_ranks_without_timings_is_not_run() -> None:
    run = Run("ddp")
    for r in (0, 1):
        run.add("loss", np.arange(100), np.linspace(3, 1, 100), rank=r)
    res = get_detector("straggler").fn(run)
    assert not isinstance(res, list) and "data_time_s" in res.missing


# ------------------------------------------------------------- a rank that becomes slow
@pytest.mark.parametrize("ranks,slow", [(2, 1), (4, 2), (8, 5)])
@pytest.mark.parametrize("at", [0.3, 0.5, 0.7])
def test_rank_that_becomes_a_data_straggler_is_named_with_its_onset(ranks: int, slow: int,
                                                                    at: float) -> None:
    """From step ``at * n`` on, one rank's loader waits an extra 40 ms (~30% of the step)."""
    n = 600
    for seed in range(2):
        run = ddp_run(ranks=ranks, n=n, slow_rank=slow, extra_data_s=0.04, noise=0.15,
                      seed=seed, onset=int(at * n))
        (f,) = stragglers(run)
        assert f.rank == slow and f.metric == "data_time_s" and f.severity == "warning"
        assert f.onset_step is not None and abs(f.onset_step - at * n) <= 0.05 * n, f
        assert f.end_step is None


@pytest.mark.parametrize("factor,severity", [(1.5, "warning"), (1.15, "info")])
def test_rank_whose_forward_slows_halfway(factor: float, severity: str) -> None:
    run = ddp_run(ranks=4, n=800, slow_rank=3, compute_factor=factor, noise=0.05, seed=3,
                  onset=400)
    (f,) = stragglers(run)
    assert (f.rank, f.metric, f.severity) == (3, "compute_time_s", severity)
    assert f.onset_step is not None and abs(f.onset_step - 400) <= 40


def test_slow_stretch_that_ends_has_an_end_step() -> None:
    run = ddp_run(ranks=4, n=1000, slow_rank=1, extra_data_s=0.05, noise=0.1, seed=5,
                  onset=300, until=700)
    (f,) = stragglers(run)
    assert f.rank == 1 and f.onset_step is not None and f.end_step is not None
    assert abs(f.onset_step - 300) <= 50 and abs(f.end_step - 700) <= 50


def test_always_slow_rank_keeps_the_whole_run_onset() -> None:
    run = ddp_run(ranks=4, n=400, slow_rank=2, extra_data_s=0.05, noise=0.1, seed=1)
    (f,) = stragglers(run)
    assert f.rank == 2 and f.onset_step == 0 and f.end_step is None


def test_short_slow_burst_is_no_straggler() -> None:
    """Slow for 10% of the run (a noisy neighbour for a while) is below the 20% stretch."""
    run = ddp_run(ranks=4, n=1000, slow_rank=1, extra_data_s=0.05, noise=0.1, seed=2,
                  onset=500, until=580)
    assert stragglers(run) == []


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_equal_noisy_ranks_have_no_onset(seed: int, ranks: int) -> None:
    run = ddp_run(ranks=ranks, n=1000, noise=0.25, heavy=seed % 2 == 1, seed=100 + seed)
    assert stragglers(run) == []


def test_straggler_events_are_numbers() -> None:
    run = ddp_run(ranks=4, n=600, slow_rank=2, extra_data_s=0.04, noise=0.1, seed=4,
                  onset=300)
    ev = straggler_events(run)
    assert ev is not None and len(ev.events) == 1
    e = ev.events[0]
    assert e.rank == 2 and e.onset is not None and abs(e.onset - 300) <= 30
    assert e.share_before is not None and abs(e.share_before) < 0.05
    # ~40 ms of extra wait on a step of ~0.03 + 0.04 + 0.06 s.
    assert ev.step_ref is not None and abs(e.share - 0.04 / ev.step_ref) < 0.08


def test_short_two_rank_run_with_a_straggler_from_mid_run() -> None:
    # 200 steps, rank 1 computes 4.5x slower from step 124: 38% of the run, which 10-step
    # blocks cut into too few blocks to beat chance with two ranks; 5-step blocks do not
    run = ddp_run(ranks=2, n=200, fwd_s=0.004, rest_s=0.001, slow_rank=1, compute_factor=4.5,
                  onset=124, seed=3)
    found = [f for f in stragglers(run) if f.level >= 1]
    assert len(found) == 1 and found[0].rank == 1
    assert 110 <= (found[0].onset_step or 0) <= 135


def test_short_two_rank_runs_with_equal_ranks_stay_quiet() -> None:
    for seed in range(8):
        run = ddp_run(ranks=2, n=200, fwd_s=0.004, rest_s=0.001, noise=0.15, seed=seed)
        assert not [f for f in stragglers(run) if f.level >= 1], seed


def test_a_rank_that_slows_halfway_through_a_short_log() -> None:
    # 20 logged points (every 10 steps): rank 1's forward goes from 0.4 ms to 11 ms at step
    # 110; too few points for blocks of 5, judged point by point
    run = ddp_run(ranks=2, n=20, fwd_s=0.0004, rest_s=0.001, noise=0.1, seed=3, slow_rank=1,
                  compute_factor=27.0, onset=10)
    f = stragglers(run)
    assert len(f) == 1 and f[0].rank == 1 and f[0].onset_step in (10, 11)
    # equal ranks over the same short log stay quiet
    for seed in range(5):
        assert stragglers(ddp_run(ranks=2, n=20, fwd_s=0.0004, rest_s=0.001, noise=0.3,
                                  seed=seed)) == []


def test_slow_step_time_is_named_when_the_logged_data_wait_is_equal() -> None:
    """Both ranks log an equal ~0.1 ms data wait, but rank 1's whole step takes 6x as long
    (a slow device, not a slow loader): the data split names nobody, so the step time does."""
    rng = np.random.default_rng(5)
    run = Run("two logs")
    for r in range(2):
        n = 150
        st = (0.011 if r == 1 else 0.0017) * np.exp(0.1 * rng.standard_normal(n))
        run.add("step_time_s", np.arange(n), st, rank=r)
        run.add("data_time_s", np.arange(n), 1e-4 * np.exp(0.2 * rng.standard_normal(n)),
                rank=r)
    found = stragglers(run)
    assert [(f.rank, f.metric) for f in found] == [(1, "step_time_s")]
