"""The built-in preflight checks, registered in the order they run (cheap ones first).

Each takes a :class:`~trainmedic.levers.preflight_state.Subject` and returns a
:class:`~trainmedic.levers.preflight.CheckResult`; what each compares, its tolerance and why,
and what it cannot catch are in docs/check.md. Tolerances come from ``PreflightConfig``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch

from trainmedic.levers.preflight import (
    Check,
    CheckResult,
    Evidence,
    failed,
    passed,
    register_check,
    skipped,
)
from trainmedic.levers.preflight_state import (
    IGNORE_INDEX,
    Problem,
    Subject,
    autocast_support,
    flat_grad,
    flat_params,
    leading_size,
    names_of,
    output_tensor,
    path_text,
    rel_l2,
    scalar_loss,
    split_batch,
)
from trainmedic.recipe.runner import autocast

__all__: list[str] = []

#: Unit roundoff of the autocast dtypes (2^-(mantissa bits + 1)): bf16 keeps 8 significant
#: bits, fp16 11 (IEEE 754-2008; the bfloat16 format of Google Brain).
UNIT_ROUNDOFF = {"bf16-mixed": 2.0 ** -8, "fp16-mixed": 2.0 ** -11}
#: Mixed-precision tolerances in units of that roundoff: a loss is one reduction of
#: fp32-accumulated products of rounded inputs (error a few u); a gradient passes through
#: every layer twice, so its relative error grows with depth (Higham, "Accuracy and
#: Stability of Numerical Algorithms", ch. 3: error bounds linear in the number of rounded
#: operations on the path).
LOSS_TOLERANCE_U = 8
GRAD_TOLERANCE_U = 32

CheckFn = Callable[[Subject], CheckResult]


def _check(name: str, what: str) -> Callable[[CheckFn], CheckFn]:
    def deco(fn: CheckFn) -> CheckFn:
        register_check(Check(name=name, what=what, run=fn))
        return fn
    return deco


def _g(x: float) -> str:
    return f"{x:.3g}"


def _no_tf32() -> None:
    # TF32 matmuls (Ampere+, on by default for cuDNN) round to 10 bits: comparisons meant to
    # isolate a loss bug or a dtype would measure TF32 instead.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


# -- 1 --------------------------------------------------------------------------------------

@_check("label_range", "integer targets are class indices in [0, C), or the ignore index")
def label_range(s: Subject) -> CheckResult:
    name = "label_range"
    probe = s.probe
    labels = s.labels()
    if labels is None or probe.classes is None or probe.target_path is None:
        return skipped(name, probe.reason)
    c = probe.classes
    ignored = int((labels == IGNORE_INDEX).sum())
    valid = labels[labels != IGNORE_INDEX]
    where = Evidence(label="targets read", value=f"{path_text(probe.target_path)} of "
                     f"{len(s.batches)} batches ({labels.numel()} labels, {ignored} at "
                     f"{IGNORE_INDEX})")
    if not valid.numel():
        return failed(name, f"every label is the ignore index {IGNORE_INDEX}: the loss is "
                      "a mean over nothing (NaN)", "check the target masking: some targets "
                      "must be real classes", where)
    lo, hi = int(valid.min()), int(valid.max())
    bad = int(((valid < 0) | (valid >= c)).sum())
    ev = (where, Evidence(label="smallest label", value=lo, tolerance=">= 0"),
          Evidence(label="largest label", value=hi, reference=float(c),
                   tolerance=f"< C = {c} (the output's last dim)"),
          Evidence(label="labels out of range", value=bad, tolerance="0"))
    if bad:
        fix = ("labels start at 1: subtract 1" if lo >= 1 and hi == c else
               "give the output layer as many units as there are classes (max label + 1), "
               "or map the labels to 0..C-1")
        return failed(name, f"{bad} labels outside [0, {c}) (min {lo}, max {hi}): "
                      "cross-entropy raises (CUDA: a device-side assert)", fix, *ev)
    return passed(name, f"all {valid.numel()} labels in [0, {c}) (min {lo}, max {hi}; "
                  "measured)", *ev)


# -- 2 --------------------------------------------------------------------------------------

@_check("optimizer_coverage", "the optimizer holds every trainable parameter, no frozen one")
def optimizer_coverage(s: Subject) -> CheckResult:
    name = "optimizer_coverage"
    held = {id(p) for g in s.recipe.optimizer.param_groups for p in g["params"]}
    named = list(s.recipe.model.named_parameters())
    missing = [n for n, p in named if p.requires_grad and id(p) not in held]
    frozen = [n for n, p in named if not p.requires_grad and id(p) in held]
    trainable = sum(1 for _, p in named if p.requires_grad)
    ev = [Evidence(label="trainable parameter tensors", value=trainable),
          Evidence(label="tensors in the optimizer", value=len(held)),
          Evidence(label="trainable, not in the optimizer", value=len(missing), tolerance="0"),
          Evidence(label="frozen, in the optimizer", value=len(frozen), tolerance="0")]
    if missing:
        ev.append(Evidence(label="never updated", value=names_of(missing)))
    if frozen:
        ev.append(Evidence(label="frozen but held", value=names_of(frozen)))
    if missing or frozen:
        parts = []
        if missing:
            parts.append(f"{len(missing)} trainable tensors are not in the optimizer and never "
                         f"change ({', '.join(names_of(missing, 3))})")
        if frozen:
            parts.append(f"{len(frozen)} frozen tensors are in it "
                         f"({', '.join(names_of(frozen, 3))})")
        return failed(name, "; ".join(parts),
                      "build the optimizer after freezing, over [p for p in "
                      "model.parameters() if p.requires_grad] (or add the missing modules to "
                      "a param group)", *ev)
    return passed(name, f"the optimizer holds all {trainable} trainable tensors and no frozen "
                  "one", *ev)


# -- 3 --------------------------------------------------------------------------------------

@_check("gradients_flow", "one backward gives every trainable parameter a finite gradient")
def gradients_flow(s: Subject) -> CheckResult:
    name = "gradients_flow"
    if (why := s.label_problem()) is not None:
        return skipped(name, why)
    r, model = s.recipe, s.recipe.model
    model.train()
    model.zero_grad(set_to_none=True)
    s.seed()
    with autocast(r.precision, s.device_type):
        loss = scalar_loss(r.loss_fn(model, s.batches[0]))
    # fp16: scale as the scaler would, or small gradients flush to zero.
    scale = float(r.scaler.get_scale()) if r.scaler is not None else 1.0
    (loss.float() * scale).backward()
    named = s.trainable()
    none = [n for n, p in named if p.grad is None]
    bad = [n for n, p in named if p.grad is not None and not bool(p.grad.isfinite().all())]
    zero = [n for n, p in named if p.grad is not None and not bool(p.grad.any())]
    ev = [Evidence(label="loss of batch 0", value=float(loss.detach())),
          Evidence(label="trainable tensors", value=len(named)),
          Evidence(label="without a gradient", value=len(none), tolerance="0"),
          Evidence(label="non-finite gradient", value=len(bad), tolerance="0"),
          Evidence(label="all-zero gradient", value=len(zero))]
    for label, names in (("no gradient", none), ("non-finite", bad), ("all zero", zero)):
        if names:
            ev.append(Evidence(label=label, value=names_of(names)))
    if none or bad:
        what = []
        if none:
            what.append(f"{len(none)} trainable tensors got no gradient "
                        f"({', '.join(names_of(none, 3))})")
        if bad:
            what.append(f"{len(bad)} got a non-finite one ({', '.join(names_of(bad, 3))})")
        fix = ("a tensor without a gradient is not on the loss's path: remove the unused "
               "module (or freeze it), or the .detach() / no_grad that cuts it off (a module "
               "used only on some batches needs DDP(find_unused_parameters=True))"
               if none else "find the op that overflows (trainmedic.watch's NaN guard names "
               "the first non-finite module); check the loss of batch 0 is finite")
        return failed(name, "; ".join(what), fix, *ev)
    note = f"; {len(zero)} all-zero ({', '.join(names_of(zero, 2))})" if zero else ""
    return passed(name, f"all {len(named)} trainable tensors got a finite gradient{note} "
                  "(measured)", *ev)


# -- 4 --------------------------------------------------------------------------------------

def _entropy(labels: torch.Tensor) -> float:
    counts = torch.bincount(labels).double()
    p = counts[counts > 0] / counts.sum()
    return float(-(p * p.log()).sum())


@_check("init_loss", "a classifier's loss at init is near ln C")
def init_loss(s: Subject) -> CheckResult:
    name = "init_loss"
    probe = s.probe
    labels = s.labels()
    if probe.classes is None or labels is None or probe.target_path is None:
        return skipped(name, probe.reason)
    if (why := s.label_problem()) is not None:
        return skipped(name, why)
    model, cfg = s.recipe.model, s.config
    model.eval()  # the clean init loss: no dropout
    with torch.no_grad():
        loss = float(scalar_loss(s.recipe.loss_fn(model, s.batches[0]), need_graph=False))
    c = probe.classes
    ln_c = math.log(c)
    first = s.labels(first_only=True)
    assert first is not None
    first = first[first != IGNORE_INDEX]
    h = _entropy(first) if first.numel() else ln_c
    hi, lo = ln_c + cfg.init_loss_excess_nats, h - cfg.init_loss_deficit_nats
    ev = (Evidence(label="loss at init (eval mode, batch 0)", value=loss),
          Evidence(label="ln C (uniform prediction)", value=ln_c, basis="estimated"),
          Evidence(label="loss / ln C", value=loss / ln_c),
          Evidence(label="label entropy of batch 0 (no input-blind prediction scores lower)",
                   value=h),
          Evidence(label="band", value=f"[{_g(lo)}, {_g(hi)}]", basis="estimated",
                   tolerance=f"entropy - {_g(cfg.init_loss_deficit_nats)} <= loss <= ln C + "
                   f"{_g(cfg.init_loss_excess_nats)} nats"))
    if not math.isfinite(loss):
        return failed(name, f"the loss at init is {loss}", "find the op that overflows at "
                      "init (inputs not normalized? a log of 0?)", *ev)
    if loss > hi:
        return failed(name, f"loss at init {_g(loss)} is {_g(loss / ln_c)}x ln C = {_g(ln_c)} "
                      f"(C = {c}): the model starts confidently wrong", "shrink the output "
                      "layer's init (e.g. normal std 0.02, or zero the last weight), remove any "
                      "scale on the logits, and make the loss a mean, not a sum", *ev)
    if loss < lo:
        return failed(name, f"loss at init {_g(loss)} is below the labels' entropy "
                      f"{_g(h)}: the model predicts the labels before training",
                      "check that the targets are not among the inputs (e.g. next-token "
                      "targets not shifted) and that the loss compares output and targets",
                      *ev)
    return passed(name, f"loss at init {_g(loss)} vs ln C = {_g(ln_c)} (C = {c}, ratio "
                  f"{_g(loss / ln_c)}; measured)", *ev)


# -- 5 --------------------------------------------------------------------------------------

def _has_batchnorm(model: torch.nn.Module) -> list[str]:
    return [n for n, m in model.named_modules()
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]


@_check("microbatch_equivalence", "k micro-batches of B/k give the gradient of one batch of B")
def microbatch_equivalence(s: Subject) -> CheckResult:
    name = "microbatch_equivalence"
    r, model, cfg = s.recipe, s.recipe.model, s.config
    bn = _has_batchnorm(model)
    if bn:
        return skipped(name, f"model has BatchNorm ({', '.join(bn[:3])}): its statistics "
                       "depend on the micro-batch, so micro-batch equivalence does not hold")
    if (why := s.label_problem()) is not None:
        return skipped(name, why)
    batch = s.batches[0]
    b = leading_size(batch)
    if b is None or b < 2:
        return skipped(name, f"batch size {b} < 2: nothing to split")
    k = r.grad_accum if r.grad_accum > 1 and b % r.grad_accum == 0 else \
        next(d for d in range(2, b + 1) if b % d == 0)
    try:
        parts = split_batch(batch, k)
    except Problem as exc:
        return skipped(name, f"cannot split the batch along dim 0: {exc.summary}")
    # Dropout off (eval): one batch and k chunks would draw different masks. fp32 and no
    # TF32: the comparison is of the loss's normalization, not of rounding.
    model.eval()
    _no_tf32()
    params = [p for _, p in s.trainable()]

    def grad_of(chunks: list[Any], seed: int) -> tuple[torch.Tensor, list[float]]:
        model.zero_grad(set_to_none=True)
        losses = []
        for chunk in chunks:
            torch.manual_seed(seed)
            loss = scalar_loss(r.loss_fn(model, chunk))
            (loss / len(chunks)).backward()
            losses.append(float(loss.detach()))
        return flat_grad(params), losses

    g_full, (full,) = grad_of([batch], cfg.seed)
    # The same batch again under another seed: if that moves the gradient, something random
    # is on in eval mode, and a split batch could not be told from a normalization bug.
    g_again, _ = grad_of([batch], cfg.seed + 1)
    noise = rel_l2(g_again, g_full)
    if noise > cfg.microbatch_tolerance:
        return skipped(name, f"the gradient of one batch moves by {_g(noise)} between two "
                       "runs with dropout off: randomness in the step (see mode_switch and "
                       "determinism), so a split batch cannot be compared",
                       Evidence(label="relative L2 difference of two runs of one batch",
                                value=noise, tolerance=f"<= {_g(cfg.microbatch_tolerance)}"))
    g_micro, micro_losses = grad_of(parts, cfg.seed)
    err = rel_l2(g_micro, g_full)
    norm_ratio = float(g_micro.norm() / g_full.norm()) if float(g_full.norm()) else math.inf
    mean_micro = sum(micro_losses) / k
    shape = f"{k} x {b // k} vs 1 x {b}"
    ev = (Evidence(label=f"relative L2 error of the gradient, {shape}", value=err,
                   tolerance=f"<= {_g(cfg.microbatch_tolerance)}"),
          Evidence(label="gradient norm ratio (micro / one batch)", value=norm_ratio),
          Evidence(label="loss of one batch", value=full),
          Evidence(label="mean loss of the micro-batches", value=mean_micro))
    if not err <= cfg.microbatch_tolerance:
        if abs(norm_ratio * k - 1) < 0.05:
            why_ = (f"the micro-batch gradient is 1/{k} of the one batch's: the loss is a sum "
                    "over the batch, not a mean")
            fix = ("return the mean over the micro-batch (reduction='mean'), or divide the sum "
                   "by the number of samples of the whole optimizer step")
        else:
            why_ = ("the loss is normalized per micro-batch by a count that differs between "
                    "micro-batches (e.g. a mean over each micro-batch's non-padding tokens)")
            fix = ("divide the summed token losses by the target-token count of the whole "
                   "optimizer step (all k micro-batches), as transformers >= 4.46 does with "
                   "num_items_in_batch")
        return failed(name, f"{shape}: gradient differs by {_g(err)} relative (> "
                      f"{_g(cfg.microbatch_tolerance)}); {why_}", fix, *ev)
    return passed(name, f"{shape}: gradient relative L2 error {_g(err)} <= "
                  f"{_g(cfg.microbatch_tolerance)} (measured; dropout off)", *ev)


# -- 6 --------------------------------------------------------------------------------------

_DROPOUT_TYPES = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d,
                  torch.nn.AlphaDropout, torch.nn.FeatureAlphaDropout)


@_check("mode_switch", "eval() turns dropout and BatchNorm updates off, train() on")
def mode_switch(s: Subject) -> CheckResult:
    name = "mode_switch"
    model, seed = s.recipe.model, s.config.seed
    # The model's own inputs, taken once: randomness in loss_fn (augmentation) is not the
    # model's mode (determinism sees it).
    inputs = s.forward_inputs(model, s.batches[0])
    if inputs is None:
        return skipped(name, "the loss never called the recipe's model: no output to compare")
    args, kwargs = inputs

    def output(mode_seed: int) -> torch.Tensor:
        torch.manual_seed(mode_seed)
        with torch.no_grad():
            out = output_tensor(model(*args, **kwargs))
        if out is None:
            raise Problem("the model's output holds no floating tensor", "")
        return out.detach().float().cpu().clone()

    model.eval()
    stuck_train = [n or "(model)" for n, m in model.named_modules() if m.training]
    before = {n: b.detach().clone() for n, b in model.named_buffers()}
    try:
        e1, e2 = output(seed), output(seed + 1)
    except Problem as exc:
        return skipped(name, exc.summary)
    changed = [n for n, b in model.named_buffers() if not torch.equal(b, before[n])]
    eval_diff = rel_l2(e2, e1)
    model.train()
    stuck_eval = [n or "(model)" for n, m in model.named_modules() if not m.training]
    t1, t2 = output(seed), output(seed + 1)
    train_diff = rel_l2(t2, t1)
    dropouts = [n for n, m in model.named_modules()
                if isinstance(m, _DROPOUT_TYPES) and m.p > 0]
    same = 1e-6  # relative L2; re-running a deterministic forward is bitwise on CPU
    ev = [Evidence(label="relative L2 difference of two eval forwards (seeds differ)",
                   value=eval_diff, tolerance=f"<= {same:g}"),
          Evidence(label="relative L2 difference of two train forwards (seeds differ)",
                   value=train_diff),
          Evidence(label="buffers changed by eval forwards", value=len(changed), tolerance="0"),
          Evidence(label="dropout modules with p > 0", value=len(dropouts))]
    problems, fixes = [], []
    if stuck_train or stuck_eval:
        names = tuple(stuck_train[:4]) + tuple(stuck_eval[:4])
        ev.append(Evidence(label="modules whose .training does not follow", value=names))
        problems.append(f"{len(stuck_train)} modules stay in train mode after eval(), "
                        f"{len(stuck_eval)} in eval after train() ({', '.join(names[:3])})")
        fixes.append("a module overriding train() must call super().train(mode)")
    if eval_diff > same:
        problems.append(f"two eval forwards of the same input differ by {_g(eval_diff)}: "
                        "randomness is on in eval (dropout hard-coded, e.g. F.dropout(x, p, "
                        "training=True), or noise in forward)")
        fixes.append("pass training=self.training to F.dropout, or use nn.Dropout modules")
    if changed:
        ev.append(Evidence(label="changed buffers", value=tuple(changed[:8])))
        problems.append(f"eval forwards changed {len(changed)} buffers "
                        f"({', '.join(changed[:3])}): BatchNorm statistics move in eval")
        fixes.append("let BatchNorm follow self.training (F.batch_norm(..., "
                     "training=self.training)); do not call .train() inside forward")
    if dropouts and train_diff <= same:
        ev.append(Evidence(label="dropout modules", value=tuple(dropouts[:8])))
        problems.append(f"{len(dropouts)} dropout modules with p > 0, yet two train forwards "
                        "with different seeds are equal: dropout is not applied in training")
        fixes.append("call the dropout modules in forward, with training=self.training")
    if problems:
        return failed(name, "; ".join(problems), "; ".join(fixes), *ev)
    what = "differ (dropout on)" if train_diff > same else "are equal (no dropout)"
    return passed(name, f"eval forwards equal, no buffer moved; train forwards {what} "
                  "(measured)", *ev)


# -- 7 --------------------------------------------------------------------------------------

@_check("determinism", "one step run twice from the same state and seed gives the same weights")
def determinism(s: Subject) -> CheckResult:
    name = "determinism"
    if (why := s.label_problem()) is not None:
        return skipped(name, why)
    r, tol = s.recipe, s.config.determinism_tolerance
    batches = s.batches[:r.grad_accum]
    start: torch.Tensor | None = None
    runs: list[tuple[float, torch.Tensor]] = []
    for _ in range(2):
        c = s.copies()
        if start is None:
            start = flat_params(c.model)
        s.seed()
        loss = s.step(c, batches)
        runs.append((loss, flat_params(c.model)))
        del c
    assert start is not None
    (l1, p1), (l2, p2) = runs
    bitwise = l1 == l2 and torch.equal(p1, p2)
    update = p1 - start
    diff = rel_l2(p2 - start, update)
    max_abs = float((p2 - p1).abs().max()) if p1.numel() else 0.0
    ev = (Evidence(label="loss of run 1, run 2", value=f"{l1!r}, {l2!r}"),
          Evidence(label="relative L2 difference of the update", value=diff,
                   tolerance=f"<= {_g(tol)}"),
          Evidence(label="largest |weight difference|", value=max_abs),
          Evidence(label="bitwise equal", value="yes" if bitwise else "no"),
          Evidence(label="micro-batches per step", value=len(batches)))
    if bitwise or diff <= tol:
        how = "bitwise" if bitwise else f"within {_g(tol)} (update differs by {_g(diff)})"
        return passed(name, f"two runs of one step from the same state and seed agree {how} "
                      "(measured)", *ev)
    return failed(name, f"two runs of one step from the same state and seed differ: the "
                  f"update by {_g(diff)} relative, losses {_g(l1)} vs {_g(l2)}",
                  "seed every random source the step draws from (a torch.Generator or "
                  "np.random.default_rng made without a seed, os.urandom, time); for "
                  "nondeterministic kernels torch.use_deterministic_algorithms(True)", *ev)


# -- 8 --------------------------------------------------------------------------------------

@_check("mixed_precision", "the loss and gradient under autocast match fp32")
def mixed_precision(s: Subject) -> CheckResult:
    name = "mixed_precision"
    r, model = s.recipe, s.recipe.model
    wanted = s.config.precisions or ((r.precision,) if r.precision != "fp32" else ())
    if not wanted:
        return skipped(name, "the recipe trains in fp32: no mixed precision to compare "
                       "(PreflightConfig(precisions=('bf16-mixed',)) compares one)")
    if (why := s.label_problem()) is not None:
        return skipped(name, why)
    runnable = []
    reasons = []
    for p in wanted:
        reason = autocast_support(p, s.device_type)
        (reasons.append(f"{p}: {reason}") if reason else runnable.append(p))
    if not runnable:
        return skipped(name, "; ".join(reasons))
    model.eval()  # dropout off: both passes see the same network
    _no_tf32()
    params = [p for _, p in s.trainable()]
    batch = s.batches[0]

    def loss_and_grad(precision: str, scale: float) -> tuple[float, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        s.seed()
        with autocast(precision, s.device_type):
            loss = scalar_loss(r.loss_fn(model, batch))
        (loss.float() * scale).backward()
        return float(loss.detach()), flat_grad(params) / scale

    l32, g32 = loss_and_grad("fp32", 1.0)
    ev: list[Evidence] = [Evidence(label="fp32 loss", value=l32)]
    problems = []
    for p in runnable:
        u = UNIT_ROUNDOFF[p]
        # fp16 gradients underflow without loss scaling: scale as the recipe's scaler would.
        scale = float(r.scaler.get_scale()) if p == "fp16-mixed" and r.scaler is not None \
            else 1.0
        lp, gp = loss_and_grad(p, scale)
        loss_err = abs(lp - l32) / max(abs(l32), 1e-12)
        grad_err = rel_l2(gp, g32)
        lt, gt = LOSS_TOLERANCE_U * u, GRAD_TOLERANCE_U * u
        ev += [Evidence(label=f"{p} loss", value=lp),
               Evidence(label=f"{p} loss relative error", value=loss_err,
                        tolerance=f"<= {LOSS_TOLERANCE_U} u = {_g(lt)}"),
               Evidence(label=f"{p} gradient relative L2 error", value=grad_err,
                        tolerance=f"<= {GRAD_TOLERANCE_U} u = {_g(gt)}")]
        if not (loss_err <= lt and grad_err <= gt):
            problems.append(f"{p}: loss off by {_g(loss_err)} (tol {_g(lt)}), gradient by "
                            f"{_g(grad_err)} (tol {_g(gt)})")
    note = f"; skipped {'; '.join(reasons)}" if reasons else ""
    if problems:
        return failed(name, "autocast does not match fp32: " + "; ".join(problems) + note,
                      "keep the fragile part in fp32 (with torch.autocast(device_type, "
                      "enabled=False): on .float() inputs): large offsets, sums of many "
                      "terms, unnormalized regression targets; or train in fp32", *ev)
    return passed(name, f"{', '.join(runnable)} match fp32 within tolerance (measured)"
                  f"{note}", *ev)


# -- 9 --------------------------------------------------------------------------------------

@_check("overfit_one_batch", "a bounded number of steps on one batch drives its loss down")
def overfit_one_batch(s: Subject) -> CheckResult:
    name = "overfit_one_batch"
    if (why := s.label_problem()) is not None:
        return skipped(name, why)
    cfg = s.config
    c = s.copies()
    for g in c.optimizer.param_groups:
        # A warm-up would keep the first steps tiny: step at each group's base rate.
        if "initial_lr" in g:
            g["lr"] = g["initial_lr"]
    lrs = sorted({float(g["lr"]) for g in c.optimizer.param_groups})
    batch = s.batches[0]
    s.seed()
    losses: list[float] = []
    t0 = time.perf_counter()
    reached = False
    while len(losses) < cfg.overfit_steps:
        losses.append(s.step(c, [batch]))
        if not math.isfinite(losses[-1]):
            break
        if losses[-1] <= cfg.overfit_factor * losses[0]:
            reached = True
            break
        if time.perf_counter() - t0 > cfg.overfit_budget_s:
            return skipped(name, f"time budget {_g(cfg.overfit_budget_s)} s ran out after "
                           f"{len(losses)} steps (loss {_g(losses[0])} -> {_g(losses[-1])})")
    elapsed = time.perf_counter() - t0
    target = cfg.overfit_factor * losses[0]
    ev = (Evidence(label="loss at step 0", value=losses[0]),
          Evidence(label="loss at the last step", value=losses[-1], reference=target,
                   tolerance=f"<= {_g(cfg.overfit_factor)} x the first"),
          Evidence(label="lowest loss", value=min(losses)),
          Evidence(label="steps", value=len(losses), tolerance=f"<= {cfg.overfit_steps}"),
          Evidence(label="learning rate(s)", value=", ".join(_g(x) for x in lrs)),
          Evidence(label="wall time, s", value=round(elapsed, 3)))
    if reached:
        return passed(name, f"loss {_g(losses[0])} -> {_g(losses[-1])} in {len(losses)} steps "
                      f"on one batch (measured)", *ev)
    if not math.isfinite(losses[-1]):
        return failed(name, f"the loss went {losses[-1]} at step {len(losses) - 1} of "
                      "training on one batch", "lower the learning rate or clip gradients "
                      "(max_grad_norm)", *ev)
    return failed(name, f"{len(losses)} steps on one batch took the loss only from "
                  f"{_g(losses[0])} to {_g(losses[-1])} (target {_g(target)})",
                  "check gradients_flow and optimizer_coverage; then that the lr "
                  f"({', '.join(_g(x) for x in lrs)}) is not tiny and the loss uses the "
                  "model's output for these targets", *ev)
