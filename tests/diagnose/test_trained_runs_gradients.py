"""``vanishing_gradients`` and ``nan_masked_in_logs`` on runs this suite really trains.

Same ground rules as test_trained_runs.py (whose helpers this file imports): tiny models on
CPU, the fault is in the training, never a number written into a log by hand.

- Vanishing gradients: a ReLU MLP trained with Adam, whose lr a schedule bug raises from 1e-3
  to 1.0 at step 60 ("1e-0" for "1e-3"). Adam moves every weight by ~lr per step whatever the
  gradient, so within a few steps the hidden ReLUs output 0 for every input: no gradient
  reaches anything below them and, the head having no bias (as LM heads usually have none),
  the whole gradient is exactly 0 from then on (after a few steps of flicker). The true onset
  is measured inside the model (a forward hook sees a hidden layer zero on every sample of
  the batch), not read off the log. A deep tanh MLP with N(0, 0.01) init, whose gradients
  vanish through depth from step 0, is the case the global grad_norm cannot show: it is
  named from the per-layer grad norms (the first layer's over the last's).
- NaN masked in logs: a hand-written binary cross-entropy ``-(y log p + (1-y) log(1-p))``
  without clamping. Once the model is confident, ``sigmoid`` rounds to exactly 1.0 in float32
  for a positive sample, ``(1-y) * log(1-p)`` is ``0 * -inf = NaN``, the NaN gradient poisons
  every weight and every later loss is NaN. The loop logs it the way the Hugging Face Trainer
  does (its ``logging_nan_inf_filter``, on by default) into a ``trainer_state.json``.
"""

from __future__ import annotations

import json
import math
import pathlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from test_trained_runs import WARNING_UP, blobs, describe, load, only, serious, train

from trainmedic.run import load_run

torch = pytest.importorskip("torch")
engine = pytest.importorskip("trainmedic.diagnose.engine")
F = torch.nn.functional


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tiny models: one thread is as fast; no torchrun variables (the store is per rank)."""
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ------------------------------------------------------------------ vanishing gradients
LR_BUG_STEP = 60
"""The step from which the schedule bug sets lr = 1.0 (the fault)."""


def _relu_mlp(width: int = 64) -> torch.nn.Module:
    # bias=False head: the logits are exactly 0 once a hidden layer is dead, so is every grad
    return torch.nn.Sequential(torch.nn.Linear(20, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 4, bias=False))


def _relu_run(run_dir: pathlib.Path, *, bad_lr: float | None, seed: int = 0,
              steps: int = 150) -> list[bool]:
    """Train the ReLU MLP on 4 Gaussian blobs with Adam (lr 1e-3; ``bad_lr`` from step 60 when
    given); returns, per step, whether a hidden ReLU layer was zero on every sample."""
    torch.manual_seed(seed)
    task = blobs(seed)
    model = _relu_mlp()
    dead_now: list[bool] = []
    relus = [m for m in model if isinstance(m, torch.nn.ReLU)]

    def hook(module: Any, inputs: Any, out: torch.Tensor) -> None:
        if module is relus[0]:
            dead_now.append(False)
        dead_now[-1] = dead_now[-1] or bool(out.detach().amax() == 0)

    for r in relus:
        r.register_forward_hook(hook)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    train(run_dir, model, opt, lambda s: task(128, s), F.cross_entropy, steps,
          lr_at=lambda s: bad_lr if bad_lr is not None and s >= LR_BUG_STEP else 1e-3)
    return dead_now


@pytest.mark.parametrize("seed", [0, 3])  # 0: dies at once; 3: flickers for a few steps
def test_vanishing_gradients_from_relus_killed_by_a_too_high_lr(tmp_path: pathlib.Path,
                                                                seed: int) -> None:
    dead = _relu_run(tmp_path, bad_lr=1.0, seed=seed)
    run = load(tmp_path)
    gn, loss = run.get("grad_norm"), run.get("loss")
    assert gn is not None and loss is not None
    # The fault really happened: a hidden layer died after the lr bug ...
    assert any(dead), "no hidden layer died: the fault did not happen"
    first_dead = dead.index(True)
    assert LR_BUG_STEP <= first_dead <= LR_BUG_STEP + 30, first_dead
    assert not any(dead[:LR_BUG_STEP])
    # ... and stayed dead: most late steps have an exactly-0 gradient and a loss of exactly
    # ln 4 (uniform logits over 4 classes), while it had learned before the bug.
    assert sum(dead[-30:]) >= 25 and np.median(gn.values[-30:]) == 0.0
    assert abs(np.median(loss.values[-30:]) - math.log(4)) < 1e-6
    assert np.median(loss.values[LR_BUG_STEP - 20:LR_BUG_STEP]) < 0.8

    found = only(run, "vanishing_gradients")
    assert found, describe(engine.diagnose(run))
    f = found[0]
    assert f.severity in WARNING_UP, f  # the loss went back to chance: not convergence
    # Onset. The truth is measured in the model: the first step a hidden layer was zero on
    # every sample of the batch. The detector names the first of >= 3 consecutive logged
    # zeros. Between the two: Adam's momentum keeps moving a dead layer for a few steps and
    # can bring a unit back for a step (seed 3: dead at 77, 80, 82, then for good at 84), and
    # a batch the saturated net gets all right also has an exactly-0 gradient (seed 1: one
    # step before). Allowed: 10 steps, 7% of this 150-step run.
    assert f.onset_step is not None and f.onset_step >= LR_BUG_STEP, f
    assert abs(f.onset_step - first_dead) <= 10, (f.onset_step, first_dead)
    named = {x.symptom for x in serious(engine.diagnose(run))}
    assert "vanishing_gradients" in named, describe(engine.diagnose(run))


def test_same_relu_mlp_trained_sanely_has_no_vanishing_gradients(tmp_path: pathlib.Path
                                                                  ) -> None:
    dead = _relu_run(tmp_path, bad_lr=None)
    run = load(tmp_path)
    loss = run.get("loss")
    assert loss is not None and not any(dead)
    assert loss.values[-20:].mean() < 0.6 * loss.values[:10].mean()  # it learned
    assert not only(run, "vanishing_gradients"), describe(engine.diagnose(run))


def _deep_tanh_run(run_dir: pathlib.Path, init_std: float | None) -> None:
    """An 8-layer tanh MLP on 4 blobs, SGD momentum; ``init_std``: every Linear initialised
    N(0, std) with zero bias (old Caffe-style defaults), None: PyTorch's default init.
    Per-layer gradient norms are logged as ``layer/<module path>/grad_norm`` (DESIGN.md's
    per-layer names), as a user of the minimal watcher would log them."""
    torch.manual_seed(0)
    task = blobs(0)
    dims = [20] + [32] * 8
    layers: list[torch.nn.Module] = []
    for a, b in zip(dims, dims[1:], strict=False):
        layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(32, 4))
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    if init_std is not None:
        for _, lin in linears:
            torch.nn.init.normal_(lin.weight, std=init_std)
            torch.nn.init.zeros_(lin.bias)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    from trainmedic.live import watch

    with watch(model, opt, run_dir=run_dir) as w:
        for step in range(200):
            x, y = task(256, step)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            w.log({f"layer/{name}/grad_norm": float(torch.linalg.vector_norm(torch.stack(
                [torch.linalg.vector_norm(p.grad) for p in lin.parameters()])))
                for name, lin in linears})
            opt.step()
            w.step(loss, batch_size=len(x))


def _depth_ratio(run: Any) -> float:
    """Median gradient norm of the first layer over that of the last (the head)."""
    first, last = run.get("layer/0/grad_norm"), run.get("layer/16/grad_norm")
    assert first is not None and last is not None
    return float(np.median(first.values) / np.median(last.values))


def test_deep_tanh_with_tiny_init_does_not_learn_and_is_flat(tmp_path: pathlib.Path) -> None:
    """Gradients vanish through depth from the first step (each tanh layer with N(0, 0.01)
    weights shrinks the backward signal ~0.01 * sqrt(32) = 0.06x): the run is named as not
    learning. The healthy init of the same net learns and its layers get comparable grads."""
    _deep_tanh_run(tmp_path / "tiny", init_std=0.01)
    run = load(tmp_path / "tiny")
    assert _depth_ratio(run) < 1e-6  # the fault really happened (measured ~4e-9)
    flat = only(run, "flat_loss")
    assert flat and flat[0].severity == "error", describe(engine.diagnose(run))  # at chance
    _deep_tanh_run(tmp_path / "default", init_std=None)
    ok = load(tmp_path / "default")
    assert _depth_ratio(ok) > 0.05  # measured ~0.5
    loss = ok.get("loss")
    assert loss is not None and loss.values[-20:].mean() < 0.5 * loss.values[:5].mean()
    assert not only(ok, "vanishing_gradients") and not only(ok, "flat_loss")


def test_vanishing_through_depth_is_named_from_per_layer_grad_norms(
        tmp_path: pathlib.Path) -> None:
    _deep_tanh_run(tmp_path, init_std=0.01)
    run = load(tmp_path)
    # The global grad_norm (~0.05, the head's bias gradient) stays flat over the run: only
    # the per-layer rule sees it, layer/0/grad_norm ~1e-8 x the head's (layer/16).
    found = only(run, "vanishing_gradients")
    assert found and found[0].severity in WARNING_UP, describe(engine.diagnose(run))
    f = found[0]
    assert f.onset_step == 0, f  # vanished from the first step
    assert "layer/0/grad_norm" in {e.metric for e in f.evidence}, f
    assert "'0'" in f.summary and "'16'" in f.summary, f.summary


# ------------------------------------------------------------------- nan_masked_in_logs
LOGGING_STEPS = 10
MAX_STEPS = 200
STEPS_PER_EPOCH = 40


@dataclass(frozen=True)
class _Steps:
    """What one real training run produced at each optimizer step (index = global_step - 1)."""

    loss: list[float]
    """The step's loss (``tr_loss_step`` in the Trainer)."""
    grad_norm: list[float]
    """The total norm ``clip_grad_norm_`` returned (before clipping), as the Trainer logs it."""
    lr_after: list[float]
    """``lr_scheduler.get_last_lr()[0]`` after the step: what ``_get_learning_rate`` logs."""


def _naive_bce(p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy written out, without the clamp ``F.binary_cross_entropy`` has."""
    return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()


def _halfspace(seed: int) -> Any:
    """Labels ``x . w > 0``, no label noise: separable, so the logistic loss keeps pushing
    the logits out and the model grows ever more confident (nothing bounds the weights)."""
    w = torch.randn(20, generator=torch.Generator().manual_seed(seed))

    def sample(n: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(n, 20, generator=torch.Generator().manual_seed(seed * 100_003 + step))
        return x, (x @ w > 0).float()
    return sample


def _train_naive_bce(seed: int = 0) -> _Steps:
    """The Trainer's inner loop for one GPU, no gradient accumulation, its defaults
    (``max_grad_norm=1.0``, AdamW, linear decay to 0): forward, backward, clip, step."""
    torch.manual_seed(seed)
    task = _halfspace(seed)
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 1), torch.nn.Sigmoid(),
                                torch.nn.Flatten(0))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / MAX_STEPS))
    out = _Steps([], [], [])
    for step in range(MAX_STEPS):
        x, y = task(64, step)
        loss = _naive_bce(model(x), y)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        out.loss.append(float(loss.detach()))
        out.grad_norm.append(float(gn))
        out.lr_after.append(float(sched.get_last_lr()[0]))
    return out


def _trainer_state(steps: _Steps, nan_inf_filter: bool) -> dict[str, Any]:
    """The ``log_history`` the HF Trainer writes for these steps, ``logging_steps`` = 10.

    transformers/trainer.py, ``_inner_training_loop``: per step,
        if args.logging_nan_inf_filter and (isnan(tr_loss_step) or isinf(tr_loss_step)):
            # if loss is nan or inf simply add the average of previous logged losses
            tr_loss += tr_loss / (1 + self.state.global_step - self._globalstep_last_logged)
        else:
            tr_loss += tr_loss_step
    (``global_step`` is incremented after this), and ``_maybe_log_save_evaluate`` at a logging
    step: ``loss = round(tr_loss / (global_step - _globalstep_last_logged), 4)``, ``grad_norm``
    = the norm of the last step, ``learning_rate``, then ``tr_loss`` is reset to 0; ``log()``
    adds ``epoch`` and ``step``. A window where every step was NaN therefore logs 0.0.
    """
    tr_loss = 0.0
    total = 0.0
    last_logged = 0
    history: list[dict[str, Any]] = []
    for i, loss in enumerate(steps.loss):
        global_step = i  # before the increment, as at the filter in the Trainer
        if nan_inf_filter and not math.isfinite(loss):
            tr_loss += tr_loss / (1 + global_step - last_logged)
        else:
            tr_loss += loss
        global_step = i + 1
        if global_step % LOGGING_STEPS == 0:
            history.append({
                "loss": round(tr_loss / (global_step - last_logged), 4),
                "grad_norm": steps.grad_norm[i],
                "learning_rate": steps.lr_after[i],
                "epoch": global_step / STEPS_PER_EPOCH,
                "step": global_step,
            })
            total += tr_loss
            tr_loss = 0.0
            last_logged = global_step
    history.append({"epoch": MAX_STEPS / STEPS_PER_EPOCH, "step": MAX_STEPS,
                    "total_flos": 0.0, "train_loss": total / MAX_STEPS,
                    "train_runtime": 1.0, "train_samples_per_second": 12800.0,
                    "train_steps_per_second": 200.0})
    return {"best_metric": None, "epoch": MAX_STEPS / STEPS_PER_EPOCH, "global_step": MAX_STEPS,
            "is_hyper_param_search": False, "logging_steps": LOGGING_STEPS,
            "max_steps": MAX_STEPS, "num_train_epochs": MAX_STEPS // STEPS_PER_EPOCH,
            "save_steps": 500, "train_batch_size": 64, "log_history": history}


def _write(tmp_path: pathlib.Path, state: dict[str, Any]) -> pathlib.Path:
    # TrainerState.save_to_json: json.dumps(asdict(self), indent=2, sort_keys=True) + "\n";
    # Python's json writes a non-finite float as the bare token NaN / Infinity.
    path = tmp_path / "checkpoint-200" / "trainer_state.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    return path


@pytest.fixture(scope="module")
def naive_bce_steps() -> _Steps:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train_naive_bce()
    finally:
        torch.set_num_threads(before)


def _first_nan_step(steps: _Steps) -> int:
    """The global_step (1-based, as logged) of the first non-finite loss."""
    return next(i for i, v in enumerate(steps.loss) if not math.isfinite(v)) + 1


def test_hf_nan_filter_masks_a_nan_loss_and_is_named(tmp_path: pathlib.Path,
                                                     naive_bce_steps: _Steps) -> None:
    steps = naive_bce_steps
    first_nan = _first_nan_step(steps)  # the fault really happened, mid-run
    assert 2 * LOGGING_STEPS <= first_nan <= MAX_STEPS - 3 * LOGGING_STEPS, first_nan
    assert not any(math.isfinite(v) for v in steps.loss[first_nan - 1:])  # and stayed
    run = load_run(str(_write(tmp_path, _trainer_state(steps, nan_inf_filter=True))))
    loss, gn = run.get("loss"), run.get("grad_norm")
    assert loss is not None and gn is not None
    # The logged loss column alone is unremarkable: all finite, ending at exactly 0.0 (which
    # reads as "converged"); the grad_norm column carries the NaN.
    assert np.all(np.isfinite(loss.values)) and len(loss.values) == MAX_STEPS // LOGGING_STEPS
    assert loss.values[-1] == 0.0
    assert not np.all(np.isfinite(gn.values))
    assert not only(run, "nonfinite_loss")

    found = only(run, "nan_masked_in_logs")
    assert found, describe(engine.diagnose(run))
    f = found[0]
    # Onset: the first logging step at or after the first NaN step (its row already has the
    # NaN grad norm: the last step of that window ran on poisoned weights, or was the NaN one).
    expected = math.ceil(first_nan / LOGGING_STEPS) * LOGGING_STEPS
    assert f.onset_step == expected, (f.onset_step, first_nan)
    assert f.severity == "error", f  # grad_norm non-finite to the end over >= 2 points
    assert f.confidence >= 0.9, f  # recognised as an HF Trainer log
    diag = engine.diagnose(run)
    roots = [x for x in serious(diag) if x.symptom == "nan_masked_in_logs"]
    assert roots and roots[0].onset_step == expected, describe(diag)


def test_same_run_logged_without_the_filter_shows_nonfinite_loss(
        tmp_path: pathlib.Path, naive_bce_steps: _Steps) -> None:
    """``logging_nan_inf_filter=False``: the same steps, the NaN reaches the logged loss."""
    steps = naive_bce_steps
    run = load_run(str(_write(tmp_path, _trainer_state(steps, nan_inf_filter=False))))
    expected = math.ceil(_first_nan_step(steps) / LOGGING_STEPS) * LOGGING_STEPS
    nl = only(run, "nonfinite_loss")
    assert nl and nl[0].onset_step == expected and nl[0].severity == "error", (
        nl, describe(engine.diagnose(run)))
    assert not only(run, "nan_masked_in_logs"), describe(engine.diagnose(run))


def test_hf_nan_filter_without_a_grad_norm_column_is_still_named(
        tmp_path: pathlib.Path, naive_bce_steps: _Steps) -> None:
    """Trainer versions before ``grad_norm`` was logged (and any run that drops the column):
    the only trace left is the logged loss falling to exactly 0.0, the value the filter gives
    a window in which every step was NaN (``tr_loss`` stays 0, then is divided)."""
    steps = naive_bce_steps
    state = _trainer_state(steps, nan_inf_filter=True)
    for row in state["log_history"]:
        row.pop("grad_norm", None)
    run = load_run(str(_write(tmp_path, state)))
    assert run.get("grad_norm") is None
    first_nan = _first_nan_step(steps)
    found = only(run, "nan_masked_in_logs")
    assert found and found[0].severity in WARNING_UP, describe(engine.diagnose(run))
    # The window holding the first NaN step still logs a plausible average of its finite
    # losses (plus the filter's stand-ins); the first 0.0 is the next logging step. The log
    # cannot show more, so the onset may be one logging interval late.
    first_all_nan_window = (math.ceil(first_nan / LOGGING_STEPS)
                            + (first_nan % LOGGING_STEPS != 1)) * LOGGING_STEPS
    assert found[0].onset_step == first_all_nan_window, (found[0].onset_step, first_nan)
    assert found[0].onset_step - first_nan < 2 * LOGGING_STEPS
    assert not only(run, "nonfinite_loss")
