"""torchrun worker for tests/checkpoint/test_sharded.py: ``sharded_worker.py MODE BASE``.

Modes (each run by every rank of a gloo group on CPU):

``save``  2 ranks. For each wrapping (FSDP2 ``fully_shard``, DDP): trains a tiny model with
          AdamW for a few steps on per-rank data, writes the live state gathered by hand
          (``DTensor.full_tensor()``, not trainmedic, not DCP's state_dict helpers) to
          ``ref.<wrap>.pt``, saves with ``save_sharded`` to ``<wrap>/dcp``, then loads that
          into a fresh model and optimizer (other seed, other lr, no optimizer state) at the
          same world size and writes what it holds to ``got.<wrap>.w2.pt``.
``load``  any world size (the test uses 3). Loads ``fsdp/dcp`` and ``ddp/dcp`` into fresh
          FSDP2 and DDP models, and ``ddp/dcp`` into FSDP2, writing ``got.<case>.w<N>.pt``;
          then takes one training step on each to show the loaded state is usable.
``manager`` 2 ranks. Through ``CheckpointManager(root, sharded=True)``: trains an FSDP2
          model, saves step 3 with a per-rank train dict, and writes ``ref.manager.pt``.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainmedic.checkpoint.sharded import load_sharded, save_sharded

STEPS = 3
WRAPS = ("fsdp", "ddp")


def build(seed: int) -> torch.nn.Sequential:
    """Odd sizes (7, 5) so that 2 and 3 ranks shard unevenly; a frozen parameter, which has
    no optimizer state."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 7), torch.nn.LayerNorm(7), torch.nn.ReLU(), torch.nn.Linear(7, 5))
    model.register_parameter("scale", torch.nn.Parameter(torch.full((5,), 1.5),
                                                         requires_grad=False))
    return model


def forward(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    inner = getattr(model, "module", model)
    return model(x) * inner.scale


def wrap(model: torch.nn.Sequential, how: str) -> torch.nn.Module:
    if how == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in (model[0], model[3]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def optimizer(model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)


def train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int, seed: int) -> None:
    g = torch.Generator().manual_seed(1000 * seed + dist.get_rank())
    for _ in range(steps):
        x = torch.randn(6, 8, generator=g)
        forward(model, x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor on every rank (a collective for a DTensor)."""
    from torch.distributed.tensor import DTensor

    out = t.full_tensor() if isinstance(t, DTensor) else t
    return out.detach().clone()


def gather(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """Model parameters and buffers, and the optimizer state per parameter name and its
    hyper-parameters, as whole CPU tensors: names without DDP's ``module.``."""
    out: dict[str, Any] = {}
    names = {}
    for name, p in model.named_parameters():
        name = name.removeprefix("module.")
        names[p] = name
        out[f"model.{name}"] = full(p)
    for name, b in model.named_buffers():
        out[f"model.{name.removeprefix('module.')}"] = full(b)
    for p, name in names.items():
        for k, v in sorted(opt.state.get(p, {}).items()):
            out[f"optim.{name}.{k}"] = full(v) if isinstance(v, torch.Tensor) else v
    group = opt.param_groups[0]
    out["hyper"] = {k: group[k] for k in ("lr", "betas", "eps", "weight_decay")}
    return out


def local_rows(model: torch.nn.Module) -> int:
    """Rows of the first weight this rank holds (7 when not sharded)."""
    inner: Any = getattr(model, "module", model)
    w = inner[0].weight
    return int(w.to_local().shape[0] if hasattr(w, "to_local") else w.shape[0])


def dump(base: Path, name: str, obj: dict[str, Any]) -> None:
    if dist.get_rank() == 0:
        torch.save(obj, base / name)


def mode_save(base: Path) -> None:
    files: dict[str, list[str]] = {}
    for how in WRAPS:
        model = wrap(build(0), how)
        opt = optimizer(model, 1e-2)
        train(model, opt, STEPS, seed=1)
        dump(base, f"ref.{how}.pt", gather(model, opt))
        written = save_sharded(base / how / "dcp", model, opt)
        files[how] = [str(p.relative_to(base / how / "dcp")) for p in written]
        fresh = wrap(build(7), how)
        fresh_opt = optimizer(fresh, 0.5)
        load_sharded(base / how / "dcp", fresh, fresh_opt)
        dump(base, f"got.{how}.w2.pt", gather(fresh, fresh_opt))
    out = base / f"files.rank{dist.get_rank()}.json"
    out.write_text(json.dumps(files))


def mode_load(base: Path) -> None:
    world = dist.get_world_size()
    for case, how, src in (("fsdp", "fsdp", "fsdp"), ("ddp", "ddp", "ddp"),
                           ("ddp_into_fsdp", "fsdp", "ddp")):
        model = wrap(build(7), how)
        opt = optimizer(model, 0.5)
        load_sharded(base / src / "dcp", model, opt)
        got = gather(model, opt)
        got["shard_rows"] = local_rows(model)
        dump(base, f"got.{case}.w{world}.pt", got)
        train(model, opt, 1, seed=2)  # the loaded state trains on
        for p in model.parameters():
            assert torch.isfinite(full(p)).all()


def mode_manager(base: Path) -> None:
    from trainmedic.checkpoint.manager import CheckpointManager

    mgr = CheckpointManager(base / "ckpts", keep_last=2, config={"test": "sharded"},
                            sharded=True)
    model = wrap(build(0), "fsdp")
    opt = optimizer(model, 1e-2)
    train(model, opt, STEPS, seed=1)
    mgr.save(STEPS, {"model": model, "optimizer": opt,
                     "train": {"rank": dist.get_rank(), "world": dist.get_world_size()}})
    mgr.wait()
    dump(base, "ref.manager.pt", gather(model, opt))


def main() -> None:
    torch.set_num_threads(1)
    mode, base = sys.argv[1], Path(sys.argv[2])
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    try:
        {"save": mode_save, "load": mode_load, "manager": mode_manager}[mode](base)
        dist.barrier()  # no rank tears the group down while another still reads
    finally:
        dist.destroy_process_group()
    # Done and torn down: leave without the interpreter's exit-time destructors, where gloo's
    # threads once aborted a rank ("terminate called without an active exception") on a
    # 2-core CI machine running 3 ranks, after all the work had been written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
