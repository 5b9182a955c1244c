"""The engine runs every detector, never raises on a degenerate run, reports missing metrics
and crashed detectors as checks not run, and sorts by severity then onset."""

from __future__ import annotations

import numpy as np
import pytest

from trainmedic.diagnose import SYMPTOMS, diagnose, register_detector, unregister_detector
from trainmedic.diagnose.finding import Finding
from trainmedic.diagnose.registry import NotRun, detectors
from trainmedic.errors import RegistryError
from trainmedic.run.series import Run

CORE = ["nonfinite_loss", "loss_spike", "divergence", "flat_loss", "plateau", "oscillation",
        "overfitting", "exploding_gradients", "vanishing_gradients", "input_bound",
        "step_time_outliers", "memory_growth", "straggler", "nonfinite_grad",
        "nan_masked_in_logs", "loss_scale_collapse", "resume_discontinuity",
        "throughput_regression"]
ALL_METRICS = ["loss", "val_loss", "grad_norm", "lr", "loss_scale", "param_norm",
               "update_ratio", "step_time_s", "data_time_s", "compute_time_s", "comm_time_s",
               "samples_per_s", "tokens_per_s", "mem_alloc_mb", "mem_reserved_mb",
               "mem_peak_mb", "rss_mb", "gpu_util"]


def test_every_required_symptom_has_a_detector() -> None:
    have = {d.symptom for d in detectors()}
    assert set(CORE) <= have
    assert have <= set(SYMPTOMS)


def test_duplicate_registration_raises() -> None:
    with pytest.raises(RegistryError):
        register_detector("loss_spike")(lambda run: [])
    with pytest.raises(RegistryError):
        register_detector("not_a_symptom")(lambda run: [])


def _degenerate(kind: str) -> Run:
    run = Run(kind)
    rng = np.random.default_rng(0)
    for i, m in enumerate(ALL_METRICS):
        if kind == "empty":
            run.add(m, np.array([], dtype=np.int64), np.array([]))
        elif kind == "one":
            run.add(m, [5], [1.0])
        elif kind == "allnan":
            run.add(m, np.arange(50), np.full(50, np.nan))
        elif kind == "constant":
            run.add(m, np.arange(300), np.full(300, 2.0))
        elif kind == "zeros":
            run.add(m, np.arange(300), np.zeros(300))
        elif kind == "huge":
            run.add(m, np.arange(300), 1e300 * rng.random(300))
        elif kind == "negative":
            run.add(m, np.arange(300), -rng.random(300) * 10 ** i)
        elif kind == "mixed":
            v = rng.standard_normal(300)
            v[::7] = np.nan
            v[::11] = np.inf
            v[::13] = -np.inf
            run.add(m, rng.integers(0, 100, 300), v)
        elif kind == "two":
            run.add(m, [1, 2], [1.0, np.nan])
        elif kind == "ranks":
            for r in range(3):
                run.add(m, np.arange(40), rng.random(40) + r, rank=r)
    return run


@pytest.mark.parametrize("kind", ["empty", "one", "allnan", "constant", "zeros", "huge",
                                  "negative", "mixed", "two", "ranks"])
def test_never_raises_on_degenerate_runs(kind: str) -> None:
    d = diagnose(_degenerate(kind))
    assert not [c for c in d.checks_not_run if c.reason.startswith("internal error")]
    d.to_dict()  # serializable


def test_empty_run_lists_what_to_log() -> None:
    d = diagnose(Run("nothing"))
    assert d.findings == []
    by = {c.symptom: c for c in d.checks_not_run}
    assert by["loss_spike"].missing == ("loss",)
    assert "log loss" in by["loss_spike"].reason
    assert "mem_alloc_mb" in by["memory_growth"].missing


def test_crashing_detector_becomes_check_not_run() -> None:
    def boom(run: Run) -> list[Finding] | NotRun:
        raise ZeroDivisionError("kaboom")

    register_detector("test.boom", doc="a detector that crashes")(boom)
    try:
        d = diagnose(Run("x"))
        c = next(c for c in d.checks_not_run if c.symptom == "test.boom")
        assert c.reason.startswith("internal error") and "kaboom" in c.reason
    finally:
        unregister_detector("test.boom")


def test_only_and_sorting_and_notes() -> None:
    from trainmedic.run.series import ImportNote

    run = Run("x")
    steps = np.arange(1, 1001)
    v = 3.0 * np.exp(-steps / 200) + 1.0
    v[300] *= 20
    v[800:] = np.nan
    run.add("loss", steps, v)
    run.notes.append(ImportNote("skipped_line", "skipped 1 line"))
    d = diagnose(run)
    levels = [f.level for f in d.findings]
    assert levels == sorted(levels, reverse=True)
    assert d.findings[0].symptom == "nonfinite_loss"
    assert d.notes == ["skipped 1 line"]
    only = diagnose(run, only={"loss_spike"})
    assert {f.symptom for f in only.findings} == {"loss_spike"}
    assert all(f.causes and f.interventions for f in d.findings)


def test_findings_json_shape() -> None:
    run = Run("x")
    run.add("loss", np.arange(100), np.r_[np.linspace(3, 1, 50), np.full(50, np.nan)])
    out = diagnose(run).to_dict()
    assert out["schema"] == "trainmedic.findings/1"
    f = out["findings"][0]
    assert f["evidence"][0]["basis"] == "measured"
    assert {"cause", "likelihood", "checked_against_data"} <= set(f["causes"][0])
    assert {"action", "displaced_cost", "verify", "changes_semantics"} <= set(
        f["interventions"][0])


def test_same_incident_on_several_ranks_is_one_finding() -> None:
    run = Run("ddp")
    steps = np.arange(1, 501)
    for r in range(4):
        v = 2.0 * np.exp(-steps / 100) + 1.0
        v[400:] = np.nan
        run.add("loss", steps, v, rank=r)
    d = diagnose(run)
    nf = [f for f in d.findings if f.symptom == "nonfinite_loss"]
    assert len(nf) == 1 and "ranks 0, 1, 2, 3" in nf[0].summary


def test_every_symptom_is_documented() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "symptoms.md").read_text()
    for d in detectors():
        assert f"### `{d.symptom}`" in doc, d.symptom
    for code in SYMPTOMS:
        assert f"`{code}`" in doc, code


def _hf_nan_filter_run(nan_loss_at: int | None = None) -> tuple[Run, np.ndarray]:
    run = Run("hf")
    run.meta["framework"] = "hf_trainer"
    steps = np.arange(1, 201) * 50
    loss = 2.0 * np.exp(-steps / 3000) + 0.5
    g = np.full(200, 1.5)
    g[150:] = np.nan
    loss[150:] = loss[149]  # the filtered average stays put
    if nan_loss_at is not None:
        loss[nan_loss_at] = np.nan
    run.add("loss", steps, loss)
    run.add("grad_norm", steps, g)
    return run, steps


def test_hf_nan_filter_and_the_measured_nan_gradient_are_both_reported() -> None:
    # The masked loss is inferred; the NaN grad norm is measured: two findings.
    run, steps = _hf_nan_filter_run()
    d = diagnose(run)
    roots = [f for f in d.findings if f.symptom in ("nan_masked_in_logs", "nonfinite_grad")]
    assert sorted(f.symptom for f in roots) == ["nan_masked_in_logs", "nonfinite_grad"]
    assert all(f.onset_step == int(steps[150]) for f in roots)
    f = next(f for f in roots if f.symptom == "nan_masked_in_logs")
    assert f.severity == "error"
    assert "logging_nan_inf_filter=False" in f.interventions[0].action


def test_a_nan_gradient_folds_into_the_incident_when_the_log_shows_a_nan_loss() -> None:
    run, _ = _hf_nan_filter_run(nan_loss_at=160)
    d = diagnose(run)
    assert "nonfinite_grad" not in {f.symptom for f in d.findings}


def test_no_curve_shape_findings_on_nan_masked_losses() -> None:
    """HF's NaN filter logs 0.0 once the loss is NaN: a 'plateau' on those zeros is not a
    fact about training, so the engine drops curve-shape findings after the masking onset."""
    import math

    import numpy as np

    from trainmedic.diagnose.engine import diagnose
    from trainmedic.run.series import Run

    rng = np.random.default_rng(0)
    steps = np.arange(10, 1010, 10)
    loss = np.array([2.0 * math.exp(-s / 200) + 0.6 for s in steps]) * np.exp(
        rng.normal(0, 0.02, steps.size))
    loss[steps >= 650] = 0.0
    grad = rng.lognormal(0.0, 0.1, steps.size)
    grad[steps >= 640] = np.nan
    run = Run(source="hf-nan-filter")
    run.meta["framework"] = "huggingface"
    run.add("loss", steps, loss)
    run.add("grad_norm", steps, grad)
    symptoms = {f.symptom: f for f in diagnose(run).findings}
    assert "nan_masked_in_logs" in symptoms
    assert symptoms["nan_masked_in_logs"].onset_step == 640
    assert not {"plateau", "flat_loss", "oscillation"} & set(symptoms), symptoms



def test_a_user_detector_with_a_namespaced_code_runs_and_reports() -> None:
    # the README's extension point: your own code, namespaced, with its one-line meaning
    from trainmedic.diagnose.registry import meaning
    from trainmedic.report import render_terminal, to_json

    def token_drop(run: Run) -> list[Finding] | NotRun:
        tr = run.get("tokens_per_s")
        assert tr is not None
        low = int(np.argmax(tr.values < 500))
        return [Finding(symptom="acme.token_drop", severity="warning", confidence=0.9,
                        onset_step=int(tr.steps[low]), end_step=None, rank=None,
                        metric="tokens_per_s", summary="tokens/s fell under the 500 floor")]

    register_detector("acme.token_drop", requires=("tokens_per_s",),
                      doc="tokens per second fell below the cluster's floor")(token_drop)
    try:
        assert meaning("acme.token_drop") == "tokens per second fell below the cluster's floor"
        run = Run("user")
        s = np.arange(100)
        run.add("loss", s, 2.0 * np.exp(-s / 30) + 0.5)
        run.add("tokens_per_s", s, np.where(s < 60, 900.0, 400.0))
        d = diagnose(run)
        f = next(f for f in d.findings if f.symptom == "acme.token_drop")
        assert f.onset_step == 60 and f.severity == "warning"
        assert '"acme.token_drop"' in to_json(d)
        render_terminal(d, run)  # renders without a lookup of the code's meaning failing
        # without the metric, the user's check is listed as not run, like a built-in one
        d2 = diagnose(Run("no-tokens"))
        assert any(c.symptom == "acme.token_drop" for c in d2.checks_not_run)
    finally:
        unregister_detector("acme.token_drop")
    assert meaning("acme.token_drop") is None


@pytest.mark.parametrize("code,doc", [("token_drop", "x"), ("Acme.Token", "x"),
                                      ("acme.token_drop", None), ("acme.token_drop", " "),
                                      ("acme.loss.spike", "x")])
def test_user_codes_must_be_namespaced_and_documented(code: str, doc: str | None) -> None:
    with pytest.raises(RegistryError):
        register_detector(code, doc=doc)(lambda run: [])


def test_docs_say_where_every_code_is_detected() -> None:
    # docs/symptoms.md's table names each built-in code's detector module and function
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "symptoms.md").read_text()
    section = doc.split("## Every code and where it is detected", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| [^|]+ \| (.+?) \|$", section, flags=re.M))
    reg = {d.symptom: d for d in detectors()}
    assert set(rows) == set(SYMPTOMS)
    for code in SYMPTOMS:
        d = reg.get(code)
        if d is None:
            assert rows[code] == "no built-in detector yet", code
        else:
            path = "src/" + d.fn.__module__.replace(".", "/") + ".py"
            assert rows[code] == f"`{path}` (`{d.fn.__name__}`)", code


def test_a_validation_jump_that_stays_while_the_model_memorizes_folds_into_overfitting() -> None:
    # a tracker repeats the last evaluation at every report: the validation loss rises in
    # steps (3.4 -> 4.2 -> 8.6 -> 19.5 -> 27) while the training loss falls to 0.011
    s = np.arange(1, 61)
    run = Run(source="t")
    noise = np.exp(np.random.default_rng(0).normal(0, 0.03, s.size))
    run.add("loss", s, np.maximum(3.3 * np.exp(-s / 4.0), 0.011) * noise)
    evals = np.repeat([3.4, 4.2, 8.6, 19.5, 24.8, 26.0, 26.4, 26.5, 26.7, 26.8, 26.9, 27.0,
                       27.1, 27.2, 27.3], 4)
    run.add("val_loss", s, evals)
    loud = [f for f in diagnose(run).findings if f.level >= 1]
    assert [f.symptom for f in loud] == ["overfitting"], [f.summary for f in loud]
    assert any(r.symptom == "loss_spike" for r in loud[0].related)
