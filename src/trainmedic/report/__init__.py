"""Reports: a ``Diagnosis`` rendered for a terminal (rich), as findings JSON, and as one
self-contained HTML page with plots.

Importing this package stays light: rich is imported only when the terminal report is drawn.
"""

from __future__ import annotations

from trainmedic.report.decimation import decimate_minmax
from trainmedic.report.findings_json import findings_schema, to_json, validate_findings_json
from trainmedic.report.html_page import render_html, write_html
from trainmedic.report.terminal import TerminalReport, render_terminal

__all__ = [
    "render_terminal",
    "TerminalReport",
    "to_json",
    "validate_findings_json",
    "findings_schema",
    "write_html",
    "render_html",
    "decimate_minmax",
]
