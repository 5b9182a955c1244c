"""``trainmedic memory plan|measure|oom|kv``: how much memory a training (or serving) run needs
per GPU and for what, what fits, and why a real run ran out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

__all__ = ["memory"]

_SCHEMA = "trainmedic.memory/1"


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


def _gpu_bytes(gpu: str | None, gpu_memory: str | None) -> tuple[int | None, str]:
    from trainmedic.memory.gpus import lookup_gpu, parse_size

    if gpu and gpu_memory:
        raise click.UsageError("give --gpu NAME or --gpu-memory SIZE, not both")
    if gpu:
        entry = lookup_gpu(gpu)
        return entry.total_bytes, f"{entry.display_name} ({entry.total_bytes_source} capacity)"
    if gpu_memory:
        return parse_size(gpu_memory, field="--gpu-memory"), gpu_memory
    return None, ""


def _emit_json(doc: dict[str, Any]) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=False))


def _load_spec(config: str, layers: int | None) -> Any:
    from trainmedic.memory.families import load_spec

    spec = load_spec(config)
    if layers is not None:
        from trainmedic.memory.families import spec_with_layers

        spec = spec_with_layers(spec, layers)
    return spec


@memory.command("plan")
@click.option("--config", "config", required=True, metavar="FILE",
              help="A Hugging Face config.json (decoder, encoder, T5, ViT; no weights needed).")
@click.option("--batch", "batch", type=int, default=1, show_default=True,
              help="Micro-batch per data-parallel rank.")
@click.option("--seq", "seq", type=int, default=2048, show_default=True,
              help="Tokens per sample (ignored for ViT: patches + CLS).")
@click.option("--precision", default="bf16-mixed", show_default=True,
              type=click.Choice(["fp32", "bf16-mixed", "fp16-mixed", "bf16"]))
@click.option("--optimizer", default="adamw", show_default=True,
              type=click.Choice(["sgd", "sgd-momentum", "adam", "adamw", "adam-8bit",
                                 "adafactor", "lion"]))
@click.option("--strategy", default=None,
              type=click.Choice(["single", "ddp", "zero1", "zero2", "zero3", "fsdp",
                                 "fsdp-grad-op", "fsdp-hybrid"]),
              help="Data parallelism [default: single on one GPU, ddp on several].")
@click.option("--gpus", type=int, default=1, show_default=True, help="Total GPUs.")
@click.option("--gpus-per-node", type=int, default=8, show_default=True)
@click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel degree.")
@click.option("--sp", "sequence_parallel", is_flag=True,
              help="Sequence parallelism with --tp (splits norms/dropout activations too).")
@click.option("--pp", type=int, default=1, show_default=True,
              help="Pipeline-parallel degree (1F1B; the first stage is planned).")
@click.option("--grad-accum", type=int, default=1, show_default=True,
              help="Micro-batches per optimizer step (pipeline: micro-batches in flight).")
@click.option("--recompute", default="none", show_default=True,
              type=click.Choice(["none", "selective", "full"]))
@click.option("--offload", default="none", show_default=True,
              type=click.Choice(["none", "optimizer", "params"]))
@click.option("--attention", default="sdpa", show_default=True,
              type=click.Choice(["eager", "sdpa", "flash"]))
@click.option("--device-profile", default="cuda", show_default=True,
              type=click.Choice(["cuda", "cpu"]),
              help="Whose kernels decide what is saved (cpu: to compare with measure mode).")
@click.option("--gpu", default=None, metavar="NAME", help="GPU model, e.g. h100, a100-40gb.")
@click.option("--gpu-memory", default=None, metavar="SIZE",
              help="GPU memory, e.g. 80GB (10^9) or 80GiB (2^30).")
@click.option("--margin", type=float, default=0.10, show_default=True,
              help="Share of the GPU kept free for allocator fragmentation.")
@click.option("--layers", type=int, default=None,
              help="Override the number of layers (to compare with a reduced model).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan_cmd(config: str, batch: int, seq: int, precision: str, optimizer: str,
             strategy: str | None, gpus: int, gpus_per_node: int, tp: int,
             sequence_parallel: bool, pp: int, grad_accum: int, recompute: str, offload: str,
             attention: str, device_profile: str, gpu: str | None, gpu_memory: str | None,
             margin: float, layers: int | None, as_json: bool) -> None:
    """Plan one GPU's memory for a training step of a Hugging Face model config.

    Prints the ledger by category (parameters, gradients, optimizer state, master weights,
    activations, temporaries, buckets, CUDA context) at the peak and its phase. With --gpu or
    --gpu-memory, says whether it fits, the largest micro-batch that does, and when it does
    not, the smallest changes ranked by throughput cost. Exit 1 when it does not fit.

    \b
    Examples:
      trainmedic memory plan --config llama-3.1-8b.json --batch 2 --seq 4096 --gpu h100
      trainmedic memory plan --config gpt2-xl.json --batch 16 --seq 1024 --gpus 8 \\
          --strategy zero2 --gpu-memory 40GB --json
    """
    from trainmedic.errors import UnsupportedModelError
    from trainmedic.memory.fit import fit
    from trainmedic.memory.plan import PlanConfig, plan
    from trainmedic.report.memory_text import fit_lines, ledger_lines

    gpu_bytes, gpu_label = _gpu_bytes(gpu, gpu_memory)
    try:
        spec = _load_spec(config, layers)
    except UnsupportedModelError as exc:
        if strategy not in (None, "single") or gpus != 1 or tp != 1 or pp != 1:
            raise
        # No analytic family: measure the model transformers builds from the config instead.
        _measure_and_show(
            source=config, factory=_auto_factory(config, layers, attention), batch=batch,
            seq=seq, precision=precision, optimizer=optimizer, steps=2, as_json=as_json,
            gpu_bytes=gpu_bytes, gpu_label=gpu_label, margin=margin,
            note=f"model_type {exc.model_type!r} has no analytic family: measured instead "
                 f"(measure mode, CPU kernels, one GPU)")
        return
    cfg = PlanConfig(
        batch_size=batch, seq_len=seq, precision=precision, optimizer=optimizer,
        strategy=strategy or ("single" if gpus == 1 else "ddp"), gpus=gpus,
        gpus_per_node=gpus_per_node, tp=tp, sequence_parallel=sequence_parallel, pp=pp,
        grad_accum=grad_accum, recompute=recompute, offload=offload, attention=attention,
        device_profile=device_profile,
    )
    result = fit(spec, cfg, gpu_bytes=gpu_bytes, margin=margin) if gpu_bytes else None
    ledger = result.ledger if result else plan(spec, cfg)
    if as_json:
        doc: dict[str, Any] = {"schema": _SCHEMA, "kind": "plan", "source": config,
                               "model": _model_json(spec), "config": _config_json(cfg)}
        doc.update(ledger.to_json())
        if result is not None:
            doc.update({
                "gpu_memory_bytes": result.gpu_bytes, "usable_bytes": result.usable_bytes,
                "margin": result.margin, "fits": result.fits,
                "max_micro_batch": result.max_micro_batch,
                "interventions": [i.to_json() for i in result.interventions],
                "combined": [i.to_json() for i in result.combined],
            })
        _emit_json(doc)
    else:
        title = (f"{Path(config).name}: {spec.family}, {spec.num_params / 1e9:.2f}B params; "
                 f"micro-batch {batch} x {ledger.details.get('seq_len', seq)} tokens, "
                 f"{precision}, {optimizer}, {cfg.strategy} on {gpus} GPU(s)"
                 + (f", tp {tp}" if tp > 1 else "") + (f", pp {pp}" if pp > 1 else ""))
        lines = ledger_lines(ledger, title=title)
        lines += [f"  note: {n}" for n in ledger.notes]
        if result is not None:
            lines += fit_lines(result, gpu_label=gpu_label)
        click.echo("\n".join(lines))
    if result is not None and not result.fits:
        raise click.exceptions.Exit(1)


def _model_json(spec: Any) -> dict[str, Any]:
    return {"family": spec.family, "arch": spec.arch, "num_params": spec.num_params,
            "hidden_size": spec.hidden_size, "num_layers": spec.num_layers,
            "num_heads": spec.num_heads, "num_kv_heads": spec.num_kv_heads,
            "vocab_size": spec.vocab_size}


def _config_json(cfg: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(cfg)


@memory.command("oom")
@click.argument("file", metavar="FILE")
@click.option("--device", type=int, default=None,
              help="For a snapshot with several GPUs: the device to explain.")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
def oom_cmd(file: str, device: int | None, as_json: bool) -> None:
    """Explain a CUDA out-of-memory error from a log, or from a memory snapshot.

    FILE is a text log or traceback holding the OOM message (torch 1.x and 2.x CUDA formats,
    ROCm/HIP; the last one in the log is explained), or a pickle written by
    torch.cuda.memory._dump_snapshot, read without admitting any class (a snapshot is a
    pickle; nothing in it is executed). Says whether the memory was fragmented (reserved but
    unallocated), held by another process, or genuinely full, with the arithmetic, and what to
    change. Exit 1 when an OOM was found and explained.

    \b
    Examples:
      trainmedic memory oom train.log
      python train.py 2>&1 | tee run.log; trainmedic memory oom run.log --json
      trainmedic memory oom snapshot.pickle
    """
    from trainmedic.errors import UnreadableInputError, UnrecognizedInputError
    from trainmedic.memory.oom import explain_oom, parse_oom

    path = Path(file)
    try:
        head = path.open("rb").read(2)
    except OSError as exc:
        raise UnreadableInputError(file, f"cannot open ({exc.strerror}); expected a log "
                                   "with a CUDA OOM message or a memory snapshot") from exc
    # A snapshot is a pickle: protocol 2+ starts with 0x80; older protocols are text, so the
    # file name decides for them.
    if head[:1] == b"\x80" or path.suffix.lower() in (".pickle", ".pkl", ".pk"):
        from trainmedic.memory.snapshot import explain_snapshot, read_snapshot, summarize_snapshot

        summary = summarize_snapshot(read_snapshot(path), path=file)
        explanation = explain_snapshot(summary, device=device)
        kind = "snapshot"
    else:
        text = path.read_text(encoding="utf-8", errors="replace")
        report = parse_oom(text)
        if report is None:
            raise UnrecognizedInputError(
                file, "no out-of-memory message found; expected a log or traceback with "
                "'CUDA out of memory' (or a torch.cuda.memory._dump_snapshot pickle)")
        explanation = explain_oom(report)
        kind = "message"
    if as_json:
        _emit_json({"schema": _SCHEMA, "kind": f"oom-{kind}", "source": file,
                    **explanation.to_json()})
    else:
        from trainmedic.report.memory_text import oom_lines

        click.echo("\n".join(oom_lines(explanation, source=file)))
    raise click.exceptions.Exit(1)


@memory.command("kv")
@click.option("--config", "config", required=True, metavar="FILE",
              help="A Hugging Face config.json of a decoder or encoder-decoder model.")
@click.option("--batch", type=int, default=1, show_default=True,
              help="Concurrent sequences.")
@click.option("--context", type=int, required=True, help="Tokens per sequence (prompt + output).")
@click.option("--encoder-len", type=int, default=None,
              help="Encoder tokens of an encoder-decoder model (default: --context).")
@click.option("--weight-dtype", default="bf16", show_default=True,
              type=click.Choice(["fp32", "bf16", "fp16", "fp8", "int8", "int4"]))
@click.option("--kv-dtype", default="bf16", show_default=True,
              type=click.Choice(["fp32", "bf16", "fp16", "fp8", "int8"]))
@click.option("--mla-cache", default="latent", show_default=True,
              type=click.Choice(["latent", "decompressed"]),
              help="What an MLA model (DeepSeek) caches per token.")
@click.option("--gpu", default=None, metavar="NAME", help="GPU model, e.g. h100, l4.")
@click.option("--gpu-memory", default=None, metavar="SIZE", help="GPU memory, e.g. 24GB.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def kv_cmd(config: str, batch: int, context: int, encoder_len: int | None, weight_dtype: str,
           kv_dtype: str, mla_cache: str, gpu: str | None, gpu_memory: str | None,
           as_json: bool) -> None:
    """Size inference: weights plus the KV cache for a batch and context length.

    Handles MHA, GQA, MQA and DeepSeek's MLA, and T5's cross-attention cache. With a GPU size,
    says whether it fits and the largest batch (at this context) and context (at this batch)
    that do, keeping 10% of the GPU for activations and workspace. Exit 1 when it does not fit.

    \b
    Examples:
      trainmedic memory kv --config llama-3.1-8b.json --batch 32 --context 8192 --gpu h100
      trainmedic memory kv --config mistral-7b.json --batch 1 --context 32768 --kv-dtype fp8
    """
    from trainmedic.memory.families import load_spec
    from trainmedic.memory.kv import inference_plan
    from trainmedic.report.memory_text import kv_lines

    spec = load_spec(config)
    gpu_bytes, gpu_label = _gpu_bytes(gpu, gpu_memory)
    result = inference_plan(spec, batch_size=batch, context_len=context,
                            weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                            gpu_memory_bytes=gpu_bytes, mla_cache=mla_cache,  # type: ignore[arg-type]
                            encoder_len=encoder_len)
    if as_json:
        _emit_json({"schema": _SCHEMA, "kind": "kv", "source": config,
                    "model": _model_json(spec), **result.to_json()})
    else:
        click.echo("\n".join(kv_lines(result, title=f"{Path(config).name}: {spec.family}, "
                                      f"{spec.num_params / 1e9:.2f}B params",
                                      gpu_label=gpu_label)))
    if result.fits is False:
        raise click.exceptions.Exit(1)


def _auto_factory(config: str, layers: int | None, attention: str) -> Any:
    import functools

    from trainmedic.memory.hf_build import build_auto_model

    return functools.partial(build_auto_model, config, num_layers=layers,
                             attn_implementation="sdpa" if attention == "flash" else attention)


def _measure_and_show(*, source: str, factory: Any, batch: int, seq: int, precision: str,
                      optimizer: str, steps: int, as_json: bool, gpu_bytes: int | None,
                      gpu_label: str, margin: float, note: str | None = None,
                      inputs: Any = None, loss: Any = None) -> None:
    from trainmedic.memory.fit import usable_bytes
    from trainmedic.memory.gpus import format_bytes
    from trainmedic.memory.measure import MeasureConfig, measure
    from trainmedic.report.memory_text import ledger_lines

    ledger = measure(factory, MeasureConfig(batch_size=batch, seq_len=seq, precision=precision,
                                            optimizer=optimizer, steps=steps, inputs=inputs,
                                            loss=loss))
    fits = None
    if gpu_bytes:
        fits = ledger.peak_bytes <= usable_bytes(gpu_bytes, margin)
    if as_json:
        doc: dict[str, Any] = {"schema": _SCHEMA, "kind": "measure", "source": source,
                               **ledger.to_json()}
        if note:
            doc["notes"] = [note, *doc["notes"]]
        if gpu_bytes:
            doc.update({"gpu_memory_bytes": gpu_bytes,
                        "usable_bytes": usable_bytes(gpu_bytes, margin), "margin": margin,
                        "fits": fits})
        _emit_json(doc)
    else:
        lines = ledger_lines(ledger, title=f"{source}: measured one training step x{steps} "
                                           f"(micro-batch {batch} x {seq}, {precision}, "
                                           f"{optimizer}, CPU kernels)")
        top = sorted((m for m in ledger.per_module if m.category == "activations"),
                     key=lambda m: -m.bytes)[:8]
        if top:
            lines += ["", "  activations by module (largest first):"]
            lines += [f"    {m.module or '<root>':<40} {format_bytes(m.bytes):>12}  meas."
                      for m in top]
        lines += [f"  note: {n}" for n in ([note] if note else []) + list(ledger.notes)]
        if gpu_bytes:
            verdict = "fits" if fits else "does NOT fit"
            lines += ["", f"GPU {gpu_label}: {format_bytes(gpu_bytes)}, usable "
                      f"{format_bytes(usable_bytes(gpu_bytes, margin))} after a {margin:.0%} "
                      f"margin -> {verdict} (CPU-kernel measurement; CUDA kernels differ: "
                      f"see `trainmedic memory plan --device-profile`)"]
        click.echo("\n".join(lines))
    if fits is False:
        raise click.exceptions.Exit(1)


@memory.command("measure")
@click.argument("factory", required=False, metavar="MODULE:FUNCTION")
@click.option("--config", "config", default=None, metavar="FILE",
              help="Measure the model transformers builds from this config.json instead.")
@click.option("--layers", type=int, default=None,
              help="With --config: build this many layers (to trace a big model quickly).")
@click.option("--batch", type=int, default=1, show_default=True, help="Micro-batch.")
@click.option("--seq", type=int, default=512, show_default=True, help="Tokens per sample.")
@click.option("--precision", default="fp32", show_default=True,
              type=click.Choice(["fp32", "bf16-mixed", "fp16-mixed", "bf16"]))
@click.option("--optimizer", default="adamw", show_default=True,
              type=click.Choice(["sgd", "sgd-momentum", "adam", "adamw", "adafactor"]))
@click.option("--attention", default="sdpa", show_default=True,
              type=click.Choice(["eager", "sdpa"]), help="With --config: attention kernel.")
@click.option("--steps", type=int, default=2, show_default=True,
              help="Training steps to trace (the second has the optimizer state).")
@click.option("--gpu", default=None, metavar="NAME", help="GPU model, e.g. h100.")
@click.option("--gpu-memory", default=None, metavar="SIZE", help="GPU memory, e.g. 24GB.")
@click.option("--margin", type=float, default=0.10, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the ledger as JSON.")
def measure_cmd(factory: str | None, config: str | None, layers: int | None, batch: int,
                seq: int, precision: str, optimizer: str, attention: str, steps: int,
                gpu: str | None, gpu_memory: str | None, margin: float,
                as_json: bool) -> None:
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
    from trainmedic.memory.measure import load_factory

    if bool(factory) == bool(config):
        raise click.UsageError("give MODULE:FUNCTION or --config FILE (one of them)")
    gpu_bytes, gpu_label = _gpu_bytes(gpu, gpu_memory)
    inputs = loss = None
    if config:
        source = config
        build = _config_factory(config, layers, attention)
    else:
        assert factory is not None
        source = factory
        build, inputs, loss = _recipe_parts(load_factory(factory), factory)
    _measure_and_show(source=source, factory=build, batch=batch, seq=seq, precision=precision,
                      optimizer=optimizer, steps=steps, as_json=as_json, gpu_bytes=gpu_bytes,
                      gpu_label=gpu_label, margin=margin, inputs=inputs, loss=loss)


def _config_factory(config: str, layers: int | None, attention: str) -> Any:
    """A factory for a config: our family builder when the family is known, else transformers'."""
    import functools

    from trainmedic.errors import UnsupportedModelError
    from trainmedic.memory.families import read_config, spec_from_config
    from trainmedic.memory.hf_build import build_hf_model

    try:
        spec_from_config(read_config(config), source=config)
    except UnsupportedModelError:
        return _auto_factory(config, layers, attention)
    return functools.partial(build_hf_model, config, num_layers=layers,
                             attn_implementation=attention)


def _recipe_parts(fn: Any, name: str) -> tuple[Any, Any, Any]:
    """Split a factory into (model factory, inputs, loss): a dict return carries all three."""
    from trainmedic.memory.measure import FactoryError

    probe: dict[str, Any] = {}

    def model_factory() -> Any:
        # Called by measure() inside its fake mode: whatever the user's function returns.
        out = fn()
        if isinstance(out, dict):
            if "model" not in out:
                raise FactoryError(f"{name} returned a dict without 'model'; expected "
                                   f"{{'model': nn.Module, 'inputs': fn, 'loss': fn}}")
            probe.update(out)
            return out["model"]
        return out

    def inputs(model: Any, batch: int, seq: int) -> Any:
        if "inputs" in probe:
            return probe["inputs"](model, batch, seq)
        from trainmedic.memory.measure import default_inputs

        return default_inputs(model, batch, seq)

    def loss(output: Any, batch: Any) -> Any:
        if "loss" in probe:
            return probe["loss"](output, batch)
        from trainmedic.memory.measure import default_loss

        return default_loss(output, batch)

    module, _, qualname = name.rpartition(":")
    model_factory.__module__, model_factory.__qualname__ = module, qualname
    return model_factory, inputs, loss
