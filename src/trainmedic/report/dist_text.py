"""``dist check`` and ``bench collectives`` results as text lines: rank-prefixed like stas00's
torch-distributed-gpu-test (``[host:local_rank]``), every figure marked measured. Pure: returns
lines; the CLI prints them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from trainmedic.numbers import fmt_size

if TYPE_CHECKING:
    from trainmedic.bench.collectives import CollectivesResult
    from trainmedic.dist.bringup import CheckResult, CollectiveCheck, RankReport
    from trainmedic.dist.environment import EnvFinding

__all__ = ["check_lines", "collectives_lines", "rank_ranges"]

_ORDER = {"error": 0, "warning": 1, "info": 2}


def rank_ranges(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``."""
    out: list[str] = []
    rs = sorted(set(ranks))
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ",".join(out)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f} ms"



def _what(c: CollectiveCheck) -> str:
    if c.error:
        return f"FAILED: {c.error}"
    if c.name == "allocation":
        v = c.value
        touched = v["touched_bytes"] if isinstance(v, dict) else v
        extra = (f", {fmt_size(v['free_bytes'])} of {fmt_size(v['total_bytes'])} free after"
                 if isinstance(v, dict) else "")
        state = "ok" if c.ok else f"FAILED: touched {touched} of {c.expected} bytes"
        return f"{state}: {fmt_size(c.expected)} allocated and touched{extra}"
    if c.ok:
        return f"ok: {c.value}" if c.name != "barrier" else "ok"
    return f"FAILED: got {c.value}, expected {c.expected}"


def _rank_lines(r: RankReport) -> list[str]:
    tag = f"[{r.host}:{r.local_rank}]"
    device = r.device + (f" ({r.device_name})" if r.device_name else "")
    broken = any(not c.ok for c in r.checks)
    state = "is broken (or another rank did not respond)" if broken else "is OK"
    out = [f"{tag} rank {r.rank}/{r.world_size} {state}: {r.backend}, device {device}, "
           f"torch {r.torch_version}, pid {r.pid}, reached '{r.stage}', rendezvous "
           f"{_ms(r.rendezvous_s)} (measured)"]
    for c in r.checks:
        out.append(f"{tag} rank {r.rank} {c.name:<18} {_ms(c.time_s):>11} (measured)  "
                   f"{_what(c)}")
    return out


def _env_lines(per_rank: list[tuple[int, EnvFinding]], show_info: bool) -> list[str]:
    grouped: dict[tuple[str, str, str, str], list[int]] = {}
    for rank, f in per_rank:
        if f.severity == "info" and not show_info:
            continue
        grouped.setdefault((f.severity, f.code, f.message, f.fix), []).append(rank)
    out = []
    for (sev, _code, message, fix), ranks in sorted(grouped.items(),
                                                   key=lambda kv: (_ORDER[kv[0][0]], kv[0][2])):
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_ranges(ranks)}"
        out.append(f"  {sev:<7} [{who}] {message}" + (
            f"; fix: {fix}" if fix != "none needed" else ""))
    return out


def check_lines(result: CheckResult, *, verbose: bool = False) -> list[str]:
    """The bring-up report: one head line, each rank's lines, the missing ranks, the
    environment (errors and warnings; info too with ``verbose``) and the verdict."""
    launch = result.launch
    out = [f"trainmedic dist check: {launch.world_size} rank(s), launcher {launch.launcher}, "
           f"backend {result.backend}, timeout {result.timeout_s:g} s, reported by rank "
           f"{result.reporter}"]
    for r in result.ranks:
        out += _rank_lines(r)
    for m in result.missing:
        stage = f", last stage '{m.last_stage}'" if m.last_stage else ""
        out.append(f"[?] rank {m.rank}/{launch.world_size} MISSING: {m.reason}{stage}")
    env = [(r.rank, f) for r in result.ranks for f in r.environment]
    env += [(-1, f) for f in result.cross_rank]
    env_lines = _env_lines(env, verbose)
    if env_lines:
        out.append("environment (read on each rank):")
        out += [line.replace("[rank -1]", "[across ranks]") for line in env_lines]
    out += [f"note: {n}" for n in result.notes]
    out.append(_verdict(result))
    return out


def _verdict(result: CheckResult) -> str:
    if result.ok:
        return (f"verdict: PASS: all {result.launch.world_size} rank(s) met, every collective "
                f"gave the known value, every allocation was touched")
    why: list[str] = []
    if result.missing:
        why.append(f"missing rank(s) {rank_ranges(m.rank for m in result.missing)}")
    broken = [r.rank for r in result.ranks if any(not c.ok for c in r.checks)]
    if broken:
        why.append(f"failed checks on rank(s) {rank_ranges(broken)}")
    env_errors = [r.rank for r in result.ranks
                  if any(f.severity == "error" for f in r.environment)]
    if env_errors:
        why.append(f"environment errors on rank(s) {rank_ranges(env_errors)}")
    if any(f.severity == "error" for f in result.cross_rank):
        why.append("environment errors across ranks")
    if result.stopped_by_signal:
        why.append("stopped by the launcher (SIGTERM)")
    return "verdict: FAIL: " + "; ".join(why or ["see above"])


def collectives_lines(result: CollectivesResult) -> list[str]:
    """The sweep as nccl-tests prints it (size, count, time, algbw, busbw), then the flags."""
    out = [result.machine_line,
           f"bench collectives: {result.world_size} ranks on {result.hosts} host(s), backend "
           f"{result.backend}, {result.dtype}, {result.iters} timed + {result.warmup} warm-up "
           f"iterations per size; time is the mean over ranks (as nccl-tests); GB/s = 1e9 B/s",
           f"  {'op':<15}{'size':>10}{'count':>12}{'time':>12}{'algbw GB/s':>12}"
           f"{'busbw GB/s':>12}{'wrong':>7}  (measured)"]
    for row in result.rows:
        out.append(f"  {row.op:<15}{fmt_size(row.size_bytes):>10}{row.count:>12}"
                   f"{_us(row.time_s):>12}{row.algbw_gbps:>12.3f}{row.busbw_gbps:>12.3f}"
                   f"{row.wrong:>7}")
    out += _flag_lines(result)
    return out


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-2 else f"{seconds * 1e3:.2f} ms"


def _flag_lines(result: CollectivesResult) -> list[str]:
    out = ["per-rank wait inside the collectives (median per call over the all_reduce, "
           "all_gather and reduce_scatter batches; measured):"]
    for s in result.rank_stats:
        flag = "  <- SLOW RANK" if s.rank in result.slow_ranks else ""
        out.append(f"  [{s.host}:{s.local_rank}] rank {s.rank}: inside {_us(s.inside_s)}, "
                   f"outside {_us(s.outside_s)}; late in {s.late_batches}/{s.batches} "
                   f"batches{flag}")
    if result.slow_ranks:
        out.append(f"slow rank(s): {rank_ranges(result.slow_ranks)}: the others waited for "
                   f"them (rule: {result.slow_rule})")
    else:
        out.append(f"slow rank: none (rule: {result.slow_rule})")
    link: dict[str, Any] = result.slow_link
    out.append(f"slow link: {'checked' if link['checked'] else 'not checked'}: "
               f"{link['reason']}")
    out.append("verdict: " + ("FAIL: " + "; ".join(result.failures) if result.failures
                              else "PASS"))
    return out
