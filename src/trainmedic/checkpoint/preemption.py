"""Preemption: save at the next step boundary when the scheduler says the job must go.

SLURM sends ``--signal=USR1@90`` (or SIGTERM at the time limit, then SIGKILL after
``KillWait``, 30 s by default); Kubernetes and most clouds send SIGTERM before a kill.
:class:`PreemptionWatch` turns SIGTERM and SIGUSR1 into a flag the loop reads at its next step
boundary (a handler does nothing else: saving from inside a signal handler could interrupt
an optimizer step half done). The runner then saves and stops; the process should exit with
:data:`EXIT_PREEMPTED` (75, ``EX_TEMPFAIL`` of sysexits.h: "temporary failure, retry"), so a
wrapper script can tell "preempted, saved, resume me" (75) from "done" (0) and "failed"
(anything else). ``trainmedic demo`` does so.

A second signal of the same kind while the first is pending restores the previous handlers
and re-raises it: a user pressing Ctrl-\\ twice, or a scheduler that lost patience, gets the
default action (termination) instead of waiting for the step to end.

The save-now flag file (``flag_file``, e.g. ``ROOT/SAVE_NOW``): ``touch`` it and the loop
saves at the next step boundary, deletes it, and goes on training. It is stat()ed once per
step (~2 us).

Under torch.distributed every rank must save at the same step: :meth:`PreemptionWatch.poll`
all-reduces the two flags (max) over the default process group, one 2-element collective per
step (on the current CUDA device for NCCL: a host-device sync per step; ``poll_every`` > 1
trades it for up to that many steps of delay).
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from trainmedic.errors import ConfigError

__all__ = ["EXIT_PREEMPTED", "PreemptionWatch", "Preempted"]

logger = logging.getLogger(__name__)

#: Exit status of a process that saved and stopped on a preemption signal (EX_TEMPFAIL).
EXIT_PREEMPTED = 75

_DEFAULT_SIGNALS = ("SIGTERM", "SIGUSR1")


class Preempted(Exception):  # noqa: N818 - an outcome, not an error
    """Raised by a loop that saved and stopped on a preemption signal (``trainmedic demo``);
    not a failure: the caller exits with :data:`EXIT_PREEMPTED`."""

    def __init__(self, step: int, path: Path | None, signum: int | None) -> None:
        self.step = step
        self.path = path
        self.signum = signum
        name = signal.Signals(signum).name if signum else "a request"
        super().__init__(f"stopped by {name} at step {step}; saved {path}")


class PreemptionWatch:
    """Context manager: while entered, ``signals`` set a stop flag and ``flag_file`` asks for
    a save. Handlers are installed on enter and the previous ones put back on exit (signal
    handlers can only be set from the main thread: elsewhere it logs a warning and watches
    only the flag file)."""

    def __init__(self, *, signals: tuple[str, ...] = _DEFAULT_SIGNALS,
                 flag_file: str | Path | None = None, poll_every: int = 1) -> None:
        resolved: list[signal.Signals] = []
        for name in signals:
            sig = getattr(signal, name, None) if isinstance(name, str) else None
            if not isinstance(sig, signal.Signals):
                raise ConfigError(f"signals: {name!r} is not a signal of this platform; "
                                  f"expected names like {', '.join(_DEFAULT_SIGNALS)}")
            resolved.append(sig)
        if isinstance(poll_every, bool) or not isinstance(poll_every, int) or poll_every < 1:
            raise ConfigError(f"poll_every must be an integer >= 1, got {poll_every!r}")
        self.signals = tuple(resolved)
        self.flag_file = Path(flag_file) if flag_file is not None else None
        self.poll_every = poll_every
        self.signal_received: int | None = None
        self._previous: dict[signal.Signals, Any] = {}
        self._polls = 0

    # -- handlers ------------------------------------------------------------------------------
    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal_received == signum:
            # The second time: give up waiting for the step boundary.
            self._restore()
            signal.raise_signal(signum)
            return
        self.signal_received = signum

    def __enter__(self) -> PreemptionWatch:
        if threading.current_thread() is not threading.main_thread():
            logger.warning("PreemptionWatch entered outside the main thread: signals are not "
                           "watched, only the flag file")
            return self
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _restore(self) -> None:
        for sig, prev in self._previous.items():
            signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
        self._previous.clear()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._restore()

    # -- polling -------------------------------------------------------------------------------
    @property
    def stop_requested(self) -> bool:
        """A watched signal arrived (this rank only; :meth:`poll` agrees across ranks)."""
        return self.signal_received is not None

    @property
    def save_requested(self) -> bool:
        """The flag file exists (this rank only)."""
        return self.flag_file is not None and self.flag_file.exists()

    def poll(self) -> str | None:
        """At a step boundary: ``"stop"`` (save, then stop), ``"save"`` (save, go on) or
        ``None``; the same answer on every rank."""
        self._polls += 1
        if self._polls % self.poll_every:
            return None
        # Only rank 0 reads the flag file: it deletes it after the save, and another rank
        # reading it meanwhile would ask for a second save.
        stop, save = self.stop_requested, _rank() == 0 and self.save_requested
        stop, save = _agree(stop, save)
        if stop and self.signal_received is None:
            self.signal_received = int(signal.SIGTERM)  # another rank got it
        return "stop" if stop else "save" if save else None

    def clear_save_request(self) -> None:
        """Delete the flag file after the save it asked for (rank 0 deletes it)."""
        if self.flag_file is not None and _rank() == 0:
            self.flag_file.unlink(missing_ok=True)


def _rank() -> int:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return 0


def _agree(stop: bool, save: bool) -> tuple[bool, bool]:
    """Max of both flags over every rank (no-op without an initialized process group)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return stop, save
    device = torch.device("cpu")
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    flags = torch.tensor([int(stop), int(save)], dtype=torch.int32, device=device)
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    got = flags.tolist()
    return bool(got[0]), bool(got[1])
