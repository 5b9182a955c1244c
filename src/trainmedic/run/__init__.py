"""Runs: metric names, the ``Run`` type, importers and the SQLite run store."""

from __future__ import annotations

from collections.abc import Sequence

from trainmedic.run.series import ImportNote, Run, RunEvent, Series

__all__ = ["Run", "RunEvent", "Series", "ImportNote", "load_run"]


def load_run(*paths: str, mapping: dict[str, str] | None = None,
             line_pattern: str | Sequence[str] | None = None) -> Run:
    """Read one or more logs, folders or run stores (of one run) into a single ``Run``.

    Formats are auto-detected; ``mapping`` maps canonical names to source names
    (``{"loss": "my/loss/tag"}``); ``line_pattern``: regexes for console lines the built-in
    reader does not know (``(?P<step>...)`` and one named group per metric; see
    docs/trackers.md). Paths that hold separate runs are refused (``trainmedic compare``
    compares them). Raises ``InputError`` with a one-line message on bad input.
    """
    from trainmedic.run.loader import load_paths

    return load_paths(list(paths), mapping=mapping, line_pattern=line_pattern)
