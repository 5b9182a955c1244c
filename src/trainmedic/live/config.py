"""What the watcher records, and how often: :class:`WatchConfig`.

Every field has a default an engineer can leave on for a whole run; the costly parts
(per-layer health) are off unless asked for. ``watch(model, opt, run_dir=..., **fields)``
accepts the same names as keyword arguments.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from trainmedic.dist.watchdog import HangWatchdogConfig
from trainmedic.errors import ConfigError

__all__ = ["WatchConfig", "NAN_POLICIES", "IF_EXISTS", "check_callback_kwargs",
           "callback_watch_kwargs"]

#: What the NaN guard does when the loss or the gradient norm is non-finite.
NAN_POLICIES = ("auto", "skip", "raise", "record")

#: What a new run does when its ``run_dir`` already holds a record (``WatchConfig.if_exists``).
IF_EXISTS = ("error", "version", "overwrite", "resume")


@dataclass(kw_only=True, frozen=True)
class WatchConfig:
    """The watcher's schedule and policies. A bad field raises ``ConfigError`` naming it."""

    fetch_every: int | None = None
    """Steps between batched device-to-host fetches of values that live on an accelerator
    (loss, grad norm, loss scale, CUDA-event timings). ``None``: 50 on an accelerator (one
    transfer per 50 steps, so the watcher adds no host-device sync to a step that does not
    fetch), 1 on CPU (reading a CPU tensor costs no sync)."""

    param_every: int | None = 50
    """Steps between measurements of ``param_norm`` and ``update_ratio`` (the global
    ||ΔW|| / ||W|| of one optimizer step; ~1e-3 is the usual healthy order, Karpathy's
    "update/data ratio"). It copies the parameters once on those steps. ``None``: never."""

    layer_every: int | None = None
    """Steps between per-layer health measurements (``layer/<module>/<stat>``: grad and weight
    norms, activation mean/std/abs-max, dead and saturated unit fractions). ``None``: off
    (see ``benchmarks/watch_overhead.py`` for what it costs)."""

    layer_max_modules: int = 256
    """At most this many modules are measured per layer-health step (evenly chosen, first
    and last always kept)."""

    nan_policy: str = "auto"
    """What to do on a step whose loss or gradient norm is non-finite. ``"skip"``: drop the
    optimizer update (every ``.grad`` set to ``None`` before ``optimizer.step()``), record the
    event and localize it (with ``replay=`` given to ``step``); ``"raise"``: the same, then
    raise ``NonFiniteError``; ``"record"``: only record. ``"auto"``: ``"skip"`` on CPU, where
    checking is free, and ``"record"`` on an accelerator, where checking every step costs a
    host-device sync (choose ``"skip"`` there to pay it)."""

    forward_clock: bool | None = None
    """Time each training forward (``compute_time_s``) with a forward pre-hook and hook on the
    model. ``None``: on in a run of more than one rank, where the forward (before the gradient
    all-reduce, which makes every rank's backward and step equally long) is what tells a
    straggler apart; off in one process, where step and data times already split the step
    and the hooks cost ~30 us per CPU step (they take ``nn.Module.__call__`` off its fast
    path: ~0.2% of the demo's 13 ms step)."""

    alert_every: int | None = 100
    """Steps between live detector passes over the recent window (run off the training
    thread); findings go to logging and ``on_finding``. ``None``: no live alerts."""

    alert_window: int = 2000
    """Steps of history each live detector pass looks at."""

    alert_min_severity: str = "warning"
    """The least severe live finding that alerts (``"info"``, ``"warning"``, ``"error"``):
    info-level findings (a plateau) are normal on a healthy run and would only be noise."""

    on_finding: Callable[[Any], None] | None = None
    """Called with each new live ``Finding``, on the alert thread (the last pass, at
    ``close()``, runs on the thread that closes the watcher)."""

    stop_on: Collection[str] = ()
    """Symptom codes (e.g. ``{"divergence", "nonfinite_loss"}``) whose live finding sets
    ``should_stop``."""

    stop_file: str | pathlib.Path | None = "STOP"
    """A file whose appearance sets ``should_stop`` (relative paths are under ``run_dir``):
    ``touch runs/exp1/STOP`` asks a long run to save and stop at the next step boundary. It is
    looked for every ``alert_every`` steps (every 100 with live alerts off). ``None``: no flag
    file."""

    on_stop: Callable[[str], None] | None = None
    """Called once on the training thread, at the first step boundary after a stop was asked
    for, with the reason (save a checkpoint here)."""

    hang: HangWatchdogConfig | bool | None = None
    """The hang watchdog (``trainmedic.dist.watchdog``): a thread that dumps every thread's
    stack and torch's flight recorder when no step completes for ``k`` x the median step time
    (``watch.phase("eval")`` / ``("checkpoint")`` get longer limits); ``trainmedic dist
    diagnose RUN_DIR`` merges the ranks' dumps. ``None``: on when the run has several ranks or
    runs under ``trainmedic dist watch``; ``True``: on with the defaults; a
    ``HangWatchdogConfig``: on with it; ``False``: off."""

    rss_interval_s: float | None = 0.05
    """Seconds between readings of the process's resident set (``rss_mb``), on the training
    thread; the steps in between record the last reading (at most this old). Reading
    ``/proc/self/statm`` costs 20-30 us on a training loop's cold caches: once per 50 ms that
    is under 0.1% of any step. (A sampling thread would cost the same CPU beside the loop
    and take the GIL from it 20 times a second.) ``None``: read it at every step."""

    gpu_sample_s: float | None = 1.0
    """Seconds between NVML readings of the GPU (``gpu_util``, ``gpu_sm_clock_mhz``,
    ``gpu_power_w``, ``gpu_temp_c``, ``gpu_throttle_reasons``) on a background thread, each
    step recording the latest; only on CUDA and with ``pynvml`` installed (``nvidia-ml-py``).
    ``None``: not sampled."""

    flops_per_step: float | None = None
    """FLOPs of one optimizer step on this rank (``trainmedic profile`` counts them with
    FlopCounterMode; or 6·N·tokens plus attention, PaLM appendix B). With
    ``peak_flops_per_s`` the watcher records ``mfu`` each step: these FLOPs over the step
    time over the peak. ``None``: no ``mfu``."""

    hardware_flops_per_step: float | None = None
    """FLOPs the step really runs, the forward ops activation checkpointing runs again in
    the backward included (``trainmedic profile`` prints them as "with recompute"). With
    ``peak_flops_per_s`` the watcher records ``hfu`` (hardware FLOPs utilization) each step.
    ``None``: no ``hfu``."""

    peak_flops_per_s: float | None = None
    """The peak ``mfu`` and ``hfu`` are taken against: best the measured one (``trainmedic
    bench matmul`` on this device and dtype), else the datasheet's."""

    flush_rows: int = 512
    """Store rows queued before the writer thread is woken."""

    flush_interval_s: float = 1.0
    """Seconds between store commits at most (a crash loses at most this much)."""

    if_exists: Literal["error", "version", "overwrite", "resume"] = "error"
    """What a new run (``start_step`` 0) does when ``run_dir`` already holds a run's record.
    ``"error"``: refuse, with one line naming the folder and these choices. ``"version"``:
    record every run in a new ``<run_dir>/version_N`` (N one past the highest version there,
    0 for the first, as Lightning's loggers number runs; ``Watcher.run_dir`` and the start
    line say which); a resume (``start_step`` > 0) continues the latest version.
    ``"overwrite"``: move the earlier record (its store files only; checkpoints and other
    files stay where they are) to ``<run_dir>/.replaced/N/``, never deleting it, and start
    a new one; a store another process is writing is refused (``StoreLockedError``).
    ``"resume"``: append to the earlier record, this run's steps numbered on from its last
    step + 1 (pass ``start_step=`` to say where a run restored from a checkpoint goes on; on
    several ranks pass it, so that the ranks agree). A run with ``start_step`` > 0 always
    appends (it resumes); this choice is for a new run."""

    announce: bool = True
    """Print one line to stderr at the start (where the run is recorded and what) and one at
    ``close()`` (where it went, and the ``trainmedic diagnose`` command that reads it). Only
    rank 0 of a distributed run prints."""

    progress: bool | None = None
    """Redraw a live progress line on stderr (step, loss, it/s, live alerts), a few times per
    second, from values the watcher already holds (no added device sync; on an accelerator
    the loss is the last fetched one). ``None``: on when stderr is a terminal, so logs, pipes
    and tests stay clean. Only rank 0 of a distributed run shows it."""

    @property
    def flop_scales(self) -> dict[str, float]:
        """``{"mfu": model FLOPs per step / peak, "hfu": hardware FLOPs per step / peak}``,
        those that are known: each metric is its scale over the step time."""
        peak = self.peak_flops_per_s
        if peak is None:
            return {}
        return {name: flops / peak for name, flops in (("mfu", self.flops_per_step),
                                                       ("hfu", self.hardware_flops_per_step))
                if flops is not None}

    def __post_init__(self) -> None:
        for name in ("fetch_every", "param_every", "layer_every", "alert_every"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ConfigError(f"{name} must be a positive integer or None, got {value!r}")
        g = self.gpu_sample_s
        if g is not None and (isinstance(g, bool) or not isinstance(g, (int, float))
                              or not 0.01 <= g <= 3600):
            raise ConfigError(f"gpu_sample_s must be seconds in [0.01, 3600] or None, got {g!r}")
        for name in ("flops_per_step", "hardware_flops_per_step", "peak_flops_per_s"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not 0 < v < float("inf")):
                raise ConfigError(f"{name} must be a finite number > 0 or None, got {v!r}")
        flops = [n for n in ("flops_per_step", "hardware_flops_per_step")
                 if getattr(self, n) is not None]
        if bool(flops) != (self.peak_flops_per_s is not None):
            given = flops[0] if flops else "peak_flops_per_s"
            raise ConfigError(f"{given} was given alone: mfu (hfu) needs flops_per_step "
                              "(hardware_flops_per_step) and peak_flops_per_s (trainmedic "
                              "profile prints them)")
        if self.layer_max_modules < 2:
            raise ConfigError(f"layer_max_modules must be >= 2, got {self.layer_max_modules}")
        if self.forward_clock is not None and not isinstance(self.forward_clock, bool):
            raise ConfigError(f"forward_clock must be True, False or None, got "
                              f"{self.forward_clock!r}")
        if self.nan_policy not in NAN_POLICIES:
            raise ConfigError(f"nan_policy must be one of {', '.join(NAN_POLICIES)}; "
                              f"got {self.nan_policy!r}")
        if self.alert_every is not None and self.alert_window < 2 * self.alert_every:
            raise ConfigError(f"alert_window ({self.alert_window}) must be at least twice "
                              f"alert_every ({self.alert_every})")
        if self.alert_min_severity not in ("info", "warning", "error"):
            raise ConfigError(f"alert_min_severity must be info, warning or error; got "
                              f"{self.alert_min_severity!r}")
        if isinstance(self.stop_on, str):
            raise ConfigError(f"stop_on must be a collection of symptom codes, got the string "
                              f"{self.stop_on!r}; write stop_on={{{self.stop_on!r}}}")
        if self.stop_on:
            from trainmedic.diagnose.registry import SYMPTOMS

            unknown = sorted(set(self.stop_on) - set(SYMPTOMS))
            if unknown:
                raise ConfigError(f"stop_on: unknown symptom code(s) {unknown}; valid codes: "
                                  f"{', '.join(sorted(SYMPTOMS))}")
        if self.rss_interval_s is not None and (
                isinstance(self.rss_interval_s, bool)
                or not isinstance(self.rss_interval_s, (int, float))
                or not 0 < self.rss_interval_s <= 60):
            raise ConfigError(f"rss_interval_s must be a number of seconds in (0, 60] or None, "
                              f"got {self.rss_interval_s!r}")
        if self.flush_rows < 1:
            raise ConfigError(f"flush_rows must be >= 1, got {self.flush_rows}")
        if not self.flush_interval_s > 0:
            raise ConfigError(f"flush_interval_s must be > 0, got {self.flush_interval_s}")
        if self.if_exists not in IF_EXISTS:
            raise ConfigError(f"if_exists must be one of {', '.join(IF_EXISTS)}; got "
                              f"{self.if_exists!r}")
        if not isinstance(self.announce, bool):
            raise ConfigError(f"announce must be True or False, got {self.announce!r}")
        if self.progress is not None and not isinstance(self.progress, bool):
            raise ConfigError(f"progress must be True, False or None, got {self.progress!r}")
        if self.hang is not None and not isinstance(self.hang, (bool, HangWatchdogConfig)):
            raise ConfigError(f"hang must be True, False, None or a HangWatchdogConfig, got "
                              f"{self.hang!r}")
        for name in ("on_finding", "on_stop"):
            fn = getattr(self, name)
            if fn is not None and not callable(fn):
                raise ConfigError(f"{name} must be callable, got {fn!r}")


#: Watcher arguments a framework callback sets itself from the trainer.
_SET_BY_CALLBACK = frozenset({"model", "optimizer", "run_dir", "start_step"})


def check_callback_kwargs(watch_kwargs: Mapping[str, Any]) -> None:
    """Refuse, when the callback is made, keyword arguments the watcher would refuse at the
    start of training: its own (``rank``, ``meta``, ...) and :class:`WatchConfig`'s fields."""
    import inspect

    from trainmedic.live.watcher import Watcher

    params = inspect.signature(Watcher.__init__).parameters
    own = {n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    allowed = sorted((own | {f.name for f in dataclasses.fields(WatchConfig)})
                     - _SET_BY_CALLBACK)
    for name in watch_kwargs:
        if name in _SET_BY_CALLBACK:
            raise ConfigError(f"TrainmedicCallback: '{name}' is set by the callback from the "
                              "trainer; remove it from the arguments")
        if name not in allowed:
            raise ConfigError(f"TrainmedicCallback: unknown watcher argument '{name}'; expected "
                              f"one of {', '.join(allowed)}")


def callback_watch_kwargs(watch_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A trainer callback's arguments for its :class:`Watcher`, checked now (see
    :func:`check_callback_kwargs`), with the live progress line off unless asked for: the
    trainer draws its own bar, and a second line would fight it for the TTY."""
    check_callback_kwargs(watch_kwargs)
    out = dict(watch_kwargs)
    out.setdefault("progress", False)
    return out
