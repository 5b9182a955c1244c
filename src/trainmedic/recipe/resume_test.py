"""The resume test: does saving, a fresh process and loading reproduce the uninterrupted run?

``resume_test(ResumeTestConfig(recipe="trainmedic.demo:recipe", steps=N, at=K))`` runs three
fresh Python processes on the same recipe (``python -m trainmedic.recipe.resume_test``):

1. **straight**: N optimizer steps without a checkpoint, recording every step's loss, a hash
   of every micro-batch, the final weights, and at step K a fingerprint of the whole state
   (model, optimizer, scheduler, scaler, counters, data position, every RNG stream);
2. **first**: K steps, then a save through ``CheckpointManager`` (into ``root``);
3. **resume**: load that checkpoint, fingerprint the state right after the load, and run to N.

(``concurrent``: the first two at the same time.)

The resumed run must reproduce the straight one: the per-step losses and the final weights
bitwise (or within ``atol``, for GPU kernels that are not deterministic). When it does not,
the report names the state that differs first, in this order: the first K steps themselves
(the recipe is not reproducible from a fresh process at all), then, at the boundary, model
weights, optimizer state, scheduler, scaler, counters, data position, the RNG streams, the
first batch after the resume (data order: after the RNG, which random transforms of a batch
draw from); then the first step whose loss differs and the final
weights. With ``atol`` the model and optimizer at the boundary are compared within it; every
other boundary state is compared exactly.

A bitwise difference that appears only after an exact boundary (every state equal, the same
batches) is either a kernel that does not reproduce bitwise from run to run (MKL's GEMM can
change its blocking with the threads it gets) or a state the fingerprint cannot see (a global
the recipe keeps). The test then repeats the straight and the resumed run once: a resumed run
that matches a straight one bitwise proves the resume exact (the report's ``notes`` say so);
runs that each reproduce themselves but not each other name a missing state (``repeated``);
runs that reproduce nothing name ``determinism`` and point to ``atol``.

Cost: three interpreter starts (torch import included), N + K + (N - K) = 2N steps, one save
and one load, and two fingerprints (a sha256 of every state tensor); with ``atol``, a CPU copy
of the model and optimizer state at the boundary in each of two processes. A drift after an
exact boundary adds two more interpreter starts (the repeated straight and resumed runs).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainmedic.errors import ConfigError, InputError, TrainmedicError
from trainmedic.recipe.resume_compare import compare, drift_verdict

__all__ = ["ResumeTestConfig", "ResumeReport", "SABOTAGES", "resume_test"]

logger = logging.getLogger(__name__)

#: Deliberately broken resumes, to prove the test catches each (see ``RecipeRunner.resume``).
SABOTAGES = ("rng", "data", "rng-before-data", "generator", "optimizer")

_PHASES = ("straight", "first", "resume")


@dataclass(kw_only=True, frozen=True)
class ResumeTestConfig:
    """One resume test. A bad field raises ``ConfigError`` naming it."""

    recipe: str
    """The recipe factory, ``module:function`` or ``path/file.py:function``."""

    steps: int
    """N: optimizer steps of the straight run (>= 2)."""

    at: int
    """K: the step saved after, then resumed from (1 <= K < N)."""

    atol: float | None = None
    """Largest absolute difference of a loss or a weight still counted equal; ``None``:
    bitwise."""

    overrides: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments for the recipe factory (JSON-able), e.g. ``{"num_workers": 2}``."""

    root: Path | None = None
    """Where the checkpoint is written (kept); ``None``: a temporary folder, deleted after."""

    sabotage: str | None = None
    """Break the resume on purpose (one of ``SABOTAGES``): the test must then report it."""

    timeout_s: float = 900.0
    """Seconds each of the three runs may take."""

    concurrent: bool = False
    """Run the straight and the first run at the same time: faster on a CPU with cores to
    spare, twice the memory (leave it off for a recipe that fills an accelerator)."""

    def __post_init__(self) -> None:
        if not isinstance(self.recipe, str) or ":" not in self.recipe:
            raise ConfigError(f"recipe must be 'module:function' or 'path/file.py:function', "
                              f"got {self.recipe!r}")
        for name, lo in (("steps", 2), ("at", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ConfigError(f"{name} must be an integer >= {lo}, got {v!r}")
        if self.at >= self.steps:
            raise ConfigError(f"at must be below steps (resume inside the run): got at "
                              f"{self.at}, steps {self.steps}")
        a = self.atol
        if a is not None and (isinstance(a, bool) or not isinstance(a, (int, float))
                              or not math.isfinite(a) or a < 0):
            raise ConfigError(f"atol must be a finite number >= 0 or None, got {a!r}")
        try:
            json.dumps(dict(self.overrides), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"overrides must be JSON-able: {exc}") from None
        if self.sabotage is not None and self.sabotage not in SABOTAGES:
            raise ConfigError(f"sabotage must be one of {', '.join(SABOTAGES)}, got "
                              f"{self.sabotage!r}")
        if not isinstance(self.concurrent, bool):
            raise ConfigError(f"concurrent must be True or False, got {self.concurrent!r}")
        if not self.timeout_s > 0:
            raise ConfigError(f"timeout_s must be > 0, got {self.timeout_s!r}")
        if self.root is not None and not isinstance(self.root, Path):
            object.__setattr__(self, "root", Path(self.root))


@dataclass(kw_only=True)
class ResumeReport:
    """The verdict, and what differs when the resume is not exact."""

    equal: bool
    """Losses and final weights reproduced (bitwise, or within ``atol``), and (bitwise mode)
    every state at the boundary too."""

    first_difference: str | None
    """The first state that differs (``model``, ``optimizer``, ``scheduler``, ``scaler``,
    ``counters``, ``data position``, ``rng.torch_cpu``, ``rng.cuda:<i>``, ``rng.numpy``,
    ``rng.python``, ``data order``, ``loss``, ``final weights``, or ``determinism`` when the
    first K steps already differ, or when repeated runs after an exact boundary reproduce
    nothing); ``None`` when equal."""

    differences: list[str]
    """One line per differing state, in the order above (then ``repeated``: the repeat found
    every run reproducing itself, so a state outside the checkpoint differs)."""

    notes: list[str] = field(default_factory=list)
    """What the verdict rests on beyond the three runs: when the runs drifted apart only after
    an exact boundary, a repeat of the straight and the resumed run told kernels that are not
    bitwise reproducible from a missing state; the note says which."""

    steps: int
    at: int
    atol: float | None
    losses_straight: list[float]
    losses_resumed: list[float]
    """The losses of steps K..N-1 after the resume."""

    max_loss_diff: float
    max_weight_diff: float
    checkpoint: str | None
    """The checkpoint saved at step K (deleted after the test unless ``root`` was given)."""

    timings_s: dict[str, float]
    """Wall seconds of each run (``straight``, ``first``, ``resume``)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- fingerprints (run in the phase processes) -------------------------------------------------

def _digest_tensor(t: Any) -> str:
    import torch

    t = t.detach().cpu().contiguous()
    h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def _leaves(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Flatten nested mappings, lists and tuples into ``{"state.0.exp_avg": leaf, ...}``."""
    out: dict[str, Any] = {}
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            out.update(_leaves(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(_leaves(v, f"{prefix}.{i}" if prefix else str(i)))
    else:
        out[prefix] = obj
    return out


def _digests(obj: Any) -> dict[str, str]:
    """A state dict flattened: ``{"state.0.exp_avg": digest, "param_groups.0.lr": repr}``."""
    import torch

    return {k: _digest_tensor(v) if isinstance(v, torch.Tensor) else repr(v)
            for k, v in _leaves(obj).items()}


def _tensors(obj: Any) -> dict[str, Any]:
    """The tensors of a state dict, flattened, copied to the CPU."""
    import torch

    return {k: v.detach().to("cpu", copy=True) for k, v in _leaves(obj).items()
            if isinstance(v, torch.Tensor)}


def batch_digest(batch: Any) -> str:
    """A hash of every tensor and value in a batch, in order."""
    return hashlib.sha256(json.dumps(_digests(batch), sort_keys=True).encode()).hexdigest()[:16]


def _fingerprint(runner: Any, *, tensors: bool, batches_drawn: int) -> dict[str, Any]:
    from trainmedic.checkpoint.training_state import capture_rng

    r = runner.recipe
    out: dict[str, Any] = {"batches_drawn": batches_drawn}
    for name, obj in (("model", r.model), ("optimizer", r.optimizer),
                      ("scheduler", r.scheduler), ("scaler", r.scaler)):
        out[name] = _digests(obj.state_dict()) if obj is not None else {}
    loop = runner.loop
    out["counters"] = {"step": loop.step, "epoch": loop.epoch,
                       "samples_seen": loop.samples_seen, "tokens_seen": loop.tokens_seen}
    out["data position"] = {"epoch": loop.epoch, "batches_in_epoch": loop.batches_in_epoch}
    rng = capture_rng()
    out["rng"] = {"torch_cpu": _digests(rng["torch_cpu"])}
    for i, s in enumerate(rng["cuda"]):
        out["rng"][f"cuda:{i}"] = _digests(s)
    out["rng"].update(numpy=_digests(rng["numpy"]), python=_digests(rng["python"]))
    if tensors:
        out["model_tensors"] = _tensors(r.model.state_dict())
        out["optimizer_tensors"] = _tensors(r.optimizer.state_dict())
    return out


def _run_phase(spec: Mapping[str, Any]) -> dict[str, Any]:
    """One of the three runs, in this (fresh) process."""
    import torch

    from trainmedic.recipe.recipe import load_recipe
    from trainmedic.recipe.runner import RecipeRunner

    phase, steps, at = spec["phase"], int(spec["steps"]), int(spec["at"])
    recipe = load_recipe(spec["recipe"], **spec["overrides"])
    manager = None
    if phase != "straight":
        from trainmedic.checkpoint.manager import CheckpointManager

        manager = CheckpointManager(spec["root"], keep_last=None, config=dict(recipe.config))
    runner = RecipeRunner(recipe, manager=manager)
    batches: list[str] = []
    runner.on_batch = lambda b: batches.append(batch_digest(b))
    out: dict[str, Any] = {"phase": phase}
    tensors = spec.get("atol") is not None
    losses: list[float] = []
    if phase == "straight":
        losses += runner.run(at).losses
        out["boundary"] = _fingerprint(runner, tensors=tensors, batches_drawn=len(batches))
        losses += runner.run(steps).losses
    elif phase == "first":
        losses += runner.run(at).losses
        out["checkpoint"] = str(runner.save())
        wait = getattr(manager, "wait", None)
        if callable(wait):
            wait()
    else:
        loaded = runner.resume(path=spec["checkpoint"], sabotage=spec.get("sabotage"))
        if loaded is None or runner.loop.step != at:
            raise InputError(spec["checkpoint"], f"resumed at step {runner.loop.step}, not at "
                             f"{at}")
        out["boundary"] = _fingerprint(runner, tensors=tensors, batches_drawn=0)
        losses += runner.run(steps).losses
    out["losses"] = torch.tensor(losses, dtype=torch.float64)
    out["batches"] = batches
    out["final"] = {k: v.detach().to("cpu", copy=True)
                    for k, v in recipe.model.state_dict().items()}
    return out


def _phase_main(argv: list[str]) -> int:
    """``python -m trainmedic.recipe.resume_test SPEC.json``: run one phase, write its
    result (``torch.save``) where the spec says; on a TrainmedicError write it as JSON and
    exit 2."""
    import torch

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    spec = json.loads(Path(argv[0]).read_text())
    try:
        result = _run_phase(spec)
    except TrainmedicError as exc:
        err: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
        if isinstance(exc, InputError):
            err.update(path=exc.path, message=exc.message)
        Path(spec["error"]).write_text(json.dumps(err))
        return 2
    except Exception:
        traceback.print_exc()
        return 3
    torch.save(result, spec["out"])
    return 0


# -- the parent: three processes, then compare -------------------------------------------------

def _child_env() -> dict[str, str]:
    """The environment of the phase processes: this one's, with this process's own additions
    to sys.path (the recipe's folder, a test directory) on PYTHONPATH, so they import the
    same modules; and, unless set, ``MKL_DYNAMIC`` and ``OMP_DYNAMIC`` off: Intel's
    conditions for bitwise reproducible MKL results include a thread count that is not
    adjusted at run time (oneMKL developer guide, "Reproducibility Conditions")."""
    env = dict(os.environ)
    env.setdefault("MKL_DYNAMIC", "FALSE")
    env.setdefault("OMP_DYNAMIC", "FALSE")
    skip = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    extra: list[str] = []
    for p in sys.path:
        if not p or not os.path.isdir(p):
            continue
        real = os.path.realpath(p)
        if any(real == s or real.startswith(s + os.sep) for s in skip):
            continue
        extra.append(p)
    if extra:
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = os.pathsep.join(extra + ([old] if old else []))
    return env


class _Phase:
    """One phase process, started; :meth:`result` waits for it."""

    def __init__(self, phase: str, spec: dict[str, Any], work: Path, timeout_s: float,
                 env: dict[str, str], name: str | None = None) -> None:
        self.phase = phase
        self.timeout_s = timeout_s
        name = name or phase  # a repeat of a phase runs under another name
        self.spec = dict(spec, phase=phase, out=str(work / f"{name}.pt"),
                         error=str(work / f"{name}.error.json"))
        spec_path = work / f"{name}.json"
        spec_path.write_text(json.dumps(self.spec))
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainmedic.recipe.resume_test", str(spec_path)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def result(self) -> tuple[dict[str, Any], float]:
        import torch

        spec, phase = self.spec, self.phase
        try:
            _, stderr = self.proc.communicate(
                timeout=max(1.0, self.timeout_s - (time.perf_counter() - self.t0)))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise InputError(spec["recipe"], f"the {phase} run took more than "
                             f"{self.timeout_s:g} s; give fewer steps or a longer "
                             "timeout") from None
        wall = time.perf_counter() - self.t0
        rc = self.proc.returncode
        err_path = Path(spec["error"])
        if rc == 2 and err_path.is_file():
            err = json.loads(err_path.read_text())
            if err.get("type") == "ConfigError":
                raise ConfigError(err["message"])
            if "path" in err:
                raise InputError(err["path"], err["message"])
            raise InputError(spec["recipe"], err["message"])
        if rc != 0:
            tail = [ln for ln in stderr.strip().splitlines() if ln.strip()]
            raise InputError(spec["recipe"], f"the {phase} run failed (exit {rc}): "
                             f"{tail[-1] if tail else 'no message'}")
        return torch.load(spec["out"], weights_only=True), wall

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def _phase_line(phase: str, cfg: ResumeTestConfig) -> str:
    """What a phase does, in a few words (the progress line)."""
    if phase == "straight":
        return f"straight run: {cfg.steps} steps"
    if phase == "first":
        return f"first run: {cfg.at} steps, then a save"
    return f"resumed run: load step {cfg.at} in a fresh process, then {cfg.steps - cfg.at} steps"


def _run_pair(spec: dict[str, Any], work: Path, cfg: ResumeTestConfig, env: dict[str, str],
              timings: dict[str, float], second: str, suffix: str = "",
              say: Callable[[str], None] = lambda line: None,
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    """A straight run and a ``second`` one (``first``, or a repeat of ``resume``), at the same
    time when ``concurrent``; their results, their wall times into ``timings``. ``say`` gets
    a line as each phase starts."""
    names = (f"straight{suffix}", f"{second}{suffix}")
    say(_phase_line("straight", cfg))
    runs = [_Phase("straight", spec, work, cfg.timeout_s, env, name=names[0])]
    try:
        if cfg.concurrent:
            say(_phase_line(second, cfg) + " (at the same time)")
            runs.append(_Phase(second, spec, work, cfg.timeout_s, env, name=names[1]))
        a, timings[names[0]] = runs[0].result()
        if not cfg.concurrent:
            say(_phase_line(second, cfg))
            runs.append(_Phase(second, spec, work, cfg.timeout_s, env, name=names[1]))
        b, timings[names[1]] = runs[1].result()
    finally:
        for r in runs:
            r.stop()
    return a, b


def resume_test(config: ResumeTestConfig, *,
                progress: Callable[[str], None] | None = None) -> ResumeReport:
    """Run the three processes and compare them (see the module doc). ``progress`` gets a
    short line as each phase process starts (the CLI shows them on a terminal)."""
    cfg = config
    say = progress if progress is not None else (lambda line: None)
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="trainmedic-resume-") as tmp:
        work = Path(tmp)
        root = cfg.root if cfg.root is not None else work / "checkpoints"
        spec: dict[str, Any] = {"recipe": cfg.recipe, "overrides": dict(cfg.overrides),
                                "steps": cfg.steps, "at": cfg.at, "root": str(root),
                                "atol": cfg.atol, "sabotage": cfg.sabotage}
        target, _, _ = cfg.recipe.rpartition(":")
        if target.endswith(".py"):  # the phase processes run from the same cwd; absolute anyway
            spec["recipe"] = f"{Path(target).resolve()}:{cfg.recipe.rpartition(':')[2]}"
        env = _child_env()
        timings: dict[str, float] = {}
        straight, first = _run_pair(spec, work, cfg, env, timings, "first", say=say)
        spec["checkpoint"] = first["checkpoint"]
        say(_phase_line("resume", cfg))
        resumed, timings["resume"] = _Phase("resume", spec, work, cfg.timeout_s, env).result()
        diffs, loss_diff, w_diff = compare(straight, first, resumed, cfg)
        names = {name for name, _ in diffs}
        if cfg.atol is None and diffs and names <= {"loss", "final weights"}:
            # Every state at the boundary was exact, yet the runs drifted later: repeat the
            # straight and the resumed run once, to tell kernels that are not bitwise
            # reproducible (MKL's GEMM may change its blocking with its thread count) from a
            # state the fingerprint does not see.
            say("the runs drifted apart after an exact boundary: repeating the straight "
                "and the resumed run once")
            straight2, resumed2 = _run_pair(spec, work, cfg, env, timings, "resume", "-2",
                                            say=say)
            runs = {"straight": straight, "straight-2": straight2, "resume": resumed,
                    "resume-2": resumed2}
            kind, pair, line = drift_verdict(cfg, runs, max(loss_diff, w_diff))
            if pair is not None:
                notes.append(line)
                straight, resumed = runs[pair[0]], runs[pair[1]]
                diffs, loss_diff, w_diff = compare(straight, first, resumed, cfg)
            elif kind == "determinism":
                diffs.insert(0, (kind, line))
            else:
                diffs.append((kind, line))
    if cfg.atol is not None:
        # Within atol the verdict is the losses and the final weights; the boundary is
        # reported to explain a failure, not to cause one.
        fatal = {"determinism", "loss", "final weights"}
        equal = not any(name in fatal for name, _ in diffs)
    else:
        equal = not diffs
    return ResumeReport(
        equal=equal, first_difference=diffs[0][0] if diffs and not equal else None,
        differences=[line for _, line in diffs], notes=notes, steps=cfg.steps, at=cfg.at,
        atol=cfg.atol, losses_straight=straight["losses"].tolist(),
        losses_resumed=resumed["losses"].tolist(), max_loss_diff=loss_diff,
        max_weight_diff=w_diff,
        checkpoint=first["checkpoint"] if cfg.root is not None else None, timings_s=timings)


if __name__ == "__main__":
    sys.exit(_phase_main(sys.argv[1:]))
