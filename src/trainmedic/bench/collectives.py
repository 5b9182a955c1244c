"""``bench collectives``: time, algbw and busbw of all_reduce, all_gather, reduce_scatter and
broadcast over message sizes, as nccl-tests reports them, and the rank the others wait for.

Definitions (nccl-tests, doc/PERFORMANCE.md, https://github.com/NVIDIA/nccl-tests):

- ``S`` is the size of the whole array: for all_gather and reduce_scatter that is the gathered
  (or the reduced, before scattering) array, ``n`` times each rank's part (nccl-tests'
  all_gather.cu: ``count * typesize * nranks``), not one rank's part;
- ``t`` is the time of one operation: ``iters`` back-to-back operations after a barrier, the
  elapsed time divided by ``iters``, averaged over ranks (common.cu: ``Allreduce(args,
  &deltaSec, average)``);
- ``algbw = S / t``; ``busbw = algbw * factor`` with factor ``2(n-1)/n`` for all_reduce,
  ``(n-1)/n`` for all_gather and reduce_scatter, ``1`` for broadcast.

The slow rank: where a collective's output needs every rank's input (all_reduce, all_gather,
reduce_scatter; not broadcast, whose root may leave early), the ranks that arrive first wait
inside the call for the last. Each rank times each call; a rank is *late* in a batch when every
other rank spent at least ``slow_min_wait_s`` longer inside the calls than it did, and at least
``slow_ratio`` times as long; it is flagged when late in at least half of the batches.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from trainmedic.errors import ConfigError

__all__ = ["OPS", "DEPENDENT_OPS", "busbw_factor", "bandwidths", "CollectivesConfig",
           "CollectivesResult", "Row", "RankStat", "default_sizes", "parse_sizes",
           "find_slow_ranks", "run_collectives", "SCHEMA"]

SCHEMA = "trainmedic.bench.collectives/1"
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
#: Ops whose output on every rank needs every rank's input: nobody leaves before the last.
DEPENDENT_OPS = ("all_reduce", "all_gather", "reduce_scatter")
_ELEM_BYTES = 4  # float32, nccl-tests' default type
_UNITS = {"": 1, "b": 1, "k": 2**10, "kib": 2**10, "kb": 10**3, "m": 2**20, "mib": 2**20,
          "mb": 10**6, "g": 2**30, "gib": 2**30, "gb": 10**9}


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor for ``op`` on ``n`` ranks (PERFORMANCE.md, Summary)."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    if op == "broadcast":
        return 1.0
    raise ConfigError(f"op got {op!r}; expected one of {', '.join(OPS)}")


def bandwidths(op: str, size_bytes: int, time_s: float, n: int) -> tuple[float, float]:
    """``(algbw, busbw)`` in bytes/s for ``S = size_bytes`` moved in ``time_s`` on ``n`` ranks."""
    algbw = size_bytes / time_s
    return algbw, algbw * busbw_factor(op, n)


def _parse_one(text: str) -> int:
    t = text.strip().lower()
    num = t.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = t[len(num):]
    try:
        value = float(num)
    except ValueError:
        value = -1.0
    if unit not in _UNITS or value <= 0:
        raise ConfigError(f"sizes: got {text!r}; expected a size such as 1KiB, 64K, 16MiB")
    return int(value * _UNITS[unit])


def parse_sizes(text: str) -> tuple[int, ...]:
    """``1KiB,64KiB,1MiB`` (a list) or ``1KiB..64MiB`` (each x4, as nccl-tests' ``-f 4``) or
    ``1KiB..64MiB:2`` (another factor) -> sizes in bytes."""
    if ".." in text:
        span, _, factor_text = text.partition(":")
        lo, hi = (_parse_one(p) for p in span.split("..", 1))
        try:
            factor = int(factor_text) if factor_text else 4
        except ValueError:
            factor = 0
        if factor < 2 or hi < lo:
            raise ConfigError(f"sizes: got {text!r}; expected LOW..HIGH[:FACTOR] with LOW <= "
                              f"HIGH and FACTOR >= 2, e.g. 1KiB..64MiB:4")
        out, s = [], lo
        while s <= hi:
            out.append(s)
            s *= factor
        return tuple(out)
    sizes = tuple(_parse_one(p) for p in text.split(",") if p.strip())
    if not sizes:
        raise ConfigError(f"sizes: got {text!r}; expected e.g. 1KiB,64KiB or 1KiB..64MiB")
    return sizes


def default_sizes(device_kind: str) -> tuple[int, ...]:
    """CPU: 1 KiB..64 MiB; CUDA: 1 KiB..1 GiB; each x4."""
    return parse_sizes("1KiB..64MiB" if device_kind == "cpu" else "1KiB..1GiB")


@dataclass(kw_only=True, frozen=True)
class CollectivesConfig:
    """What ``run_collectives`` sweeps."""

    ops: tuple[str, ...] = OPS
    """Collectives to time, from :data:`OPS`."""
    sizes_bytes: tuple[int, ...] | None = None
    """Message sizes S [default: :func:`default_sizes` for the device]."""
    iters: int = 10
    """Timed back-to-back operations per size."""
    warmup: int = 2
    """Untimed operations per size first."""
    backend: str = "auto"
    """``auto`` (nccl with CUDA, else gloo), ``gloo`` or ``nccl``."""
    timeout_s: float = 120.0
    """Process-group timeout: the longest any one collective may wait."""
    slow_min_wait_s: float = 1e-3
    """A late rank costs every other rank at least this much more time inside each call."""
    slow_ratio: float = 2.0
    """... and the others spend at least this many times its own time inside the calls."""

    def __post_init__(self) -> None:
        bad = [o for o in self.ops if o not in OPS]
        if bad or not self.ops:
            raise ConfigError(f"ops got {','.join(self.ops)}; expected some of {','.join(OPS)}")
        if self.sizes_bytes is not None and (not self.sizes_bytes or min(self.sizes_bytes) < 1):
            raise ConfigError(f"sizes_bytes got {self.sizes_bytes}; expected sizes >= 1 byte")
        if self.iters < 1 or self.warmup < 0:
            raise ConfigError(f"iters/warmup got {self.iters}/{self.warmup}; expected iters >= "
                              f"1 and warmup >= 0")
        if not self.timeout_s > 0 or self.slow_min_wait_s < 0 or self.slow_ratio < 1:
            raise ConfigError("timeout_s must be > 0, slow_min_wait_s >= 0, slow_ratio >= 1")


@dataclass(kw_only=True, frozen=True)
class Row:
    """One op at one size, as nccl-tests prints it."""

    op: str
    size_bytes: int
    count: int
    time_s: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int
    time_s_per_rank: tuple[float, ...]


@dataclass(kw_only=True, frozen=True)
class RankStat:
    """One rank's time inside vs outside the dependent collectives (median per call)."""

    rank: int
    host: str
    local_rank: int
    inside_s: float
    outside_s: float
    late_batches: int
    batches: int


@dataclass(kw_only=True)
class CollectivesResult:
    """The sweep, gathered on rank 0."""

    machine_line: str
    machine: dict[str, Any]
    world_size: int
    hosts: int
    backend: str
    dtype: str
    iters: int
    warmup: int
    rows: list[Row]
    rank_stats: list[RankStat]
    slow_ranks: list[int]
    slow_rule: str
    slow_link: dict[str, Any]
    failures: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["schema"] = SCHEMA
        d["basis"] = "measured"
        d["ok"] = not self.failures
        return d


def find_slow_ranks(inside: Sequence[Sequence[float]], *, min_wait_s: float, ratio: float
                    ) -> tuple[list[int], list[int]]:
    """``inside[b][r]``: rank r's median time inside one call of batch b. Returns (flagged
    ranks, batches each rank was late in)."""
    if not inside:
        return [], []
    n = len(inside[0])
    late = [0] * n
    for batch in inside:
        for s in range(n):
            others = [batch[o] for o in range(n) if o != s]
            if others and min(others) - batch[s] >= min_wait_s and min(others) >= ratio * batch[s]:
                late[s] += 1
    flagged = [r for r in range(n) if late[r] > 0 and 2 * late[r] >= len(inside)]
    return flagged, late


def _buffers(op: str, size: int, n: int, rank: int, device: Any) -> tuple[Any, Any, int, int]:
    """(input, output, elements of S, S in bytes) for one op, filled with known values."""
    import torch

    if op in ("all_gather", "reduce_scatter"):
        per = max(1, size // (_ELEM_BYTES * n))
        total = per * n
        if op == "all_gather":
            return (torch.full((per,), float(rank), device=device),
                    torch.empty(total, device=device), total, total * _ELEM_BYTES)
        return (torch.full((total,), float(rank + 1), device=device),
                torch.empty(per, device=device), total, total * _ELEM_BYTES)
    count = max(1, size // _ELEM_BYTES)
    value = float(rank + 1) if op == "all_reduce" else (7.0 if rank == 0 else -1.0)
    return torch.full((count,), value, device=device), None, count, count * _ELEM_BYTES


def _call(op: str, inp: Any, out: Any) -> None:
    import torch.distributed as dist

    # looked up on the module at each call, so a wrapper (a test's injected delay) applies
    if op == "all_reduce":
        dist.all_reduce(inp)
    elif op == "all_gather":  # *_single: torch 2.13's names; *_tensor before (now deprecated)
        (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, inp)
    elif op == "reduce_scatter":
        (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, inp)
    else:
        dist.broadcast(inp, src=0)


def _wrong(op: str, inp: Any, out: Any, n: int) -> int:
    """Elements that differ from the known result of one call on fresh buffers."""
    import torch

    if op == "all_reduce":
        return int((inp != n * (n + 1) / 2).sum())
    if op == "broadcast":
        return int((inp != 7.0).sum())
    if op == "reduce_scatter":
        return int((out != n * (n + 1) / 2).sum())
    per = out.numel() // n
    want = torch.arange(n, device=out.device, dtype=out.dtype).repeat_interleave(per)
    return int((out != want).sum())


def _batch(op: str, size: int, cfg: CollectivesConfig, n: int, rank: int, device: Any,
           before_call: Callable[[str, int], None] | None) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    inp, out, count, s_bytes = _buffers(op, size, n, rank, device)
    _call(op, inp, out)
    wrong = _wrong(op, inp, out, n)
    for _ in range(cfg.warmup):
        _call(op, inp, out)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(cfg.iters)]
    inside: list[float] = []
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(cfg.iters):
        if before_call is not None:
            before_call(op, i)
        if cuda:
            events[i][0].record()
            _call(op, inp, out)
            events[i][1].record()
        else:
            a = time.perf_counter()
            _call(op, inp, out)
            inside.append(time.perf_counter() - a)
    if cuda:
        torch.cuda.synchronize(device)
        inside = [b.elapsed_time(e) / 1e3 for b, e in events]
    total = time.perf_counter() - t0
    return {"op": op, "size": s_bytes, "count": count, "time_s": total / cfg.iters,
            "inside_s": statistics.median(inside),
            "outside_s": max(0.0, total - sum(inside)) / cfg.iters, "wrong": wrong}


def run_collectives(cfg: CollectivesConfig,
                    before_call: Callable[[str, int], None] | None = None
                    ) -> CollectivesResult | None:
    """Sweep on this rank; rank 0 returns the gathered result, the others None. Needs a
    launch of two or more ranks (torchrun or srun).

    ``before_call(op, iteration)`` runs on this rank before each timed call: a caller's own
    work between collectives (the tests put a delay there to make a rank late). It is outside
    the per-rank time *inside* each call (what the slow-rank flag reads) but inside the
    iteration time that algbw and busbw come from, as any rank's lateness is for every rank:
    with a late rank, the bandwidth a job gets is lower."""
    import socket

    import torch
    import torch.distributed as dist

    from trainmedic.dist.environment import (
        init_group,
        launch_from_env,
        open_rendezvous,
        resolve_backend,
    )

    launch = launch_from_env(os.environ)
    if launch.world_size < 2:
        raise ConfigError("bench collectives got 1 rank; expected 2 or more: run it under "
                          "torchrun --standalone --nproc-per-node 2 -m trainmedic bench "
                          "collectives (or srun)")
    backend = resolve_backend(cfg.backend)
    init_group(open_rendezvous(launch, "bench_collectives", cfg.timeout_s), backend,
               cfg.timeout_s)
    try:
        device = torch.device("cuda", launch.local_rank) if backend == "nccl" else \
            torch.device("cpu")
        sizes = cfg.sizes_bytes or default_sizes(device.type)
        mine = [_batch(op, size, cfg, launch.world_size, launch.rank, device, before_call)
                for op in cfg.ops for size in sizes]
        everyone: list[Any] = [None] * launch.world_size
        dist.all_gather_object(everyone, {"host": socket.gethostname(),
                                          "local_rank": launch.local_rank, "batches": mine})
    finally:
        dist.destroy_process_group()
    if launch.rank != 0:
        return None
    return _assemble(cfg, backend, everyone)


def _assemble(cfg: CollectivesConfig, backend: str, everyone: list[Any]) -> CollectivesResult:
    from trainmedic.bench.machine import describe_machine

    n = len(everyone)
    rows = []
    for b, first in enumerate(everyone[0]["batches"]):
        times = tuple(e["batches"][b]["time_s"] for e in everyone)
        t = sum(times) / n
        algbw, busbw = bandwidths(first["op"], first["size"], t, n)
        rows.append(Row(op=first["op"], size_bytes=first["size"], count=first["count"],
                        time_s=t, algbw_gbps=algbw / 1e9, busbw_gbps=busbw / 1e9,
                        wrong=sum(e["batches"][b]["wrong"] for e in everyone),
                        time_s_per_rank=times))
    dep = [b for b, row in enumerate(rows) if row.op in DEPENDENT_OPS]
    inside = [[e["batches"][b]["inside_s"] for e in everyone] for b in dep]
    slow, late = find_slow_ranks(inside, min_wait_s=cfg.slow_min_wait_s, ratio=cfg.slow_ratio)
    stats = [RankStat(rank=r, host=e["host"], local_rank=e["local_rank"],
                      inside_s=statistics.median([e["batches"][b]["inside_s"] for b in dep])
                      if dep else 0.0,
                      outside_s=statistics.median([e["batches"][b]["outside_s"] for b in dep])
                      if dep else 0.0,
                      late_batches=late[r] if late else 0, batches=len(dep))
             for r, e in enumerate(everyone)]
    hosts = len({e["host"] for e in everyone})
    failures = [f"{row.op} {row.size_bytes} B: {row.wrong} wrong element(s)"
                for row in rows if row.wrong]
    failures += [f"rank {r} is slow: the other ranks waited for it inside the collectives"
                 for r in slow]
    machine = describe_machine()
    return CollectivesResult(
        machine_line=machine.one_line(), machine=machine.to_dict(), world_size=n, hosts=hosts,
        backend=backend, dtype="float32", iters=cfg.iters, warmup=cfg.warmup, rows=rows,
        rank_stats=stats, slow_ranks=slow,
        slow_rule=f"the others wait >= {cfg.slow_min_wait_s * 1e3:g} ms and >= "
                  f"{cfg.slow_ratio:g}x longer per call, in at least half of the batches",
        slow_link=_slow_link(hosts, n), failures=failures)


def _slow_link(hosts: int, n: int) -> dict[str, Any]:
    what = ("a slow link would be measured as send/recv bandwidth between one rank on each "
            "pair of hosts, flagging a pair below half the median pair")
    if hosts < 2:
        return {"checked": False, "reason": f"all {n} ranks are on one host; {what}, which "
                                            f"needs ranks on two or more hosts"}
    return {"checked": False, "reason": f"{hosts} hosts, but this version does not measure "
                                        f"host pairs; {what}"}
