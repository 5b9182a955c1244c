"""The HF Trainer callback, run with the real transformers Trainer on a tiny GPT-2 on CPU."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

# Before transformers (and huggingface_hub, which reads these at import) is imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
# tqdm's monitor thread would outlive these tests; tests that fork (the CSV reader's
# two-process path) refuse to while another thread runs, whatever order the suite runs in.
pytest.importorskip("tqdm").tqdm.monitor_interval = 0

from trainmedic.diagnose.engine import diagnose  # noqa: E402
from trainmedic.errors import ConfigError  # noqa: E402
from trainmedic.live.hf_callback import TrainmedicCallback, eval_row  # noqa: E402
from trainmedic.live.norms import GradNorm  # noqa: E402
from trainmedic.run.loader import load_paths  # noqa: E402

VOCAB, SEQ = 64, 16


@pytest.fixture(autouse=True)
def _few_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class _Tokens(torch.utils.data.Dataset):
    """Sequences with a learnable rule (next token = token + 1 mod VOCAB) from random starts."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        starts = torch.randint(0, VOCAB, (n, 1), generator=g)
        self.ids = (starts + torch.arange(SEQ)) % VOCAB

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _model():
    cfg = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=VOCAB,
                                  n_positions=32)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg)


def _train(tmp_path, *, steps, accum, logging_steps, max_grad_norm, eval_steps=None,
           compute_loss_func=None, more_callbacks=(), save_steps=None, **watch_kwargs):
    run_dir = tmp_path / "run"
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=steps, per_device_train_batch_size=4,
        per_device_eval_batch_size=8, gradient_accumulation_steps=accum,
        learning_rate=5e-3, lr_scheduler_type="linear", warmup_steps=3,
        max_grad_norm=max_grad_norm, logging_steps=logging_steps,
        eval_strategy="steps" if eval_steps else "no", eval_steps=eval_steps,
        save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500,
        report_to=[], use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0, seed=0,
    )
    cb = TrainmedicCallback(run_dir=run_dir, **watch_kwargs)
    trainer = transformers.Trainer(
        model=_model(), args=args, train_dataset=_Tokens(256, 1),
        eval_dataset=_Tokens(16, 2) if eval_steps else None,
        callbacks=[cb, *more_callbacks],
        compute_loss_func=compute_loss_func,
    )
    trainer.train()
    assert cb.watcher is None  # closed at on_train_end
    return run_dir, trainer.state.log_history


def _series(run, name):
    s = run.get(name, None)
    return dict(zip(s.steps.tolist(), s.values.tolist(), strict=True))


def test_grad_accumulation_run_matches_the_trainers_own_logs(tmp_path, monkeypatch):
    steps, accum, every, clip = 20, 2, 5, 0.05
    passes = []  # how often the gradients are read for a norm: once per step
    norm_of_grads = GradNorm.__call__
    monkeypatch.setattr(GradNorm, "__call__",
                        lambda self: passes.append(1) or norm_of_grads(self))
    run_dir, history = _train(tmp_path, steps=steps, accum=accum, logging_steps=every,
                              max_grad_norm=clip, eval_steps=10)
    assert len(passes) == steps
    run = load_paths([str(run_dir)])
    want = list(range(1, steps + 1))  # HF's global_step after each optimizer step
    for name in ("loss", "lr", "grad_norm", "step_time_s", "data_time_s", "samples_per_s",
                 "tokens_per_s"):
        got = _series(run, name)
        assert sorted(got) == want, name
        assert all(np.isfinite(v) for v in got.values()), name
    loss, gn, lr = _series(run, "loss"), _series(run, "grad_norm"), _series(run, "lr")
    samples = _series(run, "samples_per_s")
    times = _series(run, "step_time_s")
    assert samples[5] == pytest.approx(4 * accum / times[5], rel=1e-6)  # both micro-batches

    train_logs = [h for h in history if "loss" in h and "eval_loss" not in h
                  and "train_runtime" not in h]
    assert [h["step"] for h in train_logs] == list(range(every, steps + 1, every))
    for h in train_logs:
        window = [loss[s] for s in range(h["step"] - every + 1, h["step"] + 1)]
        assert np.mean(window) == pytest.approx(h["loss"], rel=1e-5, abs=1e-6)
        # HF logs the pre-clip norm of the logging step; ours is the same, not the clipped one
        assert gn[h["step"]] == pytest.approx(h["grad_norm"], rel=1e-4)
        assert gn[h["step"]] > clip * 1.5
        assert lr[h["step"]] == pytest.approx(h["learning_rate"], rel=1e-6)
    assert loss[steps] < loss[1]  # it learned: the per-step values are a real training curve

    evals = {h["step"]: h["eval_loss"] for h in history if "eval_loss" in h}
    assert set(evals) == {10, 20}
    val = _series(run, "val_loss")
    assert val == pytest.approx(evals, rel=1e-6)
    assert "eval_runtime" in run.metrics() and "eval_loss" not in run.metrics()

    diag = diagnose(run)
    assert isinstance(diag.findings, list)
    for f in diag.findings:
        assert f.symptom not in {"nonfinite_loss", "exploding_gradients"}, f.summary


def test_every_step_without_clipping_or_accumulation_equals_each_logged_step(tmp_path):
    run_dir, history = _train(tmp_path, steps=8, accum=1, logging_steps=1, max_grad_norm=0.0)
    run = load_paths([str(run_dir)])
    loss, gn = _series(run, "loss"), _series(run, "grad_norm")
    logs = {h["step"]: h for h in history if "loss" in h and "train_runtime" not in h}
    assert sorted(logs) == sorted(loss) == list(range(1, 9))
    for s, h in logs.items():
        assert loss[s] == pytest.approx(h["loss"], rel=1e-5)
        assert gn[s] == pytest.approx(h["grad_norm"], rel=1e-4)


def test_a_loss_computed_outside_the_model_falls_back_to_the_logged_windows(tmp_path, caplog):
    def loss_fn(outputs, labels, num_items_in_batch=None):
        logits = outputs["logits"][:, :-1].reshape(-1, VOCAB)
        return torch.nn.functional.cross_entropy(logits, labels[:, 1:].reshape(-1))

    run_dir, history = _train(tmp_path, steps=4, accum=1, logging_steps=2, max_grad_norm=0.05,
                              compute_loss_func=loss_fn)
    run = load_paths([str(run_dir)])
    logged = {h["step"]: h for h in history if "loss" in h and "train_runtime" not in h}
    assert _series(run, "loss") == pytest.approx({s: h["loss"] for s, h in logged.items()})
    assert run.meta.get("loss_source") == "trainer_log_window_mean"
    assert "returns no loss" in caplog.text
    gn = _series(run, "grad_norm")  # still pre-clip, anchored on the logits' backward
    assert sorted(gn) == [1, 2, 3, 4]
    for s, h in logged.items():
        assert gn[s] == pytest.approx(h["grad_norm"], rel=1e-4)


class _PoisonOutput(transformers.TrainerCallback):
    """Makes the first MLP's input projection output inf during optimizer step ``at`` (a
    forward hook, so the NaN guard's replay of that step reproduces it)."""

    def __init__(self, at: int) -> None:
        self.at, self.on, self.handle = at, False, None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        def hook(module, inputs, output):
            return output * float("inf") if self.on else output
        self.handle = model.transformer.h[0].mlp.c_fc.register_forward_hook(hook)

    def on_step_begin(self, args, state, control, **kwargs):
        self.on = state.global_step + 1 == self.at

    def on_step_end(self, args, state, control, **kwargs):
        self.on = False

    def on_train_end(self, args, state, control, **kwargs):
        self.handle.remove()


def test_a_nonfinite_step_is_skipped_and_the_first_bad_module_named(tmp_path):
    run_dir, _ = _train(tmp_path, steps=5, accum=2, logging_steps=1, max_grad_norm=1.0,
                        more_callbacks=[_PoisonOutput(at=3)])
    run = load_paths([str(run_dir)])
    loss = _series(run, "loss")
    assert [np.isfinite(loss[s]) for s in range(1, 6)] == [True, True, False, True, True]
    events = run.events_of("nonfinite")
    assert [e.step for e in events] == [3]  # HF's step numbering, like the metrics
    first = events[0].data
    # CPU default: the update is dropped (so step 4 is healthy again) and the step replayed
    # from its inputs, which names the module whose output went non-finite first.
    assert first["update_skipped"] is True
    assert first["module"] == "transformer.h.0.mlp.c_fc", first
    assert first["where"] == "forward", first


def test_the_stop_file_ends_the_trainer_early_and_saves(tmp_path):
    class _Touch(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                (tmp_path / "run" / "STOP").touch()

    run_dir, _ = _train(tmp_path, steps=20, accum=1, logging_steps=5, max_grad_norm=1.0,
                        more_callbacks=[_Touch()], save_steps=1000, alert_every=2,
                        alert_window=4)
    steps = sorted(_series(load_paths([str(run_dir)]), "loss"))
    assert 4 <= steps[-1] < 20  # stopped at the next check after the file appeared
    assert (tmp_path / "out" / f"checkpoint-{steps[-1]}").is_dir()  # save-and-stop


_DDP_SCRIPT = """
import json, os, sys
import torch, transformers
from trainmedic.live.hf_callback import TrainmedicCallback
torch.set_num_threads(1)
V, T = 64, 16
class DS(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, V, (64, T), generator=g)
    def __len__(self):
        return len(self.ids)
    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}
out = sys.argv[1]
torch.manual_seed(0)
model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
    n_layer=1, n_embd=16, n_head=2, vocab_size=V, n_positions=32))
args = transformers.TrainingArguments(
    output_dir=out + "/o", max_steps=4, per_device_train_batch_size=4,
    gradient_accumulation_steps=2, max_grad_norm=0.05, logging_steps=1, save_strategy="no",
    report_to=[], use_cpu=True, disable_tqdm=True, ddp_backend="gloo", seed=0)
trainer = transformers.Trainer(model=model, args=args, train_dataset=DS(),
                               callbacks=[TrainmedicCallback(run_dir=out + "/run")])
trainer.train()
if args.process_index == 0:
    with open(out + "/history.json", "w") as f:
        json.dump(trainer.state.log_history, f)
# Done: tear the group down and leave without the exit-time destructors, where gloo's
# threads once aborted a rank on a 2-core CI machine (tests/checkpoint/sharded_worker.py).
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
"""


def test_under_ddp_each_rank_records_the_all_reduced_pre_clip_norm(tmp_path):
    script = tmp_path / "ddp_train.py"
    script.write_text(_DDP_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           "--standalone", str(script), str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    history = [h for h in json.loads((tmp_path / "history.json").read_text())
               if "grad_norm" in h]
    run = load_paths([str(tmp_path / "run")])
    assert run.ranks() == [0, 1]
    for rank in (0, 1):
        gn = dict(zip(*(a.tolist() for a in (run.get("grad_norm", rank).steps,
                                               run.get("grad_norm", rank).values)),
                      strict=True))
        # Taken after DDP's all-reduce (not this rank's local gradients) and before clipping:
        # HF's logged pre-clip norm, on both ranks.
        assert gn == pytest.approx({h["step"]: h["grad_norm"] for h in history}, rel=1e-4)
    # HF logs the mean over ranks of each rank's loss.
    losses = [run.get("loss", r).values for r in (0, 1)]
    assert np.mean(losses, axis=0).tolist() == pytest.approx([h["loss"] for h in history],
                                                             rel=1e-5)
    assert not np.allclose(losses[0], losses[1])  # the ranks saw different batches


def test_eval_row_renames_only_the_loss():
    row = eval_row({"eval_loss": 1.5, "eval_runtime": 0.2, "eval_samples_per_second": 9.0,
                    "eval_accuracy": 0.5, "epoch": 1.0, "eval_note": "x"})
    assert row == {"val_loss": 1.5, "eval_runtime": 0.2, "eval_samples_per_second": 9.0,
                   "eval_accuracy": 0.5}


def test_bad_watcher_arguments_are_refused_when_the_callback_is_made(tmp_path):
    with pytest.raises(ConfigError, match="fetch_evry"):
        TrainmedicCallback(run_dir=tmp_path, fetch_evry=5)
    with pytest.raises(ConfigError, match="start_step.*set by the callback"):
        TrainmedicCallback(run_dir=tmp_path, start_step=3)


def test_a_missing_extra_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    monkeypatch.delitem(sys.modules, "trainmedic.live.hf_callback")
    with pytest.raises(ImportError, match=r"pip install 'trainmedic\[hf\]'"):
        importlib.import_module("trainmedic.live.hf_callback")


def test_importing_the_live_package_does_not_import_transformers():
    code = ("import sys, trainmedic.live; "
            "sys.exit('transformers' in sys.modules or 'accelerate' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
