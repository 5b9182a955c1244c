"""ModelSpec from real Hugging Face configs: fields against the config's own values, and
num_params against the model transformers builds (on the meta device) as the oracle."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trainmedic.errors import InputError, RegistryError, UnreadableInputError
from trainmedic.memory import families
from trainmedic.memory.families import (
    Family,
    FamilyRegistry,
    load_spec,
    read_config,
    register_family,
    spec_from_config,
    spec_with_layers,
    supported_model_types,
)
from trainmedic.memory.spec import ModelSpec

CONFIG_DIR = Path(__file__).resolve().parents[1] / "data" / "model-configs"
CONFIGS = sorted(CONFIG_DIR.glob("*.json"))


def _raw(name: str) -> dict[str, Any]:
    return json.loads((CONFIG_DIR / f"{name}.json").read_text())


def _first(raw: dict[str, Any], *keys: str) -> Any:
    return next(raw[k] for k in keys if raw.get(k) is not None)


# ---------------------------------------------------------------- the oracle: transformers

def _legacy_falcon(raw: dict[str, Any]) -> dict[str, Any]:
    """The legacy RefinedWeb names in today's FalconConfig terms, written out by hand."""
    out = {k: v for k, v in raw.items() if k not in ("n_layer", "n_head", "n_head_kv", "auto_map")}
    out.update(model_type="falcon", num_hidden_layers=raw["n_layer"],
               num_attention_heads=raw["n_head"], architectures=["FalconForCausalLM"],
               new_decoder_architecture=raw["model_type"] == "RefinedWeb")
    if "n_head_kv" in raw:
        out["num_kv_heads"] = raw["n_head_kv"]
    return out


def _transformers_count(raw: dict[str, Any]) -> tuple[str, int]:
    """(class name, parameter count) of the model transformers builds from ``raw``."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if raw["model_type"] in ("RefinedWebModel", "RefinedWeb"):
        raw = _legacy_falcon(raw)
    cls = getattr(transformers, raw["architectures"][0])
    config = transformers.AutoConfig.for_model(**raw)
    with torch.device("meta"):
        model = cls._from_config(config)
    # parameters() yields a tied tensor once.
    return cls.__name__, sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_num_params_equals_the_model_transformers_builds(path: Path) -> None:
    spec = load_spec(path)
    cls, count = _transformers_count(json.loads(path.read_text()))
    assert spec.head_class == cls
    assert spec.num_params == count


# Variants of the real configs that take the other branches of each parser.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-biases-tied-headdim": ("llama-3.2-1b", {
        "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True,
        "head_dim": 128, "num_key_value_heads": None, "num_hidden_layers": 2}),
    "llama-seqcls-falls-back": ("llama-3.2-1b", {
        "architectures": ["LlamaForSequenceClassification"], "num_hidden_layers": 2}),
    "llama-base": ("llama-3.1-8b-instruct", {"architectures": ["LlamaModel"],
                                             "num_hidden_layers": 2}),
    "gpt2-base-untied-ninner": ("gpt2-large", {
        "architectures": ["GPT2Model"], "n_inner": 1000, "n_layer": 2}),
    "gpt2-untied": ("gpt2-large", {"tie_word_embeddings": False, "n_layer": 2}),
    "mistral-default-kv": ("mistral-7b-v0.1", {"num_key_value_heads": "<absent>",
                                               "num_hidden_layers": 2}),
    "qwen2-tied-sliding": ("qwen2.5-7b-instruct", {
        "tie_word_embeddings": True, "use_sliding_window": True, "num_hidden_layers": 2}),
    "gemma-default-headdim-bias": ("gemma-2b", {
        "head_dim": "<absent>", "attention_bias": True, "num_hidden_layers": 2}),
    "phi-qk-ln-gqa-tied": ("phi-2", {
        "qk_layernorm": True, "num_key_value_heads": 8, "tie_word_embeddings": True,
        "num_hidden_layers": 2}),
    "falcon-new-arch": ("falcon-7b-instruct", {
        "new_decoder_architecture": True, "num_kv_heads": 8, "num_attention_heads": 64,
        "hidden_size": 4096, "num_hidden_layers": 2}),
    "falcon-sequential-mha-bias": ("falcon-7b-instruct", {
        "multi_query": False, "parallel_attn": False, "bias": True, "num_hidden_layers": 2,
        "ffn_hidden_size": 5000}),
    "falcon-alibi-untied": ("falcon-7b-instruct", {
        "alibi": True, "tie_word_embeddings": False, "num_hidden_layers": 2}),
    "falcon-legacy-40b": ("falcon-7b-legacy-refinedweb", {
        "model_type": "RefinedWeb", "n_head": 128, "n_head_kv": 8, "hidden_size": 8192,
        "n_layer": 2}),
    "opt-350m-like": ("opt-125m", {
        "hidden_size": 1024, "num_attention_heads": 16, "ffn_dim": 4096,
        "word_embed_proj_dim": 512, "do_layer_norm_before": False, "num_hidden_layers": 2}),
    "opt-no-bias-no-affine": ("opt-125m", {
        "enable_bias": False, "layer_norm_elementwise_affine": False, "num_hidden_layers": 2}),
    "bert-base-model": ("bert-base-uncased", {"architectures": ["BertModel"]}),
    "bert-pretraining-untied": ("bert-base-uncased", {
        "architectures": ["BertForPreTraining"], "tie_word_embeddings": False}),
    "roberta-mlm": ("bert-base-uncased", {
        "model_type": "roberta", "architectures": ["RobertaForMaskedLM"], "vocab_size": 50265,
        "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1}),
    "roberta-base-model": ("bert-base-uncased", {
        "model_type": "roberta", "architectures": ["RobertaModel"], "type_vocab_size": 1}),
    "t5-v1_1-gated-untied": ("t5-base", {
        "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False, "d_ff": 2048,
        "num_decoder_layers": 3, "num_layers": 2}),
    "t5-model": ("t5-small", {"architectures": ["T5Model"]}),
    "vit-classifier": ("vit-base-patch16-224-in21k", {
        "architectures": ["ViTForImageClassification"], "qkv_bias": False,
        "id2label": {str(i): f"c{i}" for i in range(1000)}}),
    "vit-pooler-width": ("vit-base-patch16-224-in21k", {
        "pooler_output_size": 512, "image_size": 384, "patch_size": 32, "num_channels": 1}),
    "deepseek-no-qlora-shared2-bias": ("deepseek-v3", {
        "q_lora_rank": None, "n_shared_experts": 2, "first_k_dense_replace": 0,
        "attention_bias": True, "num_hidden_layers": 2}),
    "deepseek-all-dense": ("deepseek-v3", {"first_k_dense_replace": 5, "num_hidden_layers": 3}),
    "mixtral-base-tied": ("mixtral-8x7b-v0.1", {
        "architectures": ["MixtralModel"], "tie_word_embeddings": True,
        "num_hidden_layers": 2}),
}


def _variant(name: str) -> dict[str, Any]:
    base, overrides = VARIANTS[name]
    raw = _raw(base)
    for key, value in overrides.items():
        if value == "<absent>":
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_num_params_equal_transformers(name: str) -> None:
    raw = _variant(name)
    spec = spec_from_config(raw)
    expected_raw = dict(raw)
    if raw["architectures"][0] == "LlamaForSequenceClassification":
        # An unknown head: the family's usual LM head is counted.
        assert spec.head_class == "LlamaForCausalLM"
        expected_raw["architectures"] = ["LlamaForCausalLM"]
    cls, count = _transformers_count(expected_raw)
    assert spec.head_class == cls
    assert spec.num_params == count


# ---------------------------------------------------------------- fields vs the config itself

ATTENTION = {
    "bert-base-uncased": "mha", "deepseek-v3": "mla", "falcon-7b-instruct": "mqa",
    "falcon-7b-legacy-refinedweb": "mqa", "gemma-2b": "mqa", "gpt2-large": "mha",
    "gpt2-xl": "mha", "llama-3.1-8b-instruct": "gqa", "llama-3.2-1b": "gqa",
    "mistral-7b-instruct-v0.3": "gqa", "mistral-7b-v0.1": "gqa", "mixtral-8x7b-v0.1": "gqa",
    "opt-1.3b": "mha", "opt-125m": "mha", "phi-2": "mha", "qwen2.5-7b-instruct": "gqa",
    "t5-base": "mha", "t5-small": "mha", "vit-base-patch16-224-in21k": "mha",
}


def test_every_config_has_an_expected_attention_kind() -> None:
    assert sorted(ATTENTION) == [p.stem for p in CONFIGS]


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_sizes_and_heads_match_the_config(path: Path) -> None:
    raw = json.loads(path.read_text())
    spec = load_spec(path)
    assert spec.hidden_size == _first(raw, "hidden_size", "n_embd", "d_model")
    assert spec.num_layers == _first(raw, "num_hidden_layers", "n_layer", "num_layers")
    assert spec.num_heads == _first(raw, "num_attention_heads", "n_head", "num_heads")
    assert spec.vocab_size == raw.get("vocab_size", 0)
    assert spec.attention == ATTENTION[path.stem]
    if spec.attention == "gqa" or ("num_key_value_heads" in raw and spec.attention != "mla"):
        assert spec.num_kv_heads == raw["num_key_value_heads"]
    if spec.attention == "mqa":
        assert spec.num_kv_heads == 1
    if spec.attention == "mha":
        assert spec.num_kv_heads == spec.num_heads
    assert len(spec.layer_params) == spec.num_layers + spec.num_decoder_layers
    assert 0 < spec.num_embedding_params < spec.num_params
    assert spec.num_params > sum(spec.layer_params)


def test_explicit_head_dims_and_widths() -> None:
    assert load_spec(CONFIG_DIR / "gemma-2b.json").head_dim == _raw("gemma-2b")["head_dim"]
    llama = _raw("llama-3.1-8b-instruct")
    spec = load_spec(CONFIG_DIR / "llama-3.1-8b-instruct.json")
    assert spec.head_dim * spec.num_heads == llama["hidden_size"]
    assert (spec.mlp, spec.norm, spec.intermediate_size) == (
        "gated", "rmsnorm", llama["intermediate_size"])
    assert not spec.tied_embeddings and load_spec(CONFIG_DIR / "llama-3.2-1b.json").tied_embeddings
    t5 = _raw("t5-base")
    spec = load_spec(CONFIG_DIR / "t5-base.json")
    assert (spec.arch, spec.head_dim, spec.intermediate_size) == (
        "encoder-decoder", t5["d_kv"], t5["d_ff"])
    assert spec.num_decoder_layers == t5["num_layers"]
    opt = _raw("opt-1.3b")
    assert load_spec(CONFIG_DIR / "opt-1.3b.json").intermediate_size == opt["ffn_dim"]
    phi = _raw("phi-2")
    spec = load_spec(CONFIG_DIR / "phi-2.json")
    head_dim = phi["hidden_size"] // phi["num_attention_heads"]
    assert spec.rotary_dim == int(head_dim * phi["partial_rotary_factor"])
    assert spec.parallel_block and spec.lm_head_bias and spec.norms_per_layer == 1
    vit = _raw("vit-base-patch16-224-in21k")
    spec = load_spec(CONFIG_DIR / "vit-base-patch16-224-in21k.json")
    assert spec.vision_seq_len == (vit["image_size"] // vit["patch_size"]) ** 2 + 1
    assert (spec.head_class, spec.vocab_size, spec.positions) == ("ViTModel", 0, "learned")


def test_dropout_fields_come_from_each_familys_own_names() -> None:
    gpt2 = _raw("gpt2-large")
    spec = load_spec(CONFIG_DIR / "gpt2-large.json")
    assert (spec.dropout, spec.attention_dropout, spec.embedding_dropout) == (
        gpt2["resid_pdrop"], gpt2["attn_pdrop"], gpt2["embd_pdrop"])
    bert = _raw("bert-base-uncased")
    spec = load_spec(CONFIG_DIR / "bert-base-uncased.json")
    assert (spec.dropout, spec.attention_dropout) == (
        bert["hidden_dropout_prob"], bert["attention_probs_dropout_prob"])
    t5 = _raw("t5-small")
    spec = load_spec(CONFIG_DIR / "t5-small.json")
    assert spec.dropout == spec.attention_dropout == spec.activation_dropout == t5["dropout_rate"]
    assert load_spec(CONFIG_DIR / "opt-125m.json").dropout == _raw("opt-125m")["dropout"]
    assert load_spec(CONFIG_DIR / "phi-2.json").dropout == _raw("phi-2")["resid_pdrop"]


def test_moe_and_mla_fields() -> None:
    mixtral = _raw("mixtral-8x7b-v0.1")
    spec = load_spec(CONFIG_DIR / "mixtral-8x7b-v0.1.json")
    assert (spec.num_experts, spec.experts_per_token, spec.moe_intermediate_size) == (
        mixtral["num_local_experts"], mixtral["num_experts_per_tok"],
        mixtral["intermediate_size"])
    assert spec.is_moe and spec.num_dense_layers == 0 and spec.num_shared_experts == 0
    ds = _raw("deepseek-v3")
    spec = load_spec(CONFIG_DIR / "deepseek-v3.json")
    assert (spec.num_experts, spec.experts_per_token, spec.num_shared_experts) == (
        ds["n_routed_experts"], ds["num_experts_per_tok"], ds["n_shared_experts"])
    assert (spec.num_dense_layers, spec.moe_intermediate_size, spec.intermediate_size) == (
        ds["first_k_dense_replace"], ds["moe_intermediate_size"], ds["intermediate_size"])
    assert (spec.q_lora_rank, spec.kv_lora_rank, spec.qk_rope_head_dim) == (
        ds["q_lora_rank"], ds["kv_lora_rank"], ds["qk_rope_head_dim"])
    assert spec.head_dim == ds["qk_nope_head_dim"] + ds["qk_rope_head_dim"]
    assert spec.value_head_dim == ds["v_head_dim"]
    # Dense layers come first and are smaller than the MoE ones.
    dense, moe = spec.layer_params[0], spec.layer_params[-1]
    assert spec.layer_params == (dense,) * 3 + (moe,) * (ds["num_hidden_layers"] - 3)
    assert moe > dense
    assert not spec.tied_embeddings and spec.dtype == ds["torch_dtype"]


def test_legacy_falcon_reads_like_the_current_format() -> None:
    legacy = load_spec(CONFIG_DIR / "falcon-7b-legacy-refinedweb.json")
    current = load_spec(CONFIG_DIR / "falcon-7b-instruct.json")
    assert (legacy.family, legacy.num_params, legacy.num_kv_heads, legacy.parallel_block) == (
        "falcon", current.num_params, 1, True)
    assert legacy.head_class == "FalconForCausalLM"


def test_sliding_window_only_where_the_model_uses_it() -> None:
    assert load_spec(CONFIG_DIR / "mistral-7b-v0.1.json").sliding_window == (
        _raw("mistral-7b-v0.1")["sliding_window"])
    assert load_spec(CONFIG_DIR / "mistral-7b-instruct-v0.3.json").sliding_window is None
    # Qwen2.5 states a window but does not use it (use_sliding_window: false).
    assert load_spec(CONFIG_DIR / "qwen2.5-7b-instruct.json").sliding_window is None


# ---------------------------------------------------------------- spec_with_layers (pure)

@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_spec_with_the_same_depth_is_the_same_count(path: Path) -> None:
    spec = load_spec(path)
    assert spec_with_layers(spec, spec.num_layers).num_params == spec.num_params


def test_spec_with_layers_keeps_deepseeks_dense_then_moe_shape() -> None:
    spec = load_spec(CONFIG_DIR / "deepseek-v3.json")
    dense, moe = spec.layer_params[0], spec.layer_params[-1]
    assert spec_with_layers(spec, 1).layer_params == (moe,)
    assert spec_with_layers(spec, 2).layer_params == (dense, moe)
    four = spec_with_layers(spec, 4)
    assert four.layer_params == (dense, dense, dense, moe) and four.num_dense_layers == 3
    one_layer = spec_with_layers(spec, 1)
    assert one_layer.num_params == spec.num_params - sum(spec.layer_params) + moe


def test_spec_with_layers_cuts_both_t5_stacks() -> None:
    spec = load_spec(CONFIG_DIR / "t5-small.json")
    two = spec_with_layers(spec, 2)
    assert (two.num_layers, two.num_decoder_layers, len(two.layer_params)) == (2, 2, 4)
    # The first block of each stack keeps its relative-position table.
    assert two.layer_params == spec.layer_params[:2] + spec.layer_params[6:8]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_spec_with_layers_rejects_bad_depths(bad: Any) -> None:
    from trainmedic.errors import ConfigError

    with pytest.raises(ConfigError, match="num_layers"):
        spec_with_layers(load_spec(CONFIG_DIR / "gpt2-large.json"), bad)


# ---------------------------------------------------------------- bad input

def _one_line_error(config: Any, source: str = "cfg.json") -> InputError:
    with pytest.raises(InputError) as info:
        spec_from_config(config, source=source)
    error = info.value
    assert error.path == source and "\n" not in str(error)
    return error


def test_unknown_model_type_names_it_lists_supported_and_points_to_measure_mode() -> None:
    raw = _raw("llama-3.2-1b") | {"model_type": "mamba"}
    message = _one_line_error(raw).message
    assert "'mamba'" in message
    for model_type in ("llama", "gpt2", "deepseek_v3", "t5", "vit", "RefinedWebModel"):
        assert model_type in message
    assert "trainmedic memory measure module:factory" in message


def test_missing_model_type() -> None:
    raw = _raw("llama-3.2-1b")
    del raw["model_type"]
    assert "model_type" in _one_line_error(raw).message


@pytest.mark.parametrize(("base", "field", "family"), [
    ("llama-3.2-1b", "hidden_size", "llama"),
    ("mistral-7b-v0.1", "intermediate_size", "mistral"),
    ("gpt2-large", "n_embd", "gpt2"),
    ("t5-small", "d_ff", "t5"),
    ("vit-base-patch16-224-in21k", "patch_size", "vit"),
    ("deepseek-v3", "kv_lora_rank", "deepseek_v3"),
    ("mixtral-8x7b-v0.1", "num_local_experts", "mixtral"),
    ("opt-125m", "vocab_size", "opt"),
])
def test_missing_field_names_the_field_and_family(base: str, field: str, family: str) -> None:
    raw = _raw(base)
    del raw[field]
    message = _one_line_error(raw).message
    assert f"'{field}'" in message and f"{family} family" in message


@pytest.mark.parametrize(("base", "field", "value"), [
    ("llama-3.2-1b", "num_hidden_layers", 0),
    ("llama-3.2-1b", "vocab_size", -5),
    ("gpt2-large", "n_head", 0),
    ("bert-base-uncased", "intermediate_size", -1),
    ("deepseek-v3", "moe_intermediate_size", 0),
    ("falcon-7b-legacy-refinedweb", "n_layer", 0),
])
def test_zero_or_negative_sizes_name_the_field(base: str, field: str, value: int) -> None:
    raw = _raw(base) | {field: value}
    message = _one_line_error(raw).message
    assert f"'{field}'" in message and str(value) in message and "positive" in message


@pytest.mark.parametrize("value", ["4096", 4096.5, True, [4096]])
def test_non_integer_sizes_name_the_field(value: Any) -> None:
    raw = _raw("llama-3.2-1b") | {"hidden_size": value}
    assert "'hidden_size'" in _one_line_error(raw).message


def test_kv_heads_that_do_not_divide_the_heads() -> None:
    raw = _raw("llama-3.2-1b") | {"num_key_value_heads": 5}
    assert "'num_key_value_heads'" in _one_line_error(raw).message


def test_width_not_divisible_by_heads_where_the_family_needs_it() -> None:
    raw = _raw("gpt2-large") | {"n_head": 7}
    message = _one_line_error(raw).message
    assert "'n_embd'" in message and "'n_head'" in message


def test_out_of_range_dropout_and_bad_t5_activation() -> None:
    assert "'attention_dropout'" in _one_line_error(
        _raw("llama-3.2-1b") | {"attention_dropout": 1.5}).message
    assert "'feed_forward_proj'" in _one_line_error(
        _raw("t5-small") | {"feed_forward_proj": "swish-gated-gelu"}).message


def test_config_that_is_not_an_object() -> None:
    assert "object" in _one_line_error([1, 2]).message


def test_unreadable_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(UnreadableInputError) as info:
        load_spec(missing)
    assert info.value.path == str(missing)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"model_type": "llama",')
    with pytest.raises(UnreadableInputError, match="not valid JSON"):
        load_spec(bad_json)
    array = tmp_path / "array.json"
    array.write_text("[1, 2]")
    with pytest.raises(UnreadableInputError, match="not an object"):
        read_config(array)
    folder = tmp_path / "dir.json"
    folder.mkdir()
    with pytest.raises(UnreadableInputError):
        load_spec(folder)


def test_errors_from_a_file_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_raw("llama-3.2-1b") | {"hidden_size": 0}))
    with pytest.raises(InputError) as info:
        load_spec(path)
    assert info.value.path == str(path) and str(info.value).startswith(str(path))


# ---------------------------------------------------------------- registry

def _toy_family(model_type: str = "toy") -> Family:
    def parse(fields: Any, head_class: str, head: Any) -> ModelSpec:
        d = fields.size("hidden_size")
        return ModelSpec(family="toy", arch="decoder", hidden_size=d, num_layers=1,
                         num_heads=1, num_kv_heads=1, head_dim=d, intermediate_size=d,
                         vocab_size=1, num_params=d * d, head_class=head_class, head=head,
                         layer_params=(d * d,))

    return Family(name="toy", model_types=(model_type,), parse=parse,
                  heads={"ToyModel": "base"}, default_head="ToyModel",
                  with_layers=lambda config, n: dict(config))


def test_registering_a_taken_model_type_is_an_error() -> None:
    with pytest.raises(RegistryError, match="'llama'"):
        register_family(_toy_family("llama"))
    registry = FamilyRegistry([_toy_family()])
    with pytest.raises(RegistryError, match="'toy'"):
        registry.register(_toy_family())


def test_a_registered_family_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(families, "FAMILIES", FamilyRegistry(families.FAMILIES.families()))
    register_family(_toy_family())
    assert "toy" in supported_model_types()
    spec = spec_from_config({"model_type": "toy", "hidden_size": 8})
    assert (spec.family, spec.num_params, spec.head_class) == ("toy", 64, "ToyModel")


def test_the_supported_families() -> None:
    assert set(supported_model_types()) == {
        "gpt2", "llama", "mistral", "mixtral", "qwen2", "gemma", "phi", "falcon",
        "RefinedWebModel", "RefinedWeb", "opt", "bert", "roberta", "t5", "vit", "deepseek_v3"}


def test_parsing_imports_neither_torch_nor_transformers() -> None:
    code = (
        "import sys, pathlib\n"
        "from trainmedic.memory.families import load_spec\n"
        f"for p in sorted(pathlib.Path({str(CONFIG_DIR)!r}).glob('*.json')):\n"
        "    load_spec(p)\n"
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
