"""Each lever of ``trainmedic try`` on a tiny recipe: what it changes and what it keeps; the
registry and ``NAME[=VALUE]`` parsing with their errors."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainmedic.errors import ConfigError, MissingExtraError, RegistryError
from trainmedic.levers.lever_catalog import (
    Lever,
    apply_levers,
    get_lever,
    lever_names,
    parse_lever,
    register_lever,
)
from trainmedic.levers.lever_transforms import set_optimizer_impl
from trainmedic.recipe import Recipe, load_recipe
from trainmedic.recipe.runner import RecipeRunner

TINY = {"batch_size": 8, "context_len": 16, "steps": 20}


def demo(**kw: Any) -> Recipe:
    return load_recipe("trainmedic.demo:recipe", **{**TINY, **kw})


def pull(recipe: Recipe, spec: str) -> Recipe:
    return apply_levers(recipe, (parse_lever(spec),))


def param_ids(r: Recipe) -> list[int]:
    return [id(p) for p in r.model.parameters()]


# -- registry and parsing --------------------------------------------------------------------

def test_registry_lists_the_issue_levers_and_refuses_duplicates() -> None:
    names = set(lever_names())
    assert {"num_workers", "pin_memory", "prefetch", "bf16", "fp16", "compile",
            "channels_last", "foreach", "fused", "micro_batch", "activation_checkpointing",
            "adam8bit"} <= names
    with pytest.raises(RegistryError, match="already registered"):
        register_lever(Lever("bf16", "again"))
    with pytest.raises(ConfigError, match="changes"):
        Lever("x", "y", changes=("the weather",))


def test_declarations() -> None:
    assert get_lever("bf16").changes_numerics and get_lever("bf16").changes == ("precision",)
    assert get_lever("adam8bit").changes_numerics
    assert not get_lever("num_workers").changes_numerics
    assert get_lever("micro_batch").changes == ("shapes and batch/update semantics",)


@pytest.mark.parametrize(("spec", "error", "match"), [
    ("warp_drive", RegistryError, "no lever 'warp_drive'; expected one of num_workers"),
    ("num_workers=many", ConfigError, "expected an integer from 0 to 64"),
    ("num_workers=", ConfigError, "empty value"),
    ("micro_batch=1", ConfigError, "from 2 to"),
    ("bf16=yes", ConfigError, "takes no value"),
    ("compile=fastest", ConfigError, "expected one of default"),
])
def test_bad_lever_specs(spec: str, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        parse_lever(spec)


def test_values_parse() -> None:
    assert parse_lever("num_workers=3").value == 3
    assert parse_lever("num_workers=3").label == "num_workers=3"
    assert parse_lever("micro_batch").value == 2
    assert parse_lever("num_workers").value >= 1
    assert parse_lever("compile=reduce-overhead").value == "reduce-overhead"
    assert parse_lever("bf16").label == "bf16"


# -- data levers -----------------------------------------------------------------------------

def test_num_workers_rebuilds_the_loader_and_keeps_the_rest() -> None:
    a = demo()
    b = pull(demo(), "num_workers=2")
    old, new = a.data, b.data
    assert isinstance(new, DataLoader) and new.num_workers == 2
    assert new.batch_size == old.batch_size and new.drop_last == old.drop_last
    assert type(new.sampler) is type(old.sampler)  # noqa: E721
    assert b.precision == a.precision and b.grad_accum == a.grad_accum
    with pytest.raises(ConfigError, match="already loads with num_workers=2"):
        pull(b, "num_workers=2")


def test_rebuilt_loader_keeps_the_sample_order() -> None:
    a = demo(jitter=0)
    b = pull(demo(jitter=0), "pin_memory")
    assert b.data.pin_memory and not a.data.pin_memory  # type: ignore[attr-defined]
    first_a, first_b = next(iter(a.data)), next(iter(b.data))
    assert torch.equal(first_a[0], first_b[0])


def test_prefetch_needs_workers() -> None:
    with pytest.raises(ConfigError, match="num_workers=0"):
        pull(demo(), "prefetch=4")
    r = apply_levers(demo(), (parse_lever("num_workers=1"), parse_lever("prefetch=3")))
    assert r.data.prefetch_factor == 3 and r.data.num_workers == 1  # type: ignore[attr-defined]


def test_loader_levers_refuse_a_list() -> None:
    r = demo()
    listed = Recipe(model=r.model, optimizer=r.optimizer, loss_fn=r.loss_fn,
                    data=[next(iter(r.data))])
    with pytest.raises(ConfigError, match="not a torch DataLoader"):
        pull(listed, "num_workers=2")


def test_micro_batch_keeps_the_global_batch() -> None:
    a = demo(jitter=0)
    b = pull(demo(jitter=0), "micro_batch=4")
    assert b.data.batch_size == 2 and b.grad_accum == 4  # type: ignore[attr-defined]
    batches = iter(b.data)
    micro = torch.cat([next(batches)[0] for _ in range(4)])
    assert torch.equal(micro, next(iter(a.data))[0])  # the same 8 samples, in order
    with pytest.raises(ConfigError, match="not a multiple of 3"):
        pull(demo(), "micro_batch=3")


# -- precision -------------------------------------------------------------------------------

def test_precision_levers() -> None:
    a = demo()
    b = pull(a, "bf16")
    assert b.precision == "bf16-mixed" and b.scaler is None and b.model is a.model
    f = pull(demo(), "fp16")
    assert f.precision == "fp16-mixed" and isinstance(f.scaler, torch.amp.GradScaler)
    with pytest.raises(ConfigError, match="already runs bf16-mixed"):
        pull(b, "fp16")


# -- model -----------------------------------------------------------------------------------

def test_compile_wraps_the_same_parameters() -> None:
    a = demo()
    ids = param_ids(a)
    b = pull(a, "compile")
    assert isinstance(b.model, torch._dynamo.eval_frame.OptimizedModule)
    assert param_ids(b) == ids and b.optimizer is a.optimizer
    with pytest.raises(ConfigError, match="already compiled"):
        pull(b, "compile")


class _Conv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x).mean(dim=(2, 3)))


def _conv_recipe() -> Recipe:
    torch.manual_seed(0)
    model = _Conv()
    data = DataLoader(TensorDataset(torch.randn(8, 3, 6, 6), torch.randint(0, 2, (8,))),
                      batch_size=4)
    seen: list[torch.Tensor] = []

    def loss_fn(m: Any, batch: Any) -> torch.Tensor:
        seen.append(batch[0])
        return torch.nn.functional.cross_entropy(m(batch[0]), batch[1])

    loss_fn.seen = seen  # type: ignore[attr-defined]
    return Recipe(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                  loss_fn=loss_fn, data=data)


def test_channels_last_converts_weights_and_inputs() -> None:
    a = _conv_recipe()
    ids = param_ids(a)
    b = pull(a, "channels_last")
    w = b.model.conv.weight  # type: ignore[union-attr]
    assert w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous()
    assert param_ids(b) == ids
    RecipeRunner(b).run(1)
    seen = a.loss_fn.seen  # type: ignore[attr-defined]
    assert seen[-1].is_contiguous(memory_format=torch.channels_last)
    with pytest.raises(ConfigError, match="no Conv2d"):
        pull(demo(), "channels_last")


def test_activation_checkpointing_same_gradients() -> None:
    a, b = demo(dropout=0.0), pull(demo(dropout=0.0), "activation_checkpointing")
    assert all(type(m).__name__ == "Checkpointed" for m in b.model.blocks)  # type: ignore
    assert sorted(p.data_ptr() for p in b.model.parameters()) == sorted(
        p.data_ptr() for p in b.optimizer.param_groups[0]["params"])
    batch = next(iter(demo(dropout=0.0, jitter=0).data))
    for r in (a, b):
        r.model.train()
        r.loss_fn(r.model, batch).backward()
    for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
        torch.testing.assert_close(pa.grad, pb.grad)
    with pytest.raises(ConfigError, match="already checkpointed"):
        pull(b, "activation_checkpointing")
    with pytest.raises(ConfigError, match="no nn.ModuleList"):
        pull(_conv_recipe(), "activation_checkpointing")


# -- optimizer -------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["foreach", "fused"])
def test_optimizer_implementation_flags(flag: str) -> None:
    a = demo()
    b = pull(a, flag)
    assert b.optimizer is a.optimizer and b.scheduler is a.scheduler
    groups = b.optimizer.param_groups
    assert all(g[flag] is True for g in groups)
    assert groups[0]["lr"] == demo().optimizer.param_groups[0]["lr"]
    with pytest.raises(ConfigError, match=f"already uses {flag}=True"):
        pull(b, flag)
    assert RecipeRunner(b).run(2).losses  # steps with the flag set
    with pytest.raises(ConfigError, match="already stepped"):
        pull(b, "fused" if flag == "foreach" else "foreach")


def test_optimizer_without_the_implementation() -> None:
    lbfgs = torch.optim.LBFGS([torch.nn.Parameter(torch.zeros(2))])
    with pytest.raises(ConfigError, match="LBFGS has no fused"):
        set_optimizer_impl(lbfgs, "fused")


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is not None,
                    reason="bitsandbytes is installed")
def test_adam8bit_needs_bitsandbytes() -> None:
    with pytest.raises(MissingExtraError, match="pip install bitsandbytes"):
        pull(demo(), "adam8bit")


def test_demo_load_delay_is_validated_and_recorded() -> None:
    r = demo(load_delay_s=0.04)
    assert r.config["load_delay_s"] == 0.04
    assert r.data.dataset.delay_s == pytest.approx(0.04 / 8)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="load_delay_s"):
        demo(load_delay_s=-1)
