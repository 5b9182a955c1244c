"""``trainmedic bench collectives``: busbw factors against nccl-tests' definitions (numbers
worked out by hand from doc/PERFORMANCE.md, not from the code under test), size parsing, the
slow-rank rule on synthetic timings, and one 2-rank gloo launch under torchrun: a healthy sweep
through the command (``--json``) flags nobody, a sweep with rank 1 sleeping 30 ms before each
collective flags rank 1."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from trainmedic.bench.collectives import (
    CollectivesConfig,
    bandwidths,
    busbw_factor,
    find_slow_ranks,
    parse_sizes,
)
from trainmedic.cli.bench_collectives import collectives
from trainmedic.errors import ConfigError

WORKER = pathlib.Path(__file__).with_name("collectives_worker.py")

# busbw / algbw from PERFORMANCE.md's Summary, worked out by hand for each n:
# all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n, broadcast 1.
BY_HAND = {
    2: {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "broadcast": 1.0},
    3: {"all_reduce": 4 / 3, "all_gather": 2 / 3, "reduce_scatter": 2 / 3, "broadcast": 1.0},
    4: {"all_reduce": 1.5, "all_gather": 0.75, "reduce_scatter": 0.75, "broadcast": 1.0},
    8: {"all_reduce": 1.75, "all_gather": 0.875, "reduce_scatter": 0.875, "broadcast": 1.0},
}


@pytest.mark.parametrize("n", sorted(BY_HAND))
def test_busbw_factors_match_nccl_tests(n: int) -> None:
    for op, factor in BY_HAND[n].items():
        assert busbw_factor(op, n) == pytest.approx(factor)


def test_bandwidths_of_a_known_transfer() -> None:
    # 8 ranks all-reduce 1 GB in 10 ms: algbw 100 GB/s, busbw 175 GB/s (nccl-tests' example
    # arithmetic); all_gather of the same S: busbw 87.5 GB/s
    assert bandwidths("all_reduce", 10**9, 0.01, 8) == pytest.approx((1e11, 1.75e11))
    assert bandwidths("all_gather", 10**9, 0.01, 8) == pytest.approx((1e11, 0.875e11))
    with pytest.raises(ConfigError, match="alltoall"):
        busbw_factor("alltoall", 8)


def test_parse_sizes() -> None:
    assert parse_sizes("1KiB..64KiB") == (1024, 4096, 16384, 65536)
    assert parse_sizes("1K..8K:2") == (1024, 2048, 4096, 8192)
    assert parse_sizes("512,1MiB, 2MB") == (512, 2**20, 2 * 10**6)
    for bad in ("", "1KiB..64", "64KiB..1KiB", "1KiB..64KiB:1", "ten", "-1K"):
        with pytest.raises(ConfigError, match="sizes"):
            parse_sizes(bad)


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ConfigError, match="ops"):
        CollectivesConfig(ops=("alltoall",))
    with pytest.raises(ConfigError, match="iters"):
        CollectivesConfig(iters=0)


def test_slow_rank_rule_on_synthetic_timings() -> None:
    ms = 1e-3
    late1 = [[30 * ms, 0.5 * ms], [31 * ms, 0.6 * ms], [29 * ms, 0.4 * ms]]
    assert find_slow_ranks(late1, min_wait_s=ms, ratio=2) == ([1], [0, 3])
    noisy = [[0.6 * ms, 0.4 * ms], [0.3 * ms, 0.9 * ms], [2.5 * ms, 0.5 * ms]]  # 1 of 3
    assert find_slow_ranks(noisy, min_wait_s=ms, ratio=2)[0] == []
    # big messages: the wait is real but small against the transfer itself (ratio not met)
    big = [[80 * ms, 50 * ms]] * 3
    assert find_slow_ranks(big, min_wait_s=ms, ratio=2)[0] == []
    # three ranks: only the one every other rank waits for
    three = [[20 * ms, 20 * ms, 1 * ms], [21 * ms, 19 * ms, 0.5 * ms]]
    assert find_slow_ranks(three, min_wait_s=ms, ratio=2)[0] == [2]
    assert find_slow_ranks([], min_wait_s=ms, ratio=2) == ([], [])


def test_help_has_examples_and_one_rank_is_bad_usage() -> None:
    res = CliRunner().invoke(collectives, ["--help"])
    assert res.exit_code == 0 and "Examples:" in res.output and "busbw" in res.output
    env = {k: None for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS")}
    res = CliRunner(env=env).invoke(collectives, ["--sizes", "1KiB"])
    assert isinstance(res.exception, ConfigError) and "torchrun" in str(res.exception)
    res = CliRunner().invoke(collectives, ["--iters", "0"])
    assert res.exit_code == 2


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:  # type: ignore[type-arg]
    pytest.importorskip("torch.distributed")
    base = tmp_path_factory.mktemp("collectives")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", str(WORKER), str(base)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"bench collectives hung:\n{out[-4000:]}") from None
    docs = {}
    for name in ("healthy", "slow"):
        path = base / f"{name}.json"
        assert path.exists(), out[-4000:]
        docs[name] = json.loads(path.read_text())
    return docs


def test_healthy_sweep_reports_nccl_tests_figures_and_flags_nobody(sweeps: dict) -> None:  # type: ignore[type-arg]
    doc = sweeps["healthy"]
    assert doc["schema"] == "trainmedic.bench.collectives/1" and doc["basis"] == "measured"
    assert doc["ok"] and doc["slow_ranks"] == [] and doc["world_size"] == 2
    assert doc["backend"] == "gloo" and doc["machine_line"].startswith("machine:")
    assert doc["slow_link"]["checked"] is False and "one host" in doc["slow_link"]["reason"]
    rows = {(r["op"], r["size_bytes"]): r for r in doc["rows"]}
    assert sorted({op for op, _ in rows}) == ["all_gather", "all_reduce", "broadcast",
                                              "reduce_scatter"]
    for (op, size), r in rows.items():
        assert r["wrong"] == 0 and r["time_s"] > 0
        assert r["count"] * 4 == size  # float32; for all_gather S is the gathered array
        assert r["algbw_gbps"] == pytest.approx(size / r["time_s"] / 1e9)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * BY_HAND[2][op])
        assert r["time_s"] == pytest.approx(sum(r["time_s_per_rank"]) / 2)
    assert sorted({s for _, s in rows}) == [1024, 16384, 262144]


def test_a_rank_sleeping_before_each_collective_is_flagged(sweeps: dict) -> None:  # type: ignore[type-arg]
    doc = sweeps["slow"]
    assert doc["slow_ranks"] == [1] and not doc["ok"]
    stats = {s["rank"]: s for s in doc["rank_stats"]}
    assert stats[1]["late_batches"] == stats[1]["batches"] == 9
    assert stats[0]["late_batches"] == 0
    assert stats[0]["inside_s"] > stats[1]["inside_s"]
    assert any("rank 1 is slow" in f for f in doc["failures"])
