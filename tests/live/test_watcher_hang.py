"""The hang watchdog inside the live watcher: off by default for one process, on with
``hang=``; a stalled step is dumped with the stalled line, an eval phase is not a hang, and
``trainmedic dist diagnose`` reads the run folder."""

from __future__ import annotations

import pathlib
import time

import torch
import torch.nn.functional as F

from trainmedic import watch
from trainmedic.dist.hang_diagnosis import diagnose_hang_dir
from trainmedic.dist.watchdog import HangWatchdogConfig

FAST = HangWatchdogConfig(floor_s=0.4, k=10.0, min_steps=2, poll_interval_s=0.05,
                          first_step_limit_s=5.0, eval_limit_s=5.0, heartbeat_interval_s=0.2,
                          flight_recorder_entries=0, dump_children=False)


def _step(model: torch.nn.Module, opt: torch.optim.Optimizer) -> torch.Tensor:
    loss = F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def test_one_process_has_no_watchdog_unless_asked(tmp_path: pathlib.Path) -> None:
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with watch(model, opt, run_dir=tmp_path, announce=False) as w:
        w.step(_step(model, opt))
        with w.phase("eval"):  # a no-op without the watchdog
            pass
    assert not (tmp_path / "hang").exists()


def test_a_stalled_step_is_dumped_and_an_eval_phase_is_not(tmp_path: pathlib.Path) -> None:
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with watch(model, opt, run_dir=tmp_path, announce=False, hang=FAST) as w:
        for _ in range(4):
            w.step(_step(model, opt))
        with w.phase("eval"):
            time.sleep(0.8)  # 2x the floor, inside the eval limit: no dump
        w.step(_step(model, opt))
        assert not list((tmp_path / "hang").glob("rank0.hang*.json"))
        time.sleep(0.8)  # THE STALL: no step for 2x the floor
        diagnosis = diagnose_hang_dir(tmp_path)  # read while still stalled
        w.step(_step(model, opt))
    dumps = sorted((tmp_path / "hang").glob("rank0.hang*.json"))
    assert [p.name for p in dumps] == ["rank0.hang0.json"]
    stacks = (tmp_path / "hang" / "rank0.hang0.stacks.txt").read_text()
    line = next(i for i, text in enumerate(pathlib.Path(__file__).read_text().splitlines(), 1)
                if "# THE STALL" in text)
    assert f'File "{__file__}", line {line}' in stacks
    assert diagnosis.hung and diagnosis.ranks[0].status == "stuck"
    assert diagnosis.ranks[0].step == 4  # the last step that completed (0-based)
    assert not diagnose_hang_dir(tmp_path).hung  # a step came after: the stall resolved


def test_a_framework_callback_holds_the_eval_phase_between_its_hooks(
        tmp_path: pathlib.Path) -> None:
    from trainmedic.live.phase_span import PhaseSpan

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    span = PhaseSpan()
    with watch(model, opt, run_dir=tmp_path, announce=False, hang=FAST) as w:
        w.step(_step(model, opt))
        hang = w._hang
        assert hang is not None
        span.open(w, "eval")  # Lightning's on_validation_start, HF's first prediction step
        span.open(w, "eval")  # every further eval batch: still one phase
        assert hang.limit()[1] == "eval phase limit"
        span.close()  # on_validation_end / on_evaluate
        span.close()
        assert hang.limit()[1] != "eval phase limit"
    span.open(None, "eval")  # no watcher (before training): nothing to do
    span.close()
