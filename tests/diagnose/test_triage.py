"""Triage without logs: every answer routes to causes that exist in the router's tables, and
classic combinations put the expected cause first."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from trainmedic.diagnose.interventions import INTERVENTIONS
from trainmedic.diagnose.registry import SYMPTOMS
from trainmedic.diagnose.rules import CAUSES, CauseRule
from trainmedic.diagnose.triage import (
    CHANGED_CHOICES,
    HELPS_CHOICES,
    LOSS_CHOICES,
    OPTIMIZER_CHOICES,
    PRECISION_CHOICES,
    SCHEMA,
    STEPS_CHOICES,
    TriageAnswers,
    TriageCause,
    triage,
)
from trainmedic.errors import ConfigError
from trainmedic.run.names import CANONICAL

SYMPTOM_DOC = (Path(__file__).resolve().parents[2] / "docs" / "symptoms.md").read_text()

#: Every cause text in the router's table, as triage words it, -> its rule.
RULES: dict[str, CauseRule] = {r.cause.replace("{k}", "k"): r
                               for rules in CAUSES.values() for r in rules}

SYMPTOM_VALUES: list[tuple[str, Any]] = (
    [("loss", v) for v in LOSS_CHOICES if v != "ok"]
    + [("steps", v) for v in STEPS_CHOICES if v != "ok"] + [("memory", "grows")])

#: Context flags and their values; with some loss answer each must change a cause (its
#: ``why`` names the flag), except the values that say "nothing" / "untried".
CONTEXT_VALUES: list[tuple[str, Any]] = (
    [("since", v) for v in ("start", "after-1200-steps", "after-N-steps",
                                     "after-change")]
    + [("optimizer", v) for v in OPTIMIZER_CHOICES]
    + [("lr", v) for v in (0.0, 1e-8, 3e-4, 5e-2, 2.0)]
    + [("batch", v) for v in (2, 512)]
    + [("precision", v) for v in PRECISION_CHOICES]
    + [("grad_clip", v) for v in (0.0, 1.0)]
    + [("warmup", v) for v in (0, 2000)]
    + [("changed", v) for v in CHANGED_CHOICES]
    + [("smaller_lr_helps", v) for v in HELPS_CHOICES]
)
#: Values that carry no information on their own (and so cite no cause).
NEUTRAL = {("changed", "nothing"), ("smaller_lr_helps", "untried"),
           ("optimizer", "adamw"), ("optimizer", "adam"), ("optimizer", "other"),
           ("since", "after-change")}


def _assert_documented(causes: tuple[TriageCause, ...]) -> None:
    for c in causes:
        assert c.cause in RULES, f"cause not in the router's table: {c.cause}"
        assert c.symptom in SYMPTOMS and f"### `{c.symptom}`" in SYMPTOM_DOC
        assert c.to_check
        assert set(c.metrics) <= set(CANONICAL), c.metrics


@pytest.mark.parametrize(("flag", "value"), SYMPTOM_VALUES)
def test_every_symptom_answer_leads_to_documented_causes(flag: str, value: Any) -> None:
    t = triage(TriageAnswers(**{flag: value}))
    assert t.causes, f"--{flag} {value} routed to no cause"
    _assert_documented(t.causes)
    assert t.interventions
    for iv in t.interventions:  # the router's interventions, formatted, not a copy
        assert any(iv.displaced_cost.split("{")[0][:30] in ir.displaced_cost
                   for ir in INTERVENTIONS.values())


@pytest.mark.parametrize(("flag", "value"), CONTEXT_VALUES)
def test_every_context_answer_leads_to_a_documented_cause(flag: str, value: Any) -> None:
    cited = False
    name = f"--{flag.replace('_', '-')} "
    for loss in LOSS_CHOICES:
        if loss == "ok":
            continue
        t = triage(TriageAnswers(loss=loss, **{flag: value}))
        _assert_documented(t.causes)
        assert t.causes
        cited |= any(w.startswith(name) for c in t.causes for w in c.why) \
            or any(b.startswith(name) for _, _, b in t.ruled_out)
    if (flag, value) in NEUTRAL:
        assert not cited, f"{flag}={value} should not move any cause"
    else:
        assert cited, f"{flag}={value} changed no cause for any loss answer"


def _top_rule(**answers: Any) -> CauseRule:
    return RULES[triage(TriageAnswers(**answers)).causes[0].cause]


def test_fp16_nan_from_start_puts_fp16_overflow_first_and_bf16_as_the_fix() -> None:
    t = triage(TriageAnswers(loss="nan", since="start", precision="fp16"))
    assert RULES[t.causes[0].cause].check == "loss_scale_logged"
    assert "loss_scale_collapse" in t.symptoms
    assert t.interventions[0].action == INTERVENTIONS["bf16"].action
    # from the start there is no checkpoint before the onset: the router drops those fixes
    assert all("resume from" not in iv.action for iv in t.interventions)


def test_spikes_without_clipping_at_a_high_lr_point_to_lr_and_clipping() -> None:
    t = triage(TriageAnswers(loss="spikes", grad_clip=0.0, lr=1e-2, optimizer="adamw"))
    top = [RULES[c.cause] for c in t.causes[:4]]
    assert all({"lower_lr", "clip_grad"} & set(r.interventions) for r in top[:2])
    assert any(r.check == "lr_high_at_onset" for r in top)
    assert any(r.check in ("grad_spike_at_onset", "grad_spikes_isolated") for r in top)
    keys = [k for k, ir in INTERVENTIONS.items()
            for iv in t.interventions[:3] if iv.action.startswith(ir.action.split("{")[0])]
    assert {"lower_lr", "clip_grad"} <= set(keys)


def test_plateau_from_the_start_with_a_tiny_lr_is_lr_too_low() -> None:
    r = _top_rule(loss="plateau", since="start", lr=1e-7)
    assert r.check == "lr_tiny" and "raise_lr" in r.interventions


@pytest.mark.parametrize(("answers", "check"), [
    ({"loss": "flat", "lr": 0.0}, "lr_zero"),
    ({"loss": "diverges", "warmup": 0, "optimizer": "adamw", "smaller_lr_helps": "no"},
     "lr_starts_at_peak"),
    ({"loss": "diverges", "lr": 1e-2, "smaller_lr_helps": "yes"}, "lr_high_at_onset"),
    ({"loss": "spikes", "changed": "data", "since": "after-5000-steps"}, "spike_recovered"),
    # a code change that flattened the loss: the optimizer/gradient wiring
    ({"loss": "flat", "changed": "code", "since": "after-change", "lr": 3e-4},
     ("optimizer_params_foreign", "grad_or_update_zero")),
])
def test_classic_combinations_give_the_expected_top_cause(answers: dict[str, Any],
                                                          check: str | tuple[str, ...]) -> None:
    want = (check,) if isinstance(check, str) else check
    assert _top_rule(**answers).check in want


def test_a_batch_change_before_a_divergence_points_to_lr_scaling_and_loss_reduction() -> None:
    # a new batch size with the old lr, or a summed loss that grew with the batch
    t = triage(TriageAnswers(loss="diverges", changed="batch", since="after-change", lr=3e-4))
    top2 = {RULES[c.cause].check for c in t.causes[:2]}
    assert top2 == {"lr_high_at_onset", "train_loss_summed"}


def test_small_batch_makes_noisy_gradients_the_top_oscillation_cause() -> None:
    r = _top_rule(loss="oscillates", batch=2, lr=3e-4)
    assert "bigger_batch" in r.interventions


def test_answers_that_contradict_a_cause_rule_it_out_and_say_why() -> None:
    t = triage(TriageAnswers(loss="nan", precision="bf16"))
    assert all(RULES[c.cause].check != "loss_scale_logged" for c in t.causes)
    assert any("--precision bf16" in b for _, _, b in t.ruled_out)
    t = triage(TriageAnswers(loss="diverges", warmup=1000))
    assert all(RULES[c.cause].check != "lr_starts_at_peak" for c in t.causes)


def test_json_marks_every_cause_not_checked_and_names_what_to_log() -> None:
    doc = triage(TriageAnswers(loss="spikes", since="after-300-steps")).to_json()
    assert doc["schema"] == SCHEMA and doc["basis"] == "not_checked"
    assert doc["answers"] == {"loss": "spikes", "since": "after-300-steps"}
    for c in doc["causes"]:
        assert c["basis"] == "not_checked" and c["checked_against_data"] is False
        assert c["to_check"]
    # --since after-N-steps fills N into the router's interventions
    assert any("300" in i["action"] for i in doc["interventions"])


def test_no_symptom_routes_nothing_and_says_so() -> None:
    t = triage(TriageAnswers(loss="ok", lr=1e-3))
    assert not t.causes and any("nothing to route" in n for n in t.notes)


def test_slow_steps_and_growing_memory_route_to_their_symptoms() -> None:
    t = triage(TriageAnswers(steps="slower-than-before", changed="hardware", memory="grows"))
    assert {"throughput_regression", "input_bound", "memory_growth"} <= set(t.symptoms)
    assert any("--changed hardware" in w for c in t.causes for w in c.why)


@pytest.mark.parametrize(("field", "value"), [
    ("loss", "exploded"), ("since", "later"), ("since", "after-x-steps"), ("lr", -1.0),
    ("lr", float("nan")), ("batch", 0), ("warmup", -5), ("precision", "fp8"),
    ("memory", "leaks"),
])
def test_bad_answers_raise_config_error_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=re.escape(field)):
        TriageAnswers(**{field: value})

