"""GPU failures: device-side asserts, illegal memory accesses, Xid / ECC events, CUDA OOM.

The CUDA OOM is read by the same parser as ``trainmedic memory oom``
(``trainmedic.memory.oom_message.parse_oom``) and explained by ``memory.oom.explain_oom``.
"""

from __future__ import annotations

import re
from typing import Any

from trainmedic.explain.incident import Cause, Incident
from trainmedic.explain.log_text import LogText
from trainmedic.explain.registry import register_rule
from trainmedic.explain.xid_catalog import XID_HARDWARE, xid_meaning

__all__ = ["cuda_device_assert", "cuda_illegal_access", "gpu_xid", "cuda_oom"]

# ATen's CUDA_KERNEL_ASSERT prints "<file>.cu:<line>: <kernel>: block: [..], thread: [..]
# Assertion `<cond>` failed." (c10/cuda/CUDAException / __assert_fail on the device).
_ASSERT = re.compile(r"(?P<where>[^\s:]+\.cu(?:h)?:\d+)?:?\s*(?P<kernel>[^:]*?):?\s*block: "
                     r"\[[\d,]+\], thread: \[[\d,]+\] Assertion `(?P<cond>.+?)` failed")
_TRIGGERED = re.compile(r"device-side assert(?:ion)? triggered")
_LAUNCH_BLOCKING = "CUDA_LAUNCH_BLOCKING=1"


@register_rule("cuda_device_assert")
def cuda_device_assert(log: LogText) -> list[Incident]:
    asserts: list[tuple[int, re.Match[str]]] = []
    triggered: list[int] = []
    for no, text in enumerate(log.lines, 1):
        if "Assertion `" in text and "block: [" in text:
            m = _ASSERT.search(text)
            if m:
                asserts.append((no, m))
        elif _TRIGGERED.search(text):
            triggered.append(no)
    if not asserts and not triggered:
        return []
    fields: dict[str, Any] = {}
    first_no = min([n for n, _ in asserts] + triggered)
    if asserts:
        m = asserts[0][1]
        fields["assertion"] = m.group("cond")
        fields["kernel"] = m.group("kernel").strip() or None
        fields["kernel_source"] = m.group("where")
        fields["failed_threads"] = len(asserts)
        kinds = sorted({a.group("cond") for _, a in asserts})
        if len(kinds) > 1:
            fields["assertions_seen"] = kinds
    cond = str(fields.get("assertion", ""))
    if "n_classes" in cond or "t >= 0" in cond or "target" in cond.lower():
        causes = [Cause(cause="a target label outside [0, num_classes): an ignore label such "
                              "as 255 or -1 not passed as ignore_index, 1-based labels, or "
                              "num_classes set too small", likelihood="high")]
    elif "index" in cond.lower() or "Index" in cond or "out of bounds" in cond:
        causes = [Cause(cause="an index past the end of a tensor: a token id >= the embedding's "
                              "vocabulary size, or a gather/index_select index out of range",
                        likelihood="high")]
    else:
        causes = [Cause(cause="an input value outside what the kernel accepts (labels, "
                              "indices, probabilities outside [0, 1])", likelihood="high")]
    causes.append(Cause(cause="an earlier asynchronous error reported at a later CUDA call: "
                              "the traceback's line may not be the failing op",
                        likelihood="medium"))
    what = f"`{cond}`" if cond else "a device-side assert"
    return [Incident(
        code="cuda_device_assert", summary=f"CUDA kernel assertion {what} failed"
        + (f" in {fields['kernel']}" if fields.get("kernel") else ""),
        path=log.path, line=first_no,
        evidence=log.evidence([n for n, _ in asserts[:1]] + triggered[:1] + [first_no], 3),
        fields=fields, causes=tuple(causes),
        next_steps=(f"rerun with {_LAUNCH_BLOCKING} (the traceback then names the failing op) "
                    "and check the label range: assert 0 <= target.min() and target.max() < "
                    "num_classes on one batch",
                    "or run one batch on the CPU: the same bug raises a readable IndexError"),
        rank=log.rank(first_no), stamp=log.stamp(first_no),
        matched_lines=frozenset([n for n, _ in asserts] + triggered))]


_ILLEGAL = re.compile(r"an illegal memory access was encountered|cudaErrorIllegalAddress|"
                      r"CUDA_ERROR_ILLEGAL_ADDRESS|misaligned address|cudaErrorMisalignedAddress")


@register_rule("cuda_illegal_access")
def cuda_illegal_access(log: LogText) -> list[Incident]:
    hits = [no for no, t in enumerate(log.lines, 1) if _ILLEGAL.search(t)]
    if not hits:
        return []
    no = hits[0]
    m = _ILLEGAL.search(log.line(no))
    fields = {"error": m.group(0) if m else "illegal memory access", "occurrences": len(hits)}
    return [Incident(
        code="cuda_illegal_access", summary=f"CUDA error: {fields['error']}", path=log.path,
        line=no, evidence=log.evidence(hits, 2), fields=fields,
        causes=(Cause(cause="a custom CUDA / Triton kernel or C++ extension reading or writing "
                            "out of bounds", likelihood="medium"),
                Cause(cause="a library kernel bug for this shape, dtype or GPU (check the "
                            "torch / CUDA / driver versions)", likelihood="medium"),
                Cause(cause="an earlier asynchronous error surfacing at this call",
                      likelihood="medium"),
                Cause(cause="a hardware fault (an Xid 13/31/43 or ECC error in dmesg)",
                      likelihood="low")),
        next_steps=(f"rerun with {_LAUNCH_BLOCKING} to find the failing op, then run "
                    "`compute-sanitizer --tool memcheck python train.py` on a small input",
                    "check `dmesg | grep -i xid` on the node for a hardware error"),
        rank=log.rank(no), stamp=log.stamp(no), matched_lines=frozenset(hits))]


_XID = re.compile(r"\bXid \((?P<pci>[^)]*)\): (?P<xid>\d+),?\s*(?P<rest>.*)")
_XID_BARE = re.compile(r"\bXid[ :]+(?P<xid>\d+)\b")
_OFF_BUS = re.compile(r"fallen off the bus")
_ECC = re.compile(r"uncorrectable ECC error|double bit ECC|DBE\b.*ECC", re.IGNORECASE)


@register_rule("gpu_xid")
def gpu_xid(log: LogText) -> list[Incident]:
    by_code: dict[int | str, list[int]] = {}
    details: dict[int | str, dict[str, Any]] = {}
    for no, text in enumerate(log.lines, 1):
        m = _XID.search(text) if "Xid" in text else None
        if m is None and "NVRM" in text and "Xid" in text:
            m = _XID_BARE.search(text)
        if m is not None:
            code: int | str = int(m.group("xid"))
            by_code.setdefault(code, []).append(no)
            gd = m.groupdict()
            details.setdefault(code, {"pci": gd.get("pci"), "message": (gd.get("rest") or "")
                                      .strip()[:200] or None})
        elif _OFF_BUS.search(text) and ("NVRM" in text or "GPU" in text):
            by_code.setdefault("fallen_off_bus", []).append(no)
        elif _ECC.search(text):
            by_code.setdefault("ecc", []).append(no)
    if 79 in by_code:  # the same event, said twice
        by_code.pop("fallen_off_bus", None)
    out = []
    for code, lines in by_code.items():
        xid = 79 if code == "fallen_off_bus" else (code if isinstance(code, int) else None)
        known = xid_meaning(xid) if xid is not None else None
        fields: dict[str, Any] = {"xid": xid, "occurrences": len(lines)}
        fields.update({k: v for k, v in details.get(code, {}).items() if v})
        if code == "ecc":
            meaning, culprit = "uncorrectable ECC error", "hardware: the GPU's memory"
        elif known:
            meaning, culprit = known
        else:
            meaning, culprit = "an Xid not in trainmedic's short list", "see NVIDIA's catalogue"
        fields["meaning"] = meaning
        hardware = code == "ecc" or (xid in XID_HARDWARE)
        causes = (Cause(cause=culprit, likelihood="high"),)
        steps = (("drain the node and reset the GPU (nvidia-smi -r) or reboot; run "
                  "`dcgmi diag -r 3` before returning it; resume the job elsewhere from the last "
                  "checkpoint",) if hardware else
                 ("treat it as the program's fault first: rerun with CUDA_LAUNCH_BLOCKING=1 and "
                  "compute-sanitizer; if it repeats with other programs, drain the node",))
        label = f"Xid {xid}" if xid is not None else "ECC"
        out.append(Incident(
            code="gpu_xid", summary=f"{label}: {meaning}", path=log.path, line=lines[0],
            evidence=log.evidence(lines, 2), fields=fields, causes=causes, next_steps=steps,
            rank=None, stamp=log.stamp(lines[0]), matched_lines=frozenset(lines)))
    return out


@register_rule("cuda_oom")
def cuda_oom(log: LogText) -> list[Incident]:
    # The same reader as `trainmedic memory oom` (the last OOM message of the text).
    from trainmedic.memory.oom import explain_oom
    from trainmedic.memory.oom_message import parse_oom

    text = log.text
    if "out of memory" not in text and "CUBLAS_STATUS_ALLOC_FAILED" not in text:
        return []
    report = parse_oom(text)
    if report is None:
        return []
    explanation = explain_oom(report)
    fields: dict[str, Any] = {
        "backend": report.backend, "message_format": report.message_format,
        "device": report.device_index, "requested_bytes": report.requested_bytes,
        "total_bytes": report.total_bytes, "free_bytes": report.free_bytes,
        "allocated_bytes": report.allocated_bytes,
        "reserved_unallocated_bytes": report.reserved_unallocated_bytes,
        "occurrences": report.occurrences, "raised_at": report.location,
    }
    fields = {k: v for k, v in fields.items() if v is not None}
    oom_lines = [no for no, t in enumerate(log.lines, 1)
                 if ("out of memory" in t and re.search(r"CUDA|HIP|XPU|Tried to allocate", t))
                 or "CUBLAS_STATUS_ALLOC_FAILED" in t]
    likelihood = "high" if explanation.verdict != "unknown" else "medium"
    return [Incident(
        code="cuda_oom", summary=f"{report.backend} out of memory: {explanation.summary}",
        path=log.path, line=oom_lines[0] if oom_lines else report.line,
        evidence=log.evidence([report.line] + oom_lines, 2), fields=fields,
        causes=(Cause(cause=f"{explanation.verdict.replace('_', ' ')}: {explanation.summary}"
                            " (memory oom's verdict from the message's figures)",
                      likelihood=likelihood),),  # type: ignore[arg-type]
        next_steps=tuple(explanation.fixes[:2]) + (
            "details: `trainmedic memory oom LOG`",),
        rank=log.rank(report.line), stamp=log.stamp(report.line),
        matched_lines=frozenset(oom_lines + [report.line]))]
