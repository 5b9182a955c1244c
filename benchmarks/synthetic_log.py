"""A realistic long training log with one known fault, written once and cached.

The run: an LLM-style pre-training log with one row per optimizer step and 8 metrics in the
canonical names of DESIGN.md (``loss, val_loss, lr, grad_norm, step_time_s, data_time_s,
tokens_per_s, mem_alloc_mb``). It is healthy except for one loss spike in the middle that
recovers, shaped like the spikes in public LLM logbooks (OPT-175B, BLOOM): a jump to ~3.5x
the running loss within a few steps, a matching grad-norm jump, recovery over ~130 steps.

- loss: power-law decay from ~ln(32000) = 10.4 towards ~2.1 (a scaling-law shape), with
  per-step noise of ~2% in log space drawn from a Student-t (df 8): real per-batch losses have
  heavier tails than a Gaussian, and a detector has to stay quiet on them.
- val_loss: every ``eval_every`` steps (sparse column, empty cells in between, like
  Lightning's CSVLogger), 3% above the train trend, small noise.
- lr: linear warm-up, then cosine decay to 10% of the peak.
- grad_norm: high early, settling near 0.25, log-normal noise; 25x at the spike.
- step_time_s ~0.25 s, data_time_s ~4 ms (not input-bound), tokens_per_s = 524288 tokens per
  step / step_time_s, mem_alloc_mb flat (no leak).

Nothing here reads trainmedic; the truth sits in a JSON sidecar next to the CSV.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

GENERATOR_VERSION = 1
"""Bump when the generated data changes, so a cached file is rebuilt."""

COLUMNS = ("step", "loss", "val_loss", "lr", "grad_norm", "step_time_s", "data_time_s",
           "tokens_per_s", "mem_alloc_mb")
TOKENS_PER_STEP = 524_288
"""Tokens in one optimizer step (global batch 256 x 2048 tokens)."""


@dataclass(kw_only=True, frozen=True)
class SpikeTruth:
    """Where the injected fault is, in logged steps."""

    onset_step: int
    """First step whose loss is above the trend because of the spike."""
    peak_step: int
    """Step with the highest loss multiplier."""
    peak_factor: float
    """Peak loss divided by the trend at that step."""
    recovered_step: int
    """First step where the spike's extra loss is below 10% of the trend."""
    grad_norm_peak_factor: float
    """grad_norm at the onset step divided by its baseline."""


@dataclass(kw_only=True, frozen=True)
class SyntheticLog:
    """A generated CSV and what is in it."""

    path: str
    """The CSV file."""
    rows: int
    """Data rows (one per step, steps 1..rows)."""
    bytes: int
    """File size."""
    eval_every: int
    """val_loss is logged on steps that are multiples of this."""
    warmup_steps: int
    """lr warm-up length."""
    spike: SpikeTruth
    """The one injected fault."""
    generator_version: int
    """GENERATOR_VERSION that wrote it."""


def _spike_profile(n: int) -> tuple[list[float], int]:
    """Extra-loss multiplier per step after onset (peak 1.0) and the steps to recovery."""
    rise = [1 / 3, 2 / 3, 1.0]
    tau_steps = 40.0
    prof = list(rise)
    k = 1
    while True:
        v = math.exp(-k / tau_steps)
        prof.append(v)
        k += 1
        if v < 1e-3 or len(prof) >= n:
            break
    return prof, len(prof)


def generate(path: Path, rows: int, seed: int = 20261130) -> SyntheticLog:
    """Write the CSV at ``path`` (overwriting) and its ``.truth.json`` sidecar."""
    import numpy as np

    if rows < 2000:
        raise ValueError("need at least 2000 rows to hold warm-up, evals and a spike")
    rng = np.random.default_rng(seed)
    steps = np.arange(1, rows + 1, dtype=np.int64)
    u = steps / rows  # run fraction, so --rows N keeps the same shape
    t_eff = u * 1_000_000.0

    warmup = max(10, rows // 500)
    peak_lr, final_lr = 3e-4, 3e-5
    lr = np.where(
        steps <= warmup,
        peak_lr * steps / warmup,
        final_lr + 0.5 * (peak_lr - final_lr)
        * (1 + np.cos(math.pi * np.clip((steps - warmup) / (rows - warmup), 0, 1))),
    )

    trend = 1.9 + 8.5 * (1.0 + t_eff / 400.0) ** -0.45
    log_noise = 0.02 * rng.standard_t(8, size=rows)
    loss = trend * np.exp(log_noise)

    onset = int(round(0.5234 * rows))
    peak_factor = 3.5
    prof, length = _spike_profile(rows - onset)
    prof_arr = np.asarray(prof[: rows - onset + 1])
    sl = slice(onset - 1, onset - 1 + len(prof_arr))  # row index = step - 1
    loss[sl] *= 1.0 + (peak_factor - 1.0) * prof_arr
    recovered_offset = next(i for i, p in enumerate(prof) if i >= 2 and
                            (peak_factor - 1.0) * p < 0.1)

    gn_base = 0.25 + 1.75 * np.exp(-t_eff / 20_000.0)
    grad_norm = gn_base * np.exp(0.15 * rng.standard_normal(rows))
    gn_factor = 25.0
    gn_len = 60
    gn_prof = 1.0 + (gn_factor - 1.0) * np.exp(-np.arange(gn_len) / 8.0)
    grad_norm[onset - 1: onset - 1 + gn_len] *= gn_prof[: rows - onset + 1]

    eval_every = max(10, rows // 1000)
    val_mask = steps % eval_every == 0
    val = trend * 1.03 * np.exp(0.003 * rng.standard_normal(rows))

    step_time = 0.25 * np.exp(0.03 * rng.standard_normal(rows))
    data_time = 0.004 * np.exp(0.2 * rng.standard_normal(rows))
    tokens_per_s = TOKENS_PER_STEP / step_time
    mem = 41_230.0 + np.round(rng.standard_normal(rows) * 1.5, 1)

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with_val = "%d,%.4f,%.4f,%.4e,%.4f,%.4f,%.5f,%.0f,%.1f\n"
    without_val = "%d,%.4f,,%.4e,%.4f,%.4f,%.5f,%.0f,%.1f\n"
    cols = [steps, loss, val, lr, grad_norm, step_time, data_time, tokens_per_s, mem]
    chunk = 100_000
    with tmp.open("w", encoding="utf-8", newline="") as f:
        f.write(",".join(COLUMNS) + "\n")
        for lo in range(0, rows, chunk):
            hi = min(rows, lo + chunk)
            c = [a[lo:hi].tolist() for a in cols]
            vm = val_mask[lo:hi].tolist()
            lines = []
            for i in range(hi - lo):
                if vm[i]:
                    lines.append(with_val % (c[0][i], c[1][i], c[2][i], c[3][i], c[4][i],
                                             c[5][i], c[6][i], c[7][i], c[8][i]))
                else:
                    lines.append(without_val % (c[0][i], c[1][i], c[3][i], c[4][i],
                                                c[5][i], c[6][i], c[7][i], c[8][i]))
            f.write("".join(lines))
    tmp.replace(path)

    info = SyntheticLog(
        path=str(path), rows=rows, bytes=path.stat().st_size, eval_every=eval_every,
        warmup_steps=warmup,
        spike=SpikeTruth(onset_step=onset, peak_step=onset + 2, peak_factor=peak_factor,
                         recovered_step=onset + recovered_offset,
                         grad_norm_peak_factor=gn_factor),
        generator_version=GENERATOR_VERSION,
    )
    _truth_path(path).write_text(json.dumps(asdict(info), indent=2) + "\n")
    return info


def _truth_path(path: Path) -> Path:
    return path.with_suffix(".truth.json")


def load_cached(path: Path) -> SyntheticLog | None:
    """The sidecar's description if the CSV exists and was written by this generator version."""
    tp = _truth_path(path)
    if not path.is_file() or not tp.is_file():
        return None
    try:
        d = json.loads(tp.read_text())
        if d.get("generator_version") != GENERATOR_VERSION or d.get("bytes") != path.stat().st_size:
            return None
        d["spike"] = SpikeTruth(**d["spike"])
        return SyntheticLog(**d)
    except (ValueError, TypeError, KeyError):
        return None


def default_path(rows: int) -> Path:
    """Where the cached CSV for ``rows`` lives: the gitignored scratch area ``.bench/``."""
    return Path(__file__).resolve().parent.parent / ".bench" / "data" / f"synthetic_{rows}.csv"


if __name__ == "__main__":
    # Run as a separate process by the benchmarks, so the measuring process stays small.
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    p = Path(sys.argv[2]) if len(sys.argv) > 2 else default_path(n)
    print(json.dumps(asdict(load_cached(p) or generate(p, n))))
