"""Red-team reproducers for the importers: numbers too large for their type, and
Stable-Baselines3's step column. Each bad input next to its ordinary counterpart."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from trainmedic.errors import InputError, UnrecognizedInputError
from trainmedic.run import load_run


def hf_state(p: Path, rows_text: str) -> Path:
    # Written by hand: json.dumps would turn 10**400 into the same digits, but the point is
    # the literal text a logger could write.
    p.write_text('{"global_step": 3, "log_history": [' + rows_text + "]}")
    return p


def notes(run: object) -> str:
    return " | ".join(n.detail for n in run.notes)  # type: ignore[attr-defined]


def test_hf_step_beyond_int64_falls_back_to_row_numbers(tmp_path: Path) -> None:
    # Before: internal error "Python int too large to convert to C long" (exit 3).
    big = 10 ** 30
    rows = ",".join(f'{{"loss": {1.0 - i / 100}, "step": {big + i}}}' for i in range(20))
    run = load_run(str(hf_state(tmp_path / "trainer_state.json", rows)))
    loss = run.get("loss")
    assert loss is not None and list(loss.steps[:3]) == [0, 1, 2]
    assert "too large to be a step count" in notes(run)
    assert "not whole numbers" not in notes(run)


def test_hf_ordinary_large_steps_are_kept(tmp_path: Path) -> None:
    rows = ",".join(f'{{"loss": 1.0, "step": {10 ** 12 + i}}}' for i in range(20))
    run = load_run(str(hf_state(tmp_path / "trainer_state.json", rows)))
    loss = run.get("loss")
    assert loss is not None and int(loss.steps[0]) == 10 ** 12
    assert "step count" not in notes(run)


def test_hf_integer_loss_beyond_float_reads_as_inf_with_a_note(tmp_path: Path) -> None:
    # Before: internal error "int too large to convert to float" (exit 3).
    rows = ",".join(f'{{"loss": {"1" + "0" * 400 if i >= 15 else 2}, "step": {i}}}'
                    for i in range(20))
    run = load_run(str(hf_state(tmp_path / "trainer_state.json", rows)))
    loss = run.get("loss")
    assert loss is not None
    assert np.isinf(loss.values[15:]).all() and (loss.values[15:] > 0).all()
    assert np.all(loss.values[:15] == 2.0)
    assert "too large for a float read as inf" in notes(run)


def test_jsonl_negative_huge_integer_reads_as_minus_inf(tmp_path: Path) -> None:
    p = tmp_path / "metrics.jsonl"
    p.write_text("\n".join(json.dumps({"step": i, "loss": 1.0}) for i in range(5)) + "\n"
                 + '{"step": 5, "loss": -1' + "0" * 400 + "}\n")
    loss = load_run(str(p)).get("loss")
    assert loss is not None and loss.values[-1] == -math.inf


def test_json_integer_over_python_digit_limit_is_an_input_error(tmp_path: Path) -> None:
    # Python refuses int literals of > 4300 digits with a ValueError (not a JSONDecodeError).
    p = hf_state(tmp_path / "trainer_state.json",
                 '{"step": 1, "loss": 1' + "0" * 5000 + '}, {"step": 2, "loss": 1.0}')
    with pytest.raises(InputError) as ei:
        load_run(str(p))
    assert "trainer_state.json" in str(ei.value) and "4300 digits" in str(ei.value)


def test_csv_step_beyond_int64_note_says_too_large(tmp_path: Path) -> None:
    # Before: the note said "not whole numbers" for 10000000000000000000, 10000000000000000001.
    p = tmp_path / "log.csv"
    p.write_text("step,loss\n" + "".join(f"{10 ** 19 + i},{1.0 - i / 100}\n"
                                          for i in range(20)))
    run = load_run(str(p))
    assert "too large to be a step count" in notes(run)
    assert "not whole numbers" not in notes(run)


def test_csv_fractional_step_note_still_says_not_whole(tmp_path: Path) -> None:
    p = tmp_path / "log.csv"
    p.write_text("step,loss\n" + "".join(f"{i + 0.5},{1.0 - i / 100}\n" for i in range(20)))
    assert "not whole numbers" in notes(load_run(str(p)))


SB3_COLUMNS = ("time/fps,time/iterations,time/time_elapsed,time/total_timesteps,"
               "train/approx_kl,train/clip_fraction,train/entropy_loss,train/learning_rate,"
               "train/loss,train/n_updates,train/value_loss,rollout/ep_len_mean,"
               "rollout/ep_rew_mean")


def test_sb3_progress_csv_steps_are_total_timesteps(tmp_path: Path) -> None:
    # Stable-Baselines3's CSV logger (progress.csv): one row per rollout of 2048 env steps.
    p = tmp_path / "progress.csv"
    lines = [SB3_COLUMNS]
    for i in range(1, 31):
        lines.append(f"1200,{i},{2 * i},{2048 * i},0.01,0.1,-1.3,0.0003,{0.5 / i},{10 * i},"
                     f"{1.0 / i},200,{-200 + 5 * i}")
    p.write_text("\n".join(lines) + "\n")
    run = load_run(str(p))
    loss = run.get("loss")
    assert loss is not None and list(loss.steps[:2]) == [2048, 4096]
    rew = run.get("rollout/ep_rew_mean")
    assert rew is not None and rew.values[0] == -195.0  # a reward: kept under its raw name
    assert "loss" not in {m for m in run.metrics() if "rew" in m}
    assert "row numbers" not in notes(run)


def test_baselines_progress_csv_steps_are_timesteps_so_far(tmp_path: Path) -> None:
    # OpenAI Baselines' PPO1 logger: no loss column of its own (value, policy and entropy
    # terms only), so the run is read but not judged on a guessed loss
    p = tmp_path / "progress.csv"
    p.write_text("TimeElapsed,loss_vf_loss,EpisodesSoFar,EpRewMean,TimestepsSoFar,loss_ent\n"
                 + "".join(f"{2.0 * i},{0.06 / i},{12 * i},{0.01 * i},{1024 * i},1.16\n"
                           for i in range(1, 21)))
    run = load_run(str(tmp_path))  # found inside its folder: the header names a step
    assert run.get("loss_vf_loss").steps.tolist()[:2] == [1024, 2048]


def test_all_loss_is_the_objective_beside_its_terms(tmp_path: Path) -> None:
    p = tmp_path / "train_output.txt"
    p.write_text("".join(f"Epoch: 2, Step: {200 * i}, accuracy: 0.97, det loss: 0.7, "
                         f"bbox loss: {9 + i}, all_loss: {5 + i / 2}, lr:0.01\n"
                         for i in range(1, 12)))
    assert load_run(str(p)).get("loss").values[0] == pytest.approx(5.5)


def test_sb3_step_name_comes_after_a_framework_step(tmp_path: Path) -> None:
    p = tmp_path / "log.csv"
    p.write_text("global_step,time/total_timesteps,loss\n"
                 + "".join(f"{i},{2048 * i},{1.0 / (i + 1)}\n" for i in range(20)))
    loss = load_run(str(p)).get("loss")
    assert loss is not None and list(loss.steps[:3]) == [0, 1, 2]


@pytest.mark.parametrize("data", [b"\xffdam", b"\xff", b"ab\xff"])
def test_a_tiny_file_with_a_bad_byte_is_an_input_error(tmp_path: Path, data: bytes) -> None:
    # A bad UTF-8 byte near the end of the head is read as a character cut at the 64 KiB
    # boundary; in a file of a few bytes that left no text at all (IndexError).
    p = tmp_path / "opt"
    p.write_bytes(data)
    with pytest.raises(InputError):
        load_run(str(p))


def test_an_unread_console_starting_with_a_bracket_is_not_called_invalid_json(
        tmp_path: Path) -> None:
    # "[2024-03-01 12:00:01] 1 train 1.8" is no JSON shape: the error says no line read as a
    # log line, not that the JSON is invalid
    p = tmp_path / "b.log"
    p.write_text("".join(f"[2024-03-01 12:00:0{i}] {i} train {2 - i / 10}\n" for i in range(5)))
    with pytest.raises(UnrecognizedInputError, match="no line reads as a training log line"):
        load_run(str(p))
