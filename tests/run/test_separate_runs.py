"""Several paths are merged only when they are parts of one run; separate runs are refused
and pointed to ``trainmedic compare`` (run/merge.py ``refuse_separate_runs``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trainmedic.errors import InputError
from trainmedic.run import load_run


def _loss(seed: int, n: int = 200) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 3.0 * np.exp(-np.arange(n) / 80) + 0.05 * rng.standard_normal(n) + 0.5


def _csv(path: Path, steps: np.ndarray, loss: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = "".join(f"{int(s)},{float(v)!r}\n" for s, v in zip(steps, loss, strict=True))
    path.write_text("step,loss\n" + rows)
    return path


def test_a_per_step_log_and_its_10_step_averages_are_one_run(tmp_path: Path) -> None:
    loss = _loss(0)
    steps = np.arange(1, len(loss) + 1)
    per_step = _csv(tmp_path / "metrics.csv", steps, loss)
    averaged = tmp_path / "train_log.jsonl"  # HF's Trainer logs the mean since its last line
    averaged.write_text("".join(json.dumps({"step": int(steps[i + 9]),
                                            "loss": float(loss[i:i + 10].mean())}) + "\n"
                                for i in range(0, len(loss), 10)))
    run = load_run(str(per_step), str(averaged))
    assert run.get("loss") is not None


def test_two_runs_one_with_a_rank_suffix_are_refused(tmp_path: Path) -> None:
    steps = np.arange(200)
    a = _csv(tmp_path / "A" / "metrics.rank0.csv", steps, _loss(0))
    b = _csv(tmp_path / "B" / "metrics.csv", steps, _loss(1))
    with pytest.raises(InputError, match="separate runs.*trainmedic compare"):
        load_run(str(a), str(b))


def test_two_runs_at_different_cadences_are_refused(tmp_path: Path) -> None:
    a = _csv(tmp_path / "a.csv", np.arange(200), _loss(0))
    b = _csv(tmp_path / "b.csv", np.arange(0, 200, 10), _loss(1)[::10])
    with pytest.raises(InputError, match="separate runs"):
        load_run(str(a), str(b))


def test_per_rank_files_of_one_run_still_merge(tmp_path: Path) -> None:
    steps = np.arange(200)
    files = [_csv(tmp_path / f"metrics.rank{r}.csv", steps, _loss(r)) for r in range(2)]
    run = load_run(*(str(f) for f in files))
    assert {rank for name, rank in run.series if name == "loss"} == {0, 1}


def test_one_run_logged_at_steps_off_by_one_and_rounded_is_one_run(tmp_path: Path) -> None:
    # Lightning's CSV numbers a step global_step - 1 where a callback's store says
    # global_step; HF rounds its logged loss to 4 decimals
    loss = _loss(3) / 100  # ~0.005-0.03: where 4-decimal rounding is a large relative error
    steps = np.arange(1, len(loss) + 1)
    per_step = _csv(tmp_path / "store.csv", steps, loss)
    averaged = tmp_path / "lightning.csv"
    rows = "".join(f"{int(steps[i + 9]) - 1},{round(float(loss[i:i + 10].mean()), 4)}\n"
                   for i in range(0, len(loss), 10))
    averaged.write_text("step,loss\n" + rows)
    assert load_run(str(per_step), str(averaged)).get("loss") is not None
