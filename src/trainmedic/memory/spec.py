"""A transformer's shape, normalized from a Hugging Face ``config.json`` (no hub, no weights).

``ModelSpec`` is the one description the planner, the KV sizer and the fit search read; the
family parsers (``trainmedic.memory.families``) fill it from each family's own field names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ModelSpec",
    "Arch",
    "MlpKind",
    "NormKind",
    "AttentionKind",
    "HeadKind",
    "PositionKind",
]

Arch = Literal["decoder", "encoder", "encoder-decoder"]
MlpKind = Literal["gated", "plain"]
NormKind = Literal["layernorm", "rmsnorm"]
AttentionKind = Literal["mha", "gqa", "mqa", "mla"]
HeadKind = Literal[
    "causal-lm", "masked-lm", "seq2seq-lm", "pretraining", "image-classification", "base"
]
PositionKind = Literal["rope", "learned", "relative", "alibi"]


@dataclass(kw_only=True, frozen=True)
class ModelSpec:
    """The sizes of one transformer that memory depends on."""

    family: str
    """Normalized model_type: gpt2, llama, mistral, mixtral, qwen2, gemma, phi, falcon, opt,
    bert, roberta, t5, vit, deepseek_v3."""
    arch: Arch
    """Decoder-only, encoder-only, or encoder-decoder (T5)."""
    hidden_size: int
    """Model width d."""
    num_layers: int
    """Transformer blocks (the decoder's for decoder-only, the encoder's for encoder-only and
    encoder-decoder)."""
    num_decoder_layers: int = 0
    """Decoder blocks of an encoder-decoder model; 0 otherwise."""
    num_heads: int
    """Query heads."""
    num_kv_heads: int
    """Key/value heads (= num_heads for MHA, 1 for MQA, fewer for GQA)."""
    head_dim: int
    """Per-head width of queries and keys (values too unless ``v_head_dim`` is set)."""
    intermediate_size: int
    """Dense MLP width (of the dense layers for MoE models)."""
    vocab_size: int
    """Output vocabulary (0 for models without an LM head, e.g. ViT)."""
    max_positions: int | None = None
    """Longest sequence the position embedding supports, when the config states one."""
    mlp: MlpKind = "plain"
    """``gated``: three matrices (SwiGLU/GeGLU); ``plain``: up and down only."""
    activation: str = "gelu"
    """The MLP activation as the config names it (gelu, gelu_new, relu, silu, ...)."""
    norm: NormKind = "layernorm"
    """LayerNorm or RMSNorm."""
    attention: AttentionKind = "mha"
    """Attention kind, derived from the head counts (``mla`` for DeepSeek's latent attention)."""
    parallel_block: bool = False
    """Attention and MLP read the same normalized input (GPT-J style: Falcon, Phi)."""
    tied_embeddings: bool = True
    """The LM head shares the input embedding's weight."""
    num_params: int
    """Exact parameter count of the model as transformers builds it from this config."""
    num_embedding_params: int = 0
    """Of ``num_params``, those in token/position/token-type embeddings (ViT: the patch
    projection, CLS token and position table) and in the vocabulary head's own weight (when
    untied) and bias (Phi, BERT/RoBERTa's MLM decoder)."""
    dropout: float = 0.0
    """Dropout probability on hidden states (the attention and MLP outputs before the residual
    add) as the config sets it (0 = no masks); attention probabilities use
    ``attention_dropout``."""
    attention_dropout: float = 0.0
    """Dropout probability on attention probabilities."""
    # Mixture of experts (Mixtral, DeepSeek); zeros for dense models.
    num_experts: int = 0
    """Routed experts per MoE layer."""
    experts_per_token: int = 0
    """Routed experts each token goes to (top-k)."""
    num_shared_experts: int = 0
    """Always-on experts per MoE layer (DeepSeek)."""
    moe_intermediate_size: int = 0
    """Width of one expert's MLP."""
    num_dense_layers: int = 0
    """Leading layers that use the dense MLP instead of experts (DeepSeek first_k_dense_replace)."""
    # Multi-head latent attention (DeepSeek-V2/V3); zeros otherwise.
    q_lora_rank: int = 0
    """Rank of the query down-projection (0 = no query compression)."""
    kv_lora_rank: int = 0
    """Rank of the joint key/value compression: what MLA caches per token, with the rope part."""
    qk_rope_head_dim: int = 0
    """Per-head width of the rotary part of queries and keys."""
    v_head_dim: int = 0
    """Per-head width of values when it differs from ``head_dim`` (MLA); 0 = head_dim."""
    # Vision transformers (ViT): the sequence is the patch count plus the CLS token.
    image_size: int = 0
    """Input image side in pixels (ViT); 0 for text models."""
    patch_size: int = 0
    """Patch side in pixels (ViT)."""
    num_channels: int = 0
    """Image channels (ViT)."""
    dtype: str | None = None
    """The config's stored dtype (``torch_dtype``), informational."""
    # What exactly ``num_params`` counts, and where the parameters sit.
    head_class: str = ""
    """The transformers class ``num_params`` counts (e.g. ``LlamaForCausalLM``): the config's
    ``architectures[0]`` when the family knows it, else the family's usual head.
    ``trainmedic.memory.hf_build`` builds this class."""
    head: HeadKind = "causal-lm"
    """What the head computes: ``causal-lm``/``masked-lm``/``seq2seq-lm`` produce vocabulary
    logits per token, ``pretraining`` is BERT's masked-LM plus next-sentence head,
    ``image-classification`` produces ``num_labels`` logits per image, ``base`` is the bare
    model (hidden states, and a pooler where the family has one)."""
    num_labels: int = 0
    """Classes of a classification head; 0 for other heads."""
    layer_params: tuple[int, ...] = ()
    """Parameters of each transformer block in order (the encoder's, then the decoder's for
    encoder-decoder models); ``num_params`` minus their sum is the embeddings, final norms and
    head. Blocks differ where the model makes them differ (DeepSeek's dense vs MoE layers, T5's
    first block with the relative-position table)."""
    positions: PositionKind = "rope"
    """How positions enter: rotary (``rope``), a learned table (``learned``), T5's relative
    bias (``relative``) or ALiBi (``alibi``)."""
    rotary_dim: int = 0
    """Per-head width that rotary embedding rotates: ``head_dim`` for full rope, less for
    partial rope (Phi's ``partial_rotary_factor``), ``qk_rope_head_dim`` for MLA, 0 without
    rope."""
    qkv_bias: bool = False
    """The query/key/value projections have biases (GPT-2, OPT, BERT, ViT, Phi, Qwen2)."""
    attn_out_bias: bool = False
    """The attention output projection has a bias."""
    mlp_bias: bool = False
    """The MLP's projections have biases."""
    norm_bias: bool = False
    """The norms have a bias (LayerNorm with bias); False for RMSNorm."""
    lm_head_bias: bool = False
    """The vocabulary (or label) projection has its own bias (Phi, BERT/RoBERTa's MLM head)."""
    pre_norm: bool = True
    """Norms come before attention/MLP (pre-LN); False for post-LN blocks (BERT, RoBERTa,
    OPT with ``do_layer_norm_before: false``)."""
    norms_per_layer: int = 2
    """Norms over the hidden width in one (encoder) block: 2 for the usual block, 1 for a
    parallel block that shares one norm (Falcon-7B, Phi). T5's decoder blocks have one more
    (cross-attention); MLA's low-rank norms are not counted here."""
    embedding_dropout: float = 0.0
    """Dropout probability on the embedding output (GPT-2 ``embd_pdrop``, BERT, T5)."""
    activation_dropout: float = 0.0
    """Dropout probability inside the MLP, after the activation (T5); 0 where the model
    applies none."""
    sliding_window: int | None = None
    """Attention span of sliding-window attention when the model uses it (Mistral-7B-v0.1:
    4096; Qwen2 only with ``use_sliding_window``); None for full attention."""

    @property
    def value_head_dim(self) -> int:
        """Per-head value width."""
        return self.v_head_dim or self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def vision_seq_len(self) -> int:
        """Tokens a ViT sees per image: patches plus the CLS token (0 for text models)."""
        if not self.image_size or not self.patch_size:
            return 0
        return (self.image_size // self.patch_size) ** 2 + 1
