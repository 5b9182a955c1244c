"""The analytic planner: one GPU's memory ledger for a training step, before a GPU is touched.

``plan(spec, config)`` adds up the model states (:mod:`~trainmedic.memory.model_states`), shards
them by the layout (:mod:`~trainmedic.memory.strategy`), counts the activations tensor by tensor
for the kernel profile (:mod:`~trainmedic.memory.activations`), and finds the peak among the three
phases of a steady-state step (optimizer state already allocated, grads set to None before the
forward as ``zero_grad()`` does by default):

- forward end:     states + all activations + the logits and their fp32 copy;
- backward start:  states + all activations + the logits + the loss gradients (the usual peak);
- backward end:    states + all gradients + what the first layers still hold;
- optimizer step:  states + all gradients + the optimizer's temporaries.

Every figure is ``estimated``; ``trainmedic memory measure`` gives the measured counterpart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from trainmedic.errors import ConfigError
from trainmedic.memory.activations import (
    SOFTMAX_IN_COMPUTE_DTYPE,
    AttentionKernel,
    DeviceProfile,
    KernelProfile,
    Saved,
    attention_kernel,
    embedding_tensors,
    head_tensors,
    layer_tensors,
    tensors_bytes,
)
from trainmedic.memory.ledger import CATEGORIES, Ledger
from trainmedic.memory.model_states import (
    OPTIMIZERS,
    PRECISIONS,
    Optimizer,
    Precision,
    optimizer_state_bytes,
    precision_bytes,
)
from trainmedic.memory.spec import ModelSpec
from trainmedic.memory.strategy import (
    OFFLOAD,
    RECOMPUTE,
    ZERO_REDUCE_BUCKET_ELEMENTS,
    Layout,
    Offload,
    Recompute,
    Strategy,
    layout,
)

__all__ = ["PlanConfig", "plan", "layer_params", "largest_param_numel"]

#: CUDA context, cuBLAS/cuDNN workspaces and NCCL buffers a training process holds beyond the
#: caching allocator's bytes: typically 0.5–1.5 GiB on recent GPUs and drivers (an estimate; it
#: is not visible to ``torch.cuda.max_memory_allocated``).
CUDA_CONTEXT_BYTES = 1 << 30

#: Saved-tensor names of a layer's MLP half (see activations.layer_tensors).
_MLP_PREFIXES = ("mlp.", "moe.", "ln_mlp.")

OptimizerImpl = Literal["default", "foreach", "for-loop", "fused"]
OPTIMIZER_IMPLS: tuple[str, ...] = get_args(OptimizerImpl)


@dataclass(kw_only=True, frozen=True)
class PlanConfig:
    """What the training step looks like; every field has the default a plain run would use."""

    batch_size: int = 1
    """Micro-batch per data-parallel rank (samples in one forward)."""
    seq_len: int = 2048
    """Tokens per sample (ViT: derived from the image and patch size; this is ignored)."""
    precision: Precision = "bf16-mixed"
    """fp32, bf16-mixed, fp16-mixed or bf16 (pure); see model_states for the semantics."""
    optimizer: Optimizer = "adamw"
    """sgd, sgd-momentum, adam, adamw, adam-8bit, adafactor or lion."""
    strategy: Strategy = "single"
    """single, ddp, zero1, zero2, zero3, fsdp, fsdp-grad-op or fsdp-hybrid."""
    gpus: int = 1
    """Total GPUs (data × tensor × pipeline parallel)."""
    gpus_per_node: int = 8
    """GPUs per node (the shard group of fsdp-hybrid)."""
    tp: int = 1
    """Tensor-parallel degree; must divide the attention heads."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism: split the activations outside the TP regions too."""
    pp: int = 1
    """Pipeline-parallel degree (1F1B schedule; the first stage is planned)."""
    recompute: Recompute = "none"
    """Activation recomputation: none, selective (attention core) or full (per layer)."""
    offload: Offload = "none"
    """CPU offload: none, optimizer (states and master weights) or params (also parameters)."""
    grad_accum: int = 1
    """Micro-batches per optimizer step; >1 keeps gradients alive through later forwards."""
    attention: AttentionKernel = "sdpa"
    """Attention kernel: eager (keeps the s² scores), sdpa or flash."""
    device_profile: DeviceProfile = "cuda"
    """cuda or cpu: decides dropout-mask size, optimizer implementation and the context bytes."""
    include_context: bool = True
    """Add the CUDA context estimate as ``overhead`` (cuda profile only)."""
    ddp_bucket_view: bool = False
    """DDP's ``gradient_as_bucket_view``: when False (its default) buckets copy the gradients."""
    optimizer_impl: OptimizerImpl = "default"
    """torch optimizer implementation: default (foreach on cuda, for-loop on cpu), foreach,
    for-loop or fused (``fused=True``: no full-size scratch)."""

    def __post_init__(self) -> None:
        for name in ("batch_size", "seq_len", "gpus", "gpus_per_node", "tp", "pp", "grad_accum"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name}: got {value!r}, expected a positive integer")
        if self.precision not in PRECISIONS:
            raise ConfigError(
                f"precision: got {self.precision!r}, expected one of {list(PRECISIONS)}"
            )
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(
                f"optimizer: got {self.optimizer!r}, expected one of {list(OPTIMIZERS)}"
            )
        if self.recompute not in RECOMPUTE:
            raise ConfigError(
                f"recompute: got {self.recompute!r}, expected one of {list(RECOMPUTE)}"
            )
        if self.optimizer_impl not in OPTIMIZER_IMPLS:
            raise ConfigError(
                f"optimizer_impl: got {self.optimizer_impl!r}, expected one of "
                f"{list(OPTIMIZER_IMPLS)}"
            )
        if self.offload not in OFFLOAD:
            raise ConfigError(f"offload: got {self.offload!r}, expected one of {list(OFFLOAD)}")
        if self.sequence_parallel and self.tp == 1:
            raise ConfigError("sequence_parallel: needs tp > 1 (it splits activations across TP)")
        # Validates the device profile and attention kernel names.
        KernelProfile(attention=self.attention, device=self.device_profile)


def _attention_params(spec: ModelSpec) -> int:
    d = spec.hidden_size
    if spec.attention == "mla":
        q = (d * spec.q_lora_rank + spec.q_lora_rank * spec.num_heads * spec.head_dim
             if spec.q_lora_rank else d * spec.num_heads * spec.head_dim)
        kv = d * (spec.kv_lora_rank + spec.qk_rope_head_dim) + spec.kv_lora_rank * (
            spec.num_heads * (spec.head_dim - spec.qk_rope_head_dim + spec.value_head_dim))
        return q + kv + spec.num_heads * spec.value_head_dim * d
    q = d * spec.num_heads * spec.head_dim
    kv = d * spec.num_kv_heads * (spec.head_dim + spec.value_head_dim)
    return q + kv + spec.num_heads * spec.value_head_dim * d


def _mlp_params(spec: ModelSpec, width: int) -> int:
    return (3 if spec.mlp == "gated" else 2) * spec.hidden_size * width


def layer_params(spec: ModelSpec) -> list[int]:
    """Parameters of each block (encoder blocks, then decoder blocks).

    The family parser's exact counts when it gives them; otherwise the shapes give each block's
    share (attention + dense MLP or experts), scaled so the blocks add up to
    ``num_params - num_embedding_params`` (norms and biases spread in proportion).
    """
    blocks = spec.num_layers + spec.num_decoder_layers
    if len(spec.layer_params) == blocks:
        return list(spec.layer_params)  # counted exactly by the family parser
    raw: list[int] = []
    for i in range(blocks):
        attn = _attention_params(spec) * (2 if i >= spec.num_layers else 1)  # + cross-attention
        if spec.is_moe and i >= spec.num_dense_layers:
            width = spec.moe_intermediate_size or spec.intermediate_size
            mlp = (spec.num_experts + spec.num_shared_experts) * _mlp_params(spec, width)
            mlp += spec.num_experts * spec.hidden_size
        else:
            mlp = _mlp_params(spec, spec.intermediate_size)
        raw.append(attn + mlp)
    budget = max(spec.num_params - spec.num_embedding_params, 0)
    total = sum(raw) or 1
    scaled = [r * budget // total for r in raw]
    if scaled:
        scaled[-1] += budget - sum(scaled)
    return scaled


def largest_param_numel(spec: ModelSpec) -> int:
    """Elements of the model's largest single parameter tensor: the token embedding (or LM
    head) for language models; transformers 5 stores each MoE layer's experts as one 3-D tensor
    (experts × 2·width × hidden for the fused gate/up projection)."""
    d = spec.hidden_size
    candidates = [spec.vocab_size * d, d * spec.intermediate_size,
                  d * (spec.num_heads + 2 * spec.num_kv_heads) * spec.head_dim]
    if spec.is_moe:
        width = spec.moe_intermediate_size or spec.intermediate_size
        candidates.append(spec.num_experts * 2 * width * d)
    return max(candidates)


def _matrix_shapes(spec: ModelSpec, layers: int) -> tuple[tuple[int, int], ...]:
    """2-D parameter shapes, for Adafactor's factored second moment (approximate, per layer)."""
    d = spec.hidden_size
    shapes: list[tuple[int, int]] = []
    per_layer = [(d, spec.num_heads * spec.head_dim), (d, spec.num_kv_heads * spec.head_dim),
                 (d, spec.num_kv_heads * spec.value_head_dim),
                 (spec.num_heads * spec.value_head_dim, d)]
    n_mlp = 3 if spec.mlp == "gated" else 2
    per_layer += [(d, spec.intermediate_size)] * n_mlp
    for _ in range(layers):
        shapes += per_layer
    if spec.vocab_size:
        shapes.append((spec.vocab_size, d))
    return tuple(shapes)


@dataclass(kw_only=True, frozen=True)
class _Stage:
    """What the planned GPU holds before sharding: its share of parameters and layers."""

    params: int
    largest_layer: int
    layers: int
    first: bool
    last: bool


def _stage(spec: ModelSpec, cfg: PlanConfig) -> _Stage:
    per_layer = layer_params(spec)
    blocks = len(per_layer)
    if cfg.pp > blocks:
        raise ConfigError(f"pp: got {cfg.pp}, expected at most the {blocks} layers of the model")
    if cfg.pp == 1:
        return _Stage(params=spec.num_params, largest_layer=max(per_layer, default=0),
                      layers=blocks, first=True, last=True)
    # The first stage: its share of the blocks plus the input embedding (Megatron places the
    # embedding on the first stage and the LM head on the last).
    n = -(-blocks // cfg.pp)
    params = sum(per_layer[:n]) + spec.num_embedding_params
    if not spec.tied_embeddings and spec.vocab_size:
        params -= spec.vocab_size * spec.hidden_size  # the untied LM head lives on the last stage
    return _Stage(params=params, largest_layer=max(per_layer[:n], default=0), layers=n,
                  first=True, last=False)


def plan(spec: ModelSpec, cfg: PlanConfig) -> Ledger:
    """One GPU's ledger for a training step of ``spec`` under ``cfg`` (all figures estimated)."""
    if cfg.tp > 1 and spec.num_heads % cfg.tp:
        raise ConfigError(
            f"tp: got {cfg.tp}, expected a divisor of the {spec.num_heads} attention heads"
        )
    lay = layout(cfg.strategy, gpus=cfg.gpus, tp=cfg.tp, pp=cfg.pp,
                 gpus_per_node=cfg.gpus_per_node)
    prec = precision_bytes(cfg.precision, strategy_family=lay.family)
    profile = KernelProfile(attention=cfg.attention, device=cfg.device_profile,
                            compute_bytes=prec.compute, residual_bytes=prec.residual)
    stage = _stage(spec, cfg)
    notes: list[str] = []

    # --- model states (ZeRO paper §3.1), per GPU -------------------------------------------
    # Tensor parallelism splits the matmul weights; the norms' few parameters are replicated
    # (ignored: < 0.1% of any model here).
    numel = stage.params / cfg.tp
    params_b = numel * prec.param / lay.divisor("params")
    grads_b = numel * prec.grad / lay.divisor("grads")
    master_b = numel * prec.master / lay.divisor("optimizer")
    opt_b = optimizer_state_bytes(
        cfg.optimizer, numel=int(numel), state_dtype_bytes=prec.state_dtype,
        matrix_shapes=_matrix_shapes(spec, stage.layers) if cfg.optimizer == "adafactor" else (),
    ) / lay.divisor("optimizer")
    if cfg.offload in ("optimizer", "params"):
        notes.append("offload: optimizer states and master weights live in CPU memory")
        opt_b = 0.0
        master_b = 0.0
    if cfg.offload == "params":
        if not lay.shards_params:
            raise ConfigError(
                f"offload: 'params' needs a strategy that shards parameters (zero3 or fsdp); "
                f"got {cfg.strategy!r}"
            )
        notes.append("offload: parameters live in CPU memory and are fetched per layer")
        params_b = 0.0

    # --- activations, per micro-batch (Korthikanti et al. 2022 §4) ----------------------------
    b, s = cfg.batch_size, cfg.seq_len
    if spec.vision_seq_len:
        s = spec.vision_seq_len
    tp, sp = cfg.tp, cfg.sequence_parallel
    drop_core = cfg.recompute == "selective"

    def _bytes(ts: list[Saved]) -> float:
        return tensors_bytes(ts, batch=b, seq_len=s, profile=profile, tp=tp,
                             sequence_parallel=sp, drop_core=drop_core)

    layer_lists = [layer_tensors(spec, profile, layer=i if i < spec.num_layers else 0,
                                 cross_attention=i >= spec.num_layers)
                   for i in range(stage.layers)]
    per_layer_act = [_bytes(ts) for ts in layer_lists]
    # What each layer's MLP half holds (freed first in backward: the MLP runs last).
    per_layer_mlp_act = [_bytes([t for t in ts if t.name.startswith(_MLP_PREFIXES)])
                         for ts in layer_lists]
    in_flight = min(cfg.pp, cfg.grad_accum) if cfg.pp > 1 else 1
    if cfg.pp > 1 and cfg.grad_accum < cfg.pp:
        notes.append(
            f"pp: only {cfg.grad_accum} micro-batch(es) per step for {cfg.pp} stages: the "
            f"pipeline bubble dominates; raise grad_accum (micro-batches) to at least pp"
        )
    if cfg.recompute == "full":
        # Only each layer's input survives the forward; backward recomputes one layer at a time.
        layer_input = b * s * spec.hidden_size * prec.residual / (tp if sp else 1)
        layers_act = stage.layers * layer_input + max(per_layer_act, default=0.0)
    else:
        layers_act = sum(per_layer_act)
    embed_act = _bytes(embedding_tensors(spec)) * (2 if spec.arch == "encoder-decoder" else 1)
    if spec.vision_seq_len:
        embed_act += b * spec.num_channels * spec.image_size**2 * prec.residual
    head_act = _bytes(head_tensors(spec, profile)) if stage.last else 0.0
    activations = in_flight * (layers_act + embed_act) + head_act

    # --- temporaries ---------------------------------------------------------------------------
    temps_fwd = 0.0
    temps_bwd = 0.0
    tokens = b * s
    if stage.last and spec.vocab_size:
        vocab = spec.vocab_size / tp
        # The forward's logits (compute dtype) and the loss's fp32 upcast of them; the training
        # loop lets the model output go once the loss is computed (HF Trainer does), so at the
        # start of backward only the fp32 gradients of log-softmax and of the logits are live
        # together (both V-wide per token).
        logits = tokens * vocab * prec.compute
        upcast = tokens * vocab * 4 if prec.compute != 4 else 0.0
        temps_fwd = logits + upcast
        temps_bwd = 2 * tokens * vocab * 4
    casts = 0.0
    if prec.casts_weights:
        # autocast keeps each matmul's low-precision weight copy for backward.
        matmul_numel = (stage.params - spec.num_embedding_params
                        + (spec.vocab_size * spec.hidden_size if stage.last else 0)) / tp
        casts = max(matmul_numel, 0) * prec.compute
    gathered = 0.0
    if lay.shards_params:
        # ZeRO-3 / FSDP gather each layer's full parameters for compute: the current and the
        # prefetched unit are live at once (FSDP's default forward/backward prefetch);
        # SHARD_GRAD_OP keeps every gathered parameter from the forward to the backward.
        unit = stage.largest_layer / tp * prec.compute
        gathered = numel * prec.compute if lay.keeps_gathered else 2 * unit
    comm = 0.0
    if lay.family == "ddp" and not cfg.ddp_bucket_view:
        comm = numel * prec.grad
        notes.append("ddp: gradient buckets copy the gradients (gradient_as_bucket_view=False)")
    elif lay.family == "zero":
        comm = min(numel, ZERO_REDUCE_BUCKET_ELEMENTS) * prec.grad
    opt_temps = _optimizer_temporaries(cfg, numel=numel / lay.divisor("optimizer"),
                                       largest=largest_param_numel(spec) / tp,
                                       state_bytes=prec.state_dtype)
    # Tied input/output embeddings get two gradients: the embedding backward's dense V×d
    # gradient is a temporary next to the LM head's, and the sum is made out of place
    # (measured on CPU: two V×d gradients live at the end of backward).
    tied_grad_temps = 0.0
    if spec.tied_embeddings and spec.vocab_size and stage.first and stage.last:
        tied_grad_temps = 2 * spec.vocab_size * spec.hidden_size / tp * prec.grad

    overhead = CUDA_CONTEXT_BYTES if (cfg.device_profile == "cuda" and cfg.include_context) else 0
    grads_live_fwd = grads_b if cfg.grad_accum > 1 else 0.0

    per_layer_params = layer_params(spec)[: stage.layers]
    # The blocks' share of this GPU's gradients (the rest: embeddings, final norm, LM head).
    layers_share = min(sum(per_layer_params) / max(stage.params, 1), 1.0)
    # Gradients of the head, which backward reaches first: an untied LM head, or ViTModel's
    # pooler (a dense layer on the CLS token).
    head_numel = 0
    if stage.last and spec.vocab_size and not spec.tied_embeddings:
        head_numel = spec.vocab_size * spec.hidden_size
    elif stage.last and spec.family == "vit" and not spec.vocab_size:
        head_numel = spec.hidden_size * (spec.hidden_size + 1)
    lm_head_grad = grads_b * head_numel / max(stage.params, 1)
    act_scale = (layers_act / sum(per_layer_act)) if sum(per_layer_act) else 0.0

    def layer_held(i: int) -> float:
        """Activations layer ``i`` holds until its backward (its input only, when recomputed)."""
        return in_flight * per_layer_act[i] * act_scale

    def mlp_share(i: int) -> float:
        """Share of layer ``i``'s parameters in its MLP (or experts)."""
        attn = _attention_params(spec)
        if spec.is_moe and i >= spec.num_dense_layers:
            width = spec.moe_intermediate_size or spec.intermediate_size
            mlp = (spec.num_experts + spec.num_shared_experts) * _mlp_params(spec, width)
        else:
            mlp = _mlp_params(spec, spec.intermediate_size)
        return mlp / max(attn + mlp, 1)

    def transient(i: int) -> float:
        """Gradients flowing through layer ``i``'s widest point during its backward."""
        widest = spec.intermediate_size
        if spec.is_moe and i >= spec.num_dense_layers:
            width = spec.moe_intermediate_size or spec.intermediate_size
            widest = 2 * width * spec.experts_per_token
        return tokens * (widest / tp + spec.hidden_size) * prec.compute

    # Eager attention and SDPA's math fallback differentiate through the s² scores: in fp32,
    # the gradients of the probabilities, of the scores and of the masked scores are live at
    # once; under autocast the first arrives in bf16 and is freed once upcast (two fp32 ones).
    # Counts measured on CPU with measure mode (benchmarks/memory_accuracy.py).
    score_transient = 0.0
    if attention_kernel(spec, profile) != "fused":
        score_bytes = prec.compute if spec.family in SOFTMAX_IN_COMPUTE_DTYPE else 4
        live_scores = 3 if prec.compute == 4 else 2
        score_transient = live_scores * spec.num_heads / tp * s * tokens * score_bytes
    # Of the attention's parameters, the output projection's (its gradient comes first).
    o_proj_share = (spec.num_heads * spec.value_head_dim * spec.hidden_size
                    / max(_attention_params(spec), 1))

    def _at(**live: float) -> dict[str, float]:
        cats = dict.fromkeys(CATEGORIES, 0.0)
        cats.update(params=params_b, optimizer=opt_b, master_weights=master_b, overhead=overhead)
        cats.update(live)
        return cats

    moments = {
        "forward": _at(grads=grads_live_fwd, activations=activations,
                       temporaries=casts + gathered + temps_fwd),
        "backward_start": _at(grads=grads_live_fwd, activations=activations,
                              temporaries=casts + gathered + temps_bwd, comm_buckets=comm),
        # The LM head's weight gradient arrives once the log-softmax gradient is freed.
        "backward_head": _at(grads=grads_live_fwd + lm_head_grad, activations=activations,
                             temporaries=casts + gathered + temps_bwd / 2, comm_buckets=comm),
    }
    # Backward, layer by layer from the last: each layer's gradients appear while the layers
    # below still hold their activations, plus the gradients flowing through the layer's widest
    # point. With experts' large gradients this peak falls mid-backward, not at either end.
    stage_params = max(sum(per_layer_params), 1)
    layer_grads = [grads_b * p_i / stage_params * layers_share for p_i in per_layer_params]
    held = [layer_held(i) for i in range(stage.layers)]
    grads_so_far = grads_live_fwd + lm_head_grad
    for i in reversed(range(stage.layers)):
        # Inside the MLP's backward (it ran last, so it is differentiated first): the down
        # projection's gradient is done, the gradients of the MLP's wide intermediate are live;
        # the up (and gate) projections' gradients arrive next, the attention's after them.
        down_share = 1 / (3 if spec.mlp == "gated" else 2)
        new_grad = layer_grads[i] * mlp_share(i) * down_share if not grads_live_fwd else 0.0
        grads_so_far += new_grad
        below = in_flight * embed_act + sum(held[: i + 1])
        if cfg.recompute == "full":
            below += per_layer_act[i]  # the layer's activations, recomputed for its backward
        moments[f"backward_layer_{i}"] = _at(
            grads=grads_so_far, activations=below,
            temporaries=casts * (i + 1) / stage.layers + gathered + transient(i)
            + (layer_grads[i] if grads_live_fwd else 0.0),
            comm_buckets=comm)
        if not grads_live_fwd:
            grads_so_far += layer_grads[i] * mlp_share(i) * (1 - down_share)
        if score_transient:
            # Inside the attention backward: the MLP half is freed, and the gradients of the
            # s² scores (of the probabilities, the scores and the masked scores) are live.
            attn_grads = layer_grads[i] * (1 - mlp_share(i)) * o_proj_share
            moments[f"backward_attention_{i}"] = _at(
                grads=grads_so_far + (attn_grads if not grads_live_fwd else 0.0),
                activations=below - in_flight * per_layer_mlp_act[i] * act_scale,
                temporaries=casts * (i + 1) / stage.layers + gathered + score_transient
                + (layer_grads[i] if grads_live_fwd else 0.0),
                comm_buckets=comm)
        if not grads_live_fwd:
            grads_so_far += layer_grads[i] * (1 - mlp_share(i))
    # All grads, and what the first layers still hold when the last grads arrive (autocast's
    # weight copies were released with the nodes that saved them).
    moments["backward_end"] = _at(grads=grads_b, activations=in_flight * embed_act,
                                  temporaries=gathered + tied_grad_temps, comm_buckets=comm)
    moments["optimizer"] = _at(grads=grads_b, temporaries=opt_temps)
    totals = {k: sum(v.values()) for k, v in moments.items()}
    moment = max(totals, key=lambda k: totals[k])
    phase = "backward" if moment.startswith("backward") else moment
    categories = {k: int(round(v)) for k, v in moments[moment].items()}
    notes += _notes(cfg, lay, prec.casts_weights)
    details: dict[str, Any] = {
        "moment_bytes": {k: int(round(v)) for k, v in totals.items()},
        "states_bytes": {"params": int(params_b), "grads": int(grads_b),
                         "optimizer": int(opt_b), "master_weights": int(master_b)},
        "peak_moment": moment,
        "per_layer_activation_bytes": [int(round(x)) for x in per_layer_act[:1]],
        "layers_on_gpu": stage.layers,
        "micro_batches_in_flight": in_flight,
        "data_parallel": lay.dp,
        "seq_len": s,
    }
    return Ledger(
        peak_bytes=sum(categories.values()),
        peak_phase=phase,  # type: ignore[arg-type]
        categories=categories,
        basis=dict.fromkeys(CATEGORIES, "estimated"),
        num_params=spec.num_params,
        activations_total_bytes=int(round(activations)),
        notes=tuple(notes),
        details=details,
    )


def _optimizer_temporaries(
    cfg: PlanConfig, *, numel: float, largest: float, state_bytes: int
) -> float:
    """Scratch the optimizer step allocates.

    torch's default on CUDA is the ``foreach`` implementation, which for Adam/AdamW materializes
    ``sqrt(exp_avg_sq)`` for the whole parameter list at once (torch/optim/adam.py,
    ``_multi_tensor_adam``); on CPU the default is the per-tensor loop, whose scratch is one
    parameter's worth; ``fused=True`` updates in place.
    """
    if cfg.optimizer not in ("adam", "adamw") or cfg.offload != "none":
        return 0.0
    impl = cfg.optimizer_impl
    if impl == "default":
        impl = "foreach" if cfg.device_profile == "cuda" else "for-loop"
    if impl == "fused":
        return 0.0
    if impl == "foreach":
        return numel * state_bytes
    # The per-tensor loop makes sqrt(v) and its quotient for one tensor at a time: two
    # temporaries the size of the largest parameter (torch/optim/adam.py, _single_tensor_adam).
    return 2 * largest * state_bytes


def _notes(cfg: PlanConfig, lay: Layout, casts: bool) -> list[str]:
    notes = [
        f"kernel profile: {cfg.attention} attention on {cfg.device_profile}; activations follow "
        f"the Hugging Face transformers implementation of the family",
        f"precision {cfg.precision} under {lay.family}: "
        + ("AMP autocast, fp32 params and grads, bf16 weight casts kept for backward"
           if casts else "see trainmedic.memory.model_states for the bytes per state"),
    ]
    if cfg.recompute != "none":
        notes.append(f"recompute: {cfg.recompute} (Korthikanti et al. 2022 §5)")
    return notes
