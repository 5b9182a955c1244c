"""Landmark loss levels: never beating chance, and the double-softmax floor; healthy
classifiers that pass through ln k are quiet."""

from __future__ import annotations

import math

import numpy as np

from trainmedic.diagnose import diagnose
from trainmedic.run.series import Run

K = 5


def _run(loss: np.ndarray, val: np.ndarray | None = None, every: int = 25) -> Run:
    run = Run(source="t")
    s = np.arange(loss.shape[0])
    run.add("loss", s, loss)
    if val is not None:
        run.add("val_loss", s[every - 1::every], val)
    return run


def _loud(run: Run) -> list[tuple[str, str]]:
    return [(f.symptom, f.severity) for f in diagnose(run).findings if f.level >= 1]


def test_shuffled_labels_never_beat_chance() -> None:
    rng = np.random.default_rng(0)
    n = 300
    s = np.arange(n)
    # Train memorizes a little (falls 4%), validation stays just above ln 5.
    loss = math.log(K) * (1.01 - 0.04 * s / n) + rng.normal(0, 0.02, n)
    val = math.log(K) * 1.02 + rng.normal(0, 0.005, n // 25)
    assert ("flat_loss", "error") in _loud(_run(loss, val))


def test_double_softmax_floor() -> None:
    rng = np.random.default_rng(1)
    s = np.arange(40)
    floor = math.log(1 + (K - 1) / math.e)
    loss = floor + (math.log(K) - floor) * np.exp(-s / 4) + np.abs(rng.normal(0, 0.0005, 40))
    f = [f for f in diagnose(_run(loss)).findings if f.symptom == "plateau"]
    assert f and f[0].severity == "warning" and "softmax applied twice" in f[0].summary


def test_healthy_classifier_passing_through_chance_is_quiet() -> None:
    for seed in range(6):
        rng = np.random.default_rng(seed)
        n = 300
        s = np.arange(n)
        loss = (math.log(K) - 0.3) * np.exp(-s / 60) + 0.3 + rng.normal(0, 0.02, n)
        val = (math.log(K) - 0.35) * np.exp(-s[24::25] / 60) + 0.35
        assert _loud(_run(loss, val)) == []


def test_a_plateau_at_some_ln_k_from_a_normal_start_is_not_chance() -> None:
    # A language model whose loss levels off at 3.178 ~ ln 24 by coincidence (its
    # vocabulary is 64): the start was not far above chance, so it is not judged at chance.
    rng = np.random.default_rng(7)
    s = np.arange(80)
    loss = 1.9 * np.exp(-s / 8) + math.log(24) + rng.normal(0, 0.01, 80)
    assert ("flat_loss", "error") not in _loud(_run(loss))


def test_a_start_far_above_chance_that_falls_to_ln_k_and_stays() -> None:
    rng = np.random.default_rng(8)
    loss = math.log(K) + 0.002 * np.abs(rng.normal(0, 1, 300))
    loss[0] = 6e9  # the first, un-normalized accumulation overflowed the scale
    loss[1:5] = [40.0, 9.0, 3.9, 2.6]
    assert ("flat_loss", "error") in _loud(_run(loss))


def test_evaluations_frozen_from_the_second_are_a_flat_loss() -> None:
    """fp16 gradients that underflow to zero: the weights never change, the training loss
    only shows its batches' noise, and every evaluation from the second is identical."""
    rng = np.random.default_rng(9)
    loss = 2e-11 * np.exp(rng.normal(0, 0.05, 150))
    val = np.array([1.85e-11] + [1.798e-11] * 5)
    run = _run(loss, val)
    f = [f for f in diagnose(run).findings if f.symptom == "flat_loss"]
    assert f and f[0].severity == "error" and f[0].metric == "val_loss"
    assert not [f for f in diagnose(run).findings if f.symptom == "plateau" and f.level >= 1]


def test_evaluations_frozen_after_a_first_one_far_away_are_not_flat_from_the_start() -> None:
    """An fp16 scaler that collapsed after the first evaluation: the model learned (1.882,
    then 1.273 at every evaluation to the end). It froze; it did not never learn."""
    rng = np.random.default_rng(11)
    s = np.arange(150)
    loss = np.where(s < 50, 2.7 - 0.028 * s, 1.27) * np.exp(rng.normal(0, 0.03, 150))
    val = np.array([1.8821234] + [1.2733891] * 5)
    run = _run(loss, val)
    assert not [f for f in diagnose(run).findings
                if f.symptom == "flat_loss" and f.metric == "val_loss" and f.level >= 1]


def test_tiny_lr_with_a_still_validation_loss_is_flat_despite_noisy_batches() -> None:
    rng = np.random.default_rng(10)
    loss = 1.45 * np.exp(rng.normal(0, 0.12, 150))
    loss[:3] = [1.8, 1.7, 1.6]
    val = 1.451 - 0.0004 * np.arange(6)
    run = _run(loss, val)
    run.add("lr", np.arange(150), np.full(150, 1e-7))
    f = [f for f in diagnose(run).findings if f.symptom == "flat_loss"]
    assert f and f[0].level >= 1


def test_a_classifier_that_fell_back_to_chance_is_flat_not_diverging() -> None:
    # Weight decay far too high: the loss falls to 1.17, then every weight shrinks to zero and
    # the loss returns to ln 4 on both curves, with almost no batch noise (uniform outputs)
    rng = np.random.default_rng(3)
    n, k = 120, 4
    s = np.arange(n)
    dip = 1.17 + (math.log(k) - 1.17) * (1 - np.exp(-(s - 30).clip(0) / 8))
    loss = np.where(s < 10, math.log(k) - 0.0216 * s, dip) + rng.normal(0, 0.001, n)
    val = loss[9::10] + rng.normal(0, 0.0005, n // 10)
    run = _run(loss, val, every=10)
    loud = _loud(run)
    assert ("flat_loss", "error") in loud
    assert not any(sym in ("divergence", "plateau") for sym, _ in loud)
    f = next(f for f in diagnose(run).findings if f.symptom == "flat_loss")
    assert "fell back to chance" in f.summary and f.onset_step >= 30


def test_a_collapse_to_chance_without_a_validation_loss_needs_a_quiet_tail() -> None:
    # Weight decay far too high, a console log with no evaluation: the loss climbs from 1.38
    # back to ln 5 and sits there with almost no batch noise (uniform outputs): a collapse
    rng = np.random.default_rng(5)
    n, k = 30, 5
    s = np.arange(n)
    loss = 1.38 + (math.log(k) - 1.38) * np.clip(s / 18, 0, 1) + rng.normal(0, 0.001, n)
    run = Run("wd_collapse")
    run.add("loss", 10 * (s + 1), loss)
    loud = _loud(run)
    assert ("flat_loss", "error") in loud and "divergence" not in [sym for sym, _ in loud]
    # the same climb with a healthy batch noise (3%) at ln 5: no collapse signature
    noisy = Run("noisy")
    noisy.add("loss", 10 * (s + 1), loss + rng.normal(0, 0.05, n))
    assert ("flat_loss", "error") not in _loud(noisy)


def test_a_model_that_learned_and_converged_is_not_a_collapse() -> None:
    # Falls from ln 4 and settles at 0.4: far from any chance landmark it could have reached
    rng = np.random.default_rng(4)
    n = 120
    s = np.arange(n)
    loss = (math.log(4) - 0.4) * np.exp(-s / 15) + 0.4 + rng.normal(0, 0.01, n)
    val = (math.log(4) - 0.45) * np.exp(-s[9::10] / 15) + 0.45
    assert _loud(_run(loss, val, every=10)) == []


def test_double_softmax_plateau_just_above_its_floor() -> None:
    # the floor is approached as the first softmax saturates: the plateau sits ~1% above it
    rng = np.random.default_rng(7)
    s = np.arange(300)
    floor = math.log(1 + (K - 1) / math.e)
    level = floor * 1.01
    loss = level + (math.log(K) - level) * np.exp(-s / 20) + rng.normal(0, 0.002, 300)
    f = [f for f in diagnose(_run(loss)).findings if f.symptom == "plateau"]
    assert f and f[0].severity == "warning" and "softmax applied twice" in f[0].summary


def test_a_plateau_well_above_the_double_softmax_floor_is_not_it() -> None:
    rng = np.random.default_rng(8)
    s = np.arange(300)
    level = math.log(1 + (K - 1) / math.e) * 1.05
    loss = level + (math.log(K) - level) * np.exp(-s / 20) + rng.normal(0, 0.002, 300)
    f = [f for f in diagnose(_run(loss)).findings if f.symptom == "plateau"]
    assert not f or "softmax applied twice" not in f[0].summary


def test_a_model_that_never_beat_its_first_loss_is_flat() -> None:
    # Adam at lr 0.3 on a GRU: the loss thrashes around and above its first value (1.35, near
    # ln 4 but not within 1.5%), the validation loss never gets below it
    rng = np.random.default_rng(30)
    n = 200
    loss = 1.35 * np.exp(np.abs(rng.normal(0, 0.15, n)))
    loss[0] = 1.35
    val = 1.37 * np.exp(np.abs(rng.normal(0, 0.1, 8)))
    f = [f for f in diagnose(_run(loss, val)).findings if f.symptom == "flat_loss"]
    assert f and f[0].severity == "warning" and "never got better" in f[0].summary


def test_a_fine_tune_that_improves_a_little_on_its_first_loss_is_quiet() -> None:
    # starts at 1.70 (pretrained), train settles 8% lower, val 5% lower: it learned
    rng = np.random.default_rng(31)
    n = 120
    s = np.arange(n)
    loss = 1.70 - 0.14 * (1 - np.exp(-s / 20)) + rng.normal(0, 0.01, n)
    val = 1.62 + rng.normal(0, 0.002, n // 25)
    assert _loud(_run(loss, val)) == []


def test_evaluations_identical_at_a_print_logs_four_decimals_are_not_frozen() -> None:
    # "Val Loss: 0.1055" at every evaluation of a converged autoencoder: the change is below
    # the logger's 4 decimals, not frozen weights
    rng = np.random.default_rng(32)
    s = np.arange(300)
    loss = np.round(0.33 * np.exp(-s / 30) + 0.104 + rng.normal(0, 0.001, 300), 4)
    val = np.round(np.r_[0.2723, 0.1153, 0.1074, 0.1064, 0.106, 0.1058, 0.1057, 0.1056,
                         [0.1055] * 4], 4)
    run = _run(loss, val)
    assert not [f for f in diagnose(run).findings if f.level >= 1]


def test_a_fine_tune_whose_validation_loss_still_creeps_down_never_beat_nothing() -> None:
    # a converged pretrained model, small lr: train hovers within 7% of its first loss and the
    # validation loss creeps down 1.3% over five evaluations - slow, but still learning; the
    # same evaluations out of order (no improvement at the end) are "never beat its first"
    from trainmedic.diagnose.detectors.loss_progress import _never_beat_first
    from trainmedic.diagnose.trace import Trace

    rng = np.random.default_rng(33)
    loss = 1.55 + rng.normal(0, 0.01, 120)
    loss[:3] = [1.671, 1.609, 1.60]
    for val, flagged in (([1.582, 1.574, 1.567, 1.563, 1.562], False),
                         ([1.574, 1.563, 1.582, 1.562, 1.567], True)):
        run = _run(loss, np.array(val), every=24)
        tr = Trace.of(run, "loss")
        assert tr is not None
        assert (_never_beat_first(run, tr) is not None) == flagged, val


def test_double_softmax_floor_when_the_log_starts_below_chance() -> None:
    # logged every 10 steps: the first point (after 10 steps) is already under ln 5, so the
    # class count comes from the floor the loss settles on (0.9048 for 5 classes)
    rng = np.random.default_rng(9)
    s = np.arange(10, 310, 10)
    floor = math.log(1 + (K - 1) / math.e)
    loss = floor * 1.002 + 0.55 * np.exp(-(s - 10) / 20) + np.abs(rng.normal(0, 0.002, 30))
    run = Run(source="t")
    run.add("loss", s, loss)
    f = [f for f in diagnose(run).findings if f.symptom == "plateau"]
    assert f and f[0].severity == "warning" and "over 5 classes" in f[0].summary
    # a loss that starts above ln 5 and settles at the same level is not read as 5 classes
    run2 = Run(source="t")
    run2.add("loss", s, loss + 1.2 * np.exp(-(s - 10) / 5))
    f2 = [f for f in diagnose(run2).findings if f.symptom == "plateau"]
    assert not f2 or "softmax applied twice" not in f2[0].summary


def _acc_run(acc: np.ndarray, val_acc: np.ndarray | None, loss: np.ndarray) -> Run:
    run = Run(source="t")
    s = np.arange(loss.shape[0])
    run.add("loss", s, loss)
    run.add("accuracy", s, acc)
    if val_acc is not None:
        run.add("val_accuracy", s, val_acc)
    return run


def test_accuracy_at_chance_on_train_and_val_is_a_flat_loss() -> None:
    # an lr that blew the net up in epoch 0: the loss comes down from 60 to ~1.6 but both
    # accuracies stay at 1/4 (a Keras CSVLogger run of 15 epochs)
    rng = np.random.default_rng(4)
    loss = np.r_[59.7, 1.6 + np.abs(rng.normal(0, 0.1, 14))]
    acc = 0.25 + rng.normal(0, 0.015, 15)
    val = 0.25 + rng.normal(0, 0.02, 15)
    f = [f for f in diagnose(_acc_run(acc, val, loss)).findings if f.symptom == "flat_loss"]
    assert f and f[0].severity == "error" and "1/4" in f[0].summary
    # the same curves with a learning accuracy (0.25 -> 0.9) are not at chance
    learned = np.linspace(0.25, 0.9, 15)
    assert not [f for f in diagnose(_acc_run(learned, learned - 0.03, loss)).findings
                if f.symptom == "flat_loss"]


def test_an_accuracy_that_climbs_to_one_half_from_a_third_is_not_binary_chance() -> None:
    # OpenNMT over 4 classes: acc 34% -> 54%, the loss ln 4 -> 0.89, val acc 40% -> 45%; both
    # accuracies end near 1/2 and the loss near 1.3 ln 2, but a guess over 2 classes cannot
    # start at 34%: there are more classes and the model learns
    rng = np.random.default_rng(6)
    acc = np.r_[0.336, 0.359, 0.394, 0.461, np.linspace(0.46, 0.55, 36)] + \
        rng.normal(0, 0.01, 40)
    val = np.linspace(0.40, 0.45, 40)
    loss = 0.89 + 0.52 * np.exp(-np.arange(40) / 6)
    assert not [f for f in diagnose(_acc_run(acc, val, loss)).findings
                if f.symptom == "flat_loss" and f.level >= 1]


def test_accuracy_near_1_over_k_beside_a_loss_far_above_ln_k_is_not_chance() -> None:
    # a character model (loss 3.8 -> 1.8) whose val/acc reads 0.40: 1/2.5, no class count
    rng = np.random.default_rng(5)
    loss = 1.8 + 2.0 * np.exp(-np.arange(40) / 8) + rng.normal(0, 0.02, 40)
    acc = 0.40 + rng.normal(0, 0.01, 40)
    assert not [f for f in diagnose(_acc_run(acc, None, loss)).findings
                if f.symptom == "flat_loss" and f.level >= 1]


def test_a_short_log_pinned_at_ln_k_is_a_flat_loss() -> None:
    # 4 epochs: 1.356, then 1.38639 three times (ln 4 = 1.38629); validation at 1.386
    run = Run(source="t")
    run.add("loss", np.arange(4), np.array([1.356284, 1.386393, 1.386381, 1.386379]))
    run.add("val_loss", np.arange(4), np.full(4, 1.386))
    f = [f for f in diagnose(run).findings if f.symptom == "flat_loss"]
    assert f and f[0].severity == "error" and f[0].onset_step == 1 and "ln(4)" in f[0].summary
    # a short log that moves between epochs near ln 4 is not pinned
    run2 = Run(source="t")
    run2.add("loss", np.arange(4), np.array([1.45, 1.40, 1.383, 1.37]))
    assert not [f for f in diagnose(run2).findings if f.symptom == "flat_loss"]


def test_a_short_log_pinned_at_ln_1000_is_a_flat_loss_but_not_at_ln_500() -> None:
    # Caffe, MobileNetV3 on ImageNet: smoothed loss 6.905-6.912 at iterations 0-80
    run = Run(source="t")
    run.add("loss", np.arange(0, 100, 20), np.array([6.91161, 6.90501, 6.90635, 6.90681,
                                                     6.90704]))
    f = [f for f in diagnose(run).findings if f.symptom == "flat_loss"]
    assert f and f[0].severity == "error" and "ln(1000)" in f[0].summary
    # the same stillness at ln 500 (no common dataset's class count) is not claimed
    run2 = Run(source="t")
    run2.add("loss", np.arange(0, 100, 20), np.array([6.2146, 6.2140, 6.2150, 6.2145, 6.2141]))
    assert not [f for f in diagnose(run2).findings if f.symptom == "flat_loss"]


def test_a_step_loss_frozen_a_hair_under_ln_100_is_a_flat_loss() -> None:
    # Lightning's bar, batches 100-106 of a CIFAR-100 model: train_loss=4.600 every batch
    # (ln 100 = 4.6052: a near-uniform predictor 0.11% under it, frozen to the printed digits)
    def flat(values: list[float]) -> list:
        run = Run(source="t")
        run.add("loss", np.arange(100, 100 + len(values)), np.array(values))
        return [f for f in diagnose(run).findings if f.symptom == "flat_loss" and f.level >= 1]

    f = flat([4.600] * 7)
    assert f and f[0].severity == "error" and "ln(100)" in f[0].summary and "0.11%" in f[0].summary
    # moving values that far under ln 100 are not pinned; a frozen 4.595 (0.22% under) is not
    # chance (it is frozen, a warning from short_log's rule, with no class count claimed)
    assert not flat([4.600, 4.598, 4.601, 4.599, 4.600, 4.597, 4.600])
    assert [(x.severity, "ln(" in x.summary) for x in flat([4.595] * 7)] == [("warning", False)]


def test_a_from_scratch_classifier_that_barely_leaves_chance_warns() -> None:
    # a frozen backbone: from ln 4 the loss creeps down 2% over the whole run, significantly
    rng = np.random.default_rng(11)
    s = np.arange(40)
    loss = math.log(4) * (1 - 0.02 * s / 40) + rng.normal(0, 0.002, 40)
    run = Run(source="t")
    run.add("loss", s * 10 + 10, loss)
    f = [f for f in diagnose(run).findings if f.symptom == "flat_loss"]
    assert f and f[0].severity == "warning" and "started at chance" in f[0].summary
    # the same creep from a fine-tune's start (not a chance level) is slow learning: info
    run2 = Run(source="t")
    run2.add("loss", s * 10 + 10, loss + 0.31)
    f2 = [f for f in diagnose(run2).findings if f.symptom == "flat_loss"]
    assert f2 and f2[0].severity == "info"


def test_a_flat_window_at_some_dense_ln_k_with_a_rising_accuracy_is_not_chance() -> None:
    # an ImageNet epoch-0 excerpt: loss ~5.34 (ln 210 = 5.347 by coincidence) over 9 points,
    # top-1 accuracy 4.6% -> 6.4%: the model learns, far above 1/210
    rng = np.random.default_rng(12)
    s = np.arange(741, 921, 20)
    run = Run(source="t")
    run.add("loss", s, 5.34 + rng.normal(0, 0.04, 9))
    run.add("acc@1", s, np.linspace(4.56, 6.44, 9))
    f = [f for f in diagnose(run).findings if f.symptom == "flat_loss"]
    assert not f or (f[0].severity == "info" and "it learns" in f[0].summary)


def _mse_run(final: float, noise: float, seed: int = 0) -> Run:
    """A mean-squared error that falls from 0.64 towards ``final`` over 80 logged points."""
    rng = np.random.default_rng(seed)
    s = np.arange(80)
    loss = final + (0.64 - final) * np.exp(-s / 8) + noise * rng.standard_normal(80)
    return _run(loss)


def test_a_regressor_that_outputs_one_half_on_binary_targets_is_flat() -> None:
    """MSE converging to exactly 0.25 without batch noise: every output is 0.5."""
    found = _loud(_mse_run(0.25, 0.0))
    assert ("flat_loss", "error") in found
    assert not any(sym == "plateau" for sym, _ in found)


def test_a_noisy_regressor_at_a_quarter_or_one_below_it_is_quiet() -> None:
    assert _loud(_mse_run(0.25, 0.01)) == []  # batch noise: the output follows the input
    assert _loud(_mse_run(0.2, 0.0)) == []  # below the landmark: it learned


def test_a_zero_loss_with_nan_gradients_carries_no_signal() -> None:
    """HF logs 'loss': 0.0 with 'grad_norm': nan at every record: not a converged model."""
    run = Run(source="t")
    s = np.arange(13)
    run.add("loss", s, np.zeros(13))
    run.add("grad_norm", s, np.full(13, np.nan))
    found = _loud(run)
    assert ("flat_loss", "error") in found and ("nonfinite_grad", "error") in found


def test_a_zero_loss_below_rounding_with_finite_gradients_is_quiet() -> None:
    run = Run(source="t")
    s = np.arange(13)
    run.add("loss", s, np.zeros(13))
    run.add("grad_norm", s, 1e-3 * np.exp(np.random.default_rng(1).normal(0, 0.1, 13)))
    assert _loud(run) == []
