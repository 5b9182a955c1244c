"""``trainmedic ckpt verify | latest | list``, driven through the entry point as a user runs
them, on checkpoints written by the manager (and damaged on purpose)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from trainmedic.cli.main import cli, main

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def _root(tmp_path: Path, steps: tuple[int, ...] = (100, 200, 300)) -> Path:
    from trainmedic.checkpoint import CheckpointManager

    root = tmp_path / "ckpt"
    mgr = CheckpointManager(root, keep_last=None)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for s in steps:
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        mgr.save(s, {"model": model, "optimizer": opt, "train": {"step": s}})
    return root


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_verify_good(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _root(tmp_path, (100,))
    assert main(["ckpt", "verify", str(root / "step-00000100")]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"{root / 'step-00000100'}: good: step 100, 1 rank, torch format, "
                          f"3 files (")
    # weight and bias, and their two momentum buffers
    assert out.rstrip().endswith("hashes match, 4 tensors finite") and err == ""
    assert main(["ckpt", "verify", "--quick", str(root / "step-00000100")]) == 0
    assert "sizes match (not hashed: --quick)" in capsys.readouterr().out


def test_verify_damaged_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _root(tmp_path, (100,))
    ck = root / "step-00000100"
    _flip(ck / "optimizer.pt")
    assert main(["ckpt", "verify", str(ck)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{ck}: damaged: step 100"
    assert lines[1].startswith("  optimizer.pt: content hash crc32:")
    assert lines[1].endswith(": the file changed after the save")
    assert main(["ckpt", "verify", str(ck), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "trainmedic.ckpt-verify/1" and doc["status"] == "damaged"
    assert [p["file"] for p in doc["problems"]] == ["optimizer.pt"]


def test_verify_not_a_checkpoint_is_exit_2(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "plain").mkdir()
    assert main(["ckpt", "verify", str(tmp_path / "plain")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"trainmedic: error: {tmp_path / 'plain'}: not a checkpoint")
    assert main(["ckpt", "verify", str(tmp_path / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_verify_a_leftover_temporary_folder_is_exit_1(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    root = _root(tmp_path, (100,))
    tmp = root / ".tmp-step-00000200-0a1b2c3d"
    tmp.mkdir()
    (tmp / "model.pt").write_bytes(b"half")
    assert main(["ckpt", "verify", str(tmp)]) == 1
    assert capsys.readouterr().out.startswith(f"{tmp}: uncommitted: step 200\n  not committed")


def test_latest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _root(tmp_path)
    _flip(root / "step-00000300" / "model.pt")
    assert main(["ckpt", "latest", str(root)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{root / 'step-00000200'}\n"
    assert err.startswith("skipped step-00000300: damaged (model.pt: content hash")
    assert main(["ckpt", "latest", str(root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["latest"] == str(root / "step-00000200") and doc["step"] == 200
    assert [(s["step"], s["status"]) for s in doc["skipped"]] == [(300, "damaged")]


def test_latest_none_is_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _root(tmp_path, (100,))
    (root / "step-00000100" / "train_state.rank0.pt").unlink()
    assert main(["ckpt", "latest", str(root)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines()[-1] == f"trainmedic: no checkpoint under {root} verifies"
    (tmp_path / "empty").mkdir()
    assert main(["ckpt", "latest", str(tmp_path / "empty")]) == 1
    assert main(["ckpt", "latest", str(tmp_path / "absent")]) == 2


def test_latest_with_the_run_skips_checkpoints_after_a_nan_loss(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _root(tmp_path)
    log = tmp_path / "metrics.csv"
    log.write_text("step,loss\n" + "".join(
        f"{s},{'nan' if s >= 250 else 2.0 - s / 400}\n" for s in range(0, 400, 5)))
    assert main(["ckpt", "latest", str(root), "--run", str(log)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{root / 'step-00000200'}\n"
    assert "skipped step-00000300: after_divergence (saved at or after step 250" in err
    assert main(["ckpt", "latest", str(root), "--run", str(tmp_path / "nope.csv")]) == 2


def test_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _root(tmp_path)
    _flip(root / "step-00000200" / "optimizer.pt")
    (root / ".tmp-step-00000400-0a1b2c3d").mkdir()
    assert main(["ckpt", "list", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["step", "status", "size", "created", "(UTC)", "folder"]
    rows = [line.split()[:2] for line in lines[1:]]
    assert rows == [["400", "writing"], ["300", "good"], ["200", "damaged"], ["100", "good"]]
    assert "(optimizer.pt: content hash" in lines[3]
    assert main(["ckpt", "list", str(root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "trainmedic.ckpt-list/1"
    assert [c["status"] for c in doc["checkpoints"]] == ["writing", "good", "damaged", "good"]
    assert main(["ckpt", "list", str(tmp_path / "absent")]) == 2


def test_latest_names_each_skipped_checkpoint_once(tmp_path: Path) -> None:
    """As a user runs it (no logging set up: Python prints warnings on stderr itself), each
    skipped checkpoint is one line; it was two (a log warning, then the report's line)."""
    root = _root(tmp_path)
    _flip(root / "step-00000300" / "model.pt")
    _flip(root / "step-00000200" / "optimizer.pt")
    proc = subprocess.run([sys.executable, "-m", "trainmedic.cli.main", "ckpt", "latest",
                           str(root)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{root / 'step-00000100'}\n"
    lines = proc.stderr.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["skipped step-00000300",
                                                  "skipped step-00000200"]
    assert proc.stderr.count("step-00000300") == 1 and proc.stderr.count("step-00000200") == 1


def test_verify_a_sharded_checkpoint_counts_its_shards_and_tensors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("trainmedic.checkpoint.sharded")
    from trainmedic.checkpoint import CheckpointManager

    model = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    path = CheckpointManager(tmp_path, sharded=True).save(
        5, {"model": model, "optimizer": opt, "train": {"step": 5, "rng": torch.ones(3)}})
    assert main(["ckpt", "verify", str(path)]) == 0
    out = capsys.readouterr().out
    # weight and bias, and Adam's exp_avg, exp_avg_sq and step of each; the train state's one
    assert "dcp format" in out and "0 tensors finite" not in out
    assert out.rstrip().endswith("hashes match, 9 tensors finite (8 in 1 DCP shard file, 1 in "
                                 ".pt files)")
    assert main(["ckpt", "verify", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["dcp_files"], doc["dcp_tensors"], doc["tensors_checked"]) == (1, 8, 1)


def _hf_checkpoint(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text('{"log_history": [{"step": 1, "loss": 2.0}]}')
    for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "training_args.bin"):
        (folder / name).write_bytes(b"\0" * 8)
    return folder


@pytest.mark.parametrize("command", ["verify", "latest", "list"])
def test_a_hugging_face_checkpoint_is_named_as_such(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    out_dir = tmp_path / "out"
    ck = _hf_checkpoint(out_dir / "checkpoint-500")
    _hf_checkpoint(out_dir / "checkpoint-1000")
    state = out_dir / "checkpoint-1000" / "trainer_state.json"
    for given, expected in ((ck, ck / "trainer_state.json"), (out_dir, state)):
        assert main(["ckpt", command, str(given)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1
        assert err.startswith(f"trainmedic: error: {given}: ")
        assert "Hugging Face Trainer checkpoint" in err and "not a checkpoint" not in err
        assert f"run `trainmedic diagnose {expected}`" in err


def test_a_root_holding_trainmedic_checkpoints_too_is_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _root(tmp_path, (100,))
    _hf_checkpoint(root / "checkpoint-500")
    assert main(["ckpt", "latest", str(root)]) == 0
    assert capsys.readouterr().out == f"{root / 'step-00000100'}\n"


@pytest.mark.parametrize("args", [["ckpt"], ["ckpt", "verify"], ["ckpt", "latest"],
                                  ["ckpt", "list"]])
def test_help_has_examples(args: list[str]) -> None:
    result = CliRunner().invoke(cli, [*args, "--help"])
    assert result.exit_code == 0 and "Examples:" in result.output
    assert "trainmedic ckpt" in result.output


def test_resume_test_is_registered_when_available() -> None:
    try:
        import trainmedic.cli.ckpt_resume  # noqa: F401
    except ImportError:
        pytest.skip("the resume-test command is not installed")
    result = CliRunner().invoke(cli, ["ckpt", "resume-test", "--help"])
    assert result.exit_code == 0


def test_ckpt_group_starts_without_torch() -> None:
    code = ("import sys; from trainmedic.cli.main import main\n"
            "rc = main(['ckpt', '--help']); assert 'torch' not in sys.modules, 'torch'\n"
            "import trainmedic.checkpoint; assert 'torch' not in sys.modules\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
