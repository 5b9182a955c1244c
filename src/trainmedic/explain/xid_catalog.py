"""What the common NVIDIA Xid codes mean and what to do about them.

Source: NVIDIA's Xid catalogue, https://docs.nvidia.com/deploy/xid-errors/index.html and
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (meanings and "immediate
action" buckets), and for 48/63/64 the dynamic page retirement notes,
https://docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html. Worded here, not copied.
"""

from __future__ import annotations

__all__ = ["XID_MEANING", "XID_HARDWARE", "xid_meaning"]

#: Xid -> (meaning, usual culprit).
XID_MEANING: dict[int, tuple[str, str]] = {
    13: ("graphics engine exception", "usually the application (an out-of-range access in a "
         "kernel); a driver or hardware fault if it repeats across programs"),
    31: ("GPU memory page fault (MMU fault)", "usually the application (an illegal address); "
         "a driver bug otherwise"),
    43: ("GPU stopped processing (the channel was reset)", "usually the application's fault; "
         "the GPU itself keeps working"),
    45: ("preemptive cleanup after earlier errors", "a consequence: the driver tore the "
         "context down (often after the process was killed or an earlier Xid)"),
    48: ("double-bit ECC error (uncorrectable DRAM error)", "hardware: the GPU's memory"),
    61: ("internal micro-controller breakpoint / warning", "driver or firmware: reset the GPU"),
    62: ("internal micro-controller halt", "driver or firmware: reset the GPU"),
    63: ("ECC page retirement / row remapping recorded", "hardware: memory cells being "
         "retired; reset the GPU to activate it"),
    64: ("ECC page retirement / row remapping failed", "hardware: the GPU's memory"),
    74: ("NVLink error", "hardware or connection: the NVLink between GPUs"),
    79: ("GPU has fallen off the bus", "hardware, power or thermal: the GPU stopped "
         "responding on PCIe"),
    92: ("high single-bit ECC error rate", "hardware: the GPU's memory is degrading"),
    94: ("contained ECC error", "hardware: an uncorrectable error contained to one "
         "application; restart it"),
    95: ("uncontained ECC error", "hardware: an uncorrectable error that may affect every "
         "application on the GPU; reset it"),
}

#: Xids that point at the machine rather than the program: drain the node.
XID_HARDWARE = frozenset({48, 61, 62, 63, 64, 74, 79, 92, 94, 95})


def xid_meaning(xid: int) -> tuple[str, str] | None:
    """(meaning, usual culprit) of a known Xid, or None."""
    return XID_MEANING.get(xid)
