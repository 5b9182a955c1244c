"""``profile`` names each injected cause of slowness (its first cause: the largest share that
is not time in ops) with its share of the step within 0.10 (absolute) of the truth. The
truth is measured independently of the profiler: every injection times itself with
perf_counter (tests/profile/injected.py); its mean over the timed steps (after the warm-up
the profile runs cycles of a settling, a timed and a profiled step) is divided by the
profile's mean step (the sum of its parts, which the shares are of). Shares, not times, are
compared: both come from the same run, so a slower or busier machine moves them together."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from trainmedic.profile.session import ProfileConfig, profile_recipe

sys.path.insert(0, str(Path(__file__).parent))
import injected  # noqa: E402

TOLERANCE = 0.10
CONFIG = ProfileConfig(steps=8, warmup=2, flops=False, measure_peak=False)


def _timed(calls: list[float], *, per_step: int = 1, warmup: int = CONFIG.warmup,
           steps: int = CONFIG.steps) -> list[float]:
    """The injected seconds of the timed steps: after the warm-up, cycles of three steps
    (settling, timed, profiled)."""
    return [t for j in range(1, 3 * steps, 3)
            for t in calls[(warmup + j) * per_step:(warmup + j + 1) * per_step]]


def _profile(cause: str, per_step: int = 1, **kw: object) -> tuple[object, float]:
    """The report and the injected seconds per timed step (their mean)."""
    injected.INJECTED.clear()
    report = profile_recipe(injected.recipe(cause=cause, **kw), CONFIG)  # type: ignore[arg-type]
    timed = _timed(injected.INJECTED, per_step=per_step)
    return report, per_step * statistics.fmean(timed) if timed else 0.0


def _mean_step(components: list[object]) -> float:
    return sum(c.seconds_per_step for c in components)  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_loader_sleep_is_named_input_with_its_share() -> None:
    report, per_batch_s = _profile("sleep")
    b = report.breakdown  # type: ignore[attr-defined]
    truth = per_batch_s / _mean_step(b.components)
    assert truth > 0.1
    assert abs(b.share("data_wait") - truth) <= TOLERANCE, (b.share("data_wait"), truth)
    assert report.causes[0].kind == "input"  # type: ignore[attr-defined]
    assert report.levers[0].name == "num_workers"  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_busy_loop_is_named_host_python_in_the_forward() -> None:
    report, spin_s = _profile("busy")
    b = report.breakdown  # type: ignore[attr-defined]
    truth = spin_s / _mean_step(b.components)
    assert report.causes[0].kind == "host"  # type: ignore[attr-defined]
    assert abs(b.share("host_python") - truth) <= TOLERANCE, (b.share("host_python"), truth)
    assert max(b.host_by_phase, key=b.host_by_phase.get) == "forward"


@pytest.mark.slow
def test_a_value_read_per_layer_is_named_at_its_call_site() -> None:
    layers = 3
    report, read_s = _profile("item", per_step=layers, layers=layers)
    sites = report.sync_sites  # type: ignore[attr-defined]
    assert sum(sites.values()) == layers  # one per layer per step, nothing else
    (site,) = sites
    assert site.startswith("injected.py:") and site.endswith("in forward")
    cause = next(c for c in report.causes if c.kind == "value_reads")  # type: ignore[attr-defined]
    assert "free on CPU" in cause.summary
    # on CPU a read is no sync: its share is the time of the reads themselves, ~0
    truth = read_s / _mean_step(report.breakdown.components)  # type: ignore[attr-defined]
    assert abs(report.breakdown.share("sync") - truth) <= TOLERANCE  # type: ignore[attr-defined]


def test_a_healthy_run_names_no_stall() -> None:
    report, _ = _profile("none")
    kinds = {c.kind for c in report.causes}  # type: ignore[attr-defined]
    assert not kinds & {"communication", "value_reads"}
    assert report.breakdown.share("data_wait") < 0.25  # type: ignore[attr-defined]
    assert report.sync_sites == {}  # type: ignore[attr-defined]


@pytest.mark.slow
def test_an_extra_all_reduce_on_two_gloo_ranks_is_named_communication(tmp_path: Path) -> None:
    log = tmp_path / "injected.log"
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", TM_INJECT_LOG=str(log))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", "-m", "trainmedic", "profile", f"{Path(injected.__file__)}:recipe",
           # 24 steps: one all-reduce here takes 9-25 ms (two ranks on two cores), and the
           # timed and the profiled steps each average their own
           "--set", "cause=allreduce", "--steps", "24", "--warmup", "2", "--no-peak",
           "--no-flops", "--json"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("torchrun profile did not finish in 240 s") from None
    assert proc.returncode == 0, err[-3000:]
    doc = json.loads(out)  # rank 0 alone prints, with every rank's report
    assert doc["world_size"] == 2 and [r["rank"] for r in doc["ranks"]] == [0, 1]
    rows = [line.split() for line in log.read_text().splitlines()]
    for r in doc["ranks"]:
        calls = [float(s) for k, s in rows if int(k) == r["rank"]]
        per_step = statistics.fmean(_timed(calls, warmup=2, steps=24))
        truth = per_step / sum(c["seconds_per_step"] for c in r["components"])
        share = next(c["share"] for c in r["components"] if c["name"] == "exposed_comm")
        assert r["causes"][0]["kind"] == "communication"
        assert abs(share - truth) <= TOLERANCE, (r["rank"], share, truth)


@pytest.mark.slow
def test_mfu_falls_in_proportion_when_a_sleep_is_injected() -> None:
    config = ProfileConfig(steps=6, warmup=1, flops=True, measure_peak=False,
                           peak_flops_per_s=1e11)
    reports = {}
    for cause in ("none", "sleep"):
        reports[cause] = profile_recipe(injected.recipe(cause=cause), config)
    base, slow = reports["none"], reports["sleep"]
    assert base.flops_per_step == slow.flops_per_step  # the same model and batch
    # 4 layers of 512x512 on a 128-sample batch: forward 2·N·B, backward 4·N·B except the
    # first layer's input gradient, plus the MSE's nothing
    n, b = 4 * 512 * 512, 128
    assert base.flops_per_step == 6 * n * b - 2 * 512 * 512 * b
    ratio = slow.mfu / base.mfu  # type: ignore[operator]
    assert ratio == pytest.approx(base.breakdown.step_time_s / slow.breakdown.step_time_s)
    assert ratio < 0.8
