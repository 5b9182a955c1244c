"""``trainmedic.compare`` on real demo runs (same seed twice, a stalled loader, another lr) and
on synthetic series with a known difference."""

from __future__ import annotations

import json
import pathlib
import time

import numpy as np
import pytest

from trainmedic.compare import CompareConfig, compare_paths, compare_runs
from trainmedic.compare.deltas import bootstrap, parting_index
from trainmedic.demo.faults import STALL_SLEEP_S
from trainmedic.errors import ConfigError, InputError
from trainmedic.report.compare_html import write_compare_html
from trainmedic.report.compare_text import SCHEMA, render_text, to_json
from trainmedic.run.series import Run

STEPS = 40


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    import trainmedic.demo.runner as demo_runner
    from trainmedic.demo import DemoConfig, run_demo

    root = tmp_path_factory.mktemp("runs")
    out: dict[str, str] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("RANK", raising=False)
        mp.delenv("WORLD_SIZE", raising=False)
        for name, fault in (("a", "none"), ("a2", "none"), ("stall", "stall")):
            out[name] = str(run_demo(DemoConfig(fault=fault, steps=STEPS, eval_every=5,
                                                out_dir=root / name)))
        # the demo's peak lr is 3e-3; the same run at 3e-4
        mp.setattr(demo_runner, "_PEAK_LR", 3e-4)
        out["lr3e-4"] = str(run_demo(DemoConfig(fault="none", steps=STEPS, eval_every=5,
                                                out_dir=root / "lr3e-4")))
    return out


def test_same_seed_twice_shows_no_difference(demo_runs: dict[str, str]) -> None:
    c = compare_paths([demo_runs["a"], demo_runs["a2"]])
    (pair,) = c.pairs
    loss = pair.get("loss")
    assert loss is not None and loss.points == STEPS
    assert not loss.significant and loss.parting_step is None
    assert loss.delta_interval is not None and loss.delta_interval.covers(0.0)
    assert pair.verdict.metric == "val_loss" and not pair.verdict.sure
    assert pair.verdict.better is None
    assert "no significant difference" in render_text(c)


def test_stall_shows_the_injected_data_wait(demo_runs: dict[str, str]) -> None:
    c = compare_paths([demo_runs["a"], demo_runs["stall"]])
    data = c.pairs[0].get("data_time_s")
    assert data is not None and data.significant and data.delta_interval is not None
    # time.sleep never returns early, and overshoots by the OS's timer slack: the data wait
    # added is 20 ms plus what sleep(20 ms) overshoots here, measured now, in this process.
    t = []
    for _ in range(10):
        t0 = time.perf_counter()
        time.sleep(STALL_SLEEP_S)
        t.append(time.perf_counter() - t0)
    overshoot = max(t) - STALL_SLEEP_S
    assert data.delta_interval.hi >= STALL_SLEEP_S
    assert data.delta_interval.lo <= STALL_SLEEP_S + overshoot + 0.001
    assert any(r.key == "demo_fault" and r.values == ("none", "stall") for r in c.config.rows)
    # the stall changes no number of the training itself
    loss = c.pairs[0].get("loss")
    assert loss is not None and not loss.significant


def test_lr_difference_named_with_its_first_step(demo_runs: dict[str, str]) -> None:
    c = compare_paths([demo_runs["a"], demo_runs["lr3e-4"]])
    pair = c.pairs[0]
    loss = pair.get("loss")
    assert loss is not None and loss.significant and loss.delta > 0
    assert loss.parting_step is not None and 0 < loss.parting_step < STEPS // 2
    assert pair.verdict.sure and pair.verdict.better == "a"
    text = render_text(c)
    assert f"parts at step {loss.parting_step}" in text
    (lr_row,) = [r for r in c.config.rows if r.key == "peak_lr"]
    assert lr_row.values == pytest.approx((3e-3, 3e-4))
    assert "peak_lr" in text and "a is better" in text


def test_json_schema_and_html(demo_runs: dict[str, str], tmp_path: pathlib.Path) -> None:
    c = compare_paths([demo_runs["a"], demo_runs["lr3e-4"], demo_runs["stall"]],
                      config=CompareConfig(by="tokens"))
    doc = json.loads(json.dumps(to_json(c), allow_nan=False, default=str))
    assert doc["schema"] == SCHEMA == "trainmedic.compare/1" and doc["by"] == "tokens"
    assert [r["label"] for r in doc["runs"]] == ["a", "lr3e-4", "stall"]
    assert [(p["a"], p["b"]) for p in doc["pairs"]] == [("a", "lr3e-4"), ("a", "stall")]
    m = doc["pairs"][0]["metrics"][0]
    assert set(m) == {"metric", "group", "points", "window", "measured", "estimated",
                      "significant"}
    assert {"delta", "a_mean", "b_mean"} <= set(m["measured"])
    assert {"delta_interval", "parting_step"} <= set(m["estimated"])
    assert doc["pairs"][0]["verdict"]["better"] == "a"
    page = write_compare_html(c, tmp_path / "c.html").read_text()
    assert page.count("<svg") >= 5 and "a is better" in page
    for ref in ("src=\"http", "href=\"http", "<link", "@import", "url("):
        assert ref not in page  # self-contained


def test_bootstrap_covers_a_known_shift_and_blocks_widen_it() -> None:
    rng = np.random.default_rng(1)
    n = 400
    # AR(1) noise (phi = 0.9): successive points are far from independent
    e = np.zeros(n)
    for i in range(1, n):
        e[i] = 0.9 * e[i - 1] + rng.normal(0, 0.1)
    a = 2.0 + e
    b = a + 0.05 + rng.normal(0, 0.02, n)
    iv = bootstrap(a, b)
    assert iv is not None and iv.covers(0.05) and iv.excludes(0.0)
    # resampling in blocks of ~sqrt(n) points: wider than an i.i.d. percentile interval
    d = b - a
    iid = np.percentile([rng.choice(d, n).mean() for _ in range(2000)], [2.5, 97.5])
    assert iv.hi - iv.lo >= 0.9 * (iid[1] - iid[0])
    assert parting_index(a, a + rng.normal(0, 0.01, n))[0] is None
    shifted = a.copy()
    shifted[300:] += 0.5
    first, _ = parting_index(a, shifted)
    assert first is not None and 290 <= first <= 310


def _run(source: str, steps: range, loss: np.ndarray) -> Run:
    r = Run(source=source)
    r.add("loss", list(steps), loss)
    return r


def test_bad_input() -> None:
    a = _run("a", range(10), np.linspace(3, 2, 10))
    with pytest.raises(ConfigError, match="at least 2"):
        compare_runs([a])
    b = _run("b", range(100, 110), np.linspace(3, 2, 10))
    with pytest.raises(InputError, match="no metric in common"):
        compare_runs([a, b])
    with pytest.raises(ConfigError, match="by"):
        CompareConfig(by="epoch")
    few = compare_runs([a, _run("b", range(8, 20), np.linspace(3, 2, 12))])
    assert few.pairs[0].verdict.reason == "too_few_points"
    assert "cannot tell" in render_text(few)
