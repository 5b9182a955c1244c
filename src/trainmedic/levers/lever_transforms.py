"""What the levers of :mod:`trainmedic.levers.lever_catalog` do to a recipe's objects: rebuild
its DataLoader, compile or convert its model, wrap its blocks in activation checkpointing,
switch its optimizer's implementation. Imports torch inside each function.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainmedic.errors import ConfigError, MissingExtraError
from trainmedic.recipe.loader_rebuild import rebuild_loader
from trainmedic.recipe.runner import device_type

if TYPE_CHECKING:
    import torch

    from trainmedic.recipe.recipe import Recipe

__all__ = ["require_loader", "rebuild_loader", "grad_scaler", "compile_model", "channels_last",
           "checkpoint_blocks", "set_optimizer_impl", "adam8bit"]

logger = logging.getLogger(__name__)


def require_loader(recipe: Recipe, lever: str) -> Any:
    """The recipe's ``DataLoader`` with a batch size (a rebuild keeps its batches)."""
    from torch.utils.data import DataLoader

    data = recipe.data
    if not isinstance(data, DataLoader):
        raise ConfigError(f"--lever {lever}: the recipe's data is a {type(data).__name__}, not "
                          "a torch DataLoader; return a DataLoader from the recipe to try it")
    if data.batch_size is None:
        raise ConfigError(f"--lever {lever}: the recipe's DataLoader uses a custom "
                          "batch_sampler; rebuilding it could change its batches, so it is "
                          "not tried")
    return data


def grad_scaler(model: Any) -> Any:
    """A ``torch.amp.GradScaler`` for the model's device."""
    import torch

    return torch.amp.GradScaler(device_type(model))


def compile_model(model: torch.nn.Module, mode: str | None) -> torch.nn.Module:
    """``torch.compile(model)``: a wrapper over the same module, so the optimizer's
    parameters are still the model's (compilation happens at the first step)."""
    import torch

    if isinstance(model, torch._dynamo.eval_frame.OptimizedModule):
        raise ConfigError("--lever compile: the recipe's model is already compiled")
    return torch.compile(model, mode=mode)  # type: ignore[return-value]


def channels_last(model: torch.nn.Module,
                  loss_fn: Callable[[Any, Any], Any]) -> tuple[torch.nn.Module, Callable]:
    """The model's 4-d parameters converted in place to NHWC, and a loss function that
    converts the batch's 4-d float tensors the same way (a Conv2d gains only when its input
    is NHWC too). Refused for a model without ``Conv2d``."""
    import torch

    if not any(isinstance(m, torch.nn.Conv2d) for m in model.modules()):
        raise ConfigError("--lever channels_last: the model has no Conv2d layer; the NHWC "
                          "memory format only changes convolutions")
    # Module.to(memory_format=) sets param.data, so the Parameter objects the optimizer holds
    # stay the same (torch.nn.Module._apply)
    model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]

    def convert(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.contiguous(memory_format=torch.channels_last) \
                if x.dim() == 4 and x.is_floating_point() else x
        if isinstance(x, (list, tuple)):
            return type(x)(convert(v) for v in x)
        if isinstance(x, dict):
            return {k: convert(v) for k, v in x.items()}
        return x

    def nhwc_loss(m: Any, batch: Any) -> Any:
        return loss_fn(m, convert(batch))

    return model, nhwc_loss


def _largest_block_list(model: torch.nn.Module) -> tuple[str, Any] | None:
    import torch

    best: tuple[int, str, Any] | None = None
    for name, m in model.named_modules():
        if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)) and len(m) >= 2:
            n = sum(p.numel() for p in m.parameters())
            if n and (best is None or n > best[0]):
                best = (n, name, m)
    return None if best is None else (best[1], best[2])


def checkpoint_blocks(model: torch.nn.Module) -> str:
    """Wrap each block of the model's largest ``ModuleList`` / ``Sequential`` (by parameter
    count) in ``torch.utils.checkpoint`` (``use_reentrant=False``, as torch recommends);
    return the container's name. The blocks stay the same modules (their parameters too)."""
    import torch
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(torch.nn.Module):
        """Runs ``block`` under activation checkpointing in training."""

        def __init__(self, block: torch.nn.Module) -> None:
            super().__init__()
            self.block = block

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            if not self.training or not torch.is_grad_enabled():
                return self.block(*args, **kwargs)
            return checkpoint(self.block, *args, use_reentrant=False, **kwargs)

    found = _largest_block_list(model)
    if found is None:
        raise ConfigError("--lever activation_checkpointing: the model has no nn.ModuleList "
                          "or nn.Sequential of two or more blocks with parameters to "
                          "checkpoint")
    name, blocks = found
    if any(type(b).__name__ == "Checkpointed" for b in blocks):
        raise ConfigError(f"--lever activation_checkpointing: {name} is already checkpointed")
    for i, block in enumerate(list(blocks)):
        blocks[i] = Checkpointed(block)
    logger.info("activation checkpointing on the %d blocks of %s", len(blocks), name or "model")
    return name or "(the model)"


def set_optimizer_impl(optimizer: Any, flag: str) -> None:
    """Switch the optimizer to its ``foreach`` or ``fused`` implementation, same class and
    hyperparameters.

    Done on the recipe's own optimizer, before its first step, because its scheduler holds
    it: torch's optimizers read ``group["foreach"]`` / ``group["fused"]`` at every step
    (e.g. ``torch/optim/adam.py``), so this is what the constructor argument does; the
    constructor's checks are repeated here.
    """
    import inspect

    import torch

    cls = type(optimizer)
    if flag not in inspect.signature(cls.__init__).parameters:
        raise ConfigError(f"--lever {flag}: {cls.__name__} has no {flag} implementation")
    if optimizer.state:
        raise ConfigError(f"--lever {flag}: the optimizer has already stepped; the lever needs "
                          "a freshly built recipe")
    other = "fused" if flag == "foreach" else "foreach"
    for group in optimizer.param_groups:
        if group.get(flag):
            raise ConfigError(f"--lever {flag}: the optimizer already uses {flag}=True")
        if flag == "fused":
            if group.get("differentiable"):
                raise ConfigError("--lever fused: the optimizer is differentiable, which the "
                                  "fused kernels do not support")
            from torch.optim.optimizer import _device_dtype_check_for_fused

            for p in group["params"]:
                try:
                    _device_dtype_check_for_fused(p)
                except RuntimeError as exc:
                    raise ConfigError(f"--lever fused: {' '.join(str(exc).split())}") from None
    for group in optimizer.param_groups:
        group[flag] = True
        if other in group:
            group[other] = False
    if flag == "fused":
        # as the constructor does: the fused step unscales gradients itself under a GradScaler
        optimizer._step_supports_amp_scaling = True
    logger.debug("%s: %s=True (torch %s)", cls.__name__, flag, torch.__version__)


def adam8bit(optimizer: Any, scheduler: Any) -> Any:
    """bitsandbytes' ``AdamW8bit`` over the same param groups and hyperparameters; the
    scheduler (if any) is pointed at it."""
    try:
        import bitsandbytes as bnb
    except ImportError:
        raise MissingExtraError("--lever adam8bit needs bitsandbytes, which is not installed; "
                                "pip install bitsandbytes (it needs a supported GPU)") from None
    import torch

    if not isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        raise ConfigError(f"--lever adam8bit: replaces Adam or AdamW, the recipe's optimizer "
                          f"is {type(optimizer).__name__}")
    keys = ("lr", "betas", "eps", "weight_decay", "amsgrad")
    groups = [{"params": g["params"], **{k: g[k] for k in keys if k in g},
               **({"initial_lr": g["initial_lr"]} if "initial_lr" in g else {})}
              for g in optimizer.param_groups]
    if isinstance(optimizer, torch.optim.Adam) and not isinstance(optimizer, torch.optim.AdamW) \
            and not optimizer.defaults.get("decoupled_weight_decay"):
        new = bnb.optim.Adam8bit(groups)
    else:
        new = bnb.optim.AdamW8bit(groups)
    if scheduler is not None:
        # the schedule multiplies the same base lrs (kept in "initial_lr" above)
        scheduler.optimizer = new
    return new
