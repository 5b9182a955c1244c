"""Encoder and encoder-decoder families: BERT, RoBERTa, T5 and ViT, parsed from their Hugging
Face ``config.json``.

As in ``decoder_families``, each parser follows the transformers config class's field names
and defaults and adds up the parameters of the model transformers builds, with tied weights
counted once; ``tests/memory/test_families.py`` checks the counts against transformers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainmedic.memory.config_fields import ConfigFields
from trainmedic.memory.decoder_families import set_depth
from trainmedic.memory.family_registry import Family, Parser
from trainmedic.memory.param_counts import (
    embedding_params,
    layernorm_params,
    linear_params,
    rmsnorm_params,
)
from trainmedic.memory.spec import HeadKind, ModelSpec

__all__ = ["ENCODER_FAMILIES"]


def _parse_bert_like(name: str) -> Parser:
    """BERT and RoBERTa: post-LN encoder with learned positions and token types."""

    def parse(fields: ConfigFields, head_class: str, head: HeadKind) -> ModelSpec:
        d = fields.size("hidden_size")
        layers = fields.size("num_hidden_layers")
        heads = fields.size("num_attention_heads")
        vocab = fields.size("vocab_size")
        inter = fields.size("intermediate_size")
        fields.divides(numerator=("hidden_size", d),
                       denominator=("num_attention_heads", heads))
        positions = fields.size("max_position_embeddings", default=512)
        token_types = fields.count("type_vocab_size", default=2)
        tied = fields.flag("tie_word_embeddings", default=True)
        embed = (embedding_params(vocab, d) + embedding_params(positions, d)
                 + embedding_params(token_types, d))
        layer = (4 * linear_params(d, d, bias=True) + linear_params(d, inter, bias=True)
                 + linear_params(inter, d, bias=True) + 2 * layernorm_params(d))
        pooler = linear_params(d, d, bias=True)
        # MLM head: dense + LayerNorm transform, then the vocabulary decoder. Tied, its weight
        # is the word embeddings' and its bias the head's ``bias``; untied, transformers ties
        # neither, so the decoder's own weight and bias come on top of the head's ``bias``.
        mlm_decoder = vocab if tied else vocab * d + 2 * vocab
        mlm = linear_params(d, d, bias=True) + layernorm_params(d) + mlm_decoder
        if head == "masked-lm":
            extra = mlm
        elif head == "pretraining":
            extra = mlm + pooler + linear_params(d, 2, bias=True)  # + next-sentence head
        else:
            extra = pooler
        out_embed = mlm_decoder if head in ("masked-lm", "pretraining") else 0
        hidden_dropout = fields.probability("hidden_dropout_prob", default=0.1)
        return ModelSpec(
            family=name, arch="encoder", hidden_size=d, num_layers=layers, num_heads=heads,
            num_kv_heads=heads, head_dim=d // heads, intermediate_size=inter, vocab_size=vocab,
            max_positions=positions, mlp="plain",
            activation=fields.text("hidden_act", default="gelu"), norm="layernorm",
            attention="mha", tied_embeddings=tied,
            num_params=embed + layernorm_params(d) + layers * layer + extra,
            num_embedding_params=embed + out_embed, dropout=hidden_dropout,
            attention_dropout=fields.probability("attention_probs_dropout_prob", default=0.1),
            embedding_dropout=hidden_dropout, dtype=fields.dtype(), head_class=head_class,
            head=head, layer_params=(layer,) * layers, positions="learned", qkv_bias=True,
            attn_out_bias=True, mlp_bias=True, norm_bias=True,
            lm_head_bias=head in ("masked-lm", "pretraining"), pre_norm=False,
        )

    return parse


def _parse_t5(fields: ConfigFields, head_class: str, head: HeadKind) -> ModelSpec:
    d = fields.size("d_model", "hidden_size")
    enc_layers = fields.size("num_layers", "num_hidden_layers")
    dec_layers = fields.size("num_decoder_layers", default=enc_layers)
    heads = fields.size("num_heads", "num_attention_heads")
    head_dim = fields.size("d_kv", "head_dim")
    inter = fields.size("d_ff")
    vocab = fields.size("vocab_size")
    buckets = fields.size("relative_attention_num_buckets", default=32)
    proj = fields.text("feed_forward_proj", default="relu")
    parts = proj.split("-")
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
        raise fields.error(
            f"'feed_forward_proj' is {proj!r}; expected an activation or 'gated-<activation>' "
            f"(e.g. 'relu', 'gated-gelu')"
        )
    gated = len(parts) == 2
    activation = "gelu_new" if proj == "gated-gelu" else parts[-1]
    inner = heads * head_dim
    attn = 3 * linear_params(d, inner, bias=False) + linear_params(inner, d, bias=False)
    ff = (2 if gated else 1) * linear_params(d, inter, bias=False) + linear_params(
        inter, d, bias=False)
    # T5's LayerNorm is a scale only (RMS); the first block of each stack owns the relative
    # position table (buckets x heads).
    relative = embedding_params(buckets, heads)
    enc = attn + ff + 2 * rmsnorm_params(d)
    dec = 2 * attn + ff + 3 * rmsnorm_params(d)
    layer_params = ((enc + relative,) + (enc,) * (enc_layers - 1)
                    + (dec + relative,) + (dec,) * (dec_layers - 1))
    embed = embedding_params(vocab, d)
    # transformers >= 5 ties T5's LM head to the shared embedding whatever
    # tie_word_embeddings says (it only decides the output scaling), so it is counted once.
    dropout = fields.probability("dropout_rate", default=0.1)
    return ModelSpec(
        family="t5", arch="encoder-decoder", hidden_size=d, num_layers=enc_layers,
        num_decoder_layers=dec_layers, num_heads=heads, num_kv_heads=heads, head_dim=head_dim,
        intermediate_size=inter, vocab_size=vocab, max_positions=None,
        mlp="gated" if gated else "plain", activation=activation, norm="rmsnorm",
        attention="mha", tied_embeddings=True,
        num_params=embed + sum(layer_params) + 2 * rmsnorm_params(d),
        num_embedding_params=embed, dropout=dropout, attention_dropout=dropout,
        embedding_dropout=dropout, activation_dropout=dropout, dtype=fields.dtype(),
        head_class=head_class, head=head, layer_params=layer_params, positions="relative",
    )


def _t5_depth(config: dict[str, Any], num_layers: int) -> dict[str, Any]:
    out = set_depth(config, num_layers, "num_layers", "num_hidden_layers")
    out["num_decoder_layers"] = num_layers
    return out


def _image_side(fields: ConfigFields, name: str) -> int:
    """A square image or patch side: an int, or a [h, w] pair with h == w."""
    value = fields.config.get(name)
    if isinstance(value, list):
        if len(value) != 2 or value[0] != value[1]:
            raise fields.error(
                f"'{name}' is {value!r}; only square sizes are supported (give one integer)"
            )
        inner = ConfigFields({name: value[0]}, source=fields.source, family=fields.family)
        return inner.size(name)
    return fields.size(name)


def _num_labels(config: Mapping[str, Any]) -> int:
    """Classes of a classification head as transformers counts them: ``id2label``'s length,
    else ``num_labels``, else 2."""
    id2label = config.get("id2label")
    if isinstance(id2label, Mapping) and id2label:
        return len(id2label)
    num_labels = config.get("num_labels")
    if isinstance(num_labels, int) and not isinstance(num_labels, bool) and num_labels >= 0:
        return num_labels
    return 2


def _parse_vit(fields: ConfigFields, head_class: str, head: HeadKind) -> ModelSpec:
    d = fields.size("hidden_size")
    layers = fields.size("num_hidden_layers")
    heads = fields.size("num_attention_heads")
    inter = fields.size("intermediate_size")
    fields.divides(numerator=("hidden_size", d), denominator=("num_attention_heads", heads))
    image = _image_side(fields, "image_size")
    patch = _image_side(fields, "patch_size")
    channels = fields.size("num_channels", default=3)
    qkv_bias = fields.flag("qkv_bias", default=True)
    patches = (image // patch) ** 2
    if patches == 0:
        raise fields.error(
            f"'patch_size' ({patch}) is larger than 'image_size' ({image}); expected a patch "
            f"no larger than the image"
        )
    # CLS token, position table (patches + CLS), patch projection (a conv: d x C x p x p + d).
    embed = d + (patches + 1) * d + channels * patch * patch * d + d
    layer = (3 * linear_params(d, d, bias=qkv_bias) + linear_params(d, d, bias=True)
             + 2 * layernorm_params(d) + linear_params(d, inter, bias=True)
             + linear_params(inter, d, bias=True))
    num_labels = 0
    if head == "image-classification":
        num_labels = _num_labels(fields.config)
        extra = linear_params(d, num_labels, bias=True) if num_labels else 0
    else:
        extra = linear_params(d, fields.size("pooler_output_size", default=d), bias=True)
    hidden_dropout = fields.probability("hidden_dropout_prob", default=0.0)
    return ModelSpec(
        family="vit", arch="encoder", hidden_size=d, num_layers=layers, num_heads=heads,
        num_kv_heads=heads, head_dim=d // heads, intermediate_size=inter, vocab_size=0,
        max_positions=patches + 1, mlp="plain",
        activation=fields.text("hidden_act", default="gelu"), norm="layernorm",
        attention="mha", tied_embeddings=False,
        num_params=embed + layers * layer + layernorm_params(d) + extra,
        num_embedding_params=embed, dropout=hidden_dropout,
        attention_dropout=fields.probability("attention_probs_dropout_prob", default=0.0),
        embedding_dropout=hidden_dropout, image_size=image, patch_size=patch,
        num_channels=channels, dtype=fields.dtype(), head_class=head_class, head=head,
        num_labels=num_labels, layer_params=(layer,) * layers, positions="learned",
        qkv_bias=qkv_bias, attn_out_bias=True, mlp_bias=True, norm_bias=True,
        lm_head_bias=head == "image-classification" and num_labels > 0,
    )


def _hidden_layers(config: dict[str, Any], num_layers: int) -> dict[str, Any]:
    return set_depth(config, num_layers, "num_hidden_layers")


_BERT_DROPOUT = ("hidden_dropout_prob", "attention_probs_dropout_prob")

ENCODER_FAMILIES: tuple[Family, ...] = (
    Family(name="bert", model_types=("bert",), parse=_parse_bert_like("bert"),
           heads={"BertForMaskedLM": "masked-lm", "BertModel": "base",
                  "BertForPreTraining": "pretraining"},
           default_head="BertForMaskedLM", with_layers=_hidden_layers,
           dropout_keys=_BERT_DROPOUT),
    Family(name="roberta", model_types=("roberta",), parse=_parse_bert_like("roberta"),
           heads={"RobertaForMaskedLM": "masked-lm", "RobertaModel": "base"},
           default_head="RobertaForMaskedLM", with_layers=_hidden_layers,
           dropout_keys=_BERT_DROPOUT),
    Family(name="t5", model_types=("t5",), parse=_parse_t5,
           heads={"T5ForConditionalGeneration": "seq2seq-lm", "T5Model": "base"},
           default_head="T5ForConditionalGeneration", with_layers=_t5_depth,
           dropout_keys=("dropout_rate",)),
    Family(name="vit", model_types=("vit",), parse=_parse_vit,
           heads={"ViTModel": "base", "ViTForImageClassification": "image-classification"},
           default_head="ViTModel", with_layers=_hidden_layers, dropout_keys=_BERT_DROPOUT),
)
