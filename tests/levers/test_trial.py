"""One-lever trials: the paired-ratio statistics on hand numbers, the loss comparison, the
stacking rule, and whole trials on tiny recipes (never an absolute time)."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainmedic.errors import ConfigError
from trainmedic.levers.lever_catalog import Lever, LeverChoice, parse_lever
from trainmedic.levers.trial import (
    TrialConfig,
    TrialResult,
    VariantStats,
    stack_refusal,
    try_levers,
)
from trainmedic.levers.trial_stats import REL_FLOOR, compare_losses, paired_ratio, t_quantile_975
from trainmedic.recipe import Recipe

DEMO = "trainmedic.demo:recipe"
TINY = {"batch_size": 8, "context_len": 16, "steps": 200}


# -- statistics ------------------------------------------------------------------------------

def test_t_quantiles() -> None:
    assert t_quantile_975(1) == 12.7062 and t_quantile_975(4) == 2.7764
    # beyond the table: published t(0.975) for 40, 60 and 120 degrees of freedom
    for df, t in ((40, 2.0211), (60, 2.0003), (120, 1.9799)):
        assert abs(t_quantile_975(df) - t) < 2e-4
    with pytest.raises(ConfigError, match="df"):
        t_quantile_975(0)


def test_paired_ratio_hand_numbers() -> None:
    # ratios 0.5, 1, 2: log-ratios -ln2, 0, ln2: mean 0, sd ln2, 2 degrees of freedom
    e = paired_ratio([10.0, 10.0, 10.0], [5.0, 10.0, 20.0])
    assert e.ratios == (0.5, 1.0, 2.0)
    assert e.mean_ratio == pytest.approx(1.0)
    half = 4.3027 * math.log(2) / math.sqrt(3)
    assert e.ci_low == pytest.approx(math.exp(-half)) and e.ci_high == pytest.approx(
        math.exp(half))
    assert e.verdict == "inconclusive" and e.rounds == 3
    # every round twice as fast: no spread, speed-up exactly 2
    f = paired_ratio([0.02, 0.04, 0.03], [0.01, 0.02, 0.015])
    assert (f.mean_ratio, f.ci_low, f.ci_high) == pytest.approx((0.5, 0.5, 0.5))
    assert f.verdict == "faster" and f.speedup == pytest.approx(2.0)
    g = paired_ratio([1.0, 1.0], [3.0, 3.2])
    assert g.verdict == "slower" and g.mean_ratio == pytest.approx(math.sqrt(3 * 3.2))
    assert g.speedup_ci[0] == pytest.approx(1 / g.ci_high)


@pytest.mark.parametrize(("a", "b", "match"), [
    ([1.0], [1.0], "2 or more"), ([1.0, 2.0], [1.0], "one of each"),
    ([1.0, 0.0], [1.0, 1.0], "> 0")])
def test_paired_ratio_refuses(a: list[float], b: list[float], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        paired_ratio(a, b)


def test_loss_comparison_hand_numbers() -> None:
    straight = [4.0, 3.0, 2.0, 1.0]  # no noise around the trend: the floor is the tolerance
    same = compare_losses(straight, straight)
    assert same.rel_diff == 0 and same.tolerance == REL_FLOOR and same.within
    moved = compare_losses(straight, [4.0, 3.0, 2.0, 1.1])  # means 2.5 and 2.525
    assert moved.rel_diff == pytest.approx(0.01) and not moved.within
    assert moved.max_step_rel_diff == pytest.approx(0.1)
    # first differences 1, -1, 1: sd sqrt(4/3); se = sd/sqrt(2) * sqrt(2/4) = sd/2
    noisy = compare_losses([2.0, 3.0, 2.0, 3.0], [2.5, 3.0, 2.5, 3.0])
    assert noisy.tolerance == pytest.approx(3 * math.sqrt(4 / 3) / 2 / 2.5)
    assert noisy.rel_diff == pytest.approx(0.1) and noisy.within
    bad = compare_losses([1.0, 1.0, 1.0], [1.0, math.nan, 1.0])
    assert not bad.finite and not bad.within


# -- stacking rule ---------------------------------------------------------------------------

def _result(a_s: list[float], b_s: list[float], loss_b: list[float]) -> TrialResult:
    v = VariantStats(label="x", round_step_s=(1.0,), step_time_s=1.0, samples_per_step=1,
                     tokens_per_step=0, samples_per_s=1, tokens_per_s=0, warmup_s=0,
                     first_step_s=0, peak_bytes=None)
    return TrialResult(base=(), lever="lever_a", summary="", targets="", declared_cost="",
                       contract_changes=(), declared_numerics=False, a=v, b=v,
                       effect=paired_ratio(a_s, b_s),
                       loss=compare_losses([3.0, 2.0, 1.0], loss_b), rounds=3,
                       steps_per_round=1, drain_steps=0, prefetch_depth=0, device="cpu")


def test_stack_refusal_rule() -> None:
    same_loss, other_loss = [3.0, 2.0, 1.0], [3.0, 2.5, 2.0]
    slower = stack_refusal(_result([1.0, 1.0, 1.0], [1.5, 1.6, 1.55], same_loss), "lever_b")
    assert slower is not None and "unexplained regression" in slower and "lever_b" in slower
    murky = stack_refusal(_result([1.0, 1.0, 1.0], [0.8, 1.3, 1.0], other_loss), "lever_b")
    assert murky is not None and "changed the loss" in murky and "includes 0" in murky
    assert stack_refusal(_result([1.0, 1.0, 1.0], [0.8, 1.3, 1.0], same_loss), "b") is None
    assert stack_refusal(_result([1.0, 1.0, 1.0], [0.5, 0.6, 0.55], other_loss), "b") is None


# -- whole trials ----------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # they sleep: 2 cores do
def test_num_workers_gain_on_a_slow_loader() -> None:
    # 4 sleeping workers cut a 30 ms load to ~8 ms a batch: a gain far from 1. This shared
    # 2-core VM sometimes stalls a worker for a second, which one round's mean then carries
    # (it is real time lost): the trial is run a second time only when the first was not
    # "faster", and never when it came out "slower".
    for _attempt in range(2):
        report = try_levers(DEMO, (parse_lever("num_workers=4"),),
                            TrialConfig(rounds=5, steps_per_round=3),
                            overrides={**TINY, "load_delay_s": 0.03})
        t = report.trials[0]
        assert t.effect.verdict != "slower", t.effect
        if t.effect.verdict == "faster":
            break
    assert t.effect.rounds == 4 and t.prefetch_depth == 8  # 4 workers x prefetch 2
    assert t.drain_steps == 3 * 8
    assert t.effect.verdict == "faster" and t.effect.ci_high < 1
    assert t.effect.speedup_ci[0] > 1
    assert not t.changes_semantics, t.semantics_reason
    assert t.a.samples_per_step == t.b.samples_per_step == 8
    assert t.a.tokens_per_step == 8 * 16
    assert t.a.peak_bytes is None  # CPU: not measured, never a made-up figure
    assert t.loss.steps == 4 * (24 + 3)


def test_bf16_is_marked_as_changing_numerics() -> None:
    report = try_levers(DEMO, (parse_lever("bf16"),), TrialConfig(rounds=3, steps_per_round=2),
                        overrides=TINY)
    t = report.trials[0]
    assert t.declared_numerics and t.changes_semantics
    assert t.semantics_reason.startswith("declared to change the numerics; measured:")


def sum_recipe(batch_size: int = 16) -> Recipe:
    """Linear regression whose loss is a sum over the batch, not a mean: k micro-batches
    give 1/k of the update, which the runner's division by grad_accum does not undo."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 4, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.05 * torch.randn(512, generator=g)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    data = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True,
                      generator=torch.Generator().manual_seed(1))

    def loss_fn(m: Any, batch: Any) -> torch.Tensor:
        return ((m(batch[0]).squeeze(-1) - batch[1]) ** 2).sum()

    return Recipe(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.03),
                  loss_fn=loss_fn, data=data, seed=0)


def test_micro_batch_on_a_sum_loss_is_measured_as_changing_semantics() -> None:
    report = try_levers(f"{__file__}:sum_recipe", (parse_lever("micro_batch=4"),),
                        TrialConfig(rounds=3, steps_per_round=6))
    t = report.trials[0]
    assert not t.declared_numerics  # not declared: the loss comparison caught it
    assert not t.loss.within and t.changes_semantics
    assert t.loss.mean_b > t.loss.mean_a  # a quarter of the update learns slower
    assert t.semantics_reason.startswith("measured: mean loss differs")


@dataclass(frozen=True)
class _Sleepy(Lever):
    """Sleeps in every loss call: a lever that only costs time."""

    def apply(self, recipe: Recipe, value: Any) -> Recipe:
        inner = recipe.loss_fn

        def slow(model: Any, batch: Any) -> Any:
            time.sleep(0.02)
            return inner(model, batch)

        return dataclasses.replace(recipe, loss_fn=slow)


def test_a_regression_refuses_the_stack() -> None:
    choices = (LeverChoice(_Sleepy("sleepy", "sleeps 20 ms per micro-batch")),
               parse_lever("foreach"), parse_lever("fused"))
    report = try_levers(DEMO, choices, TrialConfig(rounds=4, steps_per_round=2),
                        overrides=TINY)
    assert [t.lever for t in report.trials] == ["sleepy"]
    assert report.trials[0].effect.verdict == "slower"
    assert [r.lever for r in report.refused] == ["foreach", "fused"]
    assert "unexplained regression" in report.refused[0].reason
    assert report.refused[1].reason == "not tried: the stack stopped at foreach"


def test_stacked_trial_builds_on_the_levers_below() -> None:
    report = try_levers(DEMO, (parse_lever("foreach"), parse_lever("activation_checkpointing")),
                        TrialConfig(rounds=3, steps_per_round=2), overrides=TINY)
    if report.refused:  # foreach made this loaded machine slower: the rule, not a failure
        assert "foreach" in report.refused[0].reason
        return
    second = report.trials[1]
    assert second.base == ("foreach",) and second.a.label == "foreach"
    assert second.b.label == "foreach+activation_checkpointing"
    assert second.loss.within, second.semantics_reason  # recompute: same numbers


def test_no_lever_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--lever"):
        try_levers(DEMO, ())
    with pytest.raises(ConfigError, match="rounds"):
        TrialConfig(rounds=2)
