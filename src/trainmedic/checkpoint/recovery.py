"""The record of a supervised run: its incidents, and how their cost is measured.

:class:`Incident` and :class:`SuperviseResult` are what ``trainmedic supervise``
(:mod:`trainmedic.checkpoint.supervisor`) reports. The steps an attempt had done when it
stopped are read from the heartbeat file ``RecipeRunner`` rewrites after every step
(``TRAINMEDIC_HEARTBEAT``), else from the run store's rows that attempt logged (after the
row id the store had at its start: a restart replays steps, and the highest step in the
whole store may be an earlier attempt's); the store commits in batches, so it may be up to
about 1.5 s behind: a figure from the store is a lower bound and says ``estimated``, one from
the heartbeat ``measured``. The checkpoint a restart resumes from is the newest committed one that
verifies (:func:`~trainmedic.checkpoint.verify.find_latest`). Incidents go into the run store
as ``supervise_incident`` events and a session's summary as ``supervise_summary``, written
while no child runs (the store takes one writer).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Incident", "SuperviseResult", "INCIDENT_EVENT", "SUMMARY_EVENT", "store_marks",
           "store_steps_done", "read_heartbeat", "resume_point", "record"]

logger = logging.getLogger(__name__)

INCIDENT_EVENT = "supervise_incident"
SUMMARY_EVENT = "supervise_summary"


@dataclass(kw_only=True, frozen=True)
class Incident:
    """One stop of the command other than success."""

    attempt: int
    """Which start stopped (0 the first)."""

    outcome: str
    """``preempted`` (exit 75), ``failed`` (another status) or ``killed`` (a signal)."""

    exit_code: int | None
    """The exit status, when it exited."""

    signal: str | None
    """The signal that killed it (``SIGKILL``), when one did."""

    failure_class: str | None
    """The root failure ``trainmedic explain`` recognised in the output's tail, if any."""

    failure_summary: str | None
    """Its one-line summary."""

    resumed_from: str | None
    """The checkpoint that attempt had started from (None: from scratch)."""

    start_step: int = 0
    """The step of that checkpoint (0 from scratch): ``steps_done - start_step`` is what the
    attempt itself trained."""

    checkpoint: str | None
    """The checkpoint the next start resumes from (None: from scratch)."""

    checkpoint_step: int
    """Its step (0 without one)."""

    steps_done: int | None
    """Steps done when it stopped (None when nothing said; basis: :attr:`progress_basis`)."""

    lost_steps: int | None
    """``steps_done - checkpoint_step``, >= 0 (None when not known)."""

    lost_source: str
    """Where ``steps_done`` was read: ``heartbeat``, ``run store`` or ``none``."""

    uptime_s: float
    """Seconds that attempt ran (measured)."""

    action: str = ""
    """What followed: ``restart``, ``requeue``, ``give_up`` or ``stop`` (a signal to us)."""

    @property
    def progress_basis(self) -> str:
        """Of ``steps_done``, ``steps_run`` and ``lost_steps``: ``measured`` (the heartbeat,
        exact), ``estimated`` (the run store: a lower bound, it commits in batches) or
        ``not_checked`` (nothing said)."""
        if self.steps_done is None:
            return "not_checked"
        return "measured" if self.lost_source == "heartbeat" else "estimated"

    @property
    def steps_run(self) -> int | None:
        """Steps this attempt itself completed (0: it stopped before its first step)."""
        return None if self.steps_done is None else max(0, self.steps_done - self.start_step)

    def to_dict(self) -> dict[str, Any]:
        basis = self.progress_basis
        return {"attempt": self.attempt, "outcome": self.outcome, "exit_code": self.exit_code,
                "signal": self.signal, "failure_class": self.failure_class,
                "failure_summary": self.failure_summary, "resumed_from": self.resumed_from,
                "start_step": self.start_step,
                "checkpoint": self.checkpoint, "checkpoint_step": self.checkpoint_step,
                "steps_done": self.steps_done, "steps_run": self.steps_run,
                "lost_steps": self.lost_steps, "lost_basis": basis,
                "lost_source": self.lost_source, "uptime_s": self.uptime_s,
                "uptime_basis": "measured", "action": self.action}


@dataclass(kw_only=True)
class SuperviseResult:
    """What a :func:`supervise` session did."""

    exit_code: int
    """What the supervisor should exit with: 0 when the command finished, else its last
    status (128 + signal for a signal), 75 when requeued."""

    attempts: int = 0
    """Starts of the command."""

    incidents: list[Incident] = field(default_factory=list)
    """Every stop other than success, in order."""

    wall_s: float = 0.0
    """Seconds the session took (measured)."""

    final: str = ""
    """``done``, ``gave_up``, ``requeued``, ``stopped`` or ``start_failed`` (the command could
    not be started: not found, not executable)."""

    @property
    def total_lost_steps(self) -> int | None:
        lost = [i.lost_steps for i in self.incidents]
        if any(v is None for v in lost):
            return None
        return sum(v for v in lost if v is not None)

    @property
    def total_lost_basis(self) -> str:
        """``measured`` when every incident's loss came from the heartbeat, ``estimated`` when
        one came from the run store, ``not_checked`` when one is not known (no incident:
        nothing lost, ``measured``)."""
        bases = {i.progress_basis for i in self.incidents}
        if "not_checked" in bases:
            return "not_checked"
        return "estimated" if "estimated" in bases else "measured"

    def summary(self) -> dict[str, Any]:
        """The session's ``supervise_summary`` event: the totals of :meth:`to_dict`, the
        incidents counted, and the furthest step any attempt reached."""
        doc = {k: v for k, v in self.to_dict().items() if k not in ("schema", "incidents")}
        return {**doc, "incidents": len(self.incidents),
                "steps_done": max([i.steps_done or 0 for i in self.incidents], default=0)}

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "trainmedic.supervise/1", "final": self.final,
                "exit_code": self.exit_code, "attempts": self.attempts,
                "wall_s": self.wall_s, "wall_basis": "measured",
                "total_lost_steps": self.total_lost_steps,
                "total_lost_basis": self.total_lost_basis,
                "incidents": [i.to_dict() for i in self.incidents]}


def _store_files(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("metrics*.sqlite"))


@contextlib.contextmanager
def _ro(path: Path) -> Iterator[sqlite3.Connection]:
    from trainmedic.run.store_reader import connect_ro

    conn = connect_ro(path)
    try:
        yield conn
    finally:
        conn.close()


def store_marks(run_dir: Path) -> dict[str, int]:
    """The last metric row id of each store file now (where a new attempt's rows start)."""
    marks: dict[str, int] = {}
    for p in _store_files(run_dir):
        try:
            with _ro(p) as conn:
                row = conn.execute("SELECT MAX(rowid) FROM metrics").fetchone()
            marks[p.name] = int(row[0] or 0)
        except sqlite3.Error:
            marks[p.name] = 0
    return marks


def store_steps_done(run_dir: Path, marks: Mapping[str, int]) -> int | None:
    """Steps done by the attempt that started at ``marks``: 1 + the highest step any rank
    logged after its mark (the store numbers the first step 0). None when it logged none."""
    best: int | None = None
    for p in _store_files(run_dir):
        try:
            with _ro(p) as conn:
                row = conn.execute("SELECT MAX(step) FROM metrics WHERE rowid > ?",
                                   (marks.get(p.name, 0),)).fetchone()
        except sqlite3.Error:
            continue
        if row and row[0] is not None:
            best = max(best if best is not None else -1, int(row[0]) + 1)
    return best


def read_heartbeat(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    try:
        return int(text.split()[0]) if text else None
    except ValueError:
        return None


def resume_point(root: Path, onset: Callable[[], int | None] | None) -> tuple[str | None, int]:
    from trainmedic.checkpoint.verify import find_latest

    if not root.is_dir():
        return None, 0
    found = find_latest(root, onset=onset() if onset is not None else None)
    for s in found.skipped:
        logger.warning("not resuming from %s: %s%s", s.path.name, s.status,
                       f" ({s.reason})" if s.reason else "")
    if found.path is None:
        return None, 0
    return str(found.path), int(found.step or 0)


def record(run_dir: Path, incidents: Sequence[Incident], *, session: str,
           summary: Mapping[str, Any] | None = None) -> None:
    """Write the incidents of ``session`` the store does not hold yet (a command that
    recreated its store on a fresh start dropped earlier ones), and the summary. Only while
    no child runs: the store takes one writer."""
    from trainmedic.errors import StoreLockedError
    from trainmedic.run.store import RunStore, store_path

    have: set[tuple[Any, Any]] = set()
    path = store_path(run_dir)
    if path.is_file():
        try:
            with _ro(path) as conn:
                for (raw,) in conn.execute("SELECT data FROM events WHERE kind = ?",
                                           (INCIDENT_EVENT,)):
                    d = json.loads(raw)
                    have.add((d.get("session"), d.get("attempt")))
        except (sqlite3.Error, ValueError):
            pass
    try:
        store = RunStore(run_dir, rank=None, world_size=1)
    except StoreLockedError as exc:
        logger.warning("cannot record the incident in %s: %s", run_dir, exc)
        return
    with store:
        for inc in incidents:
            d = {**inc.to_dict(), "session": session}
            if (session, inc.attempt) not in have:
                store.event(inc.steps_done or 0, INCIDENT_EVENT, d)
        if summary is not None:
            store.event(int(summary.get("steps_done") or 0), SUMMARY_EVENT,
                        {**summary, "session": session})
