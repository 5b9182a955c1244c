"""The loop runner: its step against a hand-written loop, epochs, precision, saving, and
in-process exact resume of the demo recipe (the fresh-process proof is the resume test's)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trainmedic.errors import ConfigError
from trainmedic.recipe import Recipe, RecipeRunner, load_recipe

torch = pytest.importorskip("torch")


def linear_parts(seed: int = 0) -> tuple[Any, Any, Any, list[Any]]:
    g = torch.Generator().manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    data = [(torch.randn(3, 4, generator=g), torch.randn(3, 2, generator=g)) for _ in range(3)]
    return model, opt, sched, data


def mse(model: Any, batch: Any) -> Any:
    x, y = batch
    return ((model(x) - y) ** 2).mean()


def test_step_matches_a_hand_written_loop() -> None:
    model, opt, sched, data = linear_parts()
    runner = RecipeRunner(Recipe(model=model, optimizer=opt, scheduler=sched, loss_fn=mse,
                                 data=data, grad_accum=2, max_grad_norm=0.3))
    got = runner.run(4).losses

    m2, o2, s2, d2 = linear_parts()
    stream = [d2[i % 3] for i in range(8)]  # epochs roll over inside a step
    expected = []
    for step in range(4):
        micro = []
        for b in stream[2 * step:2 * step + 2]:
            loss = mse(m2, b)
            (loss / 2).backward()
            micro.append(float(loss.detach()))
        torch.nn.utils.clip_grad_norm_(m2.parameters(), 0.3)
        o2.step()
        s2.step()
        o2.zero_grad()
        expected.append((micro[0] + micro[1]) / 2)
    assert got == pytest.approx(expected, rel=1e-6)
    for a, b in zip(model.parameters(), m2.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-7)
    loop = runner.loop
    assert (loop.step, loop.epoch, loop.batches_in_epoch) == (4, 2, 2)
    assert loop.samples_seen == 8 * 3 and loop.tokens_seen == 0  # float inputs: no tokens
    assert all(p.grad is None for p in model.parameters())


def test_run_continues_to_an_absolute_step_count() -> None:
    model, opt, sched, data = linear_parts()
    runner = RecipeRunner(Recipe(model=model, optimizer=opt, loss_fn=mse, data=data))
    assert len(runner.run(2).losses) == 2
    res = runner.run(5)
    assert (res.start_step, res.step, len(res.losses)) == (2, 5, 3)
    assert runner.run(3).losses == []


@pytest.mark.parametrize("precision", ["bf16-mixed", "fp16-mixed"])
def test_mixed_precision_autocasts_the_loss(precision: str) -> None:
    model, opt, _, data = linear_parts()
    seen: list[Any] = []

    def loss_fn(m: Any, batch: Any) -> Any:
        out = m(batch[0])
        seen.append((torch.is_autocast_enabled("cpu"), out.dtype))
        return ((out.float() - batch[1]) ** 2).mean()

    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0) if precision == "fp16-mixed" \
        else None
    want = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
    before = [p.detach().clone() for p in model.parameters()]
    runner = RecipeRunner(Recipe(model=model, optimizer=opt, loss_fn=loss_fn, data=data,
                                 precision=precision, scaler=scaler, max_grad_norm=1.0))
    runner.run(3)
    assert seen == [(True, want)] * 3
    assert not torch.is_autocast_enabled("cpu")
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    if scaler is not None:
        assert scaler.state_dict()["_growth_tracker"] == 3  # three finite steps counted


def test_loss_must_be_a_scalar() -> None:
    model, opt, _, data = linear_parts()
    runner = RecipeRunner(Recipe(model=model, optimizer=opt, data=data,
                                 loss_fn=lambda m, b: m(b[0])))
    with pytest.raises(ConfigError, match=r"loss_fn must return a scalar tensor, got "
                                          r"Tensor\(3, 2\)"):
        runner.run(1)


def test_runner_arguments_are_checked(file_manager: Any) -> None:
    model, opt, _, data = linear_parts()
    r = Recipe(model=model, optimizer=opt, loss_fn=mse, data=data)
    with pytest.raises(ConfigError, match="manager"):
        RecipeRunner(r, save_every=2)
    with pytest.raises(ConfigError, match="save_every"):
        RecipeRunner(r, manager=file_manager, save_every=0)
    with pytest.raises(ConfigError, match="on_resize"):
        RecipeRunner(r, on_resize="maybe")
    with pytest.raises(ConfigError, match="data: epoch 0 yielded no batches"):
        RecipeRunner(Recipe(model=model, optimizer=opt, loss_fn=mse, data=[])).run(1)
    runner = RecipeRunner(r, manager=file_manager)
    assert runner.resume() is None  # nothing saved yet: a fresh start
    runner.run(1)
    with pytest.raises(ConfigError, match="resume"):
        runner.resume()


class FakePreemption:
    def __init__(self, requests: dict[int, str]) -> None:
        self.requests = requests
        self.polls = 0
        self.cleared = 0
        self.signal_received = 15

    def poll(self) -> str | None:
        self.polls += 1
        return self.requests.get(self.polls)

    def clear_save_request(self) -> None:
        self.cleared += 1


def test_save_every_and_preemption(file_manager: Any) -> None:
    model, opt, _, data = linear_parts()
    pre = FakePreemption({3: "save", 5: "stop"})
    runner = RecipeRunner(Recipe(model=model, optimizer=opt, loss_fn=mse, data=data),
                          manager=file_manager, save_every=4,
                          preemption=pre)
    res = runner.run(10)
    assert file_manager.saves == [3, 4, 5]
    assert res.preempted and res.signal == 15 and res.step == 5 and len(res.losses) == 5
    assert pre.cleared == 1
    assert [p.name for p in res.saved] == ["step-00000003", "step-00000004", "step-00000005"]


def perturb() -> None:
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)


DEMO = dict(train_chars=600, batch_size=4, context_len=16, dropout=0.2, steps=12)


def demo_run(kw: dict[str, Any], until: int, manager: Any = None,
             resume: bool = False, sabotage: str | None = None) -> tuple[list[float], Any]:
    runner = RecipeRunner(load_recipe("trainmedic.demo:recipe", **{**DEMO, **kw}),
                          manager=manager)
    if resume:
        assert runner.resume(sabotage=sabotage) is not None
    losses = runner.run(until).losses
    if manager is not None and not resume:
        runner.save()
    return losses, {k: v.clone() for k, v in runner.recipe.model.state_dict().items()}


# 600 characters, windows of 16 + 8 jitter: 36 windows, 9 batches of 4 an epoch.
@pytest.mark.parametrize(("kw", "at"), [
    ({}, 4),                                          # mid-epoch
    ({}, 9),                                          # at an epoch's end
    ({"grad_accum": 2, "loader_generator": False}, 6),  # a step spans two epochs
    ({"precision": "bf16-mixed"}, 5),
])
def test_demo_recipe_resumes_exactly_in_process(kw: dict[str, Any], at: int,
                                                file_manager: Any) -> None:
    straight, w_straight = demo_run(kw, 12)
    first, _ = demo_run(kw, at, file_manager)
    assert first == straight[:at]
    perturb()
    rest, w_rest = demo_run(kw, 12, file_manager, resume=True)
    assert rest == straight[at:]
    assert all(torch.equal(w_straight[k], w_rest[k]) for k in w_straight)


@pytest.mark.parametrize("sabotage", ["rng", "data", "rng-before-data", "optimizer"])
def test_a_sabotaged_resume_differs(sabotage: str, file_manager: Any) -> None:
    kw = {"loader_generator": False}
    straight, _ = demo_run(kw, 8)
    demo_run(kw, 4, file_manager)
    perturb()
    rest, _ = demo_run(kw, 8, file_manager, resume=True, sabotage=sabotage)
    assert rest != straight[4:]


def test_demo_recipe_saves_with_the_runner(tmp_path: Path, make_manager: Any) -> None:
    manager = make_manager(tmp_path)
    runner = RecipeRunner(load_recipe("trainmedic.demo:recipe", **DEMO), manager=manager,
                          save_every=3)
    runner.run(7)
    assert manager.saves == [3, 6]
    saved = torch.load(tmp_path / "step-00000006" / "state.pt", weights_only=True)
    assert saved["train"]["counters"]["step"] == 6
    assert saved["train"]["config_hash"] == runner.recipe.config_hash
    assert set(saved) == {"model", "optimizer", "scheduler", "train"}


@pytest.mark.parametrize("async_save", [False, True])
def test_exact_resume_through_the_checkpoint_manager(tmp_path: Path, async_save: bool) -> None:
    from trainmedic.checkpoint import CheckpointManager

    kw: dict[str, Any] = {"precision": "bf16-mixed"}
    straight, w_straight = demo_run(kw, 10)
    config = load_recipe("trainmedic.demo:recipe", **{**DEMO, **kw}).config
    manager = CheckpointManager(tmp_path, keep_last=2, async_save=async_save, config=config)
    runner = RecipeRunner(load_recipe("trainmedic.demo:recipe", **{**DEMO, **kw}),
                          manager=manager, save_every=2)
    assert runner.run(7).losses == straight[:7]
    manager.wait()
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-00000004",
                                                               "step-00000006"]
    perturb()
    manager2 = CheckpointManager(tmp_path, config=config)
    resumed = RecipeRunner(load_recipe("trainmedic.demo:recipe", **{**DEMO, **kw}),
                           manager=manager2)
    loaded = resumed.resume()
    assert loaded.step == 6 and resumed.loop.step == 6
    assert resumed.run(10).losses == straight[6:]
    assert all(torch.equal(w_straight[k], v)
               for k, v in resumed.recipe.model.state_dict().items())
