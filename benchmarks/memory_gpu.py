"""Planned peak vs ``torch.cuda.max_memory_allocated`` on a real GPU, and the largest micro-batch
predicted vs found.

For several real configs (tests/data/model-configs/), at reduced depth, this builds the Hugging
Face model on the GPU, runs real training steps (AdamW, bf16 autocast, SDPA; two steps so the
optimizer state exists) and compares the allocator's peak with the planner's ``--device-profile
cuda`` prediction (the CUDA context is left out: ``max_memory_allocated`` does not see it).
Then, for one model, it finds the largest micro-batch that trains without OOM under a memory
cap (``torch.cuda.set_per_process_memory_fraction``) by bisection over real steps, and prints
it next to the planner's ``max_micro_batch`` for the same cap.

Needs a CUDA GPU and transformers. Run:  python benchmarks/memory_gpu.py [--layers 4]
"""

from __future__ import annotations

import argparse
import gc
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
CONFIGS = ROOT / "tests" / "data" / "model-configs"
MODELS = ("llama-3.2-1b", "gpt2-large", "mistral-7b-v0.1", "qwen2.5-7b-instruct", "phi-2",
          "opt-1.3b", "t5-base", "bert-base-uncased")


def real_peak(stem: str, *, layers: int, batch: int, seq: int, precision: str) -> int:
    import torch

    from trainmedic.memory.hf_build import build_hf_model, hf_inputs, hf_loss

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    with torch.device("cuda"):
        model = build_hf_model(CONFIGS / f"{stem}.json", num_layers=layers,
                               attn_implementation="sdpa")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16,
                              enabled=precision == "bf16-mixed")
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        batch_in = hf_inputs(model, batch, seq)
        with autocast:
            loss = hf_loss(model(**batch_in))
        del batch_in
        loss.backward()
        del loss
        opt.step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    del model, opt
    gc.collect()
    torch.cuda.empty_cache()
    return int(peak)


def planned(stem: str, *, layers: int, batch: int, seq: int, precision: str):
    from trainmedic.memory.families import load_spec, spec_with_layers
    from trainmedic.memory.planner import PlanConfig

    spec = spec_with_layers(load_spec(CONFIGS / f"{stem}.json"), layers)
    return spec, PlanConfig(batch_size=batch, seq_len=seq, precision=precision,
                            attention="sdpa", device_profile="cuda", include_context=False)


def fits_for_real(stem: str, *, layers: int, batch: int, seq: int, precision: str) -> bool:
    import torch

    try:
        real_peak(stem, layers=layers, batch=batch, seq=seq, precision=precision)
        return True
    except torch.OutOfMemoryError:
        gc.collect()
        torch.cuda.empty_cache()
        return False


def main() -> int:
    import torch

    from trainmedic.memory.fit import max_micro_batch
    from trainmedic.memory.planner import plan

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--precision", default="bf16-mixed")
    ap.add_argument("--cap-gib", type=float, default=24.0,
                    help="memory cap for the largest-micro-batch search")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 2
    props = torch.cuda.get_device_properties(0)
    print(f"machine: {props.name}, {props.total_memory / 2**30:.1f} GiB, torch "
          f"{torch.__version__}, Python {platform.python_version()}")
    print(f"depth {args.layers}, micro-batch {args.batch} x {args.seq}, {args.precision}, "
          f"AdamW (foreach), SDPA\n")
    print(f"{'config':<24} {'measured':>10} {'planned':>10} {'error':>7}")
    for stem in MODELS:
        seq = min(args.seq, 512) if stem in ("bert-base-uncased",) else args.seq
        try:
            real = real_peak(stem, layers=args.layers, batch=args.batch, seq=seq,
                             precision=args.precision)
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"{stem:<24} FAILED {type(exc).__name__}: {str(exc)[:100]}")
            continue
        spec, cfg = planned(stem, layers=args.layers, batch=args.batch, seq=seq,
                            precision=args.precision)
        est = plan(spec, cfg).peak_bytes
        print(f"{stem:<24} {real / 2**30:>8.2f}Gi {est / 2**30:>8.2f}Gi "
              f"{(est - real) / real:>+7.1%}")

    stem = "llama-3.2-1b"
    cap = int(args.cap_gib * 2**30)
    torch.cuda.set_per_process_memory_fraction(min(cap / props.total_memory, 1.0))
    spec, cfg = planned(stem, layers=args.layers, batch=1, seq=args.seq,
                        precision=args.precision)
    predicted = max_micro_batch(spec, cfg, cap)
    lo, hi = 0, 1
    while fits_for_real(stem, layers=args.layers, batch=hi, seq=args.seq,
                        precision=args.precision):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits_for_real(stem, layers=args.layers, batch=mid, seq=args.seq,
                         precision=args.precision):
            lo = mid
        else:
            hi = mid
    print(f"\nlargest micro-batch under a {args.cap_gib:.0f} GiB cap ({stem}, depth "
          f"{args.layers}, seq {args.seq}): predicted {predicted} (no margin), found {lo}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
