"""Overfitting with few, noisy evaluations; several evaluation sets; validation-only logs.

Synthetic runs built from how training behaves (a validation curve that falls to a floor,
then rises while the training loss keeps falling; multiplicative evaluation noise). The tests
assert the numbers of ``OverfitEvent`` (onset, levels, noise sigmas, severity), not phrases.
"""

from __future__ import annotations

import numpy as np
import pytest

from trainmedic.diagnose.detectors.generalization import (
    OverfitEvent,
    appended_segments,
    detect_overfitting,
    overfit_event,
    overfit_events,
    rank_events,
)
from trainmedic.diagnose.finding import Finding
from trainmedic.diagnose.trace import Trace
from trainmedic.run.series import Run


def _findings(run: Run) -> list[Finding]:
    fs = detect_overfitting(run)
    assert isinstance(fs, list)
    return fs


def _val_curve(x: np.ndarray, turn: float, rise: float) -> np.ndarray:
    """Falls to a floor at ``turn`` (share of the run), then rises linearly to ``1 + rise``
    times the floor at the end; ``turn`` 0 rises from the first evaluation."""
    floor = 0.6 + 0.6 * np.exp(-turn / 0.15)
    down = 0.6 + 0.6 * np.exp(-x / 0.15)
    up = floor * (1 + rise * (x - turn) / max(1e-9, 1 - turn))
    return np.where(x <= turn, down, up)


def _run(n_evals: int, noise: float, turn: float, rise: float, seed: int = 0, *,
         train: bool = True, scale: float = 1.0, every: int = 100) -> Run:
    r = np.random.default_rng(seed)
    tot = every * n_evals
    run = Run("overfit-synth")
    if train:
        s = np.arange(10, tot + 1, 10)
        run.add("loss", s, scale * (0.1 + 2.0 * np.exp(-s / (tot / 5)))
                * np.exp(r.normal(0, 0.05, s.size)))
    es = np.arange(every, tot + 1, every)
    val = _val_curve(es / tot, turn, rise) * np.exp(r.normal(0, noise, es.size))
    run.add("val_loss", es, scale * val)
    return run


def _event(run: Run, metric: str = "val_loss") -> OverfitEvent | None:
    vt = Trace.of(run, metric)
    assert vt is not None
    return overfit_event(run, vt)


@pytest.mark.parametrize(("n_evals", "noise", "seed"),
                         [(10, 0.02, 0), (20, 0.04, 1), (40, 0.04, 2), (150, 0.03, 3)])
def test_noisy_rise_after_the_minimum_is_a_warning_at_the_turn(n_evals: int, noise: float,
                                                                seed: int) -> None:
    run = _run(n_evals, noise, turn=0.4, rise=0.4, seed=seed)
    ev = _event(run)
    assert ev is not None and ev.severity == "warning"
    assert ev.rise >= 0.10 and ev.sigmas >= 2.5
    assert ev.train_logged and ev.train_at_end is not None and ev.train_at_best is not None
    assert ev.train_at_end < ev.train_at_best
    true_turn = 0.4 * 100 * n_evals
    assert abs(ev.best_step - true_turn) <= max(200, 0.1 * 100 * n_evals)
    (f,) = _findings(run)
    assert f.severity == "warning" and f.onset_step == ev.best_step


@pytest.mark.parametrize("seed", range(3))
def test_rise_from_the_first_evaluation_puts_the_onset_there(seed: int) -> None:
    # Keras per-epoch log, epochs counted from 0: val rises from epoch 0 on.
    run = _run(30, 0.03, turn=0.0, rise=0.3, seed=seed, every=1)
    ev = _event(run)
    assert ev is not None and ev.severity == "warning"
    assert ev.best_step <= 2 and ev.share_after >= 0.9


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize(("n_evals", "noise"), [(8, 0.05), (20, 0.05), (40, 0.08)])
def test_flat_noisy_validation_is_never_a_warning(seed: int, n_evals: int,
                                                  noise: float) -> None:
    run = _run(n_evals, noise, turn=1.0, rise=0.0, seed=500 + seed)
    assert all(f.severity == "info" for f in _findings(run))


def test_a_lone_low_evaluation_is_not_the_onset() -> None:
    run = _run(30, 0.0, turn=0.6, rise=0.5)
    v = run.get("val_loss")
    assert v is not None
    vals = v.values.copy()
    vals[5] = 0.3 * float(vals.min())  # one bad evaluation far below the curve
    run.series[("val_loss", None)] = type(v)(v.steps, vals)
    ev = _event(run)
    assert ev is not None and ev.severity == "warning"
    assert abs(ev.best_step - 1800) <= 200


def test_a_narrow_band_loss_that_gives_back_its_progress_is_a_warning() -> None:
    # A loss on softmax outputs lives near ln(C): 2.40 -> 2.15 then back to 2.26 (+5%, over
    # 40% of the progress) for 80% of the run, with 0.5% evaluation noise.
    r = np.random.default_rng(0)
    es = np.arange(1, 201)
    x = es / 200
    val = np.where(x <= 0.2, 2.40 - 0.25 * x / 0.2, 2.15 + 0.11 * (x - 0.2) / 0.8)
    run = Run("band")
    run.add("loss", es, 2.4 * np.exp(-es / 40) + 0.02)
    run.add("val_loss", es, val * np.exp(r.normal(0, 0.005, es.size)))
    ev = _event(run)
    assert ev is not None and ev.severity == "warning"
    assert ev.given_back >= 0.25 and 0.02 <= ev.rise < 0.10
    assert abs(ev.best_step - 40) <= 20


def test_several_eval_sets_give_one_finding_at_the_earliest_onset() -> None:
    run = _run(30, 0.01, turn=1.0, rise=0.0, seed=1)  # val_loss: healthy
    es = np.arange(100, 3001, 100)
    x = es / 3000
    r = np.random.default_rng(7)
    run.add("val_loss/g1", es, _val_curve(x, 0.5, 0.4) * np.exp(r.normal(0, 0.01, 30)))
    run.add("val_loss/g2", es, 2 * _val_curve(x, 0.2, 0.6) * np.exp(r.normal(0, 0.01, 30)))
    evs = {e.metric: e for e in overfit_events(run, None)}
    assert set(evs) == {"val_loss/g1", "val_loss/g2"}
    (f,) = _findings(run)
    assert f.severity == "warning"
    assert f.onset_step == min(evs["val_loss/g1"].best_step, evs["val_loss/g2"].best_step)
    assert abs(f.onset_step - 600) <= 200
    assert f.metric == "val_loss/g2"
    assert {e.metric for e in f.evidence} >= {"val_loss/g1", "val_loss/g2"}


def test_validation_only_log_rise_is_a_warning_without_train_evidence() -> None:
    run = _run(20, 0.02, turn=0.3, rise=0.4, train=False)
    ev = _event(run)
    assert ev is not None and ev.severity == "warning" and not ev.train_logged
    (f,) = _findings(run)
    assert f.confidence <= 0.6 and "loss" not in {e.metric for e in f.evidence}


def test_validation_only_abrupt_jump_that_stays_is_not_a_warning() -> None:
    # val 1.0 falling, then x3 between two evaluations and flat there: a divergence, not a
    # slow memorization; with no training loss to show memorization, at most info.
    es = np.arange(1, 21) * 100
    val = np.concatenate([np.linspace(1.0, 0.8, 10), np.full(10, 2.4)])
    val = val * np.exp(np.random.default_rng(0).normal(0, 0.01, 20))
    run = Run("jump")
    run.add("val_loss", es, val)
    ev = _event(run)
    assert ev is not None and ev.abrupt_jump >= 2.0 and ev.severity == "info"


@pytest.mark.parametrize("scale", [1e-6, 1e3])
def test_tiny_and_large_scales_give_the_same_numbers(scale: float) -> None:
    ref = _event(_run(20, 0.03, turn=0.4, rise=0.3, seed=4))
    ev = _event(_run(20, 0.03, turn=0.4, rise=0.3, seed=4, scale=scale))
    assert ref is not None and ev is not None
    assert ev.severity == ref.severity == "warning" and ev.best_step == ref.best_step
    assert ev.rise == pytest.approx(ref.rise, rel=1e-9)
    assert ev.sigmas == pytest.approx(ref.sigmas, rel=1e-6)


def _appended(kinds: list[str], *, fresh: bool = True) -> Run:
    """Trainings appended into one log, 15 epochs each (step = epoch, restarting at 1)."""
    run = Run("appended")
    r = np.random.default_rng(3)
    e = np.arange(1, 16)
    x = e / 15
    for j, kind in enumerate(kinds):
        start = 2.6 if fresh or j == 0 else 0.3
        run.add("loss", e, start * np.exp(-2.5 * x) * np.exp(r.normal(0, 0.02, 15)))
        turn, rise = (0.3, 0.4) if kind == "overfit" else (1.0, 0.0)
        run.add("val_loss", e, 3 * _val_curve(x, turn, rise) * np.exp(r.normal(0, 0.01, 15)))
    return run


def test_appended_runs_are_judged_one_by_one() -> None:
    run = _appended(["ok", "overfit", "ok", "overfit"])
    evs = overfit_events(run, None)  # the clean series mixes the runs: last value wins
    (f,) = _findings(run)
    assert f.severity == "warning" and f.onset_step is not None
    assert abs(f.onset_step - 0.3 * 15) <= 2
    segs = {e.segment for e in rank_events(run, None) if e.severity == "warning"}
    assert segs == {2, 4} and all(e.n_segments == 4 for e in rank_events(run, None))
    assert evs and all(e.segment is None for e in evs)


def test_a_restarting_counter_with_the_loss_carrying_on_is_not_split() -> None:
    assert appended_segments(_appended(["ok", "ok"], fresh=False), None) is None
    assert appended_segments(_appended(["ok", "ok"]), None) is not None


def _dnabert_like(train_fall: float) -> Run:
    # 11 evaluations (HF eval every 200 steps): the best at 800, then a noisy rise of ~15%;
    # the training loss falls `train_fall` times over from step 800 to the end
    run = Run("memorize")
    es = np.arange(200, 2201, 200)
    run.add("val_loss", es, np.array([0.314, 0.255, 0.267, 0.232, 0.303, 0.272, 0.254, 0.283,
                                      0.294, 0.294, 0.288]))
    s = np.arange(10, 2201, 10)
    at_best = 0.18
    run.add("loss", s, np.where(s <= 800, 0.7 - (0.7 - at_best) * s / 800,
                                at_best / train_fall ** ((s - 800) / 1400)))
    return run


def test_a_noisy_rise_while_the_training_loss_falls_7x_is_a_warning() -> None:
    ev = overfit_events(_dnabert_like(7.0), None)
    assert len(ev) == 1 and ev[0].best_step == 800 and ev[0].severity == "warning"


def test_the_same_noisy_rise_without_memorization_stays_info() -> None:
    ev = overfit_events(_dnabert_like(1.3), None)
    assert all(e.severity == "info" for e in ev)


def test_a_training_loss_logged_as_zero_shows_no_memorization() -> None:
    # HF rounds the training loss to 4 decimals: a regression at 1e-6 logs 0.0 throughout;
    # its validation loss drifts at the precision's edge
    run = Run("zeros")
    es = np.arange(25, 301, 25)
    run.add("val_loss", es, np.array([2.2, 1.7, 1.35, 1.4, 1.76, 1.86, 1.69, 1.73, 2.15, 2.84,
                                      1.98, 2.43]) * 1e-6)
    s = np.arange(5, 301, 5)
    run.add("loss", s, np.zeros(s.size))
    assert all(e.severity == "info" for e in overfit_events(run, None))


def _five_epochs(val: list[float], train: list[float]) -> Run:
    run = Run("hf5")
    run.add("loss", [1, 2, 3, 4, 5], train)
    run.add("val_loss", [1, 2, 3, 4, 5], val)
    return run


def test_a_short_series_rising_after_its_best_is_read_by_its_shape() -> None:
    # five epochs: best at 2, then every evaluation higher (0.53, 0.58, 0.64) while the
    # training loss falls 0.5 -> 0.1: the medians see only +9%, the shape says overfitting
    run = _five_epochs([0.55, 0.50, 0.53, 0.58, 0.64], [0.8, 0.5, 0.3, 0.2, 0.1])
    ev = overfit_event(run, Trace.of(run, "val_loss"))
    assert ev is not None and ev.best_step == 2 and ev.rising_tail == pytest.approx(0.28)
    assert ev.severity == "warning"


def test_a_rise_that_wobbles_or_a_training_loss_that_did_not_fall_is_not_the_shape() -> None:
    wobble = _five_epochs([0.55, 0.50, 0.58, 0.56, 0.64], [0.8, 0.5, 0.3, 0.2, 0.1])
    ev = overfit_event(wobble, Trace.of(wobble, "val_loss"))
    assert ev is not None and ev.rising_tail == 0.0
    stuck = _five_epochs([0.55, 0.50, 0.53, 0.58, 0.64], [0.5, 0.5, 0.5, 0.5, 0.5])
    ev2 = overfit_event(stuck, Trace.of(stuck, "val_loss"))
    assert ev2 is None or ev2.severity == "info"


def test_a_rise_held_over_seven_evaluations_warns() -> None:
    # an HF fine-tune, 10 evaluations: best at the third, then 9% above it to the end while
    # the training loss keeps falling
    from trainmedic.diagnose import diagnose
    from trainmedic.run.series import Run

    steps = np.arange(1035, 10351, 1035)
    run = Run("hf")
    run.add("val_loss", steps, np.array([1.4883, 1.3673, 1.3262, 1.37, 1.3609, 1.4345, 1.4409,
                                          1.4814, 1.5085, 1.4856]))
    run.add("loss", np.arange(100, 10351, 250),
            np.linspace(1.5, 1.157, len(np.arange(100, 10351, 250))))
    f = [f for f in diagnose(run).findings if f.symptom == "overfitting"]
    assert f and f[0].severity == "warning" and f[0].onset_step == 3105


def _memorizing_run(seed: int, rise: float) -> Run:
    """24 noisy evaluations (log-normal sigma 0.13: a tiny validation set) of a curve that
    bottoms out at 12% of the run and then rises by ``rise``; the training loss falls ~400x."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 1, 24)
    run = Run("t")
    ts = np.arange(0, 625, 5)
    run.add("loss", ts, 1.8 * np.exp(-ts / 60) + 0.004)
    run.add("val_loss", (x * 600).astype(int) + 24,
            _val_curve(x, 0.12, rise) * np.exp(0.13 * rng.standard_normal(24)))
    return run


def test_a_rise_hidden_in_eval_noise_is_shown_by_its_trend() -> None:
    """A 35% rise under per-evaluation noise that leaves the level test short of its sigmas:
    the robust trend after the best (>= 3 standard errors) makes it a warning in most runs,
    while the same noise over a flat curve stays under a warning in nearly all."""
    def warned(rise: float) -> int:
        return sum(any(e.severity == "warning" for e in overfit_events(
            _memorizing_run(seed, rise), None)) for seed in range(200))

    # Measured: 67 of 200 with the trend, 37 from the level test alone; 3 of 200 flat ones.
    assert warned(0.35) >= 55
    assert warned(0.0) <= 6
    ev = [e for seed in range(40) for e in overfit_events(_memorizing_run(seed, 0.35), None)]
    assert any(e.severity == "warning" and e.sigmas < 2.5 and e.trend_z >= 3 for e in ev)
