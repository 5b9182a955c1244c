"""The router's rule tables: for each symptom, the candidate causes (with the metric each one
names and the data check that confirms or rules it out) and the keys of the interventions each
cause suggests. Data, not code: the checks are named here and implemented in router.py; the
interventions, and the practice they lean on, are in interventions.py (re-exported here).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmedic.diagnose.finding import Likelihood
from trainmedic.diagnose.interventions import INFO_INTERVENTIONS, INTERVENTIONS, InterventionRule

__all__ = ["CauseRule", "InterventionRule", "CAUSES", "FROZEN_PREDICTION_CAUSES", "INTERVENTIONS",
           "INFO_INTERVENTIONS", "LOCALIZED_CAUSES", "LOCALIZED_SYMPTOMS"]


@dataclass(kw_only=True, frozen=True)
class CauseRule:
    """One candidate cause of a symptom."""

    cause: str
    """The cause, as the report says it."""
    likelihood: Likelihood
    """Prior rank among this symptom's causes before any data check."""
    metric: str | None = None
    """The metric the cause names; it is checked against that metric's data when logged."""
    check: str | None = None
    """Name of the check in router.CHECKS; None when nothing in the logs can check it."""
    to_check: str = ""
    """What to log or look at to check it, said when it cannot be checked."""
    interventions: tuple[str, ...] = ()
    """Keys into interventions.INTERVENTIONS, best first."""


#: A cause of both a divergence and a NaN: a loss on another scale than the mean.
_SUMMED_LOSS = CauseRule(
    cause="the loss is summed over the batch, or micro-batch losses are added without dividing "
          "by their count: each step is that many times too large",
    likelihood="medium", metric="val_loss", check="train_loss_summed",
    to_check="log a validation loss computed the same way to check this",
    interventions=("mean_loss",))

CAUSES: dict[str, tuple[CauseRule, ...]] = {
    "nonfinite_loss": (
        CauseRule(cause="the loss diverged before it overflowed (the step before was already "
                        "rising)", likelihood="high", metric="loss",
                  check="loss_rising_before_onset", interventions=("lower_lr", "clip_grad")),
        CauseRule(cause="fp16 overflow: activations or gradients beyond the fp16 range",
                  likelihood="high", metric="loss_scale", check="loss_scale_logged",
                  to_check="log loss_scale (GradScaler.get_scale()) to check for fp16",
                  interventions=("bf16",)),
        CauseRule(cause="learning rate too high at the onset", likelihood="medium",
                  metric="lr", check="lr_high_at_onset", interventions=("lower_lr",)),
        _SUMMED_LOSS,
        CauseRule(cause="a log/div/sqrt of zero or a negative number in the loss, or a NaN "
                        "in an input batch", likelihood="medium",
                  to_check="record the run with trainmedic.watch, whose NaN guard replays the "
                           "step and names the module",
                  interventions=("nan_guard", "check_loss_math")),
    ),
    "loss_spike": (
        CauseRule(cause="a bad batch (corrupt, mislabeled or extreme samples)",
                  likelihood="high", metric="loss", check="spike_recovered",
                  interventions=("skip_batch",)),
        CauseRule(cause="a gradient spike that clipping did not cap", likelihood="medium",
                  metric="grad_norm", check="grad_spike_at_onset",
                  to_check="log grad_norm (before clipping) to check this",
                  interventions=("clip_grad",)),
        CauseRule(cause="learning rate too high at the onset", likelihood="medium",
                  metric="lr", check="lr_high_at_onset",
                  interventions=("lower_lr", "longer_warmup")),
        CauseRule(cause="Adam's second-moment estimate lagging a sudden gradient change "
                        "(stale v after a quiet period)", likelihood="low",
                  to_check="needs per-layer update_ratio around the onset",
                  interventions=("clip_grad",)),
    ),
    "divergence": (
        CauseRule(cause="learning rate too high at the onset", likelihood="high",
                  metric="lr", check="lr_high_at_onset", interventions=("lower_lr",)),
        CauseRule(cause="missing or too-short warm-up (lr starts at its peak)",
                  likelihood="high", metric="lr", check="lr_starts_at_peak",
                  interventions=("longer_warmup",)),
        CauseRule(cause="gradient spikes reaching the weights (no or loose clipping)",
                  likelihood="medium", metric="grad_norm", check="grad_spike_at_onset",
                  to_check="log grad_norm to check this", interventions=("clip_grad",)),
        _SUMMED_LOSS,
        CauseRule(cause="fp16 overflow/underflow", likelihood="low", metric="loss_scale",
                  check="loss_scale_logged", to_check="log loss_scale to check for fp16",
                  interventions=("bf16",)),
        CauseRule(cause="a change in the data stream (a new shard, unshuffled or corrupt data)",
                  likelihood="low", to_check="log a data shard/epoch index",
                  interventions=("skip_batch",)),
    ),
    "flat_loss": (
        CauseRule(cause="the model is at chance: it predicts the uniform distribution over "
                        "{k} classes", likelihood="high", metric="loss", check="at_chance",
                  interventions=("check_labels", "check_optimizer")),
        CauseRule(cause="learning rate is 0", likelihood="high", metric="lr", check="lr_zero",
                  interventions=("check_optimizer",)),
        CauseRule(cause="the optimizer updates tensors the model does not use (it was built "
                        "over a copy of the model, or before the model was re-created)",
                  likelihood="high", check="optimizer_params_foreign",
                  to_check="run under trainmedic.watch(model, optimizer) to check this",
                  interventions=("check_optimizer",)),
        CauseRule(cause="no gradient reaches the parameters (frozen, detached, or not in the "
                        "optimizer)", likelihood="high", metric="grad_norm",
                  check="grad_or_update_zero",
                  to_check="log grad_norm or update_ratio to check this",
                  interventions=("check_optimizer",)),
        CauseRule(cause="parameters do not change (optimizer.step() not called)",
                  likelihood="medium", metric="param_norm", check="param_norm_constant",
                  to_check="log param_norm to check this", interventions=("check_optimizer",)),
        CauseRule(cause="the run is still in its lr warm-up: too early to judge",
                  likelihood="medium", metric="lr", check="lr_rising_at_end",
                  interventions=("check_optimizer",)),
        CauseRule(cause="learning rate far too low", likelihood="medium", metric="lr",
                  check="lr_tiny", interventions=("raise_lr",)),
        CauseRule(cause="labels shuffled or misaligned with inputs", likelihood="medium",
                  to_check="overfit one batch to check", interventions=("check_labels",)),
    ),
    "grad_accum_misnormalization": (
        CauseRule(cause="micro-batch losses added (and logged) without dividing each by the "
                        "accumulation count", likelihood="high",
                  to_check="compare with one step at accumulation 1 and the same global batch",
                  interventions=("divide_accumulated_loss",)),
        CauseRule(cause="the training and validation losses are computed differently (a "
                        "reduction='sum', an extra term, label smoothing)", likelihood="medium",
                  to_check="evaluate the training loss on a validation batch in eval mode",
                  interventions=()),
    ),
    "lr_schedule_anomaly": (
        CauseRule(cause="a per-epoch scheduler stepped every batch (the lr collapsed early)",
                  likelihood="high", metric="lr", check="lr_collapsed",
                  interventions=("step_scheduler_per_epoch",)),
        CauseRule(cause="a warm-up given in the wrong unit, or longer than the run, so the lr "
                        "never stops rising", likelihood="high", metric="lr",
                  check="lr_rising_at_end", interventions=("end_warmup",)),
        CauseRule(cause="the lr is 0: an lr factor of 0 (LambdaLR or warm-up), a schedule "
                        "shorter than the run, or the lr lost at a resume", likelihood="high",
                  metric="lr", check="lr_zero_from_onset", interventions=("fix_zero_lr",)),
    ),
    "plateau": (
        CauseRule(cause="the learning-rate schedule has annealed: the plateau is the end of "
                        "training, as expected", likelihood="high", metric="lr",
                  check="lr_annealed", interventions=("stop_early_plateau",)),
        CauseRule(cause="learning rate too high to settle lower (not decayed)",
                  likelihood="medium", metric="lr", check="lr_not_decayed",
                  interventions=("decay_lr",)),
        CauseRule(cause="the model has reached what its capacity/data allow",
                  likelihood="medium", to_check="compare with a larger model or more data",
                  interventions=("bigger_model_or_data", "stop_early_plateau")),
    ),
    "oscillation": (
        CauseRule(cause="learning rate too high for the loss surface", likelihood="high",
                  metric="lr", check="lr_high_at_onset", interventions=("lower_lr",)),
        CauseRule(cause="batch too small: gradient noise dominates", likelihood="medium",
                  to_check="log the batch size", interventions=("bigger_batch",)),
        CauseRule(cause="data not shuffled (loss follows the data order)", likelihood="low",
                  to_check="compare the swing period with the epoch length",
                  interventions=("shuffle",)),
    ),
    "overfitting": (
        CauseRule(cause="the model memorizes the training set: training loss keeps falling "
                        "while validation rises", likelihood="high", metric="loss",
                  check="train_loss_falling",
                  to_check="log the training loss next to val_loss to check this",
                  interventions=("early_stop", "regularize", "augment_data")),
        CauseRule(cause="too many epochs for the amount of data", likelihood="medium",
                  interventions=("early_stop", "augment_data")),
        CauseRule(cause="learning rate kept high late in training", likelihood="low",
                  metric="lr", check="lr_not_decayed", interventions=("decay_lr",)),
    ),
    "exploding_gradients": (
        CauseRule(cause="an outlier batch produced one huge gradient", likelihood="high",
                  metric="grad_norm", check="grad_spikes_isolated",
                  interventions=("clip_grad", "skip_batch")),
        CauseRule(cause="learning rate too high: the weights grow and gradients with them",
                  likelihood="medium", metric="lr", check="lr_high_at_onset",
                  interventions=("lower_lr", "clip_grad")),
        CauseRule(cause="fp16 overflow", likelihood="low", metric="loss_scale",
                  check="loss_scale_logged", to_check="log loss_scale to check for fp16",
                  interventions=("bf16",)),
        CauseRule(cause="unstable architecture/initialization (no normalization, deep "
                        "residual stack without scaling)", likelihood="low",
                  interventions=("fix_init_or_arch",)),
    ),
    "vanishing_gradients": (
        CauseRule(cause="the loss has converged (tiny gradients at a tiny loss)",
                  likelihood="medium", metric="loss", check="loss_fell",
                  interventions=("stop_early_plateau",)),
        CauseRule(cause="learning rate decayed to ~0", likelihood="medium", metric="lr",
                  check="lr_end_near_zero", interventions=("decay_lr",)),
        CauseRule(cause="saturating activations or poor initialization", likelihood="medium",
                  to_check="log per-layer activation statistics",
                  interventions=("fix_init_or_arch",)),
        CauseRule(cause="parameters frozen or detached from the loss", likelihood="medium",
                  interventions=("check_optimizer",)),
    ),
    "dead_units": (
        # lr_high_after_start, not lr_high_at_onset: units dead from the first measurement
        # (born dead) have their onset at step 0, where every lr is "at its peak so far".
        CauseRule(cause="learning rate too high: a large update pushed the units' "
                        "pre-activations below 0 for every input, where ReLU passes no "
                        "gradient to bring them back", likelihood="high", metric="lr",
                  check="lr_high_after_start",
                  interventions=("lower_lr", "longer_warmup", "leaky_activation")),
        CauseRule(cause="initialization or input scale: units born dead (negative biases, "
                        "weights not scaled for ReLU, unnormalized inputs)",
                  likelihood="medium",
                  to_check="see whether dead_frac was already high at the first measurement "
                           "(the summary says 'from the first measurement')",
                  interventions=("relu_init", "leaky_activation")),
        CauseRule(cause="a gradient spike that moved the biases far negative (no clipping)",
                  likelihood="medium", metric="grad_norm", check="grad_spike_at_onset",
                  to_check="log grad_norm to check this", interventions=("clip_grad",)),
    ),
    "saturated_activations": (
        CauseRule(cause="weights too large for the activation (init, or grown during "
                        "training): pre-activations far outside tanh/sigmoid's linear range",
                  likelihood="high",
                  to_check="compare layer/<module>/weight_norm of the layer feeding it at the "
                           "first measurement and at the onset",
                  interventions=("saturation_init", "nonsaturating_activation")),
        CauseRule(cause="learning rate too high: updates drive the pre-activations to the "
                        "tails", likelihood="medium", metric="lr", check="lr_high_after_start",
                  interventions=("lower_lr", "longer_warmup")),
        CauseRule(cause="inputs not normalized (large raw feature values)",
                  likelihood="medium", to_check="check the input features' mean and std",
                  interventions=("saturation_init",)),
    ),
    "nonfinite_grad": (
        CauseRule(cause="fp16 overflow (GradScaler should skip the step and lower the scale)",
                  likelihood="high", metric="loss_scale", check="loss_scale_logged",
                  to_check="log loss_scale to check for fp16", interventions=("bf16",)),
        CauseRule(cause="learning rate too high", likelihood="medium", metric="lr",
                  check="lr_high_at_onset", interventions=("lower_lr", "clip_grad")),
        CauseRule(cause="a NaN/inf produced in the forward or backward of one module",
                  likelihood="medium", interventions=("nan_guard", "check_loss_math")),
    ),
    "nan_masked_in_logs": (
        CauseRule(cause="the logger dropped NaN/inf losses from its average (HF Trainer "
                        "logging_nan_inf_filter=True, the default)", likelihood="high",
                  check="hf_trainer_run", to_check="look for logging_nan_inf_filter in the "
                  "training arguments", interventions=("disable_nan_filter", "nan_guard")),
        CauseRule(cause="fp16 overflow behind the NaN steps", likelihood="medium",
                  metric="loss_scale", check="loss_scale_logged",
                  to_check="log loss_scale to check for fp16", interventions=("bf16",)),
    ),
    "loss_scale_collapse": (
        CauseRule(cause="fp16 overflows on nearly every step (values beyond 65504)",
                  likelihood="high", metric="loss_scale", check="loss_scale_logged",
                  interventions=("bf16", "clip_grad")),
        CauseRule(cause="learning rate too high (activations grow until they overflow)",
                  likelihood="medium", metric="lr", check="lr_high_at_onset",
                  interventions=("lower_lr",)),
    ),
    "input_bound": (
        CauseRule(cause="too few DataLoader workers / no prefetching", likelihood="high",
                  to_check="log the DataLoader settings (num_workers, prefetch_factor)",
                  interventions=("more_workers",)),
        CauseRule(cause="CPU-heavy decoding, augmentation or tokenization per sample",
                  likelihood="medium", to_check="profile __getitem__",
                  interventions=("cache_preprocess",)),
        CauseRule(cause="slow or remote storage", likelihood="medium",
                  to_check="measure read throughput of the data files (e.g. time reading one epoch "
                           "without the model)",
                  interventions=("faster_storage",)),
    ),
    "step_time_outliers": (
        CauseRule(cause="periodic work inside the timed step (checkpoint save, evaluation, "
                        "logging flush)", likelihood="high", metric="step_time_s",
                  check="outliers_periodic", interventions=("move_periodic_work",)),
        CauseRule(cause="data-loader stalls on those steps", likelihood="medium",
                  metric="data_time_s", check="data_time_high_at_outliers",
                  to_check="log data_time_s to check this", interventions=("more_workers",)),
        CauseRule(cause="Python garbage-collection pauses", likelihood="low",
                  metric="gc_time_s", check="gc_time_high_at_outliers",
                  to_check="log gc_time_s (trainmedic.watch records it) to check this",
                  interventions=("gc_control",)),
        CauseRule(cause="host-device syncs on those steps (a value read back mid-step)",
                  likelihood="low", to_check="trainmedic profile RECIPE lists every value "
                  "read per step with its call site"),
    ),
    "memory_growth": (
        CauseRule(cause="tensors kept across steps (loss accumulated without .item(), stored "
                        "outputs holding the graph)", likelihood="high", metric="mem_alloc_mb",
                  check="kept_tensors_show", to_check="log mem_alloc_mb to check this",
                  interventions=("find_leak",)),
        # A worker's copy-on-read growth shows in the worker processes' RSS; a main-process
        # rss_mb only sees it when the logger sums the workers in, hence "low".
        CauseRule(cause="host memory growth in DataLoader workers (copy-on-read of Python "
                        "objects)", likelihood="low", metric="rss_mb",
                  check="finding_metric_is", to_check="log rss_mb to check this",
                  interventions=("worker_copy_on_read",)),
        CauseRule(cause="allocator cache growth from changing shapes (fragmentation, "
                        "torch.compile recompiles)", likelihood="medium",
                  metric="mem_reserved_mb", check="finding_metric_is",
                  to_check="log mem_reserved_mb to check this", interventions=("find_leak",)),
        CauseRule(cause="peak memory per step keeps rising (growing activations: longer "
                        "sequences, or tensors kept across steps)", likelihood="medium",
                  metric="mem_peak_mb", check="finding_metric_is",
                  to_check="log mem_peak_mb to check this", interventions=("find_leak",)),
    ),
    "straggler": (
        # Under DDP the gradient all-reduce in backward makes every rank wait for the
        # slowest, so the detector names the straggler by the work before the sync: its data
        # wait (input pipeline) or its forward (compute).
        CauseRule(cause="the slow rank's input pipeline: too few DataLoader workers for that "
                        "host, slow or remote storage or CPU contention on that host, or a "
                        "sampler that gives that rank heavier samples (longer sequences, "
                        "larger images)", likelihood="high", metric="data_time_s",
                  check="finding_metric_is", to_check="log data_time_s per rank",
                  interventions=("rank_input_pipeline", "more_workers", "faster_storage")),
        CauseRule(cause="the slow rank computes slower: heterogeneous hardware (another GPU "
                        "model, lower clocks), thermal or power throttling, another process "
                        "on that device, or uneven sample lengths giving it more work",
                  likelihood="high", metric="compute_time_s", check="finding_metric_is",
                  to_check="log compute_time_s (the forward, before the gradient sync) per "
                           "rank", interventions=("check_node", "balance_batches")),
        CauseRule(cause="uneven work per rank (longer sequences or larger images)",
                  likelihood="medium", interventions=("balance_batches",)),
    ),
    "resume_discontinuity": (
        CauseRule(cause="several trainings were written into one log (a sweep or a re-run "
                        "appending to the same file)", likelihood="high", metric="loss",
                  check="appended_runs", interventions=("split_log",)),
        CauseRule(cause="the run resumed from an earlier checkpoint and replayed the steps "
                        "since it", likelihood="high", metric="loss", check="replayed_many",
                  interventions=("verify_resume",)),
        CauseRule(cause="the logger wrote one record twice", likelihood="medium",
                  metric="loss", check="replayed_one", interventions=("dedupe_log",)),
    ),
    "throughput_regression": (
        CauseRule(cause="the input pipeline slowed down", likelihood="medium",
                  metric="data_time_s", check="data_time_rose",
                  to_check="log data_time_s to check this",
                  interventions=("more_workers", "faster_storage")),
        CauseRule(cause="GPU throttling, a co-located job, or allocator fragmentation",
                  likelihood="medium", to_check="log gpu_util and clocks",
                  interventions=("check_throttling",)),
    ),
}


#: Symptoms whose causes come from LOCALIZED_CAUSES when the NaN guard localized the step.
LOCALIZED_SYMPTOMS = ("nonfinite_loss", "nonfinite_grad")

_FP16 = CauseRule(cause="fp16 overflow: values beyond the fp16 range (65504)", likelihood="high",
                  metric="loss_scale", check="loss_scale_logged",
                  to_check="log loss_scale (GradScaler.get_scale()) to check for fp16",
                  interventions=("bf16",))
_LR_HIGH = CauseRule(cause="learning rate too high at the onset", likelihood="medium",
                     metric="lr", check="lr_high_at_onset", interventions=("lower_lr",))
_ROSE = CauseRule(cause="the loss diverged before it overflowed (the step before was already "
                        "rising)", likelihood="high", metric="loss",
                  check="loss_rising_before_onset", interventions=("lower_lr", "clip_grad"))

#: Causes of a non-finite loss or gradient once the NaN guard said where it broke
#: (``diagnose.localization.localized_kind``), replacing CAUSES[symptom]: the guard's replay
#: is the data check ("nan_guard_localized"), and only the logged-metric causes that can
#: explain that kind of break stay. Action strings may also use {module}.
#: Causes of a plateau seen as frozen predictions (detectors/majority.py: a validation accuracy
#: that repeats one value while the validation loss moves), instead of the loss plateau's.
FROZEN_PREDICTION_CAUSES: tuple[CauseRule, ...] = (
    CauseRule(cause="the model predicts the majority class for every input: the classes are "
                    "imbalanced and the loss does not weight them", likelihood="high",
              to_check="compare the accuracy with the share of the largest class in the "
                       "validation set", interventions=("balance_classes",)),
    CauseRule(cause="labels misaligned with the inputs: only the class prior can be learned",
              likelihood="medium", to_check="overfit one batch to check",
              interventions=("check_labels",)),
    CauseRule(cause="learning rate too low to leave the prior", likelihood="low",
              to_check="log lr and try a 3-10x larger one", interventions=("raise_lr",)),
)

LOCALIZED_CAUSES: dict[str, tuple[CauseRule, ...]] = {
    "forward": (
        CauseRule(cause="an overflow in the forward of the module the NaN guard named: "
                        "activations beyond the dtype's range (attention logits, an exp, a "
                        "division) from finite inputs", likelihood="high",
                  check="nan_guard_localized",
                  interventions=("stabilize_forward", "lower_lr", "clip_grad")),
        _FP16, _ROSE, _LR_HIGH,
    ),
    "growth": (
        CauseRule(cause="the activations or weights had grown until the module the NaN "
                        "guard named overflowed on them (its input abs-max, or that times its "
                        "parameters' abs-max, was beyond the square root of its dtype's "
                        "range): the run was diverging, the module only showed it",
                  likelihood="high", check="nan_guard_localized",
                  interventions=("lower_lr", "clip_grad", "longer_warmup")),
        _ROSE, _LR_HIGH, _FP16,
    ),
    "backward": (
        CauseRule(cause="a non-finite gradient made in the backward of the module the NaN "
                        "guard named, from a finite output gradient (a sqrt, norm, pow or "
                        "division at 0)", likelihood="high", check="nan_guard_localized",
                  interventions=("guard_backward",)),
        _FP16,
    ),
    "loss": (
        CauseRule(cause="the loss function: the model's output was finite but the loss or its "
                        "gradient was not (a log of 0, a division by 0, a NaN label)",
                  likelihood="high", check="nan_guard_localized",
                  interventions=("check_loss_math",)),
    ),
    "state": (
        CauseRule(cause="an earlier update blew up: parameters were already non-finite before "
                        "the step (too high a learning rate, or a gradient spike that was not "
                        "clipped)", likelihood="high", check="nan_guard_localized",
                  interventions=("restore_checkpoint", "lower_lr", "clip_grad")),
        CauseRule(cause="a gradient spike reached the weights", likelihood="medium",
                  metric="grad_norm", check="grad_spike_at_onset",
                  to_check="log grad_norm to check this", interventions=("clip_grad",)),
        _LR_HIGH,
    ),
    "data": (
        CauseRule(cause="the batch itself held NaN/inf (corrupt or unnormalized samples)",
                  likelihood="high", check="nan_guard_localized",
                  interventions=("check_data", "skip_batch")),
    ),
    "not_reproduced": (
        CauseRule(cause="the NaN guard's replay of the step from the same state stayed finite: "
                        "a non-deterministic kernel, autocast or loss scaling missing from the "
                        "replay closure, or a NaN all-reduced from another rank",
                  likelihood="medium", check="nan_guard_localized",
                  interventions=("replay_check",)),
        _FP16, _LR_HIGH,
    ),
}
