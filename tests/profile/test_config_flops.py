"""FLOPs from a Hugging Face config (6·N + attention, PaLM appendix B) against FlopCounterMode
counting the model transformers builds from the same config, on fake tensors."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmedic.errors import ConfigError
from trainmedic.memory.families import load_spec, spec_with_layers
from trainmedic.profile.config_flops import config_train_flops

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model-configs"


@pytest.mark.parametrize("stem", ["llama-3.2-1b", "gpt2-large", "mistral-7b-v0.1", "phi-2",
                                  "opt-125m"])
def test_config_estimate_matches_the_counted_model_within_one_percent(stem: str) -> None:
    pytest.importorskip("transformers")
    from torch._subclasses.fake_tensor import FakeTensorMode

    from trainmedic.memory.hf_build import build_hf_model, hf_inputs, hf_loss
    from trainmedic.profile.flops import count_flops

    path = CONFIGS / f"{stem}.json"
    batch, seq = 2, 64
    estimate = config_train_flops(spec_with_layers(load_spec(path), 2), batch_size=batch,
                                  seq_len=seq)
    with FakeTensorMode(allow_non_fake_inputs=True):  # no memory, no compute: shapes only
        model = build_hf_model(path, num_layers=2, attn_implementation="sdpa")
        inputs = hf_inputs(model, batch, seq)
        counted = count_flops(lambda: hf_loss(model(**inputs)).backward())
    assert counted.recompute == 0
    assert estimate.flops_per_step == pytest.approx(counted.total, rel=0.01)
    assert estimate.tokens_per_step == batch * seq
    assert estimate.basis == "estimated"


def test_grad_accum_multiplies_the_tokens() -> None:
    spec = load_spec(CONFIGS / "llama-3.2-1b.json")
    one = config_train_flops(spec, batch_size=4, seq_len=128)
    four = config_train_flops(spec, batch_size=4, seq_len=128, grad_accum=4)
    assert four.flops_per_step == 4 * one.flops_per_step
    assert four.flops_per_token == one.flops_per_token


@pytest.mark.parametrize("stem", ["mixtral-8x7b-v0.1", "deepseek-v3", "t5-small",
                                  "bert-base-uncased", "vit-base-patch16-224-in21k"])
def test_families_the_formula_does_not_hold_for_are_refused(stem: str) -> None:
    with pytest.raises(ConfigError, match="trainmedic profile RECIPE"):
        config_train_flops(load_spec(CONFIGS / f"{stem}.json"), batch_size=1, seq_len=16)


def test_bad_sizes_are_refused_by_name() -> None:
    spec = load_spec(CONFIGS / "opt-125m.json")
    with pytest.raises(ConfigError, match="seq_len"):
        config_train_flops(spec, batch_size=1, seq_len=0)
