"""Property test: whatever mix of numbers, empty cells, non-finite spellings and junk a CSV
holds, and wherever the block boundaries fall, the fast numpy path, the careful line-by-line
path and the two-process path read exactly what a plain csv+float reading says is there."""

from __future__ import annotations

import csv
import io
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trainmedic.run.csvlog as csvlog

CELL = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
    st.integers(-10**6, 10**6).map(str),
    st.sampled_from(["", "", "", "nan", "NaN", "inf", "-Infinity", "oops", " 1.5 ", "1e-7",
                     "None", "1.#INF"]),
)


def reference(text: str, ncols: int) -> dict[str, tuple[list[int], list[float]]]:
    rows = list(csv.reader(io.StringIO(text)))[1:]
    out: dict[str, tuple[list[int], list[float]]] = {f"c{j}": ([], []) for j in range(ncols)}
    for r in rows:
        step = int(r[0])
        for j in range(ncols):
            c = r[j + 1].strip()
            try:
                v = float(c)
            except ValueError:
                if c != "1.#INF":  # MSVC's spelling of inf, which the importer knows
                    continue
                v = math.inf
            out[f"c{j}"][0].append(step)
            out[f"c{j}"][1].append(v)
    return {k: v for k, v in out.items() if v[0]}


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.lists(CELL, min_size=3, max_size=3), min_size=1, max_size=60),
       block=st.integers(16, 300), crlf=st.booleans())
def test_all_paths_agree_with_reference(tmp_path_factory, rows, block, crlf):
    nl = "\r\n" if crlf else "\n"
    text = "step,c0,c1,c2" + nl + "".join(
        f"{i},{','.join(r)}{nl}" for i, r in enumerate(rows))
    p = tmp_path_factory.mktemp("prop") / "m.csv"
    p.write_bytes(text.encode())
    want = reference(text.replace("\r\n", "\n"), 3)
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(csvlog, "BLOCK_BYTES", block)
        variants = {"fast": None, "careful": lambda self, b: None}
        for name, patch in variants.items():
            if patch is not None:
                mp.setattr(csvlog._FastPath, "parse", patch)
            for two in (False, True):
                mp.setattr(csvlog, "PARALLEL_MIN_BYTES", 1 if two else 1 << 40)
                try:
                    got = csvlog.read_csv(p)
                except csvlog.UnrecognizedInputError as exc:
                    # only when every column is text in its first lines (or there are none)
                    assert "no column of numbers" in str(exc), (name, two, str(exc))
                    continue
                # a column whose first cells are all text is a text column, left out on purpose
                cols = {k: (s.steps.tolist(), s.values.tolist()) for k, s in got.columns.items()}
                for k, (steps, vals) in cols.items():
                    assert steps == want[k][0], (name, two, k)
                    assert all(same(a, b) for a, b in zip(vals, want[k][1], strict=True))
                skipped = set(want) - set(cols)
                text_note = " ".join(n.detail for n in got.notes if n.kind == "text_column")
                assert all(k in text_note for k in skipped), (name, two, skipped)
    finally:
        mp.undo()
