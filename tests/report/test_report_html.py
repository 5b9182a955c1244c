"""The HTML report: self-contained, findings marked on the plots, NaN visible, fast on 1M steps."""

from __future__ import annotations

import re
import time
from html.parser import HTMLParser

import numpy as np
import pytest
from report_samples import sample_diagnosis, sample_run

from trainmedic.diagnose.finding import Diagnosis, Evidence, Finding
from trainmedic.report import render_html, write_html
from trainmedic.report.chart import Band, Chart, Line, log_ticks, nice_ticks, render_chart
from trainmedic.run.series import Run


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def of(self, tag: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag]


def parse(html: str) -> _Collect:
    p = _Collect()
    p.feed(html)
    p.close()
    return p


def test_self_contained(diagnosis, run, tmp_path) -> None:
    path = write_html(diagnosis, run, tmp_path / "sub" / "report.html")
    assert path == tmp_path / "sub" / "report.html"
    html = path.read_text(encoding="utf-8")
    p = parse(html)
    assert not [a for a in p.of("script") if a.get("src")]
    assert not p.of("link") and not p.of("img") and not p.of("iframe")
    for tag, attrs in p.tags:
        for name in ("src", "href", "xlink:href", "action"):
            value = attrs.get(name) or ""
            assert not re.match(r"(?i)\s*(https?:)?//", value), (tag, name, value)
    assert "@import" not in html and "url(" not in html
    # The only scheme-looking text allowed is the SVG namespace-free markup: no http at all.
    assert "http://" not in html and "https://" not in html
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert (path.stat().st_mode & 0o777) == 0o644
    assert not list(path.parent.glob(".report.html.*"))  # no temp file left behind


def test_findings_listed_and_marked(diagnosis, run) -> None:
    html = render_html(diagnosis, run)
    # Same content as the terminal report.
    for text in ("nonfinite_loss", "loss_spike", "memory_growth",
                 "loss = 9.5 at step 800 vs reference 2.26 (measured: running median",
                 "checked against lr: lr had been falling for 700 steps",
                 "not checked: log lr per step to check", "cost: loses ~50 steps of compute",
                 "log loss_scale to check loss_scale_collapse, nonfinite_grad",
                 "skipped 1 line with a non-numeric cell",
                 "1 error, 1 warning, 1 info. Worst: nonfinite_loss"):
        assert text in html, text
    # Worst first.
    assert html.index('id="finding-1"') < html.index('id="finding-2"')
    assert html.index("nonfinite_loss") < html.index("loss_spike")
    # The loss plot carries the loss_spike and nonfinite_loss bands; grad_norm the spike
    # (named in its evidence); the memory plot the memory_growth band.
    plots = dict(re.findall(r'<section class="plot" id="(plot-[^"]+)">(.*?)</section>', html,
                            re.S))
    assert set(plots) >= {"plot-loss", "plot-lr", "plot-grad_norm", "plot-step_time_s",
                          "plot-mem_alloc_mb", "plot-eval_accuracy"}
    assert "1 nonfinite_loss" in plots["plot-loss"] and "2 loss_spike" in plots["plot-loss"]
    assert "2 loss_spike" in plots["plot-grad_norm"]
    assert "3 memory_growth" in plots["plot-mem_alloc_mb"]
    assert "band" not in plots["plot-lr"]
    assert 'href="#finding-2"' in plots["plot-loss"]
    # val_loss is drawn on the loss axes, data_time_s with step_time_s.
    assert "val_loss" in plots["plot-loss"] and "data_time_s" in plots["plot-step_time_s"]
    # Canonical order, then the rest folded in a <details>.
    order = [html.index(f'id="plot-{m}"') for m in ("loss", "lr", "grad_norm", "step_time_s",
                                                      "mem_alloc_mb", "eval_accuracy")]
    assert order == sorted(order)
    assert html.index("<details") < html.index('id="plot-eval_accuracy"')


def test_nan_points_are_visible(diagnosis, run) -> None:
    html = render_html(diagnosis, run)
    loss_plot = html[html.index('id="plot-loss"'):html.index('id="plot-lr"')]
    assert 'class="nonfinite"' in loss_plot
    assert "loss: 5 non-finite points (NaN), first at step 1500" in loss_plot
    assert "NaN/inf (5 points)" in loss_plot


def test_all_nan_metric_and_infs() -> None:
    run = Run(source="x")
    run.add("loss", np.arange(5), [np.nan, np.inf, -np.inf, np.nan, np.nan])
    html = render_html(Diagnosis(source="x", metrics_seen=["loss"]), run)
    assert "5 non-finite points (NaN, inf, -inf)" in html


def test_empty_run_and_single_metric(tmp_path) -> None:
    empty = render_html(Diagnosis(source="empty.csv", metrics_seen=[]), Run(source="empty.csv"))
    assert "no metric series to plot" in empty and "No findings." in empty
    run = Run(source="one.csv")
    run.add("my_metric", [7], [0.5])
    html = write_html(Diagnosis(source="one.csv", metrics_seen=["my_metric"]), run,
                      tmp_path / "one.html").read_text()
    assert 'id="plot-my_metric"' in html and "<circle" in html
    # Open, since there is nothing else to show.
    assert "<details open>" in html


def test_multi_rank_lines_and_rank_band() -> None:
    run = sample_run(300, nan_at=None, spike_at=10, ranks=(0, 1, 2))
    f = Finding("straggler", "warning", 0.8, 50, "rank 2 is 30% slower",
                (Evidence("step_time_s", 50, 0.3, 0.2),), end_step=250, rank=2,
                metric="step_time_s")
    html = render_html(Diagnosis(source="x", metrics_seen=run.metrics(), findings=[f]), run)
    assert "loss rank 0" in html and "loss rank 2" in html
    assert "1 straggler r2" in html


def test_finding_metric_outside_canonical_is_not_folded() -> None:
    run = sample_run(200, nan_at=None, spike_at=10)
    f = Finding("plateau", "warning", 0.7, 50, "eval accuracy flat",
                (Evidence("eval_accuracy", 50, 0.4),), end_step=150)
    html = render_html(Diagnosis(source="x", metrics_seen=run.metrics(), findings=[f]), run)
    assert html.index('id="plot-eval_accuracy"') < html.index("<details") \
        if "<details" in html else True
    assert "1 plateau" in html


def test_escaping_of_names_and_text() -> None:
    run = Run(source="<evil>")
    run.add("layer/<b>/x", [0, 1], [1.0, 2.0])
    f = Finding("loss_spike", "warning", 0.5, 0, "a <script>alert(1)</script> summary",
                (Evidence("layer/<b>/x", 0, 1.0),))
    html = render_html(Diagnosis(source="<evil>", metrics_seen=["layer/<b>/x"], findings=[f]),
                       run)
    assert "<script>alert" not in html and "&lt;script&gt;" in html
    assert "<evil>" not in html and "<b>/x" not in html


def test_log_scale_when_values_span_decades() -> None:
    steps = np.arange(100)
    wide = Line("lr", steps, np.logspace(-8, -3, 100))
    narrow = Line("loss", steps, np.linspace(1, 3, 100))
    assert 'data-log="1"' in render_chart(Chart("lr", [wide], (0, 99)))
    assert 'data-log="0"' in render_chart(Chart("loss", [narrow], (0, 99)))
    # Zero or negative values cannot go on a log axis.
    with_zero = Line("lr", steps, np.concatenate([[0.0], np.logspace(-8, -3, 99)]))
    assert 'data-log="0"' in render_chart(Chart("lr", [with_zero], (0, 99)))


def test_log_axis_named_in_legend(diagnosis, run) -> None:
    html = render_html(diagnosis, run)
    lr_plot = html[html.index('id="plot-lr"'):html.index('id="plot-grad_norm"')]
    loss_plot = html[html.index('id="plot-loss"'):html.index('id="plot-lr"')]
    assert "log y axis" in lr_plot and "log y axis" not in loss_plot


def test_ticks() -> None:
    assert nice_ticks(0, 1000, 5) == [0, 200, 400, 600, 800, 1000]
    assert nice_ticks(0.5, 0.5) == [0.5]
    assert log_ticks(-8.2, -2.9) == [-8, -7, -6, -5, -4, -3]
    assert len(log_ticks(-30, 30)) <= 7


def test_spike_survives_into_the_svg() -> None:
    n = 200_000
    values = np.ones(n)
    values[123_457] = 1000.0
    svg = render_chart(Chart("loss", [Line("loss", np.arange(n), values)], (0, n - 1)))
    path = re.search(r'<path class="line s0" d="([^"]+)"', svg)
    assert path is not None
    ys = [float(m) for m in re.findall(r"[ML][\d.]+ ([\d.]+)", path.group(1))]
    top = float(re.search(r'data-t="([\d.]+)"', svg).group(1))  # type: ignore[union-attr]
    assert min(ys) <= top + 15  # the spike reaches the top of the plot
    assert len(ys) <= 2000


def test_big_run_is_fast_and_small(tmp_path) -> None:
    """1M steps x 8 metrics. A loose bound (the benchmark prints the real figure)."""
    n = 1_000_000
    rng = np.random.default_rng(1)
    run = Run(source="big")
    steps = np.arange(n)
    for m in ("loss", "val_loss", "lr", "grad_norm", "step_time_s", "data_time_s",
              "mem_alloc_mb", "rss_mb"):
        run.add(m, steps, rng.random(n) + 1)
    d = Diagnosis(source="big", metrics_seen=run.metrics())
    write_html(d, run, tmp_path / "warm.html")
    t0 = time.perf_counter()
    path = write_html(d, run, tmp_path / "big.html")
    elapsed = time.perf_counter() - t0
    assert path.stat().st_size < 2_000_000
    assert elapsed < 3.0  # the target is 0.3 s; CI machines vary


@pytest.mark.parametrize("n_other", [3, 130])
def test_many_other_metrics(n_other: int) -> None:
    run = Run(source="x")
    run.add("loss", [0, 1, 2], [3.0, 2.0, 1.0])
    for i in range(n_other):
        run.add(f"eval_f1_{i:03d}", [0, 1, 2], [0.1, 0.2, 0.3])
    html = render_html(Diagnosis(source="x", metrics_seen=run.metrics()), run)
    assert f"Other metrics ({n_other})" in html
    if n_other > 120:
        assert "Not plotted (10 more)" in html and 'id="plot-eval_f1_129"' not in html


def test_sample_diagnosis_source_is_shown() -> None:
    html = render_html(sample_diagnosis("runs/x/<y>.csv"), sample_run(50, nan_at=None,
                                                                       spike_at=3))
    assert "runs/x/&lt;y&gt;.csv" in html


def test_band_outside_the_plotted_steps_stays_inside_the_plot() -> None:
    steps = np.arange(100)
    svg = render_chart(Chart("loss", [Line("loss", steps, np.ones(100))], (0, 99),
                             bands=[Band(500, 600, "1 x", "error"), Band(-50, -10, "2 y", "info")]))
    right = float(re.search(r'data-r="([\d.]+)"', svg).group(1))  # type: ignore[union-attr]
    left = float(re.search(r'data-l="([\d.]+)"', svg).group(1))  # type: ignore[union-attr]
    rects = re.findall(r'<g class="band[^"]*"><title>[^<]*</title><rect x="([\d.]+)" '
                       r'y="[\d.]+" width="([\d.]+)"', svg)
    assert len(rects) == 2
    for x, w in rects:
        assert left <= float(x) and float(x) + float(w) <= right + 0.1


def test_a_finding_without_an_end_is_shaded_to_the_end_of_the_run() -> None:
    # a divergence that stayed up (end_step None) spans from its onset to the last step, not
    # a 2-unit line at its onset
    run = sample_run(1000, nan_at=None, spike_at=10)
    f = Finding("divergence", "error", 0.9, 400, "loss rose and stayed up",
                (Evidence("loss", 400, 3.0, 1.0),), end_step=None, metric="loss")
    html = render_html(Diagnosis(source="x", metrics_seen=run.metrics(), findings=[f]), run)
    loss_svg = html[html.index('id="plot-loss"'):]
    loss_svg = loss_svg[:loss_svg.index("</svg>")]
    rect = re.search(r'<g class="band band-error"><title>[^<]*</title><rect x="([\d.]+)" '
                     r'y="[\d.]+" width="([\d.]+)"', loss_svg)
    assert rect, loss_svg[:800]
    x, width = float(rect.group(1)), float(rect.group(2))
    assert width > 500 and x + width > 900  # from step 400 to 999 on a ~1000-unit axis


def test_samples_and_tokens_per_second_get_their_own_axes() -> None:
    run = sample_run(200, nan_at=None, spike_at=10)
    s = np.arange(200)
    run.add("samples_per_s", s, np.full(200, 32.0))
    run.add("tokens_per_s", s, np.full(200, 65536.0))
    html = render_html(Diagnosis(source="x", metrics_seen=run.metrics()), run)
    assert 'id="plot-samples_per_s"' in html and 'id="plot-tokens_per_s"' in html


def test_lines_carry_their_data_for_the_hover_readout() -> None:
    run = sample_run(300, nan_at=None, spike_at=10)
    html = render_html(Diagnosis(source="x", metrics_seen=run.metrics()), run)
    m = re.search(r'<path class="line s0" d="[^"]+" data-label="loss" data-s="([^"]+)" '
                  r'data-v="([^"]+)"', html)
    assert m
    steps = [int(v) for v in m.group(1).split(",")]
    vals = [float(v) for v in m.group(2).split(",")]
    loss = run.get("loss")
    assert loss is not None and len(steps) == len(vals)
    for st, v in zip(steps[::37], vals[::37], strict=True):
        i = int(np.searchsorted(loss.steps, st))
        assert v == pytest.approx(float(loss.values[i]), rel=1e-4)


def test_alike_repeated_events_share_one_card_x3() -> None:
    # three recovered loss spikes: one card "x3" with the other two steps, three bands
    run = sample_run(300, nan_at=None, spike_at=10)
    spikes = [Finding("loss_spike", "warning", 0.9, s, f"loss jumped at step {s}",
                      (Evidence("loss", s, 7.0, 2.0),), end_step=s + 1, metric="loss")
              for s in (110, 140, 170)]
    html = render_html(Diagnosis(source="x", metrics_seen=run.metrics(), findings=spikes), run)
    assert html.count('class="finding warning"') == 1
    assert '<b class="times">x3</b>' in html and "also at" in html
    assert html.count(">1 loss_spike<") == 3  # each band keeps its place, numbered by its card
    assert 'id="finding-2"' not in html
