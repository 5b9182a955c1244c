"""The comparison of the resume test's phase results (``trainmedic.recipe.resume_test``):
which state differs first between the straight run and the resumed one, and, after a drift
that appeared only past an exact boundary, whether repeated runs prove the resume exact."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainmedic.recipe.resume_test import ResumeTestConfig

__all__ = ["compare", "drift_verdict"]


def _first_diff(a: Mapping[str, str], b: Mapping[str, str]) -> str | None:
    for k in list(a) + [k for k in b if k not in a]:
        if a.get(k) != b.get(k):
            return k
    return None


def _max_abs_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[float, str | None]:
    worst, where = 0.0, None
    for k in a:
        if k not in b or a[k].shape != b[k].shape or a[k].dtype != b[k].dtype:
            return math.inf, k
        if a[k].is_floating_point() or a[k].is_complex():
            d = float((a[k].double() - b[k].double()).abs().max()) if a[k].numel() else 0.0
            if math.isnan(d):
                d = math.inf
        else:
            d = 0.0 if bool((a[k] == b[k]).all()) else math.inf
        if d > worst:
            worst, where = d, k
    extra = [k for k in b if k not in a]
    if extra:
        return math.inf, extra[0]
    return worst, where


def compare(s: Mapping[str, Any], f: Mapping[str, Any], r: Mapping[str, Any],
             cfg: ResumeTestConfig) -> tuple[list[tuple[str, str]], float, float]:
    """(name, line) per difference, in the report's order; max loss and weight diffs."""
    K, atol = cfg.at, cfg.atol
    tol = atol if atol is not None else 0.0
    diffs: list[tuple[str, str]] = []
    ls, lf, lr = s["losses"].tolist(), f["losses"].tolist(), r["losses"].tolist()

    def close(x: float, y: float) -> bool:
        return x == y or (atol is not None and abs(x - y) <= atol)

    for i, (x, y) in enumerate(zip(ls[:K], lf, strict=False)):
        if not close(x, y):
            diffs.append(("determinism", f"determinism: step {i} of two fresh runs differs "
                          f"({x!r} vs {y!r}) before any checkpoint: the recipe is not "
                          "reproducible run to run (seed it; set deterministic kernels; or "
                          "use --atol)"))
            break
    sb, rb = s["boundary"], r["boundary"]
    for part in ("model", "optimizer"):
        if atol is not None:
            worst, where = _max_abs_diff(sb[f"{part}_tensors"], rb[f"{part}_tensors"])
            if worst > atol:
                by = f"by {worst:.3g}" if math.isfinite(worst) else \
                    "(a tensor missing, of another shape or dtype, or not finite)"
                diffs.append((part, f"{part}: state right after the load differs from the "
                              f"straight run's at step {K} {by}, first at {where!r}"))
            continue
        key = _first_diff(sb[part], rb[part])
        if key is not None:
            diffs.append((part, f"{part}: state right after the load differs from the "
                          f"straight run's at step {K}, first at {key!r}"))
    for part in ("scheduler", "scaler", "counters", "data position"):
        key = _first_diff(sb[part], rb[part])
        if key is not None:
            diffs.append((part, f"{part}: {key} is {rb[part].get(key)} after the load, "
                          f"{sb[part].get(key)} in the straight run at step {K}"))
    rng_differs = False
    for stream in list(sb["rng"]) + [k for k in rb["rng"] if k not in sb["rng"]]:
        if sb["rng"].get(stream) != rb["rng"].get(stream):
            rng_differs = True
            diffs.append((f"rng.{stream}", f"rng.{stream}: the {stream} random stream after "
                          f"the load is not the straight run's at step {K} (not restored, or "
                          "restored before the data iterator was recreated and drew from it)"))
    n = int(sb["batches_drawn"])
    want, got = s["batches"][n:], r["batches"]
    j = next((i for i, (x, y) in enumerate(zip(want, got, strict=False)) if x != y), None)
    if j is not None:
        which = "the first batch" if j == 0 else f"batch {j}"
        why = " (the RNG differs too: a random transform of the batch would show here)" \
            if rng_differs else ""
        diffs.append(("data order", f"data order: {which} after the resume is not the "
                      f"straight run's micro-batch {n + j}{why}"))
    loss_diff = max((abs(x - y) for x, y in zip(ls[K:], lr, strict=False)), default=0.0)
    if len(lr) != len(ls) - K:
        loss_diff = math.inf
    for i, (x, y) in enumerate(zip(ls[K:], lr, strict=False)):
        if not close(x, y):
            diffs.append(("loss", f"loss: step {K + i} is {y!r} after the resume, {x!r} "
                          f"straight (|diff| {abs(x - y):.3g})"))
            break
    w_diff, where = _max_abs_diff(s["final"], r["final"])
    if w_diff > tol:
        diffs.append(("final weights", f"final weights: differ by {w_diff:.3g} at {where!r}"))
    return diffs, loss_diff, w_diff


def _same_after(k: int, a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Bitwise the same losses from step K on and the same final weights (``a``, ``b``: two
    phase results; a straight run's losses start at step 0, a resumed run's at K)."""
    def after(r: Mapping[str, Any]) -> list[float]:
        losses: list[float] = r["losses"].tolist()
        return losses[k:] if r["phase"] == "straight" else losses

    return after(a) == after(b) and _max_abs_diff(a["final"], b["final"]) == (0.0, None)


def drift_verdict(cfg: ResumeTestConfig, runs: Mapping[str, Mapping[str, Any]],
                   drift: float) -> tuple[str, tuple[str, str] | None, str]:
    """After a bitwise difference that only appeared after an exact boundary, with a repeat
    of the straight and of the resumed run: (``exact``, ``repeated`` or ``determinism``; the
    straight and resumed runs that matched, for ``exact``; the line saying why)."""
    k = cfg.at
    for s_name in ("straight", "straight-2"):
        for r_name in ("resume", "resume-2"):
            if _same_after(k, runs[s_name], runs[r_name]):
                return "exact", (s_name, r_name), (
                    f"two runs from the same inputs drifted apart by up to {drift:.3g} after "
                    f"step {k} (kernels that are not bitwise reproducible here); every state "
                    f"at the boundary was exact and the {r_name} run reproduced the "
                    f"{s_name} run bitwise, so the checkpoint resumes exactly")
    if _same_after(k, runs["straight"], runs["straight-2"]) and \
            _same_after(k, runs["resume"], runs["resume-2"]):
        return "repeated", None, (
            "repeated: each straight run and each resumed run reproduces itself bitwise, so "
            "the resume misses a state the boundary fingerprint does not cover (a module "
            "buffer or a global the recipe keeps outside the model, optimizer and loader?)")
    return "determinism", None, (
        f"determinism: two runs from the same inputs differ after step {k} by up to "
        f"{drift:.3g} (kernels that are not bitwise reproducible here) and no resumed run "
        "matched a straight one; every state at the boundary was exact: compare with --atol")
