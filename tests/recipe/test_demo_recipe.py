"""``trainmedic.demo:recipe``: the demo's training as a Recipe, with every source of
randomness a resume must carry; and CharTransformer's dropout argument."""

from __future__ import annotations

from typing import Any

import pytest

from trainmedic.errors import ConfigError
from trainmedic.recipe import Recipe, load_recipe

torch = pytest.importorskip("torch")

from torch.utils.data import RandomSampler  # noqa: E402

from trainmedic.demo.model import CharTransformer  # noqa: E402


def test_the_recipe_has_what_issue_5_asks_for() -> None:
    r = load_recipe("trainmedic.demo:recipe", num_workers=2, dropout=0.25, steps=50)
    assert isinstance(r, Recipe)
    assert isinstance(r.optimizer, torch.optim.AdamW)
    assert isinstance(r.scheduler, torch.optim.lr_scheduler.LambdaLR)
    data: Any = r.data
    assert isinstance(data, torch.utils.data.DataLoader)
    assert isinstance(data.sampler, RandomSampler) and data.num_workers == 2
    assert isinstance(data.generator, torch.Generator)
    assert r.model.dropout == 0.25 and r.config["num_workers"] == 2
    assert r.seed == 0 and r.precision == "fp32"
    no_gen = load_recipe("trainmedic.demo:recipe", loader_generator=False)
    assert getattr(no_gen.data, "generator", 0) is None


def test_the_package_name_stays_the_function() -> None:
    import trainmedic.demo
    import trainmedic.demo.char_recipe  # noqa: F401  # importing the module must not hide it

    assert callable(trainmedic.demo.recipe) and not isinstance(trainmedic.demo.recipe, type(
        trainmedic.demo))
    assert isinstance(trainmedic.demo.recipe(steps=10), Recipe)


def test_the_schedule_warms_up_then_decays() -> None:
    r = load_recipe("trainmedic.demo:recipe", steps=100, lr=1e-3)
    sched: Any = r.scheduler
    lrs = []
    for _ in range(100):
        lrs.append(r.optimizer.param_groups[0]["lr"])
        r.optimizer.step()
        sched.step()
    assert lrs[0] == pytest.approx(1e-4) and max(lrs) == pytest.approx(1e-3)
    assert lrs[9] == pytest.approx(1e-3) and lrs[-1] == pytest.approx(1e-4, rel=0.05)


@pytest.mark.parametrize(("field", "value"), [
    ("num_workers", -1), ("dropout", 1.0), ("dropout", "0.1"), ("steps", 0), ("lr", 0),
    ("precision", "int8"), ("batch_size", 0), ("train_chars", 5), ("jitter", -1),
])
def test_bad_override_is_named(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=field):
        load_recipe("trainmedic.demo:recipe", **{field: value})


def test_windows_are_jittered_from_the_global_rng() -> None:
    r = load_recipe("trainmedic.demo:recipe", jitter=8)
    data: Any = r.data
    ds = data.dataset
    torch.manual_seed(1)
    a = ds[3]
    torch.manual_seed(2)
    b = [ds[3] for _ in range(8)]
    assert any(not torch.equal(a[0], x[0]) for x, _ in b)
    x, y = a
    assert x.shape == (64,) and torch.equal(x[1:], y[:-1])  # y is x shifted by one


def test_dropout_zero_draws_nothing_and_changes_nothing() -> None:
    torch.manual_seed(0)
    plain = CharTransformer(20, context_len=8)
    torch.manual_seed(0)
    zero = CharTransformer(20, context_len=8, dropout=0.0)
    assert [n for n, _ in plain.named_modules()] == [n for n, _ in zero.named_modules()]
    idx = torch.randint(0, 20, (2, 8))
    before = torch.get_rng_state()
    out = zero.train()(idx)
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(out, plain.train()(idx))
    torch.manual_seed(0)
    drop = CharTransformer(20, context_len=8, dropout=0.3)
    assert torch.equal(drop.eval()(idx), out)  # same weights; dropout is off in eval
    assert not torch.equal(drop.train()(idx), out)
    with pytest.raises(ConfigError, match="dropout"):
        CharTransformer(20, dropout=1.0)
