"""The NaN guard's policy object on its own: what each policy records, drops and says."""

from __future__ import annotations

import math
from typing import Any

import pytest

from trainmedic.live.step_guard import MAX_LOCALIZATIONS, StepGuard, nonfinite_names

torch = pytest.importorskip("torch")


def _guard(policy: str, *, accelerator: bool = False) -> tuple[StepGuard, list[Any]]:
    events: list[Any] = []
    return StepGuard(policy, on_accelerator=accelerator,
                     record_event=lambda s, k, d: events.append((s, k, d))), events


def test_nonfinite_names() -> None:
    assert nonfinite_names({"loss": math.nan, "grad_norm": 1.0, "lr": math.inf}) == ["loss"]
    assert nonfinite_names({"loss": 1.0, "grad_norm": math.inf}) == ["grad_norm"]
    assert nonfinite_names({"loss": None}) == []


def test_record_on_an_accelerator_rides_the_fetch() -> None:
    guard, events = _guard("record", accelerator=True)
    guard.end_step(0, {"loss": math.nan}, replay=None, model=None, scaler=None,
                   before_raise=lambda: None)
    assert events == []  # on an accelerator the host row holds no device values yet
    guard.check_fetched(0, {"loss": math.nan, "grad_norm": math.nan})
    ((step, kind, data),) = events
    assert (step, kind, data["metrics"], data["update_skipped"]) == (
        0, "nonfinite", ["loss", "grad_norm"], False)
    assert "nan_policy='skip'" in data["detail"]


def test_skip_drops_grads_only_when_non_finite() -> None:
    guard, events = _guard("skip")
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    assert not guard.check_grads(1.5, torch, [p], None)
    assert p.grad is not None
    assert guard.check_grads(math.inf, torch, [p], None)
    assert p.grad is None
    guard.end_step(4, {"loss": 2.0}, replay=None, model=None, scaler=None,
                   before_raise=lambda: None)
    ((step, _, data),) = events
    assert step == 4 and data["metrics"] == ["grad_norm"] and data["update_skipped"]
    assert "pass replay=" in data["detail"]


def test_a_healthy_step_closes_without_end_step() -> None:
    guard, events = _guard("skip")
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    assert not guard.check_grads(2.0, torch, [p], None)
    assert guard.end_healthy_step(1.0, 2.0) and guard.end_healthy_step(None, None)
    for loss, norm in ((math.nan, 2.0), (1.0, math.inf), (-math.inf, None)):
        assert not guard.end_healthy_step(loss, norm)
    assert guard.check_grads(math.nan, torch, [p], None)  # the update was dropped
    assert not guard.end_healthy_step(1.0, None)  # so end_step must record it
    guard.end_step(3, {"loss": 1.0}, replay=None, model=None, scaler=None,
                   before_raise=lambda: None)
    assert [e[0] for e in events] == [3]


def test_after_the_first_few_events_no_more_replays_or_warnings(
        caplog: pytest.LogCaptureFixture) -> None:
    guard, events = _guard("skip")
    calls = []
    model = torch.nn.Linear(2, 1)

    def replay() -> torch.Tensor:
        calls.append(1)
        return model(torch.ones(1, 2)).sum() * math.nan

    for s in range(MAX_LOCALIZATIONS + 3):
        guard.end_step(s, {"loss": math.nan}, replay=replay, model=model, scaler=None,
                       before_raise=lambda: None)
    assert len(events) == MAX_LOCALIZATIONS + 3
    assert 0 < len(calls) <= 2 * MAX_LOCALIZATIONS  # replays stop after the first few
    assert "only the first" in events[-1][2]["detail"]
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == MAX_LOCALIZATIONS + 1
