"""``trainmedic memory plan|oom|kv|measure`` through the CLI's entry point, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmedic.cli.main import main

DATA = Path(__file__).resolve().parents[1] / "data"
CONFIGS = DATA / "model-configs"
MEMORY = DATA / "memory"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_plan_json_has_the_contract_fields(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "memory", "plan", "--config", str(CONFIGS / "llama-3.2-1b.json"),
                      "--batch", "2", "--seq", "1024", "--gpu-memory", "80GB", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["fits"] is True
    for key in ("peak_bytes", "peak_phase", "ledger", "num_params", "fits", "max_micro_batch",
                "basis", "interventions"):
        assert key in doc
    for cat in ("params", "grads", "optimizer", "master_weights", "activations", "temporaries",
                "buffers", "overhead"):
        assert cat in doc["ledger"] and doc["basis"][cat] == "estimated"
    assert doc["peak_bytes"] == sum(doc["ledger"].values())
    assert doc["max_micro_batch"] >= 2


def test_plan_that_does_not_fit_ranks_interventions_and_exits_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc, out, _ = _run(capsys, "memory", "plan", "--config",
                      str(CONFIGS / "llama-3.1-8b-instruct.json"), "--batch", "4", "--seq",
                      "4096", "--gpu", "a100-40gb", "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["fits"] is False
    assert doc["interventions"], "a plan that does not fit must say what would help"
    for iv in doc["interventions"]:
        assert iv["saved_bytes"] > 0 and iv["throughput_cost_basis"] == "estimated"
    # Those that fit alone come first.
    fits = [iv["fits"] for iv in doc["interventions"]]
    assert fits == sorted(fits, reverse=True)


def test_plan_terminal_table(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "memory", "plan", "--config", str(CONFIGS / "gpt2-large.json"),
                      "--batch", "4", "--seq", "1024", "--precision", "fp32", "--gpu", "h100")
    assert rc == 0
    assert "optimizer state" in out and "activations" in out and "est." in out
    assert "largest micro-batch that fits" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--config", "missing.json"], "missing.json"),
        (["--config", str(CONFIGS / "llama-3.2-1b.json"), "--batch", "0"], "batch_size"),
        (["--config", str(CONFIGS / "llama-3.2-1b.json"), "--gpus", "6", "--tp", "4"], "gpus"),
        (["--config", str(CONFIGS / "gpt2-large.json"), "--gpus", "3", "--tp", "3"],
         "tp: got 3"),
        (["--config", str(CONFIGS / "llama-3.2-1b.json"), "--gpu", "h900"], "h900"),
        (["--config", str(CONFIGS / "llama-3.2-1b.json"), "--gpu-memory", "lots"], "lots"),
    ],
)
def test_plan_bad_input_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    rc, _, err = _run(capsys, "memory", "plan", *args)
    assert rc == 2
    assert needle in err and "Traceback" not in err


def test_plan_unknown_model_type_points_to_measure_mode(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "not_a_model", "hidden_size": 768}))
    rc, _, err = _run(capsys, "memory", "plan", "--config", str(cfg), "--gpus", "2")
    assert rc == 2 and "not_a_model" in err and "measure" in err


def test_plan_falls_back_to_measure_mode_for_a_family_transformers_knows(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("transformers")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({
        "model_type": "gpt_neox", "hidden_size": 128, "num_attention_heads": 4,
        "num_hidden_layers": 2, "intermediate_size": 512, "vocab_size": 500,
        "architectures": ["GPTNeoXForCausalLM"]}))
    rc, out, _ = _run(capsys, "memory", "plan", "--config", str(cfg), "--batch", "2",
                      "--seq", "64", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["kind"] == "measure"
    assert set(doc["basis"].values()) == {"measured"}
    assert "gpt_neox" in doc["notes"][0]
    assert doc["ledger"]["params"] == 4 * doc["num_params"]


def test_measure_a_factory_and_a_recipe_dict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    src = tmp_path / "models.py"
    src.write_text(
        "import torch\n"
        "def lm():\n"
        "    return torch.nn.Sequential(torch.nn.Embedding(300, 64), torch.nn.Linear(64, 300))\n"
        "def mlp():\n"
        "    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),\n"
        "                            torch.nn.Linear(64, 4))\n"
        "    return {'model': m, 'inputs': lambda model, b, s: torch.randn(b, 32),\n"
        "            'loss': lambda out, batch: out.square().mean()}\n"
        "def broken():\n"
        "    raise RuntimeError('no weights')\n")
    rc, out, _ = _run(capsys, "memory", "measure", f"{src}:lm", "--batch", "2", "--seq", "16",
                      "--json")
    doc = json.loads(out)
    n = (300 * 64) + (64 * 300 + 300)
    assert rc == 0 and doc["num_params"] == n and doc["ledger"]["params"] == 4 * n
    # AdamW: two fp32 moments, plus one 4-byte step counter per parameter tensor.
    assert doc["ledger"]["optimizer"] == 2 * 4 * n + 3 * 4
    rc, out, _ = _run(capsys, "memory", "measure", f"{src}:mlp", "--batch", "8", "--json")
    assert rc == 0 and json.loads(out)["num_params"] == 32 * 64 + 64 + 64 * 4 + 4
    rc, _, err = _run(capsys, "memory", "measure", f"{src}:broken")
    assert rc == 2 and "no weights" in err and "Traceback" not in err
    rc, _, err = _run(capsys, "memory", "measure", f"{src}:missing")
    assert rc == 2 and "missing" in err
    del torch


def test_oom_message_is_explained(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "memory", "oom", str(MEMORY / "oom_torch22_expandable.txt"),
                      "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["verdict"] and doc["figures"]
    assert {f["basis"] for f in doc["figures"]} <= {"measured", "estimated"}


def test_oom_snapshot_and_malicious_pickle(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "memory", "oom", str(MEMORY / "snapshot_fragmented.pickle"))
    assert rc == 1 and "expandable_segments" in out
    rc, _, err = _run(capsys, "memory", "oom", str(MEMORY / "snapshot_malicious.pickle"))
    assert rc == 2 and "refused" in err


def test_oom_without_an_oom_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(capsys, "memory", "oom", str(MEMORY / "no_oom.txt"))
    assert rc == 2 and "no out-of-memory message" in err


def test_kv_sizes_llama_gqa(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "memory", "kv", "--config",
                      str(CONFIGS / "llama-3.1-8b-instruct.json"), "--batch", "32", "--context",
                      "8192", "--gpu", "h100", "--json")
    doc = json.loads(out)
    # 2 (K, V) x 32 layers x 8 KV heads x 128 dims x 2 bytes = 128 KiB per token.
    assert doc["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    assert doc["kv_bytes"] == 32 * 8192 * doc["kv_bytes_per_token"]
    assert rc == 0 and doc["fits"] is True and doc["max_batch_size"] >= 32


def test_kv_encoder_only_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(capsys, "memory", "kv", "--config", str(CONFIGS / "bert-base-uncased.json"),
                      "--context", "512")
    assert rc == 2 and "Traceback" not in err


def test_memory_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    for sub in ("plan", "oom", "kv", "measure"):
        rc, out, _ = _run(capsys, "memory", sub, "--help")
        assert rc == 0 and "Example" in out


def test_plan_verdict_comes_first(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "memory", "plan", "--config", str(CONFIGS / "gpt2-large.json"),
                      "--batch", "4", "--seq", "1024", "--gpu", "h100")
    first, second = out.splitlines()[:2]
    assert rc == 0 and first.startswith("fits on NVIDIA H100 80GB HBM3 (reported capacity): peak ")
    assert first.endswith("(est.)") and "usable" in first
    assert second.startswith("gpt2-large.json: gpt2")
    rc, out, _ = _run(capsys, "memory", "plan", "--config",
                      str(CONFIGS / "llama-3.1-8b-instruct.json"), "--batch", "4", "--seq",
                      "4096", "--gpu", "a100-40gb")
    assert rc == 1 and out.splitlines()[0].startswith("does NOT fit on NVIDIA A100-SXM4-40GB")
    # The verdict is said once, at the top.
    assert out.count("does NOT fit") == 1


def test_plan_keeps_zero_rows(capsys: pytest.CaptureFixture[str]) -> None:
    # One GPU with AMP: no master weights and no communication buckets, still shown as 0.
    rc, out, _ = _run(capsys, "memory", "plan", "--config", str(CONFIGS / "llama-3.2-1b.json"),
                      "--batch", "1", "--seq", "512")
    assert rc == 0
    rows = {line[2:28].strip(): line[28:].split()[:2] for line in out.splitlines()
            if line.startswith("  ") and not line.startswith("   ")}
    assert rows["fp32 master weights"] == ["0", "bytes"]
    assert rows["communication buckets"] == ["0", "bytes"]
    assert rows["buffers"] == ["0", "bytes"]


def test_plan_title_says_gpu_not_gpus_with_a_parenthesis(
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = str(CONFIGS / "llama-3.2-1b.json")
    _, out, _ = _run(capsys, "memory", "plan", "--config", config, "--seq", "512")
    assert "single on 1 GPU" in out and "GPU(s)" not in out
    _, out, _ = _run(capsys, "memory", "plan", "--config", config, "--seq", "512", "--gpus", "8")
    assert "ddp on 8 GPUs" in out and "GPU(s)" not in out


def test_gpu_memory_without_a_unit_is_gb_with_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, "memory", "plan", "--config", str(CONFIGS / "llama-3.2-1b.json"),
                        "--seq", "512", "--gpu-memory", "80", "--json")
    doc = json.loads(out)  # the note goes to stderr: stdout stays one JSON document
    assert rc == 0 and doc["gpu_memory_bytes"] == 80 * 10**9 and doc["fits"] is True
    assert err == ("trainmedic: note: --gpu-memory 80 has no unit: read as 80GB "
                   "(80 x 10^9 bytes); write 80GiB for 80 x 2^30\n")
    rc, out, err = _run(capsys, "memory", "plan", "--config", str(CONFIGS / "llama-3.2-1b.json"),
                        "--seq", "512", "--gpu-memory", "80GiB", "--json")
    assert rc == 0 and json.loads(out)["gpu_memory_bytes"] == 80 * 2**30 and err == ""


@pytest.mark.parametrize("sub", [["plan"], ["kv", "--context", "1024"]])
def test_ambiguous_gpu_asks_which_size(capsys: pytest.CaptureFixture[str], sub: list[str]) -> None:
    rc, out, err = _run(capsys, "memory", *sub, "--config", str(CONFIGS / "llama-3.2-1b.json"),
                        "--gpu", "a100")
    assert rc == 2 and out == ""
    assert err == ("trainmedic: error: --gpu: 'a100' is ambiguous (40 or 80 GB?); expected one "
                   "of a100-40gb, a100-80gb\n")
    rc, out, _ = _run(capsys, "memory", *sub, "--config", str(CONFIGS / "llama-3.2-1b.json"),
                      "--gpu", "a100-80gb", "--json")
    assert rc == 0 and json.loads(out)["gpu_memory_bytes"] == int(79.15 * 2**30)


def _hub_cache(root: Path, repo_id: str, config: Path) -> Path:
    """A Hugging Face hub cache holding ``config`` as ``repo_id``'s config.json at main."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(config.read_text())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    return root


def test_plan_reads_a_hub_id_from_the_local_cache(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    constants = pytest.importorskip("huggingface_hub.constants")
    local = CONFIGS / "llama-3.2-1b.json"
    cache = _hub_cache(tmp_path / "hub", "meta-llama/Llama-3.2-1B", local)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    rc, out, _ = _run(capsys, "memory", "plan", "--config", str(local), "--json")
    expected = json.loads(out)
    rc, out, _ = _run(capsys, "memory", "plan", "--config", "meta-llama/Llama-3.2-1B", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["source"] == "meta-llama/Llama-3.2-1B"
    assert doc["num_params"] == expected["num_params"] and doc["ledger"] == expected["ledger"]
    rc, out, _ = _run(capsys, "memory", "plan", "--config", "meta-llama/Llama-3.2-1B")
    assert rc == 0 and out.splitlines()[0].startswith("meta-llama/Llama-3.2-1B: llama, 1.24B")
    rc, out, _ = _run(capsys, "memory", "kv", "--config", "meta-llama/Llama-3.2-1B",
                      "--context", "1024", "--json")
    assert rc == 0 and json.loads(out)["model"]["num_params"] == expected["num_params"]
    rc, _, err = _run(capsys, "memory", "plan", "--config", "someone/not-downloaded")
    assert rc == 2 and err.startswith("trainmedic: error: someone/not-downloaded: no such file, "
                                      "and no config.json for the hub id")
    assert str(cache) in err and "Traceback" not in err


def test_plan_reads_a_model_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((CONFIGS / "gpt2-large.json").read_text())
    rc, out, _ = _run(capsys, "memory", "plan", "--config", str(tmp_path), "--json")
    assert rc == 0 and json.loads(out)["model"]["family"] == "gpt2"


def test_kv_verdict_comes_first(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "memory", "kv", "--config",
                      str(CONFIGS / "llama-3.1-8b-instruct.json"), "--batch", "64", "--context",
                      "8192", "--gpu", "h100")
    lines = out.splitlines()
    assert rc == 1 and lines[0].startswith("does NOT fit on NVIDIA H100 80GB HBM3")
    assert lines[1].startswith("llama-3.1-8b-instruct.json: llama, 8.03B params")
    assert "largest batch at 8192 tokens: 56" in lines and out.count("fit") == 1
