"""``trainmedic compare`` through the CLI's entry point, and ``diagnose`` refusing separate
runs."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from trainmedic.cli.compare import compare
from trainmedic.cli.main import cli, main


@pytest.fixture(autouse=True)
def _registered() -> None:
    # cli/main.py wires the command in; until then, register it here for main([...])
    if "compare" not in cli.commands:
        cli.add_command(compare)


def _csv(path: pathlib.Path, scale: float, lr: float, seed: int) -> str:
    # each run its own noise: two runs never share their noise pattern point for point
    path.mkdir(parents=True, exist_ok=True)
    noise = np.random.default_rng(seed).normal(0.0, 0.01, 60)
    rows = "".join(f"{s},{scale * 3.0 / (1 + s / 20) + noise[s]},{lr}\n" for s in range(60))
    (path / "metrics.csv").write_text("step,loss,lr\n" + rows)
    (path / "hparams.yaml").write_text(f"lr: {lr}\nbatch_size: 32\n")
    return str(path)


def test_compare_exit_codes_and_outputs(tmp_path: pathlib.Path, capsys) -> None:
    a, b = _csv(tmp_path / "a", 1.0, 1e-3, seed=1), _csv(tmp_path / "b", 0.8, 3e-3, seed=2)
    html = tmp_path / "c.html"
    assert main(["compare", a, b, "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "hparams.lr (hparams.yaml)" in out and "batch_size" not in out
    assert "b is lower beyond this run's own noise" in out
    assert html.read_text().startswith("<!DOCTYPE html>")
    assert main(["compare", a, b, "--json", "--by", "step"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "trainmedic.compare/1"
    assert doc["pairs"][0]["verdict"]["better"] == "b"
    assert main(["compare", a]) == 2
    assert "at least 2" in capsys.readouterr().err
    assert main(["compare", a, str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err
    assert main(["compare", a, b, "--by", "time"]) == 2  # no step_time_s to build time from
    assert "no metric in common" in capsys.readouterr().err
    assert main(["compare", "--help"]) == 0
    assert "Examples:" in capsys.readouterr().out


def test_diagnose_refuses_separate_runs_and_points_to_compare(tmp_path: pathlib.Path,
                                                              capsys) -> None:
    a, b = _csv(tmp_path / "a", 1.0, 1e-3, seed=1), _csv(tmp_path / "b", 0.8, 3e-3, seed=2)
    assert main(["diagnose", a, b]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "separate runs" in err and f"trainmedic compare {a} {b}" in err
    # per-rank files of one run, and one run's train and eval files, still read as one run
    r0, r1 = tmp_path / "m.rank0.csv", tmp_path / "m.rank1.csv"
    r0.write_text("step,loss\n" + "".join(f"{s},{2 - s / 100}\n" for s in range(50)))
    r1.write_text("step,loss\n" + "".join(f"{s},{2.1 - s / 100}\n" for s in range(50)))
    assert main(["diagnose", str(r0), str(r1), "--json", "--fail-on", "never"]) == 0
    ev = tmp_path / "eval.csv"
    ev.write_text("step,val_loss\n" + "".join(f"{s},{2.2 - s / 100}\n" for s in range(0, 50, 10)))
    assert main(["diagnose", str(r0), str(ev), "--json", "--fail-on", "never"]) == 0
