"""Synthetic training runs for the detector tests: healthy runs of many shapes, and faults
injected into them at a known step.

Healthy shapes follow how real curves behave: a loss that falls fast then slowly (exponential
or power law towards a floor, or 10+ orders of magnitude for physics-informed losses),
multiplicative noise (log-normal or heavy-tailed), lr warm-up then cosine/linear/step/WSD
decay, validation evaluated every so often and flattening out, grad_norm that drifts down
with noise, step time with small jitter, memory that settles after warm-up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainmedic.run.series import Run

SHAPES = ("exp", "power", "logspan", "steps", "slow")
SCHEDULES = ("cosine", "constant", "linear", "step", "wsd", "none")


@dataclass(frozen=True)
class Spec:
    n: int = 2000
    """Number of logged points."""
    every: int = 1
    """Steps between logged points."""
    shape: str = "exp"
    schedule: str = "cosine"
    noise: float = 0.05
    """Sigma of the multiplicative (log-space) loss noise."""
    heavy: bool = False
    """Student-t (5 dof) noise instead of Gaussian."""
    val_every: int = 0
    """Evaluate every this many logged points (0: no validation)."""
    timing: bool = False
    memory: bool = False
    grad: bool = True
    seed: int = 0


def lr_schedule(kind: str, n: int, peak: float = 3e-4) -> np.ndarray:
    x = np.arange(n) / max(1, n - 1)
    warm = np.clip(x / 0.05, 0, 1) if kind != "none" else np.ones(n)
    if kind == "cosine":
        lr = 0.5 * (1 + np.cos(np.pi * np.clip((x - 0.05) / 0.95, 0, 1)))
    elif kind == "linear":
        lr = 1 - np.clip((x - 0.05) / 0.95, 0, 1)
    elif kind == "step":
        lr = 0.1 ** np.floor(x / 0.34)
    elif kind == "wsd":
        lr = np.where(x < 0.8, 1.0, 1 - (x - 0.8) / 0.2)
    else:
        lr = np.ones(n)
    return peak * warm * np.maximum(lr, 1e-3)


def loss_curve(shape: str, n: int, rng: np.random.Generator, lr: np.ndarray) -> np.ndarray:
    x = np.arange(n) / max(1, n - 1)
    if shape == "exp":
        base = 0.8 + 2.5 * np.exp(-x * rng.uniform(4, 12))
    elif shape == "power":
        base = 1.5 + 8.0 / (1 + 200 * x) ** 0.6
    elif shape == "logspan":
        base = np.exp(np.log(3e12) * np.exp(-x * 8) + np.log(0.5))
    elif shape == "steps":
        drops = np.cumsum(np.r_[0, np.abs(np.diff(np.log(lr + 1e-30))) > 0.5])
        base = (0.5 + 2.0 * np.exp(-x * 5)) * 0.85 ** drops
    else:  # slow: a fine-tune that improves by ~15% over the run
        base = 2.0 * (1 - 0.15 * x ** 0.5)
    return base


def healthy_run(spec: Spec) -> Run:
    rng = np.random.default_rng(spec.seed)
    n = spec.n
    steps = (np.arange(n) + 1) * spec.every
    lr = lr_schedule(spec.schedule, n)
    base = loss_curve(spec.shape, n, rng, lr)
    eps = rng.standard_t(5, n) * 0.75 if spec.heavy else rng.standard_normal(n)
    loss = base * np.exp(spec.noise * eps)
    run = Run(f"synthetic:{spec}")
    run.add("loss", steps, loss)
    if spec.schedule != "none":
        run.add("lr", steps, lr)
    if spec.grad:
        g = 2.0 * (1 + 3 * np.exp(-np.arange(n) / max(1, n / 20))) * np.exp(
            0.25 * rng.standard_normal(n))
        run.add("grad_norm", steps, g)
    if spec.val_every:
        vi = np.arange(spec.val_every - 1, n, spec.val_every)
        vbase = base[vi] * 1.1 + 0.05
        val = vbase * np.exp(0.5 * spec.noise / np.sqrt(8) * rng.standard_normal(vi.size))
        run.add("val_loss", steps[vi], val)
    if spec.timing:
        st = 0.1 * np.exp(0.05 * rng.standard_normal(n))
        st[:3] = [2.0, 0.8, 0.3]
        run.add("step_time_s", steps, st)
        run.add("data_time_s", steps, 0.003 * np.exp(0.3 * rng.standard_normal(n)))
        run.add("samples_per_s", steps, 32 / st)
    if spec.memory:
        settle = 1 - np.exp(-np.arange(n) / max(1, n / 50))
        run.add("mem_alloc_mb", steps, 4000 + 600 * settle + rng.normal(0, 5, n))
        run.add("rss_mb", steps, 2500 + 300 * settle + rng.normal(0, 10, n))
    return run


def healthy_specs(count: int = 60, seed: int = 1234) -> list[Spec]:
    """A seeded spread of healthy specs: lengths 10..100k, sparse and dense, all shapes."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n = int(np.exp(rng.uniform(np.log(10), np.log(100_000))))
        shape = SHAPES[i % len(SHAPES)]
        sched = SCHEDULES[(i // len(SHAPES)) % len(SCHEDULES)]
        if shape == "steps" and sched not in ("step",):
            sched = "step"
        out.append(Spec(
            n=n, every=int(rng.choice([1, 10, 50, 500])), shape=shape, schedule=sched,
            noise=float(rng.choice([0.005, 0.03, 0.1, 0.25])), heavy=bool(rng.random() < 0.3),
            val_every=int(rng.choice([0, 0, max(1, n // 20), max(1, n // 10)])),
            timing=bool(rng.random() < 0.5), memory=bool(rng.random() < 0.5),
            grad=bool(rng.random() < 0.7), seed=int(rng.integers(1 << 30))))
    return out
