"""The words of the recovery loop: ``trainmedic supervise``'s incidents and summary, and
``trainmedic ckpt plan``'s cadence. Every figure says how it was obtained (measured,
estimated, given)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trainmedic.numbers import fmt_num

if TYPE_CHECKING:
    from trainmedic.checkpoint.cadence import CadencePlan

__all__ = ["incident_text", "supervise_summary_lines", "plan_lines", "duration_text"]


def duration_text(seconds: float) -> str:
    """``0.01269 s``, ``42 s``, ``12.5 min``, ``3.20 h``."""
    if seconds < 120:
        return f"{fmt_num(float(seconds))} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def _how(d: Mapping[str, Any]) -> str:
    if d.get("signal"):
        return f"killed by {d['signal']}"
    if d.get("outcome") == "preempted":
        return "preempted (exit 75: saved and stopped)"
    return f"failed (exit {d.get('exit_code')})"


def _lost(d: Mapping[str, Any]) -> str:
    if d.get("lost_steps") is None:
        return ("lost progress not known (not_checked: no heartbeat, no store rows from that "
                "attempt)")
    basis = d.get("lost_basis") or "measured"
    bound = ", a lower bound: the store commits in batches" if basis == "estimated" else ""
    return (f"lost {fmt_num(int(d['lost_steps']))} steps ({basis}: {d.get('lost_source')} "
            f"step {d.get('steps_done')} minus the checkpoint's {d.get('checkpoint_step')}"
            f"{bound})")


def incident_text(number: int, d: Mapping[str, Any]) -> str:
    """One line per incident (``Incident.to_dict()``)."""
    klass = d.get("failure_class")
    why = f"; explain: {klass}" if klass else ""
    ckpt = d.get("checkpoint")
    where = (f"resume from {ckpt} (step {d.get('checkpoint_step')})" if ckpt
             else "restart from step 0 (no checkpoint)")
    action = {"restart": where, "requeue": f"requeue the job, {where}",
              "give_up": "no restarts left",
              "stop": "stopped (a signal to supervise; not counted as a failure by ckpt plan)"}.get(
        str(d.get("action")), str(d.get("action")))
    return (f"incident {number}: attempt {d.get('attempt')} {_how(d)} after "
            f"{duration_text(float(d.get('uptime_s') or 0.0))} (measured){why}; "
            f"{_lost(d)}; then: {action}")


def supervise_summary_lines(doc: Mapping[str, Any]) -> list[str]:
    """The closing summary (``SuperviseResult.to_dict()``)."""
    incidents: Sequence[Mapping[str, Any]] = doc.get("incidents") or []
    lines = [f"supervise: {doc.get('final')} after {doc.get('attempts')} start(s), "
             f"{len(incidents)} incident(s), {duration_text(float(doc.get('wall_s') or 0))} "
             f"(measured); exit {doc.get('exit_code')}"]
    for k, d in enumerate(incidents, 1):
        lines.append(f"  {incident_text(k, d)}")
    total = doc.get("total_lost_steps")
    if incidents:
        lines.append(f"  total lost: {fmt_num(total)} steps ({doc.get('total_lost_basis')})"
                     if total is not None
                     else "  total lost: not known for every incident (not_checked)")
    return lines


def plan_lines(plan: CadencePlan, notes: Sequence[str] = ()) -> list[str]:
    """``trainmedic ckpt plan``: inputs with their basis, then the cadence (estimated)."""
    i = plan.inputs
    lines = ["inputs (measured: read from the run; given: a flag):",
             f"  save cost       {duration_text(i.save_cost_s)} ({i.save_cost_source})",
             f"  MTBF            {duration_text(i.mtbf_s)} ({i.mtbf_source})",
             f"  restart cost    {duration_text(i.restart_cost_s)} ({i.restart_cost_source})"]
    if i.step_time_s is not None:
        lines.append(f"  step time       {fmt_num(i.step_time_s)} s ({i.step_time_source})")
    steps = (f" = about {fmt_num(plan.interval_steps)} steps"
             if plan.interval_steps is not None else "")
    lines += [
        "cadence (estimated):",
        f"  checkpoint every {duration_text(plan.daly_interval_s)} of training{steps} "
        f"(Daly 2006)",
        f"  Young 1974 sqrt(2*C*MTBF): {duration_text(plan.young_interval_s)}",
        f"  expected loss per failure: {duration_text(plan.expected_loss_per_failure_s)} "
        f"((interval + save)/2 + restart)",
        f"  save overhead: {plan.save_overhead_fraction:.2%} of the time (save / interval)",
        f"  expected waste: {plan.expected_waste_fraction:.2%} (saves + rework after "
        f"failures)",
    ]
    lines += [f"note: {n}" for n in notes]
    return lines
