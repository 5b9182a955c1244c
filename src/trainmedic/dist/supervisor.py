"""``trainmedic dist watch -- CMD ...``: run a job (typically ``torchrun ... train.py``) with
the environment set for hang dumps, pass its output through, and when it stops making
progress for ``timeout_s`` ask every Python process of the job for its stacks.

Progress is a heartbeat whose step moved (a rank running trainmedic's watchdog), or, with no
heartbeat in the hang folder, a line of output. Every Python child loads the stack hook
(:mod:`trainmedic.dist.stack_hook`) through a ``sitecustomize.py`` in a folder prepended to
``PYTHONPATH`` (chained to any ``sitecustomize`` already on the path), so a script that does
not use trainmedic still dumps its stacks, and its flight recorder when torch.distributed is
up. The job runs in its own session: Ctrl-C or an error here ends all of it, never leaving a
child behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import pathlib
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from trainmedic.dist import stack_hook
from trainmedic.errors import ConfigError

__all__ = ["WatchRunConfig", "WatchResult", "run_watched", "dump_environment", "descendants",
           "process_groups"]

_HOOK_MARK = "# trainmedic dist watch: stack hook (sitecustomize)"
"""The first line of the hook's sitecustomize.py: how a chain tells a trainmedic hook folder
(of this ``dist watch`` or of one around it) from the user's own sitecustomize."""

_CHAIN = '''

def _trainmedic_chain() -> None:
    # Run the user's own sitecustomize, if any, from the rest of the path: once per process,
    # skipping every trainmedic hook folder (a dist watch inside a dist watch would otherwise
    # run the two hooks in turn forever). The shadowed module stands in sys.modules while it
    # runs (a package's relative imports resolve through it) and this one is put back after:
    # site.py is importing it under that name right now and looks the name up afterwards.
    import importlib.machinery
    import importlib.util
    import sys
    if getattr(sys, "_trainmedic_chained", False):
        return
    sys._trainmedic_chained = True

    def is_hook(folder):
        try:
            with open(os.path.join(folder or ".", "sitecustomize.py"), encoding="utf-8") as f:
                return f.readline().startswith(_MARK)
        except (OSError, UnicodeDecodeError):
            return False

    rest = [p for p in sys.path if not is_hook(p)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    me = sys.modules.get("sitecustomize")
    shadowed = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = shadowed
    try:
        spec.loader.exec_module(shadowed)
    except Exception as exc:  # as site.py does: said, never fatal to the job
        sys.stderr.write(f"Error in sitecustomize ({spec.origin}): "
                         f"{type(exc).__name__}: {exc}\\n")
    finally:
        if me is not None:
            sys.modules["sitecustomize"] = me


if os.environ.get(HANG_DIR_ENV):
    install(os.environ[HANG_DIR_ENV], role="process")
_trainmedic_chain()
'''


@dataclasses.dataclass(kw_only=True, frozen=True)
class WatchRunConfig:
    """How ``dist watch`` runs and watches a job."""

    timeout_s: float = 300.0
    """Seconds without progress (a heartbeat's step moving, or output) before the stacks are
    dumped."""

    hang_dir: str
    """Where the children's dumps go (``$TRAINMEDIC_HANG_DIR`` in their environment)."""

    flight_recorder_entries: int = 2000
    """``TORCH_FR_BUFFER_SIZE`` given to the job when it has none."""

    poll_s: float = 0.5
    """How often progress is checked."""

    kill_after_s: float | None = None
    """Seconds after the dumps with still no progress before the whole job is ended (SIGTERM,
    then SIGKILL), so that a launcher or ``trainmedic supervise`` can restart it; None waits
    for the job to end by itself."""

    def __post_init__(self) -> None:
        if self.kill_after_s is not None and (
                isinstance(self.kill_after_s, bool)
                or not isinstance(self.kill_after_s, (int, float))
                or not math.isfinite(self.kill_after_s) or self.kill_after_s < 0):
            raise ConfigError(f"WatchRunConfig.kill_after_s must be seconds >= 0 or None, "
                              f"got {self.kill_after_s!r}")
        for name in ("timeout_s", "poll_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v <= 0:
                raise ConfigError(f"WatchRunConfig.{name} must be seconds > 0, got {v!r}")
        if not self.hang_dir:
            raise ConfigError("WatchRunConfig.hang_dir must name a folder, got an empty one")
        n = self.flight_recorder_entries
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigError(f"WatchRunConfig.flight_recorder_entries must be an integer "
                              f">= 0, got {n!r}")


@dataclasses.dataclass(frozen=True)
class WatchResult:
    returncode: int
    hangs: int
    """How many times the job was found without progress (and signalled)."""
    signalled: list[int]
    hang_dir: pathlib.Path
    killed: bool = False
    """The job was ended for a hang (``kill_after_s``): its return code is then 124, as
    ``timeout(1)`` gives a command it stopped."""


def dump_environment(cfg: WatchRunConfig, base: dict[str, str], hook_dir: str
                     ) -> dict[str, str]:
    """The job's environment: the hook on ``PYTHONPATH`` and torch's dump settings (names
    from torch 2.13's libtorch: ``TORCH_FR_BUFFER_SIZE``, and the older
    ``TORCH_NCCL_TRACE_BUFFER_SIZE``; ``TORCH_NCCL_DUMP_ON_TIMEOUT`` makes NCCL's own watchdog
    write the buffer to ``TORCH_FR_DUMP_TEMP_FILE``<rank> on a timeout). A value the user set
    is kept."""
    env = dict(base)
    env["PYTHONPATH"] = hook_dir + (os.pathsep + env["PYTHONPATH"]
                                    if env.get("PYTHONPATH") else "")
    env[stack_hook.HANG_DIR_ENV] = cfg.hang_dir
    if cfg.flight_recorder_entries > 0:
        env.setdefault("TORCH_FR_BUFFER_SIZE", str(cfg.flight_recorder_entries))
        env.setdefault("TORCH_NCCL_TRACE_BUFFER_SIZE", str(cfg.flight_recorder_entries))
        env.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
        env.setdefault("TORCH_FR_DUMP_TEMP_FILE",
                       os.path.join(cfg.hang_dir, "nccl_flight_recorder.rank"))
    return env


def _write_hook(folder: str) -> None:
    source = pathlib.Path(stack_hook.__file__).read_text()
    pathlib.Path(folder, "sitecustomize.py").write_text(
        f"{_HOOK_MARK}\n{source}\n_MARK = {_HOOK_MARK!r}\n{_CHAIN}")


def _heartbeat_steps(hang_dir: pathlib.Path, since_unix: float) -> tuple[dict[str, Any], bool]:
    """Each rank's last heartbeat step written since ``since_unix`` (an earlier run's files in
    the folder are not this job's), and whether a rank's own watchdog is judging it now: in
    an eval or checkpoint phase, or before its first step (it has longer limits there, and
    dumps by itself when they run out)."""
    steps: dict[str, Any] = {}
    own_limits = False
    for p in hang_dir.glob("heartbeat.rank*.json"):
        try:
            if p.stat().st_mtime < since_unix:
                continue
            doc = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        steps[p.name] = doc.get("step")
        own_limits = own_limits or doc.get("phase") is not None or doc.get("step") is None
    return steps, own_limits


def descendants(root: int) -> set[int]:
    """Every live descendant of ``root``, from /proc (Linux). Not the session: torchrun
    starts each rank in a session of its own (elastic's subprocess_handler)."""
    children: dict[int, list[int]] = {}
    try:
        entries = list(os.scandir("/proc"))
    except OSError:  # no /proc (macOS): only the process groups are reached
        return set()
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for kid in children.get(todo.pop(), []):
            if kid not in found:
                found.add(kid)
                todo.append(kid)
    return found


def process_groups(pids: set[int]) -> set[int]:
    """The process groups of those of ``pids`` still alive."""
    groups = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(pid))
    return groups


def _hooked_pids(hang_dir: pathlib.Path, root: int) -> list[int]:
    """The job's processes that installed the hook (only those are signalled: the default
    action of the signal is to terminate)."""
    job = descendants(root) | {root}
    pids = set()
    for p in hang_dir.glob(f"{stack_hook.SIGNAL_PREFIX}*.pid*.txt"):
        try:
            pid = int(p.name.rsplit(".pid", 1)[1].split(".")[0])
        except (IndexError, ValueError):
            continue
        if pid in job and stack_hook.catches_dump_signal(pid):  # else the signal kills
            pids.add(pid)
    return sorted(pids)


def run_watched(cmd: Sequence[str], cfg: WatchRunConfig,
                on_line: Callable[[str], None]) -> WatchResult:
    """Run ``cmd`` to its end; ``on_line`` gets each line of its output (stdout and stderr
    merged). Ctrl-C ends the whole job (SIGTERM, then SIGKILL after 5 s) and re-raises."""
    hang_dir = pathlib.Path(cfg.hang_dir)
    hang_dir.mkdir(parents=True, exist_ok=True)
    signalled: list[int] = []
    hangs = 0
    killed = False
    with tempfile.TemporaryDirectory(prefix="trainmedic-hook-") as hook_dir:
        _write_hook(hook_dir)
        env = dump_environment(cfg, dict(os.environ), hook_dir)
        try:
            proc = subprocess.Popen(list(cmd), env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, errors="replace",
                                    start_new_session=True)
        except OSError as exc:
            raise ConfigError(f"dist watch: cannot run {cmd[0]!r} ({exc}); give the command "
                              f"after --, e.g. trainmedic dist watch -- torchrun ...") from None
        last_out = [time.monotonic()]
        started_unix = time.time()

        def pump() -> None:
            assert proc.stdout is not None
            passing = True
            for line in proc.stdout:  # drained to the end even when our reader went away,
                last_out[0] = time.monotonic()  # or the job would block on a full pipe
                if passing:
                    try:
                        on_line(line.rstrip("\n"))
                    except (BrokenPipeError, OSError, ValueError):
                        passing = False

        reader = threading.Thread(target=pump, daemon=True, name="trainmedic-watch-output")
        reader.start()
        previous = {}  # SIGTERM / SIGHUP to us end the job too, as Ctrl-C does
        if threading.current_thread() is threading.main_thread():
            previous = {sig: signal.signal(sig, _raise_interrupt)
                        for sig in (signal.SIGTERM, signal.SIGHUP)}
        try:
            steps, _ = _heartbeat_steps(hang_dir, started_unix)
            progress_t = time.monotonic()
            stalled = False
            dumped_t = 0.0
            while proc.poll() is None:
                time.sleep(cfg.poll_s)
                now_steps, own_limits = _heartbeat_steps(hang_dir, started_unix)
                if now_steps != steps or own_limits:
                    steps, progress_t, stalled = now_steps, time.monotonic(), False
                elif not steps and last_out[0] > progress_t:
                    progress_t, stalled = last_out[0], False
                if not stalled and time.monotonic() - progress_t > cfg.timeout_s:
                    stalled = True
                    hangs += 1
                    signalled += _dump_job(hang_dir, proc.pid)
                    dumped_t = time.monotonic()
                    continue  # progress is looked at again before any kill
                if stalled and cfg.kill_after_s is not None and \
                        time.monotonic() - dumped_t >= cfg.kill_after_s:
                    if proc.poll() is not None:
                        break  # it ended by itself: its own status stands
                    killed = True
                    _end_tree(proc)
                    break
            proc.wait()
            reader.join(timeout=5.0)
        except BaseException:
            _end_job(proc)
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    rc = proc.returncode
    # A job killed by signal N: the shell's 128 + N (Popen says -N, which exit() would wrap).
    code = 124 if killed else (128 - rc if rc < 0 else rc)
    return WatchResult(returncode=code, hangs=hangs, signalled=signalled, hang_dir=hang_dir,
                       killed=killed)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _dump_job(hang_dir: pathlib.Path, root: int) -> list[int]:
    (hang_dir / stack_hook.REQUEST_FILE).write_text(str(time.time()))  # flight recorders
    sent = []
    for pid in _hooked_pids(hang_dir, root):
        try:
            os.kill(pid, stack_hook.DUMP_SIGNAL)
            sent.append(pid)
        except OSError:
            continue
    time.sleep(1.5)  # the hook threads look for the request once a second
    return sent


def _end_tree(proc: subprocess.Popen[str], grace_s: float = 5.0) -> None:
    """End a hung job and everything it started: SIGTERM to the job's process group and to
    the groups of its descendants (torchrun's workers run in sessions of their own, and
    torchrun SIGKILLed before its own wait would orphan them), then, after ``grace_s``, SIGKILL
    to every one still alive (a rank blocked in a collective ignores SIGTERM)."""
    pids = descendants(proc.pid) | {proc.pid}
    groups = (process_groups(pids) | {proc.pid}) - {os.getpgrp()}
    for g in groups:
        with contextlib.suppress(OSError):
            os.killpg(g, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not _alive(pids - {proc.pid}):
            return
        time.sleep(0.05)
    for g in groups:
        with contextlib.suppress(OSError):
            os.killpg(g, signal.SIGKILL)
    for pid in _alive(pids):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie, dead but not yet reaped, is not)."""
    out = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            out.add(pid)
    return out


def _end_job(proc: subprocess.Popen[str]) -> None:
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
