"""Inference sizing: model weights plus the KV cache for a batch and a context length.

The KV cache keeps, for every generated or prompt token and every decoder layer, the keys
and values attention reads back (Pope et al. 2022, "Efficiently Scaling Transformer
Inference", sec. 3.1: 2 x layers x kv_heads x head_dim elements per token):

- MHA / GQA / MQA: ``layers x kv_heads x (head_dim + value_head_dim)`` elements per token
  (keys are ``head_dim`` wide, values ``value_head_dim``; equal outside MLA), where
  ``kv_heads`` = heads (MHA), a divisor of them (GQA) or 1 (MQA);
- MLA (DeepSeek-V2/V3, DeepSeek-V2 paper sec. 2.1.2): the compressed latent ``kv_lora_rank``
  plus the shared rotary key ``qk_rope_head_dim`` per token and layer (``mla_cache="latent"``,
  the default: what DeepSeek's inference, vLLM/SGLang MLA kernels and transformers >= 5 cache).
  ``mla_cache="decompressed"`` sizes the full per-head keys (``head_dim`` = qk_nope +
  qk_rope) and values (``value_head_dim``) of ``num_heads`` heads, which transformers 4.x's
  eager DeepSeek attention cached;
- encoder-decoder (T5): the decoder's self-attention cache over ``context_len`` tokens plus
  its cross-attention cache over the ``encoder_len`` encoder tokens, both per decoder layer;
- encoder-only models and ViT keep no KV cache: :class:`ConfigError`.

The whole context is cached: a sliding-window model (Mistral v0.1: 4096) whose serving engine
evicts old tokens needs less; ``ModelSpec`` states no window, so this is the full-attention
upper bound. All figures are computed (basis ``estimated``); the KV formula is checked
byte-for-byte against the caches transformers builds (tests/memory/test_kv.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from trainmedic.errors import ConfigError
from trainmedic.memory.ledger import Basis
from trainmedic.memory.spec import ModelSpec

__all__ = [
    "DTYPE_BITS",
    "DEFAULT_HEADROOM_FRACTION",
    "MlaCache",
    "KvPlan",
    "dtype_bits",
    "kv_elements_per_token",
    "kv_cache_bytes",
    "inference_plan",
]

MlaCache = Literal["latent", "decompressed"]

DTYPE_BITS: Mapping[str, int] = {
    "fp32": 32, "float32": 32, "bf16": 16, "bfloat16": 16, "fp16": 16, "float16": 16,
    "half": 16, "fp8": 8, "fp8_e4m3": 8, "fp8_e5m2": 8, "int8": 8, "int4": 4,
}
"""Bits per element of the dtypes weights and caches are stored in. Quantized formats
(int8/int4/fp8) also store scales, which are not counted (e.g. one fp16 scale per 128 int4
weights adds 1/32 of a byte per weight)."""

DEFAULT_HEADROOM_FRACTION = 0.10
"""Share of the GPU kept free for everything but weights and KV cache: the forward pass's
activations and logits, the CUDA context (~0.5 GiB), cuBLAS workspaces and allocator slack.
10% is the share vLLM leaves by default (``gpu_memory_utilization=0.9``); an estimate, not a
measurement, and too small for very long prefills with eager attention."""


def dtype_bits(dtype: str, *, field_name: str = "dtype") -> int:
    """Bits per element of ``dtype`` (names of :data:`DTYPE_BITS`); ConfigError otherwise."""
    bits = DTYPE_BITS.get(dtype.strip().lower()) if isinstance(dtype, str) else None
    if bits is None:
        raise ConfigError(
            f"{field_name}: got {dtype!r}, expected one of fp32, bf16, fp16, fp8, int8, int4"
        )
    return bits


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{name}: got {value!r}, expected a positive integer")
    return value


def _decoder_layers(spec: ModelSpec) -> int:
    if spec.arch == "encoder-decoder":
        return spec.num_decoder_layers or spec.num_layers
    return spec.num_layers


def _check_spec(spec: ModelSpec) -> None:
    if spec.arch == "encoder":
        what = "a vision transformer" if spec.image_size else "an encoder-only model"
        raise ConfigError(
            f"spec.arch: got 'encoder' ({spec.family}): {what} keeps no KV cache; KV sizing "
            f"applies to decoder and encoder-decoder models"
        )
    _positive("spec.num_layers", _decoder_layers(spec))
    _positive("spec.num_kv_heads", spec.num_kv_heads)
    _positive("spec.head_dim", spec.head_dim)


def kv_elements_per_token(spec: ModelSpec, *, mla_cache: MlaCache = "latent") -> tuple[int, int]:
    """(self-attention elements per decoder token, cross-attention elements per encoder
    token), summed over the decoder layers; the second is 0 for decoder-only models."""
    _check_spec(spec)
    layers = _decoder_layers(spec)
    per_head = spec.head_dim + spec.value_head_dim
    if spec.attention == "mla":
        if mla_cache == "latent":
            _positive("spec.kv_lora_rank", spec.kv_lora_rank)
            _positive("spec.qk_rope_head_dim", spec.qk_rope_head_dim)
            # DeepSeek-V2 paper, sec. 2.1.2: (d_c + d_h^R) x l elements per token.
            self_elems = layers * (spec.kv_lora_rank + spec.qk_rope_head_dim)
        elif mla_cache == "decompressed":
            self_elems = layers * spec.num_heads * per_head
        else:
            raise ConfigError(
                f"mla_cache: got {mla_cache!r}, expected 'latent' or 'decompressed'")
    else:
        self_elems = layers * spec.num_kv_heads * per_head
    cross_elems = layers * spec.num_kv_heads * per_head if spec.arch == "encoder-decoder" else 0
    return self_elems, cross_elems


def _bytes(elements: int, bits: int) -> int:
    return -(-elements * bits // 8)


def kv_cache_bytes(spec: ModelSpec, *, batch_size: int, context_len: int,
                   kv_dtype: str = "bf16", mla_cache: MlaCache = "latent",
                   encoder_len: int | None = None) -> int:
    """Bytes of the KV cache of ``batch_size`` sequences of ``context_len`` tokens.

    ``mla_cache`` chooses what an MLA model caches (see the module docstring; ignored for
    other attention kinds). ``encoder_len`` is the encoder input length of an
    encoder-decoder model (default: ``context_len``); ignored for decoders.
    """
    batch_size = _positive("batch_size", batch_size)
    context_len = _positive("context_len", context_len)
    bits = dtype_bits(kv_dtype, field_name="kv_dtype")
    self_elems, cross_elems = kv_elements_per_token(spec, mla_cache=mla_cache)
    enc = context_len if encoder_len is None else _positive("encoder_len", encoder_len)
    elements = batch_size * (self_elems * context_len + (cross_elems * enc if cross_elems else 0))
    return _bytes(elements, bits)


@dataclass(kw_only=True, frozen=True)
class KvPlan:
    """Memory of serving one model: weights, KV cache, and what fits on a GPU."""

    batch_size: int
    """Concurrent sequences."""
    context_len: int
    """Tokens per sequence (prompt + generated)."""
    encoder_len: int | None
    """Encoder input tokens of an encoder-decoder model (None for decoders)."""
    weight_dtype: str
    """Storage dtype of the weights."""
    kv_dtype: str
    """Storage dtype of the cache."""
    mla_cache: MlaCache
    """What an MLA model caches (ignored for other attention kinds)."""
    weights_bytes: int
    """num_params x bytes per weight (all experts of an MoE model; no quantization scales)."""
    kv_bytes: int
    """The whole cache for ``batch_size`` x ``context_len`` (cross-attention included)."""
    kv_bytes_per_token: int
    """Self-attention cache of one token of one sequence, all layers."""
    cross_kv_bytes: int
    """Of ``kv_bytes``, the cross-attention cache over the encoder tokens (0 for decoders)."""
    total_bytes: int
    """weights + KV cache (headroom not included)."""
    gpu_memory_bytes: int | None = None
    """The GPU size planned for, when one was given."""
    headroom_bytes: int | None = None
    """Kept free for activations, context and workspaces (``headroom_fraction`` of the GPU)."""
    fits: bool | None = None
    """total + headroom <= GPU size."""
    max_batch_size: int | None = None
    """Most sequences of ``context_len`` tokens that fit (0 when the weights alone do not)."""
    max_context_len: int | None = None
    """Longest context ``batch_size`` sequences can have (0 when the weights do not fit)."""
    basis: Mapping[str, Basis] = field(default_factory=dict)
    """Basis of every figure (all ``estimated``: computed, not measured)."""
    notes: tuple[str, ...] = ()
    """Assumptions the figures rest on."""

    def to_json(self) -> dict[str, Any]:
        """The plan as a JSON-able dict."""
        out: dict[str, Any] = {k: getattr(self, k) for k in (
            "batch_size", "context_len", "encoder_len", "weight_dtype", "kv_dtype",
            "mla_cache", "weights_bytes", "kv_bytes", "kv_bytes_per_token", "cross_kv_bytes",
            "total_bytes", "gpu_memory_bytes", "headroom_bytes", "fits", "max_batch_size",
            "max_context_len")}
        out["basis"] = dict(self.basis)
        out["notes"] = list(self.notes)
        return out


def inference_plan(spec: ModelSpec, *, batch_size: int, context_len: int,
                   weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                   gpu_memory_bytes: int | None = None, mla_cache: MlaCache = "latent",
                   encoder_len: int | None = None,
                   headroom_fraction: float = DEFAULT_HEADROOM_FRACTION) -> KvPlan:
    """Weights + KV cache for a batch and context; with ``gpu_memory_bytes``, whether it fits,
    the largest batch at this context and the longest context at this batch.

    The maxima are exact integer solutions of weights + headroom + KV <= GPU (KV is linear in
    batch and in context); the headroom (``headroom_fraction`` of the GPU, default
    :data:`DEFAULT_HEADROOM_FRACTION`) is an estimate. For an encoder-decoder model without
    ``encoder_len``, the encoder input grows with the context.
    """
    batch_size = _positive("batch_size", batch_size)
    context_len = _positive("context_len", context_len)
    w_bits = dtype_bits(weight_dtype, field_name="weight_dtype")
    kv_bits = dtype_bits(kv_dtype, field_name="kv_dtype")
    _positive("spec.num_params", spec.num_params)
    self_elems, cross_elems = kv_elements_per_token(spec, mla_cache=mla_cache)
    is_enc_dec = spec.arch == "encoder-decoder"
    enc = None if not is_enc_dec else (
        context_len if encoder_len is None else _positive("encoder_len", encoder_len))
    weights = _bytes(spec.num_params, w_bits)
    kv = kv_cache_bytes(spec, batch_size=batch_size, context_len=context_len,
                        kv_dtype=kv_dtype, mla_cache=mla_cache, encoder_len=enc)
    cross = _bytes(batch_size * cross_elems * (enc or 0), kv_bits)
    notes = [
        f"KV per token = {self_elems} elements x {kv_bits} bits over "
        f"{_decoder_layers(spec)} layers ({spec.attention}"
        + (f", {mla_cache} MLA cache" if spec.attention == "mla" else "") + ")",
        "weights = num_params x dtype size; quantization scales and 16-bit embeddings of "
        "quantized checkpoints are not counted",
        "full-attention cache: sliding-window eviction and paged-allocation rounding ignored",
    ]
    if spec.is_moe:
        notes.append("MoE: every expert's weights are resident")
    basis: dict[str, Basis] = {k: "estimated" for k in (
        "weights_bytes", "kv_bytes", "kv_bytes_per_token", "cross_kv_bytes", "total_bytes")}
    plan: dict[str, Any] = {}
    if gpu_memory_bytes is not None:
        gpu = _positive("gpu_memory_bytes", gpu_memory_bytes)
        if isinstance(headroom_fraction, bool) or not 0 <= headroom_fraction < 1:
            raise ConfigError(f"headroom_fraction: got {headroom_fraction!r}, expected a "
                              f"fraction in [0, 1)")
        headroom = math.ceil(gpu * headroom_fraction)
        avail_bits = max(0, gpu - headroom - weights) * 8
        seq_bits = (self_elems * context_len + cross_elems * (enc or 0)) * kv_bits
        if is_enc_dec and encoder_len is None:
            token_bits = batch_size * (self_elems + cross_elems) * kv_bits
            fixed_bits = 0
        else:
            token_bits = batch_size * self_elems * kv_bits
            fixed_bits = batch_size * cross_elems * (enc or 0) * kv_bits
        max_context = max(0, avail_bits - fixed_bits) // token_bits
        plan = {
            "gpu_memory_bytes": gpu, "headroom_bytes": headroom,
            "fits": weights + kv + headroom <= gpu,
            "max_batch_size": avail_bits // seq_bits, "max_context_len": max_context,
        }
        basis.update(headroom_bytes="estimated", max_batch_size="estimated",
                     max_context_len="estimated")
        notes.append(f"headroom = {headroom_fraction:.0%} of the GPU for activations, CUDA "
                     f"context and workspaces (estimated)")
        if weights + headroom > gpu:
            notes.append("the weights alone (+ headroom) exceed the GPU")
        if spec.max_positions and max_context > spec.max_positions:
            notes.append(f"max_context_len exceeds the model's {spec.max_positions} positions")
    return KvPlan(
        batch_size=batch_size, context_len=context_len, encoder_len=enc,
        weight_dtype=weight_dtype, kv_dtype=kv_dtype, mla_cache=mla_cache,
        weights_bytes=weights, kv_bytes=kv, kv_bytes_per_token=_bytes(self_elems, kv_bits),
        cross_kv_bytes=cross, total_bytes=weights + kv, basis=basis, notes=tuple(notes),
        **plan,
    )
