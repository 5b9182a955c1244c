"""Every planted bug of the zoo (tests/levers/zoo.py) is caught by its check; the healthy
recipes and the demo recipe pass every check (skips only with their reason).

Each case lists the exact set of checks that fail, so a check that starts failing healthy
code, or stops catching its bug, shows here; the comments say why the other failures are
right."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmedic.levers.preflight import PreflightConfig, check_names, run_checks
from trainmedic.recipe.recipe import load_recipe

ZOO = Path(__file__).resolve().parent / "zoo.py"

CASES = {
    # bug -> (the check that must catch it, every check that fails)
    "missing_layer": ("optimizer_coverage", {"optimizer_coverage"}),
    "frozen_in_optimizer": ("optimizer_coverage", {"optimizer_coverage"}),
    "unused_layer": ("gradients_flow", {"gradients_flow"}),
    # A sum is B x the mean: the init loss is 16 ln C too.
    "sum_loss": ("microbatch_equivalence", {"microbatch_equivalence", "init_loss"}),
    "scaled_logits": ("init_loss", {"init_loss"}),
    # Nothing reaches the model, so one batch cannot be fitted either.
    "detached": ("gradients_flow", {"gradients_flow", "overfit_one_batch"}),
    # microbatch_equivalence sees the randomness and skips (asserted below).
    "dropout_in_eval": ("mode_switch", {"mode_switch"}),
    "nondeterministic": ("determinism", {"determinism"}),
    # Every check that computes the loss skips instead (asserted below).
    "labels_out_of_range": ("label_range", {"label_range"}),
    # Trained in bf16, the model cannot fit residuals below bf16's spacing near 1000 either.
    "bf16_fragile": ("mixed_precision", {"mixed_precision", "overfit_one_batch"}),
    # The F.cross_entropy(ignore_index) mean over each micro-batch's own tokens.
    "per_token_norm": ("microbatch_equivalence", {"microbatch_equivalence"}),
}


def _failing(name: str, **overrides: object) -> tuple[set[str], object]:
    report = run_checks(load_recipe(f"{ZOO}:{name}", **overrides))
    return {r.name for r in report.results if r.status == "fail"}, report


@pytest.mark.parametrize("bug", sorted(CASES))
def test_each_planted_bug_is_caught_by_its_check(bug: str) -> None:
    catcher, expected = CASES[bug]
    failing, report = _failing(bug)
    assert catcher in failing
    assert failing == expected
    assert not report.passed  # type: ignore[attr-defined]
    result = report.result(catcher)  # type: ignore[attr-defined]
    assert result.fix and result.evidence


def test_the_failures_name_what_is_wrong() -> None:
    _, report = _failing("missing_layer")
    ev = {e.label: e.value for e in report.result("optimizer_coverage").evidence}
    assert ev["never updated"] == ("head (weight, bias)",)
    _, report = _failing("frozen_in_optimizer")
    ev = {e.label: e.value for e in report.result("optimizer_coverage").evidence}
    assert ev["frozen but held"] == ("fc1 (weight, bias)",)
    _, report = _failing("unused_layer")
    assert "aux (weight, bias)" in report.result("gradients_flow").summary
    _, report = _failing("sum_loss")
    mb = report.result("microbatch_equivalence")
    assert "sum over the batch" in mb.summary
    ratio = next(e.value for e in mb.evidence if e.label.startswith("gradient norm ratio"))
    assert ratio == pytest.approx(0.5, rel=1e-4)  # k = 2 micro-batches of a sum: 1/k
    _, report = _failing("per_token_norm")
    assert "num_items_in_batch" in (report.result("microbatch_equivalence").fix or "")


def test_bugs_that_make_other_checks_meaningless_skip_them_with_a_reason() -> None:
    _, report = _failing("labels_out_of_range")
    label = report.result("label_range")
    assert "min 1, max 10" in label.summary and label.fix and "subtract 1" in label.fix
    for name in ("gradients_flow", "init_loss", "microbatch_equivalence", "determinism",
                 "overfit_one_batch"):
        r = report.result(name)
        assert r.status == "skip" and "labels out of range" in r.summary
    for bug in ("dropout_in_eval", "nondeterministic"):
        _, report = _failing(bug)
        r = report.result("microbatch_equivalence")
        assert r.status == "skip" and "randomness" in r.summary


def test_a_healthy_classifier_passes_every_check() -> None:
    report = run_checks(load_recipe(f"{ZOO}:healthy"))
    assert report.passed and [r.name for r in report.results] == list(check_names())
    skips = {r.name: r.summary for r in report.results if r.status == "skip"}
    assert set(skips) == {"mixed_precision"} and "fp32" in skips["mixed_precision"]
    # asked for, bf16 autocast of the healthy MLP matches fp32 (CPU autocast has bf16)
    report = run_checks(load_recipe(f"{ZOO}:healthy"), only=["mixed_precision"],
                        config=PreflightConfig(precisions=("bf16-mixed",)))
    assert report.result("mixed_precision").status == "pass"


def test_batchnorm_skips_microbatch_equivalence_and_passes_the_rest() -> None:
    report = run_checks(load_recipe(f"{ZOO}:healthy", batchnorm=True))
    assert report.passed
    mb = report.result("microbatch_equivalence")
    assert mb.status == "skip" and "BatchNorm (norm)" in mb.summary
    assert report.result("mode_switch").status == "pass"  # eval leaves running stats alone


def test_the_demo_recipe_passes_every_check() -> None:
    # a loader with a worker, dropout on, bf16 autocast: the whole recipe as users run it
    recipe = load_recipe("trainmedic.demo:recipe", batch_size=8, context_len=16, steps=40,
                         num_workers=1, precision="bf16-mixed")
    report = run_checks(recipe)
    assert report.passed
    assert all(r.status == "pass" for r in report.results), \
        [(r.name, r.summary) for r in report.results if r.status != "pass"]
    init = report.result("init_loss")
    ratio = next(e.value for e in init.evidence if e.label == "loss / ln C")
    assert 0.9 < ratio < 1.1  # GPT-2 init: logits near zero, loss near ln C


def test_the_demo_with_grad_accum_splits_as_it_accumulates() -> None:
    recipe = load_recipe("trainmedic.demo:recipe", batch_size=8, context_len=16, steps=40,
                         grad_accum=4)
    report = run_checks(recipe, only=["microbatch_equivalence", "determinism"])
    assert report.passed
    assert "4 x 2 vs 1 x 8" in report.result("microbatch_equivalence").summary
    micro = next(e.value for e in report.result("determinism").evidence
                 if e.label == "micro-batches per step")
    assert micro == 4
