"""The hang watchdog: one daemon thread per rank that notices when no training step has
completed for too long and dumps, from this rank, what it is doing.

>>> wd = HangWatchdog(HangWatchdogConfig(), run_dir="runs/exp1", rank=0, world_size=2)
>>> wd.start()                                                     # doctest: +SKIP
>>> for step, batch in enumerate(loader):                          # doctest: +SKIP
...     train_step(batch)
...     wd.step_done(step, step_time_s)      # two attribute writes and a deque append
...     if step % 1000 == 0:
...         with wd.phase("eval"):           # eval gets its own, longer limit
...             evaluate()
>>> wd.close()                                                     # doctest: +SKIP

Trigger: no :meth:`HangWatchdog.step_done` for ``k`` × the median of the recent step times
(never less than ``floor_s``; ``first_step_limit_s`` before the first step, which may compile;
an eval or checkpoint phase's own limit inside :meth:`HangWatchdog.phase`). A dump, once per
hang (the watchdog keeps watching: a hang can resolve, and the next one gets its own dump):

* every thread's Python stack, by ``faulthandler.dump_traceback(all_threads=True)``; the
  main thread's shows the collective or the data-loader call it is blocked in;
* torch's flight recorder (``torch._C._distributed_c10d._dump_fr_trace_json``), which in torch
  2.13 records gloo collectives too, when ``TORCH_FR_BUFFER_SIZE`` > 0 was set before
  ``init_process_group`` (the watchdog sets it when it is created before that);
* the stacks of this rank's forked children (data-loader workers), through the stack hook
  (:mod:`trainmedic.dist.stack_hook`);
* the last step, the phase, the limit and why, the heartbeat history: ``rank<N>.hang<K>.json``
  (see :mod:`trainmedic.dist.hang_dump`), and a ``hang_dump`` event in the run store.

An exception leaving ``with HangWatchdog(...)`` (a collective that failed because a peer died
or timed out) adds its traceback to the current hang's dump, or makes one.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import faulthandler
import json
import logging
import math
import os
import pathlib
import socket
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from trainmedic.dist import stack_hook
from trainmedic.dist.hang_dump import (
    DUMP_SCHEMA,
    dump_paths,
    heartbeat_path,
    next_dump_index,
    resolve_hang_dir,
    write_json_atomic,
)
from trainmedic.errors import ConfigError

__all__ = ["HangWatchdog", "HangWatchdogConfig", "PHASES", "FR_ENV"]

logger = logging.getLogger(__name__)

#: The phases with their own limit.
PHASES = ("eval", "checkpoint")
#: torch 2.13 reads the flight-recorder size from this (older: TORCH_NCCL_TRACE_BUFFER_SIZE)
#: when a process group is created (torch/distributed/distributed_c10d.py).
FR_ENV = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
_RECENT_STEPS = 256
_HEARTBEAT_HISTORY = 32


@dataclasses.dataclass(kw_only=True, frozen=True)
class HangWatchdogConfig:
    """When the watchdog calls a rank hung, and where it writes. A bad field raises
    ``ConfigError`` naming it."""

    k: float = 10.0
    """A hang is no completed step for ``k`` times the median of the recent step times."""

    floor_s: float = 60.0
    """Never call a hang sooner than this many seconds without a step (a GC pause, a slow
    batch, a logging flush on a 10 ms step must not trip it)."""

    min_steps: int = 5
    """Step times needed before ``k`` × median applies; until then ``floor_s`` does."""

    first_step_limit_s: float = 900.0
    """Seconds allowed before the first step completes (start-up, ``torch.compile``)."""

    eval_limit_s: float = 1800.0
    """Seconds allowed inside ``phase("eval")``."""

    checkpoint_limit_s: float = 1800.0
    """Seconds allowed inside ``phase("checkpoint")``."""

    heartbeat_interval_s: float = 10.0
    """At most one heartbeat per this many seconds (written by the watchdog thread)."""

    poll_interval_s: float | None = None
    """How often the thread looks; ``None``: min(1 s, floor_s / 8, heartbeat_interval_s)."""

    dump_dir: str | None = None
    """Where dumps and heartbeats go; ``None``: ``$TRAINMEDIC_HANG_DIR`` if set (``trainmedic
    dist watch`` sets it), else ``<run_dir>/hang``."""

    flight_recorder_entries: int = 2000
    """``TORCH_FR_BUFFER_SIZE`` set (when unset) if the watchdog is created before
    ``init_process_group``; 0: leave the environment alone."""

    dump_children: bool = True
    """Install the stack hook in this rank and signal its forked children (data-loader
    workers) for their stacks on a hang."""

    def __post_init__(self) -> None:
        for name in ("k", "floor_s", "first_step_limit_s", "eval_limit_s",
                     "checkpoint_limit_s", "heartbeat_interval_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v <= 0:
                raise ConfigError(f"HangWatchdogConfig.{name} must be a finite number > 0, "
                                  f"got {v!r}")
        if self.k < 1:
            raise ConfigError(f"HangWatchdogConfig.k must be >= 1 (a multiple of the median "
                              f"step time), got {self.k!r}")
        p = self.poll_interval_s
        if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float))
                              or not 0.01 <= p <= 60):
            raise ConfigError(f"HangWatchdogConfig.poll_interval_s must be seconds in "
                              f"[0.01, 60] or None, got {p!r}")
        for name in ("min_steps", "flight_recorder_entries"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ConfigError(f"HangWatchdogConfig.{name} must be an integer >= 0, "
                                  f"got {v!r}")

    @property
    def poll_s(self) -> float:
        if self.poll_interval_s is not None:
            return float(self.poll_interval_s)
        return max(0.05, min(1.0, self.floor_s / 8, self.heartbeat_interval_s))


class HangWatchdog:
    """One rank's hang watchdog (see the module docstring). ``store``: a run store
    (``RunStore``-like, with ``event(step, kind, data)``) that heartbeats and dumps are also
    recorded in; the live watcher passes its own."""

    def __init__(self, config: HangWatchdogConfig | None = None, *,
                 run_dir: str | os.PathLike[str] | None, rank: int = 0, world_size: int = 1,
                 store: Any | None = None) -> None:
        self.config = cfg = config if config is not None else HangWatchdogConfig()
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise ConfigError(f"HangWatchdog rank must be an integer >= 0, got {rank!r}")
        if isinstance(world_size, bool) or not isinstance(world_size, int) \
                or world_size <= rank:
            raise ConfigError(f"HangWatchdog world_size must be an integer > rank ({rank}), "
                              f"got {world_size!r}")
        self.rank, self.world_size, self.store = rank, world_size, store
        self.dump_dir = resolve_hang_dir(run_dir, cfg.dump_dir)
        self.dump_dir.mkdir(parents=True, exist_ok=True)
        self._fr_note = self._prepare_flight_recorder(cfg.flight_recorder_entries)
        # Written by the training thread, read by the watchdog thread: plain attribute
        # writes and deque.append are atomic under the GIL, so no lock on the step path.
        self._step: int | None = None
        self._progress_t = time.monotonic()
        self._times: collections.deque[float] = collections.deque(maxlen=_RECENT_STEPS)
        self._phase: str | None = None
        self._phase_start_t = 0.0
        self._outer_phases: list[tuple[str, float]] = []  # (name, start) of enclosing phases
        self._hooked = False
        # Watchdog thread only. Dumps are numbered on from those already in the folder (a
        # resumed run): a new dump never pairs with an old one's files, and is the latest.
        self._hangs = next_dump_index(self.dump_dir, rank)
        self._dumped_for: float | None = None  # the _progress_t of the stall already dumped
        self._beats: collections.deque[dict[str, Any]] = collections.deque(
            maxlen=_HEARTBEAT_HISTORY)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._dump_lock = threading.Lock()
        self._host = socket.gethostname()

    @staticmethod
    def _prepare_flight_recorder(entries: int) -> str:
        dist = sys.modules.get("torch.distributed")
        initialized = bool(dist is not None and dist.is_available() and dist.is_initialized())
        size = next((os.environ[n] for n in FR_ENV if os.environ.get(n)), None)
        if size is not None and size.strip() not in ("", "0"):
            return f"on ({size} entries)"
        if not initialized and entries > 0:
            os.environ["TORCH_FR_BUFFER_SIZE"] = str(entries)  # taken back at close()
            return f"on ({entries} entries, set by the watchdog)"
        return "off: set TORCH_FR_BUFFER_SIZE=2000 before init_process_group"

    # -- the training thread ------------------------------------------------------------
    def start(self) -> HangWatchdog:
        """Start the thread (idempotent)."""
        if self._thread is None:
            if self.config.dump_children:
                self._hooked = stack_hook.install(str(self.dump_dir), role="rank",
                                                  fr_requests=False) is not None
            self._progress_t = time.monotonic()
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"trainmedic-hang-watchdog-rank{self.rank}")
            self._thread.start()
        return self

    def step_done(self, step: int, step_time_s: float) -> None:
        """A training step completed (called once per step: no I/O, no lock)."""
        self._times.append(step_time_s)
        self._step = step
        self._progress_t = time.monotonic()

    def enter_phase(self, name: str) -> None:
        """Enter an eval or checkpoint phase: its own limit applies until :meth:`exit_phase`."""
        if name not in PHASES:
            raise ConfigError(f"HangWatchdog phase must be one of {PHASES}, got {name!r}")
        if self._phase is not None:  # a checkpoint inside an eval: the eval resumes after
            self._outer_phases.append((self._phase, self._phase_start_t))
        self._phase_start_t = time.monotonic()
        self._phase = name

    def exit_phase(self) -> None:
        """Leave the phase (back into the enclosing one, if any, with its own start); the
        time spent in it is not counted against the next step."""
        if self._outer_phases:
            self._phase, self._phase_start_t = self._outer_phases.pop()
        else:
            self._phase = None
        self._progress_t = time.monotonic()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """``with watchdog.phase("eval"): ...``"""
        self.enter_phase(name)
        try:
            yield
        finally:
            self.exit_phase()

    def close(self) -> None:
        """Stop the thread, write a last heartbeat, and take back what was set in the
        process: the stack hook, and ``TORCH_FR_BUFFER_SIZE`` when the watchdog set it
        (idempotent)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        self._thread = None
        if self._hooked:
            stack_hook.uninstall()
            self._hooked = False
        if self._fr_note.endswith("set by the watchdog)"):
            os.environ.pop("TORCH_FR_BUFFER_SIZE", None)
            self._fr_note = "off: set TORCH_FR_BUFFER_SIZE=2000 before init_process_group"

    def __enter__(self) -> HangWatchdog:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if exc is not None:
                self.dump_exception(exc)
        finally:
            self.close()

    # -- the watchdog thread ------------------------------------------------------------
    def limit(self) -> tuple[float, str]:
        """The current limit in seconds, and how it was set."""
        cfg = self.config
        phase = self._phase
        if phase == "eval":
            return cfg.eval_limit_s, "eval phase limit"
        if phase == "checkpoint":
            return cfg.checkpoint_limit_s, "checkpoint phase limit"
        if self._step is None:
            return cfg.first_step_limit_s, "first-step limit"
        times = list(self._times)
        if len(times) < max(cfg.min_steps, 1):
            return cfg.floor_s, f"floor (fewer than {cfg.min_steps} step times)"
        med = statistics.median(times)
        if cfg.k * med <= cfg.floor_s:
            return cfg.floor_s, f"floor (> {cfg.k:g} x median step time {med:.3g} s)"
        return cfg.k * med, f"{cfg.k:g} x median step time {med:.3g} s"

    def _started_t(self) -> float:
        return self._phase_start_t if self._phase is not None else self._progress_t

    def _run(self) -> None:
        next_beat = 0.0
        beat_failed = False
        while not self._stop.wait(self.config.poll_s):
            now = time.monotonic()
            if now >= next_beat:
                next_beat = now + self.config.heartbeat_interval_s  # a failed write waits too
                try:
                    self._heartbeat()
                    beat_failed = False
                except Exception:  # a full disk, a removed folder: say it once, go on
                    if not beat_failed:
                        logger.exception("trainmedic: hang watchdog heartbeat failed")
                    beat_failed = True
            try:
                self._check(now)
            except Exception:  # the watchdog must never take training down
                logger.exception("trainmedic: hang watchdog check failed")
        try:
            self._heartbeat(closing=True)
        except OSError:
            pass

    def _check(self, now: float) -> None:
        progress_t = self._progress_t
        if self._dumped_for is not None and progress_t != self._dumped_for:
            resolved_after = now - self._dumped_for
            logger.warning("trainmedic: rank %d made progress again, %.1f s after the stall "
                           "began", self.rank, resolved_after)
            self._event("hang_resolved", {"hang": self._hangs - 1,
                                          "stalled_s": round(resolved_after, 3)})
            self._dumped_for = None
        limit_s, basis = self.limit()
        stalled_s = now - self._started_t()
        if stalled_s > limit_s and self._dumped_for is None:
            self._dump(f"no step for {stalled_s:.1f} s (limit {limit_s:.3g} s: {basis})",
                       stalled_s=stalled_s, limit_s=limit_s, basis=basis)

    def _heartbeat(self, closing: bool = False) -> None:
        beat = self._beat_doc(closing)
        self._beats.append({k: beat[k] for k in ("wall_time_unix", "step", "phase")})
        write_json_atomic(heartbeat_path(self.dump_dir, self.rank), beat)
        self._event("heartbeat", {k: beat[k] for k in ("wall_time_unix", "phase",
                                                       "median_step_time_s")})
        if self._hooked:
            self._prune_children()

    def _prune_children(self) -> None:
        """Remove the registration files of this rank's forked children that exited without
        ever dumping (data-loader workers of past epochs), so they do not pile up."""
        me = os.getpid()
        for entry in self.dump_dir.glob(f"{stack_hook.SIGNAL_PREFIX}*.pid*.txt"):
            try:
                pid = int(entry.name.rsplit(".pid", 1)[1].split(".")[0])
                if pid == me or os.path.exists(f"/proc/{pid}"):
                    continue
                with open(entry) as f:
                    lines = f.read(65536).splitlines()
                header = json.loads(lines[0].split(" ", 2)[2]) if lines else {}
                if len(lines) == 1 and header.get("role") == "forked child" \
                        and header.get("ppid") == me:
                    entry.unlink()
            except (OSError, ValueError, IndexError):
                continue

    def _beat_doc(self, closing: bool) -> dict[str, Any]:
        times = list(self._times)
        return {"rank": self.rank, "world_size": self.world_size, "pid": os.getpid(),
                "host": self._host, "step": self._step, "phase": self._phase,
                "wall_time_unix": time.time(),
                "since_progress_s": round(time.monotonic() - self._started_t(), 3),
                "median_step_time_s": statistics.median(times) if times else None,
                "step_times_s": times[-64:], "steps_seen": len(times), "closed": closing,
                "interval_s": self.config.heartbeat_interval_s}

    def _event(self, kind: str, data: dict[str, Any]) -> None:
        if self.store is not None:
            self.store.event(self._step if self._step is not None else 0, kind, data)

    # -- dumping ------------------------------------------------------------------------
    def dump_exception(self, exc: BaseException) -> None:
        """An exception leaving the training loop (a collective that failed because a peer
        died): into the current hang's dump, or a new one. Never raises (the caller's own
        exception must go on); Ctrl-C and SystemExit are no hang."""
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            return
        try:
            self.dump_now(f"exception: {type(exc).__name__}", exc=exc)
        except Exception:
            logger.exception("trainmedic: the hang dump of the exception failed")

    def dump_now(self, reason: str, *, exc: BaseException | None = None) -> pathlib.Path:
        """Dump now, from any thread. With ``exc``, its traceback goes into the current
        hang's dump when one was written for this stall, else into a new dump."""
        if exc is not None and self._dumped_for == self._progress_t and self._hangs > 0:
            path = dump_paths(self.dump_dir, self.rank, self._hangs - 1)["exception"]
            path.write_text(_format_exc(exc))
            return path.with_name(path.name.replace(".exception.txt", ".json"))
        return self._dump(reason, exc=exc)

    def _dump(self, reason: str, *, stalled_s: float | None = None,
              limit_s: float | None = None, basis: str | None = None,
              exc: BaseException | None = None) -> pathlib.Path:
        with self._dump_lock:
            index = self._hangs
            self._hangs += 1
            self._dumped_for = self._progress_t
            parts = dump_paths(self.dump_dir, self.rank, index)
            logger.warning("trainmedic: rank %d hang dump %d: %s; writing %s", self.rank,
                           index, reason, parts["stacks"])
            with open(parts["stacks"], "w") as f:
                faulthandler.dump_traceback(f, all_threads=True)
            if exc is not None:
                parts["exception"].write_text(_format_exc(exc))
            fr = self._flight_recorder(parts["fr"])
            children = self._signal_children() if self.config.dump_children else []
            beat = self._beat_doc(False)
            meta = {"schema": DUMP_SCHEMA, "rank": self.rank, "world_size": self.world_size,
                    "pid": os.getpid(), "host": self._host, "hang_index": index,
                    "reason": reason, "step": self._step, "phase": self._phase,
                    "stalled_s": stalled_s, "limit_s": limit_s, "limit_basis": basis,
                    "median_step_time_s": beat["median_step_time_s"],
                    "step_times_s": beat["step_times_s"],
                    "main_thread": f"0x{threading.main_thread().ident or 0:016x}",
                    "watchdog_thread": f"0x{threading.get_ident():016x}",
                    "flight_recorder": fr, "children_signalled": children,
                    "heartbeats": list(self._beats), "wall_time_unix": time.time()}
            write_json_atomic(parts["meta"], meta)
            self._event("hang_dump", {"hang": index, "reason": reason,
                                      "file": str(parts["meta"])})
            return parts["meta"]

    def _flight_recorder(self, path: pathlib.Path) -> str:
        dist = sys.modules.get("torch.distributed")
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return "not dumped: torch.distributed is not initialized in this process"
        if self._fr_note.startswith("off"):
            return f"not dumped: flight recorder {self._fr_note}"
        try:
            from torch._C._distributed_c10d import _dump_fr_trace_json  # type: ignore[attr-defined]

            data = _dump_fr_trace_json()
        except Exception as exc:  # a private API that moves between torch versions
            return f"not dumped: {exc.__class__.__name__}: {exc}"
        path.write_bytes(data if isinstance(data, bytes) else str(data).encode())
        return f"written ({self._fr_note})"

    def _signal_children(self) -> list[int]:
        """Signal this rank's children that installed the stack hook; wait for their files."""
        me = os.getpid()
        sent = []
        for entry in self.dump_dir.glob(f"{stack_hook.SIGNAL_PREFIX}*.pid*.txt"):
            try:
                pid = int(entry.name.rsplit(".pid", 1)[1].split(".")[0])
            except (IndexError, ValueError):
                continue
            if pid == me or _parent_of(pid) != me or not stack_hook.catches_dump_signal(pid):
                continue  # not ours, or no handler there (the signal's default kills)
            try:
                os.kill(pid, stack_hook.DUMP_SIGNAL)
                sent.append(pid)
            except OSError:
                continue
        if sent:
            time.sleep(0.2)  # the children write from their signal handlers
        return sent


def _parent_of(pid: int) -> int | None:
    """The parent pid from /proc (Linux); ``None`` where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _format_exc(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def watchdog_for_run(setting: HangWatchdogConfig | bool | None, *,
                     run_dir: str | os.PathLike[str], rank: int, world_size: int,
                     store: Any | None = None) -> HangWatchdog | None:
    """The live watcher's watchdog, started, or ``None``. ``setting``: a config (on, with
    it), ``True`` (on, defaults), ``False`` (off), ``None`` (on when the run has several
    ranks or runs under ``trainmedic dist watch``, which sets ``TRAINMEDIC_HANG_DIR``: a
    single process's hang shows in its own traceback on Ctrl-C)."""
    if setting is False or (setting is None and world_size <= 1
                            and not os.environ.get(stack_hook.HANG_DIR_ENV)):
        return None
    config = setting if isinstance(setting, HangWatchdogConfig) else HangWatchdogConfig()
    return HangWatchdog(config, run_dir=run_dir, rank=rank, world_size=world_size,
                        store=store).start()
