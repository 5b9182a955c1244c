"""``trainmedic advise``: a recipe or an HF config, text and JSON, and the exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from trainmedic.cli.advise import advise
from trainmedic.errors import UsageError

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model-configs"

NO_CLIP = '''
import torch
from trainmedic.recipe import Recipe


def recipe():
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = [(torch.randn(2, 4), torch.randint(0, 2, (2,)))]
    return Recipe(model=model, optimizer=opt, data=data, max_grad_norm=None,
                  loss_fn=lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1]))
'''


def test_demo_recipe_json_is_all_defaults_and_one_minor_contradiction() -> None:
    r = CliRunner().invoke(advise, ["trainmedic.demo:recipe", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema"] == "trainmedic.advice/1" and doc["basis"] == "estimated"
    assert {i["topic"] for i in doc["stack"]} >= {"optimizer", "schedule", "precision",
                                                   "gradient clipping", "learning rate",
                                                   "weight decay", "adam eps and betas"}
    assert all(i["citation"] and i["reason"] for i in doc["stack"])
    assert [c["code"] for c in doc["contradictions"]] == ["decay_on_norms_biases"]
    assert doc["first_levers"]


def test_config_text_gives_the_lr_formula() -> None:
    r = CliRunner().invoke(advise, ["--config", str(CONFIGS / "gpt2-large.json"), "--batch",
                                    "8", "--seq", "1024", "--no-levers"])
    assert r.exit_code == 0, r.output
    assert "(estimated)" in r.output and "formula: lr(N)" in r.output
    assert "Brown et al. 2020" in r.output and "first lever" not in r.output


def test_fail_on_contradiction_exits_1_on_a_warning(tmp_path: Path) -> None:
    f = tmp_path / "noclip.py"
    f.write_text(NO_CLIP)
    r = CliRunner().invoke(advise, [f"{f}:recipe", "--fail-on-contradiction"])
    assert r.exit_code == 1, r.output
    assert "warning: no_clipping" in r.output
    assert CliRunner().invoke(advise, [f"{f}:recipe"]).exit_code == 0


def test_recipe_and_config_together_or_neither_is_a_usage_error() -> None:
    for args in ([], ["trainmedic.demo:recipe", "--config", str(CONFIGS / "opt-125m.json")],
                 ["trainmedic.demo:recipe", "--batch", "4"]):
        r = CliRunner().invoke(advise, args)
        assert isinstance(r.exception, UsageError), (args, r.output)


def test_a_missing_config_is_a_usage_error(tmp_path: Path) -> None:
    r = CliRunner().invoke(advise, ["--config", str(tmp_path / "nope.json")])
    assert isinstance(r.exception, UsageError)


def test_help_has_examples() -> None:
    r = CliRunner().invoke(advise, ["--help"])
    assert r.exit_code == 0 and "Examples:" in r.output and "--config" in r.output


def test_triage_and_advise_config_do_not_import_torch() -> None:
    import subprocess
    import sys

    code = ("import sys, json\n"
            "from click.testing import CliRunner\n"
            "from trainmedic.cli.triage import triage\n"
            "from trainmedic.cli.advise import advise\n"
            "assert CliRunner().invoke(triage, ['--loss', 'nan']).exit_code == 0\n"
            f"r = CliRunner().invoke(advise, ['--config', {str(CONFIGS / 'opt-125m.json')!r}])\n"
            "assert r.exit_code == 0, r.output\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
