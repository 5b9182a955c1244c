"""``trainmedic memory plan|measure|oom|kv``: how much memory a training (or serving) run needs
per GPU and for what, what fits, and why a real run ran out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from trainmedic.cli.memory_options import (
    choice_option,
    config_option,
    gpu_options,
    gpu_target_of,
    int_option,
    margin_option,
)

if TYPE_CHECKING:
    from trainmedic.memory.estimate import MemoryEstimate

__all__ = ["memory"]


@click.group()
def memory() -> None:
    """Plan and explain training memory, before a GPU is touched.

    \b
    Examples:
      trainmedic memory plan --config llama-3.1-8b.json --batch 4 --seq 4096 --gpu h100
      trainmedic memory plan --config config.json --batch 8 --seq 2048 --strategy zero3 --gpus 8
      trainmedic memory measure mypkg.models:build --batch 8 --seq 512
      trainmedic memory oom train.log
      trainmedic memory kv --config mistral-7b.json --batch 16 --context 8192 --gpu a100-80gb
    """


def _show(estimate: MemoryEstimate, as_json: bool) -> None:
    from trainmedic.report.memory_json import dumps, estimate_doc
    from trainmedic.report.memory_text import estimate_lines

    click.echo(dumps(estimate_doc(estimate)) if as_json else "\n".join(estimate_lines(estimate)))
    if estimate.fits is False:
        raise click.exceptions.Exit(1)


@memory.command("plan")
@config_option
@int_option("--batch", 1, "Micro-batch per data-parallel rank.", "batch_size")
@int_option("--seq", 2048, "Tokens per sample (ignored for ViT: patches + CLS).", "seq_len")
@choice_option("--precision", "bf16-mixed", "fp32", "fp16-mixed", "bf16")
@choice_option("--optimizer", "adamw", "sgd", "sgd-momentum", "adam", "adam-8bit", "adafactor",
               "lion")
@click.option("--strategy", default=None, type=click.Choice(
    ["single", "ddp", "zero1", "zero2", "zero3", "fsdp", "fsdp-grad-op", "fsdp-hybrid"]),
    help="Data parallelism [default: single on one GPU, ddp on several].")
@int_option("--gpus", 1, "Total GPUs.")
@int_option("--gpus-per-node", 8, "GPUs per node (the shard group of fsdp-hybrid).")
@int_option("--tp", 1, "Tensor-parallel degree.")
@click.option("--sp", "sequence_parallel", is_flag=True,
              help="Sequence parallelism with --tp (splits norms/dropout activations too).")
@int_option("--pp", 1, "Pipeline-parallel degree (1F1B; the first stage is planned).")
@int_option("--grad-accum", 1,
            "Micro-batches per optimizer step (pipeline: micro-batches in flight).")
@choice_option("--recompute", "none", "selective", "full")
@choice_option("--offload", "none", "optimizer", "params")
@choice_option("--attention", "sdpa", "eager", "flash")
@choice_option("--device-profile", "cuda", "cpu",
         help="Whose kernels decide what is saved (cpu: to compare with measure mode).")
@gpu_options
@margin_option
@int_option("--layers", None, "Override the number of layers (to compare with a reduced model).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan_cmd(config: str, gpu: str | None, gpu_memory: str | None, margin: float,
             layers: int | None, as_json: bool, **step: Any) -> None:
    """Plan one GPU's memory for a training step of a Hugging Face model config.

    With --gpu or --gpu-memory the first line says whether it fits. Then the ledger by category
    at the peak and its phase, the largest micro-batch that fits, and when it does not, the
    smallest changes ranked by throughput cost. Exit 1 when it does not fit.

    \b
    Examples:
      trainmedic memory plan --config llama-3.1-8b.json --batch 2 --seq 4096 --gpu h100
      trainmedic memory plan --config gpt2-xl.json --batch 16 --seq 1024 --gpus 8 \\
          --strategy zero2 --gpu-memory 40GB --json
    """
    from trainmedic.memory.estimate import estimate_plan
    from trainmedic.memory.planner import PlanConfig

    target = gpu_target_of(gpu, gpu_memory)
    step["strategy"] = step["strategy"] or ("single" if step["gpus"] == 1 else "ddp")
    _show(estimate_plan(config, PlanConfig(**step), layers=layers, gpu=target, margin=margin),
          as_json)


@memory.command("kv")
@config_option
@int_option("--batch", 1, "Concurrent sequences.", "batch_size")
@click.option("--context", "context_len", type=int, required=True,
              help="Tokens per sequence (prompt + output).")
@int_option("--encoder-len", None,
            "Encoder tokens of an encoder-decoder model (default: --context).")
@choice_option("--weight-dtype", "bf16", "fp32", "fp16", "fp8", "int8", "int4")
@choice_option("--kv-dtype", "bf16", "fp32", "fp16", "fp8", "int8")
@choice_option("--mla-cache", "latent", "decompressed",
         help="What an MLA model (DeepSeek) caches per token.")
@gpu_options
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def kv_cmd(config: str, gpu: str | None, gpu_memory: str | None, as_json: bool,
           **sizing: Any) -> None:
    """Size inference: weights plus the KV cache for a batch and context length.

    Handles MHA, GQA, MQA and DeepSeek's MLA, and T5's cross-attention cache. With a GPU size,
    says whether it fits and the largest batch (at this context) and context (at this batch)
    that do, keeping 10% of the GPU for activations and workspace. Exit 1 when it does not fit.

    \b
    Examples:
      trainmedic memory kv --config llama-3.1-8b.json --batch 32 --context 8192 --gpu h100
      trainmedic memory kv --config mistral-7b.json --batch 1 --context 32768 --kv-dtype fp8
    """
    from trainmedic.memory.config_source import resolve_config
    from trainmedic.memory.families import load_spec
    from trainmedic.memory.kv import inference_plan
    from trainmedic.report.memory_json import dumps, kv_doc
    from trainmedic.report.memory_text import kv_lines

    spec = load_spec(resolve_config(config))
    target = gpu_target_of(gpu, gpu_memory)
    result = inference_plan(spec, **sizing,
                            gpu_memory_bytes=target.memory_bytes if target else None)
    click.echo(dumps(kv_doc(result, spec=spec, source=config)) if as_json else "\n".join(
        kv_lines(result, spec=spec, source=config, gpu_label=target.label if target else "")))
    if result.fits is False:
        raise click.exceptions.Exit(1)


@memory.command("measure")
@click.argument("factory", required=False, metavar="MODULE:FUNCTION")
@click.option("--config", "config", default=None, metavar="FILE|ID",
              help="Measure the model transformers builds from this config.json instead.")
@int_option("--layers", None,
            "With --config: build this many layers (to trace a big model quickly).")
@int_option("--batch", 1, "Micro-batch.", "batch_size")
@int_option("--seq", 512, "Tokens per sample.", "seq_len")
@choice_option("--precision", "fp32", "bf16-mixed", "fp16-mixed", "bf16")
@choice_option("--optimizer", "adamw", "sgd", "sgd-momentum", "adam", "adafactor")
@choice_option("--attention", "sdpa", "eager", help="With --config: attention kernel.")
@int_option("--steps", 2, "Training steps to trace (the second has the optimizer state).")
@gpu_options
@margin_option
@click.option("--json", "as_json", is_flag=True, help="Print the ledger as JSON.")
def measure_cmd(factory: str | None, config: str | None, layers: int | None, attention: str,
                gpu: str | None, gpu_memory: str | None, margin: float, as_json: bool,
                **step: Any) -> None:
    """Measure a real training step of any nn.Module, without allocating its memory.

    MODULE:FUNCTION (or path/to/file.py:FUNCTION) returns the model; it is built on fake
    tensors and traced through forward, loss, backward and optimizer step on CPU kernels,
    with bytes attributed to categories and modules. The model gets token ids of shape
    (batch, seq) from its config.vocab_size; its loss is `.loss` if the output has one, else
    cross-entropy over the logits. The function may instead return a dict {"model": m,
    "inputs": fn(model, batch, seq), "loss": fn(output, batch)} for other inputs.

    \b
    Examples:
      trainmedic memory measure mypkg.models:build_lm --batch 8 --seq 1024
      trainmedic memory measure train.py:make_model --precision bf16-mixed --gpu a10g
      trainmedic memory measure --config config.json --layers 2 --batch 4 --seq 2048
    """
    from trainmedic.memory.config_source import resolve_config
    from trainmedic.memory.estimate import estimate_measured
    from trainmedic.memory.factories import FactoryParts, config_factory, split_factory
    from trainmedic.memory.measurement import MeasureConfig, load_factory

    if bool(factory) == bool(config):
        raise click.UsageError("give MODULE:FUNCTION or --config FILE (one of them)")
    target = gpu_target_of(gpu, gpu_memory)
    source = config or factory or ""
    parts = (FactoryParts(config_factory(resolve_config(source), layers, attention), None, None)
             if config else split_factory(load_factory(source), source))
    traced = MeasureConfig(**step, inputs=parts.inputs, loss=parts.loss)
    _show(estimate_measured(source, parts.model, traced, gpu=target, margin=margin), as_json)


def _register_oom() -> None:
    # `memory oom` reads logs and snapshots, not configs: its own module.
    from trainmedic.cli.memory_oom import oom_cmd

    memory.add_command(oom_cmd, "oom")


_register_oom()
