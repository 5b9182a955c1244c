"""Red-team reproducers for the loss detectors (flat_loss, nan_masked_in_logs, divergence,
loss_spike, oscillation): each fault case failed before its fix, and each has a healthy
counterpart that must stay clean."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainmedic.diagnose.finding import Finding
from trainmedic.diagnose.registry import get_detector
from trainmedic.diagnose.stats import hinge_fit, theil_sen_z
from trainmedic.run.series import Run

WARNING_UP = ("warning", "error")


def detect(symptom: str, run: Run) -> list[Finding]:
    res = get_detector(symptom).fn(run)
    assert isinstance(res, list), res
    return res


def hf_run(loss: np.ndarray, every: int = 10, *, lr: np.ndarray | float | None = None,
           grad_norm: np.ndarray | None = None, hf: bool = True) -> Run:
    run = Run("redteam")
    if hf:
        run.meta["framework"] = "hf_trainer"
    steps = np.arange(1, len(loss) + 1) * every
    run.add("loss", steps, loss)
    if lr is not None:
        run.add("lr", steps, np.broadcast_to(np.asarray(lr, dtype=float), loss.shape).copy())
    if grad_norm is not None:
        run.add("grad_norm", steps, grad_norm)
    return run


# --------------------------------------------------------------------------- flat_loss
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("lr", [None, 0.0, 1e-4])
def test_noisy_stuck_run_at_chance_is_flat(seed: int, lr: float | None) -> None:
    # Before: the best of 100 noisy 5-point block medians looked > 3% below the start.
    r = np.random.default_rng(seed)
    run = hf_run(math.log(2) * np.exp(r.normal(0, 0.05, 500)), lr=lr)
    fs = detect("flat_loss", run)
    assert fs and fs[0].severity == "error", fs


@pytest.mark.parametrize("seed", range(3))
def test_noisy_stuck_run_with_lr_zero_is_error_even_when_too_noisy_to_bound(seed: int) -> None:
    # 12% noise on 200 points: too noisy to show a 3% fall, but lr = 0 cannot learn.
    r = np.random.default_rng(seed)
    run = hf_run(3.3 * np.exp(r.normal(0, 0.12, 200)), lr=0.0)
    fs = detect("flat_loss", run)
    assert fs and fs[0].severity == "error", fs


@pytest.mark.parametrize("seed", range(5))
def test_slow_significant_fall_is_info_not_warning(seed: int) -> None:
    # HF continued pretraining: 2.10 -> 2.07 (1.4%) over 1000 points at 3% noise.
    r = np.random.default_rng(seed)
    n = 1000
    run = hf_run(np.linspace(2.10, 2.07, n) * np.exp(r.normal(0, 0.03, n)), lr=2e-5)
    fs = detect("flat_loss", run)
    assert all(f.severity == "info" for f in fs), fs


@pytest.mark.parametrize("seed", range(3))
def test_learning_noisy_run_is_not_flat(seed: int) -> None:
    r = np.random.default_rng(seed)
    s = np.arange(500)
    run = hf_run((0.69 - 0.1 * (1 - np.exp(-s / 100))) * np.exp(r.normal(0, 0.05, 500)),
                 lr=1e-4)
    assert detect("flat_loss", run) == []


# --------------------------------------------------------------------------- nan_masked
def _healthy_hf(seed: int, n: int = 600) -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(seed)
    s = np.arange(n)
    loss = (0.5 + 2.0 * np.exp(-s / 150)) * np.exp(r.normal(0, 0.05, n))
    gn = 1.5 * np.exp(r.normal(0, 0.3, n))
    return loss.round(4), gn


@pytest.mark.parametrize("seed", range(4))
def test_fp16_isolated_overflow_grad_norms_are_info(seed: int) -> None:
    # GradScaler skipped a few overflow steps: inf/NaN grad_norm, loss on trend.
    loss, gn = _healthy_hf(seed)
    gn[[60, 200, 370, 480]] = [np.inf, np.nan, np.inf, np.nan]
    fs = detect("nan_masked_in_logs", hf_run(loss, grad_norm=gn))
    assert fs and all(f.severity == "info" for f in fs), fs


def test_consecutive_or_reacting_nonfinite_grad_norms_still_warn() -> None:
    loss, gn = _healthy_hf(0)
    gn[[300, 301]] = np.nan  # two in a row
    fs = detect("nan_masked_in_logs", hf_run(loss, grad_norm=gn))
    assert fs and fs[0].severity == "warning", fs
    loss, gn = _healthy_hf(1)
    gn[[100, 400]] = np.nan
    loss[401] = loss[399] * 2.0  # the loss reacted
    fs = detect("nan_masked_in_logs", hf_run(loss, grad_norm=gn))
    assert fs and fs[0].severity == "warning", fs
    loss, gn = _healthy_hf(2)
    gn[[100, 500, 530, 560, 590]] = np.nan  # more and more often
    fs = detect("nan_masked_in_logs", hf_run(loss, grad_norm=gn))
    assert fs and fs[0].severity == "warning", fs


def _converged(n: int = 300) -> np.ndarray:
    s = np.arange(n)
    return (2.0 * np.exp(-s / 25)).round(4)  # HF rounds to 4 decimals: ends at 0.0


@pytest.mark.parametrize("with_grad", [False, True])
def test_converged_run_rounded_to_zero_is_not_masked(with_grad: bool) -> None:
    loss = _converged()
    assert loss[-1] == 0.0 and loss[-10] == 0.0
    gn = np.exp(-np.arange(300) / 50) if with_grad else None
    assert detect("nan_masked_in_logs", hf_run(loss, grad_norm=gn)) == []


def test_flatline_at_a_plausible_loss_is_still_masked_and_finite_grads_clear_it() -> None:
    v = np.linspace(2.0, 1.0, 40).round(4)
    v[34:] = v[33]
    fs = detect("nan_masked_in_logs", hf_run(v))
    assert fs and fs[0].severity == "warning" and fs[0].onset_step == 340
    # The same flatline with a finite grad_norm logged at those steps: no NaN gradient.
    assert detect("nan_masked_in_logs", hf_run(v, grad_norm=np.full(40, 0.7))) == []


# --------------------------------------------------------------------------- divergence
def _rise_run(ratio: float, noise: float, seed: int, n: int = 2000,
              start: float = 0.6) -> tuple[Run, np.ndarray, int]:
    """A healthy descent, then from ``start`` of the run a linear rise to ``ratio`` x."""
    r = np.random.default_rng(seed)
    s = np.arange(n)
    k = int(start * n)
    v = (0.6 + 2 * np.exp(-s / 200)) * np.where(s < k, 1.0, 1 + (ratio - 1) * (s - k) / (n - k))
    run = hf_run(v * np.exp(r.normal(0, noise, n)), hf=False)
    loss = run.get("loss")
    assert loss is not None
    return run, loss.steps, k


@pytest.mark.parametrize("ratio", [1.2, 1.3, 1.45])
@pytest.mark.parametrize("seed", range(3))
def test_slow_sustained_rise_is_divergence_with_onset_at_the_change(ratio: float,
                                                                    seed: int) -> None:
    # Before: a rise under 1.5x was only a plateau (info).
    run, steps, k = _rise_run(ratio, 0.05, seed)
    fs = detect("divergence", run)
    assert fs and fs[0].severity == "warning", fs
    assert fs[0].onset_step is not None
    assert abs(fs[0].onset_step - int(steps[k])) <= 0.04 * int(steps[-1]), fs[0].onset_step


@pytest.mark.parametrize("seed", range(3))
def test_linear_blowup_onset_is_not_late(seed: int) -> None:
    # Before: the onset walked back only to theta/3, 6-9% of the run late.
    run, steps, k = _rise_run(1.8, 0.05, seed, start=0.6)
    fs = detect("divergence", run)
    assert fs and fs[0].severity in WARNING_UP, fs
    assert fs[0].onset_step is not None
    assert abs(fs[0].onset_step - int(steps[k])) <= 0.03 * int(steps[-1]), fs[0].onset_step


@pytest.mark.parametrize("seed", range(3))
def test_rising_loss_with_improving_reward_or_gan_is_info(seed: int) -> None:
    run, steps, _ = _rise_run(1.4, 0.05, seed)
    run.add("ep_rew_mean", steps, np.linspace(-100, 200, steps.size))
    fs = detect("divergence", run)
    assert fs and all(f.severity == "info" for f in fs), fs
    run, steps, _ = _rise_run(1.4, 0.05, seed)
    run.add("g_loss", steps, np.ones(steps.size))
    run.add("d_loss", steps, np.ones(steps.size))
    assert all(f.severity == "info" for f in detect("divergence", run))


@pytest.mark.parametrize("noise", [0.02, 0.1, 0.2])
@pytest.mark.parametrize("seed", range(4))
def test_healthy_descent_and_plateau_is_not_divergence(noise: float, seed: int) -> None:
    r = np.random.default_rng(seed)
    s = np.arange(3000)
    v = (0.6 + 2 * np.exp(-s / 300)) * np.exp(r.standard_t(5, s.size) * noise)
    assert detect("divergence", hf_run(v, hf=False)) == []


# --------------------------------------------------------------------------- oscillation
def test_constant_zero_loss_does_not_oscillate() -> None:
    # Before: "swung 32 times by a median 0".
    assert detect("oscillation", hf_run(np.zeros(100), hf=False)) == []
    r = np.random.default_rng(0)
    x = np.arange(300)
    swing = 1.0 + 0.8 * np.sign(np.sin(x / 12.0)) + r.normal(0, 0.02, 300)
    fs = detect("oscillation", hf_run(swing - 1.0, hf=False))  # linear (crosses 0): still seen
    assert fs, fs


# --------------------------------------------------------------------------- loss_spike
def _lm(seed: int, n: int = 2000, noise: float = 0.02, heavy: bool = False,
        top: float = 1.5) -> np.ndarray:
    """An LM loss with a high floor: top+2.5 -> 2.5 nats."""
    r = np.random.default_rng(seed)
    s = np.arange(n)
    e = r.standard_t(4, n) if heavy else r.normal(0, 1, n)
    return (2.5 + top * np.exp(-s / 300)) * np.exp(noise * e)


@pytest.mark.parametrize("seed", range(3))
def test_lm_spike_that_undoes_progress_and_lasts_is_a_warning(seed: int) -> None:
    # Before: x2.35 lasting 300 steps (30 logged points), robust z ~ 43 -> info (needs 3x).
    v = _lm(seed)
    v[1200:1230] *= 2.35
    fs = detect("loss_spike", hf_run(v))
    assert fs and fs[0].severity == "warning" and fs[0].onset_step == 12010, fs


@pytest.mark.parametrize("seed", range(3))
def test_small_blip_after_large_progress_and_heavy_noise_stay_info(seed: int) -> None:
    v = _lm(seed, top=40.0)  # 42.5 -> 2.5: a 1.6x one-point blip undoes < 25% of that
    v[1200] *= 1.6
    assert all(f.severity == "info" for f in detect("loss_spike", hf_run(v)))
    v = _lm(seed, noise=0.08, heavy=True)  # heavy-tailed healthy noise: many candidates
    assert all(f.severity == "info" for f in detect("loss_spike", hf_run(v)))


@pytest.mark.parametrize("seed", range(3))
def test_lm_spike_over_two_points_undoing_progress_is_a_warning(seed: int) -> None:
    v = _lm(seed)
    v[1200:1202] *= 1.8  # 2 logged points, undoes > 25% of the 4.0 -> 2.5 progress
    fs = detect("loss_spike", hf_run(v))
    assert fs and fs[0].severity == "warning", fs


@pytest.mark.parametrize("seed", range(3))
def test_per_epoch_sawtooth_rise_is_info(seed: int) -> None:
    # 3 epochs; within each the loss climbs 30%, then drops at the next epoch start.
    r = np.random.default_rng(seed)
    n, per = 3000, 1000
    s = np.arange(n)
    v = (0.5 + 1.5 * np.exp(-s / 400)) * 0.85 ** (s // per) * (1 + 0.3 * (s % per) / per)
    run = hf_run(v * np.exp(r.normal(0, 0.05, n)))
    loss = run.get("loss")
    assert loss is not None
    run.add("epoch", loss.steps, s / per)
    assert all(f.severity == "info" for f in detect("divergence", run))


# --------------------------------------------------------------------------- shared statistics
def test_theil_sen_z_and_hinge_fit() -> None:
    r = np.random.default_rng(0)
    noise = r.normal(0, 1.0, 200)
    _, z = theil_sen_z(noise)
    assert abs(z) < 3.5
    slope, z = theil_sen_z(noise + 0.05 * np.arange(200))
    assert abs(slope - 0.05) < 0.02 and z > 4
    y = np.where(np.arange(120) < 70, 0.0, 0.1 * (np.arange(120) - 70)) + r.normal(0, 0.2, 120)
    c, rel = hinge_fit(y, 120)
    assert abs(c - 70) <= 4 and rel < 0.2


@pytest.mark.parametrize("seed", range(2))
def test_a_moderate_loss_jump_in_an_rl_run_whose_reward_improved_is_info(seed: int) -> None:
    # an actor-critic's loss jumps 2.35x for 30 points as the policy finds reward: the value
    # targets moved; the same jump with no reward logged still warns (see above)
    v = _lm(seed)
    v[1200:1230] *= 2.35
    run = hf_run(v)
    steps = np.arange(0, 20000, 500)
    run.add("rollout/ep_rew_mean", steps, np.linspace(-100.0, 50.0, steps.size))
    assert all(f.severity == "info" for f in detect("loss_spike", run))
    # a loss that explodes (>= 3x) warns whatever the reward did
    v2 = _lm(seed)
    v2[1200:1230] *= 20.0
    run2 = hf_run(v2)
    run2.add("rollout/ep_rew_mean", steps, np.linspace(-100.0, 50.0, steps.size))
    assert any(f.severity == "warning" for f in detect("loss_spike", run2))


def test_a_gan_whose_generator_loss_is_read_as_the_loss_is_still_a_gan(tmp_path) -> None:
    # "loss_G" becomes the run's loss; the GAN check reads the raw names too
    from trainmedic.diagnose.detectors.rewards import losses_trade_off
    from trainmedic.run import load_run

    lines = "".join(f"step={s} loss_G={0.7 + s / 1000:.4f} loss_D={0.69 - s / 3000:.4f}\n"
                    for s in range(10, 610, 10))
    (tmp_path / "gan.log").write_text(lines)
    run = load_run(str(tmp_path / "gan.log"))
    assert run.has("loss") and "GAN" in losses_trade_off(run)


@pytest.mark.parametrize("name,rl", [("td_loss", True), ("policy_loss", True),
                                     ("critic_loss", True), ("q_loss", True),
                                     ("train_loss", False), ("nll_loss", False)])
def test_a_loss_named_as_an_rl_objective_may_rise(tmp_path, name: str, rl: bool) -> None:
    # A DQN's TD loss steps up at every target-network sync while the agent learns.
    from trainmedic.diagnose.detectors.rewards import losses_trade_off
    from trainmedic.run import load_run

    rows = [f"{s},{1e-4 * (1 + s / 10):.6g}" for s in range(5, 405, 5)]
    (tmp_path / "m.csv").write_text(f"step,{name}\n" + "\n".join(rows) + "\n")
    run = load_run(str(tmp_path / "m.csv"))
    assert run.has("loss") and bool(losses_trade_off(run)) is rl


def test_swings_of_a_td_loss_are_info_those_of_a_plain_loss_a_warning(tmp_path) -> None:
    from trainmedic.diagnose import diagnose

    # A DQN's TD loss jumps at each target-network sync and settles: swings by design.
    from trainmedic.run import load_run

    r = np.random.default_rng(3)
    s = np.arange(5, 405, 5)
    v = 1e-3 * np.where((s // 50) % 2 == 0, 1.0, 8.0) * np.exp(r.normal(0, 0.05, s.size))
    sev = {}
    for name in ("train/td_loss", "train/loss"):
        p = tmp_path / f"{name.replace('/', '_')}.csv"
        rows = "".join(f"{a},{b:.6g}\n" for a, b in zip(s, v, strict=True))
        p.write_text(f"step,{name}\n" + rows)
        fs = [f for f in diagnose(load_run(str(p))).findings if f.symptom == "oscillation"]
        sev[name] = fs[0].severity if fs else None
    assert sev == {"train/td_loss": "info", "train/loss": "warning"}, sev
