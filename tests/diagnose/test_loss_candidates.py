"""The columns offered as the training loss when none was recognised, read with their values."""

from __future__ import annotations

import numpy as np

from trainmedic.diagnose.loss_candidates import is_counter, loss_candidates
from trainmedic.run.series import Run, Series


def _run(cols: dict[str, list[float]]) -> Run:
    run = Run(source="t")
    for name, vals in cols.items():
        steps = np.arange(len(vals), dtype=np.int64)
        run.series[(name, None)] = Series(steps, np.asarray(vals, dtype=np.float64))
    return run


def test_counters_and_sizes_are_told_from_a_loss() -> None:
    assert is_counter(np.array([12400.0, 12500, 12600, 12700]))  # a global iteration
    assert is_counter(np.array([5.0, 5, 5, 6, 6, 6, 7, 7]))  # an epoch logged per batch
    assert not is_counter(np.array([5.0, 5, 5, 6, 6, 6]))  # one rise: may be a loss's jump
    assert is_counter(np.array([512.0, 512, 512]))  # a batch size
    assert not is_counter(np.array([0.0, 0, 0, 0]))  # a loss stuck at exactly 0
    assert not is_counter(np.array([25.6, 25.6, 25.6]))  # a loss stuck at 25.6
    assert not is_counter(np.array([3.0, 2.0, 2.0, 1.0]))  # a falling integer loss


def test_ranking_loss_words_then_l_then_the_rest() -> None:
    n = 8
    run = _run({"eit": [100.0 * k for k in range(n)], "le": [25.6] * n,
                "recon_err": [1.0 / (k + 1) for k in range(n)], "lr_now": [1e-3] * n,
                "time_avg": [0.9] * n, "data_avg": [0.04] * n, "val_err": [0.5] * n,
                "top1": [0.5] * n, "score": [0.3 + 0.01 * k for k in range(n)],
                "tflops": [120.0] * n, "attempted_loss_scale": [65536.0] * n})
    assert loss_candidates(run) == ["recon_err", "le", "score"]
    assert loss_candidates(run, limit=1) == ["recon_err"]


def test_a_loss_word_wins_over_a_unit_like_prefix_and_whole_number_values() -> None:
    n = 8
    run = _run({"G_mse": [1.0 / (k + 1) for k in range(n)],
                "batch_loss_d": [0.7] * n,
                "perceptual_loss": [2.0] * n,
                "cost": [2.0, 3, 5, 9, 40, 300, 2e4, 1e6],  # diverging, printed as integers
                "L_G": [3.0] * n,  # stuck at a whole number
                "loss_scale_attempted": [65536.0] * n, "loss_time_ms": [12.0] * n,
                "nan_loss_count": [float(k) for k in range(n)],
                "skipped_loss_iters": [0.0] * n})
    assert set(loss_candidates(run, limit=10)) == {"G_mse", "batch_loss_d", "perceptual_loss",
                                                   "cost", "L_G"}
    assert loss_candidates(run, limit=10)[-1] == "L_G"  # the loss words first


def test_nothing_is_offered_when_only_timings_and_counters_are_there() -> None:
    run = _run({"iteration": [10.0, 20, 30, 40], "step_time_ms": [100.0, 101, 99, 100],
                "samples_per_s": [50.0, 51, 50, 49]})
    assert loss_candidates(run) == []
