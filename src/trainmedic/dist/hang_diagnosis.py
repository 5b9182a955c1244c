"""``trainmedic dist diagnose``: the ranks' hang dumps and heartbeats merged into one account
of who is where: "rank 1 is at train.py:88 in the data loader, while ranks 0 and 2 wait in
all_reduce #1234", the ranks that never arrived, desyncs, and straggler scores.

Pure over a :class:`~trainmedic.dist.hang_dump.HangRecord`; reading the folder is
:func:`~trainmedic.dist.hang_dump.read_hang_dir`'s job.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from trainmedic.dist.desync import (
    CollectiveState,
    Mismatch,
    current_collective,
    find_mismatches,
    last_collective,
    torch_analysis,
)
from trainmedic.dist.hang_dump import HangRecord, RankDump, SignalDump, read_hang_dir
from trainmedic.dist.stack_trace import (
    Location,
    locate,
    main_thread,
    parse_faulthandler,
    parse_traceback,
)
from trainmedic.dist.straggler import StragglerScore, straggler_scores

__all__ = ["HangDiagnosis", "RankState", "diagnose_hang", "diagnose_hang_dir"]

_KIND_WORDS = {"data_loader": "in the data loader", "sleep": "in time.sleep",
               "user_code": "in user code", "unknown": "at an unknown place"}


@dataclasses.dataclass(frozen=True)
class RankState:
    """One rank, as its dumps and heartbeat show it."""

    rank: int
    status: str
    """``stuck`` (a hang dump), ``failed`` (a dump made by an exception), ``no_dump`` (a
    heartbeat only), ``never_arrived`` (nothing at all)."""
    location: Location | None
    collective: CollectiveState | None
    """From the flight recorder."""
    op: str | None
    """The collective it is in: the flight recorder's, else the stack's."""
    seq_basis: str
    """How the sequence number was obtained, or why there is none."""
    step: int | None
    phase: str | None
    heartbeat_age_s: float | None
    """Seconds between its last heartbeat and the first dump of the job (measured)."""
    exception: str | None
    """The last line of the exception that ended its stall."""
    children: list[tuple[int, Location]]
    """Forked children (data-loader workers) that dumped their stacks: (pid, where)."""
    source: str
    """``watchdog``, ``signal`` or ``heartbeat``."""
    reason: str | None


@dataclasses.dataclass(frozen=True)
class HangDiagnosis:
    path: str
    world_size: int
    hung: bool
    ranks: list[RankState]
    mismatches: list[Mismatch]
    torch_notes: list[str] | None
    """torch's flight-recorder analyzer's mismatches; ``None``: it did not run."""
    stragglers: list[StragglerScore]
    summary: list[str]
    notes: list[str]


def diagnose_hang_dir(path: str | os.PathLike[str]) -> HangDiagnosis:
    """Read ``path`` (a run folder or its ``hang/``) and diagnose it."""
    return diagnose_hang(read_hang_dir(path))


def diagnose_hang(record: HangRecord) -> HangDiagnosis:
    record = _single_process(record)
    world = max([1] + [int(d.meta.get("world_size") or 1) for d in record.dumps.values()]
                + [int(h.get("world_size") or 1) for h in record.heartbeats.values()]
                + [r + 1 for r in record.heartbeats] + [r + 1 for r in record.dumps]
                + [s.rank + 1 for s in record.signals if s.rank is not None])
    dump_times = [float(d.meta["wall_time_unix"]) for d in record.dumps.values()
                  if d.meta.get("wall_time_unix") is not None]
    ref_t = min(dump_times) if dump_times else None
    frs: dict[int, dict[str, Any]] = {}
    ranks = []
    for r in range(world):
        state, fr = _rank_state(r, record, ref_t)
        if fr is not None:
            frs[r] = fr
        ranks.append(state)
    mismatches = find_mismatches(frs)
    tnotes = torch_analysis(frs) if len(frs) >= 2 else None
    times = {r: (record.heartbeats.get(r) or {}).get("step_times_s") or [] for r in range(world)}
    for r, d in record.dumps.items():
        if len(d.meta.get("step_times_s") or []) > len(times.get(r) or []):
            times[r] = d.meta["step_times_s"]
    scores = straggler_scores(times)
    hung = any(s.status in ("stuck", "failed") for s in ranks)
    notes = [f"unreadable: {u}" for u in record.unreadable]
    if hung and not frs and world > 1:
        notes.append("no flight-recorder buffer in the dumps: sequence numbers are not known; "
                     "set TORCH_FR_BUFFER_SIZE=2000 before init_process_group")
    return HangDiagnosis(path=str(record.path), world_size=world, hung=hung, ranks=ranks,
                         mismatches=mismatches, torch_notes=tnotes, stragglers=scores,
                         summary=_summary(ranks, mismatches, hung), notes=notes)


#: Launchers whose one child is the training process (argv words of the top process).
_LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "accelerate",
              "deepspeed", "lightning", "composer", "colossalai")


def _single_process(record: HangRecord) -> HangRecord:
    """A job that is no torchrun job (``dist watch -- python train.py``): no rank wrote a
    heartbeat or a dump and every stack came from a process without ``RANK``. Its training
    process is rank 0: the one hooked process whose parent is not hooked (the script
    ``dist watch`` started; what it starts itself, a helper, spawned data-loader workers, a
    compile pool, are its children), or that process's only child when it is a launcher.
    Other processes' stacks stay in the record, unnumbered."""
    if record.dumps or record.heartbeats or any(s.rank is not None for s in record.signals):
        return record
    procs = {s.header.get("pid"): s for s in record.signals
             if s.header.get("role") != "forked child"}
    roots = [s for s in procs.values() if s.header.get("ppid") not in procs]
    if len(roots) != 1:
        return record  # several programs (or an earlier run's files): nothing to number
    top = roots[0]
    argv = " ".join(str(a) for a in top.header.get("argv") or ())
    kids = [s for s in procs.values() if s.header.get("ppid") == top.header.get("pid")]
    if any(word in argv for word in _LAUNCHERS) and len(kids) == 1:
        top = kids[0]
    pid = top.header.get("pid")
    return dataclasses.replace(record, signals=[
        dataclasses.replace(s, rank=0) if s.header.get("pid") == pid or (
            s.header.get("role") == "forked child" and s.header.get("ppid") == pid) else s
        for s in record.signals])


def _own_signal(r: int, record: HangRecord, pid: int | None) -> SignalDump | None:
    """Rank ``r``'s own stack file (of process ``pid`` when known), the latest started (the
    hook's header says when the process started; faulthandler stamps no dump time)."""
    mine = [s for s in record.signals if s.rank == r and s.header.get("role") != "forked child"
            and (pid is None or s.header.get("pid") == pid)]
    return max(mine, key=lambda s: float(s.header.get("started_unix") or 0.0), default=None)


def _resolved(dump: RankDump, beat: dict[str, Any]) -> bool:
    """A later heartbeat of the same rank shows a later step than the dump's: that stall
    ended (or the folder holds an earlier run's dump and this run went further)."""
    step, beat_step = dump.meta.get("step"), beat.get("step")
    t, beat_t = dump.meta.get("wall_time_unix"), beat.get("wall_time_unix")
    return (isinstance(step, int) and isinstance(beat_step, int) and beat_step > step
            and t is not None and beat_t is not None and float(beat_t) > float(t))


def _rank_state(r: int, record: HangRecord, ref_t: float | None
                ) -> tuple[RankState, dict[str, Any] | None]:
    dump: RankDump | None = record.dumps.get(r)
    beat = record.heartbeats.get(r) or {}
    if dump is not None and _resolved(dump, beat):
        dump = None  # status below: no_dump, from the heartbeat
    pid = (dump.meta.get("pid") if dump else None) or beat.get("pid")
    sig = _own_signal(r, record, pid) or (_own_signal(r, record, None) if pid is None else None)
    location: Location | None = None
    fr: dict[str, Any] | None = None
    exception = None
    failed = False
    source, reason = "heartbeat", None
    if dump is not None:
        source, reason = "watchdog", str(dump.meta.get("reason"))
        fr = dump.flight_recorder
        failed = reason.startswith("exception")
        if dump.exception:
            exception = dump.exception.strip().splitlines()[-1]
        tb = parse_traceback(dump.exception) if failed and dump.exception else ()
        if tb:
            location = locate(tb)
        else:
            main = main_thread(parse_faulthandler(dump.stacks), dump.meta.get("main_thread"))
            location = locate(main.frames) if main is not None else None
    elif sig is not None:
        source, reason = "signal", "signalled by trainmedic dist watch"
        fr = sig.flight_recorder
        main = main_thread(parse_faulthandler(sig.stacks), sig.header.get("main_thread"))
        location = locate(main.frames) if main is not None else None
    children = []
    for s in record.signals:
        if s.rank == r and s.header.get("role") == "forked child" and (
                pid is None or s.header.get("ppid") == pid):
            for t in parse_faulthandler(s.stacks):
                loc = locate(t.frames)
                if loc.user_frame is not None:
                    children.append((int(s.header.get("pid") or 0), loc))
                    break
    coll = current_collective(r, fr, failed=failed) if fr is not None else None
    if coll is None and fr is not None and location is not None \
            and location.kind == "collective":
        coll = last_collective(r, fr)
    op = coll.op if coll is not None else (
        location.op if location is not None and location.kind == "collective" else None)
    if coll is not None:
        seq_basis = "flight recorder"
    elif fr is not None:
        seq_basis = "flight recorder: no collective in flight"
    elif dump is not None and not str(dump.meta.get("flight_recorder", "")).startswith(
            "written"):
        seq_basis = f"not recorded: {dump.meta.get('flight_recorder')}"
    else:
        seq_basis = "not recorded: no flight-recorder dump"
    status = ("failed" if failed else "stuck") if (dump is not None or sig is not None) else (
        "no_dump" if beat else "never_arrived")
    age = None
    if beat.get("wall_time_unix") is not None and ref_t is not None:
        age = max(0.0, ref_t - float(beat["wall_time_unix"]))
    step = dump.meta.get("step") if dump is not None else beat.get("step")
    phase = dump.meta.get("phase") if dump is not None else beat.get("phase")
    return RankState(rank=r, status=status, location=location, collective=coll, op=op,
                     seq_basis=seq_basis, step=step, phase=phase, heartbeat_age_s=age,
                     exception=exception, children=children, source=source,
                     reason=reason), fr


def _ranks_words(ranks: Sequence[int]) -> str:
    rs = [str(r) for r in sorted(ranks)]
    if len(rs) == 1:
        return f"rank {rs[0]}"
    return "ranks " + ", ".join(rs[:-1]) + " and " + rs[-1]


def _in_op(s: RankState) -> str:
    seq = f" #{s.collective.seq}" if s.collective is not None else " #?"
    group = (f" ({s.collective.group})" if s.collective is not None
             and s.collective.group not in ("default_pg", "0") else "")
    return f"{s.op}{seq}{group}"


def _summary(ranks: list[RankState], mismatches: list[Mismatch], hung: bool) -> list[str]:
    lines = []
    for m in mismatches:
        parts = [f"rank {r} is in {op} #{m.seq}" + (f" {sizes}" if m.kind == "shape" else "")
                 for r, (op, sizes) in m.calls.items()]
        lines.append(", ".join(parts) + f": {m.kind} mismatch at the same sequence number "
                     f"({m.group})")
    waiting: dict[str, list[int]] = {}
    elsewhere = []
    for s in ranks:
        if s.status == "stuck" and s.op is not None:
            waiting.setdefault(_in_op(s), []).append(s.rank)
        elif s.status in ("stuck", "failed") and s.op is None:
            elsewhere.append(s)
    parts = []
    for s in elsewhere:
        loc = s.location
        words = _KIND_WORDS.get(loc.kind if loc else "unknown", "somewhere")
        text = f"rank {s.rank} is at {loc.where() if loc else 'an unknown line'} {words}"
        if s.children:
            pid, child = s.children[0]
            text += (f" (its worker process {pid} is at {child.where()} "
                     f"{_KIND_WORDS.get(child.kind, '')})").replace(" )", ")")
        parts.append(text)
    wait_text = [f"{_ranks_words(rs)} {'waits' if len(rs) == 1 else 'wait'} in {what}"
                 for what, rs in waiting.items()]
    if parts and wait_text:
        lines.append(", ".join(parts) + ", while " + "; ".join(wait_text))
    elif parts or wait_text:
        lines.append("; ".join(parts + wait_text))
    for s in ranks:
        if s.status == "failed":
            loc = s.location
            lines.append(f"rank {s.rank} failed in {_in_op(s) if s.op else 'its step'} at "
                         f"{loc.where() if loc else 'an unknown line'}: {s.exception}")
    first_op = next((_in_op(s) for s in ranks if s.status in ("stuck", "failed") and s.op),
                    None)
    for s in ranks:
        if s.status == "no_dump" and hung:
            age = (f", {s.heartbeat_age_s:.1f} s before the first dump"
                   if s.heartbeat_age_s is not None else "")
            target = f"never arrived at {first_op}: it" if first_op else "never"
            lines.append(f"rank {s.rank} {target} wrote no dump (it died, was killed, or its "
                         f"watchdog had not fired): last heartbeat at step {s.step}{age}")
        elif s.status == "never_arrived":
            lines.append(f"rank {s.rank} never arrived: no heartbeat and no dump")
    if not hung:
        lines.append("no hang dump: nothing hung (heartbeats only)")
    return lines
