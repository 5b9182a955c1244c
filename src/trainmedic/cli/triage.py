"""``trainmedic triage``: the router's questions when there are no logs, answered by flags or,
on a terminal without flags, interactively."""

from __future__ import annotations

import sys
from typing import Any

import click

from trainmedic.diagnose.triage import (
    CHANGED_CHOICES,
    HELPS_CHOICES,
    LOSS_CHOICES,
    MEMORY_CHOICES,
    OPTIMIZER_CHOICES,
    PRECISION_CHOICES,
    STEPS_CHOICES,
)

__all__ = ["triage"]

#: The questions asked on a terminal, in order: (field, prompt, choices or a type).
_QUESTIONS: tuple[tuple[str, str, Any], ...] = (
    ("loss", "What does the training loss do?", LOSS_CHOICES),
    ("since", "Since when? (start, after-N-steps e.g. after-1200-steps, after-change)", str),
    ("optimizer", "Optimizer?", OPTIMIZER_CHOICES),
    ("lr", "Peak learning rate? (empty: unknown)", float),
    ("batch", "Micro-batch size per device? (empty: unknown)", int),
    ("precision", "Precision?", PRECISION_CHOICES),
    ("grad_clip", "Gradient-norm clip? (0: none; empty: unknown)", float),
    ("warmup", "Warm-up steps? (0: none; empty: unknown)", int),
    ("changed", "What changed before it started?", CHANGED_CHOICES),
    ("smaller_lr_helps", "Does a smaller lr make it go away?", HELPS_CHOICES),
    ("steps", "How does the step time behave?", STEPS_CHOICES),
    ("memory", "Does memory grow over steps?", MEMORY_CHOICES),
)


def _interactive() -> bool:
    """Whether questions may be asked: only when stdin is a terminal (never when piped)."""
    return sys.stdin.isatty()


def _ask() -> dict[str, Any]:
    answers: dict[str, Any] = {}
    for name, text, kind in _QUESTIONS:
        if isinstance(kind, tuple):
            v = click.prompt(text, type=click.Choice(["skip", *kind]), default="skip",
                             show_choices=True)
            if v != "skip":
                answers[name] = v
        else:
            raw = click.prompt(text, default="", show_default=False).strip()
            if raw:
                try:
                    answers[name] = kind(raw)
                except ValueError:
                    raise click.BadParameter(f"got {raw!r}; expected a {kind.__name__}",
                                             param_hint=name) from None
    return answers


@click.command("triage")
@click.option("--loss", type=click.Choice(LOSS_CHOICES), help="What the training loss does.")
@click.option("--since", metavar="start|after-N-steps|after-change",
              help="From when: the start, after N steps (after-1200-steps), or after a change.")
@click.option("--optimizer", type=click.Choice(OPTIMIZER_CHOICES), help="Optimizer family.")
@click.option("--lr", type=float, help="Peak learning rate.")
@click.option("--batch", type=int, help="Micro-batch size per device (samples).")
@click.option("--precision", type=click.Choice(PRECISION_CHOICES), help="Training precision.")
@click.option("--grad-clip", type=float, help="Gradient-norm clip (0: no clipping).")
@click.option("--warmup", type=int, help="Warm-up steps (0: none).")
@click.option("--changed", type=click.Choice(CHANGED_CHOICES),
              help="What changed before the problem started.")
@click.option("--smaller-lr-helps", type=click.Choice(HELPS_CHOICES),
              help="Whether a smaller lr makes the problem go away.")
@click.option("--steps", type=click.Choice(STEPS_CHOICES), help="How the step time behaves.")
@click.option("--memory", type=click.Choice(MEMORY_CHOICES), help="How memory behaves.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the trainmedic.triage/1 JSON document instead of text.")
def triage(as_json: bool, **flags: Any) -> None:
    """Route answers about a training problem to the causes and interventions diagnose uses,
    when there are no logs.

    Every cause is marked not checked against data and says which metrics to log to check
    it (then run trainmedic diagnose on those logs). On a terminal, with no answer flags, the
    questions are asked one by one; piped, flags are required. Exit 0 when it ran, 2 on a bad
    answer or none at all.

    \b
    Examples:
      trainmedic triage --loss nan --since start --precision fp16
      trainmedic triage --loss spikes --since after-5000-steps --grad-clip 0 --lr 1e-2
      trainmedic triage --loss plateau --since start --lr 1e-7 --json
      trainmedic triage --loss diverges --changed batch --smaller-lr-helps yes
      trainmedic triage --steps slow --memory grows
      trainmedic triage            # on a terminal: asks the questions
    """
    from trainmedic.diagnose.triage import TriageAnswers
    from trainmedic.diagnose.triage import triage as route_answers
    from trainmedic.errors import ConfigError
    from trainmedic.report.triage_text import triage_json, triage_lines

    given = {k: v for k, v in flags.items() if v is not None}
    if not given:
        if not _interactive():
            raise ConfigError("no answers: stdin is not a terminal, so nothing is asked; "
                              "pass at least --loss (or --steps / --memory), e.g. "
                              "trainmedic triage --loss nan --since start")
        given = _ask()
    result = route_answers(TriageAnswers(**given))
    click.echo(triage_json(result) if as_json else "\n".join(triage_lines(result)))
