"""How often to checkpoint: Young's and Daly's optimum from the save cost and the failure rate.

With a save costing ``C`` seconds and failures arriving at a mean time ``M`` apart (MTBF),
checkpointing every ``T`` seconds of compute wastes ``C/T`` of the time on saves and, per
failure, on average half an interval of lost work plus the restart ``R``. Minimising the sum:

* Young (1974), "A first order approximation to the optimum checkpoint interval",
  Commun. ACM 17(9):530-531: ``T = sqrt(2·C·M)``.
* Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart
  dumps", Future Generation Computer Systems 22(3):303-312, eq. (37):
  ``T = sqrt(2·C·M)·[1 + (1/3)·sqrt(C/(2M)) + (1/9)·(C/(2M))] − C`` for ``C < 2M``, else
  ``T = M``.

Both ``T`` are compute time between the ends of two saves, excluding the save itself. The
expected loss per failure is ``(T + C)/2 + R`` (first order: a failure lands uniformly within
a segment); the save overhead is ``C/T``; the expected total waste fraction is
``C/T + ((T + C)/2 + R)/M``. Every figure keeps the basis of its inputs: a formula over
measured inputs is ``estimated``; an input is ``measured``, ``given`` or ``estimated``.

:func:`plan_cadence` is pure: it takes numbers. :func:`measured_inputs` reads them from a
run at the edge: the save cost from the run store's ``step_time_s`` (the steps right after a
checkpoint's step, which include the save, minus the median step: anything else the loop does
at those same steps counts as save cost too), the MTBF from the ``supervise_summary`` and
``supervise_incident`` events ``trainmedic supervise`` records (its wall time over the failures
among its incidents: not the stops asked for, such as Ctrl-C or ``scancel``, nor the attempts
that never completed a step, such as a crash loop at start-up, which lose no training), the
step time as the median ``step_time_s``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trainmedic.errors import ConfigError

__all__ = ["Source", "CadenceInputs", "CadencePlan", "young_interval_s", "daly_interval_s",
           "plan_cadence", "RunFigures", "measured_inputs", "count_failures",
           "FailureTally"]

Source = Literal["measured", "estimated", "given"]
"""Where an input came from: read from the run or the disk, computed, or passed by the user."""

_SOURCES = ("measured", "estimated", "given")


def _positive(name: str, value: object, *, zero_ok: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number of seconds, got {value!r}")
    if value < 0 or (value == 0 and not zero_ok):
        raise ConfigError(f"{name} must be {'>= 0' if zero_ok else '> 0'} seconds, got "
                          f"{value!r}; pass the value in seconds")
    return float(value)


def young_interval_s(save_cost_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum: ``sqrt(2·C·M)`` seconds of compute between saves."""
    c = _positive("save_cost_s", save_cost_s)
    m = _positive("mtbf_s", mtbf_s)
    return math.sqrt(2.0 * c * m)


def daly_interval_s(save_cost_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (2006, eq. 37); ``M`` itself when ``C >= 2M``."""
    c = _positive("save_cost_s", save_cost_s)
    m = _positive("mtbf_s", mtbf_s)
    if c >= 2.0 * m:
        return m
    r = c / (2.0 * m)
    return math.sqrt(2.0 * c * m) * (1.0 + math.sqrt(r) / 3.0 + r / 9.0) - c


@dataclass(kw_only=True, frozen=True)
class CadenceInputs:
    """What the cadence is computed from, each with where it came from."""

    save_cost_s: float
    """Seconds one checkpoint save holds the training (> 0)."""

    save_cost_source: Source = "given"
    """``measured``, ``estimated`` or ``given``."""

    mtbf_s: float
    """Mean time between failures (interruptions of any kind), seconds (> 0)."""

    mtbf_source: Source = "given"
    """``measured``, ``estimated`` or ``given``."""

    restart_cost_s: float = 0.0
    """Seconds from a failure to training again (start-up, load), >= 0."""

    restart_cost_source: Source = "given"
    """``measured``, ``estimated`` or ``given``."""

    step_time_s: float | None = None
    """Seconds per training step, to say the interval in steps (None: not said)."""

    step_time_source: Source = "measured"
    """``measured``, ``estimated`` or ``given``."""

    def __post_init__(self) -> None:
        _positive("save_cost_s", self.save_cost_s)
        _positive("mtbf_s", self.mtbf_s)
        _positive("restart_cost_s", self.restart_cost_s, zero_ok=True)
        if self.step_time_s is not None:
            _positive("step_time_s", self.step_time_s)
        for name in ("save_cost_source", "mtbf_source", "restart_cost_source",
                     "step_time_source"):
            if getattr(self, name) not in _SOURCES:
                raise ConfigError(f"{name} must be one of {', '.join(_SOURCES)}, got "
                                  f"{getattr(self, name)!r}")


@dataclass(kw_only=True, frozen=True)
class CadencePlan:
    """The recommended cadence and what it costs (all figures ``estimated``: a model)."""

    inputs: CadenceInputs
    """What it was computed from."""

    young_interval_s: float
    """Young's ``sqrt(2·C·M)``, seconds of compute between saves."""

    daly_interval_s: float
    """Daly's higher-order optimum, seconds (the recommendation)."""

    interval_steps: int | None
    """The Daly interval in steps (>= 1), when a step time is known."""

    expected_loss_per_failure_s: float
    """``(T + C)/2 + R`` at the Daly interval."""

    save_overhead_fraction: float
    """``C/T``: the share of time spent saving."""

    expected_waste_fraction: float
    """``C/T + ((T + C)/2 + R)/M``: saves plus expected rework, first order."""

    def to_dict(self) -> dict[str, object]:
        i = self.inputs
        return {
            "schema": "trainmedic.ckpt-plan/1",
            "inputs": {
                "save_cost_s": {"value": i.save_cost_s, "basis": i.save_cost_source},
                "mtbf_s": {"value": i.mtbf_s, "basis": i.mtbf_source},
                "restart_cost_s": {"value": i.restart_cost_s, "basis": i.restart_cost_source},
                "step_time_s": ({"value": i.step_time_s, "basis": i.step_time_source}
                                if i.step_time_s is not None else None),
            },
            "young_interval_s": {"value": self.young_interval_s, "basis": "estimated"},
            "daly_interval_s": {"value": self.daly_interval_s, "basis": "estimated"},
            "interval_steps": ({"value": self.interval_steps, "basis": "estimated"}
                               if self.interval_steps is not None else None),
            "expected_loss_per_failure_s": {"value": self.expected_loss_per_failure_s,
                                            "basis": "estimated"},
            "save_overhead_fraction": {"value": self.save_overhead_fraction,
                                       "basis": "estimated"},
            "expected_waste_fraction": {"value": self.expected_waste_fraction,
                                        "basis": "estimated"},
        }


def plan_cadence(inputs: CadenceInputs) -> CadencePlan:
    """Young's and Daly's intervals for ``inputs``, and the loss and overhead at Daly's."""
    c, m, r = inputs.save_cost_s, inputs.mtbf_s, inputs.restart_cost_s
    young = young_interval_s(c, m)
    daly = daly_interval_s(c, m)
    steps = None
    if inputs.step_time_s is not None:
        steps = max(1, round(daly / inputs.step_time_s))
    loss = (daly + c) / 2.0 + r
    return CadencePlan(inputs=inputs, young_interval_s=young, daly_interval_s=daly,
                       interval_steps=steps, expected_loss_per_failure_s=loss,
                       save_overhead_fraction=c / daly,
                       expected_waste_fraction=c / daly + loss / m)


# ------------------------------------------------------------------------ reading a run
@dataclass(kw_only=True, frozen=True)
class RunFigures:
    """What :func:`measured_inputs` could measure (None: not available), and how."""

    save_cost_s: float | None = None
    """Median step time of the steps that include a save, minus the median of the others."""

    save_samples: int = 0
    """How many steps with a save that median is over."""

    step_time_s: float | None = None
    """Median ``step_time_s`` of the steps without a save."""

    mtbf_s: float | None = None
    """Supervised wall time over the failures in it."""

    incidents: int = 0
    """Incidents ``trainmedic supervise`` recorded."""

    failures: int = 0
    """Those counted as failures (see :func:`count_failures`)."""

    notes: tuple[str, ...] = field(default_factory=tuple)
    """Why a figure is missing, or what it includes."""


def _store_file(run_dir: Path) -> Path | None:
    from trainmedic.run.store import store_path

    for p in (store_path(run_dir), store_path(run_dir, 0)):
        if p.is_file():
            return p
    return None


@dataclass(kw_only=True, frozen=True)
class FailureTally:
    """How :func:`count_failures` sorted a run's supervise incidents."""

    failures: int = 0
    """Counted in the MTBF."""

    stops: int = 0
    """Left out: supervise was told to stop."""

    no_step: int = 0
    """Left out: the attempt completed no step."""

    unknown: int = 0
    """Among ``failures``: progress not recorded, counted because nothing says otherwise."""


def _steps_run(d: Mapping[str, Any]) -> int | None:
    if d.get("steps_run") is not None:
        return int(d["steps_run"])
    if d.get("steps_done") is not None and d.get("start_step") is not None:
        return max(0, int(d["steps_done"]) - int(d["start_step"]))
    return None


def count_failures(incidents: Sequence[Mapping[str, Any]], *,
                   run_logs_steps: bool) -> FailureTally:
    """Sort ``supervise_incident`` events' data into failures and the rest.

    Left out: ``action == "stop"`` (supervise itself was told to stop: the user's Ctrl-C,
    ``scancel``; not a failure of the job), and attempts that completed no step (``steps_run``
    0; a crash loop at start-up), which lose no training: counting them would pull the MTBF,
    and so the interval, down. An attempt whose progress was not recorded completed no step
    when the command does record it -- another attempt of the same session did, or the run
    store holds the run's metrics (``run_logs_steps``) -- and is counted (``unknown``) when
    nothing says. Events from before ``start_step`` was recorded count as failures unless
    they are stops."""
    by_session: dict[Any, list[Mapping[str, Any]]] = {}
    for d in incidents:
        by_session.setdefault(d.get("session"), []).append(d)
    failures = stops = no_step = unknown = 0
    for items in by_session.values():
        reports = run_logs_steps or any(d.get("steps_done") is not None for d in items)
        for d in items:
            run = _steps_run(d)
            if d.get("action") == "stop":
                stops += 1
            elif run == 0 or (d.get("steps_done") is None and reports):
                no_step += 1
            else:
                failures += 1
                if d.get("steps_done") is None:
                    unknown += 1
    return FailureTally(failures=failures, stops=stops, no_step=no_step, unknown=unknown)


def measured_inputs(run_dir: str | Path, checkpoint_dir: str | Path | None = None) -> RunFigures:
    """Read the save cost, step time and MTBF of the run in ``run_dir`` (its store) and its
    checkpoints (``checkpoint_dir``, default ``<run_dir>/checkpoints``). Raises
    ``InputError`` when ``run_dir`` holds no run store."""
    from trainmedic.checkpoint.commit import scan
    from trainmedic.errors import InputError
    from trainmedic.run.store import read_store

    run_dir = Path(run_dir)
    path = _store_file(run_dir)
    if path is None:
        raise InputError(str(run_dir), "no run store (metrics.sqlite) here; expected the run "
                                       "folder of a trainmedic run, or pass --save-cost-s and "
                                       "--mtbf-h")
    run = read_store(path)
    notes: list[str] = []
    root = Path(checkpoint_dir) if checkpoint_dir is not None else run_dir / "checkpoints"
    saved = sorted({d.step for d in scan(root) if d.kind == "committed"}) \
        if root.is_dir() else []
    series = next((s for (m, _), s in sorted(run.series.items(), key=lambda kv: str(kv[0]))
                   if m == "step_time_s"), None)
    save_cost = step_time = None
    n_save = 0
    if series is None or len(series.steps) == 0:
        notes.append("no step_time_s in the run store: save cost and step time not measured")
    elif not saved:
        notes.append(f"no committed checkpoint under {root}: save cost not measured")
    else:
        # Saves every ``every`` steps: the gcd of the kept ones' steps (retention keeps only
        # the newest few). The step logged as s (0-based) after a save at step s includes it.
        every = 0
        for st in saved:
            every = math.gcd(every, st)
        with_save = [float(v) for st, v in zip(series.steps.tolist(), series.values.tolist(),
                                                strict=True)
                     if st > 0 and st % every == 0 and math.isfinite(v)]
        without = [float(v) for st, v in zip(series.steps.tolist(), series.values.tolist(),
                                             strict=True)
                   if (st == 0 or st % every) and math.isfinite(v)]
        if without:
            step_time = statistics.median(without)
        if with_save and without:
            n_save = len(with_save)
            save_cost = max(0.0, statistics.median(with_save) - statistics.median(without))
            notes.append(f"save cost from the step times of {n_save} step(s) after a save "
                         f"(every {every} steps); whatever else runs at those steps counts too")
            if save_cost == 0.0:
                notes.append("the steps with a save were no slower than the others: save cost "
                             "not resolved; pass --save-cost-s")
                save_cost = None
    incidents = run.events_of("supervise_incident")
    summaries = run.events_of("supervise_summary")
    # A store with the run's own metrics: an attempt that added no row completed no step
    # (up to the store's ~1.5 s commit batch).
    logs_steps = any(len(s.steps) for (m, _), s in run.series.items())
    tally = count_failures([e.data for e in incidents], run_logs_steps=logs_steps)
    mtbf = None
    if incidents:
        wall = sum(float(e.data.get("wall_s") or 0.0) for e in summaries)
        if wall <= 0:
            wall = sum(float(e.data.get("uptime_s") or 0.0) for e in incidents)
        left_out = []
        if tally.stops:
            left_out.append(f"{tally.stops} stop(s) asked of supervise (Ctrl-C, scancel)")
        if tally.no_step:
            left_out.append(f"{tally.no_step} attempt(s) that completed no step (a crash at "
                            f"start-up loses no training)")
        if left_out:
            notes.append(f"left out of the MTBF: {' and '.join(left_out)}")
        if tally.unknown:
            notes.append(f"{tally.unknown} failure(s) whose progress nothing recorded counted "
                         f"as failures (no heartbeat, no run-store rows)")
        if wall > 0 and tally.failures:
            mtbf = wall / tally.failures
            notes.append(f"MTBF from {tally.failures} failure(s) over {wall:.1f} s supervised: "
                         f"few failures make it a rough figure")
        elif wall > 0:
            notes.append(f"no failure in {wall:.1f} s supervised: MTBF not measured (it is "
                         f"longer than that); pass --mtbf-h")
    else:
        notes.append("no incidents recorded by trainmedic supervise: MTBF not measured")
    return RunFigures(save_cost_s=save_cost, save_samples=n_save, step_time_s=step_time,
                      mtbf_s=mtbf, incidents=len(incidents), failures=tally.failures,
                      notes=tuple(notes))
