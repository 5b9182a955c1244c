"""Each detector fires on its injected fault, at the right onset, with the right severity."""

from __future__ import annotations

import math

import numpy as np
import pytest
from synth import Spec, healthy_run

from trainmedic.diagnose import diagnose
from trainmedic.diagnose.finding import Finding
from trainmedic.diagnose.registry import get_detector
from trainmedic.run.series import Run


def run_detector(symptom: str, run: Run) -> list[Finding]:
    res = get_detector(symptom).fn(run)
    assert isinstance(res, list), res
    return res


def base(n: int = 2000, seed: int = 0, noise: float = 0.05, every: int = 1,
         schedule: str = "cosine", **kw: object) -> Run:
    return healthy_run(Spec(n=n, seed=seed, noise=noise, every=every, schedule=schedule,
                            **kw))  # type: ignore[arg-type]


def replace(run: Run, metric: str, values: np.ndarray, rank: int | None = None) -> None:
    s = run.get(metric, rank)
    assert s is not None
    run.series[(metric, rank)] = type(s)(s.steps, values)


def loss_values(run: Run) -> tuple[np.ndarray, np.ndarray]:
    s = run.get("loss")
    assert s is not None
    return s.steps.copy(), s.values.copy()


def worst(fs: list[Finding]) -> Finding:
    assert fs, "expected a finding"
    return max(fs, key=lambda f: (f.level, f.confidence))


# --------------------------------------------------------------------------- loss events
@pytest.mark.parametrize("seed", range(3))
def test_nonfinite_loss_persistent_is_error_at_first_nan(seed: int) -> None:
    run = base(seed=seed)
    steps, v = loss_values(run)
    v[1234:] = np.nan
    replace(run, "loss", v)
    f = worst(run_detector("nonfinite_loss", run))
    assert f.severity == "error" and f.onset_step == int(steps[1234])


def test_nonfinite_loss_isolated_is_warning_and_inf_counts() -> None:
    run = base()
    steps, v = loss_values(run)
    v[500] = np.inf
    replace(run, "loss", v)
    f = worst(run_detector("nonfinite_loss", run))
    assert f.severity == "warning" and f.onset_step == int(steps[500])
    assert f.end_step == int(steps[500])


def test_nonfinite_in_a_component_loss_is_found() -> None:
    run = base()
    steps, v = loss_values(run)
    comp = v * 0.3
    comp[900:] = np.nan
    run.add("dynamics_loss_step", steps, comp)
    f = worst(run_detector("nonfinite_loss", run))
    assert f.onset_step == int(steps[900]) and f.metric == "dynamics_loss_step"


@pytest.mark.parametrize("seed,every", [(0, 1), (1, 50), (2, 500)])
def test_loss_spike_found_with_onset_and_recovery(seed: int, every: int) -> None:
    run = base(seed=seed, every=every)
    steps, v = loss_values(run)
    v[1500] *= 12.0
    v[1501] *= 4.0
    replace(run, "loss", v)
    fs = [f for f in run_detector("loss_spike", run) if f.severity == "warning"]
    assert len(fs) == 1
    f = fs[0]
    assert f.onset_step == int(steps[1500])
    assert f.end_step is not None and f.end_step <= int(steps[1505])


def test_loss_spike_on_log_spanning_loss() -> None:
    # A physics-informed loss falling 12 orders of magnitude, with a 50x spike late on.
    run = base(shape="logspan", noise=0.05, seed=3)
    steps, v = loss_values(run)
    v[1700] *= 50
    replace(run, "loss", v)
    f = worst(run_detector("loss_spike", run))
    assert f.severity == "warning" and f.onset_step == int(steps[1700])


def test_moderate_bump_is_info_not_warning() -> None:
    run = base(noise=0.02, seed=4)
    steps, v = loss_values(run)
    v[1200] *= 1.9
    replace(run, "loss", v)
    assert all(f.severity == "info" for f in run_detector("loss_spike", run))


@pytest.mark.parametrize("seed", range(3))
def test_divergence_onset_and_error(seed: int) -> None:
    run = base(seed=seed, schedule="constant")
    steps, v = loss_values(run)
    k = 1200
    v[k:] *= np.exp(np.linspace(0, math.log(8), v.size - k))
    replace(run, "loss", v)
    f = worst(run_detector("divergence", run))
    assert f.severity == "error"
    assert abs(f.onset_step - int(steps[k])) <= 0.08 * steps[-1]
    assert not run_detector("loss_spike", run) or all(
        s.end_step is not None for s in run_detector("loss_spike", run))


def test_divergence_moderate_rise_is_warning() -> None:
    run = base(seed=5, schedule="constant", noise=0.02, shape="exp")
    steps, v = loss_values(run)
    k = 1500
    v[k:] *= np.linspace(1, 1.8, v.size - k)
    replace(run, "loss", v)
    f = worst(run_detector("divergence", run))
    assert f.severity in ("warning", "error")
    assert abs(f.onset_step - int(steps[k])) <= 0.1 * steps[-1]


def test_flat_loss_at_chance_is_error_naming_k() -> None:
    run = Run("flat")
    rng = np.random.default_rng(0)
    steps = np.arange(0, 3000, 50)
    run.add("loss", steps, math.log(10) + 0.01 * rng.standard_normal(steps.size))
    run.add("lr", steps, np.full(steps.size, 1e-4))
    f = worst(run_detector("flat_loss", run))
    assert f.severity == "error" and "ln(10)" in f.summary


def test_flat_loss_not_at_chance_is_warning_and_lr_zero_error() -> None:
    run = Run("flat")
    rng = np.random.default_rng(1)
    steps = np.arange(1, 400)
    run.add("loss", steps, 2.52 + 0.03 * rng.standard_normal(steps.size))
    assert worst(run_detector("flat_loss", run)).severity == "warning"
    run.add("lr", steps, np.zeros(steps.size))
    assert worst(run_detector("flat_loss", run)).severity == "error"


def test_plateau_is_info_with_knee_onset() -> None:
    run = Run("plateau")
    rng = np.random.default_rng(2)
    steps = np.arange(1, 2001)
    lvl = np.where(steps < 600, 3.0 - 2.0 * steps / 600, 1.0)
    run.add("loss", steps, lvl * np.exp(0.02 * rng.standard_normal(steps.size)))
    f = worst(run_detector("plateau", run))
    assert f.severity == "info" and abs(f.onset_step - 600) <= 120


def test_oscillation_warning_on_big_swings() -> None:
    run = Run("osc")
    rng = np.random.default_rng(3)
    steps = np.arange(1, 3001)
    v = 2.0 * np.exp(0.9 * np.sin(2 * np.pi * steps / 300) + 0.05 * rng.standard_normal(3000))
    run.add("loss", steps, v)
    assert worst(run_detector("oscillation", run)).severity == "warning"
    # Under a cyclic (warm-restart) lr schedule the same swings are by design: info.
    run.add("lr", steps, 1e-3 * (0.02 + (steps % 300) / 300))
    assert worst(run_detector("oscillation", run)).severity == "info"


# --------------------------------------------------------------------------- overfitting
@pytest.mark.parametrize("seed", range(4))
def test_overfitting_onset_at_val_minimum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    run = Run("overfit")
    steps = np.arange(100, 20001, 100)
    run.add("loss", steps, 2.0 * np.exp(-steps / 4000) * np.exp(0.02 * rng.standard_normal(200)))
    vs = np.arange(2000, 20001, 2000)
    val = 0.6 + 0.5 * ((vs - 6000) / 14000) ** 2 * np.sign(vs - 6000) + 0.2 * (vs < 6000) * (
        6000 - vs) / 4000
    run.add("val_loss", vs, val)
    f = worst(run_detector("overfitting", run))
    assert f.severity == "warning" and f.onset_step == 6000


def test_mild_upturn_is_info_and_falling_val_is_silent() -> None:
    run = Run("mild")
    vs = np.arange(1, 11) * 500
    val = np.array([0.66, 0.555, 0.519, 0.494, 0.4894, 0.4853, 0.4873, 0.4906, 0.4907, 0.4917])
    run.add("val_loss", vs, val)
    run.add("loss", vs, np.linspace(1.1, 0.27, 10))
    f = worst(run_detector("overfitting", run))
    assert f.severity == "info" and f.onset_step == 3000
    run2 = Run("good")
    run2.add("val_loss", vs, np.linspace(1.0, 0.5, 10))
    assert run_detector("overfitting", run2) == []


def test_overfitting_not_claimed_when_train_loss_rises_too() -> None:
    run = Run("both-up")
    vs = np.arange(1, 11) * 100
    run.add("val_loss", vs, [1.0, 0.8, 0.7, 0.75, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3])
    run.add("loss", vs, [1.0, 0.7, 0.6, 0.65, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2])
    assert run_detector("overfitting", run) == []


# --------------------------------------------------------------------------- gradients
def test_isolated_grad_spike_without_loss_reaction_is_info() -> None:
    run = base(seed=6)
    g = run.get("grad_norm")
    assert g is not None
    gv = g.values.copy()
    gv[1600] *= 20
    replace(run, "grad_norm", gv)
    f = worst(run_detector("exploding_gradients", run))
    assert f.severity == "info" and f.onset_step == int(g.steps[1600])


def test_grad_spike_with_loss_reaction_is_warning() -> None:
    run = base(seed=7)
    g = run.get("grad_norm")
    assert g is not None
    gv = g.values.copy()
    gv[1600] *= 20
    replace(run, "grad_norm", gv)
    _, v = loss_values(run)
    v[1600] *= 3
    replace(run, "loss", v)
    assert worst(run_detector("exploding_gradients", run)).severity == "warning"


def test_sustained_grad_growth() -> None:
    run = base(seed=8)
    g = run.get("grad_norm")
    assert g is not None
    gv = g.values * np.exp(np.clip(np.arange(g.values.size) - 1000, 0, None) / 200)
    replace(run, "grad_norm", gv)
    f = worst(run_detector("exploding_gradients", run))
    assert f.severity in ("warning", "error") and 1000 <= f.onset_step <= 1600


def test_vanishing_gradients_with_stuck_loss_is_warning() -> None:
    run = Run("vanish")
    steps = np.arange(1, 1001)
    run.add("grad_norm", steps, np.exp(-steps / 60.0) + 1e-12)
    run.add("loss", steps, np.full(1000, 2.0))
    f = worst(run_detector("vanishing_gradients", run))
    assert f.severity == "warning"
    assert f.onset_step is not None and f.onset_step < 500


def test_zero_grad_norm_is_vanishing() -> None:
    run = Run("zero")
    steps = np.arange(1, 101)
    g = np.ones(100)
    g[40:] = 0.0
    run.add("grad_norm", steps, g)
    assert worst(run_detector("vanishing_gradients", run)).onset_step == 41


def test_nonfinite_grad_persistent_error_and_scaler_info() -> None:
    run = base(seed=9)
    g = run.get("grad_norm")
    assert g is not None
    gv = g.values.copy()
    gv[1000:1010] = np.inf
    replace(run, "grad_norm", gv)
    assert worst(run_detector("nonfinite_grad", run)).severity == "error"
    gv = g.values.copy()
    gv[1000] = np.inf
    replace(run, "grad_norm", gv)
    scale = np.full(gv.size, 65536.0)
    scale[1000:] = 32768.0
    run.add("loss_scale", g.steps, scale)
    f = worst(run_detector("nonfinite_grad", run))
    assert f.severity == "info" and f.onset_step == int(g.steps[1000])


def test_nan_masked_hf_grad_nan_with_finite_loss() -> None:
    run = base(seed=10, every=50)
    run.meta["framework"] = "hf_trainer"
    g = run.get("grad_norm")
    assert g is not None
    gv = g.values.copy()
    gv[1500:] = np.nan
    replace(run, "grad_norm", gv)
    f = worst(run_detector("nan_masked_in_logs", run))
    assert f.severity == "error" and f.onset_step == int(g.steps[1500])
    assert f.confidence >= 0.9


def test_grad_nan_beside_a_finite_loss_outside_the_hf_trainer_is_a_nonfinite_grad() -> None:
    # an mmengine log: the logged loss is the step's own (no NaN filter), so a NaN grad_norm
    # beside a finite loss is a backward NaN, not a masking logger
    run = base(seed=10, every=50)
    g = run.get("grad_norm")
    assert g is not None
    gv = g.values.copy()
    gv[1500:] = np.nan
    replace(run, "grad_norm", gv)
    assert run_detector("nan_masked_in_logs", run) == []
    f = [f for f in diagnose(run).findings if f.level >= 1]
    assert f[0].symptom == "nonfinite_grad" and f[0].onset_step == int(g.steps[1500])


def test_a_loss_that_lands_on_exact_zero_and_stays_is_nan_masked_in_any_log() -> None:
    # a JSONL logger writing NaN as 0: 0.035 -> 0.0 at step 310 and 0.0 to the end, grad_norm
    # 0 over the same steps
    rng = np.random.default_rng(2)
    steps = np.arange(10, 610, 10)
    loss = 0.9 * np.exp(-steps / 100) + 0.03 + np.abs(rng.normal(0, 0.003, steps.size))
    g = 0.8 * np.exp(-steps / 300) + 0.05
    loss[30:], g[30:] = 0.0, 0.0
    run = Run("jsonl")
    run.add("loss", steps, loss)
    run.add("grad_norm", steps, g)
    f = [f for f in diagnose(run).findings if f.level >= 1]
    assert f[0].symptom == "nan_masked_in_logs" and f[0].onset_step == 310
    assert f[0].severity == "error"
    # a loss that falls to 0.0 through small values (rounded at 4 decimals) is convergence
    conv = Run("jsonl")
    conv.add("loss", steps, np.round(np.r_[np.geomspace(1.0, 1e-4, 40), np.zeros(20)], 4))
    assert not [f for f in diagnose(conv).findings if f.symptom == "nan_masked_in_logs"]


def test_nan_masked_hf_loss_zero_and_exact_flatline() -> None:
    run = Run("hf")
    run.meta["framework"] = "hf_trainer"
    steps = np.arange(1, 41) * 10
    v = np.linspace(2.0, 1.0, 40).round(4)
    v[30:] = 0.0
    run.add("loss", steps, v)
    assert worst(run_detector("nan_masked_in_logs", run)).onset_step == 310
    v = np.linspace(2.0, 1.0, 40).round(4)
    v[34:] = v[33]
    run2 = Run("hf2")
    run2.meta["framework"] = "hf_trainer"
    run2.add("loss", steps, v)
    assert worst(run_detector("nan_masked_in_logs", run2)).onset_step == 340
    run3 = Run("not-hf")
    run3.add("loss", steps, v)
    assert run_detector("nan_masked_in_logs", run3) == []


def test_loss_scale_collapse() -> None:
    run = Run("scale")
    steps = np.arange(1, 501)
    scale = 65536.0 / 2.0 ** np.floor(np.clip(steps - 100, 0, None) / 15)
    run.add("loss_scale", steps, scale)
    f = worst(run_detector("loss_scale_collapse", run))
    assert f.severity == "error" and 100 <= f.onset_step <= 200


def test_healthy_loss_scale_is_silent() -> None:
    run = Run("scale-ok")
    steps = np.arange(1, 10001)
    scale = 65536.0 * 2.0 ** (np.floor(steps / 2000) % 2) / 2 ** (steps % 700 < 3)
    run.add("loss_scale", steps, scale)
    assert run_detector("loss_scale_collapse", run) == []


# --------------------------------------------------------------------------- timing/memory
def test_input_bound() -> None:
    run = base(seed=11, timing=True)
    d = run.get("data_time_s")
    assert d is not None
    replace(run, "data_time_s", d.values + 0.06)
    f = worst(run_detector("input_bound", run))
    assert f.severity == "warning"


def test_input_bound_from_the_first_step_has_its_onset_there() -> None:
    # a short log (20 points, every 10 steps) whose loader is slow from the start: the
    # warm-up points left out of the level are slow too, so the onset is the first step
    run = Run("slow_from_start")
    steps = np.arange(10, 210, 10)
    rng = np.random.default_rng(0)
    run.add("loss", steps, 1.5 * np.exp(-steps / 80) + 0.05)
    run.add("data_time_s", steps, 0.0153 + 0.0001 * rng.standard_normal(20))
    run.add("step_time_s", steps, 0.021 + 0.0005 * rng.standard_normal(20))
    f = worst(run_detector("input_bound", run))
    assert f.severity == "warning" and f.onset_step == 10


def test_a_one_point_spike_back_to_the_start_is_a_warning() -> None:
    # a corrupt batch at step 200 throws a loss near 0 (noisy 2x point to point) back to its
    # starting level: too noisy for 12 sigmas, but it undid all the progress made
    rng = np.random.default_rng(1)
    steps = np.arange(5, 505, 5)
    v = np.maximum(1.6 * np.exp(-steps / 30), 0.03) * np.exp(0.5 * rng.standard_normal(100))
    v[:3] = [1.6, 1.2, 0.9]
    v[39] = 1.45  # step 200
    run = Run("poisoned")
    run.add("loss", steps, v)
    f = worst(run_detector("loss_spike", run))
    assert f.severity == "warning" and f.onset_step == 200
    # the same run with an ordinary 3x blip at step 200 stays info (or no event)
    v[39] = 3.0 * float(np.median(v[30:39]))
    calm = Run("blip")
    calm.add("loss", steps, v)
    assert all(f.severity == "info" for f in run_detector("loss_spike", calm))


def test_losses_replaced_by_zero_are_nan_masked_in_any_log() -> None:
    # torch.nan_to_num on the logged loss: exactly 0.0 for a step or two, between ordinary
    # losses, in a loss that otherwise never comes near 0
    steps = np.arange(1, 301)
    v = 1.6 * np.exp(-steps / 40) + 0.02
    v[[119, 120, 199]] = 0.0
    run = Run("nan_to_num")
    run.add("loss", steps, v)
    f = worst(run_detector("nan_masked_in_logs", run))
    assert f.severity == "warning" and f.onset_step == 120
    # a loss that reaches ~0 on its own (a saturated softmax) can touch 0.0: not masking
    v2 = v.copy()
    v2[150] = 1e-5
    sat = Run("saturated")
    sat.add("loss", steps, v2)
    assert run_detector("nan_masked_in_logs", sat) == []


def test_step_time_outliers_periodic() -> None:
    run = base(seed=12, timing=True)
    st = run.get("step_time_s")
    assert st is not None
    v = st.values.copy()
    v[99::100] = 5.0
    replace(run, "step_time_s", v)
    f = worst(run_detector("step_time_outliers", run))
    assert f.severity == "warning" and "every ~100" in f.summary


def test_memory_growth() -> None:
    run = base(seed=13, memory=True)
    m = run.get("mem_alloc_mb")
    assert m is not None
    replace(run, "mem_alloc_mb", m.values + np.linspace(0, 3000, m.values.size))
    f = worst(run_detector("memory_growth", run))
    assert f.severity == "warning" and f.metric == "mem_alloc_mb"


def test_a_steady_leak_of_60_mb_on_500_mb_warns() -> None:
    # every step's graph kept in a list: +60 MB over 200 steps (12%), steadily up to the end
    run = Run("leak")
    steps = np.arange(200)
    rng = np.random.default_rng(16)
    run.add("mem_alloc_mb", steps, 500 + 60 * (steps / 199) ** 1.5 + rng.normal(0, 0.2, 200))
    f = worst(run_detector("memory_growth", run))
    assert f.severity == "warning"


def test_a_small_leak_that_rises_at_every_block_warns_a_noisy_drift_stays_info() -> None:
    # +27 MB on 340 MB over 300 steps, every block above the one before (a graph kept per step)
    run = Run("leak")
    steps = np.arange(10, 310, 5)
    run.add("rss_mb", steps, 340 + 0.09 * (steps - 10) + 0.002 * np.arange(steps.size))
    f = worst(run_detector("memory_growth", run))
    assert f.severity == "warning"
    # the same climb as a noisy drift (blocks go down about a third of the time)
    rng = np.random.default_rng(18)
    run2 = Run("drift")
    run2.add("rss_mb", steps, 340 + 0.09 * (steps - 10) + rng.normal(0, 3.0, steps.size))
    assert not [f for f in run_detector("memory_growth", run2) if f.level >= 1]


def test_a_leak_switched_on_mid_run_starts_where_memory_leaves_its_level() -> None:
    # quantized to 0.01 GiB (ms-swift's memory(GiB)): flat at 276.5 MB to step 55, then a
    # cache that is never truncated adds ~10 MB every 5 steps
    run = Run("leak")
    steps = np.arange(5, 305, 5)
    mem = 276.5 + 10.24 * np.floor(np.maximum(steps - 55, 0) / 5.0)
    run.add("mem_alloc_mb", steps, mem)
    f = worst(run_detector("memory_growth", run))
    assert f.severity == "warning" and 55 <= f.onset_step <= 65
    # a leak from the start (every block above the one before) starts at the judged start
    run2 = Run("leak2")
    run2.add("mem_alloc_mb", steps, 276.5 + 0.5 * steps)
    f2 = worst(run_detector("memory_growth", run2))
    assert f2.onset_step <= 40


def test_a_warm_up_climb_that_levels_off_is_no_leak() -> None:
    run = Run("warm")
    steps = np.arange(200)
    rng = np.random.default_rng(17)
    run.add("mem_alloc_mb", steps, 500 + 80 * (1 - np.exp(-steps / 8)) + rng.normal(0, 0.2, 200))
    assert not [f for f in run_detector("memory_growth", run) if f.level >= 1]


def test_straggler_on_compute_time() -> None:
    run = Run("ddp")
    rng = np.random.default_rng(14)
    steps = np.arange(1, 501)
    for r in range(4):
        ct = 0.10 * np.exp(0.03 * rng.standard_normal(500)) * (1.3 if r == 2 else 1.0)
        run.add("compute_time_s", steps, ct, rank=r)
        run.add("step_time_s", steps, np.full(500, 0.14), rank=r)
    f = worst(run_detector("straggler", run))
    assert f.rank == 2 and f.severity == "warning" and f.metric == "compute_time_s"


def test_throughput_regression() -> None:
    run = base(seed=15, timing=True)
    sp = run.get("samples_per_s")
    assert sp is not None
    v = sp.values.copy()
    v[1300:] *= 0.6
    replace(run, "samples_per_s", v)
    f = worst(run_detector("throughput_regression", run))
    assert f.severity == "warning" and abs(f.onset_step - int(sp.steps[1300])) <= 60


def test_resume_discontinuity_replay_and_single_dup() -> None:
    run = Run("resume")
    steps = np.r_[np.arange(1, 601), np.arange(501, 1001)]
    run.add("loss", steps, np.linspace(3, 1, steps.size))
    f = worst(run_detector("resume_discontinuity", run))
    assert f.severity == "warning" and f.onset_step == 501 and f.end_step == 600
    run2 = Run("dup")
    run2.add("loss", [19, 19, 39, 59, 79], [2.1, 2.2, 2.0, 1.9, 1.8])
    f2 = worst(run_detector("resume_discontinuity", run2))
    assert f2.severity == "info"


def test_a_long_climb_before_the_nan_is_its_own_finding() -> None:
    # the loss climbs for 400 steps (20% of the run), then goes NaN: the climb is a phase of
    # its own (its onset is where it began), the NaN another
    run = base(seed=16, schedule="constant")
    steps, v = loss_values(run)
    v[1400:] *= np.exp(np.linspace(0, 4, v.size - 1400))
    v[1800:] = np.nan
    replace(run, "loss", v)
    d = diagnose(run)
    roots = {f.symptom: f for f in d.findings
             if f.symptom in ("nonfinite_loss", "divergence", "loss_spike")}
    assert sorted(roots) == ["divergence", "nonfinite_loss"]
    assert roots["nonfinite_loss"].onset_step == int(steps[1800])
    assert abs(roots["divergence"].onset_step - int(steps[1400])) <= int(steps[100])


def test_a_rise_just_before_the_nan_folds_into_it() -> None:
    run = base(seed=16, schedule="constant")
    steps, v = loss_values(run)
    v[1790:] *= np.exp(np.linspace(0, 4, v.size - 1790))
    v[1800:] = np.nan
    replace(run, "loss", v)
    d = diagnose(run)
    roots = [f for f in d.findings if f.symptom in ("nonfinite_loss", "divergence", "loss_spike")]
    assert [f.symptom for f in roots] == ["nonfinite_loss"]
    assert roots[0].onset_step == int(steps[1800])


def test_a_per_epoch_climb_into_nan_is_a_divergence() -> None:
    # four epochs logged before the NaN: too few points for the level analysis, but an
    # uninterrupted 1e12x climb into the NaN diverged from its first point
    run = Run("epochs")
    run.add("loss", [9, 19, 29, 39, 49, 59], [0.52, 15.2, 1680.0, 3.2e12, np.nan, np.nan])
    fs = run_detector("divergence", run)
    assert [(f.symptom, f.severity, f.onset_step) for f in fs] == [("divergence", "error", 9)]


def test_a_noisy_last_step_before_the_nan_is_not_a_climb() -> None:
    run = Run("sudden")
    run.add("loss", [1, 2, 3, 4, 5, 6], [2.0, 1.9, 2.0, 2.1, 2.2, np.nan])
    res = get_detector("divergence").fn(run)
    assert not isinstance(res, list) or not res  # too few points, and no 10x climb


def test_step_up_that_stays_is_a_spike_without_recovery() -> None:
    run = base(seed=17, schedule="constant", noise=0.02)
    steps, v = loss_values(run)
    v[1500:] *= 1.4  # jumps 6x, then settles 1.4x higher: not enough for divergence
    v[1500] *= 6 / 1.4
    replace(run, "loss", v)
    f = worst(run_detector("loss_spike", run))
    assert f.end_step is None and "did not come back" in f.summary
    assert f.onset_step == int(steps[1500])
    assert not run_detector("divergence", run)
    routed = diagnose(run).findings
    spike = next(x for x in routed if x.symptom == "loss_spike")
    assert not any(c.cause.startswith("a bad batch") for c in spike.causes)


def test_per_epoch_step_counter_is_info() -> None:
    run = Run("epochs")
    steps = np.tile(np.arange(0, 100), 5)
    run.add("loss", steps, np.linspace(3, 1, steps.size))
    f = worst(run_detector("resume_discontinuity", run))
    assert f.severity == "info" and "per-epoch" in f.summary


def test_a_spike_that_came_back_then_a_climb_is_a_divergence() -> None:
    # gradients never zeroed, logged per epoch (a trained corpus run): the loss spikes 80x,
    # comes back for a while, then climbs for good to 200x its best
    run = Run("no_zero_grad")
    run.add("loss", np.arange(9, 300, 10), [
        0.859, 0.694, 38.37, 393.9, 84.46, 189644.0, 2.488, 3.236, 4.841, 10.55, 2.15e8, 23.87,
        31.7, 31.71, 15.35, 31.16, 34.01, 55.74, 69.81, 97.03, 109.6, 126.6, 104.4, 102.4,
        139.9, 128.5, 151.2, 111.2, 118.6, 163.8])
    roots = [f for f in diagnose(run).findings
             if f.symptom in ("divergence", "loss_spike") and f.level >= 1]
    assert roots[0].symptom == "divergence" and roots[0].onset_step <= 29


def test_rose_again_needs_a_climb_not_later_spikes() -> None:
    from trainmedic.diagnose.engine import _rose_again

    spike = Finding(symptom="loss_spike", severity="warning", confidence=1.0, onset_step=10,
                    end_step=20, rank=None, metric="loss", summary="", evidence=())
    climb = Run("climb")
    climb.add("loss", np.arange(0, 100), np.r_[np.ones(20), np.exp(np.linspace(0, 3, 80))])
    assert _rose_again(climb, spike)
    # back to 1 for three points, knocked up 20x by a later spike and decaying from there:
    # the end is 4x the level it came back to, but the loss is falling, not climbing
    kicked = Run("kicked")
    kicked.add("loss", np.arange(0, 100),
               np.r_[np.ones(23), 20.0 * np.exp(-np.linspace(0, 1.6, 77))])
    assert not _rose_again(kicked, spike)


def test_a_margin_loss_met_is_not_a_masked_nan() -> None:
    # a hinge loss that reaches exact 0 in one logging interval while the validation loss
    # stays above 0: the margin is met, the weights are fine
    steps = np.arange(10, 610, 10)
    loss = np.r_[np.linspace(0.6, 0.05, 30), np.zeros(30)]
    run = Run("jsonl")
    run.add("loss", steps, loss)
    run.add("val_loss", steps[9::10], np.linspace(0.5, 0.2, 6))
    assert not [f for f in diagnose(run).findings if f.symptom == "nan_masked_in_logs"]
