"""The HTML report renders in headless Chromium (skipped where no chromium is installed)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from report_samples import sample_diagnosis, sample_run

from trainmedic.report import write_html

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(n)), None)

pytestmark = [pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH"),
              pytest.mark.slow]


def _script():
    spec = importlib.util.spec_from_file_location("screenshot_html",
                                                  ROOT / "scripts" / "screenshot_html.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["screenshot_html"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("width", [1400, 800])
def test_report_renders_in_chromium(tmp_path, width: int) -> None:
    shot = _script()
    html = write_html(sample_diagnosis(), sample_run(), tmp_path / "report.html")
    png = tmp_path / "report.png"
    assert shot.main([str(html), "--out", str(png), "--width", str(width),
                      "--height", "1400"]) == 0
    assert png.stat().st_size > 10_000
    assert shot.blank_reason(png) is None


def test_blank_page_is_detected(tmp_path) -> None:
    shot = _script()
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    assert shot.main([str(blank), "--out", str(tmp_path / "blank.png"),
                      "--width", "400", "--height", "300"]) == 1


_PROBE = """<script>
var s=document.querySelector('svg.chart'),r=s.getBoundingClientRect();
s.dispatchEvent(new MouseEvent('mousemove',{clientX:r.left+r.width*0.5,
  clientY:r.top+r.height*0.5,bubbles:true}));
document.body.setAttribute('data-probe',s.querySelector('.readout').textContent+'|'+
  s.querySelector('.cursor').getAttribute('visibility'));
</script></body>"""


def test_hover_readout_script_runs(tmp_path) -> None:
    """The inline JS works in a real browser: a mouse move shows the step under the cursor and
    each line's data value there (not the mouse's height)."""
    import re
    import subprocess

    html = write_html(sample_diagnosis(), sample_run(), tmp_path / "report.html").read_text()
    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("</body>", _PROBE))
    assert CHROMIUM is not None
    res = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                          "--no-first-run", "--disable-background-networking",
                          f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,2000",
                          "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=60, check=False)
    found = re.search(r'data-probe="step ([\d,]+): (\S+) ([-\d.e+]+)[^"|]*\|visible"',
                      res.stdout)
    assert found, res.stdout[-500:] + res.stderr[-500:]
    step = int(found.group(1).replace(",", ""))
    assert 500 < step < 1500  # the middle of a 0-1,999 axis, give or take the margins
    # the value shown is the series' own value at that step (5 significant digits)
    run = sample_run()
    label = found.group(2)
    series = run.get(label) if run.get(label) is not None else run.get("loss")
    assert series is not None
    i = int(np.argmin(np.abs(series.steps - step)))
    assert float(found.group(3)) == pytest.approx(float(series.values[i]), rel=1e-3)
