"""The terminal report: content checked on an 80-column, colourless console."""

from __future__ import annotations

import io
import re
import subprocess
import sys

from report_samples import sample_diagnosis, sample_run
from rich.console import Console

from trainmedic.diagnose.finding import Cause, CheckNotRun, Diagnosis, Evidence, Finding
from trainmedic.report import render_terminal
from trainmedic.run.series import Run


def render(diagnosis: Diagnosis, run: Run | None = None, *, verbose: bool = False,
           width: int = 80) -> str:
    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=False, color_system=None)
    render_terminal(diagnosis, run, console=con, verbose=verbose)
    return buf.getvalue()


def flat(text: str) -> str:
    """Wrapped text joined back into one line of single spaces."""
    return re.sub(r"\s+", " ", text)


def test_header_findings_checks_notes_and_verdict(diagnosis, run) -> None:
    out = render(diagnosis, run)
    f = flat(out)
    assert "source runs/sample/metrics.csv" in f
    assert "0–1,999" in f and "12,020 points" in f
    assert "ranks single process" in f
    # Worst first: error, then warning, then info.
    assert out.index("nonfinite_loss") < out.index("loss_spike") < out.index("memory_growth")
    assert "ERROR" in out and "WARNING" in out and "INFO" in out
    assert "steps 1,500→1,504" in out and "steps 800→801" in out
    # Evidence: value vs reference with its basis spelled out.
    assert "loss = 9.5 at step 800 vs reference 2.26 (measured: running median" in f
    assert "loss = NaN at step 1,500 (measured" in f
    assert "(estimated: linear trend)" in f
    # Causes: checked against a named metric, or not checked with what to log.
    assert "lr too high (low) — checked against lr: lr had been falling" in f
    assert "not checked: log lr per step to check" in f
    # First intervention with cost and verification; the second only with --verbose.
    assert "skip the batch at step 800" in f
    assert "cost: loses ~50 steps of compute" in f
    assert "verify: loss over steps 790-810" in f
    assert "clip gradients" not in f
    # Checks not run, grouped by what to log.
    assert "log loss_scale to check loss_scale_collapse, nonfinite_grad" in f
    assert "straggler: single process" in f
    assert "Import notes" in out and "metrics.csv:17" in out
    assert "1 error, 1 warning, 1 info. Worst: nonfinite_loss (steps 1,500→1,504); 3 checks " \
        "not run." in f
    assert out.rstrip().endswith("not run.")


def test_fits_80_columns_and_no_escape_codes(diagnosis, run) -> None:
    out = render(diagnosis, run)
    assert "\x1b[" not in out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80


def test_verbose_shows_everything(diagnosis, run) -> None:
    f = flat(render(diagnosis, run, verbose=True))
    assert "clip gradients at 1.0" in f
    assert "(changes optimization semantics)" in f
    assert "numerical overflow in fp16 (low) — not checked: log loss_scale to check" in f


def test_healthy_run_verdict_and_no_run() -> None:
    d = Diagnosis(source="x.csv", metrics_seen=["loss"])
    out = render(d)
    assert "No findings." in out
    assert "No problems found at warning or above." in out
    assert "steps unknown" in flat(out)


def test_info_only_is_not_a_problem() -> None:
    d = Diagnosis(source="x.csv", metrics_seen=["loss"],
                  findings=[Finding("plateau", "info", 0.5, 10, "loss flat since step 10")],
                  checks_not_run=[CheckNotRun("input_bound", ("data_time_s",))])
    f = flat(render(d))
    assert "No problems found at warning or above (1 info); 1 check not run." in f


def test_rich_markup_in_text_is_printed_literally() -> None:
    d = Diagnosis(source="[bold]runs[/bold]", metrics_seen=["loss"], findings=[
        Finding("loss_spike", "warning", 0.8, 5, "loss [x] jumped",
                (Evidence("loss", 5, 3.0, 1.0, "measured", "[red]median[/red]"),),
                causes=(Cause("a bad batch", "high", True),))])
    out = render(d)
    assert "[bold]runs[/bold]" in out
    assert "loss [x] jumped" in out and "[red]median[/red]" in out


def test_long_metric_list_is_shortened_unless_verbose() -> None:
    metrics = [f"eval_metric_{i}" for i in range(40)]
    d = Diagnosis(source="x", metrics_seen=metrics)
    assert "(+28 more)" in flat(render(d))
    assert "eval_metric_39" in render(d, verbose=True)


def test_many_ranks_header() -> None:
    run = sample_run(100, nan_at=None, spike_at=5, ranks=(0, 1, 2, 3))
    out = flat(render(sample_diagnosis(), run))
    assert "ranks 4 (0, 1, 2, 3)" in out


def test_importing_report_does_not_import_rich() -> None:
    code = ("import sys, trainmedic.report; "
            "print('rich' in sys.modules, 'torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert res.stdout.split() == ["False", "False"]


def test_info_findings_are_compact_unless_verbose() -> None:
    f = Finding("plateau", "info", 0.6, 100, "loss flat since step 100",
                (Evidence("loss", 100, 1.0, 1.1, "measured", "block median"),
                 Evidence("loss", 900, 1.0, 1.0, "measured", "last block")),
                causes=(Cause("schedule annealed", "medium", False, "log lr to check this"),))
    d = Diagnosis(source="x", metrics_seen=["loss"], findings=[f, f])
    short = flat(render(d))
    assert "loss = 1 at step 100 vs reference 1.1 (measured: block median)" in short
    assert "schedule annealed" not in short and "(details with --verbose)" in short
    assert "(2 info)" in short  # no "infos"
    long = flat(render(d, verbose=True))
    assert "schedule annealed (medium) — not checked: log lr to check this" in long
    assert "last block" in long


def test_alike_spikes_share_one_card() -> None:
    from rich.console import Console

    from trainmedic.diagnose.finding import Diagnosis, Evidence, Finding
    from trainmedic.report.terminal import render_terminal

    spikes = [Finding("loss_spike", "warning", 0.9, s, f"loss jumped 4x at step {s}",
                      (Evidence("loss", s, 8.0, 2.0),), end_step=s + 5, metric="loss")
              for s in (100, 200, 300)]
    d = Diagnosis(source="x", metrics_seen=["loss"], findings=spikes)
    con = Console(width=100, record=True)
    render_terminal(d, None, console=con)
    out = con.export_text()
    assert out.count("loss_spike") == 1 + out.count("Worst: loss_spike")
    assert "loss_spike x3" in out and "steps 200→205, steps 300→305" in out


def test_the_report_is_a_rich_renderable(diagnosis, run) -> None:
    # console.print(TerminalReport(...)) draws what render_terminal draws, and the report can
    # sit inside other renderables (a panel, a group, a live display)
    from rich.panel import Panel

    from trainmedic.report import TerminalReport

    a = Console(file=io.StringIO(), width=100, color_system=None)
    render_terminal(diagnosis, run, console=a)
    b = Console(file=io.StringIO(), width=100, color_system=None)
    b.print(TerminalReport(diagnosis, run))
    assert a.file.getvalue() == b.file.getvalue()  # type: ignore[attr-defined]
    c = Console(file=io.StringIO(), width=100, color_system=None)
    c.print(Panel(TerminalReport(diagnosis, run), title="nightly"))
    out = c.file.getvalue()  # type: ignore[attr-defined]
    assert "nightly" in out and "trainmedic diagnosis" in out
