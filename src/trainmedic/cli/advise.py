"""``trainmedic advise RECIPE | --config FILE``: the boring default stack for a new run, and
the settings that contradict it."""

from __future__ import annotations

import click

__all__ = ["advise"]


@click.command("advise")
@click.argument("recipe", required=False, metavar="[RECIPE]")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="An HF config.json: the parameter count sets the lr heuristic.")
@click.option("--batch", type=click.IntRange(min=1), help="Samples per micro-batch (--config).")
@click.option("--seq", type=click.IntRange(min=1), help="Tokens per sample (--config).")
@click.option("--grad-accum", type=click.IntRange(min=1),
              help="Micro-batches per optimizer step (--config).")
@click.option("--steps", type=click.IntRange(min=2),
              help="Steps over which to read the recipe's lr schedule [default: the recipe "
                   "config's 'steps', else 1000].")
@click.option("--no-levers", is_flag=True, help="Leave out the first-lever-per-symptom table.")
@click.option("--fail-on-contradiction", is_flag=True,
              help="Exit 1 when a setting contradicts the stack at 'warning' severity.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the trainmedic.advice/1 JSON document instead of text.")
def advise(recipe: str | None, config_path: str | None, batch: int | None, seq: int | None,
           grad_accum: int | None, steps: int | None, no_levers: bool,
           fail_on_contradiction: bool, as_json: bool) -> None:
    """The boring default stack for a new run (AdamW, warm-up + cosine or WSD, bf16, clip
    1.0, lr by size and batch, weight decay and eps), each with a reason and a citation.

    With RECIPE (module:function or file.py:function) it reads the recipe's optimizer, lr
    schedule, precision, scaler, clip, batch and parameter groups, and flags the settings
    that contradict the stack and why. With --config it reads an HF config's parameter count
    (--batch and --seq give tokens per step). Every recommendation is a default (estimated),
    not a measurement. Exit 0 when it ran (1 with --fail-on-contradiction and a warning), 2
    on bad usage.

    \b
    Examples:
      trainmedic advise trainmedic.demo:recipe
      trainmedic advise train.py:recipe --json
      trainmedic advise --config llama-3.2-1b.json --batch 8 --seq 2048
      trainmedic advise train.py:recipe --fail-on-contradiction
    """
    from trainmedic.errors import ConfigError
    from trainmedic.levers.advice import advise as make_advice
    from trainmedic.levers.advice import settings_from_config, settings_from_recipe
    from trainmedic.report.advice_text import advice_json, advice_lines

    if (recipe is None) == (config_path is None):
        raise ConfigError("give either RECIPE (module:function) or --config FILE, not both "
                          "and not neither, e.g. trainmedic advise trainmedic.demo:recipe")
    if recipe is not None:
        if batch is not None or seq is not None or grad_accum is not None:
            raise ConfigError("--batch/--seq/--grad-accum go with --config; a recipe's own "
                              "batch is read from it")
        from trainmedic.recipe import load_recipe

        settings = settings_from_recipe(load_recipe(recipe), source=recipe, horizon_steps=steps)
    else:
        settings = settings_from_config(str(config_path), batch=batch, seq=seq,
                                        grad_accum=grad_accum)
    result = make_advice(settings)
    click.echo(advice_json(result) if as_json
               else "\n".join(advice_lines(result, levers=not no_levers)))
    if fail_on_contradiction and any(c.severity == "warning" for c in result.contradictions):
        raise click.exceptions.Exit(1)
