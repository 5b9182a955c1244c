"""``advise``: each setting that contradicts the default stack, planted in a tiny recipe file,
is flagged (and nothing else is); the demo recipe gets only an honest one; an HF config gets
an lr with its formula; the first lever per symptom comes from the router's tables."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from trainmedic.diagnose.interventions import INTERVENTIONS
from trainmedic.diagnose.rules import CAUSES
from trainmedic.levers.advice import (
    GPT3_TABLE,
    SCHEMA,
    Settings,
    advise,
    lr_for_size,
    settings_from_config,
    settings_from_recipe,
)
from trainmedic.recipe import load_recipe

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model-configs"

RECIPE = '''
import math
import torch
from trainmedic.recipe import Recipe


def _groups(model, wd):
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    return [{"params": decay, "weight_decay": wd}, {"params": rest, "weight_decay": 0.0}]


def _factor(step, warm=10, total=100):
    if step < warm:
        return (step + 1) / warm
    return 0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, (step - warm) / (total - warm))))


def recipe(case="clean"):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8),
                                torch.nn.Linear(8, 2))
    if case in ("fp16_weights", "eps_small_fp16"):
        model = model.half()
    if case == "bf16_weights":
        model = model.bfloat16()
    lr, eps, clip, sched, scaler = 3e-4, 1e-8, 1.0, True, None
    groups = _groups(model, 0.1)
    if case == "no_warmup_high_lr":
        lr, sched = 1e-2, False
    if case == "decay_norms":
        groups = model.parameters()
    if case == "eps_large":
        eps = 1e-3
    if case == "eps_small_fp16":
        eps, scaler = 1e-10, torch.amp.GradScaler("cpu")
    if case == "no_clip":
        clip = None
    if case == "adam_l2":
        opt = torch.optim.Adam(groups, lr=lr, eps=eps)
    elif case == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        opt = torch.optim.AdamW(groups, lr=lr, eps=eps, betas=(0.9, 0.95))
    if case == "sequential":
        scheduler = torch.optim.lr_scheduler.SequentialLR(opt, [
            torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=10),
            torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=90, eta_min=3e-5)],
            milestones=[10])
    else:
        scheduler = torch.optim.lr_scheduler.LambdaLR(opt, _factor) if sched else None
    data = [(torch.randn(4, 4), torch.randint(0, 2, (4,))) for _ in range(3)]

    def loss_fn(m, batch):
        x, y = batch
        return torch.nn.functional.cross_entropy(m(x.to(next(m.parameters()).dtype)), y)

    return Recipe(model=model, optimizer=opt, loss_fn=loss_fn, data=data,
                  scheduler=scheduler, scaler=scaler, max_grad_norm=clip,
                  config={"steps": 100, "case": case})
'''

#: case -> the contradiction codes it must raise, exactly.
PLANTED: dict[str, set[str]] = {
    "clean": set(),
    "sequential": set(),
    "sgd": set(),  # no Adam rule applies to SGD (warm-up, eps, L2): differs, not contradicts
    # fp16 state also rounds the default eps 1e-8 to 0: a true third contradiction
    "fp16_weights": {"fp16_without_scaler", "fp16_weights", "eps_small_for_dtype"},
    "bf16_weights": {"bf16_weights"},
    "no_warmup_high_lr": {"no_warmup", "no_decay"},
    "adam_l2": {"adam_l2"},
    "decay_norms": {"decay_on_norms_biases"},
    "eps_large": {"eps_large"},
    "eps_small_fp16": {"fp16_weights", "eps_small_for_dtype"},
    "no_clip": {"no_clipping"},
}


@pytest.fixture(scope="module")
def recipe_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("advise") / "planted.py"
    path.write_text(RECIPE)
    return str(path)


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_each_planted_contradiction_is_flagged_and_nothing_else(recipe_file: str,
                                                                case: str) -> None:
    recipe = load_recipe(f"{recipe_file}:recipe", case=case)
    before = [g["lr"] for g in recipe.optimizer.param_groups]
    settings = settings_from_recipe(recipe, source=case)
    # reading the schedule leaves the recipe as it was
    assert [g["lr"] for g in recipe.optimizer.param_groups] == before
    found = {c.code for c in advise(settings).contradictions}
    assert found == PLANTED[case], (case, found)


def test_no_warmup_at_a_high_adam_lr_is_a_warning(recipe_file: str) -> None:
    s = settings_from_recipe(load_recipe(f"{recipe_file}:recipe", case="no_warmup_high_lr"),
                             source="x")
    assert s.warmup_steps == 0 and s.lr == pytest.approx(1e-2)
    c = next(c for c in advise(s).contradictions if c.code == "no_warmup")
    assert c.severity == "warning" and "Liu et al. 2020" in c.citation


def test_schedules_are_read_as_warm_up_then_decay(recipe_file: str) -> None:
    for case, warm in (("clean", 9), ("sequential", 10)):
        s = settings_from_recipe(load_recipe(f"{recipe_file}:recipe", case=case), source=case)
        assert s.warmup_steps == warm and s.decays is True
        assert s.lr == pytest.approx(3e-4, rel=1e-6)


def test_demo_recipe_gets_only_the_honest_minor_contradiction() -> None:
    # The demo builds AdamW over model.parameters(): its LayerNorm gains and biases are
    # decayed (weight_decay=0.01), which the stack advises against; nothing else contradicts.
    s = settings_from_recipe(load_recipe("trainmedic.demo:recipe", steps=50), source="demo")
    advice = advise(s)
    assert [(c.code, c.severity) for c in advice.contradictions] == \
        [("decay_on_norms_biases", "minor")]
    assert s.optimizer == "AdamW" and s.warmup_steps and s.decays and s.max_grad_norm == 1.0


def test_config_gives_an_lr_with_its_formula_and_tokens_per_step() -> None:
    s = settings_from_config(str(CONFIGS / "llama-3.2-1b.json"), batch=8, seq=2048)
    assert s.num_params and 1.0e9 < s.num_params < 1.5e9
    assert s.tokens_per_step == 8 * 2048
    a = advise(s)
    assert a.lr.lr is not None and "Table 2.1" in a.lr.formula
    assert "sqrt(B / B_ref)" in a.lr.formula and "heuristic" in a.lr.note
    base = lr_for_size(s.num_params).lr
    assert base is not None and 2.0e-4 < base < 2.5e-4  # between GPT-3's 760M and 1.3B
    assert a.lr.lr == pytest.approx(base * math.sqrt(8 * 2048 / a.lr.reference_batch_tokens))
    assert "tr(Sigma)" in a.batch and "16,384 tokens" in a.batch
    doc = a.to_json()
    assert doc["schema"] == SCHEMA and doc["lr"]["basis"] == "estimated"
    assert all(i["default"] and i["basis"] == "estimated" for i in doc["stack"])


@pytest.mark.parametrize(("n", "lr"), [(n, lr) for n, lr, _ in GPT3_TABLE])
def test_lr_heuristic_returns_the_table_at_its_anchors(n: float, lr: float) -> None:
    got = lr_for_size(n).lr
    assert got == pytest.approx(lr, rel=1e-9)


def test_a_model_outside_the_table_gets_no_number() -> None:
    s = settings_from_config(str(CONFIGS / "t5-small.json"))
    a = advise(s)
    assert a.lr.lr is None and "outside" in a.lr.note


def test_first_lever_per_symptom_comes_from_the_router_tables() -> None:
    levers = advise(Settings(source="x", precision="bf16-mixed", warmup_steps=100)).first_levers
    assert {f.symptom for f in levers} == set(CAUSES)
    texts = {r.cause.replace("{k}", "k") for rs in CAUSES.values() for r in rs}
    for f in levers:
        assert f.because in texts
        assert any(f.lever.startswith(ir.action.split("{")[0]) for ir in INTERVENTIONS.values())
    by = {f.symptom: f for f in levers}
    # bf16 rules the fp16 causes out: a NaN gradient's first lever is not "switch to bf16"
    assert by["nonfinite_grad"].lever != INTERVENTIONS["bf16"].action
    fp16 = advise(Settings(source="x", precision="fp16-mixed")).first_levers
    assert {f.symptom: f for f in fp16}["nonfinite_grad"].lever == INTERVENTIONS["bf16"].action
