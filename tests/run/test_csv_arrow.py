"""The pyarrow reader of large CSV bodies (``run/csv_arrow.py``) reads exactly what the numpy
reader reads, notes included, or hands the file back to it."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trainmedic.run.csvlog as csvlog
from trainmedic.run.csvlog import read_csv

pytest.importorskip("pyarrow")
import trainmedic.run.csv_arrow as csv_arrow  # noqa: E402


def write(tmp_path: Path, text: str | bytes, name: str = "m.csv") -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


def snapshot(t) -> tuple:
    cols = {k: (s.steps.tolist(), [("nan" if math.isnan(v) else v) for v in s.values.tolist()])
            for k, s in t.columns.items()}
    return (cols, t.step_column, dict(t.meta), [(n.kind, n.line, n.detail) for n in t.notes])


def both(path: Path, monkeypatch) -> tuple[tuple, tuple, list[bool]]:
    """(numpy reading, arrow-allowed reading, [whether pyarrow kept the file])."""
    taken: list[bool] = []
    real = csv_arrow.read_body

    def spy(*a, **k):
        got = real(*a, **k)
        taken.append(got is not None)
        return got

    with monkeypatch.context() as mp:
        mp.setenv("TRAINMEDIC_CSV_NO_ARROW", "1")
        ref = snapshot(read_csv(path))
    with monkeypatch.context() as mp:
        mp.delenv("TRAINMEDIC_CSV_NO_ARROW", raising=False)
        mp.setattr(csvlog, "ARROW_MIN_BYTES", 0)
        mp.setattr(csv_arrow, "read_body", spy)
        got = snapshot(read_csv(path))
    return ref, got, taken


def test_clean_sparse_log_is_read_by_arrow(tmp_path, monkeypatch):
    rows = "".join(f"{i},{2.0 / (i + 1)},{'' if i % 10 else 1.5},nan,{'inf' if i == 7 else i}\n"
                   for i in range(200))
    p = write(tmp_path, "step,loss,val_loss,weird,x\n" + rows)
    ref, got, taken = both(p, monkeypatch)
    assert taken == [True]
    assert got == ref
    assert got[0]["val_loss"][0] == list(range(0, 200, 10))
    assert got[0]["weird"][1][0] == "nan"  # a literal nan is a value, not a missing cell


@pytest.mark.parametrize("crlf", [False, True])
def test_truncated_last_line_stays_on_the_arrow_path(tmp_path, monkeypatch, crlf):
    nl = "\r\n" if crlf else "\n"
    p = write(tmp_path, "step,loss,lr" + nl + nl.join(f"{i},{i * 0.5},0.1" for i in range(50))
              + nl + "50,0.")
    ref, got, taken = both(p, monkeypatch)
    assert taken == [True]
    assert got == ref
    assert ("truncated_last_line", 52) in [(k, line) for k, line, _ in got[3]]
    assert got[2].get("line_endings") == ("crlf" if crlf else None)


@pytest.mark.parametrize("body, why", [
    ("1,2.0\n2,oops\n3,1.0\n", "a word in a number column"),
    ("1,2.0\n2\n3,1.0\n", "a short row"),
    ("1,2.0\n2,1.0,7\n3,1.0\n", "a long row"),
    ("1,2.0\nstep,loss\n3,1.0\n", "a repeated header"),
    ("1,2.0\n2,1.#INF\n3,1.0\n", "MSVC's inf"),
    ("1,2.0\n2,nOnE\n3,1.0\n", "an odd spelling of None"),
    ("1,2.0\r2,1.5\n3,1.0\n", "a bare carriage return in the first 64 KiB"),
])
def test_what_arrow_would_read_differently_goes_to_the_numpy_reader(tmp_path, monkeypatch,
                                                                    body, why):
    p = write(tmp_path, "step,loss\n" + body)
    ref, got, taken = both(p, monkeypatch)
    assert taken == [False], why
    assert got == ref, why


def test_quotes_bom_semicolons_and_tokens(tmp_path, monkeypatch):
    rows = "".join(f'{i};"{i * 0.25}";{"None" if i % 3 else i};NA;"";{"N/A" if i % 2 else 2}\n'
                   for i in range(100))
    p = write(tmp_path, b"\xef\xbb\xbf" + ("step;loss;lr;gone;q;z\n" + rows).encode())
    ref, got, taken = both(p, monkeypatch)
    assert taken == [True]
    assert got == ref
    assert "gone" not in got[0] and "q" not in got[0]


CELL = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=64).map(repr),
    st.integers(-10**6, 10**6).map(str),
    st.sampled_from(["", "", "", "nan", "NaN", "inf", "-Infinity", "oops", " 1.5 ", "1e-7",
                     "None", "NULL", "n/a", "-", "1.#INF", '"2.5"', '""', "1_000"]),
)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.lists(CELL, min_size=2, max_size=4), min_size=1, max_size=40),
       crlf=st.booleans(), tail=st.sampled_from(["", "7,0.", "7,1,2", "\n\n"]),
       text_col=st.booleans())
def test_arrow_and_numpy_readers_agree(tmp_path_factory, monkeypatch, rows, crlf, tail,
                                       text_col):
    nl = "\r\n" if crlf else "\n"
    lines = [f"{i},{','.join(r)}" + (f",run-{i}" if text_col else "") for i, r in enumerate(rows)]
    head = "step,a,b,c" + (",name" if text_col else "")
    p = tmp_path_factory.mktemp("arrow") / "m.csv"
    p.write_bytes((head + nl + nl.join(lines) + nl + tail).encode())
    outcomes = []
    for allow in (False, True):
        with monkeypatch.context() as mp:
            mp.setattr(csvlog, "ARROW_MIN_BYTES", 0 if allow else 1 << 60)
            try:
                outcomes.append(snapshot(read_csv(p)))
            except csvlog.UnrecognizedInputError as exc:
                outcomes.append(("error", str(exc)))
    assert outcomes[0] == outcomes[1]


def test_without_pyarrow_the_numpy_reader_reads(tmp_path, monkeypatch):
    p = write(tmp_path, "step,loss\n" + "".join(f"{i},{i * 0.5}\n" for i in range(100)))
    monkeypatch.setattr(csvlog, "ARROW_MIN_BYTES", 0)
    monkeypatch.delitem(sys.modules, "trainmedic.run.csv_arrow", raising=False)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    t = read_csv(p)
    assert t.columns["loss"].values.tolist()[-1] == 49.5


def test_a_small_log_does_not_import_pyarrow(tmp_path):
    p = write(tmp_path, "step,loss\n" + "".join(f"{i},{i * 0.5}\n" for i in range(300)))
    code = ("import sys; from trainmedic.run import load_run; load_run(sys.argv[1]); "
            "print('pyarrow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_no_forked_reader_once_pyarrow_is_loaded(tmp_path, monkeypatch):
    import pyarrow  # noqa: F401

    monkeypatch.setattr(csvlog, "PARALLEL_MIN_BYTES", 1)
    assert not csvlog._can_fork(1 << 30)


@pytest.mark.parametrize("crlf", [False, True])
def test_a_large_log_read_in_many_blocks_matches_the_numpy_reader(tmp_path, monkeypatch, crlf):
    # Big enough for the real threshold, so pyarrow reads it in many blocks on its threads:
    # the chunks of every column, and the nulls across them, must come back in file order.
    nl = "\r\n" if crlf else "\n"
    n = 120_000
    rows = [f"{i},{2.0 / (i + 1):.6g},{'' if i % 997 else 1.0 + i * 1e-6},"
            f"{'nan' if i % 5003 == 0 else 1e-3},{'inf' if i == 77_777 else i * 0.25},"
            f"{'None' if i % 3 else 0.5}" for i in range(n)]
    p = write(tmp_path, "step,loss,val_loss,lr,grad_norm,sparse" + nl + nl.join(rows) + nl
              + f"{n},0.")
    assert p.stat().st_size > csvlog.ARROW_MIN_BYTES
    taken: list[bool] = []
    real = csv_arrow.read_body
    monkeypatch.setattr(csv_arrow, "read_body",
                        lambda *a, **k: taken.append(True) or real(*a, **k))
    got = snapshot(read_csv(p))
    with monkeypatch.context() as mp:
        mp.setenv("TRAINMEDIC_CSV_NO_ARROW", "1")
        ref = snapshot(read_csv(p))
    assert taken == [True]
    assert got == ref
    assert len(got[0]["loss"][0]) == n
    assert got[0]["val_loss"][0] == list(range(0, n, 997))
    assert ("truncated_last_line", n + 2) in [(k, line) for k, line, _ in got[3]]


def test_an_old_pyarrow_leaves_the_file_to_the_numpy_reader(tmp_path, monkeypatch):
    p = write(tmp_path, "step,loss\n" + "".join(f"{i},{i * 0.5}\n" for i in range(100)))
    monkeypatch.setattr(csv_arrow, "USABLE", False)
    ref, got, taken = both(p, monkeypatch)
    assert taken == [False] and got == ref
    assert csv_arrow._version("9.0.0") < (14, 0) <= csv_arrow._version("14.0.2")
    assert csv_arrow._version("26.0.1.dev3") == (26, 0)


def test_a_truncated_last_line_with_a_bare_carriage_return_is_not_a_crash(tmp_path):
    pytest.importorskip("pyarrow")
    from trainmedic.run import load_run

    p = tmp_path / "big.csv"
    rows = "".join(f"{i},{2.0 + (i % 7) / 100:.4f},0.001\n" for i in range(300_000))
    p.write_text("step,loss,lr\n" + rows + "300000,1.5\r2")  # > 4 MiB: pyarrow reads it
    run = load_run(str(p))
    assert len(run.get("loss")) == 300_000
    assert any(n.kind == "truncated_last_line" for n in run.notes)
