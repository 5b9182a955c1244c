"""``trainmedic profile`` and MFU on a real GPU: the checks issue 14 names for a device.

A small GPT-style model (the demo's CharTransformer, widened) on CUDA in bf16 autocast is
profiled four ways, each printed with the machine:

1. healthy: the split of the step, FLOPs (FlopCounterMode, which counts CUDA attention
   itself), MFU against the measured bf16 matmul peak (a quick ``bench matmul`` sweep) and
   against the datasheet peak of the GPU;
2. a ``.item()`` after every block: the profile must count one device read per block per step
   at the injected line, and the ``sync`` share must grow;
3. a loader sleep of ``--sleep-ms``: ``data_wait`` must match sleep / step within 0.10, and
   MFU must fall by the step-time ratio;
4. the CPU figures of the same model for comparison are not taken (the tests do that).

Without a CUDA device it says so and exits 0. Run:
    python benchmarks/profile_gpu.py [--d-model 1024 --layers 8 --batch 16 --seq 1024]
        [--steps 10] [--sleep-ms 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

INJECTED: list[float] = []


def build(args: argparse.Namespace, cause: str) -> Any:
    import torch
    import torch.nn.functional as F

    from trainmedic.demo.model import CharTransformer
    from trainmedic.recipe import Recipe

    torch.manual_seed(0)
    vocab = 256
    model = CharTransformer(vocab, context_len=args.seq, d_model=args.d_model,
                            n_layers=args.layers, n_heads=args.d_model // 64).cuda()
    if cause == "item":
        for block in model.blocks:
            def read(module: Any, inputs: Any, output: Any) -> None:
                t = time.perf_counter()
                output.float().mean().item()  # the injected read: a host-device sync
                INJECTED.append(time.perf_counter() - t)

            block.register_forward_hook(read)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    data = [torch.randint(0, vocab, (args.batch, args.seq + 1)) for _ in range(8)]

    class Loader:
        def __iter__(self) -> Any:
            for b in data:
                if cause == "sleep":
                    t = time.perf_counter()
                    time.sleep(args.sleep_ms / 1e3)
                    INJECTED.append(time.perf_counter() - t)
                yield b

    def loss_fn(m: Any, batch: Any) -> Any:
        batch = batch.cuda(non_blocking=True)
        x, y = batch[:, :-1], batch[:, 1:]
        logits = m(x)
        return F.cross_entropy(logits.reshape(-1, vocab).float(), y.reshape(-1))

    return Recipe(model=model, optimizer=opt, loss_fn=loss_fn, data=Loader(),
                  precision="bf16-mixed", seed=0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--sleep-ms", type=float, default=30.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    import torch

    from trainmedic.bench.machine import describe_machine

    machine = describe_machine().one_line()
    if not torch.cuda.is_available():
        print(f"no CUDA device here: nothing to measure ({machine})")
        return 0
    from trainmedic.profile.session import ProfileConfig, profile_recipe
    from trainmedic.report.profile_text import profile_doc, profile_lines

    if not args.json:  # --json: stdout carries the JSON document only
        print(machine)
    results: dict[str, Any] = {}
    peak = None
    for cause in ("none", "item", "sleep"):
        INJECTED.clear()
        cfg = ProfileConfig(steps=args.steps, warmup=3, measure_peak=peak is None,
                            peak_flops_per_s=peak)
        report = profile_recipe(build(args, cause), cfg, name=f"gpt-{cause}")
        peak = peak or report.peak_flops_per_s
        b = report.breakdown
        truth = None
        if INJECTED:  # as the CPU tests take it: per step, over the profile's mean step
            per = statistics.fmean(INJECTED) * (args.layers if cause == "item" else 1)
            truth = per / sum(c.seconds_per_step for c in b.components)
        results[cause] = {"report": json.loads(profile_doc(report)), "injected_share": truth}
        if not args.json:
            print(f"\n=== {cause} ===")
            print("\n".join(profile_lines(report)))
            if truth is not None:
                print(f"injected share (perf_counter in the injection): {truth:.1%}")
    base, slow = results["none"]["report"], results["sleep"]["report"]
    if base["mfu"] and slow["mfu"]:
        ratio = slow["mfu"] / base["mfu"]
        step_ratio = base["step_time_s"]["median"] / slow["step_time_s"]["median"]
        results["mfu_ratio_sleep_vs_none"] = {"mfu_ratio": ratio, "step_ratio": step_ratio}
        if not args.json:
            print(f"\nMFU with the sleep / without: {ratio:.3f}; step-time ratio "
                  f"{step_ratio:.3f} (should match)")
    item = results["item"]["report"]
    if not args.json:
        print(f"device reads per step at the hook: {item['sync_device_reads']} "
              f"(expected {args.layers}); sync share "
              f"{next(c['share'] for c in item['components'] if c['name'] == 'sync'):.1%}")
    if args.json:
        print(json.dumps(results, indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
