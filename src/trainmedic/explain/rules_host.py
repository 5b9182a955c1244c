"""Host-side endings: the kernel's (or a cgroup's) OOM killer and SIGKILL, and SLURM's
cancellations.

SLURM's lines are slurmstepd's (src/slurmd/slurmstepd/req.c: ``*** JOB|STEP <id> ON <node>
CANCELLED AT <time> DUE TO TIME LIMIT|PREEMPTION|NODE FAILURE[, SEE SLURMCTLD LOG FOR DETAILS]
***``; older releases put ``on <node>`` after the reason) and srun/salloc's ``error: Node
failure on <node>``. The kernel's is mm/oom_kill.c's ``Out of memory: Killed process <pid>
(<name>) total-vm:...kB, anon-rss:...kB``.
"""

from __future__ import annotations

import re
from typing import Any

from trainmedic.explain.incident import Cause, Incident
from trainmedic.explain.log_text import LogText
from trainmedic.explain.registry import register_rule

__all__ = ["host_oom_kill", "slurm_timeout", "slurm_preempted", "slurm_node_fail"]

_KERNEL = re.compile(r"Out of memory: Kill(?:ed)? process (?P<pid>\d+) \((?P<name>[^)]*)\)|"
                     r"invoked oom-killer|oom-kill:constraint=|Memory cgroup out of memory")
_RSS = re.compile(r"anon-rss:\s*(\d+)\s*kB")
_CGROUP = re.compile(r"Detected (?P<n>\d+) oom[-_]kill event|Exceeded (?:job|step) memory limit|"
                     r"exceeded memory limit \((?P<used>\d+) > (?P<limit>\d+)\)|"
                     r"task \d+: Out Of Memory|OOMKilled")
_SIGNAL = re.compile(r"exitcode\s*:?\s*-9\b|Signal 9 \(SIGKILL\)|exit(?:ed with)? (?:code|status)"
                     r" 137\b|signal 9: SIGKILL|is killed by signal: Killed|^\s*Killed\s*$|"
                     r"received signal SIGKILL|Killed: 9\b")
_LOCAL_RANK = re.compile(r"local_rank: (\d+)")
_PID = re.compile(r"pid[:=\s(]+(\d+)|PID (\d+)")


@register_rule("host_oom_kill")
def host_oom_kill(log: LogText) -> list[Incident]:
    kernel: list[int] = []
    cgroup: list[int] = []
    signal: list[int] = []
    fields: dict[str, Any] = {}
    for no, text in enumerate(log.lines, 1):
        if (m := _KERNEL.search(text)):
            kernel.append(no)
            if m.group("pid") and "pid" not in fields:
                fields.update(pid=int(m.group("pid")), process=m.group("name"))
            if (r := _RSS.search(text)) and "anon_rss_kb" not in fields:
                fields["anon_rss_kb"] = int(r.group(1))
        elif (m := _CGROUP.search(text)):
            cgroup.append(no)
            if m.group("used") and "limit_kb" not in fields:
                fields.update(used_kb=int(m.group("used")), limit_kb=int(m.group("limit")))
        elif _SIGNAL.search(text):
            signal.append(no)
            if "pid" not in fields and (p := _PID.search(text)):
                fields["pid"] = int(p.group(1) or p.group(2))
            if "local_rank" not in fields and (lr := _LOCAL_RANK.search(text)):
                fields["local_rank"] = int(lr.group(1))
    if not (kernel or cgroup or signal):
        return []
    every = sorted(kernel + cgroup + signal)
    if kernel:
        fields["seen"] = "kernel OOM killer"
        causes = [Cause(cause="the host ran out of memory (RAM) and the kernel killed the "
                              "largest process", likelihood="high")]
    elif cgroup:
        fields["seen"] = "job memory limit (cgroup)"
        causes = [Cause(cause="the job exceeded its memory limit (SLURM --mem / container "
                              "limit) and its cgroup killed it", likelihood="high")]
    else:
        fields["seen"] = "SIGKILL only (exit -9 / 137)"
        causes = [Cause(cause="the kernel's OOM killer (host RAM ran out): check `dmesg -T | "
                              "grep -i 'killed process'` on the node", likelihood="medium"),
                  Cause(cause="a cgroup / scheduler memory limit", likelihood="medium"),
                  Cause(cause="a manual kill (kill -9) or the scheduler killing the job for "
                              "another reason", likelihood="low")]
    causes.append(Cause(cause="host memory grows with DataLoader workers (each copies the "
                              "dataset), pinned memory, or a CPU-side leak", likelihood="medium"))
    return [Incident(
        code="host_oom_kill", summary=f"process killed: {fields['seen']}", path=log.path,
        line=every[0], evidence=log.evidence((kernel or cgroup or signal)[:2] + every, 3),
        fields=fields, causes=tuple(causes),
        next_steps=("confirm on the node: `dmesg -T | grep -iE 'killed process|oom'` (or "
                    "`sacct -j JOB -o JobID,State,MaxRSS,ReqMem`)",
                    "then cut host memory: fewer DataLoader workers, a memory-mapped dataset, "
                    "or ask for more (--mem)"),
        rank=log.rank(every[0]), stamp=log.stamp(every[0]), matched_lines=frozenset(every))]


_SLURM = re.compile(r"\*\*\* (?P<what>JOB|STEP) (?P<id>[\w.]+)(?: ON (?P<node>\S+))? CANCELLED AT "
                    r"(?P<at>\S+) DUE TO (?P<why>TIME LIMIT|PREEMPTION|NODE FAILURE)"
                    r"(?:.*? on (?P<node2>\S+))?")
_NODE_FAIL = re.compile(r"(?:srun|salloc|sbatch): error: Node failure on (?P<node>\S+)")
_CODE = {"TIME LIMIT": "slurm_timeout", "PREEMPTION": "slurm_preempted",
         "NODE FAILURE": "slurm_node_fail"}
_ADVICE: dict[str, tuple[tuple[Cause, ...], tuple[str, ...]]] = {
    "slurm_timeout": (
        (Cause(cause="the job needed more time than its --time limit", likelihood="high"),
         Cause(cause="the job hung (a collective, the data loader) and sat until the limit: "
                     "check the last progress line before the cancellation",
               likelihood="medium")),
        ("resume from the last checkpoint with a longer --time, or checkpoint before the "
         "limit: #SBATCH --signal=USR1@300 with a handler that saves and requeues",)),
    "slurm_preempted": (
        (Cause(cause="a higher-priority job took the nodes (preemptible partition or QOS)",
               likelihood="high"),),
        ("submit with --requeue and save a checkpoint on SIGTERM, so a preempted job resumes "
         "where it stopped; or use a non-preemptible partition",)),
    "slurm_node_fail": (
        (Cause(cause="a node crashed, lost its network or was drained by the admins",
               likelihood="high"),),
        ("resubmit excluding the node (--exclude=NODE) and resume from the last checkpoint; "
         "`sinfo -R` shows why the node is down",)),
}


def _slurm_incidents(log: LogText, wanted: str) -> list[Incident]:
    lines: list[int] = []
    fields: dict[str, Any] = {}
    for no, text in enumerate(log.lines, 1):
        if "CANCELLED AT" in text and (m := _SLURM.search(text)):
            if _CODE[m.group("why")] != wanted:
                continue
            lines.append(no)
            if not fields:
                fields = {"job": m.group("id"), "scope": m.group("what").lower(),
                          "node": m.group("node") or m.group("node2"), "at": m.group("at"),
                          "reason": m.group("why")}
        elif wanted == "slurm_node_fail" and (m := _NODE_FAIL.search(text)):
            lines.append(no)
            fields = fields or {"node": m.group("node"), "reason": "NODE FAILURE"}
    if not lines:
        return []
    causes, steps = _ADVICE[wanted]
    where = f" on {fields['node']}" if fields.get("node") else ""
    when = f" at {fields['at']}" if fields.get("at") else ""
    return [Incident(
        code=wanted, summary=f"SLURM cancelled the job{where}{when}: {fields['reason'].lower()}",
        path=log.path, line=lines[0], evidence=log.evidence(lines, 2),
        fields={k: v for k, v in fields.items() if v}, causes=causes, next_steps=steps,
        rank=log.rank(lines[0]), stamp=log.stamp(lines[0]), matched_lines=frozenset(lines))]


@register_rule("slurm_timeout")
def slurm_timeout(log: LogText) -> list[Incident]:
    return _slurm_incidents(log, "slurm_timeout")


@register_rule("slurm_preempted")
def slurm_preempted(log: LogText) -> list[Incident]:
    return _slurm_incidents(log, "slurm_preempted")


@register_rule("slurm_node_fail")
def slurm_node_fail(log: LogText) -> list[Incident]:
    return _slurm_incidents(log, "slurm_node_fail")
