"""Collectives across ranks from torch's flight recorder: the one each rank is in (or last
finished) with its sequence number, and ranks that disagree at one sequence number (op or
shape: a desync).

The flight recorder's JSON (``_dump_fr_trace_json``, format ``version`` 2.10 in torch 2.13)
holds per process group a ring of ``entries`` with ``collective_seq_id`` (numbered per group
from 1), ``profiling_name`` (``gloo:all_reduce``, ``nccl:all_reduce``), ``input_sizes`` and
``retired`` (false while the collective is in flight). torch's own analyzer
(``torch.distributed.flight_recorder``, the ``torchfrtrace`` script) matches the ranks'
entries; :func:`torch_analysis` runs it on the same dumps where torch is installed and
reports what it finds, beside this module's reading, which needs no torch.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

__all__ = ["CollectiveState", "Mismatch", "current_collective", "find_mismatches",
           "torch_analysis"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CollectiveState:
    """One rank's collective, from its flight-recorder buffer."""

    rank: int
    group: str
    """The process group: its description (``default_pg``) or name."""
    seq: int
    op: str
    """Without the backend prefix: ``all_reduce``."""
    input_sizes: list[Any]
    in_flight: bool
    """Not retired when the buffer was dumped."""
    last_completed_seq: int | None
    """The highest retired sequence number in this group on this rank."""


@dataclasses.dataclass(frozen=True)
class Mismatch:
    """Ranks that issued different collectives at one sequence number of one group."""

    group: str
    seq: int
    kind: str
    """``op`` (different collectives) or ``shape`` (same op, different input sizes)."""
    calls: dict[int, tuple[str, list[Any]]]
    """rank -> (op, input sizes)."""


def _op(entry: Mapping[str, Any]) -> str:
    return str(entry.get("profiling_name", "?")).split(":", 1)[-1]


def _group(entry: Mapping[str, Any]) -> str:
    pg = entry.get("process_group") or ["?", "?"]
    desc = str(pg[1]) if len(pg) > 1 and pg[1] else ""
    return desc or str(pg[0])


def _collectives(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    entries = doc.get("entries") or []
    return [e for e in entries if isinstance(e, Mapping) and not e.get("is_p2p")
            and isinstance(e.get("collective_seq_id"), int)]


def current_collective(rank: int, doc: Mapping[str, Any], *,
                       failed: bool = False) -> CollectiveState | None:
    """The collective ``rank`` is in: its oldest entry still in flight; with none in flight
    and ``failed`` (the dump came from an exception that ended a collective), its last entry.
    ``None``: in no collective by this buffer (or the buffer is empty)."""
    entries = _collectives(doc)
    if not entries:
        return None
    live = [e for e in entries if not e.get("retired", True)]
    if live:
        pick = min(live, key=lambda e: (e.get("time_created_ns", 0), e["collective_seq_id"]))
    elif failed:
        pick = max(entries, key=lambda e: (e.get("time_created_ns", 0), e["collective_seq_id"]))
    else:
        return None
    return _state(rank, pick, entries, in_flight=pick in live)


def last_collective(rank: int, doc: Mapping[str, Any]) -> CollectiveState | None:
    """The newest collective ``rank`` issued, in flight or not."""
    entries = _collectives(doc)
    if not entries:
        return None
    pick = max(entries, key=lambda e: (e.get("time_created_ns", 0), e["collective_seq_id"]))
    return _state(rank, pick, entries, in_flight=not pick.get("retired", True))


def _state(rank: int, pick: Mapping[str, Any], entries: list[Mapping[str, Any]], *,
           in_flight: bool) -> CollectiveState:
    group = _group(pick)
    done = [e["collective_seq_id"] for e in entries
            if _group(e) == group and e.get("retired", True)]
    return CollectiveState(rank=rank, group=group, seq=int(pick["collective_seq_id"]),
                           op=_op(pick), input_sizes=list(pick.get("input_sizes") or []),
                           in_flight=in_flight, last_completed_seq=max(done, default=None))


def find_mismatches(dumps: Mapping[int, Mapping[str, Any]]) -> list[Mismatch]:
    """The first sequence number, per group, at which the ranks' calls differ in op or in
    input sizes. Later numbers are not compared: after a desync the pairing means nothing."""
    by_group: dict[str, dict[int, dict[int, Mapping[str, Any]]]] = {}
    for rank, doc in dumps.items():
        for e in _collectives(doc):
            by_group.setdefault(_group(e), {}).setdefault(
                int(e["collective_seq_id"]), {})[rank] = e
    found = []
    for group, seqs in sorted(by_group.items()):
        for seq in sorted(seqs):
            calls = seqs[seq]
            if len(calls) < 2:
                continue
            ops = {_op(e) for e in calls.values()}
            sizes = {repr(e.get("input_sizes")) for e in calls.values()}
            if len(ops) > 1 or len(sizes) > 1:
                found.append(Mismatch(
                    group=group, seq=seq, kind="op" if len(ops) > 1 else "shape",
                    calls={r: (_op(e), list(e.get("input_sizes") or []))
                           for r, e in sorted(calls.items())}))
                break
    return found


def torch_analysis(dumps: Mapping[int, Mapping[str, Any]]) -> list[str] | None:
    """What torch's flight-recorder analyzer (``build_db``, as ``torchfrtrace`` runs it)
    reports as mismatched collectives; ``None`` where it is not installed or cannot read the
    dumps (its API is not public and has moved between versions).

    gloo's dumps in torch 2.13 key ``pg_config`` by ``""`` while their entries name the group
    ``"0"``; the analyzer then fails on a missing key, so a lone ``""`` key is renamed to the
    entries' group name first."""
    try:
        from torch.distributed.flight_recorder.components.builder import build_db
        from torch.distributed.flight_recorder.components.config_manager import JobConfig
    except Exception:  # not installed, or moved
        return None
    details: dict[str, dict[str, Any]] = {}
    for rank, doc in sorted(dumps.items()):
        d = copy.deepcopy(dict(doc))
        d["rank"] = rank
        d.setdefault("host_name", f"rank{rank}")
        d.setdefault("entries", [])
        cfg = d.get("pg_config") or {}
        names = {str((e.get("process_group") or ["0"])[0]) for e in d["entries"]}
        if list(cfg) == [""] and len(names) == 1:
            d["pg_config"] = {names.pop(): cfg[""]}
        details[f"rank{rank}.json"] = d
    if not details:
        return None
    fr_logger = logging.getLogger("Flight Recorder")
    was = fr_logger.disabled
    fr_logger.disabled = True  # it prints its findings itself; we report them
    try:
        args = JobConfig().parse_args(args=[])
        args.allow_incomplete_ranks = True
        args.verbose = False
        db = build_db(details, args, str(next(iter(details.values())).get("version", "2.10")))
    except Exception as exc:
        logger.debug("torch's flight-recorder analyzer failed: %s", exc)
        return None
    finally:
        fr_logger.disabled = was
    notes = []
    for c in db.collectives:
        if getattr(c, "pass_check", True):
            continue
        for rank, other in sorted((getattr(c, "mismatch_collectives", None) or {}).items()):
            notes.append(f"#{c.collective_seq_id} {c.collective_name} vs rank {rank}'s "
                         f"{other.collective_name}: {other.type_of_mismatch}")
        if getattr(c, "missing_ranks", None):
            notes.append(f"#{c.collective_seq_id} {c.collective_name}: ranks "
                         f"{sorted(c.missing_ranks or ())} missing")
    return notes
