"""One error hierarchy: every public error is defined in ``trainmedic.errors`` (the others
re-export it), and the CLI exits 2 only for usage errors."""

from __future__ import annotations

import ast
from pathlib import Path

import click
import pytest

import trainmedic.errors as errors
from trainmedic.cli.main import cli, main

SRC = Path(__file__).resolve().parents[1] / "src" / "trainmedic"


def test_no_public_error_is_defined_outside_errors_py() -> None:
    bad = []
    for path in SRC.rglob("*.py"):
        if path.name == "errors.py" and path.parent == SRC:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                         for b in node.bases}
                # (an outcome raised for control flow, like checkpoint.preemption.Preempted,
                # derives from Exception and is not an error)
                if any(b.endswith("Error") for b in bases):
                    bad.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name}")
    assert not bad, bad


def test_every_error_is_a_trainmedic_error_and_listed() -> None:
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.TrainmedicError), name


def test_the_docstring_draws_every_error() -> None:
    doc = errors.__doc__ or ""
    for name in errors.__all__:
        assert name in doc, name


def test_moved_errors_are_still_importable_where_they_were() -> None:
    from trainmedic.checkpoint.manager import DamagedCheckpointError
    from trainmedic.memory.measurement import FactoryError
    from trainmedic.run.store import StoreLockedError

    assert DamagedCheckpointError is errors.DamagedCheckpointError
    assert FactoryError is errors.FactoryError
    assert StoreLockedError is errors.StoreLockedError


@pytest.mark.parametrize("exc,code", [
    (errors.InputError("x.csv", "not a log"), 2),
    (errors.ConfigError("lr must be > 0"), 2),
    (errors.MissingExtraError("pip install 'trainmedic[hf]'"), 2),
    (errors.NonFiniteError("loss became nan at step 7"), 3),
])
def test_the_cli_exits_2_only_for_usage_errors(exc: Exception, code: int,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    @cli.command("raise-for-test")
    def _boom() -> None:
        raise exc

    try:
        assert main(["raise-for-test"]) == code
    finally:
        cli.commands.pop("raise-for-test", None)
    err = capsys.readouterr().err
    assert err.startswith("trainmedic: error: ") and "bug" not in err
    assert isinstance(_boom, click.Command)
