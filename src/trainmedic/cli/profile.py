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
@click.argument("recipe", metavar="RECIPE")
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
def profile(recipe: str, steps: int, warmup: int, sets: tuple[str, ...], peak: str | None,
            no_peak: bool, no_flops: bool, trace: str | None, as_json: bool) -> None:
    """Profile a few steps of RECIPE and say why a step takes the time it does.

    RECIPE is a function returning a trainmedic.Recipe, as module:function or
    path/to/file.py:function. The step is split into data wait, time in ops (forward,
    backward, optimizer), collectives the step waited on, host-device syncs, Python between
    ops and GC pauses; the largest names the bottleneck class. FLOPs are counted with
    FlopCounterMode and MFU is taken against the matmul peak measured here.

    \b
    Examples:
      trainmedic profile trainmedic.demo:recipe
      trainmedic profile train.py:recipe --set batch_size=32 --steps 12
      trainmedic profile train.py:recipe --peak 989T --json > profile.json
      torchrun --nproc-per-node 2 -m trainmedic profile train.py:recipe
    """
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
