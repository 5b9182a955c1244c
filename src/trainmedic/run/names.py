"""Canonical metric names and the rules that map a log's own names onto them.

Every importer hands over its columns under the names the log used ("raw" names). This module
decides, from a table of aliases, which raw column becomes which canonical metric of
DESIGN.md (``loss``, ``val_loss``, ``lr``, ...). Columns that map to nothing keep their raw
name, so a user can still point a canonical name at them with ``--map canonical=source``.

The rules are data (``ALIASES``, ``DERIVED``, ``STEP_COLUMNS``), grouped by the framework whose
logs use them, so adding a framework is adding rows, not code.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "CANONICAL",
    "STEP_COLUMNS",
    "FALLBACK_STEP_COLUMNS",
    "Alias",
    "ALIASES",
    "Derivation",
    "DERIVED",
    "NameResolution",
    "resolve_names",
    "find_step_column",
    "close_names",
]

CANONICAL: tuple[str, ...] = (
    "loss", "val_loss", "grad_norm", "lr", "loss_scale", "param_norm", "update_ratio",
    "step_time_s", "data_time_s", "compute_time_s", "comm_time_s", "samples_per_s",
    "tokens_per_s", "mem_alloc_mb", "mem_reserved_mb", "mem_peak_mb", "rss_mb", "gpu_util",
    "gc_time_s", "mfu", "hfu",
)
"""The canonical metric names of DESIGN.md."""

STEP_COLUMNS: tuple[str, ...] = (
    "step",                 # generic, Lightning CSVLogger, trainmedic's own store
    "global_step",          # HF Trainer state, many hand-written loggers
    "iteration",            # Detectron2 metrics.json, Megatron
    "iter",                 # mmengine / mmdetection
    "num_updates",          # fairseq
    "current_steps",        # LLaMA-Factory trainer_log.jsonl
    "trainer/global_step",  # Lightning under W&B
    "train/global_step",    # HF Trainer under W&B
    "time/total_timesteps",  # Stable-Baselines3 logger (environment steps); its
                             # "rollout/ep_rew_mean" is a reward and keeps its raw name
    "timestepssofar",       # OpenAI Baselines' PPO1/TRPO progress.csv (environment steps)
    "total_timesteps",      # OpenAI Baselines' PPO2/A2C progress.csv (environment steps)
    "training_iteration",   # Ray Tune progress.csv / result.json (one per tune.report)
    "_step",                # W&B history export (counts log calls, so after the above)
    # hand-written loggers' own spellings of the same counter
    "n_iter", "niter", "global_iter", "train_step", "train_iter", "opt_step",
    "optimizer_step", "n_updates", "updates", "it",
    "#",                    # spaCy's training table ("E  #  LOSS TEXTCAT  ...  SCORE")
)
"""Columns that carry the optimizer step, best first (matched case-insensitively)."""

FALLBACK_STEP_COLUMNS: tuple[str, ...] = ("epoch",)
"""Used as the step only when no column of STEP_COLUMNS exists (Ultralytics YOLO, Keras)."""


@dataclass(frozen=True)
class Alias:
    """One rule: a raw column name (or pattern) that means a canonical metric."""

    canonical: str
    source: str
    """Lower-case exact name, or a regular expression when ``pattern`` is true."""
    family: str
    """The framework whose logs use this name (for ``run.meta`` and for readers)."""
    pattern: bool = False
    requires: tuple[str, ...] = ()
    """Other raw columns (lower-case) that must be present: scopes an ambiguous name such as
    ``time`` to the framework where it means seconds per step."""
    scale: float = 1.0
    """Multiply the values by this to reach the canonical unit (GiB -> MB)."""


def _family(family: str, *rows: tuple) -> list[Alias]:
    out = []
    for row in rows:
        canonical, source, *rest = row
        opts = rest[0] if rest else {}
        out.append(Alias(canonical=canonical, source=source, family=family, **opts))
    return out


# Order matters: for each canonical name the first rule whose source is present wins.
# A canonical name present as is (``loss``) always wins over every alias.
ALIASES: tuple[Alias, ...] = tuple(
    # Hugging Face Trainer, trainer_state.json log_history and its TensorBoard/W&B tags
    # (transformers/trainer.py: "loss", "learning_rate", "grad_norm", "eval_loss";
    # the TensorBoard and W&B callbacks rewrite them as "train/..", "eval/..").
    _family(
        "huggingface",
        ("loss", "train/loss"),
        ("val_loss", "eval_loss"),
        ("val_loss", "eval/loss"),
        ("lr", "learning_rate"),
        ("lr", "train/learning_rate"),
        ("grad_norm", "train/grad_norm"),
    )
    # PyTorch Lightning (CSVLogger / TensorBoardLogger): self.log("train_loss", on_step=True,
    # on_epoch=True) writes "train_loss_step" and "train_loss_epoch"; the step series is the
    # loss, the _epoch series stays under its raw name. LearningRateMonitor writes
    # "lr-<Optimizer>" and "lr-<Optimizer>/pg<N>"; grad-norm tracking "grad_2.0_norm_total".
    + _family(
        "lightning",
        ("loss", "train_loss_step"),
        ("loss", "loss_step"),
        ("loss", "train_loss"),
        ("val_loss", "val_loss_epoch"),
        ("val_loss", "valid_loss"),
        ("val_loss", "validation_loss"),
        ("lr", r"lr-[a-z0-9_]+(/pg\d+)?", {"pattern": True}),
        ("grad_norm", "grad_2.0_norm_total"),
        ("grad_norm", "grad_2.0_norm/total"),
    )
    # TensorBoard-style tags written by hand or by many trainers ("train/loss", "val/loss").
    + _family(
        "tensorboard",
        ("loss", "train/loss_step"),
        ("loss", "loss/train"),
        ("val_loss", "val/loss"),
        ("val_loss", "val/loss_epoch"),
        ("val_loss", "validation/loss"),
        ("val_loss", "loss/valid"),
        ("val_loss", "loss/val"),
        ("val_loss", "loss/validation"),
        ("lr", "train/lr"),
        ("lr", "lr/train"),
    )
    # Keras: CSVLogger uses "loss"/"val_loss"/"learning_rate"; its TensorBoard callback
    # writes "epoch_loss" in train/ and validation/ sub-folders (prefixed by our reader),
    # "batch_loss" per batch, "evaluation_loss_vs_iterations" for validation.
    + _family(
        "keras",
        ("loss", "train/batch_loss"),
        ("loss", "train/epoch_loss"),
        ("val_loss", "validation/evaluation_loss_vs_iterations"),
        ("val_loss", "validation/epoch_loss"),
        ("lr", "train/epoch_learning_rate"),
    )
    # Detectron2 metrics.json (detectron2/utils/events.py, JSONWriter): "total_loss", "lr",
    # "time" (seconds per iteration) and "data_time" (seconds waiting for data).
    + _family(
        "detectron2",
        ("loss", "total_loss"),
        ("step_time_s", "time", {"requires": ("data_time",)}),
        ("data_time_s", "data_time"),
    )
    # pytorch/examples imagenet/main.py's ProgressMeter: "Time  1.187 ( 1.292)    Data  0.001
    # ( 0.048)": batch time and data-loading time in seconds (AverageMeter "Time", "Data").
    + _family(
        "torch_examples",
        ("step_time_s", "time", {"requires": ("data",)}),
        ("data_time_s", "data", {"requires": ("time",)}),
        # timm's train.py: "Time: 0.501s,  512/s  ...  Data: 0.010 (0.010)"
        ("data_time_s", "data", {"requires": ("time_s",)}),
        ("step_time_s", "time_s", {"requires": ("data",)}),
    )
    # Ultralytics YOLO results.csv: one row per epoch, "lr/pg0..2" (YOLOv8+) or "x/lr0..2"
    # (YOLOv5); the loss is split into components (see DERIVED). Its "time" column is
    # cumulative seconds, not per step, so the Detectron2 "time" rule above requires
    # "data_time", which YOLO never writes.
    + _family(
        "ultralytics",
        ("lr", "lr/pg0"),
        ("lr", "x/lr0"),
    )
    # MMDetection 2.x log.json: "memory" is torch.cuda.max_memory_allocated() in MB
    # (mmcv/runner/hooks/logger/text.py), "time"/"data_time" as in Detectron2.
    + _family(
        "mmdetection",
        ("mem_peak_mb", "memory", {"requires": ("data_time", "iter")}),
    )
    # Physics-informed nets trained with Lightning (e.g. PINN examples): "mean_loss" is the
    # training objective, the other "*_loss" columns are its terms.
    + _family(
        "pinn",
        ("loss", "mean_loss"),
    )
    # Megatron-LM TensorBoard tags (megatron/training/training.py: training_log).
    + _family(
        "megatron",
        ("loss", "lm loss"),
        ("val_loss", "lm loss validation"),
        # its console's evaluation line, "validation loss at iteration N | lm loss value: X"
        # (textlog puts the line's keys on the valid side)
        ("val_loss", "valid_lm_loss_value"),
        ("lr", "learning-rate"),
        ("grad_norm", "grad-norm"),
        ("loss_scale", "loss-scale"),
        ("step_time_s", "iteration-time"),
    )
    # fairseq JSON logs ("gnorm", "loss_scale", "wps" = target tokens per second).
    + _family(
        "fairseq",
        ("grad_norm", "gnorm"),
        ("tokens_per_s", "wps"),
    )
    # DeepSpeed TensorBoard monitor ("Train/Samples/train_loss" etc., step = samples seen).
    + _family(
        "deepspeed",
        ("loss", "train/samples/train_loss"),
        ("lr", "train/samples/lr"),
        ("loss_scale", "train/samples/loss_scale"),
    )
    # torchtitan metrics (TensorBoard / W&B): memory in GiB, timings in seconds.
    + _family(
        "torchtitan",
        ("loss", "loss_metrics/global_avg_loss"),
        ("tokens_per_s", "tps"),
        ("tokens_per_s", "throughput(tps)"),
        ("step_time_s", "time_metrics/end_to_end(s)"),
        ("data_time_s", "time_metrics/data_loading(s)"),
        ("mem_reserved_mb", "memory/max_reserved(gib)", {"scale": 1024.0}),
        ("mem_peak_mb", "memory/max_active(gib)", {"scale": 1024.0}),
    )
    # torchtune's training.get_memory_stats(): bytes / 2**30, i.e. GiB, with no unit in the
    # name ("peak_memory_active", "peak_memory_alloc", "peak_memory_reserved").
    + _family(
        "torchtune",
        ("mem_peak_mb", "peak_memory_alloc", {"scale": 1024.0}),
        ("mem_reserved_mb", "peak_memory_reserved", {"scale": 1024.0}),
    )
    # GluonTS's trainer: "avg_epoch_loss" and, with validation data,
    # "validation_avg_epoch_loss" (its logger's "Epoch[3] Evaluation metric ...").
    + _family("gluonts", ("val_loss", "validation_avg_epoch_loss"))
    # ESPnet2's reporter: one lr per optimizer and param group ("optim0_lr0"; a GAN's
    # generator is optim0).
    + _family("espnet", ("lr", "optim0_lr0"))
    # Ray Tune's progress.csv / result.json: the time of each reported iteration.
    + _family("raytune", ("step_time_s", "time_this_iter_s"))
    # MosaicML Composer loggers.
    + _family(
        "composer",
        ("loss", "loss/train/total"),
        ("lr", r"lr-[a-z0-9_]+/group\d+", {"pattern": True}),
        ("samples_per_s", "throughput/samples_per_sec"),
        ("tokens_per_s", "throughput/tokens_per_sec"),
        # OptimizerMonitor: the global gradient norm (per-layer norms under their names)
        ("grad_norm", "l2_norm/grad/global"),
    )
    # YOLACT's console ("[  0]   530 || B: 3.233 | C: 2.508 | M: 4.462 | S: 0.910 | T: 11.113
    # || ETA ... || timer: 1.783"): one letter per term of the objective (box, class, mask,
    # semantic segmentation, mask IoU) and T their total (yolact/train.py, loss_labels);
    # "timer" is the iteration's wall time.
    + _family(
        "yolact",
        ("loss", "t", {"requires": ("b", "c", "m")}),
        ("step_time_s", "timer", {"requires": ("b", "c", "m", "t")}),
    )
    # Common hand-written names.
    + _family(
        "generic",
        ("loss", "training_loss"),
        ("loss", "train/total_loss"),
        ("val_loss", "val/total_loss"),
        ("grad_norm", "gradient_norm"),
        ("grad_norm", "total_norm"),
        # the whole model's norm under a "grad/" namespace (per-module norms sit there too)
        ("grad_norm", r"(?:[a-z_]+/)?grads?/(?:global|total)(?:_grad)?_norm", {"pattern": True}),
        # a scheduler's first param group, tagged by hand ("LR/group0", "lr/param_group_0")
        ("lr", r"(?:train/)?lr/(?:group|param_group)_?0", {"pattern": True}),
        ("loss_scale", "train/loss_scale"),
        ("loss_scale", "grad_scale"),
        # the scaler's scale under a mixed-precision namespace ("amp/scale", "fp16/scale")
        ("loss_scale", r"(?:amp|fp16|scaler|grad_scaler|mixed_precision)[/._]scale",
         {"pattern": True}),
        ("step_time_s", "step_time"),
        ("step_time_s", "train/step_time"),
        ("step_time_s", "iteration_time"),
        ("data_time_s", "data_wait_s"),
        ("samples_per_s", "samples_per_second"),
        ("samples_per_s", "train/samples_per_second"),
        ("tokens_per_s", "tokens_per_second"),
        ("tokens_per_s", "tokens_per_sec"),
        ("gpu_util", "system/gpu.0.gpu"),
    )
)


@dataclass(frozen=True)
class Derivation:
    """A canonical metric computed from several raw columns when the log has no total."""

    canonical: str
    pattern: str
    """Regular expression (lower-case) selecting the component columns."""
    family: str
    requires_any: tuple[str, ...] = ()
    """At least one of these raw columns (lower-case) must be present: summing terms is only
    right where the framework defines the objective as their sum (not for a GAN's g/d loss)."""
    min_components: int = 2


#: Columns only Ultralytics writes: its lr per param group, and its mAP names (a results.csv
#: cut down to the losses and metrics still says YOLO).
_YOLO_MARKERS = ("lr/pg0", "x/lr0", "metrics/map50(b)", "metrics/map50-95(b)",
                 "metrics/map_0.5", "metrics/map_0.5:0.95", "metrics/map50(m)")
DERIVED: tuple[Derivation, ...] = (
    # Ultralytics YOLO logs the training objective only as its terms: box + cls + dfl (v8) or
    # box + obj + cls (v5), each the epoch's running mean; the objective it optimizes is their
    # sum (ultralytics/utils/loss.py, v8DetectionLoss). Recognized by its lr columns.
    # YOLOv10 logs its two heads' terms as "<term>_om" (one-to-many) and "<term>_oo"
    # (one-to-one); the objective is the sum of both heads' terms.
    Derivation(canonical="loss", pattern=r"train/[a-z0-9_]+_(?:loss|om|oo)",
               family="ultralytics", requires_any=_YOLO_MARKERS),
    Derivation(canonical="val_loss", pattern=r"val/[a-z0-9_]+_(?:loss|om|oo)",
               family="ultralytics", requires_any=_YOLO_MARKERS),
    # BasicSR (ESRGAN, Real-ESRGAN, GFPGAN) logs the generator's objective as its terms
    # (l_pix, l_percep, l_style, l_g_gan); l_d_real / l_d_fake are the discriminator's.
    Derivation(canonical="loss", pattern=r"l_(?!d_)[a-z0-9_]+", family="basicsr",
               requires_any=("l_pix", "l_percep", "l_g_gan"), min_components=1),
    # MXNet's Faster R-CNN family (Deformable ConvNets, FPN, mx-rcnn) prints a Speedometer line
    # with the four terms of the detector's objective and no total: RPN and R-CNN
    # classification (LogLoss) and box regression (L1Loss); the objective is their sum
    # (Ren et al. 2015, eq. 1, for each stage).
    Derivation(canonical="loss", pattern=r"(?:rpn|rcnn)(?:logloss|l1loss)", family="mxnet_rcnn",
               requires_any=("rpnlogloss", "rcnnlogloss")),
    # spaCy's `spacy train` table prints one "LOSS <COMPONENT>" column per trained pipe
    # ("LOSS TOK2VEC  LOSS NER"); the objective it minimizes is their sum.
    Derivation(canonical="loss", pattern=r"loss [a-z0-9_]+", family="spacy", min_components=1),
    # pytorch-CycleGAN-and-pix2pix prints the generator's objective only as its terms
    # (loss_G = G_A + G_B + cycle_A + cycle_B + idt_A + idt_B, the cycle and identity terms
    # already weighted by lambda; pix2pix: G_GAN + G_L1), beside the discriminators' (D_A,
    # D_B; D_real, D_fake). Old versions write "Cyc_A".
    Derivation(canonical="loss", pattern=r"g_(?:a|b|gan|l1)|cyc(?:le)?_[ab]|idt_[ab]",
               family="cyclegan", requires_any=("d_a", "d_b", "d_real", "d_fake")),
    # Its console prints the same terms without the "train/" namespace, beside GPU_mem
    # ("Epoch GPU_mem box_loss cls_loss dfl_loss Instances Size"; YOLOv5 before 7.0:
    # "Epoch gpu_mem box obj cls labels img_size").
    Derivation(canonical="loss", pattern=r"(?:box|obj|cls|dfl|seg|pose|kobj|rle)(?:_loss)?",
               family="ultralytics", requires_any=("gpu_mem", "gpu_mem_mb")),
)


@dataclass
class NameResolution:
    """Which raw column becomes which canonical metric, for one log."""

    aliases: dict[str, str] = field(default_factory=dict)
    """``{canonical: raw source name}`` for every mapped metric."""
    scales: dict[str, float] = field(default_factory=dict)
    """``{canonical: factor}`` where a unit conversion applies."""
    derived: dict[str, list[str]] = field(default_factory=dict)
    """``{canonical: [raw components]}`` summed to make the metric."""
    families: dict[str, str] = field(default_factory=dict)
    """``{canonical: family}`` of the rule that mapped it (``user`` for --map)."""
    how: dict[str, str] = field(default_factory=dict)
    """``{canonical: how}``: ``canonical``, ``alias``, ``namespace``, ``unit ms->s``, ..."""
    inverted: dict[str, str] = field(default_factory=dict)
    """``{canonical: raw}`` of a rate whose inverse the metric is (``it/s`` -> step time),
    used only when the log has no direct source of the metric (not in ``aliases``)."""
    meta: dict[str, str] = field(default_factory=dict)
    """Facts about the run the names tell (``objective: adversarial`` for a G/D pair)."""

    def rename(self) -> dict[str, str]:
        """``{raw name: output name}`` for the mapped columns."""
        return {src: canon for canon, src in self.aliases.items()}


_WANDB_EXPORT = re.compile(r"^.+ - (?P<key>.+?)(?P<bound>__min|__max)?$")
"""A W&B chart exported as CSV names columns "<run name> - <key>" plus "__MIN"/"__MAX"
sampling bounds; the key alone is matched against the rules, the bounds never are."""


def _present(names: Iterable[str]) -> dict[str, str]:
    """``{lower-case stripped name: original name}``; the first spelling wins. A W&B export's
    "<run> - train/loss" is also entered as "train/loss" (when nothing else has that name)."""
    out: dict[str, str] = {}
    extra: dict[str, str] = {}
    for n in names:
        key = n.strip().lower()
        out.setdefault(key, n)
        m = _WANDB_EXPORT.match(key)
        if m and not m.group("bound"):
            extra.setdefault(m.group("key").strip(), n)
    for k, n in extra.items():
        out.setdefault(k, n)
    return out


def resolve_names(names: Iterable[str], mapping: Mapping[str, str] | None = None,
                  exclude: Iterable[str] = ()) -> NameResolution:
    """Decide the canonical name of each raw column in ``names``.

    ``mapping`` is the user's ``{canonical: source}`` and overrides every rule; a source the log
    lacks is ignored here (the loader decides whether that is an error, since a mapped source
    may live in another file of the run). ``exclude`` names columns never to map (the step).
    """
    present = _present(names)
    for ex in exclude:
        present.pop(ex.strip().lower(), None)
    used: set[str] = set()
    res = NameResolution()

    for canonical, source in (mapping or {}).items():
        wanted = source.strip().lower()
        if wanted in present and wanted not in used:
            res.aliases[canonical] = present[wanted]
            res.families[canonical] = "user"
            res.how[canonical] = "user --map"
            used.add(wanted)

    # A canonical name logged as is wins over any alias of it.
    for canonical in CANONICAL:
        if canonical not in res.aliases and canonical in present and canonical not in used:
            res.aliases[canonical] = present[canonical]
            res.families[canonical] = "canonical"
            res.how[canonical] = "canonical"
            used.add(canonical)

    for rule in ALIASES:
        if rule.canonical in res.aliases:
            continue
        if any(r not in present for r in rule.requires):
            continue
        key: str | None
        if rule.pattern:
            rx = re.compile(rule.source)
            hits = sorted((k for k in present if k not in used and rx.fullmatch(k)),
                          key=lambda k: (len(k), k))
            key = hits[0] if hits else None
        else:
            key = rule.source if rule.source in present and rule.source not in used else None
        if key is None:
            continue
        res.aliases[rule.canonical] = present[key]
        res.families[rule.canonical] = rule.family
        res.how[rule.canonical] = "alias"
        if rule.scale != 1.0:
            res.scales[rule.canonical] = rule.scale
        used.add(key)

    for d in DERIVED:
        if d.canonical in res.aliases or d.canonical in res.derived:
            continue
        if d.requires_any and not any(r in present for r in d.requires_any):
            continue
        rx = re.compile(d.pattern)
        parts = [present[k] for k in sorted(present) if k not in used and rx.fullmatch(k)]
        if len(parts) >= d.min_components:
            res.derived[d.canonical] = parts
            res.families[d.canonical] = d.family
            used.update(k.strip().lower() for k in parts)
    from trainmedic.run.guess import guess_names

    guess_names(res, {k: v for k, v in present.items() if k not in used})
    return res


def find_step_column(names: Iterable[str]) -> str | None:
    """The raw name of the step column, best of STEP_COLUMNS then FALLBACK_STEP_COLUMNS."""
    present = _present(names)
    for cand in STEP_COLUMNS + FALLBACK_STEP_COLUMNS:
        if cand in present:
            return present[cand]
    return None


def close_names(wanted: str, names: Iterable[str], n: int = 5) -> list[str]:
    """Names in ``names`` that look like ``wanted`` (for an error message)."""
    pool = list(dict.fromkeys(names))
    lower = {p.lower(): p for p in pool}
    hits = difflib.get_close_matches(wanted.lower(), list(lower), n=n, cutoff=0.5)
    out = [lower[h] for h in hits]
    # Substring matches catch "loss" -> "train/box_loss", which difflib ranks low.
    for p in pool:
        if len(out) >= n:
            break
        if p not in out and (wanted.lower() in p.lower() or p.lower() in wanted.lower()):
            out.append(p)
    return out[:n]
