"""The router never claims a metric-named cause without that metric's data, drops causes the
data contradicts, and attaches interventions with their displaced cost and a check."""

from __future__ import annotations

import numpy as np
import pytest

from trainmedic.diagnose.finding import Evidence, Finding
from trainmedic.diagnose.router import CHECKS, FACT_CHECKS, route
from trainmedic.diagnose.rules import CAUSES, INTERVENTIONS, LOCALIZED_CAUSES
from trainmedic.run.series import Run

METRIC_WORDS = {"lr": ("learning rate", "lr "), "grad_norm": ("gradient",),
                "loss_scale": ("fp16",)}


def finding(symptom: str, onset: int = 500, end: int | None = None, **kw: object) -> Finding:
    return Finding(symptom=symptom, severity="warning", confidence=0.9, onset_step=onset,
                   end_step=end, summary=str(kw.pop("summary", "x")), metric="loss",
                   **kw)  # type: ignore[arg-type]


def loss_run(n: int = 1000) -> Run:
    run = Run("r")
    steps = np.arange(1, n + 1)
    run.add("loss", steps, 3.0 * np.exp(-steps / 300) + 1.0)
    return run


def test_tables_are_consistent() -> None:
    for symptom, rules in [*CAUSES.items(), *LOCALIZED_CAUSES.items()]:
        assert rules, symptom
        for r in rules:
            assert r.check is None or r.check in CHECKS or r.check == "finding_metric_is", r
            for key in r.interventions:
                assert key in INTERVENTIONS, key
            if r.check is not None and r.check != "finding_metric_is":
                assert r.metric is not None or r.check in FACT_CHECKS, r
    for ir in INTERVENTIONS.values():
        assert ir.action and ir.displaced_cost and ir.verify


@pytest.mark.parametrize("symptom", sorted(CAUSES))
def test_no_checked_claim_without_the_metric(symptom: str) -> None:
    run = loss_run()  # only a loss: nothing else can be checked
    f = route(finding(symptom, end=520), run)
    for c in f.causes:
        rule = next(r for r in CAUSES[symptom] if c.cause.startswith(r.cause[:20]))
        if rule.metric is not None and rule.metric != "loss":
            assert not c.checked_against_data, c
            assert c.note, c
            assert c.likelihood != "high"
    assert f.interventions, symptom
    for i in f.interventions:
        assert "{" not in i.action and "{" not in i.verify


def test_lr_too_high_kept_only_when_lr_shows_it() -> None:
    run = loss_run()
    steps = np.arange(1, 1001)
    f = finding("divergence", onset=800)
    no_lr = route(f, run)
    lr_causes = [c for c in no_lr.causes if "learning rate too high" in c.cause]
    assert lr_causes and not lr_causes[0].checked_against_data and "log lr" in lr_causes[0].note
    # lr decayed to 5% of its peak long before the onset: the cause is dropped.
    run.add("lr", steps, np.where(steps < 300, 1e-3, 5e-5))
    decayed = route(f, run)
    assert not any("learning rate too high" in c.cause for c in decayed.causes)
    # lr still at its peak at the onset: kept, checked, first.
    run2 = loss_run()
    run2.add("lr", steps, np.full(1000, 1e-3))
    peak = route(f, run2)
    assert peak.causes[0].checked_against_data
    assert any("learning rate too high" in c.cause and c.checked_against_data
               for c in peak.causes)


def test_summed_loss_kept_only_when_train_loss_is_many_times_val() -> None:
    f = finding("divergence", onset=800)
    evals = np.arange(100, 1001, 100)

    def summed(cause: str) -> bool:
        return "summed over the batch" in cause

    # no validation loss: the cause stays, unchecked, saying what to log
    plain = route(f, loss_run())
    c = next(c for c in plain.causes if summed(c.cause))
    assert not c.checked_against_data and "validation loss" in c.note
    # a training loss 32x the validation loss at the evaluations before the onset: checked
    run = loss_run()
    run.add("val_loss", evals, (3.0 * np.exp(-evals / 300) + 1.0) / 32)
    c = next(c for c in route(f, run).causes if summed(c.cause))
    assert c.checked_against_data and "32x" in c.note
    assert any("reduction='mean'" in i.action for i in route(f, run).interventions)
    # on the same scale (val 10% above train): dropped
    same = loss_run()
    same.add("val_loss", evals, (3.0 * np.exp(-evals / 300) + 1.0) * 1.1)
    assert not any(summed(c.cause) for c in route(f, same).causes)


def test_missing_warmup_only_if_lr_starts_at_peak() -> None:
    steps = np.arange(1, 1001)
    f = finding("divergence", onset=100)
    flat = loss_run()
    flat.add("lr", steps, np.full(1000, 1e-3))
    assert any("warm-up" in c.cause for c in route(f, flat).causes)
    warm = loss_run()
    warm.add("lr", steps, 1e-3 * np.minimum(1, steps / 200))
    assert not any("warm-up" in c.cause for c in route(f, warm).causes)


def test_bad_batch_only_if_spike_recovers() -> None:
    run = loss_run()
    rec = route(finding("loss_spike", onset=500, end=505), run)
    assert rec.causes[0].cause.startswith("a bad batch") and rec.causes[0].checked_against_data
    assert "skip" in rec.interventions[0].action
    norec = route(finding("loss_spike", onset=500, end=None), run)
    assert not any(c.cause.startswith("a bad batch") for c in norec.causes)


def test_still_in_warmup_only_if_lr_rising_at_end() -> None:
    steps = np.arange(1, 1001)
    f = finding("flat_loss", onset=1)
    flat_lr = loss_run()
    flat_lr.add("lr", steps, np.where(steps < 600, steps / 600 * 1e-3, 1e-3))
    assert not any("warm-up" in c.cause for c in route(f, flat_lr).causes)
    rising = loss_run()
    rising.add("lr", steps, steps / 1000 * 1e-3)
    assert any("warm-up" in c.cause and c.checked_against_data
               for c in route(f, rising).causes)


def test_at_chance_names_k_and_culprits() -> None:
    run = loss_run()
    run.add("lr", np.arange(1, 1001), np.full(1000, 1e-4))
    ev = (Evidence("val_loss", 1000, 1.3862, float(np.log(4)), note="ln(4) = 1.38629: chance"),)
    f = route(finding("flat_loss", onset=1, evidence=ev), run)
    assert "4 classes" in f.causes[0].cause and f.causes[0].checked_against_data
    assert not any(c.cause == "learning rate is 0" for c in f.causes)  # lr is 1e-4
    actions = " ".join(i.action for i in f.interventions)
    assert "requires_grad" in actions and "labels" in actions


def test_plateau_after_decay_is_expected_not_lr_too_high() -> None:
    run = loss_run()
    steps = np.arange(1, 1001)
    run.add("lr", steps, 1e-3 * 0.5 * (1 + np.cos(np.pi * steps / 1000)))
    f = route(finding("plateau", onset=900), run)
    assert "annealed" in f.causes[0].cause
    assert not any("not decayed" in c.cause for c in f.causes)


def test_overfitting_names_best_step_and_regularizers() -> None:
    run = loss_run()
    ev = (Evidence("loss", 1000, 0.1, 0.5, note="train"),)
    f = route(finding("overfitting", onset=5600, evidence=ev), run)
    text = " ".join(i.action for i in f.interventions)
    assert "5600" in text and "weight decay" in text
    assert any(i.changes_semantics for i in f.interventions)


def test_loss_scale_collapse_suggests_bf16_changing_semantics() -> None:
    run = loss_run()
    run.add("loss_scale", np.arange(1, 1001), np.full(1000, 1.0))
    f = route(finding("loss_scale_collapse"), run)
    bf16 = [i for i in f.interventions if "bf16" in i.action]
    assert bf16 and bf16[0].changes_semantics


def test_input_bound_lists_dataloader_knobs() -> None:
    f = route(finding("input_bound"), loss_run())
    text = " ".join(i.action for i in f.interventions)
    for knob in ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers"):
        assert knob in text


def test_eval_nan_from_the_first_eval_gets_no_training_causes_nor_an_earlier_checkpoint() -> None:
    import numpy as np

    from trainmedic.diagnose import diagnose
    from trainmedic.run.series import Run

    run = Run(source="t")
    s = np.arange(1, 101)
    run.add("loss", s, 2.0 * np.exp(-s / 30) + 0.5)
    run.add("lr", s, np.full(100, 0.01))
    run.add("val_loss", s, np.full(100, np.nan))
    f = next(f for f in diagnose(run).findings if f.symptom == "nonfinite_loss")
    assert f.metric == "val_loss" and f.onset_step == 1
    assert not any("lr" in c.metrics or "learning rate" in c.cause for c in f.causes)
    assert not any("before step 1" in i.action for i in f.interventions)
