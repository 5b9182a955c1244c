"""NCCL failures: the watchdog's collective timeout, and NCCL / process-group errors.

Message formats: torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (``[Rank N] Watchdog caught
collective operation timeout: WorkNCCL(SeqNum=..., OpType=..., [NumelIn=..., NumelOut=...,]
Timeout(ms)=...) ran for ... milliseconds before timing out.``) and NCCL's ncclResult_t names
(nccl/src/nccl.h.in: ncclUnhandledCudaError, ncclSystemError, ncclInternalError, ...).
"""

from __future__ import annotations

import re
from typing import Any

from trainmedic.explain.incident import Cause, Incident
from trainmedic.explain.log_text import LogText
from trainmedic.explain.registry import register_rule

__all__ = ["nccl_timeout", "nccl_error"]

_TIMEOUT = re.compile(
    r"(?:\[Rank (?P<rank>\d+)\] )?Watchdog caught collective operation timeout: "
    r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)(?:, NumelIn=(?P<nin>\d+), "
    r"NumelOut=(?P<nout>\d+))?, Timeout\(ms\)=(?P<tmo>\d+)\) ran for (?P<ran>\d+) milliseconds")
_LAST_DONE = re.compile(r"last completed NCCL work: (\d+)")

_TRACE_STEP = ("find which rank did not arrive: rerun with TORCH_NCCL_TRACE_BUFFER_SIZE=2000 "
               "TORCH_NCCL_DUMP_ON_TIMEOUT=1 and read the dumps with `trainmedic dist diagnose`; "
               "the real cause is usually in another rank's log: pass every rank's log to "
               "`trainmedic explain`")


@register_rule("nccl_timeout")
def nccl_timeout(log: LogText) -> list[Incident]:
    hits: list[tuple[int, re.Match[str]]] = []
    for no, text in enumerate(log.lines, 1):
        if "Watchdog caught collective" in text:
            m = _TIMEOUT.search(text)
            if m:
                hits.append((no, m))
    if not hits:
        return []
    first_per_rank: dict[int | None, tuple[int, re.Match[str]]] = {}
    for no, m in hits:
        rank = int(m.group("rank")) if m.group("rank") else log.rank(no)
        first_per_rank.setdefault(rank, (no, m))
    # The first rank to time out: the earliest stamp when every line carries one (ranks'
    # lines interleave out of order in a shared log), else the first to appear.
    entries = list(first_per_rank.items())
    stamps = [log.stamp(no) for _, (no, _m) in entries]
    order = "first appearing line"
    first_rank, (first_no, first) = entries[0]
    if len(entries) > 1 and all(s is not None for s in stamps):
        best = 0
        for i, s in enumerate(stamps):
            if s is not None and s.before(stamps[best]):  # type: ignore[arg-type]
                best = i
        first_rank, (first_no, first) = entries[best]
        order = "earliest time stamp"
    ops = sorted({(int(m.group("seq")), m.group("op")) for _, m in hits})
    fields: dict[str, Any] = {
        "op": first.group("op"), "seq_num": int(first.group("seq")),
        "timeout_ms": int(first.group("tmo")), "ran_for_ms": int(first.group("ran")),
        "first_rank": first_rank, "first_rank_by": order,
        "ranks_timed_out": sorted(r for r in first_per_rank if r is not None),
    }
    if first.group("nin"):
        fields["numel_in"] = int(first.group("nin"))
        fields["numel_out"] = int(first.group("nout"))
    if len(ops) > 1:
        fields["collectives_seen"] = [f"{op} #{seq}" for seq, op in ops]
    done = [int(m.group(1)) for t in log.lines if (m := _LAST_DONE.search(t))]
    if done:
        fields["last_completed_seq"] = min(done)
    causes = [Cause(cause="another rank never reached this collective: it crashed, hung (data "
                          "loader, I/O, a deadlock) or was still busy (eval or checkpoint on one "
                          "rank only)", likelihood="high")]
    if len({op for _, op in ops}) > 1 or len({seq for seq, _ in ops}) > 1:
        causes.insert(0, Cause(cause=f"the ranks are in different collectives "
                                     f"({', '.join(fields['collectives_seen'][:4])}): a desync, "
                                     f"one rank took another code path", likelihood="high"))
    causes.append(Cause(cause="the network or NVLink stalled (look for NCCL WARN lines and "
                              "Xid errors on the nodes)", likelihood="low"))
    ranks = fields["ranks_timed_out"]
    summary = (f"{first.group('op')} #{first.group('seq')} timed out after "
               f"{first.group('tmo')} ms on {len(ranks) or 1} rank(s); first: rank "
               f"{first_rank if first_rank is not None else '?'}")
    return [Incident(
        code="nccl_timeout", summary=summary, path=log.path, line=hits[0][0],
        evidence=log.evidence([first_no] + [no for no, _ in hits], limit=3),
        fields=fields, causes=tuple(causes), tier="secondary",
        next_steps=(_TRACE_STEP, "if one rank legitimately works longer (eval, saving), raise "
                    "the timeout: init_process_group(timeout=timedelta(minutes=60))"),
        rank=first_rank, stamp=log.stamp(first_no), matched_lines=frozenset(n for n, _ in hits))]


# (pattern, kind, tier): kinds that mean "a peer went away" are consequences of a failure
# elsewhere; the others (system, CUDA, internal errors) are usually this rank's own.
_NCCL_ERRORS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"unhandled system error|ncclSystemError"), "system error", "primary"),
    (re.compile(r"unhandled cuda error|ncclUnhandledCudaError"), "CUDA error", "primary"),
    (re.compile(r"internal error|ncclInternalError"), "internal error", "primary"),
    (re.compile(r"invalid usage|ncclInvalidUsage|invalid argument|ncclInvalidArgument"),
     "invalid usage", "primary"),
    (re.compile(r"remote process exited or there was a network error|ncclRemoteError"),
     "remote process exited", "secondary"),
    (re.compile(r"NCCL communicator was aborted|[Cc]ommunicator was aborted"),
     "communicator aborted", "secondary"),
    (re.compile(r"Connection (?:closed|reset) by peer"), "connection closed by peer",
     "secondary"),
    # ProcessGroupNCCL's generic line before it takes the process down; on its own (no
    # watchdog timeout line in the log) it is the only trace of the failed operation.
    (re.compile(r"Some NCCL operations have failed or timed out"),
     "operations failed or timed out", "secondary"),
)
_NCCL_LINE = re.compile(r"NCCL (?:[Ee]rror|Error \d+)|\bnccl[A-Z]\w*Error\b|ncclRemoteError|"
                        r"communicator was aborted|ProcessGroupNCCL|gloo|c10d|DistBackendError")
_WHERE = re.compile(r"NCCL error in: ([^,\s]+)")
_VERSION = re.compile(r"NCCL version ([\d.]+(?:\+\w+)?)")


@register_rule("nccl_error")
def nccl_error(log: LogText) -> list[Incident]:
    found: list[tuple[int, str, str]] = []
    timed_out = any("Watchdog caught collective operation timeout" in t for t in log.lines)
    for no, text in enumerate(log.lines, 1):
        if not _NCCL_LINE.search(text):
            continue
        for rx, kind, tier in _NCCL_ERRORS:
            if kind == "operations failed or timed out" and timed_out:
                continue  # the nccl_timeout incident says it
            if rx.search(text):
                found.append((no, kind, tier))
                break
    if not found:
        return []
    kinds = list(dict.fromkeys(k for _, k, _ in found))
    primary = [f for f in found if f[2] == "primary"]
    head = primary[0] if primary else found[0]
    no = head[0]
    fields: dict[str, Any] = {"error": head[1], "errors_seen": kinds}
    lines_text = [log.line(n) for n, _, _ in found]
    if (w := next((m.group(1) for t in lines_text if (m := _WHERE.search(t))), None)):
        fields["raised_in"] = w
    if (v := next((m.group(1) for t in lines_text if (m := _VERSION.search(t))), None)):
        fields["nccl_version"] = v
    if any("gloo" in t for t in lines_text):
        fields["backend"] = "gloo"
    kind = head[1]
    steps: tuple[str, ...]
    if kind == "system error":
        causes = [Cause(cause="the network setup: NCCL picked the wrong interface, a firewall, "
                              "or InfiniBand/RoCE misconfigured", likelihood="high"),
                  Cause(cause="too little shared memory in a container (/dev/shm)",
                        likelihood="medium")]
        steps = ("rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and read the first "
                 "'NCCL WARN' line: it names the failing call",
                 "set NCCL_SOCKET_IFNAME to the interface the nodes share; in Docker add "
                 "--ipc=host or --shm-size=16g")
    elif kind == "CUDA error":
        causes = [Cause(cause="a CUDA error on this rank (look for a CUDA error or Xid just "
                              "before)", likelihood="high"),
                  Cause(cause="a driver / CUDA / NCCL version mismatch", likelihood="medium")]
        steps = ("rerun with NCCL_DEBUG=INFO and CUDA_LAUNCH_BLOCKING=1 to see the failing "
                 "CUDA call", "check `dmesg | grep -i xid` on the node")
    elif head[2] == "secondary":
        causes = [Cause(cause="another rank died or was killed first; this rank only lost its "
                              "peer", likelihood="high"),
                  Cause(cause="the network between the nodes dropped", likelihood="low")]
        steps = ("read the other ranks' logs for the first failure: pass them all to "
                 "`trainmedic explain`",)
    else:
        causes = [Cause(cause="an NCCL bug or a version mismatch between ranks",
                        likelihood="medium"),
                  Cause(cause="ranks called collectives with mismatched arguments",
                        likelihood="medium")]
        steps = ("rerun with NCCL_DEBUG=INFO and TORCH_DISTRIBUTED_DEBUG=DETAIL; upgrade NCCL "
                 "if the WARN line points inside it",)
    return [Incident(
        code="nccl_error", summary=f"{'gloo' if 'backend' in fields else 'NCCL'} {kind}" + (
            f" in {fields['raised_in']}" if "raised_in" in fields else ""),
        path=log.path, line=no, evidence=log.evidence([no] + [n for n, _, _ in found], 3),
        fields=fields, causes=tuple(causes), next_steps=steps, tier=head[2],  # type: ignore[arg-type]
        rank=log.rank(no), stamp=log.stamp(no), matched_lines=frozenset(n for n, _, _ in found))]
