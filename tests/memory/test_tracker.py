"""StorageTracker on hand-counted cases, on fake tensors, and against MemTracker on real ones."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from trainmedic.memory.tracker import (  # noqa: E402
    ROLE_PRIORITY,
    StorageTracker,
    module_path_names,
)


def test_peak_counts_each_storage_once_and_sees_frees() -> None:
    tracker = StorageTracker()
    with tracker.tracking():
        a = torch.empty(1000)  # 4000 bytes
        views = [a.view(10, 100), a[:10], a.t()]  # same storage: no new bytes
        b = torch.empty(2000)  # 8000 bytes: 12000 live
        del a, views
        c = torch.empty(500)  # 2000 bytes: 10000 live
        d = torch.empty(100, dtype=torch.float64)  # 800 bytes: 10800 live
    assert tracker.peak_bytes == 12000
    assert tracker.live_bytes == 8000 + 2000 + 800
    del b, c, d
    assert tracker.live_bytes == 0


def test_granularity_rounds_every_storage_up() -> None:
    tracker = StorageTracker(granularity_bytes=512)
    with tracker.tracking():
        x = torch.empty(1)  # 4 bytes -> one 512-byte block
        y = torch.empty(129)  # 516 bytes -> two blocks
    assert tracker.peak_bytes == 512 + 1024
    del x, y
    with pytest.raises(ValueError, match="granularity_bytes"):
        StorageTracker(granularity_bytes=0)


def test_roles_decide_the_category_by_priority() -> None:
    lin = nn.Linear(8, 4)
    tracker = StorageTracker(module_names=module_path_names(lin))
    tracker.mark_module(lin)
    x = torch.randn(3, 8, requires_grad=True)
    with tracker.tracking():
        tracker.phase = "forward"
        hidden = torch.relu(lin(x))  # relu keeps its output: an activation
        scratch = hidden * 0  # not saved (no grad path needed beyond it): a temporary
        loss = hidden.sum()
        event = tracker.event
        tracker.phase = "backward"
        loss.backward()
        del hidden, scratch, loss
    cats = tracker.categories_at(event)
    # linear keeps the weight (a parameter, so "params") and x (made before tracking, first
    # seen when saved); relu keeps its output.
    assert cats["params"] == (8 * 4 + 4) * 4
    assert cats["activations"] == 3 * 8 * 4 + 3 * 4 * 4
    # scratch (mul by a number keeps nothing) and the scalar loss; lin's pre-relu output
    # died when relu returned (relu keeps its result, not its input)
    assert cats["temporaries"] == 3 * 4 * 4 + 4
    final = tracker.categories_at(tracker.event)
    assert final["grads"] == (8 * 4 + 4) * 4  # x.grad is no parameter's: a temporary
    assert final["activations"] == 3 * 8 * 4  # relu's output is gone; x is still held here


def test_priority_order_is_the_documented_one() -> None:
    assert ROLE_PRIORITY[:4] == ("params", "grads", "optimizer", "buffers")
    assert ROLE_PRIORITY.index("param_casts") < ROLE_PRIORITY.index("activations")
    with pytest.raises(ValueError, match="role"):
        StorageTracker().mark(torch.empty(1), "weights")


def test_autocast_weight_copies_are_param_casts_even_when_saved() -> None:
    lin = nn.Linear(16, 16, bias=False)
    tracker = StorageTracker()
    tracker.mark_module(lin)
    x = torch.randn(4, 16)
    with tracker.tracking(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = lin(x)
        event = tracker.event
    assert tracker.role_bytes_at(event, "param_casts") == 16 * 16 * 2  # one bf16 copy
    cats = tracker.categories_at(event)
    assert cats.get("activations", 0) == 4 * 16 * 2  # the bf16 copy of x that mm keeps
    del out


def test_saved_activations_are_attributed_to_the_innermost_module() -> None:
    model = nn.Sequential(nn.Linear(4, 6), nn.Sequential(nn.Tanh(), nn.Linear(6, 2)))
    tracker = StorageTracker(module_names=module_path_names(model))
    tracker.mark_module(model)
    with tracker.tracking():
        x = torch.randn(5, 4)
        model(x).sum().backward()
    # "0" keeps x, tanh ("1.0") its output, "1.1" nothing new (the same tanh output).
    assert tracker.saved_bytes_by_module(0) == {"0": 5 * 4 * 4, "1.0": 5 * 6 * 4}


def test_scalar_reads_of_fake_values_get_a_placeholder() -> None:
    tracker = StorageTracker()
    with FakeTensorMode(), tracker.tracking():
        x = torch.randn(10)
        total = x.sum().item()
        flag = bool((x > 0).any())
    assert (total, flag) == (1.0, False)
    assert tracker.placeholder_reads == 2


def _two_steps(model: nn.Module, opt: Any, after_step: Any) -> None:
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        x = torch.randn(16, 32)
        loss = model(x).square().mean()
        del x
        loss.backward()
        del loss
        opt.step()
        after_step()


def _mlp_and_adam() -> tuple[nn.Module, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    return model, torch.optim.Adam(model.parameters())


def test_on_real_tensors_the_peak_equals_memtracker() -> None:
    from torch.distributed._tools.mem_tracker import MemTracker

    model, opt = _mlp_and_adam()
    mt = MemTracker()
    mt.track_external(model, opt)
    with mt:
        _two_steps(model, opt, mt.reset_mod_stats)
    (snap,) = mt.get_tracker_snapshot("peak").values()

    model, opt = _mlp_and_adam()
    ours = StorageTracker()
    ours.mark_module(model)
    with ours.tracking():
        _two_steps(model, opt, lambda: ours.mark_optimizer(opt))
    assert ours.peak_bytes == snap["Total"]
    cats = ours.categories_at(ours.peak_event)
    assert cats["params"] == sum(p.numel() * 4 for p in model.parameters())
    # Adam: two moments per parameter and a 4-byte step count per tensor.
    assert cats["optimizer"] == 2 * cats["params"] + 4 * len(list(model.parameters()))
