"""``trainmedic supervise``, ``trainmedic ckpt plan`` and ``trainmedic demo --skip-batches``
through the command line (registered here the way cli/main.py will register them)."""

from __future__ import annotations

import json
import sqlite3
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainmedic.cli.ckpt import ckpt
from trainmedic.cli.ckpt_plan import plan
from trainmedic.cli.main import cli, main
from trainmedic.cli.supervise import supervise


@pytest.fixture(autouse=True)
def _registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    cli.add_command(supervise)
    ckpt.add_command(plan)
    yield
    cli.commands.pop("supervise", None)
    ckpt.commands.pop("plan", None)


def events(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(str(run_dir / "metrics.sqlite"))
    try:
        rows = conn.execute("SELECT step, data FROM events WHERE kind = ? ORDER BY rowid",
                            (kind,)).fetchall()
    finally:
        conn.close()
    return [{"step": s, **json.loads(d)} for s, d in rows]


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["supervise", "--help"]) == 0
    out = capsys.readouterr().out
    assert "Examples:" in out and "{checkpoint}" in out
    assert main(["ckpt", "plan", "--help"]) == 0
    assert "--mtbf-h" in capsys.readouterr().out


_TWICE = textwrap.dedent("""
    import sys
    from pathlib import Path
    state = Path(sys.argv[1])
    n = int(state.read_text()) if state.exists() else 0
    state.write_text(str(n + 1))
    if n < int(sys.argv[2]):
        print("Killed", flush=True)
        sys.exit(137)
    """)


def test_restarts_then_succeeds_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "twice.py"
    script.write_text(_TWICE)
    run_dir = tmp_path / "run"
    rc = main(["supervise", "--run-dir", str(run_dir), "--backoff-s", "0", "--json", "--",
               sys.executable, str(script), str(tmp_path / "n"), "2"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    doc = json.loads(captured.out)
    assert doc["schema"] == "trainmedic.supervise/1" and doc["final"] == "done"
    assert doc["attempts"] == 3 and len(doc["incidents"]) == 2
    assert {i["exit_code"] for i in doc["incidents"]} == {137}
    assert {i["failure_class"] for i in doc["incidents"]} == {"host_oom_kill"}
    # The command's output went to stderr under --json, with the incidents.
    assert "Killed" in captured.err and "incident 1:" in captured.err
    assert len(events(run_dir, "supervise_incident")) == 2


def test_gives_up_exit_1_and_text_summary(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "twice.py"
    script.write_text(_TWICE)
    rc = main(["supervise", "--run-dir", str(tmp_path / "run"), "--max-restarts", "1",
               "--backoff-s", "0", "--", sys.executable, str(script), str(tmp_path / "n"), "5"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "supervise: gave_up after 2 start(s), 2 incident(s)" in err
    assert "lost progress not known" in err  # no heartbeat, no store rows: said, not guessed


def test_bad_usage_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["supervise", "--run-dir", str(tmp_path)]) == 2
    assert main(["supervise", "--run-dir", str(tmp_path), "--max-restarts", "-1", "--",
                 "true"]) == 2


def test_a_command_that_cannot_start_exits_2_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-train.sh"
    assert main(["supervise", "--run-dir", str(tmp_path / "run"), "--", str(missing)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(missing) in err[0] and "not found" in err[0], err
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    assert main(["supervise", "--run-dir", str(tmp_path / "run"), "--", str(script)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(script) in err[0] and "not executable" in err[0], err
    assert "Traceback" not in "".join(err) and "bug" not in "".join(err)


def test_supervised_demo_preempted_by_sigterm_resumes_losing_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The first start is sent SIGTERM once it has done 10 steps: the demo saves at the next
    # step boundary and exits 75; the restart resumes from that very checkpoint.
    out = tmp_path / "run"
    wrapper = textwrap.dedent(f"""
        {sys.executable} -m trainmedic demo "$@" & p=$!
        if [ "$TRAINMEDIC_RESTART" = 0 ]; then
            while ! grep -qE '[1-9][0-9]' "$TRAINMEDIC_HEARTBEAT" 2>/dev/null; do sleep 0.05; done
            kill -TERM $p
        fi
        wait $p
        """)
    rc = main(["supervise", "--run-dir", str(out), "--backoff-s", "0", "--json", "--",
               "sh", "-c", wrapper, "sh", "--out", str(out), "--steps", "40",
               "--checkpoint-every", "10", "--resume", "--json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert rc == 0, captured.err
    (incident,) = doc["incidents"]
    assert incident["outcome"] == "preempted" and incident["exit_code"] == 75
    assert incident["checkpoint_step"] >= 10 and incident["lost_steps"] == 0
    assert incident["lost_source"] == "heartbeat"
    stored = events(out, "supervise_incident")
    assert [e["checkpoint_step"] for e in stored] == [incident["checkpoint_step"]]


def test_ckpt_plan_given(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ckpt", "plan", "--save-cost-s", "600", "--mtbf-h", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["daly_interval_s"]["value"] == pytest.approx(1697.71, abs=0.01)
    assert doc["inputs"]["mtbf_s"] == {"value": 3600.0, "basis": "given"}
    assert main(["ckpt", "plan", "--save-cost-s", "60", "--mtbf-h", "24",
                 "--step-time-s", "0.5"]) == 0
    text = capsys.readouterr().out
    assert "(given)" in text and "cadence (estimated)" in text
    assert "53.0 min of training = about 6360 steps (Daly 2006)" in text
    assert "restart cost not given" in text  # the 0 s it assumes is said, not hidden
    assert main(["ckpt", "plan", "--save-cost-s", "60", "--mtbf-h", "24",
                 "--restart-cost-s", "90", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["restart_cost_s"] == {"value": 90.0, "basis": "given"}
    assert not any("restart cost" in n for n in doc["notes"])


def test_ckpt_plan_without_inputs_names_the_flag(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ckpt", "plan", "--save-cost-s", "60"]) == 2
    err = capsys.readouterr().err
    assert "--mtbf-h" in err and len(err.strip().splitlines()) == 1
    assert main(["ckpt", "plan", "--run", str(tmp_path), "--mtbf-h", "1"]) == 2
    assert "no run store" in capsys.readouterr().err


def test_demo_skip_batches_on_resume_is_recorded(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["demo", "--steps", "12", "--checkpoint-every", "4", "--out", str(out),
                 "--json"]) == 0
    # Roll back to step 8 and step past the batches of steps 8-9.
    import shutil

    shutil.rmtree(out / "checkpoints" / "step-00000012")
    assert main(["demo", "--steps", "12", "--checkpoint-every", "4", "--out", str(out),
                 "--resume", "--skip-batches", "8-9", "--json"]) == 0
    (skipped,) = events(out, "batches_skipped")
    assert (skipped["step"], skipped["first_step"], skipped["last_step"],
            skipped["micro_batches"]) == (8, 8, 9, 2)
    capsys.readouterr()
    assert main(["demo", "--steps", "12", "--out", str(tmp_path / "x"),
                 "--skip-batches", "9-3"]) == 2
    assert "--skip-batches" in capsys.readouterr().err
