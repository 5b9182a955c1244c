"""The 12 real public logs of tests/data/devlogs (see README.md there) load with a sensible
``loss`` (and ``val_loss`` where the log has one) on the right step column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainmedic.run import load_run

DEVLOGS = Path(__file__).resolve().parents[1] / "data" / "devlogs"

# name: (step column, loss points, first loss, has val_loss, last loss step)
EXPECTED = {
    "d2-dup-iter": ("iteration", 16, 2.1679, False, 299),
    "d2-waste": ("iteration", 200, 2.7251, False, 3999),
    "hf-cpt-rouge": ("step", 10, 1.1409, True, 5000),
    "hf-ner-overfit": ("step", 55, 0.8146, True, 27500),
    "hf-qa-chance": ("step", 62, 1.387, True, 3100),
    "hf-spam-dense-eval": ("step", 3, 3.7427, True, 1500),
    "hf-t5-noeval": ("step", 430, 1.9963, False, 215000),
    "pl-pendulum-spike": ("step", 1260, 0.1476, False, 62999),
    "pl-pinn-nan": ("step", 262, 2869211955200.0, False, 261),
    "pl-slm": ("step", 2814, 7.6286, True, 140699),
    "yolo-fire": ("epoch", 25, 1.6878 + 3.3859 + 2.143, True, 24),
    "yolo-weed-earlystop": ("epoch", 102, 1.1267 + 1.17186 + 1.15737, True, 102),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_devlog_loads(name):
    step_col, n, first, has_val, last = EXPECTED[name]
    run = load_run(str(DEVLOGS / name))
    src = run.meta["sources"]
    assert len(src) == 1 and src[0]["step_column"] == step_col
    loss = run.get("loss")
    assert loss is not None and len(loss) == n
    assert loss.values[0] == pytest.approx(first, rel=1e-3)
    assert int(loss.steps[-1]) == last
    assert run.has("val_loss") == has_val
    assert run.ranks() == [None]


def test_d2_duplicate_iteration_kept_raw():
    loss = load_run(str(DEVLOGS / "d2-dup-iter")).get("loss")
    assert loss.steps[:3].tolist() == [19, 19, 39]
    assert loss.values[0] != loss.values[1]


def test_pinn_nan_tail():
    loss = load_run(str(DEVLOGS / "pl-pinn-nan")).get("loss")
    nan_steps = loss.steps[np.isnan(loss.values)]
    assert nan_steps.min() == 218 and len(nan_steps) == 44


def test_pendulum_spike_value_and_epoch_series_kept():
    run = load_run(str(DEVLOGS / "pl-pendulum-spike"))
    loss = run.get("loss")
    assert loss.values.max() == pytest.approx(125.76, rel=1e-3)
    assert int(loss.steps[np.argmax(loss.values)]) == 16149
    assert run.has("train_loss_epoch")  # _epoch series under its raw name


def test_hf_meta_and_predict_rows():
    run = load_run(str(DEVLOGS / "hf-spam-dense-eval"))
    assert run.meta["max_steps"] == 1689 and run.meta["global_step"] == 1650
    run = load_run(str(DEVLOGS / "hf-cpt-rouge"))
    assert any(n.kind == "rows_without_step" for n in run.notes)
    assert run.has("eval_rouge-1") and len(run.get("eval_rouge-1")) == 10
    assert not any(m.startswith("predict") for m in run.metrics())


def test_hf_t5_grad_norm_spike_is_there():
    gn = load_run(str(DEVLOGS / "hf-t5-noeval")).get("grad_norm")
    assert gn.values.max() == pytest.approx(35.59, rel=1e-3)
    assert int(gn.steps[np.argmax(gn.values)]) == 190000


def test_yolo_val_loss_derived_and_noted():
    run = load_run(str(DEVLOGS / "yolo-weed-earlystop"))
    assert "val/box_loss" in run.meta["derived"]["val_loss"]
    assert run.meta["aliases"]["lr"] == "lr/pg0"
    # YOLO 'time' is cumulative seconds: differentiated into a time per epoch (one row each)
    st = run.get("step_time_s")
    t = run.get("time")
    assert st is not None and t is not None
    assert len(st) == len(t) - 1 and bool((st.values > 0).all())
    assert abs(st.values[0] - (t.values[1] - t.values[0])) < 1e-9
    rec = [m for m in run.meta["mapping"] if m["column"] == "time"]
    assert rec and rec[0]["canonical"] == "step_time_s" and rec[0]["how"].startswith("derived")
    assert run.has("time")


def test_whole_devlog_folder_loads():
    run = load_run(str(DEVLOGS))
    assert run.has("loss") and len(run.meta["sources"]) == 12
