"""Healthy training logs (no crash) yield nothing, never a guess; binary files are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmedic.errors import InputError
from trainmedic.explain import explain_log

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = [ROOT / "tests" / "data" / "devlogs", ROOT.parent / "shared" / "dev-logs"]
FILES = sorted(p for d in FOLDERS if d.is_dir() for p in d.rglob("*")
               if p.is_file() and p.name != ".gitattributes")


def test_there_are_healthy_logs_to_read() -> None:
    assert len([p for p in FILES if "tests" in p.parts]) >= 10


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_healthy_log_yields_nothing_recognised(path: Path) -> None:
    if b"\x00" in path.read_bytes()[:4096]:
        with pytest.raises(InputError):
            explain_log(path)
        return
    report = explain_log(path)
    assert report.incidents == () and report.root is None, [i.summary for i in report.incidents]
