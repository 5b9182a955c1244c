"""The field's words for each canonical metric, and how to read a name no alias lists.

``ALIASES`` in ``trainmedic.run.names`` lists exact names frameworks write. Logs nobody has seen
use the same words under other spellings: a namespace (``perf/step_time_s``, ``trainer/lr``), a
train/validation side (``val/loss``, ``loss_valid``, ``eval_loss``), a unit (``step_time_ms``,
``gpu_mem_gib``, ``gpu_util_pct``) or a rate (``it/s``). ``read_name`` takes such a name apart;
``WORDS`` says which canonical metric its remaining word means.

The rules are data: a word, its canonical metric and the kind of unit it carries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["translate_cjk", "is_top1_accuracy", "NameReading", "read_name", "WORDS",
           "LOSS_WORDS", "VAL_SIDE", "TRAIN_SIDE",
           "GEN_LOSS", "DISC_LOSS", "GAN_GEN_HINTS", "GAN_DISC_HINTS", "TOP1_ACC_WORDS",
           "ACC_WORDS", "split_camel", "CUMULATIVE_TIME", "EPOCH_TIME", "unit_factor",
           "unit_label", "time_unit_of"]

VAL_SIDE = frozenset({"val", "valid", "validation", "validate", "eval", "evaluation", "dev"})
TEST_SIDE = frozenset({"test", "testing"})
TRAIN_SIDE = frozenset({"train", "training", "tr", "trn"})

# Namespaces that group metrics without naming an eval set ("metrics/val_loss" is not a set).
GENERIC_NS = frozenset({
    "metrics", "metric", "trainer", "charts", "epoch", "batch", "step", "perf", "performance",
    "sys", "system", "time", "timing", "timings", "losses", "loss", "optim", "optimizer", "opt",
    "stats", "throughput", "memory", "mem", "gpu", "cuda", "speed", "scalars", "scalar", "log",
    "logs", "summary", "general", "main", "global", "avg", "mean", "lr", "hparams", "runtime",
    "iter", "iteration", "progress", "train_metrics", "val_metrics", "eval_metrics",
})

LOSS_WORDS: tuple[str, ...] = (
    "loss", "total_loss", "loss_total", "tot_loss", "loss_tot", "all_loss", "loss_all",
    "overall_loss", "sum_loss", "loss_sum", "loss_value", "avg_loss", "loss_avg",
    "average_loss", "mean_loss",
    "running_loss", "avr_loss", "smoothed_loss", "smooth_loss", "ema_loss", "epoch_loss",
    "batch_loss", "objective", "cost", "ce_loss", "cross_entropy",
    "cross_entropy_loss", "xent", "nll_loss", "nll", "mse_loss", "mse", "bce_loss", "bce",
    "recon_loss", "reconstruction_loss", "rec_loss", "l1_loss", "l2_loss", "lm_loss",
    "ctc_loss", "full_loss", "ce", "train_ce",
    # contrastive and ranking objectives under their own names (SimCLR's NT-Xent, CPC/MoCo's
    # InfoNCE, BPR for recommenders)
    "info_nce", "infonce", "nt_xent", "ntxent", "contrastive_loss", "bpr_loss", "bpr",
)
"""Words that mean the training objective, best first (``loss`` beats ``nll_loss``)."""

# Component or qualifier words: "<word>_loss" is a term of the objective, not an eval set.
_QUALIFIERS = frozenset({
    "box", "cls", "dfl", "obj", "bbox", "giou", "iou", "mask", "seg", "rpn", "kl", "aux",
    "ce", "nll", "mse", "bce", "l1", "l2", "lm", "mlm", "ctc", "total", "avg", "mean", "recon",
    "rec", "reconstruction", "reg", "class", "classifier", "rpn_cls", "rpn_bbox", "length",
    "best", "adv", "gan", "g", "d", "gen", "disc", "content", "style", "perceptual", "feat",
    "vq", "commit", "commitment", "kd", "distill", "contrastive", "triplet", "center", "smooth",
    "dice", "focal", "ohem", "pose", "keypoint", "depth", "flow", "text", "image", "img",
    "running", "epoch", "batch", "step", "train", "val", "valid", "eval", "test", "weighted",
    "sum", "raw", "scaled", "unscaled", "avr", "ema", "smoothed", "policy", "value", "entropy",
    "critic", "actor", "q",
})

GEN_LOSS = frozenset({"g_loss", "loss_g", "gen_loss", "loss_gen", "generator_loss",
                      "loss_generator", "g_total_loss", "loss_g_total", "errg", "err_g",
                      "lossg", "g_total", "gan_g_loss"})
DISC_LOSS = frozenset({"d_loss", "loss_d", "disc_loss", "loss_disc", "discriminator_loss",
                       "loss_discriminator", "d_total_loss", "loss_d_total", "errd", "err_d",
                       "lossd", "d_total", "gan_d_loss"})

#: Fragments that mark a GAN's generator / discriminator loss in any metric name (matched as
#: substrings: "loss_disc", "discriminator", "critic_loss"): their losses rise and fall
#: against each other, and a discriminator at 50% is at equilibrium, not at chance.
GAN_GEN_HINTS = ("g_loss", "loss_g", "gen_loss", "loss_gen", "generator")
GAN_DISC_HINTS = ("d_loss", "loss_d", "disc", "critic")
#: Words of a top-1 accuracy name (split on non-alphanumerics); ACC_WORDS adds top-5.
TOP1_ACC_WORDS = frozenset({"acc", "accuracy", "top1", "acc1"})
ACC_WORDS = TOP1_ACC_WORDS | {"top5", "acc5"}


def is_top1_accuracy(name: str) -> bool:
    """Whether a metric name is a top-1 accuracy (``acc``, ``val_accuracy``, ``acc1``), not a
    top-5 one (its chance is 5/k, not 1/k)."""
    words = set(re.split(r"[^a-z0-9]+", name.lower()))
    return bool(TOP1_ACC_WORDS & words) and not words & (ACC_WORDS - TOP1_ACC_WORDS | {"5"})

CUMULATIVE_TIME = frozenset({"time", "elapsed", "elapsed_time", "wall_time", "walltime",
                             "time_elapsed", "total_time", "wall", "train_wall",
                             "elapsed_s", "elapsed_sec", "elapsed_seconds", "wall_clock",
                             "wallclock", "runtime", "train_runtime", "time_total"})
"""Names of a clock that may run over the whole run (differentiated when it only increases)."""

EPOCH_TIME = frozenset({"epoch_time", "epoch_duration", "time_per_epoch", "epoch",
                        "epoch_seconds", "epoch_secs", "seconds_per_epoch", "epoch_wall"})
"""Words (their unit stripped) of a time taken by one epoch."""


@dataclass(frozen=True)
class _Word:
    canonical: str
    kind: str = ""
    """``time`` (default seconds), ``mem`` (default MB), ``pct``, ``rate`` (per second),
    ``inv`` (iterations per second: 1/x is a step time) or ``""`` (no unit)."""


def _words(canonical: str, kind: str, *names: str) -> dict[str, _Word]:
    return {n: _Word(canonical, kind) for n in names}


WORDS: dict[str, _Word] = {
    **{w: _Word("loss") for w in LOSS_WORDS},
    **_words("lr", "", "lr", "learning_rate", "learningrate", "current_lr", "lr_0", "base_lr",
             "current_learning_rate"),  # nnU-Net: "Current learning rate: 0.00995"
    **_words("grad_norm", "", "grad_norm", "gnorm", "gradient_norm", "grad_norm_total",
             "total_grad_norm", "global_grad_norm", "grad_l2_norm", "grad_total_norm",
             "grads_norm", "grad_norm_2", "gradnorm", "global_norm", "total_norm",
             # llm.c / nanoGPT-style "| norm 1.2345 |": the gradient's, before clipping
             "norm"),
    **_words("loss_scale", "", "loss_scale", "grad_scale", "scaler_scale", "amp_scale",
             "loss_scaler", "scale_factor"),
    **_words("param_norm", "", "param_norm", "params_norm", "parameter_norm", "weight_norm",
             "weights_norm"),
    **_words("update_ratio", "", "update_ratio", "update_to_weight", "update_norm_ratio",
             "update_to_param_ratio"),
    **_words("step_time_s", "time", "step_time", "iter_time", "iteration_time", "batch_time",
             "time_per_step", "time_per_iter", "time_per_iteration", "time_per_batch",
             "train_step_time", "step_duration", "iteration_duration", "iter_duration",
             "per_step_time", "step_t", "elapsed_per_step", "time_step", "time_iter",
             # Megatron-LM: "elapsed time per iteration (ms): 1523.4"
             "elapsed_time_per_iteration", "elapsed_time_per_iter", "elapsed_time_per_step",
             # PaddleSeg / PaddleDetection / PaddleOCR: "batch_cost: 0.53, reader_cost: 0.07"
             "batch_cost", "avg_batch_cost",
             # NeMo's progress bar: "train_step_timing in s=0.61"
             "train_step_timing", "step_timing",
             # abbreviated beside a read time ("rtime 0.06; itime 1.95"; PIPs' trainer);
             # OpenCLIP's "Data (t): 0.003 Batch (t): 0.007" (t: the time)
             "itime", "iter_t", "batch_t",
             # minGPT's trainer: "iter_dt 4.35ms; iter 150: train loss 0.57"
             "iter_dt",
             # a loop's "dt" (t1 - t0 of the step), named with its unit: "dt_ms"
             "dt"),
    **_words("data_time_s", "time", "data_time", "data_load_time", "data_loading_time",
             "dataloader_time", "data_wait", "data_wait_time", "load_time", "data_loading",
             "input_time", "fetch_time", "data", "dataload", "data_load", "dataloader",
             "loader_time", "io_time", "reader_cost", "data_cost", "avg_reader_cost",
             # the same words in the other order
             "load_data_time", "load_data", "data_loader_time", "dataloading_time",
             "read_time", "rtime", "data_t"),
    **_words("compute_time_s", "time", "compute_time", "fwd_bwd_time", "forward_backward_time",
             "fwd_bwd", "forward_backward", "fwdbwd", "fwd_bwd_step", "compute",
             # DeepSpeed's wall_clock_breakdown: the forward of one micro-step (or of the
             # step), what the straggler rule compares across ranks
             "fwd_microstep", "fwd", "forward_microstep", "forward_time", "fwd_time"),
    **_words("comm_time_s", "time", "comm_time", "communication_time", "allreduce_time",
             "all_reduce_time", "comm", "communication", "allreduce", "all_reduce",
             "sync_wait", "comm_wait", "allreduce_wait", "collective_wait", "sync_time"),
    **_words("gc_time_s", "time", "gc_time", "gc_pause", "gc_duration"),
    **_words("samples_per_s", "rate", "samples", "examples", "imgs", "images", "img",
             "sample", "sequences", "seqs"),
    **_words("tokens_per_s", "rate", "tokens", "toks", "tok", "words"),
    **_words("tokens_per_s", "", "tps", "wps", "tgs", "tokens_per_s"),
    **_words("samples_per_s", "", "sps", "samples_per_s", "throughput_samples",
             # stable-baselines3's "time/fps": environment steps (samples) per second
             "fps"),
    **_words("step_time_s", "inv", "it", "its", "iter", "iters", "iterations", "steps",
             "step", "batches", "updates"),
    **_words("mem_alloc_mb", "mem", "mem_alloc", "memory_allocated", "mem_allocated",
             "allocated_memory", "allocated", "gpu_mem", "gpu_memory", "memory", "mem",
             "gpu_mem_alloc", "cuda_mem", "cuda_memory", "vram", "memory_used", "mem_used",
             "gpu_memory_used", "gpu_mem_used", "alloc", "cuda_memory_allocated",
             "gpu_memory_allocated", "torch_memory_allocated"),
    **_words("mem_reserved_mb", "mem", "mem_reserved", "memory_reserved", "reserved_memory",
             "gpu_mem_reserved", "cached_memory", "memory_cached", "reserved",
             "cuda_memory_reserved", "gpu_memory_reserved",
             # ESPnet's reporter: "gpu_max_cached_mem_GB" (torch.cuda.max_memory_reserved)
             "max_cached_mem", "gpu_max_cached_mem", "max_cached_memory"),
    **_words("mem_peak_mb", "mem", "max_mem", "max_memory", "peak_mem", "peak_memory",
             "mem_peak", "memory_peak", "max_memory_allocated", "max_mem_allocated",
             "max_allocated", "peak_allocated", "peak_mem_alloc", "max_memory_reserved",
             "max_reserved", "peak_gpu_mem", "max_gpu_mem", "gpu_peak_mem", "gpu_mem_peak"),
    **_words("rss_mb", "mem", "rss", "host_mem", "host_memory", "cpu_mem", "cpu_memory", "ram",
             "ram_used", "process_rss", "mem_rss", "memory_rss", "proc_rss"),
    **_words("gpu_util", "pct", "gpu_util", "gpu_utilization", "gpu_usage", "util",
             "utilization", "gpu_utilisation", "sm_util"),
    **_words("mfu", "pct", "mfu"),
    **_words("hfu", "pct", "hfu"),
}
"""Word -> canonical metric. Rates (``*_per_s``) are looked up by their counted noun."""

# Unit spellings -> (kind, canonical spelling, factor to the canonical unit of that kind).
_TIME_UNITS = {"ms": 1e-3, "msec": 1e-3, "millis": 1e-3, "milliseconds": 1e-3,
               "us": 1e-6, "usec": 1e-6, "s": 1.0, "sec": 1.0, "secs": 1.0,
               "seconds": 1.0, "second": 1.0, "min": 60.0, "mins": 60.0, "minutes": 60.0,
               "h": 3600.0, "hours": 3600.0, "hr": 3600.0}
_MEM_UNITS = {"bytes": 1.0 / 2**20, "b": 1.0 / 2**20, "kb": 1.0 / 1024, "kib": 1.0 / 1024,
              "mb": 1.0, "mib": 1.0, "gb": 1024.0, "gib": 1024.0, "tb": 2.0**20,
              "tib": 2.0**20}
_PCT_UNITS = {"pct": 1.0, "percent": 1.0, "%": 1.0, "perc": 1.0}
_CANON_UNIT = {"time": "s", "mem": "MB", "pct": "%"}


def unit_factor(kind: str, unit: str) -> float | None:
    """The factor from ``unit`` to the canonical unit of ``kind``, or None if they differ."""
    table = {"time": _TIME_UNITS, "mem": _MEM_UNITS, "pct": _PCT_UNITS}.get(kind, {})
    return table.get(unit)


_ALL_UNITS = sorted(set(_TIME_UNITS) | set(_MEM_UNITS) | set(_PCT_UNITS) - {"b", "h"},
                    key=len, reverse=True)
_PAREN_UNIT = re.compile(r"^(.*?)[\s_]*[(\[]\s*([a-z%]+)\s*[)\]]$")
_RATE = re.compile(r"^(?P<what>[a-z_]*?)_?(?:per_|/)(?P<per>s|sec|secs|second|seconds)$")
_PER_X = re.compile(r"^(?P<unit>ms|s|sec|secs|seconds|us)_?(?:per|/)_?"
                    r"(?P<what>batch|step|iter|iteration|it|update|epoch)$")
_PER_MODULE_NS = frozenset({"layer", "layers", "module", "modules", "params", "parameters",
                            "param", "weights", "gradients", "grads", "grad", "activations",
                            "act", "acts", "per_layer", "blocks", "block", "heads", "head"})
_TOTAL_WORDS = frozenset({"total", "main", "all", "sum", "overall", "objective"})
_GRAD_NS = frozenset({"grad_norm", "grad_norms", "grads", "grad", "gradients", "gradient",
                      "gradient_norm"})
_STEP_NOUNS = frozenset({"step", "iter", "iteration", "batch", "it", "update"})
_SPLIT = re.compile(r"/|(?<=[a-z_])\.(?=[a-z_])")
_AGG_SUFFIX = ("_step", "_epoch", "_mean", "_avg")


@dataclass(frozen=True)
class NameReading:
    """What a raw name says once taken apart."""

    canonical: str
    """The canonical metric its word means (``loss`` on the val side reads as ``val_loss``)."""
    side: str
    """``train``, ``val``, ``test`` or ``""`` (not said)."""
    namespaced: bool
    """True when the word was found under a namespace or a side prefix (``perf/...``)."""
    unit: str = ""
    """The unit the name carries (``ms``, ``gib``, ``pct``) or ``""``."""
    factor: float = 1.0
    invert: bool = False
    """Iterations per second: the step time is ``1/value``."""
    word_rank: int = 0
    agg: int = 0
    """0 plain, 1 ``_step``, 2 ``_epoch``/``_mean`` (Lightning's aggregated copy)."""
    group: str = ""
    """An eval set or a model's prefix (``g1`` in ``eval_g1_loss``)."""


def _norm(name: str) -> str:
    n = name.strip().lower()
    # "Loss (train)", "loss[val]": a side in brackets is a side
    n = re.sub(r"\s*[(\[](train|training|val|valid|validation|eval|test)[)\]]", r"_\1", n)
    n = re.sub(r"[\s\-]+", "_", n)
    # "tokens_per_second_per_gpu" (torchtune): a rate per device is still the rate; its
    # changes over the run are what the detectors read
    n = re.sub(r"(_per_(?:s|sec|second))_per_(?:gpu|device|rank|chip)$", r"\1", n)
    # "nll_nats", "loss_in_nats": a loss's own unit (the natural log), nothing to convert
    n = re.sub(r"_(?:in_)?nats$", "", n)
    # "train_speed(iter/s)" (ms-swift), "throughput(samples/s)": a rate named in brackets
    n = re.sub(r"^(?:[a-z_]*_)?(?:speed|throughput|rate)\((\w+)/s(?:ec)?\)$", r"\1_per_s", n)
    # "train_step_timing in s" (NeMo), "memory in gb": the unit after "in"
    n = re.sub(r"_in_(ms|s|sec|secs|seconds|us|mb|mib|gb|gib)$", r"_\1", n)
    return n


def _strip_unit(leaf: str) -> tuple[str, str]:
    """``step_time_ms`` -> (``step_time``, ``ms``); ``time(s)`` -> (``time``, ``s``)."""
    m = _PAREN_UNIT.match(leaf)
    if m and (m.group(2) in _TIME_UNITS or m.group(2) in _MEM_UNITS or
              m.group(2) in _PCT_UNITS):
        return m.group(1).rstrip("_"), m.group(2)
    if leaf.endswith("%"):
        return leaf[:-1].rstrip("_"), "%"
    for u in _ALL_UNITS:
        if leaf.endswith("_" + u) and len(leaf) > len(u) + 1:
            return leaf[: -len(u) - 1], u
    return leaf, ""


def _strip_side(leaf: str) -> tuple[str, str, str]:
    """``val_loss`` -> (``loss``, ``val``, ``""``); ``cls_val_loss`` -> (``loss``, ``val``,
    ``cls``); ``loss_valid`` -> (``loss``, ``val``, ``""``)."""
    parts = leaf.split("_")
    for i, p in enumerate(parts):
        side = _side_of(p)
        if side and len(parts) > 1:
            rest = parts[:i] + parts[i + 1:]
            group = "_".join(parts[:i]) if 0 < i < len(parts) - 1 else ""
            word = "_".join(parts[i + 1:]) if group else "_".join(rest)
            if word:
                return word, side, group
    return leaf, "", ""


def _side_of(part: str) -> str:
    if part in VAL_SIDE:
        return "val"
    if part in TEST_SIDE:
        return "test"
    if part in TRAIN_SIDE:
        return "train"
    return ""


#: Words that name a metric only with a time unit written on them ("data_ms" is the data
#: wait; a bare "data" column could hold anything: a count of samples, an id).
_UNIT_ONLY = frozenset({"data", "dataload", "data_load", "dataloader", "dt"})


#: What a rate carries before its noun: DeepSpeed's "CurrSamplesPerSec" and
#: "RunningAvgSamplesPerSec" are samples/s (the current and the running-average reading).
_RATE_PREFIX = re.compile(r"^(?:curr|current|running_avg|avg|mean|throughput|interval|global|"
                          r"train)_")


def _lookup(word: str) -> tuple[_Word | None, int, str, float, bool]:
    """(word entry, rank, unit, factor, invert) for a word that may carry a unit or a rate."""
    m = _PER_X.match(word)
    if m:  # ms_per_batch, sec/iter
        f = _TIME_UNITS[m.group("unit")]
        return WORDS["step_time"], 0, m.group("unit"), f, False
    m = _RATE.match(word)
    if m:
        what = m.group("what").strip("_")
        w = WORDS.get(what)
        if w is None or w.kind not in ("rate", "inv"):  # "throughput_samples/s": samples/s
            w = WORDS.get(_RATE_PREFIX.sub("", what))
        if w is not None and w.kind in ("rate", "inv"):
            return w, 0, "", 1.0, w.kind == "inv"
        return None, 0, "", 1.0, False
    base, unit = _strip_unit(word)
    w = WORDS.get(base)
    if (base in _STEP_NOUNS and unit in _TIME_UNITS) or (base == "time" and unit in (
            "ms", "msec", "us", "usec")):  # step_ms, iter_s, time_ms: a time per step
        return WORDS["step_time"], 0, unit, _TIME_UNITS[unit], False
    if w is None or w.kind in ("rate", "inv") or (base in _UNIT_ONLY and not unit):
        return None, 0, unit, 1.0, False
    if unit:
        fu = unit_factor(w.kind, unit)
        if fu is None:
            return None, 0, unit, 1.0, False
        return w, _rank(base), unit, fu, False
    return w, _rank(base), "", 1.0, False


def _rank(base: str) -> int:
    try:
        return LOSS_WORDS.index(base)
    except ValueError:
        return 0


def _with_agg(word: str) -> tuple[str, int]:
    for i, suf in enumerate(_AGG_SUFFIX):
        if word.endswith(suf) and len(word) > len(suf):
            return word[: -len(suf)], 1 if i == 0 else 2
    return word, 0


_LIST_SUFFIX = re.compile(r"_(?:history|hist|list|curve|values)$")


def _singular(word: str) -> str:
    """A name for the whole list of values read as the value's name: ``train_losses`` and
    ``loss_history`` (a script's ``json.dump({"train_losses": [...]})``) are the loss."""
    word = _LIST_SUFFIX.sub("", word)
    return word[:-2] if word.endswith("losses") else word


#: camelCase / PascalCase word boundaries ("CurrSamplesPerSec", "valLoss", "GPUMem"), before a
#: capital that starts a word of >= 3 letters ("mIoU", "TFLOPs", "mAP" stay whole).
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z][a-z]{2,})|(?<=[A-Z])(?=[A-Z][a-z]{2,})")


def split_camel(word: str) -> str:
    """``word`` with "_" between its camelCase words ("CurrSamplesPerSec" ->
    "Curr_Samples_Per_Sec"); unchanged when it has none."""
    return _CAMEL.sub("_", word)


def read_name(raw: str) -> NameReading | None:
    """Read a raw column name as a canonical metric, or None when no rule reads it; a
    camelCase name no rule reads is read again with its words apart (DeepSpeed's
    "CurrSamplesPerSec", "MaxMemAllocated"; a script's "valLoss")."""
    got = _read_name(raw)
    if got is None and (split := split_camel(raw.strip())) != raw.strip():
        got = _read_name(split)
    head, _, rest = raw.strip().partition("_")
    if got is None and rest and "/" not in raw and head.lower() in _FLAT_NS:
        # "perf_step_time_ms", "sys_rss_mb": a namespace joined by "_" (TensorBoard's CSV
        # export names each tag's file so, "perf/step_time_ms" -> "..-tag-perf_step_time_ms")
        got = _read_name(f"{head}/{rest}")
    return got


#: Namespace words that, followed by "_", still name a namespace and not a metric.
_FLAT_NS = frozenset({"perf", "performance", "sys", "system", "metrics", "metric", "charts",
                      "stats", "trainer", "timing", "timings", "throughput", "speed",
                      "scalars"})


def _read_name(raw: str) -> NameReading | None:
    name = _norm(raw)
    parts = [p for p in _SPLIT.split(name) if p]
    # Rates written with a slash ("it/s", "tokens/sec") are one word, not a namespace.
    if len(parts) >= 2 and parts[-1] in ("s", "sec", "second", "secs"):
        parts = parts[:-2] + [parts[-2] + "_per_" + parts[-1]]
    if len(parts) >= 2 and parts[-2] in ("ms", "s", "sec", "us") and parts[-1] in (
            "batch", "step", "iter", "it", "iteration", "update"):
        parts = parts[:-2] + [parts[-2] + "_per_" + parts[-1]]
    if not parts:
        return None
    side = ""
    group_parts: list[str] = []
    # "loss/val", "loss/train": the side comes last.
    if len(parts) >= 2 and _side_of(parts[-1]) and not _side_of(parts[-2]):
        side = _side_of(parts[-1])
        parts = parts[:-2] + [parts[-2]]
    leaf = parts[-1]
    ns = parts[:-1]
    # "grad_norm/total", "grads/norm": the whole model's under a gradient namespace
    if ns and (leaf in _TOTAL_WORDS or leaf in ("norm", "global", "l2")) and \
            ns[-1] in _GRAD_NS:
        leaf = "grad_norm"
        ns = ns[:-1]
    if any(p in _PER_MODULE_NS for p in ns) or any(re.search(r"\.\d", p) for p in ns):
        return None  # "layer/encoder.0/grad_norm": one module's, not the run's
    if leaf == "norm" and any(p not in ("train", "grad", "grads", "gradient") for p in ns):
        return None  # "update/norm", "weight/norm": a bare norm is the gradient's only alone
    # "loss/total", "losses/train/total": the total under a loss namespace is the loss
    if ns and leaf in _TOTAL_WORDS and any(p in ("loss", "losses") for p in ns):
        leaf = "loss"
        ns = [p for p in ns if p not in ("loss", "losses")]
    # "val_loss/g1": a val-side word followed by an eval set's name.
    if ns and read_name(ns[-1]) is not None and _lookup(leaf)[0] is None and \
            _strip_side(leaf)[1] == "" and re.fullmatch(r"[a-z0-9_]+", leaf):
        inner = read_name("/".join(ns))
        if inner is not None and inner.canonical == "val_loss":
            return NameReading("val_loss", "val", True, word_rank=inner.word_rank,
                               group=leaf)
    for p in ns:
        s = _side_of(p)
        if not s and "_" in p and _strip_side(p)[0] in GENERIC_NS:
            s = _strip_side(p)[1]  # "valid_metrics/...": a side on a generic namespace
        if s:
            side = side or s
        elif p not in GENERIC_NS and not re.fullmatch(r"(rank|gpu|device|cuda)_?\d+", p):
            group_parts.append(p)
    word, agg = _with_agg(_singular(leaf))
    w, rank, unit, factor, invert = _lookup(word)
    if w is None and agg and (whole := _lookup(_singular(leaf)))[0] is not None:
        # "time_per_step", "seconds_per_step": the "_step" is the name's, not Lightning's
        # per-step aggregate of it
        word, agg = _singular(leaf), 0
        w, rank, unit, factor, invert = whole
    leaf_group = ""
    if w is None:
        stripped, s2, leaf_group = _strip_side(word)
        w, rank, unit, factor, invert = _lookup(stripped)
        if w is None:
            # "eval_g1_loss": <side>_<set>_loss names an eval set's loss.
            if s2 in ("val", "test") and stripped.endswith("_loss"):
                set_name = stripped[: -len("_loss")]
                if set_name and set_name not in _QUALIFIERS and \
                        not any(q in _QUALIFIERS for q in set_name.split("_")):
                    return NameReading("val_loss", s2, True, group=set_name, agg=agg)
            return None
        if s2:
            side = s2 if not side or side == s2 else side
        namespaced = True
    else:
        namespaced = bool(ns) or side != ""
    if w.canonical == "loss":
        canonical = "val_loss" if side in ("val", "test") else "loss"
    else:
        if side in ("val", "test"):
            return None  # eval timings, eval lr: not the training loop's metric
        canonical = w.canonical
    group = leaf_group or "/".join(group_parts)
    return NameReading(canonical, side, namespaced, unit=unit, factor=factor, invert=invert,
                       word_rank=rank, agg=agg, group=group)


def unit_label(reading: NameReading) -> str:
    """``unit ms->s`` for a reading that converts, else ``""``."""
    if not reading.unit or reading.invert:
        return ""
    kind = _kind_of(reading.canonical)
    to = _CANON_UNIT.get(kind, "")
    frm = reading.unit
    if kind == "pct" or frm == to.lower():
        return ""
    return f"unit {frm}->{to}"


def _kind_of(canonical: str) -> str:
    if canonical.endswith("_time_s"):
        return "time"
    if canonical.endswith("_mb"):
        return "mem"
    if canonical in ("gpu_util", "mfu", "hfu"):
        return "pct"
    return ""


def time_unit_of(raw: str) -> tuple[str, float, str] | None:
    """``(word, factor to seconds, unit)`` for a name that is a word plus an optional time
    unit (``epoch_time_ms`` -> (``epoch_time``, 1e-3, ``ms``)); None when its unit is not a
    time."""
    base, unit = _strip_unit(_norm(raw).split("/")[-1].lstrip("_"))  # W&B "_runtime"
    if not unit:
        return base, 1.0, ""
    f = _TIME_UNITS.get(unit)
    return None if f is None else (base, f, unit)


# --------------------------------------------------------------------------- CJK words
#: Chinese words for a training log's names, in the order they are replaced (longest first),
#: so a script that prints "训练次数：100, Loss：1.98" and "整体测试集上的Loss: 262.6" (test
#: set) reads as "train step: 100, Loss: 1.98" and "test Loss: 262.6": the test loss on the
#: validation side, not a spike in the training loss.
_CJK_WORDS: tuple[tuple[str, str], ...] = (
    ("测试集", "test"), ("验证集", "val"), ("训练集", "train"), ("测试", "test"),
    ("验证", "val"), ("评估", "eval"), ("训练", "train"), ("损失值", "loss"),
    ("损失", "loss"), ("准确率", "acc"), ("正确率", "acc"), ("准确度", "acc"),
    ("精度", "acc"), ("学习率", "lr"), ("迭代次数", "iter"), ("迭代", "iter"),
    ("次数", "step"), ("步数", "step"), ("轮次", "epoch"), ("耗时", "time"), ("用时", "time"),
    ("时间", "time"), ("：", ":"), ("，", ","), ("；", ";"), ("（", "("), ("）", ")"),
)
#: "第 3 轮" (round 3) / "第 120 步" (step 120): an ordinal counter.
_CJK_ORDINAL = re.compile(r"第\s*(\d+)\s*(轮|个?epoch|周期|步|次|批)")
#: Any other CJK character (or fullwidth form) is prose around the names: a space.
_CJK_OTHER = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]+")


def translate_cjk(line: str) -> str:
    """``line`` with its Chinese names in English and other CJK characters as spaces (a line
    without any is returned as it is)."""
    if not _CJK_OTHER.search(line):
        return line
    line = _CJK_ORDINAL.sub(
        lambda m: f" {'step' if m.group(2) in ('步', '次', '批') else 'epoch'} {m.group(1)} ", line)
    for zh, en in _CJK_WORDS:
        if zh in line:
            line = line.replace(zh, en if len(en) == 1 else f" {en} ")
    return _CJK_OTHER.sub(" ", line)
