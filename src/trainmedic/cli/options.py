"""Options shared by several subcommands (``--fail-on``, ``--map``) and their parsing."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import click

from trainmedic.errors import ConfigError

__all__ = ["FAIL_ON_CHOICES", "parse_mapping", "parse_sets", "exit_code_for"]

FAIL_ON_CHOICES = ("info", "warning", "error", "never")


def parse_mapping(items: Iterable[str]) -> dict[str, str]:
    """``["loss=my/loss", "lr=opt/lr"]`` → ``{"loss": "my/loss", "lr": "opt/lr"}``."""
    mapping: dict[str, str] = {}
    for item in items:
        canonical, sep, source = item.partition("=")
        canonical, source = canonical.strip(), source.strip()
        if not sep or not canonical or not source:
            raise click.BadParameter(
                f"got {item!r}; expected CANONICAL=SOURCE, e.g. --map loss=train/loss_step",
                param_hint="--map",
            )
        if canonical in mapping:
            raise click.BadParameter(f"{canonical!r} is mapped twice", param_hint="--map")
        if not _known_canonical(canonical):
            from trainmedic.run.names import CANONICAL

            raise click.BadParameter(
                f"{canonical!r} is not a canonical metric name; expected one of "
                f"{', '.join(CANONICAL)} (or val_loss/<set> for an evaluation set), e.g. "
                f"--map loss=train/loss_step",
                param_hint="--map",
            )
        mapping[canonical] = source
    return mapping


def parse_sets(values: Iterable[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` recipe overrides: ``["batch_size=32", "name=x"]`` ->
    ``{"batch_size": 32, "name": "x"}`` (a VALUE that is not JSON is a bare string)."""
    out: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key.isidentifier():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--set")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw  # a bare string
    return out


def _known_canonical(name: str) -> bool:
    """A canonical name of DESIGN.md, or ``val_loss/<set>`` (one evaluation set of several)."""
    from trainmedic.run.names import CANONICAL

    head, sep, rest = name.partition("/")
    return name in CANONICAL or (head == "val_loss" and bool(sep) and bool(rest))


def exit_code_for(worst_level: int, fail_on: str) -> int:
    """1 when the worst finding is at or above ``fail_on``, else 0."""
    from trainmedic.diagnose.finding import SEVERITY_ORDER

    if fail_on == "never":
        return 0
    if fail_on not in SEVERITY_ORDER:
        raise ConfigError(f"--fail-on got {fail_on!r}; expected one of {FAIL_ON_CHOICES}")
    return 1 if worst_level >= SEVERITY_ORDER[fail_on] else 0
