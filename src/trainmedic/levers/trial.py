"""One-lever trials (``trainmedic try``): the baseline and the lever, interleaved, measured.

The baseline A and the lever B are built from the same recipe spec and overrides (the
factory called twice from the same random state), then run in rounds: each round runs A's
steps, then B's, each continuing its own training, every step timed with ``perf_counter``
(after ``torch.cuda.synchronize`` on CUDA). Round 0 is warm-up and not counted (compilation,
worker start-up, allocator growth). A round's figure is the mean of its timed steps, not the
median: a loader with workers delivers batches in bursts (one per worker), so step times
alternate between a wait and none, and a median would pick one of the two. Each variant
keeps its own global random streams (python, numpy, torch), swapped in for its steps, so
dropout draws the same masks for both whatever the order they run in.

Worker processes keep loading while the other variant runs, so a loader with workers starts
each round with up to ``num_workers x prefetch_factor`` batches ready (its prefetch depth D),
which would flatter it. Each round therefore first runs ``drain`` untimed steps of both, then
times ``steps_per_round``. While the workers refill it, the buffer shrinks by ``1 - c/L``
batches per step (``c`` the step's compute, ``L`` the loader's time per batch), so the default
``3 x D`` (D the larger of the two) empties it whenever ``c < 2/3 L``; closer to balance some
batches may stay ready, each saving only ``L - c``: the report says so.

The effect, its interval and the loss comparison are in :mod:`trial_stats`. Stacking
(``try_levers`` with several levers) tries the first against the baseline, then each next one
on top of the levers before it, and refuses to go on from a lever that made the step slower
(an unexplained regression) or whose effect was inconclusive while it changed the loss.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainmedic.errors import ConfigError
from trainmedic.levers.lever_catalog import LeverChoice, apply_levers
from trainmedic.levers.trial_stats import (
    LossComparison,
    RatioEstimate,
    compare_losses,
    paired_ratio,
)

if TYPE_CHECKING:
    from trainmedic.bench.machine import Machine
    from trainmedic.recipe.recipe import Recipe

__all__ = ["TrialConfig", "VariantStats", "TrialResult", "Refusal", "TryReport", "run_trial",
           "try_levers", "stack_refusal"]

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]

#: Untimed steps per round, in prefetch depths (see the module docstring).
DRAIN_FACTOR = 3


@dataclass(kw_only=True, frozen=True)
class TrialConfig:
    """How long a trial runs."""

    rounds: int = 6
    """Rounds of A then B, the first one warm-up (not counted); >= 3, so that two or more
    rounds give the interval."""
    steps_per_round: int = 5
    """Timed optimizer steps of each variant per round (>= 1)."""
    drain_steps: int | None = None
    """Untimed steps of each variant at the start of every round (None: the largest
    ``num_workers x prefetch_factor`` of the two loaders, times 3; see the module
    docstring)."""

    def __post_init__(self) -> None:
        for name, low in (("rounds", 3), ("steps_per_round", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ConfigError(f"{name}: got {v!r}, expected an integer >= {low}")
        d = self.drain_steps
        if d is not None and (isinstance(d, bool) or not isinstance(d, int) or d < 0):
            raise ConfigError(f"drain_steps: got {d!r}, expected an integer >= 0 or None")


@dataclass(kw_only=True, frozen=True)
class VariantStats:
    """What one variant did over the counted rounds (every figure measured unless its field
    says otherwise)."""

    label: str
    """``baseline`` or the levers pulled, joined by ``+``."""
    round_step_s: tuple[float, ...]
    """Mean step time of each counted round, seconds."""
    step_time_s: float
    """Mean of every timed step of the counted rounds, seconds."""
    samples_per_step: float
    """Samples per optimizer step (counted from the batches drawn)."""
    tokens_per_step: float
    """Tokens per optimizer step (0 when the batches hold no token ids)."""
    samples_per_s: float
    """``samples_per_step / step_time_s``."""
    tokens_per_s: float
    """``tokens_per_step / step_time_s``."""
    warmup_s: float
    """Seconds of the warm-up round (compilation and worker start-up land here)."""
    first_step_s: float
    """Seconds of the very first step."""
    peak_bytes: int | None
    """CUDA: the variant's resident state (parameters, buffers, optimizer state; counted)
    plus the largest allocation above it during its rounds (measured); None on CPU, where both
    variants share one process whose memory high-water mark cannot be split between them."""


@dataclass(kw_only=True, frozen=True)
class TrialResult:
    """One lever against its baseline."""

    base: tuple[str, ...]
    """Levers already pulled in the baseline (empty: the recipe as is)."""
    lever: str
    """The lever tried (``name`` or ``name=value``)."""
    summary: str
    """What it does."""
    targets: str
    """The constraint it relieves."""
    declared_cost: str
    """What it is known to cost elsewhere (stated, not measured)."""
    contract_changes: tuple[str, ...]
    """Parts of the training contract it changes (declared)."""
    declared_numerics: bool
    """Declared to change the optimization numerics."""
    a: VariantStats
    """The baseline."""
    b: VariantStats
    """With the lever."""
    effect: RatioEstimate
    """B's step time over A's, paired by round."""
    loss: LossComparison
    """The loss trajectories over the same steps."""
    rounds: int
    """Rounds run, the warm-up one included."""
    steps_per_round: int
    """Timed steps per variant per round."""
    drain_steps: int
    """Untimed steps per variant at the start of each round."""
    prefetch_depth: int
    """The larger ``num_workers x prefetch_factor`` of the two loaders (0: no workers)."""
    device: str
    """Where the model ran (``cpu``, ``cuda``)."""

    @property
    def changes_semantics(self) -> bool:
        """Declared to change numerics, or the loss moved beyond the tolerance."""
        return self.declared_numerics or not self.loss.within

    @property
    def semantics_reason(self) -> str:
        """Why it is (or is not) marked as changing optimization semantics."""
        c = self.loss
        measured = ("a loss became non-finite" if not c.finite else
                    f"mean loss differs by {c.rel_diff:.2%} (tolerance {c.tolerance:.2%})")
        if self.declared_numerics:
            return f"declared to change the numerics; measured: {measured}"
        if not c.within:
            return f"measured: {measured}"
        return f"measured: {measured}: equivalent within the tolerance"

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {"base": list(self.base), "lever": self.lever, "summary": self.summary,
                "targets": self.targets, "declared_cost": self.declared_cost,
                "contract_changes": list(self.contract_changes),
                "declared_numerics": self.declared_numerics,
                "changes_semantics": self.changes_semantics,
                "semantics_reason": self.semantics_reason,
                "baseline": asdict(self.a), "with_lever": asdict(self.b),
                "effect": self.effect.to_dict(), "loss": self.loss.to_dict(),
                "rounds": self.rounds, "counted_rounds": self.effect.rounds,
                "steps_per_round": self.steps_per_round, "drain_steps": self.drain_steps,
                "prefetch_depth": self.prefetch_depth,
                "device": self.device}


@dataclass(kw_only=True, frozen=True)
class Refusal:
    """A lever of the stack that was not tried, and why."""

    lever: str
    reason: str


@dataclass(kw_only=True, frozen=True)
class TryReport:
    """Every trial of one ``trainmedic try``."""

    recipe: str
    overrides: Mapping[str, Any]
    config: TrialConfig
    trials: tuple[TrialResult, ...]
    refused: tuple[Refusal, ...]
    machine: Machine = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {"recipe": self.recipe, "overrides": dict(self.overrides),
                "config": asdict(self.config), "trials": [t.to_dict() for t in self.trials],
                "refused": [asdict(r) for r in self.refused],
                "machine": self.machine.to_dict()}


# -- running one variant -----------------------------------------------------------------

def _prefetch_depth(recipe: Recipe) -> int:
    from torch.utils.data import DataLoader

    data = recipe.data
    if isinstance(data, DataLoader) and data.num_workers > 0:
        return int(data.num_workers) * int(data.prefetch_factor or 2)
    return 0


def _resident_bytes(recipe: Recipe) -> int:
    """Bytes of the model's parameters and buffers and the optimizer's state tensors, each
    storage once."""
    import torch

    seen: set[int] = set()
    total = 0
    tensors: list[Any] = [*recipe.model.parameters(), *recipe.model.buffers()]
    for state in recipe.optimizer.state.values():
        tensors.extend(v for v in state.values() if isinstance(v, torch.Tensor))
    for t in tensors:
        s = t.untyped_storage()
        if s.data_ptr() not in seen and t.device.type == "cuda":
            seen.add(s.data_ptr())
            total += s.nbytes()
    return total


class _Variant:
    """One recipe under the runner, with its own random streams and timings."""

    def __init__(self, recipe: Recipe, label: str, rng: Mapping[str, Any]) -> None:
        from trainmedic.recipe.runner import RecipeRunner

        self.recipe = recipe
        self.label = label
        self.runner = RecipeRunner(recipe)
        self.rng = rng
        self.cuda = any(p.device.type == "cuda" for p in recipe.model.parameters())
        self.round_means: list[float] = []
        self.timed_s = 0.0
        self.losses: list[float] = []
        self.samples = self.tokens = 0
        self.timed_steps = 0
        self.warmup_s = 0.0
        self.first_step_s = 0.0
        self.peak_above_bytes: int | None = None

    def round(self, drain: int, steps: int, *, counted: bool) -> None:
        import torch

        from trainmedic.checkpoint.training_state import capture_rng, restore_rng

        restore_rng(self.rng)
        loop = self.runner.loop
        start = time.perf_counter()
        if self.cuda:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        times: list[float] = []
        for i in range(drain + steps):
            samples, tokens = loop.samples_seen, loop.tokens_seen
            t0 = time.perf_counter()
            result = self.runner.run(loop.step + 1)
            if self.cuda:
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            if loop.step == 1:
                self.first_step_s = dt
            if counted:
                self.losses.extend(result.losses)
                if i >= drain:
                    times.append(dt)
                    self.samples += loop.samples_seen - samples
                    self.tokens += loop.tokens_seen - tokens
                    self.timed_steps += 1
        if self.cuda and counted:
            above = torch.cuda.max_memory_allocated() - base
            self.peak_above_bytes = max(self.peak_above_bytes or 0, above)
        self.rng = capture_rng()
        if counted:
            self.round_means.append(statistics.fmean(times))
            self.timed_s += sum(times)
        else:
            self.warmup_s += time.perf_counter() - start

    def stats(self) -> VariantStats:
        n = max(1, self.timed_steps)
        step = self.timed_s / n
        peak = None if self.peak_above_bytes is None else \
            _resident_bytes(self.recipe) + self.peak_above_bytes
        return VariantStats(label=self.label, round_step_s=tuple(self.round_means),
                            step_time_s=step, samples_per_step=self.samples / n,
                            tokens_per_step=self.tokens / n,
                            samples_per_s=self.samples / n / step,
                            tokens_per_s=self.tokens / n / step, warmup_s=self.warmup_s,
                            first_step_s=self.first_step_s, peak_bytes=peak)


def _build_pair(spec: str, overrides: Mapping[str, Any], base: tuple[LeverChoice, ...],
                lever: LeverChoice) -> tuple[Recipe, Recipe, dict[str, Any]]:
    """A (the base levers) and B (the base levers and ``lever``), built from the same random
    state; the state after building, for both to start from."""
    from trainmedic.checkpoint.training_state import capture_rng, restore_rng
    from trainmedic.recipe import load_recipe

    start = capture_rng()
    a = apply_levers(load_recipe(spec, **overrides), base)
    restore_rng(start)
    b = apply_levers(load_recipe(spec, **overrides), (*base, lever))
    return a, b, capture_rng()


def run_trial(spec: str, overrides: Mapping[str, Any], lever: LeverChoice,
              config: TrialConfig | None = None, *, base: tuple[LeverChoice, ...] = (),
              on_round: Callable[[], None] | None = None) -> TrialResult:
    """Try ``lever`` on the recipe ``spec`` (with ``overrides`` and the ``base`` levers
    already pulled) against the same without it; see the module docstring."""
    config = config or TrialConfig()
    a_recipe, b_recipe, rng = _build_pair(spec, overrides, base, lever)
    a_label = "+".join(c.label for c in base) or "baseline"
    a = _Variant(a_recipe, a_label, rng)
    b = _Variant(b_recipe, "+".join(c.label for c in (*base, lever)), rng)
    depth = max(_prefetch_depth(a_recipe), _prefetch_depth(b_recipe))
    drain = config.drain_steps if config.drain_steps is not None else DRAIN_FACTOR * depth
    for r in range(config.rounds):
        for variant in (a, b):
            variant.round(drain, config.steps_per_round, counted=r > 0)
        if on_round is not None:
            on_round()
    effect = paired_ratio(a.round_means, b.round_means)
    loss = compare_losses(a.losses, b.losses)
    device = next((str(p.device.type) for p in a_recipe.model.parameters()), "cpu")
    lv = lever.lever
    return TrialResult(base=tuple(c.label for c in base), lever=lever.label,
                       summary=lv.summary, targets=lv.targets, declared_cost=lv.cost,
                       contract_changes=lv.changes, declared_numerics=lv.changes_numerics,
                       a=a.stats(), b=b.stats(), effect=effect, loss=loss,
                       rounds=config.rounds, steps_per_round=config.steps_per_round,
                       drain_steps=drain, prefetch_depth=depth, device=device)


def stack_refusal(previous: TrialResult, next_label: str) -> str | None:
    """Why ``next_label`` must not be stacked on the lever of ``previous`` (None: it may)."""
    e = previous.effect
    interval = (f"step time {e.mean_ratio - 1:+.1%}, 95% interval "
                f"[{e.ci_low - 1:+.1%}, {e.ci_high - 1:+.1%}], measured")
    if e.verdict == "slower":
        return (f"{previous.lever} made the step slower ({interval}) and nothing here explains "
                f"why: refusing to stack {next_label} on an unexplained regression; drop "
                f"{previous.lever} or find the cause first")
    if e.verdict == "inconclusive" and not previous.loss.within:
        return (f"{previous.lever} had no clear effect on speed ({interval}, the interval "
                f"includes 0) but changed the loss ({previous.semantics_reason}): refusing "
                f"to stack {next_label} on it; run more rounds or drop it")
    return None


def try_levers(spec: str, choices: tuple[LeverChoice, ...], config: TrialConfig | None = None,
               *, overrides: Mapping[str, Any] | None = None,
               on_progress: Progress | None = None) -> TryReport:
    """Try each lever of ``choices`` on top of the ones before it (the first against the
    recipe as is); stop at a lever the stacking rule refuses (see :func:`stack_refusal`)."""
    from trainmedic.bench.machine import describe_machine

    if not choices:
        raise ConfigError("--lever: got none, expected one or more levers to try")
    config = config or TrialConfig()
    overrides = dict(overrides or {})
    total = config.rounds * len(choices)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if on_progress is not None:
            on_progress(done, total)

    trials: list[TrialResult] = []
    refused: list[Refusal] = []
    for i, choice in enumerate(choices):
        if trials:
            reason = stack_refusal(trials[-1], choice.label)
            if reason is not None:
                refused.append(Refusal(lever=choice.label, reason=reason))
                refused.extend(Refusal(lever=c.label, reason=f"not tried: the stack stopped "
                                       f"at {choice.label}") for c in choices[i + 1:])
                break
        trials.append(run_trial(spec, overrides, choice, config, base=choices[:i],
                                on_round=tick))
    return TryReport(recipe=spec, overrides=overrides, config=config, trials=tuple(trials),
                     refused=tuple(refused), machine=describe_machine())
