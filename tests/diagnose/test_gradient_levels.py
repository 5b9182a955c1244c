"""Gradient norms broken from the first step (no rise to detect), and healthy controls."""

from __future__ import annotations

import numpy as np
import pytest

from trainmedic.diagnose import diagnose
from trainmedic.run.series import Run


def _run(grad: np.ndarray, loss: np.ndarray) -> Run:
    run = Run(source="t")
    s = np.arange(grad.shape[0])
    run.add("grad_norm", s, grad)
    run.add("loss", s, loss)
    return run


def _loud(run: Run, symptom: str) -> list:
    return [f for f in diagnose(run).findings if f.symptom == symptom and f.level >= 1]


def test_init_scale_explodes_from_step_zero() -> None:
    rng = np.random.default_rng(0)
    g = 1e5 * np.exp(rng.normal(0, 0.3, 200))
    loss = 1e6 * np.exp(rng.normal(0, 0.3, 200))
    f = _loud(_run(g, loss), "exploding_gradients")
    assert len(f) == 1 and f[0].onset_step == 0 and f[0].severity == "error"


def test_a_norm_of_1e5_that_overflowed_at_its_second_point_explodes_from_the_start() -> None:
    # SGD on a second-derivative residual: grad norm 3.5e5, then inf, then NaN to the end
    g = np.r_[3.5e5, np.inf, np.full(58, np.nan)]
    loss = np.r_[2.6e6, 2.9e36, np.full(58, np.nan)]
    f = _loud(_run(g, loss), "exploding_gradients")
    assert len(f) == 1 and f[0].onset_step == 0
    # a norm that was ordinary before it overflowed is the non-finite finding's alone
    assert not _loud(_run(np.r_[2.0, np.inf, np.full(58, np.nan)], loss), "exploding_gradients")


def test_vanished_from_the_start_with_a_flat_loss() -> None:
    rng = np.random.default_rng(1)
    g = 1e-7 * np.exp(rng.normal(0, 0.2, 300))
    loss = 2.302 + rng.normal(0, 0.01, 300)
    f = _loud(_run(g, loss), "vanishing_gradients")
    assert len(f) == 1 and f[0].onset_step == 0


def test_tiny_gradients_at_a_falling_loss_are_quiet() -> None:
    rng = np.random.default_rng(2)
    s = np.arange(300)
    g = 1e-7 * np.exp(rng.normal(0, 0.2, 300))
    loss = 1e-3 * np.exp(-s / 100) * np.exp(rng.normal(0, 0.05, 300))
    assert not _loud(_run(g, loss), "vanishing_gradients")


def test_healthy_norms_are_quiet() -> None:
    rng = np.random.default_rng(3)
    s = np.arange(400)
    g = (5.0 * np.exp(-s / 200) + 0.5) * np.exp(rng.normal(0, 0.2, 400))
    loss = (2.0 * np.exp(-s / 100) + 0.3) * np.exp(rng.normal(0, 0.03, 400))
    run = _run(g, loss)
    assert not _loud(run, "exploding_gradients") and not _loud(run, "vanishing_gradients")


def test_gradients_that_grow_as_the_model_leaves_a_plateau_are_learning() -> None:
    # a GRU at chance (ln 4) for ~85 steps with grad norm ~0.17, then it starts to learn: the
    # grad norm grows ~15x while the loss falls a quarter (to ~1.05)
    rng = np.random.default_rng(11)
    s = np.arange(120)
    g = np.where(s < 90, 0.17, 0.17 * np.exp((s - 84) / 5).clip(max=17)) \
        * np.exp(rng.normal(0, 0.2, 120))
    loss = np.where(s < 90, 1.386, 1.386 - 0.34 * (1 - np.exp(-(s - 90) / 8))) \
        + rng.normal(0, 0.01, 120)
    assert not _loud(_run(g, loss), "exploding_gradients")


def test_gradients_that_grow_15x_while_the_loss_does_not_fall_explode() -> None:
    rng = np.random.default_rng(12)
    s = np.arange(120)
    g = np.where(s < 60, 0.17, 0.17 * np.exp((s - 60) / 5).clip(max=17)) \
        * np.exp(rng.normal(0, 0.2, 120))
    loss = 0.9 + rng.normal(0, 0.01, 120)
    assert _loud(_run(g, loss), "exploding_gradients")


def _spike_run(reaction: float) -> Run:
    # a GRU near chance: one grad-norm spike of ~15x at step 52; the loss jumps `reaction`x
    # for two points, then is back and keeps falling
    rng = np.random.default_rng(13)
    s = np.arange(200)
    g = 0.2 * np.exp(rng.normal(0, 0.2, 200))
    g[52] = 3.2
    loss = 1.386 - 0.3 * (s > 60) * (1 - np.exp(-(s - 60).clip(0) / 40)) \
        + rng.normal(0, 0.01, 200)
    loss[52:54] *= reaction
    return _run(g, loss)


def test_a_grad_spike_the_loss_shakes_off_is_info() -> None:
    assert not _loud(_spike_run(1.3), "exploding_gradients")


def test_a_grad_spike_that_doubles_the_loss_warns_even_if_it_recovers() -> None:
    # a bad batch: one incident at warning, the grad spike in it (root or folded)
    loud = [f for f in diagnose(_spike_run(2.4)).findings if f.level >= 1]
    assert len(loud) == 1 and loud[0].onset_step == 52
    assert "exploding_gradients" in {loud[0].symptom, *(r.symptom for r in loud[0].related)}


def test_grad_spikes_the_loss_ignored_but_that_end_in_a_nan_warn() -> None:
    # a ReLU RNN without clipping: grad-norm spikes at 60 and 66 that the loss shrugs off, then
    # NaN from step 72 (6 logged points later): the explosion is what overflowed
    rng = np.random.default_rng(14)
    g = 0.35 * np.exp(rng.normal(0, 0.2, 100))
    loss = 1.35 + rng.normal(0, 0.01, 100)
    g[60], g[66] = 10.5, 4.0
    g[72:], loss[72:] = np.nan, np.nan
    f = _loud(_run(g, loss), "exploding_gradients")
    assert len(f) == 1 and f[0].onset_step == 60 and "non-finite at step 72" in f[0].summary
    # the same spikes with the NaN 40 points later are unrelated to it: info
    g2, loss2 = g.copy(), loss.copy()
    g2[72:], loss2[72:] = 0.35, 1.35
    g2[96:], loss2[96:] = np.nan, np.nan
    assert not _loud(_run(g2, loss2), "exploding_gradients")


def test_a_loss_scale_under_2_to_the_minus_10_is_collapsed_with_two_points() -> None:
    # fairseq: a summary line rounds the scale to 0 (3 decimals), then an overflow message
    # sets 0.000244: too few points for the level rule, collapsed all the same
    run = Run(source="t")
    run.add("loss", np.array([695, 700]), np.array([9.8, 9.4]))
    run.add("loss_scale", np.array([695, 700, 701]), np.array([0.0, 0.0, 0.000244140625]))
    f = _loud(run, "loss_scale_collapse")
    assert len(f) == 1 and f[0].onset_step == 695 and f[0].severity == "error"
    ok = Run(source="t")
    ok.add("loss", np.array([1, 2]), np.array([2.0, 1.9]))
    ok.add("loss_scale", np.array([1, 2]), np.array([65536.0, 32768.0]))
    assert not _loud(ok, "loss_scale_collapse")


def test_an_explosion_before_the_nan_is_reported_beside_it() -> None:
    # grad norm 150x at step 90 with the loss jumping, NaN from step 100: two phases, two fixes
    rng = np.random.default_rng(15)
    s = np.arange(0, 200, 5)
    g = 0.33 * np.exp(rng.normal(0, 0.2, s.size))
    loss = 1.38 + rng.normal(0, 0.01, s.size)
    g[18], loss[18] = 154.0, 1.64
    g[19], loss[19] = 1.7, 1.81
    g[20:], loss[20:] = np.nan, np.nan
    run = Run(source="t")
    run.add("grad_norm", s, g)
    run.add("loss", s, loss)
    loud = {(f.symptom, f.onset_step) for f in diagnose(run).findings if f.level >= 1}
    assert ("exploding_gradients", 90) in loud and ("nonfinite_loss", 100) in loud


def test_a_lone_skipped_fp16_step_after_a_spike_stays_info() -> None:
    # the scaler skips one overflowing step (a lone inf grad norm) after a shrugged-off spike
    rng = np.random.default_rng(16)
    g = 0.35 * np.exp(rng.normal(0, 0.2, 100))
    loss = 1.35 + rng.normal(0, 0.01, 100)
    g[60], g[64] = 10.5, np.inf
    assert not _loud(_run(g, loss), "exploding_gradients")


@pytest.mark.parametrize("name", ["grad_first", "gn_first", "layer_grad_norm/first"])
def test_a_first_layer_norm_logged_beside_the_whole_models_shows_vanishing(tmp_path,
                                                                           name) -> None:
    """A hand-written log with the model's grad norm and the first layer's ("grad_first",
    "gn_first"), the latter 0 to six decimals at every step while the head still gets
    gradient: vanishing through depth, judged against the whole model's norm."""
    from trainmedic.run import load_run

    rng = np.random.default_rng(4)
    lines = [f"step={s} loss={1.609 + 0.01 * rng.standard_normal():.5f} "
             f"gnorm={0.4 * np.exp(0.2 * rng.standard_normal()):.4f} {name}=0.000000"
             for s in range(1, 301, 3)]
    (tmp_path / "log.txt").write_text("\n".join(lines) + "\n")
    run = load_run(str(tmp_path / "log.txt"))
    assert run.has("layer/first_layer/grad_norm")
    f = _loud(run, "vanishing_gradients")
    assert len(f) == 1 and f[0].metric == "layer/first_layer/grad_norm"
    assert "whole model" in f[0].summary


def test_a_first_layer_norm_near_the_whole_models_is_quiet() -> None:
    rng = np.random.default_rng(5)
    n = 100
    run = _run(0.4 * np.exp(0.2 * rng.standard_normal(n)),
               2.0 * np.exp(-np.arange(n) / 40) + 0.1)
    run.add("layer/first_layer/grad_norm", np.arange(n), 0.05 * np.exp(0.2 *
                                                                       rng.standard_normal(n)))
    assert _loud(run, "vanishing_gradients") == []


def test_a_short_log_whose_grad_norm_jumps_15x_and_stays_explodes() -> None:
    """fairseq's eight progress lines: gnorm 0.79 for six, then 11.5 and 13.5."""
    g = np.array([0.788, 0.788, 0.787, 0.788, 0.794, 0.795, 11.481, 13.519])
    loss = np.linspace(10.09, 9.98, 8)
    f = _loud(_run(g, loss), "exploding_gradients")
    assert len(f) == 1 and f[0].onset_step == 6 and f[0].severity == "warning"


def test_a_short_log_with_a_lone_grad_spike_or_a_3x_rise_is_quiet() -> None:
    loss = np.linspace(10.09, 9.98, 8)
    lone = np.array([0.79, 0.79, 0.79, 0.79, 0.79, 0.79, 11.5, 0.8])
    rise = np.array([0.79, 0.79, 0.8, 0.79, 0.8, 0.8, 2.4, 2.5])
    assert _loud(_run(lone, loss), "exploding_gradients") == []
    assert _loud(_run(rise, loss), "exploding_gradients") == []


def test_grad_norm_that_jumps_30x_and_stays_up_explodes_though_it_wobbles() -> None:
    """HF dicts of a LLaMA fine-tune: grad_norm 0.24-0.27, then 1.3, then 4-23 to the end;
    the last blocks wobble (no rising slope) but every one stays >= 10x the early level."""
    g = np.array([0.244, 0.271, 1.356, 1.277, 17.22, 7.117, 21.81, 23.02, 3.769, 14.41])
    loss = np.array([1.359, 0.483, 0.581, 0.700, 0.661, 1.035, 0.661, 0.685, 0.864, 0.825])
    f = _loud(_run(g, loss), "exploding_gradients")
    assert len(f) == 1 and f[0].severity in ("warning", "error")
    # the same growth that falls back under 10x at the end is no sustained explosion
    g2 = g.copy()
    g2[-4:] = [0.9, 0.8, 0.7, 0.75]
    assert not [x for x in _loud(_run(g2, loss), "exploding_gradients")
                if "level grew" in x.summary]


def _scale_run(steps: list[int], scales: list[float]) -> Run:
    run = Run(source="t")
    run.add("loss_scale", np.array(steps), np.array(scales, dtype=float))
    run.add("loss", np.arange(0, 400, 10), np.full(40, 2.0))
    return run


def test_overflow_on_every_step_late_in_the_run_collapses_the_scale() -> None:
    """DeepSpeed's messages under the tqdm bar: 32, 16, 8, 4, 2 at steps 378-382."""
    f = _loud(_scale_run([378, 379, 380, 381, 382], [32, 16, 8, 4, 2]), "loss_scale_collapse")
    assert len(f) == 1 and f[0].onset_step == 379 and f[0].severity == "warning"


def test_the_start_up_search_and_occasional_overflows_are_quiet() -> None:
    startup = _scale_run([1, 2, 3, 4, 5, 6], [65536, 32768, 16384, 8192, 4096, 2048])
    assert _loud(startup, "loss_scale_collapse") == []
    occasional = _scale_run([500, 2500, 2600, 4600, 4700], [2048, 4096, 2048, 4096, 2048])
    assert _loud(occasional, "loss_scale_collapse") == []


def test_an_overflow_burst_the_scaler_climbs_back_from_is_quiet() -> None:
    """Four halvings in a row at step 5000 (around a loss spike) from 2^18 to 2^14, then the
    scaler doubles again every 2000 steps: an episode, not a collapse."""
    steps = list(range(4998, 5004)) + [7004, 9004, 11004]
    scales = [2.0 ** 18] * 2 + [2.0 ** 17, 2.0 ** 16, 2.0 ** 15, 2.0 ** 14] + \
        [2.0 ** 15, 2.0 ** 16, 2.0 ** 17]
    assert _loud(_scale_run(steps, scales), "loss_scale_collapse") == []


def test_a_first_step_that_blew_up_and_was_clipped_back_explodes_at_the_start() -> None:
    # GraphSAGE with summed neighbours under SGD: grad norm 1661 at the first logged step, then
    # 0.03-0.3 for the rest of the run, the loss from 586 down to ln 4 and stuck there.
    rng = np.random.default_rng(1)
    g = np.r_[1661.0, 0.12 * np.exp(rng.normal(0, 0.4, 59))]
    loss = np.r_[585.7, 1.37 * np.exp(rng.normal(0, 0.015, 59))]
    f = _loud(_run(g, loss), "exploding_gradients")
    assert len(f) == 1 and f[0].onset_step == 0 and "first logged step" in f[0].summary


@pytest.mark.parametrize("first", [3.0, 8.0, 40.0])
def test_large_first_norms_of_a_healthy_start_are_not_a_blowup(first: float) -> None:
    # initialization often makes the first norms several times the later ones
    rng = np.random.default_rng(2)
    g = np.r_[first, np.exp(rng.normal(0, 0.3, 99)) * np.linspace(1.0, 0.3, 99)]
    loss = 2.3 * np.exp(-np.arange(100) / 40) + 0.2
    assert not _loud(_run(g, loss), "exploding_gradients")
