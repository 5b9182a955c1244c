"""HangWatchdog in one process: config validation, the limit, one dump per hang, a hang that
resolves, the exception dump, heartbeats and run-store events."""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any

import pytest

from trainmedic.dist.hang_dump import read_hang_dir
from trainmedic.dist.watchdog import HangWatchdog, HangWatchdogConfig
from trainmedic.errors import ConfigError

FAST = dict(floor_s=0.4, min_steps=3, first_step_limit_s=0.4, heartbeat_interval_s=0.1,
            poll_interval_s=0.02, flight_recorder_entries=0, dump_children=False)


class _Store:
    def __init__(self) -> None:
        self.events: list[tuple[int, str, dict[str, Any]]] = []

    def event(self, step: int, kind: str, data: dict[str, Any]) -> None:
        self.events.append((step, kind, data))


@pytest.mark.parametrize("field,value", [("k", 0.5), ("floor_s", 0), ("floor_s", float("nan")),
                                         ("eval_limit_s", -1), ("min_steps", -1),
                                         ("poll_interval_s", 0.0), ("heartbeat_interval_s", True)])
def test_bad_config_names_the_field(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=field):
        HangWatchdogConfig(**{field: value})


def test_limit_first_step_floor_then_k_times_median(tmp_path: pathlib.Path) -> None:
    cfg = HangWatchdogConfig(k=10, floor_s=1.0, min_steps=3, first_step_limit_s=50.0,
                             flight_recorder_entries=0)
    wd = HangWatchdog(cfg, run_dir=tmp_path, rank=0, world_size=1)
    assert wd.limit() == (50.0, "first-step limit")
    wd.step_done(0, 0.5)
    assert wd.limit()[0] == 1.0 and "floor" in wd.limit()[1]
    for s, t in enumerate([0.5, 0.3, 0.4], 1):
        wd.step_done(s, t)
    assert wd.limit() == (pytest.approx(4.5), "10 x median step time 0.45 s")
    wd.enter_phase("eval")
    assert wd.limit() == (1800.0, "eval phase limit")
    wd.exit_phase()
    with wd.phase("checkpoint"):
        assert wd.limit()[1] == "checkpoint phase limit"
    with pytest.raises(ConfigError, match="phase"):
        wd.enter_phase("training")


def test_one_dump_per_hang_and_a_hang_that_resolves(tmp_path: pathlib.Path) -> None:
    store = _Store()
    with HangWatchdog(HangWatchdogConfig(**FAST), run_dir=tmp_path, rank=1, world_size=2,
                      store=store) as wd:
        for s in range(4):
            wd.step_done(s, 0.01)
        time.sleep(1.2)  # 3x the floor: still one dump
        hang = tmp_path / "hang"
        assert sorted(p.name for p in hang.glob("rank1.hang*.json")) == ["rank1.hang0.json"]
        wd.step_done(4, 0.01)  # progress: the hang resolved
        time.sleep(0.15)
        time.sleep(0.6)  # a second stall: a second dump
        assert (hang / "rank1.hang1.json").exists()
    kinds = [k for _, k, _ in store.events]
    assert kinds.count("hang_dump") == 2 and kinds.count("hang_resolved") == 1
    assert "heartbeat" in kinds
    meta = json.loads((hang / "rank1.hang0.json").read_text())
    assert meta["step"] == 3 and meta["limit_s"] == pytest.approx(0.4)
    assert meta["flight_recorder"].startswith("not dumped")
    stacks = (hang / "rank1.hang0.stacks.txt").read_text()
    assert "test_watchdog.py" in stacks and "(most recent call first)" in stacks
    beat = json.loads((hang / "heartbeat.rank1.json").read_text())
    assert beat["step"] == 4 and beat["closed"] is True and beat["world_size"] == 2


def test_exception_leaving_the_watchdog_is_dumped(tmp_path: pathlib.Path) -> None:
    cfg = HangWatchdogConfig(**{**FAST, "floor_s": 60.0, "first_step_limit_s": 60.0})
    with pytest.raises(RuntimeError, match="peer"):
        with HangWatchdog(cfg, run_dir=tmp_path, rank=0, world_size=2) as wd:
            wd.step_done(0, 0.01)
            raise RuntimeError("Connection closed by peer")
    rec = read_hang_dir(tmp_path)
    dump = rec.dumps[0]
    assert dump.meta["reason"] == "exception: RuntimeError"
    assert dump.exception is not None and "Connection closed by peer" in dump.exception


def test_step_done_does_no_io(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wd = HangWatchdog(HangWatchdogConfig(flight_recorder_entries=0), run_dir=tmp_path)

    def no_io(*a: Any, **k: Any) -> None:
        raise AssertionError("I/O on the training thread")

    monkeypatch.setattr("builtins.open", no_io)
    monkeypatch.setattr(pathlib.Path, "write_text", no_io)
    for s in range(100):
        wd.step_done(s, 0.01)
    assert wd._step == 99 and len(wd._times) == 100
