"""A ``Comparison`` as one self-contained HTML page: the verdicts, the config diff, the delta
tables and an overlay plot of every compared metric (all runs on one axis, the parting step
shaded). The charts, the CSS and the crosshair script are the diagnose report's
(``chart.py``, ``html_page.py``), so both pages look and read alike; nothing is fetched.
"""

from __future__ import annotations

import os
import tempfile
from html import escape
from pathlib import Path

import numpy as np

from trainmedic.compare.align import rank_for
from trainmedic.compare.comparison import Comparison
from trainmedic.report.chart import Band, Chart, Line, render_chart
from trainmedic.report.compare_text import SCHEMA, fmt_value, verdict_line
from trainmedic.report.html_page import PAGE_CSS, PAGE_JS  # one look for every page

__all__ = ["render_compare_html", "write_compare_html"]

_AXIS_TITLE = {"step": "step", "tokens": "tokens seen", "time": "seconds in steps"}
_EXTRA_CSS = ("table.d{border-collapse:collapse;margin:8px 0;font-size:14px}"
              "table.d td,table.d th{border-bottom:1px solid var(--line);padding:3px 10px;"
              "text-align:right}table.d td:first-child,table.d th:first-child{text-align:left}"
              ".sig{font-weight:600}")


def _lines_for(c: Comparison, metric: str) -> list[Line]:
    """Each run's whole series of ``metric`` on the comparison's axis."""
    from trainmedic.compare.align import progress

    out: list[Line] = []
    for i, (label, run) in enumerate(zip(c.labels, c.runs, strict=True)):
        s = run.clean(metric, rank_for(run, metric))
        if s is None or not len(s):
            continue
        if c.axis == "step":
            x = s.steps
        else:
            p = progress(run, c.axis)
            if p is None:
                continue
            x = np.interp(s.steps, p.steps, p.values)
        out.append(Line(label, np.asarray(x, dtype=np.float64), s.values, colour=i))
    return out


def render_compare_html(c: Comparison) -> str:
    """The page as a string."""
    from trainmedic._version import __version__

    e = escape
    parts = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
             '<meta name="viewport" content="width=device-width,initial-scale=1">',
             f"<title>trainmedic compare: {e(' vs '.join(c.labels))}</title>"
             f"<style>{PAGE_CSS}{_EXTRA_CSS}</style></head><body><main>",
             "<h1>trainmedic compare</h1><div class=\"facts\">"]
    for lab, src in zip(c.labels, c.sources, strict=True):
        parts.append(f"<span>{e(lab)}</span><b>{e(src)}</b>")
    parts.append(f"<span>aligned by</span><b>{e(c.axis)}</b></div>")
    for p in c.pairs:
        cls = "v-ok" if p.verdict.sure else "v-warning"
        parts.append(f'<div class="verdict {cls}">{e(verdict_line(p.verdict, c.level))}</div>')
    n = len(c.config.rows)
    parts.append(f"<h2>Config ({n} {'key differs' if n == 1 else 'keys differ'})</h2>")
    if c.config.rows:
        head = "".join(f"<th>{e(lab)}</th>" for lab in c.labels)
        table = "".join(
            f"<tr><td>{e(r.key)} <span class=\"muted\">({e(r.source)})</span></td>"
            + "".join(f"<td>{e(repr(v))}</td>" for v in r.values) + "</tr>"
            for r in c.config.rows)
        parts.append(f'<table class="d"><tr><th>key</th>{head}</tr>{table}</table>')
    else:
        parts.append('<p class="muted">No recorded config key differs.</p>')
    for p in c.pairs:
        parts.append(f"<h2>{e(p.b)} vs {e(p.a)} (B - A)</h2><p class=\"muted\">Means and "
                     "differences are measured from the logged values over the aligned "
                     f"window; the {c.level:.0%} intervals (moving-block bootstrap) and "
                     "the parting step are estimated.</p>")
        rows = []
        for m in p.metrics:
            iv = m.delta_interval
            ci = f"[{fmt_value(iv.lo)}, {fmt_value(iv.hi)}]" if iv else "n/a"
            row = '<tr class="sig">' if m.significant else "<tr>"
            rows.append(
                f"{row}<td>{e(m.metric)}</td><td>{fmt_value(m.a_mean)}</td>"
                f"<td>{fmt_value(m.b_mean)}</td><td>{m.delta:+.4g}</td>"
                f"<td>{fmt_value(m.ratio)}</td><td>{ci}</td>"
                f"<td>{'' if m.parting_step is None else m.parting_step}</td>"
                f"<td>{m.points}</td></tr>")
        parts.append('<table class="d"><tr><th>metric</th><th>A mean</th><th>B mean</th>'
                     "<th>B - A</th><th>B / A</th><th>interval</th><th>parts at step</th>"
                     "<th>points</th></tr>" + "".join(rows) + "</table>")
    parts.append(f"<h2>Overlays (x: {e(_AXIS_TITLE[c.axis])})</h2>")
    shown: list[str] = []
    for p in c.pairs:
        shown.extend(m.metric for m in p.metrics if m.metric not in shown)
    for metric in shown:
        lines = _lines_for(c, metric)
        if not lines:
            continue
        lo = min(float(ln.steps.min()) for ln in lines)
        hi = max(float(ln.steps.max()) for ln in lines)
        bands = []
        for p in c.pairs:
            md = p.get(metric)
            if md is not None and md.parting_step is not None:
                i = int(np.searchsorted(md.aligned.steps_a, md.parting_step))
                x0 = float(md.aligned.x[min(i, len(md.aligned) - 1)])
                bands.append(Band(int(x0), int(float(md.aligned.x[-1])),
                                  f"{p.b} parts from {p.a}", "info",
                                  title=f"{metric}: beyond the A/A noise band from step "
                                        f"{md.parting_step} on (estimated)"))
        legend = "".join(f'<span><i class="sw s{ln.colour % 8}"></i>{e(ln.label)}</span>'
                         for ln in lines)
        chart = Chart(metric, lines, (lo, hi), bands)
        parts.append(f'<div class="plot"><h3>{e(metric)}</h3><div class="legend">{legend}'
                     f"</div>{render_chart(chart)}</div>")
    if c.notes or c.config.notes:
        parts.append("<h2>Notes</h2><ul class=\"plain\">" + "".join(
            f"<li>{e(n)}</li>" for n in (*c.config.notes, *c.notes)) + "</ul>")
    parts.append(f"<footer>trainmedic {e(__version__)} · comparison schema {SCHEMA}</footer>"
                 f"</main><script>{PAGE_JS}</script></body></html>\n")
    return "".join(parts)


def write_compare_html(c: Comparison, path: str | Path) -> Path:
    """Write the page to ``path`` atomically and return the path."""
    target = Path(path)
    text = render_compare_html(c)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # a report is meant to be shared
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
