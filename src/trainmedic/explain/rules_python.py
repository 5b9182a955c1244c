"""Python-level endings: the last traceback of a process, and torchrun's ChildFailedError.

torchrun's summary is torch/distributed/elastic/multiprocessing/errors/__init__.py's
``ChildFailedError.format_msg``: a ``Failures:`` list and a ``Root Cause (first observed
failure):`` block with ``time``, ``host``, ``rank (local_rank: N)``, ``exitcode (pid: P)``,
``error_file`` and ``traceback`` (the worker's own traceback when it used ``@record``, else a
link or ``Signal 9 (SIGKILL) received by PID ...``).
"""

from __future__ import annotations

import re
import signal
from typing import Any

from trainmedic.explain.incident import Cause, Incident
from trainmedic.explain.log_text import LogText
from trainmedic.explain.registry import register_rule
from trainmedic.explain.traceback_block import TracebackBlock, find_tracebacks, user_frame

__all__ = ["python_exception", "torchrun_child_failed", "LAUNCHER_EXCEPTIONS"]

#: Exceptions raised by the launcher about its workers: torchrun's summary, not a cause.
LAUNCHER_EXCEPTIONS = ("ChildFailedError",)


@register_rule("python_exception")
def python_exception(log: LogText) -> list[Incident]:
    blocks = [b for b in find_tracebacks(log.lines) if b.exc_type
              and not b.exc_type.endswith(LAUNCHER_EXCEPTIONS)]
    if not blocks:
        return []
    # The last traceback of each process (a rank prefix tells processes apart).
    last: dict[int | None, TracebackBlock] = {}
    for b in blocks:
        last[log.rank(b.start) if b.prefix.strip() else None] = b
    out = []
    for rank, b in last.items():
        frame = user_frame(b)
        fields: dict[str, Any] = {"exception": b.exc_type, "message": b.message,
                                  "tracebacks_in_log": len(blocks)}
        if frame is not None:
            fields["raised_at"] = frame.where()
            if frame.source:
                fields["source"] = frame.source
        assert b.exc_line is not None
        ev = [b.exc_line] + ([frame.log_line] if frame else [])
        where = f" at {fields['raised_at']}" if "raised_at" in fields else ""
        out.append(Incident(
            code="python_exception", summary=f"{b.exc_type}: {(b.message or '')[:120]}{where}",
            path=log.path, line=b.start, evidence=log.evidence(ev, 2), fields=fields,
            causes=(Cause(cause="a bug or bad input reaching "
                                f"{fields.get('raised_at', 'the innermost frame')}: read the "
                                "exception message first", likelihood="high"),),
            next_steps=(f"open {fields['raised_at']} and reproduce with the same input"
                        if "raised_at" in fields else "read the traceback's innermost frame",),
            rank=rank, stamp=log.stamp(b.start),
            matched_lines=frozenset([b.exc_line, b.start])))
    return out


_CHILD = re.compile(r"ChildFailedError")
_FAILED = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<lr>\d+) "
                     r"\(pid: (?P<pid>\d+)\)")
_ROOT = re.compile(r"Root Cause \(first observed failure\):")
_KV = re.compile(r"^\s*(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:\s?(?P<val>.*)$")
_RANK = re.compile(r"(\d+) \(local_rank: (\d+)\)")
_EXIT = re.compile(r"(-?\d+) \(pid: (\d+)\)")
_FAILURE_ENTRY = re.compile(r"^\s*\[\d+\]:\s*$")
_RULE_LINE = re.compile(r"^\s*[=-]{20,}\s*$")


def _exit_meaning(code: int) -> str:
    if code >= 0:
        return "exit code" if code else "exited 0"
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _root_block(log: LogText, at: int) -> tuple[dict[str, Any], list[int], list[str]]:
    """The key/value lines of the Root Cause entry starting after line ``at`` (1-based)."""
    values: dict[str, Any] = {}
    used: list[int] = []
    trace: list[str] = []
    in_trace = False
    for no in range(at + 1, min(len(log.lines), at + 200) + 1):
        text = log.line(no)
        if _RULE_LINE.match(text):
            break
        kv = _KV.match(text)
        if kv and not (in_trace and kv.group("key") not in ("traceback",)
                       and text.startswith("    ")):
            in_trace = kv.group("key") == "traceback"
            values[kv.group("key")] = kv.group("val").strip()
            used.append(no)
            if in_trace and kv.group("val").strip():
                trace.append(kv.group("val").strip())
        elif in_trace:
            trace.append(text)
    return values, used, trace


@register_rule("torchrun_child_failed")
def torchrun_child_failed(log: LogText) -> list[Incident]:
    child = [no for no, t in enumerate(log.lines, 1) if _CHILD.search(t)]
    failed = [(no, m) for no, t in enumerate(log.lines, 1) if (m := _FAILED.search(t))]
    if not child and not failed:
        return []
    fields: dict[str, Any] = {}
    ev: list[int] = []
    roots = [no for no, t in enumerate(log.lines, 1) if _ROOT.search(t)]
    if roots:
        values, used, trace = _root_block(log, roots[0])
        ev += [roots[0]] + used[:3]
        if (m := _RANK.search(values.get("rank", ""))):
            fields.update(failed_rank=int(m.group(1)), local_rank=int(m.group(2)))
        if (m := _EXIT.search(values.get("exitcode", ""))):
            fields.update(exitcode=int(m.group(1)), pid=int(m.group(2)))
        for key in ("host", "time", "error_file"):
            if values.get(key) and values[key] != "<N/A>":
                fields[key] = values[key]
        text = [t.strip() for t in trace if t.strip()]
        if text and not text[0].startswith("To enable traceback"):
            fields["traceback"] = text[0] if len(text) == 1 else None
            # The worker's traceback, indented two spaces under "traceback :".
            blocks = find_tracebacks([trace[0].strip()] + [t[2:] if t.startswith("  ") else t
                                                           for t in trace[1:]])
            if blocks and blocks[-1].exc_type:
                frame = user_frame(blocks[-1])
                fields["exception"] = f"{blocks[-1].exc_type}: {blocks[-1].message or ''}"
                if frame:
                    fields["last_frame"] = frame.where()
            fields = {k: v for k, v in fields.items() if v is not None}
    elif failed:
        m = failed[0][1]
        fields.update(local_rank=int(m.group("lr")), exitcode=int(m.group("code")),
                      pid=int(m.group("pid")))
    if failed:
        ev.append(failed[0][0])
        fields["failed_local_ranks"] = sorted({int(m.group("lr")) for _, m in failed})
    ev += child[:1]
    code = fields.get("exitcode")
    if code is not None:
        fields["exit_meaning"] = _exit_meaning(int(code))
    if code == -9:
        causes = [Cause(cause="the worker was SIGKILLed: the host's OOM killer most often, "
                              "else a manual or scheduler kill", likelihood="high")]
    elif code == -6:
        causes = [Cause(cause="the worker aborted (SIGABRT): NCCL's watchdog takes the process "
                              "down after a collective timeout or error, or a C++ exception",
                        likelihood="high")]
    elif code == -11:
        causes = [Cause(cause="the worker segfaulted (a native extension, a data-loader worker "
                              "or a driver problem)", likelihood="high")]
    elif code == -15:
        causes = [Cause(cause="the worker was terminated (SIGTERM): by torchrun after another "
                              "worker failed, or by the scheduler", likelihood="high")]
    else:
        causes = [Cause(cause="a Python exception in that worker: its traceback is earlier in "
                              "this log or in that rank's own output", likelihood="high")]
    who = (f"rank {fields['failed_rank']}" if "failed_rank" in fields
           else f"local_rank {fields.get('local_rank', '?')}")
    host = f" on {fields['host']}" if "host" in fields else ""
    summary = (f"torchrun: first failure {who}{host}, exitcode {code if code is not None else '?'}"
               + (f" ({fields['exit_meaning']})" if code is not None and code < 0 else ""))
    first = min(ev) if ev else (child[0] if child else failed[0][0])
    return [Incident(
        code="torchrun_child_failed", summary=summary, path=log.path, line=first,
        evidence=log.evidence(ev, 4), fields=fields, causes=tuple(causes), tier="secondary",
        next_steps=(f"read {who}'s own traceback (earlier in this log, or rerun with "
                    "`torchrun --tee 3` / `--log-dir DIR --redirects 3` to keep each rank's "
                    "output); decorate main() with torch.distributed.elastic.multiprocessing."
                    "errors.record so the traceback lands in the summary",),
        rank=fields.get("failed_rank"), stamp=log.stamp(first),
        matched_lines=frozenset(ev + child + [n for n, _ in failed]))]
