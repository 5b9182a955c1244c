"""Measure mode (fake tensors, nothing allocated) against MemTracker over a REAL CPU step.

Usage (from the repository root)::

    .venv/bin/python benchmarks/memory_measure_oracle.py          # ~10 s
    .venv/bin/python benchmarks/memory_measure_oracle.py --json

For each small model, ``trainmedic.memory.measurement`` traces two training steps (zero_grad,
forward, loss, backward, optimizer.step) on fake CPU tensors; the oracle runs the same two
steps for real on the CPU under ``torch.distributed._tools.mem_tracker.MemTracker`` and the
same loop shape (output and batch dropped after the loss). Printed per model: the peak, and
params / grads / optimizer / buffers at the peak, ours against MemTracker's, with the
difference. Two labels differ by definition and are shown but not compared one to one:
MemTracker calls a gradient "Temp" until its accumulate hook has run and everything made
inside ``optimizer.step()`` "Optstate" (the step's temporaries included); measure mode files
a storage by what it is (a ``.grad``, an optimizer state), whenever that is learnt. So the
row ``act+temp`` compares the sum of activations and temporaries with MemTracker's
Activation + Temp, and the optimizer row may differ by the optimizer's temporaries. The last
column of the activation line is the oracle of ``activations_total_bytes``: the distinct
non-parameter storages a ``saved_tensors_hooks`` pack hook sees in a real forward + loss.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from machine import describe, one_line  # noqa: E402
from torch import nn  # noqa: E402

from trainmedic.memory.measurement import MeasureConfig, measure  # noqa: E402

VOCAB = 512


class _Cfg:
    vocab_size = VOCAB


class Block(nn.Module):
    def __init__(self, d: int, heads: int, p: float) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads, self.p = heads, p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(
            2, 0, 3, 1, 4
        )
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + F.dropout(self.proj(a.transpose(1, 2).reshape(b, s, d)), self.p, self.training)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), self.p, self.training)


class TinyLM(nn.Module):
    """Embedding, 4 blocks (SDPA attention, GELU MLP, LayerNorm, dropout 0.1), LM head."""

    def __init__(self, d: int = 128, heads: int = 4, layers: int = 4) -> None:
        super().__init__()
        self.config = _Cfg()
        self.emb = nn.Embedding(VOCAB, d)
        self.blocks = nn.ModuleList(Block(d, heads, 0.1) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(256, 1024), nn.GELU(), nn.Dropout(0.1), nn.Linear(1024, 1024), nn.GELU(),
        nn.Linear(1024, 10),
    )


def convnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    )


def lm_batch(model: Any, b: int, s: int) -> Any:
    return torch.randint(0, VOCAB, (b, s))


def lm_loss(out: Any, batch: Any) -> Any:
    return F.cross_entropy(out.flatten(0, 1), batch.flatten())


def vec_batch(model: Any, b: int, s: int) -> Any:
    return torch.randn(b, 256)


def img_batch(model: Any, b: int, s: int) -> Any:
    return torch.randn(b, 3, 32, 32)


def class_loss(out: Any, batch: Any) -> Any:
    return F.cross_entropy(out, torch.zeros(out.shape[0], dtype=torch.long))


# name, factory, inputs, loss, batch, seq, precision, optimizer
CASES: list[tuple[str, Callable[[], nn.Module], Any, Any, int, int, str, str]] = [
    ("tiny-lm fp32 adamw", TinyLM, lm_batch, lm_loss, 8, 128, "fp32", "adamw"),
    ("tiny-lm bf16-mixed adamw", TinyLM, lm_batch, lm_loss, 8, 128, "bf16-mixed", "adamw"),
    ("tiny-lm bf16 sgd-momentum", TinyLM, lm_batch, lm_loss, 2, 32, "bf16", "sgd-momentum"),
    ("mlp fp32 adam", mlp, vec_batch, class_loss, 64, 1, "fp32", "adam"),
    ("conv+bn fp32 adamw", convnet, img_batch, class_loss, 16, 1, "fp32", "adamw"),
]


def _optimizer(name: str, params: Any) -> Any:
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    return torch.optim.AdamW(params, lr=1e-3)


def _autocast(precision: str) -> Any:
    if precision == "bf16-mixed":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return nullcontext()


def _storage_bytes(tensors: Any) -> int:
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def memtracker_real(case: tuple[Any, ...]) -> tuple[dict[str, int], int, int]:
    from torch.distributed._tools.mem_tracker import MemTracker

    _, factory, inputs, loss_fn, b, s, precision, opt_name = case
    torch.manual_seed(0)
    model = factory()
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    opt = _optimizer(opt_name, model.parameters())
    tracker = MemTracker()
    tracker.track_external(model, opt)
    with tracker:
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            data = inputs(model, b, s)
            with _autocast(precision):
                out = model(data)
                loss = loss_fn(out, data)
            del out, data
            loss.backward()
            del loss
            opt.step()
            tracker.reset_mod_stats()
    (snap,) = tracker.get_tracker_snapshot("peak").values()
    grads = _storage_bytes(p.grad for p in model.parameters() if p.grad is not None)
    states = _storage_bytes(
        v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)
    )
    return {str(getattr(k, "value", k)): int(v) for k, v in snap.items()}, grads, states


def saved_real(case: tuple[Any, ...]) -> int:
    _, factory, inputs, loss_fn, b, s, precision, _ = case
    torch.manual_seed(0)
    model = factory().train()
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t.detach()

    data = inputs(model, b, s)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), _autocast(precision):
        loss_fn(model(data), data)
    return sum(seen.values())


def run_case(case: tuple[Any, ...]) -> dict[str, Any]:
    name, factory, inputs, loss_fn, b, s, precision, opt_name = case
    t0 = time.perf_counter()
    ledger = measure(
        factory,
        MeasureConfig(batch_size=b, seq_len=s, inputs=inputs, loss=loss_fn,
                      precision=precision, optimizer=opt_name),
    )
    measure_s = time.perf_counter() - t0
    oracle, real_grads, real_states = memtracker_real(case)
    cats = ledger.categories
    in_optimizer = ledger.peak_phase == "optimizer"
    state_whole = in_optimizer or int(ledger.details["peak_step"]) >= 1
    rows = {
        "peak": (ledger.peak_bytes, oracle["Total"]),
        "params": (cats["params"], oracle["Parameter"]),
        "grads": (cats["grads"], oracle["Gradient"]),
        "optimizer": (cats["optimizer"], oracle["Optstate"]),
        "buffers": (cats["buffers"], oracle["Buffer"]),
        "act+temp": (cats["activations"] + cats["temporaries"],
                     oracle["Activation"] + oracle["Temp"]),
        "grads = real .grad": (cats["grads"], real_grads if in_optimizer else None),
        "optim = real state": (cats["optimizer"], real_states if state_whole else None),
        "saved_for_backward": (
            ledger.activations_total_bytes + int(ledger.details["param_cast_bytes"]),
            saved_real(case),
        ),
    }
    return {
        "model": name,
        "batch": b,
        "seq": s,
        "num_params": ledger.num_params,
        "peak_phase": ledger.peak_phase,
        "measure_s": round(measure_s, 3),
        "rows": {k: {"ours": o, "memtracker_or_oracle": r} for k, (o, r) in rows.items()},
    }


def _diff(ours: int, ref: int | None) -> str:
    if ref is None:
        return "      -"
    if ref == 0:
        return "  0.00%" if ours == 0 else "   inf"
    return f"{100 * (ours - ref) / ref:+6.2f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    torch.set_num_threads(1)
    machine = describe()
    machine["torch"] = torch.__version__
    results = [run_case(c) for c in CASES]
    if args.json:
        print(json.dumps({"machine": machine, "results": results}, indent=2))
        return
    print(one_line(machine) + f"; torch {torch.__version__}")
    for r in results:
        print(
            f"\n{r['model']}  (batch {r['batch']}, seq {r['seq']}, {r['num_params']:,} params; "
            f"peak in {r['peak_phase']}; measure {r['measure_s']:.2f} s)"
        )
        print(f"  {'category':<22}{'ours':>14}{'oracle':>14}{'diff':>9}")
        for key, row in r["rows"].items():
            ref = row["memtracker_or_oracle"]
            ref_text = "-" if ref is None else f"{ref:,}"
            print(f"  {key:<22}{row['ours']:>14,}{ref_text:>14}{_diff(row['ours'], ref):>9}")
    print(
        "\noracle: MemTracker over a real CPU step (peak .. act+temp; grads, optimizer and "
        "act+temp differ by label, see the module docstring); the real run's .grad and "
        "optimizer.state after its last step (where they are whole at the peak); "
        "saved_for_backward: a saved_tensors_hooks pack hook over a real forward + loss"
    )


if __name__ == "__main__":
    main()
