"""Comparing runs: each path loaded as its own run (never merged), every other run set against
the first (the baseline) on one progress axis, metric by metric, with a verdict.

Every figure of a ``MetricDelta`` is either measured (means, medians and maxima of the logged
values over the aligned window, and their difference) or estimated (bootstrap intervals, the
noise band and the parting step); the reports say which.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainmedic.compare.align import AXES, Aligned, align, progress
from trainmedic.compare.config_diff import ConfigDiff, diff_configs, run_config
from trainmedic.compare.deltas import BOOTSTRAP_RESAMPLES, Interval, bootstrap, parting_index
from trainmedic.compare.verdict import Verdict, judge
from trainmedic.errors import ConfigError, InputError
from trainmedic.run.series import Run

__all__ = ["CompareConfig", "MetricDelta", "PairComparison", "Comparison", "METRIC_GROUPS",
           "compare_runs", "compare_paths", "run_labels"]

METRIC_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("quality", ("val_loss", "loss")),
    ("optimization", ("grad_norm", "lr", "loss_scale", "param_norm", "update_ratio")),
    ("throughput", ("step_time_s", "data_time_s", "compute_time_s", "comm_time_s",
                    "gc_time_s", "samples_per_s", "tokens_per_s", "mfu", "hfu", "gpu_util")),
    ("memory", ("mem_alloc_mb", "mem_reserved_mb", "mem_peak_mb", "rss_mb")),
)
"""The metrics compared, by group, in report order (canonical names, DESIGN.md)."""


@dataclass(kw_only=True, frozen=True)
class CompareConfig:
    """How runs are compared. A bad value raises ``ConfigError`` naming the field."""

    by: str = "step"
    """The progress axis the runs are aligned on: ``step``, ``tokens`` or ``time``."""

    level: float = 0.95
    """Confidence level of the bootstrap intervals (0.5 to 0.999)."""

    resamples: int = BOOTSTRAP_RESAMPLES
    """Bootstrap resamples per interval (100 to 100000)."""

    seed: int = 0
    """Seed of the bootstrap's random generator: the same runs give the same intervals."""

    metrics: tuple[str, ...] | None = None
    """Only these metrics (canonical names); None: every metric of ``METRIC_GROUPS``."""

    def __post_init__(self) -> None:
        if self.by not in AXES:
            raise ConfigError(f"by must be one of {', '.join(AXES)}, got {self.by!r}")
        if not isinstance(self.level, float) or not 0.5 <= self.level <= 0.999:
            raise ConfigError(f"level must be a float between 0.5 and 0.999, got {self.level!r}")
        if isinstance(self.resamples, bool) or not isinstance(self.resamples, int) or \
                not 100 <= self.resamples <= 100_000:
            raise ConfigError(f"resamples must be an integer between 100 and 100000, got "
                              f"{self.resamples!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed must be an integer >= 0, got {self.seed!r}")
        if self.metrics is not None:
            known = {m for _, ms in METRIC_GROUPS for m in ms}
            bad = [m for m in self.metrics if m not in known]
            if bad or not self.metrics:
                raise ConfigError(f"metrics must name compared metrics ({', '.join(sorted(known))}"
                                  f"); got {', '.join(bad) or 'none'}")


@dataclass(frozen=True)
class MetricDelta:
    """One metric of B against A over their aligned window (B - A)."""

    metric: str
    group: str
    aligned: Aligned
    a_mean: float
    b_mean: float
    a_median: float
    b_median: float
    a_max: float
    b_max: float
    delta: float
    """``b_mean - a_mean`` (measured)."""
    ratio: float | None
    """``b_mean / a_mean`` when both are positive (measured)."""
    delta_interval: Interval | None
    """Estimated: moving-block bootstrap of ``delta``."""
    ratio_interval: Interval | None
    parting_step: int | None
    """Estimated: A's step where the runs part beyond noise (None: they do not)."""
    noise_band: float

    @property
    def points(self) -> int:
        return len(self.aligned)

    @property
    def significant(self) -> bool:
        """The interval of the difference excludes zero."""
        return self.delta_interval is not None and self.delta_interval.excludes(0.0)


@dataclass(frozen=True)
class PairComparison:
    a: str
    b: str
    metrics: tuple[MetricDelta, ...]
    verdict: Verdict

    def get(self, metric: str) -> MetricDelta | None:
        return next((m for m in self.metrics if m.metric == metric), None)


@dataclass(frozen=True)
class Comparison:
    """Every other run against the first (``pairs[i]`` is run ``i + 1`` against run 0)."""

    labels: tuple[str, ...]
    sources: tuple[str, ...]
    axis: str
    runs: tuple[Run, ...]
    config: ConfigDiff
    pairs: tuple[PairComparison, ...]
    level: float
    notes: tuple[str, ...] = field(default=())


def run_labels(paths: Sequence[str], runs: Sequence[Run] = ()) -> tuple[str, ...]:
    """Short names for the runs: the tracker's run names where every run has a distinct one
    (an MLflow run folder is named by a 32-digit id, a W&B one by date and id), else the last
    path part, or the whole path where those clash."""
    tracked = [str(r.meta.get("run_name") or "") if r.meta.get("tracker") else ""
               for r in runs]
    if runs and all(tracked) and len(set(tracked)) == len(tracked):
        return tuple(tracked)
    names = [Path(p).name or str(p) for p in paths]
    if len(set(names)) < len(names):
        names = [str(p) for p in paths]
    return tuple(names)


def _span(run: Run, metric: str, axis: str, aligned: Aligned) -> tuple[float, float]:
    """A run's own extent of ``metric`` on ``axis`` (for the overlap warning)."""
    from trainmedic.compare.align import rank_for

    s = run.clean(metric, rank_for(run, metric))
    if s is None or not len(s):
        return float(aligned.x.min()), float(aligned.x.max())
    if axis == "step":
        return float(s.steps.min()), float(s.steps.max())
    p = progress(run, axis)
    if p is None:
        return float(aligned.x.min()), float(aligned.x.max())
    x = np.interp(s.steps, p.steps, p.values)
    return float(x.min()), float(x.max())


def _delta(metric: str, group: str, al: Aligned, cfg: CompareConfig) -> MetricDelta:
    a_mean, b_mean = float(np.mean(al.a)), float(np.mean(al.b))
    positive = a_mean > 0 and b_mean > 0 and bool(np.all(al.a >= 0)) and bool(np.all(al.b >= 0))
    kw = {"level": cfg.level, "resamples": cfg.resamples, "seed": cfg.seed}
    first, band = parting_index(al.a, al.b)
    return MetricDelta(
        metric, group, al, a_mean, b_mean, float(np.median(al.a)), float(np.median(al.b)),
        float(np.max(al.a)), float(np.max(al.b)), b_mean - a_mean,
        b_mean / a_mean if positive else None,
        bootstrap(al.a, al.b, **kw),  # type: ignore[arg-type]
        bootstrap(al.a, al.b, ratio=True, **kw) if positive else None,  # type: ignore[arg-type]
        None if first is None else int(al.steps_a[first]), band)


def compare_runs(runs: Sequence[Run], *, labels: Sequence[str] | None = None,
                 paths: Sequence[str | None] | None = None,
                 config: CompareConfig | None = None) -> Comparison:
    """Compare every run after the first against the first.

    ``paths`` (one per run) are searched for config files (hparams.yaml, ...). Raises
    ``ConfigError`` for fewer than two runs and ``InputError`` when no pair shares a metric
    over a common range of the axis.
    """
    cfg = config or CompareConfig()
    if len(runs) < 2:
        raise ConfigError(f"runs: got {len(runs)}; expected at least 2 runs to compare "
                          "(trainmedic compare A B)")
    sources = tuple(r.source for r in runs)
    labels = tuple(labels) if labels is not None else run_labels(sources, runs)
    if len(labels) != len(runs) or len(set(labels)) != len(labels):
        raise ConfigError(f"labels: got {list(labels)}; expected one distinct label per run")
    paths = list(paths) if paths is not None else [None] * len(runs)
    notes: list[str] = []
    config_notes: list[str] = []
    configs = [run_config(r, p, config_notes) for r, p in zip(runs, paths, strict=True)]
    wanted = set(cfg.metrics) if cfg.metrics else None
    pairs: list[PairComparison] = []
    for i in range(1, len(runs)):
        deltas: list[MetricDelta] = []
        candidates: dict[str, tuple[Aligned, tuple[float, float], tuple[float, float]]] = {}
        for group, names in METRIC_GROUPS:
            for m in names:
                if wanted is not None and m not in wanted:
                    continue
                al = align(runs[0], runs[i], m, cfg.by)
                if al is None or len(al) < 1:
                    continue
                deltas.append(_delta(m, group, al, cfg))
                candidates[m] = (al, _span(runs[0], m, cfg.by, al),
                                 _span(runs[i], m, cfg.by, al))
        verdict = judge(labels[0], labels[i], candidates, level=cfg.level,
                        resamples=cfg.resamples, seed=cfg.seed)
        pairs.append(PairComparison(labels[0], labels[i], tuple(deltas), verdict))
    if not any(p.metrics for p in pairs):
        shared = sorted(set(runs[0].metrics()) & set(runs[1].metrics()))
        what = (f"they share {', '.join(shared[:6])} but at no common {cfg.by}" if shared
                else "they share no metric")
        raise InputError(", ".join(sources), f"no metric in common over a common {cfg.by} "
                         f"range ({what}); expected runs logging e.g. loss over overlapping "
                         "steps (try --by step, or --map to name their loss)")
    for p in pairs:
        if math.isfinite(p.verdict.overlap) and p.verdict.overlap < 0.5:
            notes.append(f"{p.a} and {p.b} overlap over only {p.verdict.overlap:.0%} of one "
                         f"run's {cfg.by} range; the verdict covers that overlap only")
    return Comparison(labels, sources, cfg.by, tuple(runs),
                      diff_configs(configs, config_notes), tuple(pairs), cfg.level, tuple(notes))


def compare_paths(paths: Sequence[str], *, config: CompareConfig | None = None,
                  mapping: dict[str, str] | None = None) -> Comparison:
    """Load each path as its own run (``load_run`` on it alone) and compare them."""
    from trainmedic.run import load_run

    if len(paths) < 2:
        raise ConfigError(f"paths: got {len(paths)}; expected at least 2 runs to compare "
                          "(trainmedic compare A B)")
    runs = [load_run(p, mapping=mapping) for p in paths]
    return compare_runs(runs, labels=run_labels(paths, runs), paths=list(paths), config=config)
