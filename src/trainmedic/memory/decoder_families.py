"""Decoder-only families: GPT-2, Llama, Mistral, Mixtral, Qwen2, Gemma, Phi, Falcon, OPT and
DeepSeek-V3, parsed from their Hugging Face ``config.json``.

Each parser reads the family's own field names and defaults (as the transformers config class
of that family defines them) and adds up the parameters of the model transformers builds from
the config: every ``nn.Linear``/``nn.Embedding``/norm of every block, the embeddings, the final
norm and the head, with a tied LM head counted once. ``tests/memory/test_families.py`` checks
each count against the model transformers builds on the meta device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainmedic.memory.config_fields import ConfigFields
from trainmedic.memory.family_registry import Family, LayerEdit, Parser
from trainmedic.memory.param_counts import (
    embedding_params,
    layernorm_params,
    linear_params,
    rmsnorm_params,
)
from trainmedic.memory.spec import AttentionKind, HeadKind, ModelSpec

__all__ = ["DECODER_FAMILIES", "attention_kind", "set_depth"]


def attention_kind(
    fields: ConfigFields, num_heads: int, num_kv_heads: int, kv_field: str
) -> AttentionKind:
    """MHA, MQA or GQA from the head counts; the kv heads must divide the query heads."""
    if num_kv_heads > num_heads or num_heads % num_kv_heads:
        raise fields.error(
            f"'{kv_field}' is {num_kv_heads}, which does not divide the {num_heads} attention "
            f"heads; grouped-query attention needs it to (fix it in the config)"
        )
    if num_kv_heads == num_heads:
        return "mha"
    return "mqa" if num_kv_heads == 1 else "gqa"


def set_depth(config: dict[str, Any], num_layers: int, *keys: str) -> dict[str, Any]:
    """A copy of ``config`` with ``num_layers`` written to the first of ``keys`` it uses
    (the first key when it uses none), and a per-layer ``layer_types`` list cut or extended."""
    out = dict(config)
    key = next((k for k in keys if out.get(k) is not None), keys[0])
    out[key] = num_layers
    layer_types = out.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        out["layer_types"] = [layer_types[min(i, len(layer_types) - 1)] for i in range(num_layers)]
    return out


def _depth_edit(*keys: str) -> LayerEdit:
    def edit(config: dict[str, Any], num_layers: int) -> dict[str, Any]:
        return set_depth(config, num_layers, *keys)

    return edit


def _rotary_dim(fields: ConfigFields, head_dim: int, default_factor: float) -> int:
    """Rotated width per head: ``head_dim * partial_rotary_factor`` (transformers' rope init)."""
    factor = fields.fraction("partial_rotary_factor", default=0.0)
    for nested in ("rope_parameters", "rope_scaling"):
        if factor:
            break
        inner = ConfigFields(fields.nested(nested), source=fields.source, family=fields.family)
        factor = inner.fraction("partial_rotary_factor", default=0.0)
    return int(head_dim * (factor or default_factor))


def _kv_heads(
    fields: ConfigFields, num_heads: int, *, absent: int | None, name: str = "num_key_value_heads"
) -> int:
    """KV heads: the field's value; when null, the query heads; when absent, the config class's
    default (``absent``, or the query heads when the class defaults it to null)."""
    if fields.is_null(name):
        return num_heads
    return fields.size(name, default=absent if absent is not None else num_heads)


def _causal_heads(prefix: str, lm_class: str | None = None) -> dict[str, HeadKind]:
    return {lm_class or f"{prefix}ForCausalLM": "causal-lm", f"{prefix}Model": "base"}


def _lm_head(head: HeadKind, vocab: int, width: int, *, tied: bool, bias: bool = False) -> int:
    """The vocabulary projection of a causal-LM head (its weight once when tied)."""
    if head != "causal-lm":
        return 0
    return (0 if tied else vocab * width) + (vocab if bias else 0)


@dataclass(frozen=True)
class _RopeStyle:
    """What separates the Llama-style families (the config class defaults that differ)."""

    name: str
    prefix: str
    head_dim_default: int | None
    kv_default: int | None
    tie_default: bool
    qkv_bias: bool | None
    """Fixed q/k/v bias, or None to read ``attention_bias``."""
    out_bias: bool | None
    """Fixed output-projection bias, or None to read ``attention_bias``."""
    read_mlp_bias: bool = False
    moe: bool = False


def _rope_decoder(style: _RopeStyle) -> Parser:
    """The parser of a Llama-style decoder: RMSNorm, rotary, gated MLP (or MoE of them)."""

    def parse(fields: ConfigFields, head_class: str, head: HeadKind) -> ModelSpec:
        d = fields.size("hidden_size")
        layers = fields.size("num_hidden_layers")
        heads = fields.size("num_attention_heads")
        vocab = fields.size("vocab_size")
        inter = fields.size("intermediate_size")
        kv = _kv_heads(fields, heads, absent=style.kv_default)
        default_hd = style.head_dim_default or d // heads
        head_dim = d // heads if fields.is_null("head_dim") else fields.size(
            "head_dim", default=default_hd)
        kind = attention_kind(fields, heads, kv, "num_key_value_heads")
        attn_bias = fields.flag("attention_bias", default=False)
        qkv_bias = attn_bias if style.qkv_bias is None else style.qkv_bias
        out_bias = attn_bias if style.out_bias is None else style.out_bias
        mlp_bias = fields.flag("mlp_bias", default=False) if style.read_mlp_bias else False
        tied = fields.flag("tie_word_embeddings", default=style.tie_default)
        attn = (linear_params(d, heads * head_dim, bias=qkv_bias)
                + 2 * linear_params(d, kv * head_dim, bias=qkv_bias)
                + linear_params(heads * head_dim, d, bias=out_bias))
        experts = top_k = 0
        if style.moe:
            experts = fields.size("num_local_experts", "num_experts")
            top_k = fields.size("num_experts_per_tok", default=2)
            # Router (no bias) + experts stored as fused gate_up (2f x d) and down (d x f).
            mlp = experts * d + experts * 3 * d * inter
        else:
            mlp = 2 * linear_params(d, inter, bias=mlp_bias) + linear_params(inter, d,
                                                                            bias=mlp_bias)
        layer = attn + mlp + 2 * rmsnorm_params(d)
        embed = embedding_params(vocab, d)
        lm_head = _lm_head(head, vocab, d, tied=tied)
        num_params = embed + layers * layer + rmsnorm_params(d) + lm_head
        activation = fields.text("hidden_act", default="silu")
        if style.name == "gemma" and activation == "gelu":
            activation = "gelu_pytorch_tanh"  # GemmaConfig maps the legacy "gelu" to tanh gelu
        window: int | None = None
        if style.name == "mistral":
            window = None if fields.is_null("sliding_window") else fields.size(
                "sliding_window", default=4096)
        elif style.name == "mixtral":
            window = fields.count("sliding_window") or None
        elif style.name == "qwen2" and fields.flag("use_sliding_window", default=False):
            window = fields.size("sliding_window", default=4096)
        return ModelSpec(
            family=style.name, arch="decoder", hidden_size=d, num_layers=layers,
            num_heads=heads, num_kv_heads=kv, head_dim=head_dim, intermediate_size=inter,
            vocab_size=vocab, max_positions=fields.count("max_position_embeddings") or None,
            mlp="gated", activation=activation, norm="rmsnorm", attention=kind,
            tied_embeddings=tied, num_params=num_params, num_embedding_params=embed + lm_head,
            attention_dropout=fields.probability("attention_dropout", default=0.0),
            num_experts=experts, experts_per_token=top_k,
            moe_intermediate_size=inter if style.moe else 0,
            dtype=fields.dtype(), head_class=head_class, head=head,
            layer_params=(layer,) * layers, positions="rope",
            rotary_dim=_rotary_dim(fields, head_dim, 1.0), qkv_bias=qkv_bias,
            attn_out_bias=out_bias, mlp_bias=mlp_bias, sliding_window=window,
        )

    return parse


_ROPE_STYLES = (
    _RopeStyle(name="llama", prefix="Llama", head_dim_default=None, kv_default=None,
               tie_default=False, qkv_bias=None, out_bias=None, read_mlp_bias=True),
    _RopeStyle(name="mistral", prefix="Mistral", head_dim_default=None, kv_default=8,
               tie_default=False, qkv_bias=False, out_bias=False),
    _RopeStyle(name="mixtral", prefix="Mixtral", head_dim_default=None, kv_default=8,
               tie_default=False, qkv_bias=False, out_bias=False, moe=True),
    _RopeStyle(name="qwen2", prefix="Qwen2", head_dim_default=None, kv_default=32,
               tie_default=False, qkv_bias=True, out_bias=False),
    _RopeStyle(name="gemma", prefix="Gemma", head_dim_default=256, kv_default=16,
               tie_default=True, qkv_bias=None, out_bias=None),
)


def _parse_gpt2(fields: ConfigFields, head_class: str, head: HeadKind) -> ModelSpec:
    d = fields.size("n_embd", "hidden_size")
    layers = fields.size("n_layer", "num_hidden_layers")
    heads = fields.size("n_head", "num_attention_heads")
    vocab = fields.size("vocab_size")
    positions = fields.size("n_positions", "max_position_embeddings", default=1024)
    fields.divides(numerator=("n_embd", d), denominator=("n_head", heads))
    inter = fields.size("n_inner", default=4 * d)
    tied = fields.flag("tie_word_embeddings", default=True)
    # Conv1D layers: c_attn (d -> 3d), c_proj (d -> d), c_fc (d -> f), c_proj (f -> d).
    layer = (2 * layernorm_params(d) + linear_params(d, 3 * d, bias=True)
             + linear_params(d, d, bias=True) + linear_params(d, inter, bias=True)
             + linear_params(inter, d, bias=True))
    embed = embedding_params(vocab, d) + embedding_params(positions, d)
    lm_head = _lm_head(head, vocab, d, tied=tied)
    return ModelSpec(
        family="gpt2", arch="decoder", hidden_size=d, num_layers=layers, num_heads=heads,
        num_kv_heads=heads, head_dim=d // heads, intermediate_size=inter, vocab_size=vocab,
        max_positions=positions, mlp="plain",
        activation=fields.text("activation_function", default="gelu_new"), norm="layernorm",
        attention="mha", tied_embeddings=tied,
        num_params=embed + layers * layer + layernorm_params(d) + lm_head,
        num_embedding_params=embed + lm_head,
        dropout=fields.probability("resid_pdrop", default=0.1),
        attention_dropout=fields.probability("attn_pdrop", default=0.1),
        embedding_dropout=fields.probability("embd_pdrop", default=0.1),
        dtype=fields.dtype(), head_class=head_class, head=head, layer_params=(layer,) * layers,
        positions="learned", qkv_bias=True, attn_out_bias=True, mlp_bias=True, norm_bias=True,
    )


def _parse_phi(fields: ConfigFields, head_class: str, head: HeadKind) -> ModelSpec:
    d = fields.size("hidden_size")
    layers = fields.size("num_hidden_layers")
    heads = fields.size("num_attention_heads")
    vocab = fields.size("vocab_size")
    inter = fields.size("intermediate_size")
    kv = _kv_heads(fields, heads, absent=None)
    kind = attention_kind(fields, heads, kv, "num_key_value_heads")
    head_dim = fields.size("head_dim", default=d // heads)
    tied = fields.flag("tie_word_embeddings", default=False)
    attn = (linear_params(d, heads * head_dim, bias=True)
            + 2 * linear_params(d, kv * head_dim, bias=True)
            + linear_params(heads * head_dim, d, bias=True))
    if fields.flag("qk_layernorm", default=False):
        attn += 2 * layernorm_params(d // heads)  # q_layernorm, k_layernorm over d // heads
    # One shared input LayerNorm: attention and MLP run in parallel on it.
    layer = (attn + linear_params(d, inter, bias=True) + linear_params(inter, d, bias=True)
             + layernorm_params(d))
    embed = embedding_params(vocab, d)
    lm_head = _lm_head(head, vocab, d, tied=tied, bias=True)
    return ModelSpec(
        family="phi", arch="decoder", hidden_size=d, num_layers=layers, num_heads=heads,
        num_kv_heads=kv, head_dim=head_dim, intermediate_size=inter, vocab_size=vocab,
        max_positions=fields.count("max_position_embeddings") or None, mlp="plain",
        activation=fields.text("hidden_act", default="gelu_new"), norm="layernorm",
        attention=kind, parallel_block=True, tied_embeddings=tied,
        num_params=embed + layers * layer + layernorm_params(d) + lm_head,
        num_embedding_params=embed + lm_head,
        dropout=fields.probability("resid_pdrop", default=0.0),
        attention_dropout=fields.probability("attention_dropout", default=0.0),
        embedding_dropout=fields.probability("embd_pdrop", default=0.0),
        dtype=fields.dtype(), head_class=head_class, head=head, layer_params=(layer,) * layers,
        positions="rope", rotary_dim=_rotary_dim(fields, head_dim, 0.5), qkv_bias=True,
        attn_out_bias=True, mlp_bias=True, norm_bias=True, lm_head_bias=head == "causal-lm",
        norms_per_layer=1,
    )


_LEGACY_FALCON = ("RefinedWebModel", "RefinedWeb")


def _parse_falcon(fields: ConfigFields, head_class: str, head: HeadKind) -> ModelSpec:
    model_type = fields.config.get("model_type")
    d = fields.size("hidden_size", "n_embed")
    layers = fields.size("num_hidden_layers", "n_layer")
    heads = fields.size("num_attention_heads", "n_head")
    vocab = fields.size("vocab_size")
    fields.divides(numerator=("hidden_size", d), denominator=("num_attention_heads", heads))
    head_dim = d // heads
    # The legacy remote-code formats: "RefinedWeb" (Falcon-40B) is the new decoder
    # architecture; "RefinedWebModel" (Falcon-7B) defaulted parallel_attn to false.
    new_arch = fields.flag("new_decoder_architecture", default=model_type == "RefinedWeb")
    multi_query = fields.flag("multi_query", default=True)
    parallel = fields.flag("parallel_attn", default=model_type != "RefinedWebModel")
    bias = fields.flag("bias", default=False)
    alibi = fields.flag("alibi", default=False)
    if new_arch:
        kv = fields.size("num_kv_heads", "n_head_kv", default=heads)
        qkv_out = (2 * kv + heads) * head_dim
    elif multi_query:
        kv, qkv_out = 1, d + 2 * head_dim
    else:
        kv, qkv_out = heads, 3 * d
    kind = attention_kind(fields, heads, kv, "num_kv_heads")
    ln_in_parallel = fields.count("num_ln_in_parallel_attn", default=2 if new_arch else 1)
    norms = 2 if (not parallel or ln_in_parallel == 2) else 1
    inter = fields.size("ffn_hidden_size", default=4 * d)
    tied = fields.flag("tie_word_embeddings", default=True)
    layer = (linear_params(d, qkv_out, bias=bias) + linear_params(d, d, bias=bias)
             + linear_params(d, inter, bias=bias) + linear_params(inter, d, bias=bias)
             + norms * layernorm_params(d))
    embed = embedding_params(vocab, d)
    lm_head = _lm_head(head, vocab, d, tied=tied)
    return ModelSpec(
        family="falcon", arch="decoder", hidden_size=d, num_layers=layers, num_heads=heads,
        num_kv_heads=kv, head_dim=head_dim, intermediate_size=inter, vocab_size=vocab,
        max_positions=fields.count("max_position_embeddings") or None, mlp="plain",
        activation=fields.text("activation", default="gelu"), norm="layernorm", attention=kind,
        parallel_block=parallel or new_arch, tied_embeddings=tied,
        num_params=embed + layers * layer + layernorm_params(d) + lm_head,
        num_embedding_params=embed + lm_head,
        dropout=fields.probability("hidden_dropout", default=0.0),
        attention_dropout=fields.probability("attention_dropout", default=0.0),
        dtype=fields.dtype(), head_class=head_class, head=head, layer_params=(layer,) * layers,
        positions="alibi" if alibi else "rope", rotary_dim=0 if alibi else head_dim,
        qkv_bias=bias, attn_out_bias=bias, mlp_bias=bias, norm_bias=True, norms_per_layer=norms,
    )


def _falcon_to_transformers(config: dict[str, Any]) -> dict[str, Any]:
    """Rename the legacy RefinedWeb fields to today's ``FalconConfig`` ones."""
    out = dict(config)
    model_type = out.get("model_type")
    if model_type not in _LEGACY_FALCON:
        return out
    for old, new in (("n_layer", "num_hidden_layers"), ("n_head", "num_attention_heads"),
                     ("n_head_kv", "num_kv_heads"), ("n_embed", "hidden_size")):
        if old in out:
            value = out.pop(old)
            out.setdefault(new, value)
    out.setdefault("new_decoder_architecture", model_type == "RefinedWeb")
    if model_type == "RefinedWebModel":
        out.setdefault("parallel_attn", False)
    out["model_type"] = "falcon"
    out.pop("auto_map", None)
    architectures = out.get("architectures")
    if isinstance(architectures, list):
        out["architectures"] = ["FalconForCausalLM" if a == "RWForCausalLM" else a
                                for a in architectures]
    return out


def _parse_opt(fields: ConfigFields, head_class: str, head: HeadKind) -> ModelSpec:
    d = fields.size("hidden_size")
    layers = fields.size("num_hidden_layers")
    heads = fields.size("num_attention_heads")
    vocab = fields.size("vocab_size")
    inter = fields.size("ffn_dim")
    fields.divides(numerator=("hidden_size", d), denominator=("num_attention_heads", heads))
    positions = fields.size("max_position_embeddings", default=2048)
    proj = fields.size("word_embed_proj_dim", default=d)
    bias = fields.flag("enable_bias", default=True)
    affine = fields.flag("layer_norm_elementwise_affine", default=True)
    pre_norm = fields.flag("do_layer_norm_before", default=True)
    final_norm = pre_norm and not fields.flag("_remove_final_layer_norm", default=False)
    tied = fields.flag("tie_word_embeddings", default=True)
    layer = (4 * linear_params(d, d, bias=bias) + linear_params(d, inter, bias=bias)
             + linear_params(inter, d, bias=bias) + 2 * layernorm_params(d, affine=affine))
    # The learned position table has 2 extra rows (OPT offsets position ids by 2).
    embed = embedding_params(vocab, proj) + embedding_params(positions + 2, d)
    projections = 2 * linear_params(d, proj, bias=False) if proj != d else 0
    lm_head = _lm_head(head, vocab, proj, tied=tied)
    rest = projections + (layernorm_params(d, affine=affine) if final_norm else 0)
    return ModelSpec(
        family="opt", arch="decoder", hidden_size=d, num_layers=layers, num_heads=heads,
        num_kv_heads=heads, head_dim=d // heads, intermediate_size=inter, vocab_size=vocab,
        max_positions=positions, mlp="plain",
        activation=fields.text("activation_function", default="relu"), norm="layernorm",
        attention="mha", tied_embeddings=tied,
        num_params=embed + layers * layer + rest + lm_head, num_embedding_params=embed + lm_head,
        dropout=fields.probability("dropout", default=0.1),
        attention_dropout=fields.probability("attention_dropout", default=0.0),
        dtype=fields.dtype(), head_class=head_class, head=head, layer_params=(layer,) * layers,
        positions="learned", qkv_bias=bias, attn_out_bias=bias, mlp_bias=bias,
        norm_bias=affine, pre_norm=pre_norm,
    )


def _parse_deepseek_v3(fields: ConfigFields, head_class: str, head: HeadKind) -> ModelSpec:
    d = fields.size("hidden_size")
    layers = fields.size("num_hidden_layers")
    heads = fields.size("num_attention_heads")
    vocab = fields.size("vocab_size")
    inter = fields.size("intermediate_size")
    moe_inter = fields.size("moe_intermediate_size")
    experts = fields.size("n_routed_experts", "num_local_experts")
    top_k = fields.size("num_experts_per_tok", default=8)
    shared = fields.count("n_shared_experts", default=1)
    dense_layers = min(fields.count("first_k_dense_replace", default=3), layers)
    # q_lora_rank: null means queries are projected directly (no low-rank compression).
    q_rank = 0 if fields.is_null("q_lora_rank") else fields.size("q_lora_rank")
    kv_rank = fields.size("kv_lora_rank")
    rope = fields.size("qk_rope_head_dim")
    nope = fields.size("qk_nope_head_dim")
    v_dim = fields.size("v_head_dim")
    bias = fields.flag("attention_bias", default=False)
    tied = fields.flag("tie_word_embeddings", default=False)
    qk_dim = nope + rope
    # Multi-head latent attention (DeepSeek-V2 paper, Sec. 2.1): low-rank query path
    # (q_a_proj, RMSNorm, q_b_proj), joint KV compression with the shared rope key
    # (kv_a_proj_with_mqa, RMSNorm), per-head expansion (kv_b_proj), output projection.
    if q_rank:
        q_path = (linear_params(d, q_rank, bias=bias) + rmsnorm_params(q_rank)
                  + linear_params(q_rank, heads * qk_dim, bias=False))
    else:
        q_path = linear_params(d, heads * qk_dim, bias=False)
    attn = (q_path + linear_params(d, kv_rank + rope, bias=bias) + rmsnorm_params(kv_rank)
            + linear_params(kv_rank, heads * (nope + v_dim), bias=False)
            + linear_params(heads * v_dim, d, bias=bias))
    dense_mlp = 3 * d * inter
    # Router weight (experts x d), routed experts (fused gate_up and down), shared experts
    # as one gated MLP of width moe_intermediate_size * n_shared_experts.
    moe_mlp = experts * d + experts * 3 * d * moe_inter + 3 * d * moe_inter * shared
    norms = 2 * rmsnorm_params(d)
    layer_params = ((attn + dense_mlp + norms,) * dense_layers
                    + (attn + moe_mlp + norms,) * (layers - dense_layers))
    embed = embedding_params(vocab, d)
    lm_head = _lm_head(head, vocab, d, tied=tied)
    return ModelSpec(
        family="deepseek_v3", arch="decoder", hidden_size=d, num_layers=layers,
        num_heads=heads, num_kv_heads=heads, head_dim=qk_dim, intermediate_size=inter,
        vocab_size=vocab, max_positions=fields.count("max_position_embeddings") or None,
        mlp="gated", activation=fields.text("hidden_act", default="silu"), norm="rmsnorm",
        attention="mla", tied_embeddings=tied,
        num_params=embed + sum(layer_params) + rmsnorm_params(d) + lm_head,
        num_embedding_params=embed + lm_head,
        attention_dropout=fields.probability("attention_dropout", default=0.0),
        num_experts=experts, experts_per_token=top_k, num_shared_experts=shared,
        moe_intermediate_size=moe_inter, num_dense_layers=dense_layers, q_lora_rank=q_rank,
        kv_lora_rank=kv_rank, qk_rope_head_dim=rope, v_head_dim=v_dim, dtype=fields.dtype(),
        head_class=head_class, head=head, layer_params=layer_params, positions="rope",
        rotary_dim=rope, qkv_bias=bias, attn_out_bias=bias,
    )


def _deepseek_depth(config: dict[str, Any], num_layers: int) -> dict[str, Any]:
    """Change DeepSeek's depth keeping its dense-then-MoE shape: the leading dense layers are
    kept while at least one MoE layer remains (``first_k_dense_replace <= num_layers - 1``);
    an all-dense config stays all dense."""
    out = set_depth(config, num_layers, "num_hidden_layers")
    layers = config.get("num_hidden_layers")
    dense = config.get("first_k_dense_replace", 3)
    if isinstance(layers, int) and isinstance(dense, int) and dense < layers:
        out["first_k_dense_replace"] = min(dense, num_layers - 1)
    return out


_ROPE_DROPOUT = ("attention_dropout",)

DECODER_FAMILIES: tuple[Family, ...] = (
    Family(name="gpt2", model_types=("gpt2",), parse=_parse_gpt2,
           heads={"GPT2LMHeadModel": "causal-lm", "GPT2Model": "base"},
           default_head="GPT2LMHeadModel", with_layers=_depth_edit("n_layer", "num_hidden_layers"),
           dropout_keys=("resid_pdrop", "attn_pdrop", "embd_pdrop")),
    *(Family(name=s.name, model_types=(s.name,), parse=_rope_decoder(s),
             heads=_causal_heads(s.prefix), default_head=f"{s.prefix}ForCausalLM",
             with_layers=_depth_edit("num_hidden_layers"), dropout_keys=_ROPE_DROPOUT)
      for s in _ROPE_STYLES),
    Family(name="phi", model_types=("phi",), parse=_parse_phi, heads=_causal_heads("Phi"),
           default_head="PhiForCausalLM", with_layers=_depth_edit("num_hidden_layers"),
           dropout_keys=("resid_pdrop", "embd_pdrop", "attention_dropout")),
    Family(name="falcon", model_types=("falcon", *_LEGACY_FALCON), parse=_parse_falcon,
           heads=_causal_heads("Falcon"), default_head="FalconForCausalLM",
           head_aliases={"RWForCausalLM": "FalconForCausalLM"},
           with_layers=_depth_edit("num_hidden_layers", "n_layer"),
           dropout_keys=("hidden_dropout", "attention_dropout"),
           to_transformers=_falcon_to_transformers),
    Family(name="opt", model_types=("opt",), parse=_parse_opt, heads=_causal_heads("OPT"),
           default_head="OPTForCausalLM", with_layers=_depth_edit("num_hidden_layers"),
           dropout_keys=("dropout", "attention_dropout", "activation_dropout")),
    Family(name="deepseek_v3", model_types=("deepseek_v3",), parse=_parse_deepseek_v3,
           heads=_causal_heads("DeepseekV3"), default_head="DeepseekV3ForCausalLM",
           with_layers=_deepseek_depth, dropout_keys=_ROPE_DROPOUT),
)
