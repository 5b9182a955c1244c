"""lr_schedule_anomaly: collapse and never-ending rise, with healthy schedules as controls."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainmedic.diagnose import diagnose
from trainmedic.diagnose.detectors.schedule import schedule_events
from trainmedic.diagnose.trace import Trace
from trainmedic.run.series import Run

N = 1000


def _run(lr: np.ndarray, loss: np.ndarray | None = None) -> Run:
    run = Run(source="t")
    steps = np.arange(lr.shape[0])
    run.add("lr", steps, lr)
    if loss is not None:
        run.add("loss", steps, loss)
    return run


def _loss(rng: np.random.Generator, lr: np.ndarray) -> np.ndarray:
    """A loss that falls in proportion to the cumulative lr (progress needs lr)."""
    progress = np.cumsum(lr) / max(1e-12, float(np.sum(lr))) * 3.0
    return 2.5 * np.exp(-progress) + 0.3 + rng.normal(0, 0.01, lr.shape[0])


def _events(run: Run):
    tr = Trace.of(run, "lr")
    assert tr is not None
    return schedule_events(run, tr)


def test_per_epoch_steplr_stepped_per_batch_collapses() -> None:
    # StepLR(step_size=30, gamma=0.1) meant per epoch, stepped per batch.
    lr = 0.1 * 0.1 ** (np.arange(N) // 30)
    rng = np.random.default_rng(0)
    run = _run(lr, 2.3 - 0.4 * (1 - np.exp(-np.arange(N) / 20)) + rng.normal(0, 0.01, N))
    ev = _events(run)
    assert [e.kind for e in ev] == ["collapse"]
    assert ev[0].onset_step == 60  # below 0.01x the peak from there on (the first decay is 30)
    assert ev[0].loss_gain_after is not None and ev[0].loss_gain_after < 0.05
    f = [f for f in diagnose(run).findings if f.symptom == "lr_schedule_anomaly"]
    assert len(f) == 1 and f[0].severity == "error" and f[0].onset_step == 60


def test_warmup_that_never_ends() -> None:
    lr = 3e-4 * np.arange(1, N + 1) / 5000  # warm-up over 5000 steps, the run has 1000
    rng = np.random.default_rng(1)
    run = _run(lr, _loss(rng, lr))
    ev = _events(run)
    assert [e.kind for e in ev] == ["rise"]
    assert ev[0].onset_step == 0 and ev[0].fraction > 0.9


def test_a_warmup_that_starts_over_every_epoch_is_an_anomaly() -> None:
    # warm-up over 80 steps keyed to the step within a 250-step epoch
    s = np.arange(N)
    lr = 1e-2 * np.minimum(1.0, (s % 250 + 1) / 80)
    run = _run(lr, _loss(np.random.default_rng(3), lr))
    ev = _events(run)
    assert [e.kind for e in ev] == ["restarts"] and ev[0].onset_step == 250
    f = [f for f in diagnose(run).findings if f.symptom == "lr_schedule_anomaly"]
    assert len(f) == 1 and f[0].severity == "warning"


def test_a_cosine_that_goes_back_up_past_its_t_max_is_an_anomaly() -> None:
    # CosineAnnealingLR(T_max=N/2) over N steps (or stepped twice per step): down, then up
    s = np.arange(N)
    lr = 1.5e-3 * (1 + np.cos(math.pi * s / (N / 2)))
    run = _run(lr, _loss(np.random.default_rng(4), lr))
    ev = _events(run)
    assert [e.kind for e in ev] == ["rebound"] and ev[0].onset_step == N // 2
    f = [f for f in diagnose(run).findings if f.symptom == "lr_schedule_anomaly"]
    assert len(f) == 1 and f[0].severity == "warning"


def test_a_cosine_stepped_per_micro_batch_cycles_a_few_times_and_is_an_anomaly() -> None:
    # CosineAnnealingLR(eta_min=0) whose T_max ran out after a fifth of the run: it goes back
    # up and down twice more, too few cycles for the per-batch "cycles" rule (>= 8).
    s = np.arange(N)
    lr = 1.5e-3 * (1 + np.cos(math.pi * s / (N / 5)))
    run = _run(lr, _loss(np.random.default_rng(5), lr))
    ev = _events(run)
    assert [e.kind for e in ev] == ["rebound"] and ev[0].count >= 2
    assert abs(ev[0].onset_step - N // 5) <= 2


@pytest.mark.parametrize("name", ["warmup_cosine", "warmup_constant", "step_decay",
                                  "exponential", "cosine_to_zero", "constant", "linear_decay",
                                  "one_cycle", "plateau_decay", "sgdr", "triangular"])
def test_healthy_schedules_are_quiet(name: str) -> None:
    s = np.arange(N, dtype=float)
    warm = np.minimum(1.0, (s + 1) / 100)
    lr = {
        "warmup_cosine": 1e-3 * warm * 0.5 * (1 + np.cos(math.pi * s / N)),
        "warmup_constant": 1e-3 * warm,
        "step_decay": 0.1 * 0.1 ** (s // 400),
        "exponential": 0.1 * 0.995 ** s,
        "cosine_to_zero": 1e-3 * 0.5 * (1 + np.cos(math.pi * s / (N - 1))),
        "constant": np.full(N, 3e-4),
        "linear_decay": 5e-5 * (1 - s / N),
        "one_cycle": np.where(s < 300, 1e-4 + (1e-2 - 1e-4) * s / 300,
                              1e-2 * (1 - (s - 300) / 700) + 1e-6),
        "plateau_decay": 1e-3 * 0.5 ** (s // 250),
        # warm restarts by design: a slow decay, then a jump up (SGDR), or a triangle (CLR)
        "sgdr": 1e-5 + 1e-3 * 0.5 * (1 + np.cos(math.pi * (s % 250) / 250)),
        "triangular": 1e-4 + 1e-3 * (1 - np.abs((s % 200) / 100 - 1)),
    }[name]
    rng = np.random.default_rng(2)
    run = _run(lr, _loss(rng, lr))
    assert _events(run) == []
    assert not [f for f in diagnose(run).findings if f.symptom == "lr_schedule_anomaly"]


def test_collapse_at_the_end_is_a_schedule_ending() -> None:
    s = np.arange(N, dtype=float)
    lr = 1e-3 * np.where(s < 900, 1.0, 1e-5)
    assert _events(_run(lr)) == []


def test_endless_warmup_severity_follows_the_loss() -> None:
    s = np.arange(N, dtype=float)
    lr = 1e-2 * (s + 1) / N
    rng = np.random.default_rng(3)
    falling = _loss(rng, lr)
    # The loss stops improving and rises over the second half as the lr keeps growing.
    hurt = np.where(s < 500, 2.0 - s / 500, 1.0 + (s - 500) / 1000) + rng.normal(0, 0.01, N)
    f_ok = [f for f in diagnose(_run(lr, falling)).findings
            if f.symptom == "lr_schedule_anomaly"]
    run_bad = _run(lr, hurt)
    f_bad = [f for f in diagnose(run_bad).findings if f.symptom == "lr_schedule_anomaly"]
    assert [f.severity for f in f_ok] == ["info"]
    assert [f.severity for f in f_bad] == ["warning"]
    # The same hurting log, known to stop before the planned end: info.
    run_bad.meta["max_steps"] = 5 * N
    f = [f for f in diagnose(run_bad).findings if f.symptom == "lr_schedule_anomaly"]
    assert [x.severity for x in f] == ["info"]


def test_cosine_per_epoch_stepped_per_batch_cycles_to_zero() -> None:
    s = np.arange(N, dtype=float)
    lr = 5e-3 * 0.5 * (1 + np.cos(np.pi * (s % 20) / 20))  # T_max = 20 "epochs", per batch
    ev = _events(_run(lr))
    assert [e.kind for e in ev] == ["cycles"] and ev[0].count == 50


def test_warm_restarts_by_design_are_not_cycles() -> None:
    s = np.arange(N, dtype=float)
    # SGDR with T_0 = 100, T_mult = 2: restarts at 100, 300, 700.
    t = np.where(s < 100, s / 100, np.where(s < 300, (s - 100) / 200, (s - 300) / 400))
    lr = 1e-3 * 0.5 * (1 + np.cos(np.pi * t))
    assert _events(_run(lr)) == []


def test_one_warm_up_run_again_mid_run_is_an_anomaly_but_a_step_decay_is_not() -> None:
    # warm-up to 3e-3 over 60 steps, constant; at step 255 a scheduler re-created after a
    # crash runs its warm-up again (2.5e-4, 5e-4, ... back to 3e-3 by 310)
    s = np.arange(0, 400, 5)
    lr = np.minimum(3e-3, 3e-3 * (s + 5) / 60)
    lr = np.where(s >= 255, np.minimum(3e-3, 3e-3 * (s - 250) / 60), lr)
    ev = _events(_run(lr))
    assert [e.kind for e in ev] == ["restarts"] and ev[0].count == 1
    # a planned step decay falls once and never climbs back; SGDR jumps back up at once
    decay = np.where(s >= 255, 3e-4, 3e-3)
    assert _events(_run(decay)) == []
    jump = np.where((s >= 255) & (s < 300), 3e-4, 3e-3)
    assert _events(_run(jump)) == []


def test_a_geometric_rise_is_not_a_warm_up_even_when_the_loss_falls() -> None:
    # ExponentialLR(gamma=1.02) where 0.98 was meant: x1.02 per step for the whole run; the
    # loss still falls at the end, as the lr finally gets large enough
    rng = np.random.default_rng(21)
    lr = 2e-4 * 1.02 ** np.arange(200)
    f = [f for f in diagnose(_run(lr, _loss(rng, lr))).findings
         if f.symptom == "lr_schedule_anomaly"]
    assert f and f[0].severity == "warning" and "geometrically" in f[0].summary


def test_a_linear_warm_up_longer_than_the_run_with_a_falling_loss_stays_info() -> None:
    rng = np.random.default_rng(22)
    lr = 1e-3 * (np.arange(300) + 1) / 3000
    f = [f for f in diagnose(_run(lr, _loss(rng, lr))).findings
         if f.symptom == "lr_schedule_anomaly"]
    assert f and f[0].severity == "info" and "geometrically" not in f[0].summary


def test_a_per_epoch_log_still_in_its_warm_up_with_a_falling_loss_stays_info() -> None:
    # DINO's log.txt, 11 epochs of a 10-epoch warm-up: its last 40% is 5 points
    lr = 3.125e-4 * (np.arange(11) + 0.5) / 10.5
    loss = 3.4 + 4.0 * np.exp(-np.arange(11) / 3)
    f = [f for f in diagnose(_run(lr, loss)).findings if f.symptom == "lr_schedule_anomaly"]
    assert f and f[0].severity == "info"


def _resumed(lr_after: float, loss_after: float) -> Run:
    # a poly schedule near its end (lr ~1e-7 at iteration 50000), then a restart that logs
    # iteration 1, 2, 3 again
    run = Run(source="t")
    steps = np.r_[np.arange(49991, 50001), np.arange(1, 4)]
    lr = np.r_[np.linspace(1e-6, 6e-8, 10), np.full(3, lr_after)]
    loss = np.r_[np.full(10, 0.038), np.full(3, loss_after)]
    run.add("lr", steps, lr)
    run.add("loss", steps, loss)
    return run


def test_a_resume_that_restarts_the_lr_schedule_is_an_anomaly() -> None:
    f = [f for f in diagnose(_resumed(1e-3, 0.0425)).findings
         if f.symptom == "lr_schedule_anomaly"]
    assert len(f) == 1 and f[0].severity == "warning" and f[0].onset_step == 1
    assert "scheduler" in f[0].summary


def test_a_resume_with_its_lr_restored_or_a_new_training_appended_is_not() -> None:
    # the lr carries on from where it was: a clean resume
    assert not [f for f in diagnose(_resumed(6e-8, 0.038)).findings
                if f.symptom == "lr_schedule_anomaly"]
    # the loss is back at a from-scratch level: a new training appended, not a resume
    run = Run(source="t")
    steps = np.r_[np.arange(41, 51), np.arange(1, 4)]
    run.add("lr", steps, np.r_[np.linspace(1e-6, 6e-8, 10), np.full(3, 1e-3)])
    run.add("loss", steps, np.r_[np.linspace(0.3, 0.038, 10), np.full(3, 2.5)])
    assert [f for f in diagnose(run).findings if f.symptom == "resume_discontinuity"]
    assert not [f for f in diagnose(run).findings if f.symptom == "lr_schedule_anomaly"]


def test_a_resume_to_an_older_checkpoint_before_a_step_decay_is_not_a_reset() -> None:
    # StepLR /10 at 45000; the run resumes from the checkpoint at 40000, whose lr was 10x
    run = Run(source="t")
    steps = np.r_[np.arange(40000, 50001, 1000), np.arange(40500, 43501, 1000)]
    lr = np.r_[np.where(np.arange(40000, 50001, 1000) < 45000, 1e-3, 1e-4), np.full(4, 1e-3)]
    loss = np.r_[np.linspace(0.5, 0.4, 11), np.linspace(0.49, 0.47, 4)]
    run.add("lr", steps, lr)
    run.add("loss", steps, loss)
    assert not [f for f in diagnose(run).findings if f.symptom == "lr_schedule_anomaly"]


def _zero_lr_run(steps: np.ndarray, lr: np.ndarray, loss: np.ndarray) -> Run:
    run = Run(source="t")
    run.add("lr", steps, lr)
    run.add("loss", steps, loss)
    return run


def _schedule_findings(run: Run):
    return [f for f in diagnose(run).findings if f.symptom == "lr_schedule_anomaly"]


def test_an_lr_of_zero_in_a_log_that_starts_mid_run_is_an_anomaly_even_when_short() -> None:
    # Seven points from step 5310, lr printed 0.00000000, the loss noisy and not falling.
    steps = np.arange(5310, 5317)
    loss = np.array([16.03, 15.38, 17.14, 16.35, 12.68, 15.48, 16.02])
    f = _schedule_findings(_zero_lr_run(steps, np.zeros(7), loss))
    assert len(f) == 1 and f[0].severity == "warning" and f[0].onset_step == 5310
    assert "exactly 0" in f[0].summary
    assert any(c.checked_against_data and "all 7 lr values" in c.note for c in f[0].causes)


def test_an_lr_that_reaches_zero_and_stays_there_for_the_rest_of_the_run() -> None:
    # A linear decay whose total steps (600) are shorter than the run (1000): 40% at lr 0.
    steps = np.arange(0, 1000, 10)
    lr = np.maximum(0.0, 1e-3 * (1 - steps / 600))
    rng = np.random.default_rng(3)
    loss = np.where(steps < 600, 3.0 - 2.0 * steps / 600, 1.0) + rng.normal(0, 0.02, steps.size)
    f = _schedule_findings(_zero_lr_run(steps, lr, loss))
    assert len(f) == 1 and f[0].onset_step == 600 and "39% of the run" in f[0].summary


@pytest.mark.parametrize("case", ["falling_loss", "zero_at_last_point", "zero_from_start"])
def test_a_zero_lr_that_costs_nothing_or_is_a_setting_is_not_a_schedule_anomaly(case) -> None:
    steps = np.arange(5310, 5330)
    lr, loss = np.zeros(20), np.linspace(3.0, 1.0, 20)  # printed rounded: the loss still fell
    if case == "zero_at_last_point":  # a linear decay ending at 0 on the last step
        steps = np.arange(0, 200, 10)
        lr, loss = np.linspace(1e-3, 0.0, 20), np.full(20, 2.0)
    if case == "zero_from_start":  # lr 0 from step 5: flat_loss's cause, not a schedule
        steps = np.arange(5, 105, 5)
        loss = np.full(20, 3.74) + np.random.default_rng(0).normal(0, 0.01, 20)
    assert _schedule_findings(_zero_lr_run(steps, lr, loss)) == []


def test_an_lr_that_goes_negative_is_an_anomaly() -> None:
    # a linear decay to 0 at 45% of the run that carries on below 0
    s = np.arange(N)
    lr = 3e-3 * (1 - s / (0.45 * N))
    rng = np.random.default_rng(6)
    run = _run(lr, _loss(rng, np.abs(lr)))
    f = [f for f in diagnose(run).findings if f.symptom == "lr_schedule_anomaly"]
    assert f and f[0].severity == "error" and abs(f[0].onset_step - int(0.45 * N)) <= 2
