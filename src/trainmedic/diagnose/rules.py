"""The router's rule tables: for each symptom, the candidate causes (with the metric each one
names and the data check that confirms or rules it out) and the interventions each cause
suggests. Data, not code: the checks are named here and implemented in router.py.

Practice these rules lean on (the "boring default" a fix should move towards): AdamW with
linear warm-up and cosine or warmup-stable-decay (WSD) schedule, bf16 autocast, gradient
clipping at norm 1.0 (HF Trainer's default ``max_grad_norm``; GPT-3/Chinchilla/LLaMA papers),
skip-batch-and-resume for loss spikes (PaLM, Chowdhery et al. 2022 sec. 5.1; OPT logbook),
fp16 loss-scale collapse fixed by bf16 (Micikevicius et al. 2018; PyTorch AMP docs), the
DataLoader knobs in torch.utils.data docs (num_workers, pin_memory, prefetch_factor,
persistent_workers), and early stopping at the validation minimum for overfitting.
Action strings may use {onset}, {end}, {best}, {skip_from}, {skip_to}, {k}.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmedic.diagnose.finding import Likelihood

__all__ = ["CauseRule", "InterventionRule", "CAUSES", "INTERVENTIONS", "INFO_INTERVENTIONS",
           "LOCALIZED_CAUSES", "LOCALIZED_SYMPTOMS"]


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
    """Keys into INTERVENTIONS, best first."""


@dataclass(kw_only=True, frozen=True)
class InterventionRule:
    """One intervention: the smallest change, its displaced cost and how to verify it."""

    action: str
    displaced_cost: str
    """Time, memory, and what it changes about the optimization."""
    verify: str
    changes_semantics: bool = False
    """True when it changes batch size, precision, data order, the objective or the
    schedule - i.e. the run is no longer the same experiment."""


INTERVENTIONS: dict[str, InterventionRule] = {
    "skip_batch": InterventionRule(
        action="resume from the last checkpoint before step {onset} and skip the batches "
               "around steps {skip_from}-{skip_to}",
        displaced_cost="re-runs the steps since that checkpoint; drops a few batches of data",
        verify="loss over the same steps stays within 1.2x of its running median",
        changes_semantics=True),
    "clip_grad": InterventionRule(
        action="clip gradients: torch.nn.utils.clip_grad_norm_(params, 1.0) after "
               "scaler.unscale_() (HF: max_grad_norm=1.0)",
        displaced_cost="one extra reduction per step (<1% of step time); caps the step "
                       "size on spikes",
        verify="grad_norm after clipping <= 1.0 and no loss spike above 2x its median"),
    "lower_lr": InterventionRule(
        action="lower the peak learning rate 2-3x (and resume from a checkpoint before "
               "step {onset})",
        displaced_cost="slower progress per step; may need more steps to reach the same loss",
        verify="loss keeps falling through step {onset} of the previous run",
        changes_semantics=True),
    "longer_warmup": InterventionRule(
        action="warm the learning rate up linearly over the first 1-5% of steps "
               "(e.g. get_linear_schedule_with_warmup / LinearLR)",
        displaced_cost="the first steps learn slower; no memory cost",
        verify="loss does not rise during the warm-up; grad_norm settles before the peak lr",
        changes_semantics=True),
    "bf16": InterventionRule(
        action="train in bf16 autocast instead of fp16 (no GradScaler needed) on hardware "
               "that supports it",
        displaced_cost="same memory and speed on Ampere+; changes numerics (precision)",
        verify="no non-finite grad_norm; loss matches the fp32 curve within noise",
        changes_semantics=True),
    "nan_guard": InterventionRule(
        action="find the first module producing NaN/inf: resume from a checkpoint before step "
               "{onset} and run those steps under torch.autograd.set_detect_anomaly(True) "
               "(or forward hooks that check torch.isfinite on each module's output)",
        displaced_cost="anomaly mode is 2-10x slower; use it only around the onset",
        verify="the anomaly report names a module and step; the fix removes the NaN there"),
    "check_loss_math": InterventionRule(
        action="guard log/div/sqrt in the loss (clamp inputs with eps, use "
               "F.cross_entropy/logsigmoid instead of log(softmax))",
        displaced_cost="none measurable",
        verify="loss stays finite past step {onset}"),
    "stabilize_forward": InterventionRule(
        action="make {module}'s forward overflow-safe: scale attention scores by "
               "1/sqrt(head_dim) and take the softmax in fp32 (F.scaled_dot_product_attention "
               "does both), normalize its input (LayerNorm, QK-norm), and clamp the inputs of "
               "exp/div/log inside it",
        displaced_cost="a code change; an fp32 softmax costs a little memory and time in that "
                       "module",
        verify="the NaN guard stays silent past step {onset} and {module}'s output abs-max "
               "stays far below its dtype's maximum"),
    "guard_backward": InterventionRule(
        action="put the eps inside {module}'s sqrt/norm/pow/division (torch.sqrt(x + eps), "
               "x / (norm + eps) with the norm taken of x + eps): their gradient at 0 is inf "
               "even when the forward value is finite",
        displaced_cost="none measurable; a bias of order eps in the value",
        verify="the NaN guard stays silent past step {onset}"),
    "restore_checkpoint": InterventionRule(
        action="resume from the last checkpoint before step {onset} whose parameters are all "
               "finite, with a lower lr or gradient clipping so that the update which "
               "corrupted them does not recur",
        displaced_cost="re-runs the steps since that checkpoint",
        verify="every parameter stays finite past step {onset}"),
    "check_data": InterventionRule(
        action="find and drop the non-finite samples: check torch.isfinite(x).all() on each "
               "batch in the collate function, or filter them out in preprocessing",
        displaced_cost="one isfinite reduction per batch on the CPU; drops the bad samples",
        verify="no batch with NaN/inf reaches the model; the loss stays finite past step "
               "{onset}",
        changes_semantics=True),
    "replay_check": InterventionRule(
        action="make the replay match the step: run the closure under the same autocast and "
               "loss scale as the step, turn on torch.use_deterministic_algorithms(True), and "
               "look at the other ranks' NaN-guard events (a NaN all-reduced from another rank "
               "does not reproduce on this one)",
        displaced_cost="deterministic kernels can be slower; only while investigating",
        verify="the NaN guard names a module at the next non-finite step"),
    "disable_nan_filter": InterventionRule(
        action="set TrainingArguments(logging_nan_inf_filter=False) so NaN losses show in "
               "the log, and re-run from the last checkpoint before step {onset}",
        displaced_cost="none; logging only",
        verify="the logged loss is finite at every step (or the first NaN step is named)"),
    "early_stop": InterventionRule(
        action="keep the checkpoint at the best validation step {best} "
               "(HF: load_best_model_at_end=True + EarlyStoppingCallback; Lightning: "
               "ModelCheckpoint(monitor='val_loss') + EarlyStopping)",
        displaced_cost="none; saves the compute after step {best}",
        verify="the kept model's validation loss equals the minimum at step {best}"),
    "regularize": InterventionRule(
        action="add regularization: weight decay 0.01-0.1 (AdamW), dropout 0.1, "
               "label smoothing",
        displaced_cost="no memory; may slow training-loss descent",
        verify="gap between validation and training loss stops widening after step {best}",
        changes_semantics=True),
    "augment_data": InterventionRule(
        action="more data or stronger augmentation (for images: RandAugment/mosaic; for text: "
               "more examples), or fewer epochs",
        displaced_cost="more data-loading CPU time per step",
        verify="validation loss keeps falling past step {best}",
        changes_semantics=True),
    "check_labels": InterventionRule(
        action="check that labels line up with inputs: overfit one small batch "
               "(loss should reach ~0 in a few hundred steps)",
        displaced_cost="minutes; no change to the run",
        verify="a single batch can be memorized; loss on it drops well below ln({k})"),
    "check_optimizer": InterventionRule(
        action="check that the optimizer steps the parameters: lr > 0, params have "
               "requires_grad=True and are in optimizer.param_groups, optimizer.step() is "
               "called after backward() and zero_grad() before it",
        displaced_cost="minutes; no change to the run",
        verify="update_ratio (|update| / |param|) ~1e-3 per step and param_norm changes"),
    "raise_lr": InterventionRule(
        action="run a short LR range test and raise the learning rate (e.g. 1e-4..1e-3 for "
               "AdamW on transformers)",
        displaced_cost="a few hundred steps of probing",
        verify="loss falls by >5% within the first 5% of the run",
        changes_semantics=True),
    "decay_lr": InterventionRule(
        action="decay the learning rate (cosine, or a WSD cool-down of the last 10-20% of "
               "steps)",
        displaced_cost="none; may need a few more steps",
        verify="loss drops below the plateau level {onset} during the decay",
        changes_semantics=True),
    "stop_early_plateau": InterventionRule(
        action="stop at the plateau (or shorten the schedule) to save compute",
        displaced_cost="none",
        verify="final loss is within noise of the plateau level"),
    "bigger_model_or_data": InterventionRule(
        action="if the plateau is above the target, add capacity or data rather than steps",
        displaced_cost="more memory/time per step",
        verify="the new run's plateau is lower",
        changes_semantics=True),
    "bigger_batch": InterventionRule(
        action="raise the effective batch (gradient accumulation) to average out noise",
        displaced_cost="fewer optimizer steps per epoch; accumulation costs no memory",
        verify="loss swings shrink below 30% of its level",
        changes_semantics=True),
    "shuffle": InterventionRule(
        action="shuffle the data every epoch (DataLoader(shuffle=True) or "
               "DistributedSampler.set_epoch(epoch))",
        displaced_cost="none",
        verify="the loss no longer swings in step with epochs",
        changes_semantics=True),
    "more_workers": InterventionRule(
        action="DataLoader(num_workers=<cores per GPU>, pin_memory=True, prefetch_factor=2-4, "
               "persistent_workers=True)",
        displaced_cost="host RAM per worker (a copy of the dataset object each); more CPU",
        verify="data_time_s share of step time < 10%"),
    "cache_preprocess": InterventionRule(
        action="move heavy decoding/augmentation/tokenization out of __getitem__: "
               "pre-tokenize, cache decoded data, or run augmentation on the GPU",
        displaced_cost="disk space for the cache; a preprocessing pass",
        verify="data_time_s per step falls; samples_per_s rises"),
    "faster_storage": InterventionRule(
        action="copy the dataset to local NVMe / RAM disk or use a streaming format "
               "(WebDataset, sharded tar)",
        displaced_cost="local disk space; a copy step",
        verify="data_time_s per step falls"),
    "move_periodic_work": InterventionRule(
        action="move checkpoint saving / evaluation outside the timed step, save "
               "asynchronously (torch.distributed.checkpoint.async_save)",
        displaced_cost="host memory for the async copy",
        verify="no step takes >3x the median step time"),
    "gc_control": InterventionRule(
        action="call gc.freeze() after setup and gc.collect() at fixed intervals on all ranks",
        displaced_cost="none",
        verify="step-time outliers disappear or become periodic and small"),
    "find_leak": InterventionRule(
        action="look for tensors kept across steps: accumulate loss.item() not loss, detach "
               "stored outputs; compare torch.cuda.memory_snapshot() between two steps",
        displaced_cost="a short profiling run",
        verify="memory is flat after warm-up (growth < 5%)"),
    "worker_copy_on_read": InterventionRule(
        action="store dataset metadata in numpy arrays instead of Python lists/dicts (copy-on-"
               "read in forked DataLoader workers grows RSS; pytorch/pytorch#13246)",
        displaced_cost="a refactor of the Dataset",
        verify="rss_mb is flat after the first epoch"),
    "check_node": InterventionRule(
        action="compare the slow rank's device and host with the others': GPU model, clocks, "
               "temperature and throttle reasons (nvidia-smi -q -d PERFORMANCE,CLOCK,"
               "TEMPERATURE), other processes on that device or host; swap the node out to "
               "confirm",
        displaced_cost="operator time",
        verify="the rank's compute_time_s is within 10% of the other ranks'"),
    "rank_input_pipeline": InterventionRule(
        action="on the slow rank: raise DataLoader num_workers and prefetch_factor "
               "(persistent_workers=True), check that host's storage read speed and CPU load, "
               "and check that the sampler does not give that rank heavier samples",
        displaced_cost="host RAM and CPU per extra worker; operator time",
        verify="the rank's data_time_s is below 10% of the step, and step_time_s falls on "
               "every rank"),
    "balance_batches": InterventionRule(
        action="balance work per rank: bucket sequences by length, equal shapes per rank",
        displaced_cost="changes batch composition",
        verify="per-rank compute_time_s within 5%",
        changes_semantics=True),
    "verify_resume": InterventionRule(
        action="check that a resume restores the step counter, optimizer, scheduler, RNG and "
               "data-loader position: run K steps, save, resume in a fresh process, and "
               "compare the losses with an uninterrupted run",
        displaced_cost="checkpoint I/O time",
        verify="resumed steps reproduce the original losses"),
    "dedupe_log": InterventionRule(
        action="nothing to fix in training; trainmedic keeps the last value logged for a step",
        displaced_cost="none",
        verify="n/a"),
    "check_throttling": InterventionRule(
        action="log gpu_util and clocks; check for thermal throttling, a co-located job, or "
               "allocator fragmentation (torch.cuda.memory_stats num_alloc_retries)",
        displaced_cost="none",
        verify="samples_per_s returns to its level before step {onset}"),
    "watch_only": InterventionRule(
        action="no change needed now: the loss did not react; keep gradient clipping on and "
               "watch whether such events grow more frequent or larger",
        displaced_cost="none",
        verify="the next events stay isolated and the loss stays within noise of its median"),
    "plateau_expected": InterventionRule(
        action="none if the plateau level meets the target: the run has converged for this "
               "schedule",
        displaced_cost="none",
        verify="validation metrics have also stopped improving"),
    "leaky_activation": InterventionRule(
        action="replace the dying ReLUs by LeakyReLU(0.01) or GELU, whose gradient for "
               "negative inputs is not zero, so a unit pushed negative can come back",
        displaced_cost="a code change; a fresh run (or re-initialize the dead units)",
        verify="layer/<module>/dead_frac stays below 10% over the run",
        changes_semantics=True),
    "relu_init": InterventionRule(
        action="He (Kaiming) initialization for ReLU layers (torch.nn.init.kaiming_normal_, "
               "nonlinearity='relu') with biases at 0 or a small positive value, and inputs "
               "normalized to zero mean and unit variance (He et al. 2015; Lu et al. 2019)",
        displaced_cost="a code change; a fresh run",
        verify="layer/<module>/dead_frac is near 0 at the first measurement and stays low",
        changes_semantics=True),
    "saturation_init": InterventionRule(
        action="Xavier/Glorot initialization for tanh/sigmoid layers "
               "(torch.nn.init.xavier_uniform_, gain=nn.init.calculate_gain('tanh')), inputs "
               "normalized to zero mean and unit variance, and a LayerNorm before the "
               "activation (Glorot & Bengio 2010; LeCun et al. 1998)",
        displaced_cost="a code change; a fresh run",
        verify="layer/<module>/saturated_frac stays below 25%",
        changes_semantics=True),
    "nonsaturating_activation": InterventionRule(
        action="use a non-saturating activation (ReLU, GELU, SiLU) in hidden layers; keep "
               "sigmoid/tanh for gates and outputs only",
        displaced_cost="a code change; a fresh run",
        verify="the layers' grad norms stay within 10x of each other across depth",
        changes_semantics=True),
    "fix_init_or_arch": InterventionRule(
        action="check initialization and normalization (pre-LayerNorm, residual scaling), "
               "and non-saturating activations",
        displaced_cost="a code change; a fresh run",
        verify="grad_norm stays within 10x of its early level",
        changes_semantics=True),
}


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
        CauseRule(cause="Python garbage-collection pauses or host-device syncs",
                  likelihood="low", interventions=("gc_control",)),
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

#: Interventions put first when a finding is only info: the honest advice for an event that
#: did no harm is usually to change nothing.
INFO_INTERVENTIONS: dict[str, tuple[str, ...]] = {
    "exploding_gradients": ("watch_only",),
    "loss_spike": ("watch_only",),
    "nonfinite_grad": ("watch_only",),
    "plateau": ("plateau_expected",),
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
        CauseRule(cause="the activations had grown until the module the NaN guard named "
                        "overflowed on them (its input abs-max was beyond the square root of "
                        "its dtype's range): the run was diverging, the module only showed it",
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
