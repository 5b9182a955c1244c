"""The interventions the router suggests: for each key a cause names, the smallest change,
what it costs and how to verify that it worked. Data, not code: the causes that name these
keys are in rules.py.

Practice these interventions lean on (the "boring default" a fix should move towards): AdamW
with linear warm-up and cosine or warmup-stable-decay (WSD) schedule, bf16 autocast, gradient
clipping at norm 1.0 (HF Trainer's default ``max_grad_norm``; GPT-3/Chinchilla/LLaMA papers),
skip-batch-and-resume for loss spikes (PaLM, Chowdhery et al. 2022 sec. 5.1; OPT logbook),
fp16 loss-scale collapse fixed by bf16 (Micikevicius et al. 2018; PyTorch AMP docs), the
DataLoader knobs in torch.utils.data docs (num_workers, pin_memory, prefetch_factor,
persistent_workers), and early stopping at the validation minimum for overfitting.
Action strings may use {onset}, {end}, {best}, {skip_from}, {skip_to}, {k}, and {module} for a
step the NaN guard localized.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["InterventionRule", "INTERVENTIONS", "INFO_INTERVENTIONS"]


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
    from_start: str | None = None
    """The action when the finding starts at its series' first logged step, where there is no
    checkpoint before it to resume from: ``""`` drops the intervention; None keeps
    ``action``."""


INTERVENTIONS: dict[str, InterventionRule] = {
    "skip_batch": InterventionRule(
        action="resume from the last checkpoint before step {onset} and skip the batches "
               "around steps {skip_from}-{skip_to}",
        displaced_cost="re-runs the steps since that checkpoint; drops a few batches of data",
        verify="loss over the same steps stays within 1.2x of its running median",
        changes_semantics=True,
        from_start=""),
    "mean_loss": InterventionRule(
        action="average the loss (reduction='mean'), and divide it by the number of "
               "accumulation micro-steps before backward()",
        displaced_cost="no time or memory; each update shrinks by the batch (or "
                       "accumulation) factor, so an lr tuned on the summed loss must be raised "
                       "to match",
        verify="the training loss sits on the validation loss's scale (within 2x) and keeps "
               "falling",
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
        changes_semantics=True,
        from_start=""),
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
        verify="the anomaly report names a module and step; the fix removes the NaN there",
        from_start=("find the first module producing NaN/inf: re-run the first steps from the "
                    "start under torch.autograd.set_detect_anomaly(True) (or forward hooks "
                    "that check torch.isfinite on each module's output)")),
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
        verify="every parameter stays finite past step {onset}",
        from_start=""),
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
        verify="the logged loss is finite at every step (or the first NaN step is named)",
        from_start=""),
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
    "divide_accumulated_loss": InterventionRule(
        action="divide each micro-batch loss by the accumulation count before backward() "
               "(loss = loss / accum_steps), or use accelerate's accumulate(); log the mean, "
               "not the sum",
        displaced_cost="none in time; each update shrinks by the accumulation count, so keep "
                       "or retune the lr and restart",
        verify="the logged training loss is at the validation loss's level at the first "
               "evaluations, and trainmedic check's k-micro-batch test passes",
        changes_semantics=True),
    "balance_classes": InterventionRule(
        action="weight the loss by inverse class frequency (CrossEntropyLoss(weight=...), "
               "Keras class_weight) or resample with WeightedRandomSampler; judge the model by "
               "per-class recall or balanced accuracy, not accuracy",
        displaced_cost="none in time; the decision threshold moves, so the run restarts",
        verify="the validation accuracy leaves the majority share and the minority classes' "
               "recall rises above 0",
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
    "fix_zero_lr": InterventionRule(
        action="print optimizer.param_groups[0]['lr'] after the first scheduler.step(); make "
               "the schedule's total steps >= the run's optimizer steps and its warm-up factor "
               "> 0 at step 0; on resume, load the scheduler's state_dict with the optimizer's",
        displaced_cost="minutes; the steps run at lr 0 since step {onset} trained nothing and "
                       "must be rerun",
        verify="the logged lr is > 0 at every step until the schedule's planned end",
        changes_semantics=True),
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
    "step_scheduler_per_epoch": InterventionRule(
        action="step a per-epoch scheduler (StepLR, ExponentialLR, CosineAnnealingLR with "
               "T_max in epochs) once per epoch, after the epoch's batches; or give its period "
               "in optimizer steps (T_max = epochs x batches per epoch)",
        displaced_cost="none in time; the run's lr changes to what was intended, so restart "
                       "from the last checkpoint before step {onset}",
        verify="the logged lr stays within the schedule's range until the last epoch and the "
               "loss keeps falling after step {onset}",
        changes_semantics=True),
    "end_warmup": InterventionRule(
        action="check the warm-up length and the schedule's total steps are in optimizer steps "
               "(not epochs or samples) and that warm-up < total steps",
        displaced_cost="none in time; the lr after the warm-up changes (restart or resume from "
                       "a checkpoint before the instability)",
        verify="the logged lr peaks at the end of the warm-up and then holds or decays",
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
    "split_log": InterventionRule(
        action="give each run its own log file or folder (a run id or timestamp in the path; "
               "open the logger in write mode), and split this log where the step restarts "
               "to diagnose each run on its own",
        displaced_cost="none; the runs' own results are unchanged",
        verify="each file's step column increases from its first line to its last"),
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

#: Interventions put first when a finding is only info: the honest advice for an event that
#: did no harm is usually to change nothing.
INFO_INTERVENTIONS: dict[str, tuple[str, ...]] = {
    "exploding_gradients": ("watch_only",),
    "loss_spike": ("watch_only",),
    "nonfinite_grad": ("watch_only",),
    "plateau": ("plateau_expected",),
}
