"""The TensorBoard export, read back by TensorBoard's own EventAccumulator and by trainmedic's
importer: scalars (NaN/inf kept, float32), one run folder per rank, findings as text."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
from report_samples import sample_diagnosis, sample_run

from trainmedic.diagnose.finding import Diagnosis
from trainmedic.errors import InputError, TrainmedicError
from trainmedic.run.loader import load_paths
from trainmedic.run.series import Run

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)
from tensorboard.util import tensor_util  # noqa: E402

from trainmedic.report.tb_export import (  # noqa: E402
    FINDINGS_TAG,
    OVERVIEW_TAG,
    require_tensorboard,
    write_tensorboard,
)


def accumulate(folder: Path) -> EventAccumulator:
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def texts(acc: EventAccumulator, tag: str) -> list[tuple[int, str]]:
    return [(e.step, tensor_util.make_ndarray(e.tensor_proto).item().decode("utf-8"))
            for e in acc.Tensors(tag)]


def f32(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float32).astype(np.float64)


def assert_same_as_float32(a: Run, b: Run) -> None:
    """``b`` holds every series of ``a`` (and nothing else), values equal at float32."""
    want = {k: s for k, s in a.series.items() if len(s)}
    assert sorted(want, key=str) == sorted(b.series, key=str)
    for key, s in want.items():
        np.testing.assert_array_equal(b.series[key].steps, s.steps, err_msg=str(key))
        np.testing.assert_array_equal(b.series[key].values, f32(s.values), err_msg=str(key))


def test_scalars_read_back_by_tensorboard_and_by_trainmedic(tmp_path: Path, run: Run,
                                                             diagnosis: Diagnosis) -> None:
    out = tmp_path / "tb"
    files = write_tensorboard(run, diagnosis, out)
    assert len(files) == 1 and files[0].path.parent == out and files[0].rank is None
    assert files[0].rows == 2000 and files[0].metrics == len(run.metrics())
    acc = accumulate(out)
    assert set(acc.Tags()["scalars"]) == set(run.metrics())
    for metric in run.metrics():
        s = run.get(metric)
        assert s is not None
        events = acc.Scalars(metric)
        np.testing.assert_array_equal([e.step for e in events], s.steps, err_msg=metric)
        np.testing.assert_array_equal([e.value for e in events], f32(s.values), err_msg=metric)
    # The sample's NaN losses are stored as NaN, not dropped.
    assert np.isnan([e.value for e in acc.Scalars("loss")][1500:1505]).all()
    assert_same_as_float32(run, load_paths([str(out)]))


# TensorBoard's vendored bleach warns about html5lib's sanitizer when rendering the text.
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_findings_are_markdown_texts_at_their_onset_step(tmp_path: Path, run: Run,
                                                        diagnosis: Diagnosis) -> None:
    out = tmp_path / "tb"
    (f,) = write_tensorboard(run, diagnosis, out)
    assert f.findings == 3 and f.overview
    acc = accumulate(out)
    found = texts(acc, FINDINGS_TAG)
    # Written among the scalars by step: TensorBoard's purge of "out of order" steps kept all.
    assert [step for step, _ in found] == [0, 800, 1500]
    nan_text = dict(found)[1500]
    for expected in ("ERROR", "nonfinite_loss", "steps 1,500→1,504",
                     "loss became NaN at step 1500 (5 steps)", "Top cause",
                     "learning rate too high (medium)", "log lr per step to check",
                     "resume from the last checkpoint before step 1500",
                     "about 2x slower steps while on", "passes step 1500 with a finite loss"):
        assert expected in nan_text, expected
    assert "WARNING" in dict(found)[800] and "a bad batch (high)" in dict(found)[800]
    (overview,) = texts(acc, OVERVIEW_TAG)
    assert overview[0] == 1999  # the last step
    for symptom in ("loss_spike", "nonfinite_loss", "memory_growth", "loss_scale_collapse"):
        assert symptom in overview[1]
    # TensorBoard's text dashboard renders them as markdown: a heading, a table.
    from tensorboard.plugins.text.text_plugin import text_array_to_html

    html = text_array_to_html(np.array(nan_text.encode()), True)
    assert "<h3>ERROR · nonfinite_loss</h3>" in html and "<strong>Top cause:</strong>" in html
    assert "<table>" in text_array_to_html(np.array(overview[1].encode()), True)


def test_findings_of_one_step_share_one_text(tmp_path: Path, run: Run,
                                             diagnosis: Diagnosis) -> None:
    twin = dataclasses.replace(diagnosis.findings[2], symptom="divergence")
    diag = dataclasses.replace(diagnosis, findings=[*diagnosis.findings, twin])
    out = tmp_path / "tb"
    (f,) = write_tensorboard(run, diag, out)
    assert f.findings == 4
    at_1500 = [body for step, body in texts(accumulate(out), FINDINGS_TAG) if step == 1500]
    assert len(at_1500) == 1
    assert "nonfinite_loss" in at_1500[0] and "divergence" in at_1500[0]


def test_per_rank_runs_get_one_folder_each(tmp_path: Path) -> None:
    run = sample_run(600, nan_at=None, spike_at=300, ranks=(0, 1))
    base = sample_diagnosis()
    on_rank1 = dataclasses.replace(base.findings[1], rank=1, onset_step=300, end_step=301)
    diag = dataclasses.replace(base, findings=[base.findings[0], on_rank1])
    out = tmp_path / "tb"
    files = write_tensorboard(run, diag, out)
    assert sorted((f.path.parent.name, f.rank) for f in files) == [
        ("rank0", 0), ("rank1", 1), ("tb", None)]
    for rank in (0, 1):
        acc = accumulate(out / f"rank{rank}")
        s = run.get("loss", rank)
        assert s is not None
        np.testing.assert_array_equal([e.value for e in acc.Scalars("loss")], f32(s.values))
        assert "val_loss" not in acc.Tags()["scalars"]  # logged without a rank: in DIR
    rank1_texts = texts(accumulate(out / "rank1"), FINDINGS_TAG)
    assert [step for step, _ in rank1_texts] == [300]
    assert "rank 1" in rank1_texts[0][1]
    assert FINDINGS_TAG not in accumulate(out / "rank0").Tags()["tensors"]
    root = accumulate(out)
    assert [step for step, _ in texts(root, FINDINGS_TAG)] == [0]  # the rank-less finding
    assert texts(root, OVERVIEW_TAG)
    assert_same_as_float32(run, load_paths([str(out)]))


def test_resumed_series_keep_log_order_for_trainmedic(tmp_path: Path) -> None:
    run = Run(source="x")
    run.add("loss", [1, 2, 3, 2, 3, 4, 4], [2.0, 1.9, 1.8, 1.95, 1.85, 1.7, 1.7])
    run.add("lr", [1, 2, 3, 4], [0.1, 0.1, 0.1, 0.1])
    out = tmp_path / "tb"
    write_tensorboard(run, None, out)
    assert_same_as_float32(run, load_paths([str(out)]))


def test_layer_metrics_keep_their_tags_and_nonfinite_values(tmp_path: Path) -> None:
    from trainmedic.run.store import RunStore

    with RunStore(tmp_path / "run") as store:
        for step in range(12):
            store.log(step, {"loss": 1.0 / (step + 1),
                             "layer/blocks.0.mlp/grad_norm": float("inf") if step == 4 else 0.1,
                             "layer/head/act_std": float("nan") if step == 6 else 1.0})
    run = load_paths([str(tmp_path / "run")])
    out = tmp_path / "tb"
    write_tensorboard(run, None, out)
    acc = accumulate(out)
    assert {"layer/blocks.0.mlp/grad_norm", "layer/head/act_std"} <= set(acc.Tags()["scalars"])
    assert acc.Scalars("layer/blocks.0.mlp/grad_norm")[4].value == float("inf")
    assert np.isnan(acc.Scalars("layer/head/act_std")[6].value)
    assert_same_as_float32(run, load_paths([str(out)]))


def test_values_beyond_float32_are_reported(tmp_path: Path) -> None:
    run = Run(source="x")
    run.add("loss", [0, 1, 2], [1.0, 1e39, -1e300])
    (f,) = write_tensorboard(run, None, tmp_path / "tb")
    assert "2 finite values beyond float32's range" in f.describe()
    back = load_paths([str(tmp_path / "tb")]).get("loss")
    assert back is not None and back.values.tolist() == [1.0, float("inf"), float("-inf")]


def test_refuses_existing_event_files_and_force_replaces_only_an_export(
        tmp_path: Path, run: Run, diagnosis: Diagnosis) -> None:
    out = tmp_path / "tb"
    (first,) = write_tensorboard(run, diagnosis, out)
    other = out / "someone_else" / "events.out.tfevents.1.host"
    other.parent.mkdir()
    other.write_bytes(b"")
    with pytest.raises(InputError, match="already holds TensorBoard event files.*--force"):
        write_tensorboard(run, diagnosis, out)
    (second,) = write_tensorboard(run, diagnosis, out, force=True)
    assert not first.path.exists() and second.path.exists()
    assert other.exists()  # not in a folder an export writes
    assert [p.name for p in out.iterdir() if "tfevents" in p.name] == [second.path.name]
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="expects a folder"):
        write_tensorboard(run, diagnosis, tmp_path / "file")


def test_a_crash_mid_write_leaves_no_event_file(tmp_path: Path, run: Run,
                                                diagnosis: Diagnosis) -> None:
    def crash(done: int, total: int) -> None:
        raise KeyboardInterrupt

    out = tmp_path / "tb"
    with pytest.raises(KeyboardInterrupt):
        write_tensorboard(run, diagnosis, out, progress=crash)
    assert list(out.rglob("*")) == []  # nor the staging folder


def test_missing_tensorboard_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard.summary.writer.event_file_writer", None)
    with pytest.raises(TrainmedicError, match=r"pip install 'trainmedic\[tensorboard\]'"):
        require_tensorboard()
