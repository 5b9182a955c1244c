"""The optional preflight check ``ddp_equivalence``: 2 gloo ranks under DDP give the gradient
of one process on the whole batch (``trainmedic check RECIPE --ddp``).

DDP averages the ranks' gradients (``all_reduce`` then divide by the world size), so with a
loss that is a mean over the batch, n ranks on B/n samples each give exactly the gradient of
one process on B. Two things break it silently, and this check names both:

* a loss that is a **sum** over the batch: the averaged gradient is 1/n of the full one (the
  effective learning rate falls with the world size);
* **BatchNorm** in training mode: each rank normalizes with its own half-batch statistics
  (``SyncBatchNorm`` computes them over the whole batch).

The ranks are real processes (``torch.multiprocessing`` with ``spawn``, the gloo backend on
localhost), each building the recipe again from its ``module:function`` spec, since a built
recipe (a model, a loader, closures) does not cross a process boundary. Rank 0's first batch
is sent to every rank and split along dim 0; dropout is off (each rank would draw its own
masks); parameters are rank 0's (DDP broadcasts them), and rank 0 computes the one-process
reference from a copy of them.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainmedic.levers.preflight import (
    CheckResult,
    Evidence,
    PreflightReport,
    failed,
    passed,
    skipped,
)

__all__ = ["NAME", "ddp_equivalence", "with_ddp_check"]

logger = logging.getLogger(__name__)

NAME = "ddp_equivalence"


def with_ddp_check(report: PreflightReport, spec: str, overrides: Mapping[str, Any], *,
                   world_size: int = 2, tolerance: float = 1e-4, timeout_s: float = 180.0,
                   seed: int = 0) -> PreflightReport:
    """``report`` with the result of :func:`ddp_equivalence` appended."""
    result = ddp_equivalence(spec, overrides, world_size=world_size, tolerance=tolerance,
                             timeout_s=timeout_s, seed=seed)
    results = (*report.results, result)
    return PreflightReport(results=results, passed=all(r.status != "fail" for r in results))


def ddp_equivalence(spec: str, overrides: Mapping[str, Any], *, world_size: int = 2,
                    tolerance: float = 1e-4, timeout_s: float = 180.0,
                    seed: int = 0) -> CheckResult:
    """Run the recipe ``spec`` (with ``overrides``) on ``world_size`` gloo ranks under DDP and
    compare the averaged gradient with one process's on the whole batch. A run that does not
    finish within ``timeout_s`` is a skip (with the reason), never a hang."""
    import torch.multiprocessing as mp

    if world_size < 2:
        return skipped(NAME, f"world_size {world_size} < 2: nothing to compare")
    with tempfile.TemporaryDirectory(prefix="trainmedic-ddp-check-") as tmp:
        out = Path(tmp) / "result.json"
        ctx = mp.start_processes(
            _worker, args=(world_size, _free_port(), spec, dict(overrides), str(out), seed,
                           timeout_s),
            nprocs=world_size, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout_s
        try:
            while not ctx.join(timeout=0.5):
                if time.monotonic() > deadline:
                    return skipped(NAME, f"the {world_size} ranks did not finish in "
                                   f"{timeout_s:.0f} s; run the check alone, or raise timeout_s")
        except Exception as exc:  # a rank died: torch.multiprocessing raises ProcessRaisedException
            if out.exists():
                return _result(json.loads(out.read_text()), tolerance, world_size)
            first = str(exc).strip().splitlines()
            return failed(NAME, f"a rank failed under DDP: {first[-1] if first else exc}",
                          "run the recipe under DDP (torchrun --nproc-per-node 2) to see the "
                          "traceback; a loss_fn that reads attributes of the model must reach "
                          "them through model.module under DDP")
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
        if not out.exists():
            return skipped(NAME, "rank 0 wrote no result")
        return _result(json.loads(out.read_text()), tolerance, world_size)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _result(doc: dict[str, Any], tolerance: float, world_size: int) -> CheckResult:
    if "skip" in doc:
        return skipped(NAME, doc["skip"])
    if "error" in doc:
        return failed(NAME, f"the step failed under DDP: {doc['error']}",
                      "a loss_fn that reads attributes of the model must reach them through "
                      "model.module under DDP")
    err, ratio = float(doc["rel_l2"]), float(doc["norm_ratio"])
    shape = f"{world_size} ranks x {doc['per_rank']} vs 1 x {doc['batch']}"
    ev = (Evidence(label=f"relative L2 error of the gradient, {shape}", value=err,
                   tolerance=f"<= {tolerance:.3g}"),
          Evidence(label="gradient norm ratio (DDP / one process)", value=ratio),
          Evidence(label="loss of one process on the whole batch", value=doc["loss"]),
          Evidence(label="mean loss of the ranks", value=doc["rank_loss"]))
    if err <= tolerance:
        return passed(NAME, f"{shape}: gradient relative L2 error {err:.3g} <= {tolerance:.3g}"
                      " (measured; dropout off)", *ev)
    batchnorm = tuple(doc.get("batchnorm", ()))
    if batchnorm:
        return failed(NAME, f"{shape}: gradient differs by {err:.3g} relative; BatchNorm "
                      f"({', '.join(batchnorm[:3])}) normalizes each rank with its own "
                      "batch statistics",
                      "convert the model with torch.nn.SyncBatchNorm.convert_sync_batchnorm "
                      "before wrapping it in DDP (or accept per-rank statistics knowingly)",
                      *ev, Evidence(label="BatchNorm modules", value=batchnorm))
    if math.isfinite(ratio) and abs(ratio * world_size - 1) < 0.05:
        return failed(NAME, f"{shape}: the DDP gradient is 1/{world_size} of one process's: "
                      "the loss is a sum over the batch and DDP averages across ranks",
                      "return the mean over the batch (reduction='mean'), or multiply the "
                      "loss by the world size", *ev)
    return failed(NAME, f"{shape}: gradient differs by {err:.3g} relative (> {tolerance:.3g})",
                  "look for a loss normalized by a per-rank count (tokens, non-padding items) "
                  "or for state that differs between ranks", *ev)


def _worker(rank: int, world_size: int, port: int, spec: str, overrides: dict[str, Any],
            out: str, seed: int, timeout_s: float) -> None:
    """One rank (a spawned process): build the recipe, step once under DDP, rank 0 writes
    the comparison to ``out``."""
    import copy
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from trainmedic.levers.preflight_state import (
        flat_grad,
        leading_size,
        rel_l2,
        scalar_loss,
        split_batch,
    )
    from trainmedic.recipe.recipe import load_recipe

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout_s))
    doc: dict[str, Any] = {}
    try:
        recipe = load_recipe(spec, **overrides)
        model = recipe.model
        on_cpu = all(p.device.type == "cpu" for p in model.parameters())
        box = [next(iter(recipe.data)) if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        batch = box[0]
        size = leading_size(batch)
        if not on_cpu:
            doc = {"skip": "the model is not on the CPU: the 2-rank check runs on gloo"}
        elif size is None or size % world_size:
            doc = {"skip": f"batch size {size} does not split into {world_size} equal parts"}
        else:
            doc = _compare(torch, model, recipe.loss_fn, batch, split_batch(batch, world_size),
                           rank, world_size, seed, copy, flat_grad, rel_l2, scalar_loss)
            doc["batch"], doc["per_rank"] = size, size // world_size
    except Exception as exc:  # the recipe's own code failing under DDP is the finding
        doc = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    if rank == 0:
        Path(out).write_text(json.dumps(doc))
    dist.destroy_process_group()


def _compare(torch: Any, model: Any, loss_fn: Any, batch: Any, parts: list[Any], rank: int,
             world_size: int, seed: int, copy: Any, flat_grad: Any, rel_l2: Any,
             scalar_loss: Any) -> dict[str, Any]:
    from torch.nn.parallel import DistributedDataParallel

    for m in model.modules():  # dropout off: each rank would draw its own masks
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.eval()
    # Broadcasts rank 0's parameters and buffers. find_unused_parameters: a parameter the
    # loss does not reach would otherwise keep the reduction from finishing, leaving each
    # rank its own half-batch gradient (gradients_flow names unused parameters).
    ddp = DistributedDataParallel(model, find_unused_parameters=True)
    reference = copy.deepcopy(model)
    ref_params = [p for p in reference.parameters() if p.requires_grad]
    torch.manual_seed(seed)
    ref_loss = scalar_loss(loss_fn(reference, batch))
    ref_loss.backward()
    g_ref = flat_grad(ref_params)
    torch.manual_seed(seed)
    loss = scalar_loss(loss_fn(ddp, parts[rank]))
    loss.backward()  # DDP all-reduces and averages the gradients here
    g_ddp = flat_grad([p for p in model.parameters() if p.requires_grad])
    losses: list[Any] = [None] * world_size
    torch.distributed.all_gather_object(losses, float(loss.detach()))
    ref_norm = float(g_ref.norm())
    bn = [n for n, m in model.named_modules()
          if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
          and not isinstance(m, torch.nn.SyncBatchNorm) and m.training]
    return {"rel_l2": rel_l2(g_ddp, g_ref),
            "norm_ratio": float(g_ddp.norm()) / ref_norm if ref_norm else math.inf,
            "loss": float(ref_loss.detach()), "rank_loss": sum(losses) / world_size,
            "batchnorm": bn}
