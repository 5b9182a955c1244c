"""The watcher's recorder: held CPU rows and held device values reach the store in step order."""

from __future__ import annotations

from typing import Any

import pytest

from trainmedic.live.recorder import Recorder

torch = pytest.importorskip("torch")


class _Store:
    rank = None

    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, Any]]] = []
        self.events: list[tuple[int, str, dict[str, Any]]] = []

    def log(self, step: int, row: Any) -> None:
        self.rows.append((step, dict(row)))

    def event(self, step: int, kind: str, data: Any) -> None:
        self.events.append((step, kind, dict(data)))


class _Alerts:
    def __init__(self) -> None:
        self.fed: list[int] = []
        self.events: list[Any] = []

    def feed(self, step: int, row: Any) -> None:
        self.fed.append(step)

    def add_event(self, event: Any) -> None:
        self.events.append(event)


def _recorder(**kwargs: Any) -> tuple[Recorder, _Store, _Alerts, list[Any]]:
    store, alerts, checked = _Store(), _Alerts(), []
    opts: dict[str, Any] = {"fetch_every": 1, "drain_rows": 3, "drain_s": 60.0}
    opts.update(kwargs)
    rec = Recorder(torch, store, alerts, check_fetched=lambda s, row: checked.append(s), **opts)
    return rec, store, alerts, checked


def test_held_rows_are_built_like_a_direct_row_and_drained_in_batches() -> None:
    rec, store, alerts, _ = _recorder()
    steps = [(0, 0.5, 0.1, 0.2, 1e-3, 2.5, 0.7, 300.0, 8, 512, 0.03, 0.004),
             (1, 0.25, 0.0, None, None, None, None, None, None, None, 0.0, None)]
    for row in steps:
        rec.hold(row, now=0.0)
    assert store.rows == []  # held until drain_rows rows or drain_s seconds
    rec.drain()
    (s0, r0), (s1, r1) = store.rows
    assert (s0, s1) == (0, 1) and alerts.fed == [0, 1]
    assert r0 == {"data_time_s": 0.1, "gc_time_s": 0.03, "rss_mb": 300.0, "step_time_s": 0.5,
                  "samples_per_s": 8 / 0.5, "tokens_per_s": 512 / 0.5,
                  "compute_time_s": 0.2, "comm_time_s": 0.004, "lr": 1e-3, "loss": 2.5,
                  "grad_norm": 0.7}
    assert r1 == {"data_time_s": 0.0, "gc_time_s": 0.0, "rss_mb": None, "step_time_s": 0.25}
    for i in range(2, 5):
        rec.hold((i, 0.1, 0.0, None, None, 1.0, None, None, None, None, 0.0, None), now=0.0)
    assert [s for s, _ in store.rows] == [0, 1, 2, 3, 4]  # the third held row drained them


def test_rows_drain_after_drain_s_and_before_a_direct_record() -> None:
    rec, store, _, _ = _recorder(drain_rows=100, drain_s=0.0)
    rec.hold((0, 0.1, 0.0, None, None, 1.0, None, None, None, None, 0.0, None), now=1e9)
    assert [s for s, _ in store.rows] == [0]  # drain_s had passed
    rec, store, _, _ = _recorder(drain_rows=100)
    rec.hold((5, 0.1, 0.0, None, None, 1.0, None, None, None, None, 0.0, None), now=0.0)
    rec.record(3, {"val_loss": 2.0})
    assert [s for s, _ in store.rows] == [5, 3]  # in the order the steps were closed


def test_device_values_are_fetched_together_and_checked() -> None:
    rec, store, _, checked = _recorder(fetch_every=2)
    assert rec.defers(torch.tensor(1.0))  # fetch_every > 1: even CPU values wait
    host: dict[str, Any] = {}
    device: dict[str, Any] = {}
    rec.put(host, device, "loss", torch.tensor(3.0, requires_grad=True) * 1)
    rec.put(host, device, "lr", 0.1)
    rec.put(host, device, "tokens", 7)
    assert host == {"lr": 0.1, "tokens": 7.0} and not device["loss"].requires_grad
    rec.hold_device(0, device)
    assert store.rows == []
    rec.hold_device(1, {"loss": torch.tensor(4.0)})
    assert store.rows == [(0, {"loss": 3.0}), (1, {"loss": 4.0})] and checked == [0, 1]


def test_events_go_to_the_store_and_the_alerts() -> None:
    rec, store, alerts, _ = _recorder()
    rec.record_event(4, "nonfinite", {"module": "fc"})
    assert store.events == [(4, "nonfinite", {"module": "fc"})]
    assert alerts.events[0].step == 4 and alerts.events[0].kind == "nonfinite"
