"""``trainmedic bench matmul|storage|data`` as a user runs them: help with examples, tables
with the machine first and every figure labelled, ``--json`` documents, exit 2 on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from trainmedic.cli.bench import bench
from trainmedic.cli.main import main


@pytest.mark.parametrize("args", [[], ["matmul"], ["storage"], ["data"]])
def test_help_has_examples(args: list[str]) -> None:
    res = CliRunner().invoke(bench, [*args, "--help"])
    assert res.exit_code == 0 and "Examples:" in res.output and "trainmedic bench" in res.output


def test_matmul_table_and_json() -> None:
    args = ["matmul", "--m", "64,96", "--n", "64", "--k", "32", "--iterations", "2",
            "--warmup", "0"]
    res = CliRunner().invoke(bench, args)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith("machine: ")
    assert "64x64x32" in res.output and "96x64x32" in res.output
    assert "achievable (MAMF, highest per-shape median), measured:" in res.output
    res = CliRunner().invoke(bench, [*args, "--json"])
    doc = json.loads(res.output)
    assert doc["schema"] == "trainmedic.bench.matmul/1" and doc["basis"] == "measured"
    assert [s["shape"] for s in doc["per_shape"]] == [[64, 64, 32], [96, 64, 32]]
    assert doc["peak_flops_per_s"] == max(s["median_flops_per_s"] for s in doc["per_shape"])
    assert doc["machine"]["torch_threads"] >= 1


def test_matmul_bad_usage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "matmul", "--m", "64"]) == 2  # n and k missing
    assert main(["bench", "matmul", "--m-range", "0", "64", "0", "--n", "8", "--k", "8"]) == 2
    err = capsys.readouterr().err
    assert "--m-range" in err


def test_storage_table_json_and_cleanup(tmp_path: Path) -> None:
    args = ["storage", str(tmp_path), "--size", "2MiB", "--block", "1MiB", "--small-files",
            "3", "--checkpoint", "1GB", "--checkpoint", "2GB"]
    res = CliRunner().invoke(bench, args)
    assert res.exit_code == 0, res.output
    assert res.output.startswith("machine: ")
    assert "measured" in res.output and "estimated" in res.output
    assert "checkpoint of 1 GB" in res.output and "checkpoint of 2 GB" in res.output
    res = CliRunner().invoke(bench, [*args, "--json"])
    doc = json.loads(res.output)
    assert doc["schema"] == "trainmedic.bench.storage/1"
    assert doc["bytes_written"] == 2 * 2**20
    assert [c["checkpoint_bytes"] for c in doc["checkpoints"]] == [10**9, 2 * 10**9]
    assert list(tmp_path.iterdir()) == []


def test_storage_bad_path_exits_2_with_one_line(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "storage", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not exist" in err
    assert main(["bench", "storage", str(tmp_path), "--size", "lots"]) == 2
    assert "--size" in capsys.readouterr().err


def test_data_on_the_demo_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["bench", "data", "trainmedic.demo:recipe", "--workers", "0", "--batches", "3",
               "--set", "batch_size=4", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["schema"] == "trainmedic.bench.data/1"
    assert len(doc["rows"]) == 1 and doc["rows"][0]["samples"] == 12
    rc = main(["bench", "data", "trainmedic.demo:recipe", "--workers", "0", "--batches", "2"])
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("machine: ") and "(all measured)" in out
    assert main(["bench", "data", "trainmedic.demo:recipe", "--workers", "x"]) == 2
    assert main(["bench", "data", "trainmedic.demo:recipe", "--set", "nope=1"]) == 2
