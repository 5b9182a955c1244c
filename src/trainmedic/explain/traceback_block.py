"""Python tracebacks in a log: their frames and the exception line that ends them.

A block starts at ``Traceback (most recent call last):`` (after any launcher prefix such as
``[rank1]:``) and runs through its ``File "...", line N, in f`` frames to the first line that is
not a frame or a frame's source: the exception line (``KeyError: 'x'``). Chained tracebacks
("During handling of the above exception ...") are blocks of their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Frame", "TracebackBlock", "find_tracebacks", "user_frame"]

_START = re.compile(r"^(?P<prefix>.*?)Traceback \(most recent call last\):\s*$")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_EXC = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<msg>.*))?$")
_LIBRARY = re.compile(r"site-packages|dist-packages|[\\/]torch[\\/]|<frozen |[\\/]lib[\\/]"
                      r"python3?[\d.]*[\\/](?!site-packages)")

_MAX_BLOCK_LINES = 400


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str
    source: str | None
    log_line: int
    """1-based line of the log where the frame's ``File ...`` line is."""

    def where(self) -> str:
        return f"{self.file}:{self.line} in {self.func}"


@dataclass(frozen=True)
class TracebackBlock:
    start: int
    """1-based log line of ``Traceback (most recent call last):``."""
    frames: tuple[Frame, ...]
    exc_line: int | None
    """1-based log line of the exception, None when the block is cut short."""
    exc_type: str | None
    message: str | None
    prefix: str
    """What precedes ``Traceback`` on its line (a rank prefix), stripped from every line."""


def _strip(line: str, prefix: str) -> str:
    return line[len(prefix):] if prefix and line.startswith(prefix) else line


def _is_exception(text: str) -> re.Match[str] | None:
    if not text or text[0].isspace():
        return None
    m = _EXC.match(text.rstrip())
    if not m:
        return None
    name = m.group("type").rsplit(".", 1)[-1]
    if m.group("msg") is None and not re.search(r"Error|Exception|Interrupt|Exit|Failure", name):
        return None
    if not (name[0].isupper() or "." in m.group("type")):
        return None
    return m


def find_tracebacks(lines: tuple[str, ...] | list[str], offset: int = 0) -> list[TracebackBlock]:
    """Every traceback block in ``lines`` (``offset`` is added to the 0-based index to give the
    1-based log line, minus one)."""
    out: list[TracebackBlock] = []
    i = 0
    n = len(lines)
    while i < n:
        s = _START.match(lines[i])
        if not s:
            i += 1
            continue
        prefix = s.group("prefix")
        if prefix.strip() and not re.fullmatch(r"\s*(?:\[[^\]]*\]:?\s*)+|\s*\S+\s*\|\s*", prefix):
            prefix = ""  # text before "Traceback" on its line: a logger's message, not a prefix
        frames: list[Frame] = []
        exc: re.Match[str] | None = None
        exc_no: int | None = None
        j = i + 1
        while j < n and j - i < _MAX_BLOCK_LINES:
            text = _strip(lines[j], prefix) if prefix.strip() else lines[j]
            f = _FRAME.match(text)
            if f:
                src = None
                if j + 1 < n:
                    nxt = _strip(lines[j + 1], prefix) if prefix.strip() else lines[j + 1]
                    if nxt.startswith((" ", "\t")) and not _FRAME.match(nxt):
                        src = nxt.strip()
                frames.append(Frame(f.group("file"), int(f.group("line")), f.group("func"),
                                    src, offset + j + 1))
                j += 1
                continue
            if text.startswith((" ", "\t")) or not text.strip():
                j += 1  # a frame's source, a caret line, or a blank inside the block
                continue
            if _START.match(lines[j]):
                break
            exc = _is_exception(text)
            if exc:
                exc_no = offset + j + 1
            break
        out.append(TracebackBlock(
            start=offset + i + 1, frames=tuple(frames), exc_line=exc_no,
            exc_type=exc.group("type") if exc else None,
            message=(exc.group("msg") or "").strip()[:300] if exc else None, prefix=prefix))
        i = j if j > i else i + 1
    return out


def user_frame(block: TracebackBlock) -> Frame | None:
    """The innermost frame in the user's code (not site-packages, torch or the standard
    library); the innermost frame of all when none is the user's."""
    for frame in reversed(block.frames):
        if not _LIBRARY.search(frame.file):
            return frame
    return block.frames[-1] if block.frames else None
