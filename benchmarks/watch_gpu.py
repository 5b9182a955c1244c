"""The watcher on a GPU: proof of no host-device sync per step, and its overhead.

Usage (on a CUDA machine, from the repository root)::

    PYTHONPATH=src python benchmarks/watch_gpu.py            # ~1-2 minutes on an H100/H200
    PYTHONPATH=src python benchmarks/watch_gpu.py --json

1. Sync check. ``torch.cuda.set_sync_debug_mode("error")`` makes any operation that waits for
   the GPU raise. It is switched on around whole steps (zero_grad, forward, backward,
   ``optimizer.step()``, ``w.step()``) on every step that is not a batched-fetch step
   (``fetch_every``, 50 by default), first for the plain loop (the control: the loop itself
   must not sync), then for the default watcher, the watcher with per-layer health every 50
   steps, and live alerts. A variant that syncs reports the first offending call. The NaN
   guard in ``nan_policy="skip"`` needs one read per step by design; the script checks that it
   does exactly that and nothing more (one sync per step, counted in "warn" mode).
2. Overhead. A model that keeps the GPU busy (the demo's transformer scaled to d_model 1024,
   8 layers, context 512, batch 16, bf16 autocast, fused AdamW), rounds of 20 steps per
   variant, interleaved, timed with ``torch.cuda.synchronize()`` at round edges only. The
   figure is the median over rounds of (variant / plain) - 1.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from machine import describe  # noqa: E402


def build(vocab: int, d_model: int, layers: int, ctx: int) -> tuple[Any, Any]:
    import torch

    from trainmedic.demo.model import CharTransformer

    torch.manual_seed(0)
    model = CharTransformer(vocab, context_len=ctx, d_model=d_model, n_layers=layers,
                            n_heads=max(1, d_model // 64)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    return model, opt


def train_step(model: Any, opt: Any, x: Any, y: Any, w: Any) -> None:
    import torch
    import torch.nn.functional as F

    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
    loss.backward()
    opt.step()
    if w is not None:
        w.step(loss, batch_size=x.shape[0], tokens=x.numel())


def sync_check(name: str, kwargs: dict[str, Any] | None, steps: int, vocab: int,
               batch: tuple[Any, Any], run_root: Path, *, mode: str = "error") -> dict[str, Any]:
    """Run ``steps`` steps with sync debugging on around every non-fetch step."""
    import torch

    from trainmedic.live import watch

    model, opt = build(vocab, 256, 2, 128)
    x, y = batch
    w = watch(model, opt, run_dir=run_root / f"sync-{name}", **kwargs) if kwargs is not None \
        else None
    fetch_every = w.fetch_every if w is not None else 50
    checked = 0
    error: str | None = None
    warned = 0
    try:
        for i in range(steps):
            guarded = i >= 2 and (i + 1) % fetch_every != 0
            if guarded:
                torch.cuda.set_sync_debug_mode(mode)
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    train_step(model, opt, x, y, w)
                warned += sum(1 for c in caught if "synchroniz" in str(c.message).lower())
            except RuntimeError as exc:
                error = f"step {i}: {str(exc).splitlines()[0][:200]}"
                break
            finally:
                torch.cuda.set_sync_debug_mode("default")
            checked += int(guarded)
    finally:
        if w is not None:
            w.close()
    return {"variant": name, "steps_checked": checked, "syncs_error": error,
            "sync_warnings": warned if mode == "warn" else None}


def overhead(rounds: int, steps: int, vocab: int, run_root: Path) -> dict[str, Any]:
    import torch

    from trainmedic.live import watch

    d_model, layers, ctx, bsz = 1024, 8, 512, 16
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randint(0, vocab, (bsz, ctx), device="cuda", generator=gen)
    y = torch.randint(0, vocab, (bsz, ctx), device="cuda", generator=gen)
    variants: dict[str, tuple[Any, Any, Any]] = {}
    for name, kwargs in (("plain", None), ("watch", {}), ("watch_layers50", {"layer_every": 50}),
                         ("watch_skip_guard", {"nan_policy": "skip"})):
        model, opt = build(vocab, d_model, layers, ctx)
        w = watch(model, opt, run_dir=run_root / name, **kwargs) if kwargs is not None else None
        variants[name] = (model, opt, w)
    for model, opt, w in variants.values():
        for _ in range(5):
            train_step(model, opt, x, y, w)
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {n: [] for n in variants}
    rng = random.Random(0)
    for _ in range(rounds):
        order = list(variants)
        rng.shuffle(order)
        for n in order:
            model, opt, w = variants[n]
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(steps):
                train_step(model, opt, x, y, w)
            torch.cuda.synchronize()
            times[n].append((time.perf_counter() - t0) / steps)
    for _, _, w in variants.values():
        if w is not None:
            w.close()
    out: dict[str, Any] = {"model": f"transformer d_model={d_model} layers={layers} "
                                    f"ctx={ctx} batch={bsz} bf16 autocast, fused AdamW"}
    for n, ts in times.items():
        ratios = [a / b - 1 for a, b in zip(ts, times["plain"], strict=True)]
        out[n] = {"median_step_ms": 1000 * statistics.median(ts),
                  "overhead_pct": 100 * statistics.median(ratios),
                  "min_max_pct": [100 * min(ratios), 100 * max(ratios)]}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--steps-per-round", type=int, default=25)
    ap.add_argument("--sync-steps", type=int, default=120)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("watch_gpu.py: no CUDA device here; run it on a GPU machine", file=sys.stderr)
        return 2
    vocab = 256
    gen = torch.Generator(device="cuda").manual_seed(1)
    batch = (torch.randint(0, vocab, (8, 128), device="cuda", generator=gen),
             torch.randint(0, vocab, (8, 128), device="cuda", generator=gen))
    result: dict[str, Any] = {"machine": describe(), "gpu": torch.cuda.get_device_name(),
                              "torch": torch.__version__, "sync_check": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, kwargs in (("plain", None), ("watch", {}),
                             ("watch_layers50", {"layer_every": 50}),
                             ("watch_alerts10", {"alert_every": 10, "alert_window": 50})):
            result["sync_check"].append(sync_check(name, kwargs, args.sync_steps, vocab, batch,
                                                   root))
        result["sync_check"].append(sync_check("watch_skip_guard", {"nan_policy": "skip"},
                                               args.sync_steps, vocab, batch, root, mode="warn"))
        result["overhead"] = overhead(args.rounds, args.steps_per_round, vocab, root)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"GPU: {result['gpu']}, torch {result['torch']}")
    for r in result["sync_check"]:
        verdict = ("no sync" if r["syncs_error"] is None and not r["sync_warnings"]
                   else r["syncs_error"] or f"{r['sync_warnings']} sync warnings")
        print(f"sync check {r['variant']:<18} {r['steps_checked']:>4} steps checked: {verdict}")
    ov = result["overhead"]
    print(f"overhead on {ov['model']}:")
    for n, v in ov.items():
        if isinstance(v, dict):
            print(f"  {n:<18} {v['median_step_ms']:8.2f} ms/step  {v['overhead_pct']:+6.2f}%  "
                  f"(min {v['min_max_pct'][0]:+.2f}%, max {v['min_max_pct'][1]:+.2f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
