"""``trainmedic.bench.matmul``: FLOP arithmetic, the sweep's summary, exact figures under a
fake clock, and a real tiny sweep on CPU."""

from __future__ import annotations

import itertools
import statistics

import pytest
import torch

from trainmedic.bench import matmul
from trainmedic.bench.matmul import (
    grid_shapes,
    matmul_flops,
    shape_range,
    shape_result,
    summarize,
    sweep_matmul,
)
from trainmedic.errors import ConfigError


def _counted_flops(m: int, n: int, k: int) -> int:
    """Count the multiplies and adds of a naive (m, k) x (k, n) product, one by one."""
    ops = 0
    for _i, _j in itertools.product(range(m), range(n)):
        for _p in range(k):
            ops += 2  # acc += a[i, p] * b[p, j]: one multiply, one add
    return ops


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 4), (5, 1, 7), (3, 6, 2)])
def test_flop_count_matches_a_counted_naive_product(shape: tuple[int, int, int]) -> None:
    assert matmul_flops(*shape) == _counted_flops(*shape)


def test_shape_result_converts_times_to_flops_per_second() -> None:
    times = [0.5, 2.0, 1.0, 4.0, 1.5]
    r = shape_result((4, 5, 6), times)
    flops = 2 * 4 * 5 * 6
    assert r.flops == flops and r.iterations == 5
    assert r.median_flops_per_s == pytest.approx(flops / 1.5)
    assert r.best_flops_per_s == pytest.approx(flops / 0.5)
    assert r.mean_flops_per_s == pytest.approx(flops / (9.0 / 5))
    assert r.median_time_s == 1.5
    with pytest.raises(ConfigError, match="times_s"):
        shape_result((1, 1, 1), [])
    with pytest.raises(ConfigError, match="times_s"):
        shape_result((1, 1, 1), [0.0, 1.0])


def test_summary_takes_the_highest_median_and_its_shape() -> None:
    results = [shape_result((8, 8, 8), [1.0, 1.0, 0.1]),     # best single, low median
               shape_result((16, 16, 16), [0.5, 0.6, 0.7]),  # highest median
               shape_result((4, 4, 4), [0.01, 0.02, 0.03])]
    s = summarize(results, device="cpu", dtype="float32", iterations=3, warmup=0,
                  threads=1, tf32=None, flush_bytes=1, device_warmup_s=0.0, elapsed_s=1.0,
                  machine=None)
    medians = [r.median_flops_per_s for r in results]
    assert s.peak_flops_per_s == max(medians)
    assert s.best_shape == results[medians.index(max(medians))].shape
    assert s.best_single_flops_per_s == max(r.best_flops_per_s for r in results)
    geo = statistics.geometric_mean([r.mean_flops_per_s for r in results])
    assert s.geomean_flops_per_s == pytest.approx(geo)


def test_sweep_under_a_fake_clock_gives_the_exact_figures(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # one warm-up then three timed iterations per shape; each iteration reads the clock twice
    durations = [9.0, 1.0, 2.0, 4.0,      # (8, 8, 8): median 2 s
                 9.0, 0.5, 0.25, 1.0]     # (16, 8, 4): median 0.5 s
    stamps: list[float] = []
    t = 100.0
    for d in durations:
        stamps += [t, t + d]
        t += d + 3.0
    clock = iter(stamps)
    monkeypatch.setattr(matmul, "_clock", lambda: next(clock))
    seen: list[tuple[int, int]] = []
    s = sweep_matmul(shapes=[(8, 8, 8), (16, 8, 4)], iterations=3, warmup=1,
                     flush_bytes=4096, on_progress=lambda d, n: seen.append((d, n)))
    assert [r.median_time_s for r in s.per_shape] == [2.0, 0.5]
    assert s.per_shape[0].median_flops_per_s == 1024 / 2.0
    assert s.peak_flops_per_s == 1024 / 0.5
    assert s.best_shape == (16, 8, 4)
    assert s.best_single_flops_per_s == 1024 / 0.25
    assert s.per_shape[1].mean_flops_per_s == pytest.approx(1024 / (1.75 / 3))
    assert seen == [(1, 2), (2, 2)]
    assert next(clock, None) is None  # every stamp used: warm-up dropped, nothing else timed


def test_a_real_tiny_sweep_is_consistent_and_restores_threads() -> None:
    before = torch.get_num_threads()
    s = sweep_matmul(shapes=[(64, 64, 64), (128, 32, 64)], iterations=2, warmup=1,
                     threads=1, flush_bytes=2**16)
    assert torch.get_num_threads() == before
    assert s.threads == 1 and s.device == "cpu" and s.dtype == "float32" and s.tf32 is None
    assert len(s.per_shape) == 2 and all(r.iterations == 2 for r in s.per_shape)
    assert s.peak_flops_per_s == max(r.median_flops_per_s for r in s.per_shape) > 0
    assert s.best_shape in {r.shape for r in s.per_shape}
    assert s.machine.cores_usable >= 1
    doc = s.to_dict()
    assert doc["basis"] == "measured" and doc["best_shape"] == list(s.best_shape)


def test_bfloat16_on_cpu_runs() -> None:
    s = sweep_matmul(dtype="bfloat16", shapes=[(32, 32, 32)], iterations=1, warmup=0,
                     flush_bytes=4096)
    assert s.dtype == "bfloat16" and s.peak_flops_per_s > 0


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(ConfigError, match="^dtype"):
        sweep_matmul(dtype="float64", shapes=[(8, 8, 8)])
    with pytest.raises(ConfigError, match="^shapes"):
        sweep_matmul(shapes=[(8, 0, 8)])
    with pytest.raises(ConfigError, match="^iterations"):
        sweep_matmul(shapes=[(8, 8, 8)], iterations=0)
    with pytest.raises(ConfigError, match="^device"):
        sweep_matmul(device="tpu", shapes=[(8, 8, 8)])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_cuda_without_a_device_is_refused() -> None:
    with pytest.raises(ConfigError, match="no CUDA device"):
        sweep_matmul(device="cuda", shapes=[(8, 8, 8)])


def test_ranges_follow_mamf_finder() -> None:
    assert shape_range(0, 1024, 256) == (256, 512, 768)  # a 0 start moves to STEP; STOP excluded
    assert shape_range(100, 301, 100) == (100, 200, 300)
    with pytest.raises(ConfigError, match="--m-range"):
        shape_range(0, 100, 0, field="--m-range")
    with pytest.raises(ConfigError, match="gives no size"):
        shape_range(512, 512, 256)
    assert grid_shapes([1, 2], [3], [4, 5]) == ((1, 3, 4), (1, 3, 5), (2, 3, 4), (2, 3, 5))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_sweep_times_with_events() -> None:
    s = sweep_matmul(device="cuda", dtype="bfloat16", shapes=[(1024, 1024, 1024)],
                     iterations=5, warmup=2, device_warmup_s=0)
    assert s.peak_flops_per_s > 0 and s.threads is None


def test_requested_shapes_needs_all_three_dimensions_or_none() -> None:
    from trainmedic.bench.matmul import requested_shapes

    none: dict[str, tuple[int, int, int] | None] = {}
    assert requested_shapes({}, none) is None
    assert requested_shapes({"m": "8,16", "n": "4", "k": "2"}, none) == ((8, 4, 2), (16, 4, 2))
    assert requested_shapes({"n": "4", "k": "2"}, {"m": (0, 24, 8)}) == (
        (8, 4, 2), (16, 4, 2))
    with pytest.raises(ConfigError, match="all three"):
        requested_shapes({"m": "8"}, none)
    with pytest.raises(ConfigError, match="^--k"):
        requested_shapes({"m": "8", "n": "8", "k": "x"}, none)
    with pytest.raises(ConfigError, match="not both"):
        requested_shapes({"m": "8", "n": "8", "k": "8"}, {"m": (0, 16, 8)})
