"""Two real gloo ranks on CPU, one slowed: each rank writes its own store, and ``diagnose``
names the slow rank and what is slow on it, with no collective added by trainmedic.

What this shows about DDP (the note in issue 3, item 5): the gradient all-reduce runs during
backward, so the fast rank waits there for the slow one and both ranks' ``step_time_s`` come
out equal step by step, whichever rank is slowed. The step time cannot name the straggler;
the work before the sync can: the data wait (``data_time_s``) and the forward
(``compute_time_s``). Three runs on the 2-core CPU host where this was written, 40 steps,
15 ms injected on rank 1: input slowed, step medians 16.9-17.1 ms on both ranks (means
within 0.7%), data wait 0.04 vs 15.2 ms; forward slowed, step medians 16.9-17.4 ms on both
(within 1%), forward 0.1 vs 15.5 ms. With BatchNorm buffers, DDP broadcasts them from rank 0
at the start of every forward, so a forward timed on the DDP wrapper includes rank 0's wait
for rank 1's slow input (16.5-17.0 ms vs 1.0-1.1 ms on rank 1; the watcher's own, on the
inner module, 0.2 ms on both): the detector must not call rank 0 a compute straggler there.
(The tests now inject 30 ms, which doubles every margin against the shared VM's jitter; the
figures above are from 15 ms.)

The ranks run through ``torch.distributed.run`` (what users launch; RANK/WORLD_SIZE from the
environment) and through ``torch.multiprocessing.spawn`` with a FileStore on tmp_path (the
rank from ``torch.distributed``). The torchrun job runs every case in one launch to pay the
start-up once. This file is also the torchrun worker script (``__main__`` at the bottom).

``compute_time_s`` is the watcher's own (the forward of the DDP model's inner module). The
BatchNorm case also records the forward timed on the DDP wrapper, under its own name, to show
what a forward timed around DDP's buffer broadcast looks like and that the detector still
names the right rank when it is handed such a series as compute_time_s.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from trainmedic.diagnose.engine import diagnose
from trainmedic.diagnose.finding import Finding
from trainmedic.run.loader import load_paths
from trainmedic.run.series import Run

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("this torch build has no gloo backend", allow_module_level=True)

pytestmark = pytest.mark.slow  # two process launches: ~15-25 s on 2 shared cores

STEPS = 40
SLOW_S = 0.03
SLOW_RANK = 1
#: The forward timed with hooks on the DDP wrapper (the BatchNorm case), by the test.
WRAPPER_FWD = "fwd_ddp_wrapper_s"
#: case -> (what is slowed on rank 1, model)
CASES: dict[str, tuple[str, str]] = {
    "input": ("input", "mlp"),
    "compute": ("compute", "mlp"),
    "none": ("none", "mlp"),
    "input_bn": ("input", "bn"),
}
#: The collectives a Python caller can issue; trainmedic must call none of them.
COLLECTIVES = (
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor",
    "all_gather_object", "all_to_all", "all_to_all_single", "barrier", "monitored_barrier",
    "broadcast", "broadcast_object_list", "gather", "gather_object", "reduce",
    "reduce_scatter", "reduce_scatter_tensor", "scatter", "scatter_object_list", "send",
    "recv", "isend", "irecv", "batch_isend_irecv",
)


# ------------------------------------------------------------------------ worker side
class _CollectiveCounter:
    """Wraps every collective in ``torch.distributed`` and counts the calls made with a
    trainmedic frame on the stack. Installed before trainmedic's watcher is imported, so a
    ``from torch.distributed import all_reduce`` in trainmedic would bind the wrapper too."""

    def __init__(self) -> None:
        import trainmedic

        self.pkg_dir = os.path.dirname(os.path.abspath(trainmedic.__file__)) + os.sep
        self.total: dict[str, int] = {}
        self.from_trainmedic: dict[str, int] = {}
        #: Calls made by the watcher's DDP comm hook: DDP's own gradient all-reduce, which the
        #: hook issues in place of DDP (to time it), not one added to the run.
        self.ddp_hook: dict[str, int] = {}
        assert "trainmedic.live.watcher" not in sys.modules, "install before the watcher"
        import torch.distributed.distributed_c10d as c10d

        for name in COLLECTIVES:
            orig = getattr(dist, name, None)
            if orig is None:
                continue
            wrapped = self._wrap(name, orig)
            setattr(dist, name, wrapped)
            if getattr(c10d, name, None) is orig:
                setattr(c10d, name, wrapped)

    def _wrap(self, name: str, orig: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.total[name] = self.total.get(name, 0) + 1
            f = sys._getframe(1)
            while f is not None:
                if f.f_code.co_name == "timed_allreduce":
                    self.ddp_hook[name] = self.ddp_hook.get(name, 0) + 1
                    break
                if os.path.abspath(f.f_code.co_filename).startswith(self.pkg_dir):
                    self.from_trainmedic[name] = self.from_trainmedic.get(name, 0) + 1
                    break
                f = f.f_back
            return orig(*args, **kwargs)
        return counted

    def self_check(self) -> bool:
        """A barrier issued from code compiled under trainmedic's folder is attributed to it
        (so a zero count below means something)."""
        before = self.from_trainmedic.get("barrier", 0)
        code = compile("dist.barrier()", os.path.join(self.pkg_dir, "probe.py"), "exec")
        exec(code, {"dist": dist})
        seen = self.from_trainmedic.get("barrier", 0) == before + 1
        self.from_trainmedic["barrier"] = before
        return seen


class _SlowForward(torch.nn.Module):
    """Stands in for a rank that computes slower (throttled or weaker hardware, longer
    samples): its forward takes SLOW_S longer. A sleep, not extra matmuls, so the test does not
    depend on how busy the shared CPU is."""

    def __init__(self, inner: torch.nn.Module, slow: bool) -> None:
        super().__init__()
        self.inner = inner
        self.slow = slow

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.slow:
            time.sleep(SLOW_S)
        return self.inner(x)


def _model(arch: str, slow_forward: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = [torch.nn.Linear(32, 64)]
    if arch == "bn":
        layers.append(torch.nn.BatchNorm1d(64))  # a buffer DDP broadcasts every forward
    layers += [torch.nn.ReLU(), torch.nn.Linear(64, 4)]
    return _SlowForward(torch.nn.Sequential(*layers), slow_forward)


def _run_case(run_dir: pathlib.Path, case: str, rank: int) -> None:
    from trainmedic.live import watch

    slowed, arch = CASES[case]
    ddp = torch.nn.parallel.DistributedDataParallel(
        _model(arch, slowed == "compute" and rank == SLOW_RANK))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)

    def loader() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(rank)
        for _ in range(STEPS):
            if slowed == "input" and rank == SLOW_RANK:
                time.sleep(SLOW_S)  # one node's slow disk
            yield torch.randn(32, 32, generator=g), torch.randint(0, 4, (32,), generator=g)

    t0: list[float] = [0.0]
    fwd: list[float] = [0.0]
    wrapper_timed = arch == "bn"
    if wrapper_timed:  # the forward timed around DDP's pre-forward work (buffer broadcast)
        ddp.register_forward_pre_hook(lambda m, a: t0.__setitem__(0, time.perf_counter()))
        ddp.register_forward_hook(
            lambda m, a, o: fwd.__setitem__(0, time.perf_counter() - t0[0]))
    with watch(ddp, opt, run_dir=run_dir) as w:
        for x, y in w.wrap_loader(loader()):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
            extra = {WRAPPER_FWD: fwd[0]} if wrapper_timed else {}
            w.step(loss, batch_size=len(x), **extra)


def _worker(rank: int, world: int, base: str, cases: list[str],
            init_method: str | None) -> None:
    torch.set_num_threads(1)  # tiny model; and two ranks share two cores
    counter = _CollectiveCounter()
    kw: dict[str, Any] = {"timeout": timedelta(seconds=60)}  # a lost rank fails, not hangs
    if init_method is not None:
        kw.update(init_method=init_method, rank=rank, world_size=world)
    dist.init_process_group("gloo", **kw)
    rank = dist.get_rank()
    try:
        for case in cases:
            _run_case(pathlib.Path(base) / case, case, rank)
        counts = dict(counter.from_trainmedic)
        dist.barrier()  # ours, from the test: must count in `total` only
        out = {"from_trainmedic": counts, "total": dict(counter.total),
               "ddp_hook": dict(counter.ddp_hook), "steps": STEPS * len(cases),
               "self_check": counter.self_check()}
        pathlib.Path(base, f"collectives.rank{rank}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()


def _spawn_entry(rank: int, world: int, base: str, cases: list[str], init_method: str) -> None:
    _worker(rank, world, base, cases, init_method)
    _leave()


# ------------------------------------------------------------------------ test side
def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _torchrun(base: pathlib.Path, cases: list[str]) -> float:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", __file__, str(base), ",".join(cases)]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and both workers
        out, _ = proc.communicate()
        raise AssertionError(f"torchrun did not finish in 180 s:\n{out[-4000:]}") from None
    assert proc.returncode == 0, out[-4000:]
    return time.perf_counter() - t


@pytest.fixture(scope="module")
def torchrun_runs(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    base = tmp_path_factory.mktemp("torchrun")
    _torchrun(base, list(CASES))
    return base


def _stragglers(run: Run) -> list[Finding]:
    return [f for f in diagnose(run).findings if f.symptom == "straggler"]


def _describe(run: Run) -> str:
    lines = []
    for m in ("step_time_s", "data_time_s", "compute_time_s"):
        meds = {r: round(1e3 * float(np.median(run.get(m, r).values[3:])), 3)  # type: ignore[union-attr]
                for r in run.ranks() if run.get(m, r) is not None}
        lines.append(f"{m} medians (ms) per rank: {meds}")
    lines += [f"{f.symptom} rank={f.rank} metric={f.metric} {f.severity}: {f.summary}"
              for f in diagnose(run).findings]
    return "\n".join(lines)


def _load(base: pathlib.Path, case: str) -> Run:
    d = base / case
    assert sorted(p.name for p in d.glob("*.sqlite")) == [
        "metrics.rank0.sqlite", "metrics.rank1.sqlite"]
    run = load_paths([str(d)])
    assert run.ranks() == [0, 1]
    for m in ("step_time_s", "data_time_s", "compute_time_s", "loss"):
        for r in (0, 1):
            s = run.get(m, r)
            assert s is not None and len(s) == STEPS, (case, m, r)
    return run


@pytest.mark.parametrize("case", list(CASES))
def test_each_rank_writes_its_own_store(torchrun_runs: pathlib.Path, case: str) -> None:
    _load(torchrun_runs, case)


@pytest.mark.parametrize("case,metric", [("input", "data_time_s"),
                                         ("compute", "compute_time_s")])
def test_ddp_equalizes_step_time_whichever_rank_is_slow(torchrun_runs: pathlib.Path,
                                                         case: str, metric: str) -> None:
    """The fast rank waits in the all-reduce: step times match while the slowed work does
    not, so step_time_s alone cannot say which rank is slow."""
    run = _load(torchrun_runs, case)
    st = [run.get("step_time_s", r).values[3:] for r in (0, 1)]  # type: ignore[union-attr]
    work = [float(np.median(run.get(metric, r).values[3:])) for r in (0, 1)]  # type: ignore[union-attr]
    assert work[1] - work[0] > 0.8 * SLOW_S, _describe(run)  # rank 1 really is slowed
    means = [float(np.mean(s)) for s in st]
    assert abs(means[1] - means[0]) < 0.05 * max(means), _describe(run)
    meds = [float(np.median(s)) for s in st]
    assert abs(meds[1] - meds[0]) < 0.25 * SLOW_S, _describe(run)
    assert min(meds) > 0.8 * SLOW_S  # both ranks' steps include the slow rank's sleep


def test_slow_input_names_the_rank_and_its_input_pipeline(torchrun_runs: pathlib.Path) -> None:
    run = _load(torchrun_runs, "input")
    found = _stragglers(run)
    assert len(found) == 1, _describe(run)
    f = found[0]
    assert (f.rank, f.metric, f.severity) == (SLOW_RANK, "data_time_s", "warning"), f
    assert "input pipeline" in f.summary
    actions = " ".join(i.action for i in f.interventions)
    assert "num_workers" in actions and "sampler" in actions, actions
    assert all("compute slower" not in c.cause for c in f.causes), f.causes


def test_slow_forward_names_the_rank_and_its_compute(torchrun_runs: pathlib.Path) -> None:
    run = _load(torchrun_runs, "compute")
    found = _stragglers(run)
    assert len(found) == 1, _describe(run)
    f = found[0]
    assert (f.rank, f.metric, f.severity) == (SLOW_RANK, "compute_time_s", "warning"), f
    causes = " ".join(c.cause for c in f.causes)
    assert "throttling" in causes and "heterogeneous hardware" in causes, causes
    assert all("input pipeline" not in c.cause for c in f.causes), f.causes


def test_equal_ranks_have_no_straggler(torchrun_runs: pathlib.Path) -> None:
    run = _load(torchrun_runs, "none")
    assert _stragglers(run) == [], _describe(run)


def _medians(run: Run, metric: str) -> list[float]:
    return [float(np.median(run.get(metric, r).values[3:])) for r in (0, 1)]  # type: ignore[union-attr]


def test_forward_broadcast_wait_is_not_a_straggler(torchrun_runs: pathlib.Path) -> None:
    """BatchNorm buffers: DDP broadcasts them from rank 0 at the start of each forward, so a
    forward timed on the DDP wrapper holds rank 0's wait for rank 1's slow input. The
    watcher times the inner module and leaves that wait out; and a compute_time_s that does
    hold it (logged by hand, or FSDP's all-gathers) still names rank 1, by its data wait."""
    run = _load(torchrun_runs, "input_bn")
    assert [(f.rank, f.metric) for f in _stragglers(run)] == [(SLOW_RANK, "data_time_s")], \
        _describe(run)
    own = _medians(run, "compute_time_s")
    assert abs(own[0] - own[1]) < 0.2 * SLOW_S, _describe(run)
    wrapped = _medians(run, WRAPPER_FWD)
    assert wrapped[0] - wrapped[1] > 0.5 * SLOW_S, wrapped  # rank 0 waits inside its forward
    for r in (0, 1):
        run.series[("compute_time_s", r)] = run.series[(WRAPPER_FWD, r)]
    found = _stragglers(run)
    assert [(f.rank, f.metric) for f in found] == [(SLOW_RANK, "data_time_s")], _describe(run)
    assert any("collective inside the timed forward" in e.note for e in found[0].evidence)


def test_trainmedic_issues_no_collective(torchrun_runs: pathlib.Path) -> None:
    for r in (0, 1):
        got = json.loads((torchrun_runs / f"collectives.rank{r}.json").read_text())
        assert got["self_check"], "the counter did not attribute a call from trainmedic"
        assert got["total"].get("barrier", 0) >= 1, got  # the wrappers were live
        assert got["from_trainmedic"] == {}, got
        # the watcher's comm hook issues DDP's gradient all-reduce instead of DDP: one per
        # bucket per step (this model's gradients fit one 25 MB bucket), nothing more
        assert got["ddp_hook"] == {"all_reduce": got["steps"]}, got


def test_ddp_allreduce_time_is_recorded_and_the_waiting_rank_waits_longer(
        torchrun_runs: pathlib.Path) -> None:
    run = _load(torchrun_runs, "compute")
    fast, slow = (run.get("comm_time_s", r) for r in (1 - SLOW_RANK, SLOW_RANK))
    assert fast is not None and slow is not None and len(fast) == len(slow) == STEPS
    # rank 1's forward is SLOW_S longer: rank 0's all-reduce waits that long for it
    gap = float(np.median(fast.values[5:]) - np.median(slow.values[5:]))
    assert 0.5 * SLOW_S < gap < 2 * SLOW_S, gap


def test_spawned_ranks_with_a_file_store(tmp_path: pathlib.Path) -> None:
    """mp.spawn, FileStore init, no RANK in the environment: the watcher takes the rank from
    torch.distributed."""
    import torch.multiprocessing as mp

    init = f"file://{tmp_path / 'filestore'}"
    base = tmp_path / "runs"
    base.mkdir()
    mp.spawn(_spawn_entry, args=(2, str(base), ["compute"], init), nprocs=2, join=True)
    run = _load(base, "compute")
    found = _stragglers(run)
    assert [(f.rank, f.metric) for f in found] == [(SLOW_RANK, "compute_time_s")], \
        _describe(run)
    got = json.loads((base / "collectives.rank1.json").read_text())
    assert got["from_trainmedic"] == {} and got["self_check"], got


def _leave() -> None:
    """Done and torn down: leave without the interpreter's exit-time destructors, where gloo's
    threads once aborted a rank ("terminate called without an active exception") on a 2-core
    CI machine (see tests/checkpoint/sharded_worker.py)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":  # the torchrun worker: BASE CASES
    _worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), sys.argv[1],
            sys.argv[2].split(","), None)
    _leave()
