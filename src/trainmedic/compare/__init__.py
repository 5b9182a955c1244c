"""Comparing runs: alignment by step, tokens or time, config diff, deltas with moving-block
bootstrap intervals, the step where the runs part, and a verdict. No torch."""

from __future__ import annotations

from trainmedic.compare.comparison import (
    CompareConfig,
    Comparison,
    MetricDelta,
    PairComparison,
    compare_paths,
    compare_runs,
)

__all__ = ["CompareConfig", "Comparison", "MetricDelta", "PairComparison", "compare_paths",
           "compare_runs"]
