"""``trainmedic ckpt plan``: how often to checkpoint, from the save cost and the failure rate
(Young 1974, Daly 2006). Added to the ``ckpt`` group by ``cli/ckpt.py``."""

from __future__ import annotations

import json
import sys

import click

__all__ = ["plan"]


@click.command("plan")
@click.option("--run", "run_dir", metavar="RUN_DIR", default=None,
              help="A trainmedic run folder: the save cost is measured from its step times "
                   "around its checkpoints, the MTBF from the incidents `trainmedic "
                   "supervise` recorded, the step time from step_time_s.")
@click.option("--checkpoint-dir", metavar="DIR", default=None,
              help="With --run: where its checkpoints are (default: RUN_DIR/checkpoints).")
@click.option("--save-cost-s", type=float, default=None,
              help="Seconds one save holds the training (overrides the measured one).")
@click.option("--mtbf-h", type=float, default=None,
              help="Mean time between failures, hours (overrides the measured one).")
@click.option("--restart-cost-s", type=float, default=None,
              help="Seconds from a failure to training again (start-up, loading); "
                   "0 when not given (said in a note).")
@click.option("--step-time-s", type=float, default=None,
              help="Seconds per step, to say the interval in steps (default: measured with "
                   "--run).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the plan as JSON, each figure with its basis.")
def plan(run_dir: str | None, checkpoint_dir: str | None, save_cost_s: float | None,
         mtbf_h: float | None, restart_cost_s: float | None, step_time_s: float | None,
         as_json: bool) -> None:
    """The checkpoint interval that wastes least: Young's sqrt(2*C*MTBF) and Daly's
    higher-order form, with the expected loss per failure and the save overhead.

    Each input is measured from the run (--run) or given; a given one wins; every output is
    estimated (a model). The MTBF counts failures only: not the stops asked of `trainmedic
    supervise` (Ctrl-C, scancel), nor attempts that completed no step. Exit 0, or 2 when the
    save cost or the MTBF is neither measured nor given.

    \b
    Examples:
      trainmedic ckpt plan --save-cost-s 40 --mtbf-h 12
      trainmedic ckpt plan --run runs/exp1 --mtbf-h 24
      trainmedic ckpt plan --run runs/exp1 --json | jq .daly_interval_s
    """
    from trainmedic.checkpoint.cadence import (
        CadenceInputs,
        RunFigures,
        measured_inputs,
        plan_cadence,
    )
    from trainmedic.errors import ConfigError
    from trainmedic.report.recovery_text import plan_lines

    figures = RunFigures()
    if run_dir is not None:
        figures = measured_inputs(run_dir, checkpoint_dir)
    elif checkpoint_dir is not None:
        raise click.UsageError("--checkpoint-dir goes with --run")
    if mtbf_h is not None and (mtbf_h != mtbf_h or mtbf_h <= 0):
        raise ConfigError(f"--mtbf-h must be > 0 hours, got {mtbf_h}")
    cost, cost_src = ((save_cost_s, "given") if save_cost_s is not None
                      else (figures.save_cost_s, "measured"))
    mtbf, mtbf_src = ((mtbf_h * 3600.0, "given") if mtbf_h is not None
                      else (figures.mtbf_s, "measured"))
    step, step_src = ((step_time_s, "given") if step_time_s is not None
                      else (figures.step_time_s, "measured"))
    missing = [flag for flag, v in (("--save-cost-s", cost), ("--mtbf-h", mtbf)) if v is None]
    if missing:
        why = "; ".join(figures.notes) if run_dir is not None else "no --run given"
        raise ConfigError(f"{' and '.join(missing)}: not measured ({why}); pass "
                          f"{' and '.join(missing)}")
    assert cost is not None and mtbf is not None
    notes = list(figures.notes)
    if restart_cost_s is None:
        restart_cost_s = 0.0
        notes.append("restart cost not given: taken as 0 s, so the loss per failure is a "
                     "lower bound; pass --restart-cost-s")
    result = plan_cadence(CadenceInputs(
        save_cost_s=cost, save_cost_source=cost_src,  # type: ignore[arg-type]
        mtbf_s=mtbf, mtbf_source=mtbf_src,  # type: ignore[arg-type]
        restart_cost_s=restart_cost_s, step_time_s=step,
        step_time_source=step_src))  # type: ignore[arg-type]
    if as_json:
        sys.stdout.write(json.dumps({**result.to_dict(), "notes": notes},
                                    indent=1) + "\n")
        return
    for line in plan_lines(result, notes):
        click.echo(line)
