"""``trainmedic dist check`` on real gloo ranks under torchrun: a healthy launch passes, an
injected bad environment is named, a rank killed before the barrier is named, a rank that
never arrives is named within the timeout (3 ranks); and in-process, the 1-rank check without
a launcher and the command's help and bad usage.

Three torchrun launches (the worker is tests/dist/bringup_worker.py), each once per module.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from trainmedic.cli.dist import dist
from trainmedic.errors import ConfigError

torch = pytest.importorskip("torch")
tdist = pytest.importorskip("torch.distributed")
if not tdist.is_available() or not tdist.is_gloo_available():
    pytest.skip("this torch build has no gloo backend", allow_module_level=True)

WORKER = pathlib.Path(__file__).with_name("bringup_worker.py")
HARD_TIMEOUT_S = 150  # far above every case's own timeout: reaching it means a hang


def _torchrun(base: pathlib.Path, nproc: int, cases: str, **env: str) -> str:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           str(nproc), str(WORKER), str(base), cases]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        full_env.pop(k, None)
    proc = subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=HARD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its workers
        out, _ = proc.communicate()
        raise AssertionError(f"dist check hung: torchrun not done in {HARD_TIMEOUT_S} s:\n"
                             f"{out[-4000:]}") from None
    return out


def _read(base: pathlib.Path, name: str, log: str) -> tuple[dict, str]:  # type: ignore[type-arg]
    path = base / f"{name}.rank0.json"
    assert path.exists(), f"rank 0 emitted no report for {name}:\n{log[-4000:]}"
    txt = base / f"{name}.rank0.txt"
    return json.loads(path.read_text()), txt.read_text() if txt.exists() else ""


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    base = tmp_path_factory.mktemp("healthy")
    base.joinpath("log").write_text(_torchrun(base, 2, "healthy_cli,bad_env"))
    return base


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, str]:  # type: ignore[type-arg]
    base = tmp_path_factory.mktemp("kill")
    log = _torchrun(base, 2, "kill")
    return (*_read(base, "kill", log), log)


@pytest.fixture(scope="module")
def late(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:  # type: ignore[type-arg]
    base = tmp_path_factory.mktemp("late")
    return _read(base, "late", _torchrun(base, 3, "late"))


def test_healthy_launch_passes_with_every_rank_reporting(healthy: pathlib.Path) -> None:
    doc = json.loads((healthy / "healthy_cli.rank0.json").read_text())
    assert doc["schema"] == "trainmedic.dist.check/1" and doc["ok"] is True
    assert (doc["launcher"], doc["world_size"], doc["backend"]) == ("torchrun", 2, "gloo")
    assert doc["missing_ranks"] == []
    n = 2
    for rank, r in enumerate(doc["ranks"]):
        assert (r["rank"], r["local_rank"], r["world_size"], r["device"]) == (rank, rank, n,
                                                                              "cpu")
        assert r["host"] and r["backend"] == "gloo" and r["stage"] == "done"
        checks = {c["name"]: c for c in r["checks"]}
        assert list(checks) == ["barrier", "all_reduce", "all_gather", "broadcast",
                                "allocation"]
        assert all(c["ok"] and c["time_s"] is not None and c["time_s"] >= 0
                   for c in checks.values())
        assert checks["all_reduce"]["value"] == [n * (n + 1) / 2]  # sum of rank+1
        assert checks["all_gather"]["value"] == [[0.0], [1.0]]
        assert checks["broadcast"]["value"] == [1000.0 + n]
        assert checks["allocation"]["value"] == 2**20


def test_injected_bad_environment_is_named_and_fails(healthy: pathlib.Path) -> None:
    doc, text = _read(healthy, "bad_env", (healthy / "log").read_text())
    assert doc["ok"] is False
    for r in doc["ranks"]:
        assert all(c["ok"] for c in r["checks"])  # the collectives themselves passed
        codes = {(f["code"], f.get("variable")): f["severity"] for f in r["environment"]}
        assert codes[("socket_ifname_no_match", "NCCL_SOCKET_IFNAME")] == "error"
        assert codes[("nccl_unknown_variable", "NCCL_SOCKET_IFNAM")] == "warning"
    assert "NCCL_SOCKET_IFNAME=nonexistent0 matches no interface" in text
    assert "did you mean NCCL_SOCKET_IFNAME?" in text
    assert "verdict: FAIL" in text


def test_rank_killed_before_the_barrier_is_named(killed: tuple) -> None:  # type: ignore[type-arg]
    doc, text, log = killed
    assert doc["ok"] is False
    assert [m["rank"] for m in doc["missing_ranks"]] == [1], log[-3000:]
    assert doc["missing_ranks"][0]["last_stage"] == "barrier"
    rank0 = doc["ranks"][0]
    barrier = [c for c in rank0["checks"] if c["name"] == "barrier"]
    # whichever came first: gloo's monitored_barrier naming rank 1, or torchrun's SIGTERM
    assert (barrier and not barrier[0]["ok"]) or doc["stopped_by_signal"]
    assert "rank 1/2 MISSING" in text


def test_rank_that_never_arrives_is_named_within_the_timeout(late: tuple) -> None:  # type: ignore[type-arg]
    doc, text = late
    assert doc["world_size"] == 3 and doc["ok"] is False and doc["timeout_s"] == 4.0
    assert [(m["rank"], m["last_stage"]) for m in doc["missing_ranks"]] == [(2, None)]
    assert "never arrived" in doc["missing_ranks"][0]["reason"]
    assert any("rank(s) 1 arrived" in n for n in doc["notes"])
    assert "rank 2/3 MISSING: never arrived" in text


def test_without_a_launcher_checks_one_rank_and_says_how_to_launch() -> None:
    env = {k: None for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS")}
    res = CliRunner(env=env).invoke(dist, ["check", "--json", "--timeout", "10",
                                           "--alloc", "64KiB"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["launcher"] == "none" and doc["world_size"] == 1 and doc["ok"]
    assert any("torchrun --standalone --nproc-per-node N -m trainmedic dist check" in n
               for n in doc["notes"])
    text = CliRunner(env=env).invoke(dist, ["check", "--timeout", "10", "--alloc", "64KiB"])
    assert text.exit_code == 0 and text.output.startswith("trainmedic dist check: 1 rank(s)")
    assert "[" in text.output and "rank 0 all_reduce" in text.output
    assert "(measured)" in text.output


def test_help_has_examples_and_bad_usage_is_a_usage_error() -> None:
    for args in (["--help"], ["check", "--help"]):
        res = CliRunner().invoke(dist, args)
        assert res.exit_code == 0 and "Examples:" in res.output
        assert "torchrun --standalone --nproc-per-node" in res.output
    if not torch.cuda.is_available():
        res = CliRunner().invoke(dist, ["check", "--backend", "nccl"])
        assert isinstance(res.exception, ConfigError)
    res = CliRunner().invoke(dist, ["check", "--timeout", "0"])
    assert res.exit_code == 2
