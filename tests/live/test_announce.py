"""The watcher's terminal lines: one at the start, one at the exit, a progress line on a TTY
(trainmedic.live.announce decides when; trainmedic.live.console says what)."""

from __future__ import annotations

import pathlib
import shlex
import sys
from typing import Any

import pytest

from trainmedic.errors import ConfigError
from trainmedic.live import WatchConfig, watch
from trainmedic.live import console as watch_text
from trainmedic.live.console import emit, exit_line, progress_line, start_line

torch = pytest.importorskip("torch")


def _run(run_dir: pathlib.Path, steps: int = 3, **kw: Any) -> Any:
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    kw.setdefault("alert_every", None)
    with watch(model, opt, run_dir=run_dir, **kw) as w:
        for s in range(steps):
            opt.zero_grad()
            loss = model(torch.ones(2, 4)).pow(2).mean() + s
            loss.backward()
            opt.step()
            w.step(loss)
    return w


def test_one_line_at_the_start_and_one_at_the_exit(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run(tmp_path, steps=3)
    out, err = capsys.readouterr()
    assert out == ""  # stderr only: a script's stdout stays its own
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith(f"trainmedic: recording to {tmp_path} (loss, lr, grad norm")
    assert "update ratio every 50 steps" in lines[0] and "NaN guard: skip" in lines[0]
    assert lines[1] == (f"trainmedic: recorded steps 0-2 to {tmp_path}; read it with: "
                        f"trainmedic diagnose {shlex.quote(str(tmp_path))}")
    assert "\r" not in err  # not a TTY: no progress line


def test_announce_false_is_silent(tmp_path: pathlib.Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    _run(tmp_path, announce=False)
    assert capsys.readouterr().err == ""


def test_other_ranks_stay_silent(tmp_path: pathlib.Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    _run(tmp_path, rank=1, world_size=2, progress=True)
    assert capsys.readouterr().err == ""
    _run(tmp_path, rank=0, world_size=2, progress=True)
    err = capsys.readouterr().err
    assert "recording to" in err and "\r" in err


def test_progress_line_on_request_is_throttled_and_cleared_before_the_exit_line(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run(tmp_path, steps=40, progress=True)
    err = capsys.readouterr().err
    draws = err.count("\rtrainmedic: step ")
    assert 1 <= draws < 10  # 40 steps of a tiny model take far less than 10 x 0.25 s
    assert "\rtrainmedic: step 0  loss " in err  # the first step draws at once
    # the progress line is cleared, then the exit line has a line of its own
    assert "\r\x1b[Ktrainmedic: recorded steps 0-39" in err


def test_progress_defaults_to_on_only_on_a_tty(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    _run(tmp_path / "a")
    assert "\r" not in capsys.readouterr().err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    _run(tmp_path / "b")
    assert "\rtrainmedic: step 0  loss " in capsys.readouterr().err
    _run(tmp_path / "c", progress=False)
    assert "\r" not in capsys.readouterr().err


def test_the_exit_line_counts_live_alerts(tmp_path: pathlib.Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    model = torch.nn.Linear(4, 1)
    with watch(model, None, run_dir=tmp_path, alert_every=10, alert_window=20) as w:
        for s in range(40):  # a loss that explodes: a divergence alert
            w.step(1.0 if s < 20 else 10.0 ** (s - 18))
    n = len(w.findings)
    assert n >= 1
    assert f"{n} live alert" in capsys.readouterr().err.splitlines()[-1]


def test_nothing_recorded_says_so(tmp_path: pathlib.Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    model = torch.nn.Linear(4, 1)
    with watch(model, None, run_dir=tmp_path, alert_every=None):
        pass
    assert "recorded no steps to" in capsys.readouterr().err


def test_wording() -> None:
    assert start_line("runs/a", ["loss"], note="version 2") == \
        "trainmedic: recording to runs/a (loss); version 2"
    assert exit_line("runs/my run", first_step=5, last_step=5) == (
        "trainmedic: recorded step 5 to runs/my run; read it with: "
        "trainmedic diagnose 'runs/my run'")
    assert exit_line("r", first_step=None, last_step=None, alerts=2).startswith(
        "trainmedic: recorded no steps, 2 live alerts to r")
    assert "could not be written" in exit_line("r", first_step=0, last_step=3, stored=False)
    assert progress_line(12, loss=2.31456, it_per_s=37.51, alerts=1) == \
        "trainmedic: step 12  loss 2.315  37.5 it/s  1 alert"
    assert progress_line(0, loss=float("nan"), it_per_s=None) == "trainmedic: step 0  loss NaN"
    assert progress_line(3, loss=1.5e-5, it_per_s=12345.0) == \
        "trainmedic: step 3  loss 1.500e-5  12345 it/s"


def test_emit_never_raises_on_a_broken_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def write(self, text: str) -> int:
            raise BrokenPipeError

        def flush(self) -> None:
            raise BrokenPipeError

    monkeypatch.setattr(watch_text.sys, "stderr", Broken())
    emit("trainmedic: x")
    emit("x", transient=True)
    monkeypatch.setattr(watch_text.sys, "stderr", None)
    emit("trainmedic: x")


@pytest.mark.parametrize(("field", "value"), [
    ("announce", "yes"), ("announce", None), ("progress", 1), ("if_exists", "skip")])
def test_new_fields_are_validated_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=field):
        WatchConfig(**{field: value})


@pytest.mark.parametrize("module", ["hf_callback", "lightning_callback"])
def test_trainer_callbacks_leave_the_progress_line_to_the_trainers_bar(
        tmp_path: pathlib.Path, module: str) -> None:
    mod = pytest.importorskip(f"trainmedic.live.{module}")
    assert mod.TrainmedicCallback(run_dir=tmp_path).watch_kwargs["progress"] is False
    assert mod.TrainmedicCallback(run_dir=tmp_path, progress=True).watch_kwargs["progress"]
