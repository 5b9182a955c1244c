"""The NaN guard's policy for one training loop: when to drop an update, replay, record, raise.

The watcher calls it at three points of a step: :meth:`StepGuard.check_grads` in the
optimizer pre-step hook (with the global grad norm), :meth:`StepGuard.end_step` from
``w.step()`` (with the host values of the step and the user's ``replay`` closure), and
:meth:`StepGuard.check_fetched` when device values arrive in a batched fetch ("record" on an
accelerator). Localization itself is :func:`trainmedic.live.nan_guard.localize_nonfinite`.

Policies (``WatchConfig.nan_policy``): ``skip`` drops the update (every ``.grad`` set to
``None`` before ``optimizer.step()``: torch optimizers leave such parameters, their moments and
step counts untouched, so the parameters stay exactly those that produced the non-finite
value, for the replay); ``raise`` does the same, then raises ``NonFiniteError``; ``record``
only records.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = ["StepGuard", "MAX_LOCALIZATIONS", "nonfinite_names"]

logger = logging.getLogger(__name__)

#: Localizing replays a forward and backward: done for the first few events only, so a run
#: that stays non-finite is not slowed to a crawl.
MAX_LOCALIZATIONS = 3

#: ``record_event(step, kind, data)``: the watcher writes it to the store and the live alerts.
RecordEvent = Callable[[int, str, dict[str, Any]], None]


def nonfinite_names(row: Mapping[str, Any]) -> list[str]:
    """Which of the loss and the grad norm in ``row`` are non-finite."""
    out: list[str] = []
    for k in ("loss", "grad_norm"):
        v = row.get(k)
        if isinstance(v, float) and not math.isfinite(v):
            out.append(k)
    return out


class StepGuard:
    """Per-step NaN-guard state of one watcher (``policy`` already resolved from "auto")."""

    def __init__(self, policy: str, *, on_accelerator: bool, record_event: RecordEvent,
                 device: Any = None) -> None:
        self.policy = policy
        self._accelerator = on_accelerator
        self._record_event = record_event
        self.events = 0
        self._rng_raw: Any = None
        self._skipped = False
        self._hook_fired = False
        self._read_rng: Callable[[], Any] | None = None
        self._drops = policy in ("skip", "raise")
        self._last_scale: float | None = None  # a GradScaler's scale at the last step
        if self._drops:
            from trainmedic.live.nan_guard import rng_state_reader

            self._read_rng = rng_state_reader(device)

    @property
    def drops_updates(self) -> bool:
        """True for the policies that read the grad norm before the update (skip, raise)."""
        return self._drops

    @property
    def rng_state(self) -> Any:
        """The RNG state captured at the last training forward's start (an ``RngState``), or
        ``None``: what a replay of that step draws its dropout masks from."""
        if self._rng_raw is None:
            return None
        from trainmedic.live.nan_guard import as_rng_state

        return as_rng_state(self._rng_raw)

    def capture_rng(self) -> None:
        """At a training forward's start (under skip/raise): keep the RNG state a replay would
        draw the same dropout masks from. It runs at every step, so it only copies the
        generator's state (~5 kB on CPU; the CUDA one is host-side) through a reader
        resolved once; the ``RngState`` is built only when a replay needs it."""
        if self._read_rng is not None:
            self._rng_raw = self._read_rng()

    def check_grads(self, grad_norm: Any, torch: Any, params: Iterable[Any],
                    optimizer: Any) -> bool:
        """In the optimizer pre-step hook: drop the update when the grad norm is non-finite
        under skip/raise. The one read the guard needs: free on CPU (already a float), a
        sync on an accelerator. Returns True when the update was dropped."""
        self._hook_fired = True
        if grad_norm is None or not self._drops:
            return False
        finite = math.isfinite(grad_norm) if isinstance(grad_norm, float) else bool(
            torch.isfinite(grad_norm))
        if finite:
            return False
        self._skipped = True
        for p in params:
            p.grad = None
        if optimizer is not None:
            for g in optimizer.param_groups:
                for p in g["params"]:
                    p.grad = None
        return True

    def end_healthy_step(self, loss: float | None, grad_norm: float | None) -> bool:
        """Close a step whose loss and grad norm are host floats (or None), if it needs
        nothing more: no update was dropped and both are finite. False: call
        :meth:`end_step` (which records, localizes or raises by policy)."""
        if self._skipped or (loss is not None and not math.isfinite(loss)) or (
                grad_norm is not None and not math.isfinite(grad_norm)):
            return False
        self._hook_fired = False
        return True

    def end_step(self, s: int, host: Mapping[str, Any], *, replay: Callable[[], Any] | None,
                 model: Any, scaler: Any, before_raise: Callable[[], None]) -> None:
        """Record (and, by policy, localize or raise on) step ``s``. Nothing runs on a healthy
        step beyond reading two host floats that were read anyway."""
        skipped, hook_fired = self._skipped, self._hook_fired
        self._skipped = self._hook_fired = False
        if self.policy == "record":
            if not self._accelerator:  # on an accelerator: in the fetched values
                self._record_row(s, host)
            return
        loss = host.get("loss")
        loss_bad = isinstance(loss, float) and not math.isfinite(loss)
        if not skipped and not loss_bad:
            return
        bad = (["loss"] if loss_bad else []) + (["grad_norm"] if skipped else [])
        # The parameters still hold the state that produced the non-finite value when the
        # update was dropped here, or when no update ran this step (a GradScaler skipped it).
        same_state = skipped or not hook_fired
        localization = None
        if replay is not None and same_state and model is not None \
                and self.events < MAX_LOCALIZATIONS:
            from trainmedic.live.nan_guard import localize_nonfinite

            scale = None
            if scaler is not None and scaler.is_enabled():
                scale = scaler.get_scale()  # so an fp16 grad overflow replays as it was
            localization = localize_nonfinite(model, replay, step=s, rng_state=self.rng_state,
                                              loss_scale=scale)
        self.record(s, bad, localization, skipped=skipped)
        if self.policy == "raise":
            from trainmedic.live.nan_guard import NonFiniteError

            before_raise()
            where = f"; {localization.detail}" if localization is not None else ""
            raise NonFiniteError(f"step {s}: non-finite {' and '.join(bad)}{where}",
                                 localization=localization)

    def check_fetched(self, s: int, row: Mapping[str, Any]) -> None:
        """"record" on an accelerator: the check rides the batched fetch (no sync)."""
        if self._accelerator and self.policy == "record":
            self._record_row(s, row)

    def _record_row(self, s: int, row: Mapping[str, Any]) -> None:
        """"record": the step's event, if its loss or grad norm is non-finite. A grad norm
        alone, on a step where a GradScaler lowered its scale, is the scaler doing its job
        (it found the overflow and skipped the update): recorded as such, logged at INFO."""
        scale = row.get("loss_scale")
        prev = self._last_scale
        if isinstance(scale, float):
            self._last_scale = scale
        bad = nonfinite_names(row)
        if not bad:
            return
        if bad == ["grad_norm"] and isinstance(scale, float) and prev is not None \
                and scale < prev:
            if scale >= 1.0:
                detail = (f"not localized: GradScaler skipped the update (the gradients "
                          f"overflowed at loss scale {prev:g}; it lowered the scale to "
                          f"{scale:g}): normal in fp16 mixed precision unless it repeats")
            else:
                # Halving from 65536 to below 1 takes 17 skips in a row: gradients that are
                # non-finite even scaled down are a NaN the scaler cannot fix, not an overflow.
                detail = (f"not localized: GradScaler skipped the update again and its scale "
                          f"fell to {scale:g}: the gradients stay non-finite even scaled "
                          f"down, which is not an fp16 overflow; use nan_policy='skip' (on "
                          f"CPU) or 'raise' to localize it")
            self._record_event(s, "nonfinite", {
                "metrics": bad, "policy": self.policy, "update_skipped": True,
                "scaler_skipped": True, "where": "not_localized", "module": None,
                "detail": detail})
            if scale >= 1.0:
                logger.info("trainmedic: step %d: non-finite grad_norm; %s", s, detail)
            elif prev >= 1.0:  # once, as it crosses
                logger.warning("trainmedic: step %d: non-finite grad_norm; %s", s, detail)
            return
        self.record(s, bad, None)

    def record(self, s: int, bad: Sequence[str], localization: Any, *,
               skipped: bool = False) -> None:
        """Write the ``nonfinite`` event of step ``s`` and warn (the first few times)."""
        self.events += 1
        data: dict[str, Any] = {"metrics": list(bad), "policy": self.policy,
                                "update_skipped": skipped}
        if localization is not None:
            data.update(localization.as_dict())
        else:
            data["where"] = "not_localized"
            data["module"] = None
            if not self.drops_updates:
                why = (f"nan_policy={self.policy!r} lets the update run, so the state that "
                       f"produced it is gone; use nan_policy='skip' to localize")
            elif self.events > MAX_LOCALIZATIONS:
                why = f"only the first {MAX_LOCALIZATIONS} non-finite steps are replayed"
            else:
                why = "pass replay= to w.step() so the guard can rerun the batch"
            data["detail"] = f"not localized: {why}"
        self._record_event(s, "nonfinite", data)
        if self.events == MAX_LOCALIZATIONS + 1:
            logger.warning("trainmedic: step %d: non-finite steps go on; recording them "
                           "(events 'nonfinite' in the run store) without more warnings", s)
        elif self.events <= MAX_LOCALIZATIONS:
            logger.warning("trainmedic: step %d: non-finite %s (%s); %s", s, " and ".join(bad),
                           "update skipped" if skipped else "recorded", data["detail"])
