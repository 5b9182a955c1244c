"""Build the transformers model a config describes, and a training batch for it.

Measure mode and the accuracy benchmarks need the *same* model the analytic planner reads from
a ``config.json``: :func:`build_hf_model` builds the head class ``ModelSpec.head_class`` names
with transformers' ``from_config`` (no hub, no weights), optionally shallower
(``num_layers``) so that a 70B config traces in seconds; :func:`spec_with_layers` gives the
``ModelSpec`` of that shallower model. Build it under ``torch.device("meta")`` or inside a
``FakeTensorMode`` to allocate nothing.

:func:`hf_inputs` makes a batch ``model(**batch)`` trains on; :func:`hf_loss` turns the
outputs into the scalar to call ``backward()`` on (``outputs.loss`` when the head computes one;
for a bare model such as ``ViTModel``, the mean of its hidden states plus the mean of its
pooler output, so that every parameter gets a gradient).

torch and transformers are imported when a function needs them; without transformers these
raise :class:`~trainmedic.errors.MissingExtraError` naming the ``hf`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainmedic.errors import ConfigError, MissingExtraError
from trainmedic.memory.families import (
    FAMILIES,
    family_for,
    read_config,
    spec_from_config,
    spec_with_layers,
)
from trainmedic.memory.spec import HeadKind

if TYPE_CHECKING:
    import torch

__all__ = ["build_hf_model", "build_auto_model", "hf_config_dict", "hf_inputs", "hf_loss",
           "spec_with_layers"]

#: The transformers Auto class that builds each head kind from a config.
_AUTO_CLASSES: dict[HeadKind, str] = {
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "pretraining": "AutoModelForPreTraining",
    "image-classification": "AutoModelForImageClassification",
    "base": "AutoModel",
}

#: Keys dropped before building: a quantization recipe would make transformers build
#: quantized layers (and need their kernels); trainmedic plans the trainable model.
_DROPPED_KEYS = ("quantization_config", "auto_map", "torch_dtype", "dtype")


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:
        raise MissingExtraError(
            "transformers is not installed; building a Hugging Face model needs it: install "
            "the hf extra (pip install 'trainmedic[hf]') after your torch build"
        ) from exc
    return transformers


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} is {value!r}; expected a positive integer")
    return value


def _source_and_data(config: Mapping[str, Any] | str | Path) -> tuple[str, dict[str, Any]]:
    if isinstance(config, str | Path):
        return str(config), read_config(config)
    return "<config>", dict(config)


def hf_config_dict(config: Mapping[str, Any] | str | Path, *, num_layers: int | None = None,
                   dropout: float | None = None) -> dict[str, Any]:
    """The config as transformers reads it: legacy names translated, depth set to
    ``num_layers`` (when given), every dropout probability set to ``dropout`` (when given).

    ``spec_from_config`` of the result describes the model :func:`build_hf_model` builds.
    """
    source, data = _source_and_data(config)
    family = family_for(data, source=source)
    spec_from_config(data, source=source)  # bad configs fail here, with the field named
    out = family.to_transformers(data)
    if num_layers is not None:
        out = family.with_layers(out, _positive("num_layers", num_layers))
    if dropout is not None:
        if isinstance(dropout, bool) or not isinstance(dropout, int | float) or not (
                0.0 <= dropout < 1.0):
            raise ConfigError(f"dropout is {dropout!r}; expected a probability in [0, 1)")
        for key in family.dropout_keys:
            out[key] = float(dropout)
    return out


def build_hf_model(config: Mapping[str, Any] | str | Path, *, num_layers: int | None = None,
                   attn_implementation: str = "eager", dropout: float | None = None,
                   dtype: torch.dtype | None = None,
                   experts_implementation: str | None = None) -> torch.nn.Module:
    """Build (randomly initialized, in training mode) the ``ModelSpec.head_class`` model of
    ``config`` (a config.json path or its parsed contents).

    ``num_layers`` sets the depth (of each stack, for T5; DeepSeek keeps at least one MoE
    layer after its leading dense ones); ``dropout`` sets every dropout probability (None
    keeps the config's); ``dtype`` is the parameter dtype (None: torch's default dtype, not
    the config's stored ``torch_dtype``). Works under ``torch.device("meta")`` and inside a
    ``FakeTensorMode``, where nothing is allocated.

    MoE models (Mixtral, DeepSeek) take ``experts_implementation`` (None: transformers'
    default, ``grouped_mm``). With transformers 5 and torch 2.13, ``grouped_mm`` runs forward
    and backward on CPU in any dtype, but on meta or fake tensors only in bfloat16 (torch's meta
    kernel checks the CUDA kernel's dtype); ``eager`` needs real data (it asks which experts
    were hit); ``batched_mm`` runs everywhere but copies each token's expert weights, so its
    memory is not what training with the other two uses.
    """
    import torch

    transformers = _transformers()
    data = hf_config_dict(config, num_layers=num_layers, dropout=dropout)
    source = str(config) if isinstance(config, str | Path) else "<config>"
    spec = spec_from_config(data, source=source)
    for key in _DROPPED_KEYS:
        data.pop(key, None)
    hf_config = transformers.AutoConfig.for_model(**data)
    auto = getattr(transformers, _AUTO_CLASSES[spec.head])
    options: dict[str, Any] = {"attn_implementation": attn_implementation,
                               "dtype": dtype or torch.get_default_dtype()}
    if spec.is_moe and experts_implementation is not None:
        options["experts_implementation"] = experts_implementation
    model = auto.from_config(hf_config, **options)
    if type(model).__name__ != spec.head_class:
        raise ConfigError(
            f"transformers built {type(model).__name__} for this {spec.family} config; "
            f"expected {spec.head_class} (the class the parameter count is for)"
        )
    model.train()
    return model


def _head_kind(model: torch.nn.Module) -> tuple[str, HeadKind]:
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    family = FAMILIES.lookup(model_type) if isinstance(model_type, str) else None
    name = type(model).__name__
    if family is None or name not in family.heads:
        known = sorted(head for f in FAMILIES.families() for head in f.heads)
        raise ConfigError(
            f"model class {name} is not one trainmedic makes inputs for; expected a model "
            f"from build_hf_model ({', '.join(known)})"
        )
    return family.name, family.heads[name]


def _position_limit(config: Any, family: str) -> int | None:
    """Longest sequence a learned position table allows (None when positions are not
    learned)."""
    if family == "gpt2":
        return int(config.n_positions)
    if family in ("opt", "bert"):
        return int(config.max_position_embeddings)
    if family == "roberta":
        # RoBERTa's positions start after the padding index.
        return int(config.max_position_embeddings) - int(config.pad_token_id or 0) - 1
    return None


def hf_inputs(model: torch.nn.Module, batch_size: int, seq_len: int) -> dict[str, torch.Tensor]:
    """A random training batch for a model from :func:`build_hf_model`, on its device.

    LMs get ``input_ids`` and ``labels`` (T5's decoder input comes from its labels; BERT
    pre-training adds ``next_sentence_label``); bare text models get ``input_ids`` (T5Model
    also ``decoder_input_ids``); ViT gets ``pixel_values`` of the config's image size
    (``seq_len`` is then fixed by the image, and ignored), plus ``labels`` for a classifier.
    Inside a ``FakeTensorMode`` call it inside the same mode as the model was built in.
    """
    import torch

    batch_size = _positive("batch_size", batch_size)
    seq_len = _positive("seq_len", seq_len)
    family, head = _head_kind(model)
    config: Any = getattr(model, "config")  # noqa: B009 (nn.Module typing has no config)
    first = next(iter(model.parameters()))
    device, float_dtype = first.device, first.dtype
    if family == "vit":
        side = config.image_size
        height, width = (side, side) if isinstance(side, int) else tuple(side)
        batch = {"pixel_values": torch.randn(batch_size, config.num_channels, height, width,
                                             device=device, dtype=float_dtype)}
        if head == "image-classification" and config.num_labels > 0:
            batch["labels"] = torch.randint(0, config.num_labels, (batch_size,), device=device)
        return batch
    limit = _position_limit(config, family)
    if limit is not None and seq_len > limit:
        raise ConfigError(
            f"seq_len is {seq_len}, but this {family} model's position table covers {limit} "
            f"tokens; use seq_len <= {limit}"
        )
    ids = torch.randint(0, config.vocab_size, (batch_size, seq_len), device=device)
    if head in ("causal-lm", "masked-lm", "seq2seq-lm"):
        return {"input_ids": ids, "labels": ids.clone()}
    if head == "pretraining":
        return {"input_ids": ids, "labels": ids.clone(),
                "next_sentence_label": torch.randint(0, 2, (batch_size,), device=device)}
    if family == "t5":
        return {"input_ids": ids, "decoder_input_ids": ids.clone()}
    return {"input_ids": ids}


def hf_loss(outputs: Any) -> torch.Tensor:
    """The scalar to backpropagate: ``outputs.loss``, or for a bare model (no loss) the mean
    of ``last_hidden_state`` plus the mean of ``pooler_output`` when there is one."""
    loss = getattr(outputs, "loss", None)
    if loss is not None:
        return loss
    hidden = getattr(outputs, "last_hidden_state", None)
    if hidden is None:
        raise ConfigError(
            f"the model's outputs ({type(outputs).__name__}) have neither a loss nor "
            f"last_hidden_state; expected the outputs of a model from build_hf_model"
        )
    total = hidden.mean()
    pooled = getattr(outputs, "pooler_output", None)
    if pooled is not None:
        total = total + pooled.mean()
    return total


def build_auto_model(config: Mapping[str, Any] | str | Path, *, num_layers: int | None = None,
                     attn_implementation: str = "sdpa") -> torch.nn.Module:
    """Build any model transformers knows from its config, for families the planner lacks.

    The class is the config's ``architectures[0]`` when transformers has it, else its causal-LM
    auto class. ``num_layers`` sets ``num_hidden_layers`` when the config has that field. Meant
    for measure mode (inside a FakeTensorMode nothing is allocated).
    """
    import torch

    transformers = _transformers()
    source, data = _source_and_data(config)
    data = dict(data)
    if num_layers is not None and "num_hidden_layers" in data:
        data["num_hidden_layers"] = _positive("num_layers", num_layers)
    model_type = data.pop("model_type", None)
    try:
        hf_config = transformers.AutoConfig.for_model(model_type, **data)
    except (ValueError, KeyError) as exc:
        raise ConfigError(
            f"{source}: transformers {transformers.__version__} does not know model_type "
            f"{model_type!r} either ({exc}); write a factory and run `trainmedic memory "
            f"measure module:factory`"
        ) from exc
    archs = data.get("architectures") or []
    cls = getattr(transformers, archs[0], None) if archs else None
    options = {"attn_implementation": attn_implementation, "dtype": torch.get_default_dtype()}
    if cls is not None and hasattr(cls, "_from_config"):
        model = cls._from_config(hf_config, **options)
    else:
        model = transformers.AutoModelForCausalLM.from_config(hf_config, **options)
    model.train()
    return model
