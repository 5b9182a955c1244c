"""``trainmedic profile RECIPE``: where a step's time goes, the bottleneck class, FLOPs and MFU
against a measured peak, and the levers ranked by what they could gain.

Under torchrun every rank profiles its own step; rank 0 prints every rank's report. Exit
codes: 0 profiled, 2 bad input (the recipe cannot be loaded, a bad option).
"""

from __future__ import annotations

import click

from trainmedic.cli.options import parse_sets

__all__ = ["profile"]


def _peak(value: str | None) -> float | None:
    if value is None:
        return None
    text = value.strip().upper().removesuffix("FLOPS").removesuffix("FLOP/S").strip()
    scale = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}.get(text[-1:], 1.0)
    try:
        number = float(text[:-1] if scale != 1.0 else text) * scale
    except ValueError:
        raise click.BadParameter(f"expected FLOP/s like 312e12 or 312T, got {value!r}",
                                 param_hint="--peak") from None
    if not number > 0:
        raise click.BadParameter(f"expected a rate > 0, got {value!r}", param_hint="--peak")
    return number


@click.command("profile")
@click.argument("recipe", metavar="[RECIPE]", required=False)
@click.option("--config", "hf_config", metavar="FILE|HUB_ID", default=None,
              help="Instead of a RECIPE: estimate the FLOPs of a dense decoder from its Hugging "
                   "Face config.json (6·N·tokens plus attention, PaLM appendix B); needs "
                   "--batch and --seq.")
@click.option("--batch", type=click.IntRange(min=1), default=None,
              help="With --config: sequences per micro-batch.")
@click.option("--seq", type=click.IntRange(min=1), default=None,
              help="With --config: tokens per sequence.")
@click.option("--grad-accum", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --config: micro-batches per optimizer step.")
@click.option("--gpu", default=None, metavar="NAME",
              help="With --config: also give the GPU's datasheet bf16 peak (h100, a100-80gb).")
@click.option("--steps", type=click.IntRange(min=2), default=8, show_default=True,
              help="Steps timed, and as many profiled, alternating.")
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True,
              help="Steps run first, unprofiled.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Pass a setting to the recipe function (JSON value), e.g. --set "
                   "batch_size=32. Repeatable.")
@click.option("--peak", metavar="FLOP/S", default=None,
              help="Peak to take MFU against (e.g. from `trainmedic bench matmul`) instead of "
                   "measuring a quick one here: 312e12 or 312T.")
@click.option("--no-peak", is_flag=True, help="Do not measure a peak (no MFU).")
@click.option("--no-flops", is_flag=True, help="Do not count FLOPs (no MFU).")
@click.option("--trace", metavar="FILE", default=None,
              help="Also write the profiler's Chrome trace (Perfetto, Holistic Trace Analysis).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON "
              "(trainmedic.profile/1).")
def profile(recipe: str | None, hf_config: str | None, batch: int | None, seq: int | None,
            grad_accum: int, gpu: str | None, steps: int, warmup: int, sets: tuple[str, ...],
            peak: str | None, no_peak: bool, no_flops: bool, trace: str | None,
            as_json: bool) -> None:
    """Profile a few steps of RECIPE and say why a step takes the time it does.

    RECIPE is a function returning a trainmedic.Recipe, as module:function or
    path/to/file.py:function. The step is split into data wait, time in ops (forward,
    backward, optimizer), collectives the step waited on, host-device syncs, Python between
    ops and GC pauses; the largest names the bottleneck class. FLOPs are counted with
    FlopCounterMode and MFU is taken against the matmul peak measured here.

    With --config instead of RECIPE, nothing runs: the FLOPs per step of a dense decoder are
    estimated from its config, the figure to give the watcher as flops_per_step.

    \b
    Examples:
      trainmedic profile trainmedic.demo:recipe
      trainmedic profile train.py:recipe --set batch_size=32 --steps 12
      trainmedic profile train.py:recipe --peak 989T --json > profile.json
      torchrun --nproc-per-node 2 -m trainmedic profile train.py:recipe
      trainmedic profile --config llama-3.1-8b.json --batch 4 --seq 4096 --gpu h100
    """
    if hf_config is not None or recipe is None:
        _config_flops(recipe, hf_config, batch, seq, grad_accum, gpu, as_json)
        return
    from trainmedic.profile.session import ProfileConfig, profile_recipe
    from trainmedic.recipe import load_recipe
    from trainmedic.report.profile_text import profile_doc, profile_lines

    config = ProfileConfig(steps=steps, warmup=warmup, flops=not no_flops,
                           measure_peak=not no_peak, peak_flops_per_s=_peak(peak),
                           trace_path=trace)
    built = load_recipe(recipe, **parse_sets(sets))
    report = profile_recipe(built, config, name=recipe)
    if report.rank != 0:
        return
    click.echo(profile_doc(report) if as_json else "\n".join(profile_lines(report)))
    if trace:
        click.echo(f"trace: {trace}", err=True)


def _config_flops(recipe: str | None, hf_config: str | None, batch: int | None,
                  seq: int | None, grad_accum: int, gpu: str | None, as_json: bool) -> None:
    from trainmedic.memory.config_source import resolve_config
    from trainmedic.memory.families import load_spec
    from trainmedic.memory.gpus import lookup_gpu
    from trainmedic.profile.config_flops import config_train_flops
    from trainmedic.report.profile_text import config_flops_doc, config_flops_lines

    if recipe is not None:
        raise click.UsageError("give a RECIPE or --config, not both")
    if hf_config is None:
        raise click.UsageError("give a RECIPE to profile (module:function or file.py:function)"
                               ", or --config FILE --batch B --seq S to estimate FLOPs")
    if batch is None or seq is None:
        raise click.UsageError("--config needs --batch and --seq (the tokens of a step)")
    spec = load_spec(resolve_config(hf_config))
    flops = config_train_flops(spec, batch_size=batch, seq_len=seq, grad_accum=grad_accum)
    gpu_spec = lookup_gpu(gpu) if gpu else None
    peak = gpu_spec.dense_tflops("bfloat16") if gpu_spec else None
    name = gpu_spec.display_name if gpu_spec else None
    peak_flops = None if peak is None else float(peak) * 1e12
    click.echo(config_flops_doc(hf_config, flops, name, peak_flops) if as_json else
               "\n".join(config_flops_lines(hf_config, flops, name, peak_flops)))
