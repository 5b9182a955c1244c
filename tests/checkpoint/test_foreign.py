"""Other tools' checkpoint folders (trainmedic.checkpoint.foreign): a Hugging Face Trainer
``checkpoint-N/`` folder and its ``output_dir`` are named, anything else is not."""

from __future__ import annotations

from pathlib import Path

from trainmedic.checkpoint.foreign import describe_foreign, hf_trainer_state


def _hf(folder: Path, *files: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text('{"log_history": []}')
    for f in files:
        (folder / f).write_bytes(b"")
    return folder


def test_a_trainer_checkpoint_folder(tmp_path: Path) -> None:
    ck = _hf(tmp_path / "checkpoint-500", "model.safetensors", "optimizer.pt")
    assert hf_trainer_state(ck) == ck / "trainer_state.json"
    line = describe_foreign(ck)
    assert line is not None and "\n" not in line
    assert line.startswith("a Hugging Face Trainer checkpoint")
    assert f"run `trainmedic diagnose {ck / 'trainer_state.json'}`" in line
    # Named otherwise, the weights still mark it (pytorch_model.bin of older versions).
    other = _hf(tmp_path / "best", "pytorch_model.bin")
    assert hf_trainer_state(other) == other / "trainer_state.json"


def test_an_output_dir_of_trainer_checkpoints_points_at_the_newest(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for step in (500, 1000, 90):
        _hf(out / f"checkpoint-{step}", "model.safetensors")
    (out / "runs").mkdir()
    assert hf_trainer_state(out) == out / "checkpoint-1000" / "trainer_state.json"
    line = describe_foreign(out)
    assert line is not None and line.startswith("holds 3 Hugging Face Trainer checkpoints")
    assert f"`trainmedic diagnose {out / 'checkpoint-1000' / 'trainer_state.json'}`" in line


def test_other_folders_are_not_named(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    assert describe_foreign(tmp_path / "plain") is None
    assert describe_foreign(tmp_path / "absent") is None
    # a trainer_state.json alone in some folder is a log, not a checkpoint
    assert describe_foreign(_hf(tmp_path / "logs")) is None
    # a trainmedic checkpoint that happens to hold a trainer_state.json too
    ours = _hf(tmp_path / "checkpoint-7", "model.safetensors")
    (ours / "manifest.json").write_text("{}")
    assert describe_foreign(ours) is None
    (tmp_path / "file").write_text("x")
    assert describe_foreign(tmp_path / "file") is None
