"""Live alerts: the detectors run on the recent window of a live run, off the training thread.

The watcher feeds every recorded row to :meth:`LiveAlerts.feed` (one ``deque.append`` on the
training thread) and calls :meth:`LiveAlerts.after_step` after each step. Every ``every``
steps the latest ``window`` steps are handed to a background thread, which builds a
:class:`~trainmedic.run.series.Run` from them and calls
:func:`~trainmedic.diagnose.engine.diagnose`: the same detectors, incident folding and routing
as the offline report. A finding not alerted before is logged, passed to ``on_finding`` and
recorded as a ``finding`` event; one whose symptom is in ``stop_on`` sets
:attr:`LiveAlerts.stop_reason`, as does the appearance of ``stop_file`` (the flag file long
runs use to ask for save-and-stop).

Deduplication. A window is diagnosed every ``every`` steps, so a persisting condition (a
divergence, a memory leak) and a past event still inside the window (a spike) are reported
again and again. Each alert opens a *track* keyed by ``(symptom, rank)`` holding the steps
the finding covers (``onset_step`` to ``end_step``, or to the window's end while it is still
going). A later finding with the same key is the same incident when it has the same onset
as the track, or when the track was reported in a window that overlaps this one and the two
extents meet: its onset may have moved (a hinge fit refitted on a slid window, the start of a
window that cut a long incident) but it is still one incident. A finding whose extent starts
after the track ended (a second spike 5000 steps on, or 300 steps on after the first one
recovered) is a new alert.

Window edges. Once data older than the window has been dropped, a finding whose onset is at
the first step of its metric's window was possibly cut by the window: its summary says the
condition may have begun earlier. A metric logged rarely (``val_loss`` once per epoch) keeps
at least :data:`MIN_POINTS_PER_METRIC` points even when they are older than the window, so
the detectors that need its history (overfitting needs >= 3 evaluations) still have it.
Series are passed in step order (rows may arrive out of order by up to ``fetch_every``
steps), so ``resume_discontinuity`` cannot fire live: a step that goes back is shown by the
offline report of the store.

Only findings of at least ``min_severity`` (default ``"warning"``) are alerted: an ``info``
finding (a plateau while the schedule decays, a one-point blip) is for the report, not for
a page at 3 a.m.

Cost. The training thread pays one ``deque.append`` per row and a counter per step (~160 ns
per step measured); a pass (building the Run and diagnosing a 2000-step window) takes ~4-8 ms
on one CPU core and holds the GIL for most of it, so passes are capped at
:data:`MAX_BUSY_FRACTION` of the wall time by default (a round is skipped when it comes too
soon after the last pass); the cap binds only on sub-10 ms steps.
"""

from __future__ import annotations

import collections
import logging
import os
import pathlib
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from trainmedic.diagnose.finding import SEVERITY_ORDER, Finding
from trainmedic.errors import ConfigError
from trainmedic.run.series import Run, RunEvent, Series

__all__ = ["LiveAlerts", "MIN_POINTS_PER_METRIC", "MAX_BUSY_FRACTION"]

logger = logging.getLogger(__name__)

#: A metric keeps at least this many of its latest points even when they are older than the
#: window (a validation loss logged once per epoch).
MIN_POINTS_PER_METRIC = 32
#: Seconds ``close`` waits for a pass in flight before giving up on it (it is a daemon thread,
#: so a detector stuck on a pathological window cannot hold the process at exit).
JOIN_TIMEOUT_S = 30.0
#: By default the passes take at most this fraction of the wall time: a round comes at the
#: earliest 50 pass-durations after the previous one started. A pass holds the GIL for most
#: of its few milliseconds, so on sub-millisecond steps a pass every 100 steps costs the
#: training thread dearly (measured here: +18% step time on 0.22 ms steps of a tiny MLP with
#: ~4 ms passes; with the cap, no measurable cost); on steps of 10 ms and more the cap never
#: binds.
MAX_BUSY_FRACTION = 0.005
#: Prefix of the evidence note with which the engine records a finding folded into a root
#: (``trainmedic.diagnose.engine._fold_into``): the stop policy matches folded symptoms too,
#: so ``stop_on={"divergence"}`` still stops when the divergence is folded into a NaN loss.
_FOLDED_PREFIX = "folded into this finding: "


@dataclass
class _Track:
    """One alerted incident: the steps it has covered and the last window that showed it."""

    lo: int
    hi: int
    seen_at: int
    """Last step of the latest window whose diagnosis reported it."""
    onsets: set[int] = field(default_factory=set)


class _Window:
    """The worker's copy of the recent rows: per metric, steps in order and their values.

    Only the worker thread (or ``close``, after the worker stopped) touches it.
    """

    def __init__(self, window: int) -> None:
        self.window = window
        self.steps: dict[str, np.ndarray] = {}
        self.values: dict[str, np.ndarray] = {}
        self.cut: set[str] = set()
        """Metrics that have lost points to the window (their first point is not the run's)."""
        self.last_step: int | None = None

    def absorb(self, rows: Iterable[tuple[int, Mapping[str, Any]]]) -> None:
        new: dict[str, tuple[list[int], list[float]]] = {}
        for step, row in rows:
            s = int(step)
            for name, value in row.items():
                if value is None:
                    continue
                try:
                    v = float(value)
                except (TypeError, ValueError):
                    continue
                ss, vv = new.setdefault(name, ([], []))
                ss.append(s)
                vv.append(v)
        for name, (ss, vv) in new.items():
            s_new = np.asarray(ss, dtype=np.int64)
            v_new = np.asarray(vv, dtype=np.float64)
            old_s = self.steps.get(name)
            if old_s is not None:
                s_new = np.concatenate([old_s, s_new])
                v_new = np.concatenate([self.values[name], v_new])
            if s_new.size > 1 and not bool(np.all(np.diff(s_new) > 0)):
                # Late rows (a batched device fetch) and repeated steps: sort by step, the
                # value recorded last wins (as in Series.clean).
                order = np.argsort(s_new, kind="stable")
                s_new, v_new = s_new[order], v_new[order]
                keep = np.append(s_new[1:] != s_new[:-1], True)
                s_new, v_new = s_new[keep], v_new[keep]
            self.steps[name] = s_new
            self.values[name] = v_new
            top = int(s_new[-1])
            if self.last_step is None or top > self.last_step:
                self.last_step = top
        if new:
            self._trim()

    @property
    def start(self) -> int:
        """The first step of the window (global across metrics)."""
        return 0 if self.last_step is None else self.last_step - self.window + 1

    def _trim(self) -> None:
        lo = self.start
        for name, s in self.steps.items():
            i = int(np.searchsorted(s, lo, side="left"))
            i = min(i, max(0, s.size - MIN_POINTS_PER_METRIC))
            if i > 0:
                self.steps[name] = s[i:]
                self.values[name] = self.values[name][i:]
                self.cut.add(name)

    def first_step(self, metric: str) -> int | None:
        s = self.steps.get(metric)
        return int(s[0]) if s is not None and s.size else None

    def run(self, source: str, rank: int | None, meta: Mapping[str, Any]) -> Run:
        run = Run(source=source, meta=dict(meta))
        for name, s in self.steps.items():
            if s.size:
                run.series[(name, rank)] = Series(s, self.values[name])
        return run


class LiveAlerts:
    """Runs the detectors on the recent window every ``every`` steps, off the training thread.

    ``on_finding`` and ``record_event`` are called on the alert thread (or, for the last
    pass, on the thread that calls :meth:`close`); an exception they raise is logged and the
    alerts go on. ``stop_on`` lists symptom codes whose new finding sets :attr:`stop_reason`
    (a finding counts when its own symptom, or one the engine folded into it, is listed);
    ``stop_file`` is checked every ``every`` steps. ``rank`` is the rank the findings are
    reported on (``None``: single process); ``source`` names the run in the findings.
    ``meta`` is the run's ``Run.meta`` for the detectors (e.g. ``{"framework": "hf_trainer"}``:
    the Trainer's NaN filter changes what a flat loss means). Findings below ``min_severity``
    are not alerted. ``max_busy_fraction`` caps the share of wall time the passes take (a
    round is skipped until the last pass's duration divided by it has elapsed since that pass
    started); ``None``: a pass every ``every`` steps whatever it costs.
    """

    def __init__(self, *, every: int = 100, window: int = 2000,
                 on_finding: Callable[[Finding], None] | None = None,
                 stop_on: Collection[str] = (), stop_file: pathlib.Path | None = None,
                 rank: int | None = None, source: str = "live",
                 record_event: Callable[[int, str, dict[str, Any]], None] | None = None,
                 min_severity: str = "warning",
                 max_busy_fraction: float | None = MAX_BUSY_FRACTION,
                 meta: Mapping[str, Any] | None = None) -> None:
        _check_args(every=every, window=window, on_finding=on_finding, stop_on=stop_on,
                    stop_file=stop_file, rank=rank, record_event=record_event,
                    min_severity=min_severity, max_busy_fraction=max_busy_fraction)
        self.every = int(every)
        self.window = int(window)
        self._on_finding = on_finding
        self._stop_on = frozenset(stop_on)
        self._stop_file = None if stop_file is None else pathlib.Path(stop_file)
        self._rank = rank
        self._source = str(source)
        self._record_event = record_event
        self._meta = dict(meta or {})
        self._min_level = SEVERITY_ORDER[min_severity]
        self._max_busy = max_busy_fraction
        self._last_start = 0.0
        # Two tracks meet when they are at most this many steps apart.
        self._tol = max(1, self.window // 100)
        # The training thread's side: one deque (append and popleft are atomic under the
        # GIL), bounded so that a stuck worker cannot grow it without limit.
        self._events: list[RunEvent] = []
        self._rows: collections.deque[tuple[int, Mapping[str, Any]]] = collections.deque(
            maxlen=8 * self.window + 1024)
        self._calls = 0
        self._resumed_at: int | None = None  # see seed()
        self._busy = False  # set by the training thread, cleared by the worker
        self._job_step = 0
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._closed = False
        # The worker's side.
        self._pass_lock = threading.Lock()
        self._win = _Window(self.window)
        self._tracks: dict[tuple[str, int | None], list[_Track]] = {}
        self._lock = threading.Lock()  # guards _findings and _stop_reason
        self._findings: list[Finding] = []
        self._stop_reason: str | None = None
        self.passes = 0
        """Detector passes run so far (on the worker and by ``close``)."""
        self.skipped = 0
        """Rounds skipped because the previous pass was still running."""
        self.throttled = 0
        """Rounds skipped to keep the passes under ``max_busy_fraction`` of the wall time."""
        self.last_pass_s: float | None = None
        """Wall time of the latest pass (building the Run and diagnosing it), in seconds."""

    # -- the training thread's side ---------------------------------------------------
    def feed(self, step: int, row: Mapping[str, float]) -> None:
        """Queue one recorded row (``{metric: value}`` at ``step``; ``None`` values are
        skipped). Rows may arrive late and out of order. The row must not be changed
        afterwards: it is read later, on the alert thread."""
        if not self._closed:
            self._rows.append((step, row))

    def seed(self, rows: Iterable[tuple[int, Mapping[str, float]]], *, resumed_at: int) -> None:
        """Before the first step of a resumed run: the rows the earlier process recorded
        (oldest first), so that the window does not start empty and a few points after the
        resume are not judged alone. An incident that ended before ``resumed_at`` is not
        alerted again: the earlier process did, or the offline report shows it."""
        self._resumed_at = int(resumed_at)
        for step, row in rows:
            self.feed(step, row)

    def add_event(self, event: RunEvent) -> None:
        """Keep a non-numeric event (the NaN guard's localization) for the detectors, so a
        live finding names what the offline report would. Rare; kept for the whole run."""
        if not self._closed:
            self._events.append(event)

    def after_step(self, step: int, before_pass: Callable[[], None] | None = None) -> None:
        """Count a step; every ``every`` steps check the stop file and hand the window to the
        alert thread, unless its previous pass is still running or ``max_busy_fraction``
        says it is too soon (then this round is skipped: the next one sees the same rows and
        more). ``before_pass`` is called first on those steps (a caller that buffers rows
        feeds them there)."""
        self._calls += 1
        if self._calls % self.every or self._closed:
            return
        if before_pass is not None:
            before_pass()
        if self._stop_file is not None and self._stop_reason is None \
                and os.path.exists(self._stop_file):
            self._set_stop(f"stop file {self._stop_file} found at step {step}")
        if self._busy:
            self.skipped += 1
            return
        now = time.perf_counter()
        last = self.last_pass_s
        if self._max_busy is not None and last is not None \
                and now - self._last_start < last / self._max_busy:
            self.throttled += 1
            return
        self._last_start = now
        self._busy = True
        self._job_step = int(step)
        if self._thread is None:
            self._thread = threading.Thread(target=self._worker, daemon=True,
                                            name="trainmedic-alerts")
            self._thread.start()
        self._wake.set()

    @property
    def stop_reason(self) -> str | None:
        """Why the run should stop (a finding in ``stop_on``, or the stop file), or None."""
        # Read without the lock: the watcher polls this every step, reading one reference is
        # atomic, and it is written once (under the lock, first reason wins).
        return self._stop_reason

    @property
    def findings(self) -> list[Finding]:
        """Every finding alerted so far, in the order they were raised (deduplicated)."""
        with self._lock:
            return list(self._findings)

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        """Block until the pass in flight (if any) has finished; False on timeout. For tests
        and for a caller that wants the latest findings before a checkpoint."""
        deadline = time.monotonic() + timeout_s
        while self._busy and self._thread is not None and self._thread.is_alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)
        return True

    def close(self, final_step: int | None = None) -> None:
        """Stop the alert thread, then run one last pass on the window on this thread (so the
        last steps are checked too). Idempotent."""
        if self._closed:
            return
        self._closed = True
        thread = self._thread
        if thread is threading.current_thread():
            # close() from inside on_finding: this pass is the last; the thread ends after it.
            self._stopping = True
            self._wake.set()
            return
        if thread is not None:
            self._stopping = True
            self._wake.set()
            thread.join(JOIN_TIMEOUT_S)
            if thread.is_alive():
                logger.warning("trainmedic: live alert pass still running after %.0f s; "
                               "skipping the final pass", JOIN_TIMEOUT_S)
                return
            self._thread = None
        if not self._pass_lock.acquire(timeout=JOIN_TIMEOUT_S):
            return
        try:
            self._run_pass(final_step)
        except Exception:
            logger.exception("trainmedic: the final live alert pass failed")
        finally:
            self._pass_lock.release()

    # -- the alert thread -------------------------------------------------------------
    def _worker(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            step = self._job_step
            try:
                with self._pass_lock:
                    self._run_pass(step)
            except Exception:  # never let one bad pass end the alerts
                logger.exception("trainmedic: live alert pass at step %d failed", step)
            finally:
                self._busy = False

    def _run_pass(self, step: int | None) -> None:
        from trainmedic.diagnose.engine import diagnose

        t0 = time.perf_counter()
        rows = self._rows
        drained = []
        while True:
            try:
                drained.append(rows.popleft())
            except IndexError:
                break
        self._win.absorb(drained)
        if self._win.last_step is None:
            return
        at = self._win.last_step if step is None else int(step)
        run = self._win.run(self._source, self._rank, self._meta)
        run.events.extend(list(self._events))
        diag = diagnose(run)
        self.passes += 1
        self.last_pass_s = time.perf_counter() - t0
        for f in diag.findings:
            if f.level < self._min_level:
                continue
            fresh = self._new(f)
            if fresh is not None:
                self._alert(fresh, at)

    def _new(self, f: Finding) -> Finding | None:
        """``f`` (its summary noting a window edge if any) when it is a new incident; None
        when it continues one already alerted (whose track it extends)."""
        win = self._win
        w_lo, w_hi = win.start, int(win.last_step or 0)
        onset = f.onset_step if f.onset_step is not None else w_lo
        end = max(onset, f.end_step if f.end_step is not None else w_hi)
        tol = self._tol
        tracks = self._tracks.setdefault((f.symptom, f.rank), [])
        for t in tracks:
            same_onset = f.onset_step is not None and f.onset_step in t.onsets
            live = t.seen_at >= w_lo
            if same_onset or (live and onset <= t.hi + tol and end >= t.lo - tol):
                t.lo, t.hi, t.seen_at = min(t.lo, onset), max(t.hi, end), w_hi
                t.onsets.add(onset)
                return None
        # Forget incidents that left the window long ago (their onsets cannot come back).
        tracks[:] = [t for t in tracks if t.seen_at >= w_lo - self.window]
        tracks.append(_Track(lo=onset, hi=end, seen_at=w_hi, onsets={onset}))
        if self._resumed_at is not None and end < self._resumed_at:
            return None  # over before the resume: tracked, not alerted again
        metric = f.metric or "loss"
        first = win.first_step(metric)
        if (metric in win.cut and first is not None and f.onset_step is not None
                and f.onset_step <= first + tol):
            f = replace(f, summary=(f"{f.summary} [onset at the start of the live window of "
                                    f"{self.window} steps: it may have begun earlier]"))
        return f

    def _alert(self, f: Finding, step: int) -> None:
        with self._lock:
            self._findings.append(f)
        where = f" (rank {f.rank})" if f.rank is not None else ""
        logger.warning("trainmedic: %s%s: %s", f.symptom, where, f.summary)
        if self._on_finding is not None:
            try:
                self._on_finding(f)
            except Exception:
                logger.exception("trainmedic: on_finding callback raised on %s; alerts go on",
                                 f.symptom)
        if self._record_event is not None:
            try:
                self._record_event(step, "finding", {
                    "symptom": f.symptom, "severity": f.severity,
                    "onset_step": f.onset_step, "rank": f.rank, "summary": f.summary})
            except Exception:
                logger.exception("trainmedic: recording the finding event failed")
        hit = _symptoms_of(f) & self._stop_on
        if hit:
            code = f.symptom if f.symptom in hit else sorted(hit)[0]
            self._set_stop(f"{code} detected at step {step}: {f.summary}")

    def _set_stop(self, reason: str) -> None:
        with self._lock:
            if self._stop_reason is None:
                self._stop_reason = reason


def _symptoms_of(f: Finding) -> set[str]:
    """The finding's symptom and those the engine folded into it (from its evidence)."""
    out = {f.symptom}
    for e in f.evidence:
        if e.note.startswith(_FOLDED_PREFIX):
            out.add(e.note[len(_FOLDED_PREFIX):].split(" - ", 1)[0].strip())
    return out


def _check_args(*, every: Any, window: Any, on_finding: Any, stop_on: Any, stop_file: Any,
                rank: Any, record_event: Any, min_severity: Any,
                max_busy_fraction: Any) -> None:
    """Raise ConfigError naming the first bad argument, what arrived and what to pass."""
    from trainmedic.diagnose.registry import SYMPTOMS

    def _int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if not _int(every) or every < 1:
        raise ConfigError(f"LiveAlerts: every must be an integer >= 1 (steps between detector "
                          f"passes), got {every!r}")
    if not _int(window) or window < 2 * every:
        raise ConfigError(f"LiveAlerts: window must be an integer >= 2 * every = {2 * every} "
                          f"(each pass must overlap the previous one), got {window!r}; "
                          f"raise window or lower every")
    for name, fn in (("on_finding", on_finding), ("record_event", record_event)):
        if fn is not None and not callable(fn):
            raise ConfigError(f"LiveAlerts: {name} must be callable or None, got {fn!r}")
    if isinstance(stop_on, str) or not isinstance(stop_on, Collection):
        raise ConfigError(f"LiveAlerts: stop_on must be a collection of symptom codes, got "
                          f"{stop_on!r}; write e.g. stop_on={{'divergence'}}")
    unknown = sorted(str(s) for s in stop_on if s not in SYMPTOMS)
    if unknown:
        raise ConfigError(f"LiveAlerts: stop_on has unknown symptom code(s) {unknown}; valid "
                          f"codes: {', '.join(sorted(SYMPTOMS))}")
    if stop_file is not None and not isinstance(stop_file, (str, os.PathLike)):
        raise ConfigError(f"LiveAlerts: stop_file must be a path or None, got {stop_file!r}")
    if rank is not None and (not _int(rank) or rank < 0):
        raise ConfigError(f"LiveAlerts: rank must be an integer >= 0 or None, got {rank!r}")
    if min_severity not in SEVERITY_ORDER:
        raise ConfigError(f"LiveAlerts: min_severity must be one of "
                          f"{', '.join(SEVERITY_ORDER)}, got {min_severity!r}")
    if max_busy_fraction is not None and (
            isinstance(max_busy_fraction, bool) or not isinstance(max_busy_fraction, (int, float))
            or not 0 < max_busy_fraction <= 1):
        raise ConfigError(f"LiveAlerts: max_busy_fraction must be in (0, 1] or None (no cap), "
                          f"got {max_busy_fraction!r}")


def start_live_alerts(cfg: Any, store: Any, meta: dict[str, Any], stop_file: Any,
                      start_step: int) -> LiveAlerts:
    """The watcher's live alerts as its ``WatchConfig`` asks. A resumed run (``start_step`` >
    0) hands them the earlier process's rows of the last window from its ``RunStore``, so the
    first steps after the resume are not judged alone and an incident that ended before it
    is not alerted again."""
    alerts = LiveAlerts(
        every=cfg.alert_every or 100, window=cfg.alert_window, on_finding=cfg.on_finding,
        stop_on=cfg.stop_on, stop_file=stop_file, rank=store.rank, source=str(store.path),
        record_event=store.event, min_severity=cfg.alert_min_severity, meta=meta)
    if start_step > 0 and store.enabled:
        from trainmedic.run.store import read_rows

        try:
            rows = read_rows(store.path, from_step=start_step - alerts.window,
                             before_step=start_step)
        except (OSError, sqlite3.Error) as exc:
            logger.warning("trainmedic: the live alerts start without the rows before step "
                           "%d: reading %s failed (%s)", start_step, store.path, exc)
        else:
            alerts.seed(rows, resumed_at=start_step)
    return alerts
