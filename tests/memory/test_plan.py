"""The analytic plan against measure mode (the oracle: real HF modules traced through two
training steps on fake tensors), and the plan's own invariants."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import pytest

from trainmedic.errors import ConfigError
from trainmedic.memory.families import load_spec, spec_with_layers
from trainmedic.memory.ledger import CATEGORIES
from trainmedic.memory.planner import PlanConfig, plan

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model-configs"


def _compare(stem: str, *, precision: str, layers: int, batch: int, seq: int,
             attention: str = "sdpa") -> tuple:
    pytest.importorskip("transformers")
    import torch

    from trainmedic.memory.hf_build import build_hf_model, hf_inputs, hf_loss
    from trainmedic.memory.measurement import MeasureConfig, measure

    path = CONFIGS / f"{stem}.json"
    dtype = torch.bfloat16 if precision == "bf16" else None
    measured = measure(
        functools.partial(build_hf_model, path, num_layers=layers,
                          attn_implementation=attention, dtype=dtype),
        MeasureConfig(batch_size=batch, seq_len=seq, inputs=hf_inputs,
                      loss=lambda out, _b: hf_loss(out), precision=precision))
    planned = plan(spec_with_layers(load_spec(path), layers),
                   PlanConfig(batch_size=batch, seq_len=seq, precision=precision,
                              attention=attention, device_profile="cpu",
                              include_context=False))
    return measured, planned


@pytest.mark.parametrize(
    ("stem", "precision", "batch", "seq", "attention"),
    [
        ("llama-3.2-1b", "bf16-mixed", 4, 512, "sdpa"),   # activations dominate: backward
        ("llama-3.2-1b", "fp32", 4, 256, "eager"),         # eager s² scores
        ("gpt2-large", "fp32", 2, 256, "sdpa"),            # tied embeddings, dropout masks
        ("mistral-7b-v0.1", "fp32", 1, 128, "sdpa"),       # states dominate: optimizer step
        ("t5-small", "bf16-mixed", 4, 256, "sdpa"),        # encoder-decoder
        ("mixtral-8x7b-v0.1", "bf16", 2, 256, "sdpa"),     # experts
    ],
)
def test_plan_matches_measure_mode(stem: str, precision: str, batch: int, seq: int,
                                   attention: str) -> None:
    measured, planned = _compare(stem, precision=precision, layers=2, batch=batch, seq=seq,
                                 attention=attention)
    assert planned.peak_bytes == pytest.approx(measured.peak_bytes, rel=0.03)
    assert planned.peak_phase == measured.peak_phase
    for cat in CATEGORIES:
        m, p = measured.categories[cat], planned.categories[cat]
        if max(m, p) >= 0.01 * measured.peak_bytes:
            assert p == pytest.approx(m, rel=0.05), cat
    assert planned.activations_total_bytes == pytest.approx(measured.activations_total_bytes,
                                                            rel=0.03)


def _spec():
    return load_spec(CONFIGS / "llama-3.2-1b.json")


def test_ledger_sums_to_the_peak_and_every_figure_is_estimated() -> None:
    led = plan(_spec(), PlanConfig(batch_size=2, seq_len=1024))
    assert led.peak_bytes == sum(led.categories.values())
    assert set(led.basis.values()) == {"estimated"}
    assert led.notes, "a plan states the assumptions it rests on"


def test_peak_grows_with_batch_and_recompute_lowers_it() -> None:
    spec, base = _spec(), PlanConfig(batch_size=4, seq_len=2048)
    peaks = [plan(spec, replace(base, batch_size=b)).peak_bytes for b in (1, 2, 4, 8)]
    assert peaks == sorted(peaks) and peaks[0] < peaks[-1]
    full = plan(spec, replace(base, recompute="full"))
    # Each layer keeps only its input; the LM head's fp32 log-probabilities (V wide) are not
    # recomputed and dominate what is left.
    assert full.activations_total_bytes < plan(spec, base).activations_total_bytes / 3


def test_gradient_accumulation_keeps_grads_alive_in_the_forward() -> None:
    spec = _spec()
    one = plan(spec, PlanConfig(batch_size=1, seq_len=128, precision="fp32"))
    acc = plan(spec, PlanConfig(batch_size=1, seq_len=128, precision="fp32", grad_accum=4))
    assert acc.details["moment_bytes"]["forward"] > one.details["moment_bytes"]["forward"]


def test_offload_and_fused_optimizer_remove_their_bytes() -> None:
    spec = _spec()
    z3 = PlanConfig(batch_size=1, seq_len=512, strategy="zero3", gpus=8)
    off = plan(spec, replace(z3, offload="optimizer"))
    assert off.categories["optimizer"] == 0 and off.categories["master_weights"] == 0
    with pytest.raises(ConfigError, match="offload"):
        plan(spec, PlanConfig(strategy="ddp", gpus=2, offload="params"))
    foreach = plan(spec, PlanConfig(batch_size=1, seq_len=128, precision="fp32"))
    fused = plan(spec, PlanConfig(batch_size=1, seq_len=128, precision="fp32",
                                  optimizer_impl="fused"))
    assert fused.details["moment_bytes"]["optimizer"] < foreach.details["moment_bytes"][
        "optimizer"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("batch_size", 0), ("seq_len", -1), ("precision", "fp8"), ("optimizer", "adamax"),
     ("recompute", "some"), ("attention", "xformers"), ("device_profile", "tpu"),
     ("grad_accum", 0)],
)
def test_bad_config_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        PlanConfig(**{field: value})  # type: ignore[arg-type]


def test_enumerated_fields_are_literals_and_match_their_checks() -> None:
    # the type says the choices; the runtime check uses the same tuple (typing.get_args)
    import typing

    from trainmedic.memory import activations, model_states, planner, strategy

    hints = typing.get_type_hints(planner.PlanConfig)
    for field, choices in (("precision", model_states.PRECISIONS),
                           ("optimizer", model_states.OPTIMIZERS),
                           ("strategy", strategy.STRATEGIES),
                           ("recompute", strategy.RECOMPUTE), ("offload", strategy.OFFLOAD),
                           ("attention", activations.ATTENTION_KERNELS),
                           ("device_profile", activations.DEVICE_PROFILES),
                           ("optimizer_impl", planner.OPTIMIZER_IMPLS)):
        assert typing.get_origin(hints[field]) is typing.Literal, field
        assert typing.get_args(hints[field]) == choices, field
