"""Names the alias table does not list: namespaces, sides, units, rates, loss words, eval
sets and GAN pairs (trainmedic.run.vocabulary / guess)."""

from __future__ import annotations

import pytest

from trainmedic.diagnose import diagnose
from trainmedic.run import load_run
from trainmedic.run.names import resolve_names
from trainmedic.run.vocabulary import read_name


@pytest.mark.parametrize("raw,canonical", [
    ("perf/step_time_s", "step_time_s"), ("sys/rss_mb", "rss_mb"),
    ("time/step_time_s", "step_time_s"), ("train/perf/tokens_per_s", "tokens_per_s"),
    ("trainer/lr", "lr"), ("optimizer/lr", "lr"), ("throughput/samples_per_sec", "samples_per_s"),
    ("tokens_per_sec", "tokens_per_s"), ("data_time", "data_time_s"),
    ("max_mem_mb", "mem_peak_mb"), ("gpu_util_pct", "gpu_util"),
    ("perf/data_ms", "data_time_s"), ("data_s", "data_time_s"),
    # a name ending in "_step" that is no per-step aggregate of another name
    ("time_per_step", "step_time_s"), ("seconds_per_step", "step_time_s"),
    # the whole model's norm under a gradient namespace (not one module's)
    ("grad_norm/total", "grad_norm"), ("grads/norm", "grad_norm"), ("loss_value", "loss"),
    # a namespace joined by "_" (TensorBoard's CSV export names a tag's file so)
    ("perf_step_time_ms", "step_time_s"), ("sys_rss_mb", "rss_mb"), ("loss_scale", "loss_scale"),
])
def test_namespaced_and_unit_names_read(raw, canonical):
    r = read_name(raw)
    assert r is not None and r.canonical == canonical


@pytest.mark.parametrize("cols,expected", [
    # torchtune: get_memory_stats() in GiB without a unit in the name
    (["step", "loss", "lr", "peak_memory_alloc", "peak_memory_reserved"],
     {"mem_peak_mb": "peak_memory_alloc", "mem_reserved_mb": "peak_memory_reserved"}),
    # Megatron-LM's iteration line as columns
    (["iteration", "lm loss", "elapsed time per iteration (ms)", "learning rate"],
     {"loss": "lm loss", "step_time_s": "elapsed time per iteration (ms)", "lr": "learning rate"}),
    # NeMo: the unit after "in"
    (["global_step", "reduced_train_loss", "train_step_timing in s"],
     {"loss": "reduced_train_loss", "step_time_s": "train_step_timing in s"}),
    (["epoch", "avg_epoch_loss", "validation_avg_epoch_loss"],
     {"loss": "avg_epoch_loss", "val_loss": "validation_avg_epoch_loss"}),
    (["iteration", "train/loss", "valid/loss", "optim0_lr0", "gpu_max_cached_mem_GB"],
     {"lr": "optim0_lr0", "mem_reserved_mb": "gpu_max_cached_mem_GB"}),
    (["global_step", "loss", "interval_samples_per_second"],
     {"samples_per_s": "interval_samples_per_second"}),
    (["time/total_timesteps", "train/loss", "time/fps"], {"samples_per_s": "time/fps"}),
    (["step", "loss", "throughput(tps)"], {"tokens_per_s": "throughput(tps)"}),
    (["step", "loss", "global_step/sec"], {"step_time_s": "global_step/sec"}),
])
def test_framework_column_sets_map(cols, expected, tmp_path):
    # Read as a user's CSV would be: every column a number, the first one the step.
    p = tmp_path / "metrics.csv"
    rows = [",".join(f'"{c}"' for c in cols)]
    rows += [",".join([str(10 * i)] + [f"{1.0 + 0.01 * i + 0.001 * j:.4f}"
                                       for j in range(1, len(cols))]) for i in range(12)]
    p.write_text("\n".join(rows) + "\n")
    mapping = diagnose(load_run(str(p))).mapping
    got = {m["canonical"]: m["column"] for m in mapping if m.get("canonical")}
    for canonical, raw in expected.items():
        assert got.get(canonical) == raw, (canonical, raw, got)


@pytest.mark.parametrize("raw,factor", [
    ("perf/step_time_ms", 1e-3), ("iter_time_ms", 1e-3), ("ms_per_batch", 1e-3),
    ("ms/batch", 1e-3), ("data_time_ms", 1e-3), ("memory_allocated_gb", 1024.0),
    ("gpu_mem_gib", 1024.0), ("time_ms", 1e-3), ("step_ms", 1e-3),
])
def test_units_convert_to_the_canonical_unit(raw, factor):
    r = read_name(raw)
    assert r is not None and r.factor == pytest.approx(factor)


@pytest.mark.parametrize("raw", [
    "train_loss", "training_loss", "loss_train", "total_loss", "tr_loss", "avg_loss",
    "running_loss", "objective", "nll", "nll_loss", "ce_loss", "cross_entropy", "mse",
    "mse_loss", "recon_loss", "reconstruction_loss", "l1_loss", "epoch_loss", "batch_loss",
    "train/loss_epoch", "loss/train", "Loss", "train_total_loss", "model/train/loss",
])
def test_the_fields_words_for_loss(raw):
    res = resolve_names(["step", raw, "acc"])
    assert res.aliases.get("loss") == raw


@pytest.mark.parametrize("raw", [
    "val_loss", "valid_loss", "validation_loss", "eval_loss", "val/loss", "loss/val",
    "loss/valid", "val_total_loss", "eval/loss", "validation/loss",
])
def test_validation_loss_words(raw):
    assert resolve_names(["step", "loss", raw]).aliases.get("val_loss") == raw


def test_test_loss_is_the_val_loss_only_without_a_val_loss():
    assert resolve_names(["epoch", "train_loss", "test_loss"]).aliases["val_loss"] == \
        "test_loss"
    res = resolve_names(["epoch", "train_loss", "test_loss", "val_loss"])
    assert res.aliases["val_loss"] == "val_loss"


def test_loss_is_preferred_over_its_qualified_forms():
    assert resolve_names(["loss", "nll_loss"]).aliases["loss"] == "loss"
    assert resolve_names(["nll_loss", "avg_loss"]).aliases["loss"] == "avg_loss"
    assert resolve_names(["train/loss_epoch", "train/loss_step"]).aliases["loss"] == \
        "train/loss_step"


def test_components_are_not_the_loss():
    res = resolve_names(["step", "train/box_loss", "loss_cls", "test_loss_ce"])
    assert "loss" not in res.aliases and "val_loss" not in res.aliases


def test_exact_beats_alias_beats_namespace():
    res = resolve_names(["step", "step_time_s", "perf/step_time_ms", "iteration_time"])
    assert res.aliases["step_time_s"] == "step_time_s" and res.how["step_time_s"] == "canonical"
    res = resolve_names(["step", "perf/step_time_ms", "iteration_time"])
    assert res.aliases["step_time_s"] == "iteration_time" and res.how["step_time_s"] == "alias"
    res = resolve_names(["step", "perf/step_time_ms"])
    assert res.how["step_time_s"] == "unit ms->s" and res.scales["step_time_s"] == 1e-3


def test_iterations_per_second_invert_only_without_a_step_time():
    res = resolve_names(["step", "it/s"])
    assert "step_time_s" not in res.aliases and res.inverted["step_time_s"] == "it/s"
    res = resolve_names(["step", "it/s", "iter_time_ms"])
    assert res.aliases["step_time_s"] == "iter_time_ms" and "step_time_s" not in res.inverted


def test_validation_timings_are_not_the_step_time():
    assert "step_time_s" not in resolve_names(["step", "val/step_time"]).aliases


@pytest.mark.parametrize("names,plain,others", [
    (["loss", "eval_g0_loss", "eval_g1_loss", "eval_g2_loss"], "eval_g0_loss",
     {"val_loss/g1": "eval_g1_loss", "val_loss/g2": "eval_g2_loss"}),
    (["loss", "eval_loss", "eval_ood_loss"], "eval_loss", {"val_loss/ood": "eval_ood_loss"}),
    (["loss", "val/a/loss", "val/b/loss"], "val/a/loss", {"val_loss/b": "val/b/loss"}),
    (["loss", "a/eval_loss", "b/eval_loss"], "a/eval_loss", {"val_loss/b": "b/eval_loss"}),
    (["loss", "val_loss/x", "val_loss/y"], "val_loss/x", {"val_loss/y": "val_loss/y"}),
])
def test_several_eval_sets(names, plain, others):
    res = resolve_names(names)
    assert res.aliases["val_loss"] == plain
    for k, v in others.items():
        assert res.aliases[k] == v


def test_a_single_eval_set_stays_val_loss():
    res = resolve_names(["loss", "eval_g0_loss"])
    assert res.aliases["val_loss"] == "eval_g0_loss"
    assert not any(k.startswith("val_loss/") for k in res.aliases)


@pytest.mark.parametrize("g,d", [("G_loss", "D_loss"), ("g_loss", "d_loss"),
                                 ("loss_G", "loss_D"), ("gen_loss", "disc_loss"),
                                 ("generator_loss", "discriminator_loss")])
def test_gan_pairs(g, d):
    res = resolve_names(["epoch", g, d])
    assert res.aliases["loss"] == g and res.meta["objective"] == "adversarial"
    assert res.rename().get(d, d) == "d_loss"


def test_two_models_side_by_side():
    res = resolve_names(["cls_loss", "cls_val_loss", "reg_loss", "reg_val_loss"])
    assert res.aliases["loss"] == "cls_loss" and res.aliases["val_loss"] == "cls_val_loss"
    assert res.aliases["val_loss/reg"] == "reg_val_loss"


@pytest.mark.parametrize("raw,canonical", [("loss/total", "loss"), ("losses/train/total", "loss"),
                                           ("losses/val/total", "val_loss")])
def test_total_under_a_loss_namespace(raw, canonical):
    assert resolve_names(["step", raw]).aliases.get(canonical) == raw


@pytest.mark.parametrize("raw", ["layer/encoder.0/grad_norm", "gradients/fc1/grad_norm",
                                 "layers/3/update_ratio", "model.layers.0.mlp/param_norm"])
def test_per_module_metrics_are_not_the_runs(raw):
    assert read_name(raw) is None


@pytest.mark.parametrize("raw,canonical", [("Loss (train)", "loss"), ("Loss (val)", "val_loss"),
                                           ("Train Loss", "loss"), ("Validation Loss", "val_loss"),
                                           ("step time [ms]", "step_time_s")])
def test_spelled_out_names(raw, canonical):
    r = read_name(raw)
    assert r is not None and r.canonical == canonical


def test_a_bare_data_column_is_not_taken_for_the_data_wait():
    # "data 50000" beside "time 120.5s" is a count, not seconds spent waiting for data
    assert read_name("data") is None and read_name("dataloader") is None


@pytest.mark.parametrize("name", ["valLoss", "ValidationLoss", "Perf/StepTime_ms"])
def test_camel_case_columns_read_like_their_snake_case_twins(tmp_path, name):
    # the table's keys are matched in lower case, where "valLoss" lost its word boundary
    p = tmp_path / "log.csv"
    p.write_text(f"step,loss,{name}\n" + "".join(f"{10 * i},{2 - i / 50},{1 + i / 100}\n"
                                                  for i in range(1, 30)))
    canon = {m["column"]: m["canonical"] for m in load_run(str(p)).meta["mapping"]}
    assert canon[name] == ("step_time_s" if "Time" in name else "val_loss")


@pytest.mark.parametrize("raw", ["grads/encoder.0.weight", "grads/fc1", "time/batch"])
def test_names_that_stay_unread(raw):
    # one module's gradient; Composer's time/batch counts batches, it is no duration
    r = read_name(raw)
    assert r is None or r.canonical not in ("grad_norm", "step_time_s")
