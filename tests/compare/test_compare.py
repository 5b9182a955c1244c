"""``trainmedic.compare`` on real demo runs (same seed twice, a stalled loader, another lr) and
on synthetic series with a known difference."""

from __future__ import annotations

import json
import pathlib
import time

import numpy as np
import pytest

from trainmedic.compare import CompareConfig, compare_paths, compare_runs
from trainmedic.compare.align import Aligned
from trainmedic.compare.deltas import bootstrap, parting_index
from trainmedic.compare.verdict import judge
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
            out[name] = str(run_demo(DemoConfig(fault=fault, steps=STEPS, eval_every=2,
                                                out_dir=root / name)))
        # the demo's peak lr is 3e-3; the same run at 3e-4
        mp.setattr(demo_runner, "_PEAK_LR", 3e-4)
        out["lr3e-4"] = str(run_demo(DemoConfig(fault="none", steps=STEPS, eval_every=2,
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
    assert "no difference beyond this run's own noise" in render_text(c)


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
    assert "peak_lr" in text and "a is lower beyond this run's own noise" in text
    assert "seed-to-seed spread is not measured" in text


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
    v = doc["pairs"][0]["verdict"]
    assert v["better"] == "a" and v["runs_per_side"] == 1 and not v["seed_spread_measured"]
    assert v["estimated"]["delta_interval"]["n_eff"] is not None
    page = write_compare_html(c, tmp_path / "c.html").read_text()
    assert page.count("<svg") >= 5 and "a is lower beyond" in page
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


def test_time_and_token_axes_weigh_each_row_by_its_step_gap() -> None:
    # The same run logged every step and every 10 steps: by time and by tokens, A's step s
    # must meet B's step s (it met B's step 10 s when rows were summed unweighted).
    # A linear loss: B interpolated between its logged steps is exact, so any difference
    # comes from misalignment alone.
    steps = np.arange(1000)
    loss = 3.0 - 0.002 * steps
    every = Run(source="every")
    tenth = Run(source="tenth")
    for run, idx in ((every, steps), (tenth, steps[::10])):
        run.add("loss", list(idx), loss[idx])
        run.add("step_time_s", list(idx), np.full(len(idx), 0.1))
        run.add("tokens_per_s", list(idx), np.full(len(idx), 5120.0))
    for by in ("time", "tokens"):
        c = compare_runs([every, tenth], config=CompareConfig(by=by))
        m = c.pairs[0].get("loss")
        assert m is not None and m.points >= 900
        assert np.abs(m.aligned.steps_b - m.aligned.steps_a).max() <= 1
        assert m.delta == pytest.approx(0.0, abs=1e-9) and not m.significant
        assert m.parting_step is None and not c.pairs[0].verdict.sure


def _ema(x: np.ndarray, beta: float) -> np.ndarray:
    # vectorised over pairs (axis 0): x[:, t] smoothed along t
    out = np.empty_like(x)
    out[:, 0] = x[:, 0]
    for t in range(1, x.shape[1]):
        out[:, t] = beta * out[:, t - 1] + (1 - beta) * x[:, t]
    return out


def _pairs(kind: str, n: int, count: int, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """``count`` noise-only pairs (different seeds, one shared curve) and their difference's
    marginal noise sd."""
    rng = np.random.default_rng(seed)
    curve = 3.0 / (1 + np.arange(n) / 20)
    ea, eb = rng.normal(0, 0.05, (count, n)), rng.normal(0, 0.05, (count, n))
    sd = 0.05 * np.sqrt(2)
    if kind == "ema":
        ea, eb = _ema(ea, 0.9), _ema(eb, 0.9)
        sd *= np.sqrt(0.1 / 1.9)  # stationary sd of EMA(0.9) of white noise
    return curve + ea, curve + eb, float(sd)


def _judge(a: np.ndarray, b: np.ndarray):  # type: ignore[no-untyped-def]
    st = np.arange(len(a))
    al = Aligned("loss", "step", st.astype(np.float64), st, st, a, b)
    return judge("a", "b", {"loss": (al, (0.0, len(a) - 1.0), (0.0, len(a) - 1.0))})


@pytest.mark.parametrize("kind", ["iid", "ema"])
def test_noise_only_pairs_are_rarely_called_sure_or_parted(kind: str) -> None:
    # Nominal level 5%; allowed 10%: the margin covers Monte-Carlo error of ~150 pairs
    # (sd ~1.8 points at 5%) and approximate small-sample corrections, not this code's output.
    # Known limit (docs/compare.md): 15 points of an EMA(0.9)-logged loss hold about one
    # independent point, too few to see their own autocorrelation; the false "sure" rate
    # there measured ~11% (2x nominal), held here under 15% so that a regression shows.
    for n, count in ((15, 150), (60, 150), (300, 60)):
        a, b, _ = _pairs(kind, n, count, seed=n)
        sure = parted = 0
        for i in range(count):
            sure += _judge(a[i], b[i]).sure
            parted += parting_index(a[i], b[i])[0] is not None
        bar = 0.15 if (kind, n) == ("ema", 15) else 0.10
        assert sure / count <= bar, (kind, n, sure / count)
        assert parted / count <= 0.10, (kind, n, parted / count)


@pytest.mark.parametrize("kind", ["iid", "ema"])
def test_a_shift_of_a_few_noise_sds_is_found_near_its_step(kind: str) -> None:
    n, at, count = 300, 200, 20
    a, b, sd = _pairs(kind, n, count, seed=7)
    # 6 marginal noise sds of the difference from step 200; 10 for EMA(0.9) noise, whose 100
    # end points hold only ~5 independent ones (n_eff), so 6 sds is found about half the time
    b[:, at:] += (10 if kind == "ema" else 6) * sd
    found = near = 0
    for i in range(count):
        v = _judge(a[i], b[i])
        first, _ = parting_index(a[i], b[i])
        found += v.sure and v.better == "a"
        near += first is not None and abs(first - at) <= 10
    assert found >= 0.8 * count and near >= 0.8 * count
