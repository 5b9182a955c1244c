"""Activation memory of a transformer, tensor by tensor, for a stated kernel profile.

Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", §4.1)
count the tensors a transformer layer saves for backward: ``sbh(34 + 5as/h)`` bytes per layer for
fp16 Megatron kernels with 1-byte dropout masks. That count is right for Megatron's kernels and
wrong for others, because *what is saved depends on the kernels*: eager attention keeps the
``a·s²`` softmax output, SDPA/flash keep only a per-row log-sum-exp; CUDA dropout keeps a 1-byte
mask, the CPU kernel keeps it in the activation dtype; Hugging Face's Python RMSNorm keeps its fp32
input and its normalized output while a fused LayerNorm keeps its input and two fp32 statistics;
a GELU written in Python (``gelu_new``) keeps four intermediates where ``F.gelu`` keeps one.

So the planner lists, per layer, every tensor the implementation saves (a :class:`Saved`), with
its width per token, its dtype role and whether tensor/sequence parallelism or selective
recomputation removes it. The lists follow the Hugging Face ``transformers`` implementations of
each family (eager and SDPA attention), which is what most training runs execute, and are checked
against measure mode (which traces the real modules) by ``benchmarks/memory_accuracy.py``.

Dtype roles: ``res`` (residual stream: fp32 under autocast, bf16 when pure bf16), ``cmp`` (matmul
inputs and outputs: the autocast dtype), ``f32`` (always fp32: norm statistics, HF's fp32 softmax),
``mask`` (dropout masks: 1 byte on CUDA, the input's dtype on CPU), ``i64`` (token indices).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

from trainmedic.errors import ConfigError
from trainmedic.memory.spec import ModelSpec

__all__ = [
    "ATTENTION_KERNELS",
    "SOFTMAX_IN_COMPUTE_DTYPE",
    "attention_kernel",
    "DEVICE_PROFILES",
    "KernelProfile",
    "Saved",
    "layer_tensors",
    "head_tensors",
    "embedding_tensors",
    "tensors_bytes",
]

AttentionKernel = Literal["eager", "sdpa", "flash"]
DeviceProfile = Literal["cuda", "cpu"]
ATTENTION_KERNELS: tuple[str, ...] = get_args(AttentionKernel)
DEVICE_PROFILES: tuple[str, ...] = get_args(DeviceProfile)

Role = Literal["res", "cmp", "f32", "mask", "i64"]
#: ``outer``: replicated under tensor parallelism, split by sequence parallelism (norms, dropout
#: on the residual, the inputs of the column-parallel matmuls); ``inner``: split by tensor
#: parallelism (heads, MLP width); ``core``: inner and also dropped by selective recomputation
#: (the attention scores, softmax and its dropout: Korthikanti et al. §5).
Region = Literal["outer", "inner", "core"]

# Elements of F-width tensors each MLP activation saves, counting the down-projection's input.
# relu saves its output, which is also the down projection's input (one tensor); F.gelu and silu
# save their input and the projection saves their output (two); HF's Python tanh GELU
# (gelu_new / gelu_fast) saves x, tanh(.), 0.5x and 1 + tanh(.) plus the product (five).
_PLAIN_MLP_SAVED: dict[str, int] = {
    "relu": 1,
    "gelu": 2,
    "gelu_pytorch_tanh": 2,
    "gelu_python": 2,
    "silu": 2,
    "swish": 2,
    "quick_gelu": 3,
    "gelu_new": 5,
    "gelu_fast": 5,
}


@dataclass(kw_only=True, frozen=True)
class KernelProfile:
    """The kernels that decide what is saved: an explicit input, never guessed."""

    attention: str = "sdpa"
    """``eager`` (keeps the s² scores), ``sdpa`` or ``flash`` (keep a log-sum-exp per row)."""
    device: str = "cuda"
    """``cuda`` or ``cpu``: CPU dropout keeps its mask in the activation dtype, CUDA in 1 byte."""
    compute_bytes: int = 2
    """Bytes of the matmul dtype (``cmp`` role)."""
    residual_bytes: int = 4
    """Bytes of the residual stream (``res`` role)."""

    def __post_init__(self) -> None:
        if self.attention not in ATTENTION_KERNELS:
            raise ConfigError(
                f"attention: got {self.attention!r}, expected one of {list(ATTENTION_KERNELS)}"
            )
        if self.device not in DEVICE_PROFILES:
            raise ConfigError(
                f"device_profile: got {self.device!r}, expected one of {list(DEVICE_PROFILES)}"
            )

    def role_bytes(self, role: Role, *, mask_of: Role = "cmp") -> float:
        if role == "res":
            return self.residual_bytes
        if role == "cmp":
            return self.compute_bytes
        if role == "f32":
            return 4
        if role == "i64":
            return 8
        # role == "mask"
        if self.device == "cuda":
            return 1
        return self.role_bytes(mask_of)


@dataclass(kw_only=True, frozen=True)
class Saved:
    """One tensor a layer saves for backward."""

    name: str
    """What it is, as ``sublayer.tensor`` (``attn.q``, ``mlp.act``)."""
    width: int
    """Elements per token; for ``quadratic`` tensors, elements per token per key position."""
    role: Role
    """Dtype role (module docstring)."""
    region: Region = "inner"
    """How parallelism and selective recomputation treat it."""
    quadratic: bool = False
    """Scales with the key length too (attention scores: width = heads)."""
    mask_of: Role = "cmp"
    """For dropout masks on CPU: the dtype role of the tensor being dropped."""
    per_sequence: bool = False
    """Shared by the batch (rotary tables): counted once, not per sample."""

    def bytes(self, *, tokens: int, seq_len: int, profile: KernelProfile) -> float:
        per_elem = profile.role_bytes(self.role, mask_of=self.mask_of)
        count = seq_len if self.per_sequence else tokens
        width = self.width * (seq_len if self.quadratic else 1)
        return count * width * per_elem


def _norm(spec: ModelSpec, name: str, width: int) -> list[Saved]:
    """What one normalization layer saves."""
    if spec.norm == "rmsnorm":
        # HF's Python RMSNorm: x.to(fp32) (saved by pow and by the mul with rsqrt), the rsqrt
        # statistic, and the normalized value cast back to the input dtype (saved by the weight
        # mul). T5's variant differs only in not subtracting a mean, which saves nothing more.
        return [
            Saved(name=f"{name}.input_fp32", width=width, role="f32", region="outer"),
            Saved(name=f"{name}.rstd", width=1, role="f32", region="outer"),
            Saved(name=f"{name}.normalized", width=width, role="res", region="outer"),
        ]
    # Fused LayerNorm (aten.native_layer_norm): the input and fp32 mean and rstd.
    return [
        Saved(name=f"{name}.input", width=width, role="res", region="outer"),
        Saved(name=f"{name}.mean_rstd", width=2, role="f32", region="outer"),
    ]


# Families whose eager attention applies softmax in the scores' dtype: under autocast the
# scores stay bf16 (no fp32 mask is added to them, unlike GPT-2's causal mask).
SOFTMAX_IN_COMPUTE_DTYPE = frozenset({"bert", "roberta"})

# Post-norm encoders normalize the embeddings (BERT's embeddings.LayerNorm).
_EMBEDDING_NORM_FAMILIES = frozenset({"bert", "roberta"})

# Linear layers that read the attention block's normalized input, where not q, k and v apart:
# GPT-2's c_attn and Falcon's query_key_value are fused; DeepSeek's MLA reads it with the query
# and the joint key/value down-projections.
_ATTN_INPUT_PROJECTIONS: dict[str, int] = {"gpt2": 1, "falcon": 1, "deepseek_v3": 2}


def _copies(consumers: int, profile: KernelProfile) -> int:
    """Saved copies of an fp32 input read by ``consumers`` matmuls (one each under autocast)."""
    return consumers if profile.residual_bytes != profile.compute_bytes else 1


def _dropout(name: str, width: int, p: float, *, region: Region, of: Role) -> list[Saved]:
    if p <= 0:
        return []
    return [Saved(name=name, width=width, role="mask", region=region, mask_of=of)]


def _attention_core(
    spec: ModelSpec, profile: KernelProfile, *, rotary: bool, prefix: str = "attn"
) -> list[Saved]:
    """Q, K, V and what the attention kernel saves (eager scores or SDPA's log-sum-exp)."""
    h, hd, vd = spec.num_heads, spec.head_dim, spec.value_head_dim
    q_width = h * hd
    # HF repeats K/V heads for GQA/MQA before the eager matmul (repeat_kv materializes a copy of
    # num_heads width); MHA passes them through, and SDPA on CUDA takes the grouped heads as is.
    grouped = spec.num_kv_heads != spec.num_heads
    kernel = attention_kernel(spec, profile)
    expanded = grouped and kernel != "fused"
    k_width = (h if expanded else spec.num_kv_heads) * hd
    v_width = (h if expanded else spec.num_kv_heads) * vd
    out: list[Saved] = []
    if rotary:
        out.append(Saved(name=f"{prefix}.rope_tables", width=2 * hd, role="f32",
                         region="inner", per_sequence=True))
    # The CPU math fallback upcasts reduced-precision inputs to fp32 and keeps everything it
    # saves in fp32.
    role: Role = "f32" if kernel == "math" else "cmp"
    out += [
        Saved(name=f"{prefix}.q", width=q_width, role=role),
        Saved(name=f"{prefix}.k", width=k_width, role=role),
        Saved(name=f"{prefix}.v", width=v_width, role=role),
    ]
    if kernel == "eager" and spec.family in SOFTMAX_IN_COMPUTE_DTYPE:
        # BERT's eager softmax takes the scores as they are (no fp32 upcast, no fp32 mask).
        out.append(Saved(name=f"{prefix}.probs", width=h, role="cmp", region="core",
                         quadratic=True))
    elif kernel == "eager":
        # HF eager: softmax(scores, dtype=float32) is saved in fp32; its cast to the compute
        # dtype is a second copy, saved by the matmul with V, when that dtype is not fp32 and
        # no dropout follows. Attention dropout keeps a mask and the dropped probabilities
        # (which the matmul saves instead of the probabilities).
        out.append(Saved(name=f"{prefix}.probs_fp32", width=h, role="f32", region="core",
                         quadratic=True))
        if profile.compute_bytes != 4 and spec.attention_dropout <= 0:
            out.append(Saved(name=f"{prefix}.probs", width=h, role="cmp", region="core",
                             quadratic=True))
    elif kernel == "math":
        # SDPA's math fallback (CPU with dropout): softmax in the (upcast) input dtype.
        out.append(Saved(name=f"{prefix}.probs", width=h, role=role, region="core",
                         quadratic=True))
    else:
        # SDPA/flash keep one fp32 log-sum-exp per row and head (Dao et al. 2022, §3.1: the
        # backward recomputes the scores from Q, K and the statistics) and their output, whose
        # (b, s, h, d) layout is also the output projection's input (one storage).
        out.append(Saved(name=f"{prefix}.lse", width=h, role="f32"))
        if rotary and 0 < spec.rotary_dim < hd:
            # Partial rotary concatenates the rotated and the plain part: Q is then contiguous
            # as (b, h, s, d), so is the output, and the projection needs a transposed copy.
            out.append(Saved(name=f"{prefix}.out", width=h * vd, role="cmp"))
    if kernel != "fused" and spec.attention_dropout > 0:
        out.append(Saved(name=f"{prefix}.dropout_mask", width=h, role="mask", region="core",
                         quadratic=True, mask_of=role))
        out.append(Saved(name=f"{prefix}.probs_dropped", width=h, role=role, region="core",
                         quadratic=True))
    return out


def attention_kernel(spec: ModelSpec, profile: KernelProfile) -> str:
    """``eager``, ``math`` (SDPA's unfused fallback) or ``fused`` (flash/efficient kernels).

    PyTorch's CPU flash kernel has no dropout, so SDPA with attention dropout in training falls
    back to the math path on CPU; the CUDA flash and memory-efficient kernels apply dropout
    from a saved RNG state instead of a mask.
    """
    if profile.attention == "eager":
        return "eager"
    if profile.device == "cpu" and (spec.attention_dropout > 0
                                    or spec.family in _EXPLICIT_MASK_FAMILIES
                                    or spec.value_head_dim != spec.head_dim):
        # The CPU flash kernel also needs one head width for Q, K and V (MLA has two).
        return "math"
    return "fused"


# Families whose HF SDPA path passes an explicit attention-mask tensor (not is_causal), which
# PyTorch's CPU flash kernel does not take: they run the math fallback on CPU.
_EXPLICIT_MASK_FAMILIES = frozenset({"falcon"})


def _mlp(spec: ModelSpec, width: int, *, prefix: str = "mlp") -> list[Saved]:
    """The MLP's saved tensors beyond its input, for one token through one MLP of ``width``."""
    act = spec.activation
    if spec.mlp == "gated":
        # act(gate) * up: act saves gate's output, the mul saves act's output and up's output,
        # the down projection saves the product.
        extra = 1 if act in ("gelu_new", "gelu_fast") else 0
        return [Saved(name=f"{prefix}.gated", width=(4 + 3 * extra) * width, role="cmp")]
    n = _PLAIN_MLP_SAVED.get(act, 2)
    saved = [Saved(name=f"{prefix}.act", width=n * width, role="cmp")]
    return saved


def layer_tensors(
    spec: ModelSpec, profile: KernelProfile, *, layer: int = 0, cross_attention: bool = False
) -> list[Saved]:
    """Every tensor one transformer block saves for backward, for one token."""
    d = spec.hidden_size
    p = spec.dropout
    rotary = spec.positions == "rope"
    out: list[Saved] = []
    out += _norm(spec, "ln_attn", d)
    # The column-parallel projections' input: the normalized hidden state in the matmul dtype.
    # Under autocast each projection casts the fp32 input itself (the autocast cache holds only
    # parameters), so separate q/k/v projections keep three copies; fused ones keep one.
    consumers = _ATTN_INPUT_PROJECTIONS.get(spec.family, 3) + (1 if spec.parallel_block else 0)
    out.append(Saved(name="attn.in", width=d * _copies(consumers, profile), role="cmp",
                     region="outer"))
    if spec.attention == "mla":
        out += _mla_extra(spec)
    out += _attention_core(spec, profile, rotary=rotary)
    out.append(Saved(name="attn.o_in", width=spec.num_heads * spec.value_head_dim, role="cmp"))
    out += _dropout("attn.resid_dropout", d, p, region="outer", of="cmp")
    if cross_attention:
        out += _norm(spec, "ln_cross", d)
        out.append(Saved(name="cross.in", width=d, role="cmp", region="outer"))
        # K and V of the encoder output: one shared tensor in a single dtype (counted once with
        # the embeddings), but each layer's two projections cast it anew under autocast.
        if profile.residual_bytes != profile.compute_bytes:
            out.append(Saved(name="cross.kv_in", width=2 * d, role="cmp", region="outer"))
        out += _attention_core(spec, profile, rotary=False, prefix="cross")
        out.append(Saved(name="cross.o_in", width=spec.num_heads * spec.value_head_dim,
                         role="cmp"))
        out += _dropout("cross.resid_dropout", d, p, region="outer", of="cmp")
    if not spec.parallel_block:
        out += _norm(spec, "ln_mlp", d)
        mlp_inputs = 2 if spec.mlp == "gated" else 1
        if spec.is_moe and layer >= spec.num_dense_layers:
            mlp_inputs = 1  # the router's projection; experts gather the uncast input
        out.append(Saved(name="mlp.in", width=d * _copies(mlp_inputs, profile), role="cmp",
                         region="outer"))
    moe_layer = spec.is_moe and layer >= spec.num_dense_layers
    if moe_layer:
        out += _moe(spec, profile)
    else:
        out += _mlp(spec, spec.intermediate_size)
        if spec.family == "t5" and p > 0:
            out += _dropout("mlp.inner_dropout", spec.intermediate_size, p, region="inner",
                            of="cmp")
            out.append(Saved(name="mlp.dropped", width=spec.intermediate_size, role="cmp"))
    out += _dropout("mlp.resid_dropout", d, p, region="outer", of="cmp")
    return out


def _mla_extra(spec: ModelSpec) -> list[Saved]:
    """DeepSeek's multi-head latent attention: the compressed paths and their RMSNorms."""
    out: list[Saved] = []
    if spec.q_lora_rank:
        out += [
            Saved(name="attn.q_a_norm", width=2 * spec.q_lora_rank + 1, role="f32"),
            Saved(name="attn.q_b_in", width=spec.q_lora_rank, role="cmp"),
        ]
    out += [
        Saved(name="attn.kv_a_norm", width=2 * spec.kv_lora_rank + 1, role="f32"),
        Saved(name="attn.kv_b_in", width=spec.kv_lora_rank, role="cmp"),
    ]
    return out


def _moe(spec: ModelSpec, profile: KernelProfile) -> list[Saved]:
    """A mixture-of-experts MLP for one token, assuming balanced routing.

    The router saves its fp32 probabilities over the experts; each of the ``k`` experts a token
    goes to saves the gathered input, its own MLP tensors and its output (weighted by the
    routing probability). Shared experts act like a dense MLP of ``num_shared × width``.
    transformers 5 runs the routed experts as grouped matmuls over the gathered (uncast) input,
    which CPU autocast does not cover: on the cpu profile they stay in the residual dtype.
    """
    d, k = spec.hidden_size, spec.experts_per_token
    width = spec.moe_intermediate_size or spec.intermediate_size
    role: Role = "res" if profile.device == "cpu" else "cmp"
    out = [Saved(name="moe.router_probs", width=spec.num_experts, role="f32")]
    for s in _mlp(spec, width, prefix="moe.expert"):
        out.append(Saved(name=s.name, width=s.width * k, role=role, region=s.region))
    out.append(Saved(name="moe.gathered_in", width=d * k, role=role))
    out.append(Saved(name="moe.expert_out", width=d * k, role=role))
    if spec.num_shared_experts:
        out.append(Saved(name="moe.shared_in", width=d, role="cmp", region="outer"))
        for s in _mlp(spec, width * spec.num_shared_experts, prefix="moe.shared"):
            out.append(s)
    return out


def embedding_tensors(spec: ModelSpec) -> list[Saved]:
    """The input side: token indices (and the embedding dropout)."""
    if spec.vision_seq_len:
        # The patch convolution keeps its pixel input; the planner adds it per sample.
        return []
    out = [Saved(name="embed.indices", width=1, role="i64", region="outer")]
    if spec.family in _EMBEDDING_NORM_FAMILIES:
        out += _norm(spec, "embed.norm", spec.hidden_size)
    if spec.positions == "learned" and spec.family == "opt":
        # OPT computes position ids per sample (from the attention mask); GPT-2's are shared.
        out.append(Saved(name="embed.position_ids", width=1, role="i64", region="outer"))
    out += _dropout("embed.dropout", spec.hidden_size, spec.embedding_dropout, region="outer",
                    of="res")
    return out


def head_tensors(spec: ModelSpec, profile: KernelProfile) -> list[Saved]:
    """The final norm, the LM head's input and what the cross-entropy loss keeps.

    HF's causal-LM loss upcasts the logits to fp32 and log_softmax saves its fp32 output, which
    NLL also reads: one V-wide fp32 tensor per token. An encoder without an LM head (ViT) saves
    only the final norm.
    """
    d = spec.hidden_size
    if spec.head in ("masked-lm", "pretraining"):
        # BERT's MLM head transforms before the decoder: dense and the activation keep their
        # inputs, and its LayerNorm (no final norm in a post-norm encoder) keeps the
        # activation's output, all in the matmul dtype.
        out = [
            Saved(name="head.transform_in", width=d, role="cmp", region="outer"),
            Saved(name="head.transform_act", width=d, role="cmp", region="outer"),
            Saved(name="head.norm_input", width=d, role="cmp", region="outer"),
            Saved(name="head.norm_stats", width=2, role="f32", region="outer"),
        ]
    else:
        out = _norm(spec, "final_norm", d)
    if spec.arch == "encoder-decoder":
        # T5: the encoder's own final norm and dropout, its output (kept once for the decoder's
        # cross-attention projections), the decoder's final dropout, and each stack's relative
        # position buckets (s × s int64 indices into the bias table, shared by the batch).
        out += _norm(spec, "enc_final_norm", d)
        out += _dropout("enc_final_dropout", d, spec.dropout, region="outer", of="res")
        out.append(Saved(name="enc_output", width=d, role="res", region="outer"))
        out += _dropout("dec_final_dropout", d, spec.dropout, region="outer", of="res")
        if spec.positions == "relative":
            out.append(Saved(name="rel_pos_buckets", width=2, role="i64", region="outer",
                             quadratic=True, per_sequence=True))
    if spec.family == "vit" and not spec.vocab_size:
        # ViTModel's pooler reads the CLS token through a view of the whole normalized output,
        # which keeps that storage alive for backward.
        out.append(Saved(name="head.pooled_view", width=d, role="res", region="outer"))
    if spec.vocab_size:
        out.append(Saved(name="head.in", width=d, role="cmp", region="outer"))
        out.append(Saved(name="loss.log_probs", width=spec.vocab_size, role="f32",
                         region="inner"))
    return out


def tensors_bytes(
    tensors: Iterable[Saved],
    *,
    batch: int,
    seq_len: int,
    profile: KernelProfile,
    tp: int = 1,
    sequence_parallel: bool = False,
    drop_core: bool = False,
) -> float:
    """Bytes of a list of saved tensors for a micro-batch, on one tensor-parallel rank."""
    tokens = batch * seq_len
    total = 0.0
    for t in tensors:
        if drop_core and t.region == "core":
            continue
        b = t.bytes(tokens=tokens, seq_len=seq_len, profile=profile)
        if t.region in ("inner", "core") or sequence_parallel:
            b /= tp
        total += b
    return total
