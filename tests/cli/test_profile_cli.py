"""``trainmedic profile`` through the CLI's entry point, as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmedic.cli.main import main

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model-configs"

DEMO = ["profile", "trainmedic.demo:recipe", "--set", "batch_size=4", "--set",
        "context_len=16", "--steps", "2", "--warmup", "1"]


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "profile", "--help")
    assert rc == 0 and "Examples:" in out and "torchrun" in out


def test_json_report_has_the_split_flops_and_a_given_peak(
    capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    trace = tmp_path / "trace.json"
    rc, out, err = _run(capsys, *DEMO, "--peak", "2G", "--json", "--trace", str(trace))
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "trainmedic.profile/1" and doc["ranks"] == []
    assert doc["bottleneck"]["class"] in ("input", "communication", "sync", "host", "compute",
                                          "memory")
    assert sum(c["share"] for c in doc["components"]) == pytest.approx(1.0, abs=1e-6)
    assert {c["basis"] for c in doc["components"]} <= {"measured", "estimated"}
    assert doc["flops"]["per_step"] > 0 and doc["flops"]["basis"] == "measured"
    assert doc["peak"] == {"flops_per_s": 2e9, "basis": "given", "detail": "given with --peak",
                           "datasheet_flops_per_s": None}
    # MFU is the counted FLOPs over the measured step over the peak
    assert doc["mfu"] == pytest.approx(
        doc["flops"]["per_step"] / doc["step_time_s"]["median"] / 2e9)
    assert json.loads(trace.read_text())  # a Chrome trace
    assert "trace:" in err


def test_text_report_labels_every_figure(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, *DEMO, "--no-peak")
    assert rc == 0
    assert "bottleneck:" in out and "where the step goes:" in out
    assert "MFU: not checked" in out and "peak: not checked (not_checked)" in out
    assert "(measured" in out and "estimated" in out


@pytest.mark.parametrize("args, needle", [
    (["profile", "no_such_module_xyz:recipe"], "no_such_module_xyz"),
    ([*DEMO, "--peak", "fast"], "--peak"),
    ([*DEMO, "--set", "batch_size"], "--set"),
    (["profile", "trainmedic.demo:recipe", "--set", "nope=1"], "nope"),
    (["profile"], "--config"),
    (["profile", "--config", "missing.json", "--batch", "1", "--seq", "8"], "missing.json"),
    (["profile", "--config", f"{CONFIGS}/opt-125m.json", "--batch", "1"], "--seq"),
    (["profile", "--config", f"{CONFIGS}/t5-small.json", "--batch", "1", "--seq", "8"],
     "trainmedic profile RECIPE"),
])
def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], args: list[str],
                                          needle: str) -> None:
    rc, out, err = _run(capsys, *args)
    assert rc == 2 and needle in err and "Traceback" not in err


def test_config_flops_without_a_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "profile", "--config", f"{CONFIGS}/llama-3.2-1b.json",
                      "--batch", "2", "--seq", "512", "--grad-accum", "4", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["schema"] == "trainmedic.flops/1" and doc["basis"] == "estimated"
    assert doc["tokens_per_step"] == 2 * 512 * 4
    assert doc["flops_per_step"] == pytest.approx(doc["flops_per_token"] * 4096)
    rc, out, _ = _run(capsys, "profile", "--config", f"{CONFIGS}/llama-3.2-1b.json",
                      "--batch", "2", "--seq", "512", "--gpu", "h100")
    assert rc == 0 and "estimated" in out and "(datasheet" in out
    assert "flops_per_step=" in out
