"""Alias table: one test per framework family, user mappings, step column detection."""

from __future__ import annotations

import pytest

from trainmedic.run.names import (
    ALIASES,
    CANONICAL,
    close_names,
    find_step_column,
    resolve_names,
)


def test_every_rule_targets_a_canonical_name():
    assert {a.canonical for a in ALIASES} <= set(CANONICAL)


@pytest.mark.parametrize(("columns", "expected"), [
    # Hugging Face trainer_state.json
    (["loss", "eval_loss", "learning_rate", "grad_norm", "epoch"],
     {"loss": "loss", "val_loss": "eval_loss", "lr": "learning_rate", "grad_norm": "grad_norm"}),
    # Hugging Face under TensorBoard / W&B
    (["train/loss", "eval/loss", "train/learning_rate", "train/grad_norm"],
     {"loss": "train/loss", "val_loss": "eval/loss", "lr": "train/learning_rate",
      "grad_norm": "train/grad_norm"}),
    # Lightning: the _step series is the loss; _epoch stays raw
    (["train_loss_epoch", "train_loss_step", "val_loss", "lr-AdamW"],
     {"loss": "train_loss_step", "val_loss": "val_loss", "lr": "lr-AdamW"}),
    (["train_loss", "val_loss_epoch", "lr-SGD/pg1", "lr-SGD/pg2"],
     {"loss": "train_loss", "val_loss": "val_loss_epoch", "lr": "lr-SGD/pg1"}),
    # TensorBoard-style hand-written tags
    (["train/loss", "val/loss"], {"loss": "train/loss", "val_loss": "val/loss"}),
    # Detectron2
    (["iteration", "total_loss", "lr", "time", "data_time", "loss_cls"],
     {"loss": "total_loss", "lr": "lr", "step_time_s": "time", "data_time_s": "data_time"}),
    # Megatron-LM
    (["lm loss", "lm loss validation", "learning-rate", "grad-norm", "loss-scale",
      "iteration-time"],
     {"loss": "lm loss", "val_loss": "lm loss validation", "lr": "learning-rate",
      "grad_norm": "grad-norm", "loss_scale": "loss-scale", "step_time_s": "iteration-time"}),
    # Keras TensorBoard sub-folders (prefixed by the reader)
    (["train/epoch_loss", "validation/epoch_loss"],
     {"loss": "train/epoch_loss", "val_loss": "validation/epoch_loss"}),
    # PINN: mean_loss is the objective
    (["Conductor_Copper_loss", "mean_loss", "epoch"], {"loss": "mean_loss"}),
    # fairseq
    (["loss", "gnorm", "wps"], {"loss": "loss", "grad_norm": "gnorm", "tokens_per_s": "wps"}),
])
def test_alias_families(columns, expected):
    res = resolve_names(columns)
    assert res.aliases == expected


def test_yolo_time_is_not_step_time_and_loss_is_derived():
    cols = ["epoch", "time", "train/box_loss", "train/cls_loss", "train/dfl_loss",
            "val/box_loss", "val/cls_loss", "val/dfl_loss", "lr/pg0", "lr/pg1"]
    res = resolve_names(cols)
    assert res.aliases == {"lr": "lr/pg0"}  # cumulative 'time' is not seconds per step
    assert res.derived["loss"] == ["train/box_loss", "train/cls_loss", "train/dfl_loss"]
    assert res.derived["val_loss"] == ["val/box_loss", "val/cls_loss", "val/dfl_loss"]


def test_mxnet_rcnn_loss_is_the_sum_of_its_four_terms():
    cols = ["epoch", "speed", "train-rpnacc", "rpnlogloss", "rpnl1loss", "rcnnacc",
            "rcnnlogloss", "rcnnl1loss"]
    res = resolve_names(cols)
    assert sorted(res.derived["loss"]) == ["rcnnl1loss", "rcnnlogloss", "rpnl1loss",
                                           "rpnlogloss"]
    # two loss terms alone, without the R-CNN markers, are not summed
    assert "loss" not in resolve_names(["step", "rpn_l1", "bbox_l1loss"]).derived


def test_canonical_name_present_wins_over_alias():
    res = resolve_names(["loss", "train_loss", "total_loss"])
    assert res.aliases["loss"] == "loss"
    assert res.families["loss"] == "canonical"


def test_user_mapping_overrides_rules():
    res = resolve_names(["loss", "my/loss/tag"], mapping={"loss": "my/loss/tag"})
    assert res.aliases["loss"] == "my/loss/tag"
    assert res.families["loss"] == "user"
    # the displaced column keeps its raw name: nothing maps it
    assert "loss" not in res.rename()


def test_matching_is_case_and_space_insensitive():
    res = resolve_names(["  Train/Loss ", "EVAL_LOSS"])
    assert res.aliases == {"loss": "  Train/Loss ", "val_loss": "EVAL_LOSS"}


def test_one_source_maps_once():
    res = resolve_names(["lr", "learning_rate"])
    assert res.aliases["lr"] == "lr"
    assert "learning_rate" not in res.aliases.values()


def test_scale_rule_for_gib():
    res = resolve_names(["memory/max_reserved(GiB)"])
    assert res.aliases["mem_reserved_mb"] == "memory/max_reserved(GiB)"
    assert res.scales["mem_reserved_mb"] == 1024.0


def test_step_excluded_from_mapping():
    res = resolve_names(["step", "loss"], exclude=["step"])
    assert "step" not in res.aliases.values()


@pytest.mark.parametrize(("columns", "step"), [
    (["epoch", "step", "loss"], "step"),
    (["global_step", "epoch"], "global_step"),
    (["iteration", "total_loss"], "iteration"),
    (["iter", "loss"], "iter"),
    (["_step", "trainer/global_step", "loss"], "trainer/global_step"),
    (["_step", "loss"], "_step"),
    (["epoch", "train/box_loss"], "epoch"),
    (["Step", "loss"], "Step"),
    (["loss", "lr"], None),
])
def test_step_column(columns, step):
    assert find_step_column(columns) == step


def test_close_names_finds_substrings_and_typos():
    cols = ["train/box_loss", "val/box_loss", "lr/pg0", "metrics/mAP50(B)"]
    assert "train/box_loss" in close_names("train/box_los", cols)
    assert close_names("loss", cols)[:2] == ["train/box_loss", "val/box_loss"] or \
        set(close_names("loss", cols)) >= {"train/box_loss", "val/box_loss"}


def test_yolov5_and_mmdet_and_fastai():
    v5 = ["epoch", "train/box_loss", "train/obj_loss", "train/cls_loss", "val/box_loss",
          "val/obj_loss", "val/cls_loss", "x/lr0", "x/lr1"]
    res = resolve_names(v5)
    assert res.aliases == {"lr": "x/lr0"}
    assert res.derived["loss"] == ["train/box_loss", "train/cls_loss", "train/obj_loss"]
    res = resolve_names(["iter", "epoch", "loss", "lr", "time", "data_time", "memory"])
    assert res.aliases["mem_peak_mb"] == "memory" and res.aliases["step_time_s"] == "time"
    assert "mem_peak_mb" not in resolve_names(["step", "memory"]).aliases
    res = resolve_names(["epoch", "train_loss", "valid_loss", "accuracy"])
    assert res.aliases == {"loss": "train_loss", "val_loss": "valid_loss"}


def test_wandb_export_columns():
    cols = ["Step", "run-1 - train/loss", "run-1 - train/loss__MIN", "run-1 - train/loss__MAX",
            "run-1 - eval/loss"]
    res = resolve_names(cols, exclude=["Step"])
    assert res.aliases == {"loss": "run-1 - train/loss", "val_loss": "run-1 - eval/loss"}


def test_gan_terms_are_not_summed():
    # A GAN's G/D pair is never summed: the generator's loss is the loss, the
    # discriminator's stays beside it as d_loss.
    res = resolve_names(["step", "train/g_loss", "train/d_loss"])
    assert "loss" not in res.derived
    assert res.aliases["loss"] == "train/g_loss" and res.aliases["d_loss"] == "train/d_loss"
    assert res.meta["objective"] == "adversarial"


def test_forward_backward_and_sync_wait_times_are_compute_and_comm():
    res = resolve_names(["step", "loss", "fwd_bwd_ms", "sync_wait_ms", "data_ms"])
    assert res.aliases["compute_time_s"] == "fwd_bwd_ms"
    assert res.aliases["comm_time_s"] == "sync_wait_ms"
    assert res.scales["compute_time_s"] == 1e-3


def test_hand_written_step_counter_names():
    for name in ("n_iter", "global_iter", "train_step", "updates"):
        assert find_step_column(["loss", name, "lr"]) == name
    assert find_step_column(["step", "n_iter", "loss"]) == "step"


@pytest.mark.parametrize(("columns", "loss"), [
    (["multi_logistic_loss", "epoch", "time"], "multi_logistic_loss"),  # MXNet's metric name
    (["focal_loss", "speed"], "focal_loss"),
    (["box_loss", "obj_loss", "cls_loss"], None),  # terms of the objective: none is it
    (["valid_loss", "best_loss", "valid_length_loss"], None),  # a running best is not it
    (["test_loss", "acc"], None),
])
def test_the_only_column_named_as_a_loss_is_the_loss(columns, loss):
    assert resolve_names(columns).aliases.get("loss") == loss


def test_a_global_grad_norm_and_a_first_param_group_lr_under_capitalised_tags() -> None:
    # TensorBoard tags written by hand: "Grad/global_norm", "LR/group0"; per-module norms
    # under the same namespace stay per-module
    res = resolve_names(["loss", "Grad/global_norm", "LR/group0", "grad/encoder.0.weight"])
    assert res.aliases == {"loss": "loss", "grad_norm": "Grad/global_norm", "lr": "LR/group0"}


def test_abbreviated_read_and_iteration_times() -> None:
    # "step 000032/200000; rtime 210.16; itime 212.36; loss = 76.1" (a read time beside the
    # iteration's time)
    res = resolve_names(["loss", "rtime", "itime"])
    assert res.aliases == {"loss": "loss", "data_time_s": "rtime", "step_time_s": "itime"}


def test_contrastive_and_ranking_objectives_are_the_loss() -> None:
    for name in ("info_nce", "nt_xent", "bpr_loss", "bpr"):
        assert resolve_names([name, "lr"]).aliases.get("loss") == name
    res = resolve_names(["charts/bpr", "eval/bpr"])
    assert res.aliases == {"loss": "charts/bpr", "val_loss": "eval/bpr"}


def test_the_only_training_column_named_by_a_loss_formula_is_the_loss() -> None:
    # W&B keys of a hand-written loop: "train/task_mse" and its twin "val/task_mse"
    res = resolve_names(["train/task_mse", "val/task_mse", "train/lr"])
    assert res.aliases["loss"] == "train/task_mse" and res.aliases["val_loss"] == "val/task_mse"
    # the same with "_loss" under namespaces; terms of one objective are still not taken
    res = resolve_names(["train/focal_loss", "val/focal_loss"])
    assert res.aliases == {"loss": "train/focal_loss", "val_loss": "val/focal_loss"}
    assert "loss" not in resolve_names(["box_loss", "obj_loss"]).aliases
    assert "loss" not in resolve_names(["train/a_mse", "train/b_mse"]).aliases
    # a loss scale beside it is another metric, not a second loss
    res = resolve_names(["train/task_mse", "val/task_mse", "amp/loss_scale"])
    assert res.aliases["loss"] == "train/task_mse"
    assert res.aliases["loss_scale"] == "amp/loss_scale"


def test_a_throughput_prefix_before_a_rate_is_still_that_rate() -> None:
    res = resolve_names(["loss", "perf/throughput_samples_per_sec"])
    assert res.aliases["samples_per_s"] == "perf/throughput_samples_per_sec"


def test_a_scale_under_a_mixed_precision_namespace_is_the_loss_scale() -> None:
    for name in ("amp/scale", "fp16/scale", "grad_scaler/scale"):
        assert resolve_names(["loss", name]).aliases.get("loss_scale") == name
    assert "loss_scale" not in resolve_names(["loss", "image/scale"]).aliases


def test_the_only_training_side_column_of_an_unknown_word_is_the_objective() -> None:
    # a callback printing "Train_rf 4.856e-01" beside its memory use
    assert resolve_names(["Train_rf", "memory_pct"]).aliases == {"loss": "Train_rf"}
    # scores, rates and perplexities after "train" are not the objective; two unknowns are
    # ambiguous
    for cols in (["train_acc", "val_acc"], ["train_ppl"], ["train_wer"], ["train_rf", "train_kl"]):
        assert "loss" not in resolve_names(cols).aliases


def test_a_loss_named_with_its_unit_nats_is_the_loss() -> None:
    res = resolve_names(["train_nll_nats", "val_nll_nats"])
    assert res.aliases == {"loss": "train_nll_nats", "val_loss": "val_nll_nats"}
