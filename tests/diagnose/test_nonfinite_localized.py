"""A non-finite loss the NaN guard localized: the finding names the module and where it broke,
carries the localization as measured evidence, and is routed to causes that fit that kind of
break; without a localization it reads as before."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from trainmedic.diagnose.engine import diagnose
from trainmedic.diagnose.localization import localized_kind, nonfinite_event
from trainmedic.diagnose.registry import detectors
from trainmedic.diagnose.rules import INTERVENTIONS, LOCALIZED_CAUSES
from trainmedic.run.series import Run, RunEvent

FORWARD: dict[str, Any] = {
    "module": "blocks.1.attn", "where": "forward", "step": 120,
    "detail": "output of `blocks.1.attn` (Attention) became inf (12 of 4096 values; first in "
              "forward order) while its inputs were finite (input abs-max 7.5)",
    "input_absmax": 7.5, "param_absmax": 0.9, "output_absmax": "inf",
    "param_nonfinite": [], "dtype": "torch.float32"}


def nan_run(bad_from: int = 120, bad_to: int | None = None, n: int = 200,
            rank: int | None = None) -> Run:
    """A falling loss that is NaN from ``bad_from`` (to the end, or through ``bad_to``)."""
    steps = np.arange(n)
    loss = 3.0 * np.exp(-steps / 80) + 1.0
    last = n - 1 if bad_to is None else bad_to
    loss[bad_from:last + 1] = np.nan
    run = Run("r")
    run.add("loss", steps, loss, rank=rank)
    run.add("lr", steps, np.full(n, 1e-3), rank=rank)
    return run


def with_event(run: Run, step: int, data: dict[str, Any], rank: int | None = None) -> Run:
    run.events.append(RunEvent(step, "nonfinite", dict(data, step=step), rank))
    return run


def detect(run: Run) -> Any:
    det = next(d for d in detectors() if d.symptom == "nonfinite_loss")
    (f,) = det.fn(run)  # type: ignore[misc]
    return f


def test_without_an_event_the_finding_reads_as_before() -> None:
    f = detect(nan_run())
    assert f.summary == "loss became NaN at step 120 and stayed non-finite (loss)"
    assert [e.metric for e in f.evidence] == ["loss"]


def test_a_forward_localization_names_the_module_and_is_measured_evidence() -> None:
    f = detect(with_event(nan_run(), 120, FORWARD))
    assert f.summary.startswith("loss became NaN at step 120 and stayed non-finite (loss); ")
    assert f.summary.endswith(
        "the first non-finite value appeared in the output of `blocks.1.attn` (forward)")
    ev = f.evidence[1]
    assert ev.metric == "layer/blocks.1.attn/output_absmax" and ev.step == 120
    assert ev.value == math.inf and ev.reference == 7.5
    assert ev.basis == "measured" and "forward (torch.float32)" in ev.note
    assert f.evidence[0].metric == "loss"  # the first non-finite loss stays first


@pytest.mark.parametrize(("data", "phrase"), [
    ({"module": "blocks.0.ln2", "where": "forward", "input_absmax": 3.6e21,
      "dtype": "torch.float32"},
     "output of `blocks.0.ln2` (forward), on inputs that had grown to 3.6e+21"),
    ({"module": "attn", "where": "forward", "input_absmax": 300.0, "dtype": "torch.float16"},
     "output of `attn` (forward), on inputs that had grown to 300"),
    ({"module": "attn", "where": "forward", "input_absmax": 300.0, "dtype": "torch.float32"},
     "the first non-finite value appeared in the output of `attn` (forward)"),
    ({"module": "blocks.0", "where": "forward", "input_absmax": 2.04e18, "param_absmax": 6.8e17,
      "dtype": "torch.float32"},  # the demo's diverge fault: the weights had grown
     "output of `blocks.0` (forward), on inputs of abs-max 2.04e+18 and parameters that had "
     "grown to 6.8e+17"),
    ({"module": "attn", "where": "forward", "input_absmax": 300.0, "param_absmax": 40.0,
      "dtype": "torch.float32"},
     "the first non-finite value appeared in the output of `attn` (forward)"),
    ({"module": "ln", "where": "forward", "input_absmax": 20.0, "param_absmax": 13.0,
      "dtype": "torch.float16"},  # fp16: ordinary values past sqrt(65504) are not growth
     "the first non-finite value appeared in the output of `ln` (forward)"),
    ({"module": "ln", "where": "forward", "input_absmax": 20.0, "param_absmax": 5e3,
      "dtype": "torch.float16"},
     "output of `ln` (forward), on inputs of abs-max 20 and parameters that had grown to 5e+03"),
    ({"module": "norm", "where": "backward"},
     "the first non-finite gradient appeared in the backward of `norm` (backward)"),
    ({"module": "blocks.1.ln1", "where": "backward", "input_absmax": 8.2e19,
      "param_absmax": 3.5e7, "dtype": "torch.float32"},  # a diverging run's residual stream
     "backward of `blocks.1.ln1` (backward), on inputs that had grown to 8.2e+19"),
    ({"module": None, "where": "loss"},
     "the loss computation itself produced the non-finite value (loss)"),
    ({"module": "head", "where": "input", "param_nonfinite": ["head.weight", "head.bias"],
      "param_absmax": 12.5},
     "parameters were already non-finite before step 120 (head.weight and 1 more): an "
     "earlier update blew up (state)"),
    ({"module": "", "where": "input", "param_nonfinite": []},
     "the batch itself was non-finite when it reached the root module (input)"),
    ({"module": None, "where": "not_reproduced"},
     "the NaN guard's replay of that step stayed finite (not reproduced)"),
])
def test_each_kind_of_break_is_said(data: dict[str, Any], phrase: str) -> None:
    f = detect(with_event(nan_run(), 120, {"detail": "d", **data}))
    assert f.summary.endswith(phrase), f.summary


def test_an_event_outside_the_first_non_finite_stretch_or_on_another_rank_is_not_used() -> None:
    run = with_event(nan_run(120, 121), 90, FORWARD)  # before the NaN stretch
    with_event(run, 160, FORWARD)  # after it recovered
    assert "blocks.1.attn" not in detect(run).summary
    other = with_event(nan_run(rank=0), 120, FORWARD, rank=1)
    assert "blocks.1.attn" not in detect(other).summary
    same = with_event(nan_run(rank=1), 121, FORWARD, rank=1)
    assert "blocks.1.attn" in detect(same).summary


def test_matching_takes_the_first_event_in_the_stretch() -> None:
    run = nan_run()
    with_event(run, 150, {"module": "later", "where": "forward", "detail": "d"})
    with_event(run, 120, FORWARD)
    ev = nonfinite_event(run, None, 120)
    assert ev is not None and ev.data["module"] == "blocks.1.attn"
    assert localized_kind({"where": "somewhere"}) is None


# --------------------------------------------------------------------------- routing
def routed(run: Run) -> Any:
    return next(f for f in diagnose(run).findings if f.symptom == "nonfinite_loss")


def test_routing_without_an_event_keeps_the_logged_metric_causes() -> None:
    f = routed(nan_run())
    causes = [c.cause for c in f.causes]
    assert any("log/div/sqrt" in c for c in causes)
    assert not any("NaN guard" in c for c in causes)


def test_a_forward_overflow_routes_to_stabilizing_that_module() -> None:
    f = routed(with_event(nan_run(), 120, FORWARD))
    first = f.causes[0]
    assert first.checked_against_data and first.likelihood == "high"
    assert "overflow in the forward" in first.cause and "blocks.1.attn" in first.note
    assert "log/div/sqrt" not in " ".join(c.cause for c in f.causes)
    assert "make blocks.1.attn's forward overflow-safe" in f.interventions[0].action
    assert all("{" not in i.action and "{" not in i.verify for i in f.interventions)


@pytest.mark.parametrize(("data", "first_action"), [
    ({"module": "blocks.0.ln2", "where": "forward", "input_absmax": 1e30},
     "lower the peak learning rate"),
    ({"module": "blocks.0", "where": "forward", "input_absmax": 1e12, "param_absmax": 1e12},
     "lower the peak learning rate"),
    ({"module": "ln", "where": "forward", "input_absmax": 20.0, "param_absmax": 13.0,
      "dtype": "torch.float16"}, "make ln's forward overflow-safe"),
    ({"module": "ln", "where": "forward", "input_absmax": 20.0, "param_absmax": 5e3,
      "dtype": "torch.float16"}, "lower the peak learning rate"),
    ({"module": "norm", "where": "backward"}, "put the eps inside norm's sqrt"),
    ({"module": "norm", "where": "backward", "input_absmax": 300.0, "param_absmax": 2e3,
      "dtype": "torch.float16"}, "put the eps inside norm's sqrt"),  # fp16: the dtype's
    ({"module": "ln", "where": "backward", "input_absmax": 8.2e19, "param_absmax": 3.5e7,
      "dtype": "torch.float32"}, "lower the peak learning rate"),
    ({"module": None, "where": "loss"}, "guard log/div/sqrt in the loss"),
    ({"module": "head", "where": "input", "param_nonfinite": ["head.weight"]},
     "resume from the last checkpoint before step 120 whose parameters are all finite"),
    ({"module": "", "where": "input", "param_nonfinite": []}, "find and drop the non-finite"),
    ({"module": None, "where": "not_reproduced"}, "make the replay match the step"),
])
def test_each_kind_of_break_routes_to_its_own_first_intervention(
        data: dict[str, Any], first_action: str) -> None:
    f = routed(with_event(nan_run(), 120, {"detail": "d", **data}))
    assert f.interventions[0].action.startswith(first_action), f.interventions[0].action
    assert f.causes[0].checked_against_data


def test_localized_tables_are_consistent() -> None:
    from trainmedic.diagnose.router import CHECKS

    for kind, rules in LOCALIZED_CAUSES.items():
        assert rules and rules[0].check == "nan_guard_localized", kind
        for r in rules:
            assert r.check in CHECKS, r
            assert all(k in INTERVENTIONS for k in r.interventions), r


def test_a_folded_nonfinite_grad_does_not_repeat_the_localization() -> None:
    run = nan_run()
    steps = np.arange(200)
    gn = np.full(200, 2.0)
    gn[120:] = np.nan
    run.add("grad_norm", steps, gn)
    with_event(run, 120, FORWARD)
    found = [f for f in diagnose(run).findings if f.symptom == "nonfinite_loss"]
    assert len(found) == 1 and "same incident: nonfinite_grad" in found[0].summary
    keys = [(e.metric, e.step) for e in found[0].evidence
            if e.metric == "layer/blocks.1.attn/output_absmax"]
    assert keys == [("layer/blocks.1.attn/output_absmax", 120)]


def test_a_diverged_loss_kept_finite_by_skipped_updates_is_one_divergence() -> None:
    # The loss climbs a million-fold from step 40 and stays there; the gradients overflow
    # from step 60 and a NaN guard skips every update from then on, so the loss stays finite.
    n = 200
    steps = np.arange(n)
    loss = 3.0 * np.exp(-steps / 80) + 1.0
    loss[40:] = 2.5 * 10.0 ** np.minimum((steps[40:] - 40) / 3.0, 6.5)
    gn = np.full(n, 2.0)
    gn[40:60] = 2.0 * 10.0 ** ((steps[40:60] - 40) / 4.0)
    gn[60:] = np.nan
    run = Run("r")
    run.meta["format"] = "trainmedic.store"  # every step's loss, unfiltered (the watcher)
    run.add("loss", steps, loss)
    run.add("grad_norm", steps, gn)
    run.add("lr", steps, np.full(n, 1e-3))
    with_event(run, 60, {"module": "blocks.1.ln1", "where": "backward", "detail": "d",
                         "input_absmax": 8.2e19, "param_absmax": 3.5e7,
                         "dtype": "torch.float32"})
    found = [f for f in diagnose(run).findings
             if f.symptom in ("divergence", "nonfinite_grad", "loss_spike",
                              "exploding_gradients")]
    assert [f.symptom for f in found] == ["divergence"], [f.summary for f in found]
    f = found[0]
    assert f.onset_step is not None and f.onset_step <= 42
    assert "nonfinite_grad from step 60, where the first non-finite gradient appeared in the " \
           "backward of `blocks.1.ln1`" in f.summary
    assert "lower the peak learning rate" in f.interventions[0].action


def test_an_expected_rise_does_not_swallow_a_nan_gradient_bug() -> None:
    # An RL value loss that rises while the reward improves (an info divergence: expected)
    # and, much later, NaN gradients that stay: the NaN gradients are the root, at their step.
    rng = np.random.default_rng(2)
    n = 2000
    steps = np.arange(n)
    gn = np.abs(rng.normal(1.0, 0.05, n))
    gn[1500:] = np.nan
    run = Run("r")
    run.meta["format"] = "trainmedic.store"
    run.add("loss", steps, 1.0 + steps / 500.0 + rng.normal(0, 0.05, n))
    run.add("reward", steps, steps / 100.0 + rng.normal(0, 0.5, n))
    run.add("grad_norm", steps, gn)
    run.add("lr", steps, np.full(n, 1e-3))
    det = next(d for d in detectors() if d.symptom == "divergence")
    assert [f.severity for f in det.fn(run)] == ["info"]  # type: ignore[union-attr]
    found = [f for f in diagnose(run).findings
             if f.symptom in ("divergence", "nonfinite_grad")]
    assert [f.symptom for f in found] == ["nonfinite_grad"], [f.summary for f in found]
    assert found[0].onset_step == 1500


def test_spikes_do_not_chain_an_incident_along() -> None:
    # One NaN gradient, then spikes each a window after the last: only the one next to it is
    # the same incident; the later ones are their own.
    from trainmedic.diagnose.engine import _fold_incidents
    from trainmedic.diagnose.finding import Finding

    run = Run("r")
    run.add("loss", np.arange(0, 10000, 50), np.ones(200))  # the window: 199 steps

    def f(symptom: str, step: int) -> Finding:
        return Finding(symptom=symptom, severity="warning", confidence=0.9, onset_step=step,
                       end_step=step, rank=None, metric="loss", summary=symptom, evidence=())
    out = _fold_incidents([f("nonfinite_grad", 1000), f("loss_spike", 1000 + 150),
                           f("loss_spike", 1000 + 150 + 190), f("loss_spike", 1000 + 150 + 380)],
                          run)
    kept = sorted((g.symptom, g.onset_step) for g in out)
    assert ("loss_spike", 1150) not in kept and ("nonfinite_grad", 1000) in kept
    assert ("loss_spike", 1340 + 190) in kept, kept


def test_localization_and_related_are_data_in_the_findings_json() -> None:
    """The NaN guard's module and phase are a `localization` object, and symptoms folded into
    the incident are `related` entries with their own onset and evidence (DESIGN.md)."""
    from trainmedic.report import to_json
    from trainmedic.report.findings_json import validate_findings_json

    run = with_event(nan_run(), 120, FORWARD)
    steps = np.arange(200)
    gn = np.where(steps < 110, 1.0, 1e3)
    gn[120:] = np.nan
    run.add("grad_norm", steps, gn)
    d = diagnose(run)
    f = next(f for f in d.findings if f.symptom == "nonfinite_loss")
    assert f.localization is not None
    assert f.localization["module"] == "blocks.1.attn" and f.localization["phase"] == "forward"
    assert f.localization["input_absmax"] == 7.5
    obj = d.to_dict()
    validate_findings_json(obj)
    validate_findings_json(to_json(d))
    fj = next(x for x in obj["findings"] if x["symptom"] == "nonfinite_loss")
    assert fj["localization"]["module"] == "blocks.1.attn"
    folded = {r["symptom"] for r in fj.get("related", [])}
    assert folded, "the NaN grad / grad growth of the same incident should be related entries"
    for r in fj["related"]:
        assert r["onset_step"] is not None and isinstance(r["evidence"], list)


def _masked_run(mode: str, n: int = 60, nan_at: int = 40) -> Run:
    """A plain (non-HF) log every 10 steps whose loss went NaN at point ``nan_at`` and that
    the logger hid: ``dropped`` stops writing the loss while lr and step time go on
    (``previous``, the last finite loss repeated, is left alone outside the HF Trainer: a
    full-batch loss of weights that stopped changing repeats exactly too)."""
    rng = np.random.default_rng(3)
    s = np.arange(10, 10 * n + 1, 10)
    loss = 2.0 * np.exp(-s / 200) + 0.3 + 0.02 * rng.standard_normal(n)
    grad = 1.0 + 0.1 * rng.standard_normal(n)
    if mode == "previous":
        loss[nan_at:] = loss[nan_at - 1]
        grad[nan_at:] = grad[nan_at - 1]
    run = Run(source="t")
    keep = s < s[nan_at] if mode == "dropped" else np.ones(n, dtype=bool)
    run.add("loss", s[keep], loss[keep])
    run.add("grad_norm", s[keep], grad[keep])
    run.add("lr", s, np.full(n, 1e-3))
    run.add("step_time_s", s, 0.1 + 0.01 * rng.random(n))
    return run


def test_a_plain_logger_that_drops_a_nan_loss_is_seen() -> None:
    found = [f for f in diagnose(_masked_run("dropped")).findings
             if f.symptom == "nan_masked_in_logs" and f.level >= 1]
    assert len(found) == 1 and 400 <= (found[0].onset_step or 0) <= 420, found


def test_a_loss_logged_less_often_than_the_lr_is_not_dropped() -> None:
    run = _masked_run("none")
    s = np.arange(1, 610)
    run.series[("lr", None)] = type(run.get("lr"))(s, np.full(s.size, 1e-3))
    assert not [f for f in diagnose(run).findings if f.symptom == "nan_masked_in_logs"]
