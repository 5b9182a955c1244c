"""The stack-dump hook: every Python process that installs it writes the stacks of all its
threads to its own file when it receives :data:`DUMP_SIGNAL`, and (a torchrun worker with
torch.distributed up) its flight-recorder buffer when a dump is requested by file.

Standard library only, and self-contained: ``trainmedic dist watch`` copies this file's source
into a ``sitecustomize.py`` that every Python child loads at start-up (the child may not be
able to import trainmedic). :class:`~trainmedic.dist.watchdog.HangWatchdog` installs it too,
so a stuck data-loader worker (a forked child) can be asked for its stack.

Why a real-time signal and not SIGUSR1: SLURM's ``--signal`` and trainmedic's own preemption
handling (checkpoint/preemption.py) use SIGUSR1 and SIGTERM; SIGRTMIN+7 is used by nothing in
a training stack. Only processes that wrote a registration file are ever signalled (the
default action of an unhandled real-time signal is to terminate). ``faulthandler`` writes
from a C signal handler, so the stack comes even when the main thread is blocked in C (a
collective, a queue get) and never returns to the interpreter (Python docs, faulthandler).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time
from typing import Any

__all__ = ["DUMP_SIGNAL", "HANG_DIR_ENV", "REQUEST_FILE", "SIGNAL_PREFIX", "install",
           "uninstall", "catches_dump_signal"]

#: The signal a hook turns into a stack dump.
DUMP_SIGNAL: int = (signal.SIGRTMIN + 7) if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2
#: Names the folder dumps go to; ``trainmedic dist watch`` sets it for its children.
HANG_DIR_ENV = "TRAINMEDIC_HANG_DIR"
#: A file in the hang folder whose appearance (or newer mtime) asks every torchrun worker with
#: the hook for its flight-recorder buffer.
REQUEST_FILE = "dump.request"
#: Prefix of the per-process files the hook writes: ``signal.rank<R>.pid<P>.txt``.
SIGNAL_PREFIX = "signal."
_HEADER = "# trainmedic-stack-hook "
_MARK_ENV = "_TRAINMEDIC_STACK_HOOK_PID"
_state: dict[str, Any] = {}


def _rank_label() -> str:
    rank = os.environ.get("RANK")
    return f"rank{int(rank)}" if rank is not None and rank.strip().isdigit() else "proc"


def install(dump_dir: str, *, role: str = "process", fr_requests: bool = True) -> str | None:
    """Register the dump signal in this process (and, through ``os.register_at_fork``, in
    every child it forks while installed) to write into ``dump_dir``. Returns the file, or
    ``None`` where it cannot (no such signal, unwritable folder). Installing twice in one
    process is a no-op; :func:`uninstall` undoes it."""
    if os.environ.get(_MARK_ENV) == str(os.getpid()) and _state.get("dir") is not None:
        return str(_state.get("path"))
    try:
        os.makedirs(dump_dir, exist_ok=True)
        path = _register(dump_dir, role)
    except (OSError, ValueError, RuntimeError):
        return None
    _state["dir"] = dump_dir
    if not _state.get("fork_hook"):
        # register_at_fork cannot be undone: the hook reads the folder from _state and does
        # nothing once uninstall() cleared it.
        _state["fork_hook"] = True
        os.register_at_fork(after_in_child=_after_fork)
    if fr_requests and "RANK" in os.environ:
        _start_request_thread(dump_dir)
    return path


def uninstall() -> None:
    """Undo :func:`install` in this process: the signal goes back to its default, the file is
    closed, forked children no longer register (a watcher that closes leaves nothing armed)."""
    if _state.get("dir") is None:
        return
    try:
        faulthandler.unregister(DUMP_SIGNAL)
    except (ValueError, RuntimeError):
        pass
    f = _state.pop("file", None)
    if f is not None:
        f.close()
    _state["dir"] = None
    if os.environ.get(_MARK_ENV) == str(os.getpid()):
        del os.environ[_MARK_ENV]


def catches_dump_signal(pid: int) -> bool:
    """Whether process ``pid`` has a handler for :data:`DUMP_SIGNAL` (``SigCgt`` in
    /proc/<pid>/status, Linux): a registration file alone is not enough, since a child forked
    while the hook was armed may have exec'd another program since (``subprocess`` with a
    ``preexec_fn``), or its pid been reused, and there the signal's default action kills."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (int(DUMP_SIGNAL) - 1) & 1)
    except (OSError, ValueError, IndexError):
        return False
    return False


def _register(dump_dir: str, role: str) -> str:
    pid = os.getpid()
    path = os.path.join(dump_dir, f"{SIGNAL_PREFIX}{_rank_label()}.pid{pid}.txt")
    f = open(path, "a", buffering=1)  # noqa: SIM115 - faulthandler needs it open for good
    header = {"pid": pid, "ppid": os.getppid(), "rank": os.environ.get("RANK"), "role": role,
              "main_thread": f"0x{threading.main_thread().ident or 0:016x}",
              "argv": sys.argv[:8], "started_unix": time.time()}
    f.write(_HEADER + json.dumps(header) + "\n")
    f.flush()
    faulthandler.register(DUMP_SIGNAL, file=f, all_threads=True, chain=False)
    _state.update(file=f, path=path)
    os.environ[_MARK_ENV] = str(pid)
    return path


def _after_fork() -> None:
    # A forked child (a data-loader worker) inherits the handler and the parent's open file;
    # give it its own file so two processes never write into one.
    dump_dir = _state.get("dir")
    if dump_dir is None:
        return
    try:
        _register(dump_dir, "forked child")
    except (OSError, ValueError, RuntimeError):
        pass


def _start_request_thread(dump_dir: str) -> None:
    if _state.get("thread_pid") == os.getpid():
        return
    _state["thread_pid"] = os.getpid()
    request = os.path.join(dump_dir, REQUEST_FILE)

    def poll() -> None:
        seen = _mtime(request)
        while _state.get("dir") == dump_dir:  # until uninstall()
            time.sleep(1.0)  # one stat a second: nothing on a training step
            now = _mtime(request)
            if now is not None and now != seen:
                seen = now
                _dump_flight_recorder(dump_dir)
        _state.pop("thread_pid", None)

    threading.Thread(target=poll, name="trainmedic-fr-request", daemon=True).start()


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _dump_flight_recorder(dump_dir: str) -> None:
    """Write torch's flight-recorder buffer (JSON) next to this process's stack file."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return
        from torch._C._distributed_c10d import _dump_fr_trace_json  # type: ignore[attr-defined]

        data = _dump_fr_trace_json()
    except Exception:  # a private API: never break the training process over it
        return
    path = os.path.join(dump_dir,
                        f"{SIGNAL_PREFIX}{_rank_label()}.pid{os.getpid()}.fr.json")
    with open(path + ".tmp", "wb") as f:
        f.write(data if isinstance(data, bytes) else str(data).encode())
    os.replace(path + ".tmp", path)
