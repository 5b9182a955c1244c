"""Reading a Python stack: ``faulthandler``'s dump and a traceback's text, parsed into frames,
and where a thread is: in a collective, in the data loader, asleep, or in user code.

faulthandler's format (CPython Python/traceback.c, ``dump_traceback``)::

    Thread 0x00007f3c2a1fe700 (most recent call first):
      File "/path/train.py", line 88 in train_step

innermost frame first; the thread id is ``threading.get_ident()`` in hex, which is how the
watchdog's dump names the main thread. A traceback's text lists the innermost frame last.
"""

from __future__ import annotations

import dataclasses
import linecache
import re

__all__ = ["COLLECTIVES", "Frame", "Location", "ThreadStack", "locate", "parse_faulthandler",
           "parse_traceback", "main_thread"]

#: torch.distributed's collectives (torch/distributed/distributed_c10d.py), as the function
#: names that show in a stack.
COLLECTIVES = frozenset({
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor",
    "all_gather_object", "all_gather_coalesced", "all_to_all", "all_to_all_single",
    "barrier", "monitored_barrier", "broadcast", "broadcast_object_list", "gather",
    "gather_object", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter",
    "scatter_object_list", "send", "recv", "batch_isend_irecv", "_all_gather_base",
    "_reduce_scatter_base",
})
_C10D_FILES = ("torch/distributed/distributed_c10d.py",)
#: DataLoader frames a main thread waits in for a batch (torch/utils/data/dataloader.py).
_LOADER_FILE = "torch/utils/data/dataloader.py"
_LOADER_FUNCS = frozenset({"__next__", "_next_data", "_get_data", "_try_get_data"})
_LIBRARY_MARKS = ("/site-packages/", "/dist-packages/", "<frozen ", "/lib/python3.",
                  "/trainmedic/dist/")
_THREAD_RE = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)")
_FH_FRAME_RE = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')
_TB_FRAME_RE = re.compile(r'^\s+File "(.*)", line (\d+), in (.*)$')


@dataclasses.dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str

    @property
    def is_library(self) -> bool:
        """Installed code (torch, the standard library, trainmedic's watchdog), not the
        user's: judged by the path, as the dump may be read on another machine."""
        return any(m in self.file for m in _LIBRARY_MARKS)

    def short(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}"


@dataclasses.dataclass(frozen=True)
class ThreadStack:
    thread_id: str
    current: bool
    """The thread that wrote the dump (the watchdog, or the signal handler's)."""
    frames: tuple[Frame, ...]
    """Innermost first."""


@dataclasses.dataclass(frozen=True)
class Location:
    """Where one thread is."""

    kind: str
    """``collective``, ``data_loader``, ``sleep``, ``user_code`` or ``unknown``."""
    op: str | None
    """The collective's name (``all_reduce``), for ``collective``."""
    user_frame: Frame | None
    """The innermost frame of the user's own code."""
    source: str | None
    """That frame's source line, where the file is readable here."""

    def where(self) -> str:
        return self.user_frame.short() if self.user_frame is not None else "an unknown line"


def _norm_id(tid: str) -> int:
    return int(tid, 16)


def parse_faulthandler(text: str) -> list[ThreadStack]:
    """Every thread in a faulthandler dump; a thread dumped twice (two signals) keeps its
    last stack."""
    threads: dict[int, ThreadStack] = {}
    tid: str | None = None
    current = False
    frames: list[Frame] = []

    def close() -> None:
        if tid is not None:
            threads[_norm_id(tid)] = ThreadStack(tid, current, tuple(frames))

    for line in text.splitlines():
        if m := _THREAD_RE.match(line):
            close()
            tid, current, frames = m.group(2), m.group(1) == "Current thread", []
        elif (m := _FH_FRAME_RE.match(line)) and tid is not None:
            frames.append(Frame(m.group(1), int(m.group(2)), m.group(3).strip()))
    close()
    return list(threads.values())


def parse_traceback(text: str) -> tuple[Frame, ...]:
    """The frames of the last traceback in ``text`` (``traceback.format_exception``'s text),
    innermost first."""
    blocks = text.split("Traceback (most recent call last):")
    frames = [Frame(m.group(1), int(m.group(2)), m.group(3).strip())
              for line in blocks[-1].splitlines() if (m := _TB_FRAME_RE.match(line))]
    return tuple(reversed(frames))


def main_thread(threads: list[ThreadStack], main_id: str | None) -> ThreadStack | None:
    """The main thread: by id when the dump names it, else the thread whose outermost frame
    is a module's top level (a script's ``<module>``), else the current one."""
    if main_id:
        for t in threads:
            if _norm_id(t.thread_id) == _norm_id(main_id):
                return t
    for t in threads:
        if t.frames and t.frames[-1].func == "<module>":
            return t
    return next((t for t in threads if t.current), threads[0] if threads else None)


def locate(frames: tuple[Frame, ...]) -> Location:
    """Classify a stack (innermost first)."""
    user = next((f for f in frames if not f.is_library), None)
    source = linecache.getline(user.file, user.line).strip() or None if user else None
    for f in frames:
        if f.file.endswith(_C10D_FILES) and f.func in COLLECTIVES:
            return Location("collective", f.func, user, source)
        if f.file.endswith(_LOADER_FILE) and f.func in _LOADER_FUNCS:
            return Location("data_loader", None, user, source)
        if f is user:
            break
    if user is None:
        return Location("unknown", None, None, None)
    if source is not None and "sleep(" in source:
        return Location("sleep", None, user, source)
    return Location("user_code", None, user, source)
