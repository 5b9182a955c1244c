"""``trainmedic triage``: flags, JSON, the interactive questions on a terminal only, and bad
usage as a one-line UsageError (exit 2 through the CLI's main)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import trainmedic.cli.triage as triage_cli
from trainmedic.cli.triage import triage
from trainmedic.diagnose.rules import CAUSES
from trainmedic.errors import UsageError

TABLE = {r.cause.replace("{k}", "k") for rs in CAUSES.values() for r in rs}


def test_flags_give_a_text_report_marked_not_checked() -> None:
    r = CliRunner().invoke(triage, ["--loss", "nan", "--since", "start", "--precision", "fp16"])
    assert r.exit_code == 0, r.output
    assert "not checked against data" in r.output and "to check: log loss_scale" in r.output
    first = next(line for line in r.output.splitlines() if line.startswith("  1. ["))
    assert "fp16 overflow" in first and "estimated from answers" in first


def test_json_is_the_triage_schema_with_documented_causes() -> None:
    r = CliRunner().invoke(triage, ["--loss", "spikes", "--grad-clip", "0", "--lr", "1e-2",
                                    "--since", "after-800-steps", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema"] == "trainmedic.triage/1" and doc["basis"] == "not_checked"
    assert doc["causes"] and all(c["cause"] in TABLE for c in doc["causes"])
    assert all(c["checked_against_data"] is False for c in doc["causes"])
    assert doc["answers"]["grad_clip"] == 0.0


def test_without_flags_and_not_on_a_terminal_nothing_is_asked() -> None:
    r = CliRunner().invoke(triage, [], input="nan\n")
    assert isinstance(r.exception, UsageError)  # main() turns it into exit 2, one line
    assert "not a terminal" in str(r.exception)


def test_on_a_terminal_without_flags_the_questions_are_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triage_cli, "_interactive", lambda: True)
    # loss, since, optimizer, lr, batch, precision, clip, warmup, changed, helps, steps, memory
    answers = "plateau\nstart\nadamw\n1e-7\n\nskip\n\n\nskip\nskip\nskip\nskip\n"
    r = CliRunner().invoke(triage, ["--json"], input=answers)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output[r.output.index("{"):])
    assert doc["answers"] == {"loss": "plateau", "since": "start", "optimizer": "adamw",
                              "lr": 1e-7}
    assert doc["causes"][0]["cause"] == "learning rate far too low"


@pytest.mark.parametrize("args", [["--loss", "boom"], ["--since", "yesterday", "--loss", "nan"],
                                  ["--lr", "-1", "--loss", "nan"]])
def test_bad_answers_are_usage_errors(args: list[str]) -> None:
    r = CliRunner().invoke(triage, args)
    assert r.exit_code == 2 or isinstance(r.exception, UsageError), r.output


def test_help_has_examples() -> None:
    r = CliRunner().invoke(triage, ["--help"])
    assert r.exit_code == 0 and "Examples:" in r.output and "trainmedic triage --loss" in r.output
