"""The lines of several ranks interleaved in one console log, told apart by their prefixes:
torchrun's ``[rank1]:`` and ``[default1]:`` (``--tee``, ``--log-line-prefix-template``),
srun -l's ``1: `` and Open MPI's ``--tag-output`` (horovodrun, mpirun: ``[1,0]<stdout>:``).
``textlog`` reads each rank's lines as a log of its own.
"""

from __future__ import annotations

import re

__all__ = ["rank_lines"]

_RANK_PREFIX = re.compile(r"^\s*(?:\[(?:rank|default)\s*(?P<a>\d+)\]:?|(?P<b>\d{1,4}):\s|"
                          r"\[\d+,(?P<c>\d+)\]<(?:stdout|stderr)>:)")


def rank_lines(text: str) -> dict[int, list[tuple[int, str]]] | None:
    """``{rank: [(line number, line without its prefix)]}`` when the lines of >= 2 ranks are
    interleaved in one file (at least half the non-empty lines carry a rank prefix, each rank
    >= 3 lines, so "1: loss 2.3" lines counting steps are not ranks); None otherwise."""
    groups: dict[int, list[tuple[int, str]]] = {}
    prefixed = nonempty = 0
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        nonempty += 1
        m = _RANK_PREFIX.match(line)
        if m:
            prefixed += 1
            groups.setdefault(int(m.group("a") or m.group("b") or m.group("c")), []).append(
                (no, line[m.end():]))
    if len(groups) < 2 or prefixed < 0.5 * nonempty or \
            min(len(v) for v in groups.values()) < 3:
        return None
    return groups
