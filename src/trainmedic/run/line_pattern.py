"""A console log read with the user's own regular expression (``--line-pattern``).

The built-in line reader (``textlog``) knows the layouts trainers print (fairseq, OpenNMT,
Megatron/NeMo, nanoGPT, Keras, HF, ...). A layout it does not know is read with a pattern
whose named groups say what each number is: ``step`` is the step, every other
group a column under the group's name (``loss``, ``lr``, ``val_loss`` or any name the names
table maps), e.g. ``iter (?P<step>\\d+): loss (?P<loss>[\\d.]+)``. Several patterns may be
given (Python's ``re`` allows a group name once per pattern): the first that matches a line
reads it, and a pattern without ``step`` (OpenNMT's ``Validation perplexity: 12.3``) takes
the step of the last stepped line. Python's ``re`` syntax, searched in each line (not
anchored), so a prefix (time stamp, rank) needs no group. Lines no pattern matches are not
rows; a matching line whose group is not a number is noted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from trainmedic.errors import ConfigError, UnreadableInputError, UnrecognizedInputError
from trainmedic.run.series import Series
from trainmedic.run.table import LogTable, NoteCounter, cell_float

__all__ = ["compile_line_patterns", "read_line_pattern"]

_EXAMPLE = "e.g. 'iter (?P<step>\\d+): loss (?P<loss>[\\d.]+)'"


def compile_line_patterns(patterns: str | Sequence[str]) -> list[re.Pattern[str]]:
    """The compiled patterns; ConfigError (naming ``line_pattern``) when one is not a regular
    expression or has no named group other than ``step``, or when none has a ``step`` group.
    A pattern without ``step`` (a validation line that prints no step) takes the step of the
    last line a stepped pattern matched."""
    out: list[re.Pattern[str]] = []
    for pattern in [patterns] if isinstance(patterns, str) else list(patterns):
        try:
            rx = re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"line_pattern: {pattern!r} is not a regular expression ({exc}); "
                              f"expected {_EXAMPLE}") from exc
        if not set(rx.groupindex) - {"step"}:
            raise ConfigError(f"line_pattern: {pattern!r} names no metric group; expected one "
                              f"(?P<name>...) per number, {_EXAMPLE}")
        out.append(rx)
    if not any("step" in rx.groupindex for rx in out):
        raise ConfigError(f"line_pattern: no pattern has a (?P<step>...) group; expected "
                          f"{_EXAMPLE}")
    return out


def read_line_pattern(path: Path, patterns: str | Sequence[str]) -> LogTable:
    """One column per named group over the ``step`` group, from the lines of ``path`` that
    the patterns match (the first matching pattern reads a line)."""
    rxs = compile_line_patterns(patterns)
    shown = " / ".join(rx.pattern for rx in rxs)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UnreadableInputError(str(path), f"cannot open the log ({exc.strerror})") from exc
    table = LogTable(path=str(path), format="text")
    table.step_column = "step"
    cols: dict[str, tuple[list[int], list[float]]] = {}
    bad = NoteCounter("skipped_line", "lines that matched --line-pattern with a group that is "
                      "not a number skipped")
    matched = unstepped = 0
    last_step: int | None = None
    for no, line in enumerate(text.splitlines(), 1):
        m = next((m for rx in rxs if (m := rx.search(line)) is not None), None)
        if m is None:
            continue
        matched += 1
        groups = m.groupdict()
        if "step" in groups:
            step = cell_float(groups.pop("step") or "")
            if step is None or not step.is_integer():
                bad.add(no, "step")
                continue
            last_step = int(step)
        elif last_step is None:
            unstepped += 1  # a stepless line before any step: no step to give it
            continue
        for g, raw in groups.items():
            if raw is None:  # an optional group absent from this line
                continue
            v = cell_float(raw)
            if v is None:
                bad.add(no, g)
                continue
            steps, vals = cols.setdefault(g, ([], []))
            steps.append(last_step)
            vals.append(v)
    bad.flush(table)
    if unstepped:
        table.note("skipped_line", f"{unstepped} matching lines before the first step skipped")
    for g, (steps, vals) in cols.items():
        table.columns[g] = Series(np.asarray(steps, dtype=np.int64),
                                  np.asarray(vals, dtype=np.float64))
    if not table.columns:
        raise UnrecognizedInputError(str(path), f"no line gave a number for --line-pattern "
                                     f"{shown!r} ({matched} lines matched); check the "
                                     f"pattern against a line of the log")
    table.note("line_pattern", f"read with --line-pattern {shown!r}: {matched} lines matched")
    return table
