"""KV-cache and inference sizing (trainmedic.memory.kv).

Oracle: tiny Hugging Face models built on CPU; one forward with ``use_cache=True``; the bytes
of the cache tensors transformers returns must equal :func:`kv_cache_bytes` exactly.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from trainmedic.errors import ConfigError
from trainmedic.memory.kv import inference_plan, kv_cache_bytes
from trainmedic.memory.spec import ModelSpec

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model-configs"


def make_spec(**over: Any) -> ModelSpec:
    base: dict[str, Any] = dict(family="llama", arch="decoder", hidden_size=64, num_layers=2,
                                num_heads=8, num_kv_heads=2, head_dim=8, intermediate_size=128,
                                vocab_size=100, num_params=1_000_000, attention="gqa")
    base.update(over)
    return ModelSpec(**base)


# --- the Hugging Face oracle ----------------------------------------------------------------


def _cache_bytes(cache: Any) -> int:
    """Bytes of every key/value tensor a transformers cache object holds."""
    tensors = []

    def walk(c: Any) -> None:
        if hasattr(c, "self_attention_cache"):
            walk(c.self_attention_cache)
            walk(c.cross_attention_cache)
            return
        for layer in c.layers:
            tensors.extend([layer.keys, layer.values])

    walk(cache)
    assert tensors
    return sum(t.numel() * t.element_size() for t in tensors)


def _hf_case(name: str):
    """(transformers config, the ModelSpec a reader of that config would write)."""
    t = pytest.importorskip("transformers")
    if name == "llama-gqa":
        cfg = t.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                            num_attention_heads=8, num_key_value_heads=2, vocab_size=128)
        return cfg, make_spec(num_layers=3, num_heads=8, num_kv_heads=2, head_dim=8)
    if name == "mistral-gqa":
        cfg = t.MistralConfig(hidden_size=96, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=6, num_key_value_heads=3, vocab_size=128,
                              sliding_window=None)
        return cfg, make_spec(family="mistral", hidden_size=96, num_heads=6, num_kv_heads=3,
                              head_dim=16)
    if name == "gpt2-mha":
        cfg = t.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=128, n_positions=64,
                           bos_token_id=0, eos_token_id=0)
        return cfg, make_spec(family="gpt2", num_heads=4, num_kv_heads=4, head_dim=16,
                              attention="mha")
    if name == "falcon-mqa":
        cfg = t.FalconConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                             multi_query=True, new_decoder_architecture=False, vocab_size=128)
        return cfg, make_spec(family="falcon", num_heads=8, num_kv_heads=1, head_dim=8,
                              attention="mqa")
    if name == "deepseek-mla":
        cfg = t.DeepseekV3Config(
            hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
            kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=16,
            v_head_dim=12, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
            first_k_dense_replace=1, n_group=1, topk_group=1, vocab_size=128)
        return cfg, make_spec(family="deepseek_v3", num_heads=4, num_kv_heads=4, head_dim=24,
                              v_head_dim=12, attention="mla", kv_lora_rank=16,
                              qk_rope_head_dim=8)
    if name == "t5-encdec":
        cfg = t.T5Config(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=3,
                         num_heads=4, vocab_size=128)
        return cfg, make_spec(family="t5", arch="encoder-decoder", hidden_size=32,
                              num_layers=2, num_decoder_layers=3, num_heads=4, num_kv_heads=4,
                              head_dim=8, attention="mha")
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["llama-gqa", "mistral-gqa", "gpt2-mha", "falcon-mqa",
                                  "deepseek-mla", "t5-encdec"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_kv_bytes_equal_the_transformers_cache(name: str, dtype: str) -> None:
    torch = pytest.importorskip("torch")
    t = pytest.importorskip("transformers")
    cfg, spec = _hf_case(name)
    torch.manual_seed(0)
    batch, context, encoder_len = 3, 7, 11
    with torch.no_grad():
        if spec.arch == "encoder-decoder":
            model = t.T5ForConditionalGeneration(cfg).eval()
        else:
            model = t.AutoModelForCausalLM.from_config(cfg).eval()
        if dtype == "bf16":
            model = model.to(torch.bfloat16)
        ids = torch.randint(0, 128, (batch, context))
        if spec.arch == "encoder-decoder":
            enc = torch.randint(0, 128, (batch, encoder_len))
            out = model(input_ids=enc, decoder_input_ids=ids, use_cache=True)
        else:
            out = model(input_ids=ids, use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    measured = _cache_bytes(cache)
    predicted = kv_cache_bytes(spec, batch_size=batch, context_len=context, kv_dtype=dtype,
                               encoder_len=encoder_len)
    assert predicted == measured


# --- published figures ----------------------------------------------------------------------


def _config(name: str) -> dict[str, Any]:
    path = CONFIGS / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8"))


def test_llama3_8b_is_128_kib_per_token_in_bf16() -> None:
    c = _config("llama-3.1-8b-instruct")
    spec = make_spec(num_layers=c["num_hidden_layers"], num_heads=c["num_attention_heads"],
                     num_kv_heads=c["num_key_value_heads"],
                     head_dim=c["hidden_size"] // c["num_attention_heads"])
    # The figure serving guides quote for Llama 3 8B: 128 KiB of KV cache per token.
    assert kv_cache_bytes(spec, batch_size=1, context_len=1) == 128 * 2**10


def test_deepseek_v3_mla_cache_is_the_latent() -> None:
    c = _config("deepseek-v3")
    spec = make_spec(family="deepseek_v3", num_layers=c["num_hidden_layers"],
                     num_heads=c["num_attention_heads"], num_kv_heads=c["num_attention_heads"],
                     head_dim=c["qk_nope_head_dim"] + c["qk_rope_head_dim"],
                     v_head_dim=c["v_head_dim"], attention="mla",
                     kv_lora_rank=c["kv_lora_rank"], qk_rope_head_dim=c["qk_rope_head_dim"])
    # DeepSeek-V2 paper: (d_c + d_h^R) * l elements per token = (512 + 64) * 61.
    assert kv_cache_bytes(spec, batch_size=1, context_len=1) == 576 * 61 * 2
    # Decompressed (transformers 4.x eager): n_h * (d_qk + d_v) * l = 128 * 320 * 61.
    assert kv_cache_bytes(spec, batch_size=1, context_len=1,
                          mla_cache="decompressed") == 128 * 320 * 61 * 2


def test_specs_from_families_agree() -> None:
    from trainmedic.memory import families

    llama = families.load_spec(CONFIGS / "llama-3.1-8b-instruct.json")
    assert kv_cache_bytes(llama, batch_size=1, context_len=1) == 128 * 2**10
    falcon = families.load_spec(CONFIGS / "falcon-7b-instruct.json")  # MQA: 1 kv head
    assert kv_cache_bytes(falcon, batch_size=1, context_len=1) == 2 * 32 * 1 * 64 * 2


# --- dtypes, validation ---------------------------------------------------------------------


def test_kv_dtype_scaling_and_linearity() -> None:
    spec = make_spec()
    bf16 = kv_cache_bytes(spec, batch_size=4, context_len=100)
    assert kv_cache_bytes(spec, batch_size=4, context_len=100, kv_dtype="fp32") == 2 * bf16
    assert kv_cache_bytes(spec, batch_size=4, context_len=100, kv_dtype="fp8") == bf16 // 2
    assert kv_cache_bytes(spec, batch_size=4, context_len=100, kv_dtype="int4") == bf16 // 4
    assert kv_cache_bytes(spec, batch_size=8, context_len=100) == 2 * bf16
    assert kv_cache_bytes(spec, batch_size=4, context_len=300) == 3 * bf16


@pytest.mark.parametrize(("arch", "over"), [
    ("encoder", dict(family="bert", attention="mha", num_kv_heads=8)),
    ("encoder", dict(family="vit", attention="mha", num_kv_heads=8, image_size=224,
                     patch_size=16, num_channels=3, vocab_size=0)),
])
def test_encoder_only_models_have_no_kv_cache(arch: str, over: dict[str, Any]) -> None:
    spec = make_spec(arch=arch, **over)
    with pytest.raises(ConfigError, match=r"^spec\.arch: .*no KV cache"):
        kv_cache_bytes(spec, batch_size=1, context_len=16)
    with pytest.raises(ConfigError):
        inference_plan(spec, batch_size=1, context_len=16)


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(batch_size=0, context_len=16), "batch_size"),
    (dict(batch_size=1, context_len=-4), "context_len"),
    (dict(batch_size=1.5, context_len=16), "batch_size"),
    (dict(batch_size=1, context_len=16, kv_dtype="fp12"), "kv_dtype"),
    (dict(batch_size=1, context_len=16, encoder_len=0), "encoder_len"),
])
def test_bad_sizes_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    spec = make_spec(arch="encoder-decoder", num_decoder_layers=2, attention="mha",
                     num_kv_heads=8)
    with pytest.raises(ConfigError, match=rf"^{field}:"):
        kv_cache_bytes(spec, **kwargs)


def test_mla_needs_its_ranks_and_a_known_cache_kind() -> None:
    spec = make_spec(attention="mla", num_kv_heads=8, kv_lora_rank=0, qk_rope_head_dim=8)
    with pytest.raises(ConfigError, match=r"^spec\.kv_lora_rank:"):
        kv_cache_bytes(spec, batch_size=1, context_len=1)
    spec = replace(spec, kv_lora_rank=16)
    with pytest.raises(ConfigError, match=r"^mla_cache:"):
        kv_cache_bytes(spec, batch_size=1, context_len=1, mla_cache="zipped")  # type: ignore[arg-type]


# --- the inference plan ---------------------------------------------------------------------


def _needed(spec: ModelSpec, plan, batch: int, context: int) -> int:
    kv = kv_cache_bytes(spec, batch_size=batch, context_len=context, kv_dtype=plan.kv_dtype,
                        encoder_len=None if plan.encoder_len is None or spec.arch != \
                        "encoder-decoder" else plan.encoder_len)
    return plan.weights_bytes + kv + plan.headroom_bytes


@pytest.mark.parametrize(("weight_dtype", "bytes_per_param"), [
    ("fp32", 4), ("bf16", 2), ("fp16", 2), ("fp8", 1), ("int8", 1), ("int4", 0.5)])
def test_weights_bytes(weight_dtype: str, bytes_per_param: float) -> None:
    spec = make_spec(num_params=7_000_000_002)
    plan = inference_plan(spec, batch_size=1, context_len=16, weight_dtype=weight_dtype)
    assert plan.weights_bytes == round(7_000_000_002 * bytes_per_param)
    assert plan.total_bytes == plan.weights_bytes + plan.kv_bytes
    assert plan.fits is None and plan.max_batch_size is None


@pytest.mark.parametrize("kv_dtype", ["bf16", "int4"])
def test_max_batch_and_context_are_the_exact_limits(kv_dtype: str) -> None:
    spec = make_spec(num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128,
                     num_params=8_030_261_248, max_positions=131072)
    gpu = 80 * 10**9
    plan = inference_plan(spec, batch_size=8, context_len=8192, kv_dtype=kv_dtype,
                          gpu_memory_bytes=gpu)
    assert plan.headroom_bytes == gpu // 10
    b, c = plan.max_batch_size, plan.max_context_len
    assert b is not None and c is not None and b > 8 and c > 8192
    assert _needed(spec, plan, b, 8192) <= gpu < _needed(spec, plan, b + 1, 8192)
    assert _needed(spec, plan, 8, c) <= gpu < _needed(spec, plan, 8, c + 1)
    assert plan.fits is True
    assert all(v == "estimated" for v in plan.basis.values())
    assert plan.to_json()["max_batch_size"] == b


def test_encoder_decoder_plan_grows_the_encoder_with_the_context() -> None:
    spec = make_spec(family="t5", arch="encoder-decoder", num_decoder_layers=6, num_layers=6,
                     num_heads=8, num_kv_heads=8, head_dim=64, attention="mha",
                     num_params=60_506_624)
    gpu = 2**30
    plan = inference_plan(spec, batch_size=2, context_len=100, gpu_memory_bytes=gpu)
    assert plan.encoder_len == 100 and plan.cross_kv_bytes * 2 == plan.kv_bytes
    c = plan.max_context_len
    assert c is not None
    per = 2 * (2 * 6 * 8 * 64 * 2) * 2  # batch x (self + cross) bytes per token
    assert plan.weights_bytes + plan.headroom_bytes + per * c <= gpu
    assert plan.weights_bytes + plan.headroom_bytes + per * (c + 1) > gpu
    fixed = inference_plan(spec, batch_size=2, context_len=100, encoder_len=512,
                           gpu_memory_bytes=gpu)
    assert fixed.cross_kv_bytes == 2 * 512 * 2 * 6 * 8 * 64 * 2
    assert fixed.kv_bytes_per_token == 2 * 6 * 8 * 64 * 2


def test_weights_that_do_not_fit() -> None:
    spec = make_spec(num_params=70_000_000_000)
    plan = inference_plan(spec, batch_size=1, context_len=4096, gpu_memory_bytes=80 * 10**9)
    assert plan.fits is False and plan.max_batch_size == 0 and plan.max_context_len == 0
    assert any("weights alone" in n for n in plan.notes)


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 2, True])
def test_headroom_fraction_is_checked(fraction: float) -> None:
    with pytest.raises(ConfigError, match=r"^headroom_fraction:"):
        inference_plan(make_spec(), batch_size=1, context_len=16, gpu_memory_bytes=10**9,
                       headroom_fraction=fraction)
