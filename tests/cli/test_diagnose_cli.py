"""The ``trainmedic diagnose`` command, driven through its entry point as a user runs it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainmedic.cli.main import main
from trainmedic.report import validate_findings_json

DEVLOGS = Path(__file__).resolve().parents[1] / "data" / "devlogs"


def write_csv(path: Path, rows: list[tuple[int, float]], header: str = "step,loss") -> Path:
    path.write_text(header + "\n" + "".join(f"{s},{v}\n" for s, v in rows))
    return path


def healthy_rows(n: int = 400) -> list[tuple[int, float]]:
    import random

    rnd = random.Random(0)
    return [(s, 2.0 * math.exp(-s / 150) + 0.5 + rnd.gauss(0, 0.02)) for s in range(n)]


def test_healthy_csv_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write_csv(tmp_path / "metrics.csv", healthy_rows())
    assert main(["diagnose", str(f)]) == 0
    out = capsys.readouterr().out
    assert "metrics.csv" in out


def test_json_is_schema_and_only_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write_csv(tmp_path / "metrics.csv", healthy_rows())
    assert main(["diagnose", str(f), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "trainmedic.findings/1"
    assert "loss" in doc["metrics_seen"]
    assert isinstance(doc["checks_not_run"], list)
    # With only a loss there is no way to judge input-boundness: it must say so.
    assert any(c["symptom"] == "input_bound" for c in doc["checks_not_run"])


def test_nan_loss_fails_on_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = healthy_rows(300) + [(s, float("nan")) for s in range(300, 340)]
    f = write_csv(tmp_path / "metrics.csv", rows)
    code = main(["diagnose", str(f), "--json"])
    doc = json.loads(capsys.readouterr().out)
    symptoms = {x["symptom"]: x for x in doc["findings"]}
    assert "nonfinite_loss" in symptoms
    assert symptoms["nonfinite_loss"]["onset_step"] == 300
    assert code == 1
    assert main(["diagnose", str(f), "--json", "--fail-on", "never"]) == 0


def test_fail_on_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = healthy_rows(400)
    rows[200] = (200, rows[200][1] * 20)  # one spike that recovers: a warning, not an error
    f = write_csv(tmp_path / "metrics.csv", rows)
    assert main(["diagnose", str(f), "--json", "--fail-on", "warning"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert any(x["symptom"] == "loss_spike" and x["onset_step"] == 200 for x in doc["findings"])


def test_html_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write_csv(tmp_path / "metrics.csv", healthy_rows())
    out = tmp_path / "sub" / "report.html"
    assert main(["diagnose", str(f), "--html", str(out)]) == 0
    text = out.read_text()
    assert text.lstrip().lower().startswith("<!doctype html")
    assert "<svg" in text


def test_map_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write_csv(tmp_path / "metrics.csv", healthy_rows(), header="step,my_objective")
    assert main(["diagnose", str(f), "--json", "--map", "loss=my_objective"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "loss" in doc["metrics_seen"]


@pytest.mark.parametrize("bad", ["loss", "=x", "loss="])
def test_bad_map_is_usage_error(tmp_path: Path, bad: str) -> None:
    f = write_csv(tmp_path / "metrics.csv", healthy_rows())
    assert main(["diagnose", str(f), "--map", bad]) == 2


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.csv"
    assert main(["diagnose", str(missing)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "nope.csv" in line


@pytest.mark.parametrize(
    "name,content",
    [
        ("empty.csv", b""),
        ("junk.bin", bytes(range(256)) * 40),
        ("header_only.csv", b"step,loss\n"),
    ],
)
def test_bad_input_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   name: str, content: bytes) -> None:
    f = tmp_path / name
    f.write_bytes(content)
    assert main(["diagnose", str(f)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert name in line


def test_folder_with_nothing_recognizable(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.md").write_text("# hello\n")
    assert main(["diagnose", str(tmp_path)]) == 2
    _one_error_line(capsys.readouterr().err)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read a file without read permission")
def test_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write_csv(tmp_path / "metrics.csv", healthy_rows())
    f.chmod(0)
    assert main(["diagnose", str(f)]) == 2
    _one_error_line(capsys.readouterr().err)


def test_help_has_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--help"]) == 0
    assert "Examples:" in capsys.readouterr().out


def test_console_script_does_not_import_torch(tmp_path: Path) -> None:
    f = write_csv(tmp_path / "metrics.csv", healthy_rows())
    code = (
        "import sys; from trainmedic.cli.main import main; rc = main(['diagnose', sys.argv[1],"
        " '--json']); assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(f)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)


def test_devlog_folder_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["diagnose", str(DEVLOGS / "pl-pinn-nan"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    assert any(x["symptom"] == "nonfinite_loss" for x in doc["findings"])


def test_no_recognised_loss_is_never_green(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A log whose loss was not recognised is not judged: exit 2, the columns listed, the
    --map to use; never "No problems found"."""
    rows = "".join(f"{s},{2.0 * math.exp(-s / 50):.5f},{0.1 + s / 1000:.4f}\n" for s in range(60))
    f = tmp_path / "metrics.csv"
    f.write_text("step,my_objective_value,acc\n" + rows)
    assert main(["diagnose", str(f)]) == 2
    cap = capsys.readouterr()
    assert "No problems found" not in cap.out
    assert "no training loss recognised" in cap.err
    assert "--map loss='my_objective_value'" in cap.err
    assert "my_objective_value" in cap.out and "acc" in cap.out
    assert main(["diagnose", str(f), "--json"]) == 2
    obj = json.loads(capsys.readouterr().out)
    assert obj["loss_found"] is False
    assert {m["column"] for m in obj["mapping"]} >= {"my_objective_value", "acc"}
    # With the mapping the run is judged.
    assert main(["diagnose", str(f), "--map", "loss=my_objective_value"]) == 0
    assert "No problems found" in capsys.readouterr().out


def test_a_timing_only_log_is_not_judged_and_no_timing_column_is_offered_as_the_loss(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "t.csv"
    f.write_text("step,data_time,step_time,lr\n" + "".join(
        f"{s},{19.6 if s == 4 else 0.0001},0.66,0.001\n" for s in range(1, 8)))
    assert main(["diagnose", str(f)]) == 2
    cap = capsys.readouterr()
    assert "--map loss=COLUMN" in cap.err and "loss='data_time'" not in cap.err
    assert "input_bound" in cap.out  # the timing was still judged


def test_a_counter_is_never_offered_as_the_loss_and_an_l_column_is(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """'Eit 12400  lr 0.0002  Le 25.6  Time 0.9 (0.0)  Data 0.04 (0.0)': the counters (an
    epoch, a position, a global iteration kept under raw names) and the timings are left out;
    the paper's "L" is offered."""
    f = tmp_path / "train.log"
    f.write_text("".join(
        f"Epoch: [5][{1069 + 100 * k}/2266]\tEit {12400 + 100 * k}  lr 0.0002  "
        f"Le {25.6 + 1e-5 * (k % 3):.6f}\tTime {0.9 + 0.01 * (k % 4):.3f} (0.000)\t"
        f"Data {0.039 + 0.001 * (k % 2):.3f} (0.000)\n" for k in range(12)))
    assert main(["diagnose", str(f), "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["loss_found"] is False and doc["loss_candidates"] == ["le"]
    validate_findings_json(doc)
    assert main(["diagnose", str(f)]) == 2
    err = capsys.readouterr().err
    assert "--map loss='le' naming" in err and "'eit'" not in err and "'epoch'" not in err


def test_map_to_an_unknown_canonical_name_is_refused_listing_the_known_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write_csv(tmp_path / "metrics.csv", healthy_rows(), header="step,my_objective")
    assert main(["diagnose", str(f), "--map", "training_loss=my_objective"]) == 2
    err = capsys.readouterr().err
    assert "'training_loss' is not a canonical metric name" in err
    assert "loss, val_loss, grad_norm" in err


def test_map_to_an_evaluation_set_is_accepted(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "metrics.csv"
    p.write_text("step,loss,holdout_score\n" + "".join(
        f"{s},{2.0 * math.exp(-s / 150) + 0.5},{2.1 * math.exp(-s / 150) + 0.6}\n"
        for s in range(0, 400, 10)))
    assert main(["diagnose", str(p), "--json", "--map", "val_loss/holdout=holdout_score"]) == 0
    assert "val_loss/holdout" in json.loads(capsys.readouterr().out)["metrics_seen"]


def test_a_reader_that_goes_away_is_exit_141_not_findings(tmp_path: Path) -> None:
    # `trainmedic diagnose ... | head -1`: rich's own broken-pipe handling exits 1, which means
    # findings; the CLI says the pipe closed instead (128 + SIGPIPE), with nothing on stderr
    f = write_csv(tmp_path / "metrics.csv", healthy_rows())
    p = subprocess.Popen([sys.executable, "-m", "trainmedic.cli.main", "diagnose", str(f),
                          "-v"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, "COLUMNS": "100"})
    assert p.stdout is not None and p.stderr is not None
    p.stdout.read(1)
    p.stdout.close()
    rc = p.wait(timeout=120)
    err = p.stderr.read().decode()
    assert rc in (0, 141), err
    assert "Traceback" not in err and "Exception ignored" not in err


def test_the_command_logs_the_library_s_warnings_as_one_prefixed_line(
        tmp_path, capsys, monkeypatch) -> None:
    """The library only calls logging.getLogger(__name__); the command sets a prefixed
    handler on the ``trainmedic`` loggers (WARNING, or TRAINMEDIC_LOG_LEVEL)."""
    import logging

    monkeypatch.setenv("TRAINMEDIC_LOG_LEVEL", "info")
    f = tmp_path / "m.csv"
    f.write_text("step,loss\n" + "".join(f"{i},{2 - i / 100}\n" for i in range(20)))
    assert main(["diagnose", str(f)]) == 0
    log = logging.getLogger("trainmedic")
    assert log.level == logging.INFO
    logging.getLogger("trainmedic.run.textlog").info("hello from the library")
    assert "trainmedic: INFO: hello from the library" in capsys.readouterr().err
    monkeypatch.setenv("TRAINMEDIC_LOG_LEVEL", "nonsense")
    assert main(["diagnose", str(f)]) == 0
    assert log.level == logging.WARNING
    assert sum(getattr(h, "_trainmedic_cli", False) for h in log.handlers) == 1


@pytest.mark.parametrize("name", ["nccl_timeout_ofa_271.log", "cuda_device_assert_semseg_29.log",
                                  "gloo_raise.log"])
def test_a_crash_log_is_refused_with_a_pointer_to_explain(
        name: str, capsys: pytest.CaptureFixture[str]) -> None:
    log = Path(__file__).resolve().parents[1] / "data" / "explain" / name
    rc = main(["diagnose", str(log)])
    err = capsys.readouterr().err
    assert rc == 2 and f"run `trainmedic explain {log}`" in err and "crash log" in err


def test_a_log_that_is_no_crash_gets_no_explain_pointer(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "notes.txt"
    log.write_text("the meeting moved to thursday\nbring the slides\n")
    rc = main(["diagnose", str(log)])
    err = capsys.readouterr().err
    assert rc == 2 and "explain" not in err
