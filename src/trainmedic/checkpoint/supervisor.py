"""``trainmedic supervise -- CMD``: run a training command, restart it from the newest
trustworthy checkpoint when it is preempted or fails, and record what each incident cost.

The contract with the command (see docs/recovery.md):

* Exit 0: done. Exit 75 (``EX_TEMPFAIL``, :data:`~trainmedic.checkpoint.preemption.EXIT_PREEMPTED`):
  saved and stopped on a preemption signal, restart it. Any other status, or death by a
  signal (an OOM kill, ``kill -9``): a failure, restart it too (up to ``max_restarts``).
* Before every start the supervisor finds the newest committed checkpoint under
  ``checkpoint_dir`` that verifies (``trainmedic ckpt latest``, skipping those saved at or
  after a divergence when a ``divergence_onset`` callable is given) and passes it on:
  ``TRAINMEDIC_RESUME_FROM`` (its path) and ``TRAINMEDIC_RESUME_STEP`` in the environment
  (unset when there is none yet), and ``{checkpoint}`` in the command's arguments replaced by
  the path (with none yet, an argument ``{checkpoint}`` is dropped with the option before it
  when that starts with ``-``, and ``--opt={checkpoint}`` is dropped). ``TRAINMEDIC_RESTART``
  says which attempt this is (0 first).
* ``TRAINMEDIC_HEARTBEAT`` names a file where ``RecipeRunner`` (so ``trainmedic demo``) writes
  the steps done after every step: the exact progress at a kill, which the run store (written
  in batches, up to ~1.5 s behind) cannot give. A loop of one's own may write it too (the
  step count as text).

The child runs in its own session (process group); SIGTERM / SIGINT to the supervisor are
forwarded to the whole group and stop the restarts (one that arrives while the supervisor looks
for the checkpoint, or while it starts the child, too: it starts nothing more, or passes the
signal on as soon as the child exists). A group still running ``kill_grace_s`` after the
forwarded signal gets SIGKILL (a rank stuck in a collective ignores SIGTERM), and on every way
out the group is killed (SIGTERM, then SIGKILL after the grace): no child is left behind. On
Linux the child also gets ``PR_SET_PDEATHSIG=SIGKILL``, so a supervisor killed outright (``kill
-9``, the OOM killer) does not leave it running. A command that cannot be started (not found,
not executable) raises :class:`~trainmedic.errors.InputError` naming it; a restart that cannot
fork (EAGAIN, ENOMEM, as after an OOM kill) is tried again with backoff, within
``max_restarts``.

Each incident is recorded in the run store (``RunStore.event``, kind ``supervise_incident``):
the outcome, exit code or signal, the failure class ``trainmedic explain`` finds in the last
lines of the command's output (when it recognises one), the checkpoint the restart resumes
from and its step, the steps done when it stopped and the steps lost (measured: the
heartbeat's or the store's last step of that attempt, minus the checkpoint's step). A
``supervise_summary`` event closes the session (wall time, attempts, incidents, total lost):
``trainmedic ckpt plan`` reads MTBF from them. Under SLURM, ``requeue=True`` runs ``scontrol
requeue $SLURM_JOB_ID`` instead of restarting in place (untested here: no SLURM).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import errno
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmedic.checkpoint.preemption import EXIT_PREEMPTED
from trainmedic.checkpoint.recovery import (
    INCIDENT_EVENT,
    SUMMARY_EVENT,
    Incident,
    SuperviseResult,
    read_heartbeat,
    record,
    resume_point,
    store_marks,
    store_steps_done,
)
from trainmedic.errors import ConfigError, InputError

__all__ = ["SuperviseConfig", "Supervisor", "Incident", "SuperviseResult", "supervise",
           "decide", "classify",
           "substitute_checkpoint", "HEARTBEAT_ENV", "RESUME_ENV", "RESUME_STEP_ENV",
           "RESTART_ENV", "INCIDENT_EVENT", "SUMMARY_EVENT"]

logger = logging.getLogger(__name__)

HEARTBEAT_ENV = "TRAINMEDIC_HEARTBEAT"
RESUME_ENV = "TRAINMEDIC_RESUME_FROM"
RESUME_STEP_ENV = "TRAINMEDIC_RESUME_STEP"
RESTART_ENV = "TRAINMEDIC_RESTART"
PLACEHOLDER = "{checkpoint}"
_POLL_S = 0.1
"""How often the wait for the child looks at the stop flag (the latency of a forwarded stop)."""
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass(kw_only=True, frozen=True)
class SuperviseConfig:
    """What :func:`supervise` runs and how it restarts it."""

    command: tuple[str, ...]
    """The command and its arguments (may hold ``{checkpoint}``)."""

    run_dir: Path
    """The run's store, where incidents are recorded (created when absent)."""

    checkpoint_dir: Path | None = None
    """Where the command's checkpoints are; ``None``: ``<run_dir>/checkpoints``."""

    max_restarts: int = 3
    """Restarts allowed after the first start (>= 0)."""

    backoff_s: float = 1.0
    """Wait before the first restart, doubled each time (>= 0)."""

    backoff_max_s: float = 60.0
    """The longest wait between restarts (>= backoff_s)."""

    requeue: bool = False
    """Under SLURM (``SLURM_JOB_ID`` set), requeue the job instead of restarting in place."""

    tail_lines: int = 200
    """Last lines of the command's output kept for ``explain`` (>= 1)."""

    kill_grace_s: float = 45.0
    """After forwarding a stop (SIGTERM / SIGINT), seconds before the group (and its
    descendants' groups) gets SIGKILL (> 0). 45 s: longer than torchrun's own 30 s grace for
    its workers (and SLURM's default KillWait), so torchrun stops them first."""

    def __post_init__(self) -> None:
        cmd = self.command
        if isinstance(cmd, str) or not isinstance(cmd, (tuple, list)) or not cmd \
                or not all(isinstance(a, str) for a in cmd):
            raise ConfigError(f"command must be a non-empty list of strings, got {cmd!r}; "
                              "put it after `--`: trainmedic supervise -- python train.py")
        object.__setattr__(self, "command", tuple(cmd))
        for name in ("run_dir", "checkpoint_dir"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                if not isinstance(value, (str, os.PathLike)):
                    raise ConfigError(f"{name} must be a path, got {value!r}")
                object.__setattr__(self, name, Path(value))
        if isinstance(self.max_restarts, bool) or not isinstance(self.max_restarts, int) \
                or self.max_restarts < 0:
            raise ConfigError(f"max_restarts must be an integer >= 0, got {self.max_restarts!r}")
        for name in ("backoff_s", "backoff_max_s", "kill_grace_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise ConfigError(f"{name} must be a number of seconds >= 0, got {v!r}")
        if self.kill_grace_s == 0:
            raise ConfigError("kill_grace_s must be > 0 seconds, got 0")
        if self.backoff_max_s < self.backoff_s:
            raise ConfigError(f"backoff_max_s must be >= backoff_s ({self.backoff_s}), got "
                              f"{self.backoff_max_s}")
        if isinstance(self.tail_lines, bool) or not isinstance(self.tail_lines, int) \
                or self.tail_lines < 1:
            raise ConfigError(f"tail_lines must be an integer >= 1, got {self.tail_lines!r}")
        if not isinstance(self.requeue, bool):
            raise ConfigError(f"requeue must be True or False, got {self.requeue!r}")

    @property
    def checkpoints(self) -> Path:
        return self.checkpoint_dir if self.checkpoint_dir is not None \
            else self.run_dir / "checkpoints"


# ---------------------------------------------------------------------------------- pure parts
def substitute_checkpoint(command: Sequence[str], checkpoint: str | None) -> list[str]:
    """``command`` with ``{checkpoint}`` replaced by ``checkpoint``; with none, ``-o
    {checkpoint}`` and ``--o={checkpoint}`` are dropped (a fresh start)."""
    out: list[str] = []
    for arg in command:
        if PLACEHOLDER not in arg:
            out.append(arg)
        elif checkpoint is not None:
            out.append(arg.replace(PLACEHOLDER, checkpoint))
        elif arg == PLACEHOLDER:
            if out and out[-1].startswith("-"):
                out.pop()
        elif not arg.startswith("-"):
            out.append(arg.replace(PLACEHOLDER, ""))
    return out


def decide(outcome: str, *, restarts_done: int, max_restarts: int, stop_requested: bool,
           requeue: bool, environ: Mapping[str, str]) -> str:
    """After a stop: ``done`` (exit 0), ``stop`` (we were signalled), ``give_up`` (no
    restarts left), ``requeue`` (SLURM and ``requeue``) or ``restart``."""
    if outcome == "done":
        return "done"
    if stop_requested:
        return "stop"
    if restarts_done >= max_restarts:
        return "give_up"
    if requeue and environ.get("SLURM_JOB_ID"):
        return "requeue"
    return "restart"


def classify(returncode: int) -> tuple[str, int | None, str | None]:
    """(outcome, exit code, signal name) of a ``Popen.returncode``."""
    if returncode == 0:
        return "done", 0, None
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return "killed", None, name
    if returncode == EXIT_PREEMPTED:
        return "preempted", returncode, None
    return "failed", returncode, None


# ------------------------------------------------------------------------------- the child
class _Child:
    """One start of the command in its own process group, its output echoed and tailed."""

    def __init__(self, argv: list[str], env: Mapping[str, str], tail_lines: int,
                 echo: Callable[[str], None] | None) -> None:
        self.tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        try:
            self.proc = subprocess.Popen(argv, env=dict(env), stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True,
                                         preexec_fn=_die_with_parent())
        except OSError as exc:  # not found, not executable, not a binary (ENOEXEC)
            raise _start_error(argv[0], exc) from exc
        self.pgid = self.proc.pid  # a new session's leader: its pid is the group id
        self.stop_forwarded_at: float | None = None
        self.killed = False
        self.groups: set[int] = set()
        self._echo = echo
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name="trainmedic-supervise-output")
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            self.tail.append(line)
            if self._echo is not None:
                self._echo(line)

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signum)
        if signum == signal.SIGKILL:
            # torchrun starts each worker in a session of its own: killing the leader's group
            # does not reach them, and a worker stuck in a collective would keep its GPU.
            self.groups |= _descendant_groups(self.proc.pid)
            for pgid in self.groups - {self.pgid}:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)

    def note_groups(self) -> None:
        """Remember the process groups of the leader's descendants while it lives (once it
        exits they are re-parented and cannot be found from it)."""
        self.groups |= _descendant_groups(self.proc.pid)

    def wait(self, grace_s: float, stop: threading.Event, stop_signal: Callable[[], int]) -> int:
        """Wait for the leader's exit. Once ``stop`` is set (by the supervisor's signal
        handler, which may have run before this child existed), pass ``stop_signal()`` to the
        group once, and SIGKILL the group ``grace_s`` later if the leader still runs."""
        while True:
            if stop.is_set():
                now = time.monotonic()
                self.note_groups()
                if self.stop_forwarded_at is None:
                    self.stop_forwarded_at = now
                    self.signal_group(stop_signal())
                elif not self.killed and now - self.stop_forwarded_at >= grace_s:
                    logger.warning("the command (process group %d) still runs %.1f s after the "
                                   "stop signal: SIGKILL", self.pgid, grace_s)
                    self.signal_group(signal.SIGKILL)
                    self.killed = True
            try:
                rc = self.proc.wait(timeout=_POLL_S)
                break
            except subprocess.TimeoutExpired:
                continue
        # What is left in the group once the leader is gone is an orphan (it may hold the
        # output pipe open, so the reader would wait on it): TERM, then KILL after the grace.
        self.signal_group(signal.SIGTERM)
        self._reader.join(timeout=grace_s)
        if self._reader.is_alive():
            self.signal_group(signal.SIGKILL)
            self._reader.join(timeout=5.0)
        return rc

    def reap(self, grace_s: float) -> None:
        """Leave nothing behind: TERM the group, KILL it (and its descendants' groups) after
        ``grace_s``."""
        if self.proc.poll() is None:
            self.note_groups()
            self.signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        # Grandchildren may outlive the leader (a torchrun's workers): the group goes too.
        self.signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace_s)


# --------------------------------------------------------------------------------- the loop
class Supervisor:
    """Runs :func:`supervise`; ``child`` is the running start (for tests and the CLI).

    ``divergence_onset()``: the step from which checkpoints are not trusted (None: all are);
    ``explain_tail(lines)``: (failure class, summary) of the command's last output lines
    (the CLI passes ``trainmedic.explain``'s; ``checkpoint/`` does not import it);
    ``echo(line)``: each output line of the command; ``on_event(kind, data)``: ``start``,
    ``incident``, ``backoff``; ``requeue_fn(job_id)``: ``scontrol requeue`` by default."""

    def __init__(self, config: SuperviseConfig, *,
                 divergence_onset: Callable[[], int | None] | None = None,
                 echo: Callable[[str], None] | None = None,
                 on_event: Callable[[str, Mapping[str, Any]], None] | None = None,
                 sleep: Callable[[float], None] | None = None,
                 requeue_fn: Callable[[str], int] | None = None,
                 explain_tail: Callable[[list[str]], tuple[str | None, str | None]] | None
                 = None) -> None:
        self.config = config
        self.explain_tail = explain_tail
        self.session = f"{os.getpid()}-{time.time_ns()}"
        self.divergence_onset = divergence_onset
        self.echo = echo
        self.on_event = on_event
        self.child: _Child | None = None
        self.stop_signal: int | None = None
        self._stop = threading.Event()
        self._sleep = sleep
        self._requeue_fn = requeue_fn or _scontrol_requeue

    def _say(self, what: str, data: Mapping[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(what, data)

    def _handle(self, signum: int, frame: Any) -> None:
        # Only flags: the wait loop (the same thread) passes the signal on, exactly once, to
        # whichever child exists then -- also one started after this ran.
        if self.stop_signal is None:
            self.stop_signal = signum
        self._stop.set()

    def _stop_signum(self) -> int:
        return self.stop_signal if self.stop_signal is not None else int(signal.SIGTERM)

    def _stopped_before_start(self, result: SuperviseResult) -> bool:
        """A stop that arrived while no child ran (during the checkpoint search, the backoff):
        start nothing more."""
        if not self._stop.is_set():
            return False
        result.final = "stopped"
        if not result.incidents:  # no status of a child to pass on: the shell's 128 + signal
            result.exit_code = 128 + self._stop_signum()
        return True

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.signal(s, self._handle) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)

    def run(self) -> SuperviseResult:
        cfg = self.config
        cfg.run_dir.mkdir(parents=True, exist_ok=True)
        heartbeat = cfg.run_dir / ".supervise-heartbeat"
        result = SuperviseResult(exit_code=0)
        t0 = time.monotonic()
        resumed_from: str | None = None
        start_error: InputError | None = None
        start_retries = 0
        with self._signals():
            try:
                while True:
                    if self._stopped_before_start(result):
                        break
                    ckpt, ckpt_step = resume_point(cfg.checkpoints, self.divergence_onset)
                    resumed_from, start_step = ckpt, ckpt_step
                    argv = substitute_checkpoint(cfg.command, ckpt)
                    env = dict(os.environ)
                    for k in (RESUME_ENV, RESUME_STEP_ENV):
                        env.pop(k, None)
                    if ckpt is not None:
                        env[RESUME_ENV], env[RESUME_STEP_ENV] = ckpt, str(ckpt_step)
                    env[RESTART_ENV] = str(result.attempts)
                    env[HEARTBEAT_ENV] = str(heartbeat)
                    heartbeat.unlink(missing_ok=True)
                    marks = store_marks(cfg.run_dir)
                    # Verifying the checkpoint and reading the divergence onset take seconds.
                    if self._stopped_before_start(result):
                        break
                    started = time.monotonic()
                    try:
                        self.child = _Child(argv, env, cfg.tail_lines, self.echo)
                    except InputError as exc:
                        if result.attempts and _transient(exc.__cause__) \
                                and start_retries < cfg.max_restarts:
                            # A restart that cannot fork (EAGAIN, ENOMEM: the crash that
                            # preceded it may still hold the memory) is tried again, within
                            # the restart budget; a first start that fails is the command's.
                            start_retries += 1
                            wait = min(cfg.backoff_max_s,
                                       cfg.backoff_s * 2 ** (start_retries - 1))
                            self._say("start_retry", {"error": str(exc.__cause__),
                                                      "wait_s": wait})
                            if self._sleep is not None:
                                self._sleep(wait)
                            elif self._stop.wait(wait):
                                result.final = "stopped"
                                break
                            continue
                        if result.attempts:
                            # The command ran before: no usage error, the restarts end here
                            # with the last attempt's status.
                            self._say("start_failed", {"error": str(exc.__cause__ or exc)})
                            result.final = "gave_up"
                            break
                        start_error = exc
                        result.final = "start_failed"
                        # The shell's statuses: 127 not found, 126 found but not executable.
                        result.exit_code = 127 if isinstance(exc.__cause__,
                                                             FileNotFoundError) else 126
                        break
                    start_retries = 0  # each restart gets the whole retry budget
                    # Said once it started: a command that cannot start gets one line.
                    self._say("start", {"attempt": result.attempts, "checkpoint": ckpt,
                                        "checkpoint_step": ckpt_step, "argv": argv})
                    result.attempts += 1
                    # A stop that came before now (even between Popen and `self.child = ...`,
                    # when the handler saw no child) is passed on at wait's first look.
                    rc = self.child.wait(cfg.kill_grace_s, self._stop, self._stop_signum)
                    uptime = time.monotonic() - started
                    tail = list(self.child.tail)
                    self.child.reap(cfg.kill_grace_s)  # what it left in its group
                    self.child = None
                    outcome, code, sig = classify(rc)
                    result.exit_code = code if code is not None else 128 + (-rc)
                    if outcome == "done":
                        result.final = "done"
                        break
                    incident = self._incident(result, outcome, code, sig, tail, uptime,
                                              resumed_from, start_step, heartbeat, marks)
                    result.incidents.append(incident)
                    record(cfg.run_dir, result.incidents, session=self.session)
                    self._say("incident", incident.to_dict())
                    if incident.action == "stop":
                        result.final = "stopped"
                        break
                    if incident.action == "give_up":
                        result.final = "gave_up"
                        break
                    if incident.action == "requeue":
                        job = os.environ.get("SLURM_JOB_ID", "")
                        rq = self._requeue_fn(job)
                        result.final = "requeued" if rq == 0 else "gave_up"
                        result.exit_code = EXIT_PREEMPTED if rq == 0 else result.exit_code
                        break
                    wait = min(cfg.backoff_max_s, cfg.backoff_s * 2 ** (len(result.incidents)
                                                                        - 1))
                    self._say("backoff", {"wait_s": wait})
                    if self._sleep is not None:
                        self._sleep(wait)
                    elif self._stop.wait(wait):
                        result.final = "stopped"
                        break
            finally:
                if self.child is not None:
                    self.child.reap(cfg.kill_grace_s)
                    self.child = None
                heartbeat.unlink(missing_ok=True)
        result.wall_s = time.monotonic() - t0
        record(cfg.run_dir, result.incidents, session=self.session, summary=result.summary())
        if start_error is not None:
            raise start_error
        return result

    def _incident(self, result: SuperviseResult, outcome: str, code: int | None,
                  sig: str | None, tail: list[str], uptime: float, resumed_from: str | None,
                  start_step: int, heartbeat: Path, marks: Mapping[str, int]) -> Incident:
        cfg = self.config
        beat = read_heartbeat(heartbeat)
        stored = store_steps_done(cfg.run_dir, marks)
        done, source = None, "none"
        if beat is not None and (stored is None or beat >= stored):
            done, source = beat, "heartbeat"
        elif stored is not None:
            done, source = stored, "run store"
        # The checkpoint the next start will take: the newest trustworthy one now.
        ckpt, ckpt_step = resume_point(cfg.checkpoints, self.divergence_onset)
        lost = max(0, done - ckpt_step) if done is not None else None
        klass, summary = (self.explain_tail(tail) if self.explain_tail is not None and tail
                          else (None, None))
        action = decide(outcome, restarts_done=result.attempts - 1,
                        max_restarts=cfg.max_restarts, stop_requested=self._stop.is_set(),
                        requeue=cfg.requeue, environ=os.environ)
        return Incident(attempt=result.attempts - 1, outcome=outcome, exit_code=code,
                        signal=sig, failure_class=klass, failure_summary=summary,
                        resumed_from=resumed_from, start_step=start_step,
                        checkpoint=ckpt, checkpoint_step=ckpt_step,
                        steps_done=done, lost_steps=lost, lost_source=source,
                        uptime_s=uptime, action=action)


def _transient(exc: BaseException | None) -> bool:
    """A fork that failed for want of memory or processes (EAGAIN, ENOMEM), which a later
    try can pass: not a missing or non-executable program."""
    return isinstance(exc, OSError) and exc.errno in (errno.EAGAIN, errno.ENOMEM)


def _start_error(program: str, exc: OSError) -> InputError:
    if isinstance(exc, FileNotFoundError):
        why = ("not found (no such file, or not on PATH); expected a program after `--`, e.g. "
               "trainmedic supervise --run-dir runs/x -- python train.py")
    elif isinstance(exc, PermissionError):
        why = ("not executable (permission denied); make it executable (chmod +x) or run it "
               "through its interpreter (-- sh script.sh, -- python train.py)")
    else:
        why = (f"cannot be started ({exc.strerror or exc}); expected a program after `--`, e.g. "
               "-- python train.py")
    return InputError(program, f"the command to supervise is {why}")


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the kernel SIGKILL the child when the supervisor dies
    (``prctl(PR_SET_PDEATHSIG)``, Linux only; None elsewhere or without libc).

    Caveats (prctl(2), the subprocess docs): it fires when the *thread* that forked the child
    exits, and :meth:`Supervisor.run` starts, waits for and reaps every child in one thread;
    it covers the child only, not its own children (the group kill does that while we live);
    an exec of a set-user-ID program clears it. ``preexec_fn`` runs Python between fork and
    exec, which the docs call unsafe with threads (a lock held by another thread at the fork
    stays held in the child): this one only calls a C function resolved here, before the fork,
    and ``os.getppid``. The parent may die before the prctl call: then the child kills itself.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError) as exc:
        logger.debug("no prctl (%s): a killed supervisor may leave its child running", exc)
        return None
    parent = os.getpid()
    sigkill = int(signal.SIGKILL)

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, sigkill, 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died between the fork and the prctl
            os.kill(os.getpid(), sigkill)

    return preexec


def _scontrol_requeue(job_id: str) -> int:
    """``scontrol requeue JOB`` (SLURM); its exit status. Untested here (no SLURM)."""
    try:
        return subprocess.run(["scontrol", "requeue", job_id], check=False,
                              timeout=60).returncode
    except (OSError, subprocess.TimeoutExpired) as exc:
        logger.error("scontrol requeue %s failed: %s", job_id, exc)
        return 1


def supervise(config: SuperviseConfig, **kwargs: Any) -> SuperviseResult:
    """Run ``config.command`` until it succeeds or the restarts run out (see the module doc);
    ``kwargs`` go to :class:`Supervisor` (``divergence_onset``, ``echo``, ``on_event``)."""
    return Supervisor(config, **kwargs).run()


def _descendant_groups(root: int) -> set[int]:
    """Process groups of ``root``'s live descendants (the /proc walk is ``dist watch``'s)."""
    from trainmedic.dist.supervisor import descendants, process_groups

    return process_groups(descendants(root))
