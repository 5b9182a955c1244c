"""The terminal report: a ``Diagnosis`` laid out with rich, readable at a glance.

Layout (top to bottom): a header (source, steps, metrics, ranks); the findings worst first, each
with a severity badge, its symptom code, steps, summary, key evidence, top causes and the first
intervention; the checks that could not run and what to log to enable them; import notes; a
one-line verdict. It fits an 80-column terminal, and rich drops colour codes by itself when the
output is not a TTY (piped, redirected), so the words alone must carry the meaning.

rich is imported inside the function: ``trainmedic diagnose --json`` should not pay for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from trainmedic.diagnose.finding import Diagnosis, Finding
from trainmedic.report.wording import (
    card_groups,
    cause_line,
    checks_not_run_lines,
    evidence_line,
    fmt_span,
    intervention_lines,
    map_hint,
    mapping_lines,
    note_lines,
    sorted_findings,
    summarize_run,
    verdict,
)
from trainmedic.run.series import Run

if TYPE_CHECKING:
    from rich.console import Console
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

__all__ = ["render_terminal", "TerminalReport"]

_BADGE_STYLE = {"error": "bold white on red", "warning": "bold black on yellow",
                "info": "bold white on blue"}
_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "blue"}
#: How much of a finding the default (non-verbose) report shows.
_DEFAULT_EVIDENCE = 2
_DEFAULT_CAUSES = 2


def _grid() -> Table:
    """Label | body columns: long bodies wrap under themselves, not under the label."""
    from rich.table import Table

    grid = Table.grid(padding=(0, 1, 0, 0))
    grid.add_column(width=2, no_wrap=True)
    grid.add_column(width=8, no_wrap=True, style="dim")
    grid.add_column(overflow="fold")
    return grid


def _finding_block(f: Finding, index: int, metrics_seen: list[str],
                   verbose: bool, alike: list[Finding] | None = None
                   ) -> tuple[Text, Padding, Table]:
    from rich.padding import Padding
    from rich.text import Text

    head = Text()
    head.append(f"{index}. ", style="bold")
    head.append(f" {f.severity.upper()} ", style=_BADGE_STYLE[f.severity])
    head.append(" ")
    head.append(f.symptom, style="bold")
    if alike:
        head.append(f" x{len(alike) + 1}", style="bold")
    head.append(f"  {fmt_span(f)}", style="cyan")
    if f.rank is not None:
        head.append(f"  rank {f.rank}", style="cyan")
    head.append(f"  confidence {f.confidence:.2f}", style="dim")

    grid = _grid()
    if alike:
        grid.add_row("", "also at", Text(", ".join(fmt_span(g) for g in alike)))
    if f.severity == "info" and not verbose:
        # Info findings are context, not problems: one line of evidence keeps them short.
        if f.evidence:
            grid.add_row("", "evidence", Text(evidence_line(f.evidence[0])))
        more = len(f.evidence) - 1 + len(f.causes) + len(f.interventions)
        if more > 0:
            grid.add_row("", "", Text("(details with --verbose)", style="dim"))
        return head, Padding(Text(f.summary), (0, 0, 0, 3)), grid

    def row(label: str, body: Text | str, style: str = "") -> None:
        grid.add_row("", label, body if isinstance(body, Text) else Text(body, style=style))


    evidence = f.evidence if verbose else f.evidence[:_DEFAULT_EVIDENCE]
    for i, ev in enumerate(evidence):
        row("evidence" if i == 0 else "", evidence_line(ev))
    if len(f.evidence) > len(evidence):
        row("", f"(+{len(f.evidence) - len(evidence)} more; --verbose shows all)", "dim")
    causes = f.causes if verbose else f.causes[:_DEFAULT_CAUSES]
    for i, c in enumerate(causes):
        text, check = cause_line(c, metrics_seen)
        t = Text(text)
        t.append(f" — {check}", style="green" if c.checked_against_data else "dim")
        row("cause" if i == 0 else "", t)
    if len(f.causes) > len(causes):
        row("", f"(+{len(f.causes) - len(causes)} less likely)", "dim")
    interventions = f.interventions if verbose else f.interventions[:1]
    for i, iv in enumerate(interventions):
        action, cost, check = intervention_lines(iv)
        row("try" if i == 0 else "then", Text(action, style="bold"))
        row("", cost, "dim")
        row("", check, "dim")
    if not f.causes and not f.interventions:
        row("", "no cause or intervention routed for this finding", "dim")
    return head, Padding(Text(f.summary), (0, 0, 0, 3)), grid


def _stdout_console() -> Console:
    """A console on stdout whose broken pipe (``trainmedic diagnose | head``) is a
    ``BrokenPipeError`` for the CLI to map: rich's own handling exits with status 1, which the
    CLI's exit codes reserve for findings."""
    from rich.console import Console

    class _PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return _PipeConsole(highlight=False)


class TerminalReport:
    """The terminal report of ``diagnosis`` as a rich renderable: ``console.print(report)``
    draws it at the console's width, ``rich.console.Group``, ``Panel`` or a live display can
    hold it, and ``console.export_text()`` records it.

    ``run`` (optional) adds the steps covered, the point count and the importers' notes to the
    header. ``verbose`` shows every evidence item, cause and intervention instead of the top
    ones."""

    def __init__(self, diagnosis: Diagnosis, run: Run | None = None, *,
                 verbose: bool = False) -> None:
        self.diagnosis, self.run, self.verbose = diagnosis, run, verbose

    def __rich_console__(self, console: Console, options: Any) -> Iterator[Any]:
        from rich.rule import Rule
        from rich.table import Table
        from rich.text import Text

        diagnosis, run, verbose = self.diagnosis, self.run, self.verbose
        info = summarize_run(diagnosis, run)

        yield Rule(Text("trainmedic diagnosis", style="bold"), align="left")
        header = Table.grid(padding=(0, 1, 0, 0))
        header.add_column(width=8, no_wrap=True, style="dim")
        header.add_column(overflow="fold")
        header.add_row("source", Text(info.source))
        steps = info.steps_text()
        if info.num_points is not None:
            steps += f"  ({info.num_points:,} points)"
        header.add_row("steps", Text(steps))
        shown = info.metrics if verbose or len(info.metrics) <= 12 else info.metrics[:12]
        metrics = ", ".join(shown) or "none"
        if len(shown) < len(info.metrics):
            metrics += f", … (+{len(info.metrics) - len(shown)} more)"
        header.add_row("metrics", Text(metrics))
        header.add_row("ranks", Text(info.ranks_text()))
        yield header

        findings = sorted_findings(diagnosis.findings)
        yield Text("")
        if not diagnosis.loss_found:
            yield Text("No training loss was recognised in this log, so the run was not "
                       "judged: a clean report would mean nothing.", style="bold red")
            yield Text(map_hint(diagnosis))
            cols = ", ".join(str(m.get("column")) for m in diagnosis.mapping) or ", ".join(
                diagnosis.metrics_seen) or "none"
            yield Text(f"Columns read: {cols}", style="dim")
            yield Text("")
        if findings:
            yield Text(f"Findings ({len(findings)}, worst first)", style="bold")
            for i, group in enumerate(card_groups(findings), 1):
                yield Text("")
                yield from _finding_block(group[0], i, info.metrics, verbose, group[1:])
        elif diagnosis.loss_found:
            yield Text("No findings.", style="bold green")

        def bullets(title: str, lines: list[str]) -> Iterator[Any]:
            yield Text("")
            yield Text(title, style="bold")
            grid = Table.grid(padding=(0, 1, 0, 0))
            grid.add_column(width=3, no_wrap=True)
            grid.add_column(overflow="fold", style="dim")
            for line in lines:
                grid.add_row("  -", Text(line))
            yield grid

        checks = checks_not_run_lines(diagnosis.checks_not_run)
        if checks:
            yield from bullets(f"Checks not run ({len(diagnosis.checks_not_run)})", checks)
        how = mapping_lines(diagnosis)
        if how and (verbose or not diagnosis.loss_found or any(
                str(m.get("how", "")).startswith(("namespace", "unit", "derived", "row index"))
                for m in diagnosis.mapping)):
            yield from bullets("How the columns were read", how)
        notes = note_lines(diagnosis, run)
        if notes:
            yield from bullets("Import notes", notes)

        yield Text("")
        worst = diagnosis.worst()
        style = "bold red" if worst >= 2 or not diagnosis.loss_found else (
            "bold yellow" if worst == 1 else "bold green")
        yield Rule(style="dim")
        yield Text(verdict(diagnosis), style=style)


def render_terminal(diagnosis: Diagnosis, run: Run | None = None, *,
                    console: Console | None = None, verbose: bool = False) -> None:
    """Print :class:`TerminalReport` for ``diagnosis`` to ``console`` (stdout when None)."""
    con = console if console is not None else _stdout_console()
    con.print(TerminalReport(diagnosis, run, verbose=verbose))
