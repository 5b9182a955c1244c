"""Planned activation bytes against the tensors a real forward saves for backward.

The oracle walks the autograd graph of a real CPU forward of a tiny Hugging Face model and adds
up the storages its nodes saved (``_saved_*``), each storage once, leaving out parameters and
autocast's weight copies (which the planner counts as temporaries). The planner never sees the
model: it reads the same config through the family parser.
"""

from __future__ import annotations

from typing import Any

import pytest

from trainmedic.memory.activations import KernelProfile, layer_tensors, tensors_bytes
from trainmedic.memory.families import spec_from_config
from trainmedic.memory.planner import PlanConfig, plan

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from trainmedic.memory.hf_build import build_hf_model, hf_inputs, hf_loss  # noqa: E402

TINY: dict[str, dict[str, Any]] = {
    "llama": dict(model_type="llama", hidden_size=64, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=96, num_hidden_layers=2,
                  vocab_size=101, head_dim=16),
    "mistral": dict(model_type="mistral", hidden_size=64, num_attention_heads=4,
                    num_key_value_heads=1, intermediate_size=80, num_hidden_layers=2,
                    vocab_size=97, head_dim=16, sliding_window=None),
    "qwen2": dict(model_type="qwen2", hidden_size=64, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=96, num_hidden_layers=2,
                  vocab_size=101),
    "gemma": dict(model_type="gemma", hidden_size=64, num_attention_heads=4,
                  num_key_value_heads=1, intermediate_size=96, num_hidden_layers=2,
                  vocab_size=101, head_dim=16),
    "gpt2": dict(model_type="gpt2", n_embd=64, n_head=4, n_layer=2, vocab_size=101,
                 n_positions=64),
    "opt": dict(model_type="opt", hidden_size=64, num_attention_heads=4, ffn_dim=96,
                num_hidden_layers=2, vocab_size=101, word_embed_proj_dim=64,
                max_position_embeddings=64),
    "phi": dict(model_type="phi", hidden_size=64, num_attention_heads=4, intermediate_size=96,
                num_hidden_layers=2, vocab_size=101, partial_rotary_factor=0.5),
    "falcon": dict(model_type="falcon", hidden_size=64, num_attention_heads=4,
                   num_hidden_layers=2, vocab_size=101, multi_query=True,
                   parallel_attn=True, new_decoder_architecture=False),
    "bert": dict(model_type="bert", hidden_size=64, num_attention_heads=4,
                 intermediate_size=96, num_hidden_layers=2, vocab_size=101,
                 max_position_embeddings=64, architectures=["BertForMaskedLM"]),
    "t5": dict(model_type="t5", d_model=64, d_kv=16, num_heads=4, d_ff=96, num_layers=2,
               num_decoder_layers=2, vocab_size=101, feed_forward_proj="relu",
               decoder_start_token_id=0, pad_token_id=0,
               architectures=["T5ForConditionalGeneration"]),
    "vit": dict(model_type="vit", hidden_size=64, num_attention_heads=4, intermediate_size=96,
                num_hidden_layers=2, image_size=32, patch_size=8, num_channels=3,
                architectures=["ViTModel"]),
    "mixtral": dict(model_type="mixtral", hidden_size=64, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=96, num_hidden_layers=2,
                    vocab_size=101, num_local_experts=4, num_experts_per_tok=2, head_dim=16),
    "deepseek_v3": dict(model_type="deepseek_v3", hidden_size=64, num_attention_heads=4,
                        num_key_value_heads=4, intermediate_size=96, moe_intermediate_size=32,
                        num_hidden_layers=2, first_k_dense_replace=1, n_routed_experts=4,
                        num_experts_per_tok=2, n_shared_experts=1, n_group=1, topk_group=1,
                        q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8,
                        qk_nope_head_dim=16, v_head_dim=16, vocab_size=101),
}


def _saved_bytes(loss: torch.Tensor, params: set[int], weight_shapes: set[tuple]) -> int:
    seen: dict[int, int] = {}
    stack, visited = [loss.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in visited:
            continue
        visited.add(node)
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            try:
                value = getattr(node, attr)
            except Exception:  # noqa: BLE001 - some saved slots raise once freed
                continue
            for t in value if isinstance(value, (tuple, list)) else [value]:
                if not isinstance(t, torch.Tensor):
                    continue
                st = t.untyped_storage()
                ptr = st.data_ptr()
                if ptr in params:
                    continue
                if t.dtype != torch.float32 and t.dim() == 2 and tuple(t.shape) in weight_shapes:
                    continue  # autocast's copy of a weight: a temporary for the planner
                seen[ptr] = st.nbytes()
        stack.extend(nx for nx, _ in node.next_functions)
    return sum(seen.values())


def _measured(config: dict[str, Any], precision: str, attention: str, b: int, s: int) -> int:
    torch.manual_seed(0)
    model = build_hf_model(config, attn_implementation=attention)
    if precision == "bf16":
        model.to(torch.bfloat16)
    inputs = hf_inputs(model, b, s)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    shapes = {tuple(p.shape) for p in model.parameters() if p.dim() == 2}
    shapes |= {s[::-1] for s in shapes}
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed")
    with autocast:
        loss = hf_loss(model(**inputs))
    return _saved_bytes(loss, params, shapes)


def _planned(config: dict[str, Any], precision: str, attention: str, b: int, s: int) -> int:
    spec = spec_from_config(config)
    cfg = PlanConfig(batch_size=b, seq_len=s, precision=precision, attention=attention,
                     device_profile="cpu", include_context=False)
    return plan(spec, cfg).activations_total_bytes


@pytest.mark.parametrize("family", sorted(TINY))
@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_activations_match_saved_tensors(family: str, precision: str, attention: str) -> None:
    b, s = 2, 24
    measured = _measured(TINY[family], precision, attention, b, s)
    planned = _planned(TINY[family], precision, attention, b, s)
    assert planned == pytest.approx(measured, rel=0.03), (family, precision, attention)


def test_pure_bf16_llama() -> None:
    measured = _measured(TINY["llama"], "bf16", "sdpa", 2, 24)
    planned = _planned(TINY["llama"], "bf16", "sdpa", 2, 24)
    assert planned == pytest.approx(measured, rel=0.03)


def test_eager_scores_grow_with_the_square_of_the_sequence() -> None:
    spec = spec_from_config(TINY["llama"])
    prof = KernelProfile(attention="eager", device="cuda", compute_bytes=2, residual_bytes=4)
    fused = KernelProfile(attention="sdpa", device="cuda", compute_bytes=2, residual_bytes=4)

    def layer(p: KernelProfile, s: int) -> float:
        return tensors_bytes(layer_tensors(spec, p), batch=1, seq_len=s, profile=p)

    # The eager-only part is quadratic: doubling s multiplies it by 4.
    extra = [layer(prof, s) - layer(fused, s) for s in (512, 1024)]
    assert extra[1] > 3.9 * extra[0]
    # Per token: the fp32 softmax (4 bytes) and its bf16 cast (2) per score and head, plus the
    # K and V heads eager repeats for GQA (bf16), minus SDPA's fp32 log-sum-exp per head.
    s, h, kv, hd = 1024, spec.num_heads, spec.num_kv_heads, spec.head_dim
    per_token = 6 * h * s + 2 * (h - kv) * hd * 2 - 4 * h
    assert extra[1] == pytest.approx(s * per_token, rel=1e-6)


def test_cuda_dropout_masks_are_one_byte() -> None:
    spec = spec_from_config(TINY["gpt2"])  # GPT-2's config has 0.1 dropout everywhere
    cpu = KernelProfile(attention="eager", device="cpu", compute_bytes=4, residual_bytes=4)
    cuda = KernelProfile(attention="eager", device="cuda", compute_bytes=4, residual_bytes=4)
    masks = [t for t in layer_tensors(spec, cpu) if t.role == "mask"]
    assert masks
    cpu_b = tensors_bytes(masks, batch=1, seq_len=32, profile=cpu)
    cuda_b = tensors_bytes(masks, batch=1, seq_len=32, profile=cuda)
    assert cpu_b == 4 * cuda_b
