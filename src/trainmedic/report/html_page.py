"""The HTML report: one self-contained file with the findings and a plot of every metric.

Everything is inline: CSS, SVG plots drawn in Python (``chart.py``), and ~25 lines of JS for
a crosshair readout of step and value under the mouse. No external script, font, image or
network request, so the file opens anywhere, offline, and can be attached to a ticket.

The page reads top to bottom like the terminal report: header and verdict, the findings (the
same words, from ``wording.py``), the plots (canonical metrics first, each finding's steps
shaded on the plots of the metrics its evidence names, NaN/inf as red markers), then the checks
that could not run and the importers' notes.
"""

from __future__ import annotations

import os
import tempfile
from html import escape
from pathlib import Path

import numpy as np

from trainmedic.diagnose.finding import Diagnosis, Finding, Intervention
from trainmedic.report.chart import Band, Chart, Line, render_chart, y_is_log
from trainmedic.report.wording import (
    card_groups,
    cause_line,
    checks_not_run_lines,
    evidence_line,
    fmt_span,
    intervention_lines,
    mapping_lines,
    note_lines,
    sorted_findings,
    summarize_run,
    verdict,
)
from trainmedic.run.series import Run, Series

__all__ = ["write_html", "render_html", "PLOT_GROUPS", "PAGE_CSS", "PAGE_JS"]

#: The main plots, in order: a title and the canonical metrics drawn on the same axes.
PLOT_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("loss", ("loss", "val_loss")),
    ("learning rate", ("lr",)),
    ("gradient norm", ("grad_norm",)),
    ("step and data time (s)", ("step_time_s", "data_time_s", "compute_time_s", "comm_time_s")),
    ("memory (MB)", ("mem_alloc_mb", "mem_reserved_mb", "mem_peak_mb", "rss_mb")),
    ("loss scale", ("loss_scale",)),
    # One axis per unit: samples/s and tokens/s differ by the sequence length (x1000s), so on
    # one axis the smaller one is a flat line at 0.
    ("samples per second", ("samples_per_s",)),
    ("tokens per second", ("tokens_per_s",)),
    ("parameter norm", ("param_norm",)),
    ("update ratio", ("update_ratio",)),
    ("GPU utilization", ("gpu_util",)),
)
#: More ranks than this are not all drawn (the ranks a finding names always are).
MAX_RANKS_DRAWN = 8
#: The header lists this many metric names; the rest fold into a <details>.
_HEADER_METRICS = 16
#: More "other" metrics than this are listed, not plotted: the file must stay small.
MAX_OTHER_CHARTS = 120

PAGE_CSS = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--bg:#fff;--soft:#f6f8fa;
--error:#cf222e;--warning:#bf8700;--info:#0969da;--ok:#1a7f37}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);
font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","DejaVu Sans",sans-serif}
main{max-width:1180px;margin:0 auto;padding:20px 24px 48px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:32px 0 10px;
padding-bottom:4px;border-bottom:1px solid var(--line)}
h3{font-size:15px;margin:0}
code,.mono{font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,"DejaVu Sans Mono",monospace;
font-size:13px}
.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:8px 0 14px;
color:var(--muted)}.facts b{font-weight:600;color:var(--fg)}
.verdict{padding:10px 14px;border-radius:6px;font-weight:600;border-left:5px solid}
.v-error{background:#ffebe9;border-color:var(--error)}.v-warning{background:#fff8c5;
border-color:var(--warning)}.v-ok{background:#dafbe1;border-color:var(--ok)}
.finding{border:1px solid var(--line);border-left:5px solid;border-radius:6px;
padding:10px 14px;margin:10px 0}
.finding.error{border-left-color:var(--error)}.finding.warning{border-left-color:var(--warning)}
.finding.info{border-left-color:var(--info)}
details.finding>summary{cursor:pointer;list-style:none;font-weight:400;margin:0}
details.finding>summary::-webkit-details-marker{display:none}
details.finding>summary .fhead h3::before{content:"\\25B8  ";color:var(--muted)}
details.finding[open]>summary .fhead h3::before{content:"\\25BE  "}
.finding dl dl{margin-top:4px}
.fhead{display:flex;flex-wrap:wrap;gap:4px 10px;align-items:baseline}.fhead .times{font-size:15px}
.badge{font-size:11px;font-weight:700;letter-spacing:.04em;color:#fff;padding:1px 7px;
border-radius:10px}.badge.error{background:var(--error)}.badge.warning{background:var(--warning)}
.badge.info{background:var(--info)}
.span{color:var(--muted)}.summary{margin:4px 0 6px}
.finding dl{display:grid;grid-template-columns:88px 1fr;gap:3px 10px;margin:0}
.finding dt{color:var(--muted)}.finding dd{margin:0}
.finding ul{margin:0;padding-left:18px}.check{color:var(--muted)}.check.ok{color:var(--ok)}
.cost,.verify{color:var(--muted)}
.plot{margin:14px 0 18px}.plot h3 a{color:inherit;text-decoration:none}
.legend{display:flex;flex-wrap:wrap;gap:2px 14px;font-size:13px;color:var(--muted)}
.legend .scale{margin-left:auto;font-style:italic}
.sw{display:inline-block;width:14px;height:3px;vertical-align:middle;margin-right:5px}
.sw.nf{height:0;width:0;border:6px solid transparent;border-top:9px solid var(--error);
border-bottom:0}
svg.chart{width:100%;height:auto;display:block;font-size:15px}
.chart .grid{stroke:#e6e9ec;stroke-width:1}.chart .frame{fill:none;stroke:#afb8c1}
.chart .tick{fill:var(--muted)}.chart .scale{fill:var(--muted);font-style:italic}
.chart .line{fill:none;stroke-width:1.4;stroke-linejoin:round}
.chart .nonfinite{fill:var(--error)}
.chart .band rect{fill-opacity:.13;stroke-opacity:.55;stroke-width:1}
.chart .band-error rect{fill:var(--error);stroke:var(--error)}
.chart .band-warning rect{fill:#d4a72c;stroke:#d4a72c}
.chart .band-info rect{fill:var(--info);stroke:var(--info);fill-opacity:.07}
.chart .band-label{font-size:14px;font-weight:600;paint-order:stroke;stroke:#fff;
stroke-width:3px}
.chart .band-error .band-label{fill:var(--error)}.chart .band-warning .band-label{fill:#9a6700}
.chart .band-info .band-label{fill:var(--info)}
.chart .cursor{stroke:#57606a;stroke-dasharray:3 3}
.chart .readout{fill:var(--fg);paint-order:stroke;stroke:#fff;stroke-width:4px}
.s0{stroke:#0969da;fill:#0969da;background:#0969da}.s1{stroke:#e16f24;fill:#e16f24;
background:#e16f24}.s2{stroke:#2da44e;fill:#2da44e;background:#2da44e}
.s3{stroke:#8250df;fill:#8250df;background:#8250df}.s4{stroke:#1b9aaa;fill:#1b9aaa;
background:#1b9aaa}.s5{stroke:#9a6700;fill:#9a6700;background:#9a6700}
.s6{stroke:#bf3989;fill:#bf3989;background:#bf3989}.s7{stroke:#6e7781;fill:#6e7781;
background:#6e7781}
.others{display:grid;grid-template-columns:repeat(auto-fill,minmax(480px,1fr));gap:0 22px}
details>summary{cursor:pointer;font-weight:600;margin:8px 0}
details.more{font-weight:400}details.more>summary{font-weight:400;margin:0;color:var(--muted)}
.muted{color:var(--muted)}ul.plain{padding-left:20px;margin:6px 0}
footer{margin-top:40px;color:var(--muted);font-size:13px}
"""

# A crosshair with the step and y value under the mouse; the axes' mapping is in data-*.
PAGE_JS = """
document.querySelectorAll('svg.chart').forEach(function(s){
var c=s.querySelector('.cursor'),r=s.querySelector('.readout'),d=s.dataset;
function hide(){c.setAttribute('visibility','hidden');r.textContent='';}
s.addEventListener('mouseleave',hide);
s.addEventListener('mousemove',function(e){
var m=s.getScreenCTM();if(!m)return;var p=s.createSVGPoint();p.x=e.clientX;p.y=e.clientY;
p=p.matrixTransform(m.inverse());var l=+d.l,rr=+d.r,t=+d.t,b=+d.b;
if(p.x<l||p.x>rr||p.y<t||p.y>b){hide();return;}
var step=+d.x0+(p.x-l)/(rr-l)*(d.x1-d.x0),y=+d.y0+(b-p.y)/(b-t)*(d.y1-d.y0);
if(d.log==='1')y=Math.pow(10,y);
c.setAttribute('x1',p.x);c.setAttribute('x2',p.x);c.setAttribute('visibility','visible');
var parts=[],at=Math.round(step);
s.querySelectorAll('path.line').forEach(function(ln){
if(!ln._s){ln._s=ln.dataset.s.split(',').map(Number);ln._v=ln.dataset.v.split(',');}
var a=ln._s,lo=0,hi=a.length-1;if(hi<0)return;
while(lo<hi){var mid=(lo+hi)>>1;if(a[mid]<step)lo=mid+1;else hi=mid;}
if(lo>0&&step-a[lo-1]<a[lo]-step)lo--;
if(parts.length===0)at=a[lo];parts.push(ln.dataset.label+' '+ln._v[lo]);});
r.textContent=parts.length?'step '+at.toLocaleString()+': '+parts.join('   '):
'step '+Math.round(step).toLocaleString()+'   y = '+y.toPrecision(4);});});
"""


def _points_per_line(n_lines: int, small: bool) -> int:
    """Decimation budget per line: ~2k for one line, less when many share the axes (8 ranks
    overlaid at 2k points each would make the file big for no visible gain)."""
    base = 800 if small else 2000
    return max(400, int(base / max(1.0, n_lines ** 0.5)))


def _anchor(metric: str) -> str:
    return "plot-" + "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in metric)


def _finding_metrics(f: Finding) -> set[str]:
    names = {e.metric for e in f.evidence if e.metric}
    if f.metric:
        names.add(f.metric)
    return names


def _ranks_to_draw(run: Run, metric: str, findings: list[Finding]) -> list[int | None]:
    ranks = sorted(run.per_rank(metric), key=lambda r: -1 if r is None else r)
    if len(ranks) <= MAX_RANKS_DRAWN:
        return ranks
    named = {f.rank for f in findings if f.rank is not None and metric in _finding_metrics(f)}
    keep = ranks[:MAX_RANKS_DRAWN]
    return keep + [r for r in ranks[MAX_RANKS_DRAWN:] if r in named]


class _Page:
    """Builds the page; holds the clean series so each is cleaned once."""

    def __init__(self, diagnosis: Diagnosis, run: Run) -> None:
        self.diagnosis = diagnosis
        self.run = run
        self.findings = sorted_findings(diagnosis.findings)
        # Alike repeated events (three recovered loss spikes) share one card "x3", as in the
        # terminal report; each keeps its own band on the plots, numbered by its card.
        self.groups = card_groups(self.findings)
        self.card = {id(f): i for i, group in enumerate(self.groups, 1) for f in group}
        self.ids = {key: f"finding-{i}" for key, i in self.card.items()}
        self.clean: dict[tuple[str, int | None], Series] = {
            key: s.clean() for key, s in run.series.items() if len(s)}
        firsts = [int(s.steps[0]) for s in self.clean.values()]
        lasts = [int(s.steps[-1]) for s in self.clean.values()]
        self.x_range = (float(min(firsts)), float(max(lasts))) if firsts else (0.0, 1.0)
        self.plotted: dict[str, str] = {}
        """metric -> anchor of the chart that shows it."""

    # -- plots ---------------------------------------------------------------------------
    def chart(self, title: str, metrics: tuple[str, ...], *, small: bool = False) -> str:
        lines: list[Line] = []
        for metric in metrics:
            for rank in _ranks_to_draw(self.run, metric, self.findings):
                s = self.clean.get((metric, rank))
                if s is None:
                    continue
                label = metric if rank is None else f"{metric} rank {rank}"
                lines.append(Line(label, s.steps, s.values, colour=len(lines)))
        if not lines:
            return ""
        bands = []
        present = set(metrics)
        for f in self.findings:
            i = self.card[id(f)]
            if f.onset_step is None or not (_finding_metrics(f) & present):
                continue
            # No end step: the finding holds to the end of the run (a divergence that stayed
            # up, a data wait over the whole run): shaded to the end, not a line at its onset.
            end = f.end_step if f.end_step is not None else int(self.x_range[1])
            label = f"{i} {f.symptom}" + (f" r{f.rank}" if f.rank is not None else "")
            bands.append(Band(f.onset_step, end, label, f.severity,
                              f"{f.symptom} ({fmt_span(f)}): {f.summary}", self.ids[id(f)]))
        anchor = _anchor(metrics[0])
        for m in metrics:
            self.plotted.setdefault(m, anchor)
        chart = Chart(title=title, lines=lines, x_range=self.x_range, bands=bands,
                      height=210 if small else 250, width=540 if small else 1000,
                      max_points=_points_per_line(len(lines), small))
        legend = "".join(
            f'<span><i class="sw s{ln.colour % 8}"></i>{escape(ln.label)}</span>' for ln in lines)
        nonfinite = sum(int((~np.isfinite(ln.values)).sum()) for ln in lines)
        if nonfinite:
            legend += (f'<span><i class="sw nf"></i>NaN/inf ({nonfinite:,} '
                       f'point{"s" if nonfinite != 1 else ""})</span>')
        if y_is_log(lines):
            legend += '<span class="scale">log y axis</span>'
        return (f'<section class="plot" id="{anchor}"><h3><a href="#{anchor}">'
                f'{escape(title)}</a></h3><div class="legend">{legend}</div>'
                f'{render_chart(chart)}</section>')

    def plots(self) -> str:
        metrics = {m for m, _ in self.clean}
        if not metrics:
            return '<p class="muted">The run has no metric series to plot.</p>'
        named = set().union(*(_finding_metrics(f) for f in self.findings)) if self.findings \
            else set()
        canonical: set[str] = set()
        main: list[str] = []
        for title, group in PLOT_GROUPS:
            canonical.update(group)
            present = tuple(m for m in group if m in metrics)
            if present:
                main.append(self.chart(title if len(present) > 1 or title != present[0]
                                       else present[0], present))
        others = sorted(metrics - canonical)
        # A metric a finding names is shown in the main section, not folded away.
        for m in [m for m in others if m in named]:
            main.append(self.chart(m, (m,)))
        rest = [m for m in others if m not in named]
        out = "".join(main)
        if rest:
            drawn = rest[:MAX_OTHER_CHARTS]
            charts = "".join(self.chart(m, (m,), small=True) for m in drawn)
            skipped = ""
            if len(rest) > len(drawn):
                skipped = (f'<p class="muted">Not plotted ({len(rest) - len(drawn)} more): '
                           + escape(", ".join(rest[len(drawn):])) + "</p>")
            is_open = " open" if len(rest) <= 6 or not main else ""
            out += (f'<details{is_open}><summary>Other metrics ({len(rest)})</summary>'
                    f'<div class="others">{charts}</div>{skipped}</details>')
        return out

    # -- findings ------------------------------------------------------------------------
    def finding(self, group: list[Finding], index: int) -> str:
        e = escape
        f, alike = group[0], group[1:]
        metrics_seen = list(self.diagnosis.metrics_seen) or self.run.metrics()
        head = (f'<div class="fhead"><h3>{index}. <span class="mono">{e(f.symptom)}</span></h3>'
                f'<span class="badge {e(f.severity)}">{e(f.severity.upper())}</span>'
                f'<span class="span">{e(fmt_span(f))}'
                + (f" · rank {f.rank}" if f.rank is not None else "")
                + f" · confidence {f.confidence:.2f}</span>"
                + (f'<b class="times">x{len(group)}</b>' if alike else "") + "</div>")
        rows = []
        if alike:
            rows.append(f"<dt>also at</dt><dd>{e(', '.join(fmt_span(g) for g in alike))}</dd>")
        if f.evidence:
            rows.append("<dt>evidence</dt><dd><ul>"
                        + "".join(f"<li>{e(evidence_line(ev))}</li>" for ev in f.evidence)
                        + "</ul></dd>")
        if f.causes:
            items = []
            for c in f.causes:
                text, check = cause_line(c, metrics_seen)
                cls = "check ok" if c.checked_against_data else "check"
                items.append(f'<li>{e(text)} — <span class="{cls}">{e(check)}</span></li>')
            rows.append("<dt>causes</dt><dd><ul>" + "".join(items) + "</ul></dd>")
        def intervention(label: str, iv: Intervention) -> str:
            action, cost, check = intervention_lines(iv)
            return (f'<dt>{label}</dt><dd><b>{e(action)}</b><br><span class="cost">'
                    f'{e(cost)}</span><br><span class="verify">{e(check)}</span></dd>')

        if f.interventions:
            rows.append(intervention("try first", f.interventions[0]))
        if len(f.interventions) > 1:
            # The alternatives fold away: the first intervention is the recommendation.
            more = "".join(intervention("then", iv) for iv in f.interventions[1:])
            n = len(f.interventions) - 1
            rows.append(f'<dt></dt><dd><details class="more"><summary>{n} more '
                        f'intervention{"s" if n != 1 else ""}</summary><dl>{more}</dl>'
                        "</details></dd>")
        if not f.causes and not f.interventions:
            rows.append('<dt></dt><dd class="muted">no cause or intervention routed for this '
                        "finding</dd>")
        shown = sorted({self.plotted[m] for m in _finding_metrics(f) if m in self.plotted})
        if shown and f.onset_step is not None:
            links = ", ".join(f'<a href="#{a}">{e(a.removeprefix("plot-"))}</a>' for a in shown)
            rows.append(f"<dt>plotted</dt><dd>{links}</dd>")
        body = f'<dl>{"".join(rows)}</dl>'
        summary = f'<p class="summary">{e(f.summary)}</p>'
        fid = self.ids[id(f)]
        if f.severity == "info":
            # Info findings are context, not problems: folded to their summary line.
            return (f'<details class="finding info" id="{fid}"><summary>{head}{summary}'
                    f"</summary>{body}</details>")
        return (f'<article class="finding {e(f.severity)}" id="{fid}">{head}{summary}{body}'
                "</article>")

    # -- page ----------------------------------------------------------------------------
    def render(self) -> str:
        from trainmedic._version import __version__

        e = escape
        d = self.diagnosis
        info = summarize_run(d, self.run)
        plots = self.plots()  # first: the findings link to the charts it draws
        steps = info.steps_text()
        if info.num_points is not None:
            steps += f" ({info.num_points:,} points)"
        metrics = e(", ".join(info.metrics[:_HEADER_METRICS]) or "none")
        if len(info.metrics) > _HEADER_METRICS:
            rest = info.metrics[_HEADER_METRICS:]
            metrics += (f'<details class="more"><summary>and {len(rest)} more</summary>'
                        f'{e(", ".join(rest))}</details>')
        facts = [("source", e(info.source)), ("steps", e(steps)), ("metrics", metrics),
                 ("ranks", e(info.ranks_text()))]
        worst = d.worst()
        vcls = "v-error" if worst >= 2 or not d.loss_found else (
            "v-warning" if worst == 1 else "v-ok")
        parts = [
            "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
            '<meta name="viewport" content="width=device-width,initial-scale=1">',
            f"<title>trainmedic: {e(info.source)}</title><style>{PAGE_CSS}</style></head><body>"
            "<main>",
            "<h1>trainmedic diagnosis</h1><div class=\"facts\">"
            + "".join(f"<span>{k}</span><b>{v}</b>" for k, v in facts) + "</div>",
            f'<div class="verdict {vcls}">{e(verdict(d))}</div>',
            f"<h2>Findings ({len(self.findings)}, worst first)</h2>",
        ]
        if self.findings:
            parts += [self.finding(group, i) for i, group in enumerate(self.groups, 1)]
        else:
            parts.append('<p class="muted">No findings.</p>')
        parts.append("<h2>Metrics</h2>")
        parts.append('<p class="muted">Shaded: the steps of each finding (hover for its summary, '
                     "click to jump to it). Red triangles on the top edge: NaN or +inf values; on "
                     "the bottom edge: -inf. Series of more than 2,000 points are drawn by "
                     "min/max per bucket, so single-step spikes stay visible.</p>")
        parts.append(plots)
        checks = checks_not_run_lines(d.checks_not_run)
        if checks:
            parts.append(f"<h2>Checks not run ({len(d.checks_not_run)})</h2><ul class=\"plain\">"
                         + "".join(f"<li>{e(c)}</li>" for c in checks) + "</ul>")
        how = mapping_lines(d)
        if how:
            parts.append("<h2>How the columns were read</h2><ul class=\"plain\">"
                         + "".join(f"<li>{e(c)}</li>" for c in how) + "</ul>")
        notes = note_lines(d, self.run)
        if notes:
            parts.append("<h2>Import notes</h2><ul class=\"plain\">"
                         + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
        parts.append(f"<footer>trainmedic {e(__version__)} · findings schema "
                     f"trainmedic.findings/1</footer></main><script>{PAGE_JS}</script>"
                     "</body></html>\n")
        return "".join(parts)


def render_html(diagnosis: Diagnosis, run: Run) -> str:
    """The report page as a string."""
    return _Page(diagnosis, run).render()


def write_html(diagnosis: Diagnosis, run: Run, path: str | Path) -> Path:
    """Write the self-contained HTML report to ``path`` (atomically) and return the path."""
    target = Path(path)
    text = render_html(diagnosis, run)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; a report is meant to be shared
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
