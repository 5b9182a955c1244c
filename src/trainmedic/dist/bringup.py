"""The rank bring-up check (``trainmedic dist check``): every rank can meet, talk and allocate.

After stas00's torch-distributed-gpu-test.py (ml-engineering, debug/): each rank reports its
host, local rank, device, world size and backend; barrier, all_reduce, all_gather and broadcast
are each checked against values known in advance (all_reduce of rank+1 sums to n(n+1)/2) and
timed; each rank allocates and touches a tensor on its device. Added here: the environment
judged (:mod:`trainmedic.dist.environment`), and a check that never hangs.

Never hanging, with torch's own parts only:

1. Arrival through the TCPStore the launcher gives (torchrun's agent store; under srun rank 0
   serves one at MASTER_ADDR:MASTER_PORT): each rank sets an arrival key; rank 0 waits for them
   up to ``timeout_s`` and names the ranks whose key never came. Nothing else starts until all
   arrived (rank 0 sets ``go``), so no rank blocks in ``init_process_group`` for a missing peer.
2. Each rank sets a stage key before each step, so a rank that dies later is named with the
   step it reached. ``monitored_barrier`` (gloo; a gloo side group under NCCL) names the ranks
   that do not answer; the process group's timeout bounds every collective.
3. torchrun stops the other workers with SIGTERM as soon as one exits with an error (measured
   here, torch 2.13: ~0.1 s after a worker is killed). A thread waits for SIGTERM with
   ``sigtimedwait`` (SIGTERM is blocked in every other thread, so it is delivered to none of
   them), and the report is emitted from there even while the main thread is inside a C++
   collective, where a Python signal handler would not run until that call returned.
4. Per-rank results go to rank 0 through the store, not a collective: after a failed
   collective the process group cannot be trusted, the store still can.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from typing import Any

from trainmedic.dist.environment import (
    DeviceClaim,
    EnvFinding,
    Launch,
    Rendezvous,
    check_environment,
    init_group,
    launch_from_env,
    open_rendezvous,
    read_host_facts,
    resolve_backend,
    shared_devices,
)
from trainmedic.errors import ConfigError

__all__ = ["CheckConfig", "CheckResult", "RankReport", "CollectiveCheck", "MissingRank",
           "run_check", "TerminationGuard", "SCHEMA"]

logger = logging.getLogger(__name__)

SCHEMA = "trainmedic.dist.check/1"
_CPU_ALLOC_BYTES = 64 * 2**20
_GPU_ALLOC_BYTES = 2**30  # as torch-distributed-gpu-test's spirit: a real chunk of the device


@dataclass(kw_only=True, frozen=True)
class CheckConfig:
    """What ``run_check`` does."""

    backend: str = "auto"
    """``auto`` (nccl when CUDA is available, else gloo), ``gloo`` or ``nccl``."""
    timeout_s: float = 60.0
    """Longest wait for a rank at any one step; a rank later than this is named missing."""
    alloc_bytes: int | None = None
    """Bytes each rank allocates and touches [default: 1 GiB on CUDA, 64 MiB on CPU]."""
    env: Mapping[str, str] | None = None
    """The environment to judge and launch from [default: ``os.environ``]."""

    def __post_init__(self) -> None:
        if self.backend not in ("auto", "gloo", "nccl"):
            raise ConfigError(f"backend got {self.backend!r}; expected auto, gloo or nccl")
        if not self.timeout_s > 0:
            raise ConfigError(f"timeout_s got {self.timeout_s}; expected seconds > 0")
        if self.alloc_bytes is not None and self.alloc_bytes < 0:
            raise ConfigError(f"alloc_bytes got {self.alloc_bytes}; expected >= 0")


@dataclass(kw_only=True)
class CollectiveCheck:
    """One collective (or the allocation) on one rank: its value against the known one."""

    name: str
    ok: bool
    time_s: float | None = None
    value: Any = None
    expected: Any = None
    error: str | None = None


@dataclass(kw_only=True)
class RankReport:
    """What one rank found; rank 0 gathers these."""

    rank: int
    host: str
    local_rank: int
    pid: int
    world_size: int
    backend: str
    device: str
    device_name: str | None = None
    device_id: str | None = None
    visible_devices: str | None = None
    torch_version: str = ""
    stage: str = "start"
    rendezvous_s: float | None = None
    checks: list[CollectiveCheck] = field(default_factory=list)
    environment: list[EnvFinding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks) and not any(
            f.severity == "error" for f in self.environment)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RankReport:
        d = {k: v for k, v in d.items() if k != "ok"}
        d["checks"] = [CollectiveCheck(**c) for c in d.get("checks", [])]
        d["environment"] = [EnvFinding(**f) for f in d.get("environment", [])]
        return cls(**d)


@dataclass(kw_only=True, frozen=True)
class MissingRank:
    """A rank whose result never reached rank 0."""

    rank: int
    last_stage: str | None
    reason: str


@dataclass(kw_only=True)
class CheckResult:
    """The whole check as rank 0 (or a rank on its own) saw it."""

    launch: Launch
    backend: str
    timeout_s: float
    reporter: int
    ranks: list[RankReport]
    missing: list[MissingRank] = field(default_factory=list)
    cross_rank: list[EnvFinding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stopped_by_signal: bool = False
    verdict_code: int | None = None
    """On a rank other than the reporter: the exit code rank 0 posted (None: none came)."""

    @property
    def ok(self) -> bool:
        if self.verdict_code is not None:
            return self.verdict_code == 0
        return (not self.missing and not self.stopped_by_signal and
                len(self.ranks) == self.launch.world_size and all(r.ok for r in self.ranks)
                and not any(f.severity == "error" for f in self.cross_rank))

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "ok": self.ok, "launcher": self.launch.launcher,
                "world_size": self.launch.world_size, "backend": self.backend,
                "timeout_s": self.timeout_s, "reporter_rank": self.reporter,
                "stopped_by_signal": self.stopped_by_signal,
                "ranks": [r.to_dict() for r in sorted(self.ranks, key=lambda r: r.rank)],
                "missing_ranks": [asdict(m) for m in self.missing],
                "cross_rank": [f.to_dict() for f in self.cross_rank],
                "notes": list(self.notes), "basis": "measured"}


class TerminationGuard:
    """Run ``on_term`` in a thread of its own when SIGTERM arrives, then exit the process.

    SIGTERM is blocked in the calling (main) thread, so threads created afterwards (gloo's,
    torch's) inherit the block, and one thread takes it with ``sigtimedwait``. Only used under a
    launcher and from the main thread; a no-op otherwise.
    """

    def __init__(self, on_term: Callable[[], None], *, active: bool) -> None:
        self.on_term = on_term
        self.active = active and threading.current_thread() is threading.main_thread()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._old_mask: set[Any] = set()

    def __enter__(self) -> TerminationGuard:
        if self.active:
            self._old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            self._thread = threading.Thread(target=self._wait, name="trainmedic-sigterm",
                                            daemon=True)
            self._thread.start()
        return self

    def _wait(self) -> None:
        while not self._stop.is_set():
            if signal.sigtimedwait({signal.SIGTERM}, 0.2) is None:
                continue
            try:
                self.on_term()
            finally:
                os._exit(1)  # the main thread may be inside a collective: it cannot unwind

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            signal.pthread_sigmask(signal.SIG_SETMASK, self._old_mask)


# -- the checks on one rank --------------------------------------------------------------------

def _timed(name: str, device: Any, fn: Callable[[], tuple[Any, Any]]) -> CollectiveCheck:
    import torch

    t = time.perf_counter()
    value, expected = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - t
    return CollectiveCheck(name=name, ok=value == expected, time_s=elapsed, value=value,
                           expected=expected)


def _collectives(launch: Launch, backend: str, device: Any, timeout_s: float
                 ) -> Iterable[tuple[str, Callable[[], tuple[Any, Any]]]]:
    import torch
    import torch.distributed as dist

    n, rank = launch.world_size, launch.rank
    watch = dist.new_group(backend="gloo") if backend != "gloo" else None

    def barrier() -> tuple[Any, Any]:
        # gloo's monitored_barrier names every rank that does not answer in time
        dist.monitored_barrier(group=watch, timeout=timedelta(seconds=timeout_s),
                               wait_all_ranks=True)
        if watch is not None:
            dist.barrier()
        return "passed", "passed"

    def all_reduce() -> tuple[Any, Any]:
        t = torch.full((4,), float(rank + 1), device=device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return sorted(set(t.tolist())), [n * (n + 1) / 2]

    def all_gather() -> tuple[Any, Any]:
        out = [torch.empty(4, device=device) for _ in range(n)]
        dist.all_gather(out, torch.full((4,), float(rank), device=device))
        return [sorted(set(o.tolist())) for o in out], [[float(r)] for r in range(n)]

    def broadcast() -> tuple[Any, Any]:
        t = torch.full((4,), 1000.0 + n if rank == 0 else -1.0, device=device)
        dist.broadcast(t, src=0)
        return sorted(set(t.tolist())), [1000.0 + n]

    return [("barrier", barrier), ("all_reduce", all_reduce), ("all_gather", all_gather),
            ("broadcast", broadcast)]


def _allocate(device: Any, nbytes: int) -> CollectiveCheck:
    import torch

    t = time.perf_counter()
    try:
        x = torch.empty(nbytes, dtype=torch.uint8, device=device)
        x.fill_(1)
        touched = int(x.sum(dtype=torch.int64).item())
        del x
    except RuntimeError as exc:  # CUDA out of memory, a bad device
        return CollectiveCheck(name="allocation", ok=False, expected=nbytes,
                               error=str(exc).splitlines()[0])
    elapsed = time.perf_counter() - t
    value: Any = touched
    if device.type == "cuda":  # what is left on the device, as torch-distributed-gpu-test shows
        free, total = torch.cuda.mem_get_info(device)
        value = {"touched_bytes": touched, "free_bytes": int(free), "total_bytes": int(total)}
    return CollectiveCheck(name="allocation", ok=touched == nbytes, time_s=elapsed,
                           value=value, expected=nbytes)


def _device(launch: Launch, backend: str, env: Mapping[str, str], me: RankReport) -> Any:
    import torch

    if backend != "nccl":
        return torch.device("cpu")
    dev = torch.device("cuda", launch.local_rank)
    props = torch.cuda.get_device_properties(dev)
    me.device, me.device_name = str(dev), props.name
    me.device_id = str(getattr(props, "uuid", "")) or None
    me.visible_devices = env.get("CUDA_VISIBLE_DEVICES")
    return dev


def _enter(rv: Rendezvous, me: RankReport, stage: str) -> None:
    """Mark this rank at ``stage``, here and in the store (rank 0 names a dead rank by it)."""
    me.stage = stage
    rv.stage(me.rank, stage)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _run_rank(me: RankReport, rv: Rendezvous, config: CheckConfig, env: Mapping[str, str],
              backend: str) -> None:
    """Init, collectives, allocation on this rank; every outcome lands in ``me.checks``."""
    import torch

    launch = rv.launch
    if backend == "nccl" and launch.local_rank >= torch.cuda.device_count():
        me.checks.append(CollectiveCheck(
            name="device", ok=False, expected=f"cuda:{launch.local_rank}",
            error=f"local rank {launch.local_rank} but {torch.cuda.device_count()} visible "
                  f"GPUs (CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', 'unset')})"))
        return
    device = _device(launch, backend, env, me)
    _enter(rv, me, "init")
    try:
        init_group(rv, backend, config.timeout_s)
    except Exception as exc:  # noqa: BLE001 - torch raises several types here; all are failures
        me.checks.append(CollectiveCheck(name="init_process_group", ok=False,
                                         error=_first_line(exc)))
        return
    for name, fn in _collectives(launch, backend, device, config.timeout_s):
        _enter(rv, me, name)
        try:
            me.checks.append(_timed(name, device, fn))
        except Exception as exc:  # noqa: BLE001 - the group is broken after this: stop here
            me.checks.append(CollectiveCheck(name=name, ok=False, error=_first_line(exc)))
            return
    _enter(rv, me, "allocation")
    nbytes = config.alloc_bytes if config.alloc_bytes is not None else (
        _GPU_ALLOC_BYTES if device.type == "cuda" else _CPU_ALLOC_BYTES)
    me.checks.append(_allocate(device, nbytes))


class _Collector:
    """What rank 0 knows so far; emits exactly one report (main thread or SIGTERM thread)."""

    def __init__(self, me: RankReport, launch: Launch, backend: str, config: CheckConfig,
                 emit: Callable[[CheckResult], None]) -> None:
        self.me, self.launch, self.backend, self.config, self.emit = (
            me, launch, backend, config, emit)
        self.reports: dict[int, RankReport] = {}
        self.arrived: set[int] = set()
        self.rv: Rendezvous | None = None
        self.lock = threading.Lock()
        self.emitted = False

    def result(self, missing_reason: str, stages: Mapping[int, str | None], *,
               arrival_phase: bool = False) -> CheckResult:
        """What is known now. ``stages``: each rank's last stage (``arrived`` when only its
        arrival key is set, None when not even that); ``arrival_phase``: the check stopped
        while waiting for arrivals, so the ranks that arrived are not missing."""
        reports = {**self.reports, self.me.rank: self.me}
        missing, waited = [], []
        for r in range(self.launch.world_size):
            stage = stages.get(r)
            if r in reports:
                continue
            if stage is None:
                missing.append(MissingRank(rank=r, last_stage=None, reason=(
                    f"never arrived: no arrival in the rendezvous store within "
                    f"{self.config.timeout_s:g} s" if arrival_phase else "never arrived")))
            elif arrival_phase and stage == "arrived":
                waited.append(r)
            else:
                missing.append(MissingRank(rank=r, last_stage=stage, reason=missing_reason))
        claims = [DeviceClaim(rank=r.rank, host=r.host, local_rank=r.local_rank,
                              device_id=r.device_id, visible_devices=r.visible_devices)
                  for r in reports.values()]
        notes = []
        if waited:
            notes.append(f"rank(s) {', '.join(map(str, waited))} arrived and waited; no "
                         f"collective was started without every rank")
        if self.launch.launcher == "none":
            notes.append("no launcher found (RANK/WORLD_SIZE and SLURM_PROCID unset): checked a "
                         "1-rank group in this process; to check N ranks run: torchrun "
                         "--standalone --nproc-per-node N -m trainmedic dist check")
        return CheckResult(launch=self.launch, backend=self.backend,
                           timeout_s=self.config.timeout_s, reporter=self.me.rank,
                           ranks=sorted(reports.values(), key=lambda r: r.rank),
                           missing=missing, cross_rank=shared_devices(claims), notes=notes)

    def stages(self, store: Any | None = None) -> dict[int, str | None]:
        """Each rank's last stage key; ``arrived`` for a rank with only its arrival key."""
        out: dict[int, str | None] = {}
        if self.rv is None:
            return out
        for r in range(self.launch.world_size):
            try:
                out[r] = self.rv.read(f"stage/{r}", store) or (
                    "arrived" if self.rv.read(f"arrived/{r}", store) is not None else None)
            except Exception:  # noqa: BLE001 - the store may be gone during a teardown
                out[r] = None
        return out

    def emit_once(self, result: CheckResult, *, wait_s: float = 0.0) -> bool:
        acquired = self.lock.acquire(timeout=wait_s) if wait_s else self.lock.acquire()
        if not acquired:
            return False
        try:
            if self.emitted:
                return False
            self.emitted = True
            self.emit(result)
            return True
        finally:
            self.lock.release()

    def on_sigterm(self) -> None:
        """The launcher is stopping this rank (another rank failed): say what is known."""
        store = None
        try:
            store = self.rv.second_client() if self.rv is not None else None
        except Exception:  # noqa: BLE001 - report without the stages rather than not at all
            logger.debug("no second store client during SIGTERM", exc_info=True)
        result = self.result("stopped or died before sending its result (the launcher then "
                             "stopped this rank with SIGTERM)",
                             self.stages(store) if store is not None else {})
        result.stopped_by_signal = True
        result.notes.append(f"rank {self.me.rank} received SIGTERM at stage "
                            f"'{self.me.stage}': torchrun stops every rank when one exits with "
                            f"an error; the ranks named missing are the likely cause")
        self.emit_once(result, wait_s=10.0)


def run_check(config: CheckConfig, emit: Callable[[CheckResult], None]) -> CheckResult:
    """Run the bring-up check on this rank; rank 0 hands the whole report to ``emit`` once
    (any other rank hands ``emit`` only a report of its own failure to reach the others).

    Under a launcher, a SIGTERM makes this rank emit what it knows and exit the process with
    status 1 (see the module docstring). Returns the result ``emit`` got, or this rank's own.
    """
    env = dict(os.environ if config.env is None else config.env)
    launch = launch_from_env(env)
    backend = resolve_backend(config.backend)
    import torch

    facts = read_host_facts()
    me = RankReport(rank=launch.rank, host=facts.hostname, local_rank=launch.local_rank,
                    pid=os.getpid(), world_size=launch.world_size, backend=backend,
                    device="cpu", torch_version=str(torch.__version__),
                    environment=check_environment(env, facts, backend=backend,
                                                  local_world_size=launch.local_world_size))
    col = _Collector(me, launch, backend, config, emit)
    timeout = config.timeout_s
    with TerminationGuard(col.on_sigterm, active=launch.launcher != "none"):
        try:
            return _run(col, me, launch, config, env, backend, timeout)
        finally:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def _run(col: _Collector, me: RankReport, launch: Launch, config: CheckConfig,
         env: Mapping[str, str], backend: str, timeout: float) -> CheckResult:
    t = time.perf_counter()
    try:
        rv = open_rendezvous(launch, "dist_check", timeout)
    except (OSError, RuntimeError, ConfigError) as exc:
        me.checks.append(CollectiveCheck(
            name="rendezvous", ok=False, expected=f"{launch.master_addr}:{launch.master_port}",
            error=_first_line(exc)))
        result = col.result("not reached: this rank could not reach the rendezvous", {})
        col.emit_once(result)
        return result
    me.rendezvous_s = time.perf_counter() - t
    col.rv = rv
    rv.post(f"arrived/{launch.rank}", {"host": me.host, "pid": me.pid})
    ranks = range(launch.world_size)
    if launch.rank == 0:
        missing = rv.wait((f"arrived/{r}" for r in ranks), time.monotonic() + timeout)
        col.arrived = set(ranks) - {int(m.split("/")[1]) for m in missing}
        rv.post("go", not missing)
        if missing:
            result = col.result("", {r: "arrived" for r in col.arrived}, arrival_phase=True)
            col.emit_once(result)
            rv.post("done", result.exit_code)
            return result
    elif rv.wait(["go"], time.monotonic() + 2 * timeout) or not rv.read("go"):
        # Rank 0 died or gave up (under srun nothing stops this rank): say so from here.
        gave_up = replace(col.result("rank 0 gave up before the check started", {}),
                          verdict_code=1)
        col.emit_once(gave_up)
        return gave_up
    _run_rank(me, rv, config, env, backend)
    _enter(rv, me, "done")
    rv.post(f"result/{launch.rank}", me.to_dict())
    if launch.rank != 0:
        # rank 0 reports before anyone exits (torchrun would stop it on the first exit != 0)
        rv.wait(["done"], time.monotonic() + 2 * timeout)
        verdict = rv.read("done")
        return replace(col.result("reported to rank 0", {}), missing=[],
                       verdict_code=1 if verdict is None else int(verdict))
    missing = rv.wait((f"result/{r}" for r in ranks if r != 0), time.monotonic() + timeout)
    for r in ranks:
        if r != 0 and f"result/{r}" not in missing:
            col.reports[r] = RankReport.from_dict(rv.read(f"result/{r}"))
    result = col.result(f"sent no result within {timeout:g} s", col.stages())
    col.emit_once(result)
    rv.post("done", result.exit_code)
    return result
