"""divergence inside the run (a creep that later came down), above-uniform cross-entropy, and
a validation-only log; healthy controls stay quiet."""

from __future__ import annotations

import math

import numpy as np

from trainmedic.diagnose import diagnose
from trainmedic.run.series import Run


def _loud(run: Run, symptom: str) -> list:
    return [f for f in diagnose(run).findings if f.symptom == symptom and f.level >= 1]


def test_creep_inside_the_run_is_a_divergence() -> None:
    rng = np.random.default_rng(0)
    s = np.arange(200)
    # Falls to 1.6 by step 80, creeps up 25% to step 160, then an lr drop brings it down.
    base = np.where(s < 80, 8 * np.exp(-s / 15) + 1.6, 1.6 * (1 + 0.25 * (s - 80) / 80))
    base = np.where(s >= 160, 1.7, base)
    run = Run(source="t")
    run.add("loss", s, base * np.exp(rng.normal(0, 0.02, 200)))
    f = _loud(run, "divergence")
    assert len(f) == 1
    assert 70 <= f[0].onset_step <= 95 and f[0].end_step is not None
    assert 150 <= f[0].end_step <= 165


def test_healthy_decay_with_noise_has_no_creep() -> None:
    for seed in range(5):
        rng = np.random.default_rng(seed)
        s = np.arange(300)
        run = Run(source="t")
        run.add("loss", s, (2.5 * np.exp(-s / 60) + 0.4) * np.exp(rng.normal(0, 0.05, 300)))
        assert not _loud(run, "divergence")


def test_cross_entropy_above_any_vocabulary_is_divergence_from_the_start() -> None:
    s = np.arange(0, 10000, 100)
    loss = np.where(s < 5000, 18.0 + 0.0002 * s, 8.0)
    run = Run(source="t")
    run.add("loss", s, loss)
    run.add("ppl", s, np.exp(loss))
    f = _loud(run, "divergence")
    assert len(f) == 1 and f[0].severity == "error" and f[0].onset_step == 0
    # The same numbers without a perplexity (an MSE, say) are not judged by that level.
    run2 = Run(source="t")
    run2.add("loss", s, loss)
    assert not [f for f in diagnose(run2).findings
                if f.symptom == "divergence" and f.onset_step == 0]


def test_validation_only_log_is_judged_for_divergence() -> None:
    s = np.arange(1, 41) * 100
    val = np.where(s < 2000, 6.0 - 0.0002 * s, 12.0 + 0.1 * np.sin(s))
    run = Run(source="t")
    run.add("val_loss", s, val)
    f = _loud(run, "divergence")
    assert len(f) == 1 and f[0].metric == "val_loss" and abs(f[0].onset_step - 2000) <= 200
    assert math.isfinite(f[0].confidence)


def test_sawtooth_of_class_sorted_data_is_an_oscillation_not_a_divergence() -> None:
    rng = np.random.default_rng(4)
    s = np.arange(200)
    # Each "epoch" of 40 steps walks the classes in order: the loss falls within a class
    # block, then jumps when the next class starts.
    base = 0.8 + 1.1 * (1 - (s % 40) / 40)
    base[:20] = np.linspace(1.5, 0.8, 20)
    run = Run(source="t")
    run.add("loss", s, base * np.exp(rng.normal(0, 0.02, 200)))
    loud = {f.symptom for f in diagnose(run).findings if f.level >= 1}
    assert "oscillation" in loud and "divergence" not in loud


def test_two_isolated_spikes_are_not_an_oscillation() -> None:
    rng = np.random.default_rng(5)
    s = np.arange(300)
    loss = 1e-6 * np.exp(rng.normal(0, 0.1, 300))
    loss[150:170] *= 1e5
    loss[240:260] *= 1e5
    run = Run(source="t")
    run.add("loss", s, loss)
    loud = {f.symptom for f in diagnose(run).findings if f.level >= 1}
    assert "oscillation" not in loud and "loss_spike" in loud


def test_early_spike_without_trailing_history_is_found() -> None:
    # A per-epoch log: the 4th epoch jumps 4x above both what came before and after.
    rng = np.random.default_rng(6)
    s = np.arange(1, 101)
    loss = (0.6 * np.exp(-s / 60) + 0.3) * np.exp(rng.normal(0, 0.01, 100))
    loss[3] *= 4.0
    run = Run(source="t")
    run.add("loss", s, loss)
    f = [f for f in diagnose(run).findings if f.symptom == "loss_spike"]
    assert f and f[0].onset_step == 4 and f[0].severity == "warning"


def test_healthy_fast_start_has_no_early_spike() -> None:
    for seed in range(5):
        rng = np.random.default_rng(seed)
        s = np.arange(1, 101)
        loss = (3.0 * np.exp(-s / 5) + 0.3) * np.exp(rng.normal(0, 0.03, 100))
        run = Run(source="t")
        run.add("loss", s, loss)
        run.add("val_loss", s, loss * 1.1)
        assert not [f for f in diagnose(run).findings if f.symptom == "loss_spike"]


def test_validation_only_slow_rise_is_left_to_overfitting() -> None:
    s = np.arange(1, 61) * 100
    val = np.where(s < 2000, 3.0 - 0.0005 * s, 2.0 + 0.0002 * (s - 2000))
    run = Run(source="t")
    run.add("val_loss", s, val)
    assert not _loud(run, "divergence")


def test_spike_on_a_steeply_falling_sparse_curve_is_measured_against_its_local_level() -> None:
    # Logged every 10 steps while falling fast: the trailing median lags the level at the
    # spike (0.80 against a local 0.60), the two-sided reference does not.
    s = np.arange(9, 200, 10)
    loss = 1.3 * np.exp(-s / 120) + 0.05
    loss[9] = 3.5 * (1.3 * np.exp(-99 / 120) + 0.05)
    run = Run(source="t")
    run.add("loss", s, loss)
    f = [f for f in diagnose(run).findings if f.symptom == "loss_spike"]
    assert f and f[0].onset_step == 99
    ev = f[0].evidence[0]
    assert ev.value is not None and ev.reference is not None
    assert ev.value / ev.reference >= 3.3  # against ~0.60, not the trailing 0.80


def test_spike_on_a_noisy_falling_per_step_loss_is_seen() -> None:
    # A per-step loss falling steeply with 5% point noise; one bad batch 3x at step 150.
    rng = np.random.default_rng(12)
    s = np.arange(200)
    loss = (1.4 * np.exp(-np.maximum(0, s - 60) / 40) + 0.3) * np.exp(rng.normal(0, 0.05, 200))
    loss[150] *= 3.2
    run = Run(source="t")
    run.add("loss", s, loss)
    f = [f for f in diagnose(run).findings if f.symptom == "loss_spike" and f.level >= 1]
    assert [x.onset_step for x in f] == [150]


def test_classifier_loss_above_uniform_with_an_accuracy_logged_is_a_divergence() -> None:
    # gradients accumulate without zero_grad: the loss swings wildly as it climbs to ~1e3
    rng = np.random.default_rng(5)
    s = np.arange(5, 205, 5)
    climb = np.where(s < 40, 1.3, 1.3 * 10 ** ((s - 40) / 60))
    run = Run(source="t")
    run.add("loss", s, climb * np.exp(rng.normal(0, 1.0, s.shape[0]) * (s >= 40)))
    run.add("val_acc", s[4::5], np.full(8, 0.24))
    f = _loud(run, "divergence")
    assert len(f) == 1 and f[0].severity == "error"
    # the foot of the climb, well before the loss crossed 12.5 nats (~step 100)
    assert f[0].onset_step <= 70 and "an accuracy is logged" in f[0].summary



def _fairseq_valid(values: list[float], ppl: bool) -> Run:
    run = Run(source="t")
    s = np.arange(12854, 12854 + 280 * len(values), 280)[: len(values)]
    run.add("val_loss", s, np.array(values))
    if ppl:
        run.add("valid_ppl", s, np.exp(np.array(values)))
    return run


def test_validation_only_cross_entropy_that_jumps_nats_and_stays_is_a_divergence() -> None:
    # fairseq valid lines only: 5.99 nats, then a jump to 12.4 that comes back only to ~8.8
    # (+2.8 nats: 16x the perplexity) - 1.46x the loss, under the generic 1.5x rule
    vals = [5.99, 12.41, 11.67, 9.24, 8.94, 8.92, 8.83, 8.75, 11.79]
    f = _loud(_fairseq_valid(vals, ppl=True), "divergence")
    assert len(f) == 1 and f[0].onset_step == 12854 + 280 and "perplexity" in f[0].summary


def test_validation_only_cross_entropy_falling_with_noise_is_quiet() -> None:
    rng = np.random.default_rng(9)
    vals = list(6.5 - 0.08 * np.arange(12) + rng.normal(0, 0.05, 12))
    assert not _loud(_fairseq_valid(vals, ppl=True), "divergence")


def test_the_last_swing_of_a_loss_that_swings_is_not_a_divergence() -> None:
    # class-sorted data: each new class block lifts the loss back to ~1-5, then it falls to
    # ~1e-3 inside the block; the log ends inside a new block, high again
    rng = np.random.default_rng(10)
    s = np.arange(200)
    pos = s % 26
    loss = np.where(s < 13, 1.36 * np.exp(-s / 3),
                    3.0 * np.exp(-pos / 2.5) + 1e-3) * np.exp(rng.normal(0, 0.3, 200))
    loss[185:] = 0.45 * np.exp(rng.normal(0, 0.3, 15))
    run = Run(source="t")
    run.add("loss", s, loss)
    assert not _loud(run, "divergence")


def test_a_loss_that_blows_up_at_its_first_steps_and_never_comes_back() -> None:
    # SGD lr 15 on a 4-class CNN: 1.37 at step 0, then 5-20 for the rest of the run
    rng = np.random.default_rng(13)
    s = np.arange(200)
    loss = np.where(s == 0, 1.37, 11.0 * np.exp(rng.normal(0, 0.5, 200)))
    run = Run(source="t")
    run.add("loss", s, loss)
    f = _loud(run, "divergence")
    assert len(f) == 1 and f[0].severity == "error" and f[0].onset_step <= 2


def test_a_first_point_below_a_noisy_healthy_descent_is_not_a_blow_up() -> None:
    # a healthy run whose first logged loss is low by chance and then falls
    rng = np.random.default_rng(14)
    s = np.arange(200)
    loss = (2.0 * np.exp(-s / 50) + 0.3) * np.exp(rng.normal(0, 0.1, 200))
    loss[0] = 1.0
    run = Run(source="t")
    run.add("loss", s, loss)
    assert not _loud(run, "divergence")


def test_a_late_training_loss_rise_while_validation_keeps_falling_is_info() -> None:
    # a GRU's batch loss bounces 1.7x over the last 10% while the validation loss, averaged
    # over a whole set, keeps improving: noise, not a model getting worse
    rng = np.random.default_rng(15)
    s = np.arange(200)
    loss = (1.25 * np.exp(-s / 30) + 0.145) * np.exp(rng.normal(0, 0.05, 200))
    loss[180:] *= 1.67
    run = Run(source="t")
    run.add("loss", s, loss)
    es = s[24::25]
    run.add("val_loss", es, 1.2 * np.exp(-es / 35) + 0.19)
    assert not _loud(run, "divergence")
    run2 = Run(source="t")
    run2.add("loss", s, loss)
    run2.add("val_loss", es, np.where(es < 180, 1.2 * np.exp(-es / 35) + 0.19, 0.4))
    assert _loud(run2, "divergence")


def test_divergence_onset_is_the_first_point_of_the_climb() -> None:
    # a missing zero_grad, logged every 5 steps (a trained run's numbers): down to 2e-4 at step
    # 35, then a climb with wild swings that stays up; blocks of three points put the change
    # at the block starting at 20, the point at 40 (the first one up; 35 is the last good one)
    loss = np.array([1.511, 1.146, 0.4168, 0.06395, 0.06959, 0.003065, 0.0001719, 0.7735,
                     1.022, 4.223, 6.811, 3.693, 4.123, 6.731, 4.405, 5.905, 1.47, 1.567,
                     3.021, 177.7, 105.7, 342.8, 69.54, 780.2, 11.67, 890.9, 48.47, 1.618,
                     1.757, 2.179, 6427.0, 915000.0, 3802.0, 3.209, 3.181, 64200.0, 2.437,
                     2.364, 2.133, 2.386, 2.815, 3.27, 3.509, 3.098, 2.199, 2.079, 2.521, 2.57,
                     2.874, 2.953, 2.859, 2.933, 3.249, 3.235, 3.173, 2.903, 2.762, 2.416,
                     2.118, 2.327])
    run = Run(source="t")
    run.add("loss", np.arange(5, 305, 5), loss)
    f = [f for f in diagnose(run).findings if f.symptom == "divergence" and f.level >= 1]
    assert f and f[0].onset_step == 40


def test_the_descent_from_the_init_is_not_where_the_rise_begins() -> None:
    """A missing zero_grad: the loss falls from 2.98 to 0.88 by step 10, then climbs to
    ~20. The first block holds the init loss, itself above the elevated level: the rise
    starts at the low point after it, not at step 1. (The noise-free curve is 1.5x its low
    at step 24 and 2.5x at step 41; with 25% point noise and blocks of three points the
    flat-ramp-flat fit dates it at 51, within a tenth of the run of both.)"""
    rng = np.random.default_rng(2)
    s = np.arange(1, 301, 5)
    base = np.where(s <= 10, 2.98 - 0.21 * (s - 1), 0.88 * np.exp(0.03 * (s - 10)))
    loss = np.minimum(base, 22.0) * np.exp(rng.normal(0, 0.25, s.size))
    run = Run(source="t")
    run.add("loss", s, loss)
    f = _loud(run, "divergence")
    assert len(f) == 1 and 6 <= f[0].onset_step <= 55, f


def test_a_short_log_that_blows_up_and_stays_diverged() -> None:
    """Seven fairseq progress lines: 9.57 -> 6.87, then 1e4, 5e9, 8e12."""
    run = Run(source="t")
    run.add("loss", np.arange(1000, 8000, 1000),
            np.array([9.57, 8.61, 7.50, 6.87, 10405.0, 4.77e9, 7.75e12]))
    f = _loud(run, "divergence")
    assert len(f) == 1 and f[0].onset_step == 5000 and f[0].severity == "error"


def test_a_short_log_with_one_bad_point_or_a_mild_rise_is_quiet() -> None:
    for values in ([9.57, 8.61, 7.50, 6.87, 104.0, 6.5, 6.4], [2.0, 1.9, 1.8, 1.7, 3.0, 3.4]):
        run = Run(source="t")
        run.add("loss", np.arange(len(values)), np.array(values))
        assert _loud(run, "divergence") == [], values


def test_a_fine_tune_worse_after_its_first_evaluation_is_a_divergence() -> None:
    # Whisper at lr 3e-3: eval_loss 2.55 at its first evaluation, 3.1-4.5 at the 19 after it;
    # the training loss (5 points) never below its first value.
    val = [2.5529, 3.6152, 3.4914, 3.1947, 3.9588, 3.9837, 3.7197, 4.4566, 4.0028, 4.172,
           3.6392, 3.6822, 3.934, 3.5459, 3.4527, 3.3234, 3.4189, 3.293, 3.1414, 3.4234]
    run = Run(source="t")
    run.add("val_loss", np.arange(1, 21) * 132, np.array(val))
    run.add("loss", np.array([500, 1000, 1500, 2000, 2500]),
            np.array([1.2366, 2.028, 2.157, 1.9848, 1.7866]))
    f = [f for f in diagnose(run).findings if f.symptom == "divergence"]
    assert len(f) == 1 and f[0].severity == "warning" and f[0].onset_step == 264
    # with a training loss that falls meanwhile it is memorization, not this
    run2 = Run(source="t")
    run2.add("val_loss", np.arange(1, 21) * 132, np.array(val))
    run2.add("loss", np.array([500, 1000, 1500, 2000, 2500]),
             np.array([1.2366, 0.9, 0.6, 0.4, 0.3]))
    assert not [f for f in diagnose(run2).findings if f.symptom == "divergence"]


def _negative_loss_run(rise_per_step: float, seed: int = 0) -> Run:
    # nnU-Net's Dice + CE objective is negative once the Dice term dominates
    rng = np.random.default_rng(seed)
    s = np.arange(100)
    base = -0.2 - 0.6 * (1 - np.exp(-np.minimum(s, 50) / 20))
    base = base + rise_per_step * np.clip(s - 50, 0, None)
    run = Run(source="t")
    run.add("loss", s, base + rng.normal(0, 0.01, 100))
    return run


def test_a_negative_loss_that_rises_back_is_told_as_an_amount_not_a_ratio() -> None:
    f = _loud(_negative_loss_run(0.03), "divergence")
    assert len(f) == 1 and 40 <= f[0].onset_step <= 60
    assert "x its best level" not in f[0].summary and "inf" not in f[0].summary
    assert "above its best level" in f[0].summary


def test_a_negative_loss_that_converges_is_no_divergence() -> None:
    for seed in range(3):
        assert not _loud(_negative_loss_run(0.0, seed), "divergence")


def _short(values: list[float]) -> list:
    run = Run(source="t")
    run.add("loss", np.arange(100, 100 * (len(values) + 1), 100), np.array(values))
    return _loud(run, "divergence")


def test_a_short_log_that_climbs_to_a_new_high_at_its_last_three_points_diverges() -> None:
    # TF2 object detection, steps 100-900: 1.19-1.44, then 1.77, 2.16, 2.37
    f = _short([1.396, 1.192, 1.346, 1.36, 1.444, 1.204, 1.774, 2.155, 2.374])
    assert len(f) == 1 and f[0].onset_step == 700 and f[0].severity == "warning"


def test_a_short_log_whose_end_rises_less_or_not_to_new_highs_is_quiet() -> None:
    assert not _short([1.4, 1.2, 1.35, 1.36, 1.44, 1.2, 1.3, 1.4, 1.5])    # < 1.5x
    assert not _short([2.5, 2.0, 1.8, 1.6, 1.4, 1.2, 1.5, 1.9, 2.4])       # not new highs
    assert not _short([1.4, 1.2, 1.35, 1.36, 1.44, 1.2, 1.7, 2.2, 2.1])    # last fell back


def test_a_gan_generator_loss_that_rises_is_info_but_one_that_blows_up_is_loud() -> None:
    s = np.arange(300)
    rng = np.random.default_rng(2)

    def gan(rise: np.ndarray) -> list:
        run = Run(source="t")
        run.add("loss", s, (0.7 + 0.3 * np.exp(-s / 30)) * rise * np.exp(rng.normal(0, 0.02, 300)))
        run.add("d_loss", s, np.full(300, 0.5))
        run.meta["mapping"] = [{"column": "loss_G", "canonical": "loss"},
                               {"column": "loss_D", "canonical": "d_loss"}]
        return [f for f in diagnose(run).findings if f.symptom == "divergence"]

    # the discriminator learns: the generator's loss doubles, a GAN's trade-off
    moderate = gan(np.where(s < 100, 1.0, 1.0 + (s - 100) / 200))
    assert moderate and all(f.severity == "info" for f in moderate)
    # it blows up 50x: a failed GAN, loud whatever the trade-off
    blown = gan(np.where(s < 200, 1.0, np.exp((s - 200) / 25)))
    assert blown and blown[0].level >= 1


def test_a_sparse_log_dates_the_divergence_at_its_first_elevated_point() -> None:
    # logged every 1000 updates (fairseq's train_inner): the loss fell to 6.6 at 16000 and was
    # 1e4 at 17000; the divergence shows at 17000, 16000 is the last good point
    loss = np.r_[9.6 * np.exp(-0.025 * np.arange(16)), 1.04e4, 4.8e6, np.full(12, 5e9)]
    run = Run(source="t")
    run.add("loss", np.arange(1000, 31000, 1000), loss)
    f = [f for f in diagnose(run).findings if f.symptom == "divergence" and f.level >= 1]
    assert f and f[0].onset_step == 17000


def test_a_jump_after_a_flat_stretch_is_dated_at_the_jump_not_before_it() -> None:
    # warm-up to an lr far too high (a trained nanoGPT-style run, every 2 iterations): the
    # loss fell to ~1.2 by iteration 20, stayed there to 51, jumped to 4-5.5 at 55-59 and
    # settled near 2.9; a ramp fitted to that jump leans back to iteration ~33
    rng = np.random.default_rng(5)
    s = np.arange(1, 251, 2)
    loss = np.where(s < 20, 3.2 - 0.1 * s, 1.22)
    loss = np.where(s >= 55, 2.9 + 2.6 * np.exp(-(s - 55) / 6.0), loss)
    loss = loss * np.exp(rng.normal(0, 0.04, s.size))
    run = Run(source="t")
    run.add("loss", s, loss)
    f = [f for f in diagnose(run).findings if f.symptom == "divergence" and f.level >= 1]
    assert f and 51 <= f[0].onset_step <= 57


def test_a_cross_entropy_that_climbs_past_709_nats_is_reported_not_crashed() -> None:
    # The summary gives the perplexity ratio exp(nats); past ~709 nats that overflows a float.
    # A classifier's loss that blew up to 1e6 before it went NaN (a ViT whose accumulated
    # loss was never divided, logged every other step) must still be reported, without it.
    s = np.arange(60) * 2 + 1
    loss = np.full(60, np.nan)
    loss[:8] = [1.155, 4.11, 17.68, 27.47, 1172.0, 2232.0, 46956.0, 1.353e6]
    run = Run(source="t")
    run.add("loss", s, loss)
    run.add("val_acc", s[::10], np.full(6, 0.1))
    f = _loud(run, "divergence")
    assert len(f) == 1 and "nats" in f[0].summary


def _worse(run: Run) -> list:
    return [f for f in _loud(run, "divergence") if "never went below" in f.summary]


def test_a_loss_that_only_got_worse_from_the_start_is_a_divergence() -> None:
    # DINO's collapse: twelve epochs, up on ten of them by 6% in all, toward ln 65536.
    loss = [10.380, 10.470, 10.634, 10.585, 10.629, 10.688, 10.751, 10.825, 10.892, 10.950,
            10.986, 11.002]
    run = Run(source="t")
    run.add("loss", np.arange(12), np.array(loss))
    (f,) = _worse(run)
    assert f.onset_step == 0 and f.severity == "warning"


def test_flat_noise_and_wandering_runs_rarely_get_worse() -> None:
    for seed in range(40):
        rng = np.random.default_rng(seed)
        for n in (12, 60, 400):
            flat = Run(source="t")
            flat.add("loss", np.arange(n), 2.0 * np.exp(rng.normal(0, 0.05, n)))
            assert not _worse(flat), (seed, n)
    # A converged run's wander (a random walk, 0.5% a step, under 2% point noise) that never
    # fell below its start: measured 1% of 300 such 12-point logs read as worsening.
    flagged = 0
    for seed in range(100):
        rng = np.random.default_rng(1000 + seed)
        walk = Run(source="t")
        walk.add("loss", np.arange(12),
                 2.0 * np.exp(np.cumsum(rng.normal(0, 0.005, 12)) + rng.normal(0, 0.02, 12)))
        flagged += bool(_worse(walk))
    assert flagged <= 4


def test_a_gan_whose_generator_loss_rises_is_not_worsening() -> None:
    s = np.arange(100)
    run = Run(source="t")
    run.add("loss", s, 1.0 + 0.004 * s)
    run.add("loss_D", s, np.full(100, 0.6))
    run.add("loss_G", s, 1.0 + 0.004 * s)
    assert not _worse(run)


def test_a_smooth_climb_at_the_end_of_a_longer_log_is_a_divergence() -> None:
    # fastai's history.csv (an EMA of the loss per epoch): down for 15 epochs, then a
    # sign-flipped weight decay drives it up 16x, every epoch a new high. The 10 block
    # medians of 3 points bend so much that 5 of their "noise" sigmas exceed the rise.
    loss = [0.621, 0.567, 0.510, 0.450, 0.402, 0.366, 0.337, 0.315, 0.296, 0.281, 0.270, 0.261,
            0.253, 0.249, 0.247, 0.251, 0.262, 0.273, 0.335, 0.412, 0.474, 0.537, 0.625, 0.756,
            0.982, 1.359, 1.726, 2.257, 2.944, 3.943]
    run = Run(source="t")
    run.add("loss", np.arange(30), np.array(loss))
    (f,) = _loud(run, "divergence")
    assert f.severity == "error" and 18 <= f.onset_step <= 24


def test_three_new_highs_at_the_end_of_a_noisy_healthy_run_do_not_happen() -> None:
    for seed in range(30):
        rng = np.random.default_rng(seed)
        s = np.arange(200)
        run = Run(source="t")
        run.add("loss", s, (2.0 * np.exp(-s / 40) + 0.3) * np.exp(rng.normal(0, 0.1, 200)))
        assert not _loud(run, "divergence"), seed


def test_a_short_log_that_climbs_back_toward_its_start_is_a_divergence() -> None:
    # an issue excerpt: 15.5 -> 1.43 by step 220, then 5.82, 7.05, 10.03 (back toward the
    # random-init loss); the climb is no new high (the start was higher), but 7x its best
    loss = [15.50, 13.00, 3.80, 2.39, 1.43, 5.82, 7.05, 10.03]
    run = Run(source="t")
    run.add("loss", np.array([1, 55, 110, 165, 220, 275, 330, 385]), np.array(loss))
    (f,) = _loud(run, "divergence")
    assert f.onset_step == 275
    # a short healthy descent that ticks up a little at the end is not
    quiet = Run(source="t")
    quiet.add("loss", np.arange(8), np.array([3.0, 2.2, 1.6, 1.2, 1.0, 1.05, 1.1, 1.2]))
    assert not _loud(quiet, "divergence")
