"""What the user hands the watcher, checked: the loss of each step, the optimizer's parameters.

Pure functions: a bad loss raises :class:`~trainmedic.errors.ConfigError` naming what arrived;
an optimizer over parameters the model does not hold is described, and
:func:`check_optimizer_params` records and logs it (a run may mean it, e.g. a frozen
teacher, so it is not refused).
"""

from __future__ import annotations

import logging
from typing import Any

from trainmedic.errors import ConfigError

__all__ = ["check_loss", "check_optimizer_params", "foreign_optimizer_params",
           "trainable_params"]

logger = logging.getLogger(__name__)


def trainable_params(model: Any, optimizer: Any) -> list[Any]:
    """The tensors the watcher measures: the model's trainable parameters, or without a
    model the optimizer's."""
    if model is not None:
        return [p for p in model.parameters() if p.requires_grad]
    if optimizer is not None:
        return [p for g in optimizer.param_groups for p in g["params"]]
    return []


def check_loss(torch: Any, loss: Any) -> Any:
    """``loss`` as ``w.step()`` keeps it: a one-element tensor as is, ``None``, or a float.
    Anything else (a batch of losses, a string, an object) raises ``ConfigError``."""
    if isinstance(loss, torch.Tensor):
        if loss.numel() != 1:
            raise ConfigError(
                f"w.step(loss): loss must be a scalar tensor, got shape "
                f"{tuple(loss.shape)}; reduce it first (loss.mean()) or pass a number")
        return loss
    if loss is None:
        return None
    if isinstance(loss, (str, bytes)):
        raise ConfigError(f"w.step(loss): loss must be a scalar tensor or a number, got "
                          f"{type(loss).__name__} {loss!r}")
    try:
        return float(loss)
    except (TypeError, ValueError):
        raise ConfigError(f"w.step(loss): loss must be a scalar tensor or a number, got "
                          f"{type(loss).__name__}") from None


def foreign_optimizer_params(model: Any, optimizer: Any) -> dict[str, Any] | None:
    """The event data when the optimizer steps parameters the model does not hold (a stale
    copy of the model: the classic "loss never moves" bug), else ``None``."""
    in_model = {id(p) for p in model.parameters()}
    opt_params = [p for g in optimizer.param_groups for p in g["params"]]
    foreign = [p for p in opt_params if id(p) not in in_model]
    if not foreign:
        return None
    n_el = sum(int(p.numel()) for p in foreign)
    msg = (f"{len(foreign)} of the optimizer's {len(opt_params)} parameters "
           f"({n_el:,} values) are not parameters of the watched model: the optimizer "
           f"updates tensors the model does not use (built over a copy of the model?)")
    return {"foreign": len(foreign), "optimizer_params": len(opt_params),
            "foreign_values": n_el, "detail": msg}


def check_optimizer_params(model: Any, optimizer: Any, store: Any, step: int) -> None:
    """An optimizer stepping parameters the model does not hold is recorded in ``store`` as
    an event at ``step`` and logged (:func:`foreign_optimizer_params`)."""
    if model is None or optimizer is None:
        return
    store.set_meta(optimizer_params_checked=True)
    found = foreign_optimizer_params(model, optimizer)
    if found is not None:
        logger.warning("trainmedic: %s", found["detail"])
        store.event(step, "optimizer_params_not_in_model", found)
