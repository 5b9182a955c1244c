"""CSV importer: formats seen in the wild and every bad-input case of issue 2."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

import trainmedic.run.csvlog as csvlog
from trainmedic.errors import TrainmedicError, UnreadableInputError, UnrecognizedInputError
from trainmedic.run import load_run
from trainmedic.run.csvlog import read_csv

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"


def write(tmp_path: Path, text: str | bytes, name: str = "m.csv") -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


def kinds(table) -> list[str]:
    return [n.kind for n in table.notes]


def test_plain_csv(tmp_path):
    t = read_csv(write(tmp_path, "step,loss,lr\n1,2.5,0.1\n2,2.4,0.1\n3,2.3,0.05\n"))
    assert t.step_column == "step"
    assert t.columns["loss"].steps.tolist() == [1, 2, 3]
    assert t.columns["loss"].values.tolist() == [2.5, 2.4, 2.3]
    assert t.columns["lr"].values.tolist() == [0.1, 0.1, 0.05]
    assert "step" not in t.columns
    assert t.notes == []


def test_lightning_sparse_crlf():
    t = read_csv(LOGS / "lightning_sparse.csv")
    assert t.meta["line_endings"] == "crlf"
    loss = t.columns["train_loss_step"]
    assert loss.steps.tolist() == [9, 19, 34, 44]
    assert loss.values.tolist() == [2.5, 2.25, 2.0, 1.9]
    assert t.columns["val_loss"].steps.tolist() == [24, 49]
    assert t.columns["train_loss_epoch"].values.tolist() == [2.35, 1.95]
    assert t.columns["lr-AdamW"].steps.tolist() == [0, 25]
    assert t.columns["epoch"].values.tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]


def test_yolo_space_padded_header_and_values():
    t = read_csv(LOGS / "yolo_padded.csv")
    assert t.step_column == "epoch"
    assert "train/box_loss" in t.columns
    assert t.columns["train/box_loss"].steps.tolist() == [0, 1, 2]
    assert t.columns["lr/pg0"].values.tolist() == [0.07, 0.069, 0.068]
    assert "step_is_epoch" in kinds(t)


def test_bom_and_tab_delimiter():
    t = read_csv(LOGS / "bom_tab.tsv")
    assert t.step_column == "step"
    assert set(t.columns) == {"loss", "grad_norm"}


def test_nan_inf_strings_are_non_finite_values():
    t = read_csv(LOGS / "nan_inf.csv")
    v = t.columns["loss"].values
    assert v[0] == 2.0
    assert np.isnan(v[1]) and np.isnan(v[4])
    assert v[2] == np.inf and v[3] == -np.inf and v[5] == np.inf
    assert len(t.columns["loss"]) == 6  # non-finite values are kept, not dropped
    assert t.columns["my_custom_metric"].values.tolist() == [5, 6, 7, 8, 9, 10]  # unknown: raw


def test_missing_cell_is_not_nan(tmp_path):
    t = read_csv(write(tmp_path, "step,loss,val_loss\n1,2.0,\n2,nan,3.0\n3,,\n"))
    assert t.columns["loss"].steps.tolist() == [1, 2]
    assert np.isnan(t.columns["loss"].values[1])
    assert t.columns["val_loss"].steps.tolist() == [2]


def test_non_numeric_cell_is_missing_with_line_number_and_truncated_last_line():
    t = read_csv(LOGS / "truncated_bad.csv")
    loss = t.columns["loss"]
    assert loss.steps.tolist() == [1, 2, 4, 5]  # 'oops' on line 4 is missing, rest kept
    assert t.columns["lr"].steps.tolist() == [1, 2, 3, 4, 5]
    notes = {n.kind: n for n in t.notes}
    assert notes["non_numeric_cell"].line == 4
    assert "oops" in notes["non_numeric_cell"].detail
    assert notes["truncated_last_line"].line == 7


def test_last_line_without_newline_but_complete_is_kept(tmp_path):
    t = read_csv(write(tmp_path, "step,loss\n1,2.0\n2,1.5"))
    assert t.columns["loss"].values.tolist() == [2.0, 1.5]
    assert "truncated_last_line" not in kinds(t)


def test_duplicated_and_decreasing_steps_keep_log_order():
    t = read_csv(LOGS / "resume.csv")
    s = t.columns["loss"]
    assert s.steps.tolist() == [1, 2, 3, 2, 3, 4, 4]
    assert not s.is_monotonic
    assert s.clean().steps.tolist() == [1, 2, 3, 4]


def test_empty_file(tmp_path):
    with pytest.raises(UnrecognizedInputError, match="is empty"):
        read_csv(write(tmp_path, ""))


def test_header_only(tmp_path):
    with pytest.raises(UnrecognizedInputError, match="no data rows"):
        read_csv(write(tmp_path, "step,loss\n"))


def test_headerless_numbers(tmp_path):
    with pytest.raises(UnrecognizedInputError, match="header"):
        read_csv(write(tmp_path, "1,2\n3,4\n"))


def test_no_step_column_uses_row_index(tmp_path):
    t = read_csv(write(tmp_path, "loss,lr\n2.0,0.1\n1.9,0.1\n"))
    assert t.columns["loss"].steps.tolist() == [0, 1]
    assert "step_from_row_index" in kinds(t)


def test_rows_without_step_are_dropped_with_note(tmp_path):
    t = read_csv(write(tmp_path, "step,loss\n1,2.0\n,1.9\n3,1.8\n"))
    assert t.columns["loss"].steps.tolist() == [1, 3]
    assert "missing_step" in kinds(t)


def test_quoted_fields_and_ragged_rows(tmp_path):
    t = read_csv(write(tmp_path, 'step,"loss",note\n1,"2.0",x\n2,1.9\n3,1.8,y,extra\n'))
    assert t.columns["loss"].values.tolist() == [2.0, 1.9, 1.8]
    assert "ragged_row" in kinds(t)
    assert "note" not in t.columns or len(t.columns["note"]) == 0


def test_repeated_header_line_is_skipped(tmp_path):
    t = read_csv(write(tmp_path, "step,loss\n1,2.0\nstep,loss\n2,1.9\n"))
    assert t.columns["loss"].steps.tolist() == [1, 2]
    assert "repeated_header" in kinds(t)


def test_bad_line_costs_one_block_not_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(csvlog, "BLOCK_BYTES", 256)
    lines = ["step,loss,val_loss"]
    for i in range(2000):
        val = "" if i % 10 else f"{i * 0.5}"
        loss = "garbage" if i == 1234 else f"{1.0 / (i + 1):.6f}"
        lines.append(f"{i},{loss},{val}")
    t = read_csv(write(tmp_path, "\r\n".join(lines) + "\r\n"))
    loss = t.columns["loss"]
    assert len(loss) == 1999 and 1234 not in loss.steps.tolist()
    assert loss.values[0] == 1.0 and loss.steps[-1] == 1999
    assert t.columns["val_loss"].steps.tolist() == list(range(0, 2000, 10))
    note = next(n for n in t.notes if n.kind == "non_numeric_cell")
    assert note.line == 1236  # header is line 1, step 0 is line 2


def test_sentinel_text_in_file_does_not_confuse_missing(tmp_path):
    t = read_csv(write(tmp_path, f"step,a,b\n1,{csvlog._SENTINEL_TEXT.decode()},\n2,1,2\n"))
    assert t.columns["a"].values[0] == csvlog._SENTINEL
    assert t.columns["b"].steps.tolist() == [2]


def test_fractional_step_column_falls_back_to_row_index(tmp_path):
    t = read_csv(write(tmp_path, "epoch,loss\n0.5,2\n1.0,1.5\n1.5,1.2\n"))
    assert t.columns["loss"].steps.tolist() == [0, 1, 2]
    assert "epoch" in t.columns


def test_block_boundaries_do_not_split_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(csvlog, "BLOCK_BYTES", 64)
    body = "".join(f"{i},{i * 0.25},{i * 2}\n" for i in range(500))
    t = read_csv(write(tmp_path, "step,a,b\n" + body))
    assert t.columns["a"].values.tolist() == [i * 0.25 for i in range(500)]
    assert t.columns["b"].steps.tolist() == list(range(500))


def test_unreadable_file(tmp_path, monkeypatch):
    p = write(tmp_path, "step,loss\n1,2\n")

    def deny(self, *a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "open", deny)
    with pytest.raises(UnreadableInputError, match="Permission denied") as e:
        read_csv(p)
    assert isinstance(e.value, TrainmedicError)
    assert str(p) in str(e.value)


def _big_log(n: int, crlf: bool = False) -> tuple[str, dict[int, str]]:
    bad = {150: "oops", 1700: "bad!"}  # one in each half
    nl = "\r\n" if crlf else "\n"
    lines = ["step,loss,val_loss"]
    for i in range(n):
        loss = bad.get(i, f"{1.0 / (i + 1):.6f}")
        lines.append(f"{i},{loss},{'' if i % 7 else i * 0.5}")
    return nl.join(lines) + nl + "2000,0.", bad


@pytest.mark.parametrize("crlf", [False, True])
def test_two_process_read_matches_serial(tmp_path, monkeypatch, crlf):
    text, bad = _big_log(2000, crlf)
    p = write(tmp_path, text)
    monkeypatch.setattr(csvlog, "BLOCK_BYTES", 512)
    serial = read_csv(p)
    monkeypatch.setattr(csvlog, "PARALLEL_MIN_BYTES", 1024)
    # No fork once pyarrow (and its thread pool) is loaded, as another test may have done.
    monkeypatch.delitem(sys.modules, "pyarrow", raising=False)
    forked = []
    real = csvlog._read_halves
    monkeypatch.setattr(csvlog, "_read_halves", lambda *a, **k: forked.append(1) or real(*a, **k))
    par = read_csv(p)
    assert forked, "the two-process path was not taken"
    for name in ("loss", "val_loss"):
        assert par.columns[name].steps.tolist() == serial.columns[name].steps.tolist()
        assert par.columns[name].values.tolist() == serial.columns[name].values.tolist()
    assert len(par.columns["loss"]) == 1998
    assert [(n.kind, n.line, n.detail) for n in par.notes] == \
        [(n.kind, n.line, n.detail) for n in serial.notes]
    cell = next(n for n in par.notes if n.kind == "non_numeric_cell")
    assert cell.line == 152 and "line 1702" in cell.detail
    assert next(n for n in par.notes if n.kind == "truncated_last_line").line == 2002
    assert par.meta.get("line_endings") == ("crlf" if crlf else None)


def test_two_process_read_recovers_when_child_fails(tmp_path, monkeypatch):
    text, _ = _big_log(2000)
    p = write(tmp_path, text)
    monkeypatch.setattr(csvlog, "BLOCK_BYTES", 512)
    monkeypatch.setattr(csvlog, "PARALLEL_MIN_BYTES", 1024)
    monkeypatch.delitem(sys.modules, "pyarrow", raising=False)
    parent = os.getpid()
    real_stream = csvlog._Body.stream

    def failing_in_child(self, f, pending, stop):
        if os.getpid() != parent:
            raise RuntimeError("child failed")
        return real_stream(self, f, pending, stop)

    monkeypatch.setattr(csvlog._Body, "stream", failing_in_child)
    t = read_csv(p)
    assert t.columns["loss"].steps.tolist()[-1] == 1999
    assert len(t.columns["loss"]) == 1998
    assert next(n for n in t.notes if n.kind == "non_numeric_cell").line == 152


def test_empty_cell_kinds_that_appear_late(tmp_path, monkeypatch):
    # The first blocks need no rewrite; later ones have empty first, middle and last cells.
    monkeypatch.setattr(csvlog, "BLOCK_BYTES", 64)
    rows = [f"{i * 1.5},{i},{i * 2}" for i in range(200)]
    rows += [f",{i},{i * 2}" for i in range(200, 300)]
    rows += [f"{i * 1.5},{i}," for i in range(300, 400)]
    rows += [f",{i}," for i in range(400, 410)]
    t = read_csv(write(tmp_path, "a,step,b\n" + "\n".join(rows) + "\n"))
    assert t.columns["a"].steps.tolist() == list(range(200)) + list(range(300, 400))
    assert t.columns["b"].steps.tolist() == list(range(300))
    assert t.columns["a"].values[-1] == 399 * 1.5
    assert not [n for n in t.notes if n.kind != "non_numeric_cell"]


def test_text_columns_are_left_out_and_noted(tmp_path, monkeypatch):
    monkeypatch.setattr(csvlog, "BLOCK_BYTES", 128)
    body = "".join(f"2024-01-01T00:00:{i % 60:02d},{i},{1.0 / (i + 1)},run-a\n"
                   for i in range(300))
    t = read_csv(write(tmp_path, "wall_time,step,loss,name\n" + body))
    assert set(t.columns) == {"loss"}
    assert len(t.columns["loss"]) == 300
    kinds_ = kinds(t)
    assert kinds_ == ["text_column"]
    assert "wall_time" in t.notes[0].detail and "name" in t.notes[0].detail


def test_only_text(tmp_path):
    with pytest.raises(UnrecognizedInputError, match="no column of numbers"):
        read_csv(write(tmp_path, "a,b\nx,y\nz,w\n"))


def test_csv_per_epoch_step_counter(tmp_path):
    body = "".join(f"{ep},{it},{1.0 / (ep + 1)}\n" for ep in (0, 1, 2) for it in (0, 1, 2, 3))
    t = read_csv(write(tmp_path, "epoch,iter,loss\n" + body))
    assert t.columns["loss"].steps.tolist() == list(range(12))


def test_msvc_nonfinite_spellings(tmp_path):
    t = read_csv(write(tmp_path, "step,loss\n1,1.#INF\n2,-1.#IND\n3,-nan(ind)\n4,0.5\n"))
    v = t.columns["loss"].values
    assert v[0] == np.inf and np.isnan(v[1]) and np.isnan(v[2]) and v[3] == 0.5
    assert not [n for n in t.notes if n.kind == "non_numeric_cell"]


def test_none_cells_are_missing_not_text(tmp_path):
    rows = "".join(f"{i},{2.0 / (i + 1)},None\n" for i in range(60))
    rows += "60,0.03,1.25\n61,0.02,NA\n"
    t = read_csv(write(tmp_path, "step,loss,val_loss\n" + rows))
    assert t.columns["val_loss"].steps.tolist() == [60]
    assert t.notes == []


def test_bare_carriage_return_is_a_bad_row_not_a_crash(tmp_path):
    # csv refuses a carriage return inside an unquoted field; the line is read as junk, noted.
    t = read_csv(write(tmp_path, "step,loss\n1,2.0\r2,1.5\n3,1.0\n"))
    assert t.columns["loss"].steps.tolist() == [3]
    assert {"non_numeric_cell", "ragged_row"} <= set(kinds(t))
    assert all(n.line == 2 for n in t.notes)


def test_a_long_form_export_is_pivoted_into_one_series_per_metric(tmp_path):
    # Comet's metrics.csv: one row per value; read as columns, the step repeated per metric
    # and faked a resumed run
    rows = ["metricName,metricValue,timestamp,step,epoch,runContext,offset"]
    for i, s in enumerate(range(5, 105, 5)):
        rows += [f"train_logloss,{0.8 - s / 200:.4f},{1764666000008 + s},{s},0,train,{3 * i}",
                 f"train_lr,0.005,{1764666000008 + s},{s},0,train,{3 * i + 1}"]
        if s % 50 == 0:
            rows.append(f"validate_logloss,{0.7 - s / 250:.4f},{1764666000009 + s},{s},0,"
                        f"validate,{3 * i + 2}")
    p = tmp_path / "metrics.csv"
    p.write_text("\n".join(rows) + "\n")
    run = load_run(str(p))
    assert run.get("loss").steps.tolist() == list(range(5, 105, 5))
    assert run.get("val_loss").steps.tolist() == [50, 100]
    assert run.get("lr") is not None and run.get("loss").is_monotonic
