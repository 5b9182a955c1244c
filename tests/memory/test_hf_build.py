"""build_hf_model / spec_with_layers / hf_inputs / hf_loss against the models transformers
builds: reduced-depth builds on the meta device, builds inside FakeTensorMode that allocate
nothing, and real tiny forward/backward steps on CPU."""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path
from typing import Any

import pytest

from trainmedic.errors import ConfigError, InputError, MissingExtraError
from trainmedic.memory.families import load_spec, spec_from_config, spec_with_layers
from trainmedic.memory.hf_build import build_hf_model, hf_config_dict, hf_inputs, hf_loss

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

CONFIG_DIR = Path(__file__).resolve().parents[1] / "data" / "model-configs"
CONFIGS = sorted(CONFIG_DIR.glob("*.json"))


def _raw(name: str) -> dict[str, Any]:
    return json.loads((CONFIG_DIR / f"{name}.json").read_text())


def _count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def _dtype_for(spec: Any) -> Any:
    # torch's meta kernel of grouped_mm (transformers' default MoE path) takes bfloat16 only.
    return torch.bfloat16 if spec.is_moe else None


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_reduced_build_on_meta_matches_spec_with_layers(path: Path) -> None:
    spec = load_spec(path)
    reduced = spec_with_layers(spec, 2)
    with torch.device("meta"):
        model = build_hf_model(path, num_layers=2, dtype=_dtype_for(spec))
    assert type(model).__name__ == spec.head_class
    assert all(p.device.type == "meta" for p in model.parameters())
    assert _count(model) == reduced.num_params
    # The reduced config parses to the same spec as the reduced spec.
    parsed = spec_from_config(hf_config_dict(path, num_layers=2))
    assert (parsed.num_params, parsed.layer_params) == (reduced.num_params, reduced.layer_params)
    assert model.training


@pytest.mark.parametrize("num_layers", [1, 2, 5])
def test_deepseek_reduction_keeps_dense_layers_then_moe(num_layers: int) -> None:
    path = CONFIG_DIR / "deepseek-v3.json"
    with torch.device("meta"):
        model = build_hf_model(path, num_layers=num_layers, dtype=torch.bfloat16)
    kinds = [type(layer.mlp).__name__ for layer in model.model.layers]
    reduced = spec_with_layers(load_spec(path), num_layers)
    assert kinds.count("DeepseekV3MoE") == num_layers - reduced.num_dense_layers >= 1
    assert kinds == sorted(kinds, key=lambda k: k == "DeepseekV3MoE")  # dense ones first
    assert _count(model) == reduced.num_params


def test_t5_reduction_cuts_both_stacks() -> None:
    with torch.device("meta"):
        model = build_hf_model(CONFIG_DIR / "t5-base.json", num_layers=3)
    assert (len(model.encoder.block), len(model.decoder.block)) == (3, 3)


def test_dropout_override_reaches_every_dropout_module() -> None:
    path = CONFIG_DIR / "gpt2-large.json"
    with torch.device("meta"):
        kept = build_hf_model(path, num_layers=1)
        off = build_hf_model(path, num_layers=1, dropout=0.0)
    probs = {m.p for m in kept.modules() if isinstance(m, torch.nn.Dropout)}
    assert probs == {_raw("gpt2-large")["resid_pdrop"]}
    assert {m.p for m in off.modules() if isinstance(m, torch.nn.Dropout)} == {0.0}
    assert spec_from_config(hf_config_dict(path, dropout=0.0)).dropout == 0.0
    with pytest.raises(ConfigError, match="dropout"):
        hf_config_dict(path, dropout=1.0)
    with pytest.raises(ConfigError, match="num_layers"):
        hf_config_dict(path, num_layers=0)


def test_dtype_is_torch_default_unless_given() -> None:
    path = CONFIG_DIR / "llama-3.2-1b.json"  # stored as bfloat16
    with torch.device("meta"):
        assert next(build_hf_model(path, num_layers=1).parameters()).dtype == torch.float32
        half = build_hf_model(path, num_layers=1, dtype=torch.float16)
    assert next(half.parameters()).dtype == torch.float16


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


@pytest.mark.parametrize("name", ["llama-3.2-1b", "gpt2-large"])
def test_full_depth_build_and_step_in_fake_tensor_mode_allocates_nothing(name: str) -> None:
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    spec = load_spec(CONFIG_DIR / f"{name}.json")
    before = _max_rss_mib()
    with FakeTensorMode():
        model = build_hf_model(CONFIG_DIR / f"{name}.json")
        batch = hf_inputs(model, 2, 32)
        loss = hf_loss(model(**batch))
        loss.backward()
    assert all(isinstance(p, FakeTensor) for p in model.parameters())
    assert _count(model) == spec.num_params
    assert loss.shape == ()
    # Real fp32 weights alone would be 4 bytes a parameter (3-5 GB here).
    assert _max_rss_mib() - before < 0.1 * spec.num_params * 4 / 2**20


@pytest.mark.parametrize("name", ["llama-3.2-1b", "gpt2-large"])
def test_full_depth_build_on_meta_allocates_nothing(name: str) -> None:
    spec = load_spec(CONFIG_DIR / f"{name}.json")
    before = _max_rss_mib()
    with torch.device("meta"):
        model = build_hf_model(CONFIG_DIR / f"{name}.json")
    loss = hf_loss(model(**hf_inputs(model, 2, 32)))
    loss.backward()
    assert _count(model) == spec.num_params
    assert _max_rss_mib() - before < 0.1 * spec.num_params * 4 / 2**20


# Tiny widths so that a real CPU step takes milliseconds; the rest of each config is kept.
TINY: dict[str, dict[str, Any]] = {
    "llama-3.2-1b": {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 128},
    "gpt2-large": {"n_embd": 32, "n_head": 4, "vocab_size": 128, "n_positions": 64},
    "t5-small": {"d_model": 32, "d_kv": 8, "num_heads": 4, "d_ff": 64, "vocab_size": 128},
    "bert-base-uncased": {"hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64,
                          "vocab_size": 128, "max_position_embeddings": 64},
    "vit-base-patch16-224-in21k": {"hidden_size": 32, "num_attention_heads": 4,
                                   "intermediate_size": 64, "image_size": 32, "patch_size": 8},
    "mixtral-8x7b-v0.1": {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
                          "num_key_value_heads": 2, "vocab_size": 128, "num_local_experts": 4},
    "deepseek-v3": {"hidden_size": 32, "intermediate_size": 64, "moe_intermediate_size": 16,
                    "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 128,
                    "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 4,
                    "topk_group": 2, "q_lora_rank": 16, "kv_lora_rank": 16,
                    "qk_rope_head_dim": 4, "qk_nope_head_dim": 8, "v_head_dim": 8},
}


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_real_training_step_on_cpu(name: str) -> None:
    torch.manual_seed(0)
    raw = _raw(name) | TINY[name]
    model = build_hf_model(raw, num_layers=2, dropout=0.0)
    assert _count(model) == spec_with_layers(spec_from_config(raw), 2).num_params
    batch = hf_inputs(model, 2, 8)
    device = next(model.parameters()).device
    assert all(t.device == device for t in batch.values())
    loss = hf_loss(model(**batch))
    assert loss.shape == () and torch.isfinite(loss)
    loss.backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []


def test_inputs_per_head() -> None:
    with torch.device("meta"):
        t5 = build_hf_model(CONFIG_DIR / "t5-small.json", num_layers=1)
        vit = build_hf_model(CONFIG_DIR / "vit-base-patch16-224-in21k.json", num_layers=1)
        classifier = build_hf_model(
            _raw("vit-base-patch16-224-in21k") | {"architectures": ["ViTForImageClassification"],
                                                  "num_labels": 10}, num_layers=1)
        bert_pre = build_hf_model(
            _raw("bert-base-uncased") | {"architectures": ["BertForPreTraining"]}, num_layers=1)
    assert set(hf_inputs(t5, 3, 5)) == {"input_ids", "labels"}
    vit_batch = hf_inputs(vit, 3, 999)  # seq_len is the image's
    assert tuple(vit_batch["pixel_values"].shape) == (3, 3, 224, 224)
    assert set(vit_batch) == {"pixel_values"}
    assert tuple(hf_inputs(classifier, 3, 1)["labels"].shape) == (3,)
    assert set(hf_inputs(bert_pre, 2, 4)) == {"input_ids", "labels", "next_sentence_label"}


def test_hf_loss_of_a_bare_model_covers_hidden_states_and_pooler() -> None:
    torch.manual_seed(0)
    raw = _raw("vit-base-patch16-224-in21k") | TINY["vit-base-patch16-224-in21k"]
    model = build_hf_model(raw, num_layers=1)
    outputs = model(**hf_inputs(model, 2, 1))
    expected = outputs.last_hidden_state.mean() + outputs.pooler_output.mean()
    assert torch.equal(hf_loss(outputs), expected)
    with pytest.raises(ConfigError):
        hf_loss(object())


def test_bad_sizes_for_inputs() -> None:
    with torch.device("meta"):
        model = build_hf_model(CONFIG_DIR / "gpt2-large.json", num_layers=1)
    with pytest.raises(ConfigError, match="seq_len"):
        hf_inputs(model, 1, _raw("gpt2-large")["n_positions"] + 1)
    with pytest.raises(ConfigError, match="batch_size"):
        hf_inputs(model, 0, 8)
    with pytest.raises(ConfigError, match="model class"):
        hf_inputs(torch.nn.Linear(2, 2), 1, 1)


def test_bad_config_is_an_input_error_before_anything_is_built() -> None:
    with pytest.raises(InputError, match="'hidden_size'"):
        build_hf_model(_raw("llama-3.2-1b") | {"hidden_size": -1})
    with pytest.raises(InputError, match="measure"):
        build_hf_model(_raw("llama-3.2-1b") | {"model_type": "mamba"})


def test_missing_transformers_names_the_hf_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` fail
    with pytest.raises(MissingExtraError, match=r"trainmedic\[hf\]"):
        build_hf_model(CONFIG_DIR / "gpt2-large.json", num_layers=1)


def test_moe_experts_implementation_is_passed_through() -> None:
    torch.manual_seed(0)
    raw = _raw("mixtral-8x7b-v0.1") | TINY["mixtral-8x7b-v0.1"]
    model = build_hf_model(raw, num_layers=1, experts_implementation="eager")
    assert model.config._experts_implementation == "eager"
    hf_loss(model(**hf_inputs(model, 2, 8))).backward()
    assert all(p.grad is not None for p in model.parameters())
