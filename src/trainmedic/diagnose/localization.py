"""The NaN guard's localizations as diagnosis evidence: which recorded ``nonfinite`` event
belongs to a non-finite finding, what kind of break it shows, and how to say it.

The live watcher records ``Localization.as_dict()`` (trainmedic.live.nan_guard) at the step
that went non-finite as a ``RunEvent(kind="nonfinite")``. Detectors (``nonfinite_loss``,
``nonfinite_grad``) name the module from it, and the router picks the causes that fit the kind
of break (rules.LOCALIZED_CAUSES). This module reads the recorded dict only: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from trainmedic.diagnose.finding import Evidence, Finding
from trainmedic.run.series import Run, RunEvent

__all__ = [
    "EVENT_KIND",
    "LocalizedKind",
    "nonfinite_event",
    "finding_event",
    "localized_kind",
    "module_label",
    "localized_phrase",
    "localized_evidence",
    "localization_data",
]

#: ``RunEvent.kind`` of a NaN-guard localization.
EVENT_KIND = "nonfinite"

#: What broke: ``state`` = parameters already non-finite (``where="input"`` with
#: ``param_nonfinite``), ``data`` = a non-finite batch (``where="input"`` without),
#: ``growth`` = a forward break on inputs so large that any product of two of them overflows
#: (abs-max >= sqrt of the dtype's maximum), or whose products with the module's parameters
#: are that large (the weights had grown instead: a diverging run's updates): the run was
#: blowing up, the module only showed it; ``forward`` = a break on moderate inputs and
#: parameters: the module's own math.
LocalizedKind = Literal["forward", "growth", "backward", "loss", "state", "data",
                        "not_reproduced"]

_WHERE = {"forward", "backward", "loss", "not_reproduced"}

#: Largest finite value per dtype (torch.finfo), for the ``growth`` rule.
DTYPE_MAX = {"torch.float16": 65504.0, "torch.bfloat16": 3.3895e38, "torch.float32": 3.4028e38,
             "torch.float64": 1.7977e308}


#: Dtypes below this range (fp16, fp8) overflow on healthy values; see ``_grown``.
_WIDE_DTYPE_MAX = 1e30
#: In such a dtype, a parameter abs-max from which the weights count as grown: healthy
#: networks' weights are O(1)-O(100).
_NARROW_GROWN_PARAM = 1e3


def nonfinite_event(run: Run, rank: int | None, first_step: int | None,
                    last_step: int | None = None) -> RunEvent | None:
    """The first NaN-guard event on ``rank`` at a step in ``[first_step, last_step]`` (no upper
    bound when ``last_step`` is None: a non-finite stretch that lasts to the end). An event or
    a finding without a rank matches any rank. None when there is none."""
    if first_step is None:
        return None
    for e in run.events_of(EVENT_KIND):
        if rank is not None and e.rank is not None and e.rank != rank:
            continue
        if e.step >= first_step and (last_step is None or e.step <= last_step):
            return e
    return None


def finding_event(f: Finding, run: Run) -> RunEvent | None:
    """The NaN-guard event behind a non-finite finding: within its onset..end steps."""
    return nonfinite_event(run, f.rank, f.onset_step, f.end_step)


def localized_kind(data: Mapping[str, Any]) -> LocalizedKind | None:
    """The kind of break an event shows, or None for an event this version cannot read."""
    where = data.get("where")
    if where == "input":
        return "state" if data.get("param_nonfinite") else "data"
    if where == "forward" and _grown(data):
        return "growth"
    if where == "backward" and _dtype_max(data) >= _WIDE_DTYPE_MAX and _grown(data):
        # A LayerNorm whose input reached 8e19 (a diverging run's residual stream) overflows
        # in its backward, and the fix is the run's, not an eps. Not in fp16, where inputs
        # of a few hundred are ordinary and a backward overflow is the dtype's.
        return "growth"
    if where in _WHERE:
        return where
    return None


def _dtype_max(data: Mapping[str, Any]) -> float:
    return DTYPE_MAX.get(str(data.get("dtype")), DTYPE_MAX["torch.float32"])


def _grown(data: Mapping[str, Any]) -> bool:
    top = _dtype_max(data)
    inp = _num(data.get("input_absmax"))
    if inp is None or not math.isfinite(inp):
        return False
    param = _num(data.get("param_absmax"))
    scale = max(param, 1.0) if param is not None and math.isfinite(param) else 1.0
    if top < _WIDE_DTYPE_MAX and scale < _NARROW_GROWN_PARAM:
        # In fp16, sqrt(65504) = 256: healthy weights (a LayerNorm gain of 13, an outlier row)
        # times ordinary inputs pass it. There only weights past 1e3 say the run grew.
        scale = 1.0
    return inp * scale >= math.sqrt(top)


def module_label(data: Mapping[str, Any]) -> str:
    """The module as the report says it: its dotted path, "the root module" for "", or
    "the named module" when the event names none."""
    m = data.get("module")
    if m is None:
        return "the named module"
    return "the root module" if m == "" else str(m)


def _quoted(data: Mapping[str, Any]) -> str:
    m = data.get("module")
    return "the root module" if m == "" else f"`{m}`"


def _num(v: Any) -> float | None:
    """A recorded number: floats, ints, and "nan"/"inf"/"-inf" strings (JSON has no NaN)."""
    if isinstance(v, bool) or v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def localized_phrase(event: RunEvent) -> str:
    """What the guard found, as a clause for a finding's summary, ending in (where)."""
    d = event.data
    kind = localized_kind(d)
    if kind == "forward":
        return f"the first non-finite value appeared in the output of {_quoted(d)} (forward)"
    if kind == "growth":
        inp = _num(d.get("input_absmax")) or 0.0
        top = _dtype_max(d)
        grown = (f"inputs that had grown to {inp:.3g}" if inp >= math.sqrt(top) else
                 f"inputs of abs-max {inp:.3g} and parameters that had grown to "
                 f"{_num(d.get('param_absmax')):.3g}")
        if d.get("where") == "backward":
            return (f"the first non-finite gradient appeared in the backward of {_quoted(d)} "
                    f"(backward), on {grown}")
        return (f"the first non-finite value appeared in the output of {_quoted(d)} (forward), "
                f"on {grown}")
    if kind == "backward":
        return (f"the first non-finite gradient appeared in the backward of {_quoted(d)} "
                "(backward)")
    if kind == "loss":
        return ("the model's output was finite: the loss computation itself produced the "
                "non-finite value (loss)")
    if kind == "state":
        names = [str(n) for n in d.get("param_nonfinite") or []]
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        return (f"parameters were already non-finite before step {event.step} ({names[0]}"
                f"{more}): an earlier update blew up (state)")
    if kind == "data":
        return f"the batch itself was non-finite when it reached {_quoted(d)} (input)"
    if kind == "not_reproduced":
        return "the NaN guard's replay of that step stayed finite (not reproduced)"
    # The watcher records a step it could not replay with where="not_localized".
    return f"the NaN guard recorded the step but did not localize it ({d.get('where')})"


def localized_evidence(event: RunEvent) -> tuple[Evidence, ...]:
    """The event as measured evidence: the named module's output abs-max against its input
    abs-max (forward, backward, data), its parameters' abs-max (state), else the guard's
    sentence on the loss (loss, not_reproduced)."""
    d = event.data
    kind = localized_kind(d)
    detail = str(d.get("detail", ""))
    module = d.get("module")
    dtype = f" ({d['dtype']})" if d.get("dtype") else ""
    note = f"NaN guard replay of step {event.step}, {d.get('where')}{dtype}: {detail}"
    if kind in ("forward", "growth", "backward", "data") and module is not None:
        out, inp = _num(d.get("output_absmax")), _num(d.get("input_absmax"))
        return (Evidence(f"layer/{module}/output_absmax", event.step, out, inp,
                         note=note + "; value = abs-max of the module's finite output "
                                     "entries (NaN/inf left out), reference = the same of its "
                                     "input"),)
    if kind == "state" and module is not None:
        names = [str(n) for n in d.get("param_nonfinite") or []]
        return (Evidence(f"layer/{module}/param_absmax", event.step,
                         _num(d.get("param_absmax")), None,
                         note=f"{note}; value = abs-max of the module's finite parameter "
                              f"entries; non-finite: {', '.join(names)}"),)
    return (Evidence("loss", event.step, None, None, note=note),)


def localization_data(event: RunEvent) -> dict[str, Any]:
    """The event as the findings JSON's ``localization`` object: the module, the phase
    (``forward``/``backward``, or ``loss``/``input``/``not_reproduced``), the dtype and the
    abs-max of the module's inputs, parameters and outputs, as the guard measured them."""
    d = event.data
    return {"module": None if d.get("module") is None else str(d.get("module")),
            "phase": None if d.get("where") is None else str(d.get("where")),
            "dtype": None if d.get("dtype") is None else str(d.get("dtype")),
            "input_absmax": _num(d.get("input_absmax")),
            "param_absmax": _num(d.get("param_absmax")),
            "output_absmax": _num(d.get("output_absmax")),
            "step": int(event.step)}
