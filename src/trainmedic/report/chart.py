"""A line chart as an inline SVG string: series over steps, finding bands, NaN/inf markers.

Drawn in Python so that the HTML report needs no script, font or network. Coordinates are in a
fixed viewBox (the page scales it to its width). Each series is decimated with min/max buckets
first (``decimation.py``), so a 1M-point series costs ~2k path points and its spikes survive.
Styling is by CSS class (``s0``..``s7`` for series colours, ``band-error`` etc.), defined by the
page, so the chart stays small.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

import numpy as np

from trainmedic.report.decimation import (
    NAN_KIND,
    NEG_INF_KIND,
    POS_INF_KIND,
    decimate_minmax,
    nonfinite_points,
)
from trainmedic.report.wording import fmt_num

__all__ = ["Line", "Band", "Chart", "render_chart", "nice_ticks", "log_ticks", "y_is_log",
           "LOG_DECADES"]

#: Use a log y axis when the positive finite values span more than this many decades.
LOG_DECADES = 3.0
#: Lines with at most this many points also get a dot per point (sparse evals stay visible).
_DOTS_UP_TO = 60


@dataclass(frozen=True)
class Line:
    """One series on a chart: clean steps (increasing) and values, NaN/inf as logged."""

    label: str
    steps: np.ndarray
    values: np.ndarray
    colour: int = 0
    """Index into the page's series palette (CSS classes ``s0``..``s7``)."""


@dataclass(frozen=True)
class Band:
    """A finding's steps, shaded on the chart with a label."""

    start: int
    end: int
    label: str
    severity: str
    title: str = ""
    """Tooltip text (the finding's summary)."""
    anchor: str = ""
    """``id`` of the finding's entry on the page, for a link from the band."""


@dataclass
class Chart:
    """Everything one chart shows; ``x_range`` is shared across a page so steps line up."""

    title: str
    lines: list[Line]
    x_range: tuple[float, float]
    bands: list[Band] = field(default_factory=list)
    width: int = 1000
    height: int = 240
    max_points: int = 2000


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values (1, 2, 5 x 10^k) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(target, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        ticks.append(0.0 if abs(t) < step * 1e-9 else t)
        t = first + step * len(ticks)
    return ticks


def log_ticks(lo_exp: float, hi_exp: float, target: int = 6) -> list[float]:
    """Decade exponents within [lo_exp, hi_exp], thinned to about ``target`` ticks."""
    first, last = math.ceil(lo_exp - 1e-9), math.floor(hi_exp + 1e-9)
    if last < first:
        return [round((lo_exp + hi_exp) / 2, 2)]
    every = max(1, math.ceil((last - first + 1) / target))
    return [float(e) for e in range(first, last + 1, every)]


def _fmt_tick(x: float) -> str:
    ax = abs(x)
    if ax == 0:
        return "0"
    if ax >= 1e6 and ax < 1e9 and x == round(x):
        return f"{x / 1e6:g}M"
    if ax >= 1e3 and ax < 1e6 and x == round(x):
        return f"{x / 1e3:g}k"
    if ax >= 1e5 or ax < 1e-3:
        return f"{x:.0e}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")
    return f"{x:.4g}"


def _fmt_step_tick(x: float) -> str:
    return _fmt_tick(float(round(x)))


class _Scale:
    def __init__(self, lo: float, hi: float, px_lo: float, px_hi: float, log: bool) -> None:
        self.log = log
        self.lo, self.hi = lo, hi
        self.px_lo, self.px_hi = px_lo, px_hi

    def __call__(self, v: np.ndarray) -> np.ndarray:
        x = np.log10(v) if self.log else v
        return self.px_lo + (x - self.lo) / (self.hi - self.lo) * (self.px_hi - self.px_lo)


def y_is_log(lines: list[Line]) -> bool:
    """Whether the chart of ``lines`` gets a log y axis (values > 0 spanning > 3 decades)."""
    return _y_domain(lines)[2]


def _y_domain(lines: list[Line]) -> tuple[float, float, bool]:
    lo, hi = math.inf, -math.inf
    for ln in lines:
        if not len(ln.values):
            continue
        a, b = float(ln.values.min()), float(ln.values.max())
        if not (math.isfinite(a) and math.isfinite(b)):  # NaN/inf present: mask them out
            fin = ln.values[np.isfinite(ln.values)]
            if not fin.size:
                continue
            a, b = float(fin.min()), float(fin.max())
        lo, hi = min(lo, a), max(hi, b)
    if not math.isfinite(lo):
        return 0.0, 1.0, False
    if lo > 0 and math.log10(hi) - math.log10(lo) > LOG_DECADES:
        a, b = math.log10(lo), math.log10(hi)
        pad = (b - a) * 0.04
        return a - pad, b + pad, True
    if hi == lo:
        d = abs(lo) * 0.1 or 1.0
        return lo - d, hi + d, False
    pad = (hi - lo) * 0.06
    # Keep a zero baseline when the data sit just above it (memory, times, rates).
    bottom = 0.0 if lo >= 0 and lo - pad < 0 else lo - pad
    return bottom, hi + pad, False


def _path(xs: np.ndarray, ys: np.ndarray) -> str:
    """An SVG path through the points; a non-finite y starts a new segment (a gap)."""
    ok = np.isfinite(ys)
    if not ok.any():
        return ""
    prev_ok = np.concatenate([[False], ok[:-1]])
    parts = []
    for x, y, good, cont in zip(np.round(xs, 1).tolist(), np.round(ys, 1).tolist(),
                                ok.tolist(), prev_ok.tolist(), strict=True):
        if good:
            parts.append(f"{'L' if cont else 'M'}{x:g} {y:g}")
    return "".join(parts)


def render_chart(chart: Chart, *, chart_id: str = "") -> str:
    """The SVG markup of ``chart``."""
    w, h = chart.width, chart.height
    # Margins and font sizes (the page's CSS) are in viewBox units, which scale with the
    # page: 15-unit ticks stay ~11 px on an 800 px window and ~15 px at 1400 px.
    left, right, top, bottom = 72.0, w - 14.0, 26.0, h - 28.0
    x0, x1 = chart.x_range
    if x1 <= x0:
        x0, x1 = x0 - 1, x1 + 1
    xs = _Scale(x0, x1, left, right, False)
    y_lo, y_hi, ylog = _y_domain(chart.lines)
    ys = _Scale(y_lo, y_hi, bottom, top, False)  # y domain is already in log10 units if ylog

    def y_px(v: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return ys(np.log10(v) if ylog else v)

    out: list[str] = [
        f'<svg class="chart" viewBox="0 0 {w} {h}" role="img" '
        f'aria-label="{escape(chart.title)}"'
        + (f' id="{escape(chart_id)}"' if chart_id else "")
        + f' data-x0="{x0:g}" data-x1="{x1:g}" data-l="{left:g}" data-r="{right:g}"'
        f' data-t="{top:g}" data-b="{bottom:g}" data-y0="{y_lo:g}" data-y1="{y_hi:g}"'
        f' data-log="{int(ylog)}">'
    ]
    # Grid and axes.
    yt = log_ticks(y_lo, y_hi) if ylog else nice_ticks(y_lo, y_hi, 4)
    for t in yt:
        ty = float(ys(np.array(t)))
        label = _fmt_tick(10 ** t) if ylog else _fmt_tick(t)
        out.append(f'<line class="grid" x1="{left:g}" x2="{right:g}" y1="{ty:.1f}" '
                   f'y2="{ty:.1f}"/><text class="tick" x="{left - 6:g}" y="{ty + 4:.1f}" '
                   f'text-anchor="end">{label}</text>')
    for t in nice_ticks(x0, x1, 6):
        tx = float(xs(np.array(t)))
        out.append(f'<line class="grid" x1="{tx:.1f}" x2="{tx:.1f}" y1="{top:g}" '
                   f'y2="{bottom:g}"/><text class="tick" x="{tx:.1f}" y="{bottom + 20:g}" '
                   f'text-anchor="middle">{_fmt_step_tick(t)}</text>')
    out.append(f'<rect class="frame" x="{left:g}" y="{top:g}" width="{right - left:g}" '
               f'height="{bottom - top:g}"/>')

    # Finding bands: shaded under the lines (widest first, so a short band inside a long one
    # stays visible), labels over them, staggered into rows so neighbours do not overlap.
    geometry = []
    for band in chart.bands:
        bx0 = float(xs(np.array(band.start)))
        bx1 = float(xs(np.array(max(band.end, band.start))))
        # Clamp into the plot: a finding may name steps outside the plotted range.
        bx0 = min(max(bx0, left), right - 2.0)
        bx1 = min(max(bx1, left + 2.0), right)
        geometry.append((band, bx0, max(bx1 - bx0, 2.0)))

    def link(band: Band, inner: str) -> str:
        cls = f"band band-{escape(band.severity)}"
        title = f"<title>{escape(band.title or band.label)}</title>"
        g = f'<g class="{cls}">{title}{inner}</g>'
        return f'<a href="#{escape(band.anchor)}">{g}</a>' if band.anchor else g

    for band, bx0, bw in sorted(geometry, key=lambda g: -g[2]):
        out.append(link(band, f'<rect x="{bx0:.1f}" y="{top:g}" width="{bw:.1f}" '
                              f'height="{bottom - top:g}"/>'))
    labels: list[str] = []
    row_ends: list[float] = []
    for band, bx0, _ in geometry:
        # Text is ~8 viewBox units per character at the band labels' font size.
        text_w = 8.0 * len(band.label) + 6
        lx = max(left, min(bx0 + 3, right - text_w))
        row = next((i for i, end in enumerate(row_ends) if end < lx), len(row_ends))
        if row == len(row_ends):
            row_ends.append(0.0)
        row_ends[row] = lx + text_w
        ly = top - 7 if row == 0 else top + 12 * row + 2
        labels.append(link(band, f'<text class="band-label" x="{lx:.1f}" y="{ly:.1f}">'
                                 f'{escape(band.label)}</text>'))

    # Lines.
    for ln in chart.lines:
        if len(ln.steps) == 0:
            continue
        ds, dv = decimate_minmax(ln.steps, ln.values, chart.max_points)
        px, py = xs(ds.astype(np.float64)), y_px(dv)
        cls = f"s{ln.colour % 8}"
        d = _path(px, py)
        if d:
            # The drawn points' steps and values, for the hover readout to show the data (not
            # the mouse's height): 5 significant digits, as many points as the path has.
            data_s = ",".join(str(int(v)) for v in ds.tolist())
            data_v = ",".join(f"{v:.5g}" for v in dv.tolist())
            out.append(f'<path class="line {cls}" d="{d}" data-label="{escape(ln.label)}" '
                       f'data-s="{data_s}" data-v="{data_v}"><title>{escape(ln.label)}'
                       f'</title></path>')
        if len(ds) <= _DOTS_UP_TO:
            ok = np.isfinite(py)
            dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.6"/>'
                           for x, y in zip(px[ok].tolist(), py[ok].tolist(), strict=True))
            out.append(f'<g class="dots {cls}">{dots}</g>')
        # Non-finite points: a marker on the top edge (NaN, +inf) or bottom edge (-inf).
        ns, kinds, total = nonfinite_points(ln.steps, ln.values)
        if total:
            marks = []
            for s, k in zip(xs(ns.astype(np.float64)).tolist(), kinds.tolist(), strict=True):
                if k == NEG_INF_KIND:
                    marks.append(f"M{s - 4:.1f} {bottom - 1:g}l4 -7l4 7z")
                else:
                    marks.append(f"M{s - 4:.1f} {top + 1:g}l4 7l4 -7z")
            what = {NAN_KIND: "NaN", POS_INF_KIND: "inf", NEG_INF_KIND: "-inf"}
            present = set(kinds.tolist())
            kinds_seen = ", ".join(what[k] for k in what if k in present)
            first = fmt_num(int(ns[0])) if len(ns) else "?"
            out.append(f'<path class="nonfinite" d="{"".join(marks)}"><title>'
                       f'{escape(ln.label)}: {total} non-finite point{"s" if total != 1 else ""}'
                       f' ({kinds_seen}), first at step {first}</title></path>')
    out.extend(labels)
    out.append(f'<line class="cursor" x1="0" x2="0" y1="{top:g}" y2="{bottom:g}" '
               f'visibility="hidden"/><text class="readout" x="{left + 4:g}" y="{top + 12:g}">'
               f'</text></svg>')
    return "".join(out)
