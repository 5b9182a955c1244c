"""The NaN guard's localization: replay a step that went non-finite and name the first module
where it did.

When a step's loss or global gradient norm is NaN/inf, the watcher skips the optimizer update
(every ``.grad`` set to None, so ``optimizer.step()`` changes nothing) and the parameters still
hold the state that produced the non-finite value. :func:`localize_nonfinite` then replays the
step - the user's closure recomputes the loss of the same batch, from the RNG state captured
for the step so dropout masks are the same - with hooks on every module, and reports:

1. parameters that are already non-finite (an earlier update corrupted the state):
   ``where="input"`` with ``param_nonfinite`` naming them; nothing is replayed;
2. else the first module, in forward order, whose inputs were finite and whose output was not
   (a module that only passes a NaN along is not it): ``where="forward"``. A non-finite value
   that was already in the batch (no module made it): ``where="input"``;
3. else, when the model's output was finite but the loss (or the loss's gradient) is not:
   ``where="loss"``;
4. else the first module, in backward order, that received a finite gradient for its output
   and produced a non-finite gradient for its inputs or its own parameters:
   ``where="backward"``;
5. else ``where="not_reproduced"``: the replay was finite (the detail says what that means).

The replay itself - the hooks, the forward and backward tracing, the snapshot and restore of
the model's state - is :class:`trainmedic.live.nan_replay.Replay`; this module holds the
records it returns and the entry point.

Restored in a ``finally``: hooks removed, each ``.grad`` back to what it held, every module
buffer (BatchNorm statistics, ``num_batches_tracked``) back to its bits, the CPU and CUDA RNG
states back to what they were before the call; ``model.training`` is never changed. A model
that cannot be replayed gives ``where="not_reproduced"`` with the reason (traceback in the
log), never an exception. Nothing here runs on a healthy step.

Limits: the closure must recompute the step as it ran (same batch, same autocast); state that
is neither a parameter nor a buffer (a Python counter in a module) is not rolled back; under
``DistributedDataParallel`` the replay runs in ``no_sync()``, and every rank must localize the
same step, since a model with buffers broadcasts them in its forward (a guard triggered by the
all-reduced grad norm fires on every rank at once); ``torch.compile`` may skip module hooks.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from trainmedic.errors import NonFiniteError

if TYPE_CHECKING:
    import torch

__all__ = [
    "Where",
    "Localization",
    "RngState",
    "NonFiniteError",
    "capture_rng_state",
    "rng_state_reader",
    "as_rng_state",
    "localize_nonfinite",
]

logger = logging.getLogger(__name__)

Where = Literal["forward", "backward", "loss", "not_reproduced", "input"]

#: How many non-finite parameter names a Localization keeps (the count is in the detail).
MAX_PARAM_NAMES = 20


def _json_num(x: float | None) -> float | str | None:
    """JSON has no NaN/inf: written as "nan", "inf", "-inf" (as in the findings JSON)."""
    if x is None or math.isfinite(x):
        return x
    if math.isnan(x):
        return "nan"
    return "inf" if x > 0 else "-inf"


@dataclass(frozen=True)
class Localization:
    """Where a non-finite loss or gradient first appeared, from a replay of the step."""

    module: str | None
    """Dotted path from ``named_modules()`` ("" for the root module); None when no module is
    to blame (``not_reproduced``, or a loss that is non-finite on a finite model output)."""
    where: Where
    """``forward``, ``backward``, ``loss``, ``input`` (non-finite parameters or batch) or
    ``not_reproduced``."""
    step: int
    """The training step that was replayed."""
    detail: str
    """One sentence for humans saying what was seen."""
    input_absmax: float | None = None
    """Largest |value| over the module's floating-point inputs in the replay (NaN ignored;
    NaN when every value is NaN)."""
    param_absmax: float | None = None
    """Largest |value| over the module's parameters, its submodules' included (NaN
    ignored)."""
    output_absmax: float | None = None
    """Largest |value| over the module's outputs (NaN ignored: inf when any is inf)."""
    param_nonfinite: list[str] = field(default_factory=list)
    """Parameters already non-finite before the replay (the state was corrupted earlier);
    at most MAX_PARAM_NAMES names, first in ``named_parameters()`` order."""
    dtype: str | None = None
    """The dtype of the tensor that went non-finite (e.g. ``torch.float16``), when known."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able dict (non-finite numbers as "nan"/"inf"/"-inf")."""
        return {"module": self.module, "where": self.where, "step": self.step,
                "detail": self.detail, "input_absmax": _json_num(self.input_absmax),
                "param_absmax": _json_num(self.param_absmax),
                "output_absmax": _json_num(self.output_absmax),
                "param_nonfinite": list(self.param_nonfinite), "dtype": self.dtype}


@dataclass(frozen=True)
class RngState:
    """The RNG state a step started from: CPU generator, plus one CUDA device's generator."""

    cpu: torch.Tensor
    cuda: torch.Tensor | None = None
    cuda_device: int | None = None


def capture_rng_state(device: torch.device | str | None = None) -> RngState:
    """The current RNG state, to replay a step's dropout masks: ``torch.get_rng_state()``, plus
    ``torch.cuda.get_rng_state(device)`` on CUDA (a host-side copy of the generator's seed and
    offset: no device sync). A few microseconds; call it once per step."""
    import torch

    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        return RngState(torch.get_rng_state(), torch.cuda.get_rng_state(index), index)
    return RngState(torch.get_rng_state())


def rng_state_reader(device: torch.device | str | None = None) -> Callable[[], Any]:
    """A function of no arguments that reads what :func:`capture_rng_state` would, for a
    caller that reads it at every step: the generators are looked up once here. Its result
    goes through :func:`as_rng_state` before a replay. On CPU it is the generator's state
    tensor alone (``torch.default_generator.get_state``, what ``torch.get_rng_state``
    returns), so a healthy step builds no record."""
    import torch

    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        cuda_dev = torch.device("cuda", index)
        return lambda: capture_rng_state(cuda_dev)
    read_cpu: Callable[[], Any] = torch.default_generator.get_state
    return read_cpu


def as_rng_state(raw: Any) -> RngState:
    """What a :func:`rng_state_reader` function returned, as an :class:`RngState`."""
    return raw if isinstance(raw, RngState) else RngState(raw)


def localize_nonfinite(model: torch.nn.Module, replay: Callable[[], torch.Tensor], *,
                       step: int, rng_state: RngState | tuple[Any, Any] | None = None,
                       loss_scale: float | torch.Tensor | None = None) -> Localization:
    """Replay one step and name the first module where a NaN/inf appeared (module docstring).

    ``replay`` recomputes the step's loss from the same batch (``lambda: loss_fn(model(x), y)``,
    inside the same autocast context as the step); ``rng_state`` is what
    :func:`capture_rng_state` returned as the step's forward began (or a ``(cpu_state,
    cuda_state)`` pair), so dropout draws the same masks; ``loss_scale`` (a GradScaler's
    scale) multiplies the loss before backward, so an fp16 gradient overflow reproduces.
    Call it with the parameters as they were for the step (the watcher skips the update).
    Never raises; see :class:`Localization` for the result.
    """
    # Imported here: nan_replay imports this module's records (a top-level import would be
    # circular).
    from trainmedic.live.nan_replay import Replay

    try:
        with Replay(model, step) as rp:
            return rp.localize(replay, rng_state, loss_scale)
    except Exception as exc:  # a weird model must not take the training loop down
        logger.warning("NaN guard: could not localize step %d", step, exc_info=True)
        return Localization(None, "not_reproduced", step,
                            f"the replay of step {step} failed, so nothing was localized: "
                            f"{type(exc).__name__}: {exc}")
